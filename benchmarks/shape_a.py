"""(a) One record_intent in its own transaction against one plain ORM create of the same row.

Three contenders, interleaved op by op: ``record_intent`` outside any atomic block (its own
READ COMMITTED transaction), ``PlainIntent.objects.create`` (the intent's columns without
constraints or secondary indexes) and ``JobEnqueueIntent.objects.create`` (the real intent
table through the ORM: same indexes, no validation, no ON CONFLICT). The last one splits the
ratio into the schema's cost and the library's own. The same three run once more, each wrapped
in ``transaction.atomic()``, the form a view uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from runledger_django import record_intent
from runledger_django.models import JobEnqueueIntent

from .baseline.models import PlainIntent
from .common import (
    JOB_TYPE,
    ORGANIZATIONS,
    Context,
    Row,
    Stats,
    define_job_types,
    interleaved,
    progress,
    ratio,
    reset_runledger,
)

TARGET_RATIO = 1.3


def payload(i: int) -> dict[str, Any]:
    return {"order_id": i, "email": f"customer-{i}@example.com"}


def organization(i: int) -> Any:
    """Half the rows are tenant rows, half global: both partial unique indexes are exercised."""
    return None if i % 2 else ORGANIZATIONS[i % len(ORGANIZATIONS)]


def snapshot(i: int) -> dict[str, Any]:
    return {
        "payload": payload(i),
        "priority": None,
        "max_attempts": None,
        "timeout_seconds": None,
        "next_run_at": None,
        "stage": "queued",
    }


def ours(prefix: str) -> Callable[[int], object]:
    def op(i: int) -> object:
        return record_intent(
            JOB_TYPE,
            payload(i),
            idempotency_key=f"{prefix}:{i}",
            organization_id=organization(i),
        )

    return op


def plain_create(prefix: str) -> Callable[[int], object]:
    def op(i: int) -> object:
        # _default_manager is .objects; the type checker's settings do not install this app.
        return PlainIntent._default_manager.create(
            job_type=JOB_TYPE,
            organization_id=organization(i),
            payload=payload(i),
            idempotency_key=f"{prefix}:{i}",
            enqueue_request=snapshot(i),
        )

    return op


def intent_table_create(prefix: str) -> Callable[[int], object]:
    def op(i: int) -> object:
        return JobEnqueueIntent.objects.create(
            job_type=JOB_TYPE,
            organization_id=organization(i),
            payload=payload(i),
            idempotency_key=f"{prefix}-orm:{i}",
            enqueue_request=snapshot(i),
        )

    return op


def in_atomic(op: Callable[[int], object]) -> Callable[[int], object]:
    def wrapped(i: int) -> object:
        with transaction.atomic():
            return op(i)

    return wrapped


def _rows(ctx: Context, label: str, stats: dict[str, Stats], *, primary: bool) -> None:
    mine, plain, table = stats["record_intent"], stats["plain"], stats["intent_table"]
    for name, s in (
        ("record_intent", mine),
        ("ORM create, plain mirror table", plain),
        ("ORM create, runledger intent table", table),
    ):
        ctx.add(Row("a", f"{label}: {name}, median", s.median_ms, "ms", detail=s.to_dict()))
        ctx.add(Row("a", f"{label}: {name}, p95", s.p95_ms, "ms"))
    value = ratio(mine.median_ms, plain.median_ms)
    ctx.add(
        Row(
            "a",
            f"{label}: record_intent / ORM create (medians)",
            value,
            "x",
            target=f"<= {TARGET_RATIO}x" if primary else "",
            ok=value <= TARGET_RATIO if primary else None,
        )
    )
    ctx.add(
        Row(
            "a",
            f"{label}: record_intent / ORM create into the intent table",
            ratio(mine.median_ms, table.median_ms),
            "x",
        )
    )


def run(ctx: Context) -> None:
    count = ctx.size(3000, 300)
    warmup = ctx.size(300, 50)
    reset_runledger("bench_plain_intent")
    define_job_types([JOB_TYPE])
    progress(f"(a) {count} interleaved single-row transactions per contender, autocommit")
    stats = interleaved(
        {
            "record_intent": ours("a1"),
            "plain": plain_create("a1"),
            "intent_table": intent_table_create("a1"),
        },
        count=count,
        warmup=warmup,
    )
    _rows(ctx, "own transaction", stats, primary=True)
    progress(f"(a) {count} interleaved single-row transactions per contender, atomic()")
    stats = interleaved(
        {
            "record_intent": in_atomic(ours("a2")),
            "plain": in_atomic(plain_create("a2")),
            "intent_table": in_atomic(intent_table_create("a2")),
        },
        count=count,
        warmup=warmup,
    )
    _rows(ctx, "atomic() per op", stats, primary=False)
