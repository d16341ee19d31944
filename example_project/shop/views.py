"""The checkout view: the order, the requests for its background work and its fulfilment
workflow commit or roll back together."""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from runledger_django import IntentStatus, RunledgerError, record_intent, start_workflow

from .fulfilment import fulfilment, fulfilment_key
from .models import Order

RECEIPT_JOB_TYPE = "shop.send_receipt"
WAREHOUSE_JOB_TYPE = "shop.notify_warehouse"
PAYMENT_JOB_TYPE = "shop.mark_paid"


class CheckoutFailedError(Exception):
    """Raised after recording, to show that a rollback removes the order and the intent."""


class ConflictedReceiptError(Exception):
    """An intent for this order was conflicted at promotion; do not commit around it."""


def _parse(request: HttpRequest) -> dict[str, Any] | None:
    """The checkout request, or None when it is not the JSON this demo expects."""
    try:
        data = json.loads(request.body or b"{}")
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    reference, email, total = data.get("reference"), data.get("email"), data.get("total_cents")
    if not (isinstance(reference, str) and 0 < len(reference) <= 64):
        return None
    if not isinstance(email, str) or type(total) is not int or total < 0:
        return None
    return data


@csrf_exempt
@require_POST
def checkout(request: HttpRequest) -> HttpResponse:
    """Create the order (or find it again on a retry), record its two intents (send the
    receipt, tell the warehouse to reserve the goods) and start its fulfilment workflow
    (charge, reserve, ship, notify: ``fulfilment.py``).

    The client's ``reference`` makes the whole checkout retry-safe: a retry finds the same
    order, ``record_intent`` resolves each identical request to the same intent and
    ``start_workflow`` the same graph under the same key to the same run. A retry that changes
    the total is a conflict, and nothing is written. Unlike an intent, a workflow needs its
    job types defined when it starts (the workers define them from ``jobs.py``).
    """
    data = _parse(request)
    if data is None:
        return JsonResponse(
            {"error": "send JSON with reference, email and total_cents"}, status=400
        )
    try:
        with transaction.atomic():
            order, created = Order.objects.get_or_create(
                reference=data["reference"],
                defaults={"customer_email": data["email"], "total_cents": data["total_cents"]},
            )
            # Recorded in the same transaction as the order: both commit, or neither does.
            outcome = record_intent(
                RECEIPT_JOB_TYPE,
                {"order_id": order.pk, "total_cents": data["total_cents"]},
                idempotency_key=f"receipt:{data['reference']}",
            )
            warehouse = record_intent(
                WAREHOUSE_JOB_TYPE,
                {"order_id": order.pk},
                idempotency_key=f"warehouse:{data['reference']}",
            )
            if IntentStatus.CONFLICTED in (outcome.status, warehouse.status):
                raise ConflictedReceiptError
            run = start_workflow(fulfilment(order), idempotency_key=fulfilment_key(order.reference))
            if data.get("fail_after_recording"):
                raise CheckoutFailedError
    except CheckoutFailedError:
        return JsonResponse({"error": "checkout failed; nothing was saved"}, status=409)
    except ConflictedReceiptError:
        return JsonResponse(
            {"error": "a request for this order's work was conflicted; ask an operator"},
            status=409,
        )
    except RunledgerError as error:
        status = 409 if error.category == "conflict" else 400
        return JsonResponse({"error": str(error), "code": error.code}, status=status)
    return JsonResponse(
        {
            "order_id": order.pk,
            "created": created,
            "intent": outcome.to_dict(),
            "warehouse_intent": warehouse.to_dict(),
            "fulfilment": {"run_id": str(run.run_id), "disposition": run.disposition},
        },
        status=201 if created else 200,
    )
