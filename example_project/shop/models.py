"""A tiny business model: an order whose receipt is sent by a background job."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    reference = models.CharField(max_length=64, unique=True)
    """The client's checkout reference: a retried checkout finds its order by it."""
    customer_email = models.EmailField()
    total_cents = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    receipt_sent_at = models.DateTimeField(null=True, blank=True)
    """Set by the receipt job in the transaction that sends it: a second run sends nothing."""
    paid_at = models.DateTimeField(null=True, blank=True)
    """Set by the atomic payment job, in the transaction that records its success."""

    class Meta:
        db_table = "shop_orders"

    def __str__(self) -> str:
        return f"Order {self.reference}"
