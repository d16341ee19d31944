"""Retention of promoted intents: bounded cutoff cleanup and exact-job cleanup (reference 4.5).

Pending and conflicted intents are never deleted here: they are work and evidence.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext

from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper

from ..db import operations_queries, session_queries
from ..db.transaction import (
    LOCK_TIMEOUT,
    STATEMENT_TIMEOUT,
    cap_timeout,
    ensure_read_committed,
    execute,
    restore_setting,
)
from ..domain import RETENTION_BATCH_MAX, coerce_uuid
from ..errors import Code, RunledgerError
from ..validation import aware_utc, validate_page

DEFAULT_USING = "default"
STATEMENT_TIMEOUT_MS = 35_000
FENCE_WAIT_MS = 30_000
"""Longer than a promotion pass's 25 s budget, so a fence wait outlasts any pass in flight."""
ROW_LOCK_TIMEOUT_MS = 5_000
PLANNER_SETTINGS = (
    "enable_sort",
    "enable_seqscan",
    "enable_bitmapscan",
    "enable_nestloop",
    "enable_mergejoin",
    "jit",
)
"""The settings PIN_PLANNER returns first, in its order (and RESTORE_PLANNER's parameters)."""


def delete_promoted_intents_before(
    cutoff: dt.datetime, *, limit: int, using: str = DEFAULT_USING
) -> int:
    """Delete up to ``limit`` intents promoted before ``cutoff``; return how many went.

    One bounded statement (in its own transaction outside an atomic block), under the planner
    settings of a promotion pass so that it walks the oldest promotions whatever the statistics
    say. Rows that duplicate recorders hold are skipped, not waited for. Not coordinated with queue retention: deleting
    an intent removes the foreign-key fence of its job.

    Raises:
        RunledgerError: ``job.invalid_pagination`` unless ``1 <= limit <= 1000``;
            ``job.invalid_argument`` for a naive cutoff.
    """
    page = validate_page(limit, 0)
    checked_cutoff = aware_utc(cutoff, Code.INVALID_ARGUMENT, "cutoff")
    connection = connections[using]
    # In autocommit mode the pinned settings need a transaction to last past their statement.
    owned = connection.get_autocommit()
    with transaction.atomic(using=using) if owned else nullcontext(), connection.cursor() as cursor:
        with pinned_planner(cursor, restore=not owned):
            deleted = execute(
                cursor,
                operations_queries.DELETE_PROMOTED_BEFORE,
                {"cutoff": checked_cutoff, "limit": page.limit},
                context="delete promoted job enqueue intents",
            ).rowcount
    return int(deleted)


@contextmanager
def pinned_planner(cursor: CursorWrapper, *, restore: bool) -> Iterator[None]:
    """Pin the planner as a promotion pass does (db.session_queries.PIN_PLANNER) for the statements in
    the block, then put the transaction's own settings back when ``restore``.

    A statement that fails aborts the transaction, which reverts the settings with it.
    """
    row = execute(
        cursor, session_queries.PIN_PLANNER, None, context="pin retention plans"
    ).fetchone()
    yield
    if restore and row is not None:
        previous = dict(zip(PLANNER_SETTINGS, row[: len(PLANNER_SETTINGS)], strict=True))
        execute(
            cursor, session_queries.RESTORE_PLANNER, previous, context="restore planner settings"
        )


def count_promoted_intents_before(cutoff: dt.datetime, *, using: str = DEFAULT_USING) -> int:
    """How many promoted intents a cutoff cleanup would delete (for dry runs)."""
    checked_cutoff = aware_utc(cutoff, Code.INVALID_ARGUMENT, "cutoff")
    with connections[using].cursor() as cursor:
        row = execute(
            cursor,
            operations_queries.COUNT_PROMOTED_BEFORE,
            {"cutoff": checked_cutoff},
            context="count promoted job enqueue intents",
        ).fetchone()
    return int(row[0]) if row else 0


def _job_ids(values: Iterable[uuid.UUID | str]) -> list[uuid.UUID]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "job_ids must be an iterable of ids")
    ids: list[uuid.UUID] = []
    for value in values:
        ids.append(coerce_uuid(value, Code.INVALID_ARGUMENT))
        if len(ids) > RETENTION_BATCH_MAX:
            break
    return ids


def delete_promoted_intents_for_jobs(
    job_ids: Iterable[uuid.UUID | str], *, using: str = DEFAULT_USING
) -> int:
    """Delete the promoted intents of exactly these jobs and lock the jobs, before you delete them.

    Transaction: requires the caller's atomic block (the queue-retention transaction). Call it
    as that transaction's first lock-taking operation, delete the jobs right after, and commit
    promptly. It waits up to 30 s for in-flight promotion passes (the exclusive side of the
    retention fence), then at most 5 s per row lock; the caller's own lock and statement
    timeouts are restored exactly. A timeout aborts the caller's transaction: roll back and
    retry the whole retention transaction.

    Returns:
        The number of intents deleted (0 for an empty list, which runs no SQL).

    Raises:
        RunledgerError: ``job.intent_retention_requires_transaction``;
            ``job.intent_retention_batch_too_large`` (more than 1,000 ids);
            ``job.intent_retention_unsupported_isolation``; ``db.query_failed`` on a timeout.
    """
    connection = connections[using]
    if not connection.in_atomic_block:
        raise RunledgerError.for_code(
            Code.INTENT_RETENTION_REQUIRES_TRANSACTION,
            "delete_promoted_intents_for_jobs was called outside an atomic block",
        )
    ids = _job_ids(job_ids)
    if not ids:
        return 0
    if len(ids) > RETENTION_BATCH_MAX:
        raise RunledgerError.for_code(
            Code.INTENT_RETENTION_BATCH_TOO_LARGE,
            f"retention batch of more than {RETENTION_BATCH_MAX} job ids",
        )
    params = {"job_ids": ids}
    with connection.cursor() as cursor:
        # Before any lock: an older snapshot would miss promotions committed just before the fence.
        ensure_read_committed(
            cursor,
            operation="job enqueue intent retention",
            code=Code.INTENT_RETENTION_UNSUPPORTED_ISOLATION,
        )
        previous_statement = cap_timeout(cursor, STATEMENT_TIMEOUT, STATEMENT_TIMEOUT_MS)
        previous_lock = cap_timeout(cursor, LOCK_TIMEOUT, FENCE_WAIT_MS)
        execute(cursor, session_queries.LOCK_RETENTION_FENCE, None, context="take retention fence")
        cap_timeout(cursor, LOCK_TIMEOUT, ROW_LOCK_TIMEOUT_MS)
        with pinned_planner(cursor, restore=True):
            deleted = execute(
                cursor,
                operations_queries.DELETE_PROMOTED_FOR_JOBS,
                params,
                context="delete promoted job enqueue intents for jobs",
            ).rowcount
            execute(
                cursor,
                operations_queries.LOCK_JOBS_IN_ID_ORDER,
                params,
                context="lock retained jobs",
            )
        restore_setting(cursor, LOCK_TIMEOUT, previous_lock)
        restore_setting(cursor, STATEMENT_TIMEOUT, previous_statement)
    return int(deleted)
