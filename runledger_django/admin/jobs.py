"""The jobs' admin: the changelist and a job's page with its attempts and events, the cancel
and requeue actions (which call the services ``cancel_job`` and ``requeue_job`` and need
permissions of their own), the replay of a succeeded job from its page (``replay_job``,
behind its own permission too), and the dead letters' entry on the admin index.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..domain import JobStatus, ReadScope
from ..errors import Code, RunledgerError
from ..models import DeadLetter, Job, JobAttempt, JobEvent
from ..services.job_control import cancel_job, requeue_job
from ..services.job_metrics import job_metrics
from ..services.replay import replay_job
from ..services.search import job_ids_by_key
from .metrics import JOB_METRICS_URL_NAME, metrics_page
from .shared import (
    AdminIndexEntry,
    JobTypeFilter,
    LargeTableAdmin,
    ReadOnlyMixin,
    json_block,
    report_action,
    selected_ids,
)

if TYPE_CHECKING:
    EventInlineBase = admin.TabularInline[JobEvent, Job]
    AttemptInlineBase = admin.TabularInline[JobAttempt, Job]
else:
    EventInlineBase = AttemptInlineBase = admin.TabularInline

JOB_CANCEL_URL_NAME = "runledger_job_cancel"
JOB_REQUEUE_URL_NAME = "runledger_job_requeue"
JOB_REPLAY_URL_NAME = "runledger_job_replay"
REPLAY_REASON_MAX_CHARS = 500

EVENTS_SHOWN = 100
"""Newest events a job page shows inline; heartbeats can make the full trail very long."""
ATTEMPTS_SHOWN = 100
"""Newest attempts a job page shows inline (requeues start new runs, so they can add up)."""
ACTION_LIMIT = 1000
"""Most jobs one cancel or requeue action acts on; each is its own short transaction."""
DEAD_LETTER_FILTER = f"status__exact={JobStatus.DEAD_LETTERED}"
"""The job changelist's query string for the dead letters."""


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


_REPLAY_ERRORS: dict[str, str] = {
    Code.INVALID_STATE_TRANSITION: "only a succeeded job can be replayed",
    Code.REPLAY_EXPECTATION_MISMATCH: "the job changed since the page was shown",
    Code.REPLAY_REASON_BLANK: "give a reason",
    Code.NOT_FOUND: "the job is gone",
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

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return self._has_job_permission(request, "replay_job")

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
        return json_block(getattr(obj, "payload_text", None), "runledger-job-payload")

    @admin.display(description="output")
    def output_json(self, obj: Job) -> SafeString | str:
        return json_block(getattr(obj, "output_text", None), "runledger-job-output")

    @admin.display(description="checkpoint")
    def checkpoint_json(self, obj: Job) -> SafeString | str:
        return json_block(getattr(obj, "checkpoint_text", None), "runledger-job-checkpoint")

    @admin.display(description="canonical request")
    def enqueue_request_json(self, obj: Job) -> SafeString | str:
        return json_block(getattr(obj, "enqueue_request_text", None), "runledger-canonical-request")

    # --- cancel and requeue ----------------------------------------------------------------

    @admin.action(description="Cancel the selected jobs", permissions=["cancel"])
    def cancel_selected_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._act_on_selection(request, queryset, "cancel")

    @admin.action(description="Requeue the selected jobs", permissions=["requeue"])
    def requeue_selected_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._act_on_selection(request, queryset, "requeue")

    def _act_on_selection(self, request: HttpRequest, queryset: QuerySet[Job], name: str) -> None:
        job_ids = selected_ids(self, request, queryset, limit=ACTION_LIMIT, noun="job", action=name)
        if job_ids is not None:
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
        report_action(self, request, noun="job", past=past, done=done, refused=refused)
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
            path(
                "<uuid:object_id>/replay/",
                self.admin_site.admin_view(self.replay_view),
                name=JOB_REPLAY_URL_NAME,
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

    def replay_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        """The Replay button of a succeeded job's page: POST only, with its own permission.

        The form carries a request key made when the page was rendered, so submitting the same
        form twice (a double click, a browser retry) makes one replay; the run number the page
        showed guards against replaying a job that moved on since. On success the replay's
        page opens; otherwise the job's page again, with the reason.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not (self.has_view_permission(request) and self.has_replay_permission(request)):
            raise PermissionDenied
        reason = str(request.POST.get("reason", "")).strip()[:REPLAY_REASON_MAX_CHARS]
        key = str(request.POST.get("request_key", "")).strip() or f"admin:{uuid.uuid4()}"
        observed = str(request.POST.get("run_number", ""))
        try:
            outcome = replay_job(
                object_id,
                scope=ReadScope.ADMIN,
                reason=reason,
                request_key=key,
                expected_run_number=int(observed) if observed.isdigit() else None,
            )
        except RunledgerError as error:
            message = _REPLAY_ERRORS.get(error.code, error.client_message)
            self.message_user(request, f"The job was not replayed: {message}.", messages.ERROR)
            return self._job_page(object_id)
        verb = "Replayed" if outcome.disposition == "inserted" else "Already replayed"
        self.message_user(
            request,
            format_html(
                '{} job <a href="{}">{}</a> as this new job.',
                verb,
                reverse(
                    "admin:runledger_job_change",
                    args=(object_id,),
                    current_app=self.admin_site.name,
                ),
                object_id,
            ),
            messages.SUCCESS,
        )
        return self._job_page(outcome.job_id)

    def _job_page(self, job_id: uuid.UUID) -> HttpResponse:
        return HttpResponseRedirect(
            reverse("admin:runledger_job_change", args=(job_id,), current_app=self.admin_site.name)
        )

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
            if obj.status == JobStatus.SUCCEEDED and self.has_replay_permission(request):
                context["runledger_may_replay"] = True
                context["runledger_replay_key"] = f"admin:{uuid.uuid4()}"
        return super().render_change_form(request, context, add, change, form_url, obj)


@admin.register(DeadLetter)
class DeadLetterAdmin(AdminIndexEntry):
    """Puts "Dead letters" on the admin index: the job list filtered to DEAD_LETTERED, where
    they can be requeued."""

    viewed_model = Job

    def target_url(self) -> str:
        url = reverse("admin:runledger_job_changelist", current_app=self.admin_site.name)
        return f"{url}?{DEAD_LETTER_FILTER}"
