"""(t) ``send_receipt.enqueue()`` on Django's Tasks API: runledger's backend against
django-tasks-db's and against runledger's own ``record_intent``, in the same run.

Each op runs inside ``transaction.atomic()``, as in a view: the enqueue alone, then an
``Order`` plus the enqueue. The contenders are interleaved op by op (common.interleaved).
Targets: runledger's ``enqueue()`` faster than django-tasks-db's, and within 10% of
``record_intent``. A second part times the worker's listing of task job types (the handler
source's prefix query) at 100 and 10,000 task definitions, with its plan.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.test.utils import override_settings

from benchmarks import settings as bench_settings
from runledger_django import record_intent
from runledger_django.uuid7 import uuid7

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
    sql,
    timed,
)
from .peer_tasks import tasks_db_task
from .shape_f import create_order

Op = Callable[[int], object]
OURS = "runledger enqueue()"
OURS_KEYED = "runledger enqueue(), with_idempotency_key"
TASKS_DB = "django-tasks-db enqueue()"
RECORD_INTENT = "runledger record_intent"
RECORD_INTENT_SAME_ROW = "runledger record_intent, the task's row"
"""The intent the backend records (its job type, payload and a fresh key), written directly:
the difference to OURS is the backend's own Python."""
RUNLEDGER_ALIAS = "runledger"


def send_receipt(order_id: int) -> None:
    """The task body; nothing runs it here. Registering it rebinds this name to its Task, so
    the module path names the Task, as ``@task`` would leave it."""


def tasks_setting() -> dict[str, Any]:
    configured: dict[str, Any] = dict(bench_settings.TASKS)
    configured[RUNLEDGER_ALIAS] = {"BACKEND": "runledger_django.tasks.RunledgerTaskBackend"}
    return configured


def our_task() -> Any:
    from django.tasks import Task, task

    current = globals()["send_receipt"]
    if not isinstance(current, Task):
        current = task(backend=RUNLEDGER_ALIAS)(current)
        globals()["send_receipt"] = current
    return current


def contenders(prefix: str) -> dict[str, Op]:
    from runledger_django.tasks import with_idempotency_key

    ours: Any = our_task()
    job_type = f"task:default:{ours.module_path}"

    def keyed(i: int) -> object:
        task: Any = with_idempotency_key(ours, f"{prefix}:{i}")
        return task.enqueue(order_id=i)

    ops: dict[str, Op] = {
        OURS: lambda i: ours.enqueue(order_id=i),
        OURS_KEYED: keyed,
        RECORD_INTENT: lambda i: record_intent(
            JOB_TYPE, {"order_id": i}, idempotency_key=f"{prefix}:{i}"
        ),
        RECORD_INTENT_SAME_ROW: lambda i: record_intent(
            job_type,
            {"backend": RUNLEDGER_ALIAS, "keyed": False, "args": [], "kwargs": {"order_id": i}},
            idempotency_key=str(uuid7()),
            priority=0,
        ),
    }
    if bench_settings.HAS_DJANGO_TASKS_DB:
        peer = tasks_db_task()
        ops[TASKS_DB] = lambda i: peer.enqueue(order_id=i)
    return ops


def in_view(op: Op) -> Op:
    def wrapped(i: int) -> object:
        with transaction.atomic():
            return op(i)

    return wrapped


def with_order(op: Op) -> Op:
    def wrapped(i: int) -> object:
        with transaction.atomic():
            return op(create_order(i).pk)

    return wrapped


def reset_all() -> None:
    extra = ["shop_orders"]
    if bench_settings.HAS_DJANGO_TASKS_DB:
        extra.append("django_tasks_database_dbtaskresult")
    reset_runledger(*extra)
    define_job_types([JOB_TYPE])  # the task's definition: the first enqueue makes it again


def _report(ctx: Context, shape: str, stats: dict[str, Stats]) -> None:
    for name, s in stats.items():
        ctx.add(Row("t", f"{shape}: {name}, median", s.median_ms, "ms", detail=s.to_dict()))
        ctx.add(Row("t", f"{shape}: {name}, p95", s.p95_ms, "ms"))
    for name in (OURS, OURS_KEYED):
        ours = stats[name].median_ms
        if TASKS_DB in stats:
            value = ratio(ours, stats[TASKS_DB].median_ms)
            ctx.add(
                Row(
                    "t", f"{shape}: {name} / {TASKS_DB}", value, "x", target="< 1.00x", ok=value < 1
                )
            )
        value = ratio(ours, stats[RECORD_INTENT].median_ms)
        ctx.add(
            Row(
                "t",
                f"{shape}: {name} / {RECORD_INTENT}",
                value,
                "x",
                target="<= 1.10x",
                ok=value <= 1.10,
            )
        )
    progress(
        f"(t) {shape}: " + ", ".join(f"{name} {s.median_ms:.3f} ms" for name, s in stats.items())
    )


def _listing(ctx: Context, definitions: int) -> None:
    """The worker's task job type listing (every queue, and one queue) at this many task
    definitions, with the plan PostgreSQL chose."""
    from runledger_django.models import JobDefinition
    from runledger_django.tasks.backend import task_source

    reset_runledger()
    JobDefinition.objects.bulk_create(
        [
            JobDefinition(job_type=f"task:{'emails' if n % 10 == 0 else 'default'}:app{n}.tasks.t")
            for n in range(definitions)
        ]
        + [JobDefinition(job_type=f"handler.type{n}") for n in range(definitions)]
    )
    sql("VACUUM (ANALYZE) runledger_job_definitions")
    for label, queues in (("every queue", None), ("queue emails", ["emails"])):

        def listing(queues: list[str] | None = queues) -> list[str]:
            return task_source.job_types(queues, using="default")

        samples = [timed(listing) for _ in range(ctx.size(200, 20))]
        stats = Stats(samples)
        found = len(task_source.job_types(queues, using="default"))
        prefix = "task:" if queues is None else "task:emails:"
        plan = sql(
            "EXPLAIN (FORMAT JSON) SELECT job_type FROM runledger_job_definitions "
            "WHERE job_type LIKE %s AND is_enabled",
            [prefix + "%"],
        )[0][0]
        node = (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]["Node Type"]
        ctx.add(
            Row(
                "t",
                f"task job types, {definitions:,} task definitions, {label}: {found} found "
                f"({node})",
                stats.median_ms,
                "ms",
                detail=stats.to_dict(),
            )
        )
        progress(
            f"(t) listing at {definitions} definitions, {label}: {stats.median_ms:.3f} ms ({node})"
        )


def run(ctx: Context) -> None:
    if not bench_settings.HAS_DJANGO_TASKS_DB:
        ctx.add(Row("t", "django-tasks-db missing: install the bench extra", 0, "ms", ok=False))
    try:
        import django.tasks  # noqa: F401
    except ImportError:
        ctx.add(Row("t", "skipped: django.tasks needs Django 6.0", 0, "ms"))
        return
    count = ctx.size(2000, 200)
    warmup = ctx.size(200, 30)
    with override_settings(TASKS=tasks_setting()):
        reset_all()
        progress(f"(t) one enqueue inside a view's atomic block, {count} per contender")
        stats = interleaved(
            {name: in_view(op) for name, op in contenders("t1").items()},
            count=count,
            warmup=warmup,
        )
        _report(ctx, "enqueue in atomic", stats)

        reset_all()
        progress(f"(t) an Order plus one enqueue per atomic block, {count} per contender")
        stats = interleaved(
            {name: with_order(op) for name, op in contenders("t2").items()},
            count=count,
            warmup=warmup,
        )
        _report(ctx, "Order + enqueue in atomic", stats)

        for definitions in (100, 10_000):
            _listing(ctx, definitions)
        reset_runledger()
