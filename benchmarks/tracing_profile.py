"""What a traced run costs in the worker's own process: runledger's share against the SDK's.

    .venv/bin/python -m benchmarks.tracing_profile                 # every span recorded
    .venv/bin/python -m benchmarks.tracing_profile --sampled       # one trace in ten
    .venv/bin/python -m benchmarks.tracing_profile --runs 20000 --repeats 7

No database: it sets up the SDK as shape n's traced workers do (benchmarks/tracing_sdk.py: a
batch processor, an exporter that drops the spans) and times, per run of a no-op attempt,

- ``runledger``: what the worker does around a run (``services/tracing.py``: the check, the
  span's name, attributes, parent and links from the job's stored context, the span made
  current, its outcome), the SDK's work included;
- ``SDK``: the SDK alone making the same span (start with the same attributes and link,
  attach, one attribute, detach, end), with everything runledger works out given;

and prints both in µs per run (the median of ``--repeats``), their difference (runledger's own
share), and what that is beside a handler of 5 ms of CPU. The export thread's work is not in
either (the batch processor hands it spans asynchronously; shape n's drains include it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
import uuid
from typing import Any

HANDLER_SECONDS = 0.005
STORED_CONTEXT = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'


class _Run:
    outcome = "succeeded"
    error_code = None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sampled", action="store_true", help="a 10%% parent-based sampler")
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")

    from benchmarks import tracing_sdk

    if args.sampled:
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        tracing_sdk.install(ParentBased(TraceIdRatioBased(0.1)))
    else:
        tracing_sdk.install()
    import django

    django.setup()
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind

    from runledger_django.domain import ClaimedJob, JobLease
    from runledger_django.services import tracing

    now = dt.datetime.now(dt.UTC)
    jobs = [
        ClaimedJob(
            lease=JobLease(
                job_id=uuid.uuid4(),
                run_number=1,
                attempt=1,
                worker_id="bench-worker-1",
                workflow_step_id=None,
            ),
            job_type="bench.noop",
            organization_id=None,
            payload={},
            max_attempts=3,
            timeout_seconds=60,
            checkpoint=None,
            claimed_at=now,
            lease_expires_at=now,
            due_at=now,
            decode_error=None,
            trace_context=STORED_CONTEXT,
        )
        for _ in range(args.runs)
    ]
    result = _Run()

    def run() -> _Run:
        return result

    def ours() -> float:
        started = time.perf_counter()
        for job in jobs:  # as worker/execution.py's execute
            traced = tracing.run_tracing()
            if traced is None:
                run()
            else:
                tracing.process_traced(traced, job, run)
        return (time.perf_counter() - started) / len(jobs) * 1e6

    tracer = trace.get_tracer_provider().get_tracer("benchmarks.tracing_profile")
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    linked = trace.get_current_span(propagate.extract(carrier)).get_span_context()
    links = [Link(linked)]

    def sdk() -> float:
        started = time.perf_counter()
        for job in jobs:
            attributes: dict[str, Any] = {
                "messaging.system": "runledger",
                "messaging.operation.name": "process",
                "messaging.operation.type": "process",
                "messaging.destination.name": "bench.noop",
                "messaging.message.id": str(job.lease.job_id),
                "messaging.client.id": job.lease.worker_id,
                "runledger.job.attempt": 1,
                "runledger.job.run_number": 1,
            }
            root = otel_context.Context()
            span = tracer.start_span(
                "process bench.noop",
                context=root,
                kind=SpanKind.CONSUMER,
                attributes=attributes,
                links=links,
            )
            token = otel_context.attach(trace.set_span_in_context(span, root))
            run()
            if span.is_recording():
                span.set_attribute("runledger.job.outcome", "succeeded")
            otel_context.detach(token)
            span.end()
        return (time.perf_counter() - started) / len(jobs) * 1e6

    totals, sdks = [], []
    for _ in range(args.repeats):
        totals.append(ours())
        sdks.append(sdk())
    total, bare = statistics.median(totals), statistics.median(sdks)
    handler_us = HANDLER_SECONDS * 1e6
    mode = "10% sampled" if args.sampled else "every span recorded"
    print(f"tracing, {mode}: µs per run (median of {args.repeats} x {args.runs:,} runs)")
    print(f"  runledger around a run, SDK included: {total:6.1f}  (spread {_spread(totals)})")
    print(f"  SDK alone, the same span:              {bare:6.1f}  (spread {_spread(sdks)})")
    print(f"  runledger's own share:                 {total - bare:6.1f}")
    print(
        f"  beside a {handler_us / 1000:.0f} ms CPU handler: the run takes"
        f" {handler_us / (handler_us + total):.3f}x of its untraced rate"
    )
    return 0


def _spread(values: list[float]) -> str:
    return f"{min(values):.1f} to {max(values):.1f}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
