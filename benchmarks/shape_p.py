"""(p) Soak: no decay under churn, and under a long transaction that holds the xmin horizon.

Two parts (``--part churn``, ``--part long-txn``, default both):

- churn: the whole pipeline at a steady load for ``--minutes`` (30). The worker's drain
  capacity (1 process x 4 threads, a backlog of no-op jobs) is measured first; then a producer
  thread records intents (``record_intents``, one batch every 100 ms) at half of it, one
  ``runledger_worker --promote`` (1 x 4) promotes and runs them, and every minute ``prune_jobs``
  deletes the jobs (with their attempts, events and promoted intents) that finished more than
  two minutes before. Each minute: jobs finished, claim latency (the attempt's ``leased_at``
  minus the job's due time, ``GREATEST(next_run_at, created_at)``, p50 and p99), queue depth,
  the jobs table's dead tuples and the sizes of the table and its hot indexes. Targets: the last
  minute's drain within 20% of the first, and the claim latency's median over the last sixth of
  the run within 20% of the first sixth's.
- long-txn: per system (runledger 1 x 4; Procrastinate 1 process x concurrency 4; with
  ``--peers`` also django-tasks-db's ``db_worker`` x 4), a backlog sized from a short capacity
  drain empties for 1 + 5 + 1 minutes: in the first no other transaction is open; at the start
  of the second another session opens a REPEATABLE READ transaction (``txid_current()`` and a
  read of the jobs table) and holds its snapshot for 5 minutes, then rolls back; the last
  minute shows the recovery. Target: every held minute at least 70% of the minute before.

Minutes are ``--minute-seconds`` long (60; --quick: 20, with 3 churn minutes and 1 + 2 + 1
long-transaction minutes, about 4 minutes in all).

    .venv/bin/python -m benchmarks.shape_p --quick
    .venv/bin/python -m benchmarks.shape_p --part churn --minutes 30
    .venv/bin/python -m benchmarks.shape_p --part long-txn --peers procrastinate,tasks-db

Under ``dev.py bench --only p`` the same options come from RUNLEDGER_SOAK_PART,
RUNLEDGER_SOAK_MINUTES, RUNLEDGER_SOAK_MINUTE_SECONDS, RUNLEDGER_SOAK_RATE and
RUNLEDGER_SOAK_PEERS.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

from . import soak_minutes
from .common import Context, Row, connect_kwargs, progress, scalar, sql
from .soak_minutes import Minute
from .worker_common import (
    Procrastinate,
    Runledger,
    System,
    TasksDb,
    drain,
    loadavg,
    running,
    spawn,
    stop,
)

SHAPE = "p"
LOAD_FRACTION = 0.5
"""The churn's steady load, as a share of the pipeline's measured capacity. Half, not the 60-70%
one would pick on a machine of one's own: on a 2-CPU box shared with other benchmarks the
capacity measured at the start varies twofold with the neighbours' load, and a load above what
the worker can do at the busiest moment measures the queue backing up, not decay."""
PRODUCER_TICK_SECONDS = 0.1
RETENTION = dt.timedelta(minutes=2)
"""Churn retention: finished jobs older than this go every minute."""
DRIFT_TOLERANCE = 0.20
HELD_FLOOR = 0.70
WORKER_THREADS = 4
HOT_INDEXES = (
    "idx_job_queue_claim",
    "idx_job_queue_pending_metrics",
    "idx_job_queue_leased_expiry",
    "runledger_job_queue_pkey",
)


def _option(ctx: Context, key: str, env: str, default: Any) -> Any:
    if key in ctx.state:
        return ctx.state[key]
    value = os.environ.get(env)
    if value is None or value == "":
        return default
    return type(default)(value) if default is not None else value


def db_now() -> dt.datetime:
    return scalar("SELECT clock_timestamp()")  # type: ignore[no-any-return]


# --- what a minute looks like from the database -------------------------------------------------


def table_stats(table: str, indexes: tuple[str, ...] = ()) -> dict[str, Any]:
    """Dead and live tuples (the statistics collector's view, a little behind), vacuums so far,
    and the sizes of the table and the named indexes, in KiB."""
    row = sql(
        "SELECT n_live_tup, n_dead_tup, autovacuum_count + vacuum_count,"
        " autoanalyze_count + analyze_count, n_tup_upd, n_tup_hot_upd"
        " FROM pg_stat_user_tables WHERE relname = %s",
        [table],
    )
    live, dead, vacuums, analyzes, updates, hot = row[0] if row else (0, 0, 0, 0, 0, 0)
    sizes = sql(
        "SELECT name, pg_relation_size(to_regclass(name)) / 1024"
        " FROM unnest(%s::text[]) name WHERE to_regclass(name) IS NOT NULL",
        [[table, *indexes]],
    )
    return {
        "live": int(live),
        "dead": int(dead),
        "vacuums": int(vacuums),
        "analyzes": int(analyzes),
        "updates": int(updates),
        "hot_updates": int(hot),
        "kib": {str(name): int(kib) for name, kib in sizes},
    }


def _runledger_minute_rows(since: dt.datetime, until: dt.datetime) -> list[tuple[Any, ...]]:
    return sql(
        "SELECT attempt.finished_at,"
        " EXTRACT(EPOCH FROM attempt.leased_at - GREATEST(job.next_run_at, job.created_at))"
        " FROM runledger_job_attempts attempt"
        " JOIN runledger_job_queue job ON job.id = attempt.job_id"
        " WHERE attempt.outcome = 'SUCCEEDED'"
        " AND attempt.finished_at >= %s AND attempt.finished_at < %s",
        [since, until],
    )


def claim_probe() -> dict[str, Any]:
    """The claim's index walk, read-only: the first due PENDING jobs in claim order, as the
    claim's candidate scan finds them (EXPLAIN ANALYZE, BUFFERS). Its buffer count is what a
    claim pays to step over the index entries of jobs already claimed that vacuum has not
    removed yet (or, while an older snapshot is open, cannot)."""
    import json

    plan = scalar(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM runledger_job_queue"
        " WHERE status = 'PENDING' AND next_run_at <= now()"
        " ORDER BY priority DESC, next_run_at, created_at LIMIT 4"
    )
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]
    root = top["Plan"]
    return {
        "ms": round(float(top.get("Execution Time", 0.0)), 3),
        "buffers": int(root.get("Shared Hit Blocks", 0)) + int(root.get("Shared Read Blocks", 0)),
    }


def _queue_depth() -> dict[str, int]:
    jobs, intents = sql(
        "SELECT (SELECT count(*) FROM runledger_job_queue WHERE status = 'PENDING'),"
        " (SELECT count(*) FROM runledger_job_enqueue_intents WHERE status = 'PENDING')"
    )[0]
    return {"pending_jobs": int(jobs), "pending_intents": int(intents)}


# --- churn ---------------------------------------------------------------------------------------


class Producer(threading.Thread):
    """Records intents at ``rate`` per second, a batch per tick, on its own connection."""

    def __init__(self, job_type: str, rate: float) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.job_type = job_type
        self.rate = rate
        self.recorded = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from runledger_django import IntentRequest, record_intents

        started = time.monotonic()
        try:
            while not self.stopping.is_set():
                due = int(self.rate * (time.monotonic() - started)) - self.recorded
                if due > 0:
                    first = self.recorded
                    record_intents(
                        [
                            IntentRequest(self.job_type, {"n": n}, idempotency_key=f"soak-{n:09d}")
                            for n in range(first, first + due)
                        ]
                    )
                    self.recorded += due
                self.stopping.wait(PRODUCER_TICK_SECONDS)
        except BaseException as error:  # reported by the shape; the thread just stops
            self.error = error
        finally:
            connection.close()


@dataclass
class ChurnMinute:
    minute: Minute
    recorded: int
    depth: dict[str, int]
    jobs_table: dict[str, Any]
    intents_table: dict[str, Any]
    pruned: int
    prune_seconds: float
    load: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "minute": self.minute.index,
            "finished": self.minute.finished,
            "rate": round(self.minute.rate, 2),
            "claim_p50_ms": self.minute.latency_p50_ms,
            "claim_p99_ms": self.minute.latency_p99_ms,
            "recorded": self.recorded,
            **self.depth,
            "jobs_table": self.jobs_table,
            "intents_table": self.intents_table,
            "pruned": self.pruned,
            "prune_seconds": round(self.prune_seconds, 3),
            "loadavg_1m": round(self.load, 2),
        }


def measure_capacity(system: System, *, jobs: int, processes: int, threads: int) -> float:
    result = drain(system, processes=processes, concurrency=threads, jobs=jobs, tag="p-capacity")
    return result.rate


def pipeline_capacity(system: Runledger, *, intents: int) -> float:
    """Jobs/s of the whole pipeline in one worker (``--promote``, 1 x 4) on a backlog of
    recorded intents: promotion, claim and completion, with no recorder running beside it."""
    from runledger_django import IntentRequest, record_intents

    system.reset()
    for first in range(0, intents, 5_000):
        record_intents(
            [
                IntentRequest(system.job_type, {"n": n}, idempotency_key=f"cap-{n:09d}")
                for n in range(first, min(intents, first + 5_000))
            ]
        )
    sql("ANALYZE runledger_job_enqueue_intents")
    group = spawn("p-pipeline", [system.argv(WORKER_THREADS, "--promote")])
    try:
        deadline = time.monotonic() + 180 + intents / 20
        while True:
            group.check_alive()
            left = int(
                scalar(
                    "SELECT (SELECT count(*) FROM runledger_job_enqueue_intents"
                    " WHERE status = 'PENDING') + (SELECT count(*) FROM runledger_job_queue"
                    " WHERE status IN ('PENDING', 'LEASED'))"
                )
            )
            if left == 0 and system.window().succeeded >= intents:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"pipeline capacity: {left} left")
            time.sleep(0.2)
        return system.window().full_rate
    finally:
        stop(group)


def churn(ctx: Context, *, minutes: int, seconds: float, rate: float | None) -> None:
    from runledger_django.services.job_retention import prune_jobs

    system = Runledger()
    drain_capacity = measure_capacity(
        system, jobs=ctx.size(6_000, 2_000), processes=1, threads=WORKER_THREADS
    )
    capacity = pipeline_capacity(system, intents=ctx.size(10_000, 4_000))
    load = rate or round(capacity * LOAD_FRACTION)
    progress(
        f"(p) churn: capacity 1 x {WORKER_THREADS} {drain_capacity:,.0f} jobs/s (drain),"
        f" {capacity:,.0f} jobs/s (intents, --promote);"
        f" steady load {load:,.0f} intents/s for {minutes} x {seconds:.0f}s"
    )
    system.reset()
    sql("VACUUM ANALYZE runledger_job_queue")
    argv = system.argv(WORKER_THREADS, "--promote")
    rows: list[ChurnMinute] = []
    producer = Producer(system.job_type, load)
    with running("p-churn", [argv], system.min_connections) as group:
        producer.start()
        # A short warm-up so the first minute is already at the steady load.
        time.sleep(min(15.0, seconds / 2))
        boundary = db_now()
        recorded_before = producer.recorded
        next_tick = time.monotonic() + seconds
        for index in range(minutes):
            time.sleep(max(0.0, next_tick - time.monotonic()))
            next_tick += seconds
            group.check_alive()
            if producer.error is not None:
                raise RuntimeError(f"producer failed: {producer.error!r}")
            until = db_now()
            found = _runledger_minute_rows(boundary, until)
            minute = soak_minutes.minute_of(
                [row[0] for row in found],
                [float(row[1]) for row in found],
                index=index,
                seconds=(until - boundary).total_seconds(),
            )
            recorded = producer.recorded
            depth = _queue_depth()
            jobs_table = table_stats("runledger_job_queue", HOT_INDEXES)
            jobs_table["claim_probe"] = claim_probe()
            intents_table = table_stats(
                "runledger_job_enqueue_intents", ("idx_job_enqueue_intents_pending",)
            )
            clock = time.monotonic()
            pruned = prune_jobs(RETENTION).counts.jobs
            prune_seconds = time.monotonic() - clock
            entry = ChurnMinute(
                minute=minute,
                recorded=recorded - recorded_before,
                depth=depth,
                jobs_table=jobs_table,
                intents_table=intents_table,
                pruned=pruned,
                prune_seconds=prune_seconds,
                load=loadavg()[0],
            )
            rows.append(entry)
            recorded_before = recorded
            boundary = until
            progress(
                f"(p) churn minute {index + 1}/{minutes}: {minute.rate:,.1f} jobs/s,"
                f" claim p50 {minute.latency_p50_ms or 0:.1f} ms p99"
                f" {minute.latency_p99_ms or 0:.1f} ms, depth {depth},"
                f" jobs dead {jobs_table['dead']:,} kib {jobs_table['kib']},"
                f" claim probe {jobs_table['claim_probe']},"
                f" pruned {pruned:,} in {prune_seconds:.2f}s"
            )
        producer.stopping.set()
        producer.join(timeout=30)
    _report_churn(ctx, rows, drain_capacity=drain_capacity, capacity=capacity, load=load)


def _report_churn(
    ctx: Context,
    rows: list[ChurnMinute],
    *,
    drain_capacity: float,
    capacity: float,
    load: float,
) -> None:
    ctx.add(
        Row(
            SHAPE,
            f"churn: worker capacity 1 x {WORKER_THREADS}, a backlog of jobs (measured first)",
            drain_capacity,
            "jobs/s",
        )
    )
    ctx.add(
        Row(
            SHAPE,
            f"churn: pipeline capacity 1 x {WORKER_THREADS} --promote, a backlog of intents",
            capacity,
            "jobs/s",
        )
    )
    ctx.add(
        Row(
            SHAPE,
            f"churn: steady load ({LOAD_FRACTION:.0%} of the pipeline's; record_intents / 100 ms)",
            load,
            "jobs/s",
        )
    )
    for entry in rows:
        m = entry.minute
        table = entry.jobs_table
        ctx.add(
            Row(
                SHAPE,
                f"  churn minute {m.index + 1:2d}: claim p50 {m.latency_p50_ms or 0:6.1f} ms"
                f" p99 {m.latency_p99_ms or 0:7.1f} ms; depth {entry.depth['pending_jobs']:5d}"
                f"+{entry.depth['pending_intents']:<5d}; jobs table {table['kib'].get('runledger_job_queue', 0):7,d} KiB,"
                f" claim index {table['kib'].get('idx_job_queue_claim', 0):5,d} KiB,"
                f" dead {table['dead']:7,d}",
                m.rate,
                "jobs/s",
                detail=entry.to_dict(),
            )
        )
    if len(rows) < 2:
        return
    first, last = rows[0].minute, rows[-1].minute
    drift = soak_minutes.ratio(last.rate, first.rate)
    ctx.add(
        Row(
            SHAPE,
            f"churn: last minute's drain / the first's ({last.rate:,.1f} / {first.rate:,.1f})",
            drift,
            "x",
            target=f"{1 - DRIFT_TOLERANCE:.2f}x-{1 + DRIFT_TOLERANCE:.2f}x",
            ok=abs(drift - 1) <= DRIFT_TOLERANCE,
            detail={"minutes": [entry.to_dict() for entry in rows]},
        )
    )
    rates = [entry.minute.rate for entry in rows]
    ctx.add(
        Row(
            SHAPE,
            f"churn: slowest minute / the first (minute {rates.index(min(rates)) + 1})",
            soak_minutes.ratio(min(rates), first.rate),
            "x",
        )
    )
    for label in ("p50", "p99"):
        values = [getattr(entry.minute, f"latency_{label}_ms") or 0.0 for entry in rows]
        trend = soak_minutes.trend_ratio(values)
        start, end = soak_minutes.end_medians(values)
        ctx.add(
            Row(
                SHAPE,
                f"churn: claim latency {label}, median of the last sixth / the first sixth"
                f" ({end:.1f} / {start:.1f} ms; measured {values[-1]:.1f} / {values[0]:.1f})",
                trend,
                "x",
                target=f"<= {1 + DRIFT_TOLERANCE:.2f}x" if label == "p50" else "",
                ok=trend <= 1 + DRIFT_TOLERANCE if label == "p50" else None,
            )
        )
    size_first = sum(rows[0].jobs_table["kib"].values())
    size_last = sum(rows[-1].jobs_table["kib"].values())
    ctx.add(
        Row(
            SHAPE,
            f"churn: jobs table + hot indexes, last minute / first ({size_last:,} / {size_first:,} KiB)",
            soak_minutes.ratio(size_last, size_first),
            "x",
        )
    )


# --- long transaction ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Contender:
    key: str
    label: str
    system: System
    processes: int
    concurrency: int


def long_txn_contenders(peers: set[str]) -> list[Contender]:
    chosen = [
        Contender("rl", f"runledger 1 x {WORKER_THREADS}", Runledger(), 1, WORKER_THREADS),
        Contender(
            "procrastinate",
            f"procrastinate 1 process x concurrency {WORKER_THREADS}",
            Procrastinate(),
            1,
            WORKER_THREADS,
        ),
        Contender(
            "tasks-db",
            f"django-tasks-db {WORKER_THREADS} processes",
            TasksDb(),
            WORKER_THREADS,
            1,
        ),
    ]
    return [c for c in chosen if (c.key == "rl" or c.key in peers) and c.system.available()]


@dataclass
class HeldDrain:
    contender: Contender
    capacity: float
    backlog: int
    minutes: list[Minute]
    held: set[int]
    base: set[int]
    stats: list[dict[str, Any]] = field(default_factory=list)
    ran_out: int | None = None
    """The minute the backlog ran out in (that minute and later are not counted)."""


class SnapshotHolder:
    """Another session's REPEATABLE READ transaction: an xid and a snapshot, held until
    ``release``. While it is open no vacuum removes a row version deleted after it began."""

    def __init__(self, table: str) -> None:
        self.table = table
        self.conn: Any = None
        self.xid: int | None = None

    def hold(self) -> None:
        import psycopg

        conn = psycopg.connect(**connect_kwargs(), autocommit=False)
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        row = conn.execute("SELECT txid_current()").fetchone()
        self.xid = int(row[0]) if row else None
        conn.execute(f'SELECT count(*) FROM (SELECT 1 FROM "{self.table}" LIMIT 100) sample')
        self.conn = conn

    def release(self) -> None:
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()
            self.conn = None


def _oldest_xmin_age() -> int:
    return int(
        scalar(
            "SELECT COALESCE(max(age(backend_xmin)), 0) FROM pg_stat_activity"
            " WHERE datname = current_database()"
        )
    )


def held_drain(
    contender: Contender, *, seconds: float, before: int, held_minutes: int, after: int
) -> HeldDrain:
    system = contender.system
    capacity = measure_capacity(
        system,
        jobs=9_000 if contender.key == "rl" else 4_000,
        processes=contender.processes,
        threads=contender.concurrency,
    )
    total = before + held_minutes + after
    backlog = int(capacity * seconds * total * 1.3) + 1_000
    progress(
        f"(p) long-txn {contender.label}: capacity {capacity:,.0f} jobs/s;"
        f" backlog {backlog:,} for {before}+{held_minutes}+{after} x {seconds:.0f}s"
    )
    system.reset()
    # A new session, planning every foreign-key check afresh. On PostgreSQL 18, after the churn
    # part, cloning 158,000 events spent over six minutes in their key checks against the jobs
    # table, presumably a generic plan cached while that table was tiny (a sequential scan).
    connection.close()
    sql("SET plan_cache_mode = force_custom_plan")
    system.enqueue(backlog)
    sql("RESET plan_cache_mode")
    system.analyze()
    table = system.tables[0]
    indexes = HOT_INDEXES if contender.key == "rl" else ()
    group = spawn(
        f"p-held-{contender.key}", [system.argv(contender.concurrency)] * contender.processes
    )
    holder = SnapshotHolder(table)
    held = set(range(before, before + held_minutes))
    stats: list[dict[str, Any]] = []
    ran_out: int | None = None
    try:
        deadline = time.monotonic() + 180
        while system.active_workers() < contender.processes:
            group.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{contender.label}: workers did not start")
            time.sleep(0.05)
        start = db_now()
        next_tick = time.monotonic()
        for index in range(total):
            if index == before:
                holder.hold()
            if index == before + held_minutes:
                holder.release()
            next_tick += seconds
            time.sleep(max(0.0, next_tick - time.monotonic()))
            group.check_alive()
            remaining = system.remaining()
            entry = {
                "minute": index,
                "held": index in held,
                "remaining": remaining,
                "xmin_age": _oldest_xmin_age(),
                "loadavg_1m": round(loadavg()[0], 2),
                **table_stats(table, indexes),
            }
            if contender.key == "rl":
                entry["claim_probe"] = claim_probe()
            stats.append(entry)
            progress(
                f"(p) long-txn {contender.label} minute {index + 1}/{total}"
                f"{' (held)' if index in held else ''}: remaining {remaining:,},"
                f" dead {entry['dead']:,}, xmin age {entry['xmin_age']:,}, kib {entry['kib']}"
                f" probe {entry.get('claim_probe')}"
            )
            if remaining == 0 and ran_out is None:
                ran_out = index
                break
        finishes = system.window().finishes
    finally:
        holder.release()
        stop(group)
    minutes = soak_minutes.bucket(finishes, start=start, seconds=seconds, count=total)
    if ran_out is not None:
        minutes = minutes[:ran_out]
    return HeldDrain(
        contender, capacity, backlog, minutes, held, set(range(before)), stats, ran_out
    )


def long_txn(
    ctx: Context, *, seconds: float, before: int, held_minutes: int, after: int, peers: set[str]
) -> None:
    missing = {"procrastinate", "tasks-db"} & peers
    chosen = long_txn_contenders(peers)
    absent = missing - {c.key for c in chosen}
    if absent:
        ctx.add(
            Row(
                SHAPE,
                f"peers missing ({', '.join(sorted(absent))}): install the bench extra",
                0,
                "ms",
                ok=False,
            )
        )
    results: list[HeldDrain] = []
    for contender in chosen:
        try:
            results.append(
                held_drain(
                    contender,
                    seconds=seconds,
                    before=before,
                    held_minutes=held_minutes,
                    after=after,
                )
            )
        except Exception as error:  # one peer's failure must not hide the others
            progress(f"(p) long-txn {contender.label}: FAILED {error!r}"[:400])
            ctx.add(
                Row(SHAPE, f"long-txn {contender.label}: FAILED {error}"[:160], 0, "x", ok=False)
            )
    _report_long_txn(ctx, results)


def _report_long_txn(ctx: Context, results: list[HeldDrain]) -> None:
    for result in results:
        label = result.contender.label
        for minute, entry in zip(result.minutes, result.stats, strict=False):
            ctx.add(
                Row(
                    SHAPE,
                    f"  long-txn {label} minute {minute.index + 1}"
                    f"{' (held)' if minute.index in result.held else ''}:"
                    f" dead {entry['dead']:,}, xmin age {entry['xmin_age']:,},"
                    f" table {entry['kib'].get(result.contender.system.tables[0], 0):,} KiB",
                    minute.rate,
                    "jobs/s",
                    detail=entry,
                )
            )
        mean, worst, base = soak_minutes.held_ratios(
            result.minutes, held=result.held, base=result.base
        )
        is_ours = result.contender.key == "rl"
        worst_ratio = soak_minutes.ratio(worst, base)
        ctx.add(
            Row(
                SHAPE,
                f"long-txn {label}: worst held minute / the minute before"
                f" ({worst:,.0f} / {base:,.0f} jobs/s)",
                worst_ratio,
                "x",
                target=f">= {HELD_FLOOR:.2f}x" if is_ours else "",
                ok=worst_ratio >= HELD_FLOOR if is_ours else None,
                detail={
                    "capacity": result.capacity,
                    "backlog": result.backlog,
                    "ran_out_in_minute": result.ran_out,
                    "rates": [round(m.rate, 2) for m in result.minutes],
                    "stats": result.stats,
                },
            )
        )
        ctx.add(
            Row(
                SHAPE,
                f"long-txn {label}: mean of the held minutes / the minute before",
                soak_minutes.ratio(mean, base),
                "x",
            )
        )
    ours = next((r for r in results if r.contender.key == "rl"), None)
    if ours is None:
        return
    ours_mean = soak_minutes.held_ratios(ours.minutes, held=ours.held, base=ours.base)[0]
    for peer in results:
        if peer is ours:
            continue
        peer_mean = soak_minutes.held_ratios(peer.minutes, held=peer.held, base=peer.base)[0]
        ctx.add(
            Row(
                SHAPE,
                f"long-txn: runledger / {peer.contender.label}, mean rate while held",
                soak_minutes.ratio(ours_mean, peer_mean),
                "x",
            )
        )


# --- the shape -----------------------------------------------------------------------------------


def run(ctx: Context) -> None:
    part = str(_option(ctx, "part", "RUNLEDGER_SOAK_PART", "both"))
    seconds = float(
        _option(ctx, "minute_seconds", "RUNLEDGER_SOAK_MINUTE_SECONDS", 20.0 if ctx.quick else 60.0)
    )
    minutes = int(_option(ctx, "minutes", "RUNLEDGER_SOAK_MINUTES", 3 if ctx.quick else 30))
    rate = float(_option(ctx, "rate", "RUNLEDGER_SOAK_RATE", 0.0)) or None
    peers_option = str(_option(ctx, "peers", "RUNLEDGER_SOAK_PEERS", "procrastinate"))
    peers = {p.strip() for p in peers_option.split(",") if p.strip()}
    if part not in {"both", "churn", "long-txn"}:
        raise ValueError(f"unknown part {part!r}: churn, long-txn or both")
    autovacuum, naptime = sql(
        "SELECT current_setting('autovacuum'), current_setting('autovacuum_naptime')"
    )[0]
    ctx.add(
        Row(
            SHAPE,
            f"server: autovacuum {autovacuum} (naptime {naptime}); with it off only index scans"
            " clean up (they mark the entries of finished jobs dead) and nothing is reclaimed",
            1.0 if autovacuum == "on" else 0.0,
            "on",
        )
    )
    if part in {"both", "churn"}:
        churn(ctx, minutes=minutes, seconds=seconds, rate=rate)
    if part in {"both", "long-txn"}:
        held_minutes = 2 if ctx.quick else 5
        long_txn(ctx, seconds=seconds, before=1, held_minutes=held_minutes, after=1, peers=peers)


if __name__ == "__main__":
    import argparse

    from .worker_common import standalone

    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--part", default=None, choices=["both", "churn", "long-txn"])
    own.add_argument("--minutes", type=int, default=None, help="churn minutes (30)")
    own.add_argument("--minute-seconds", type=float, default=None, help="a minute's length (60)")
    own.add_argument("--rate", type=float, default=None, help="churn load, intents/s")
    own.add_argument("--peers", default=None, help="long-txn peers: procrastinate,tasks-db")
    known, rest = own.parse_known_args(sys.argv[1:])
    for name, env in (
        ("part", "RUNLEDGER_SOAK_PART"),
        ("minutes", "RUNLEDGER_SOAK_MINUTES"),
        ("minute_seconds", "RUNLEDGER_SOAK_MINUTE_SECONDS"),
        ("rate", "RUNLEDGER_SOAK_RATE"),
        ("peers", "RUNLEDGER_SOAK_PEERS"),
    ):
        value = getattr(known, name)
        if value is not None:
            os.environ[env] = str(value)
    sys.exit(standalone(SHAPE, "soak: churn and a long transaction", rest))
