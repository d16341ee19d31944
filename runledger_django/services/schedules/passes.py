"""A scheduler pass: lock the due schedules, make one job per fire, move the cursors.

Exactly one job per fire, whatever the number of schedulers and without a leader: a pass
locks its due rows (SKIP LOCKED, so schedulers share the work), and the fire's ledger row, its
job and the cursor move commit in one transaction. A fire already in the ledger is never
materialized again, even after its job was pruned or its cursor was moved back.

A pass is set-based (a few statements for a whole batch). When that write fails for one row's
sake, the pass falls back to the seed's per-row path: each row in a savepoint, a failing row
deferred by DEFER_SECONDS so it cannot starve the others (reference 1.5 steps 4-5).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connections
from django.db.backends.utils import CursorWrapper

from ...db import schedule_queries as q
from ...db.classify import classify, is_session_fatal
from ...db.transaction import execute, timeout_text
from ...domain import FireKind, FireOutcome, JobStatus, Overlap, SchedulePassReport
from ...errors import Code, RunledgerError
from ...uuid7 import uuid7
from ...validation import aware_utc, validate_job_types
from .._owned import in_owned_transaction
from ..wakeup import JOBS_CHANNEL, wake_after_commit
from .timing import CronError, Timing, format_scheduled_for, plan_fires

logger = logging.getLogger(__name__)

DEFER_SECONDS = 30
"""A schedule whose fire failed is due again this much later (the seed's constant)."""
PASS_LOCK_TIMEOUT_MS = 1_000
"""The claim's table lock waits at most this long behind a sync or a guard (reference 1.5)."""
PASS_STATEMENT_TIMEOUT_MS = 30_000
BATCH_MAX = 1_000
RUNNING = (JobStatus.PENDING.value, JobStatus.LEASED.value)
FK_SCHEDULE_FIRE_SCHEDULE = "fk_schedule_fires_schedule"


def resource_key(schedule_id: uuid.UUID) -> str:
    """The execution resource key of a ``serialize`` schedule's jobs: one runs at a time."""
    return f"schedule:{schedule_id}"


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """A claimed row, as the claim statement returns it."""

    id: uuid.UUID
    name: str
    job_type: str
    cron: str | None
    interval_seconds: int | None
    timezone: str
    jitter_seconds: int
    catch_up: str
    grace_seconds: int
    catch_up_limit: int
    overlap: str
    next_fire_at: dt.datetime
    next_scheduled_for: dt.datetime
    last_job_status: str | None
    definition_enabled: bool | None

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> DueSchedule:
        return cls(*row[:15])


@dataclass
class Writes:
    """The arrays of one MATERIALIZE_FIRES statement."""

    fires: list[tuple[Any, ...]] = field(default_factory=list)
    moves: list[tuple[Any, ...]] = field(default_factory=list)
    job_types: set[str] = field(default_factory=set)
    """The job types of the fires: their definitions are share-locked by key."""
    coalesced: int = 0
    failed: int = 0

    def fire(
        self,
        schedule_id: uuid.UUID,
        scheduled_for: dt.datetime,
        *,
        kind: str,
        outcome: str,
        job_type: str,
        error_code: str | None = None,
        resource: str | None = None,
    ) -> None:
        job_id = uuid7() if outcome == FireOutcome.ENQUEUED else None
        if job_id is not None:
            self.job_types.add(job_type)
        self.fires.append(
            (
                schedule_id,
                scheduled_for,
                format_scheduled_for(scheduled_for),
                kind,
                outcome,
                job_id,
                error_code,
                resource,
            )
        )

    def move(
        self,
        schedule_id: uuid.UUID,
        next_fire_at: dt.datetime,
        next_scheduled_for: dt.datetime,
        *,
        coalesced: int = 0,
        error_code: str | None = None,
    ) -> None:
        self.moves.append((schedule_id, next_fire_at, next_scheduled_for, coalesced, error_code))
        self.coalesced += coalesced
        if error_code is not None:
            self.failed += 1

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for index, name in enumerate(FIRE_ARRAYS):
            params[name] = [fire[index] for fire in self.fires]
        for index, name in enumerate(MOVE_ARRAYS):
            params[name] = [move[index] for move in self.moves]
        params["job_types"] = sorted(self.job_types)
        return params


FIRE_ARRAYS = (
    "f_schedule_id",
    "f_scheduled_for",
    "f_scheduled_text",
    "f_kind",
    "f_outcome",
    "f_job_id",
    "f_error_code",
    "f_resource_key",
)
MOVE_ARRAYS = ("u_id", "u_next_fire_at", "u_next_scheduled_for", "u_coalesced", "u_error_code")


@dataclass(frozen=True, slots=True)
class Written:
    moved: int
    jobs: int
    skipped: int
    hits: int


def write(cursor: CursorWrapper, writes: Writes) -> Written:
    """Run one MATERIALIZE_FIRES (DatabaseError propagates for the caller to classify)."""
    cursor.execute(q.MATERIALIZE_FIRES, writes.params())
    row = cursor.fetchone()
    return Written(moved=row[0], jobs=row[1], skipped=row[2], hits=row[3])


def write_in_savepoint(cursor: CursorWrapper, writes: Writes) -> Written | RunledgerError:
    """``write`` inside the savepoint ``materialize_due_schedule``: its result, or, when the
    statement failed for its rows' sake, the classified error with the savepoint rolled back
    and released (the transaction goes on). A session-level failure is raised."""
    cursor.execute(q.SAVEPOINT)
    try:
        written = write(cursor, writes)
    except DatabaseError as exc:
        if is_session_fatal(exc):
            raise classify(exc, "materialize schedule fires") from exc
        cursor.execute(q.ROLLBACK_TO_SAVEPOINT)
        cursor.execute(q.RELEASE_SAVEPOINT)
        return classify(exc, "materialize schedule fires")
    cursor.execute(q.RELEASE_SAVEPOINT)
    return written


def plan_row(due: DueSchedule, now: dt.datetime, writes: Writes) -> None:
    """Add one claimed schedule's fires and cursor move to ``writes`` (pure: no SQL)."""
    if not due.definition_enabled:
        defer(due, now, Code.SCHEDULE_DEFINITION_NOT_FOUND_OR_DISABLED.value, writes)
        return
    try:
        timing = Timing(
            cron=due.cron,
            interval_seconds=due.interval_seconds,
            timezone=due.timezone,
            jitter_seconds=due.jitter_seconds,
            schedule_id=due.id,
        )
        plan = plan_fires(
            timing,
            due=due.next_scheduled_for,
            now=now,
            catch_up=due.catch_up,
            grace_seconds=due.grace_seconds,
            limit=due.catch_up_limit,
        )
    except (CronError, ValueError, KeyError, OverflowError):
        # A stored expression or zone this process cannot read (edited by hand, or zone data
        # missing here): defer it, never block the others.
        defer(due, now, Code.SCHEDULE_INVALID_CRON.value, writes)
        return
    running = due.overlap == Overlap.SKIP and due.last_job_status in RUNNING
    resource = resource_key(due.id) if due.overlap == Overlap.SERIALIZE else None
    for fire in plan.skipped_late:
        writes.fire(
            due.id,
            fire,
            kind=FireKind.SCHEDULED,
            outcome=FireOutcome.SKIPPED_LATE,
            job_type=due.job_type,
        )
    for fire in plan.enqueue:
        if running:
            writes.fire(
                due.id,
                fire,
                kind=FireKind.SCHEDULED,
                outcome=FireOutcome.SKIPPED_OVERLAP,
                job_type=due.job_type,
            )
            continue
        writes.fire(
            due.id,
            fire,
            kind=FireKind.SCHEDULED,
            outcome=FireOutcome.ENQUEUED,
            job_type=due.job_type,
            resource=resource,
        )
        running = due.overlap == Overlap.SKIP  # this fire's job now runs
    writes.move(due.id, plan.next_fire_at, plan.next_fire_at, coalesced=plan.coalesced)


def defer(due: DueSchedule, now: dt.datetime, code: str, writes: Writes) -> None:
    """Record the fire's failure and push the cursor DEFER_SECONDS out; the fire keeps its
    ``scheduled_for`` for the retry."""
    writes.fire(
        due.id,
        due.next_scheduled_for,
        kind=FireKind.SCHEDULED,
        outcome=FireOutcome.FAILED,
        job_type=due.job_type,
        error_code=code,
    )
    writes.move(
        due.id,
        now + dt.timedelta(seconds=DEFER_SECONDS),
        due.next_scheduled_for,
        error_code=code,
    )
    logger.warning(
        "schedule fire failed and was deferred schedule_id=%s schedule=%s error_code=%s",
        due.id,
        due.name,
        code,
    )


def materialize(
    cursor: CursorWrapper, claimed: Sequence[DueSchedule], now: dt.datetime
) -> SchedulePassReport:
    """Fire every claimed schedule inside the current transaction.

    Raises:
        RunledgerError: a claimed schedule vanished (``job_schedule.not_found``; the caller's
            transaction must roll back, so no job survives without its cursor move), or a
            session-level database failure.
    """
    writes = Writes()
    for due in claimed:
        plan_row(due, now, writes)
    written = write_in_savepoint(cursor, writes)
    if isinstance(written, RunledgerError):
        return _row_by_row(cursor, claimed, now)
    _check_moved(written.moved, len(writes.moves))
    return SchedulePassReport(
        claimed=len(claimed),
        fired=written.jobs,
        skipped=written.skipped,
        coalesced=writes.coalesced,
        failed=writes.failed,
    )


def _write_failed(exc: DatabaseError) -> RunledgerError:
    """Even the deferral could not be written: the claimed row is gone (its fire's foreign
    key says so), or the database failed; the pass must roll back."""
    error = classify(exc, "defer schedule fire")
    if error.constraint == FK_SCHEDULE_FIRE_SCHEDULE:
        return RunledgerError.for_code(
            Code.SCHEDULE_NOT_FOUND, "a claimed schedule vanished before its cursor moved"
        )
    return error


def _check_moved(moved: int, expected: int) -> None:
    if moved != expected:
        raise RunledgerError.for_code(
            Code.SCHEDULE_NOT_FOUND,
            f"{expected - moved} claimed schedules vanished before their cursor moved",
        )


def _row_by_row(
    cursor: CursorWrapper, claimed: Sequence[DueSchedule], now: dt.datetime
) -> SchedulePassReport:
    """The per-row path: each schedule in a savepoint; a failing one is deferred."""
    report = SchedulePassReport(claimed=len(claimed))
    for due in claimed:
        writes = Writes()
        plan_row(due, now, writes)
        written = write_in_savepoint(cursor, writes)
        if isinstance(written, RunledgerError):
            writes = Writes()
            defer(due, now, written.code, writes)
            try:
                written = write(cursor, writes)
            except DatabaseError as again:
                raise _write_failed(again) from again
            _check_moved(written.moved, 1)
            report = report + SchedulePassReport(failed=1)
            continue
        _check_moved(written.moved, 1)
        report = report + SchedulePassReport(
            fired=written.jobs,
            skipped=written.skipped,
            coalesced=writes.coalesced,
            failed=writes.failed,
        )
    return report


def claim_due(
    cursor: CursorWrapper,
    job_types: list[str] | None,
    *,
    limit: int,
    now: dt.datetime | None,
) -> tuple[list[DueSchedule], dt.datetime | None]:
    """Lock up to ``limit`` due schedules (oldest cursor first) and read the pass's clock."""
    execute(
        cursor,
        q.CLAIM_TIMEOUTS,
        {
            "lock_timeout": timeout_text(PASS_LOCK_TIMEOUT_MS),
            "statement_timeout": timeout_text(PASS_STATEMENT_TIMEOUT_MS),
        },
        context="bound schedule pass",
    )
    execute(cursor, q.LOCK_SCHEDULES_FOR_CLAIM, None, context="lock schedules for a pass")
    sql = q.CLAIM_DUE_SCHEDULES if job_types is None else q.CLAIM_DUE_SCHEDULES_OF_TYPES
    rows = execute(
        cursor,
        sql,
        {"limit": limit, "now": now, "job_types": job_types},
        context="claim due schedules",
    ).fetchall()
    clock = rows[0][15] if rows else None
    return [DueSchedule.from_row(row) for row in rows], clock


def validate_pass_arguments(
    job_types: Iterable[str] | None, limit: object, now: object
) -> tuple[list[str] | None, int, dt.datetime | None]:
    types = None if job_types is None else validate_job_types(job_types)
    if type(limit) is not int or not 1 <= limit <= BATCH_MAX:
        raise RunledgerError.for_code(
            Code.SCHEDULE_INVALID_ARGUMENT, f"limit must be an int from 1 to {BATCH_MAX}"
        )
    clock = None if now is None else aware_utc(now, Code.SCHEDULE_INVALID_ARGUMENT, "now")
    return types, limit, clock


def run_schedule_pass(
    job_types: Iterable[str] | None = None,
    *,
    limit: int = 500,
    now: dt.datetime | None = None,
    using: str = "default",
) -> SchedulePassReport:
    """Fire the due schedules of ``job_types`` (None: every job type), at most ``limit``.

    Transaction: owns one READ COMMITTED transaction; refuses to run inside an atomic block.
    Idle workers are woken once it commits jobs.

    Args:
        now: decide what is due as of this time instead of the database clock (tests).

    Returns:
        The pass's counts; ``batch_was_full`` when it claimed ``limit`` schedules.

    Raises:
        RunledgerError: ``job_schedule.requires_own_transaction``,
            ``job_schedule.invalid_argument``, a classified database error (the pass rolled
            back: nothing was fired).
    """
    connection = connections[using]
    if connection.in_atomic_block or not connection.get_autocommit():
        raise RunledgerError.for_code(
            Code.SCHEDULE_REQUIRES_OWN_TRANSACTION, "run_schedule_pass inside an atomic block"
        )
    types, batch, clock = validate_pass_arguments(job_types, limit, now)
    if types is not None and not types:
        return SchedulePassReport()

    def body(cursor: CursorWrapper) -> SchedulePassReport:
        claimed, db_now = claim_due(cursor, types, limit=batch, now=clock)
        if not claimed or db_now is None:
            return SchedulePassReport()
        report = materialize(cursor, claimed, clock or db_now)
        return SchedulePassReport(
            claimed=report.claimed,
            fired=report.fired,
            skipped=report.skipped,
            coalesced=report.coalesced,
            failed=report.failed,
            batch_was_full=len(claimed) == batch,
        )

    report = in_owned_transaction(using, body, operation="schedule pass")
    if report.fired:
        wake_after_commit(using, JOBS_CHANNEL)
    return report


def next_due_at(
    job_types: Iterable[str] | None = None, *, using: str = "default"
) -> tuple[dt.datetime, dt.datetime | None]:
    """The database's now and the earliest cursor of the firing schedules of ``job_types``
    (None when there is none): one autocommit statement, the idle scheduler's only one.

    Raises:
        RunledgerError: ``job.invalid_job_type`` and the like; a classified database error.
    """
    types = None if job_types is None else validate_job_types(job_types)
    sql = q.PEEK_SCHEDULES if types is None else q.PEEK_SCHEDULES_OF_TYPES
    try:
        with connections[using].cursor() as cursor:
            cursor.execute(sql, {"job_types": types})
            row = cursor.fetchone()
    except DatabaseError as exc:
        raise classify(exc, "look at schedule cursors") from exc
    return row[0], row[1]
