"""Riding out database outages in long-running loops (workers, promoters).

A loop reports each failure and each success and gets back how long to wait. A lost or
refused connection (or a server shutting down or starting up) is an *outage*: one line is
logged when it starts and one when it ends, never one per retry, the waits grow to a cap with
jitter so a fleet of processes does not reconnect in lockstep, and past the configured limit
the loop is told to give up, so a supervisor restarts the process. Any other failure (a lock
timeout, say) is logged each time and retried after the same kind of wait, without a limit.
"""

from __future__ import annotations

import logging
import random
import threading
import time

from ..db.classify import is_session_fatal
from ..errors import RunledgerError

EXIT_OUTAGE = 75
"""The exit status of a long-running command that gave up on the database (EX_TEMPFAIL)."""

BACKOFF_FIRST_SECONDS = 0.25
BACKOFF_CAP_SECONDS = 10.0


class OutageLimitExceededError(Exception):
    """The database stayed unreachable for longer than the outage limit."""

    def __init__(self, seconds: float, error: RunledgerError | None) -> None:
        super().__init__(f"the database stayed unreachable for {seconds:.0f} s")
        self.seconds = seconds
        self.error = error


def is_outage(error: RunledgerError) -> bool:
    """True when the database itself is unreachable or going away, not one statement failing."""
    cause = error.__cause__
    return cause is not None and is_session_fatal(cause)


def _backoff(failures: int) -> float:
    capped = min(BACKOFF_CAP_SECONDS, BACKOFF_FIRST_SECONDS * 2.0 ** min(failures - 1, 30))
    return capped * random.uniform(0.5, 1.0)  # noqa: S311  (jitter, not security)


class Outage:
    """One process's database trouble: backoff, logging, and the give-up limit.

    Thread-safe, so the loops of one worker process share it and an outage is logged once.
    """

    def __init__(self, *, limit_seconds: float, logger: logging.Logger, what: str) -> None:
        self.limit_seconds = limit_seconds
        self.logger = logger
        self.what = what
        self.started: float | None = None
        self.failures = 0
        self._lock = threading.Lock()

    @property
    def ongoing(self) -> bool:
        return self.started is not None

    def failed(self, error: RunledgerError) -> float:
        """Record a failure; return the seconds to wait before the next try.

        Raises:
            OutageLimitExceededError: the outage has lasted longer than the limit.
        """
        with self._lock:
            now = time.monotonic()
            self.failures += 1
            if not is_outage(error):
                self.logger.warning(
                    "%s: database operation failed, retrying error_code=%s error_sqlstate=%s",
                    self.what,
                    error.code,
                    error.sqlstate or "none",
                    extra={"runledger": error.log_fields()},
                )
                return _backoff(self.failures)
            if self.started is None:
                self.started = now
                self.logger.warning(
                    "%s: database unreachable, retrying with backoff for up to %.0f s "
                    "error_code=%s error_sqlstate=%s",
                    self.what,
                    self.limit_seconds,
                    error.code,
                    error.sqlstate or "none",
                    extra={"runledger": error.log_fields()},
                )
            elapsed = now - self.started
            if elapsed >= self.limit_seconds:
                raise OutageLimitExceededError(elapsed, error)
            return min(_backoff(self.failures), self.limit_seconds - elapsed)

    def succeeded(self) -> None:
        """Record a success; logs the end of an outage once."""
        with self._lock:
            if self.started is not None:
                self.logger.warning(
                    "%s: database reachable again after %.1f s",
                    self.what,
                    time.monotonic() - self.started,
                )
            self.started = None
            self.failures = 0
