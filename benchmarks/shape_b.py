"""(b) 1,000 record_intent calls inside one caller transaction against 1,000 ORM creates.

Each contender runs whole 1,000-row transactions, interleaved batch by batch; the table keeps
growing across batches exactly as it does in (a).
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from .common import (
    JOB_TYPE,
    Context,
    Row,
    define_job_types,
    interleaved,
    progress,
    ratio,
    reset_runledger,
)
from .shape_a import intent_table_create, ours, plain_create

BATCH = 1000


def batch(op_for: Callable[[str], Callable[[int], object]], prefix: str) -> Callable[[int], object]:
    def run_batch(round_no: int) -> object:
        op = op_for(f"{prefix}{round_no}")
        with transaction.atomic():
            for i in range(BATCH):
                op(i)
        return None

    return run_batch


def run(ctx: Context) -> None:
    rounds = ctx.size(9, 3)
    reset_runledger("bench_plain_intent")
    define_job_types([JOB_TYPE])
    progress(f"(b) {rounds} interleaved transactions of {BATCH} rows per contender")
    stats = interleaved(
        {
            "record_intent": batch(ours, "b"),
            "plain": batch(plain_create, "b"),
            "intent_table": batch(intent_table_create, "b"),
        },
        count=rounds,
        warmup=1,
    )
    mine, plain, table = stats["record_intent"], stats["plain"], stats["intent_table"]
    for name, s in (
        ("record_intent x1000", mine),
        ("ORM create x1000, plain mirror table", plain),
        ("ORM create x1000, runledger intent table", table),
    ):
        ctx.add(Row("b", f"{name}, median transaction", s.median_ms, "ms", detail=s.to_dict()))
        ctx.add(Row("b", f"{name}, per row", s.median_ms / BATCH, "ms"))
    ctx.add(
        Row(
            "b", "record_intent / ORM create (medians)", ratio(mine.median_ms, plain.median_ms), "x"
        )
    )
    ctx.add(
        Row(
            "b",
            "record_intent / ORM create into the intent table",
            ratio(mine.median_ms, table.median_ms),
            "x",
        )
    )
