"""(q) Workflow graph starts: ``start_workflow`` of one unkeyed run inside the caller's
transaction (what it adds to a view's transaction: its savepoint, validation and statements;
the transaction is rolled back after each sample), for the seed's graph shapes, against the
seed's published medians (reference 3.15: PostgreSQL 18.6 debug build, one connection,
set-based inserts). The same start in a transaction of its own, commit included, is reported
beside it.

Shapes: a chain of 10 steps (9 edges), a chain of 100 (99), 100 steps each after the four
before it (390 edges), a chain of 600 (599) and 600 steps each after four (2,390). The graph
is built once per shape; each sample validates it, writes the run, its steps and edges and
releases its one root. Target: every median at least 3x below the seed's.

Default: 50 samples per shape after 5 warm-ups; --quick: 10 after 2.

    .venv/bin/python -m benchmarks --only q --quick
"""

from __future__ import annotations

import time

from django.db import transaction

from .common import Context, Row, Stats, define_job_types, progress, reset_runledger, sql

SHAPE = "q"
JOB_TYPE = "bench.workflow.step"
SPEEDUP = 3.0
SEED_MEDIAN_MS = {
    (10, 9): 13.1,
    (100, 99): 23.5,
    (100, 390): None,
    (600, 599): 147.9,
    (600, 2390): 335.3,
}
"""The seed's medians after its set-based inserts; it published none for 100/390."""
WORKFLOW_TABLES = (
    "runledger_workflow_runs",
    "runledger_workflow_steps",
    "runledger_workflow_step_dependencies",
    "runledger_workflow_active_claims",
    "runledger_workflow_recoveries",
    "runledger_workflow_run_mutations",
)


def graph(steps: int, fan_in: int) -> object:
    """Step i comes after the ``fan_in`` steps before it (a chain when 1)."""
    from runledger_django import Workflow

    flow = Workflow("bench.graph")
    handles: list[object] = []
    for index in range(steps):
        after = handles[max(0, index - fan_in) : index]
        handles.append(flow.step(f"s{index:04}", JOB_TYPE, {"i": index}, after=after))
    return flow


def run(ctx: Context) -> None:
    from runledger_django import start_workflow

    samples = int(ctx.state.get("rounds") or ctx.size(50, 10))
    warmups = ctx.size(5, 2)
    reset_runledger(*WORKFLOW_TABLES)
    define_job_types([JOB_TYPE])
    for (steps, edges), seed in SEED_MEDIAN_MS.items():
        flow = graph(steps, 1 if edges == steps - 1 else 4)
        timings: list[float] = []
        owned: list[float] = []
        for index in range(warmups + samples):
            with transaction.atomic():
                started = time.perf_counter()
                start_workflow(flow)
                elapsed = time.perf_counter() - started
                transaction.set_rollback(True)
            if index >= warmups:
                timings.append(elapsed)
            if index >= warmups and index % 5 == 0:
                started = time.perf_counter()
                start_workflow(flow)  # owns its transaction: the commit is in the sample
                owned.append(time.perf_counter() - started)
        stats = Stats(timings)
        target = None if seed is None else seed / SPEEDUP
        progress(
            f"(q) {steps}/{edges}: median {stats.median_ms:.2f} ms, p95 {stats.p95_ms:.2f} ms,"
            f" own transaction median {Stats(owned).median_ms:.2f} ms"
            + ("" if seed is None else f" (seed {seed} ms)")
        )
        ctx.add(
            Row(
                SHAPE,
                f"start_workflow {steps} steps / {edges} edges, in the caller's transaction",
                stats.median_ms,
                "ms",
                target="" if target is None else f"<= {target:.2f} ms (seed {seed} / 3)",
                ok=None if target is None else stats.median_ms <= target,
                detail={
                    **stats.to_dict(),
                    "own_transaction": Stats(owned).to_dict(),
                    "seed_median_ms": seed,
                },
            )
        )
        sql("TRUNCATE " + ", ".join(WORKFLOW_TABLES) + " CASCADE")
        sql("DELETE FROM runledger_job_queue WHERE job_type = %s", [JOB_TYPE])
