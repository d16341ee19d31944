"""Exactly-once completion: the transaction an atomic handler's writes and its job's completion
commit in, and what a commit whose outcome was lost turned out to be.

The completion itself is the ordinary fenced success (``lifecycle.complete_job_success``) or
continuation (``lifecycle.continue_job``), written inside this transaction: whatever a success
does (attempt closed, event, execution resource released, and what later features add to that
function) happens in the handler's transaction too, so the handler's effects and the job's end
commit together or not at all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from django.db import connections, transaction
from psycopg import pq

from ..db import lifecycle_queries
from ..db.transaction import (
    ensure_read_committed,
    last_statement_of_transaction,
    run_capped_together,
)
from ..domain import AttemptOutcome, JobLease
from ..errors import Code, RunledgerError
from ._lease import LOCK_CAP_MS, STATEMENT_CAP_MS, lease_params, validate_lease
from .outage import is_outage

SETTLE_RETRY_SECONDS = 0.2
"""How soon a settlement that could not reach the database tries again."""

_CHECKED_SESSION = "runledger_read_committed_session"
"""The database session (psycopg connection) whose transactions were found READ COMMITTED:
its isolation is read once per session, not once per job (one round trip less for each). A
new session (a reconnect, a fresh connection) is checked again; a session whose default a
handler changes with SET SESSION CHARACTERISTICS is its own doing."""

_COMMITTED = frozenset({AttemptOutcome.SUCCEEDED.value, AttemptOutcome.CONTINUED.value})


def refuse_open_transaction(using: str) -> None:
    """The completion must be what commits: inside a transaction already open on the queue's
    connection, its commit would be the caller's, later, or never.

    Raises:
        RunledgerError: ``job.atomic_completion_requires_own_transaction``.
    """
    connection = connections[using]
    if connection.in_atomic_block or not connection.get_autocommit():
        raise RunledgerError.for_code(
            Code.ATOMIC_COMPLETION_REQUIRES_OWN_TRANSACTION,
            f"an atomic completion was started inside a transaction on {using!r}",
        )


@contextmanager
def atomic_transaction(using: str) -> Iterator[None]:
    """Own the READ COMMITTED transaction of an atomic handler on the queue's database.

    It is the connection's own isolation: a project that made another level the default is
    refused rather than silently changed, since under REPEATABLE READ or SERIALIZABLE the
    completion would fail on every heartbeat that renewed the lease meanwhile (the level is
    read once per database session). Commits when
    the block exits normally (the caller writes the completion last), rolls back when it
    raises.

    Raises:
        RunledgerError: ``job.atomic_completion_requires_own_transaction``;
            ``job.atomic_completion_unsupported_isolation`` (before anything is written).
    """
    refuse_open_transaction(using)
    connection = connections[using]
    with transaction.atomic(using=using):
        session = connection.connection
        if session is None or getattr(connection, _CHECKED_SESSION, None) is not session:
            with connection.cursor() as cursor:
                ensure_read_committed(
                    cursor,
                    operation="an atomic job completion",
                    code=Code.ATOMIC_COMPLETION_UNSUPPORTED_ISOLATION,
                )
            setattr(connection, _CHECKED_SESSION, connection.connection)
        yield


def untouched_transaction(using: str) -> bool:
    """Whether the atomic block open on ``using`` has sent nothing yet: the driver begins a
    transaction with the first statement, so none began, and the block's exit sends no COMMIT.
    Its completion is then a transaction of its own (one round trip instead of three)."""
    session = connections[using].connection
    if session is None:
        return False
    return bool(session.info.transaction_status == pq.TransactionStatus.IDLE)


def completing(using: str) -> AbstractContextManager[None]:
    """Around the completion statement of an atomic transaction: it is the transaction's last
    before the COMMIT, so it costs one round trip (no savepoint, no settings restored)."""
    return last_statement_of_transaction(using)


def settle_commit(lease: JobLease, *, using: str, within_seconds: float) -> bool:
    """Whether the completion of ``lease`` committed, after its COMMIT failed or went
    unanswered (the connection was lost): read from the database, never guessed.

    The old connection is closed. On a new one, a first statement waits for the job's row
    lock, which the completion took and its transaction holds until the server has settled
    it; a second reads the attempt's outcome with a snapshot taken after that wait. The
    database being unreachable (a restart) is retried for ``within_seconds``.

    Transaction: its own, on a new connection.

    Raises:
        RunledgerError: ``db.transaction_commit_unconfirmed`` when the database did not
            answer in time; any other database error.
    """
    checked = validate_lease(lease)
    params = lease_params(checked)
    deadline = time.monotonic() + within_seconds
    while True:
        connections[using].close()
        try:
            results = run_capped_together(
                using,
                (lifecycle_queries.LOCK_JOB_ROW, lifecycle_queries.ATTEMPT_OUTCOME),
                params,
                lock_ms=LOCK_CAP_MS,
                statement_ms=STATEMENT_CAP_MS,
                tag="",
                context="settle an atomic completion",
            )
        except RunledgerError as error:
            busy = error.sqlstate == "55P03"  # the old transaction still holds the row
            if not (busy or is_outage(error)) or time.monotonic() >= deadline:
                if busy or is_outage(error):
                    raise RunledgerError.for_code(
                        Code.DB_TRANSACTION_COMMIT_UNCONFIRMED,
                        f"job {checked.job_id}: the atomic completion's commit is unknown",
                    ) from error
                raise
            time.sleep(SETTLE_RETRY_SECONDS)
            continue
        outcome = results[1]
        return bool(outcome) and str(outcome[0][0]) in _COMMITTED
