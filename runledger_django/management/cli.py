"""What the runledger commands share: argument types, error mapping, progress, signals.

Not a command module (it sits outside ``commands/``), so Django does not list it.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import signal
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import FrameType

from django.core.management.base import CommandError, OutputWrapper

from ..domain import PAGE_LIMIT_MAX, RETENTION_BATCH_MAX
from ..errors import RunledgerError
from ..validation import validate_job_type

_DURATION_PART = re.compile(r"(\d+)([wdhms])")
_DURATION = re.compile(r"(?:\d+[wdhms])+")
_UNIT_SECONDS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}

LIBRARY_LOGGER = "runledger_django"


def duration(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``45s`` (``w`` for weeks; parts combine: ``1d12h``)."""
    value = text.strip().lower()
    if not _DURATION.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number and a unit, such as 7d, 12h, 30m or 45s"
        )
    seconds = sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(value))
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: must be positive")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r}: too long") from None


def age_text(seconds: float) -> str:
    """Echo the duration back compactly (``7d``, ``1d12h``)."""
    remaining = int(seconds)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def _int_in(text: str, low: int, high: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid {what} {text!r}: not an integer") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"invalid {what} {value}: must be {low} to {high}")
    return value


def bounded_int(text: str, low: int, high: int, what: str) -> int:
    """An integer from ``low`` to ``high`` (argparse type helper)."""
    return _int_in(text, low, high, what)


def timestamp(text: str) -> datetime:
    """An ISO 8601 date-time with an offset (``2026-05-01T00:00Z``); a bare date is UTC
    midnight."""
    value = text.strip()
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid time {text!r}: use ISO 8601") from None
    if parsed.tzinfo is None:
        if "T" in value or " " in value:
            raise argparse.ArgumentTypeError(
                f"invalid time {text!r}: give an offset, such as Z or +02:00"
            )
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def page_limit(text: str) -> int:
    """A page or batch size accepted by the services: 1 to 1000."""
    return _int_in(text, 1, PAGE_LIMIT_MAX, "limit")


def prune_batch_size(text: str) -> int:
    return _int_in(text, 1, RETENTION_BATCH_MAX, "batch size")


def offset(text: str) -> int:
    return _int_in(text, 0, 2**63 - 1, "offset")


def queue_name(text: str) -> str:
    """A queue name: non-blank text (Django's Tasks API names queues freely)."""
    value = text.strip()
    if not value or "\x00" in value:
        raise argparse.ArgumentTypeError(f"invalid queue {text!r}: must not be blank")
    return value


def port(text: str) -> int:
    """A TCP port: 0 (any free port) to 65535."""
    return _int_in(text, 0, 65_535, "port")


def concurrency(text: str) -> int:
    """Handler threads of one worker: 1 to 256 (each holds a database connection)."""
    return _int_in(text, 1, 256, "concurrency")


def seconds(text: str) -> float:
    """A non-negative, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid seconds {text!r}: not a number") from None
    if not (math.isfinite(value) and 0 <= value <= threading.TIMEOUT_MAX):
        raise argparse.ArgumentTypeError(f"invalid seconds {text!r}: must be 0 or more")
    return value


def interval(text: str) -> float:
    """Seconds between idle passes: a positive, finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid interval {text!r}: not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"invalid interval {text!r}: must be positive")
    return value


def organization_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid organization id {text!r}: not a UUID") from None


def job_type(text: str) -> str:
    """A job type as the services accept it (rejected here, before any SQL runs)."""
    try:
        return validate_job_type(text)
    except RunledgerError as error:
        raise argparse.ArgumentTypeError(f"invalid job type: {error.client_message}") from None


@contextmanager
def runledger_errors() -> Iterator[None]:
    """Report a RunledgerError as ``code: client message`` and exit status 1.

    The internal message and database text stay in the logs' sanitized fields, never on the
    terminal of whoever runs the command.
    """
    try:
        yield
    except RunledgerError as error:
        raise CommandError(f"{error.code}: {error.client_message}") from error


@contextmanager
def log_level_from_verbosity(verbosity: int) -> Iterator[None]:
    """-v0 keeps only errors, -v1 leaves logging as configured, -v2 INFO, -v3 DEBUG; restored
    afterwards because call_command runs inside long-lived processes too."""
    logger = logging.getLogger(LIBRARY_LOGGER)
    previous = logger.level
    levels = {0: logging.ERROR, 2: logging.INFO, 3: logging.DEBUG}
    if verbosity in levels:
        logger.setLevel(levels[verbosity])
    try:
        yield
    finally:
        logger.setLevel(previous)


class StopEvent(threading.Event):
    """A stop flag a signal handler can raise without risking a deadlock.

    ``Event.set`` takes a lock that the interrupted main thread may be holding inside
    ``Event.wait``; a handler calling it directly could block forever. ``request_stop`` marks
    the flag lock-free (so ``is_set`` sees it at once) and hands the wake-up to a thread.
    """

    def __init__(self) -> None:
        super().__init__()
        self._requested = False

    def request_stop(self) -> None:
        self._requested = True
        threading.Thread(target=self.set, name="runledger-stop", daemon=True).start()

    def is_set(self) -> bool:
        return self._requested or super().is_set()


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(stop: StopEvent, force: StopEvent | None = None) -> Iterator[bool]:
    """Turn SIGTERM and SIGINT into ``stop`` for the duration; restore the previous handlers.

    With ``force``, a second signal (an impatient operator, or a supervisor's second TERM)
    raises ``force`` as well. Yields whether handlers were installed: Python only allows that
    in the main thread (a command run through call_command from a worker thread stops through
    ``stop`` alone).
    """
    if threading.current_thread() is not threading.main_thread():
        yield False
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if force is not None and stop.is_set():
            force.request_stop()
        stop.request_stop()

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        yield True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Progress:
    """Progress of a long drain or prune: a live counter on a terminal, else one line per step.

    Silent at verbosity 0. On a terminal each update rewrites the same line (carriage return);
    ``done`` ends that line so the summary starts on a fresh one.
    """

    def __init__(self, stdout: OutputWrapper, *, verbosity: int) -> None:
        self.stdout = stdout
        self.enabled = verbosity >= 1
        self.live = self.enabled and stdout.isatty()
        self._width = 0

    def update(self, live_text: str, line: str) -> None:
        if not self.enabled:
            return
        if self.live:
            padding = " " * max(0, self._width - len(live_text))
            self._width = len(live_text)
            self.stdout.write(f"\r{live_text}{padding}", ending="")
            self.stdout.flush()
        else:
            self.stdout.write(line)

    def done(self) -> None:
        if self.live and self._width:
            self.stdout.write("")
            self._width = 0
