"""(r) The cost of being a workflow: a 1,000-step fan-out/fan-in (one root, 998 children, one
fan-in after all of them) drained by one worker process (8 threads) against the same 1,000
plain jobs, in the same run.

A workflow job's success also finishes its step, releases what it gated and moves its run's
counters in the same transaction; the plain drain is the worker's group-committed path, and
the children of the workflow are released by the root's completion (so they are all due at
once, as the plain backlog is). Both are timed from their attempt rows
(``worker_common.drain``); rounds alternate the order; medians are reported. Target: the
workflow drains in at most 1.5x the plain jobs' time (rate at least 0.67x).

Default: 1,000 steps, 3 rounds; --quick: 200 steps, one round.

    .venv/bin/python -m benchmarks --only r --quick
"""

from __future__ import annotations

import statistics
import sys

from .common import Context, Row, progress, ratio, scalar, sql
from .worker_common import Drain, Runledger, drain, loadavg

SHAPE = "r"
TARGET = 1 / 1.5
PROCESSES = 1
THREADS = 8


class FanOutFanIn(Runledger):
    """The same worker and job type, the jobs made by one workflow run."""

    name = "runledger workflow"

    def reset(self) -> None:
        super().reset()
        sql(
            "TRUNCATE runledger_workflow_runs, runledger_workflow_steps,"
            " runledger_workflow_step_dependencies, runledger_workflow_active_claims,"
            " runledger_workflow_recoveries, runledger_workflow_run_mutations CASCADE"
        )

    def enqueue(self, count: int) -> None:
        from runledger_django import Workflow, start_workflow

        flow = Workflow("bench.fan")
        root = flow.step("root", self.job_type, {"n": 0})
        children = [
            flow.step(f"child{index:04}", self.job_type, {"n": index}, after=[root])
            for index in range(1, count - 1)
        ]
        flow.step("fan_in", self.job_type, {"n": count - 1}, after=children)
        start_workflow(flow)

    def remaining(self) -> int:
        return int(
            scalar(
                "SELECT count(*) FROM runledger_workflow_steps"
                " WHERE status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED')"
            )
        )


def run(ctx: Context) -> None:
    from .baseline.jobs import NOOP_JOB_TYPE

    jobs = int(ctx.state.get("jobs") or ctx.size(1_000, 200))
    rounds = int(ctx.state.get("rounds") or ctx.size(3, 1))
    systems = {"plain": Runledger(NOOP_JOB_TYPE), "workflow": FanOutFanIn(NOOP_JOB_TYPE)}
    results: dict[str, list[Drain]] = {key: [] for key in systems}
    load_start = loadavg()
    for round_no in range(rounds):
        order = list(systems) if round_no % 2 == 0 else list(reversed(systems))
        for key in order:
            result = drain(
                systems[key], processes=PROCESSES, concurrency=THREADS, jobs=jobs, tag=f"r-{key}"
            )
            results[key].append(result)
            progress(
                f"(r) round {round_no + 1}/{rounds} {key} 1x8: {result.rate:,.0f} jobs/s"
                f" ({result.window.full_seconds:.3f} s for {jobs:,}; load {result.load[0]:.2f})"
            )
    medians = {key: statistics.median(d.rate for d in drains) for key, drains in results.items()}
    for key, drains in results.items():
        ctx.add(
            Row(
                SHAPE,
                f"drain {jobs:,}: {key}, no-op handler, 1 process x 8 threads",
                medians[key],
                "jobs/s",
                detail={"jobs": jobs, "rounds": [d.to_dict() for d in drains]},
            )
        )
    value = ratio(medians["workflow"], medians["plain"])
    ctx.add(
        Row(
            SHAPE,
            "workflow / plain drain rate (1x8)",
            value,
            "x",
            target=f">= {TARGET:.2f}x (at most 1.5x the time)",
            ok=value >= TARGET,
            detail={"load_start": load_start, "load_end": loadavg()},
        )
    )


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(standalone(SHAPE, __doc__ or "", sys.argv[1:]))
