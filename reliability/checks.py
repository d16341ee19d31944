"""The harness's database side: setup before the run, and drain plus invariants after it.

Imported only after ``django.setup()``. The checks compare the children's journals (what each
saw committed) with the rows the database holds once every writer has stopped.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.core.management import call_command
from django.db import connection, connections

from runledger_django import promote_intents
from runledger_django.models import JobDefinition

from .common import (
    DORMANT,
    ENQUEUE_CONFLICT,
    JOB_TYPES,
    RunPaths,
    read_journal,
)

DRAIN_DEADLINE_SECONDS = 180.0
"""Room for the backoff of intents deferred during the outage (1 s, 2 s, 4 s, ...)."""
QUIESCE_DEADLINE_SECONDS = 30.0

Scope = tuple[str, str | None, str]
"""(job type, organization id or None, idempotency key)."""


def prepare_database() -> None:
    """Migrate the fresh database and define the job types (DORMANT disabled until the drain)."""
    call_command("migrate", verbosity=0, interactive=False)
    JobDefinition.objects.bulk_create(
        [
            JobDefinition(
                job_type=job_type,
                max_attempts=3,
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
                counts["promoted"] += record["total_promoted"]
                counts["promotion conflicts"] += record["conflicted"]
                counts["retry deferred"] += record["retry_deferred"]
            elif kind == "retained":
                evidence.retained_intents.update(record["intents"])
                evidence.retained_jobs.update(record["jobs"])
                counts["retained"] += record["deleted"]
            elif kind == "retention_unknown":
                evidence.uncertain_batches.append((record["intents"], record["jobs"]))
            elif kind == "toggled":
                counts["definition toggles"] += 1
            elif kind == "error":
                counts["transient errors"] += 1
            elif kind in ("unexpected", "violation", "crash"):
                detail = {k: v for k, v in record.items() if k != "k"}
                evidence.problems.append(f"{name}: {kind}: {json.dumps(detail)[:600]}")
    return evidence


def _other_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        return int(cursor.fetchone()[0])


def quiesce() -> int:
    """Wait for the sessions of killed children to end: their locks would hide rows from the
    drain's SKIP LOCKED claim. Returns how many are left at the deadline."""
    deadline = time.monotonic() + QUIESCE_DEADLINE_SECONDS
    while (left := _other_sessions()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def final_drain() -> Counter[str]:
    """Promotion passes until nothing is left, waiting out the backoff of deferred intents."""
    totals: Counter[str] = Counter()
    deadline = time.monotonic() + DRAIN_DEADLINE_SECONDS
    while True:
        report = promote_intents(JOB_TYPES, limit=500)
        totals["passes"] += 1
        for name, value in report.to_dict().items():
            totals[name] += int(value)
        if report.anything_happened:
            continue
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*), extract(epoch FROM min(next_promotion_at) - now()) "
                "FROM runledger_job_enqueue_intents WHERE status = 'PENDING'"
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


def check_invariants(evidence: Evidence, drain_started_at: Any) -> list[str]:
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
            "FROM runledger_job_queue"
        )
    }
    events = {
        str(row[0]): int(row[1])
        for row in _fetch("SELECT job_id, count(*) FROM runledger_job_events GROUP BY job_id")
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
            if row["scope"][0] == DORMANT and row["promoted_at"] < drain_started_at:
                violation(f"intent {intent_id} was promoted while its definition was disabled")

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
        if events.get(job_id) != 1:
            violation(f"job {job_id} has {events.get(job_id, 0)} events, not one ENQUEUED")

    present_scopes = {row["scope"] for row in intents.values()} | set(scopes)
    for scope in evidence.rolled_back:
        if scope in present_scopes:
            violation(f"an intent or job of a rolled-back transaction exists: {scope}")
    return violations


def finish(paths: RunPaths, problems: list[str]) -> Result:
    """Quiesce, enable every definition, drain, then check the invariants."""
    connections.close_all()  # the harness's own session did not survive the restart
    evidence = load_evidence(paths)
    violations = [*problems, *evidence.problems]
    lingering = quiesce()
    if lingering:
        violations.append(f"{lingering} sessions of stopped children were still open")
    JobDefinition.objects.update(is_enabled=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        drain_started_at = cursor.fetchone()[0]
    drained = final_drain()
    violations += check_invariants(evidence, drain_started_at)
    counts = evidence.counts
    counts["promoted"] += drained["total_promoted"]
    counts["final drain promoted"] = drained["total_promoted"]
    counts["promotion conflicts"] += drained["conflicted"]
    for row in _fetch(
        "SELECT count(*) FILTER (WHERE status = 'PROMOTED'), count(*) "
        "FROM runledger_job_enqueue_intents"
    ):
        counts["intents left (promoted)"], counts["intents left"] = int(row[0]), int(row[1])
    order = [
        "recorded",
        "duplicates converged",
        "re-recorded after retention",
        "conflicts raised",
        "promotion conflicts",
        "rolled back",
        "promoted",
        "final drain promoted",
        "retry deferred",
        "retained",
        "promoter kills",
        "server restarts",
        "unknown outcomes",
        "unresolved outcomes",
        "transient errors",
        "definition toggles",
        "intents left",
        "intents left (promoted)",
    ]
    ordered = {name: int(counts.get(name, 0)) for name in order}
    return Result(counts=ordered, violations=violations)
