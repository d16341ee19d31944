"""(c) Draining a backlog of pending intents, against the database's own set-based limit.

Promoters are separate processes (spawned, each with its own Django setup and connection)
calling ``promote_intents`` in a loop until a pass finds nothing. The database's own limit is
plain SQL on a raw psycopg session: per transaction of 500 rows, one statement that claims the
rows, INSERT ... SELECTs their jobs and ENQUEUED events and UPDATEs the intents. The per-row
savepoint path is measured by giving every intent an existing identical job first: the
set-based statement then inserts nothing and every row converges through the fallback.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

from .common import (
    Context,
    Row,
    define_job_types,
    progress,
    raw_session,
    reset_runledger,
    scalar,
    sql,
)
from .datagen import (
    check_snapshots,
    generate_history,
    insert_identical_jobs_for_pending,
    insert_pending_intents,
)

JOB_TYPES = [f"bench.promote.type_{n}" for n in range(4)]
HISTORY_JOB_TYPES = [f"bench.history.type_{n}" for n in range(8)]
TARGET_RATE = 5000
SQL_BATCH = 500

# The database's own limit: what one transaction of plain SQL can promote.
SET_BASED_PROMOTION = """
WITH claimed AS (
    SELECT intent.id, intent.job_type, intent.organization_id, intent.payload,
           intent.priority, intent.max_attempts, intent.timeout_seconds, intent.next_run_at,
           intent.idempotency_key, intent.stage, intent.enqueue_request,
           intent.execution_resource_key, runledger_uuidv7() AS job_id
    FROM runledger_job_enqueue_intents intent
    WHERE intent.status = 'PENDING' AND intent.next_promotion_at <= now()
      AND intent.job_type = ANY(%(types)s::text[])
    ORDER BY intent.next_promotion_at, intent.created_at, intent.id
    LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
),
jobs AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, idempotency_key, stage, enqueue_request, execution_resource_key
    )
    SELECT c.job_id, c.job_type, c.organization_id, c.payload,
           COALESCE(c.priority, d.default_priority), COALESCE(c.max_attempts, d.max_attempts),
           COALESCE(c.timeout_seconds, d.default_timeout_seconds),
           COALESCE(c.next_run_at, now()), c.idempotency_key, c.stage, c.enqueue_request,
           c.execution_resource_key
    FROM claimed c JOIN runledger_job_definitions d ON d.job_type = c.job_type
    RETURNING id, run_number, stage, job_type
),
events AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage, jsonb_build_object('job_type', job_type)
    FROM jobs
)
UPDATE runledger_job_enqueue_intents intent
SET status = 'PROMOTED', promotion_attempts = intent.promotion_attempts + 1,
    last_attempted_at = now(), promoted_job_id = c.job_id, promoted_at = now()
FROM claimed c
WHERE intent.id = c.id
"""


def _promoter_main(
    job_types: list[str], limit: int, barrier: Any, results: Any
) -> None:  # pragma: no cover - runs in a child process
    import django

    django.setup()
    from django.db import connection

    from runledger_django import promote_intents

    connection.ensure_connection()
    barrier.wait()
    promoted = passes = 0
    while True:
        report = promote_intents(job_types, limit=limit)
        passes += 1
        promoted += report.total_promoted
        if report.total_promoted == 0 and not report.batch_was_full:
            break
    results.put(
        {"pid": os.getpid(), "promoted": promoted, "passes": passes, "end": time.monotonic()}
    )
    connection.close()


def drain_with_processes(processes: int, limit: int) -> dict[str, Any]:
    """Start ``processes`` promoters together; the clock runs until the last one is done."""
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(processes + 1)
    results = spawn.Queue()
    children = [
        spawn.Process(target=_promoter_main, args=(JOB_TYPES, limit, barrier, results))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    barrier.wait(timeout=180)
    started = time.monotonic()
    reports = [results.get(timeout=900) for _ in children]
    for child in children:
        child.join(timeout=60)
        if child.exitcode != 0:
            raise RuntimeError(f"promoter process exited with {child.exitcode}")
    seconds = max(report["end"] for report in reports) - started
    promoted = sum(int(report["promoted"]) for report in reports)
    return {
        "seconds": seconds,
        "promoted": promoted,
        "passes": [report["passes"] for report in reports],
        "per_process": [report["promoted"] for report in reports],
    }


def drain_in_process(limit: int) -> dict[str, Any]:
    from runledger_django import promote_intents

    started = time.monotonic()
    promoted = passes = 0
    while True:
        report = promote_intents(JOB_TYPES, limit=limit)
        passes += 1
        promoted += report.total_promoted
        if report.total_promoted == 0 and not report.batch_was_full:
            break
    return {"seconds": time.monotonic() - started, "promoted": promoted, "passes": [passes]}


def drain_plain_sql(batch: int) -> dict[str, Any]:
    promoted = transactions = 0
    with raw_session(autocommit=False) as conn:
        started = time.monotonic()
        while True:
            with conn.cursor() as cursor:
                cursor.execute(SET_BASED_PROMOTION, {"limit": batch, "types": JOB_TYPES})
                affected = cursor.rowcount
            conn.commit()
            if affected <= 0:
                break
            promoted += affected
            transactions += 1
        seconds = time.monotonic() - started
    return {"seconds": seconds, "promoted": promoted, "passes": [transactions]}


def prepare_backlog(count: int, *, identical_jobs: bool = False, history: int = 0) -> None:
    """A fresh backlog of ``count`` pending intents, on top of ``history`` older intents.

    The history (promoted intents with their jobs, of other job types) stands for a system
    that has been running: with empty tables, a promoter's session caches seq-scan plans for
    the foreign-key checks into runledger_job_queue and keeps them as the table grows.
    """
    reset_runledger()
    define_job_types([*JOB_TYPES, *HISTORY_JOB_TYPES])
    if history:
        generate_history(history, HISTORY_JOB_TYPES, quiet=True)
    insert_pending_intents(count, JOB_TYPES, key_prefix="drain:")
    if identical_jobs:
        insert_identical_jobs_for_pending()
    check_snapshots()
    sql("ANALYZE runledger_job_enqueue_intents")
    sql("ANALYZE runledger_job_queue")


def verify_drained(expected_jobs: int) -> None:
    pending = scalar(
        "SELECT count(*) FROM runledger_job_enqueue_intents "
        "WHERE status = 'PENDING' AND job_type = ANY(%s)",
        [JOB_TYPES],
    )
    jobs = scalar("SELECT count(*) FROM runledger_job_queue")
    if pending or jobs != expected_jobs:
        raise RuntimeError(
            f"drain incomplete: {pending} pending, {jobs} jobs, {expected_jobs} expected"
        )


def _rate_row(
    ctx: Context, name: str, result: dict[str, Any], count: int, *, target: bool = False
) -> float:
    if result["promoted"] != count:
        raise RuntimeError(f"{name}: promoted {result['promoted']} of {count}")
    rate = count / float(result["seconds"])
    ctx.add(
        Row(
            "c",
            name,
            rate,
            "intents/s",
            target=f">= {TARGET_RATE:,}/s" if target else "",
            ok=rate >= TARGET_RATE if target else None,
            detail={k: v for k, v in result.items() if k != "promoted"} | {"intents": count},
        )
    )
    progress(f"(c) {name}: {rate:,.0f} intents/s over {result['seconds']:.2f}s")
    return rate


def run(ctx: Context) -> None:
    count = ctx.size(20_000, 3_000)
    history = ctx.size(20_000, 3_000)
    fallback_count = ctx.size(2_000, 240)

    def backlog(size: int = count, **options: Any) -> None:
        prepare_backlog(size, history=options.pop("history", history), **options)

    progress(f"(c) plain-SQL set-based promotion of {count:,} intents, {SQL_BATCH} per transaction")
    backlog()
    before = int(scalar("SELECT count(*) FROM runledger_job_queue"))
    limit_rate = _rate_row(
        ctx, f"plain SQL set-based, {SQL_BATCH}/transaction", drain_plain_sql(SQL_BATCH), count
    )
    verify_drained(before + count)

    scenarios: list[tuple[str, int, int, dict[str, Any]]] = [
        ("1 promoter process, limit=1000", 1, 1000, {}),
        ("2 promoter processes, limit=1000", 2, 1000, {}),
        ("1 promoter process, limit=24 (default batch size)", 1, 24, {}),
        ("1 promoter process, limit=1000, empty tables at start", 1, 1000, {"history": 0}),
    ]
    for label, processes, limit, options in scenarios:
        progress(f"(c) {label}: draining {count:,} intents")
        backlog(**options)
        before = int(scalar("SELECT count(*) FROM runledger_job_queue"))
        rate = _rate_row(
            ctx,
            label,
            drain_with_processes(processes, limit),
            count,
            target=label == "1 promoter process, limit=1000",
        )
        verify_drained(before + count)
        if label == "1 promoter process, limit=1000":
            ctx.add(Row("c", "one promoter / plain SQL", rate / limit_rate, "x"))

    for limit in (24, 1000):
        label = f"per-row savepoint path (every key exists), limit={limit}"
        progress(f"(c) {label}: {fallback_count:,} intents")
        backlog(fallback_count, identical_jobs=True)
        before = int(scalar("SELECT count(*) FROM runledger_job_queue"))
        _rate_row(ctx, label, drain_in_process(limit), fallback_count)
        verify_drained(before)
