"""(o) Exactly-once completion's price: an ``atomic=True`` no-op handler's drain rate against a
plain one, at 1 process x 8 threads, in the same run.

A plain success is group-committed (several executors' successes in one statement, fused with
the next claim on a deep queue); an atomic one is written in its handler's own transaction, so
each costs its own transaction and commit. Both drains use ``worker_common.drain`` (the same
backlog, the same timing from the attempt rows); rounds alternate the order and medians are
reported. Target: the atomic rate is at least 0.8x the plain one.

Default: 10,000 jobs, 3 rounds; --quick: 1,000 jobs, one round.

    .venv/bin/python -m benchmarks.shape_o --quick
"""

from __future__ import annotations

import statistics
import sys

from .common import Context, Row, progress, ratio
from .worker_common import Drain, Runledger, drain, loadavg

SHAPE = "o"
TARGET = 0.8
PROCESSES = 1
THREADS = 8


def run(ctx: Context) -> None:
    from .baseline.jobs import ATOMIC_NOOP_JOB_TYPE, NOOP_JOB_TYPE

    jobs = int(ctx.state.get("jobs") or ctx.size(10_000, 1_000))
    rounds = int(ctx.state.get("rounds") or ctx.size(3, 1))
    systems = {"plain": Runledger(NOOP_JOB_TYPE), "atomic": Runledger(ATOMIC_NOOP_JOB_TYPE)}
    results: dict[str, list[Drain]] = {key: [] for key in systems}
    load_start = loadavg()
    for round_no in range(rounds):
        order = list(systems) if round_no % 2 == 0 else list(reversed(systems))
        for key in order:
            result = drain(
                systems[key], processes=PROCESSES, concurrency=THREADS, jobs=jobs, tag=f"o-{key}"
            )
            results[key].append(result)
            progress(
                f"(o) round {round_no + 1}/{rounds} {key} 1x8: {result.rate:,.0f} jobs/s"
                f" (worker CPU {result.worker_cpu_ms_per_job:.3f} ms/job, database"
                f" {result.backend_cpu_ms_per_job or 0:.3f} ms/job; load {result.load[0]:.2f})"
            )
    medians = {key: statistics.median(d.rate for d in drains) for key, drains in results.items()}
    for key, drains in results.items():
        ctx.add(
            Row(
                SHAPE,
                f"drain {jobs:,}: {key} no-op handler, 1 process x 8 threads",
                medians[key],
                "jobs/s",
                detail={"jobs": jobs, "rounds": [d.to_dict() for d in drains]},
            )
        )
    value = ratio(medians["atomic"], medians["plain"])
    ctx.add(
        Row(
            SHAPE,
            "atomic / plain drain rate (1x8)",
            value,
            "x",
            target=f">= {TARGET:.2f}x",
            ok=value >= TARGET,
            detail={
                "per_round": [
                    round(ratio(a.rate, p.rate), 3)
                    for a, p in zip(results["atomic"], results["plain"], strict=True)
                ],
                "load_start": load_start,
                "load_end": loadavg(),
            },
        )
    )


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(standalone(SHAPE, __doc__ or "", sys.argv[1:]))
