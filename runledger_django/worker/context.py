"""``JobContext``: what a handler gets, and its writes to the job behind the lease fence."""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from django.db import connections

from ..domain import ClaimedJob, JobLease
from ..errors import Code, RunledgerError
from ..services._lease import lease_mismatch
from ..services.lifecycle import heartbeat_leases, update_job_progress
from ..services.workflows import step_context
from .atomic import AtomicCompletion, CompletingAttempt, complete_atomically


class RunningAttempt(CompletingAttempt, Protocol):
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


if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

T = TypeVar("T")


class JobContext:
    """The job a handler runs, and the only way it writes to that job.

    Every write is fenced by the lease: once the worker no longer holds the job (it was
    cancelled, its lease expired and was reaped, or its deadline passed) a write raises
    ``RunledgerError`` (``job.lease_owner_mismatch``, or ``job.timeout_exceeded`` past the
    deadline) and nothing is written; the handler's result will be discarded too, so it may
    as well stop. Inside the handler's own ``transaction.atomic()`` block a write joins that
    transaction, so a checkpoint can commit together with the work it records. Inside an
    atomic completion's transaction (``atomic=True``, ``complete_atomically``) these writes go
    on a connection of their own instead, so the job's row is not held locked until the commit
    (a slice's checkpoint commits with its writes through ``ContinueJob(checkpoint=...)``).
    """

    def __init__(self, execution: RunningAttempt, *, using: str) -> None:
        claimed = execution.claimed
        self._execution = execution
        self._using = using
        self._side: BaseDatabaseWrapper | None = None
        self._workflow: tuple[uuid.UUID, str, dict[str, Any]] | None = None
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

    # --- workflows ---

    @property
    def workflow_step_id(self) -> uuid.UUID | None:
        """The workflow step this job runs, or None for a plain job."""
        return self._execution.claimed.lease.workflow_step_id

    @property
    def workflow_run_id(self) -> uuid.UUID | None:
        """The workflow run of this job's step, or None for a plain job."""
        step = self._step()
        return None if step is None else step[0]

    @property
    def step_key(self) -> str | None:
        """The key of this job's workflow step, or None for a plain job."""
        step = self._step()
        return None if step is None else step[1]

    @property
    def upstream(self) -> dict[str, Any]:
        """The outputs of this step's direct prerequisites, by step key (None for one that
        finished without output, or did not succeed behind a ``when="terminal"`` edge); empty
        for a plain job. Read once, on first use."""
        step = self._step()
        return {} if step is None else dict(step[2])

    def _step(self) -> tuple[uuid.UUID, str, dict[str, Any]] | None:
        step_id = self.workflow_step_id
        if step_id is None:
            return None
        if self._workflow is None:
            self._workflow = step_context(step_id, using=self._using)
        return self._workflow

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
            self._write(
                lambda: update_job_progress(
                    self._execution.lease,
                    progress_done=done,
                    progress_total=total,
                    using=self._using,
                )
            )
        except RunledgerError as error:
            raise self._refused(error) from None

    def set_stage(self, stage: str) -> None:
        """Record what the handler is doing now (free text); writes a STAGE_CHANGED event."""
        self._check()
        try:
            self._write(
                lambda: update_job_progress(self._execution.lease, stage=stage, using=self._using)
            )
        except RunledgerError as error:
            raise self._refused(error) from None

    def save_checkpoint(self, value: Any) -> None:
        """Store JSON-native ``value`` as the job's checkpoint; a retry starts from it."""
        self._check()
        try:
            self._write(
                lambda: update_job_progress(
                    self._execution.lease, checkpoint=value, using=self._using
                )
            )
        except RunledgerError as error:
            raise self._refused(error) from None
        self.checkpoint = value

    def heartbeat(self) -> None:
        """Renew the lease now (the worker also does so every third of the lease)."""
        self._check()
        result = self._write(
            lambda: heartbeat_leases(
                [self._execution.lease],
                lease_seconds=self._execution.lease_seconds,
                using=self._using,
            )
        )
        if self.job_id in result.lost:
            self._execution.mark_lost("a heartbeat found the lease gone")
            raise lease_mismatch(self._execution.lease)

    # --- exactly-once completion -----------------------------------------------------------

    def complete_atomically(
        self, output: Any = None, *, using: str | None = None
    ) -> AbstractContextManager[AtomicCompletion]:
        """A block whose database writes commit together with this job's success.

        For the end of a handler, after slow external work: the block runs in a READ
        COMMITTED transaction on the queue's connection (so ``record_intent`` and
        ``enqueue_job`` in it join it), and when it exits the job's fenced SUCCEEDED with
        ``output`` (or the block's ``completion.output``) is written in that transaction,
        which then commits. A lost lease, the deadline, or any exception rolls everything
        back; the block raises ``RunledgerError`` ``job.lease_owner_mismatch`` when the lease
        was lost. ``ContinueJob`` raised in the block commits the continuation instead.
        Whatever the handler returns afterwards is not stored; the job is already done.

        Args:
            output: the job's output (JSON-native, or None).
            using: the database alias the block writes to, when given: it must be the
                queue's (``job.atomic_completion_wrong_database`` otherwise).

        Raises:
            RunledgerError: ``job.already_completed``, ``job.atomic_completion_wrong_database``,
                ``job.atomic_completion_requires_own_transaction`` (inside an atomic block),
                ``job.atomic_completion_unsupported_isolation``, before the block runs;
                ``job.lease_owner_mismatch``, ``job.timeout_exceeded``,
                ``job.invalid_output``, ``db.transaction_commit_unconfirmed``.
        """
        return complete_atomically(
            self._execution, using=self._using, output=output, database=using
        )

    def _write(self, write: Callable[[], T]) -> T:
        """Run a write to the job outside the handler's transaction when one is open on the
        queue's connection: inside it the job's row would stay locked until the commit, and
        the heartbeats that keep the lease alive could not renew it."""
        if not self._execution.in_transaction:
            return write()
        with self._side_connection():
            return write()

    @contextmanager
    def _side_connection(self) -> Iterator[None]:
        if self._side is None:
            self._side = connections.create_connection(self._using)
        main = connections[self._using]
        connections[self._using] = self._side
        try:
            yield
        finally:
            connections[self._using] = main

    def close(self) -> None:
        """Close the connection the job's writes used during a transaction (if any)."""
        if self._side is not None:
            self._side.close()
            self._side = None


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
