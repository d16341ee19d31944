"""(z) The database's own limit for the worker's statements, as sent today and as they could be.

No worker process, no handler, no threads: one raw psycopg session drains a backlog of no-op
jobs with the runtime's own claim and success statements (``db/lifecycle_queries.py``), back to back,
durable commits. Three ways of sending them:

- ``today``: as the runtime sends them, each with the timeout-cap prelude in the same
  simple-protocol message, so the server parses and plans both every time;
- ``no prelude``: the same texts without the prelude (the caps set once for the session, as a
  worker could on the connections it owns);
- ``prepared``: without the prelude, as server-side prepared statements (psycopg
  ``prepare=True``), parsed and planned once per session.

Each at one job per claim and at eight (the batch an 8-thread worker claims when busy). No
target: it shows how much of a drain is the SQL itself and what sending it differently is worth.
The rate waits on every commit's WAL flush, so it moves with the machine's disk traffic; the
session backend's CPU per job (from /proc, when the server runs here) does not.

    .venv/bin/python -m benchmarks.shape_z --quick
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from .common import Context, Row, connect_kwargs, progress
from .worker_common import Runledger, cpu_seconds, loadavg

SHAPE = "z"
CAPS = {
    "cap_lock_ms": 5_000,
    "cap_lock_text": "5000ms",
    "cap_statement_ms": 30_000,
    "cap_statement_text": "30000ms",
}
"""The runtime's lifecycle caps (services/_lease.py: 5 s lock waits, 30 s per statement)."""
MODES = ("today", "no prelude", "prepared")
BATCHES = (1, 8)


def _sender(mode: str, conn: Any) -> Callable[[str, dict[str, Any]], list[tuple[Any, ...]]]:
    from runledger_django.db import session_queries

    cursor = conn.cursor()

    def send(statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        if mode == "today":
            cursor.execute(
                session_queries.CAP_LIFECYCLE_TIMEOUTS + ";\n" + statement, params | CAPS
            )
            cursor.nextset()
        else:
            cursor.execute(statement, params, prepare=mode == "prepared")
        return list(cursor.fetchall())

    return send


def drain_raw(mode: str, batch: int, jobs: int) -> tuple[float, float | None]:
    """Claim ``batch``, mark each succeeded, until the backlog is gone: jobs per second, and
    the session's backend CPU per job in ms (None where /proc does not show the server)."""
    import psycopg

    from runledger_django.db import lifecycle_queries

    system = Runledger()
    system.reset()
    system.enqueue(jobs)
    system.analyze()
    factory = psycopg.ClientCursor if mode == "today" else psycopg.Cursor
    with psycopg.connect(**connect_kwargs(), autocommit=True, cursor_factory=factory) as conn:
        if mode != "today":
            conn.execute("SET lock_timeout = '5s'")
            conn.execute("SET statement_timeout = '30s'")
        send = _sender(mode, conn)
        claim = {
            "job_types": [system.job_type],
            "limit": batch,
            "head_window": 1024,
            "worker_id": "bench-raw",
            "lease_seconds": 60,
        }
        backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])  # type: ignore[index]
        cpu_before = cpu_seconds(backend)
        done = 0
        started = time.perf_counter()
        while rows := send(lifecycle_queries.CLAIM_JOBS, claim):
            for row in rows:
                lease = {"job_id": row[0], "run_number": row[1], "attempt": row[2]}
                if not send(
                    lifecycle_queries.COMPLETE_SUCCESS,
                    lease | {"worker_id": "bench-raw", "output": None, "workflow": False},
                ):
                    raise RuntimeError("a success was refused by the lease fence")
                done += 1
        seconds = time.perf_counter() - started
        cpu_after = cpu_seconds(backend)
    if done != jobs:
        raise RuntimeError(f"{mode}, batch {batch}: {done} of {jobs} jobs ran")
    cpu = None
    if cpu_before is not None and cpu_after is not None:
        cpu = (cpu_after - cpu_before) * 1000 / jobs
    return jobs / seconds, cpu


def run(ctx: Context) -> None:
    jobs = int(ctx.state.get("jobs") or ctx.size(5_000, 500))
    rounds = int(ctx.state.get("rounds") or ctx.size(3, 1))
    variants = [(mode, batch) for batch in BATCHES for mode in MODES]
    rates: dict[tuple[str, int], list[float]] = {variant: [] for variant in variants}
    cpus: dict[tuple[str, int], list[float]] = {variant: [] for variant in variants}
    loads: list[float] = []
    for round_no in range(rounds):
        shift = round_no % len(variants)
        for mode, batch in variants[shift:] + variants[:shift]:
            loads.append(loadavg()[0])
            rate, cpu = drain_raw(mode, batch, jobs)
            rates[(mode, batch)].append(rate)
            if cpu is not None:
                cpus[(mode, batch)].append(cpu)
            progress(
                f"(z) round {round_no + 1}/{rounds} {mode}, {batch}/claim: {rate:,.0f} jobs/s,"
                f" database CPU {cpu or 0:.3f} ms/job (load {loads[-1]:.2f})"
            )
    medians = {variant: statistics.median(values) for variant, values in rates.items()}
    for mode, batch in variants:
        label = f"raw session, {batch} job{'s' if batch > 1 else ''} per claim: {mode}"
        ctx.add(
            Row(
                SHAPE,
                label,
                medians[(mode, batch)],
                "jobs/s",
                detail={"jobs": jobs, "rounds": rates[(mode, batch)], "loadavg_1m": loads},
            )
        )
        if cpus[(mode, batch)]:
            ctx.add(
                Row(
                    SHAPE,
                    f"  {mode}, {batch} per claim: database CPU per job",
                    statistics.median(cpus[(mode, batch)]),
                    "ms",
                    detail={"rounds": cpus[(mode, batch)]},
                )
            )
    for batch in BATCHES:
        per_round = [
            round(p / t, 3)
            for p, t in zip(rates[("prepared", batch)], rates[("today", batch)], strict=True)
        ]
        ctx.add(
            Row(
                SHAPE,
                f"prepared / today, {batch} per claim",
                medians[("prepared", batch)] / medians[("today", batch)],
                "x",
                detail={"per_round": per_round},
            )
        )


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(
        standalone(SHAPE, "the worker statements' own limit, today and prepared", sys.argv[1:])
    )
