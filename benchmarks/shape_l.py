"""(l) The claim with limits configured against without: the no-op drain rate of one job type
left unlimited, then with a generous ``max_concurrency``, then with a generous rate limit, at
1 process x 8 threads, in the same run.

An unlimited type takes the claim's fast path (one statement). A limited one goes through the
limited claim (docs/queue-control.md): a transaction-scoped advisory lock, a count of the
type's LEASED jobs or its rate's arrival time (GCRA, migration 0016), and the charge, in one
more round trip. The limits here never bind (1,000 running, 10,000 starts per second): the
drain measures what enforcing them costs. Rounds alternate the order; medians are reported. Target: each limited
rate is at least 0.9x the unlimited one.

Default: 10,000 jobs, 3 rounds; --quick: 1,000 jobs, one round.

    .venv/bin/python -m benchmarks.run --only l --quick
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from .common import Context, Row, progress, ratio, sql
from .worker_common import Drain, Runledger, drain, loadavg

SHAPE = "l"
TARGET = 0.9
PROCESSES = 1
THREADS = 8
LIMITS: dict[str, dict[str, Any]] = {
    "unlimited": {},
    "max_concurrency": {"max_concurrency": 1_000},
    "rate_limit": {"rate_limit_count": 10_000, "rate_limit_period_seconds": 1},
}


class LimitedRunledger(Runledger):
    """The same no-op type, its definition carrying ``limits`` once the queue is reset."""

    def __init__(self, limits: dict[str, Any]) -> None:
        super().__init__()
        self.limits = limits

    def reset(self) -> None:
        super().reset()
        sql("TRUNCATE runledger_job_rate_limits")
        if self.limits:
            from runledger_django.models import JobDefinition

            JobDefinition.objects.filter(job_type=self.job_type).update(**self.limits)


def run(ctx: Context) -> None:
    jobs = int(ctx.state.get("jobs") or ctx.size(10_000, 1_000))
    rounds = int(ctx.state.get("rounds") or ctx.size(3, 1))
    systems = {key: LimitedRunledger(limits) for key, limits in LIMITS.items()}
    results: dict[str, list[Drain]] = {key: [] for key in systems}
    load_start = loadavg()
    for round_no in range(rounds):
        order = list(systems) if round_no % 2 == 0 else list(reversed(systems))
        for key in order:
            result = drain(
                systems[key], processes=PROCESSES, concurrency=THREADS, jobs=jobs, tag=f"l-{key}"
            )
            results[key].append(result)
            progress(
                f"(l) round {round_no + 1}/{rounds} {key} 1x8: {result.rate:,.0f} jobs/s"
                f" (worker CPU {result.worker_cpu_ms_per_job:.3f} ms/job, database"
                f" {result.backend_cpu_ms_per_job or 0:.3f} ms/job; load {result.load[0]:.2f})"
            )
    medians = {key: statistics.median(d.rate for d in drains) for key, drains in results.items()}
    for key, drains in results.items():
        ctx.add(
            Row(
                SHAPE,
                f"drain {jobs:,}: no-op, {key.replace('_', ' ')}, 1 process x 8 threads",
                medians[key],
                "jobs/s",
                detail={
                    "jobs": jobs,
                    "limits": LIMITS[key],
                    "rounds": [d.to_dict() for d in drains],
                },
            )
        )
    for key in ("max_concurrency", "rate_limit"):
        value = ratio(medians[key], medians["unlimited"])
        ctx.add(
            Row(
                SHAPE,
                f"{key.replace('_', ' ')} configured / unlimited drain rate (1x8)",
                value,
                "x",
                target=f">= {TARGET:.2f}x",
                ok=value >= TARGET,
                detail={
                    "per_round": [
                        round(ratio(a.rate, p.rate), 3)
                        for a, p in zip(results[key], results["unlimited"], strict=True)
                    ],
                    "load_start": load_start,
                    "load_end": loadavg(),
                },
            )
        )


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(standalone(SHAPE, __doc__ or "", sys.argv[1:]))
