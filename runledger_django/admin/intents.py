"""The intents' admin: a read-only changelist and detail page, and the intent metrics page."""

from __future__ import annotations

import uuid

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.safestring import SafeString

from ..errors import RunledgerError
from ..models import JobEnqueueIntent
from ..services.metrics import intent_metrics
from ..services.search import intent_ids_by_key
from .metrics import METRICS_URL_NAME, metrics_page
from .shared import JobTypeFilter, LargeTableAdmin, admin_link, json_block

_INTENT_IDENTITY = (
    "id",
    "job_type",
    "organization_id",
    "idempotency_key",
    "status",
    "lifecycle_state",
)
_INTENT_LIFECYCLE = (
    "promotion_attempts",
    "next_promotion_at",
    "last_attempted_at",
    "promoted_job_link",
    "promoted_at",
    "conflicted_at",
    "created_at",
    "updated_at",
)
_INTENT_ERROR = ("last_error_code", "last_error_message")
_INTENT_REQUEST = (
    "enqueue_request_version",
    "canonical_request",
    "priority",
    "max_attempts",
    "timeout_seconds",
    "next_run_at",
    "stage",
    "execution_resource_key",
)


@admin.register(JobEnqueueIntent)
class JobEnqueueIntentAdmin(LargeTableAdmin):
    list_display = (
        "id",
        "job_type",
        "organization_id",
        "status",
        "promotion_attempts",
        "next_promotion_at",
        "created_at",
        "promoted_job_link",
    )
    list_filter = ("status", JobTypeFilter)
    json_columns = ("payload", "enqueue_request")
    fieldsets = (
        (None, {"fields": _INTENT_IDENTITY}),
        ("Lifecycle", {"fields": _INTENT_LIFECYCLE}),
        (
            "Last promotion error",
            {
                "fields": _INTENT_ERROR,
                "description": (
                    "The stable error code and its client-safe message; internal detail "
                    "is never stored."
                ),
            },
        ),
        ("Canonical request", {"fields": _INTENT_REQUEST}),
    )
    readonly_fields = _INTENT_IDENTITY + _INTENT_LIFECYCLE + _INTENT_ERROR + _INTENT_REQUEST

    def job_type_condition(self, job_type: str) -> Q:
        # Intents have no plain job_type index; the partial unique indexes lead with it.
        return self.by_organization_kind(job_type=job_type)

    def ids_by_key(self, key: str) -> list[uuid.UUID]:
        return intent_ids_by_key(key)

    @admin.display(description="promoted job")
    def promoted_job_link(self, obj: JobEnqueueIntent) -> str:
        if obj.promoted_job_id is None:
            return "-"
        return admin_link(
            self.admin_site,
            "runledger_job_change",
            obj.promoted_job_id,
            "runledger-promoted-job-link",
        )

    @admin.display(description="lifecycle state")
    def lifecycle_state(self, obj: JobEnqueueIntent) -> str:
        try:
            return obj.state.state
        except RunledgerError as error:
            return f"invalid persisted row ({error.code})"

    @admin.display(description="canonical request")
    def canonical_request(self, obj: JobEnqueueIntent) -> SafeString | str:
        return json_block(getattr(obj, "enqueue_request_text", None), "runledger-canonical-request")

    def get_urls(self) -> list[URLPattern]:
        metrics = path(
            "metrics/",
            self.admin_site.admin_view(self.metrics_view),
            name=METRICS_URL_NAME,
        )
        return [metrics, *super().get_urls()]

    def metrics_view(self, request: HttpRequest) -> HttpResponse:
        """Per-job-type metrics (reference 4.3) for anyone who may view intents."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return metrics_page(
            self,
            request,
            title="Intent metrics",
            template="admin/runledger/intent_metrics.html",
            read=intent_metrics,
        )
