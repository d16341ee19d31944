"""(a) Recording, one request for work per transaction: record_intent against a plain ORM
insert and against the peers' enqueue, in the same run.

The contenders, interleaved op by op in a freshly shuffled order every round:

- ``record_intent``: validation, the canonical snapshot, the keyed insert (its own READ
  COMMITTED transaction outside an atomic block);
- ORM insert: ``PlainIntent.objects.create`` of the same row (the intent table's columns and
  its snapshot, a UUIDv7 primary key, no other constraint or index): what a team writes when it
  stores "work to do" as an ordinary model;
- django-tasks-db: ``task.enqueue()`` on the django-tasks database backend;
- Procrastinate: ``task.defer()`` through its Django integration (Django's connection).

Every contender carries the same data (an order id and an e-mail address). Ratios are speeds
relative to ours: the other's median time over ours, so 1.05x means record_intent is 5% faster.
Shapes (b) and (f) run the same contenders 1,000 to a transaction and beside a business row.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from benchmarks import settings as bench_settings
from runledger_django import record_intent

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
from .peer_tasks import procrastinate_task, tasks_db_task

Op = Callable[[int], object]

OURS = "record_intent"
ORM = "ORM insert"
TASKS_DB = "django-tasks-db enqueue"
PROCRASTINATE = "Procrastinate defer"
TARGET_ORM = 0.95
"""record_intent's speed relative to the ORM insert, at least."""
TARGET_PEER = 1.00
"""Relative to a peer's enqueue: ahead of it."""


def email(i: int) -> str:
    return f"customer-{i}@example.com"


def payload(i: int) -> dict[str, Any]:
    return {"order_id": i, "email": email(i)}


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


def contenders(prefix: str) -> dict[str, Op]:
    """Each system's call that records one request for work; the op number is its data."""

    def ours(i: int) -> object:
        return record_intent(
            JOB_TYPE, payload(i), idempotency_key=f"{prefix}:{i}", organization_id=organization(i)
        )

    def orm_insert(i: int) -> object:
        # _default_manager is .objects; the type checker's settings do not install this app.
        return PlainIntent._default_manager.create(
            job_type=JOB_TYPE,
            organization_id=organization(i),
            payload=payload(i),
            idempotency_key=f"{prefix}:{i}",
            enqueue_request=snapshot(i),
        )

    ops: dict[str, Op] = {OURS: ours, ORM: orm_insert}
    if bench_settings.HAS_DJANGO_TASKS_DB:
        task = tasks_db_task()
        ops[TASKS_DB] = lambda i: task.enqueue(order_id=i, email=email(i))
    if bench_settings.HAS_PROCRASTINATE:
        deferrable = procrastinate_task()
        ops[PROCRASTINATE] = lambda i: deferrable.defer(order_id=i, email=email(i))
    return ops


def reset_all() -> None:
    extra = ["bench_plain_intent", "shop_orders"]
    if bench_settings.HAS_DJANGO_TASKS_DB:
        extra.append("django_tasks_database_dbtaskresult")
    if bench_settings.HAS_PROCRASTINATE:
        extra.append("procrastinate_jobs")
    reset_runledger(*extra)
    define_job_types([JOB_TYPE])


def check_peers(ctx: Context, shape: str) -> None:
    if not (bench_settings.HAS_DJANGO_TASKS_DB and bench_settings.HAS_PROCRASTINATE):
        ctx.add(Row(shape, "peers missing: install the bench extra", 0, "ms", ok=False))


ROUNDS = 5
"""Op-by-op shapes (a, f) cut their samples into this many consecutive rounds for the spread."""


def per_round_ratios(theirs: Stats, ours: Stats, rounds: int) -> list[float]:
    """The other's median time over ours in each of ``rounds`` consecutive slices of the
    interleaved samples (one sample each when there are that many: shape b's transactions)."""
    size = max(1, len(ours.samples) // rounds)
    ratios = []
    for start in range(0, size * rounds, size):
        mine = ours.samples[start : start + size]
        other = theirs.samples[start : start + size]
        if mine and other:
            ratios.append(ratio(statistics.median(other), statistics.median(mine)))
    return ratios


def report(
    ctx: Context,
    shape: str,
    label: str,
    stats: dict[str, Stats],
    *,
    per: int = 1,
    rounds: int = ROUNDS,
) -> None:
    """Medians per operation, then record_intent's speed relative to each contender, with the
    ratio of every round: ahead of a peer means ahead in every round, so the margin is larger
    than the run-to-run spread."""
    for name, s in stats.items():
        ctx.add(
            Row(
                shape,
                f"{label}: {name}, median per op",
                s.median_ms / per,
                "ms",
                detail=s.to_dict() | {"ops_per_sample": per},
            )
        )
    ours = stats[OURS]
    for name, s in stats.items():
        if name == OURS:
            continue
        target = TARGET_ORM if name == ORM else TARGET_PEER
        value = ratio(s.median_ms, ours.median_ms)
        per_round = per_round_ratios(s, ours, rounds)
        spread = [min(per_round), max(per_round)]
        if name == ORM:
            ok = value >= target
            target_text = f">= {target:.2f}x"
        else:
            ok = value > target and spread[0] > target
            target_text = f"> {target:.2f}x every round"
        ctx.add(
            Row(
                shape,
                f"{label}: record_intent speed vs {name}",
                value,
                "x",
                target=target_text,
                ok=ok,
                detail={
                    "per_round": [round(r, 3) for r in per_round],
                    "spread": [round(r, 3) for r in spread],
                },
            )
        )
    progress(
        f"({shape}) {label}: "
        + ", ".join(f"{name} {s.median_ms / per:.3f} ms/op" for name, s in stats.items())
    )


def run(ctx: Context) -> None:
    check_peers(ctx, "a")
    count = ctx.size(2000, 200)
    warmup = ctx.size(200, 30)
    reset_all()
    progress(f"(a) one op in its own transaction, {count} per contender")
    stats = interleaved(contenders("a"), count=count, warmup=warmup)
    report(ctx, "a", "own transaction", stats)
