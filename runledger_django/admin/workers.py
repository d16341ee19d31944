"""The workers' admin: the ``runledger_workers`` registry, read-only, live or stale at a glance.

A row is live while its worker beats within three of its own heartbeat intervals, judged by
the database clock (an annotation, so the page never compares the web server's clock with the
workers'). A SIGKILLed worker's row shows as stale until a live worker's beat prunes it. The
table holds one row per worker, and the changelist still counts it through the bounded
paginator, like every other runledger page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.contrib.admin.options import ShowFacets
from django.db.models import BooleanField, ExpressionWrapper, QuerySet
from django.http import HttpRequest

from ..models import WorkerRecord
from ..models.workers import live_condition
from .shared import BoundedCountPaginator, ReadOnlyMixin

if TYPE_CHECKING:
    WorkerAdminBase = admin.ModelAdmin[WorkerRecord]
else:
    WorkerAdminBase = admin.ModelAdmin


class LiveFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("live", "live"), ("stale", "stale")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "live":
            return queryset.filter(live_condition())
        if self.value() == "stale":
            return queryset.exclude(live_condition())
        return queryset


@admin.register(WorkerRecord)
class WorkerRecordAdmin(ReadOnlyMixin, WorkerAdminBase):
    list_display = (
        "worker_id",
        "state",
        "hostname",
        "pid",
        "job_type_list",
        "concurrency",
        "version",
        "started_at",
        "last_heartbeat_at",
    )
    list_filter = (LiveFilter,)
    search_fields = ("=worker_id", "=hostname")
    search_help_text = "An exact worker id or hostname."
    ordering = ("worker_id",)
    paginator = BoundedCountPaginator
    show_full_result_count = False
    show_facets = ShowFacets.NEVER
    actions = None
    list_per_page = 100
    fields = (
        "worker_id",
        "state",
        "hostname",
        "pid",
        "version",
        "job_type_list",
        "concurrency",
        "heartbeat_seconds",
        "started_at",
        "last_heartbeat_at",
    )
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerRecord]:
        return (
            super()
            .get_queryset(request)
            .annotate(is_live=ExpressionWrapper(live_condition(), output_field=BooleanField()))
        )

    @admin.display(description="state", ordering="last_heartbeat_at")
    def state(self, obj: WorkerRecord) -> str:
        return "live" if getattr(obj, "is_live", False) else "stale"

    @admin.display(description="job types")
    def job_type_list(self, obj: WorkerRecord) -> str:
        types = obj.job_types if isinstance(obj.job_types, list) else []
        return ", ".join(str(job_type) for job_type in types) or "-"
