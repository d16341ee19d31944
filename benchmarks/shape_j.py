"""(j) The admin's search by an idempotency key alone, at a million intents and a million jobs.

An operator pastes a key into the search box of the intents or the jobs changelist: the key is
known, its job type and tenant are not. The unique indexes lead with those, and only
PostgreSQL 18 can skip them; the search goes through each table's key-prefix index instead
(migration 0007). Measured on the server the run uses, warm:

- the search itself (``intent_ids_by_key`` / ``job_ids_by_key``), a key that exists and one
  that does not: the target, under 20 ms;
- the whole changelist request with ``?q=<key>`` (Django's test client, logged in);
- for comparison, the condition the admin searched with before (the key in either scope),
  which PostgreSQL 15 to 17 can only answer by reading the table.

The data is the million-intent history of (d) and (e) (eight job types, four tenants and the
global scope, a job for every promoted intent), topped up with directly enqueued keyed jobs to
a million jobs.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from runledger_django.services.search import intent_ids_by_key, job_ids_by_key

from .common import ORGANIZATIONS, Context, Row, progress, scalar, sql
from .shape_d import HISTORY_JOB_TYPES, ensure_history, measure

TARGET_MS = 20.0
FOUND = "order:4242"
MISSING = "order:none"

# The admin's condition before migration 0007: the key in the global or in a tenant's scope.
PREVIOUS_INTENTS = """
SELECT id FROM runledger_job_enqueue_intents
WHERE (organization_id IS NULL AND idempotency_key = %(key)s)
   OR (organization_id IS NOT NULL AND idempotency_key = %(key)s)
"""
PREVIOUS_JOBS = PREVIOUS_INTENTS.replace("runledger_job_enqueue_intents", "runledger_job_queue")


def ensure_million_jobs(ctx: Context) -> int:
    """Top the history's jobs up to as many as it has intents, with direct keyed enqueues."""
    total = ctx.size(1_000_000, 100_000)
    missing = total - int(scalar("SELECT count(*) FROM runledger_job_queue"))
    if missing > 0:
        progress(f"(j) topping the queue up with {missing:,} directly enqueued keyed jobs")
        sql(
            """
            INSERT INTO runledger_job_queue (id, job_type, organization_id, payload, status,
                max_attempts, idempotency_key, stage, enqueue_request, finished_at)
            SELECT runledger_uuidv7(), (%(types)s::text[])[1 + g %% 8],
                   CASE WHEN g %% 5 = 0 THEN NULL ELSE (%(orgs)s::uuid[])[1 + g %% 4] END,
                   jsonb_build_object('n', g), 'SUCCEEDED', 3, 'direct:' || g, 'completed',
                   jsonb_build_object('payload', jsonb_build_object('n', g)), now()
            FROM generate_series(1, %(missing)s) AS g
            """,
            {"types": HISTORY_JOB_TYPES, "orgs": ORGANIZATIONS, "missing": missing},
        )
        sql("VACUUM (ANALYZE) runledger_job_queue")
    return int(scalar("SELECT count(*) FROM runledger_job_queue"))


def admin_client() -> Client:
    user_model = get_user_model()
    user = user_model.objects.filter(username="bench-admin").first()
    if user is None:
        user = user_model.objects.create_superuser("bench-admin", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    return client


def page(client: Client, url: str) -> Callable[[], object]:
    def get() -> object:
        response = client.get(url)
        if response.status_code != 200:
            raise RuntimeError(f"GET {url} answered {response.status_code}")
        return response

    return get


def run(ctx: Context) -> None:
    ensure_history(ctx)
    jobs = ensure_million_jobs(ctx)
    intents = int(scalar("SELECT count(*) FROM runledger_job_enqueue_intents"))
    progress(f"(j) searching {intents:,} intents and {jobs:,} jobs by key")
    client = admin_client()
    intents_url = reverse("admin:runledger_jobenqueueintent_changelist")
    jobs_url = reverse("admin:runledger_job_changelist")
    count = ctx.size(30, 10)
    reads: list[tuple[str, Callable[[], object], float | None]] = [
        ("intents: search, a key that exists", lambda: intent_ids_by_key(FOUND), TARGET_MS),
        ("intents: search, a key that does not", lambda: intent_ids_by_key(MISSING), TARGET_MS),
        ("jobs: search, a key that exists", lambda: job_ids_by_key(FOUND), TARGET_MS),
        ("jobs: search, a key that does not", lambda: job_ids_by_key(MISSING), TARGET_MS),
        (
            "intents: changelist ?q=<key>, whole request",
            page(client, f"{intents_url}?q={FOUND}"),
            None,
        ),
        ("jobs: changelist ?q=<key>, whole request", page(client, f"{jobs_url}?q={FOUND}"), None),
        (
            "intents: the previous search condition",
            lambda: sql(PREVIOUS_INTENTS, {"key": FOUND}),
            None,
        ),
        ("jobs: the previous search condition", lambda: sql(PREVIOUS_JOBS, {"key": FOUND}), None),
    ]
    for name, read, target in reads:
        stats = measure(read, count=count, warmup=2)
        ctx.add(
            Row(
                "j",
                f"{name}, median",
                stats.median_ms,
                "ms",
                target="" if target is None else f"< {target:g} ms",
                ok=None if target is None else stats.median_ms < target,
                detail=stats.to_dict() | {"intents": intents, "jobs": jobs},
            )
        )
        ctx.add(Row("j", f"{name}, p95", stats.p95_ms, "ms"))
        progress(f"(j) {name}: median {stats.median_ms:.2f} ms, p95 {stats.p95_ms:.2f} ms")
