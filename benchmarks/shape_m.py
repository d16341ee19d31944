"""(m) A Prometheus scrape of the queue gauges at one million jobs and 100 job types.

The history is shape (g)'s (``generate_job_history``): 98% finished jobs over 30 days (1% dead
letters), 2% live queue (pending, three quarters of it due, and a few hundred leases, a tenth
of them expired), spread over 100 job types, and pending intents for 1% of that. Measured warm, with the collector's cache off:
the queue-state statement alone (``read_queue_state``), and a whole scrape of the Django view
(statement, metric families and text exposition). The statement's plan is checked: every
read of the job table must be an index scan (no sequential scan over the history).

    python3 dev.py bench --only m [--quick]
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.db import connection, transaction
from django.test import RequestFactory
from django.test.utils import override_settings

from runledger_django.db.queue_state_queries import QUEUE_STATE
from runledger_django.domain import OTHER_JOB_TYPE_LABEL
from runledger_django.prometheus import metrics_view
from runledger_django.services.queue_state import read_queue_state

from .common import (
    Context,
    Row,
    define_job_types,
    progress,
    reset_runledger,
    scalar,
    vacuum_analyze,
)
from .datagen import insert_pending_intents
from .shape_g import generate_job_history, measure

SHAPE = "m"
TARGET_MS = 20.0
"""Reference (observability) 2.2's budget for one collection at one million jobs."""
JOB_TYPES = [f"bench.metrics.type_{n:03d}" for n in range(100)]
TYPE_LIMIT = 100
TIMEOUT_MS = 5000


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


def explain() -> dict[str, Any]:
    """EXPLAIN ANALYZE of the statement under the pins the collector runs it with."""
    with transaction.atomic(), connection.cursor() as cursor:
        for name in ("enable_sort", "enable_seqscan", "enable_bitmapscan", "jit"):
            cursor.execute(f"SET LOCAL {name} = off")
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + QUEUE_STATE,
            {"type_limit": TYPE_LIMIT, "other_label": OTHER_JOB_TYPE_LABEL},
        )
        (document,) = cursor.fetchone()
    root = (json.loads(document) if isinstance(document, str) else document)[0]
    scans = [
        f"{node['Node Type']} {node.get('Index Name') or node.get('Relation Name')}"
        for node in plan_nodes(root["Plan"])
        if "Scan" in node["Node Type"] and "Relation Name" in node
    ]
    return {
        "scans": sorted(set(scans)),
        "sequential_scans": sorted({s for s in scans if s.startswith("Seq Scan")}),
        "execution_ms": root.get("Execution Time"),
        "shared_hit_blocks": root["Plan"].get("Shared Hit Blocks"),
        "shared_read_blocks": root["Plan"].get("Shared Read Blocks"),
    }


def run(ctx: Context) -> None:
    total = ctx.size(1_000_000, 100_000)
    progress(f"(m) generating {total:,} jobs over {len(JOB_TYPES)} job types")
    reset_runledger("runledger_job_attempts", "runledger_job_execution_resource_claims")
    define_job_types(JOB_TYPES)
    history = generate_job_history(total, JOB_TYPES)
    insert_pending_intents(total // 100, JOB_TYPES, key_prefix="bench-m-")
    vacuum_analyze("runledger_job_enqueue_intents")
    # (g), (h) and (i) share a history of their own: make them build it again.
    ctx.state.pop("job_history_rows", None)
    jobs = int(scalar("SELECT count(*) FROM runledger_job_queue"))
    count = ctx.size(30, 10)
    states = read_queue_state(type_limit=TYPE_LIMIT, timeout_ms=TIMEOUT_MS)
    assert len(states) == len(JOB_TYPES), len(states)
    live = sum(s.due + s.scheduled + s.leased + s.lease_expired for s in states)
    dead = sum(s.dead_lettered for s in states)
    intents = sum(s.intents_pending + s.intents_retrying for s in states)
    progress(f"(m) {jobs:,} jobs: {live:,} live, {dead:,} dead letters; {intents:,} intents")

    def scrape() -> None:
        response = metrics_view(RequestFactory().get("/metrics/"))
        assert b"runledger_collector_up 1.0" in response.content

    with override_settings(RUNLEDGER={"METRICS_CACHE_SECONDS": 0}):
        reads = {
            "queue-state statement (read_queue_state)": lambda: read_queue_state(
                type_limit=TYPE_LIMIT, timeout_ms=TIMEOUT_MS
            ),
            "whole scrape of the Django view (text exposition)": scrape,
        }
        plan = explain()
        detail = {"jobs": jobs, "job_types": len(JOB_TYPES), "history": history, "plan": plan}
        for name, fn in reads.items():
            stats = measure(fn, count=count)
            ctx.add(
                Row(
                    SHAPE,
                    f"{name}, {len(JOB_TYPES)} types, median",
                    stats.median_ms,
                    "ms",
                    target=f"<= {TARGET_MS:g} ms",
                    ok=stats.median_ms <= TARGET_MS,
                    detail=stats.to_dict() | detail,
                )
            )
            ctx.add(Row(SHAPE, f"{name}, p95", stats.p95_ms, "ms"))
            progress(f"(m) {name}: median {stats.median_ms:.2f} ms, p95 {stats.p95_ms:.2f} ms")
    ctx.add(
        Row(
            SHAPE,
            "sequential scans in the queue-state plan",
            float(len(plan["sequential_scans"])),
            "scans",
            target="0",
            ok=not plan["sequential_scans"],
            detail=plan,
        )
    )
    progress(f"(m) plan: {plan['scans']}; EXPLAIN ANALYZE {plan['execution_ms']} ms")
