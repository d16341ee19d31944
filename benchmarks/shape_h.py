"""(h) The jobs admin over the million-job history of (g).

Django's test Client, logged in as a superuser, GETs the job changelist (the full request:
URL resolution, middleware, the ModelAdmin's queries, template rendering) without and with the
status filters (the dead letters among them), the job-type filter, a second page, a search by
idempotency key and by id, then a dead letter's page (its attempts and events) and the job
metrics page.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from .common import Context, Row, progress, scalar
from .shape_g import JOB_TYPES, ensure_job_history, measure

TARGET_MS = 300.0


def run(ctx: Context) -> None:
    ensure_job_history(ctx)
    url = reverse("admin:runledger_job_changelist")
    user_model = get_user_model()
    user = user_model.objects.filter(username="bench-admin").first()
    if user is None:
        user = user_model.objects.create_superuser("bench-admin", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    some_key = scalar(
        "SELECT idempotency_key FROM runledger_job_queue WHERE status = 'SUCCEEDED' "
        "ORDER BY id OFFSET 4242 LIMIT 1"
    )
    dead = scalar(
        "SELECT id FROM runledger_job_queue WHERE status = 'DEAD_LETTERED' ORDER BY id LIMIT 1"
    )
    pages: list[tuple[str, str, bool]] = [
        ("changelist", url, True),
        ("changelist, dead letters", f"{url}?status__exact=DEAD_LETTERED", True),
        ("changelist, status=PENDING", f"{url}?status__exact=PENDING", True),
        ("changelist, status=LEASED", f"{url}?status__exact=LEASED", True),
        ("changelist, status=CANCELED", f"{url}?status__exact=CANCELED", True),
        ("changelist, job type", f"{url}?job_type={JOB_TYPES[2]}", True),
        (
            "changelist, job type and dead letters",
            f"{url}?job_type={JOB_TYPES[2]}&status__exact=DEAD_LETTERED",
            True,
        ),
        ("changelist, page 2", f"{url}?p=2", True),
        ("changelist, search by idempotency key", f"{url}?q={some_key}", True),
        ("changelist, search by id", f"{url}?q={dead}", True),
        (
            "dead letter's page (attempts, events)",
            reverse("admin:runledger_job_change", args=(dead,)),
            False,
        ),
        ("job metrics page", reverse("admin:runledger_job_metrics"), False),
    ]
    count = ctx.size(20, 5)
    for name, path, targeted in pages:

        def get(path: str = path) -> object:
            response = client.get(path)
            if response.status_code != 200:
                raise RuntimeError(f"GET {path} answered {response.status_code}")
            return response

        stats = measure(get, count=count, warmup=2)
        ctx.add(
            Row(
                "h",
                f"{name}, median",
                stats.median_ms,
                "ms",
                target=f"< {TARGET_MS:g} ms" if targeted else "",
                ok=stats.median_ms < TARGET_MS if targeted else None,
                detail=stats.to_dict() | {"path": path},
            )
        )
        ctx.add(Row("h", f"{name}, p95", stats.p95_ms, "ms"))
        progress(f"(h) {name}: median {stats.median_ms:.1f} ms, p95 {stats.p95_ms:.1f} ms")
