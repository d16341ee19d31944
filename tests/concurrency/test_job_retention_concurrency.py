"""prune_jobs against concurrent promoters: a promoter waits for at most the batch in flight,
and a promotion in flight is never cut off from the job it converges on.

``transaction=True`` throughout: the retention fence and row locks are seen across sessions
(threads with their own Django connection, raw psycopg sessions), both sides own their
transactions, and every wait is observed in pg_stat_activity rather than slept through.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import psycopg
import pytest

from runledger_django import (
    IntentStatus,
    delete_promoted_intents_before,
    promote_intents,
    record_intent,
)
from runledger_django.models import Job, JobEnqueueIntent
from runledger_django.services.claim import claim_jobs
from runledger_django.services.job_retention import JobPruneCounts, prune_jobs
from runledger_django.services.lifecycle import complete_job_success
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
MONTH = dt.timedelta(days=30)
PROMOTION_FENCE_TAG = "runledger:lock_job_enqueue_intent_promotion"
RETENTION_FENCE_TAG = "runledger:lock_job_enqueue_intent_retention"
JOB_LOCKS = "ORDER BY id FOR UPDATE"
"""The fence helper's job-locking statement, where a prune batch waits on a held row."""


def old_promoted_job(key: str, *, days_ago: int) -> tuple[uuid.UUID, uuid.UUID]:
    """Record, promote, run and finish one job ``days_ago`` days ago; (intent id, job id)."""
    intent_id = record_intent(TYPE, {"key": key}, idempotency_key=key).intent_id
    assert promote_intents([TYPE]).inserted_jobs == 1
    job_id = JobEnqueueIntent.objects.get(id=intent_id).promoted_job_id
    assert job_id is not None
    [claimed] = claim_jobs([TYPE], worker_id="w", limit=1, lease_seconds=60)
    complete_job_success(claimed.lease)
    run_sql(
        "UPDATE runledger_job_queue SET finished_at = now() - make_interval(days => %s), "
        "created_at = now() - make_interval(days => %s) - interval '1 minute' "
        "WHERE id = %s",
        [days_ago, days_ago, job_id],
    )
    return intent_id, job_id


def promotion_waiters(observer: Observer) -> int:
    row = observer.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND position(%s in query) > 0",
        [PROMOTION_FENCE_TAG],
    ).fetchone()
    return int(row[0]) if row else 0


def test_prune_jobs__promoter_during_a_batch__waits_for_that_batch_only(
    make_definition: MakeDefinition,
    in_thread: InThread,
    open_session: OpenSession,
    observer: Observer,
) -> None:
    """A batch held up inside its fenced transaction holds promotion up with it; the moment
    the batch commits the promoter goes on, long before the prune's later batches end."""
    make_definition()
    jobs = [old_promoted_job(f"old-{n}", days_ago=40 + 3 - n)[1] for n in range(3)]
    fresh = record_intent(TYPE, {"fresh": True}, idempotency_key="fresh").intent_id
    blocker = open_session(autocommit=False)
    blocker.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [jobs[1]])

    pruning = in_thread(prune_jobs, MONTH, batch_size=1)
    wait_for_lock_wait(observer, JOB_LOCKS)  # batch two holds the fence, waits for the row
    promoting = in_thread(promote_intents, [TYPE])
    wait_for_lock_wait(observer, PROMOTION_FENCE_TAG)
    assert not promoting.done()

    blocker.rollback()

    report = promoting.result(timeout=10)
    result = pruning.result(timeout=10)
    assert (report.inserted_jobs, report.total_promoted) == (1, 1)
    assert result.counts == JobPruneCounts(succeeded=3, intents=3)
    assert result.batches == 3
    assert promotion_waiters(observer) == 0
    assert not Job.objects.filter(id__in=jobs).exists()
    assert JobEnqueueIntent.objects.get(id=fresh).status == IntentStatus.PROMOTED


def test_prune_jobs__between_batches__the_fence_is_free_for_a_promotion_pass(
    make_definition: MakeDefinition, in_thread: InThread
) -> None:
    """A whole promotion pass runs to its commit while the prune has batches left."""
    make_definition()
    jobs = [old_promoted_job(f"old-{n}", days_ago=40 + n)[1] for n in range(3)]
    fresh = record_intent(TYPE, {"fresh": True}, idempotency_key="fresh").intent_id
    reports: list[Any] = []

    def promote_from_another_session(batch: JobPruneCounts, total: JobPruneCounts) -> None:
        if not reports:
            reports.append(in_thread(promote_intents, [TYPE]).result(timeout=10))
            reports.append(Job.objects.filter(id__in=jobs).count())

    result = prune_jobs(MONTH, batch_size=1, on_batch=promote_from_another_session)

    report, jobs_left_meanwhile = reports
    assert report.inserted_jobs == 1
    assert jobs_left_meanwhile == 2
    assert result.counts.jobs == 3
    assert JobEnqueueIntent.objects.get(id=fresh).status == IntentStatus.PROMOTED


def test_prune_jobs__promotion_converging_on_the_old_job__both_go_together(
    make_definition: MakeDefinition,
    in_thread: InThread,
    observer: Observer,
    request: pytest.FixtureRequest,
) -> None:
    """The old job lost its intent to prune_intents; a retried request records a new intent,
    and its promotion converges on the old job just as retention deletes that job. The batch
    waits for the promotion (the fence) and then deletes the new intent with the job: no
    foreign-key failure, no intent left pointing nowhere, and the key is free afterwards."""
    make_definition()
    old_intent, job_id = old_promoted_job("receipt:9", days_ago=40)
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET promoted_at = now() - interval '40 days' "
        "WHERE id = %s",
        [old_intent],
    )
    assert delete_promoted_intents_before(dt.datetime.now(dt.UTC), limit=10) == 1
    retried = record_intent(TYPE, {"key": "receipt:9"}, idempotency_key="receipt:9")
    assert retried.disposition == "inserted"
    # Only now: the park holds every promotion inside its PROMOTED update, with the fence.
    park: psycopg.Connection[Any] = request.getfixturevalue("park_promoted_update")

    promoting = in_thread(promote_intents, [TYPE])
    wait_for_lock_wait(observer, "UPDATE runledger_job_enqueue_intents")  # parked, fence held
    pruning = in_thread(prune_jobs, MONTH)
    wait_for_lock_wait(observer, RETENTION_FENCE_TAG)
    assert release_park(park)

    report = promoting.result(timeout=10)
    result = pruning.result(timeout=10)
    assert (report.existing_jobs, report.inserted_jobs) == (1, 0)
    assert result.counts == JobPruneCounts(succeeded=1, intents=1)
    assert not Job.objects.filter(id=job_id).exists()
    assert not JobEnqueueIntent.objects.filter(id=retried.intent_id).exists()
    again = record_intent(TYPE, {"key": "receipt:9"}, idempotency_key="receipt:9")
    assert again.disposition == "inserted"
