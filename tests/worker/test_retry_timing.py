"""Retry timing of a failed attempt (reference 7.3; upstream queue_retry_delay_validation.rs
and the unit tests of lifecycle/failure.rs).

SPEC differs from the reference on purpose: a handler's requested time (``RetryJob(after=)``
or ``at=``) is used exactly, even when it is earlier than the policy backoff; the policy delay
is still recorded for the audit. The rows these writes leave are compared whole in
test_state_machine.py (row 6).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from runledger_django import RunledgerError
from runledger_django.domain import FailureKind, FailureOutcome, JobFailure, JobStatus
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.conftest import run_sql
from tests.worker.conftest import Enqueue, attempt_rows, claim_one, db_clock, event_rows, job_row

pytestmark = pytest.mark.django_db

SECOND = dt.timedelta(seconds=1)


def failure(kind: FailureKind = FailureKind.RETRYABLE, **timing: Any) -> JobFailure:
    values: dict[str, Any] = {"policy_retry_delay_ms": 10_000, **timing}
    return JobFailure(kind=kind, code="job.handler_failed", message="m", **values)


INVALID_TIMING = [
    {"policy_retry_delay_ms": None},
    {"policy_retry_delay_ms": 0},
    {"policy_retry_delay_ms": -1},
    {"policy_retry_delay_ms": 2**31},
    {"policy_retry_delay_ms": 1.5},
    {"policy_retry_delay_ms": True},
    {"retry_after_ms": -1},
    {"retry_after_ms": 2**31},
    {"retry_after_ms": 2.5},
    {"retry_at": dt.datetime(2031, 1, 1)},
    {"retry_at": "2031-01-01T00:00:00Z"},
]


@pytest.mark.parametrize("timing", INVALID_TIMING, ids=repr)
def test_complete_job_failure__retryable_with_invalid_timing__rejected_lease_untouched(
    enqueue: Enqueue, timing: dict[str, Any]
) -> None:
    """retryable_failure_rejects_invalid_retry_timing_without_mutating_lease."""
    job_id = enqueue()
    lease = claim_one().lease
    before = (job_row(job_id), attempt_rows(job_id), event_rows(job_id))

    with pytest.raises(RunledgerError) as raised:
        complete_job_failure(lease, failure(**timing))

    assert (raised.value.code, raised.value.category) == ("job.invalid_retry_timing", "validation")
    assert (job_row(job_id), attempt_rows(job_id), event_rows(job_id)) == before
    complete_job_success(lease)  # the lease is still the worker's


@pytest.mark.parametrize("timing", INVALID_TIMING, ids=repr)
@pytest.mark.parametrize(
    ("kind", "exhausted"),
    [(FailureKind.TERMINAL, False), (FailureKind.PANICKED, False), (FailureKind.RETRYABLE, True)],
    ids=["terminal", "panicked", "exhausted"],
)
def test_complete_job_failure__dead_letter_with_invalid_timing__timing_ignored(
    enqueue: Enqueue, kind: FailureKind, exhausted: bool, timing: dict[str, Any]
) -> None:
    """terminal_panicked_and_exhausted_failures_ignore_invalid_retry_timing: retry timing is
    neither checked nor used when the failure dead-letters the job."""
    job_id = enqueue()
    if exhausted:
        run_sql("UPDATE runledger_job_queue SET attempt = 2 WHERE id = %s", [job_id])
    lease = claim_one().lease

    outcome = complete_job_failure(lease, failure(kind, **timing))

    assert outcome == FailureOutcome(status=JobStatus.DEAD_LETTERED, next_run_at=None)
    attempt = attempt_rows(job_id)[-1]
    assert (attempt["outcome"], attempt["retry_delay_ms"], attempt["retry_timing_source"]) == (
        "DEAD_LETTERED",
        None,
        None,
    )
    reason = event_rows(job_id)[-1]["payload"]["reason"]
    assert reason == ("ATTEMPTS_EXHAUSTED" if exhausted else "FAILURE_KIND_NON_RETRYABLE")


def test_complete_job_failure__zero_relative_hint__policy_decides(enqueue: Enqueue) -> None:
    """zero_relative_retry_hint_falls_back_to_policy: RetryJob(after=0) asks for nothing."""
    job_id = enqueue()
    lease = claim_one().lease
    before = db_clock()

    complete_job_failure(lease, failure(retry_after_ms=0))

    attempt = attempt_rows(job_id)[0]
    assert (attempt["requested_retry_not_before"], attempt["retry_timing_source"]) == (
        None,
        "POLICY",
    )
    assert job_row(job_id)["next_run_at"] >= before + 10 * SECOND


def test_complete_job_failure__hint_earlier_than_policy__hint_wins_policy_audited(
    enqueue: Enqueue,
) -> None:
    """Our answer to shorter_handler_retry_hint_is_audited_while_policy_backoff_wins and
    past_handler_not_before_cannot_shorten_policy_backoff: SPEC lets the handler's time win;
    the policy's delay stays on the attempt row and in the event."""
    job_id = enqueue()
    lease = claim_one().lease
    at = db_clock() - 60 * SECOND

    complete_job_failure(lease, failure(retry_at=at))

    assert job_row(job_id)["next_run_at"] == at
    attempt = attempt_rows(job_id)[0]
    assert (attempt["retry_delay_ms"], attempt["effective_next_run_at"]) == (10_000, at)
    assert event_rows(job_id)[-1]["payload"]["retry_delay_ms"] == 10_000
    assert claim_one().lease.attempt == 2  # due at once


def test_complete_job_failure__at_microsecond_precision__kept(enqueue: Enqueue) -> None:
    job_id = enqueue()
    lease = claim_one().lease
    at = dt.datetime(2031, 2, 3, 4, 5, 6, 789012, tzinfo=dt.timezone(dt.timedelta(hours=5)))

    complete_job_failure(lease, failure(retry_at=at))

    assert job_row(job_id)["next_run_at"] == at
