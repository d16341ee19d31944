"""(g) job_metrics over a queue with a million-job history.

98% of the jobs are 30 days of finished history: most succeeded (one in twenty after a retry),
1% were dead-lettered, 0.5% cancelled; every one has its attempt rows, so the 24-hour window
holds a thirtieth of them. The other 2% are the live queue, enqueued over the last 12 hours:
pending (three quarters due, a backlog, one quarter scheduled for later) and a few hundred
leases, a tenth of them expired. Each read runs through the public API on Django's
connection, warm, in every scope.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from runledger_django import ReadScope, job_metrics

from .common import (
    ORGANIZATIONS,
    Context,
    Row,
    Stats,
    define_job_types,
    progress,
    reset_runledger,
    scalar,
    sql,
)
from .datagen import _secondary_indexes_dropped

JOB_TYPES = [f"bench.jobs.type_{n}" for n in range(8)]
TARGET_MS = 20.0
"""The issue's target for job_metrics at one million jobs, milliseconds."""
LIVE_SHARE = 0.02
"""The newest jobs, still in the queue (PENDING or LEASED)."""
LEASES = 200
"""LEASED jobs: bounded by the workers' total concurrency, whatever the history."""

_ORGANIZATION = "CASE WHEN g %% 5 = 0 THEN NULL ELSE (%(orgs)s::uuid[])[1 + g %% 4] END"


def ensure_job_history(ctx: Context) -> None:
    """Build the million-job history once per run; (g), (h) and (i) share it."""
    total = ctx.size(1_000_000, 100_000)
    if ctx.state.get("job_history_rows") == total:
        return
    progress(f"generating a history of {total:,} jobs with their attempts (set-based)")
    reset_runledger("runledger_job_attempts", "runledger_job_execution_resource_claims")
    define_job_types(JOB_TYPES)
    ctx.state["job_history"] = generate_job_history(total, JOB_TYPES)
    ctx.state["job_history_rows"] = total


def generate_job_history(total: int, job_types: Sequence[str]) -> dict[str, int]:
    """Jobs and attempts as the worker leaves them, written set-based with foreign-key
    triggers off (consistent by construction) and secondary indexes rebuilt afterwards."""
    started = time.perf_counter()
    live_from = int(total * (1 - LIVE_SHARE))
    params = {
        "types": list(job_types),
        "ntypes": len(job_types),
        "orgs": ORGANIZATIONS,
        "total": total,
        "live_from": live_from,
        "lease_every": max(8, (total - live_from) // LEASES),
    }
    sql("SET maintenance_work_mem = '512MB'")
    sql("SET session_replication_role = replica")
    try:
        with _secondary_indexes_dropped("runledger_job_queue"):
            sql(
                f"""
                INSERT INTO runledger_job_queue (
                    id, job_type, organization_id, payload, status, priority, run_number,
                    attempt, max_attempts, timeout_seconds, next_run_at, lease_expires_at,
                    last_heartbeat_at, worker_id, started_at, finished_at, stage,
                    idempotency_key, enqueue_request, last_error_code, last_error_message,
                    output, created_at, updated_at)
                SELECT runledger_uuidv7(), s.job_type, s.organization_id,
                       jsonb_build_object('order_id', g), s.status, 100, 1,
                       CASE s.status WHEN 'PENDING' THEN 0 WHEN 'CANCELED' THEN 0
                                     WHEN 'DEAD_LETTERED' THEN 3
                                     WHEN 'SUCCEEDED' THEN 1 + (g %% 20 = 0)::int ELSE 1 END,
                       3, 60,
                       CASE WHEN s.status = 'PENDING' AND (g / 8) %% 4 = 0
                            THEN now() + make_interval(mins => g %% 600)
                            ELSE s.created_at END,
                       CASE WHEN s.status = 'LEASED'
                            THEN now() + CASE WHEN (g / 100) %% 10 = 0
                                              THEN interval '-2 minutes'
                                              ELSE interval '1 minute' END END,
                       CASE WHEN s.status = 'LEASED' THEN now() END,
                       CASE WHEN s.status = 'LEASED' THEN 'bench-worker' END,
                       CASE WHEN s.status IN ('PENDING', 'CANCELED') THEN NULL
                            ELSE s.created_at + interval '1 second' END,
                       CASE WHEN s.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
                            THEN s.created_at + interval '5 seconds' END,
                       CASE s.status WHEN 'SUCCEEDED' THEN 'completed'
                                     WHEN 'LEASED' THEN 'running' ELSE 'queued' END,
                       'order:' || g,
                       jsonb_build_object('payload', jsonb_build_object('order_id', g),
                           'priority', NULL::integer, 'max_attempts', NULL::integer,
                           'timeout_seconds', NULL::integer, 'next_run_at', NULL::text,
                           'stage', 'queued'),
                       CASE WHEN s.status = 'DEAD_LETTERED' THEN 'job.handler_failed' END,
                       CASE WHEN s.status = 'DEAD_LETTERED' THEN 'ValueError: boom' END,
                       CASE WHEN s.status = 'SUCCEEDED'
                            THEN jsonb_build_object('sent_to', 'customer-' || g) END,
                       s.created_at, s.created_at + interval '5 seconds'
                FROM generate_series(1, %(total)s) AS g,
                     LATERAL (
                         SELECT (%(types)s::text[])[1 + (g * 31) %% %(ntypes)s] AS job_type,
                                {_ORGANIZATION} AS organization_id,
                                CASE WHEN g > %(live_from)s
                                     THEN now() - (%(total)s - g)
                                          * (interval '12 hours' / (%(total)s - %(live_from)s))
                                     ELSE now() - (%(live_from)s - g)
                                          * (interval '30 days' / %(live_from)s) END
                                    AS created_at,
                                CASE WHEN g > %(live_from)s
                                     THEN CASE WHEN g %% %(lease_every)s = 7 THEN 'LEASED'
                                               ELSE 'PENDING' END
                                     WHEN (g::bigint * 7919) %% 1000 < 10 THEN 'DEAD_LETTERED'
                                     WHEN (g::bigint * 7919) %% 1000 < 15 THEN 'CANCELED'
                                     ELSE 'SUCCEEDED' END AS status
                     ) AS s
                """,
                params,
            )
        progress(f"job history: jobs loaded at {time.perf_counter() - started:.0f}s")
        with _secondary_indexes_dropped("runledger_job_attempts"):
            # One row per attempt; all but the last of a job's attempts were retried.
            sql(
                """
                INSERT INTO runledger_job_attempts (
                    job_id, job_type, organization_id, run_number, attempt, worker_id,
                    leased_at, finished_at, outcome, failure_kind, error_code, error_message,
                    retry_delay_ms, created_at)
                SELECT job.id, job.job_type, job.organization_id, 1, n, 'bench-worker',
                       job.started_at + (n - 1) * interval '1 second',
                       CASE WHEN job.status <> 'LEASED'
                            THEN job.started_at + (n - 1) * interval '1 second'
                                 + interval '500 milliseconds' END,
                       CASE WHEN job.status = 'LEASED' THEN NULL
                            WHEN n < job.attempt THEN 'RETRY_SCHEDULED'
                            WHEN job.status = 'DEAD_LETTERED' THEN 'DEAD_LETTERED'
                            ELSE 'SUCCEEDED' END,
                       CASE WHEN job.status <> 'LEASED' AND (n < job.attempt
                                 OR job.status = 'DEAD_LETTERED') THEN 'RETRYABLE' END,
                       CASE WHEN job.status <> 'LEASED' AND (n < job.attempt
                                 OR job.status = 'DEAD_LETTERED') THEN 'job.handler_failed' END,
                       CASE WHEN job.status <> 'LEASED' AND (n < job.attempt
                                 OR job.status = 'DEAD_LETTERED') THEN 'ValueError: boom' END,
                       CASE WHEN job.status <> 'LEASED' AND n < job.attempt THEN 10000 END,
                       job.started_at + (n - 1) * interval '1 second'
                FROM runledger_job_queue job, generate_series(1, job.attempt) AS n
                WHERE job.attempt > 0
                """
            )
        progress(f"job history: attempts loaded at {time.perf_counter() - started:.0f}s")
    finally:
        sql("SET session_replication_role = DEFAULT")
        sql("RESET maintenance_work_mem")
    # Autovacuum's steady state: statistics, and the visibility map index-only scans need.
    sql("VACUUM (ANALYZE) runledger_job_queue")
    sql("VACUUM (ANALYZE) runledger_job_attempts")
    counts = {
        str(status): int(count)
        for status, count in sql("SELECT status, count(*) FROM runledger_job_queue GROUP BY 1")
    }
    counts["attempts"] = int(scalar("SELECT count(*) FROM runledger_job_attempts"))
    counts["attempts_24h"] = int(
        scalar(
            "SELECT count(*) FROM runledger_job_attempts "
            "WHERE finished_at >= now() - interval '24 hours'"
        )
    )
    counts["seconds"] = round(time.perf_counter() - started)
    progress(f"job history ready: {counts}")
    return counts


def measure(fn: Callable[[], object], *, count: int, warmup: int = 3) -> Stats:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Stats(samples)


def run(ctx: Context) -> None:
    ensure_job_history(ctx)
    jobs = int(scalar("SELECT count(*) FROM runledger_job_queue"))
    count = ctx.size(30, 10)
    tenant = ReadScope.organization(ORGANIZATIONS[0])
    reads: list[tuple[str, Callable[[], object]]] = [
        ("job_metrics, ADMIN scope", lambda: job_metrics(scope=ReadScope.ADMIN)),
        ("job_metrics, one organization", lambda: job_metrics(scope=tenant)),
        ("job_metrics, GLOBAL scope", lambda: job_metrics(scope=ReadScope.GLOBAL)),
        (
            "job_metrics, ADMIN, one job type",
            lambda: job_metrics(scope=ReadScope.ADMIN, job_type=JOB_TYPES[3]),
        ),
    ]
    history = ctx.state.get("job_history", {})
    progress(f"(g) {len(reads)} reads x {count} over {jobs:,} jobs")
    for name, fn in reads:
        stats = measure(fn, count=count)
        ctx.add(
            Row(
                "g",
                f"{name}, median",
                stats.median_ms,
                "ms",
                target=f"<= {TARGET_MS:g} ms",
                ok=stats.median_ms <= TARGET_MS,
                detail=stats.to_dict() | {"jobs": jobs, "history": history},
            )
        )
        ctx.add(Row("g", f"{name}, p95", stats.p95_ms, "ms"))
        progress(f"(g) {name}: median {stats.median_ms:.2f} ms, p95 {stats.p95_ms:.2f} ms")
