"""Running one claimed job: call its handler, then record the outcome behind the lease fence."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

from django.db import connections

from ..domain import ClaimedJob, FailureKind, JobFailure, JobLease, JobStatus
from ..errors import CATALOG, Code, RunledgerError
from ..services import tracing
from ..services._lease import lease_mismatch
from ..services.lifecycle import (
    complete_job_failure,
    complete_job_success,
    continue_job,
    encode_output,
)
from ..services.outage import is_outage
from .atomic import complete_atomically
from .completer import Completer
from .context import JobContext
from .outcomes import ContinueJob, failure_for, failure_from_exception
from .registry import Registry

logger = logging.getLogger(__name__)

T = TypeVar("T")

RunOutcome = Literal[
    "succeeded", "retried", "dead_lettered", "lease_lost", "persist_failed", "continued"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRun:
    """How one attempt ended, as the worker saw it (for reports, --json and progress)."""

    job_id: Any
    job_type: str
    run_number: int
    attempt: int
    worker_id: str
    outcome: RunOutcome
    error_code: str | None
    duration_seconds: float
    next_run_at: dt.datetime | None = None
    error: RunledgerError | None = None
    """Why recording the outcome failed (``persist_failed``)."""
    error_class: str | None = None
    """The dotted class of the exception the handler raised, for a failure it caused (an
    opt-in metrics label; not part of ``to_dict``)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("error")
        data.pop("error_class")
        data["job_id"] = str(self.job_id)
        data["duration_seconds"] = round(self.duration_seconds, 6)
        data["next_run_at"] = self.next_run_at.isoformat() if self.next_run_at else None
        return data


class Execution:
    """One attempt in flight: what the executor, the heartbeats and the worker loop share."""

    def __init__(self, claimed: ClaimedJob, *, lease_seconds: int) -> None:
        self.claimed = claimed
        self.lease_seconds = lease_seconds
        self.started = time.monotonic()
        self.deadline = self.started + max(claimed.timeout_seconds, 1)
        """Monotonic time at which the handler has run out of time."""
        self.lost = threading.Event()
        """The lease is gone (cancelled, reaped, timed out, heartbeat failed): write nothing."""
        self.done = threading.Event()
        """The handler returned (or raised) and the outcome was dealt with."""
        self.timed_out = False
        """The worker loop recorded this attempt's timeout while the handler still ran."""
        self.run: JobRun | None = None
        # --- exactly-once completion (worker/atomic.py) ---
        self.completing = False
        """The handler's own transaction is writing the job's end: the row is locked until its
        commit, and then the lease is over, so heartbeats and hand-backs leave it alone."""
        self.in_transaction = False
        """The handler runs inside its atomic completion's transaction."""
        self.completion: Literal["succeeded", "continued"] | None = None
        """The handler's transaction committed the job's end (an atomic completion)."""
        self.next_run_at: dt.datetime | None = None
        """When the next run of a job continued in the handler's transaction is due."""

    @property
    def lease(self) -> JobLease:
        return self.claimed.lease

    @property
    def active(self) -> bool:
        """Still the worker's to keep alive: running, lease held, not timed out."""
        return not (
            self.done.is_set()
            or self.lost.is_set()
            or self.timed_out
            or self.completing
            or self.completion is not None
        )

    def check_live(self) -> None:
        """Refuse to write once the lease is known lost or the deadline has passed."""
        if self.lost.is_set():
            raise lease_mismatch(self.lease)
        if time.monotonic() >= self.deadline:
            raise RunledgerError.for_code(
                Code.TIMEOUT_EXCEEDED, f"job {self.lease.job_id} passed its deadline"
            )

    def mark_lost(self, reason: str) -> None:
        if self.completing or self.completion is not None:
            return  # the job's end is being (or was) committed: its lease ended with it
        if not self.lost.is_set() and not self.done.is_set():
            self.lost.set()
            logger.warning(
                "job lease lost job_id=%s job_type=%s reason=%s",
                self.lease.job_id,
                self.claimed.job_type,
                reason,
            )

    def make_run(
        self,
        outcome: RunOutcome,
        error_code: str | None,
        *,
        next_run_at: dt.datetime | None = None,
        error: RunledgerError | None = None,
        error_class: str | None = None,
    ) -> JobRun:
        return JobRun(
            job_id=self.lease.job_id,
            job_type=self.claimed.job_type,
            run_number=self.lease.run_number,
            attempt=self.lease.attempt,
            worker_id=self.lease.worker_id,
            outcome=outcome,
            error_code=error_code,
            duration_seconds=time.monotonic() - self.started,
            next_run_at=next_run_at,
            error=error,
            error_class=error_class,
        )


def execute(
    execution: Execution, registry: Registry, *, using: str, completer: Completer | None = None
) -> JobRun:
    """Run the handler of a claimed job and record how it ended; return that ending.

    A result observed at or after the deadline counts as a timeout. After a lost lease
    nothing is written (the reaper or the new owner deals with the job). Never raises for
    what the handler does; a failure to record the outcome is returned as ``persist_failed``.
    With tracing on, the attempt runs inside its ``process`` span (services/tracing.py).
    """
    traced = tracing.run_tracing()
    if traced is None:
        return _execute(execution, registry, using=using, completer=completer)
    return tracing.process_traced(
        traced,
        execution.claimed,
        lambda: _execute(execution, registry, using=using, completer=completer),
    )


def _execute(
    execution: Execution, registry: Registry, *, using: str, completer: Completer | None
) -> JobRun:
    claimed = execution.claimed
    job_id = claimed.lease.job_id
    attempt = claimed.lease.attempt
    handler = registry.get(claimed.job_type)
    failure: JobFailure | None = None
    output: Any = None
    continuation: ContinueJob | None = None
    if claimed.decode_error is not None:
        failure = failure_for(
            FailureKind.TERMINAL,
            Code.INVALID_PERSISTED_JOB,
            claimed.decode_error,
            attempt=attempt,
            job_id=job_id,
        )
    elif handler is None:
        failure = failure_for(
            FailureKind.TERMINAL,
            Code.HANDLER_NOT_REGISTERED,
            CATALOG[Code.HANDLER_NOT_REGISTERED][1],
            attempt=attempt,
            job_id=job_id,
        )
    else:
        context = JobContext(execution, using=using)
        depths = _transaction_depths()
        try:
            if handler.atomic:
                with complete_atomically(execution, using=using) as completion:
                    completion.output = handler.func(context)
            else:
                output = handler.func(context)
        except ContinueJob as request:
            continuation = request
        except BaseException as exc:  # a handler's failure is data, whatever it raised
            if _is_lease_loss(exc):
                execution.mark_lost("a fenced write was refused")
            if (
                isinstance(exc, RunledgerError)
                and exc.code == Code.DB_TRANSACTION_COMMIT_UNCONFIRMED
            ):
                # Nobody knows yet whether the handler's transaction committed: write nothing;
                # the fence and the reaper settle the job either way.
                discard_open_transactions(depths)
                return execution.make_run("persist_failed", exc.code, error=exc)
            failure = failure_from_exception(exc, attempt=attempt, job_id=job_id)
        finally:
            context.close()
        if execution.completion is not None:
            return _completed_atomically(execution, depths, failure)
        if discard_open_transactions(depths) and failure is None:
            # Its work rolled back with the transaction: reporting success would be a lie.
            failure = failure_for(
                FailureKind.RETRYABLE,
                Code.HANDLER_LEFT_TRANSACTION_OPEN,
                CATALOG[Code.HANDLER_LEFT_TRANSACTION_OPEN][1],
                attempt=attempt,
                job_id=job_id,
            )
        if time.monotonic() >= execution.deadline:
            failure = failure_for(
                FailureKind.TIMEOUT,
                Code.TIMEOUT_EXCEEDED,
                CATALOG[Code.TIMEOUT_EXCEEDED][1],
                attempt=attempt,
                job_id=job_id,
            )
    if execution.lost.is_set():
        return execution.make_run("lease_lost", Code.LEASE_OWNER_MISMATCH.value)
    if continuation is not None and failure is None:
        return _continue(execution, continuation, using=using)
    return _record(execution, failure, output, using=using, completer=completer)


def _completed_atomically(
    execution: Execution, depths: dict[str, int], failure: JobFailure | None
) -> JobRun:
    """The handler's transaction committed the job's end: nothing is left to write, whatever
    the handler did after its atomic block."""
    discard_open_transactions(depths)
    if failure is not None and failure.code != Code.ALREADY_COMPLETED:
        logger.warning(
            "job handler failed after its atomic completion committed; the job stays "
            "completed job_id=%s error_code=%s",
            execution.lease.job_id,
            failure.code,
        )
    if execution.completion == "continued":
        return execution.make_run("continued", None, next_run_at=execution.next_run_at)
    return execution.make_run("succeeded", None)


def _continue(execution: Execution, request: ContinueJob, *, using: str) -> JobRun:
    """Record a continuation outside any transaction of the handler's; an unusable delay or
    checkpoint fails the attempt terminally, as an unusable output does."""
    lease = execution.lease
    try:
        delay = request.delay_microseconds()
        checkpoint = {} if request.keeps_checkpoint else {"checkpoint": request.checkpoint}
        outcome = _persist(
            lambda: continue_job(lease, delay_microseconds=delay, using=using, **checkpoint),
            using=using,
        )
    except RunledgerError as error:
        if error.code in (Code.INVALID_CONTINUATION_DELAY, Code.INVALID_CHECKPOINT):
            failure = failure_for(
                FailureKind.TERMINAL,
                error.code,
                error.client_message,
                attempt=lease.attempt,
                job_id=lease.job_id,
            )
            return _record(execution, failure, None, using=using)
        if error.code == Code.LEASE_OWNER_MISMATCH:
            execution.mark_lost("the continuation was refused by the lease fence")
            return execution.make_run("lease_lost", error.code)
        logger.error(
            "could not record a job continuation job_id=%s error_code=%s error_sqlstate=%s",
            lease.job_id,
            error.code,
            error.sqlstate or "none",
            extra={"runledger": {"job_id": str(lease.job_id), **error.log_fields()}},
        )
        return execution.make_run("persist_failed", error.code, error=error)
    return execution.make_run("continued", None, next_run_at=outcome.next_run_at)


def _transaction_depths() -> dict[str, int]:
    """How deep in transactions each open connection of this thread is (autocommit off
    counts as one level)."""
    return {
        connection.alias: len(connection.atomic_blocks) + (not connection.get_autocommit())
        for connection in connections.all(initialized_only=True)
        if connection.connection is not None
    }


def discard_open_transactions(before: dict[str, int] | None = None) -> bool:
    """Find transactions a handler left open (a manual ``set_autocommit(False)``, an atomic
    block entered by hand) compared with ``before``; return whether there was one.

    The outcome is written on the same thread's connection: inside a leftover transaction it
    would be rolled back with it. A connection that was outside any transaction before is
    rolled back and closed; the next use opens a fresh one.
    """
    found = False
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        depth_before = (before or {}).get(connection.alias, 0)
        depth = len(connection.atomic_blocks) + (not connection.get_autocommit())
        if depth <= depth_before:
            continue
        found = True
        if depth_before == 0:
            # Leave the abandoned atomic state first, or close() keeps the wrapper "inside a
            # transaction" and refuses to reconnect.
            connection.in_atomic_block = False
            connection.atomic_blocks = []
            connection.savepoint_ids = []
            connection.needs_rollback = False
            connection.close()
    return found


def drop_dead_connections() -> None:
    """Close this thread's connections that no longer answer, so the next query reconnects."""
    for connection in connections.all(initialized_only=True):
        if connection.connection is not None and not connection.is_usable():
            connection.close()


def tidy_connections() -> None:
    """After a job: drop connections the handler broke, keep healthy ones (a worker's
    connections live as long as the worker, whatever CONN_MAX_AGE says for requests, unless
    CONN_MAX_AGE is set to a limit, which is honoured)."""
    discard_open_transactions()
    for connection in connections.all(initialized_only=True):
        if connection.connection is None:
            continue
        if connection.settings_dict.get("CONN_MAX_AGE"):
            connection.close_if_unusable_or_obsolete()
        elif connection.errors_occurred and not connection.is_usable():
            connection.close()
        else:
            connection.errors_occurred = False


def _is_lease_loss(exc: BaseException) -> bool:
    return isinstance(exc, RunledgerError) and exc.code == Code.LEASE_OWNER_MISMATCH


def _persist(write: Callable[[], T], *, using: str) -> T:
    """Run an outcome write, and once more on a new connection when the one it used turned
    out dead (terminated, or the server restarted, while the executor waited for work): a
    blip must not cost the attempt its outcome. The write is fenced by the lease, so running
    it twice can never record the attempt twice."""
    try:
        return write()
    except RunledgerError as error:
        connection = connections[using]
        if not is_outage(error) or connection.in_atomic_block:
            raise
        connection.close()
        return write()


def _succeed(lease: JobLease, output: Any, completer: Completer | None, *, using: str) -> None:
    """Record a success, through the completer when the worker has one."""
    if completer is None:
        complete_job_success(lease, output=output, using=using)
        return
    text = encode_output(output)
    try:
        recorded = completer.succeed(lease, text)
    except RunledgerError:
        # The batch failed on one bad row or on the writer's connection: written alone, on
        # this thread's connection, only this success's own trouble can fail it.
        complete_job_success(lease, output=output, using=using)
        return
    if not recorded:
        raise lease_mismatch(lease)


def _record(
    execution: Execution,
    failure: JobFailure | None,
    output: Any,
    *,
    using: str,
    completer: Completer | None = None,
) -> JobRun:
    lease = execution.lease
    try:
        if failure is None:
            try:
                _persist(lambda: _succeed(lease, output, completer, using=using), using=using)
            except RunledgerError as error:
                if error.code != Code.INVALID_OUTPUT:
                    raise
                failure = failure_for(
                    FailureKind.TERMINAL,
                    Code.INVALID_OUTPUT,
                    CATALOG[Code.INVALID_OUTPUT][1],
                    attempt=lease.attempt,
                    job_id=lease.job_id,
                )
            else:
                return execution.make_run("succeeded", None)
        checked = failure
        outcome = _persist(lambda: complete_job_failure(lease, checked, using=using), using=using)
    except RunledgerError as error:
        if error.code == Code.LEASE_OWNER_MISMATCH:
            execution.mark_lost("the outcome was refused by the lease fence")
            return execution.make_run("lease_lost", error.code)
        logger.error(
            "could not record a job outcome job_id=%s error_code=%s error_sqlstate=%s",
            lease.job_id,
            error.code,
            error.sqlstate or "none",
            extra={"runledger": {"job_id": str(lease.job_id), **error.log_fields()}},
        )
        return execution.make_run("persist_failed", error.code, error=error)
    if outcome.status == JobStatus.DEAD_LETTERED:
        logger.warning(
            "job dead-lettered job_id=%s job_type=%s attempt=%d error_code=%s",
            lease.job_id,
            execution.claimed.job_type,
            lease.attempt,
            failure.code,
        )
        return execution.make_run("dead_lettered", failure.code, error_class=failure.error_class)
    logger.info(
        "job retry scheduled job_id=%s job_type=%s attempt=%d error_code=%s",
        lease.job_id,
        execution.claimed.job_type,
        lease.attempt,
        failure.code,
    )
    return execution.make_run(
        "retried", failure.code, next_run_at=outcome.next_run_at, error_class=failure.error_class
    )


def record_timeout(execution: Execution, *, using: str) -> JobRun | None:
    """The worker loop's side of a deadline: fail the attempt while its handler still runs.

    Returns None when the handler's own outcome got there first (the fence decides).
    """
    lease = execution.lease
    failure = failure_for(
        FailureKind.TIMEOUT,
        Code.TIMEOUT_EXCEEDED,
        CATALOG[Code.TIMEOUT_EXCEEDED][1],
        attempt=lease.attempt,
        job_id=lease.job_id,
    )
    try:
        outcome = complete_job_failure(lease, failure, using=using)
    except RunledgerError as error:
        if error.code == Code.LEASE_OWNER_MISMATCH:
            return None
        raise
    execution.timed_out = True
    logger.warning(
        "job handler passed its deadline job_id=%s job_type=%s attempt=%d",
        lease.job_id,
        execution.claimed.job_type,
        lease.attempt,
    )
    if outcome.status == JobStatus.DEAD_LETTERED:
        return execution.make_run("dead_lettered", failure.code)
    return execution.make_run("retried", failure.code, next_run_at=outcome.next_run_at)
