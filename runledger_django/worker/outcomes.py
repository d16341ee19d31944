"""What a handler's end means: the exceptions it may raise, backoff, and failure records."""

from __future__ import annotations

import datetime as dt
import math
import traceback
import uuid
from typing import Any

from ..domain import FailureKind, JobFailure
from ..errors import CATALOG, Code, RunledgerError
from ..validation import INT32_MAX

ERROR_MESSAGE_MAX_CHARS = 2000
BACKOFF_BASE_MS = 5_000
BACKOFF_CAP_MS = 300_000
BACKOFF_FLOOR_MS = 1_000
BACKOFF_JITTER_MS = 1_000


class RetryJob(Exception):  # noqa: N818  (a request, not an error: the SPEC's name)
    """Raise from a handler to run the job again later.

    ``after`` (a timedelta or seconds) or ``at`` (an aware datetime) sets when; with neither,
    the backoff policy decides. It still counts as an attempt: once ``max_attempts`` attempts
    have failed, the job is dead-lettered.
    """

    def __init__(
        self,
        message: str = "",
        *,
        after: dt.timedelta | float | None = None,
        at: dt.datetime | None = None,
    ) -> None:
        super().__init__(message)
        if after is not None and at is not None:
            raise TypeError("RetryJob takes after= or at=, not both")
        self.after_ms: int | None = None
        self.at: dt.datetime | None = None
        if after is not None:
            seconds = after.total_seconds() if isinstance(after, dt.timedelta) else after
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                raise TypeError("RetryJob(after=) takes a timedelta or a number of seconds")
            if not math.isfinite(seconds) or seconds < 0 or seconds * 1000 > INT32_MAX:
                raise ValueError("RetryJob(after=) must be 0 to about 24 days")
            self.after_ms = math.ceil(seconds * 1000)  # never earlier than asked
        if at is not None:
            if not isinstance(at, dt.datetime) or at.utcoffset() is None:
                raise ValueError("RetryJob(at=) must be an aware datetime")
            self.at = at


CONTINUATION_DELAY_MAX = dt.timedelta(days=36_525)
"""The longest continuation delay: a hundred years, which the database clock adds exactly."""

_KEEP: Any = object()


class ContinueJob(Exception):  # noqa: N818  (a request, not an error: the SPEC's name)
    """Raise from a handler to end this slice of a long job and run it again as its next run.

    The same job comes back PENDING with ``run_number`` + 1, attempt 0 and a fresh attempt
    budget, due ``after`` (a timedelta or seconds; default now), with ``checkpoint`` stored
    (omit it to keep the stored one). Its execution resource is released between slices. In
    an ``atomic=True`` handler the slice's writes and the checkpoint commit together.
    Continuations are not bounded by ``max_attempts``: the handler decides when it is done.
    """

    def __init__(
        self, *, after: dt.timedelta | float | None = None, checkpoint: Any = _KEEP
    ) -> None:
        super().__init__("continue the job")
        self.after = after
        self.checkpoint = checkpoint

    @property
    def keeps_checkpoint(self) -> bool:
        return self.checkpoint is _KEEP

    def delay_microseconds(self) -> int:
        """The delay, rounded up to whole microseconds (never earlier than asked).

        Raises:
            RunledgerError: ``job.invalid_continuation_delay`` (negative, not a number, or
                more than a hundred years).
        """
        after = self.after
        if after is None:
            return 0
        if isinstance(after, dt.timedelta):
            if not dt.timedelta(0) <= after <= CONTINUATION_DELAY_MAX:
                raise _invalid_delay(after)
            return (after.days * 86_400 + after.seconds) * 1_000_000 + after.microseconds
        if isinstance(after, bool) or not isinstance(after, int | float):
            raise _invalid_delay(after)
        if not math.isfinite(after) or not 0 <= after <= CONTINUATION_DELAY_MAX.total_seconds():
            raise _invalid_delay(after)
        return math.ceil(after * 1_000_000)


def _invalid_delay(value: object) -> RunledgerError:
    return RunledgerError.for_code(
        Code.INVALID_CONTINUATION_DELAY,
        f"continuation delay {value!r} is not 0 to 100 years (a timedelta or seconds)",
    )


class TerminalJobError(Exception):
    """Raise from a handler to dead-letter the job at once: retrying cannot help.

    ``code`` (default ``job.terminal_failure``) is stored as the job's error code.
    """

    def __init__(self, message: str = "", *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or Code.TERMINAL_FAILURE.value


TERMINAL_CODES = frozenset(
    {
        Code.ATOMIC_COMPLETION_UNSUPPORTED_ISOLATION,
        Code.ATOMIC_COMPLETION_WRONG_DATABASE,
        Code.ATOMIC_COMPLETION_REQUIRES_OWN_TRANSACTION,
        Code.INVALID_CONTINUATION_DELAY,
        Code.INVALID_OUTPUT,
    }
)
"""Codes of a handler's end that retrying cannot change (the handler's or the project's setup,
or a value it returns): the attempt dead-letters with that code."""


def compute_retry_delay_ms(attempt: int, job_id: uuid.UUID) -> int:
    """The policy backoff after failed ``attempt`` (reference 7): about 10 s, 20 s, 40 s ...
    capped at 5 minutes, with a jitter of up to half a second either way that is fixed per
    job, so retries of many jobs spread out but one job's schedule is predictable."""
    exponent = min(max(attempt, 1), 10)
    capped: int = min(BACKOFF_BASE_MS << exponent, BACKOFF_CAP_MS)
    jitter: int = job_id.int % BACKOFF_JITTER_MS - BACKOFF_JITTER_MS // 2
    return max(capped + jitter, BACKOFF_FLOOR_MS)


def class_path(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


def _message(exc: BaseException, fallback: Code) -> str:
    try:
        text = str(exc).strip()
    except Exception:  # a broken __str__ must not keep the failure from being recorded
        text = ""
    described = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if isinstance(exc, RetryJob | TerminalJobError):
        described = text or CATALOG[fallback][1]
    return described[:ERROR_MESSAGE_MAX_CHARS]


def failure_for(
    kind: FailureKind, code: Code | str, message: str, *, attempt: int, job_id: uuid.UUID
) -> JobFailure:
    """A failure without an exception behind it (timeouts, missing handlers, bad output)."""
    return JobFailure(
        kind=kind,
        code=str(code),
        message=message,
        policy_retry_delay_ms=compute_retry_delay_ms(attempt, job_id),
    )


def failure_from_exception(exc: BaseException, *, attempt: int, job_id: uuid.UUID) -> JobFailure:
    """Turn what a handler raised into the failure to record (reference 12.3).

    ``RetryJob`` retries at its time, ``TerminalJobError`` dead-letters, a ``RunledgerError``
    of a fenced write keeps its code, any other exception retries with backoff, and a
    ``BaseException`` that is not an ``Exception`` (SystemExit, KeyboardInterrupt raised by
    the handler) is a panic, which dead-letters.
    """

    def failure(kind: FailureKind, code: str, message: str) -> JobFailure:
        return JobFailure(
            kind=kind,
            code=code,
            message=message,
            error_class=class_path(exc),
            traceback="".join(traceback.format_exception(exc)),
            policy_retry_delay_ms=compute_retry_delay_ms(attempt, job_id),
            retry_after_ms=exc.after_ms if isinstance(exc, RetryJob) else None,
            retry_at=exc.at if isinstance(exc, RetryJob) else None,
        )

    if isinstance(exc, RetryJob):
        return failure(
            FailureKind.RETRYABLE, Code.RETRY_REQUESTED.value, _message(exc, Code.RETRY_REQUESTED)
        )
    if isinstance(exc, TerminalJobError):
        return failure(FailureKind.TERMINAL, exc.code, _message(exc, Code.TERMINAL_FAILURE))
    if isinstance(exc, RunledgerError) and exc.code == Code.TIMEOUT_EXCEEDED:
        return failure(FailureKind.TIMEOUT, exc.code, exc.client_message)
    if isinstance(exc, RunledgerError) and exc.code in TERMINAL_CODES:
        return failure(FailureKind.TERMINAL, exc.code, exc.client_message)
    if not isinstance(exc, Exception):
        return failure(
            FailureKind.PANICKED, Code.HANDLER_PANIC.value, _message(exc, Code.HANDLER_PANIC)
        )
    return failure(
        FailureKind.RETRYABLE, Code.HANDLER_FAILED.value, _message(exc, Code.HANDLER_FAILED)
    )
