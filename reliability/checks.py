"""The harness's database side: setup before the run, the drain, and the invariants after it.

Imported only after ``django.setup()``. The checks compare the children's journals (what each
saw committed) with the rows the database holds once every writer has stopped and the
workers have run every job; ``job_checks`` holds the invariants of running jobs.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from django.core.management import call_command
from django.db import connection, connections

from runledger_django import promote_intents, promote_workflow_intents
from runledger_django.models import JobDefinition

from . import atomic
from .common import (
    APPLICATION_PREFIX,
    DORMANT,
    ENQUEUE_CONFLICT,
    HANDLER_RUNS_TABLE,
    JOB_TYPES,
    MAX_ATTEMPTS,
    OVERDUE_SECONDS,
    RunPaths,
    read_journal,
)
from .job_checks import JobWorld, WorkerFacts, check_jobs
from .ledger import read_ledger

DRAIN_DEADLINE_SECONDS = 180.0
"""Room for the backoff of intents deferred during the outage (1 s, 2 s, 4 s, ...)."""
JOBS_STALL_SECONDS = 60.0
"""The drain fails when the workers finished nothing for this long while a job has been due
as long. Jobs whose retry lies ahead are waited for (policy backoffs reach minutes), up to
JOBS_DEADLINE_SECONDS."""
JOBS_DEADLINE_SECONDS = 1200.0
QUIESCE_DEADLINE_SECONDS = 30.0

CREATE_HANDLER_RUNS = f"""
CREATE TABLE {HANDLER_RUNS_TABLE} (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id uuid NOT NULL,
    job_type text NOT NULL,
    run_number integer NOT NULL,
    attempt integer NOT NULL,
    worker_id text NOT NULL,
    pid integer NOT NULL,
    phase text NOT NULL CHECK (phase IN ('started', 'finished')),
    result text CHECK (result IN ('success', 'retry', 'raise')),
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
"""The harness's own table, where its handlers journal every run (no migration: it belongs to
the harness, not to an app anyone installs)."""
_HANDLER_RUNS = f"""
SELECT job_id::text, run_number, attempt, worker_id, pid, phase, result, recorded_at
FROM {HANDLER_RUNS_TABLE}
ORDER BY id
"""  # noqa: S608  (a constant table name)

# Reaped jobs wait the reaper's flat 30 s before they run again. In the drain the harness makes
# them due at once (only those: handler-requested and policy retries keep their schedule), and
# wakes the workers.
_EXPEDITE_REAPED = """
WITH moved AS (
    UPDATE runledger_job_queue SET next_run_at = now()
    WHERE status = 'PENDING' AND status_reason = 'LEASE_EXPIRED' AND next_run_at > now()
    RETURNING id
)
SELECT count(*) FROM moved
"""
_WAKE_WORKERS = "SELECT pg_notify('runledger_jobs', '')"
_PROMOTED_OF_TYPE = (
    "SELECT id::text FROM runledger_job_enqueue_intents WHERE job_type = %s AND status = 'PROMOTED'"
)
_UNFINISHED_JOBS = """
SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'LEASED'),
       COALESCE(extract(epoch FROM now() - min(next_run_at) FILTER (
           WHERE status = 'PENDING' AND next_run_at <= now())), 0)
FROM runledger_job_queue
"""
_WAITING_FOR = """
SELECT status, COALESCE(last_error_code, status_reason, '-'), attempt, count(*),
       round(extract(epoch FROM max(next_run_at) - now())::numeric, 1)
FROM runledger_job_queue
WHERE status IN ('PENDING', 'LEASED')
GROUP BY 1, 2, 3
ORDER BY 4 DESC
LIMIT 8
"""
DRAIN_REPORT_SECONDS = 15.0
_OVERDUE_LEASES = """
SELECT id::text, worker_id, extract(epoch FROM now() - lease_expires_at)
FROM runledger_job_queue
WHERE status = 'LEASED' AND lease_expires_at < now() - make_interval(secs => %(seconds)s)
"""

Scope = tuple[str, str | None, str]
"""(job type, organization id or None, idempotency key)."""


def prepare_database() -> None:
    """Migrate the fresh database, define the job types (DORMANT disabled until the drain) and
    create the handler-run table."""
    call_command("migrate", verbosity=0, interactive=False)
    with connection.cursor() as cursor:
        cursor.execute(CREATE_HANDLER_RUNS)
        cursor.execute(atomic.CREATE_EFFECTS)
    JobDefinition.objects.bulk_create(
        [
            JobDefinition(
                job_type=job_type,
                max_attempts=MAX_ATTEMPTS,
                default_timeout_seconds=60,
                default_priority=100,
                is_enabled=job_type != DORMANT,
            )
            for job_type in JOB_TYPES
        ]
    )
    connections.close_all()


@dataclass
class Result:
    counts: dict[str, int]
    violations: list[str]


@dataclass
class Evidence:
    """What the journals say happened."""

    committed: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Intent id -> the committed record (fields of the request and what was observed)."""
    expected_conflicts: set[Scope] = field(default_factory=set)
    direct_jobs: dict[str, Scope] = field(default_factory=dict)
    rolled_back: list[Scope] = field(default_factory=list)
    unresolved: set[Scope] = field(default_factory=set)
    retained_intents: set[str] = field(default_factory=set)
    retained_jobs: set[str] = field(default_factory=set)
    uncertain_batches: list[tuple[list[str], list[str]]] = field(default_factory=list)
    retained_ledgers: list[dict[str, Any]] = field(default_factory=list)
    """What each committed retention batch read of its jobs just before deleting them."""
    uncertain_ledgers: list[dict[str, Any] | None] = field(default_factory=list)
    worker_ids: dict[str, str] = field(default_factory=dict)
    """Worker process name -> the worker id its runledger_worker announced."""
    reports: list[dict[str, Any]] = field(default_factory=list)
    overdue: list[dict[str, Any]] = field(default_factory=list)
    shared_resources: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)


def _scope(record: dict[str, Any]) -> Scope:
    return (record["job_type"], record["organization_id"], record["key"])


def load_evidence(paths: RunPaths) -> Evidence:
    evidence = Evidence()
    counts = evidence.counts
    for path in sorted(paths.journals.glob("*.jsonl")):
        name = path.stem
        for record in read_journal(path):
            kind = record["k"]
            if kind == "committed":
                evidence.committed[record["id"]] = record
                if record["op"] == "duplicate":
                    counts["duplicates converged"] += 1
                    if record["disposition"] == "inserted":
                        counts["re-recorded after retention"] += 1
                elif record["disposition"] == "inserted":
                    counts["recorded"] += 1
                if record["expect"] == "conflicted":
                    evidence.expected_conflicts.add(_scope(record))
            elif kind == "conflict_raised":
                counts["conflicts raised"] += 1
            elif kind == "direct_job":
                evidence.direct_jobs[record["job_id"]] = _scope(record)
            elif kind == "rolled_back":
                evidence.rolled_back.append(_scope(record))
                counts["rolled back"] += 1
            elif kind == "unresolved":
                evidence.unresolved.add(_scope(record))
                counts["unresolved outcomes"] += 1
            elif kind == "unknown":
                counts["unknown outcomes"] += 1
            elif kind == "pass":
                counts["promoted by promoter processes"] += record["total_promoted"]
                counts["retry deferred"] += record["retry_deferred"]
            elif kind == "retained":
                evidence.retained_intents.update(record["intents"])
                evidence.retained_jobs.update(record["jobs"])
                evidence.retained_ledgers.append(record["ledger"])
                counts["retained"] += record["deleted"]
            elif kind == "retention_unknown":
                evidence.uncertain_batches.append((record["intents"], record["jobs"]))
                evidence.uncertain_ledgers.append(record["ledger"])
            elif kind == "worker":
                evidence.worker_ids[name] = record["worker_id"]
            elif kind == "run":
                evidence.reports.append(record)
            elif kind == "overdue":
                evidence.overdue.append(record)
            elif kind == "resource_shared":
                evidence.shared_resources.append(record)
            elif kind == "toggled":
                counts["definition toggles"] += 1
            elif kind == "error":
                counts["transient errors"] += 1
            elif kind in ("unexpected", "violation", "crash", "thread_crash", "stderr"):
                detail = {k: v for k, v in record.items() if k != "k"}
                evidence.problems.append(f"{name}: {kind}: {json.dumps(detail)[:600]}")
    return evidence


def _other_sessions(keep: Collection[str]) -> int:
    """Sessions of the run's other processes, except those of the processes named in ``keep``
    (each session's application_name names its process)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
            "AND NOT application_name = ANY(%s)",
            [[APPLICATION_PREFIX + name for name in keep]],
        )
        return int(cursor.fetchone()[0])


def quiesce(keep: Collection[str] = ()) -> int:
    """Wait for the sessions of stopped and killed children (but the live workers in ``keep``)
    to end: their locks would hide rows from the drain's SKIP LOCKED claims. Returns how many
    are left at the deadline."""
    deadline = time.monotonic() + QUIESCE_DEADLINE_SECONDS
    while (left := _other_sessions(keep)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def final_drain() -> Counter[str]:
    """Promotion passes until nothing is left, waiting out the backoff of deferred intents."""
    totals: Counter[str] = Counter()
    deadline = time.monotonic() + DRAIN_DEADLINE_SECONDS
    while True:
        report = promote_intents(JOB_TYPES, limit=500)
        flows = promote_workflow_intents(limit=500)
        totals["passes"] += 1
        for name, value in report.to_dict().items():
            totals[name] += int(value)
        totals["workflow runs"] += flows.total_promoted
        if report.anything_happened or flows.anything_happened:
            continue
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*), extract(epoch FROM min(next_promotion_at) - now()) FROM ("
                " SELECT next_promotion_at FROM runledger_job_enqueue_intents"
                " WHERE status = 'PENDING' UNION ALL"
                " SELECT next_promotion_at FROM runledger_workflow_intents"
                " WHERE status = 'PENDING') pending"
            )
            pending, wait = cursor.fetchone()
        if not pending:
            return totals
        wait = max(float(wait or 0), 0.05)
        if time.monotonic() + wait > deadline:
            return totals  # the invariants report what was left
        time.sleep(wait)


def _fetch(sql: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return list(cursor.fetchall())


def _org(value: Any) -> str | None:
    return None if value is None else str(value)


def check_invariants(evidence: Evidence) -> list[str]:
    """Every violation of the run's invariants, as readable lines."""
    violations: list[str] = []

    def violation(message: str) -> None:
        violations.append(message)

    intents = {
        str(row[0]): {
            "scope": (row[1], _org(row[2]), row[3]),
            "status": row[4],
            "job_id": _org(row[5]),
            "payload": json.loads(row[6]),
            "error_code": row[7],
            "promoted_at": row[8],
        }
        for row in _fetch(
            "SELECT id, job_type, organization_id, idempotency_key, status, promoted_job_id, "
            "payload::text, last_error_code, promoted_at FROM runledger_job_enqueue_intents"
        )
    }
    jobs = {
        str(row[0]): {"scope": (row[1], _org(row[2]), row[3]), "payload": json.loads(row[4])}
        for row in _fetch(
            "SELECT id, job_type, organization_id, idempotency_key, payload::text "
            # Scheduled jobs and workflow steps have no intent: reliability/schedules.py and
            # reliability/workflows.py check them.
            "FROM runledger_job_queue WHERE NOT payload ? '_schedule' AND NOT payload ? '_workflow'"
        )
    }

    # Interrupted retention batches: whatever no later batch retained went all or nothing.
    uncertain_intents: set[str] = set()
    for intent_ids, job_ids in evidence.uncertain_batches:
        rest_intents = [i for i in intent_ids if i not in evidence.retained_intents]
        rest_jobs = [j for j in job_ids if j not in evidence.retained_jobs]
        present = sum(i in intents for i in rest_intents) + sum(j in jobs for j in rest_jobs)
        if present not in (0, len(rest_intents) + len(rest_jobs)):
            violation(f"an interrupted retention batch was half applied: {intent_ids[:3]}...")
        uncertain_intents.update(intent_ids)

    for intent_id, record in evidence.committed.items():
        row = intents.get(intent_id)
        if row is None:
            if intent_id not in evidence.retained_intents | uncertain_intents:
                violation(f"committed intent {intent_id} ({record['key']}) is gone, not retained")
            continue
        if row["scope"] != _scope(record) or row["payload"] != record["payload"]:
            violation(f"intent {intent_id} differs from the request that recorded it")
        if record["expect"] == "conflicted":
            if row["status"] != "CONFLICTED" or row["error_code"] != ENQUEUE_CONFLICT:
                violation(f"intent {intent_id} under a directly enqueued key is {row['status']}")

    for intent_id in evidence.retained_intents:
        if intent_id in intents:
            violation(f"retained intent {intent_id} still exists")
    for job_id in evidence.retained_jobs:
        if job_id in jobs:
            violation(f"retained job {job_id} still exists")

    links: Counter[str] = Counter()
    for intent_id, row in intents.items():
        status = row["status"]
        if intent_id not in evidence.committed and row["scope"] not in evidence.unresolved:
            violation(f"intent {intent_id} ({row['scope'][2]}) was never seen committed")
        if status == "PENDING":
            violation(f"intent {intent_id} is still pending after the final drain")
        elif status == "CONFLICTED":
            if row["scope"] not in evidence.expected_conflicts:
                violation(f"intent {intent_id} conflicted ({row['error_code']}) unprovoked")
        elif status == "PROMOTED":
            job = jobs.get(row["job_id"])
            links[row["job_id"]] += 1
            if job is None:
                violation(f"promoted intent {intent_id} points at missing job {row['job_id']}")
            elif job["scope"] != row["scope"] or job["payload"] != row["payload"]:
                violation(f"promoted intent {intent_id} points at another request's job")

    scopes = Counter(job["scope"] for job in jobs.values())
    for scope, count in scopes.items():
        if count > 1:
            violation(f"{count} jobs for one (job type, organization, key): {scope}")
    for job_id in jobs:
        if job_id in evidence.direct_jobs:
            if links[job_id]:
                violation(f"directly enqueued job {job_id} was also promoted to")
        elif links[job_id] != 1:
            violation(f"job {job_id} is linked from {links[job_id]} promoted intents")

    present_scopes = {row["scope"] for row in intents.values()} | set(scopes)
    for scope in evidence.rolled_back:
        if scope in present_scopes:
            violation(f"an intent or job of a rolled-back transaction exists: {scope}")
    return violations


@dataclass
class Drain:
    """What the drain did and saw: the intents promoted, the jobs the workers had left."""

    promoted: Counter[str]
    expedited: int = 0
    unfinished: tuple[int, int] = (0, 0)
    """(PENDING, LEASED) jobs left at the deadline."""
    seconds: float = 0.0
    violations: list[str] = field(default_factory=list)


def drain(live_workers: Collection[str], say: Callable[[str], None]) -> Drain:
    """Quiesce, enable every definition, promote every intent, then wait while the live
    workers run every job: each must reach a final status. Every 15 s it says what the
    remaining jobs wait for."""
    connections.close_all()  # the harness's own session did not survive the restart
    started = time.monotonic()
    violations: list[str] = []
    lingering = quiesce(live_workers)
    if lingering:
        violations.append(f"{lingering} sessions of stopped children were still open")
    # Read before enabling, not by promoted_at: the workers' promoters run on through the
    # drain, and a pass whose transaction began before the enable may see it committed in a
    # later statement, so its promoted_at (the transaction's start) can precede the enable.
    with connection.cursor() as cursor:
        cursor.execute(_PROMOTED_OF_TYPE, [DORMANT])
        dormant = [row[0] for row in cursor.fetchall()]
    for intent_id in dormant:
        violations.append(f"intent {intent_id} was promoted while its definition was disabled")
    JobDefinition.objects.update(is_enabled=True)
    result = Drain(final_drain(), violations=violations)
    seen_overdue: set[str] = set()
    deadline = time.monotonic() + JOBS_DEADLINE_SECONDS
    next_report = time.monotonic() + DRAIN_REPORT_SECONDS
    least, progressed = None, time.monotonic()
    while True:
        with connection.cursor() as cursor:
            cursor.execute(_EXPEDITE_REAPED)
            expedited = int(cursor.fetchone()[0])
            if expedited:
                result.expedited += expedited
                cursor.execute(_WAKE_WORKERS)
            cursor.execute(_OVERDUE_LEASES, {"seconds": OVERDUE_SECONDS})
            for job_id, worker_id, expired_for in cursor.fetchall():
                if job_id not in seen_overdue:
                    seen_overdue.add(job_id)
                    violations.append(
                        f"job {job_id} stayed LEASED {float(expired_for):.1f}s after its lease "
                        f"expired in the drain (worker {worker_id})"
                    )
            cursor.execute(_UNFINISHED_JOBS)
            row = cursor.fetchone()
        pending, leased, overdue_for = int(row[0]), int(row[1]), float(row[2])
        if not pending and not leased:
            break
        now = time.monotonic()
        if now >= next_report:
            next_report = now + DRAIN_REPORT_SECONDS
            waits = ", ".join(
                f"{count} {status} after {reason} at attempt {attempt} (due in {due} s)"
                for status, reason, attempt, count, due in _fetch(_WAITING_FOR)
            )
            say(f"drain: {pending} PENDING and {leased} LEASED jobs left: {waits}")
        if least is None or pending + leased < least:
            least, progressed = pending + leased, now
        stalled = now - progressed > JOBS_STALL_SECONDS and overdue_for > JOBS_STALL_SECONDS
        if stalled or now > deadline:
            result.unfinished = (pending, leased)
            violations.append(
                f"the workers left {pending} PENDING and {leased} LEASED jobs (nothing finished "
                f"for {now - progressed:.0f} s; a job due for {overdue_for:.0f} s)"
            )
            break
        time.sleep(0.2)
    result.seconds = time.monotonic() - started
    return result


_PLANT_TARGETS = """
SELECT id::text FROM runledger_job_queue
WHERE status = 'SUCCEEDED' AND execution_resource_key IS NULL
  AND workflow_step_id IS NULL  -- workflow steps get plants of their own (workflows.plant)
ORDER BY id
LIMIT 3
"""
_PLANT_SUCCEEDED_EVENT = """
INSERT INTO runledger_job_events (job_id, run_number, attempt, event_type, stage)
SELECT id, run_number, attempt, 'SUCCEEDED', 'completed' FROM runledger_job_queue WHERE id = %s
"""
_PLANT_SECOND_RUN = f"""
INSERT INTO {HANDLER_RUNS_TABLE} (job_id, job_type, run_number, attempt, worker_id, pid, phase)
SELECT job_id, job_type, run_number, attempt, worker_id, 0, 'started'
FROM {HANDLER_RUNS_TABLE} WHERE job_id = %s AND phase = 'started'
ORDER BY attempt DESC LIMIT 1
"""  # noqa: S608  (a constant table name)
_PLANT_PHANTOM_RUN = f"""
INSERT INTO {HANDLER_RUNS_TABLE} (job_id, job_type, run_number, attempt, worker_id, pid, phase)
SELECT id, job_type, run_number, 99, 'planted-worker', 0, 'started'
FROM runledger_job_queue WHERE id = %s
"""  # noqa: S608  (a constant table name)
_PLANT_STUCK_LEASE = """
UPDATE runledger_job_queue
SET status = 'LEASED', worker_id = 'planted-worker', lease_expires_at = now() - interval '1 minute'
WHERE id = %s
"""


def plant_violations() -> list[str]:
    """Corrupt a finished run on purpose (``--plant-violations``): a second SUCCEEDED event, a
    second run of an attempt, a handler run no attempt records, and a lease left expired. Each
    must come back as a violation; returns the lines that say what was planted."""
    targets = [row[0] for row in _fetch(_PLANT_TARGETS)]
    if len(targets) < 3:
        return ["nothing planted: fewer than three succeeded jobs"]
    with connection.cursor() as cursor:
        cursor.execute(_PLANT_SUCCEEDED_EVENT, [targets[0]])
        cursor.execute(_PLANT_SECOND_RUN, [targets[1]])
        cursor.execute(_PLANT_PHANTOM_RUN, [targets[1]])
        cursor.execute(_PLANT_STUCK_LEASE, [targets[2]])
    return [
        f"a second SUCCEEDED event for job {targets[0]}",
        f"a second run of the last attempt of job {targets[1]}",
        f"a handler run of job {targets[1]} attempt 99, which no attempt records",
        f"job {targets[2]} LEASED with an expired lease",
    ]


def job_world(evidence: Evidence, workers: list[WorkerFacts], restarts: list[Any]) -> JobWorld:
    """Everything the job checks read: deleted jobs' records from the retention journals,
    the jobs left in the database, the handler runs and what the workers reported."""
    world = JobWorld(
        reports=evidence.reports,
        workers=workers,
        restarts=[(float(start), float(end)) for start, end in restarts],
        overdue=evidence.overdue,
        shared_resources=evidence.shared_resources,
    )
    for ledger in evidence.retained_ledgers:
        world.add_ledger(ledger, retained=True)
    live = read_ledger()
    present = {job["id"] for job in live["jobs"]}
    for maybe in evidence.uncertain_ledgers:
        # A batch that committed although its worker saw an error: its jobs are gone.
        if maybe is not None and not any(
            job["id"] in present or job["id"] in world.jobs for job in maybe["jobs"]
        ):
            world.add_ledger(maybe, retained=True)
    world.add_ledger(live, retained=False)
    world.runs = [
        {
            "job_id": row[0],
            "run_number": row[1],
            "attempt": row[2],
            "worker_id": row[3],
            "pid": row[4],
            "phase": row[5],
            "result": row[6],
            "recorded_at": row[7].isoformat(),
        }
        for row in _fetch(_HANDLER_RUNS)
    ]
    return world


def finish(
    paths: RunPaths,
    problems: list[str],
    drained: Drain,
    workers: list[WorkerFacts],
    restarts: list[Any],
) -> Result:
    """Check every invariant once the drain is over and the workers have stopped."""
    connections.close_all()
    evidence = load_evidence(paths)
    violations = [*problems, *evidence.problems, *drained.violations]
    violations += check_invariants(evidence)
    workers = [
        WorkerFacts(
            name=worker.name,
            worker_id=evidence.worker_ids.get(worker.name),
            spawned_at=worker.spawned_at,
            signal=worker.signal,
            signaled_at=worker.signaled_at,
        )
        for worker in workers
    ]
    world = job_world(evidence, workers, restarts)
    job_violations, job_counts = check_jobs(world)
    violations += job_violations
    atomic_violations, atomic_counts = atomic.check_effects()
    violations += atomic_violations
    job_counts.update(atomic_counts)
    for job_id in evidence.retained_jobs - world.retained:
        violations.append(f"retained job {job_id} left no record of how it ran")
    counts = evidence.counts
    counts.update(job_counts)
    counts["final drain promoted"] = drained.promoted["total_promoted"]
    counts["reaped retries expedited in the drain"] = drained.expedited
    counts["drain seconds"] = round(drained.seconds)
    for row in _fetch(
        "SELECT count(*) FILTER (WHERE status = 'PROMOTED'), "
        "count(*) FILTER (WHERE status = 'CONFLICTED'), count(*) "
        "FROM runledger_job_enqueue_intents"
    ):
        counts["intents left (promoted)"], counts["intents left"] = int(row[0]), int(row[2])
        # Every retained intent had been promoted; workers with --promote journal nothing.
        counts["promoted"] = int(row[0]) + counts["retained"]
        counts["promotion conflicts"] = int(row[1])
    order = [
        "recorded",
        "duplicates converged",
        "re-recorded after retention",
        "conflicts raised",
        "promotion conflicts",
        "rolled back",
        "promoted",
        "promoted by promoter processes",
        "final drain promoted",
        "retry deferred",
        "retained",
        "promoter kills",
        "worker kills (SIGKILL)",
        "worker stops (SIGTERM)",
        "server restarts",
        "unknown outcomes",
        "unresolved outcomes",
        "transient errors",
        "definition toggles",
        "intents left",
        "intents left (promoted)",
        "jobs checked",
        "retained jobs checked",
        "jobs succeeded",
        "jobs run",
        "handler runs",
        "attempts",
        "events checked",
        "attempts ended by deliberate RetryJob",
        "attempts ended by deliberate exception",
        "attempts ended by SIGKILL (reaped)",
        "attempts ended by SIGTERM (handed back)",
        "attempts ended by restart (open across it)",
        "attempts ended by restart (a connection it broke)",
        "attempts without a handler run",
        "runs cut off (kill or restart)",
        "extra runs",
        "extra runs explained",
        "keyed attempts",
        "keyed overlaps in time, sequential by the claim",
        "atomic jobs",
        "atomic effects",
        "atomic duplicate effects",
        "worker reports succeeded",
        "worker reports retried",
        "worker reports lease_lost",
        "worker reports persist_failed",
        "successes the worker could not confirm",
        "overdue leases excused by the restart",
        "reaped retries expedited in the drain",
        "drain seconds",
    ]
    ordered = {name: int(counts.get(name, 0)) for name in order}
    return Result(counts=ordered, violations=violations)
