"""The metrics pages (intents and jobs): their filter form, the page itself, and their entries
on the admin index. The pages are served by the intent and job admins (their URL names below).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django
from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse

from ..domain import PAGE_LIMIT_MAX, ReadScope
from ..errors import RunledgerError
from ..models import IntentMetricsPage, Job, JobEnqueueIntent, JobMetricsPage
from .shared import AdminIndexEntry, LargeTableAdmin

METRICS_URL_NAME = "runledger_intent_metrics"
"""``admin:runledger_intent_metrics``: the per-job-type intent metrics page."""
JOB_METRICS_URL_NAME = "runledger_job_metrics"
"""``admin:runledger_job_metrics``: the per-job-type job metrics page."""


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
