"""(n) Observability's price on the worker: a no-op handler's drain rate with OpenTelemetry
tracing on against off, at 1 process x 8 threads, in the same run.

"Off" is the plain benchmark settings (the API installed, no SDK: the tracing hooks step
aside). "Tracing" starts the workers with ``--settings=benchmarks.settings_tracing``: an SDK
tracer provider with a batch processor and an exporter that drops the spans
(benchmarks/tracing_sdk.py), so every run makes its ``process`` span, links it to the job's
stored context and ends it. "Tracing, 10% sampled" is the same with a parent-based ratio
sampler, as production setups often run. Every job of every drain carries the same stored
trace context, as jobs enqueued in a traced request do. Rounds rotate the order; medians of
the rates and of the per-round ratios are reported. Target: each variant's rate at least
0.95x the plain one.

Metrics on (the worker's Prometheus port), tracing on, and both, each against off: one
entry each in VARIANTS, the worker options that turn them on.

Default: 10,000 jobs, 3 rounds; --quick: 1,000 jobs, one round.

    .venv/bin/python -m benchmarks.shape_n --quick
"""

from __future__ import annotations

import statistics
import sys

from .common import Context, Row, progress, ratio, sql
from .worker_common import Drain, Runledger, drain, loadavg

SHAPE = "n"
TARGET = 0.95
PROCESSES = 1
THREADS = 8
OFF = "off"

TRACING = "--settings=benchmarks.settings_tracing"
TRACING_SAMPLED = "--settings=benchmarks.settings_tracing_sampled"

METRICS = ("--metrics-port", "0")

VARIANTS: dict[str, tuple[str, ...]] = {
    OFF: (),
    "metrics": METRICS,
    "tracing": (TRACING,),
    "tracing, 10% sampled": (TRACING_SAMPLED,),
    "metrics and tracing": (TRACING, *METRICS),
}
"""Variant name -> the extra ``runledger_worker`` options that turn it on; a variant with
TRACING must export a span per job."""

STORED_CONTEXT = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
"""What a job enqueued in a traced request carries (W3C's example trace context)."""


class TracedBacklog(Runledger):
    """The no-op backlog, every job with a stored trace context."""

    def enqueue(self, count: int) -> None:
        super().enqueue(count)
        sql(
            "UPDATE runledger_job_queue SET trace_context = %s::jsonb WHERE job_type = %s",
            [STORED_CONTEXT, self.job_type],
        )


def spans_exported() -> int:
    from .tracing_sdk import SPANS_FILE

    if not SPANS_FILE.exists():
        return 0
    return sum(int(line) for line in SPANS_FILE.read_text().split() if line.strip())


def run(ctx: Context) -> None:
    from .tracing_sdk import SPANS_FILE

    jobs = int(ctx.state.get("jobs") or ctx.size(10_000, 1_000))
    rounds = int(ctx.state.get("rounds") or ctx.size(3, 1))
    system = TracedBacklog()
    results: dict[str, list[Drain]] = {key: [] for key in VARIANTS}
    exported: dict[str, list[int]] = {key: [] for key in VARIANTS}
    load_start = loadavg()
    for round_no in range(rounds):
        names = list(VARIANTS)
        shift = round_no % len(names)
        order = names[shift:] + names[:shift]
        for key in order:
            SPANS_FILE.unlink(missing_ok=True)
            argv = system.argv(THREADS, *VARIANTS[key])
            result = drain(
                system,
                processes=PROCESSES,
                concurrency=THREADS,
                jobs=jobs,
                tag=f"n-{key}",
                argv=argv,
            )
            results[key].append(result)
            exported[key].append(spans_exported())
            progress(
                f"(n) round {round_no + 1}/{rounds} {key} 1x{THREADS}: {result.rate:,.0f} jobs/s"
                f" (worker CPU {result.worker_cpu_ms_per_job:.3f} ms/job, spans exported"
                f" {exported[key][-1]:,}; load {result.load[0]:.2f})"
            )
    SPANS_FILE.unlink(missing_ok=True)
    medians = {key: statistics.median(d.rate for d in drains) for key, drains in results.items()}
    for key, drains in results.items():
        ctx.add(
            Row(
                SHAPE,
                f"drain {jobs:,}: no-op handler, {key}, {PROCESSES} process x {THREADS} threads",
                medians[key],
                "jobs/s",
                detail={
                    "jobs": jobs,
                    "spans_exported": exported[key],
                    "worker_cpu_ms_per_job": [round(d.worker_cpu_ms_per_job, 4) for d in drains],
                    "rounds": [d.to_dict() for d in drains],
                },
            )
        )
    for key in VARIANTS:
        if key == OFF:
            continue
        per_round = [
            round(ratio(v.rate, o.rate), 3) for v, o in zip(results[key], results[OFF], strict=True)
        ]
        value = ratio(medians[key], medians[OFF])
        traced = TRACING not in VARIANTS[key] or all(count >= jobs for count in exported[key])
        ctx.add(
            Row(
                SHAPE,
                f"{key} / off drain rate (1x{THREADS})",
                value,
                "x",
                target=f">= {TARGET:.2f}x",
                ok=value >= TARGET and traced,
                detail={
                    "per_round": per_round,
                    "per_round_median": statistics.median(per_round),
                    "every_run_traced": traced,
                    "load_start": load_start,
                    "load_end": loadavg(),
                },
            )
        )


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(standalone(SHAPE, __doc__ or "", sys.argv[1:]))
