"""Riding out database outages in long-running loops (workers, promoters).

A loop reports each failure and each success; it gets back how long to wait. One line is
logged when an outage starts and one when it ends, never one per retry, and the waits grow to
a cap with jitter so a fleet of processes does not reconnect in lockstep. Past the configured
limit the loop is told to give up, so a supervisor can restart the process.
"""

from __future__ import annotations

import logging
import random
import time

from ..errors import RunledgerError

BACKOFF_FIRST_SECONDS = 0.25
BACKOFF_CAP_SECONDS = 10.0


class OutageLimitExceededError(Exception):
    """The database stayed unreachable for longer than the outage limit."""

    def __init__(self, seconds: float, error: RunledgerError | None) -> None:
        super().__init__(f"database unreachable for {seconds:.0f} s")
        self.seconds = seconds
        self.error = error


class Outage:
    """Tracks one loop's database failures: backoff, logging, and the give-up limit."""

    def __init__(self, *, limit_seconds: float, logger: logging.Logger, what: str) -> None:
        self.limit_seconds = limit_seconds
        self.logger = logger
        self.what = what
        self.started: float | None = None
        self.failures = 0
        self.last_error: RunledgerError | None = None

    @property
    def ongoing(self) -> bool:
        return self.started is not None

    def failed(self, error: RunledgerError) -> float:
        """Record a failure; return the seconds to wait before the next try.

        Raises:
            OutageLimitExceededError: the outage has lasted longer than the limit.
        """
        now = time.monotonic()
        self.last_error = error
        if self.started is None:
            self.started = now
            self.logger.warning(
                "%s: database unavailable, retrying with backoff error_code=%s error_sqlstate=%s",
                self.what,
                error.code,
                error.sqlstate or "none",
                extra={"runledger": error.log_fields()},
            )
        self.failures += 1
        elapsed = now - self.started
        if elapsed >= self.limit_seconds:
            raise OutageLimitExceededError(elapsed, error)
        backoff = min(
            BACKOFF_CAP_SECONDS, BACKOFF_FIRST_SECONDS * 2.0 ** min(self.failures - 1, 30)
        )
        wait = backoff * random.uniform(0.5, 1.0)  # noqa: S311  (jitter, not security)
        return min(wait, max(0.0, self.limit_seconds - elapsed))

    def succeeded(self) -> None:
        """Record a success; logs the end of an outage once."""
        if self.started is None:
            return
        self.logger.warning(
            "%s: database available again after %.1f s (%d failed attempts)",
            self.what,
            time.monotonic() - self.started,
            self.failures,
        )
        self.started = None
        self.failures = 0
        self.last_error = None
