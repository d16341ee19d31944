"""What a handler's end means: RetryJob and TerminalJobError, and the failure recorded for
whatever a handler raises (reference 7 and 12.3)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from runledger_django import RetryJob, RunledgerError, TerminalJobError
from runledger_django.domain import FailureKind, JobFailure
from runledger_django.worker.outcomes import (
    ERROR_MESSAGE_MAX_CHARS,
    compute_retry_delay_ms,
    failure_for,
    failure_from_exception,
)

JOB = uuid.UUID("0190f6c2-1c2d-7a3b-8c4d-5e6f708192a4")
AT = dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def raised(exc: BaseException) -> BaseException:
    """The exception with its traceback, as a handler would leave it."""
    try:
        raise exc
    except BaseException as caught:
        return caught


def test_failure_kind__retry_eligibility__exhaustive() -> None:
    """job_failure_kind_retry_eligibility_is_exhaustive."""
    assert {kind: kind.is_retryable for kind in FailureKind} == {
        FailureKind.RETRYABLE: True,
        FailureKind.TERMINAL: False,
        FailureKind.PANICKED: False,
        FailureKind.TIMEOUT: True,
        FailureKind.LEASE_EXPIRED: True,
    }


@pytest.mark.parametrize(
    ("after", "after_ms"),
    [
        (dt.timedelta(seconds=30), 30_000),
        (30, 30_000),
        (0.0015, 2),
        (dt.timedelta(microseconds=1), 1),
        (0, 0),
        (dt.timedelta(days=24), 2_073_600_000),
    ],
    ids=repr,
)
def test_retry_job__after__whole_milliseconds_rounded_up(after: object, after_ms: int) -> None:
    """retry_delay_rounds_up_to_positive_milliseconds: never earlier than asked."""
    retry = RetryJob(after=after)  # type: ignore[arg-type]
    assert (retry.after_ms, retry.at) == (after_ms, None)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"after": -1}, ValueError),
        ({"after": float("inf")}, ValueError),
        ({"after": float("nan")}, ValueError),
        ({"after": dt.timedelta(days=25)}, ValueError),
        ({"after": True}, TypeError),
        ({"after": "30"}, TypeError),
        ({"at": dt.datetime(2031, 1, 1)}, ValueError),
        ({"at": "2031-01-01"}, ValueError),
        ({"after": 1, "at": AT}, TypeError),
    ],
    ids=repr,
)
def test_retry_job__invalid_timing__raises_in_the_handler(
    kwargs: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        RetryJob(**kwargs)  # type: ignore[arg-type]


def test_failure_from_exception__retry_job__retryable_with_its_timing() -> None:
    failure = failure_from_exception(
        raised(RetryJob("rate limited", after=dt.timedelta(seconds=5))), attempt=2, job_id=JOB
    )

    assert failure.kind == FailureKind.RETRYABLE
    assert (failure.code, failure.message) == ("job.retry_requested", "rate limited")
    assert (failure.retry_after_ms, failure.retry_at) == (5_000, None)
    assert failure.policy_retry_delay_ms == compute_retry_delay_ms(2, JOB)
    assert failure.error_class == "runledger_django.worker.outcomes.RetryJob"
    assert failure_from_exception(raised(RetryJob(at=AT)), attempt=1, job_id=JOB).retry_at == AT
    assert failure_from_exception(raised(RetryJob()), attempt=1, job_id=JOB).message == (
        "Job handler asked to be retried."
    )


def test_failure_from_exception__terminal_error__terminal_with_its_code() -> None:
    failure = failure_from_exception(
        raised(TerminalJobError("gone", code="shop.gone")), attempt=1, job_id=JOB
    )
    assert (failure.kind, failure.code, failure.message) == (
        FailureKind.TERMINAL,
        "shop.gone",
        "gone",
    )
    default = failure_from_exception(raised(TerminalJobError()), attempt=1, job_id=JOB)
    assert (default.code, default.message) == (
        "job.terminal_failure",
        "Job handler failed permanently.",
    )


def test_failure_from_exception__ordinary_exception__retryable_with_class_and_traceback() -> None:
    failure = failure_from_exception(raised(KeyError("order")), attempt=1, job_id=JOB)

    assert (failure.kind, failure.code, failure.message) == (
        FailureKind.RETRYABLE,
        "job.handler_failed",
        "KeyError: 'order'",
    )
    assert failure.error_class == "builtins.KeyError"
    assert failure.traceback is not None and "KeyError: 'order'" in failure.traceback


@pytest.mark.parametrize("panic", [KeyboardInterrupt(), SystemExit(3), GeneratorExit()], ids=repr)
def test_failure_from_exception__base_exception__panicked(panic: BaseException) -> None:
    failure = failure_from_exception(raised(panic), attempt=1, job_id=JOB)
    assert (failure.kind, failure.code) == (FailureKind.PANICKED, "job.handler_panic")


def test_failure_from_exception__timeout_from_a_fenced_write__timeout_kind() -> None:
    error = RunledgerError.for_code("job.timeout_exceeded", "past the deadline")  # type: ignore[arg-type]
    failure = failure_from_exception(raised(error), attempt=1, job_id=JOB)
    assert (failure.kind, failure.code, failure.message) == (
        FailureKind.TIMEOUT,
        "job.timeout_exceeded",
        "Job exceeded the configured timeout.",
    )


def test_failure_from_exception__long_message__truncated() -> None:
    failure = failure_from_exception(raised(ValueError("x" * 5000)), attempt=1, job_id=JOB)
    assert len(failure.message) == ERROR_MESSAGE_MAX_CHARS
    assert failure.message.startswith("ValueError: xxx")


def test_failure_from_exception__str_raises__type_name_as_message() -> None:
    class UnprintableError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    failure = failure_from_exception(raised(UnprintableError()), attempt=1, job_id=JOB)
    assert (failure.kind, failure.message) == (FailureKind.RETRYABLE, "UnprintableError")


def test_failure_for__no_exception__policy_delay_without_error_class() -> None:
    assert failure_for(
        FailureKind.TIMEOUT, "job.timeout_exceeded", "late", attempt=3, job_id=JOB
    ) == JobFailure(
        kind=FailureKind.TIMEOUT,
        code="job.timeout_exceeded",
        message="late",
        policy_retry_delay_ms=compute_retry_delay_ms(3, JOB),
    )
