"""The shop's job handlers; ``runledger_worker`` finds them because this module is ``jobs.py``.

A job runs at least once: a worker that dies after a handler did its work, but before the
success was recorded, leaves the job to run again. Both handlers are safe to run twice.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from runledger_django import JobContext, RetryJob, TerminalJobError, job_handler, schedule

from .fulfilment import CHARGE_JOB_TYPE, NOTIFY_JOB_TYPE, RESERVE_JOB_TYPE, SHIP_JOB_TYPE
from .models import Order
from .views import PAYMENT_JOB_TYPE, RECEIPT_JOB_TYPE, WAREHOUSE_JOB_TYPE

DAILY_SALES_JOB_TYPE = "shop.daily_sales"
DAILY_SALES_SCHEDULE = "shop.daily-sales"

WAREHOUSE_RETRY_AFTER = dt.timedelta(milliseconds=300)
"""Short, so the example's story stays fast; a real integration waits seconds or minutes."""
WAREHOUSE_DOWN_DURING_RUN = 1
"""The demo's warehouse is "down" for a job's first run, and back for a requeued one."""


def _order(job: JobContext, *, lock: bool = False) -> Order:
    orders = Order.objects.select_for_update() if lock else Order.objects.all()
    order = orders.filter(pk=job.payload["order_id"]).first()
    if order is None:
        raise TerminalJobError("the order no longer exists")  # retrying cannot bring it back
    return order


@job_handler(RECEIPT_JOB_TYPE, max_attempts=5, timeout_seconds=60)
def send_receipt(job: JobContext) -> dict[str, Any]:
    """Send the order's receipt once (here: pretend to), and record where it went.

    The order row is the idempotency mark: it is locked, checked and stamped in one
    transaction, so a second run of the job finds the receipt sent and sends nothing.
    """
    with transaction.atomic():
        order = _order(job, lock=True)
        already_sent = order.receipt_sent_at is not None
        if not already_sent:
            # A real shop calls its mail provider here, with job.job_id as the provider's
            # idempotency key: that closes the last window, a crash between the send and
            # this transaction's commit.
            order.receipt_sent_at = timezone.now()
            order.save(update_fields=["receipt_sent_at"])
    return {
        "sent_to": order.customer_email,
        "reference": order.reference,
        "already_sent": already_sent,
    }


@job_handler(WAREHOUSE_JOB_TYPE, max_attempts=3, timeout_seconds=30)
def notify_warehouse(job: JobContext) -> dict[str, Any]:
    """Ask the warehouse to reserve the order's goods (here: pretend to).

    The demo's warehouse does not answer during the job's first run: each attempt asks to run
    again shortly (``RetryJob``), and when the third attempt fails the job is dead-lettered.
    Requeued by an operator (run 2), it goes through. Reserving is keyed by the order's
    reference on the warehouse's side, so asking twice reserves once.
    """
    order = _order(job)
    if job.run_number == WAREHOUSE_DOWN_DURING_RUN:
        raise RetryJob("the warehouse did not answer", after=WAREHOUSE_RETRY_AFTER)
    return {"reserved_for": order.reference, "attempt": job.attempt, "run": job.run_number}


@job_handler(PAYMENT_JOB_TYPE, atomic=True, max_attempts=5, timeout_seconds=30)
def mark_paid(job: JobContext) -> dict[str, Any]:
    """Mark the order paid, exactly once: ``atomic=True`` runs this handler in the transaction
    that records the job's success, so the order's ``paid_at`` and the SUCCEEDED commit
    together or not at all, whatever happens to the worker. No idempotency mark is needed for
    this write (``paid_at`` is set once because the job succeeds once)."""
    order = _order(job, lock=True)
    order.paid_at = timezone.now()
    order.save(update_fields=["paid_at"])
    return {"paid": order.reference, "run": job.run_number}


# -- the fulfilment workflow (fulfilment.py): charge and reserve, then ship, then notify ---------


@job_handler(CHARGE_JOB_TYPE, max_attempts=3, timeout_seconds=30)
def charge_card(job: JobContext) -> dict[str, Any]:
    """Charge the order's total (here: pretend to). A real shop passes ``job.job_id`` to its
    payment provider as the idempotency key, so a second run charges once."""
    order = _order(job)
    return {"charge_id": f"ch_{order.reference}", "amount_cents": order.total_cents}


@job_handler(RESERVE_JOB_TYPE, max_attempts=3, timeout_seconds=30)
def reserve_stock(job: JobContext) -> dict[str, Any]:
    """Reserve the order's goods (keyed by the order's reference on the warehouse's side)."""
    order = _order(job)
    return {"reservation": f"res_{order.reference}"}


@job_handler(SHIP_JOB_TYPE, max_attempts=3, timeout_seconds=30)
def ship_order(job: JobContext) -> dict[str, Any]:
    """Ship: runs only once the charge and the reservation both succeeded, and reads their
    outputs from ``job.upstream``."""
    order = _order(job)
    charge, reservation = job.upstream["charge"], job.upstream["reserve"]
    return {
        "tracking": f"trk_{order.reference}",
        "charge_id": charge["charge_id"],
        "reservation": reservation["reservation"],
    }


@job_handler(NOTIFY_JOB_TYPE, max_attempts=3, timeout_seconds=30)
def notify_customer(job: JobContext) -> dict[str, Any]:
    """Tell the customer how it went: behind a ``when="terminal"`` edge it runs whether the
    shipping succeeded or not (``upstream["ship"]`` is None when it did not)."""
    order = _order(job)
    shipped = job.upstream.get("ship")
    news = f"shipped, tracking {shipped['tracking']}" if shipped else "delayed, we are on it"
    return {"to": order.customer_email, "message": f"Order {order.reference}: {news}"}


@job_handler(DAILY_SALES_JOB_TYPE, max_attempts=3, timeout_seconds=120)
def daily_sales(job: JobContext) -> dict[str, Any]:
    """Sum the orders of the 24 hours before the fire this job belongs to.

    ``job.scheduled_for`` names the fire (for a manual "run now", the time it was asked for),
    so a run that starts late, or a second run of the same fire, reports the same window.
    """
    until = job.scheduled_for or timezone.now()
    orders = Order.objects.filter(
        created_at__gte=until - dt.timedelta(days=1), created_at__lt=until
    )
    return {
        "schedule": job.schedule_name,
        "until": until.isoformat(),
        "orders": orders.count(),
        "total_cents": sum(order.total_cents for order in orders),
    }


# Every morning at 07:00 in Berlin (06:00 or 05:00 UTC, as daylight saving time goes), within
# a minute of jitter. Workers sync this declaration when they start.
schedule(
    DAILY_SALES_SCHEDULE,
    DAILY_SALES_JOB_TYPE,
    cron="0 7 * * *",
    timezone="Europe/Berlin",
    jitter=dt.timedelta(minutes=1),
)
