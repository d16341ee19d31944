"""(v) Bulk producers: 10,000 requests for work in one transaction, in one call.

The contenders, each one whole transaction of 10,000 requests per round, interleaved round by
round in a freshly shuffled order (the tables keep growing, the same for everyone):

- ``record_intents``: one call with 10,000 ``IntentRequest`` values;
- ``record_intent`` x 10,000: the single form in a loop, in one atomic block;
- ``enqueue_jobs``: one call with 10,000 keyed ``JobRequest`` values;
- ``enqueue_job`` x 10,000: the single form in a loop, in one atomic block;
- Procrastinate ``batch_defer``: one call with 10,000 task argument sets (Django's connection);
- django-tasks-db ``bulk_create``: 10,000 ``DBTaskResult`` rows, built as its ``enqueue`` builds
  one, in one ``bulk_create`` (the closest that backend comes to a bulk enqueue).

Every contender carries the same data (an order id and an e-mail address); ours are keyed,
half of them tenant rows. Ratios are the other's median time over ours (2.0x: ours takes half
the time); the spread is the lowest and highest per-round ratio.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

from django.db import transaction

from benchmarks import settings as bench_settings
from runledger_django import (
    IntentRequest,
    JobRequest,
    enqueue_job,
    enqueue_jobs,
    record_intent,
    record_intents,
)

from .common import JOB_TYPE, SHUFFLE_SEED, Context, Row, Stats, progress, ratio, timed
from .peer_tasks import procrastinate_task, tasks_db_bulk_create
from .shape_a import check_peers, email, organization, payload, reset_all

Op = Callable[[int], object]

RECORD_BULK = "record_intents"
RECORD_LOOP = "record_intent x N"
ENQUEUE_BULK = "enqueue_jobs"
ENQUEUE_LOOP = "enqueue_job x N"
PROCRASTINATE = "Procrastinate batch_defer"
TASKS_DB = "django-tasks-db bulk_create"

TARGET_LOOP = 10.0
"""A bulk call against the single form in a loop: at least this many times faster."""
TARGET_PEER = 1.0
"""Against a peer's bulk enqueue: ahead of it."""


def contenders(size: int) -> dict[str, Op]:
    """Each contender's transaction of ``size`` requests; the round number keys them apart."""

    def record_bulk(round_no: int) -> object:
        requests = [
            IntentRequest(
                JOB_TYPE,
                payload(i),
                idempotency_key=f"v{round_no}:{i}",
                organization_id=organization(i),
            )
            for i in range(size)
        ]
        with transaction.atomic():
            return record_intents(requests)

    def record_loop(round_no: int) -> object:
        with transaction.atomic():
            for i in range(size):
                record_intent(
                    JOB_TYPE,
                    payload(i),
                    idempotency_key=f"vl{round_no}:{i}",
                    organization_id=organization(i),
                )
        return None

    def enqueue_bulk(round_no: int) -> object:
        requests = [
            JobRequest(
                JOB_TYPE,
                payload(i),
                idempotency_key=f"v{round_no}:{i}",
                organization_id=organization(i),
            )
            for i in range(size)
        ]
        with transaction.atomic():
            return enqueue_jobs(requests)

    def enqueue_loop(round_no: int) -> object:
        with transaction.atomic():
            for i in range(size):
                enqueue_job(
                    JOB_TYPE,
                    payload(i),
                    idempotency_key=f"vl{round_no}:{i}",
                    organization_id=organization(i),
                )
        return None

    ops: dict[str, Op] = {
        RECORD_BULK: record_bulk,
        RECORD_LOOP: record_loop,
        ENQUEUE_BULK: enqueue_bulk,
        ENQUEUE_LOOP: enqueue_loop,
    }
    if bench_settings.HAS_PROCRASTINATE:
        deferrable = procrastinate_task()

        def batch_defer(round_no: int) -> object:
            arguments = [{"order_id": i, "email": email(i)} for i in range(size)]
            with transaction.atomic():
                return deferrable.batch_defer(*arguments)

        ops[PROCRASTINATE] = batch_defer
    if bench_settings.HAS_DJANGO_TASKS_DB:

        def bulk_create(round_no: int) -> object:
            arguments = [{"order_id": i, "email": email(i)} for i in range(size)]
            with transaction.atomic():
                return tasks_db_bulk_create(arguments)

        ops[TASKS_DB] = bulk_create
    return ops


def _rounds(ops: dict[str, Op], *, count: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per round for each contender, the order shuffled every round (as
    ``common.interleaved``, with the samples kept per round for the spread)."""
    names = list(ops)
    samples: dict[str, list[float]] = {name: [] for name in names}
    order = random.Random(SHUFFLE_SEED)
    for round_no in range(warmup + count):
        order.shuffle(names)
        for name in names:
            elapsed = timed(partial(ops[name], round_no))
            if round_no >= warmup:
                samples[name].append(elapsed)
        progress(
            f"(v) round {round_no + 1}/{warmup + count}"
            + (" (warm-up)" if round_no < warmup else "")
        )
    return samples


def _compare(
    ctx: Context,
    samples: dict[str, list[float]],
    ours: str,
    other: str,
    target: float,
    *,
    label: str,
) -> None:
    if other not in samples:
        return
    per_round = [theirs / mine for theirs, mine in zip(samples[other], samples[ours], strict=True)]
    value = ratio(Stats(samples[other]).median_ms, Stats(samples[ours]).median_ms)
    ok = value >= target if target > TARGET_PEER else value > target
    ctx.add(
        Row(
            "v",
            f"{label}: {ours} speed vs {other}",
            value,
            "x",
            target=(">= " if target > TARGET_PEER else "> ") + f"{target:.2f}x",
            ok=ok,
            detail={
                "per_round": [round(r, 3) for r in per_round],
                "spread": [round(min(per_round), 3), round(max(per_round), 3)],
            },
        )
    )


def run(ctx: Context) -> None:
    check_peers(ctx, "v")
    size = ctx.size(10_000, 1_000)
    count = ctx.size(3, 2)
    reset_all()
    progress(f"(v) {count} rounds (and a warm-up) of {size:,} requests in one transaction each")
    samples = _rounds(contenders(size), count=count, warmup=1)
    label = f"{size:,} in one transaction"
    for name, values in samples.items():
        stats = Stats(values)
        ctx.add(
            Row(
                "v",
                f"{label}: {name}, per request",
                stats.median_ms / size,
                "ms",
                detail=stats.to_dict() | {"requests_per_sample": size},
            )
        )
    for ours, loop in ((RECORD_BULK, RECORD_LOOP), (ENQUEUE_BULK, ENQUEUE_LOOP)):
        _compare(ctx, samples, ours, loop, TARGET_LOOP, label=label)
        _compare(ctx, samples, ours, PROCRASTINATE, TARGET_PEER, label=label)
        _compare(ctx, samples, ours, TASKS_DB, TARGET_PEER, label=label)
    progress(
        f"(v) {label}: "
        + ", ".join(
            f"{name} {Stats(values).median_ms / size * 1000:.1f} us/request"
            for name, values in samples.items()
        )
    )
