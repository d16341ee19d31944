"""Scraping helpers and an in-process worker with a metrics port, for the metrics tests.

A scrape is parsed with ``prometheus_client``'s own text parser into ``{(name, labels):
value}``, so a test compares whole series, and a label scan sees every sample.
"""

from __future__ import annotations

import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connections
from django.test import RequestFactory
from prometheus_client.parser import text_string_to_metric_families

from runledger_django.prometheus import metrics_view
from runledger_django.worker.execution import JobRun
from runledger_django.worker.metrics import MetricsServer, start_metrics_server
from runledger_django.worker.registry import Handler, HandlerFunc, Registry
from runledger_django.worker.runtime import Worker, WorkerConfig, WorkerResult
from tests.worker.conftest import spawn_worker  # noqa: F401  (the worker tests' fixture)

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


@dataclass(frozen=True)
class Scrape:
    text: str
    status: int = 200

    @property
    def samples(self) -> Samples:
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(self.text)
            for sample in family.samples
        }

    @property
    def types(self) -> dict[str, str]:
        return {family.name: family.type for family in text_string_to_metric_families(self.text)}

    @property
    def names(self) -> set[str]:
        """Every metric name the scrape defines: families (counters with ``_total``) and the
        names of their samples, so a family with no sample yet still counts."""
        names: set[str] = set()
        for family in text_string_to_metric_families(self.text):
            names.add(f"{family.name}_total" if family.type == "counter" else family.name)
            names |= {sample.name for sample in family.samples}
        return names

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, frozenset(labels.items()))]

    def get(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def series(self, name: str) -> dict[Labels, float]:
        return {labels: value for (n, labels), value in self.samples.items() if n == name}


def scrape_view() -> Scrape:
    """The Django view, called as a request would call it."""
    response = metrics_view(RequestFactory().get("/metrics/"))
    return Scrape(response.content.decode(), response.status_code)


def scrape_port(port: int) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        return Scrape(response.read().decode(), response.status)


@pytest.fixture(autouse=True)
def _fresh_reads(settings: Any) -> None:
    """Every scrape reads the database (no collector cache between a test's steps)."""
    settings.RUNLEDGER = {**getattr(settings, "RUNLEDGER", {}), "METRICS_CACHE_SECONDS": 0}


@dataclass
class MeteredWorker:
    worker: Worker
    server: MetricsServer
    stop: threading.Event
    thread: threading.Thread
    runs: list[JobRun] = field(default_factory=list)
    results: list[WorkerResult] = field(default_factory=list)

    def scrape(self) -> Scrape:
        return scrape_port(self.server.port)

    def finish(self, timeout: float = 60) -> WorkerResult:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        return self.results[0]


StartMeteredWorker = Callable[..., MeteredWorker]


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Events handlers wait on; all set at teardown so no handler thread is left blocked."""
    made: list[threading.Event] = []
    yield made
    for gate in made:
        gate.set()


@pytest.fixture
def start_metered_worker(gates: list[threading.Event]) -> Iterator[StartMeteredWorker]:
    """Start a real ``Worker`` in a thread with its metrics served on an ephemeral port."""
    started: list[MeteredWorker] = []

    def start(
        handlers: dict[str, HandlerFunc], *, queue_gauges: bool = False, **overrides: Any
    ) -> MeteredWorker:
        registry = Registry()
        for job_type, func in handlers.items():
            registry.register(Handler(job_type=job_type, func=func))
        values: dict[str, Any] = {
            "job_types": list(handlers),
            "concurrency": 1,
            "lease_seconds": 60,
            "grace_seconds": 5.0,
            "poll_interval": 0.05,
            "listen": False,
            "schedules": False,
            "worker_id": f"metrics-{uuid.uuid4().hex[:8]}",
        }
        values.update(overrides)
        server = start_metrics_server(0, addr="127.0.0.1", queue_gauges=queue_gauges)
        stop = threading.Event()
        holder: dict[str, MeteredWorker] = {}
        worker = Worker(
            WorkerConfig(**values),
            registry,
            stop=stop,
            on_run=lambda run: holder["running"].runs.append(run),
            metrics=server.metrics,
        )

        def main() -> None:
            try:
                holder["running"].results.append(worker.run())
            finally:
                connections.close_all()

        thread = threading.Thread(target=main, name="test-metered-worker", daemon=True)
        running = MeteredWorker(worker=worker, server=server, stop=stop, thread=thread)
        holder["running"] = running
        started.append(running)
        thread.start()
        return running

    yield start
    for event in gates:
        event.set()
    for running in started:
        running.stop.set()
        running.worker.force.set()
    for running in started:
        running.thread.join(60)
        for thread in running.worker.threads:
            thread.join(60)
        running.server.close()
