"""Orders in the admin, next to runledger's intents and jobs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin

from .models import Order

# ModelAdmin is generic only in the type stubs; at run time it cannot be subscripted.
if TYPE_CHECKING:
    OrderAdminBase = admin.ModelAdmin[Order]
else:
    OrderAdminBase = admin.ModelAdmin


@admin.register(Order)
class OrderAdmin(OrderAdminBase):
    list_display = ("reference", "customer_email", "total_cents", "created_at", "receipt_sent_at")
    search_fields = ("reference",)
    ordering = ("-created_at",)
    readonly_fields = ("created_at", "receipt_sent_at")
