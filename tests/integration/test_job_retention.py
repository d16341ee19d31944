"""prune_jobs and count_prunable_jobs: which finished jobs go, what goes with them, batches,
retries, and deduplication across retention.

``transaction=True`` throughout: prune_jobs owns one transaction per batch and refuses to run
inside the test's atomic block, and the retry test needs a second session holding a row lock.
Jobs reach their final states through the real services; only their finish time is moved
back, with raw UPDATEs.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runledger_django import (
    IntentStatus,
    ReadScope,
    RunledgerError,
    cancel_job,
    enqueue_job,
    promote_intents,
    record_intent,
    requeue_job,
)
from runledger_django.domain import FailureKind, JobFailure
from runledger_django.models import (
    Job,
    JobAttempt,
    JobEnqueueIntent,
    JobEvent,
    JobExecutionResourceClaim,
)
from runledger_django.services import job_retention
from runledger_django.services.claim import claim_jobs
from runledger_django.services.job_retention import (
    JobPruneCounts,
    count_prunable_jobs,
    prune_jobs,
)
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.conftest import (
    TEST_JOB_TYPE,
    InThread,
    MakeDefinition,
    Observer,
    OpenSession,
    run_sql,
    wait_for_lock_wait,
)
from tests.integration.test_reads import _index_names, _seq_scans, explain

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = TEST_JOB_TYPE
MONTH = dt.timedelta(days=30)
WORKER = "retention-worker"


def run_to(job_id: uuid.UUID, outcome: str) -> None:
    """Claim ``job_id`` (the only due job) and end its attempt with ``outcome``; a CANCELED
    job is cancelled before it ran (a job cancelled while running is tested on its own)."""
    if outcome == "CANCELED":
        cancel_job(job_id, scope=ReadScope.ADMIN)
        return
    [claimed] = claim_jobs([TYPE], worker_id=WORKER, limit=1, lease_seconds=60)
    assert claimed.lease.job_id == job_id
    if outcome == "SUCCEEDED":
        complete_job_success(claimed.lease, output={"done": True})
    else:
        failure = JobFailure(kind=FailureKind.TERMINAL, code="job.terminal_failure", message="no")
        complete_job_failure(claimed.lease, failure)


def finished_job(outcome: str, *, key: str | None = None, days_ago: int = 40) -> uuid.UUID:
    """A job, promoted from an intent when ``key`` is given, that ran once and ended in
    ``outcome`` ``days_ago`` days ago."""
    if key is None:
        job_id = enqueue_job(TYPE, {"n": str(uuid.uuid4())}).job_id
    else:
        intent_id = record_intent(TYPE, {"key": key}, idempotency_key=key).intent_id
        assert promote_intents([TYPE]).inserted_jobs == 1
        promoted = JobEnqueueIntent.objects.get(id=intent_id).promoted_job_id
        assert promoted is not None
        job_id = promoted
    run_to(job_id, outcome)
    age(job_id, days_ago)
    return job_id


def age(job_id: uuid.UUID, days: int) -> None:
    run_sql(
        "UPDATE runledger_job_queue SET finished_at = now() - make_interval(days => %s), "
        "created_at = now() - make_interval(days => %s) - interval '1 minute' "
        "WHERE id = %s",
        [days, days, job_id],
    )


def intents_of(job_id: uuid.UUID) -> list[uuid.UUID]:
    return list(
        JobEnqueueIntent.objects.filter(promoted_job_id=job_id).values_list("id", flat=True)
    )


def children(job_id: uuid.UUID) -> tuple[int, int]:
    return (
        JobAttempt.objects.filter(job_id=job_id).count(),
        JobEvent.objects.filter(job_id=job_id).count(),
    )


@pytest.fixture
def definition(make_definition: MakeDefinition) -> None:
    make_definition(max_attempts=1)


def test_prune_jobs__old_finished_jobs__go_with_attempts_events_and_promoted_intents(
    definition: None,
) -> None:
    old_keyed = finished_job("SUCCEEDED", key="receipt:old")
    old_dead = finished_job("DEAD_LETTERED")
    old_canceled = finished_job("CANCELED", key="receipt:canceled")
    recent = finished_job("SUCCEEDED", key="receipt:recent", days_ago=2)
    waiting = enqueue_job(TYPE, {"waiting": True}).job_id
    pending_intent = record_intent("jobs.test.not_defined", {}, idempotency_key="p").intent_id
    assert children(old_keyed) == (1, 3)  # ENQUEUED, LEASED, SUCCEEDED
    assert len(intents_of(old_keyed)) == 1

    batches: list[tuple[JobPruneCounts, JobPruneCounts]] = []
    result = prune_jobs(MONTH, on_batch=lambda batch, total: batches.append((batch, total)))

    expected = JobPruneCounts(succeeded=1, dead_lettered=1, canceled=1, intents=2)
    assert (result.counts, result.batches) == (expected, 1)
    assert batches == [(expected, expected)]
    assert set(Job.objects.values_list("id", flat=True)) == {recent, waiting}
    for gone in (old_keyed, old_dead, old_canceled):
        assert children(gone) == (0, 0)
        assert intents_of(gone) == []
    assert len(intents_of(recent)) == 1
    assert JobEnqueueIntent.objects.get(id=pending_intent).status == IntentStatus.PENDING


def test_prune_jobs__status_option__only_those_statuses(definition: None) -> None:
    succeeded = finished_job("SUCCEEDED")
    dead = finished_job("DEAD_LETTERED")
    canceled = finished_job("CANCELED")

    result = prune_jobs(MONTH, statuses=["DEAD_LETTERED", "CANCELED", "CANCELED"])

    assert result.statuses == ("DEAD_LETTERED", "CANCELED")
    assert result.counts == JobPruneCounts(dead_lettered=1, canceled=1)
    assert list(Job.objects.values_list("id", flat=True)) == [succeeded]
    assert not Job.objects.filter(id__in=[dead, canceled]).exists()


def test_prune_jobs__pending_and_leased_jobs__never_deleted(definition: None) -> None:
    """Even with an old finish time (a requeued job keeps none, but a raw row might)."""
    leased = enqueue_job(TYPE, {"leased": True}).job_id
    claim_jobs([TYPE], worker_id=WORKER, limit=1, lease_seconds=60)
    pending = enqueue_job(TYPE, {"pending": True}).job_id
    run_sql(
        "UPDATE runledger_job_queue SET finished_at = now() - interval '90 days', "
        "created_at = now() - interval '91 days' WHERE id = ANY(%s)",
        [[leased, pending]],
    )

    result = prune_jobs(dt.timedelta(seconds=1))

    assert result.counts.jobs == 0
    assert set(Job.objects.values_list("id", flat=True)) == {leased, pending}


def test_prune_jobs__canceled_with_a_live_lease__kept_until_the_lease_expires(
    definition: None,
) -> None:
    """Its handler may still run, and its execution resource stays held until then."""
    job_id = enqueue_job(TYPE, {}, execution_resource_key="printer-1").job_id
    claim_jobs([TYPE], worker_id=WORKER, limit=1, lease_seconds=600)
    cancel_job(job_id, scope=ReadScope.ADMIN)
    age(job_id, 40)
    assert JobExecutionResourceClaim.objects.filter(job_id=job_id).exists()

    assert count_prunable_jobs(MONTH).counts.jobs == 0
    assert prune_jobs(MONTH).counts.jobs == 0
    assert Job.objects.filter(id=job_id).exists()

    run_sql(
        "UPDATE runledger_job_queue SET lease_expires_at = now() - interval '1 second' "
        "WHERE id = %s",
        [job_id],
    )
    assert prune_jobs(MONTH).counts == JobPruneCounts(canceled=1)
    assert not JobExecutionResourceClaim.objects.exists()


def test_prune_jobs__batches__bounded_and_ending_on_a_short_one(definition: None) -> None:
    jobs = [finished_job("SUCCEEDED", days_ago=40 + n) for n in range(5)]
    totals: list[int] = []

    result = prune_jobs(MONTH, batch_size=2, on_batch=lambda b, t: totals.append(t.jobs))

    assert (result.counts.jobs, result.batches, totals) == (5, 3, [2, 4, 5])
    assert not Job.objects.filter(id__in=jobs).exists()


def test_prune_jobs__exact_multiple_of_the_batch__one_more_empty_selection(
    definition: None,
) -> None:
    for n in range(2):
        finished_job("SUCCEEDED", days_ago=40 + n)

    result = prune_jobs(MONTH, batch_size=2)

    assert (result.counts.jobs, result.batches) == (2, 1)


def test_prune_jobs__deduplication__key_holds_until_job_and_intent_are_both_gone(
    definition: None,
) -> None:
    job_id = finished_job("SUCCEEDED", key="receipt:7")
    [intent_id] = intents_of(job_id)

    retry = record_intent(TYPE, {"key": "receipt:7"}, idempotency_key="receipt:7")
    assert (retry.intent_id, retry.status, retry.job_id) == (
        intent_id,
        IntentStatus.PROMOTED,
        job_id,
    )

    prune_jobs(MONTH)

    again = record_intent(TYPE, {"key": "receipt:7"}, idempotency_key="receipt:7")
    assert again.disposition == "inserted" and again.intent_id != intent_id
    assert promote_intents([TYPE]).inserted_jobs == 1
    new_job = JobEnqueueIntent.objects.get(id=again.intent_id).promoted_job_id
    assert new_job not in (None, job_id)


def test_prune_jobs__job_requeued_after_selection__kept_with_its_intent(
    definition: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch that selected it rolls back (its intent comes back) and is selected again."""
    requeued = finished_job("DEAD_LETTERED", key="receipt:requeued", days_ago=50)
    other = finished_job("SUCCEEDED", key="receipt:other")
    select = job_retention._select_batch
    calls: list[list[uuid.UUID]] = []

    def select_then_requeue(*args: Any) -> list[uuid.UUID]:
        ids = select(*args)
        calls.append(ids)
        if len(calls) == 1:
            requeue_job(requeued, scope=ReadScope.ADMIN)  # an operator, just in between
        return ids

    monkeypatch.setattr(job_retention, "_select_batch", select_then_requeue)

    result = prune_jobs(MONTH)

    assert calls[:2] == [[requeued, other], [other]]
    assert result.counts == JobPruneCounts(succeeded=1, intents=1)
    assert Job.objects.get(id=requeued).status == "PENDING"
    assert len(intents_of(requeued)) == 1
    assert not Job.objects.filter(id=other).exists()


def test_prune_jobs__row_lock_held_past_the_timeout__batch_retried_then_succeeds(
    definition: None,
    in_thread: InThread,
    open_session: OpenSession,
    observer: Observer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A lock timeout rolls the whole batch back (the intent deleted by the fence helper comes
    back); the next attempt, once the lock is gone, deletes the batch."""
    job_id = finished_job("SUCCEEDED", key="receipt:locked")
    blocker = open_session(autocommit=False)
    blocker.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [job_id])

    def prune_with_short_lock_waits() -> Any:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '1s'")  # stricter than the 5 s cap: kept
        return prune_jobs(MONTH)

    caplog.set_level(logging.WARNING, logger="runledger_django")
    future = in_thread(prune_with_short_lock_waits)
    wait_for_lock_wait(observer, "FOR UPDATE")
    wait_until(lambda: "batch rolled back, retrying" in caplog.text)
    assert len(intents_of(job_id)) == 1  # the failed attempt deleted nothing
    blocker.rollback()

    result = future.result(timeout=30)

    assert result.counts == JobPruneCounts(succeeded=1, intents=1)
    assert not Job.objects.filter(id=job_id).exists()


def test_prune_jobs__lock_never_released__raises_after_three_attempts_and_keeps_all(
    definition: None, in_thread: InThread, open_session: OpenSession
) -> None:
    job_id = finished_job("SUCCEEDED", key="receipt:stuck")
    blocker = open_session(autocommit=False)
    blocker.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [job_id])

    def prune_with_short_lock_waits() -> Any:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '100ms'")
        try:
            return prune_jobs(MONTH)
        except RunledgerError as error:
            return error

    error = in_thread(prune_with_short_lock_waits).result(timeout=30)
    blocker.rollback()

    assert isinstance(error, RunledgerError)
    assert (error.code, error.sqlstate) == ("db.query_failed", "55P03")
    assert Job.objects.filter(id=job_id).exists()
    assert len(intents_of(job_id)) == 1


def test_count_prunable_jobs__dry_run__counts_what_would_go_and_deletes_nothing(
    definition: None,
) -> None:
    finished_job("SUCCEEDED", key="receipt:a")
    finished_job("DEAD_LETTERED")
    finished_job("SUCCEEDED", days_ago=1)
    before = (Job.objects.count(), JobEnqueueIntent.objects.count(), JobEvent.objects.count())

    result = count_prunable_jobs(MONTH)

    # Events: ENQUEUED, LEASED, SUCCEEDED; and ENQUEUED, LEASED, FAILED, DEAD_LETTERED.
    assert result.counts == JobPruneCounts(
        succeeded=1, dead_lettered=1, canceled=0, intents=1, attempts=2, events=7
    )
    assert result.counts.jobs == 2
    after = (Job.objects.count(), JobEnqueueIntent.objects.count(), JobEvent.objects.count())
    assert after == before
    only_dead = count_prunable_jobs(MONTH, statuses=["DEAD_LETTERED"]).counts
    assert (only_dead.jobs, only_dead.intents) == (1, 0)


def test_prune_jobs__inside_atomic_block__refused_before_any_sql() -> None:
    with transaction.atomic(), pytest.raises(RunledgerError) as info:
        prune_jobs(MONTH)
    assert info.value.code == "job.invalid_argument"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"statuses": ["PENDING"]}, "job.invalid_argument"),
        ({"statuses": []}, "job.invalid_argument"),
        ({"statuses": "SUCCEEDED"}, "job.invalid_argument"),
        ({"batch_size": 0}, "job.invalid_pagination"),
        ({"batch_size": 1001}, "job.invalid_pagination"),
    ],
)
def test_prune_jobs__bad_arguments__validation_error(kwargs: dict[str, Any], code: str) -> None:
    with pytest.raises(RunledgerError) as info:
        prune_jobs(MONTH, **kwargs)
    assert info.value.code == code


def test_prune_jobs__negative_age__validation_error() -> None:
    with pytest.raises(RunledgerError) as info:
        count_prunable_jobs(dt.timedelta(days=-1))
    assert info.value.code == "job.invalid_argument"


def wait_until(predicate: Callable[[], bool], *, timeout: float = 10.0) -> None:
    """Poll a condition another thread makes true (no sleep stands in for it)."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition never became true")
        time.sleep(0.01)


def test_prune_jobs__candidates__oldest_first_from_the_creation_index(
    definition: None,
) -> None:
    """No index of retention's own: the creation-time index finds the old finished jobs."""
    run_sql(
        """
        INSERT INTO runledger_job_queue (job_type, payload, status, max_attempts, finished_at,
                                         created_at)
        SELECT %s, '{}', CASE WHEN n %% 50 = 0 THEN 'PENDING' ELSE 'SUCCEEDED' END, 1,
               CASE WHEN n %% 50 = 0 THEN NULL ELSE now() - make_interval(hours => n) END,
               now() - make_interval(hours => n)
        FROM generate_series(1, 5000) AS n
        """,
        [TYPE],
    )
    run_sql("ANALYZE runledger_job_queue")
    params = job_retention._params(dt.datetime.now(dt.UTC) - MONTH, job_retention.PRUNABLE_STATUSES)

    with CaptureQueriesContext(connection) as queries:
        ids = job_retention._select_batch(params, 100, "default")
    plan = explain(queries.captured_queries[0]["sql"])

    assert len(ids) == 100
    created = list(
        Job.objects.filter(id__in=ids).order_by("created_at").values_list("id", flat=True)
    )
    assert created == ids  # oldest first
    assert "idx_job_queue_created_id" in _index_names(plan)
    assert _seq_scans(plan) == set()
