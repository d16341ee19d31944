"""Backfill and ledger retention: run a schedule's fires of a past range; prune old fires."""

from __future__ import annotations

import datetime as dt

from django.db import DatabaseError
from django.db.backends.utils import CursorWrapper

from ...db import schedule_queries as q
from ...db.classify import classify
from ...db.transaction import execute
from ...domain import RETENTION_BATCH_MAX, BackfillReport, FireKind, FireOutcome, Overlap
from ...errors import Code, RunledgerError
from ...models import JobSchedule
from ...validation import storable_time
from .._owned import in_owned_transaction
from ..wakeup import JOBS_CHANNEL, wake_after_commit
from .passes import Writes, resource_key, write
from .reads import timing_of_row
from .spec import validate_schedule_name
from .writes import check_definitions

BACKFILL_LIMIT_MAX = 10_000


def backfill_schedule(
    name: str,
    start: dt.datetime,
    end: dt.datetime,
    *,
    limit: int = 1000,
    using: str = "default",
) -> BackfillReport:
    """Make the jobs of ``name``'s fires in ``[start, end)`` (oldest first, at most ``limit``);
    fires already in the ledger (run, skipped or backfilled before) are left alone, so a
    repeated backfill is a no-op. The cursor does not move.

    Transaction: owns one READ COMMITTED transaction.

    Raises:
        RunledgerError: ``job_schedule.invalid_name``, ``job_schedule.invalid_argument``,
            ``job_schedule.not_found``, ``job_schedule.definition_not_found_or_disabled``.
    """
    checked = validate_schedule_name(name)
    begin = storable_time(start, Code.SCHEDULE_INVALID_ARGUMENT, "start")
    stop = storable_time(end, Code.SCHEDULE_INVALID_ARGUMENT, "end")
    if begin >= stop:
        raise RunledgerError.for_code(Code.SCHEDULE_INVALID_ARGUMENT, "start must be before end")
    if type(limit) is not int or not 1 <= limit <= BACKFILL_LIMIT_MAX:
        raise RunledgerError.for_code(
            Code.SCHEDULE_INVALID_ARGUMENT, f"limit must be 1 to {BACKFILL_LIMIT_MAX}"
        )

    def body(cursor: CursorWrapper) -> BackfillReport:
        try:
            row = JobSchedule.objects.using(using).filter(name=checked).first()
        except DatabaseError as exc:
            raise classify(exc, "read schedule") from exc
        if row is None:
            raise RunledgerError.for_code(Code.SCHEDULE_NOT_FOUND, f"no schedule {checked!r}")
        check_definitions(cursor, {row.job_type_id: (row.name, True)})
        fires, truncated = timing_of_row(row).fires_in(begin, stop, limit=limit)
        if not fires:
            return BackfillReport()
        writes = Writes()
        resource = resource_key(row.id) if row.overlap == Overlap.SERIALIZE else None
        for fire in fires:
            writes.fire(
                row.id,
                fire,
                kind=FireKind.BACKFILL,
                outcome=FireOutcome.ENQUEUED,
                job_type=row.job_type_id,
                resource=resource,
            )
        try:
            written = write(cursor, writes)
        except DatabaseError as exc:
            raise classify(exc, "backfill schedule") from exc
        return BackfillReport(fired=written.jobs, existing=written.hits, truncated=truncated)

    report = in_owned_transaction(using, body, operation="backfill schedule")
    if report.fired:
        wake_after_commit(using, JOBS_CHANNEL)
    return report


def prune_schedule_fires(
    cutoff: dt.datetime, *, limit: int = 1000, dry_run: bool = False, using: str = "default"
) -> int:
    """Delete ledger rows recorded before ``cutoff``, in bounded batches, never the newest of a
    schedule; ``dry_run`` counts them instead. A pruned fire can run again only if a cursor is
    moved back onto it.

    Transaction: each batch is its own transaction.
    """
    when = storable_time(cutoff, Code.SCHEDULE_INVALID_ARGUMENT, "cutoff")
    if type(limit) is not int or not 1 <= limit <= RETENTION_BATCH_MAX:
        raise RunledgerError.for_code(
            Code.SCHEDULE_INVALID_ARGUMENT, f"limit must be 1 to {RETENTION_BATCH_MAX}"
        )
    params = {"cutoff": when, "limit": limit}
    if dry_run:
        return int(
            in_owned_transaction(
                using,
                lambda cursor: execute(
                    cursor, q.COUNT_PRUNABLE_FIRES, params, context="count fires"
                ).fetchone()[0],
                operation="count prunable fires",
            )
        )
    total = 0
    while True:
        deleted: int = in_owned_transaction(
            using,
            lambda cursor: execute(cursor, q.PRUNE_FIRES, params, context="prune fires").rowcount,
            operation="prune schedule fires",
        )
        total += deleted
        if deleted < limit:
            return total
