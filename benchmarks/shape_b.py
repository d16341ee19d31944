"""(b) Recording, 1,000 requests for work in one transaction: the contenders of (a).

Each contender runs whole 1,000-op transactions, interleaved transaction by transaction with the
order shuffled; the tables keep growing across rounds, the same for everyone.
"""

from __future__ import annotations

from django.db import transaction

from .common import Context, interleaved, progress
from .shape_a import Op, check_peers, contenders, report, reset_all

BATCH = 1000


def batched(name: str) -> Op:
    def run_batch(round_no: int) -> object:
        op = contenders(f"b{round_no}")[name]
        with transaction.atomic():
            for i in range(BATCH):
                op(i)
        return None

    return run_batch


def run(ctx: Context) -> None:
    check_peers(ctx, "b")
    rounds = ctx.size(9, 2)
    reset_all()
    progress(f"(b) {rounds} interleaved transactions of {BATCH} ops per contender")
    stats = interleaved(
        {name: batched(name) for name in contenders("probe")}, count=rounds, warmup=1
    )
    report(ctx, "b", f"{BATCH:,} in one transaction", stats, per=BATCH, rounds=rounds)
