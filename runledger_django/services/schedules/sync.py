"""Declared sync: make the rows of the schedules declared in code match the declarations.

The code owns the declared fields; the operator owns the pause (``paused_at``), which no sync
touches. A declared schedule whose declaration is gone is deactivated (its fires stay). A row
that already matches is not written at all, so a second sync changes nothing. Syncs from
several starting workers take turns on the table lock and each finds the work done.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.db import DatabaseError
from django.db.backends.utils import CursorWrapper
from django.db.models import Q

from ...db import schedule_queries as q
from ...db.classify import classify
from ...db.transaction import execute, timeout_text
from ...domain import ScheduleSpec, ScheduleSyncReport
from ...errors import Code, RunledgerError
from ...models import JobSchedule
from ...uuid7 import uuid7
from .._owned import in_owned_transaction
from ..wakeup import SCHEDULES_CHANNEL, wake_after_commit
from .writes import check_definitions, columns, first_cursor, timing_changed

logger = logging.getLogger(__name__)

SYNC_LOCK_TIMEOUT_MS = 5_000
SYNC_STATEMENT_TIMEOUT_MS = 30_000
"""The seed's exact-sync bounds (reference 1.2)."""


def _differs(row: JobSchedule, wanted: dict[str, Any]) -> bool:
    for key, value in wanted.items():
        if getattr(row, key) != value:
            return True
    return not row.declared


def sync_declared_schedules(
    specs: Sequence[ScheduleSpec], *, using: str = "default"
) -> ScheduleSyncReport:
    """Write the declared schedules ``specs``; deactivate declared rows no longer declared.

    Transaction: owns one READ COMMITTED transaction under the schedules table's SHARE ROW
    EXCLUSIVE lock (waited for at most 5 s; statements capped at 30 s).

    Raises:
        RunledgerError: ``job_schedule.invalid_argument`` (two specs with one name, before any
            SQL); ``job_schedule.definition_not_found_or_disabled`` naming the first schedule
            whose job type cannot take it (nothing was written); a classified database error.
    """
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        duplicate = sorted({name for name in names if names.count(name) > 1})
        raise RunledgerError.for_code(
            Code.SCHEDULE_INVALID_ARGUMENT, f"schedules declared twice: {duplicate}"
        )
    by_name = {spec.name: spec for spec in specs}

    def body(cursor: CursorWrapper) -> ScheduleSyncReport:
        row = execute(
            cursor,
            q.WRITE_TIMEOUTS,
            {
                "lock_timeout": timeout_text(SYNC_LOCK_TIMEOUT_MS),
                "statement_timeout": timeout_text(SYNC_STATEMENT_TIMEOUT_MS),
            },
            context="bound schedule sync",
        ).fetchone()
        now = row[0]
        execute(cursor, q.LOCK_SCHEDULES_FOR_SYNC, None, context="lock schedules for sync")
        try:
            rows = {
                found.name: found
                for found in JobSchedule.objects.using(using).filter(
                    Q(name__in=names) | Q(declared=True)
                )
            }
        except DatabaseError as exc:
            raise classify(exc, "read declared schedules") from exc
        wanted_definitions: dict[str, tuple[str, bool]] = {}
        for spec in specs:
            existing = rows.get(spec.name)
            paused = existing is not None and existing.paused_at is not None
            active = spec.enabled and not paused
            previous = wanted_definitions.get(spec.job_type)
            if previous is None or (active and not previous[1]):
                wanted_definitions[spec.job_type] = (spec.name, active)
        check_definitions(cursor, wanted_definitions)
        created, updated, unchanged = [], [], []
        try:
            for spec in specs:
                fields = columns(spec)
                existing = rows.get(spec.name)
                if existing is None:
                    schedule_id = uuid7()
                    cursor_at = first_cursor(spec, schedule_id, now)
                    JobSchedule.objects.using(using).create(
                        id=schedule_id,
                        name=spec.name,
                        declared=True,
                        next_fire_at=cursor_at,
                        next_scheduled_for=cursor_at,
                        **fields,
                    )
                    created.append(spec.name)
                    continue
                if not _differs(existing, fields):
                    unchanged.append(spec.name)
                    continue
                fields["declared"] = True
                if timing_changed(existing, spec):
                    cursor_at = first_cursor(spec, existing.id, now)
                    fields["next_fire_at"] = cursor_at
                    fields["next_scheduled_for"] = cursor_at
                JobSchedule.objects.using(using).filter(pk=existing.pk).update(**fields)
                updated.append(spec.name)
            gone = sorted(
                name
                for name, found in rows.items()
                if found.declared and found.is_active and name not in by_name
            )
            if gone:
                JobSchedule.objects.using(using).filter(name__in=gone).update(is_active=False)
        except DatabaseError as exc:
            raise classify(exc, "write declared schedules") from exc
        return ScheduleSyncReport(
            created=tuple(sorted(created)),
            updated=tuple(sorted(updated)),
            deactivated=tuple(gone),
            unchanged=tuple(sorted(unchanged)),
        )

    report = in_owned_transaction(using, body, operation="sync declared schedules")
    if report.changed:
        wake_after_commit(using, SCHEDULES_CHANNEL)
        logger.info(
            "declared schedules synced created=%d updated=%d deactivated=%d",
            len(report.created),
            len(report.updated),
            len(report.deactivated),
        )
    return report
