"""The job definitions' admin: the one editable table (enable, disable, tune defaults)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from ..errors import CATALOG, Code, RunledgerError
from ..models import Job, JobDefinition, JobSchedule
from ..validation import validate_job_type

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

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> Any:
        kwargs.setdefault("form", DisableGuardForm)
        return super().get_changelist_form(request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # The job type is the primary key: changing it would create a second definition.
        return ("job_type", "created_at", "updated_at") if obj else ()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Jobs reference their definition (ON DELETE RESTRICT): disable those instead."""
        if not super().has_delete_permission(request, obj):
            return False
        return obj is None or not Job.objects.filter(job_type=obj).exists()
