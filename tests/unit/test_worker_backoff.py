"""The policy backoff after a failed attempt (reference 7): about 10 s, 20 s, 40 s ... capped at
five minutes, with a jitter of at most half a second either way that is fixed per job."""

from __future__ import annotations

import uuid

import pytest

from runledger_django.worker.outcomes import (
    BACKOFF_CAP_MS,
    BACKOFF_FLOOR_MS,
    compute_retry_delay_ms,
)

JOB = uuid.UUID("0190f6c2-1c2d-7a3b-8c4d-5e6f708192a4")
MANY = [uuid.UUID(int=n * 7919 + 12345) for n in range(2000)]


def jitter_of(job_id: uuid.UUID) -> int:
    return job_id.int % 1000 - 500


@pytest.mark.parametrize(
    ("attempt", "base_ms"),
    [(1, 10_000), (2, 20_000), (3, 40_000), (4, 80_000), (5, 160_000), (6, 300_000)],
)
def test_compute_retry_delay_ms__doubles_from_ten_seconds(attempt: int, base_ms: int) -> None:
    assert compute_retry_delay_ms(attempt, JOB) == base_ms + jitter_of(JOB)


@pytest.mark.parametrize("attempt", [6, 7, 10, 11, 100, 2**31 - 1])
def test_compute_retry_delay_ms__capped_at_five_minutes(attempt: int) -> None:
    for job_id in MANY[:50]:
        assert compute_retry_delay_ms(attempt, job_id) == BACKOFF_CAP_MS + jitter_of(job_id)


@pytest.mark.parametrize("attempt", [0, -1, -(2**31)])
def test_compute_retry_delay_ms__attempt_below_one__treated_as_the_first(attempt: int) -> None:
    assert compute_retry_delay_ms(attempt, JOB) == compute_retry_delay_ms(1, JOB)


def test_compute_retry_delay_ms__jitter_fixed_per_job_within_half_a_second() -> None:
    delays = [compute_retry_delay_ms(1, job_id) for job_id in MANY]

    assert [compute_retry_delay_ms(1, job_id) for job_id in MANY] == delays
    assert min(delays) == 10_000 - 500
    assert max(delays) == 10_000 + 499
    assert len(set(delays)) == 1000  # every jitter value occurs: retries spread out


def test_compute_retry_delay_ms__never_below_the_one_second_floor() -> None:
    assert BACKOFF_FLOOR_MS == 1_000
    assert min(
        compute_retry_delay_ms(attempt, job_id) for attempt in (1, 2) for job_id in MANY
    ) >= (BACKOFF_FLOOR_MS)
