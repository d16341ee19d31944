"""The lease fence, heartbeats, progress validation and the lifecycle timeout caps.

Upstream: lease_fencing.rs, heartbeat_progress.rs, progress_validation.rs,
queue_lease_validation.rs (heartbeat), queue_lifecycle_timeouts.rs. Every worker-side write
matches the exact lease (id, run number, attempt, worker id, LEASED, not expired) after it holds
the row lock, or writes nothing and raises ``job.lease_owner_mismatch``.

Tests that need a second session holding a row lock, a lease that expires on the real clock,
or the library's own autocommit transaction are ``transaction=True``; they observe lock waits
in pg_stat_activity instead of sleeping.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from pytest_django import DjangoAssertNumQueries

from runledger_django import RunledgerError
from runledger_django.domain import FailureKind, HeartbeatResult, JobFailure, JobLease
from runledger_django.services import _lease
from runledger_django.services.lifecycle import (
    complete_job_failure,
    complete_job_success,
    heartbeat_leases,
    update_job_progress,
)
from runledger_django.services.reaper import reap_expired_leases
from runledger_django.worker.context import JobContext
from runledger_django.worker.execution import Execution, execute
from runledger_django.worker.heartbeat import Heartbeater
from runledger_django.worker.registry import Handler, Registry
from tests.conftest import InThread, OpenSession, run_sql, wait_for_lock_wait
from tests.worker.conftest import (
    OTHER_WORKER,
    TYPE,
    Enqueue,
    attempt_rows,
    claim_one,
    event_rows,
    event_types,
    expire_lease,
    job_row,
    other_lease,
    wait_until,
)

pytestmark = pytest.mark.django_db

RETRYABLE = JobFailure(
    kind=FailureKind.RETRYABLE, code="job.handler_failed", message="m", policy_retry_delay_ms=1000
)


def lock_job_row(session: psycopg.Connection[Any], job_id: uuid.UUID) -> None:
    """Hold the job's row lock in an open transaction of ``session`` (a second writer)."""
    session.execute("SELECT 1 FROM runledger_job_queue WHERE id = %s FOR UPDATE", [job_id])


def expire_while_locked(holder: psycopg.Connection[Any], job_id: uuid.UUID) -> None:
    """The lease runs out while ``holder`` keeps the row locked (as if its transaction had
    lasted past the expiry), then the lock goes away."""
    holder.execute(
        "UPDATE runledger_job_queue SET lease_expires_at = clock_timestamp() - interval '1 ms' "
        "WHERE id = %s",
        [job_id],
    )
    holder.commit()


def wait_for_expiry(job_id: uuid.UUID) -> None:
    """Wait on the database clock (the fence's clock) until the lease has expired."""
    wait_until(
        lambda: run_sql(
            "SELECT lease_expires_at <= clock_timestamp() FROM runledger_job_queue WHERE id = %s",
            [job_id],
        )[0][0],
        interval=0.05,
        what="the lease to expire",
    )


def mismatch(call: Callable[[], object]) -> RunledgerError:
    with pytest.raises(RunledgerError) as raised:
        call()
    assert (raised.value.code, raised.value.category) == ("job.lease_owner_mismatch", "forbidden")
    return raised.value


# --- the fence ------------------------------------------------------------------------------


def test_worker_writes__expired_lease__every_write_refused_row_left_for_the_reaper(
    enqueue: Enqueue,
) -> None:
    """expired_lease_rejects_worker_lifecycle_updates: an expired lease stays LEASED, but no
    heartbeat, progress, success or failure of its worker changes anything."""
    job_id = enqueue()
    lease = claim_one().lease
    expire_lease(job_id)
    row, attempts, events = job_row(job_id), attempt_rows(job_id), event_rows(job_id)

    heartbeat = heartbeat_leases([lease], lease_seconds=60)
    mismatch(lambda: update_job_progress(lease, progress_done=1, progress_total=2))
    mismatch(lambda: update_job_progress(lease, checkpoint={"a": 1}))
    mismatch(lambda: complete_job_success(lease, output=1))
    mismatch(lambda: complete_job_failure(lease, RETRYABLE))

    assert heartbeat == HeartbeatResult(
        renewed=frozenset(), busy=frozenset(), lost=frozenset({job_id})
    )
    assert (job_row(job_id), attempt_rows(job_id), event_rows(job_id)) == (row, attempts, events)
    assert row["status"] == "LEASED"
    assert reap_expired_leases([TYPE]).retried == 1


@pytest.mark.parametrize(
    "change",
    [
        {"worker_id": OTHER_WORKER},
        {"attempt": 2},
        {"run_number": 2},
        {"job_id": uuid.UUID(int=1)},
    ],
    ids=["other-worker", "other-attempt", "other-run", "other-job"],
)
def test_worker_writes__not_the_exact_lease__refused(
    enqueue: Enqueue, change: dict[str, Any]
) -> None:
    job_id = enqueue()
    lease = other_lease(claim_one().lease, **change)
    before = (job_row(job_id), attempt_rows(job_id), event_rows(job_id))

    assert heartbeat_leases([lease], lease_seconds=60).lost == {lease.job_id}
    mismatch(lambda: update_job_progress(lease, stage="x"))
    mismatch(lambda: complete_job_success(lease))
    mismatch(lambda: complete_job_failure(lease, RETRYABLE))

    assert (job_row(job_id), attempt_rows(job_id), event_rows(job_id)) == before


def test_worker_writes__after_the_job_moved_on__refused(enqueue: Enqueue) -> None:
    """A late write of attempt 1 cannot touch attempt 2 of the same job."""
    job_id = enqueue()
    first = claim_one().lease
    complete_job_failure(first, RETRYABLE)
    run_sql("UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id])
    second = claim_one(worker_id=first.worker_id).lease
    before = (job_row(job_id), attempt_rows(job_id))

    mismatch(lambda: complete_job_success(first, output="late"))
    mismatch(lambda: update_job_progress(first, checkpoint="late"))

    assert (job_row(job_id), attempt_rows(job_id)) == before
    complete_job_success(second)


def test_heartbeat_leases__invalid_lease_duration__rejected_before_sql(
    enqueue: Enqueue, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    """heartbeat_rejects_non_positive_lease_duration_without_mutating_lease."""
    job_id = enqueue()
    lease = claim_one().lease
    before = job_row(job_id)

    for seconds in (0, -1, 1.5, True, None, 86_401):
        with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
            heartbeat_leases([lease], lease_seconds=seconds)  # type: ignore[arg-type]
        assert raised.value.code == "job.invalid_lease_duration"

    assert job_row(job_id) == before


def test_heartbeat_leases__leases_of_two_workers__rejected(enqueue: Enqueue) -> None:
    enqueue()
    lease = claim_one().lease

    with pytest.raises(RunledgerError) as raised:
        heartbeat_leases([lease, other_lease(lease, worker_id=OTHER_WORKER)], lease_seconds=60)

    assert raised.value.code == "job.invalid_argument"


def test_heartbeat_leases__no_leases__nothing_sent(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    with django_assert_num_queries(0):
        assert heartbeat_leases([], lease_seconds=60) == HeartbeatResult(
            renewed=frozenset(), busy=frozenset(), lost=frozenset()
        )


@pytest.mark.django_db(transaction=True)
def test_heartbeat_leases__row_locked_elsewhere__busy_then_lost_once_expired(
    enqueue: Enqueue, open_session: OpenSession
) -> None:
    """heartbeat_rejects_lease_that_expires_while_waiting_for_job_lock: our heartbeat does not
    wait for a locked row (SKIP LOCKED); it reports it busy. When the lock goes away after the
    lease expired, the heartbeat finds the lease lost and renews nothing."""
    job_id = enqueue()
    lease = claim_one().lease
    holder = open_session(autocommit=False)
    lock_job_row(holder, job_id)

    busy = heartbeat_leases([lease], lease_seconds=60)
    expire_while_locked(holder, job_id)
    lost = heartbeat_leases([lease], lease_seconds=60)

    assert busy == HeartbeatResult(renewed=frozenset(), busy=frozenset({job_id}), lost=frozenset())
    assert lost == HeartbeatResult(renewed=frozenset(), busy=frozenset(), lost=frozenset({job_id}))
    assert "HEARTBEAT" not in event_types(job_id)
    assert job_row(job_id)["status"] == "LEASED"


# --- progress validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"progress_done": -1}, "job.invalid_progress"),
        ({"progress_total": -5}, "job.invalid_progress"),
        ({"progress_done": 3, "progress_total": 2}, "job.invalid_progress"),
        ({"progress_done": 1.5}, "job.invalid_progress"),
        ({"progress_done": True}, "job.invalid_progress"),
        ({"progress_total": 2**63}, "job.invalid_progress"),
        ({"stage": " \u3000"}, "job.invalid_stage"),
        ({"stage": "x" * 256}, "job.invalid_stage"),
        ({"stage": "a\x00b"}, "job.invalid_stage"),
        ({"stage": "\ud800"}, "job.invalid_stage"),
        ({"stage": 7}, "job.invalid_stage"),
        ({"checkpoint": {1: "int key"}}, "job.invalid_checkpoint"),
        ({"checkpoint": float("nan")}, "job.invalid_checkpoint"),
        ({"checkpoint": {"when": object()}}, "job.invalid_checkpoint"),
    ],
    ids=lambda value: repr(value)[:40],
)
def test_update_job_progress__invalid_values__rejected_before_sql(
    enqueue: Enqueue,
    django_assert_num_queries: DjangoAssertNumQueries,
    kwargs: dict[str, Any],
    code: str,
) -> None:
    job_id = enqueue()
    lease = claim_one().lease
    before = (job_row(job_id), event_rows(job_id))

    with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
        update_job_progress(lease, **kwargs)

    assert (raised.value.code, raised.value.category) == (code, "validation")
    assert (job_row(job_id), event_rows(job_id)) == before


def test_update_job_progress__merged_with_stored_values_invalid__rejected_nothing_written(
    enqueue: Enqueue,
) -> None:
    """Each value is valid alone; done 8 against the stored total 5 is not."""
    job_id = enqueue()
    lease = claim_one().lease
    update_job_progress(lease, progress_done=1, progress_total=5)
    before = (job_row(job_id), event_rows(job_id))

    with pytest.raises(RunledgerError) as raised:
        update_job_progress(lease, progress_done=8, stage="counting", checkpoint={"x": 1})

    assert raised.value.code == "job.invalid_progress"
    assert (job_row(job_id), event_rows(job_id)) == before


@pytest.mark.django_db(transaction=True)
def test_update_job_progress__competing_partial_updates__validated_against_the_locked_row(
    enqueue: Enqueue, in_thread: InThread, observer: psycopg.Connection[Any]
) -> None:
    """competing_partial_progress_updates_validate_against_the_locked_row: a write of done=8
    waits for a competing write of total=5; it is checked against the row it finally locks
    (total 5), not against what it would have read before the wait."""
    job_id = enqueue()
    lease = claim_one().lease
    update_job_progress(lease, progress_done=0, progress_total=10)
    locked, release = threading.Event(), threading.Event()

    def shrink_total() -> None:
        with transaction.atomic():
            update_job_progress(lease, progress_total=5)
            locked.set()
            assert release.wait(30)

    shrinking = in_thread(shrink_total)
    assert locked.wait(30)
    growing: Future[None] = in_thread(update_job_progress, lease, progress_done=8)
    wait_for_lock_wait(observer, "runledger:update_job_progress", timeout=30)
    release.set()
    shrinking.result(timeout=30)

    with pytest.raises(RunledgerError) as raised:
        growing.result(timeout=30)
    assert raised.value.code == "job.invalid_progress"
    row = job_row(job_id)
    assert (row["progress_done"], row["progress_total"]) == (0, 5)
    assert [e["progress_total"] for e in event_rows(job_id) if e["event_type"] == "PROGRESS"] == [
        10,
        5,
    ]


@pytest.mark.django_db(transaction=True)
def test_update_job_progress__lease_expires_while_waiting_for_the_row__refused(
    enqueue: Enqueue, in_thread: InThread, open_session: OpenSession
) -> None:
    """progress_cannot_write_after_its_lease_expires_while_waiting_for_the_row."""
    job_id = enqueue()
    lease = claim_one().lease
    holder = open_session(autocommit=False)
    observer = open_session()
    lock_job_row(holder, job_id)

    waiting: Future[None] = in_thread(update_job_progress, lease, progress_done=1, progress_total=2)
    wait_for_lock_wait(observer, "runledger:update_job_progress", timeout=30)
    expire_while_locked(holder, job_id)

    mismatch(lambda: waiting.result(timeout=30))
    row = job_row(job_id)
    assert (row["status"], row["progress_done"]) == ("LEASED", None)
    assert "PROGRESS" not in event_types(job_id)


# --- success validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "output", [{1, 2}, {"n": float("inf")}, b"bytes", {"k": object()}], ids=repr
)
def test_complete_job_success__output_not_json_native__rejected_before_sql(
    enqueue: Enqueue, django_assert_num_queries: DjangoAssertNumQueries, output: object
) -> None:
    job_id = enqueue()
    lease = claim_one().lease
    before = job_row(job_id)

    with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
        complete_job_success(lease, output=output)

    assert raised.value.code == "job.invalid_output"
    assert job_row(job_id) == before


@pytest.mark.django_db(transaction=True)
def test_complete_job_success__session_default_repeatable_read__completes(
    enqueue: Enqueue, session_repeatable_read: None
) -> None:
    """standalone_success_completion_allows_non_read_committed_session: each transition is one
    statement, so the session's isolation default cannot leave it on a stale snapshot."""
    job_id = enqueue()
    lease = claim_one().lease
    heartbeat_leases([lease], lease_seconds=60)
    update_job_progress(lease, progress_done=1, progress_total=1)

    complete_job_success(lease, output={"ok": True})

    assert job_row(job_id)["status"] == "SUCCEEDED"


# --- the lifecycle caps: 5 s row-lock waits, 30 s in all, stricter values kept ----------------

CAPPED = "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')"


def capped_settings() -> tuple[str, str]:
    """The timeouts a transition statement runs under (it reads them itself)."""
    [row] = _lease.transition("default", CAPPED, {}, context="read the caps")
    return str(row[0]), str(row[1])


def session_timeouts() -> tuple[str, str]:
    row = run_sql(CAPPED)[0]
    return str(row[0]), str(row[1])


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("caller", "inside"),
    [
        (("0", "0"), ("5s", "30s")),
        (("1min", "10min"), ("5s", "30s")),
        (("100ms", "2s"), ("100ms", "2s")),
        (("100ms", "1h"), ("100ms", "30s")),
    ],
    ids=["unset", "looser", "stricter", "mixed"],
)
def test_transition__autocommit__caps_applied_stricter_kept_nothing_left_behind(
    caller: tuple[str, str], inside: tuple[str, str]
) -> None:
    """owned_lifecycle_transactions_cap_and_preserve_database_timeouts (one statement of our
    own: the caps ride in the same simple-protocol query and end with it)."""
    run_sql(f"SET lock_timeout = '{caller[0]}'; SET statement_timeout = '{caller[1]}'")
    before = session_timeouts()
    try:
        assert capped_settings() == inside
        assert session_timeouts() == before
    finally:
        run_sql("RESET lock_timeout; RESET statement_timeout")


@pytest.mark.parametrize(
    ("caller", "inside"),
    [
        (("0", "0"), ("5s", "30s")),
        (("3s", "45s"), ("3s", "30s")),
        (("6s", "1min"), ("5s", "30s")),
    ],
    ids=["unset", "stricter-lock", "looser"],
)
def test_transition__inside_caller_atomic_block__caps_then_exact_restore(
    caller: tuple[str, str], inside: tuple[str, str]
) -> None:
    """Inside the caller's transaction the caps are SET LOCAL, so they would outlive the
    statement: they are put back to the caller's exact texts afterwards."""
    with transaction.atomic():
        run_sql(
            f"SET LOCAL lock_timeout = '{caller[0]}'; SET LOCAL statement_timeout = '{caller[1]}'"
        )
        before = session_timeouts()
        assert capped_settings() == inside
        assert session_timeouts() == before


PLANNER = (
    "SELECT current_setting('enable_sort'), current_setting('enable_seqscan'), "
    "current_setting('enable_bitmapscan'), current_setting('jit')"
)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("in_atomic", [False, True], ids=["autocommit", "caller-atomic"])
def test_transition__planner_pinned_and_jit_off_inside__caller_settings_kept(
    in_atomic: bool,
) -> None:
    """The pins keep plans index-driven; jit goes off with them (before PostgreSQL 18 a pin
    is a huge cost penalty, which made every claim JIT-compile itself for most of a second).
    None of it outlives the statement."""
    run_sql("SET jit = on; SET enable_sort = on")
    try:
        with transaction.atomic() if in_atomic else contextlib.nullcontext():
            before = run_sql(PLANNER)[0]
            [inside] = _lease.transition("default", PLANNER, {}, context="read the pins")
            after = run_sql(PLANNER)[0]
        assert inside == ("off", "off", "off", "off")
        assert after == before
        assert before[0] == "on" and before[3] == "on"
    finally:
        run_sql("RESET jit; RESET enable_sort")


@pytest.mark.django_db(transaction=True)
def test_complete_job_success__stricter_caller_lock_timeout__kept_for_the_row_wait(
    enqueue: Enqueue, open_session: OpenSession
) -> None:
    """completion_row_lock_waits_preserve_stricter_database_timeout: a caller's 200 ms
    lock_timeout ends the wait for a locked row (not the 5 s cap), nothing is written, and the
    caller's setting is still 200 ms afterwards."""
    job_id = enqueue()
    lease = claim_one().lease
    holder = open_session(autocommit=False)
    lock_job_row(holder, job_id)
    run_sql("SET lock_timeout = '200ms'")
    try:
        with pytest.raises(RunledgerError) as raised:
            complete_job_success(lease, output=1)
        assert raised.value.sqlstate == "55P03"
        assert session_timeouts()[0] == "200ms"
    finally:
        run_sql("RESET lock_timeout")
        holder.rollback()
    assert job_row(job_id)["status"] == "LEASED"
    complete_job_success(lease, output=1)


def test_complete_job_success__inside_caller_atomic_block__caller_timeouts_restored(
    enqueue: Enqueue,
) -> None:
    """completion_restores_caller_timeouts_after_job_row_acquisition."""
    enqueue()
    lease = claim_one().lease
    with transaction.atomic():
        run_sql("SET LOCAL lock_timeout = '7s'; SET LOCAL statement_timeout = '2min'")
        complete_job_success(lease, output=1)
        assert session_timeouts() == ("7s", "2min")


# --- heartbeats while a handler holds its own row; heartbeats that cannot get through ----------


def execution_for(claimed: Any, lease_seconds: int) -> Execution:
    return Execution(claimed, lease_seconds=lease_seconds)


def test_heartbeater__interval_is_a_third_of_the_lease() -> None:
    """heartbeat_budget_preserves_one_third_for_short_and_default_leases."""
    stop = threading.Event()
    for lease_seconds, interval in ((60, 20.0), (3, 1.0), (1, 1 / 3)):
        beater = Heartbeater(list, lease_seconds=lease_seconds, using="default", stop=stop)
        assert beater.interval == pytest.approx(interval)


@pytest.mark.django_db(transaction=True)
def test_heartbeater__handler_holds_its_job_row__keeps_polling_then_renews(
    enqueue: Enqueue, in_thread: InThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pending_heartbeat_keeps_polling_handler_that_owns_the_job_row_lock: the handler's own
    transaction holds the row (a checkpoint written inside its atomic block); the heartbeat
    skips the locked row, reports it busy, retries every 50 ms, and renews the lease once the
    handler commits, without deadlocking on its own worker's lock."""
    job_id = enqueue()
    claimed = claim_one()
    execution = execution_for(claimed, 60)
    results: list[HeartbeatResult] = []
    real = heartbeat_leases

    def recording(*args: Any, **kwargs: Any) -> HeartbeatResult:
        result = real(*args, **kwargs)
        results.append(result)
        return result

    monkeypatch.setattr("runledger_django.worker.heartbeat.heartbeat_leases", recording)
    holding, commit = threading.Event(), threading.Event()

    def handler_transaction() -> None:
        with transaction.atomic():
            update_job_progress(claimed.lease, checkpoint={"step": 1})
            holding.set()
            assert commit.wait(30)

    handler = in_thread(handler_transaction)
    assert holding.wait(30)
    beater = Heartbeater(list, lease_seconds=60, using="default", stop=threading.Event())
    beating = in_thread(beater.beat, [execution], budget_end=time.monotonic() + 60)
    wait_until(lambda: len(results) >= 2, what="the heartbeat to retry the busy row")
    assert all(result.busy == {job_id} for result in results)
    commit.set()
    handler.result(timeout=30)
    beating.result(timeout=30)

    assert results[-1].renewed == {job_id}
    assert not execution.lost.is_set()
    assert event_types(job_id)[-1] == "HEARTBEAT"


@pytest.mark.django_db(transaction=True)
def test_heartbeater__row_locked_past_the_budget__lease_lost_attempt_left_for_the_reaper(
    enqueue: Enqueue, open_session: OpenSession
) -> None:
    """heartbeat_lock_timeout_aborts_handler_and_leaves_attempt_for_reaper: a lease the
    heartbeat cannot renew within a third of the lease is given up; the handler's next write
    fails without touching the database, its result is discarded, nothing more is written for
    the attempt, and once the lease expires the reaper records it as LEASE_EXPIRED."""
    job_id = enqueue()
    claimed = claim_one(lease_seconds=1)
    execution = execution_for(claimed, 1)
    holder = open_session(autocommit=False)
    lock_job_row(holder, job_id)
    stop = threading.Event()
    beater = Heartbeater(lambda: [execution], lease_seconds=1, using="default", stop=stop)
    beater.start()
    try:
        assert execution.lost.wait(30)
    finally:
        stop.set()
        beater.join(30)
    holder.rollback()

    context = JobContext(execution, using="default")
    mismatch(lambda: context.set_progress(1, 2))
    registry = Registry()
    registry.register(Handler(job_type=TYPE, func=lambda job: {"late": True}))
    run = execute(execution, registry, using="default")
    assert (run.outcome, run.error_code) == ("lease_lost", "job.lease_owner_mismatch")
    assert event_types(job_id) == ["ENQUEUED", "LEASED"]

    wait_for_expiry(job_id)
    assert reap_expired_leases([TYPE]).retried == 1
    attempt = attempt_rows(job_id)[0]
    assert (attempt["outcome"], attempt["failure_kind"], attempt["error_code"]) == (
        "RETRY_SCHEDULED",
        "LEASE_EXPIRED",
        "job.lease_expired",
    )
    assert job_row(job_id)["status"] == "PENDING"


def test_lease_params__shape(enqueue: Enqueue) -> None:
    enqueue()
    lease = claim_one().lease
    assert _lease.lease_params(lease) == {
        "job_id": lease.job_id,
        "run_number": 1,
        "attempt": 1,
        "worker_id": lease.worker_id,
    }
    with pytest.raises(RunledgerError) as raised:
        update_job_progress("not a lease", stage="x")  # type: ignore[arg-type]
    assert raised.value.code == "job.invalid_argument"
    assert isinstance(lease, JobLease)
    assert connection.in_atomic_block
