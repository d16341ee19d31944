"""The shop's Django tasks (Django 6.0 and newer), run by ``runledger_worker``.

With ``TASKS = {"default": {"BACKEND": "runledger_django.tasks.RunledgerTaskBackend"}}`` in
the settings, ``@task`` functions are enqueued as runledger intents in the caller's
transaction and run with runledger's leases, retries and dead letters (docs/tasks.md). The
function runs at least once, like any job: it must be safe to run twice.
"""

from __future__ import annotations

from typing import Any

from django.tasks import task

from runledger_django import TerminalJobError

from .models import Order


@task(priority=10)
def send_order_confirmation(order_id: int) -> dict[str, Any]:
    """Confirm the order to its customer (here: pretend to) and say where it went."""
    order = Order.objects.filter(pk=order_id).first()
    if order is None:
        # Retrying cannot bring the order back: runledger dead-letters this at once.
        raise TerminalJobError("the order no longer exists")
    return {"reference": order.reference, "sent_to": order.customer_email}
