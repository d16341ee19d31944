"""(f) The enqueue path of the peers a Django team would otherwise pick, in the same run.

django-tasks-db (``task.enqueue()`` on the django-tasks database backend) and Procrastinate
(``task.defer()`` through its Django integration, which writes on Django's psycopg connection)
against ``record_intent``, interleaved op by op, in three shapes: one enqueue in its own
transaction, 1,000 enqueues in one transaction, and one business row (an ``Order``) plus one
enqueue per transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.db import transaction

from benchmarks import settings as bench_settings
from example_project.shop.models import Order
from runledger_django import record_intent

from .common import (
    JOB_TYPE,
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

BATCH = 1000
Op = Callable[[int], object]


def contenders(prefix: str) -> dict[str, Op]:
    """The enqueue call of each system, taking the op number as the task's argument."""
    ops: dict[str, Op] = {}

    def ours(i: int) -> object:
        return record_intent(JOB_TYPE, {"order_id": i}, idempotency_key=f"{prefix}:{i}")

    ops["runledger record_intent"] = ours
    if bench_settings.HAS_DJANGO_TASKS_DB:
        task = tasks_db_task()
        ops["django-tasks-db enqueue"] = lambda i: task.enqueue(order_id=i)
    if bench_settings.HAS_PROCRASTINATE:
        deferrable = procrastinate_task()
        ops["procrastinate defer"] = lambda i: deferrable.defer(order_id=i)
    return ops


def in_atomic(op: Op) -> Op:
    def wrapped(i: int) -> object:
        with transaction.atomic():
            return op(i)

    return wrapped


def create_order(i: int) -> Order:
    """The example project's Order, whatever optional columns it has grown."""
    fields = {field.name for field in Order._meta.get_fields()}
    values: dict[str, object] = {"customer_email": f"c{i}@example.com", "total_cents": 1000 + i}
    if "reference" in fields:
        values["reference"] = f"bench-{uuid.uuid4()}"
    return Order.objects.create(**values)


def with_order(op: Op) -> Op:
    def wrapped(i: int) -> object:
        with transaction.atomic():
            return op(create_order(i).pk)

    return wrapped


def batched(make: Callable[[str], dict[str, Op]], name: str) -> Op:
    def run_batch(round_no: int) -> object:
        op = make(f"f2-{round_no}")[name]
        with transaction.atomic():
            for i in range(BATCH):
                op(i)
        return None

    return run_batch


def reset_all() -> None:
    extra = ["shop_orders"]
    if bench_settings.HAS_DJANGO_TASKS_DB:
        extra.append("django_tasks_database_dbtaskresult")
    if bench_settings.HAS_PROCRASTINATE:
        extra.append("procrastinate_jobs")
    reset_runledger(*extra)
    define_job_types([JOB_TYPE])


def _report(ctx: Context, shape: str, stats: dict[str, Stats], *, per: int = 1) -> None:
    ours = stats["runledger record_intent"]
    for name, s in stats.items():
        ctx.add(
            Row(
                "f",
                f"{shape}: {name}, median" + (" transaction" if per > 1 else ""),
                s.median_ms,
                "ms",
                detail=s.to_dict(),
            )
        )
        if per == 1:
            ctx.add(Row("f", f"{shape}: {name}, p95", s.p95_ms, "ms"))
    for name, s in stats.items():
        if name == "runledger record_intent":
            continue
        value = ratio(ours.median_ms, s.median_ms)
        ctx.add(
            Row(
                "f",
                f"{shape}: record_intent / {name}",
                value,
                "x",
                target="< 1.00x",
                ok=value < 1.0,
            )
        )
    progress(
        f"(f) {shape}: "
        + ", ".join(f"{name} {s.median_ms / per:.3f} ms/op" for name, s in stats.items())
    )


def run(ctx: Context) -> None:
    if not (bench_settings.HAS_DJANGO_TASKS_DB and bench_settings.HAS_PROCRASTINATE):
        ctx.add(Row("f", "peers missing: install the bench extra", 0, "ms", ok=False))
    count = ctx.size(2000, 200)
    warmup = ctx.size(200, 30)
    rounds = ctx.size(7, 2)

    reset_all()
    progress(f"(f) one enqueue in its own transaction, {count} per contender")
    _report(ctx, "own transaction", interleaved(contenders("f1"), count=count, warmup=warmup))

    reset_all()
    progress(f"(f) {BATCH} enqueues in one transaction, {rounds} rounds per contender")
    names = list(contenders("probe"))
    stats = interleaved({name: batched(contenders, name) for name in names}, count=rounds, warmup=1)
    _report(ctx, f"{BATCH} in one transaction", stats, per=BATCH)
    for name, s in stats.items():
        ctx.add(
            Row("f", f"{BATCH} in one transaction: {name}, per enqueue", s.median_ms / BATCH, "ms")
        )

    reset_all()
    progress(f"(f) an Order plus one enqueue per transaction, {count} per contender")
    stats = interleaved(
        {name: with_order(op) for name, op in contenders("f3").items()},
        count=count,
        warmup=warmup,
    )
    _report(ctx, "Order + enqueue per transaction", stats)
