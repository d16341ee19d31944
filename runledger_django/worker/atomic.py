"""Exactly-once database effects: a handler's writes and its job's end in one transaction.

``complete_atomically`` is the block behind ``JobContext.complete_atomically`` and behind
``@job_handler(atomic=True)`` (whose whole handler is the block). The block runs in a READ
COMMITTED transaction on the queue's connection; when it exits, the job's fenced success (or,
for a ``ContinueJob`` raised in it, its continuation) is written in that same transaction,
then it commits. A lost lease (reaped, cancelled, handed back, past the deadline, another
worker's attempt) matches nothing: everything rolls back and the block raises
``job.lease_owner_mismatch``. Heartbeats go on meanwhile on the heartbeat thread's own
connection; the job row is locked only from the completion statement to the commit.

A COMMIT whose answer is lost (the connection broke) is settled by reading the job's attempt
row (``services.atomic.settle_commit``): committed, the block ends normally; not committed,
the commit's error is raised as any failure of the block would be.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal, Protocol

from django.db import DatabaseError, InterfaceError, connections

from ..domain import JobLease
from ..errors import Code, RunledgerError
from ..services.atomic import (
    atomic_transaction,
    completing,
    refuse_open_transaction,
    settle_commit,
    untouched_transaction,
)
from ..services.lifecycle import complete_job_success, continue_job
from ..services.outage import is_outage
from .outcomes import ContinueJob

logger = logging.getLogger(__name__)

SETTLE_SECONDS_MAX = 30.0
"""At most this long a worker keeps trying to learn a lost commit's outcome (a restarting
server); then it leaves the job to the fence and the reaper, which need no answer."""


class CompletingAttempt(Protocol):
    """What an atomic completion reads and marks on its attempt (``execution.Execution``): a
    protocol, so this module does not import the executor."""

    lease_seconds: int
    completing: bool
    in_transaction: bool
    completion: Literal["succeeded", "continued"] | None
    next_run_at: dt.datetime | None

    @property
    def lease(self) -> JobLease: ...

    def check_live(self) -> None: ...

    def mark_lost(self, reason: str) -> None: ...


class AtomicCompletion:
    """What an atomic block completes its job with: set ``output`` inside the block to
    change the output given to ``complete_atomically``."""

    __slots__ = ("output",)

    def __init__(self, output: Any) -> None:
        self.output = output


def _complete(
    execution: CompletingAttempt,
    lease: JobLease,
    completion: AtomicCompletion,
    continuation: ContinueJob | None,
    using: str,
) -> None:
    """The fenced success, or the continuation the block raised."""
    if continuation is None:
        complete_job_success(lease, output=completion.output, using=using)
        return
    execution.next_run_at = continue_job(
        lease,
        delay_microseconds=continuation.delay_microseconds(),
        using=using,
        **({} if continuation.keeps_checkpoint else {"checkpoint": continuation.checkpoint}),
    ).next_run_at


def _settle(
    execution: CompletingAttempt, lease: JobLease, using: str, error: BaseException
) -> None:
    """Learn from the database whether a completion whose commit went unanswered committed;
    re-raise ``error`` when it did not."""
    committed = settle_commit(
        lease, using=using, within_seconds=min(SETTLE_SECONDS_MAX, execution.lease_seconds)
    )
    logger.warning(
        "an atomic completion's commit failed; settled from the job's row job_id=%s committed=%s",
        lease.job_id,
        committed,
    )
    if not committed:
        execution.completing = False
        raise error


def _refuse_other_databases(using: str) -> None:
    """Writes in a transaction open on another alias would commit on their own, before or
    after the job's end: not exactly once."""
    for connection in connections.all(initialized_only=True):
        if connection.alias != using and connection.in_atomic_block:
            raise RunledgerError.for_code(
                Code.ATOMIC_COMPLETION_WRONG_DATABASE,
                f"an atomic completion on {using!r} was started inside a transaction on "
                f"{connection.alias!r}",
            )


@contextmanager
def complete_atomically(
    execution: CompletingAttempt,
    *,
    using: str,
    output: Any = None,
    database: str | None = None,
) -> Iterator[AtomicCompletion]:
    """Run the block in the job's completing transaction (module docstring).

    Raises:
        RunledgerError: before the block runs, and with nothing written:
            ``job.already_completed`` (this attempt already completed atomically),
            ``job.atomic_completion_wrong_database`` (``database`` is not the queue's, or a
            transaction is open on another alias), ``job.atomic_completion_requires_own_
            transaction``, ``job.atomic_completion_unsupported_isolation``,
            ``job.lease_owner_mismatch``, ``job.timeout_exceeded``. After it, with the
            block's writes rolled back: ``job.lease_owner_mismatch``, ``job.invalid_output``,
            ``job.invalid_continuation_delay``, ``job.invalid_checkpoint``, ``job.timeout_
            exceeded``, ``db.transaction_commit_unconfirmed``; and whatever the block raised.
        ContinueJob: re-raised once the continuation committed.
    """
    if execution.completion is not None or execution.completing:
        raise RunledgerError.for_code(
            Code.ALREADY_COMPLETED, f"job {execution.lease.job_id} was already completed"
        )
    if database is not None and database != using:
        raise RunledgerError.for_code(
            Code.ATOMIC_COMPLETION_WRONG_DATABASE,
            f"the job queue is on {using!r}, not {database!r}",
        )
    _refuse_other_databases(using)
    refuse_open_transaction(using)
    execution.check_live()
    completion = AtomicCompletion(output)
    continuation: ContinueJob | None = None
    written = False
    lease = execution.lease
    try:
        with atomic_transaction(using):
            execution.in_transaction = True
            try:
                yield completion
            except ContinueJob as request:
                continuation = request
            finally:
                execution.in_transaction = False
            _refuse_other_databases(using)
            execution.check_live()
            execution.completing = True  # heartbeats leave the row alone from here on
            deferred = untouched_transaction(using)
            if not deferred:
                try:
                    with completing(using):
                        _complete(execution, lease, completion, continuation, using)
                except BaseException:
                    execution.completing = False
                    raise
                written = True
        if deferred:
            # The block sent nothing on the queue's connection, so its transaction never began
            # (and its exit sent no COMMIT): the completion alone is the transaction, one round
            # trip, and whether it committed is settled as a COMMIT's would be.
            written = True
            try:
                _complete(execution, lease, completion, continuation, using)
            except RunledgerError as error:
                if not is_outage(error):
                    execution.completing = False
                    raise
                _settle(execution, lease, using, error)
            except BaseException:
                execution.completing = False
                raise
    except (DatabaseError, InterfaceError) as error:
        if not written:
            raise
        # The commit itself failed or went unanswered: ask the database what happened.
        _settle(execution, lease, using, error)
    except RunledgerError as error:
        if error.code == Code.LEASE_OWNER_MISMATCH:
            execution.mark_lost("the atomic completion was refused by the lease fence")
        raise
    execution.completion = "succeeded" if continuation is None else "continued"
    if continuation is not None:
        raise continuation
