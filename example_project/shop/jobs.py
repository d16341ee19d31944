"""The shop's job handlers; ``runledger_worker`` finds them because this module is ``jobs.py``."""

from __future__ import annotations

from typing import Any

from runledger_django import JobContext, TerminalJobError, job_handler

from .models import Order
from .views import RECEIPT_JOB_TYPE


@job_handler(RECEIPT_JOB_TYPE, max_attempts=5, timeout_seconds=60)
def send_receipt(job: JobContext) -> dict[str, Any]:
    """Send the order's receipt (here: pretend to), and record where it went."""
    order = Order.objects.filter(pk=job.payload["order_id"]).first()
    if order is None:
        raise TerminalJobError("the order no longer exists")
    return {"sent_to": order.customer_email, "reference": order.reference}
