"""Concurrent completions, cancels and crashes against real sessions (reference 11).

transaction=True: every actor is its own session (a worker thread with its own Django
connection, or a raw psycopg session), and lock waits are observed in pg_stat_activity
instead of slept through.
"""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from django.db import connection, connections, transaction

from runledger_django import ReadScope, RunledgerError, Workflow, cancel_workflow, start_workflow
from runledger_django.models import Job, WorkflowStep
from runledger_django.services.lifecycle import complete_job_success
from runledger_django.services.reaper import reap_expired_leases
from runledger_django.services.workflows.release import run_lock_key
from tests.conftest import InThread, Observer, OpenSession, run_sql, wait_for_lock_wait
from tests.workflows.conftest import STEP_TYPE, claim_step, run_row, statuses, succeed

pytestmark = pytest.mark.django_db(transaction=True)

SHARED = 16


def two_roots() -> Workflow:
    flow = Workflow("two-roots")
    left = flow.step("left", STEP_TYPE)
    right = flow.step("right", STEP_TYPE)
    for index in range(SHARED):
        flow.step(f"shared{index:02}", STEP_TYPE, after=[left, right])
    return flow


def shared_jobs(run: uuid.UUID) -> list[tuple[Any, ...]]:
    return run_sql(
        "SELECT step.step_key, step.status, step.dependency_count_pending,"
        " (SELECT count(*) FROM runledger_job_queue job WHERE job.workflow_step_id = step.id)"
        " FROM runledger_workflow_steps step WHERE step.workflow_run_id = %s"
        " AND step.step_key LIKE 'shared%%' ORDER BY step.step_key",
        [run],
    )


def test_two_roots_completing_together__16_shared_dependents_released_once(
    step_types: None, in_thread: InThread, observer: Observer
) -> None:
    run = start_workflow(two_roots()).run_id
    left = claim_step(run, "left")
    right = claim_step(run, "right")
    holding = threading.Event()
    go = threading.Event()

    def complete_left_and_hold() -> None:
        with transaction.atomic():
            complete_job_success(left.lease)
            holding.set()
            assert go.wait(10)

    first = in_thread(complete_left_and_hold)
    assert holding.wait(10)
    second = in_thread(complete_job_success, right.lease)
    # The second completion waits on the shared dependents' rows the first one holds.
    wait_for_lock_wait(observer, "runledger:workflow_propagate")
    go.set()
    first.result(timeout=10)
    second.result(timeout=10)
    assert shared_jobs(run) == [(f"shared{i:02}", "ENQUEUED", 0, 1) for i in range(SHARED)]
    assert Job.objects.count() == 2 + SHARED


def test_two_roots_racing_without_a_hold__released_once_no_deadlock(
    step_types: None, in_thread: InThread
) -> None:
    for _ in range(3):
        run = start_workflow(two_roots()).run_id
        leases = [claim_step(run, "left").lease, claim_step(run, "right").lease]
        barrier = threading.Barrier(2)

        def complete(lease: Any, barrier: threading.Barrier = barrier) -> None:
            barrier.wait(5)
            complete_job_success(lease)

        futures = [in_thread(complete, lease) for lease in leases]
        for future in futures:
            future.result(timeout=10)
        assert shared_jobs(run) == [(f"shared{i:02}", "ENQUEUED", 0, 1) for i in range(SHARED)]


def test_completion_while_cancel_commits__nothing_released_run_stays_canceled(
    step_types: None, in_thread: InThread, observer: Observer
) -> None:
    flow = Workflow("race")
    first = flow.step("first", STEP_TYPE)
    flow.step("then", STEP_TYPE, after=[first], when="terminal")
    run = start_workflow(flow).run_id
    running = claim_step(run, "first")
    holding = threading.Event()
    go = threading.Event()

    def cancel_and_hold() -> None:
        with transaction.atomic():
            cancel_workflow(run, scope=ReadScope.ADMIN)
            holding.set()
            assert go.wait(10)

    canceling = in_thread(cancel_and_hold)
    assert holding.wait(10)
    completing = in_thread(complete_job_success, running.lease)
    wait_for_lock_wait(observer, "runledger:complete_job_success")
    go.set()
    canceling.result(timeout=10)
    with pytest.raises(RunledgerError) as caught:
        completing.result(timeout=10)
    assert caught.value.code == "job.lease_owner_mismatch"
    assert statuses(run) == {"first": "CANCELED", "then": "CANCELED"}
    assert run_row(run)["status"] == "CANCELED"
    assert Job.objects.count() == 1


def test_completion_while_cancel_rolls_back__dependents_released(
    step_types: None, in_thread: InThread, observer: Observer
) -> None:
    flow = Workflow("race")
    first = flow.step("first", STEP_TYPE)
    flow.step("then", STEP_TYPE, after=[first])
    run = start_workflow(flow).run_id
    running = claim_step(run, "first")
    holding = threading.Event()
    go = threading.Event()

    class RolledBackError(Exception):
        pass

    def cancel_then_roll_back() -> None:
        with transaction.atomic():
            cancel_workflow(run, scope=ReadScope.ADMIN)
            holding.set()
            assert go.wait(10)
            raise RolledBackError

    canceling = in_thread(cancel_then_roll_back)
    assert holding.wait(10)
    completing = in_thread(complete_job_success, running.lease)
    wait_for_lock_wait(observer, "runledger:complete_job_success")
    go.set()
    with pytest.raises(RolledBackError):
        canceling.result(timeout=10)
    completing.result(timeout=10)
    assert statuses(run) == {"first": "SUCCEEDED", "then": "ENQUEUED"}


def test_completion_waits_for_exclusive_run_lock__release_conflict_job_stays_leased(
    step_types: None, open_session: OpenSession
) -> None:
    """A cancel holding the run's exclusive lock: the completion gives up after its lock cap
    (here the caller's stricter 200 ms), rolls back whole and leaves lock_timeout as it was."""
    flow = Workflow("locked")
    first = flow.step("first", STEP_TYPE)
    flow.step("then", STEP_TYPE, after=[first])
    run = start_workflow(flow).run_id
    running = claim_step(run, "first")
    holder = open_session(autocommit=False)
    holder.execute("SELECT pg_advisory_xact_lock(%s)", [run_lock_key(run)])
    run_sql("SET lock_timeout = '200ms'")
    try:
        with pytest.raises(RunledgerError) as caught:
            complete_job_success(running.lease)
        assert caught.value.code == "workflow.release_conflict"
        assert caught.value.sqlstate == "55P03"
        assert run_sql("SHOW lock_timeout") == [("200ms",)]
    finally:
        run_sql("RESET lock_timeout")
    assert Job.objects.get(id=running.lease.job_id).status == "LEASED"
    assert statuses(run) == {"first": "ENQUEUED", "then": "BLOCKED"}
    holder.rollback()
    complete_job_success(running.lease)
    assert statuses(run) == {"first": "SUCCEEDED", "then": "ENQUEUED"}


def test_completion_inside_repeatable_read__isolation_code_job_stays_leased(
    step_types: None,
) -> None:
    flow = Workflow("rr")
    flow.step("only", STEP_TYPE)
    run = start_workflow(flow).run_id
    running = claim_step(run, "only")
    transaction.set_autocommit(False)
    try:
        run_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(RunledgerError) as caught:
            complete_job_success(running.lease)
        assert caught.value.code == "workflow.terminal_completion_unsupported_isolation"
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert Job.objects.get(id=running.lease.job_id).status == "LEASED"
    assert statuses(run) == {"only": "ENQUEUED"}


def test_crash_before_completion_commit__nothing_released_reaper_retry_releases_once(
    step_types: None, make_definition: Any, in_thread: InThread
) -> None:
    """The worker's session dies after the completion statement ran but before its commit
    (a SIGKILL between handler and commit): nothing is released; the reaper's retry and the
    next success release the dependents exactly once."""
    from runledger_django.models import JobDefinition

    JobDefinition.objects.filter(job_type=STEP_TYPE).update(max_attempts=3)
    flow = Workflow("crash")
    first = flow.step("first", STEP_TYPE)
    flow.step("then", STEP_TYPE, after=[first])
    run = start_workflow(flow).run_id
    running = claim_step(run, "first")
    written = threading.Event()
    pid: list[int] = []

    def complete_then_die() -> None:
        with transaction.atomic():
            complete_job_success(running.lease)
            pid.append(run_sql("SELECT pg_backend_pid()")[0][0])
            written.set()
            threading.Event().wait(2)  # the kill lands here, long before this ends

    crashed = in_thread(complete_then_die)
    assert written.wait(10)
    run_sql("SELECT pg_terminate_backend(%s)", [pid[0]])
    with pytest.raises(Exception):  # noqa: B017  (the dead session's commit fails)
        crashed.result(timeout=10)
    assert statuses(run) == {"first": "ENQUEUED", "then": "BLOCKED"}
    Job.objects.filter(id=running.lease.job_id).update(
        lease_expires_at=run_sql("SELECT now() - interval '1 second'")[0][0]
    )
    assert reap_expired_leases([STEP_TYPE], retry_delay_ms=1).retried == 1
    Job.objects.filter(id=running.lease.job_id).update(next_run_at=run_sql("SELECT now()")[0][0])
    succeed(run, "first")
    assert statuses(run) == {"first": "SUCCEEDED", "then": "ENQUEUED"}
    then = WorkflowStep.objects.get(workflow_run_id=run, step_key="then")
    assert Job.objects.filter(workflow_step_id=then.id).count() == 1


def test_terminal_transition__one_notification_none_on_rollback(
    step_types: None, open_session: OpenSession
) -> None:
    listener = open_session()
    listener.execute("LISTEN runledger_workflow_run_terminal")
    flow = Workflow("notified")
    flow.step("only", STEP_TYPE)
    rolled_back = start_workflow(flow).run_id
    job = claim_step(rolled_back, "only")

    class RollbackError(Exception):
        pass

    with pytest.raises(RollbackError), transaction.atomic():
        complete_job_success(job.lease)
        raise RollbackError
    run = start_workflow(flow).run_id
    succeed(run, "only")
    connection.close()
    notes = _drain(listener)
    assert notes == [{"workflow_run_id": str(run), "status": "SUCCEEDED"}]


def _drain(listener: psycopg.Connection[Any]) -> list[Any]:
    listener.execute("SELECT 1")  # delivers what arrived before this round trip
    return [json.loads(note.payload) for note in listener.notifies(timeout=0.2)]


def test_active_key__concurrent_starts__one_run_the_rest_active(
    step_types: None, in_thread: InThread
) -> None:
    flow = Workflow("keyed")
    flow.step("only", STEP_TYPE)
    starters = 24
    barrier = threading.Barrier(starters)

    def start() -> Any:
        barrier.wait(10)
        return start_workflow(flow, active_key="customer:1")

    pool = ThreadPoolExecutor(max_workers=starters)
    try:
        futures = [pool.submit(_closing(start)) for _ in range(starters)]
        outcomes = [future.result(timeout=30) for future in futures]
    finally:
        pool.shutdown(wait=True)
    inserted = [outcome for outcome in outcomes if outcome.disposition == "inserted"]
    assert len(inserted) == 1
    assert {outcome.run_id for outcome in outcomes} == {inserted[0].run_id}
    assert Job.objects.count() == 1
    # Scopes are independent; the key spans workflow types.
    tenant = start_workflow(flow, active_key="customer:1", organization_id=uuid.uuid4())
    assert tenant.disposition == "inserted"
    other_type = Workflow("other-type")
    other_type.step("only", STEP_TYPE)
    assert start_workflow(other_type, active_key="customer:1").run_id == inserted[0].run_id


def _closing(fn: Any) -> Any:
    def run() -> Any:
        try:
            return fn()
        finally:
            connections.close_all()

    return run
