"""The checkout view: the order and the request for its receipt commit or roll back together."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from runledger_django import record_intent

from .models import Order


class CheckoutFailedError(Exception):
    """Raised after recording, to show that a rollback removes the order and the intent."""


@csrf_exempt
@require_POST
def checkout(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body or b"{}")
    try:
        with transaction.atomic():
            order = Order.objects.create(
                customer_email=data["email"], total_cents=int(data["total_cents"])
            )
            outcome = record_intent(
                "shop.send_receipt",
                {"order_id": order.pk},
                idempotency_key=f"receipt:{order.pk}",
            )
            if data.get("fail_after_recording"):
                raise CheckoutFailedError
    except CheckoutFailedError:
        return JsonResponse({"error": "checkout failed; nothing was saved"}, status=409)
    return JsonResponse({"order_id": order.pk, "intent": outcome.to_dict()}, status=201)
