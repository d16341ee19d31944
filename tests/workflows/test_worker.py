"""Workflows run by real workers: JobContext's workflow fields, outputs passed downstream,
atomic handlers, and a threaded worker draining a fan-out/fan-in with group commits.

transaction=True: workers own their transactions (they refuse to run inside one).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from django.db import connection, connections

from runledger_django import (
    JobContext,
    TerminalJobError,
    Workflow,
    enqueue_job,
    run_jobs,
    start_workflow,
)
from runledger_django.models import Job, JobAttempt
from runledger_django.worker.registry import Handler, Registry
from runledger_django.worker.runtime import Worker, WorkerConfig
from tests.conftest import MakeDefinition
from tests.worker.conftest import Register, wait_until
from tests.workflows.conftest import run_row, statuses

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = "wf.worker"


def test_run_jobs__handlers_see_upstream_run_and_key(register: Register) -> None:
    seen: dict[str, Any] = {}
    order: list[str] = []

    def handler(job: JobContext) -> Any:
        key = job.step_key
        assert key is not None
        order.append(key)
        seen[key] = (job.workflow_run_id, job.upstream)
        return {"from": key, "n": len(order)}

    register(TYPE, handler)
    run_jobs([TYPE])  # creates the definition
    flow = Workflow("upstream", result_step="ship")
    charge = flow.step("charge", TYPE)
    reserve = flow.step("reserve", TYPE)
    ship = flow.step("ship", TYPE, after=[charge, reserve])
    flow.step("notify", TYPE, after=[ship], when="terminal")
    run = start_workflow(flow).run_id
    report = run_jobs([TYPE])
    assert report.succeeded == 4
    assert order.index("ship") > max(order.index("charge"), order.index("reserve"))
    assert order[-1] == "notify"
    assert seen["charge"] == (run, {})
    run_id, upstream = seen["ship"]
    assert run_id == run
    assert set(upstream) == {"charge", "reserve"}
    assert upstream["charge"]["from"] == "charge"
    assert seen["notify"][1] == {"ship": {"from": "ship", "n": 3}}
    assert run_row(run)["status"] == "SUCCEEDED"
    assert run_row(run)["result"] == {"from": "ship", "n": 3}


def test_run_jobs__plain_job_context__no_workflow(register: Register) -> None:
    seen: list[Any] = []

    def handler(job: JobContext) -> None:
        seen.append((job.workflow_run_id, job.step_key, job.upstream, job.workflow_step_id))

    register(TYPE, handler)
    run_jobs([TYPE])
    enqueue_job(TYPE, {})
    run_jobs([TYPE])
    assert seen == [(None, None, {}, None)]


def test_run_jobs__atomic_step__its_writes_and_release_commit_together(
    register: Register,
) -> None:
    def atomic_step(job: JobContext) -> dict[str, int]:
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE IF NOT EXISTS wf_effects (step text)")
            cursor.execute("INSERT INTO wf_effects VALUES (%s)", [job.step_key])
        return {"wrote": 1}

    register(TYPE, atomic_step, atomic=True)
    run_jobs([TYPE])
    flow = Workflow("atomic")
    first = flow.step("first", TYPE)
    flow.step("second", TYPE, after=[first])
    run = start_workflow(flow).run_id
    try:
        assert run_jobs([TYPE]).succeeded == 2
        with connection.cursor() as cursor:
            cursor.execute("SELECT step FROM wf_effects ORDER BY step")
            assert cursor.fetchall() == [("first",), ("second",)]
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS wf_effects")
    assert statuses(run) == {"first": "SUCCEEDED", "second": "SUCCEEDED"}


def test_run_jobs__failing_step__terminal_dependent_still_runs(register: Register) -> None:
    def handler(job: JobContext) -> None:
        if job.step_key == "charge":
            raise TerminalJobError("declined")

    register(TYPE, handler)
    run_jobs([TYPE])
    flow = Workflow("declined")
    charge = flow.step("charge", TYPE)
    ship = flow.step("ship", TYPE, after=[charge])
    flow.step("notify", TYPE, after=[ship], when="terminal")
    run = start_workflow(flow).run_id
    run_jobs([TYPE])
    assert statuses(run) == {"charge": "FAILED", "ship": "CANCELED", "notify": "SUCCEEDED"}
    assert run_row(run)["status"] == "COMPLETED_WITH_ERRORS"


def test_threaded_worker__fan_out_fan_in__each_step_once_after_its_prerequisites(
    make_definition: MakeDefinition,
) -> None:
    started: dict[str, int] = {}
    finished: dict[str, int] = {}
    clock = [0]
    lock = threading.Lock()

    def handler(job: JobContext) -> str:
        key = job.step_key
        assert key is not None
        with lock:
            clock[0] += 1
            started[key] = clock[0]
        with lock:
            clock[0] += 1
            finished[key] = clock[0]
        return key

    make_definition(TYPE)
    flow = Workflow("fan")
    root = flow.step("root", TYPE)
    children = [flow.step(f"child{i:02}", TYPE, after=[root]) for i in range(50)]
    flow.step("fan_in", TYPE, after=children)
    run = start_workflow(flow).run_id

    registry = Registry()
    registry.register(Handler(job_type=TYPE, func=handler))
    stop, force = threading.Event(), threading.Event()
    worker = Worker(
        WorkerConfig(
            job_types=[TYPE],
            concurrency=8,
            lease_seconds=60,
            grace_seconds=5.0,
            poll_interval=0.05,
            listen=False,
            schedules=False,
            worker_id=f"wf-{uuid.uuid4().hex[:8]}",
        ),
        registry,
        stop=stop,
        force=force,
    )

    def main() -> None:
        try:
            worker.run()
        finally:
            connections.close_all()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        wait_until(lambda: run_row(run)["status"] == "SUCCEEDED", what="the run", timeout=60)
    finally:
        stop.set()
        force.set()
        thread.join(30)
        for helper in worker.threads:  # their connections close as they exit
            helper.join(30)
    assert len(started) == 52
    assert all(started[f"child{i:02}"] > finished["root"] for i in range(50))
    assert started["fan_in"] > max(finished[f"child{i:02}"] for i in range(50))
    assert Job.objects.count() == 52
    assert JobAttempt.objects.filter(outcome="SUCCEEDED").count() == 52
