"""The Django admin: read-only intents and jobs, editable job definitions, metrics pages.

The intent and job tables grow to millions of rows, so their changelists never count them in
full (a bounded count instead), filter on values that have indexes, offer no facets, and sort
only by the indexed creation order. Permissions are Django's model permissions. Nothing here
writes an intent or a job directly: the two job actions, cancel and requeue, call the services
(``cancel_job``, ``requeue_job``) and need permissions of their own.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import django
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import ShowFacets
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .domain import PAGE_LIMIT_MAX, JobStatus, ReadScope
from .errors import Code, RunledgerError
from .models import (
    DeadLetter,
    IntentMetricsPage,
    Job,
    JobAttempt,
    JobDefinition,
    JobEnqueueIntent,
    JobEvent,
    JobMetricsPage,
)
from .services.job_control import cancel_job, requeue_job
from .services.job_metrics import job_metrics
from .services.metrics import intent_metrics
from .services.search import intent_ids_by_key, job_ids_by_key
from .validation import validate_job_type

if TYPE_CHECKING:
    LargeTableAdminBase = admin.ModelAdmin[Any]
    DefinitionAdminBase = admin.ModelAdmin[JobDefinition]
    EntryAdminBase = admin.ModelAdmin[Any]
    EventInlineBase = admin.TabularInline[JobEvent, Job]
    AttemptInlineBase = admin.TabularInline[JobAttempt, Job]
    DefinitionFormBase = forms.ModelForm[JobDefinition]
    PaginatorBase = Paginator[Any]
else:
    LargeTableAdminBase = DefinitionAdminBase = EntryAdminBase = admin.ModelAdmin
    EventInlineBase = AttemptInlineBase = admin.TabularInline
    DefinitionFormBase = forms.ModelForm
    PaginatorBase = Paginator

METRICS_URL_NAME = "runledger_intent_metrics"
"""``admin:runledger_intent_metrics``: the per-job-type intent metrics page."""
JOB_METRICS_URL_NAME = "runledger_job_metrics"
"""``admin:runledger_job_metrics``: the per-job-type job metrics page."""
JOB_CANCEL_URL_NAME = "runledger_job_cancel"
JOB_REQUEUE_URL_NAME = "runledger_job_requeue"

EVENTS_SHOWN = 100
"""Newest events a job page shows inline; heartbeats can make the full trail very long."""
ATTEMPTS_SHOWN = 100
"""Newest attempts a job page shows inline (requeues start new runs, so they can add up)."""
ACTION_LIMIT = 1000
"""Most jobs one cancel or requeue action acts on; each is its own short transaction."""
DEAD_LETTER_FILTER = f"status__exact={JobStatus.DEAD_LETTERED}"
"""The job changelist's query string for the dead letters."""


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
    actions: Sequence[Any] | None = None
    list_per_page = 100
    # Only here to make Django render the search box; get_search_results does the matching.
    search_fields = ("=idempotency_key",)
    search_help_text = "An exact idempotency key, or an exact id (UUID)."
    json_columns: tuple[str, ...] = ()
    """JSON columns, never decoded by Django: a changelist row does not show them, and a detail
    page shows their text (``<column>_text``). jsonb keeps integers Python refuses to parse
    (past its int-to-str digit limit); decoding one would make the whole page fail."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request).defer(*self.json_columns)
        match = request.resolver_match
        if match is not None and match.url_name and match.url_name.endswith("_changelist"):
            return queryset
        texts = {f"{name}_text": Cast(name, output_field=TextField()) for name in self.json_columns}
        annotated: QuerySet[Any] = queryset.annotate(**texts)
        return annotated

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

    def ids_by_key(self, key: str) -> list[uuid.UUID]:
        """The ids of the rows recorded under ``key`` (each table's own search service)."""
        raise NotImplementedError

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """Exact matches only: ``icontains`` over millions of rows would scan them all.

        The key is looked up first, through the table's key-prefix index, whatever the job
        type and tenant; the changelist then reads the few rows found by primary key. (One
        query with the key as a subquery would let the planner walk the creation-order index
        to the end, testing every row against it.)"""
        term = search_term.strip()
        if not term:
            return queryset, False
        condition = Q(pk__in=self.ids_by_key(term))
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
    def canonical_request(self, obj: JobEnqueueIntent) -> SafeString | str:
        return _json_block(
            getattr(obj, "enqueue_request_text", None), "runledger-canonical-request"
        )

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


def metrics_page(
    model_admin: LargeTableAdmin,
    request: HttpRequest,
    *,
    title: str,
    template: str,
    read: Callable[..., list[Any]],
) -> TemplateResponse:
    """A metrics page: the scope and job type form, and the rows ``read`` returns for them."""
    form = MetricsFilterForm(request.GET or None)
    rows: list[Any] = []
    if not form.is_bound or form.is_valid():
        scope, job_type = form.selection()
        try:
            rows = read(scope=scope, job_type=job_type, limit=PAGE_LIMIT_MAX)
        except RunledgerError as error:
            form.add_error("job_type", error.client_message)
    site = model_admin.admin_site
    opts = model_admin.opts
    context = {
        **site.each_context(request),
        "title": title,
        "opts": opts,
        "form": form,
        "rows": rows,
        "row_limit": PAGE_LIMIT_MAX,
        "changelist_url": reverse(
            f"admin:{opts.app_label}_{opts.model_name}_changelist", current_app=site.name
        ),
        # Django 6.0 turned the admin's breadcrumbs into a list with its own CSS.
        "breadcrumbs_as_list": django.VERSION >= (6, 0),
    }
    return TemplateResponse(request, template, context)


class AdminIndexEntry(ReadOnlyMixin, EntryAdminBase):
    """An entry on the admin index (a proxy model) whose "changelist" is another page.

    It has no permissions of its own: whoever may view ``viewed_model`` sees the entry.
    """

    viewed_model: ClassVar[type[Any]]

    def _may_view(self, request: HttpRequest) -> bool:
        opts = self.viewed_model._meta
        return request.user.has_perm(f"{opts.app_label}.view_{opts.model_name}")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._may_view(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may_view(request)

    def target_url(self) -> str:
        raise NotImplementedError

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self._may_view(request):
            raise PermissionDenied
        return HttpResponseRedirect(self.target_url())


@admin.register(IntentMetricsPage)
class IntentMetricsPageAdmin(AdminIndexEntry):
    """Puts "Intent metrics" on the admin index; its changelist is the metrics page."""

    viewed_model = JobEnqueueIntent

    def target_url(self) -> str:
        return reverse(f"admin:{METRICS_URL_NAME}", current_app=self.admin_site.name)


@admin.register(JobMetricsPage)
class JobMetricsPageAdmin(AdminIndexEntry):
    """Puts "Job metrics" on the admin index; its changelist is the job metrics page."""

    viewed_model = Job

    def target_url(self) -> str:
        return reverse(f"admin:{JOB_METRICS_URL_NAME}", current_app=self.admin_site.name)


@admin.register(DeadLetter)
class DeadLetterAdmin(AdminIndexEntry):
    """Puts "Dead letters" on the admin index: the job list filtered to DEAD_LETTERED, where
    they can be requeued."""

    viewed_model = Job

    def target_url(self) -> str:
        url = reverse("admin:runledger_job_changelist", current_app=self.admin_site.name)
        return f"{url}?{DEAD_LETTER_FILTER}"


class MetricsFilterForm(forms.Form):
    """A metrics page's scope: every row (admin), rows without an organization, or one org."""

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


def _json_block(text: str | None, css_class: str) -> SafeString | str:
    """A column's JSON text, pretty, in a ``<pre>``; ``-`` for SQL NULL (a JSON ``null`` shows
    as ``null``). Text Python cannot parse (an integer past its int-to-str digit limit) is
    shown as PostgreSQL wrote it, with a note, rather than failing the page."""
    if text is None:
        return "-"
    try:
        pretty = json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False)
    except ValueError:
        return format_html(
            '<pre class="{}">{}</pre><p class="runledger-undecodable">'
            "Python cannot read this value (an integer longer than it parses); shown as "
            "stored.</p>",
            css_class,
            text,
        )
    return format_html('<pre class="{}">{}</pre>', css_class, pretty)


def _object_id(request: HttpRequest) -> uuid.UUID | None:
    """The job id of the change page an inline renders on, or None."""
    match = request.resolver_match
    object_id = match.kwargs.get("object_id") if match else None
    try:
        return uuid.UUID(str(object_id))
    except ValueError:
        return None


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
        "event_payload",
        "occurred_at",
    )
    readonly_fields = fields
    ordering = ("-id",)
    extra = 0
    can_delete = False
    show_change_link = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobEvent]:
        queryset = super().get_queryset(request)
        job_id = _object_id(request)
        if job_id is None:
            return queryset.none()
        newest = JobEvent.objects.filter(job_id=job_id).order_by("-id").values("id")
        return queryset.filter(id__in=newest[:EVENTS_SHOWN])

    @admin.display(description="details")
    def event_payload(self, obj: JobEvent) -> str:
        if not obj.payload:
            return "-"
        return json.dumps(obj.payload, sort_keys=True, ensure_ascii=False)


class JobAttemptInline(ReadOnlyMixin, AttemptInlineBase):
    """Every lease of the job, newest first: who ran it, when, and how it ended."""

    model = JobAttempt
    verbose_name_plural = f"attempts (newest {ATTEMPTS_SHOWN})"
    fields = (
        "run_number",
        "attempt",
        "outcome",
        "failure_kind",
        "error_code",
        "error_message",
        "error_details",
        "worker_id",
        "leased_at",
        "finished_at",
    )
    readonly_fields = fields
    ordering = ("-run_number", "-attempt")
    extra = 0
    can_delete = False
    show_change_link = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[JobAttempt]:
        queryset = super().get_queryset(request)
        job_id = _object_id(request)
        if job_id is None:
            return queryset.none()
        newest = (
            JobAttempt.objects.filter(job_id=job_id)
            .order_by("-run_number", "-attempt")
            .values("id")
        )
        return queryset.filter(id__in=newest[:ATTEMPTS_SHOWN])

    @admin.display(description="exception")
    def error_details(self, obj: JobAttempt) -> SafeString | str:
        """The exception class, with its traceback folded away."""
        if not obj.error_class:
            return "-"
        if not obj.error_traceback:
            return obj.error_class
        return format_html(
            '<details class="runledger-traceback"><summary>{}</summary><pre>{}</pre></details>',
            obj.error_class,
            obj.error_traceback,
        )


# Several fields a line: a job page has many short values, and its attempts and events below
# are what an operator came for.
_JOB_IDENTITY: tuple[str | tuple[str, ...], ...] = (
    "id",
    ("job_type_name", "organization_id"),
    ("status", "stage", "status_reason"),
    ("idempotency_key", "execution_resource_key"),
    "promoted_from_intents",
)
_JOB_SCHEDULE: tuple[str | tuple[str, ...], ...] = (
    ("priority", "run_number", "attempt", "max_attempts", "timeout_seconds"),
    ("created_at", "next_run_at", "started_at", "finished_at", "updated_at"),
)
_JOB_LEASE: tuple[str | tuple[str, ...], ...] = (
    ("worker_id", "lease_expires_at", "last_heartbeat_at"),
)
_JOB_ERROR: tuple[str | tuple[str, ...], ...] = ("last_error_code", "last_error_message")
_JOB_DATA: tuple[str | tuple[str, ...], ...] = (
    "payload_json",
    "output_json",
    ("progress_done", "progress_total"),
    "checkpoint_json",
)
_JOB_REQUEST: tuple[str | tuple[str, ...], ...] = ("enqueue_request_json",)


def _flat(*groups: tuple[str | tuple[str, ...], ...]) -> tuple[str, ...]:
    return tuple(
        name
        for group in groups
        for line in group
        for name in ((line,) if isinstance(line, str) else line)
    )


# What each action needs, as (service, permission codename, past tense).
_JOB_ACTIONS: dict[str, tuple[Callable[..., JobStatus], str, str]] = {
    "cancel": (cancel_job, "cancel_job", "canceled"),
    "requeue": (requeue_job, "requeue_job", "requeued"),
}
_ACTION_ERRORS: dict[str, str] = {
    Code.INVALID_STATE_TRANSITION: "not in a state that allows it",
    Code.CANCELLATION_NOT_QUIESCED: "canceled while running, with a lease still live",
    Code.NOT_FOUND: "gone",
}


@admin.register(Job)
class JobAdmin(LargeTableAdmin):
    # What tells a job's story first (a narrow screen scrolls the table sideways).
    list_display = (
        "id",
        "job_type_name",
        "status",
        "attempts_used",
        "last_error_code",
        "next_run_at",
        "finished_at",
        "organization_id",
        "created_at",
    )
    list_filter = ("status", JobTypeFilter)
    json_columns = ("payload", "enqueue_request", "output", "checkpoint")
    inlines = (JobAttemptInline, JobEventInline)
    actions = ("cancel_selected_jobs", "requeue_selected_jobs")
    fieldsets = (
        (None, {"fields": _JOB_IDENTITY}),
        ("Schedule and attempts", {"fields": _JOB_SCHEDULE}),
        ("Lease", {"fields": _JOB_LEASE}),
        (
            "Last error",
            {
                "fields": _JOB_ERROR,
                "description": "The error of the latest failed attempt; each attempt below "
                "keeps its own.",
            },
        ),
        ("Payload, output and progress", {"fields": _JOB_DATA}),
        ("Canonical request", {"fields": _JOB_REQUEST, "classes": ("collapse",)}),
    )
    readonly_fields = _flat(
        _JOB_IDENTITY, _JOB_SCHEDULE, _JOB_LEASE, _JOB_ERROR, _JOB_DATA, _JOB_REQUEST
    )

    # --- permissions of the actions (custom model permissions, not "change") ------------------

    def _has_job_permission(self, request: HttpRequest, codename: str) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.{codename}")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return self._has_job_permission(request, "cancel_job")

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return self._has_job_permission(request, "requeue_job")

    # --- columns and fields ----------------------------------------------------------------

    def ids_by_key(self, key: str) -> list[uuid.UUID]:
        return job_ids_by_key(key)

    @admin.display(description="job type")
    def job_type_name(self, obj: Job) -> str:
        # The key itself: no join to job definitions for a changelist column.
        return obj.job_type_id

    @admin.display(description="attempts")
    def attempts_used(self, obj: Job) -> str:
        """Attempts of the current run, of the most it may use."""
        return f"{obj.attempt} of {obj.max_attempts}"

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

    @admin.display(description="payload")
    def payload_json(self, obj: Job) -> SafeString | str:
        return _json_block(getattr(obj, "payload_text", None), "runledger-job-payload")

    @admin.display(description="output")
    def output_json(self, obj: Job) -> SafeString | str:
        return _json_block(getattr(obj, "output_text", None), "runledger-job-output")

    @admin.display(description="checkpoint")
    def checkpoint_json(self, obj: Job) -> SafeString | str:
        return _json_block(getattr(obj, "checkpoint_text", None), "runledger-job-checkpoint")

    @admin.display(description="canonical request")
    def enqueue_request_json(self, obj: Job) -> SafeString | str:
        return _json_block(
            getattr(obj, "enqueue_request_text", None), "runledger-canonical-request"
        )

    # --- cancel and requeue ----------------------------------------------------------------

    @admin.action(description="Cancel the selected jobs", permissions=["cancel"])
    def cancel_selected_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._act_on_selection(request, queryset, "cancel")

    @admin.action(description="Requeue the selected jobs", permissions=["requeue"])
    def requeue_selected_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._act_on_selection(request, queryset, "requeue")

    def _act_on_selection(self, request: HttpRequest, queryset: QuerySet[Job], name: str) -> None:
        job_ids = list(queryset.order_by().values_list("pk", flat=True)[: ACTION_LIMIT + 1])
        if len(job_ids) > ACTION_LIMIT:
            self.message_user(
                request,
                f"Select at most {ACTION_LIMIT} jobs for one {name}; nothing was changed. "
                "Narrow the list with a filter first.",
                messages.ERROR,
            )
            return
        self._act(request, job_ids, name)

    def _act(self, request: HttpRequest, job_ids: list[uuid.UUID], name: str) -> int:
        """Run one action on each job, each in its own transaction; report what happened."""
        service, _, past = _JOB_ACTIONS[name]
        done = 0
        refused: Counter[str] = Counter()
        for job_id in job_ids:
            try:
                service(job_id, scope=ReadScope.ADMIN)
            except RunledgerError as error:
                refused[_ACTION_ERRORS.get(error.code, error.client_message)] += 1
            else:
                done += 1
        if done:
            noun = "job" if done == 1 else "jobs"
            self.message_user(request, f"{past.capitalize()} {done} {noun}.", messages.SUCCESS)
        for reason, count in sorted(refused.items()):
            noun = "job was" if count == 1 else "jobs were"
            self.message_user(request, f"{count} {noun} not {past}: {reason}.", messages.WARNING)
        return done

    def get_urls(self) -> list[URLPattern]:
        urls = [
            path(
                "metrics/",
                self.admin_site.admin_view(self.metrics_view),
                name=JOB_METRICS_URL_NAME,
            ),
            path(
                "<uuid:object_id>/cancel/",
                self.admin_site.admin_view(self.cancel_view),
                name=JOB_CANCEL_URL_NAME,
            ),
            path(
                "<uuid:object_id>/requeue/",
                self.admin_site.admin_view(self.requeue_view),
                name=JOB_REQUEUE_URL_NAME,
            ),
        ]
        return [*urls, *super().get_urls()]

    def metrics_view(self, request: HttpRequest) -> HttpResponse:
        """Per-job-type job metrics for anyone who may view jobs."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return metrics_page(
            self,
            request,
            title="Job metrics",
            template="admin/runledger/job_metrics.html",
            read=job_metrics,
        )

    def cancel_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        return self._single_action_view(request, object_id, "cancel")

    def requeue_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        return self._single_action_view(request, object_id, "requeue")

    def _single_action_view(
        self, request: HttpRequest, object_id: uuid.UUID, name: str
    ) -> HttpResponse:
        """The buttons of a job's page: POST only, with the action's own permission."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        _, codename, _ = _JOB_ACTIONS[name]
        if not (self.has_view_permission(request) and self._has_job_permission(request, codename)):
            raise PermissionDenied
        self._act(request, [object_id], name)
        return HttpResponseRedirect(
            reverse(
                "admin:runledger_job_change", args=(object_id,), current_app=self.admin_site.name
            )
        )

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        """Offer the cancel and requeue buttons the user may use and the job's state allows."""
        if obj is not None:
            context["runledger_may_cancel"] = obj.status in (
                JobStatus.PENDING,
                JobStatus.LEASED,
            ) and self.has_cancel_permission(request)
            context["runledger_may_requeue"] = obj.status in (
                JobStatus.DEAD_LETTERED,
                JobStatus.CANCELED,
            ) and self.has_requeue_permission(request)
        return super().render_change_form(request, context, add, change, form_url, obj)


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
