"""(x) Latency at low load: from a committed enqueue to the handler's first line.

One ``runledger_worker --concurrency 1`` process waits, idle, on the benchmark database. The
parent commits one job every 50-100 ms (uniformly random, so commits never fall into step with
the worker's poll) and takes ``time.time()`` right after the committing call returns; the
handler (``bench.stamp_start``) takes ``time.time()`` first thing and returns it as the job's
output. Both clocks are the same machine's. Two paths:

- ``enqueue_job`` in autocommit: the job is due at commit, and the worker is woken by the
  notification sent after it;
- ``record_intent`` in autocommit with ``runledger_worker --promote``: the intent must first be
  promoted by the worker's own promoter thread, then claimed;
- the same, with the promoters' wake-up (``runledger_intents``) sent right after each
  ``record_intent`` returns: a what-if with no target, the latency record_intent would have if
  it sent that notification after its commit itself.

    .venv/bin/python -m benchmarks.shape_x --quick
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from .common import Context, Row, percentile, progress, sql
from .worker_common import Runledger, loadavg, running

SHAPE = "x"
STAMP_JOB_TYPE = "bench.stamp_start"
"""The handler in benchmarks/baseline/jobs.py (not imported here: it needs Django set up)."""
WARMUP = 5
GAP_SECONDS = (0.05, 0.10)
DONE_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    worker_options: tuple[str, ...]
    p50_target_ms: float | None
    p99_target_ms: float | None


SCENARIOS = [
    Scenario("enqueue", "enqueue_job commit -> handler start", (), 10.0, None),
    Scenario(
        "intent", "record_intent commit -> handler start (--promote)", ("--promote",), 25.0, 150.0
    ),
    Scenario(
        "intent-woken",
        "what if record_intent woke the promoter (NOTIFY after commit)",
        ("--promote",),
        None,
        None,
    ),
]
"""``intent-woken`` is not a target: it sends the promoters' wake-up after each record_intent
returns, as record_intent itself could after its commit, to show what that would be worth."""


def _submit(scenario: Scenario, key: str) -> Callable[[], object]:
    from runledger_django import enqueue_job, record_intent

    if scenario.key == "enqueue":
        return lambda: enqueue_job(STAMP_JOB_TYPE, {"key": key})
    if scenario.key == "intent":
        return lambda: record_intent(STAMP_JOB_TYPE, {"key": key}, idempotency_key=key)
    from runledger_django.services.wakeup import INTENTS_CHANNEL, wake_after_commit

    def record_and_wake() -> None:
        record_intent(STAMP_JOB_TYPE, {"key": key}, idempotency_key=key)
        wake_after_commit("default", INTENTS_CHANNEL)

    return record_and_wake


def _handler_starts(scenario: Scenario, prefix: str) -> dict[str, float]:
    """Handler start time per key, for the finished jobs of this round."""
    if scenario.key == "enqueue":
        rows = sql(
            "SELECT payload->>'key', (output->>'started')::float8 FROM runledger_job_queue "
            "WHERE job_type = %s AND status = 'SUCCEEDED' AND payload->>'key' LIKE %s",
            [STAMP_JOB_TYPE, f"{prefix}%"],
        )
    else:
        rows = sql(
            "SELECT intent.idempotency_key, (job.output->>'started')::float8 "
            "FROM runledger_job_enqueue_intents intent "
            "JOIN runledger_job_queue job ON job.id = intent.promoted_job_id "
            "WHERE intent.job_type = %s AND job.status = 'SUCCEEDED' "
            "AND intent.idempotency_key LIKE %s",
            [STAMP_JOB_TYPE, f"{prefix}%"],
        )
    return {str(key): float(started) for key, started in rows}


def _wait_done(scenario: Scenario, prefix: str, count: int) -> dict[str, float]:
    deadline = time.monotonic() + DONE_TIMEOUT_SECONDS
    while True:
        starts = _handler_starts(scenario, prefix)
        if len(starts) >= count:
            return starts
        if time.monotonic() > deadline:
            raise RuntimeError(f"{scenario.key}: {len(starts)} of {count} jobs ran in time")
        time.sleep(0.1)


def measure(scenario: Scenario, *, count: int, round_no: int) -> tuple[list[float], list[float]]:
    """Latencies (ms) after the call returned and after the call began, one per job."""
    system = Runledger(STAMP_JOB_TYPE)
    system.reset()
    tag = f"x-{scenario.key}-{round_no}"
    argv = system.argv(1, *scenario.worker_options)
    with running(tag, [argv], system.min_connections) as group:
        warm = f"warm-{tag}-"
        for i in range(WARMUP):
            _submit(scenario, f"{warm}{i}")()
            time.sleep(0.05)
        _wait_done(scenario, warm, WARMUP)
        prefix = f"lat-{tag}-"
        returned: dict[str, float] = {}
        began: dict[str, float] = {}
        for i in range(count):
            key = f"{prefix}{i:06d}"
            call = _submit(scenario, key)
            began[key] = time.time()
            call()
            returned[key] = time.time()
            pause = random.uniform(*GAP_SECONDS) - (returned[key] - began[key])
            if pause > 0:
                time.sleep(pause)
        group.check_alive()
        starts = _wait_done(scenario, prefix, count)
    after = [(starts[key] - returned[key]) * 1000 for key in returned]
    before = [(starts[key] - began[key]) * 1000 for key in began]
    return after, before


def run(ctx: Context) -> None:
    count = int(ctx.state.get("jobs") or ctx.size(200, 30))
    rounds = int(ctx.state.get("rounds") or ctx.size(2, 1))
    select = ctx.state.get("select")
    chosen = [s for s in SCENARIOS if not select or s.key in select]
    samples: dict[str, list[float]] = {s.key: [] for s in chosen}
    from_call: dict[str, list[float]] = {s.key: [] for s in chosen}
    loads: list[float] = []
    for round_no in range(rounds):
        order = chosen if round_no % 2 == 0 else list(reversed(chosen))
        for scenario in order:
            loads.append(loadavg()[0])
            after, before = measure(scenario, count=count, round_no=round_no)
            samples[scenario.key].extend(after)
            from_call[scenario.key].extend(before)
            progress(
                f"(x) round {round_no + 1}/{rounds} {scenario.label}: p50"
                f" {percentile(after, 50):.1f} ms, p99 {percentile(after, 99):.1f} ms"
                f" ({count} jobs, load {loads[-1]:.2f})"
            )
    for scenario in chosen:
        values = samples[scenario.key]
        detail = {
            "n": len(values),
            "p50_ms": round(percentile(values, 50), 3),
            "p95_ms": round(percentile(values, 95), 3),
            "p99_ms": round(percentile(values, 99), 3),
            "max_ms": round(max(values), 3),
            "min_ms": round(min(values), 3),
            "p50_from_call_start_ms": round(percentile(from_call[scenario.key], 50), 3),
            "gap_seconds": GAP_SECONDS,
            "loadavg_1m": loads,
        }
        p50 = percentile(values, 50)
        p50_target = scenario.p50_target_ms
        ctx.add(
            Row(
                SHAPE,
                f"{scenario.label}, p50",
                p50,
                "ms",
                target="" if p50_target is None else f"<= {p50_target:.0f} ms",
                ok=None if p50_target is None else p50 <= p50_target,
                detail=detail,
            )
        )
        p99 = percentile(values, 99)
        target = scenario.p99_target_ms
        ctx.add(
            Row(
                SHAPE,
                f"{scenario.label}, p99",
                p99,
                "ms",
                target="" if target is None else f"<= {target:.0f} ms",
                ok=None if target is None else p99 <= target,
            )
        )


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(standalone(SHAPE, "latency: commit to handler start at low load", sys.argv[1:]))
