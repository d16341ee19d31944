"""What ``manage.py runledger_check`` checks: a smoke test and a readiness check for a deploy.

Each check reports on its own (ok, failed or skipped, with the facts it found), and each
failure class has its own exit code, so a probe or a deploy script can tell "the database is
down" from "a migration is missing" from "the backlog is too old". The checks run in order and
stop at the first one the others depend on: without a database nothing else can be checked.

Every statement runs under a short statement cap, on catalogs or index-backed rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.apps import apps
from django.db import DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from ..db import check_queries
from ..db.classify import classify
from ..db.transaction import run_capped
from ..domain import MIN_SERVER_VERSION
from ..errors import Code, RunledgerError
from ..models import JobDefinition
from ..validation import validate_job_types
from ._lease import DEFAULT_USING
from .worker_registry import live_workers_by_job_type

EXIT_OK = 0
EXIT_DATABASE = 3
EXIT_SERVER_VERSION = 4
EXIT_MIGRATIONS = 5
EXIT_SCHEMA = 6
EXIT_DEFINITIONS = 7
EXIT_BACKLOG = 8
EXIT_WORKERS = 9

CHECKS: dict[str, int] = {
    "database": EXIT_DATABASE,
    "server_version": EXIT_SERVER_VERSION,
    "migrations": EXIT_MIGRATIONS,
    "schema": EXIT_SCHEMA,
    "definitions": EXIT_DEFINITIONS,
    "backlog": EXIT_BACKLOG,
    "workers": EXIT_WORKERS,
}
"""Every check in the order it runs, with the exit code of its failure."""

CHECK_LOCK_CAP_MS = 1_000
CHECK_STATEMENT_CAP_MS = 10_000
DUE_COUNT_BOUND = 1_000_000
"""The due jobs are counted up to this many (the threshold must be below it)."""

SCHEMA_OBJECTS: tuple[tuple[str, str], ...] = (
    ("constraint", "chk_job_enqueue_intents_state_fields"),
    ("constraint", "fk_job_enqueue_intents_promoted_job"),
    ("constraint", "fk_job_events_job"),
    ("constraint", "fk_job_queue_job_type"),
    ("constraint", "fk_job_schedules_job_type"),
    ("function", "runledger_record_intent"),
    ("function", "runledger_set_updated_at_timestamp"),
    ("function", "runledger_uuidv7"),
    ("index", "idx_job_enqueue_intents_pending"),
    ("index", "idx_job_queue_claim"),
    ("index", "idx_job_queue_leased_expiry"),
    ("index", "idx_job_queue_pending_metrics"),
    ("index", "uq_job_enqueue_intents_type_idempotency_global"),
    ("index", "uq_job_enqueue_intents_type_idempotency_org"),
    ("index", "uq_job_queue_type_idempotency_global"),
    ("index", "uq_job_queue_type_idempotency_org"),
    ("index", "uq_schedule_fires_schedule_scheduled_for"),
    ("trigger", "trg_job_queue_set_updated_at"),
    ("trigger", "trg_job_queue_sync_execution_resource_claim"),
)
"""Objects the product relies on by name (the error classifier, the claim, the intent path),
beyond the models' tables, which are checked too."""

Status = Literal["ok", "failed", "skipped"]


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    status: Status
    detail: str
    exit_code: int
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "detail": self.detail, **self.facts}


@dataclass(frozen=True)
class SystemCheckReport:
    outcomes: list[CheckOutcome]

    @property
    def exit_code(self) -> int:
        """The code of the first failed check (0 when none failed)."""
        for outcome in self.outcomes:
            if outcome.status == "failed":
                return outcome.exit_code
        return EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.exit_code == EXIT_OK,
            "exit_code": self.exit_code,
            "checks": {outcome.name: outcome.to_dict() for outcome in self.outcomes},
        }


@dataclass(frozen=True)
class SystemCheckOptions:
    handler_job_types: Sequence[str] = ()
    """The job types of the registered handlers: each needs a definition."""
    max_oldest_due_age: float | None = None
    max_due_jobs: int | None = None
    require_workers: bool = False
    """Fail when a job type has due jobs and no live worker serves it."""
    skip: frozenset[str] = frozenset()


def _validate(options: object) -> SystemCheckOptions:
    if not isinstance(options, SystemCheckOptions):
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "expected SystemCheckOptions")
    unknown = set(options.skip) - set(CHECKS)
    if unknown:
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"unknown checks to skip: {', '.join(sorted(unknown))}"
        )
    age = options.max_oldest_due_age
    if age is not None and (isinstance(age, bool) or not isinstance(age, int | float) or age < 0):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, "max_oldest_due_age must be a non-negative number"
        )
    due = options.max_due_jobs
    if due is not None and (type(due) is not int or not 0 <= due < DUE_COUNT_BOUND):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"max_due_jobs must be an int from 0 to {DUE_COUNT_BOUND - 1}"
        )
    validate_job_types(options.handler_job_types)
    return options


def run_system_checks(
    options: SystemCheckOptions | None = None, *, using: str = DEFAULT_USING
) -> SystemCheckReport:
    """Run every check not skipped; never raises for what it checks.

    Transaction: each statement is its own implicit transaction, capped at
    ``CHECK_STATEMENT_CAP_MS``; nothing is written.

    Raises:
        RunledgerError: ``job.invalid_argument`` for bad options, before any SQL.
    """
    checked = _validate(options or SystemCheckOptions())
    outcomes: list[CheckOutcome] = []
    blocked = ""
    for name, exit_code in CHECKS.items():
        if name in checked.skip:
            outcomes.append(CheckOutcome(name, "skipped", "skipped on request", exit_code))
            continue
        if blocked:
            outcomes.append(CheckOutcome(name, "skipped", blocked, exit_code))
            continue
        try:
            outcome = _CHECKERS[name](checked, using)
        except RunledgerError as error:
            outcome = CheckOutcome(
                name,
                "failed",
                f"{error.code}: {error.client_message}",
                exit_code,
                {"error_code": error.code, "sqlstate": error.sqlstate},
            )
        outcome = CheckOutcome(name, outcome.status, outcome.detail, exit_code, outcome.facts)
        outcomes.append(outcome)
        if outcome.status == "failed" and name in {"database", "migrations", "schema"}:
            blocked = f"not checked: the {name.replace('_', ' ')} check failed"
    return SystemCheckReport(outcomes)


def _query(using: str, sql: str, params: dict[str, Any], context: str) -> list[tuple[Any, ...]]:
    return run_capped(
        using,
        sql,
        params,
        lock_ms=CHECK_LOCK_CAP_MS,
        statement_ms=CHECK_STATEMENT_CAP_MS,
        context=context,
    )


def _ok(name: str, detail: str, **facts: Any) -> CheckOutcome:
    return CheckOutcome(name, "ok", detail, 0, facts)


def _failed(name: str, detail: str, **facts: Any) -> CheckOutcome:
    return CheckOutcome(name, "failed", detail, 0, facts)


def _database(options: SystemCheckOptions, using: str) -> CheckOutcome:
    text = _query(using, check_queries.SERVER_VERSION, {}, "check the database")[0][1]
    return _ok("database", "the database answers", server_version=str(text))


def _server_version(options: SystemCheckOptions, using: str) -> CheckOutcome:
    number, text = _query(using, check_queries.SERVER_VERSION, {}, "read the server version")[0]
    facts = {"server_version": str(text), "server_version_num": int(number)}
    if int(number) < MIN_SERVER_VERSION:
        return _failed(
            "server_version",
            f"PostgreSQL {text} is older than {MIN_SERVER_VERSION // 10000}",
            **facts,
        )
    return _ok("server_version", f"PostgreSQL {text}", **facts)


def _migrations(options: SystemCheckOptions, using: str) -> CheckOutcome:
    try:
        loader = MigrationExecutor(connections[using]).loader
    except DatabaseError as exc:
        raise classify(exc, "read the applied migrations") from exc
    # Every node, not the plan to the leaves: a migration whose row is missing while a later
    # one's is present (a hand-edited history, a half-restored backup) must show too, and a
    # plan to an applied leaf would skip it.
    applied = set(loader.applied_migrations or ())
    unapplied: list[str] = []
    for leaf in loader.graph.leaf_nodes():
        for node in loader.graph.forwards_plan(leaf):
            name = f"{node[0]}.{node[1]}"
            if node not in applied and name not in unapplied:
                unapplied.append(name)
    if unapplied:
        return _failed(
            "migrations", f"{len(unapplied)} migrations not applied", unapplied=unapplied
        )
    return _ok("migrations", "every migration is applied", unapplied=[])


def _schema(options: SystemCheckOptions, using: str) -> CheckOutcome:
    config = apps.get_app_config("runledger")
    tables = sorted(
        model._meta.db_table
        for model in config.get_models()
        if model._meta.managed and not model._meta.proxy
    )
    wanted = [("table", table) for table in tables] + list(SCHEMA_OBJECTS)
    rows = _query(
        using,
        check_queries.MISSING_SCHEMA_OBJECTS,
        {"kinds": [kind for kind, _ in wanted], "names": [name for _, name in wanted]},
        "check the schema objects",
    )
    missing = [f"{kind} {name}" for kind, name in rows]
    if missing:
        return _failed("schema", f"{len(missing)} schema objects missing", missing=missing)
    return _ok("schema", f"{len(wanted)} schema objects present", missing=[])


def _definitions(options: SystemCheckOptions, using: str) -> CheckOutcome:
    types = validate_job_types(options.handler_job_types)
    try:
        found = dict(
            JobDefinition.objects.using(using)
            .filter(job_type__in=types)
            .values_list("job_type", "is_enabled")
        )
    except DatabaseError as exc:
        raise classify(exc, "read the job definitions") from exc
    missing = [job_type for job_type in types if job_type not in found]
    disabled = sorted(job_type for job_type, enabled in found.items() if not enabled)
    facts = {"handlers": len(types), "missing": missing, "disabled": disabled}
    if missing:
        return _failed(
            "definitions", f"{len(missing)} registered handlers have no job definition", **facts
        )
    return _ok("definitions", f"{len(types)} registered handlers have a definition", **facts)


def _backlog(options: SystemCheckOptions, using: str) -> CheckOutcome:
    age, due = _query(
        using, check_queries.BACKLOG, {"count_bound": DUE_COUNT_BOUND}, "check the backlog"
    )[0]
    facts = {
        "oldest_due_age_seconds": round(float(age), 3),
        "due_jobs": int(due),
        "due_jobs_capped": int(due) >= DUE_COUNT_BOUND,
        "max_oldest_due_age": options.max_oldest_due_age,
        "max_due_jobs": options.max_due_jobs,
    }
    problems = []
    if options.max_oldest_due_age is not None and float(age) > options.max_oldest_due_age:
        problems.append(
            f"the oldest due job waits {float(age):.0f} s (more than "
            f"{options.max_oldest_due_age:g} s)"
        )
    if options.max_due_jobs is not None and int(due) > options.max_due_jobs:
        problems.append(f"{int(due)} jobs are due (more than {options.max_due_jobs})")
    if problems:
        return _failed("backlog", "; ".join(problems), **facts)
    return _ok("backlog", f"{int(due)} due jobs, the oldest due {float(age):.0f} s ago", **facts)


def _workers(options: SystemCheckOptions, using: str) -> CheckOutcome:
    live = live_workers_by_job_type(using=using)
    facts: dict[str, Any] = {"live_workers": live}
    if not options.require_workers:
        return _ok("workers", f"{len(live)} job types have live workers", **facts)
    due_types = [
        str(row[0])
        for row in _query(
            using, check_queries.JOB_TYPES_WITH_DUE_JOBS, {}, "read the job types with due jobs"
        )
    ]
    unserved = [job_type for job_type in due_types if not live.get(job_type)]
    facts["unserved"] = unserved
    if unserved:
        return _failed(
            "workers", f"{len(unserved)} job types have due jobs and no live worker", **facts
        )
    return _ok("workers", "every job type with due jobs has a live worker", **facts)


_CHECKERS = {
    "database": _database,
    "server_version": _server_version,
    "migrations": _migrations,
    "schema": _schema,
    "definitions": _definitions,
    "backlog": _backlog,
    "workers": _workers,
}
