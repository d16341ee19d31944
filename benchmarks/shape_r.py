"""(r) The cost of being a workflow: a 1,000-step fan-out/fan-in (one root, 998 children, one
fan-in after all of them) drained by one worker process (8 threads) against the same 1,000
plain jobs, in the same run.

A workflow job's success also finishes its step, releases what it gated and moves its run's
counters in the same transaction; the plain drain is the worker's group-committed path, and
the children of the workflow are released by the root's completion (so they are all due at
once, as the plain backlog is). Both are timed from their attempt rows
(``worker_common.drain``); rounds alternate the order; medians are reported. Target: the
workflow drains in at most 1.5x the plain jobs' time (rate at least 0.67x).

The plain drain runs a second time beside 100 workflow runs of another job type (their roots
pending in the same queue, 4,900 steps BLOCKED): checklist item 22, the plain drain must stay
within noise (at least 0.9x) of the same build without workflow runs.

Default: 1,000 steps, 5 rounds (each runs the three drains, rotating their order); --quick:
200 steps, one round.

    .venv/bin/python -m benchmarks --only r --quick
"""

from __future__ import annotations

import statistics
import sys

from .common import Context, Row, define_job_types, progress, ratio, scalar, sql
from .worker_common import Drain, Runledger, drain, loadavg

SHAPE = "r"
TARGET = 1 / 1.5
NOISE_FLOOR = 0.9
"""Plain jobs beside workflows: the rate may dip by this much before it counts as a cost."""
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


class PlainBesideWorkflows(Runledger):
    """The plain drain again, with workflows in use elsewhere in the same database: runs of
    another job type whose roots wait in the same queue and whose other steps are BLOCKED
    (checklist item 22: plain jobs run no workflow SQL, so their drain must not notice)."""

    name = "runledger plain beside workflows"
    other_type = "bench.workflow.elsewhere"
    runs = 100
    steps_per_run = 50

    def reset(self) -> None:
        super().reset()  # the CASCADE empties the workflow tables too
        define_job_types([self.other_type])
        from django.db import transaction

        from runledger_django import Workflow, start_workflow

        with transaction.atomic():
            for number in range(self.runs):
                flow = Workflow("bench.elsewhere")
                root = flow.step("root", self.other_type, {"run": number})
                for index in range(1, self.steps_per_run):
                    flow.step(f"step{index:03}", self.other_type, {"n": index}, after=[root])
                start_workflow(flow)

    def analyze(self) -> None:
        super().analyze()
        # Vacuumed and analysed now, so no autovacuum of the 5,000 new steps runs mid-drain.
        for table in (
            "runledger_workflow_runs",
            "runledger_workflow_steps",
            "runledger_workflow_step_dependencies",
        ):
            sql(f'VACUUM (ANALYZE) "{table}"')


def run(ctx: Context) -> None:
    from .baseline.jobs import NOOP_JOB_TYPE

    jobs = int(ctx.state.get("jobs") or ctx.size(1_000, 200))
    rounds = int(ctx.state.get("rounds") or ctx.size(5, 1))
    systems = {
        "plain": Runledger(NOOP_JOB_TYPE),
        "workflow": FanOutFanIn(NOOP_JOB_TYPE),
        "plain beside workflows": PlainBesideWorkflows(NOOP_JOB_TYPE),
    }
    results: dict[str, list[Drain]] = {key: [] for key in systems}
    load_start = loadavg()
    for round_no in range(rounds):
        keys = list(systems)
        order = keys[round_no % len(keys) :] + keys[: round_no % len(keys)]
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

    beside = ratio(medians["plain beside workflows"], medians["plain"])
    spread = [
        ratio(with_flows.rate, alone.rate)
        for with_flows, alone in zip(
            results["plain beside workflows"], results["plain"], strict=True
        )
    ]
    ctx.add(
        Row(
            SHAPE,
            f"plain drain beside {PlainBesideWorkflows.runs} workflow runs in use"
            f" / plain drain without workflow runs (1x8)",
            beside,
            "x",
            target=f">= {NOISE_FLOOR:.2f}x (unchanged within noise)",
            ok=beside >= NOISE_FLOOR,
            detail={"per_round": spread},
        )
    )


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(standalone(SHAPE, __doc__ or "", sys.argv[1:]))
