"""The workflow runs' admin: the changelist (filters by status and workflow type, search by id or
idempotency key, a bounded count) and a run's page with its graph drawn as SVG
(``workflow_graph``), its steps with their jobs, and its recovery lineage.

The run table grows like the job table, so the changelist follows the large tables' rules
(``shared.LargeTableAdmin``): no unbounded COUNT, no facets, creation order only. A run's page
reads its steps, edges and their jobs in three bounded queries.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..domain import JobStatus, WorkflowStepStatus
from ..models import Job, WorkflowRecovery, WorkflowRun, WorkflowStep, WorkflowStepDependency
from .shared import LargeTableAdmin, admin_link, json_block
from .workflow_graph import GraphEdge, GraphNode, render_svg

STEPS_SHOWN = 500
"""Most steps a run's page lists (a run can hold thousands; the counters above say how many)."""
GRAPH_MAX_STEPS = 300
"""Larger runs are listed but not drawn: a drawing that size helps nobody and costs the page."""
EDGES_READ = 4 * GRAPH_MAX_STEPS + 1
TYPES_FROM_RECENT_RUNS = 1000
"""The workflow type filter offers the types of this many newest runs (an index-ordered read,
never a DISTINCT over the whole table); any other type can be typed as ``?workflow_type=``."""
KEY_SEARCH_LIMIT = 100


class WorkflowTypeFilter(admin.SimpleListFilter):
    title = "workflow type"
    parameter_name = "workflow_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        recent = WorkflowRun.objects.order_by("-created_at", "-id").values_list(
            "workflow_type", flat=True
        )[:TYPES_FROM_RECENT_RUNS]
        types = set(recent)
        current = self.value()
        if current:
            types.add(current)
        return [(name, name) for name in sorted(types)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(workflow_type=value) if value else queryset


@dataclass(frozen=True, slots=True)
class StepRow:
    """One line of a run's steps table: the same facts as its node in the graph."""

    key: str
    kind: str
    status: str
    """The step's status, RUNNING for an ENQUEUED step whose job is leased."""
    job_type: str | None
    job_id: uuid.UUID | None
    job_href: str | None
    job_status: str | None
    attempts: str
    prerequisites: str
    released_at: Any
    finished_at: Any
    error: str


@dataclass(frozen=True, slots=True)
class RunPicture:
    rows: list[StepRow]
    edges: list[GraphEdge]
    svg: SafeString | None
    listed_all: bool


def shown_status(step_status: str, job_status: str | None) -> str:
    """A step stays ENQUEUED while its job is claimed (the claim writes no step row)."""
    if step_status == WorkflowStepStatus.ENQUEUED and job_status == JobStatus.LEASED:
        return "RUNNING"
    return step_status


@admin.register(WorkflowRun)
class WorkflowRunAdmin(LargeTableAdmin):
    list_display = (
        "id",
        "workflow_type",
        "status",
        "progress",
        "idempotency_key",
        "organization_id",
        "created_at",
        "finished_at",
    )
    list_filter = ("status", WorkflowTypeFilter)
    search_help_text = "An exact idempotency key, or an exact run id (UUID)."
    json_columns = ("metadata", "enqueue_request", "result")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    ("workflow_type", "organization_id"),
                    ("status", "fail_fast"),
                    ("idempotency_key", "active_key"),
                    "progress",
                    ("started_at", "finished_at", "updated_at"),
                    ("recovered_from_link", "recoveries_links"),
                )
            },
        ),
        ("Result and metadata", {"fields": ("result_step_key", "result_json", "metadata_json")}),
        ("Canonical request", {"fields": ("enqueue_request_json",), "classes": ("collapse",)}),
    )
    readonly_fields = (
        "id",
        "workflow_type",
        "organization_id",
        "status",
        "fail_fast",
        "idempotency_key",
        "active_key",
        "progress",
        "started_at",
        "finished_at",
        "updated_at",
        "recovered_from_link",
        "recoveries_links",
        "result_step_key",
        "result_json",
        "metadata_json",
        "enqueue_request_json",
    )

    def ids_by_key(self, key: str) -> list[uuid.UUID]:
        """Runs started under ``key``, whatever their type and tenant (split by tenant kind so
        each half can use its partial unique index)."""
        if not key or "\x00" in key:
            return []
        found = WorkflowRun.objects.filter(
            self.by_organization_kind(idempotency_key=key)
        ).values_list("id", flat=True)
        return list(found[:KEY_SEARCH_LIMIT])

    # --- columns and fields ----------------------------------------------------------------

    @admin.display(description="steps")
    def progress(self, obj: WorkflowRun) -> str:
        """From the run's counters: no count over its steps."""
        done = obj.steps_succeeded + obj.steps_failed + obj.steps_canceled
        parts = [f"{obj.steps_succeeded} of {obj.steps_total} succeeded"]
        if obj.steps_failed:
            parts.append(f"{obj.steps_failed} failed")
        if obj.steps_canceled:
            parts.append(f"{obj.steps_canceled} canceled")
        if obj.steps_waiting:
            parts.append(f"{obj.steps_waiting} waiting")
        unfinished = obj.steps_total - done - obj.steps_waiting
        if unfinished > 0:
            parts.append(f"{unfinished} to go")
        return ", ".join(parts)

    @admin.display(description="recovered from")
    def recovered_from_link(self, obj: WorkflowRun) -> str:
        source = (
            WorkflowRecovery.objects.filter(recovery_run_id=obj.id)
            .values_list("source_run_id", flat=True)
            .first()
        )
        if source is None:
            return "-"
        return admin_link(
            self.admin_site, "runledger_workflowrun_change", source, "runledger-recovered-from"
        )

    @admin.display(description="retried as")
    def recoveries_links(self, obj: WorkflowRun) -> SafeString | str:
        runs = list(
            WorkflowRecovery.objects.filter(source_run_id=obj.id)
            .order_by("-created_at")
            .values_list("recovery_run_id", flat=True)[:20]
        )
        if not runs:
            return "-"
        return format_html_join(
            ", ",
            "{}",
            (
                (
                    format_html(
                        admin_link(
                            self.admin_site,
                            "runledger_workflowrun_change",
                            run_id,
                            "runledger-recovery-run",
                        )
                    ),
                )
                for run_id in runs
            ),
        )

    @admin.display(description="result")
    def result_json(self, obj: WorkflowRun) -> SafeString | str:
        return json_block(getattr(obj, "result_text", None), "runledger-workflow-result")

    @admin.display(description="metadata")
    def metadata_json(self, obj: WorkflowRun) -> SafeString | str:
        return json_block(getattr(obj, "metadata_text", None), "runledger-workflow-metadata")

    @admin.display(description="canonical request")
    def enqueue_request_json(self, obj: WorkflowRun) -> SafeString | str:
        return json_block(getattr(obj, "enqueue_request_text", None), "runledger-canonical-request")

    # --- the run's page: graph and steps ----------------------------------------------------

    def picture(self, run: WorkflowRun) -> RunPicture:
        """The run's steps, edges and their jobs: three bounded reads, in step id order."""
        steps = list(
            WorkflowStep.objects.filter(workflow_run_id=run.id)
            .order_by("id")
            .values(
                "id",
                "step_key",
                "execution_kind",
                "job_type",
                "status",
                "job_id",
                "released_at",
                "finished_at",
                "dependency_count_total",
                "dependency_count_pending",
                "last_error_code",
                "status_reason",
            )[: STEPS_SHOWN + 1]
        )
        listed_all = len(steps) <= STEPS_SHOWN
        steps = steps[:STEPS_SHOWN]
        job_ids = [step["job_id"] for step in steps if step["job_id"] is not None]
        jobs = {
            job["id"]: job
            for job in Job.objects.filter(id__in=job_ids).values(
                "id", "status", "attempt", "max_attempts"
            )
        }
        rows: list[StepRow] = []
        for step in steps:
            job = jobs.get(step["job_id"]) if step["job_id"] else None
            job_status = job["status"] if job else None
            href = (
                reverse(
                    "admin:runledger_job_change",
                    args=(step["job_id"],),
                    current_app=self.admin_site.name,
                )
                if job
                else None
            )
            total = step["dependency_count_total"]
            pending = step["dependency_count_pending"]
            rows.append(
                StepRow(
                    key=step["step_key"],
                    kind=step["execution_kind"],
                    status=shown_status(step["status"], job_status),
                    job_type=step["job_type"],
                    job_id=step["job_id"],
                    job_href=href,
                    job_status=job_status,
                    attempts=f"{job['attempt']} of {job['max_attempts']}" if job else "-",
                    prerequisites=f"{total - pending} of {total} finished" if total else "none",
                    released_at=step["released_at"],
                    finished_at=step["finished_at"],
                    error=step["last_error_code"] or step["status_reason"] or "",
                )
            )
        svg: SafeString | None = None
        edges: list[GraphEdge] = []
        if listed_all and len(steps) <= GRAPH_MAX_STEPS:
            key_of = {step["id"]: step["step_key"] for step in steps}
            raw = list(
                WorkflowStepDependency.objects.filter(workflow_run_id=run.id)
                .order_by("id")
                .values_list("prerequisite_step_id", "dependent_step_id", "release_mode")[
                    :EDGES_READ
                ]
            )
            if len(raw) < EDGES_READ:
                edges = [
                    GraphEdge(key_of[first], key_of[second], mode)
                    for first, second, mode in raw
                    if first in key_of and second in key_of
                ]
                nodes = [
                    GraphNode(
                        key=row.key,
                        status=row.status,
                        kind=row.kind,
                        href=row.job_href,
                        detail=_detail(row),
                    )
                    for row in rows
                ]
                svg = render_svg(
                    nodes,
                    edges,
                    title=f"Steps of {run.workflow_type} run {run.id}",
                    svg_id="runledger-workflow-graph",
                )
        return RunPicture(rows=rows, edges=edges, svg=svg, listed_all=listed_all)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        if obj is not None:
            picture = self.picture(obj)
            context["runledger_steps"] = picture.rows
            context["runledger_graph"] = picture.svg
            context["runledger_steps_listed_all"] = picture.listed_all
            context["runledger_steps_shown"] = STEPS_SHOWN
            context["runledger_graph_max_steps"] = GRAPH_MAX_STEPS
        return super().render_change_form(request, context, add, change, form_url, obj)


def _detail(row: StepRow) -> str:
    facts = []
    if row.job_type:
        facts.append(f"job type {row.job_type}")
    if row.job_id:
        facts.append(f"attempts {row.attempts}")
    facts.append(f"prerequisites: {row.prerequisites}")
    if row.error:
        facts.append(row.error)
    return "; ".join(facts)
