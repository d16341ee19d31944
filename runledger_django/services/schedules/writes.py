"""Runtime changes to schedules: save, pause, resume, run now, retime, delete.

Every input is checked (``spec.py``) before any SQL. A write joins the caller's atomic block
when there is one (so many schedules, one per tenant, can be saved in one transaction) and
owns a READ COMMITTED transaction otherwise. Lock waits are capped at GUARD_LOCK_TIMEOUT_MS,
the seed's guard bound. Schedulers are woken after the commit.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError, connections
from django.db.backends.utils import CursorWrapper

from ...db import schedule_queries as q
from ...db.classify import classify
from ...db.transaction import LOCK_TIMEOUT, cap_timeout, execute, restore_setting
from ...domain import FireKind, FireOutcome, Overlap, ScheduleSpec
from ...errors import Code, RunledgerError
from ...models import JobSchedule
from ...uuid7 import uuid7
from ...validation import storable_time
from .._owned import in_owned_transaction
from ..wakeup import JOBS_CHANNEL, SCHEDULES_CHANNEL, wake_after_commit
from .passes import Writes, resource_key, write
from .reads import timing_of_row
from .spec import build_spec, validate_schedule_name
from .timing import Timing

T = TypeVar("T")

GUARD_LOCK_TIMEOUT_MS = 5_000
DEFAULT_USING = "default"


def in_transaction(using: str, body: Callable[[CursorWrapper], T], *, operation: str) -> T:
    """Join the caller's transaction, or own one; lock waits capped either way."""

    def capped(cursor: CursorWrapper) -> T:
        previous = cap_timeout(cursor, LOCK_TIMEOUT, GUARD_LOCK_TIMEOUT_MS)
        result = body(cursor)
        restore_setting(cursor, LOCK_TIMEOUT, previous)
        return result

    connection = connections[using]
    if connection.in_atomic_block or not connection.get_autocommit():
        with connection.cursor() as cursor:
            try:
                return capped(cursor)
            except DatabaseError as exc:
                connection.needs_rollback = True
                raise classify(exc, operation) from exc
    return in_owned_transaction(using, capped, operation=operation)


def database_now(cursor: CursorWrapper) -> dt.datetime:
    row = execute(cursor, q.DATABASE_NOW, None, context="read the database clock").fetchone()
    value: dt.datetime = row[0]
    return value


def timing_of(spec: ScheduleSpec, schedule_id: uuid.UUID) -> Timing:
    return Timing(
        cron=spec.cron,
        interval_seconds=spec.interval_seconds,
        timezone=spec.timezone,
        jitter_seconds=spec.jitter_seconds,
        schedule_id=schedule_id,
    )


def check_definitions(cursor: CursorWrapper, wanted: dict[str, tuple[str, bool]]) -> None:
    """Share-lock the definitions of ``wanted`` (job type -> (schedule name, active)); each
    must exist, and be enabled where its schedule is active.

    Raises:
        RunledgerError: ``job_schedule.definition_not_found_or_disabled`` naming the
            schedule; only a read ran, so the caller's transaction stays usable.
    """
    if not wanted:
        return
    rows = execute(
        cursor,
        q.LOCK_DEFINITIONS,
        {"job_types": sorted(wanted)},
        context="lock job definitions of schedules",
    ).fetchall()
    enabled = dict(rows)
    for job_type, (name, active) in sorted(wanted.items()):
        if job_type not in enabled or (active and not enabled[job_type]):
            raise RunledgerError.for_code(
                Code.SCHEDULE_DEFINITION_NOT_FOUND_OR_DISABLED,
                f"schedule {name!r}: job type {job_type!r} has no "
                + ("enabled definition" if job_type in enabled else "definition"),
            )


def locked_schedule(name: str, *, using: str) -> JobSchedule:
    try:
        row = JobSchedule.objects.using(using).select_for_update().filter(name=name).first()
    except DatabaseError as exc:
        raise classify(exc, "lock schedule") from exc
    if row is None:
        raise RunledgerError.for_code(Code.SCHEDULE_NOT_FOUND, f"no schedule named {name!r}")
    return row


def _update(row: JobSchedule, using: str, **fields: Any) -> None:
    try:
        JobSchedule.objects.using(using).filter(pk=row.pk).update(**fields)
    except DatabaseError as exc:
        raise classify(exc, "update schedule") from exc
    for key, value in fields.items():
        setattr(row, key, value)


def columns(spec: ScheduleSpec) -> dict[str, Any]:
    """The model fields a spec sets (the declared fields)."""
    return {
        "job_type_id": spec.job_type,
        "organization_id": spec.organization_id,
        "payload_template": json.loads(spec.payload_json),
        "cron_expr": spec.cron,
        "interval_seconds": spec.interval_seconds,
        "timezone": spec.timezone,
        "max_jitter_seconds": spec.jitter_seconds,
        "priority": spec.priority,
        "catch_up": spec.catch_up,
        "catch_up_grace_seconds": spec.catch_up_grace_seconds,
        "catch_up_limit": spec.catch_up_limit,
        "overlap": spec.overlap,
        "is_active": spec.enabled,
    }


def timing_changed(row: JobSchedule, spec: ScheduleSpec) -> bool:
    return (row.cron_expr, row.interval_seconds, row.timezone) != spec.timing_key


def first_cursor(spec: ScheduleSpec, schedule_id: uuid.UUID, now: dt.datetime) -> dt.datetime:
    """A new (or re-timed) schedule first fires at its first fire after now; ``run_on_create``
    fires it once at once instead."""
    return now if spec.run_on_create else timing_of(spec, schedule_id).first_fire_after(now)


def save_spec(
    spec: ScheduleSpec,
    *,
    keep_enabled: bool,
    next_fire_at: dt.datetime | None,
    using: str,
) -> JobSchedule:
    """Create or update the runtime schedule ``spec`` names (save_schedule's body)."""

    def body(cursor: CursorWrapper) -> JobSchedule:
        now = database_now(cursor)
        try:
            row = (
                JobSchedule.objects.using(using).select_for_update().filter(name=spec.name).first()
            )
        except DatabaseError as exc:
            raise classify(exc, "read schedule") from exc
        if row is not None and row.declared:
            raise RunledgerError.for_code(
                Code.SCHEDULE_DECLARED_IN_CODE, f"schedule {spec.name!r} is declared in code"
            )
        fields = columns(spec)
        if row is None:
            active = spec.enabled
            check_definitions(cursor, {spec.job_type: (spec.name, active)})
            schedule_id = uuid7()
            cursor_at = next_fire_at or first_cursor(spec, schedule_id, now)
            try:
                created = JobSchedule.objects.using(using).create(
                    id=schedule_id,
                    name=spec.name,
                    next_fire_at=cursor_at,
                    next_scheduled_for=cursor_at,
                    **fields,
                )
            except DatabaseError as exc:
                raise classify(exc, "create schedule") from exc
            return created
        # The seed's plain upsert: the organization and (unless given) the active flag stay.
        fields.pop("organization_id")
        if keep_enabled:
            fields["is_active"] = row.is_active
        active = bool(fields["is_active"]) and row.paused_at is None
        check_definitions(cursor, {spec.job_type: (spec.name, active)})
        if timing_changed(row, spec) or (next_fire_at is not None and spec.cron != row.cron_expr):
            cursor_at = next_fire_at or first_cursor(spec, row.id, now)
            fields["next_fire_at"] = cursor_at
            fields["next_scheduled_for"] = cursor_at
        _update(row, using, **fields)
        return row

    saved = in_transaction(using, body, operation="save schedule")
    wake_after_commit(using, SCHEDULES_CHANNEL)
    return fresh(saved, using)


def fresh(row: JobSchedule, using: str) -> JobSchedule:
    try:
        return JobSchedule.objects.using(using).get(pk=row.pk)
    except DatabaseError as exc:
        raise classify(exc, "read schedule") from exc


def save_schedule(
    name: str,
    target: object,
    *,
    cron: str | None = None,
    every: dt.timedelta | int | None = None,
    timezone: str = "UTC",
    payload: Any = None,
    args: Any = None,
    kwargs: Any = None,
    organization_id: uuid.UUID | str | None = None,
    priority: int | None = None,
    jitter: dt.timedelta | int | None = None,
    catch_up: str = "latest",
    catch_up_grace: dt.timedelta | int = 60,
    catch_up_limit: int = 100,
    overlap: str = "allow",
    enabled: bool | None = None,
    run_on_create: bool = False,
    next_fire_at: dt.datetime | None = None,
    using: str = DEFAULT_USING,
) -> JobSchedule:
    """Create or update the runtime schedule ``name``; returns it.

    A new schedule (or one whose cron, interval or time zone changed) first fires at its first
    fire after now (``run_on_create``: at once), or at ``next_fire_at`` when given. An existing
    schedule keeps its organization, and its active flag unless ``enabled`` is given; an
    operator's pause is kept. Schedules declared in code are changed in code.

    Transaction: joins the caller's atomic block (many saves, one commit); owns one otherwise.

    Raises:
        RunledgerError: the ``job_schedule.invalid_*`` codes (before any SQL);
            ``job_schedule.declared_in_code``; ``job_schedule.definition_not_found_or_disabled``.
    """
    spec = build_spec(
        name,
        target,
        cron=cron,
        every=every,
        timezone=timezone,
        payload=payload,
        args=args,
        kwargs=kwargs,
        organization_id=organization_id,
        priority=priority,
        jitter=jitter,
        catch_up=catch_up,
        catch_up_grace=catch_up_grace,
        catch_up_limit=catch_up_limit,
        overlap=overlap,
        enabled=True if enabled is None else enabled,
        run_on_create=run_on_create,
    )
    cursor_at = (
        None
        if next_fire_at is None
        else storable_time(next_fire_at, Code.SCHEDULE_INVALID_ARGUMENT, "next_fire_at")
    )
    return save_spec(spec, keep_enabled=enabled is None, next_fire_at=cursor_at, using=using)


def pause_schedule(name: str, *, using: str = DEFAULT_USING) -> JobSchedule:
    """Pause ``name`` (kept apart from its declared flag: a deploy never undoes it).

    Raises:
        RunledgerError: ``job_schedule.invalid_name``, ``job_schedule.not_found``.
    """
    checked = validate_schedule_name(name)

    def body(cursor: CursorWrapper) -> JobSchedule:
        row = locked_schedule(checked, using=using)
        if row.paused_at is None:
            _update(row, using, paused_at=database_now(cursor))
        return row

    return fresh(in_transaction(using, body, operation="pause schedule"), using)


def resume_schedule(name: str, *, using: str = DEFAULT_USING) -> JobSchedule:
    """Resume ``name``: its cursor moves to the first fire after now (catch-up ``all``: the
    missed fires run, up to its limit).

    Raises:
        RunledgerError: ``job_schedule.invalid_name``, ``job_schedule.not_found``,
            ``job_schedule.definition_not_found_or_disabled``.
    """
    checked = validate_schedule_name(name)

    def body(cursor: CursorWrapper) -> JobSchedule:
        row = locked_schedule(checked, using=using)
        if row.paused_at is None:
            return row
        if row.is_active:
            check_definitions(cursor, {row.job_type_id: (row.name, True)})
        now = database_now(cursor)
        fields: dict[str, Any] = {"paused_at": None}
        if row.catch_up != "all" and row.next_fire_at <= now:
            cursor_at = timing_of_row(row).first_fire_after(now)
            fields.update(next_fire_at=cursor_at, next_scheduled_for=cursor_at)
        _update(row, using, **fields)
        return row

    resumed = in_transaction(using, body, operation="resume schedule")
    wake_after_commit(using, SCHEDULES_CHANNEL)
    return fresh(resumed, using)


def retime_schedule(
    name: str, next_fire_at: dt.datetime, *, using: str = DEFAULT_USING
) -> JobSchedule:
    """Move ``name``'s cursor to ``next_fire_at`` (its next fire). A fire already in the
    ledger does not run again.

    Raises:
        RunledgerError: ``job_schedule.invalid_name``, ``job_schedule.invalid_argument``,
            ``job_schedule.not_found``.
    """
    checked = validate_schedule_name(name)
    cursor_at = storable_time(next_fire_at, Code.SCHEDULE_INVALID_ARGUMENT, "next_fire_at")

    def body(cursor: CursorWrapper) -> JobSchedule:
        row = locked_schedule(checked, using=using)
        _update(row, using, next_fire_at=cursor_at, next_scheduled_for=cursor_at)
        return row

    retimed = in_transaction(using, body, operation="retime schedule")
    wake_after_commit(using, SCHEDULES_CHANNEL)
    return fresh(retimed, using)


def trigger_schedule(name: str, *, using: str = DEFAULT_USING) -> uuid.UUID:
    """Run ``name`` once now ("run now"): one job, its fire recorded as manual; the cursor
    does not move. Works while paused; the job type must be enabled.

    Returns:
        The new job's id.

    Raises:
        RunledgerError: ``job_schedule.invalid_name``, ``job_schedule.not_found``,
            ``job_schedule.definition_not_found_or_disabled``.
    """
    checked = validate_schedule_name(name)

    def body(cursor: CursorWrapper) -> uuid.UUID:
        try:
            row = JobSchedule.objects.using(using).filter(name=checked).first()
        except DatabaseError as exc:
            raise classify(exc, "read schedule") from exc
        if row is None:
            raise RunledgerError.for_code(Code.SCHEDULE_NOT_FOUND, f"no schedule {checked!r}")
        check_definitions(cursor, {row.job_type_id: (row.name, True)})
        writes = Writes()
        writes.fire(
            row.id,
            database_now(cursor),
            kind=FireKind.MANUAL,
            outcome=FireOutcome.ENQUEUED,
            job_type=row.job_type_id,
            resource=resource_key(row.id) if row.overlap == Overlap.SERIALIZE else None,
        )
        try:
            written = write(cursor, writes)
        except DatabaseError as exc:
            raise classify(exc, "run schedule now") from exc
        if written.jobs != 1:
            raise RunledgerError.for_code(
                Code.SCHEDULE_DEFINITION_NOT_FOUND_OR_DISABLED,
                f"schedule {checked!r}: its job could not be enqueued",
            )
        job_id: uuid.UUID = writes.fires[0][5]
        return job_id

    job_id = in_transaction(using, body, operation="run schedule now")
    wake_after_commit(using, JOBS_CHANNEL)
    return job_id


def delete_schedule(name: str, *, using: str = DEFAULT_USING) -> None:
    """Delete ``name`` and its fire ledger; the jobs it made stay.

    Raises:
        RunledgerError: ``job_schedule.invalid_name``, ``job_schedule.not_found``,
            ``job_schedule.declared_in_code`` (remove the declaration instead).
    """
    checked = validate_schedule_name(name)

    def body(cursor: CursorWrapper) -> None:
        row = locked_schedule(checked, using=using)
        if row.declared:
            raise RunledgerError.for_code(
                Code.SCHEDULE_DECLARED_IN_CODE, f"schedule {checked!r} is declared in code"
            )
        try:
            JobSchedule.objects.using(using).filter(pk=row.pk).delete()
        except DatabaseError as exc:
            raise classify(exc, "delete schedule") from exc

    in_transaction(using, body, operation="delete schedule")
