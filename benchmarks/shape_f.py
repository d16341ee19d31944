"""(f) Recording beside a business row: an ``Order`` and the request for its receipt in one
transaction, the way a checkout view writes them; the contenders of (a).

Every contender pays the same order insert, so the ratios narrow towards 1.00x: this is the
shape a view sees.
"""

from __future__ import annotations

import uuid

from django.db import transaction

from example_project.shop.models import Order

from .common import Context, interleaved, progress
from .shape_a import Op, check_peers, contenders, email, report, reset_all


def create_order(i: int) -> Order:
    return Order.objects.create(
        reference=f"bench-{uuid.uuid4()}", customer_email=email(i), total_cents=1000 + i
    )


def with_order(op: Op) -> Op:
    def wrapped(i: int) -> object:
        with transaction.atomic():
            create_order(i)
            return op(i)

    return wrapped


def run(ctx: Context) -> None:
    check_peers(ctx, "f")
    count = ctx.size(2000, 200)
    warmup = ctx.size(200, 30)
    reset_all()
    progress(f"(f) an Order plus one op per transaction, {count} per contender")
    stats = interleaved(
        {name: with_order(op) for name, op in contenders("f").items()},
        count=count,
        warmup=warmup,
    )
    report(ctx, "f", "Order + op in one transaction", stats)
