"""Exactly-once completion in one process: ``atomic=True`` and ``complete_atomically``.

Checklist items 60-69 of reference/workflows.md section 12. Every test is ``transaction=True``:
an atomic completion owns its transaction and refuses to run inside the test's. A handler
that must be caught in the middle runs on a thread of its own (``start``) and waits on an
event the test sets; the test observes its open transaction in pg_stat_activity and acts on
the job from other connections (cancel, reaper, heartbeats), as other processes would.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from runledger_django import (
    JobContext,
    ReadScope,
    RunledgerError,
    cancel_job,
    enqueue_job,
    record_intent,
)
from runledger_django.domain import JobLease
from runledger_django.models import Job, JobEnqueueIntent
from runledger_django.services.atomic import settle_commit
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_success, heartbeat_leases
from runledger_django.services.reaper import reap_expired_leases
from runledger_django.worker.completer import Completer
from runledger_django.worker.execution import Execution, JobRun, execute
from runledger_django.worker.heartbeat import Heartbeater
from runledger_django.worker.registry import Handler, HandlerFunc, Registry
from tests.conftest import InThread, MakeDefinition, run_sql, wait_for_lock_wait
from tests.exactly_app.models import Effect
from tests.worker.conftest import (
    TYPE,
    attempt_rows,
    event_types,
    expire_lease,
    job_row,
    resource_claims,
)

pytestmark = pytest.mark.django_db(transaction=True)

WORKER = "worker-atomic"
GATE = 424242


def effect_of(job: JobContext, gate: int | None = None) -> Effect:
    return Effect.objects.create(
        job_id=job.job_id,
        run_number=job.run_number,
        attempt=job.attempt,
        worker_id=job.worker_id,
        gate=gate,
    )


def write(job: JobContext) -> None:
    effect_of(job)


def effects(job_id: uuid.UUID) -> int:
    return Effect.objects.filter(job_id=job_id).count()


@dataclass
class Held:
    """A handler in flight on its own thread, stopped where it waits for ``go``."""

    execution: Execution
    future: Future[JobRun]
    inside: threading.Event
    go: threading.Event
    pid: list[int] = field(default_factory=list)

    def finish(self) -> JobRun:
        self.go.set()
        return self.future.result(timeout=30)


@pytest.fixture
def setup(make_definition: MakeDefinition) -> None:
    make_definition()


def claim(lease_seconds: int = 60, worker_id: str = WORKER) -> Execution:
    claimed = claim_jobs([TYPE], worker_id=worker_id, limit=1, lease_seconds=lease_seconds)
    assert len(claimed) == 1
    return Execution(claimed[0], lease_seconds=lease_seconds)


def run_now(handler: HandlerFunc, *, atomic: bool = True, **kwargs: Any) -> JobRun:
    registry = Registry()
    registry.register(Handler(job_type=TYPE, func=handler, atomic=atomic))
    return execute(claim(), registry, using="default", **kwargs)


Start = Callable[..., Held]


@pytest.fixture
def start(in_thread: InThread) -> Iterator[Start]:
    """Run ``body(job)`` as an atomic handler on a thread; it stops (inside its transaction,
    after ``body``) until the test calls ``finish``."""
    helds: list[Held] = []

    def start_(
        body: Callable[[JobContext], Any], *, atomic: bool = True, lease_seconds: int = 60
    ) -> Held:
        execution = claim(lease_seconds)
        inside, go = threading.Event(), threading.Event()
        pid: list[int] = []

        def handler(job: JobContext) -> Any:
            result = body(job)
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            inside.set()
            assert go.wait(30)
            return result

        registry = Registry()
        registry.register(Handler(job_type=TYPE, func=handler, atomic=atomic))
        future = in_thread(execute, execution, registry, using="default")
        held = Held(execution, future, inside, go, pid)
        helds.append(held)
        assert inside.wait(30), future.exception(timeout=0) if future.done() else "not started"
        return held

    yield start_
    for held in helds:
        held.go.set()


def in_transaction(observer: psycopg.Connection[Any], pid: int) -> bool:
    row = observer.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return row is not None and row[0] == "idle in transaction"


# --- item 60, 66: the writes and the success commit together -----------------------------------


def test_execute__atomic_handler__effect_and_success_commit_together(setup: None) -> None:
    job_id = enqueue_job(TYPE, {"n": 1}, execution_resource_key="invoice:7").job_id
    run = run_now(lambda job: {"effect": effect_of(job).pk})

    row = job_row(job_id)
    assert (run.outcome, row["status"], row["stage"]) == ("succeeded", "SUCCEEDED", "completed")
    assert row["output"] == {"effect": Effect.objects.get(job_id=job_id).pk}
    assert effects(job_id) == 1
    assert [a["outcome"] for a in attempt_rows(job_id)] == ["SUCCEEDED"]
    assert event_types(job_id) == ["ENQUEUED", "LEASED", "SUCCEEDED"]
    assert resource_claims() == []  # the execution resource was released in the same commit


def test_execute__atomic_handler_sends_nothing__completion_is_one_statement_of_its_own(
    setup: None,
) -> None:
    """A handler that wrote nothing never began a transaction: its completion goes alone, one
    statement outside any transaction (no BEGIN before it, no COMMIT after it), with the same
    fenced success. (The session's first atomic job reads its isolation level, which begins
    the transaction: the job measured is the second.)"""
    registry = Registry()
    registry.register(Handler(job_type=TYPE, func=lambda job: {"done": True}, atomic=True))
    enqueue_job(TYPE, {})
    assert execute(claim(), registry, using="default").outcome == "succeeded"
    job_id = enqueue_job(TYPE, {}, execution_resource_key="invoice:8").job_id
    execution = claim()
    sent: list[tuple[str, psycopg.pq.TransactionStatus]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        session = connection.connection
        assert session is not None
        sent.append((sql, session.info.transaction_status))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run = execute(execution, registry, using="default")

    assert run.outcome == "succeeded"
    [(_, status)] = [item for item in sent if "runledger:complete_job_success" in item[0]]
    assert status == psycopg.pq.TransactionStatus.IDLE, sent
    assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    row = job_row(job_id)
    assert (row["status"], row["output"]) == ("SUCCEEDED", {"done": True})
    assert [a["outcome"] for a in attempt_rows(job_id)] == ["SUCCEEDED"]
    assert event_types(job_id) == ["ENQUEUED", "LEASED", "SUCCEEDED"]
    assert resource_claims() == []


def test_execute__atomic_handler_writes__completion_inside_its_transaction(setup: None) -> None:
    """A handler that wrote keeps the completion in its transaction (sent while it is open)."""
    job_id = enqueue_job(TYPE, {}).job_id
    execution = claim()
    registry = Registry()
    registry.register(Handler(job_type=TYPE, func=write, atomic=True))
    sent: list[tuple[str, psycopg.pq.TransactionStatus]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        session = connection.connection
        assert session is not None
        sent.append((sql, session.info.transaction_status))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        run = execute(execution, registry, using="default")

    assert (run.outcome, effects(job_id)) == ("succeeded", 1)
    [(_, status)] = [item for item in sent if "runledger:complete_job_success" in item[0]]
    assert status == psycopg.pq.TransactionStatus.INTRANS, sent


def test_execute__atomic_handler_never_uses_the_completer(setup: None) -> None:
    """Atomic successes are written in the handler's transaction, so no group commit (and no
    claim fused with it) ever runs inside a handler's transaction."""

    class Refusing(Completer):
        def succeed(self, lease: JobLease, output_text: str | None) -> bool:
            raise AssertionError("an atomic success went through the completer")

    job_id = enqueue_job(TYPE, {}).job_id
    run = run_now(write, completer=Refusing(using="default"))
    assert (run.outcome, effects(job_id)) == ("succeeded", 1)


# --- item 61: a failure rolls back the writes with the completion ------------------------------


def test_execute__atomic_handler_raises__writes_roll_back_and_job_retries(setup: None) -> None:
    job_id = enqueue_job(TYPE, {}).job_id

    def handler(job: JobContext) -> None:
        effect_of(job)
        raise ValueError("after the write")

    run = run_now(handler)
    assert (run.outcome, run.error_code) == ("retried", "job.handler_failed")
    assert effects(job_id) == 0
    assert [a["outcome"] for a in attempt_rows(job_id)] == ["RETRY_SCHEDULED"]


def test_execute__atomic_output_not_json__writes_roll_back_and_dead_letter(setup: None) -> None:
    job_id = enqueue_job(TYPE, {}).job_id
    run = run_now(lambda job: {"effect": effect_of(job), "when": object()})
    assert (run.outcome, run.error_code) == ("dead_lettered", "job.invalid_output")
    assert effects(job_id) == 0


# --- items 62-64: a lost lease matches nothing ------------------------------------------------


def test_execute__cancel_during_atomic_run__lease_lost_and_nothing_written(
    setup: None, start: Start, observer: psycopg.Connection[Any]
) -> None:
    job_id = enqueue_job(TYPE, {}).job_id
    held = start(write)
    assert in_transaction(observer, held.pid[0])
    # The handler's transaction does not hold the job's row: cancel goes through at once.
    assert cancel_job(job_id, scope=ReadScope.ADMIN) == "CANCELED"

    run = held.finish()
    assert (run.outcome, run.error_code) == ("lease_lost", "job.lease_owner_mismatch")
    assert effects(job_id) == 0
    assert job_row(job_id)["status"] == "CANCELED"


def test_execute__lease_reaped_while_transaction_open__rerun_applies_once(
    setup: None, start: Start, observer: psycopg.Connection[Any]
) -> None:
    job_id = enqueue_job(TYPE, {}).job_id
    held = start(write)
    expire_lease(job_id)
    assert reap_expired_leases([TYPE]).retried == 1
    run_sql("UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id])

    run = held.finish()
    assert run.outcome == "lease_lost"
    assert effects(job_id) == 0
    rerun = run_now(write)  # the next attempt does the work, once
    assert (rerun.outcome, rerun.attempt, effects(job_id)) == ("succeeded", 2, 1)


def test_execute__another_workers_attempt__completion_matches_nothing(
    setup: None, start: Start
) -> None:
    """The fence is the exact lease, not the status: the job is LEASED again, by another
    worker's attempt, and the first handler's completion still matches nothing."""
    job_id = enqueue_job(TYPE, {}).job_id
    held = start(write)
    expire_lease(job_id)
    reap_expired_leases([TYPE])
    run_sql("UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id])
    other = claim(worker_id="worker-other")
    assert job_row(job_id)["status"] == "LEASED"

    run = held.finish()
    assert run.outcome == "lease_lost"
    assert (effects(job_id), job_row(job_id)["worker_id"]) == (0, "worker-other")
    assert other.lease.attempt == 2


def test_execute__lease_expired_unreaped__completion_refused(setup: None, start: Start) -> None:
    job_id = enqueue_job(TYPE, {}).job_id
    held = start(write)
    expire_lease(job_id)
    run = held.finish()
    assert run.outcome == "lease_lost"
    assert (effects(job_id), job_row(job_id)["status"]) == (0, "LEASED")


def test_heartbeat__atomic_transaction_open__lease_renewed_row_not_locked(
    setup: None, start: Start
) -> None:
    """Item 64: heartbeats renew the lease while the handler's transaction is open (they
    run on another connection and the transaction holds no lock on the job's row)."""
    job_id = enqueue_job(TYPE, {}).job_id
    held = start(write)
    before = job_row(job_id)["lease_expires_at"]
    result = heartbeat_leases([held.execution.lease], lease_seconds=120)
    assert result.renewed == {job_id}
    assert job_row(job_id)["lease_expires_at"] > before
    assert held.finish().outcome == "succeeded"


def test_heartbeat__during_atomic_commit__row_busy_then_finished_not_lost(
    setup: None, start: Start, observer: psycopg.Connection[Any], in_thread: InThread
) -> None:
    """Item 64: from the completion statement to the commit the row is locked (a heartbeat
    sees it busy); after the commit the job is finished, and the heartbeat thread does not
    call that a lost lease."""
    job_id = enqueue_job(TYPE, {}).job_id
    observer.execute("SELECT pg_advisory_lock(%s)", [GATE])
    held = start(lambda job: effect_of(job, gate=GATE) and None)
    held.go.set()
    wait_for_lock_wait(observer, "COMMIT")  # completion written; the commit waits at the gate
    assert held.execution.completing
    result = heartbeat_leases([held.execution.lease], lease_seconds=60)
    assert result.busy == {job_id}
    assert held.execution.active is False  # the heartbeat thread leaves it alone
    observer.execute("SELECT pg_advisory_unlock(%s)", [GATE])
    run = held.future.result(timeout=30)
    beater = Heartbeater(lambda: [], lease_seconds=60, using="default", stop=threading.Event())
    in_thread(beater.beat, [held.execution], budget_end=0.0).result(timeout=30)
    assert run.outcome == "succeeded"
    assert not held.execution.lost.is_set()
    assert effects(job_id) == 1


# --- item 65: refused before any write --------------------------------------------------------


def test_execute__atomic_under_serializable_session__refused_before_the_handler(
    setup: None,
) -> None:
    job_id = enqueue_job(TYPE, {}).job_id
    ran: list[int] = []
    connection.close()  # a fresh session, as a project's configured default would give
    run_sql("SET default_transaction_isolation = 'serializable'")
    try:
        run = run_now(lambda job: ran.append(1))
    finally:
        run_sql("RESET default_transaction_isolation")
    assert (run.outcome, run.error_code) == (
        "dead_lettered",
        "job.atomic_completion_unsupported_isolation",
    )
    assert ran == []
    assert effects(job_id) == 0


def test_complete_atomically__other_database_alias__refused(setup: None) -> None:
    job_id = enqueue_job(TYPE, {}).job_id
    seen: list[str] = []

    def handler(job: JobContext) -> None:
        try:
            with job.complete_atomically(using="reports"):
                effect_of(job)
        except RunledgerError as error:
            seen.append(error.code)
            raise

    run = run_now(handler, atomic=False)
    assert seen == ["job.atomic_completion_wrong_database"]
    assert (run.outcome, run.error_code) == (
        "dead_lettered",
        "job.atomic_completion_wrong_database",
    )
    assert effects(job_id) == 0


def test_complete_atomically__inside_an_atomic_block__refused(setup: None) -> None:
    job_id = enqueue_job(TYPE, {}).job_id

    def handler(job: JobContext) -> None:
        with transaction.atomic(), job.complete_atomically():
            effect_of(job)

    run = run_now(handler, atomic=False)
    assert run.error_code == "job.atomic_completion_requires_own_transaction"
    assert effects(job_id) == 0


def test_complete_atomically__twice__second_refused_job_completed_once(setup: None) -> None:
    job_id = enqueue_job(TYPE, {}).job_id
    seen: list[str] = []

    def handler(job: JobContext) -> None:
        with job.complete_atomically({"first": True}):
            effect_of(job)
        try:
            with job.complete_atomically({"second": True}):
                effect_of(job)
        except RunledgerError as error:
            seen.append(error.code)

    run = run_now(handler, atomic=False)
    assert (run.outcome, seen) == ("succeeded", ["job.already_completed"])
    assert job_row(job_id)["output"] == {"first": True}
    assert effects(job_id) == 1


# --- complete_atomically at the end of a handler -------------------------------------------------


def test_complete_atomically__block_at_the_end__commits_with_success(setup: None) -> None:
    job_id = enqueue_job(TYPE, {}).job_id

    def handler(job: JobContext) -> str:
        job.set_progress(1, 2)  # before the block: its own short transaction, as always
        with job.complete_atomically({"closed": 1}) as completion:
            effect_of(job)
            job.set_stage("closing")  # inside: on a connection of its own, row not held
            completion.output = {"closed": 2}
        return "ignored: the job is already done"

    run = run_now(handler, atomic=False)
    row = job_row(job_id)
    assert (run.outcome, row["output"], row["progress_done"]) == ("succeeded", {"closed": 2}, 1)
    assert effects(job_id) == 1
    assert "STAGE_CHANGED" in event_types(job_id)


def test_complete_atomically__block_raises__nothing_written_job_retries(setup: None) -> None:
    job_id = enqueue_job(TYPE, {}).job_id

    def handler(job: JobContext) -> None:
        with job.complete_atomically():
            effect_of(job)
            raise ValueError("inside the block")

    run = run_now(handler, atomic=False)
    assert run.outcome == "retried"
    assert effects(job_id) == 0
    assert job_row(job_id)["status"] == "PENDING"


def test_complete_atomically__lease_lost__block_raises_mismatch(
    setup: None, in_thread: InThread
) -> None:
    job_id = enqueue_job(TYPE, {}).job_id
    seen: list[str] = []

    def handler(job: JobContext) -> None:
        try:
            with job.complete_atomically():
                effect_of(job)
                in_thread(cancel_job, job.job_id, scope=ReadScope.ADMIN).result(timeout=30)
        except RunledgerError as error:
            seen.append(error.code)

    run = run_now(handler, atomic=False)
    assert seen == ["job.lease_owner_mismatch"]
    assert run.outcome == "lease_lost"
    assert effects(job_id) == 0


# --- item 67: a commit whose outcome is unknown ----------------------------------------------


def test_settle_commit__committed_and_not__read_from_the_attempt(setup: None) -> None:
    enqueue_job(TYPE, {})
    enqueue_job(TYPE, {})
    done, pending = claim(), claim()
    complete_job_success(done.lease)
    assert settle_commit(done.lease, using="default", within_seconds=5) is True
    assert settle_commit(pending.lease, using="default", within_seconds=5) is False


def test_execute__backend_terminated_during_commit__settled_not_committed(
    setup: None, start: Start, observer: psycopg.Connection[Any]
) -> None:
    """The connection dies while COMMIT waits (at the gate): the worker cannot know from the
    client side; reading the attempt row says the commit did not happen, so the attempt
    fails as any other would, and the next one applies the effect once."""
    job_id = enqueue_job(TYPE, {}).job_id
    observer.execute("SELECT pg_advisory_lock(%s)", [GATE])
    held = start(lambda job: effect_of(job, gate=GATE if job.attempt == 1 else None) and None)
    held.go.set()
    waiting = wait_for_lock_wait(observer, "COMMIT")
    observer.execute("SELECT pg_terminate_backend(%s)", [waiting["pid"]])
    run = held.future.result(timeout=60)
    observer.execute("SELECT pg_advisory_unlock(%s)", [GATE])

    assert run.outcome in ("retried", "persist_failed"), run
    assert effects(job_id) == 0
    if run.outcome == "persist_failed":  # the failure could not be written: the reaper's turn
        expire_lease(job_id)
        reap_expired_leases([TYPE])
    run_sql("UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id])
    assert run_now(write).outcome == "succeeded"
    assert effects(job_id) == 1


# --- item 69: intents and jobs made inside exist iff it committed ---------------------------


@pytest.mark.parametrize("fails", [False, True])
def test_execute__atomic_handler_records_intent_and_enqueues__exist_iff_committed(
    setup: None, make_definition: MakeDefinition, fails: bool
) -> None:
    make_definition("exact.child")
    job_id = enqueue_job(TYPE, {}).job_id

    def handler(job: JobContext) -> None:
        record_intent("exact.child", {"from": str(job.job_id)}, idempotency_key=f"i:{job.job_id}")
        enqueue_job("exact.child", {"from": str(job.job_id)}, idempotency_key=f"j:{job.job_id}")
        if fails:
            raise ValueError("roll it all back")

    run = run_now(handler)
    assert run.outcome == ("retried" if fails else "succeeded")
    made = (
        JobEnqueueIntent.objects.filter(idempotency_key=f"i:{job_id}").count(),
        Job.objects.filter(idempotency_key=f"j:{job_id}").count(),
    )
    assert made == ((0, 0) if fails else (1, 1))
