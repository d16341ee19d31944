"""The job definitions' admin: the one editable table (enable, disable, tune defaults and
limits), with the pause and resume actions (``pause_job_type``, ``resume_job_type``), each
behind a permission of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ..domain import JobTypeControl
from ..errors import CATALOG, Code, RunledgerError
from ..models import Job, JobDefinition, JobSchedule
from ..services.queue_control import pause_job_type, resume_job_type
from ..validation import validate_job_type

ACTION_LIMIT = 100
"""Job types one pause or resume may change (each is its own statement)."""

if TYPE_CHECKING:
    DefinitionAdminBase = admin.ModelAdmin[JobDefinition]
    DefinitionFormBase = forms.ModelForm[JobDefinition]
else:
    DefinitionAdminBase = admin.ModelAdmin
    DefinitionFormBase = forms.ModelForm


class DisableGuardForm(DefinitionFormBase):
    """Refuses to disable a definition an active schedule uses, with the guard's code, before
    the database trigger would (migration 0010); the changelist's inline edit uses it too."""

    class Meta:
        model = JobDefinition
        fields = ("is_enabled",)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        instance = self.instance
        disabling = instance.pk and instance.is_enabled is not False and not data.get("is_enabled")
        if disabling and "is_enabled" in data:
            active = JobSchedule.objects.filter(
                job_type_id=instance.pk, is_active=True, paused_at__isnull=True
            )
            if active.exists():
                code = Code.DEFINITION_ACTIVE_SCHEDULE_EXISTS
                raise forms.ValidationError(CATALOG[code][1], code=code.value)
        return data


class JobDefinitionForm(DisableGuardForm):
    class Meta:
        model = JobDefinition
        fields = (
            "job_type",
            "is_enabled",
            "max_attempts",
            "default_timeout_seconds",
            "default_priority",
            "version",
            "max_concurrency",
            "rate_limit_count",
            "rate_limit_period_seconds",
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

    def clean_max_concurrency(self) -> int:
        return self._positive("max_concurrency")

    def clean_rate_limit_count(self) -> int:
        return self._positive("rate_limit_count")

    def clean_rate_limit_period_seconds(self) -> int:
        return self._positive("rate_limit_period_seconds")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        count, period = data.get("rate_limit_count"), data.get("rate_limit_period_seconds")
        if (count is None) != (period is None) and not self.errors:
            code = Code.DEFINITION_INVALID_LIMIT
            raise forms.ValidationError(
                "Set both the rate limit count and its period, or neither.", code=code.value
            )
        return data


@admin.register(JobDefinition)
class JobDefinitionAdmin(DefinitionAdminBase):
    form = JobDefinitionForm
    list_display = (
        "job_type",
        "is_enabled",
        "paused",
        "max_attempts",
        "default_timeout_seconds",
        "default_priority",
        "limits",
        "version",
        "updated_at",
    )
    list_editable = ("is_enabled",)
    list_filter = ("is_enabled", ("paused_at", admin.EmptyFieldListFilter))
    search_fields = ("job_type",)
    actions = ("pause_selected_types", "resume_selected_types")

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("form", DisableGuardForm)
        return super().get_changelist_form(request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # The job type is the primary key: changing it would create a second definition. The
        # pause is changed by the actions only (its time, reason and actor go together).
        if obj:
            return (
                "job_type",
                "paused_at",
                "paused_reason",
                "paused_by",
                "created_at",
                "updated_at",
            )
        return ()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Jobs reference their definition (ON DELETE RESTRICT): disable those instead."""
        if not super().has_delete_permission(request, obj):
            return False
        return obj is None or not Job.objects.filter(job_type=obj).exists()

    # --- the pause (custom model permissions, not "change") -----------------------------------

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.pause_jobdefinition")

    def has_resume_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.resume_jobdefinition")

    @admin.display(description="paused", boolean=True, ordering="paused_at")
    def paused(self, obj: JobDefinition) -> bool:
        return obj.paused_at is not None

    @admin.display(description="limits")
    def limits(self, obj: JobDefinition) -> str:
        parts = []
        if obj.max_concurrency is not None:
            parts.append(f"at most {obj.max_concurrency} running")
        if obj.rate_limit_count is not None:
            parts.append(f"{obj.rate_limit_count} starts per {obj.rate_limit_period_seconds} s")
        return ", ".join(parts) or "-"

    @admin.action(description="Pause the selected job types", permissions=["pause"])
    def pause_selected_types(self, request: HttpRequest, queryset: QuerySet[JobDefinition]) -> None:
        actor = request.user.get_username()[:500] or None
        self._act(
            request, queryset, "paused", lambda job_type: pause_job_type(job_type, actor=actor)
        )

    @admin.action(description="Resume the selected job types", permissions=["resume"])
    def resume_selected_types(
        self, request: HttpRequest, queryset: QuerySet[JobDefinition]
    ) -> None:
        self._act(request, queryset, "resumed", resume_job_type)

    def _act(
        self,
        request: HttpRequest,
        queryset: QuerySet[JobDefinition],
        past: str,
        service: Callable[[str], JobTypeControl],
    ) -> None:
        types = list(queryset.order_by("job_type").values_list("pk", flat=True)[: ACTION_LIMIT + 1])
        if len(types) > ACTION_LIMIT:
            self.message_user(
                request,
                f"Select at most {ACTION_LIMIT} job types at once; nothing was changed.",
                messages.ERROR,
            )
            return
        changed = unchanged = 0
        for job_type in types:
            try:
                control = service(job_type)
            except RunledgerError as error:
                self.message_user(request, f"{job_type}: {error.client_message}", messages.WARNING)
                continue
            changed += control.changed
            unchanged += not control.changed
        if changed:
            noun = "job type" if changed == 1 else "job types"
            self.message_user(request, f"{past.capitalize()} {changed} {noun}.", messages.SUCCESS)
        if unchanged:
            noun = "job type was" if unchanged == 1 else "job types were"
            self.message_user(request, f"{unchanged} {noun} {past} already.", messages.INFO)
