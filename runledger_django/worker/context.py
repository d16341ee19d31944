"""``JobContext``: what a handler gets, and its writes to the job behind the lease fence."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from typing import Any, Protocol

from ..domain import ClaimedJob, JobLease
from ..errors import Code, RunledgerError
from ..services._lease import lease_mismatch
from ..services.lifecycle import heartbeat_leases, update_job_progress


class RunningAttempt(Protocol):
    """What a context needs of the attempt it belongs to (``execution.Execution`` is the one):
    the claim, its deadline and lease, and the flag that the lease is gone. A protocol, so
    this module does not import the executor that builds the contexts."""

    claimed: ClaimedJob
    lease_seconds: int
    deadline: float
    """Monotonic time at which the handler has run out of time."""
    lost: threading.Event

    @property
    def lease(self) -> JobLease: ...

    def mark_lost(self, reason: str) -> None: ...


class JobContext:
    """The job a handler runs, and the only way it writes to that job.

    Every write is fenced by the lease: once the worker no longer holds the job (it was
    cancelled, its lease expired and was reaped, or its deadline passed) a write raises
    ``RunledgerError`` (``job.lease_owner_mismatch``, or ``job.timeout_exceeded`` past the
    deadline) and nothing is written; the handler's result will be discarded too, so it may
    as well stop. Inside the handler's own ``transaction.atomic()`` block a write joins that
    transaction, so a checkpoint can commit together with the work it records.
    """

    def __init__(self, execution: RunningAttempt, *, using: str) -> None:
        claimed = execution.claimed
        self._execution = execution
        self._using = using
        self.job_id: uuid.UUID = claimed.lease.job_id
        self.job_type: str = claimed.job_type
        self.organization_id: uuid.UUID | None = claimed.organization_id
        self.payload: Any = claimed.payload
        """The job's payload, decoded from JSON."""
        self.attempt: int = claimed.lease.attempt
        """1 on the first run of this run number."""
        self.max_attempts: int = claimed.max_attempts
        self.run_number: int = claimed.lease.run_number
        self.worker_id: str = claimed.lease.worker_id
        self.checkpoint: Any = claimed.checkpoint
        """The last saved checkpoint (from an earlier attempt too), or None."""
        self.deadline: dt.datetime = claimed.deadline
        """When the attempt times out (database clock): ``timeout_seconds`` after the claim."""

    # --- schedules ---

    @property
    def scheduled_for(self) -> dt.datetime | None:
        """The fire this job was made for (aware UTC, jitter included), when a schedule made
        it; None otherwise. A manual run ("run now") carries the time it was asked for."""
        return scheduled_for_of(self.payload)

    @property
    def schedule_name(self) -> str | None:
        """The name of the schedule that made this job, or None."""
        meta = _schedule_meta(self.payload)
        name = meta.get("schedule_name") if meta else None
        return name if isinstance(name, str) else None

    def __repr__(self) -> str:
        return (
            f"JobContext(job_id={self.job_id}, job_type={self.job_type!r}, "
            f"attempt={self.attempt}, run_number={self.run_number})"
        )

    @property
    def remaining(self) -> dt.timedelta:
        """Time left before the deadline (never negative)."""
        return dt.timedelta(seconds=max(0.0, self._execution.deadline - time.monotonic()))

    def _check(self) -> None:
        if self._execution.lost.is_set():
            raise lease_mismatch(self._execution.lease)
        if time.monotonic() >= self._execution.deadline:
            raise RunledgerError.for_code(
                Code.TIMEOUT_EXCEEDED, f"job {self.job_id} passed its deadline"
            )

    def _refused(self, error: RunledgerError) -> RunledgerError:
        if error.code == Code.LEASE_OWNER_MISMATCH:
            self._execution.mark_lost("a handler's write was refused by the lease fence")
        return error

    def set_progress(self, done: int, total: int) -> None:
        """Record progress (``done`` of ``total``); writes a PROGRESS event."""
        self._check()
        try:
            update_job_progress(
                self._execution.lease,
                progress_done=done,
                progress_total=total,
                using=self._using,
            )
        except RunledgerError as error:
            raise self._refused(error) from None

    def set_stage(self, stage: str) -> None:
        """Record what the handler is doing now (free text); writes a STAGE_CHANGED event."""
        self._check()
        try:
            update_job_progress(self._execution.lease, stage=stage, using=self._using)
        except RunledgerError as error:
            raise self._refused(error) from None

    def save_checkpoint(self, value: Any) -> None:
        """Store JSON-native ``value`` as the job's checkpoint; a retry starts from it."""
        self._check()
        try:
            update_job_progress(self._execution.lease, checkpoint=value, using=self._using)
        except RunledgerError as error:
            raise self._refused(error) from None
        self.checkpoint = value

    def heartbeat(self) -> None:
        """Renew the lease now (the worker also does so every third of the lease)."""
        self._check()
        result = heartbeat_leases(
            [self._execution.lease],
            lease_seconds=self._execution.lease_seconds,
            using=self._using,
        )
        if self.job_id in result.lost:
            self._execution.mark_lost("a heartbeat found the lease gone")
            raise lease_mismatch(self._execution.lease)


def _schedule_meta(payload: Any) -> dict[str, Any] | None:
    """The ``_schedule`` object a scheduler writes into a job's payload (the seed's form)."""
    if not isinstance(payload, dict):
        return None
    meta = payload.get("_schedule")
    return meta if isinstance(meta, dict) else None


def scheduled_for_of(payload: Any) -> dt.datetime | None:
    """``_schedule.scheduled_for`` of a payload as an aware UTC datetime, or None."""
    meta = _schedule_meta(payload)
    text = meta.get("scheduled_for") if meta else None
    if not isinstance(text, str) or not text.endswith("Z"):
        return None
    try:
        value = dt.datetime.fromisoformat(text[:-1] + "+00:00")
    except ValueError:
        return None
    return value.astimezone(dt.UTC)
