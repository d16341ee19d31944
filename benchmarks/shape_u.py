"""(u) The admin dashboard's chart queries over the million-job history of (g).

(g)'s history: 30 days of finished jobs with their attempts (the last day holds a thirtieth of
them), and a live queue. Added here: a week of queue samples, one a minute for each of the
eight job types and the total (what the sampler leaves behind: types x 10,080 rows).

Each chart statement runs as the page runs it (capped, with the planner pins), warm, for the
hour and the day, for every type and for one type; then the whole ``queue_dashboard`` read,
the dashboard page through Django's test client, and one sampler pass. The EXPLAIN plan of
each statement is reported by its scan kinds and indexes: every one must be index-driven.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse

from runledger_django.db import dashboard_queries, session_queries
from runledger_django.db.transaction import run_capped
from runledger_django.domain import DASHBOARD_WINDOWS
from runledger_django.services.dashboard import (
    READ_LOCK_MS,
    READ_STATEMENT_MS,
    TOP_ERROR_CODES,
    queue_dashboard,
    sample_queue,
)

from .common import Context, Row, progress, scalar, sql
from .shape_g import JOB_TYPES, ensure_job_history, measure

TARGET_MS = 50.0
"""The issue's target for each chart query at one million jobs, milliseconds."""
PAGE_TARGET_MS = 300.0
"""The admin budget the other admin pages are held to (shape h)."""
SAMPLE_DAYS = 7

STATEMENTS = {
    "throughput": dashboard_queries.THROUGHPUT,
    "failures by code": dashboard_queries.FAILURES_BY_CODE,
    "depth and age": dashboard_queries.DEPTH_TOTAL,
}
"""Every type's statements; for one type, depth and age read DEPTH_FOR_TYPE instead."""


def ensure_samples(ctx: Context) -> int:
    """A week of minutes for every type and the total, ending a minute before now (so the
    sampler's own pass still has its minute to write)."""
    if ctx.state.get("dashboard_samples"):
        return int(ctx.state["dashboard_samples"])
    sql("TRUNCATE runledger_queue_samples")
    sql(
        """
        INSERT INTO runledger_queue_samples (sampled_at, job_type, due_count, scheduled_count,
            leased_count, expired_lease_count, oldest_due_age_seconds)
        SELECT date_trunc('minute', now()) - make_interval(mins => m), t.job_type,
               (m * 13 + t.n) %% 500, (m + t.n) %% 40, m %% 20, 0, ((m * 17) %% 600)::float
        FROM generate_series(1, %(minutes)s) AS m,
             LATERAL (SELECT job_type, n FROM unnest(%(types)s::text[]) WITH ORDINALITY
                      AS u(job_type, n)
                      UNION ALL SELECT NULL, 0) AS t
        """,
        {"minutes": SAMPLE_DAYS * 1440, "types": JOB_TYPES},
    )
    sql("VACUUM (ANALYZE) runledger_queue_samples")
    rows = int(scalar("SELECT count(*) FROM runledger_queue_samples"))
    ctx.state["dashboard_samples"] = rows
    return rows


def plan_kinds(statement: str, params: dict[str, Any]) -> list[str]:
    """The scan nodes of the statement's plan under the page's pins: "kind on index"."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            session_queries.CAP_LIFECYCLE_TIMEOUTS,
            {
                "cap_lock_ms": READ_LOCK_MS,
                "cap_lock_text": f"{READ_LOCK_MS}ms",
                "cap_statement_ms": READ_STATEMENT_MS,
                "cap_statement_text": f"{READ_STATEMENT_MS}ms",
            },
        )
        cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
        document = cursor.fetchone()[0]
    plan = document if isinstance(document, list) else json.loads(document)
    kinds: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        kind = node.get("Node Type", "")
        if "Scan" in kind:
            target = node.get("Index Name") or node.get("Relation Name") or ""
            kinds.append(f"{kind} on {target}" if target else kind)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan[0]["Plan"])
    return kinds


def run(ctx: Context) -> None:
    ensure_job_history(ctx)
    samples = ensure_samples(ctx)
    jobs = int(scalar("SELECT count(*) FROM runledger_job_queue"))
    attempts = int(scalar("SELECT count(*) FROM runledger_job_attempts"))
    count = ctx.size(30, 10)
    progress(f"(u) {jobs:,} jobs, {attempts:,} attempts, {samples:,} queue samples")
    for window, (bucket_seconds, buckets) in DASHBOARD_WINDOWS.items():
        for scope, job_type in (("every type", None), ("one type", JOB_TYPES[3])):
            params = {
                "bucket": dt.timedelta(seconds=bucket_seconds),
                "buckets": buckets,
                "job_type": job_type,
                "top_codes": TOP_ERROR_CODES,
            }
            chosen = dict(STATEMENTS)
            if job_type is not None:
                chosen["depth and age"] = dashboard_queries.DEPTH_FOR_TYPE
            for name, statement in chosen.items():

                def read(statement: str = statement, params: dict[str, Any] = params) -> object:
                    return run_capped(
                        "default",
                        statement,
                        params,
                        lock_ms=READ_LOCK_MS,
                        statement_ms=READ_STATEMENT_MS,
                        context="bench",
                    )

                stats = measure(read, count=count)
                kinds = plan_kinds(statement, params)
                label = f"{name}, {window}, {scope}"
                ctx.add(
                    Row(
                        "u",
                        f"{label}, median",
                        stats.median_ms,
                        "ms",
                        target=f"< {TARGET_MS:g} ms",
                        ok=stats.median_ms < TARGET_MS
                        and not any(kind.startswith("Seq Scan") for kind in kinds),
                        detail=stats.to_dict() | {"plan": kinds, "jobs": jobs},
                    )
                )
                ctx.add(Row("u", f"{label}, p95", stats.p95_ms, "ms"))
                progress(
                    f"(u) {label}: median {stats.median_ms:.2f} ms, p95 {stats.p95_ms:.2f} ms; "
                    f"plan: {', '.join(kinds)}"
                )

        def whole(window: str = window) -> object:
            return queue_dashboard(window=window)

        stats = measure(whole, count=count)
        ctx.add(
            Row(
                "u",
                f"queue_dashboard(), {window}, median",
                stats.median_ms,
                "ms",
                detail=stats.to_dict(),
            )
        )
        progress(f"(u) queue_dashboard, {window}: median {stats.median_ms:.2f} ms")

    user_model = get_user_model()
    user = user_model.objects.filter(username="bench-admin").first()
    if user is None:
        user = user_model.objects.create_superuser("bench-admin", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    url = reverse("admin:runledger_dashboard")
    for name, path in (
        ("dashboard page, hour", url),
        ("dashboard page, day", f"{url}?window=day"),
        ("dashboard page, day, one type", f"{url}?window=day&job_type={JOB_TYPES[3]}"),
    ):

        def get(path: str = path) -> object:
            response = client.get(path)
            if response.status_code != 200:
                raise RuntimeError(f"GET {path} answered {response.status_code}")
            return response

        stats = measure(get, count=ctx.size(10, 3), warmup=2)
        ctx.add(
            Row(
                "u",
                f"{name}, median",
                stats.median_ms,
                "ms",
                target=f"< {PAGE_TARGET_MS:g} ms",
                ok=stats.median_ms < PAGE_TARGET_MS,
                detail=stats.to_dict(),
            )
        )
        progress(f"(u) {name}: median {stats.median_ms:.1f} ms, p95 {stats.p95_ms:.1f} ms")

    def sample_once() -> object:
        sql("DELETE FROM runledger_queue_samples WHERE sampled_at = date_trunc('minute', now())")
        return sample_queue()

    stats = measure(sample_once, count=ctx.size(10, 3), warmup=1)
    ctx.add(Row("u", "sampler pass (whole live queue), median", stats.median_ms, "ms"))
    progress(f"(u) sampler pass: median {stats.median_ms:.1f} ms (includes a small DELETE)")
