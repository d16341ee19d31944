"""The order's fulfilment as a workflow: charge the card and reserve the stock side by side,
ship once both went through, then tell the customer whatever happened.

The checkout view starts it in the transaction that creates the order, so an order never
exists without its fulfilment, and a retried checkout finds the same run (its idempotency key
is the order's reference). The handlers are in ``jobs.py``.
"""

from __future__ import annotations

from runledger_django import Workflow

from .models import Order

FULFIL_WORKFLOW_TYPE = "shop.fulfil"
CHARGE_JOB_TYPE = "shop.charge_card"
RESERVE_JOB_TYPE = "shop.reserve_stock"
SHIP_JOB_TYPE = "shop.ship_order"
NOTIFY_JOB_TYPE = "shop.notify_customer"
FULFIL_JOB_TYPES = (CHARGE_JOB_TYPE, RESERVE_JOB_TYPE, SHIP_JOB_TYPE, NOTIFY_JOB_TYPE)


def fulfilment(order: Order) -> Workflow:
    """charge and reserve, then ship (only if both succeeded), then notify (in any case)."""
    flow = Workflow(FULFIL_WORKFLOW_TYPE, metadata={"order": order.reference})
    payload = {"order_id": order.pk}
    charge = flow.step("charge", CHARGE_JOB_TYPE, payload)
    reserve = flow.step("reserve", RESERVE_JOB_TYPE, payload)
    ship = flow.step("ship", SHIP_JOB_TYPE, payload, after=[charge, reserve])
    flow.step("notify", NOTIFY_JOB_TYPE, payload, after=[ship], when="terminal")
    return flow


def fulfilment_key(reference: str) -> str:
    return f"fulfil:{reference}"
