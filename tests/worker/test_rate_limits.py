"""Per-type rate limits in the claim (docs/queue-control.md; reference 7, checklist 42-44).

GCRA on the database clock (migration 0016): with T = period / count, a burst of up to the
count after an idle period, then one start per T; over any span of L seconds at most
count x (1 + L / period) starts. The claim keeps one theoretical arrival time per type.
"""

from __future__ import annotations

import contextlib
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
from tests.worker.conftest import LEASE, TYPE, WORKER, Enqueue, race_claims, wait_until
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


def charged_starts(job_type: str = TYPE) -> float:
    """The starts the type's arrival time is ahead of now by, in emission intervals (in one
    transaction, now() stands still, as in these single-session tests)."""
    rows = run_sql(
        "SELECT extract(epoch FROM state.theoretical_arrival_at - now())"
        " * definition.rate_limit_count / definition.rate_limit_period_seconds"
        " FROM runledger_job_rate_limits state"
        " JOIN runledger_job_definitions definition USING (job_type) WHERE job_type = %s",
        [job_type],
    )
    return float(rows[0][0]) if rows else 0.0


def move_arrival(microseconds: int, job_type: str = TYPE) -> None:
    """Move the type's arrival time back, as that much time passing would."""
    run_sql(
        "UPDATE runledger_job_rate_limits"
        " SET theoretical_arrival_at = theoretical_arrival_at - %s * interval '1 microsecond'"
        " WHERE job_type = %s",
        [microseconds, job_type],
    )


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
    assert charged_starts() == 1
    for _ in range(4):
        enqueue()
    assert len(claim(5)) == 2
    assert charged_starts() == 3


@pytest.mark.django_db
def test_rate_limit__rolled_back_claim__returns_its_tokens(enqueue: Enqueue) -> None:
    rate(2, 3600)
    for _ in range(3):
        enqueue()

    with pytest.raises(RuntimeError), transaction.atomic():
        assert len(claim(3)) == 2
        raise RuntimeError("the caller's transaction rolls back")

    assert charged_starts() == 0
    assert Job.objects.filter(status="LEASED").count() == 0
    assert len(claim(3)) == 2


@pytest.mark.django_db
def test_rate_limit__time_passing_returns_one_start_per_interval(enqueue: Enqueue) -> None:
    rate(2, 60)  # T = 30 s
    for _ in range(4):
        enqueue()
    assert len(claim(4)) == 2  # the burst
    move_arrival(30_000_000)  # half the period passes: one interval

    assert len(claim(4)) == 1
    assert charged_starts() == 2  # back to a full bucket's debt


@pytest.mark.django_db
def test_rate_limit__fractional_interval__rounding_never_admits_an_extra_start(
    enqueue: Enqueue,
) -> None:
    """3 per 2 s: T is 666,666.67 µs. The charge rounds up to the microsecond, so a start
    comes back only once a whole interval has passed, never a microsecond early."""
    rate(3, 2)
    for _ in range(6):
        enqueue()
    assert len(claim(6)) == 3
    move_arrival(666_666)

    assert claim(6) == []  # a fraction of a microsecond short of one interval
    move_arrival(1)
    assert len(claim(6)) == 1
    assert claim(6) == []


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


CLAIMERS = 40
"""As the concurrency limit's race (test_concurrency_limits): 40 of them, each on its own
connection, within a shared test server's connection limit."""


@pytest.mark.django_db(transaction=True)
def test_claim__many_concurrent_claimers__rate_limit_admits_exactly_count(
    enqueue: Enqueue, make_definition: MakeDefinition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """7 per hour, 40 claimers in threads at once over a deep backlog: whatever the race, the
    type gets exactly 7 starts, the losers fill their batches with other work, and the arrival
    time is the first start plus the period (to the microsecond the charges round up by)."""
    # One process serialises its own limited claims; these threads stand in for processes.
    monkeypatch.setattr(claim_service, "_limited_claims", contextlib.nullcontext())
    make_definition(OTHER)
    rate(7, 3600)
    for _ in range(3 * CLAIMERS):
        enqueue()
        enqueue(job_type=OTHER)
    claim_service._limited_hints[("default", (TYPE, OTHER))] = True
    results, errors = race_claims(
        CLAIMERS,
        lambda n: claim_jobs([TYPE, OTHER], worker_id=f"claimer-{n}", limit=2, lease_seconds=LEASE),
    )

    assert errors == []
    assert sorted(len(batch) for batch in results) == [2] * CLAIMERS
    raced = sum(job.job_type == TYPE for batch in results for job in batch)
    assert 2 <= raced <= 7
    while claim(5):  # what the race left of the burst, and then nothing
        pass
    assert Job.objects.filter(job_type=TYPE).exclude(status="PENDING").count() == 7
    [(first_start, arrival)] = run_sql(
        "SELECT (SELECT min(leased_at) FROM runledger_job_attempts WHERE job_type = %s),"
        " theoretical_arrival_at FROM runledger_job_rate_limits WHERE job_type = %s",
        [TYPE, TYPE],
    )
    ahead = arrival - first_start - dt.timedelta(hours=1)
    assert dt.timedelta(0) <= ahead <= dt.timedelta(microseconds=7)


PERIOD = 2
COUNT = 5
JOBS = 20


@pytest.mark.django_db(transaction=True)
def test_workers__rate_limit__starts_never_exceed_the_burst_plus_the_rate(
    enqueue: Enqueue,
    start_worker: StartWorker,  # noqa: F811
) -> None:
    """5 starts per 2 s over 20 due jobs (the reference's 10 per 10 s over 100, scaled down)
    and 2 workers x 4 threads, with a retry among them: every retry is a start too. The
    attempts' start times (database clock) are checked over every span between two starts:
    a span of L µs holds at most COUNT x (L + PERIOD) / PERIOD of them, the burst included
    (so the whole drain takes at least (JOBS + 1 - COUNT) x PERIOD / COUNT)."""
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
    period_us = PERIOD * 1_000_000
    for first, start in enumerate(starts):
        for last in range(first, len(starts)):
            span_us = (starts[last] - start) // dt.timedelta(microseconds=1)
            held = last - first + 1
            assert held * period_us <= COUNT * (span_us + period_us), (first, last, span_us)


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
