"""Reading schedules: by name, listed under a scope, their next fires, and their health."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import DatabaseError, connections
from django.db.models import QuerySet

from ...db import schedule_queries as q
from ...db.classify import classify
from ...db.transaction import execute
from ...domain import ReadScope, ScheduleMetrics
from ...errors import Code, RunledgerError
from ...models import JobSchedule
from ...validation import aware_utc, validate_page, validate_search_text
from .._scope import checked_scope_kind
from .spec import validate_schedule_name
from .timing import Timing, describe_cron, describe_interval

NEXT_FIRES_MAX = 1_000
STUCK_POLLS = 2
"""A schedule due for longer than this many poll intervals is stuck: no scheduler takes it."""


def scoped(scope: object, *, using: str) -> QuerySet[JobSchedule]:
    kind = checked_scope_kind(scope)
    rows = JobSchedule.objects.using(using)
    if kind == "global":
        return rows.filter(organization_id__isnull=True)
    if kind == "organization":
        assert isinstance(scope, ReadScope)  # noqa: S101 - narrowed by checked_scope_kind
        return rows.filter(organization_id=scope.organization_id)
    return rows


def get_schedule(name: str, *, scope: ReadScope, using: str = "default") -> JobSchedule | None:
    """The schedule ``name``, or None when absent or outside ``scope``. Changes nothing."""
    checked = validate_schedule_name(name)
    try:
        return scoped(scope, using=using).filter(name=checked).first()
    except DatabaseError as exc:
        raise classify(exc, "read schedule") from exc


def list_schedules(
    *,
    scope: ReadScope,
    job_type: str | None = None,
    limit: int = 100,
    offset: int = 0,
    using: str = "default",
) -> list[JobSchedule]:
    """Schedules under ``scope`` by name (``job_type``: exactly that type)."""
    page = validate_page(limit, offset)
    exact = validate_search_text(job_type, "job_type")
    rows = scoped(scope, using=using)
    if exact is not None:
        rows = rows.filter(job_type_id=exact)
    try:
        return list(rows.order_by("name")[page.offset : page.offset + page.limit])
    except DatabaseError as exc:
        raise classify(exc, "list schedules") from exc


def timing_of_row(row: JobSchedule) -> Timing:
    return Timing(
        cron=row.cron_expr,
        interval_seconds=row.interval_seconds,
        timezone=row.timezone,
        jitter_seconds=row.max_jitter_seconds,
        schedule_id=row.id,
    )


def fires_after(row: JobSchedule, count: int, after: dt.datetime) -> list[dt.datetime]:
    """The next ``count`` fires of ``row`` strictly after ``after`` (jitter applied): its cursor
    first when that is still ahead, then the ones that follow it."""
    timing = timing_of_row(row)
    fires: list[dt.datetime] = []
    current = row.next_fire_at if row.next_fire_at > after else timing.first_fire_after(after)
    while len(fires) < count:
        fires.append(current)
        current = timing.next_after_cursor(current)
    return fires


def next_fires(
    name: str, count: int = 5, *, after: dt.datetime | None = None, using: str = "default"
) -> list[dt.datetime]:
    """The next ``count`` fire times of ``name``, aware UTC, jitter applied: without
    ``after``, the fires to come (its cursor first, when that is ahead); with it, the fires
    its timing gives strictly after ``after``.

    Raises:
        RunledgerError: ``job_schedule.invalid_name``, ``job_schedule.invalid_argument``,
            ``job_schedule.not_found``.
    """
    checked = validate_schedule_name(name)
    if type(count) is not int or not 1 <= count <= NEXT_FIRES_MAX:
        raise RunledgerError.for_code(
            Code.SCHEDULE_INVALID_ARGUMENT, f"count must be an int from 1 to {NEXT_FIRES_MAX}"
        )
    start = None if after is None else aware_utc(after, Code.SCHEDULE_INVALID_ARGUMENT, "after")
    try:
        row = JobSchedule.objects.using(using).filter(name=checked).first()
        if start is None:
            with connections[using].cursor() as cursor:
                start = execute(cursor, q.DATABASE_NOW, None, context="clock").fetchone()[0]
    except DatabaseError as exc:
        raise classify(exc, "read schedule") from exc
    if row is None:
        raise RunledgerError.for_code(Code.SCHEDULE_NOT_FOUND, f"no schedule {checked!r}")
    if after is None:
        assert start is not None  # noqa: S101 - set above
        return fires_after(row, count, start)
    timing = timing_of_row(row)
    fires = [timing.first_fire_after(start)]
    while len(fires) < count:
        fires.append(timing.next_after_cursor(fires[-1]))
    return fires


def describe(row: JobSchedule) -> str:
    """The schedule's timing in words ("At 02:30 every day", "every 90 seconds")."""
    if row.interval_seconds is not None:
        return describe_interval(row.interval_seconds)
    return describe_cron(row.cron_expr or "")


def schedule_metrics(
    *,
    scope: ReadScope,
    job_type: str | None = None,
    limit: int = 100,
    offset: int = 0,
    poll_seconds: float = 30.0,
    using: str = "default",
) -> list[ScheduleMetrics]:
    """Per-schedule health under ``scope``, by name: lag (how long its cursor has been due),
    whether it is stuck, fires, skips, coalesced misses and failures.

    The Prometheus collector calls this (bounded by ``limit``; index-backed by name).
    """
    rows = list_schedules(scope=scope, job_type=job_type, limit=limit, offset=offset, using=using)
    try:
        with connections[using].cursor() as cursor:
            now: dt.datetime = execute(cursor, q.DATABASE_NOW, None, context="clock").fetchone()[0]
    except DatabaseError as exc:
        raise classify(exc, "read the database clock") from exc
    return [metrics_of(row, now, poll_seconds) for row in rows]


def metrics_of(row: JobSchedule, now: dt.datetime, poll_seconds: float) -> ScheduleMetrics:
    firing = row.is_active and row.paused_at is None
    lag = max(0.0, (now - row.next_fire_at).total_seconds()) if firing else 0.0
    return ScheduleMetrics(
        name=row.name,
        job_type=row.job_type_id,
        organization_id=row.organization_id,
        active=row.is_active,
        paused=row.paused_at is not None,
        next_fire_at=row.next_fire_at,
        lag_seconds=lag,
        stuck=lag > STUCK_POLLS * poll_seconds,
        fires=row.fire_count,
        skipped=row.skip_count,
        coalesced=row.coalesced_count,
        consecutive_failures=row.consecutive_failures,
        last_error_code=row.last_error_code,
        last_fired_at=row.last_fired_at,
    )


def schedule_summary(row: JobSchedule, fires: list[dt.datetime]) -> dict[str, Any]:
    """JSON-ready data of a schedule and its next fires (``manage.py schedules --json``)."""
    from ...domain import format_timestamp

    return {
        "name": row.name,
        "job_type": row.job_type_id,
        "organization_id": str(row.organization_id) if row.organization_id else None,
        "cron": row.cron_expr,
        "interval_seconds": row.interval_seconds,
        "description": describe(row),
        "timezone": row.timezone,
        "active": row.is_active,
        "paused": row.paused_at is not None,
        "declared": row.declared,
        "catch_up": row.catch_up,
        "overlap": row.overlap,
        "jitter_seconds": row.max_jitter_seconds,
        "next_fires": [format_timestamp(fire) for fire in fires],
        "last_fired_at": format_timestamp(row.last_fired_at),
        "last_scheduled_for": format_timestamp(row.last_scheduled_for),
        "last_job_id": str(row.last_job_id) if row.last_job_id else None,
        "fires": row.fire_count,
        "skipped": row.skip_count,
        "coalesced": row.coalesced_count,
        "consecutive_failures": row.consecutive_failures,
        "last_error_code": row.last_error_code,
    }


def schedule_overview(
    *,
    scope: ReadScope,
    job_type: str | None = None,
    count: int = 1,
    page_size: int = 1000,
    using: str = "default",
) -> list[tuple[JobSchedule, list[dt.datetime]]]:
    """Every schedule under ``scope`` with its next ``count`` fires after the database's now
    (``manage.py schedules``), read page by page."""
    if type(count) is not int or not 1 <= count <= NEXT_FIRES_MAX:
        raise RunledgerError.for_code(Code.SCHEDULE_INVALID_ARGUMENT, "count out of range")
    rows: list[JobSchedule] = []
    while True:
        page = list_schedules(
            scope=scope, job_type=job_type, limit=page_size, offset=len(rows), using=using
        )
        rows.extend(page)
        if len(page) < page_size:
            break
    try:
        with connections[using].cursor() as cursor:
            now: dt.datetime = execute(cursor, q.DATABASE_NOW, None, context="clock").fetchone()[0]
    except DatabaseError as exc:
        raise classify(exc, "read the database clock") from exc
    return [(row, fires_after(row, count, now)) for row in rows]
