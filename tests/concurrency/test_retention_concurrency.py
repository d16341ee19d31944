"""Retention against concurrent recorders, promoters and lock holders (reference 4.5, 8.1).

``transaction=True`` throughout: the retention fence and row locks are seen across sessions
(threads with their own Django connection, raw psycopg sessions), promotion owns its
transaction, and the waits are observed in pg_stat_activity rather than slept through.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import transaction
from django.utils import timezone

from runledger_django import (
    PromotionReport,
    RunledgerError,
    delete_promoted_intents_before,
    delete_promoted_intents_for_jobs,
    enqueue_job,
    promote_intents,
    record_intent,
)
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobEnqueueIntent
from tests.concurrency.conftest import release_park
from tests.conftest import (
    TEST_JOB_TYPE,
    InThread,
    MakeDefinition,
    Observer,
    OpenSession,
    run_sql,
    wait_for_lock_wait,
)

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = TEST_JOB_TYPE
PROMOTION_FENCE_TAG = "runledger:lock_job_enqueue_intent_promotion"
RETENTION_FENCE_TAG = "runledger:lock_job_enqueue_intent_retention"


def promoted(key: str) -> tuple[uuid.UUID, uuid.UUID]:
    """Record and promote one intent; return (intent id, job id)."""
    intent_id = record_intent(TYPE, {"key": key}, idempotency_key=key).intent_id
    assert promote_intents([TYPE]).inserted_jobs == 1
    job_id = JobEnqueueIntent.objects.get(id=intent_id).promoted_job_id
    assert job_id is not None
    return intent_id, job_id


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Run ``fn``; return (result or raised RunledgerError, elapsed seconds)."""
    start = time.monotonic()
    try:
        result: Any = fn(*args, **kwargs)
    except RunledgerError as error:
        result = error
    return result, time.monotonic() - start


class RetentionHolder:
    """An exact-ID retention transaction in a thread that holds the fence until released."""

    def __init__(self, in_thread: InThread, job_ids: list[uuid.UUID]) -> None:
        self.acquired = threading.Event()
        self.release = threading.Event()
        self.future = in_thread(self._run, job_ids)

    def _run(self, job_ids: list[uuid.UUID]) -> int:
        with transaction.atomic():
            deleted = delete_promoted_intents_for_jobs(job_ids)
            self.acquired.set()
            assert self.release.wait(timeout=30)
        return deleted

    def wait_acquired(self) -> None:
        if not self.acquired.wait(timeout=10):
            self.future.result(timeout=1)  # surfaces the thread's error
            raise AssertionError("retention never took the fence")

    def finish(self) -> int:
        self.release.set()
        return int(self.future.result(timeout=10))


@pytest.fixture
def holders(in_thread: InThread) -> Iterator[Callable[[list[uuid.UUID]], RetentionHolder]]:
    started: list[RetentionHolder] = []

    def start(job_ids: list[uuid.UUID]) -> RetentionHolder:
        holder = RetentionHolder(in_thread, job_ids)
        started.append(holder)
        return holder

    yield start
    for holder in started:
        holder.release.set()


# --- the caller's stricter settings and bounded waits -----------------------------------------


def test_delete_promoted_intents_for_jobs__stricter_caller_lock_timeout__kept_for_row_locks(
    make_definition: MakeDefinition, open_session: OpenSession
) -> None:
    make_definition()
    _, job_id = promoted("strict")
    blocker = open_session(autocommit=False)
    blocker.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [job_id])

    start = time.monotonic()
    with pytest.raises(RunledgerError) as caught, transaction.atomic():
        run_sql("SET LOCAL lock_timeout = '100ms'")
        delete_promoted_intents_for_jobs([job_id])
    elapsed = time.monotonic() - start
    blocker.rollback()

    assert elapsed < 2
    assert (caught.value.code, caught.value.category, caught.value.sqlstate) == (
        "db.query_failed",
        ErrorCategory.INTERNAL,
        "55P03",
    )
    assert caught.value.__cause__ is not None
    # The failed transaction rolled back: the intent is still there.
    assert JobEnqueueIntent.objects.filter(promoted_job_id=job_id).exists()


@pytest.mark.slow
def test_delete_promoted_intents_for_jobs__duplicate_recorder_holds_intent__wait_bounded(
    make_definition: MakeDefinition, in_thread: InThread
) -> None:
    """Behind a recorder's KEY SHARE the intent delete gives up after the 5 s row-lock cap."""
    make_definition()
    intent_id, job_id = promoted("recorded-twice")
    recorded = threading.Event()
    finish = threading.Event()

    def duplicate_recorder() -> tuple[str, str]:
        with transaction.atomic():
            outcome = record_intent(
                TYPE, {"key": "recorded-twice"}, idempotency_key="recorded-twice"
            )
            recorded.set()
            assert finish.wait(timeout=30)
        return outcome.disposition, outcome.status.value

    recorder = in_thread(duplicate_recorder)
    assert recorded.wait(timeout=10)
    try:
        start = time.monotonic()
        with pytest.raises(RunledgerError) as caught, transaction.atomic():
            delete_promoted_intents_for_jobs([job_id])
        elapsed = time.monotonic() - start
    finally:
        finish.set()

    assert recorder.result(timeout=10) == ("existing", "PROMOTED")
    assert 4 <= elapsed < 7
    assert (caught.value.code, caught.value.sqlstate) == ("db.query_failed", "55P03")
    assert JobEnqueueIntent.objects.get(id=intent_id).status == "PROMOTED"


def test_delete_promoted_intents_for_jobs__intent_first_recorder__same_lock_order_no_deadlock(
    make_definition: MakeDefinition, in_thread: InThread, observer: Observer
) -> None:
    """Retention waits on the intent before it locks the job, so a recorder that locks the job
    after recording (the documented order) never deadlocks against it."""
    make_definition()
    intent_id, job_id = promoted("ordered")
    recorded = threading.Event()
    lock_job = threading.Event()
    job_locked = threading.Event()
    roll_back = threading.Event()

    def recorder() -> str:
        with transaction.atomic():
            outcome = record_intent(TYPE, {"key": "ordered"}, idempotency_key="ordered")
            recorded.set()
            assert lock_job.wait(timeout=10)
            run_sql("SET LOCAL lock_timeout = '3s'")
            run_sql("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [job_id])
            job_locked.set()
            assert roll_back.wait(timeout=10)
            transaction.set_rollback(True)
        return outcome.disposition

    def retention() -> tuple[int, float]:
        with transaction.atomic():
            deleted = delete_promoted_intents_for_jobs([job_id])
            unlocked_at = time.monotonic()
            run_sql("DELETE FROM runledger_job_queue WHERE id = %s", [job_id])
        return deleted, unlocked_at

    recording = in_thread(recorder)
    assert recorded.wait(timeout=10)
    retaining = in_thread(retention)
    wait_for_lock_wait(observer, "DELETE FROM runledger_job_enqueue_intents")

    lock_job.set()
    assert job_locked.wait(timeout=3)
    released_at = time.monotonic()
    roll_back.set()
    deleted, unlocked_at = retaining.result(timeout=3)

    assert recording.result(timeout=3) == "existing"
    assert deleted == 1
    assert unlocked_at >= released_at
    assert not JobEnqueueIntent.objects.filter(id=intent_id).exists()
    assert not Job.objects.filter(id=job_id).exists()


@pytest.mark.parametrize("blocked", ["higher", "lower"])
def test_delete_promoted_intents_for_jobs__jobs__locked_in_id_order(
    make_definition: MakeDefinition,
    in_thread: InThread,
    open_session: OpenSession,
    observer: Observer,
    holders: Callable[[list[uuid.UUID]], RetentionHolder],
    blocked: str,
) -> None:
    """Whatever order the caller passes, jobs are locked lowest id first."""
    make_definition()
    lower, higher = sorted(
        enqueue_job(TYPE, {"n": n}, idempotency_key=f"order-{n}").job_id for n in range(2)
    )
    blocker = open_session(autocommit=False)
    blocked_id, other_id = (higher, lower) if blocked == "higher" else (lower, higher)
    blocker.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [blocked_id])

    holder = holders([higher, lower])
    wait_for_lock_wait(observer, "ORDER BY id FOR UPDATE")

    probe = open_session(autocommit=False)
    probe.execute("SET lock_timeout = '50ms'")
    try:
        probe.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [other_id])
        other_locked = False
    except psycopg.errors.LockNotAvailable:
        other_locked = True
    probe.rollback()
    blocker.rollback()
    holder.wait_acquired()

    # Blocked on the higher id: the lower one is already locked. Blocked on the lower id: the
    # higher one is not locked yet.
    assert other_locked is (blocked == "higher")
    assert holder.finish() == 0


# --- the retention fence against promotion ------------------------------------------------------


def test_delete_promoted_intents_for_jobs__concurrent_promotion__waits_then_promotes_a_new_job(
    make_definition: MakeDefinition, in_thread: InThread, observer: Observer
) -> None:
    make_definition()
    old = enqueue_job(TYPE, {"key": "replaced"}, idempotency_key="replaced").job_id
    intent_id = record_intent(TYPE, {"key": "replaced"}, idempotency_key="replaced").intent_id

    with transaction.atomic():
        assert delete_promoted_intents_for_jobs([old]) == 0
        promotion = in_thread(promote_intents, [TYPE])
        wait_for_lock_wait(observer, PROMOTION_FENCE_TAG)
        run_sql("DELETE FROM runledger_job_queue WHERE id = %s", [old])

    report = promotion.result(timeout=10)
    assert report.to_dict() == {
        **PromotionReport().to_dict(),
        "inserted_jobs": 1,
        "total_promoted": 1,
    }
    intent = JobEnqueueIntent.objects.get(id=intent_id)
    assert intent.status == "PROMOTED"
    assert intent.promoted_job_id is not None
    assert intent.promoted_job_id != old
    assert Job.objects.filter(idempotency_key="replaced").count() == 1


@pytest.mark.slow
def test_promote_intents__retention_holds_the_fence__wait_bounded_and_intent_pending(
    make_definition: MakeDefinition,
    in_thread: InThread,
    holders: Callable[[list[uuid.UUID]], RetentionHolder],
) -> None:
    make_definition()
    intent_id = record_intent(TYPE, {"key": "fenced"}, idempotency_key="fenced").intent_id
    holder = holders([uuid.uuid4()])
    holder.wait_acquired()

    error, elapsed = in_thread(timed, promote_intents, [TYPE]).result(timeout=15)
    holder.finish()

    assert isinstance(error, RunledgerError)
    assert (error.code, error.category, error.sqlstate) == (
        "db.query_failed",
        ErrorCategory.INTERNAL,
        "55P03",
    )
    assert 4 <= elapsed < 7
    intent = JobEnqueueIntent.objects.get(id=intent_id)
    assert (intent.status, intent.promotion_attempts) == ("PENDING", 0)


@pytest.mark.slow
def test_delete_promoted_intents_for_jobs__pass_holds_the_fence_too_long__gives_up_after_30s(
    open_session: OpenSession,
) -> None:
    """The fence wait outlasts a whole 25 s pass, and is bounded itself."""
    promoter = open_session(autocommit=False)
    promoter.execute("SELECT pg_advisory_xact_lock_shared(1920298604, 1768846437)")

    start = time.monotonic()
    with pytest.raises(RunledgerError) as caught, transaction.atomic():
        delete_promoted_intents_for_jobs([uuid.uuid4()])
    elapsed = time.monotonic() - start
    promoter.rollback()

    assert (caught.value.code, caught.value.sqlstate) == ("db.query_failed", "55P03")
    assert 29 <= elapsed < 35


def test_promote_intents__idle_while_retention_holds_the_fence__returns_without_waiting(
    make_definition: MakeDefinition,
    in_thread: InThread,
    holders: Callable[[list[uuid.UUID]], RetentionHolder],
) -> None:
    make_definition()
    make_definition("jobs.test.other")
    record_intent("jobs.test.other", {}, idempotency_key="other-type")
    holder = holders([uuid.uuid4()])
    holder.wait_acquired()

    # Waiting on the fence would end in a 55P03 error after 5 s, not in a report.
    report = in_thread(promote_intents, [TYPE]).result(timeout=10)
    holder.finish()

    assert report == PromotionReport()


def test_retention__inverse_existing_job_order__serialised_by_the_fence(
    make_definition: MakeDefinition,
    in_thread: InThread,
    open_session: OpenSession,
    observer: Observer,
    park_promoted_update: psycopg.Connection[Any],
) -> None:
    """Promotion locks the jobs in intent order (higher id first here), retention in id order;
    the fence keeps retention from locking either job while the pass is in flight."""
    make_definition()
    lower = enqueue_job(TYPE, {"key": "low"}, idempotency_key="low").job_id
    higher = enqueue_job(TYPE, {"key": "high"}, idempotency_key="high").job_id
    assert lower < higher
    record_intent(TYPE, {"key": "high"}, idempotency_key="high")
    record_intent(TYPE, {"key": "low"}, idempotency_key="low")

    promotion = in_thread(promote_intents, [TYPE])
    # The pass converges on the higher job first and parks in its promoted update.
    wait_for_lock_wait(observer, "UPDATE runledger_job_enqueue_intents")

    def retention() -> int:
        with transaction.atomic():
            deleted = delete_promoted_intents_for_jobs([lower, higher])
            run_sql("DELETE FROM runledger_job_queue WHERE id = ANY(%s)", [[lower, higher]])
        return deleted

    retaining = in_thread(retention)
    wait_for_lock_wait(observer, RETENTION_FENCE_TAG)
    probe = open_session(autocommit=False)
    probe.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE NOWAIT", [lower])
    probe.rollback()
    assert release_park(park_promoted_update)

    report = promotion.result(timeout=10)
    assert report.to_dict() == {
        **PromotionReport().to_dict(),
        "existing_jobs": 2,
        "total_promoted": 2,
    }
    assert retaining.result(timeout=10) == 2
    assert Job.objects.count() == 0
    assert JobEnqueueIntent.objects.count() == 0


# --- cutoff cleanup skips rows other sessions hold ----------------------------------------------


def test_delete_promoted_intents_before__row_held_by_recorder__skipped_not_waited(
    make_definition: MakeDefinition, open_session: OpenSession
) -> None:
    make_definition()
    held, _ = promoted("held")
    free, _ = promoted("free")
    run_sql("UPDATE runledger_job_enqueue_intents SET promoted_at = now() - interval '2 days'")
    recorder = open_session(autocommit=False)
    recorder.execute(
        "SELECT id FROM runledger_job_enqueue_intents WHERE id = %s FOR KEY SHARE", [held]
    )
    cutoff = timezone.now() - dt.timedelta(days=1)

    run_sql("SET lock_timeout = '1s'")
    try:
        assert delete_promoted_intents_before(cutoff, limit=10) == 1
        assert list(JobEnqueueIntent.objects.values_list("id", flat=True)) == [held]
        recorder.rollback()
        assert delete_promoted_intents_before(cutoff, limit=10) == 1
    finally:
        run_sql("RESET lock_timeout")
    assert not JobEnqueueIntent.objects.filter(id__in=[held, free]).exists()
