"""(s) Periodic schedules: materialization rate, the due claim at scale, fire-to-start latency,
and the idle scheduler's statements.

- 10,000 due schedules (one fire each), drained by one scheduler and by four (threads, each
  with its own connection): fires per second. Target: at least 5,000 with one.
- 100,000 active schedules of which 100 are due: one pass. Target: under 100 ms.
- A worker (``runledger_worker`` subprocess, scheduler on) and 60 minute crons, one at each
  second of the minute: the time from each fire's ``scheduled_for`` to its handler's start.
  Target: p50 under 1 s.
- An idle scheduler thread over a window (poll 1 s, 100,000 schedules none of them due soon):
  statements per look. Target: at most one statement per poll interval.

    .venv/bin/python -m benchmarks --only s --quick
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
import threading
import time
from typing import Any

from django.db import connection, connections

from .common import Context, Row, percentile, progress, sql
from .worker_common import manage, running

SHAPE = "s"
TYPE = "bench.stamp_start"
FIRES_TARGET = 5_000.0
PASS_TARGET_MS = 100.0
LATENCY_TARGET_S = 1.0
DUE_CRON = "0 0 1 1 *"
DUE_CURSOR = "date_trunc('year', now())"
"""Due at this year's cron instant, as a fire is when it comes due (not behind), and not due
again however long the drain takes."""


def reset() -> None:
    sql(
        "TRUNCATE runledger_schedule_fires, runledger_job_schedules, runledger_job_events, "
        "runledger_job_attempts, runledger_job_queue CASCADE"
    )
    sql(
        "INSERT INTO runledger_job_definitions (job_type, max_attempts) VALUES (%s, 3) "
        "ON CONFLICT DO NOTHING",
        [TYPE],
    )


def insert_schedules(count: int, *, prefix: str, cursor_sql: str, cron: str = "* * * * *") -> None:
    sql(
        f"""
        INSERT INTO runledger_job_schedules (id, name, job_type, cron_expr, next_fire_at,
                                             next_scheduled_for)
        SELECT gen_random_uuid(), %(prefix)s || g, %(job_type)s, %(cron)s, c, c
        FROM generate_series(1, %(count)s) AS g,
             LATERAL (SELECT {cursor_sql} AS c) AS cursor
        """,
        {"prefix": prefix, "job_type": TYPE, "count": count, "cron": cron},
    )
    sql("ANALYZE runledger_job_schedules")


def drain(schedulers: int, batch: int) -> tuple[float, int]:
    from runledger_django.services.schedules import run_schedule_pass

    fired = [0] * schedulers
    errors: list[BaseException] = []
    barrier = threading.Barrier(schedulers + 1)

    def work(index: int) -> None:
        try:
            barrier.wait()
            while True:
                report = run_schedule_pass(limit=batch)
                fired[index] += report.fired
                if not report.claimed:
                    return
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(schedulers)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return elapsed, sum(fired)


def materialize_rate(ctx: Context) -> None:
    count = ctx.size(10_000, 1_000)
    for schedulers in (1, 4):
        reset()
        insert_schedules(count, prefix="due-", cursor_sql=DUE_CURSOR, cron=DUE_CRON)
        elapsed, fired = drain(schedulers, 500)
        assert fired == count, (fired, count)
        rate = fired / elapsed
        one = schedulers == 1
        ctx.add(
            Row(
                SHAPE,
                f"materialize {count:,} due fires, {schedulers} scheduler{'s' if not one else ''}",
                rate,
                "fires/s",
                target=f">= {FIRES_TARGET:,.0f} fires/s" if one else "",
                ok=rate >= FIRES_TARGET if one else None,
                detail={"seconds": round(elapsed, 3), "fires": fired},
            )
        )
        progress(f"  {schedulers} scheduler(s): {rate:,.0f} fires/s")


def due_pass(ctx: Context) -> None:
    from runledger_django.services.schedules import run_schedule_pass

    active = ctx.size(100_000, 10_000)
    due = 100
    reset()
    insert_schedules(active, prefix="future-", cursor_sql="now() + interval '1 day'")
    insert_schedules(due, prefix="due-", cursor_sql=DUE_CURSOR, cron=DUE_CRON)
    samples = []
    for _ in range(ctx.size(7, 3)):
        sql(
            "UPDATE runledger_job_schedules SET next_fire_at = date_trunc('year', now()), "
            "next_scheduled_for = date_trunc('year', now()) WHERE name LIKE 'due-%%'"
        )
        sql("TRUNCATE runledger_schedule_fires")
        started = time.perf_counter()
        report = run_schedule_pass(limit=500)
        samples.append(time.perf_counter() - started)
        assert report.fired == due, report
    median_ms = statistics.median(samples) * 1000
    ctx.add(
        Row(
            SHAPE,
            f"one pass over {active:,} active schedules, {due} due",
            median_ms,
            "ms",
            target=f"< {PASS_TARGET_MS:.0f} ms",
            ok=median_ms < PASS_TARGET_MS,
            detail={"samples_ms": [round(s * 1000, 2) for s in samples]},
        )
    )
    progress(f"  100-due pass: {median_ms:.1f} ms")


def latency(ctx: Context) -> None:
    from runledger_django.services.schedules import save_schedule

    reset()
    window = ctx.size(65, 15)
    now = dt.datetime.now(dt.UTC)
    start = now + dt.timedelta(seconds=3)
    for second in range(60):
        save_schedule(f"minute-at-{second:02d}", TYPE, cron=f"{second} * * * * *")
    argv = [manage("runledger_worker", "--job-type", TYPE, "--concurrency", "2")]
    with running("s-latency", argv, min_connections=2):
        time.sleep(max(0.0, (start - dt.datetime.now(dt.UTC)).total_seconds()) + window)
    rows = sql(
        """
        SELECT payload -> '_schedule' ->> 'scheduled_for', (output ->> 'started')::float8
        FROM runledger_job_queue
        WHERE status = 'SUCCEEDED' AND payload ? '_schedule'
        """
    )
    lags = []
    for scheduled_text, started in rows:
        scheduled = dt.datetime.fromisoformat(scheduled_text.replace("Z", "+00:00"))
        if scheduled < start:
            continue  # fired while the worker was still starting
        lags.append(started - scheduled.timestamp())
    if not lags:
        raise RuntimeError("no scheduled job ran in the window")
    p50 = statistics.median(lags)
    p99 = percentile(lags, 99)
    ctx.add(
        Row(
            SHAPE,
            f"minute cron, fire time to handler start, p50 ({len(lags)} fires)",
            p50 * 1000,
            "ms",
            target=f"< {LATENCY_TARGET_S * 1000:.0f} ms",
            ok=p50 < LATENCY_TARGET_S,
        )
    )
    ctx.add(Row(SHAPE, "minute cron, fire time to handler start, p99", p99 * 1000, "ms"))
    progress(f"  latency p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms over {len(lags)} fires")


def idle(ctx: Context) -> None:
    from runledger_django.conf import conf
    from runledger_django.services.outage import Outage
    from runledger_django.worker.scheduler import Scheduler

    reset()
    insert_schedules(
        ctx.size(100_000, 10_000), prefix="later-", cursor_sql="now() + interval '1 day'"
    )
    window = float(ctx.size(20, 5))
    poll = 1.0
    counted = {"statements": 0}

    class Counting(Scheduler):
        def run(self) -> None:
            def count(execute: Any, *args: Any) -> Any:
                counted["statements"] += 1
                return execute(*args)

            with connection.execute_wrapper(count):
                super().run()

    stop = threading.Event()
    scheduler = Counting(
        job_types=lambda: [TYPE],
        stop=stop,
        poll_seconds=poll,
        batch_size=500,
        outage=Outage(limit_seconds=60, logger=logging.getLogger(__name__), what="bench"),
        sync=False,
    )
    scheduler.start()
    time.sleep(window)
    stop.set()
    scheduler.poke()
    scheduler.join(30)
    per_look = counted["statements"] / max(1, scheduler.looks)
    per_poll = counted["statements"] / (window / poll)
    default_per_second = per_look / conf.SCHEDULE_POLL_SECONDS
    ctx.add(
        Row(
            SHAPE,
            "idle scheduler: statements per poll interval",
            per_poll,
            "statements",
            target="<= 1 per poll interval",
            ok=per_poll <= 1.0 + 1e-9 + 1.0 / (window / poll),
            detail={
                "looks": scheduler.looks,
                "statements": counted["statements"],
                "window_s": window,
                "poll_s": poll,
            },
        )
    )
    ctx.add(
        Row(
            SHAPE,
            f"idle scheduler at the default {conf.SCHEDULE_POLL_SECONDS:.0f} s poll",
            default_per_second,
            "statements/s",
        )
    )
    progress(f"  idle: {per_look:.2f} statements per look, {default_per_second:.3f}/s by default")


def run(ctx: Context) -> None:
    logging.getLogger("runledger_django").setLevel(logging.ERROR)
    materialize_rate(ctx)
    due_pass(ctx)
    idle(ctx)
    latency(ctx)
    reset()
