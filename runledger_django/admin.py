"""The Django admin: read-only intents and jobs, editable job definitions, intent metrics.

The intent and job tables grow to millions of rows, so their changelists never count them in
full (a bounded count instead), filter on values that have indexes, offer no facets, and sort
only by the indexed creation order. Permissions are Django's model permissions; nothing here
writes an intent or a job.
"""

from __future__ import annotations

import json
import uuid
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import django
from django import forms
from django.contrib import admin
from django.contrib.admin.options import ShowFacets
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .domain import PAGE_LIMIT_MAX, IntentMetrics, ReadScope
from .errors import RunledgerError
from .models import IntentMetricsPage, Job, JobDefinition, JobEnqueueIntent, JobEvent
from .services.metrics import intent_metrics
from .validation import validate_job_type

if TYPE_CHECKING:
    LargeTableAdminBase = admin.ModelAdmin[Any]
    DefinitionAdminBase = admin.ModelAdmin[JobDefinition]
    MetricsPageAdminBase = admin.ModelAdmin[IntentMetricsPage]
    EventInlineBase = admin.TabularInline[JobEvent, Job]
    DefinitionFormBase = forms.ModelForm[JobDefinition]
    PaginatorBase = Paginator[Any]
else:
    LargeTableAdminBase = DefinitionAdminBase = MetricsPageAdminBase = admin.ModelAdmin
    EventInlineBase = admin.TabularInline
    DefinitionFormBase = forms.ModelForm
    PaginatorBase = Paginator

METRICS_URL_NAME = "runledger_intent_metrics"
"""``admin:runledger_intent_metrics``: the per-job-type intent metrics page."""

EVENTS_SHOWN = 100
"""Newest events a job page shows inline; heartbeats can make the full trail very long."""


class BoundedCountPaginator(PaginatorBase):
    """Counts at most ``count_bound`` rows, so a changelist never runs an unbounded COUNT(*).

    ``SELECT count(*) FROM (SELECT ... LIMIT bound + 1)`` stops early on big tables. When the
    bound is reached the count is reported as the bound and ``count_is_capped`` is set: the
    pages beyond it are not linked (offsets that deep are slow anyway; filter or search).
    """

    count_bound = 10_000
    """Keep it above ``list_per_page`` and ``list_max_show_all``: Django fetches what it thinks
    is a single page, or "show all", without a LIMIT."""
    count_is_capped = False

    @cached_property
    def count(self) -> int:
        object_list: QuerySet[Any] = self.object_list  # type: ignore[assignment]
        counted = object_list.order_by().values("pk")[: self.count_bound + 1].count()
        self.count_is_capped = counted > self.count_bound
        return min(counted, self.count_bound)


class JobTypeFilter(admin.SimpleListFilter):
    """Job types listed from the definitions table, never ``SELECT DISTINCT`` over a big one.

    A type without a definition can still be filtered on by typing ``?job_type=...``.
    """

    title = "job type"
    parameter_name = "job_type"

    def __init__(
        self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any
    ) -> None:
        self.model_admin = model_admin
        super().__init__(request, params, model, model_admin)

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        types = list(JobDefinition.objects.order_by("job_type").values_list("job_type", flat=True))
        current = self.value()
        if current and current not in types:
            types.append(current)
        return [(job_type, job_type) for job_type in types]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        condition = Q(job_type=value)
        if isinstance(self.model_admin, LargeTableAdmin):
            condition = self.model_admin.job_type_condition(value)
        return queryset.filter(condition)


class ReadOnlyMixin:
    """No adding, changing or deleting through the admin: rows change only via the services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class LargeTableAdmin(ReadOnlyMixin, LargeTableAdminBase):
    """Read-only browsing of a table that may hold millions of rows."""

    paginator = BoundedCountPaginator
    show_full_result_count = False
    show_facets = ShowFacets.NEVER
    ordering = ("-created_at", "-id")
    """Served by the tables' (created_at DESC, id DESC) indexes."""
    sortable_by = ("id", "created_at")
    actions = None
    list_per_page = 100
    # Only here to make Django render the search box; get_search_results does the matching.
    search_fields = ("=idempotency_key",)
    search_help_text = "An exact idempotency key, or an exact id (UUID)."
    changelist_deferred: tuple[str, ...] = ()
    """Wide columns a changelist row never shows; the detail page loads them."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name and match.url_name.endswith("_changelist"):
            queryset = queryset.defer(*self.changelist_deferred)
        return queryset

    @staticmethod
    def by_organization_kind(**lookups: Any) -> Q:
        """``lookups`` split into the rows with and without an organization.

        Same rows, but each half implies the predicate of one of the partial unique indexes
        ``(job_type[, organization_id], idempotency_key)``, so PostgreSQL can answer from them
        instead of scanning the table.
        """
        return Q(organization_id__isnull=True, **lookups) | Q(
            organization_id__isnull=False, **lookups
        )

    def job_type_condition(self, job_type: str) -> Q:
        return Q(job_type=job_type)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Exact matches only: ``icontains`` over millions of rows would scan them all."""
        term = search_term.strip()
        if not term:
            return queryset, False
        condition = self.by_organization_kind(idempotency_key=term)
        try:
            condition |= Q(pk=uuid.UUID(term))
        except ValueError:
            pass
        return queryset.filter(condition), False


def _admin_link(admin_site: admin.AdminSite, name: str, object_id: Any, css_class: str) -> str:
    url = reverse(f"admin:{name}", args=(object_id,), current_app=admin_site.name)
    return format_html('<a class="{}" href="{}">{}</a>', css_class, url, object_id)


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
    changelist_deferred = ("payload", "enqueue_request")
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

    @admin.display(description="promoted job")
    def promoted_job_link(self, obj: JobEnqueueIntent) -> str:
        if obj.promoted_job_id is None:
            return "-"
        return _admin_link(
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
    def canonical_request(self, obj: JobEnqueueIntent) -> SafeString:
        text = json.dumps(obj.enqueue_request, indent=2, sort_keys=True, ensure_ascii=False)
        return format_html('<pre class="runledger-canonical-request">{}</pre>', text)

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
        form = IntentMetricsFilterForm(request.GET or None)
        rows: list[IntentMetrics] = []
        if not form.is_bound or form.is_valid():
            scope, job_type = form.selection()
            try:
                rows = intent_metrics(scope=scope, job_type=job_type, limit=PAGE_LIMIT_MAX)
            except RunledgerError as error:
                form.add_error("job_type", error.client_message)
        context = {
            **self.admin_site.each_context(request),
            "title": "Intent metrics",
            "opts": self.opts,
            "form": form,
            "rows": rows,
            "row_limit": PAGE_LIMIT_MAX,
            "changelist_url": reverse(
                "admin:runledger_jobenqueueintent_changelist", current_app=self.admin_site.name
            ),
            # Django 6.0 turned the admin's breadcrumbs into a list with its own CSS.
            "breadcrumbs_as_list": django.VERSION >= (6, 0),
        }
        return TemplateResponse(request, "admin/runledger/intent_metrics.html", context)


@admin.register(IntentMetricsPage)
class IntentMetricsPageAdmin(ReadOnlyMixin, MetricsPageAdminBase):
    """Puts "Intent metrics" on the admin index; its changelist is the metrics page."""

    def _may_view_intents(self, request: HttpRequest) -> bool:
        opts = JobEnqueueIntent._meta
        return request.user.has_perm(f"{opts.app_label}.view_{opts.model_name}")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._may_view_intents(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may_view_intents(request)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self._may_view_intents(request):
            raise PermissionDenied
        return HttpResponseRedirect(
            reverse(f"admin:{METRICS_URL_NAME}", current_app=self.admin_site.name)
        )


class IntentMetricsFilterForm(forms.Form):
    """The metrics page's scope: every row (admin), rows without an organization, or one org."""

    SCOPES = (("all", "All rows"), ("global", "Global rows only"), ("organization", "Organization"))

    scope = forms.ChoiceField(choices=SCOPES, required=False, initial="all")
    organization = forms.UUIDField(required=False, label="Organization id")
    job_type = forms.CharField(required=False, label="Job type (exact)", max_length=1000)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("scope") == "organization" and not data.get("organization"):
            self.add_error("organization", "Enter the organization id to show.")
        return data

    def selection(self) -> tuple[ReadScope, str | None]:
        data = self.cleaned_data if self.is_bound else {}
        job_type = (data.get("job_type") or "").strip() or None
        if data.get("scope") == "organization":
            return ReadScope.organization(data["organization"]), job_type
        if data.get("scope") == "global":
            return ReadScope.GLOBAL, job_type
        return ReadScope.ADMIN, job_type


class JobEventInline(ReadOnlyMixin, EventInlineBase):
    model = JobEvent
    verbose_name_plural = f"events (newest {EVENTS_SHOWN})"
    fields = (
        "id",
        "event_type",
        "run_number",
        "attempt",
        "stage",
        "progress_done",
        "progress_total",
        "occurred_at",
    )
    readonly_fields = fields
    ordering = ("-id",)
    extra = 0
    can_delete = False
    show_change_link = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobEvent]:
        queryset = super().get_queryset(request)
        match = request.resolver_match
        object_id = match.kwargs.get("object_id") if match else None
        try:
            job_id = uuid.UUID(str(object_id))
        except ValueError:
            return queryset.none()
        newest = JobEvent.objects.filter(job_id=job_id).order_by("-id").values("id")
        return queryset.filter(id__in=newest[:EVENTS_SHOWN])


@admin.register(Job)
class JobAdmin(LargeTableAdmin):
    list_display = (
        "id",
        "job_type_name",
        "organization_id",
        "status",
        "stage",
        "attempt",
        "max_attempts",
        "priority",
        "next_run_at",
        "created_at",
    )
    list_filter = ("status", JobTypeFilter)
    changelist_deferred = ("payload", "enqueue_request", "output", "checkpoint")
    inlines = (JobEventInline,)
    readonly_fields = ("promoted_from_intents",)

    @admin.display(description="job type")
    def job_type_name(self, obj: Job) -> str:
        # The key itself: no join to job definitions for a changelist column.
        return obj.job_type_id

    @admin.display(description="promoted from")
    def promoted_from_intents(self, obj: Job) -> str:
        url = reverse(
            "admin:runledger_jobenqueueintent_changelist", current_app=self.admin_site.name
        )
        return format_html(
            '<a class="runledger-job-intents-link" href="{}?promoted_job={}">'
            "Enqueue intents promoted to this job</a>",
            url,
            obj.id,
        )


class JobDefinitionForm(DefinitionFormBase):
    class Meta:
        model = JobDefinition
        fields = (
            "job_type",
            "is_enabled",
            "max_attempts",
            "default_timeout_seconds",
            "default_priority",
            "version",
        )
        widgets: ClassVar[dict[str, forms.Widget]] = {
            "job_type": forms.TextInput(attrs={"size": 60})
        }

    def clean_job_type(self) -> str:
        try:
            return validate_job_type(self.cleaned_data["job_type"])
        except RunledgerError as error:
            raise forms.ValidationError(error.client_message, code=error.code) from None

    def _positive(self, name: str) -> int:
        value: int = self.cleaned_data[name]
        if value is not None and value < 1:
            raise forms.ValidationError("Must be at least 1.", code="min_value")
        return value

    def clean_max_attempts(self) -> int:
        return self._positive("max_attempts")

    def clean_default_timeout_seconds(self) -> int:
        return self._positive("default_timeout_seconds")

    def clean_version(self) -> int:
        return self._positive("version")


@admin.register(JobDefinition)
class JobDefinitionAdmin(DefinitionAdminBase):
    form = JobDefinitionForm
    list_display = (
        "job_type",
        "is_enabled",
        "max_attempts",
        "default_timeout_seconds",
        "default_priority",
        "version",
        "updated_at",
    )
    list_editable = ("is_enabled",)
    list_filter = ("is_enabled",)
    search_fields = ("job_type",)
    actions = None

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # The job type is the primary key: changing it would create a second definition.
        return ("job_type", "created_at", "updated_at") if obj else ()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Jobs reference their definition (ON DELETE RESTRICT): disable those instead."""
        if not super().has_delete_permission(request, obj):
            return False
        return obj is None or not Job.objects.filter(job_type=obj).exists()
