"""The admin dashboard: throughput, failures, queue depth and oldest-due age over the last hour
or day, for every job type or one, as server-rendered SVG charts (``charts``), and the live
queue per job type. No JavaScript, no inline script, no external request.

Its entry on the admin index is a proxy (``DashboardPage``); the page is that entry's
changelist URL, so it needs no URL of another admin. Viewing it takes the view permission on
jobs, as the job metrics page does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import django
from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.safestring import SafeString

from ..domain import DASHBOARD_WINDOWS, PAGE_LIMIT_MAX, JobMetrics, QueueDashboard, ReadScope
from ..errors import RunledgerError
from ..models import DashboardPage, Job, JobDefinition
from ..services.dashboard import queue_dashboard
from ..services.job_metrics import job_metrics
from .charts import BarChart, Series, render_bar_chart
from .metrics import JOB_METRICS_URL_NAME
from .shared import AdminIndexEntry

DASHBOARD_URL_NAME = "runledger_dashboard"
"""``admin:runledger_dashboard``: the dashboard page."""
FAILURE_CLASSES = ("series-0", "series-1", "series-2", "series-3", "series-4")
WINDOW_LABELS = {"hour": "Last hour (per minute)", "day": "Last day (per 5 minutes)"}
SAMPLER_HINT = (
    "No queue samples in this window. Depth and age history come from the sampler: run "
    "manage.py sample_queue --loop (or from cron every minute) to record them."
)


class DashboardFilterForm(forms.Form):
    """The window and the job type (every type, or one defined type)."""

    window = forms.ChoiceField(
        choices=[(name, WINDOW_LABELS[name]) for name in DASHBOARD_WINDOWS],
        required=False,
        initial="hour",
    )
    job_type = forms.ChoiceField(required=False, label="Job type")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        types = JobDefinition.objects.order_by("job_type").values_list("job_type", flat=True)
        field = self.fields["job_type"]
        assert isinstance(field, forms.ChoiceField)  # noqa: S101  (declared just above)
        field.choices = [("", "All job types"), *((t, t) for t in types[:PAGE_LIMIT_MAX])]

    def selection(self) -> tuple[str, str | None]:
        data = self.cleaned_data if self.is_bound else {}
        return (data.get("window") or "hour"), (data.get("job_type") or None)


@admin.register(DashboardPage)
class DashboardPageAdmin(AdminIndexEntry):
    """Puts "Dashboard" on the admin index and serves the dashboard as its changelist."""

    viewed_model = Job

    def get_urls(self) -> list[URLPattern]:
        page = path("", self.admin_site.admin_view(self.dashboard_view), name=DASHBOARD_URL_NAME)
        return [page, *super().get_urls()]

    def target_url(self) -> str:
        return reverse(f"admin:{DASHBOARD_URL_NAME}", current_app=self.admin_site.name)

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self._may_view(request):
            raise PermissionDenied
        form = DashboardFilterForm(request.GET or None)
        data: QueueDashboard | None = None
        live: list[JobMetrics] = []
        if not form.is_bound or form.is_valid():
            window, job_type = form.selection()
            try:
                data = queue_dashboard(window=window, job_type=job_type)
                live = job_metrics(scope=ReadScope.ADMIN, job_type=job_type, limit=PAGE_LIMIT_MAX)
            except RunledgerError as error:
                form.add_error(None, error.client_message)
        site = self.admin_site
        opts = self.opts
        context = {
            **site.each_context(request),
            "title": "Dashboard",
            "opts": opts,
            "form": form,
            "data": data,
            "charts": charts_for(data) if data else [],
            "live": live,
            "row_limit": PAGE_LIMIT_MAX,
            "job_metrics_url": reverse(f"admin:{JOB_METRICS_URL_NAME}", current_app=site.name),
            "breadcrumbs_as_list": django.VERSION >= (6, 0),
        }
        return TemplateResponse(request, "admin/runledger/dashboard.html", context)


def charts_for(data: QueueDashboard) -> list[SafeString]:
    """The page's four charts, in reading order."""
    starts = [timezone.localtime(start) for start in data.bucket_starts]
    labels = [f"{start:%Y-%m-%d %H:%M}" for start in starts]
    axis = [f"{start:%H:%M}" for start in starts]
    per = "minute" if data.bucket_seconds == 60 else f"{data.bucket_seconds // 60} minutes"
    scope = data.job_type or "all job types"
    window = "last hour" if data.window == "hour" else "last day"

    def chart(chart_id: str, title: str, series: Sequence[Series], **extra: Any) -> SafeString:
        return render_bar_chart(
            BarChart(
                chart_id=chart_id,
                title=f"{title}, {window} ({scope})",
                labels=labels,
                axis_labels=axis,
                series=series,
                **extra,
            )
        )

    failures = [
        Series(
            name=_code_name(entry.code),
            css_class=FAILURE_CLASSES[index] if entry.code is not None else "series-other",
            values=entry.counts,
        )
        for index, entry in enumerate(data.failures_by_code)
    ]
    return [
        chart(
            "runledger-throughput",
            "Attempts finished",
            [
                Series(name="succeeded", css_class="succeeded", values=data.succeeded),
                Series(name="retried", css_class="retried", values=data.retried),
                Series(name="dead-lettered", css_class="dead-lettered", values=data.dead_lettered),
            ],
            unit=f"attempts per {per}",
            empty_text="No attempt finished in this window.",
        ),
        chart(
            "runledger-failures",
            "Failed attempts by error code",
            failures,
            unit=f"failures per {per}",
            empty_text="No attempt failed in this window.",
        ),
        chart(
            "runledger-depth",
            "Queue depth",
            [
                Series(name="due", css_class="due", values=data.due),
                Series(name="scheduled", css_class="scheduled", values=data.scheduled),
                Series(name="leased", css_class="leased", values=data.leased),
            ],
            unit="jobs",
            empty_text=(
                SAMPLER_HINT if not data.sampled else "The queue was empty in this window."
            ),
        ),
        chart(
            "runledger-oldest-due",
            "Oldest due job's age",
            [Series(name="oldest due", css_class="age", values=data.oldest_due_age_seconds)],
            unit="seconds",
            empty_text=(
                SAMPLER_HINT if not data.sampled else "No job waited past its time in this window."
            ),
            format_value=_seconds,
        ),
    ]


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:.1f}"


def _code_name(code: str | None) -> str:
    if code is None:
        return "other codes"
    return code or "(no code)"
