"""Group commit of successes: executors that finish together share one statement.

One fenced statement per success spends most of the database's time planning, committing and
flushing the same small write. Here the first executor to hand in a success becomes the writer:
if other jobs of the worker are in flight it waits a moment for theirs (jobs claimed together
finish together), otherwise it writes at once (at low load a success costs what it always
did). Executors finishing while a write runs queue theirs, and the next of them writes the
whole queue in one statement. No thread of its own, no connection of its own: a writer is
always an executor that has a success to record. On a deep queue the same statement claims
the next jobs for the executors it frees (``Refill``): a busy worker then spends one commit per
batch of jobs instead of two. Failures stay one statement each: they are rarer, and each
decides its own retry or dead letter.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from django.db import connections

from ..domain import ClaimedJob, JobLease
from ..errors import Code, RunledgerError
from ..services.claim import complete_and_claim
from ..services.lifecycle import complete_jobs_success

BATCH_MAX = 64
"""Successes one statement records at most."""
GATHER_SECONDS = 0.001
GATHER_GAP_SECONDS = 0.0003
"""A writer waits for the successes of the other jobs in flight before it writes, while they
keep arriving (at most this gap apart) and at most GATHER_SECONDS in all. Jobs claimed
together tend to finish together: without the wait the first of them would always be written
alone and the rest in a second statement."""


@dataclass(eq=False)
class _Success:
    lease: JobLease
    output_text: str | None
    recorded: bool = False
    error: RunledgerError | None = None
    done: bool = False


@dataclass(frozen=True)
class Refill:
    """How a worker takes new jobs in the statement that records successes: each success
    frees its executor, so the write claims as many next jobs as it records successes."""

    job_types: Callable[[], Sequence[str] | None]
    """The job types to claim now, or None when the worker wants no jobs from this write (a
    shallow queue, which its loop claims on wake-ups, or a worker that is stopping)."""
    claimed: Callable[[list[ClaimedJob], int], None]
    """Takes the jobs claimed and how many were asked for (it runs them, or hands them
    back when the worker began to stop meanwhile); no jobs when the write failed. Must not
    raise."""
    lease_seconds: int


@dataclass
class Completer:
    """Shared by the executors of one worker process."""

    using: str
    running: Callable[[], int] | None = None
    """How many jobs of the worker are in flight (their successes may be about to arrive);
    None: write at once."""
    refill: Refill | None = None
    gather_seconds: float = GATHER_SECONDS
    gather_gap_seconds: float = GATHER_GAP_SECONDS
    _pending: list[_Success] = field(default_factory=list)
    _writing: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _changed: threading.Condition = field(init=False)
    """Notified when a write ends: its successes are done, and another may begin."""
    _arrived: threading.Condition = field(init=False)
    """Notified when a success is handed in: only a gathering writer waits on it, so an
    arrival wakes one thread, not every executor queued behind the write."""

    def __post_init__(self) -> None:
        self._changed = threading.Condition(self._lock)
        self._arrived = threading.Condition(self._lock)

    def succeed(self, lease: JobLease, output_text: str | None) -> bool:
        """Record ``lease``'s success; return False when the lease fence refused it.

        Raises:
            RunledgerError: what the statement that carried this success raised (nothing of
                the batch is then recorded: the caller writes its own success alone).
        """
        mine = _Success(lease, output_text)
        with self._changed:
            self._pending.append(mine)
            self._arrived.notify()  # a gathering writer counts the arrivals
            while True:
                while self._writing and not mine.done:
                    self._changed.wait()
                if mine.done:
                    break
                self._writing = True  # followers wait while this writer gathers
                self._gather()
                batch = self._pending[:BATCH_MAX]
                del self._pending[:BATCH_MAX]
                self._changed.release()
                try:
                    self._write(batch)
                finally:
                    self._changed.acquire()
                    self._writing = False
                    self._changed.notify_all()
        if mine.error is not None:
            raise mine.error
        return mine.recorded

    def _gather(self) -> None:
        """Wait (the lock held by the caller is released meanwhile) for more successes: until
        every job in flight has handed in its own, a batch is full, none came for
        ``gather_gap_seconds``, or ``gather_seconds`` have passed."""
        if self.running is None:
            return
        deadline = time.monotonic() + self.gather_seconds
        while len(self._pending) < min(BATCH_MAX, self.running()):
            left = deadline - time.monotonic()
            arrived = len(self._pending)
            if left <= 0:
                return
            self._arrived.wait(min(left, self.gather_gap_seconds))
            if len(self._pending) == arrived:
                return

    def _write(self, batch: list[_Success]) -> None:
        recorded: set[uuid.UUID] = set()
        successes = [(item.lease, item.output_text) for item in batch]
        job_types = self.refill.job_types() if self.refill is not None else None
        claimed: list[ClaimedJob] | None = None
        try:
            if self.refill is not None and job_types:
                recorded, claimed = complete_and_claim(
                    successes,
                    job_types,
                    limit=len(batch),
                    lease_seconds=self.refill.lease_seconds,
                    using=self.using,
                )
            else:
                recorded = complete_jobs_success(successes, using=self.using)
        except RunledgerError as error:
            # A connection the error broke (a server restart) is not this thread's to keep.
            connections[self.using].close_if_unusable_or_obsolete()
            for item in batch:
                item.error = error
        except Exception as exc:  # the others wait on this write: tell them it failed
            failed = RunledgerError.for_code(
                Code.DB_QUERY_FAILED, f"recording successes failed: {type(exc).__name__}"
            )
            for item in batch:
                item.error = failed
            raise
        finally:
            for item in batch:
                item.recorded = item.lease.job_id in recorded
                item.done = True
        if self.refill is not None and job_types:
            # After a failed write too (nothing claimed): the loop claims again, and its claim
            # is the one that isolates a job that cannot be leased.
            self.refill.claimed(claimed or [], len(batch))
