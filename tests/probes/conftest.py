"""Fixtures of the probe and worker registry tests: in-process workers with their own health
state, probe requests, and the worker tests' fixtures (definitions, subprocess workers)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connections

from runledger_django.worker.health import Health, HealthServer
from runledger_django.worker.registry import Handler, HandlerFunc, Registry
from runledger_django.worker.runtime import Worker, WorkerConfig, WorkerResult
from tests.worker.conftest import (
    app_definitions,
    definition,
    enqueue,
    register,
    spawn_worker,
    wait_until,
)

__all__ = ["app_definitions", "definition", "enqueue", "register", "spawn_worker"]


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """GET a probe; its status and JSON body (a 503 is an answer, not an error)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def body_once(
    ask: Callable[[], tuple[int, dict[str, Any]]], status: int, **wait: Any
) -> dict[str, Any]:
    """Probe until the answer has ``status``; return its body."""
    found: dict[str, Any] = wait_until(
        lambda: (lambda answer: answer[1] if answer[0] == status else None)(ask()), **wait
    )
    return found


@dataclass
class RunningWorker:
    worker: Worker
    health: Health
    server: HealthServer
    stop: threading.Event
    force: threading.Event
    thread: threading.Thread
    results: list[WorkerResult] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.server.address[1]

    def probe(self, path: str) -> tuple[int, dict[str, Any]]:
        return probe(self.port, path)

    def status(self, path: str) -> int:
        return self.probe(path)[0]

    def finish(self, *, timeout: float = 60) -> WorkerResult:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        return self.results[0]


StartWorker = Callable[..., RunningWorker]


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Events handlers wait on; all set at teardown so no handler thread is left blocked."""
    made: list[threading.Event] = []
    yield made
    for gate in made:
        gate.set()


@pytest.fixture
def start_worker(gates: list[threading.Event]) -> Iterator[StartWorker]:
    """Start a Worker in a thread, with a health state and a probe server on a free port.

    ``health`` keyword arguments go to Health (short windows for the tests), the others to
    WorkerConfig."""
    started: list[RunningWorker] = []

    def start(
        handlers: dict[str, HandlerFunc],
        *,
        health: dict[str, Any] | None = None,
        begin: bool = True,
        **overrides: Any,
    ) -> RunningWorker:
        registry = Registry()
        for job_type, func in handlers.items():
            registry.register(Handler(job_type=job_type, func=func))
        values: dict[str, Any] = {
            "job_types": list(handlers),
            "concurrency": 1,
            "grace_seconds": 5.0,
            "poll_interval": 0.05,
            "listen": False,
            "schedules": False,
            "worker_id": f"probe-{uuid.uuid4().hex[:8]}",
            "heartbeat_seconds": 0.2,
        }
        values.update(overrides)
        state = Health(**{"liveness_max_age": 30.0, "readiness_db_max_age": 30.0, **(health or {})})
        server = HealthServer(state, host="127.0.0.1", port=0).start()
        stop, force = threading.Event(), threading.Event()
        worker = Worker(WorkerConfig(**values), registry, stop=stop, force=force, health=state)
        holder: list[RunningWorker] = []

        def main() -> None:
            try:
                holder[0].results.append(worker.run())
            finally:
                connections.close_all()

        thread = threading.Thread(target=main, name="test-probe-worker", daemon=True)
        running = RunningWorker(worker, state, server, stop, force, thread)
        holder.append(running)
        started.append(running)
        if begin:
            thread.start()
        return running

    yield start
    for event in gates:
        event.set()
    for running in started:
        running.stop.set()
        running.force.set()
    for running in started:
        if running.thread.ident is not None:
            running.thread.join(60)
        for thread in running.worker.threads:
            thread.join(60)
        running.server.close()
