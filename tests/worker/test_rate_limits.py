"""Per-type rate limits in the claim (docs/queue-control.md; reference 7, checklist 42-44).

At most ``rate_limit_count`` job starts in any window of ``rate_limit_period_seconds``, on the
database clock: the claim keeps the type's recent starts and admits what fits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from runledger_django import JobContext, RetryJob
from runledger_django.domain import ClaimedJob
from runledger_django.models import Job, JobAttempt, JobDefinition
from runledger_django.services import claim as claim_service
from runledger_django.services.claim import claim_jobs
from tests.conftest import MakeDefinition, run_sql
from tests.worker.conftest import LEASE, TYPE, WORKER, Enqueue, wait_until
from tests.worker.test_worker_loop import StartWorker, gates, start_worker  # noqa: F401

OTHER = "jobs.test.other"


@pytest.fixture(autouse=True)
def fresh_hints() -> Iterator[None]:
    claim_service._limited_hints.clear()
    yield
    claim_service._limited_hints.clear()


def rate(count: int, period: int, job_type: str = TYPE, **more: Any) -> None:
    JobDefinition.objects.filter(job_type=job_type).update(
        rate_limit_count=count, rate_limit_period_seconds=period, **more
    )


def claim(limit: int, types: list[str] | None = None) -> list[ClaimedJob]:
    return claim_jobs(types or [TYPE], worker_id=WORKER, limit=limit, lease_seconds=LEASE)


def logged_starts(job_type: str = TYPE) -> int:
    rows = run_sql(
        "SELECT cardinality(recent_starts) FROM runledger_job_rate_limits WHERE job_type = %s",
        [job_type],
    )
    return int(rows[0][0]) if rows else 0


@pytest.mark.django_db
def test_rate_limit__admits_count_per_period__over_limit_jobs_untouched(enqueue: Enqueue) -> None:
    rate(3, 3600)
    jobs = [enqueue() for _ in range(5)]
    before = dict(Job.objects.filter(id__in=jobs).values_list("id", "next_run_at"))

    assert len(claim(5)) == 3
    assert claim(5) == []

    waiting = Job.objects.filter(id__in=jobs, status="PENDING")
    assert waiting.count() == 2
    for job in waiting:
        # No reschedule, no attempt spent, nothing dead-lettered because of the limit.
        assert (job.attempt, job.next_run_at) == (0, before[job.id])
    assert not Job.objects.filter(status="DEAD_LETTERED").exists()


@pytest.mark.django_db
def test_rate_limit__charged_per_job_claimed_not_per_claim_attempt(enqueue: Enqueue) -> None:
    rate(3, 3600)
    for _ in range(5):  # claims that find nothing due charge nothing
        assert claim(5) == []
    enqueue()

    assert len(claim(5)) == 1  # one job due: one start charged, not the batch's five
    assert logged_starts() == 1
    for _ in range(4):
        enqueue()
    assert len(claim(5)) == 2
    assert logged_starts() == 3


@pytest.mark.django_db
def test_rate_limit__rolled_back_claim__returns_its_tokens(enqueue: Enqueue) -> None:
    rate(2, 3600)
    for _ in range(3):
        enqueue()

    with pytest.raises(RuntimeError), transaction.atomic():
        assert len(claim(3)) == 2
        raise RuntimeError("the caller's transaction rolls back")

    assert logged_starts() == 0
    assert Job.objects.filter(status="LEASED").count() == 0
    assert len(claim(3)) == 2


@pytest.mark.django_db
def test_rate_limit__starts_older_than_the_period_leave_the_window(enqueue: Enqueue) -> None:
    rate(2, 60)
    for _ in range(4):
        enqueue()
    assert len(claim(4)) == 2
    # Age the logged starts past the period, as a minute passing would.
    run_sql(
        "UPDATE runledger_job_rate_limits SET recent_starts = ARRAY["
        "now() - interval '61 seconds', now() - interval '30 seconds']"
    )

    assert len(claim(4)) == 1  # one start is still inside the window
    assert logged_starts() == 2  # the expired one was dropped, the new one added


@pytest.mark.django_db
def test_rate_and_concurrency_limits__compose(enqueue: Enqueue) -> None:
    rate(3, 3600, max_concurrency=1)
    for _ in range(4):
        enqueue()

    assert len(claim(4)) == 1


@pytest.mark.django_db
def test_rate_limit__other_types_never_held_back(
    enqueue: Enqueue, make_definition: MakeDefinition
) -> None:
    make_definition(OTHER)
    rate(1, 3600)
    for _ in range(3):
        enqueue()
    for _ in range(3):
        enqueue(job_type=OTHER)

    first = claim(3, [TYPE, OTHER])
    second = claim(3, [TYPE, OTHER])

    kinds = [job.job_type for job in first + second]
    assert (kinds.count(TYPE), kinds.count(OTHER)) == (1, 3)


PERIOD = 2
PERIOD_DELTA = dt.timedelta(seconds=PERIOD)
COUNT = 5
JOBS = 20


@pytest.mark.django_db(transaction=True)
def test_workers__rate_limit__no_window_of_the_period_holds_more_than_count_starts(
    enqueue: Enqueue,
    start_worker: StartWorker,  # noqa: F811
) -> None:
    """5 starts per 2 s over 20 due jobs (the reference's 10 per 10 s over 100, scaled down)
    and 2 workers x 4 threads, with a retry among them: every retry is a start too. The
    attempts' start times (database clock) are checked over every window that begins at a
    start: after the first burst of 5, none holds more than 5."""
    rate(COUNT, PERIOD)
    retried = enqueue({"retry": True})
    for _ in range(JOBS - 1):
        enqueue()

    def handler(job: JobContext) -> None:
        if job.payload.get("retry") and job.attempt == 1:
            raise RetryJob("once more", after=0)

    workers = [start_worker({TYPE: handler}, concurrency=4, poll_interval=0.05) for _ in range(2)]
    wait_until(
        lambda: Job.objects.filter(status="SUCCEEDED").count() == JOBS,
        timeout=120,
        what="every job",
    )
    for worker in workers:
        worker.finish()

    starts = sorted(JobAttempt.objects.values_list("leased_at", flat=True))
    assert len(starts) == JOBS + 1
    assert JobAttempt.objects.filter(job_id=retried).count() == 2
    window = [
        sum(1 for other in starts if start <= other < start + PERIOD_DELTA) for start in starts
    ]
    assert window[0] == COUNT  # the initial burst
    assert max(window) == COUNT


@pytest.fixture
def throttles() -> Iterator[list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []

    def listener(job_type: str, reason: str) -> None:
        seen.append((job_type, reason))

    claim_service.add_throttle_listener(listener)
    yield seen
    claim_service.remove_throttle_listener(listener)


@pytest.mark.django_db
def test_throttled_claims__reported_with_their_reason(
    enqueue: Enqueue, make_definition: MakeDefinition, throttles: list[tuple[str, str]]
) -> None:
    make_definition(OTHER, max_concurrency=1)
    rate(2, 3600)
    for _ in range(3):
        enqueue()
        enqueue(job_type=OTHER)

    assert len(claim(3)) == 2  # the rate limit leaves 2 of the 3 asked for
    assert claim(3) == []
    assert len(claim(3, [OTHER])) == 1

    assert throttles == [(TYPE, "rate"), (TYPE, "rate"), (OTHER, "concurrency")]


@pytest.mark.django_db
def test_throttled_claims__nothing_more_due__not_reported(
    enqueue: Enqueue, throttles: list[tuple[str, str]]
) -> None:
    rate(2, 3600)
    enqueue()
    enqueue()

    assert len(claim(3)) == 2  # the limit was reached, but nothing was held back
    assert claim(3) == []  # nothing due: an idle claim, not a throttled one

    assert throttles == []
