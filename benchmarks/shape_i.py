"""(i) What the job-operations indexes cost the hot path, and how long a prune batch holds the
retention fence, on the million-job history of (g).

Write cost: one job's life through the services, enqueue (keyed, as promotion does), claim,
a failed attempt retried at once, claim again, success, timed per operation, with the indexes
of migration 0006 and without them (dropped, then rebuilt from their own definitions). Blocks
of each alternate, so drift on a shared machine falls on both. The jobs run at a priority above
the history's backlog, so every claim finds them first.

Retention: the oldest finished jobs get events and promoted intents, then ``prune_jobs`` deletes
them in batches of its default size; each batch's time bounds how long a concurrent promotion
pass can wait for the fence.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

from runledger_django import enqueue_job
from runledger_django.domain import ClaimedJob, FailureKind, JobFailure
from runledger_django.services.claim import claim_jobs
from runledger_django.services.job_retention import JOB_PRUNE_BATCH_SIZE, prune_jobs
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success

from .common import Context, Row, Stats, define_job_types, progress, scalar, sql
from .shape_g import ensure_job_history

T = TypeVar("T")

WRITE_TYPE = "bench.write_cost"
INDEXES = (
    "idx_job_queue_pending_metrics",
    "idx_job_attempts_finished_metrics",
    "idx_job_queue_dead_or_canceled",
)
OPS = ("enqueue", "claim", "retry", "claim again", "succeed")
EVENTS_PER_JOB = 5


def _index_definitions() -> dict[str, str]:
    return {
        str(name): str(definition)
        for name, definition in sql(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(%s)",
            [list(INDEXES)],
        )
    }


def _set_indexes(present: bool, definitions: dict[str, str]) -> None:
    for name, definition in definitions.items():
        exists = bool(scalar("SELECT count(*) FROM pg_indexes WHERE indexname = %s", [name]))
        if present and not exists:
            sql(definition)
        elif not present and exists:
            sql(f"DROP INDEX {name}")
    sql("ANALYZE runledger_job_queue")
    sql("ANALYZE runledger_job_attempts")


def _backend_wal(ctx: Context) -> tuple[int, int] | None:
    """(WAL records, WAL bytes) this session wrote so far, on PostgreSQL 18+ (per-backend WAL
    statistics); None before. Unlike a latency, a record count does not care how loaded the
    machine is: every index entry a statement writes is one WAL record."""
    if ctx.server_version < 180000:
        return None
    sql("SELECT pg_stat_force_next_flush()")
    [(records, wal_bytes)] = sql(
        "SELECT wal_records, wal_bytes FROM pg_stat_get_backend_wal(pg_backend_pid())"
    )
    return int(records), int(wal_bytes)


def _life_of_a_job(n: int, samples: dict[str, list[float]]) -> None:
    def timed(op: str, fn: Callable[[], T]) -> T:
        start = time.perf_counter()
        result = fn()
        samples[op].append(time.perf_counter() - start)
        return result

    worker = "bench-write-cost"
    key = f"write-cost:{time.monotonic_ns()}:{n}"
    timed("enqueue", lambda: enqueue_job(WRITE_TYPE, {"n": n}, idempotency_key=key, priority=1000))
    claimed: list[ClaimedJob] = timed(
        "claim", lambda: claim_jobs([WRITE_TYPE], worker_id=worker, limit=1, lease_seconds=60)
    )
    [first] = claimed
    retry_now = JobFailure(
        kind=FailureKind.RETRYABLE,
        code="job.handler_failed",
        message="bench",
        policy_retry_delay_ms=1000,
        retry_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1),
    )
    timed("retry", lambda: complete_job_failure(first.lease, retry_now))
    claimed = timed(
        "claim again",
        lambda: claim_jobs([WRITE_TYPE], worker_id=worker, limit=1, lease_seconds=60),
    )
    [second] = claimed
    timed("succeed", lambda: complete_job_success(second.lease, output={"ok": True}))


def _write_cost(ctx: Context) -> None:
    definitions = _index_definitions()
    if set(definitions) != set(INDEXES):
        raise RuntimeError(f"migration 0006's indexes are missing: {sorted(definitions)}")
    if not scalar(
        "SELECT count(*) FROM runledger_job_definitions WHERE job_type = %s", [WRITE_TYPE]
    ):
        define_job_types([WRITE_TYPE])
    rounds = ctx.size(6, 2)
    per_block = ctx.size(100, 30)
    variants = ("with indexes", "without indexes")
    # samples[variant][op] pools every round; rounds[op] pairs each round's two blocks, so a
    # machine that slows down mid-run weighs on both sides of a ratio alike.
    samples: dict[str, dict[str, list[float]]] = {v: {op: [] for op in OPS} for v in variants}
    paired: dict[str, list[float]] = {op: [] for op in (*OPS, "whole life")}
    wal: dict[str, list[tuple[int, int]]] = {v: [] for v in variants}
    try:
        for round_ in range(rounds):
            order = [True, False] if round_ % 2 == 0 else [False, True]
            medians: dict[str, dict[str, float]] = {}
            for present in order:
                _set_indexes(present, definitions)
                variant = variants[0] if present else variants[1]
                block: dict[str, list[float]] = {op: [] for op in OPS}
                for n in range(5):  # warm the plans and caches of this index set
                    _life_of_a_job(n, block)
                block = {op: [] for op in OPS}
                wal_before = _backend_wal(ctx)
                for n in range(per_block):
                    _life_of_a_job(n, block)
                wal_after = _backend_wal(ctx)
                if wal_before is not None and wal_after is not None:
                    wal[variant].append(
                        (wal_after[0] - wal_before[0], wal_after[1] - wal_before[1])
                    )
                for op in OPS:
                    samples[variant][op].extend(block[op])
                lives = [sum(v) for v in zip(*block.values(), strict=True)]
                medians[variant] = {op: statistics.median(block[op]) for op in OPS} | {
                    "whole life": statistics.median(lives)
                }
                progress(f"(i) round {round_ + 1}/{rounds}, {variant}: {per_block} jobs")
            for op in paired:
                paired[op].append(medians[variants[0]][op] / medians[variants[1]][op])
    finally:
        _set_indexes(True, definitions)
    for op in (*OPS, "whole life"):
        if op == "whole life":
            with_ = Stats([sum(v) for v in zip(*samples[variants[0]].values(), strict=True)])
            without = Stats([sum(v) for v in zip(*samples[variants[1]].values(), strict=True)])
        else:
            with_ = Stats(samples[variants[0]][op])
            without = Stats(samples[variants[1]][op])
        ratio = statistics.median(paired[op])
        ctx.add(Row("i", f"{op}: with the 0006 indexes, median", with_.median_ms, "ms"))
        ctx.add(Row("i", f"{op}: without them, median", without.median_ms, "ms"))
        ctx.add(
            Row(
                "i",
                f"{op}: with / without (median of {rounds} paired rounds)",
                ratio,
                "x",
                detail={
                    "with": with_.to_dict(),
                    "without": without.to_dict(),
                    "round_ratios": [round(r, 4) for r in paired[op]],
                },
            )
        )
        progress(
            f"(i) {op}: {with_.median_ms:.3f} ms with, {without.median_ms:.3f} ms without, "
            f"paired ratio {ratio:.3f} (rounds {', '.join(f'{r:.2f}' for r in paired[op])})"
        )
    if all(wal.values()):
        per_life = {
            variant: (
                sum(r for r, _ in blocks) / (len(blocks) * per_block),
                sum(b for _, b in blocks) / (len(blocks) * per_block),
            )
            for variant, blocks in wal.items()
        }
        for variant in variants:
            records, wal_bytes = per_life[variant]
            ctx.add(Row("i", f"WAL records per job life, {variant}", records, "records"))
            ctx.add(Row("i", f"WAL bytes per job life, {variant}", wal_bytes, "bytes"))
        ratio = per_life[variants[0]][0] / per_life[variants[1]][0]
        ctx.add(Row("i", "WAL records per job life, with / without", ratio, "x"))
        progress(
            f"(i) WAL per job life: {per_life[variants[0]][0]:.1f} records with the indexes, "
            f"{per_life[variants[1]][0]:.1f} without ({ratio:.3f}x); bytes "
            f"{per_life[variants[0]][1]:.0f} / {per_life[variants[1]][1]:.0f}"
        )


def _retention(ctx: Context) -> None:
    doomed = ctx.size(20_000, 2_000)
    cutoff = scalar(
        "SELECT finished_at FROM runledger_job_queue "
        "WHERE status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED') "
        "ORDER BY finished_at, id OFFSET %s LIMIT 1",
        [doomed],
    )
    progress(f"(i) giving the {doomed:,} oldest jobs events and promoted intents")
    sql("SET session_replication_role = replica")
    try:
        sql(
            """
            INSERT INTO runledger_job_events (job_id, run_number, attempt, event_type, stage,
                                              payload, occurred_at)
            SELECT job.id, 1, 1, e.event_type, 'running', '{}', job.finished_at
            FROM runledger_job_queue job,
                 unnest(ARRAY['ENQUEUED', 'LEASED', 'HEARTBEAT', 'HEARTBEAT', 'SUCCEEDED'])
                     AS e(event_type)
            WHERE job.finished_at < %s
              AND job.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
            """,
            [cutoff],
        )
        sql(
            """
            INSERT INTO runledger_job_enqueue_intents (
                job_type, organization_id, payload, idempotency_key, stage,
                enqueue_request_version, enqueue_request, promotion_attempts, last_attempted_at,
                status, promoted_job_id, promoted_at, created_at)
            SELECT job_type, organization_id, payload, idempotency_key, 'queued', 1,
                   enqueue_request, 1, created_at, 'PROMOTED', id, created_at, created_at
            FROM runledger_job_queue
            WHERE finished_at < %s AND status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
            """,
            [cutoff],
        )
    finally:
        sql("SET session_replication_role = DEFAULT")
    sql("VACUUM (ANALYZE) runledger_job_events")
    sql("VACUUM (ANALYZE) runledger_job_enqueue_intents")
    older_than = dt.datetime.now(dt.UTC) - cutoff
    batch_seconds: list[float] = []
    last = time.perf_counter()

    def on_batch(*_: object) -> None:
        nonlocal last
        now = time.perf_counter()
        batch_seconds.append(now - last)
        last = now

    started = time.perf_counter()
    result = prune_jobs(older_than, on_batch=on_batch)
    elapsed = time.perf_counter() - started
    ctx.state.pop("job_history_rows", None)  # the history is smaller now
    stats = Stats(batch_seconds)
    detail = stats.to_dict() | {
        "jobs": result.counts.jobs,
        "intents": result.counts.intents,
        "batches": result.batches,
        "events_per_job": EVENTS_PER_JOB,
    }
    ctx.add(
        Row(
            "i",
            f"prune_jobs batch of {JOB_PRUNE_BATCH_SIZE} (fence held at most this), median",
            stats.median_ms,
            "ms",
            detail=detail,
        )
    )
    ctx.add(
        Row(
            "i", f"prune_jobs batch of {JOB_PRUNE_BATCH_SIZE}, max", max(batch_seconds) * 1000, "ms"
        )
    )
    ctx.add(Row("i", "prune_jobs throughput", result.counts.jobs / elapsed, "rows/s"))
    progress(
        f"(i) pruned {result.counts.jobs:,} jobs and {result.counts.intents:,} intents in "
        f"{result.batches} batches: median {stats.median_ms:.1f} ms, max "
        f"{max(batch_seconds) * 1000:.1f} ms, {statistics.fmean(batch_seconds) * 1000:.1f} ms mean"
    )


def run(ctx: Context) -> None:
    ensure_job_history(ctx)
    _write_cost(ctx)
    _retention(ctx)
