"""(e) The intents admin changelist over the million-intent history of (d).

Django's test Client, logged in as a superuser, GETs the changelist (the full request: URL
resolution, middleware, the ModelAdmin's queries and template rendering) without and with the
status and job-type filters and a search.
"""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import NoReverseMatch, reverse

from .common import Context, Row, progress
from .shape_d import HISTORY_JOB_TYPES, ensure_history, measure

TARGET_MS = 300.0


def run(ctx: Context) -> None:
    ensure_history(ctx)
    try:
        url = reverse("admin:runledger_jobenqueueintent_changelist")
    except NoReverseMatch:
        ctx.add(Row("e", "intents changelist: not registered in the admin", 0, "ms", ok=False))
        progress("(e) the intents admin is not registered; nothing to measure")
        return
    user_model = get_user_model()
    user = user_model.objects.filter(username="bench-admin").first()
    if user is None:
        user = user_model.objects.create_superuser("bench-admin", "bench@example.com", "bench")
    client = Client()
    client.force_login(user)
    pages: list[tuple[str, str]] = [
        ("changelist", url),
        ("changelist, status=PENDING", f"{url}?status__exact=PENDING"),
        ("changelist, status=CONFLICTED", f"{url}?status__exact=CONFLICTED"),
        ("changelist, job type", f"{url}?job_type={HISTORY_JOB_TYPES[2]}"),
        ("changelist, page 2", f"{url}?p=2"),
        ("changelist, search by idempotency key", f"{url}?q=order:4242"),
    ]
    count = ctx.size(20, 5)
    for name, path in pages:

        def get(path: str = path) -> object:
            response = client.get(path)
            if response.status_code != 200:
                raise RuntimeError(f"GET {path} answered {response.status_code}")
            return response

        probe: Callable[[], object] = get
        try:
            probe()
        except RuntimeError as error:
            ctx.add(Row("e", f"{name}: {error}", 0, "ms", ok=False))
            progress(f"(e) {name}: {error}")
            continue
        stats = measure(probe, count=count, warmup=2)
        ctx.add(
            Row(
                "e",
                f"{name}, median",
                stats.median_ms,
                "ms",
                target=f"< {TARGET_MS:g} ms",
                ok=stats.median_ms < TARGET_MS,
                detail=stats.to_dict() | {"path": path},
            )
        )
        ctx.add(Row("e", f"{name}, p95", stats.p95_ms, "ms"))
        progress(f"(e) {name}: median {stats.median_ms:.1f} ms, p95 {stats.p95_ms:.1f} ms")
