"""(d) intent_metrics and the first page of list_intents over a million-intent history.

Each read runs through the public API on Django's connection, warm (after a few unmeasured
calls), in every scope an operator or a tenant uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from runledger_django import IntentStatus, ReadScope, intent_metrics, list_intents

from .common import (
    ORGANIZATIONS,
    Context,
    Row,
    Stats,
    define_job_types,
    progress,
    reset_runledger,
    scalar,
)
from .datagen import generate_history

HISTORY_JOB_TYPES = [f"bench.history.type_{n}" for n in range(8)]
METRICS = 50.0
"""Target for intent_metrics, milliseconds."""
LIST = 20.0
"""Target for the first list page, milliseconds."""


def ensure_history(ctx: Context) -> None:
    """Build the million-row history once per run; (d) and (e) share it."""
    total = ctx.size(1_000_000, 100_000)
    if ctx.state.get("history_rows") == total:
        return
    progress(f"generating a history of {total:,} intents (set-based)")
    reset_runledger()
    define_job_types(HISTORY_JOB_TYPES)
    ctx.state["history"] = generate_history(total, HISTORY_JOB_TYPES)
    ctx.state["history_rows"] = total


def measure(fn: Callable[[], object], *, count: int, warmup: int = 3) -> Stats:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return Stats(samples)


def run(ctx: Context) -> None:
    ensure_history(ctx)
    rows = int(scalar("SELECT count(*) FROM runledger_job_enqueue_intents"))
    count = ctx.size(30, 10)
    tenant = ReadScope.organization(ORGANIZATIONS[0])
    # (name, read, target in ms or None): the targets are the issue's, on the metrics in every
    # scope and the unfiltered first page; the filtered pages are shown for information.
    reads: list[tuple[str, Callable[[], object], float | None]] = [
        ("intent_metrics, ADMIN scope", lambda: intent_metrics(scope=ReadScope.ADMIN), METRICS),
        ("intent_metrics, one organization", lambda: intent_metrics(scope=tenant), METRICS),
        ("intent_metrics, GLOBAL scope", lambda: intent_metrics(scope=ReadScope.GLOBAL), METRICS),
        (
            "intent_metrics, ADMIN, one job type",
            lambda: intent_metrics(scope=ReadScope.ADMIN, job_type=HISTORY_JOB_TYPES[3]),
            METRICS,
        ),
        ("list_intents first page (50), ADMIN", lambda: list_intents(scope=ReadScope.ADMIN), LIST),
        (
            "list_intents first page (50), one organization",
            lambda: list_intents(scope=tenant),
            LIST,
        ),
        (
            "list_intents first page (50), GLOBAL",
            lambda: list_intents(scope=ReadScope.GLOBAL),
            LIST,
        ),
        (
            "list_intents first page, ADMIN, status=PENDING",
            lambda: list_intents(scope=ReadScope.ADMIN, status=IntentStatus.PENDING),
            None,
        ),
        (
            "list_intents first page, org, status=CONFLICTED",
            lambda: list_intents(scope=tenant, status=IntentStatus.CONFLICTED),
            None,
        ),
        (
            "list_intents first page, ADMIN, job_type_query",
            lambda: list_intents(scope=ReadScope.ADMIN, job_type_query="type_3"),
            None,
        ),
    ]
    progress(f"(d) {len(reads)} reads x {count} over {rows:,} intents")
    for name, fn, target in reads:
        stats = measure(fn, count=count)
        ctx.add(
            Row(
                "d",
                f"{name}, median",
                stats.median_ms,
                "ms",
                target=f"<= {target:g} ms" if target else "",
                ok=stats.median_ms <= target if target else None,
                detail=stats.to_dict() | {"intents": rows},
            )
        )
        ctx.add(Row("d", f"{name}, p95", stats.p95_ms, "ms"))
        progress(f"(d) {name}: median {stats.median_ms:.2f} ms, p95 {stats.p95_ms:.2f} ms")
