"""The schedules' admin: the timing in words, the next fire in UTC and in the schedule's zone,
the last fire and its job, paused or active, failures; actions pause, resume and run now;
editing (and adding) runtime schedules through the same validation as ``save_schedule``.

Every write goes through ``services.schedules``: the form's ``clean`` runs ``build_spec``, so
the admin refuses exactly what the API refuses, with the same codes. A schedule declared in
code shows its declared fields read-only (a deploy would undo an edit): an operator pauses,
resumes, runs or retimes it. Each action is recorded in Django's admin log.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import ShowFacets
from django.contrib.admin.widgets import AdminSplitDateTime
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from ..domain import CatchUp, Overlap
from ..errors import Code, RunledgerError
from ..models import JobSchedule, ScheduleFire
from ..services.schedules import (
    build_spec,
    delete_schedule,
    describe,
    pause_schedule,
    resume_schedule,
    retime_schedule,
    save_schedule,
    trigger_schedule,
)
from ..services.schedules.timing import zone
from .shared import BoundedCountPaginator, JobTypeFilter, admin_link

if TYPE_CHECKING:
    ScheduleAdminBase = admin.ModelAdmin[JobSchedule]
    ScheduleFormBase = forms.ModelForm[JobSchedule]
else:
    ScheduleAdminBase = admin.ModelAdmin
    ScheduleFormBase = forms.ModelForm

RECENT_FIRES = 10
ACTION_LIMIT = 500
FIELD_OF_CODE = {
    Code.SCHEDULE_INVALID_NAME: "name",
    Code.SCHEDULE_INVALID_TARGET: "target",
    Code.SCHEDULE_INVALID_CRON: "cron_expr",
    Code.SCHEDULE_INVALID_INTERVAL: "interval_seconds",
    Code.SCHEDULE_INVALID_TIMEZONE: "timezone",
    Code.SCHEDULE_INVALID_PAYLOAD: "payload_template",
    Code.SCHEDULE_INVALID_ORGANIZATION_ID: "organization_id",
    Code.SCHEDULE_INVALID_PRIORITY: "priority",
    Code.SCHEDULE_INVALID_JITTER: "max_jitter_seconds",
    Code.SCHEDULE_INVALID_CATCH_UP: "catch_up",
    Code.SCHEDULE_INVALID_OVERLAP: "overlap",
}
"""Which form field a validation code belongs to (the rest go to the form as a whole)."""


class ScheduleForm(ScheduleFormBase):
    """The schedule's fields as ``save_schedule`` takes them, checked by ``build_spec``."""

    target = forms.CharField(
        label="Job type",
        max_length=255,
        help_text="The job type each fire enqueues (its definition must exist).",
    )
    retime = forms.SplitDateTimeField(
        required=False,
        widget=AdminSplitDateTime,
        label="Move the next fire to",
        help_text="Optional: the cursor's new time (a fire already in the ledger never runs "
        "again).",
    )

    class Meta:
        model = JobSchedule
        fields = (
            "name",
            "cron_expr",
            "interval_seconds",
            "timezone",
            "payload_template",
            "organization_id",
            "priority",
            "max_jitter_seconds",
            "catch_up",
            "catch_up_grace_seconds",
            "catch_up_limit",
            "overlap",
            "is_active",
        )
        labels: ClassVar[dict[str, str]] = {
            "cron_expr": "Cron",
            "interval_seconds": "Every (seconds)",
            "max_jitter_seconds": "Jitter (seconds, at most)",
            "is_active": "Enabled",
        }
        help_texts: ClassVar[dict[str, str]] = {
            "cron_expr": "5 fields, or 6 with seconds first, or @hourly, @daily, ...; read as "
            "wall time in the zone. Leave empty for an interval.",
            "interval_seconds": "Fires every N seconds, anchored to the Unix epoch. Leave empty "
            "for a cron.",
            "timezone": "An IANA zone name, such as Europe/Berlin.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and self.instance.declared:
            self.fields.pop("target", None)  # read-only: the code owns it
        elif self.instance.pk and "target" in self.fields:
            self.fields["target"].initial = self.instance.job_type_id
        for name in ("cron_expr", "interval_seconds", "payload_template", "organization_id"):
            if name in self.fields:
                self.fields[name].required = False

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.instance.pk and self.instance.declared:
            return data  # declared fields are read-only; only a retime is taken
        try:
            self.spec = build_spec(
                data.get("name", self.instance.name),
                data.get("target"),
                cron=data.get("cron_expr") or None,
                every=data.get("interval_seconds"),
                timezone=data.get("timezone") or "UTC",
                payload=data.get("payload_template"),
                organization_id=data.get("organization_id"),
                priority=data.get("priority"),
                jitter=data.get("max_jitter_seconds") or 0,
                catch_up=data.get("catch_up") or CatchUp.LATEST,
                catch_up_grace=data.get("catch_up_grace_seconds") or 60,
                catch_up_limit=data.get("catch_up_limit") or 100,
                overlap=data.get("overlap") or Overlap.ALLOW,
                enabled=bool(data.get("is_active")),
            )
        except RunledgerError as error:
            field = FIELD_OF_CODE.get(Code(error.code))
            self.add_error(
                field if field in self.fields else None,
                forms.ValidationError(error.client_message, code=error.code),
            )
        return data


DECLARED_FIELDS = ("name", "job_type", *ScheduleForm.Meta.fields[1:])
"""What the code owns in a declared schedule: read-only here."""


@admin.register(JobSchedule)
class JobScheduleAdmin(ScheduleAdminBase):
    form = ScheduleForm
    paginator = BoundedCountPaginator
    show_full_result_count = False
    show_facets = ShowFacets.NEVER
    list_per_page = 100
    list_display = (
        "name",
        "job_type_id",
        "organization_id",
        "timing",
        "timezone",
        "next_fire_utc",
        "next_fire_local",
        "last_fire",
        "state",
        "failures",
        "skipped_and_coalesced",
    )
    list_filter = (
        "is_active",
        "declared",
        ("paused_at", admin.EmptyFieldListFilter),
        JobTypeFilter,
    )
    search_fields = ("name",)
    search_help_text = "A schedule name, or part of it."
    ordering = ("name",)
    sortable_by = ("name",)
    actions = ("pause_selected", "resume_selected", "run_selected_now")
    readonly_fields = (
        "timing",
        "next_fire_utc",
        "next_fire_local",
        "last_fire",
        "state",
        "failures",
        "skipped_and_coalesced",
        "recent_fires",
        "declared",
        "created_at",
        "updated_at",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        editable = ["name", "target", *ScheduleForm.Meta.fields[1:], "retime"]
        shown = ["timing", "next_fire_utc", "next_fire_local", "last_fire", "state", "failures"]
        if obj is None:
            return editable[:-1]
        return [*editable, *shown, "skipped_and_coalesced", "recent_fires", "declared"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is not None and obj.declared:
            return (*DECLARED_FIELDS, *self.readonly_fields)
        return self.readonly_fields

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(self.get_fields(request, obj))
        if obj is not None and obj.declared:
            fields = ["job_type" if name == "target" else name for name in fields]
        return [(None, {"fields": fields})]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """A declared schedule is removed from the code (the sync then deactivates it)."""
        if not super().has_delete_permission(request, obj):
            return False
        return obj is None or not obj.declared

    # --- columns ----------------------------------------------------------------------------

    @admin.display(description="timing")
    def timing(self, obj: JobSchedule) -> str:
        jitter = f", jitter up to {obj.max_jitter_seconds} s" if obj.max_jitter_seconds else ""
        written = obj.cron_expr or f"every {obj.interval_seconds} s"
        return f"{describe(obj)} ({written}{jitter})"

    @admin.display(description="next fire (UTC)")
    def next_fire_utc(self, obj: JobSchedule) -> str:
        return obj.next_fire_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    @admin.display(description="next fire (its zone)")
    def next_fire_local(self, obj: JobSchedule) -> str:
        try:
            local = obj.next_fire_at.astimezone(zone(obj.timezone))
        except (ValueError, KeyError, OSError):
            return "-"
        return local.strftime("%Y-%m-%d %H:%M:%S %Z")

    @admin.display(description="last fire")
    def last_fire(self, obj: JobSchedule) -> str:
        if obj.last_scheduled_for is None:
            return "-"
        when = obj.last_scheduled_for.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if obj.last_job_id is None:
            return when
        link = admin_link(self.admin_site, "runledger_job_change", obj.last_job_id, "job")
        return format_html("{} (job {})", when, link)

    @admin.display(description="state")
    def state(self, obj: JobSchedule) -> str:
        if obj.paused_at is not None:
            return f"paused since {obj.paused_at:%Y-%m-%d %H:%M} UTC"
        return "active" if obj.is_active else "inactive"

    @admin.display(description="failures")
    def failures(self, obj: JobSchedule) -> str:
        if not obj.consecutive_failures:
            return "-"
        return f"{obj.consecutive_failures} in a row ({obj.last_error_code})"

    @admin.display(description="skipped / coalesced")
    def skipped_and_coalesced(self, obj: JobSchedule) -> str:
        return f"{obj.skip_count} / {obj.coalesced_count}"

    @admin.display(description=f"last {RECENT_FIRES} fires")
    def recent_fires(self, obj: JobSchedule) -> str:
        fires = list(
            ScheduleFire.objects.filter(schedule=obj).order_by("-created_at")[:RECENT_FIRES]
        )
        if not fires:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    fire.scheduled_for.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S"),
                    fire.kind,
                    fire.outcome,
                    format_html(
                        admin_link(self.admin_site, "runledger_job_change", fire.job_id, "job")
                    )
                    if fire.job_id
                    else "-",
                    fire.error_code or "",
                )
                for fire in fires
            ),
        )
        return format_html(
            "<table><tr><th>scheduled for (UTC)</th><th>kind</th><th>outcome</th><th>job</th>"
            "<th>error</th></tr>{}</table>",
            rows,
        )

    # --- writes through the services --------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: JobSchedule, form: Any, change: bool) -> None:
        retime = form.cleaned_data.get("retime")
        if not obj.declared or not change:
            spec = form.spec
            saved = save_schedule(
                spec.name,
                spec.job_type,
                cron=spec.cron,
                every=spec.interval_seconds,
                timezone=spec.timezone,
                payload=json.loads(spec.payload_json),
                organization_id=spec.organization_id,
                priority=spec.priority,
                jitter=spec.jitter_seconds,
                catch_up=spec.catch_up,
                catch_up_grace=spec.catch_up_grace_seconds,
                catch_up_limit=spec.catch_up_limit,
                overlap=spec.overlap,
                enabled=spec.enabled,
            )
            obj.pk = saved.pk
        if retime is not None:
            retime_schedule(obj.name, retime)

    def delete_model(self, request: HttpRequest, obj: JobSchedule) -> None:
        delete_schedule(obj.name)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[JobSchedule]) -> None:
        for name in queryset.values_list("name", flat=True)[:ACTION_LIMIT]:
            delete_schedule(name)

    def _each(
        self, request: HttpRequest, queryset: QuerySet[JobSchedule], verb: str, action: Any
    ) -> None:
        done = 0
        refused: dict[str, int] = {}
        for schedule in queryset.order_by("name")[:ACTION_LIMIT]:
            try:
                action(schedule.name)
            except RunledgerError as error:
                refused[error.client_message] = refused.get(error.client_message, 0) + 1
                continue
            done += 1
            self.log_change(request, schedule, f"{verb} (admin action)")
        if done:
            self.message_user(request, f"{verb.capitalize()}: {done} schedules.", messages.SUCCESS)
        for reason, count in sorted(refused.items()):
            self.message_user(request, f"{count} not {verb}: {reason}", messages.WARNING)

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[JobSchedule]) -> None:
        self._each(request, queryset, "paused", pause_schedule)

    @admin.action(description="Resume the selected schedules", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[JobSchedule]) -> None:
        self._each(request, queryset, "resumed", resume_schedule)

    @admin.action(description="Run the selected schedules now", permissions=["change"])
    def run_selected_now(self, request: HttpRequest, queryset: QuerySet[JobSchedule]) -> None:
        self._each(request, queryset, "run now", trigger_schedule)
