"""Value types shared by every layer: statuses, scopes, inputs and results."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, asdict, dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeAlias

from django.db import models

from .errors import Code, RunledgerError

JSONValue: TypeAlias = (
    Mapping[str, "JSONValue"] | Sequence["JSONValue"] | str | int | float | bool | None
)
"""A JSON-native value: what a payload may contain."""

Disposition = Literal["inserted", "existing"]

# Names of schema objects that more than one layer needs (models define them, the error
# classifier matches on them).
FK_INTENT_PROMOTED_JOB = "fk_job_enqueue_intents_promoted_job"
UQ_JOB_QUEUE_ORG = "uq_job_queue_type_idempotency_org"
UQ_JOB_QUEUE_GLOBAL = "uq_job_queue_type_idempotency_global"
FK_JOB_QUEUE_JOB_TYPE = "fk_job_queue_job_type"

MIN_SERVER_VERSION = 150000
"""The oldest PostgreSQL the product supports (the system check and runledger_check)."""

PROMOTION_BATCH_LIMIT_MAX = 24
"""Savepoints per promotion pass: 24 x 2 subtransaction ids stays below PostgreSQL's 64-entry cache."""

PAGE_LIMIT_MAX = 1000
RETENTION_BATCH_MAX = 1000


class IntentStatus(models.TextChoices):
    PENDING = "PENDING"
    PROMOTED = "PROMOTED"
    CONFLICTED = "CONFLICTED"


class JobStatus(models.TextChoices):
    PENDING = "PENDING"
    LEASED = "LEASED"
    SUCCEEDED = "SUCCEEDED"
    DEAD_LETTERED = "DEAD_LETTERED"
    CANCELED = "CANCELED"


class JobStage(models.TextChoices):
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    COMPLETED = "completed"


class FailureKind(models.TextChoices):
    """Why an attempt failed (reference 1.1); RETRYABLE, TIMEOUT and LEASE_EXPIRED may retry."""

    RETRYABLE = "RETRYABLE"
    TERMINAL = "TERMINAL"
    PANICKED = "PANICKED"
    TIMEOUT = "TIMEOUT"
    LEASE_EXPIRED = "LEASE_EXPIRED"

    @property
    def is_retryable(self) -> bool:
        return self not in (FailureKind.TERMINAL, FailureKind.PANICKED)


class AttemptOutcome(models.TextChoices):
    """How an attempt ended. INTERRUPTED: its worker stopped and handed the job back."""

    SUCCEEDED = "SUCCEEDED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    DEAD_LETTERED = "DEAD_LETTERED"
    CANCELED = "CANCELED"
    INTERRUPTED = "INTERRUPTED"
    CONTINUED = "CONTINUED"
    """The handler ended its slice with ``ContinueJob``: the job runs again as its next run."""


class JobEventType(models.TextChoices):
    ENQUEUED = "ENQUEUED"
    LEASED = "LEASED"
    HEARTBEAT = "HEARTBEAT"
    STAGE_CHANGED = "STAGE_CHANGED"
    PROGRESS = "PROGRESS"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    DEAD_LETTERED = "DEAD_LETTERED"
    CANCELED = "CANCELED"
    REQUEUED = "REQUEUED"


@dataclass(frozen=True, slots=True)
class ReadScope:
    """Which intents a read may see. It selects rows; authorising the caller stays the host's job.

    Use ``ReadScope.GLOBAL`` (rows without an organization), ``ReadScope.ADMIN`` (every row) or
    ``ReadScope.organization(org_id)`` (exactly that tenant).
    """

    kind: Literal["global", "organization", "admin"]
    organization_id: uuid.UUID | None = None

    GLOBAL: ClassVar[ReadScope]
    ADMIN: ClassVar[ReadScope]

    @classmethod
    def organization(cls, organization_id: uuid.UUID | str) -> ReadScope:
        """Return the scope of exactly one tenant."""
        return cls(kind="organization", organization_id=coerce_uuid(organization_id))

    @property
    def is_admin(self) -> bool:
        return self.kind == "admin"


ReadScope.GLOBAL = ReadScope(kind="global")
ReadScope.ADMIN = ReadScope(kind="admin")


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueRequest:
    """A validated enqueue request: the columns to write plus its canonical snapshot v1."""

    job_type: str
    organization_id: uuid.UUID | None
    payload_json: str
    priority: int | None
    max_attempts: int | None
    timeout_seconds: int | None
    next_run_at: dt.datetime | None
    idempotency_key: str | None
    stage: str
    execution_resource_key: str | None
    snapshot_json: str
    """Canonical request snapshot v1 as JSON text; compared with jsonb ``=`` in PostgreSQL."""
    trace_context: str | None = None
    """The enqueuing span's propagation fields as JSON text, stored beside the row and never
    in the snapshot (services/tracing.py)."""


@dataclass(frozen=True, slots=True)
class IntentRequest:
    """One request of ``record_intents``: the arguments of ``record_intent``, as a value."""

    job_type: str
    payload: Any
    _: KW_ONLY
    idempotency_key: str
    organization_id: uuid.UUID | str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout_seconds: int | None = None
    next_run_at: dt.datetime | None = None
    stage: str | None = None
    execution_resource_key: str | None = None


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One request of ``enqueue_jobs``: the arguments of ``enqueue_job``, as a value."""

    job_type: str
    payload: Any
    _: KW_ONLY
    idempotency_key: str | None = None
    organization_id: uuid.UUID | str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout_seconds: int | None = None
    next_run_at: dt.datetime | None = None
    stage: str | None = None
    execution_resource_key: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentOutcome:
    """What ``record_intent`` observed for the idempotency key."""

    intent_id: uuid.UUID
    status: IntentStatus
    job_id: uuid.UUID | None
    """The promoted job; set only when ``status`` is PROMOTED."""
    disposition: Disposition
    """``"inserted"`` for a new intent, ``"existing"`` for an identical retry."""

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-ready data (ids as strings, status as its word)."""
        return {
            "intent_id": str(self.intent_id),
            "status": self.status.value,
            "state": _outcome_state(self.status, self.job_id),
            "job_id": str(self.job_id) if self.job_id else None,
            "disposition": self.disposition,
        }


def _outcome_state(status: IntentStatus, job_id: uuid.UUID | None) -> dict[str, str]:
    if status == IntentStatus.PROMOTED:
        return {"state": "promoted", "job_id": str(job_id)}
    return {"state": status.value.lower()}


@dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueOutcome:
    """The job a keyed or unkeyed enqueue resolved to."""

    job_id: uuid.UUID
    status: JobStatus
    run_number: int
    disposition: Disposition

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": str(self.job_id),
            "status": self.status.value,
            "run_number": self.run_number,
            "disposition": self.disposition,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentMetrics:
    """Per-job-type intent health (reference 4.3); terminal populations use 24-hour windows."""

    job_type: str
    pending_count: int
    retrying_count: int
    max_promotion_attempts: int
    conflicted_24h: int
    promoted_24h: int
    oldest_pending_at: dt.datetime | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.oldest_pending_at is not None:
            data["oldest_pending_at"] = format_timestamp(self.oldest_pending_at)
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class PromotionReport:
    """What one promotion pass did. ``total_promoted == inserted_jobs + existing_jobs``."""

    inserted_jobs: int = 0
    existing_jobs: int = 0
    conflicted: int = 0
    definition_became_unavailable: int = 0
    retry_deferred: int = 0
    total_promoted: int = 0
    batch_was_full: bool = False
    """The pass may have left eligible work behind: drain again without waiting."""

    @property
    def anything_happened(self) -> bool:
        return bool(
            self.total_promoted
            or self.conflicted
            or self.definition_became_unavailable
            or self.retry_deferred
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class PromotionError:
    """The sanitized error a promotion attempt stored: a code and its client message."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True, slots=True, kw_only=True)
class IntentState:
    """The typed lifecycle of a persisted intent (reference 5).

    ``state`` is one of ``initial_pending``, ``retry_pending``, ``promoted``, ``conflicted``; the
    other fields are set exactly when that state carries them.
    """

    state: Literal["initial_pending", "retry_pending", "promoted", "conflicted"]
    promotion_attempts: int = 0
    last_attempted_at: dt.datetime | None = None
    job_id: uuid.UUID | None = None
    promoted_at: dt.datetime | None = None
    conflicted_at: dt.datetime | None = None
    error: PromotionError | None = None

    @property
    def status(self) -> IntentStatus:
        if self.state == "promoted":
            return IntentStatus.PROMOTED
        if self.state == "conflicted":
            return IntentStatus.CONFLICTED
        return IntentStatus.PENDING

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"state": self.state}
        if self.state == "initial_pending":
            return data
        data["promotion_attempts"] = self.promotion_attempts
        data["last_attempted_at"] = format_timestamp(self.last_attempted_at)
        if self.state == "promoted":
            data["job_id"] = str(self.job_id)
            data["promoted_at"] = format_timestamp(self.promoted_at)
        if self.state == "conflicted":
            data["conflicted_at"] = format_timestamp(self.conflicted_at)
        if self.error is not None:
            data["error"] = self.error.to_dict()
        return data


def format_timestamp(value: dt.datetime | None) -> str | None:
    """RFC 3339 in UTC with exactly six fractional digits and ``Z`` (the snapshot's format)."""
    if value is None:
        return None
    utc = value.astimezone(dt.UTC)
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:"
        f"{utc.second:02d}.{utc.microsecond:06d}Z"
    )


def coerce_uuid(value: object, code: Code = Code.INVALID_ORGANIZATION_ID) -> uuid.UUID:
    """Accept a UUID or its text form; anything else is a validation error under ``code``."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise RunledgerError.for_code(code, f"expected a UUID, got {type(value).__name__}")


# --- the worker runtime ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDefaults:
    """The defaults a handler declares for its job type; None keeps the table's default.
    The limits apply when the definition is created; an existing one keeps the operator's."""

    job_type: str
    max_attempts: int | None = None
    timeout_seconds: int | None = None
    priority: int | None = None
    max_concurrency: int | None = None
    rate_limit: tuple[int, int] | None = None
    """(count, period_seconds): at most count job starts per period."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLease:
    """The exact lease a worker holds: every worker-side write must match all four fields."""

    job_id: uuid.UUID
    run_number: int
    attempt: int
    worker_id: str
    workflow_step_id: uuid.UUID | None = field(default=None, compare=False)
    """The workflow step the job runs, as its claim read it (not part of the fence): a plain
    job's completion is one statement, a workflow job's also releases its dependents."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedJob:
    """A job a worker has just leased and marked running, with what its handler needs."""

    lease: JobLease
    job_type: str
    organization_id: uuid.UUID | None
    payload: Any
    max_attempts: int
    timeout_seconds: int
    checkpoint: Any
    claimed_at: dt.datetime
    """The database clock when the lease began (the handler's deadline counts from here)."""
    lease_expires_at: dt.datetime
    due_at: dt.datetime | None = None
    """The later of the job's creation and its ``next_run_at``: since when it was waiting
    (database clock; the start delay is ``claimed_at`` minus this)."""
    decode_error: str | None = None
    """Why the stored payload or checkpoint could not be decoded; such a job dead-letters."""
    trace_context: str | None = None
    """The enqueuing span's propagation fields as JSON text (services/tracing.py)."""

    @property
    def deadline(self) -> dt.datetime:
        return self.claimed_at + dt.timedelta(seconds=self.timeout_seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobFailure:
    """A failed attempt as the worker reports it (reference 7, ``JobFailureUpdate``)."""

    kind: FailureKind
    code: str
    message: str
    error_class: str | None = None
    """The exception's dotted class path, when an exception caused it."""
    traceback: str | None = None
    policy_retry_delay_ms: int | None = None
    """The backoff policy's delay; required when the failure may retry."""
    retry_after_ms: int | None = None
    """The handler asked to run again this many milliseconds from now (``RetryJob(after=)``)."""
    retry_at: dt.datetime | None = None
    """The handler asked to run again at this time (``RetryJob(at=)``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayOutcome:
    """A replay of a succeeded job: the new job, and the source run it was made from.

    ``disposition`` is ``"inserted"``, or ``"existing"`` when the same request key and reason
    were replayed before (``status`` and ``run_number`` are then the replay's current ones).
    """

    job_id: uuid.UUID
    status: JobStatus
    run_number: int
    disposition: Literal["inserted", "existing"]
    source_job_id: uuid.UUID
    source_run_number: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": str(self.job_id),
            "status": str(self.status),
            "run_number": self.run_number,
            "disposition": self.disposition,
            "source_job_id": str(self.source_job_id),
            "source_run_number": self.source_run_number,
        }


RATE_LIMIT_COUNT_MAX = 10_000
"""The most starts a rate limit may allow per period: the claim keeps one timestamp per start
of the window (a higher rate takes a shorter period)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTypeControl:
    """A job type's queue control (docs/queue-control.md): its pause and its limits, as the
    definition row holds them after the call. ``changed`` is False when the call found the
    state it asked for already there (a second pause keeps the first pause time)."""

    job_type: str
    paused_at: dt.datetime | None
    paused_reason: str | None
    paused_by: str | None
    max_concurrency: int | None
    rate_limit_count: int | None
    rate_limit_period_seconds: int | None
    changed: bool

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_type": self.job_type,
            "paused": self.paused,
            "paused_at": None if self.paused_at is None else self.paused_at.isoformat(),
            "paused_reason": self.paused_reason,
            "paused_by": self.paused_by,
            "max_concurrency": self.max_concurrency,
            "rate_limit_count": self.rate_limit_count,
            "rate_limit_period_seconds": self.rate_limit_period_seconds,
            "changed": self.changed,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinuationOutcome:
    """Where a continued job stands: its next run, and when that run is due."""

    run_number: int
    next_run_at: dt.datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureOutcome:
    """Where a failure left the job: PENDING with its next run, or DEAD_LETTERED."""

    status: JobStatus
    next_run_at: dt.datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResult:
    """A heartbeat over several leases: renewed, still held but busy (row locked), or lost."""

    renewed: frozenset[uuid.UUID]
    busy: frozenset[uuid.UUID]
    lost: frozenset[uuid.UUID]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReapReport:
    """What one reaper pass did with expired leases."""

    retried: int = 0
    dead_lettered: int = 0
    deferred: int = 0
    """Rows that failed to reap; their lease was pushed forward so they do not block the rest."""
    released_resources: int = 0
    batch_was_full: bool = False
    next_run_ats: tuple[dt.datetime, ...] = ()
    """When the retried jobs become due (a worker sets a timer for them)."""
    moved: tuple[tuple[str, str], ...] = ()
    """(job type, ``requeued`` or ``dead_lettered``) per reaped job, for metrics."""

    @property
    def reaped(self) -> int:
        return self.retried + self.dead_lettered


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkReport:
    """What ``run_jobs`` (or a worker) did. ``lease_lost``: results the lease fence discarded."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead_lettered: int = 0
    lease_lost: int = 0
    continued: int = 0
    """Slices that ended with ``ContinueJob`` (the job comes back as its next run)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobMetrics:
    """Per-job-type queue health: the live queue now, and attempts of the last 24 hours.

    An expired lease is still LEASED until the reaper moves it, so it counts in both
    ``leased_count`` and ``expired_lease_count``.
    """

    job_type: str
    due_count: int
    """PENDING jobs whose ``next_run_at`` has come: runnable now."""
    scheduled_count: int
    """PENDING jobs whose ``next_run_at`` lies in the future (retries waiting, scheduled runs)."""
    leased_count: int
    expired_lease_count: int
    """LEASED jobs whose lease ran out: a worker died or stalled; the reaper will move them."""
    succeeded_24h: int
    retried_24h: int
    dead_lettered_24h: int
    oldest_due_at: dt.datetime | None
    """The ``next_run_at`` of the longest-waiting due job: how far behind the workers are."""
    paused: bool = False
    """The type is paused (docs/queue-control.md): its due jobs wait for a resume, not for
    workers."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["oldest_due_at"] = format_timestamp(self.oldest_due_at)
        return data


# --- periodic schedules ----------------------------------------------------------------------

FK_SCHEDULE_JOB_TYPE = "fk_job_schedules_job_type"
UQ_SCHEDULE_NAME = "uq_job_schedules_name"
UQ_SCHEDULE_FIRE = "uq_schedule_fires_schedule_scheduled_for"
GUARD_DEFINITION_ACTIVE_SCHEDULE = "chk_job_definitions_no_active_schedule"
"""The name the definitions trigger reports when a disable meets an active schedule."""


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """What a schedule (or a workflow step) enqueues for a target that is not a plain job
    type: the job type, the payload and the target's own priority."""

    job_type: str
    payload: dict[str, JSONValue]
    priority: int | None


class JobTarget(Protocol):
    """Anything that can say which job it stands for, given arguments (a ``django.tasks``
    Task made with RunledgerTaskBackend). Lower layers accept ``str | JobTarget``."""

    def job_target(
        self, args: Sequence[JSONValue], kwargs: Mapping[str, JSONValue]
    ) -> TargetSpec: ...


class CatchUp(models.TextChoices):
    """What a schedule does with fires missed while no scheduler ran."""

    LATEST = "latest"
    """One job for the oldest missed fire, then the next future fire (the seed's rule)."""
    SKIP = "skip"
    """Fires later than the grace are recorded as skipped, not run."""
    ALL = "all"
    """Every missed fire runs, oldest first, up to the catch-up limit; the rest are counted."""


class Overlap(models.TextChoices):
    """What a fire does while the previous fire's job has not finished."""

    ALLOW = "allow"
    SKIP = "skip"
    """No job while the previous fire's job is PENDING or LEASED; the fire is recorded."""
    SERIALIZE = "serialize"
    """Jobs share an execution resource key: one runs at a time, later ones wait."""


class FireKind(models.TextChoices):
    SCHEDULED = "scheduled"
    BACKFILL = "backfill"
    MANUAL = "manual"


class FireOutcome(models.TextChoices):
    ENQUEUED = "enqueued"
    SKIPPED_OVERLAP = "skipped_overlap"
    """The previous fire's job was still pending or leased (overlap ``skip``)."""
    SKIPPED_LATE = "skipped_late"
    """Missed by more than the grace (catch-up ``skip``)."""
    FAILED = "failed"
    """No job yet: the fire failed and is retried (``attempts``, ``error_code``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """A validated schedule: every column a write stores, checked before any SQL."""

    name: str
    job_type: str
    payload_json: str
    """The payload template as JSON text (a task's arguments for a task target)."""
    cron: str | None
    """As written (a nickname stays a nickname); exactly one of cron and interval is set."""
    interval_seconds: int | None
    timezone: str
    organization_id: uuid.UUID | None
    priority: int | None
    jitter_seconds: int
    catch_up: str
    catch_up_grace_seconds: int
    catch_up_limit: int
    overlap: str
    enabled: bool
    run_on_create: bool = False

    @property
    def timing_key(self) -> tuple[str | None, int | None, str]:
        """What decides the fire times: a change moves the cursor to the next fire."""
        return (self.cron, self.interval_seconds, self.timezone)


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulePassReport:
    """What one scheduler pass did (``run_schedules --once --json`` prints it)."""

    claimed: int = 0
    """Due schedules the pass locked."""
    fired: int = 0
    """Jobs created."""
    skipped: int = 0
    """Fires recorded without a job (overlap ``skip``, catch-up ``skip``)."""
    coalesced: int = 0
    """Missed fires neither run nor recorded one by one (catch-up ``latest``, ``all``'s
    truncated rest)."""
    failed: int = 0
    """Schedules whose fire failed and was deferred."""
    batch_was_full: bool = False
    """The pass claimed as many schedules as it was allowed: more may be due."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __add__(self, other: SchedulePassReport) -> SchedulePassReport:
        return SchedulePassReport(
            claimed=self.claimed + other.claimed,
            fired=self.fired + other.fired,
            skipped=self.skipped + other.skipped,
            coalesced=self.coalesced + other.coalesced,
            failed=self.failed + other.failed,
            batch_was_full=other.batch_was_full,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSyncReport:
    """What a sync of the declared schedules changed (names, sorted)."""

    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deactivated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deactivated)

    def to_dict(self) -> dict[str, Any]:
        return {key: list(value) for key, value in asdict(self).items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class BackfillReport:
    """What a backfill over a time range did."""

    fired: int = 0
    existing: int = 0
    """Fires of the range already in the ledger: left as they are."""
    truncated: bool = False
    """The range held more fires than the limit; the oldest ``fired + existing`` were done."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleMetrics:
    """One schedule's health: how late it is and what its fires did."""

    name: str
    job_type: str
    organization_id: uuid.UUID | None
    active: bool
    paused: bool
    next_fire_at: dt.datetime
    lag_seconds: float
    """How long its cursor has been due (0 when it is not due): a scheduler should keep this
    near zero."""
    stuck: bool
    """Due for longer than two poll intervals: no scheduler is taking it."""
    fires: int
    skipped: int
    coalesced: int
    consecutive_failures: int
    last_error_code: str | None
    last_fired_at: dt.datetime | None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["organization_id"] = str(self.organization_id) if self.organization_id else None
        data["next_fire_at"] = format_timestamp(self.next_fire_at)
        data["last_fired_at"] = format_timestamp(self.last_fired_at)
        return data


# --- queue state for metrics (reference observability 2.2) ----------------------------------

OTHER_JOB_TYPE_LABEL = "other"
"""The label the job types past the metrics type limit are folded into."""


@dataclass(frozen=True, slots=True, kw_only=True)
class JobTypeQueueState:
    """The queue gauges of one job type label at one instant (the database clock).

    The five job counts partition the job type's PENDING, LEASED and DEAD_LETTERED rows. A
    label past the type limit (``other``) sums several types; it has no definition gauges. A
    type with pending intents but no definition is listed too (its intents wait forever).
    """

    job_type: str
    definitions: int
    """How many job types this label covers (more than one only for ``other``)."""
    due: int
    scheduled: int
    """PENDING, due later: scheduled runs and retries waiting out their backoff."""
    leased: int
    """LEASED with a lease that has not expired."""
    lease_expired: int
    """LEASED with an expired lease the reaper has not moved yet."""
    dead_lettered: int
    oldest_due_age_seconds: float
    """Now minus the earliest ``next_run_at`` among due jobs; 0 when none is due."""
    oldest_leased_age_seconds: float
    """Now minus the start of the oldest current lease; 0 when none is leased."""
    enabled: bool | None
    """The definition's ``is_enabled``; None for a folded label or a type without one."""
    intents_pending: int = 0
    """PENDING intents never attempted by a promoter."""
    intents_retrying: int = 0
    """PENDING intents whose promotion was deferred at least once."""
    oldest_intent_age_seconds: float = 0.0
    """Now minus the creation of the oldest PENDING intent; 0 when none."""
    paused: bool | None = None
    """Whether the type is paused (queue control); None for a folded label or no definition."""
    concurrency_limit: int | None = None
    """The definition's ``max_concurrency``; None: unlimited (or a folded label)."""
    rate_limit_per_second: float | None = None
    """The definition's start rate limit as starts per second; None: unlimited."""
    workers_live: int | None = None
    """Live workers (fresh ``runledger_workers`` rows) serving the type; None for a folded
    label, whose types' workers may overlap."""


DashboardWindow: TypeAlias = Literal["hour", "day"]
"""The dashboard's time windows: the last hour in one-minute buckets, the last day in
five-minute buckets."""

DASHBOARD_WINDOWS: Mapping[str, tuple[int, int]] = {"hour": (60, 60), "day": (300, 288)}
"""Each window's bucket width in seconds and its number of buckets."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorCodeSeries:
    """Failed attempts per bucket under one error code; ``code`` None folds every code beyond
    the top few into one "other" series."""

    code: str | None
    counts: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueDashboard:
    """The dashboard's time series over one window, one value per bucket (oldest first).

    Throughput and failures come from the attempts' finish times. Depth and oldest-due age come
    from the queue samples (``runledger_queue_samples``), the last sample in each bucket (the
    highest age): None where no sample was taken, which differs from an empty queue (0).
    """

    window: DashboardWindow
    job_type: str | None
    """The one job type shown, or None for every type together."""
    bucket_seconds: int
    bucket_starts: tuple[dt.datetime, ...]
    generated_at: dt.datetime
    succeeded: tuple[int, ...]
    retried: tuple[int, ...]
    dead_lettered: tuple[int, ...]
    failures_by_code: tuple[ErrorCodeSeries, ...]
    due: tuple[int | None, ...]
    scheduled: tuple[int | None, ...]
    leased: tuple[int | None, ...]
    oldest_due_age_seconds: tuple[float | None, ...]

    @property
    def sampled(self) -> bool:
        """Whether any queue sample fell in the window (the sampler runs)."""
        return any(value is not None for value in self.due)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSampleReport:
    """One sampler pass: the minute it recorded (None when skipped), the rows it wrote (one per
    job type, and the total), and the expired samples it removed."""

    sampled_at: dt.datetime | None
    job_types: int
    pruned: int
    skipped: str | None = None
    """Why nothing was written: ``"locked"`` (another pass holds the lock) or ``"done"``
    (this minute is already sampled)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["sampled_at"] = format_timestamp(self.sampled_at)
        return data


# --- workflows (issue 19) ------------------------------------------------------------------


class WorkflowRunStatus(models.TextChoices):
    """A run's status, derived from its step counters at every transition (reference 2.2)."""

    RUNNING = "RUNNING"
    WAITING_FOR_EXTERNAL = "WAITING_FOR_EXTERNAL"
    SUCCEEDED = "SUCCEEDED"
    COMPLETED_WITH_ERRORS = "COMPLETED_WITH_ERRORS"
    CANCELED = "CANCELED"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_RUN_STATUSES


_TERMINAL_RUN_STATUSES = frozenset(
    {
        WorkflowRunStatus.SUCCEEDED,
        WorkflowRunStatus.COMPLETED_WITH_ERRORS,
        WorkflowRunStatus.CANCELED,
    }
)


class WorkflowStepStatus(models.TextChoices):
    """A step's status. A JOB step stays ENQUEUED while its job is PENDING or LEASED: the claim
    writes no step row (the seed's per-claim step UPDATE is one of its known costs, 3.16), so
    whether it runs is read from its job."""

    BLOCKED = "BLOCKED"
    ENQUEUED = "ENQUEUED"
    WAITING_FOR_EXTERNAL = "WAITING_FOR_EXTERNAL"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"


class WorkflowStepKind(models.TextChoices):
    JOB = "JOB"
    EXTERNAL = "EXTERNAL"


class WorkflowReleaseMode(models.TextChoices):
    """An edge: ON_SUCCESS runs the dependent only after a success (else it is canceled);
    ON_TERMINAL runs it whatever the prerequisite's outcome."""

    ON_SUCCESS = "ON_SUCCESS"
    ON_TERMINAL = "ON_TERMINAL"


class WorkflowRecoveryMode(models.TextChoices):
    FULL_REPLAY = "FULL_REPLAY"
    """Every step runs again (the seed's only mode)."""
    RESUME = "RESUME"
    """Succeeded steps and their outputs are carried over; the rest run again."""


WORKFLOW_TERMINAL_CHANNEL = "runledger_workflow_run_terminal"
"""The channel a run's first terminal transition notifies, with {workflow_run_id, status}."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowStart:
    """What ``start_workflow`` did: ``disposition`` is ``"inserted"``, ``"existing"`` (the same
    idempotency key and graph) or ``"active"`` (the running run holding its active key)."""

    run_id: uuid.UUID
    status: WorkflowRunStatus
    disposition: Literal["inserted", "existing", "active"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowIntentOutcome:
    """What ``record_workflow_intent`` observed for the idempotency key: ``disposition`` is
    ``"inserted"`` for a new intent, ``"existing"`` for an identical retry; ``workflow_run_id``
    is set once the intent is PROMOTED."""

    intent_id: uuid.UUID
    status: IntentStatus
    workflow_run_id: uuid.UUID | None
    disposition: Disposition

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-ready data (ids as strings, status as its word)."""
        return {
            "intent_id": str(self.intent_id),
            "status": self.status.value,
            "workflow_run_id": str(self.workflow_run_id) if self.workflow_run_id else None,
            "disposition": self.disposition,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowPromotionReport:
    """What one workflow-intent promotion pass did. ``inserted_runs`` started a run;
    ``existing_runs`` found the run its key already had (same graph)."""

    inserted_runs: int = 0
    existing_runs: int = 0
    conflicted: int = 0
    definition_became_unavailable: int = 0
    retry_deferred: int = 0
    batch_was_full: bool = False
    """The pass may have left eligible work behind: drain again without waiting."""

    @property
    def total_promoted(self) -> int:
        return self.inserted_runs + self.existing_runs

    @property
    def anything_happened(self) -> bool:
        return bool(
            self.total_promoted
            or self.conflicted
            or self.definition_became_unavailable
            or self.retry_deferred
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
