"""(c) Draining a backlog of pending intents, against the database's own set-based limit.

Every round drains the same rows: a history of promoted intents with their jobs (analysed, as
on a running system), then a burst of pending intents on top of it.

- fresh: the burst is drained right after it landed, before any ANALYZE (autovacuum is off for
  the tables during the shape), so the planner still believes the history's statistics: a
  handful of pending rows of other job types. This is the burst after an outage.
- analysed: the same burst after ANALYZE.

In each, the database's limit and one promoter process drain their own copy of the backlog,
interleaved round by round with the order rotating; medians are reported. Then two promoter
processes on a fresh burst, and the per-row fallback: a fresh burst whose every key already has
an identical job (direct enqueues), which must converge set-based.

The database's limit is plain SQL on a raw psycopg session: one statement per transaction of
the promoter's batch size that claims the rows in the promoter's order (FOR NO KEY UPDATE SKIP
LOCKED), inserts their jobs with the definitions' defaults and their ENQUEUED events, and marks
the intents promoted with exactly the columns promote_intents writes; each transaction commits
with the same durability, under the same planner settings. What it leaves out is what the
library adds: the idle check, the fence, the timeout caps, the snapshot check, the definitions'
share lock, the key arbiters and the per-row path.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from runledger_django.db import session_queries

from .common import (
    Context,
    Row,
    define_job_types,
    progress,
    ratio,
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
TABLES = ("runledger_job_enqueue_intents", "runledger_job_queue", "runledger_job_events")
BATCH = 1000
"""The promoters' ``limit`` and the plain-SQL transaction size."""
TARGET_RATE = 10_000
TARGET_SHARE = 0.80
"""One promoter against the plain-SQL limit of the same rows."""
TARGET_SCALING = 1.10
"""Two promoters against one: more than noise."""
TARGET_FALLBACK = 5_000
"""Converging on existing identical jobs: set-based, not 24 rows a pass."""

# The database's limit: claim, jobs, events and intent updates in one statement.
SET_BASED_PROMOTION = """
WITH claimed AS MATERIALIZED (
    SELECT intent.ctid AS tid, intent.job_type, intent.organization_id, intent.payload,
           intent.priority, intent.max_attempts, intent.timeout_seconds, intent.next_run_at,
           intent.idempotency_key, intent.stage, intent.enqueue_request,
           intent.execution_resource_key, runledger_uuidv7() AS job_id
    FROM runledger_job_enqueue_intents intent
    WHERE intent.status = 'PENDING' AND intent.enqueue_request_version = 1
      AND intent.next_promotion_at <= now() AND intent.job_type = ANY(%(types)s::text[])
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
    last_attempted_at = now(), promoted_job_id = c.job_id, promoted_at = now(),
    conflicted_at = NULL, last_error_code = NULL, last_error_message = NULL
FROM claimed c
WHERE intent.ctid = ANY(ARRAY(SELECT tid FROM claimed)) AND intent.ctid = c.tid
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


def drain_with_processes(processes: int) -> dict[str, Any]:
    """Start ``processes`` promoters together; the clock runs until the last one is done."""
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(processes + 1)
    results = spawn.Queue()
    children = [
        spawn.Process(target=_promoter_main, args=(JOB_TYPES, BATCH, barrier, results))
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
    return {
        "seconds": max(report["end"] for report in reports) - started,
        "promoted": sum(int(report["promoted"]) for report in reports),
        "passes": [report["passes"] for report in reports],
    }


def drain_plain_sql() -> dict[str, Any]:
    promoted = transactions = 0
    with raw_session(autocommit=False) as conn:
        started = time.monotonic()
        while True:
            with conn.cursor() as cursor:
                cursor.execute(session_queries.PROMOTION_PLANNER_SETTINGS)
                cursor.execute(SET_BASED_PROMOTION, {"limit": BATCH, "types": JOB_TYPES})
                affected = cursor.rowcount
            conn.commit()
            if affected <= 0:
                break
            promoted += affected
            transactions += 1
        seconds = time.monotonic() - started
    return {"seconds": seconds, "promoted": promoted, "passes": [transactions]}


def fill(count: int, *, history: int, analysed: bool, identical_jobs: bool = False) -> int:
    """A fresh backlog of ``count`` pending intents over an analysed history; return the jobs
    the queue holds before the drain."""
    reset_runledger()
    define_job_types([*JOB_TYPES, *HISTORY_JOB_TYPES])
    if history:
        generate_history(history, HISTORY_JOB_TYPES, quiet=True)
    insert_pending_intents(count, JOB_TYPES, key_prefix="drain:")
    if identical_jobs:
        insert_identical_jobs_for_pending()
    check_snapshots()
    if analysed:
        for table in TABLES:
            sql(f"ANALYZE {table}")
    return int(scalar("SELECT count(*) FROM runledger_job_queue"))


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


def _rate(result: dict[str, Any], count: int, name: str) -> float:
    if result["promoted"] != count:
        raise RuntimeError(f"{name}: promoted {result['promoted']} of {count}")
    rate = count / float(result["seconds"])
    progress(f"(c) {name}: {rate:,.0f} intents/s over {result['seconds']:.2f}s")
    return rate


def _median_row(ctx: Context, name: str, rates: list[float], count: int, **target: Any) -> float:
    value = statistics.median(rates)
    ctx.add(
        Row(
            "c",
            name,
            value,
            "intents/s",
            detail={"rounds": [round(r) for r in rates], "intents": count},
            **target,
        )
    )
    return value


def _ratio_row(
    ctx: Context, name: str, value: float, target: float, *, per_round: list[float] | None = None
) -> None:
    """A ratio against its target; with ``per_round``, every round must meet it."""
    if per_round is None:
        ctx.add(Row("c", name, value, "x", target=f">= {target:.2f}x", ok=value >= target))
        return
    spread = [min(per_round), max(per_round)]
    ctx.add(
        Row(
            "c",
            name,
            value,
            "x",
            target=f">= {target:.2f}x every round",
            ok=value >= target and spread[0] >= target,
            detail={
                "per_round": [round(r, 3) for r in per_round],
                "spread": [round(r, 3) for r in spread],
            },
        )
    )


def _rounds(
    ctx: Context,
    contenders: dict[str, Callable[[], dict[str, Any]]],
    *,
    rounds: int,
    count: int,
    prepare: Callable[[], int],
    creates_jobs: bool = True,
) -> dict[str, list[float]]:
    """Each round gives every contender its own fresh backlog; the order rotates."""
    names = list(contenders)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(rounds):
        shift = round_no % len(names)
        for name in names[shift:] + names[:shift]:
            before = prepare()
            rates[name].append(_rate(contenders[name](), count, name))
            verify_drained(before + (count if creates_jobs else 0))
    return rates


def run(ctx: Context) -> None:
    count = ctx.size(20_000, 3_000)
    history = ctx.size(20_000, 3_000)
    fallback_count = ctx.size(10_000, 1_000)
    rounds = ctx.size(3, 1)
    for table in TABLES:
        sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    try:
        limits: dict[str, float] = {}
        ones: dict[str, float] = {}
        for scenario, analysed in (("fresh, before ANALYZE", False), ("analysed", True)):
            progress(f"(c) {scenario}: {rounds} rounds of {count:,} intents per contender")
            rates = _rounds(
                ctx,
                {
                    "plain SQL": drain_plain_sql,
                    "1 promoter": lambda: drain_with_processes(1),
                },
                rounds=rounds,
                count=count,
                prepare=functools.partial(fill, count, history=history, analysed=analysed),
            )
            limits[scenario] = _median_row(
                ctx, f"{scenario}: plain-SQL limit, {BATCH}/transaction", rates["plain SQL"], count
            )
            ones[scenario] = _median_row(
                ctx,
                f"{scenario}: 1 promoter, limit={BATCH}",
                rates["1 promoter"],
                count,
                target=f">= {TARGET_RATE:,}/s",
                ok=statistics.median(rates["1 promoter"]) >= TARGET_RATE,
            )
            share = ratio(ones[scenario], limits[scenario])
            # Each round's pair drained the same rows back to back: its own ratio.
            per_round = [
                ratio(one, limit)
                for one, limit in zip(rates["1 promoter"], rates["plain SQL"], strict=True)
            ]
            _ratio_row(
                ctx,
                f"{scenario}: 1 promoter / plain-SQL limit",
                share,
                TARGET_SHARE,
                per_round=per_round,
            )

        progress(f"(c) 2 promoter processes, fresh: {rounds} rounds of {count:,} intents")
        two = _rounds(
            ctx,
            {"2 promoters": lambda: drain_with_processes(2)},
            rounds=rounds,
            count=count,
            prepare=lambda: fill(count, history=history, analysed=False),
        )
        both = _median_row(ctx, "fresh: 2 promoters", two["2 promoters"], count)
        scaling = ratio(both, ones["fresh, before ANALYZE"])
        _ratio_row(ctx, "fresh: 2 promoters / 1 promoter", scaling, TARGET_SCALING)

        progress(f"(c) existing identical jobs, fresh: {rounds} rounds of {fallback_count:,}")
        converge = _rounds(
            ctx,
            {"converge": lambda: drain_with_processes(1)},
            rounds=rounds,
            count=fallback_count,
            prepare=lambda: fill(
                fallback_count, history=history, analysed=False, identical_jobs=True
            ),
            creates_jobs=False,
        )
        value = statistics.median(converge["converge"])
        _median_row(
            ctx,
            "fresh, every key has an identical job: 1 promoter",
            converge["converge"],
            fallback_count,
            target=f">= {TARGET_FALLBACK:,}/s",
            ok=value >= TARGET_FALLBACK,
        )
    finally:
        for table in TABLES:
            sql(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
