"""The workflow runs' admin: the changelist (filters by status and workflow type, search by id or
idempotency key, a bounded count) and a run's page with its graph drawn as SVG
(``workflow_graph``), its steps with their jobs, and its recovery lineage; the actions cancel
and retry (the services ``cancel_workflow`` and ``retry_workflow``), each behind its own
permission, on the list and as buttons on a run's page.

The run table grows like the job table, so the changelist follows the large tables' rules
(``shared.LargeTableAdmin``): no unbounded COUNT, no facets, creation order only. A run's page
reads its steps, edges and their jobs in three bounded queries.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from ..domain import JobStatus, ReadScope, WorkflowRunStatus, WorkflowStepStatus
from ..errors import Code, RunledgerError
from ..models import Job, WorkflowRecovery, WorkflowRun, WorkflowStep, WorkflowStepDependency
from ..services.workflows import cancel_workflow, retry_workflow
from .shared import LargeTableAdmin, admin_link, json_block, report_action, selected_ids
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
ACTION_LIMIT = 200
"""Most runs one cancel or retry action acts on; each is its own transaction."""
RETRY_REQUEST_KEY = "admin"
RETRY_REASON = "retried from the admin"
"""One key and reason for every admin retry: retrying the same run again (a double click, two
operators) returns the recovery run already made; retry that one to go on."""

WORKFLOW_CANCEL_URL_NAME = "runledger_workflowrun_cancel"
WORKFLOW_RETRY_URL_NAME = "runledger_workflowrun_retry"
_UNFINISHED = (WorkflowRunStatus.RUNNING, WorkflowRunStatus.WAITING_FOR_EXTERNAL)
_RETRYABLE = (WorkflowRunStatus.COMPLETED_WITH_ERRORS, WorkflowRunStatus.CANCELED)
_ACTION_ERRORS: dict[str, str] = {
    Code.WF_RUN_NOT_FOUND: "gone",
    Code.WF_RELEASE_CONFLICT: "being changed by another operation; try again",
    Code.WF_RETRY_SOURCE_NOT_TERMINAL: "not finished, or it succeeded",
    Code.WF_RECOVERY_ACTIVE_CONSTRAINT: "its active key is held by another running run",
    Code.WF_RECOVERY_REQUEST_CONFLICT: "already retried another way",
}


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
    actions = ("cancel_selected_runs", "retry_selected_runs")
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

    # --- permissions of the actions (custom model permissions, not "change") ------------------

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.cancel_workflowrun")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(f"{self.opts.app_label}.retry_workflowrun")

    def ids_by_key(self, key: str) -> list[uuid.UUID]:
        return self.run_ids_by_key(key, None)

    def run_ids_by_key(self, key: str, workflow_type: str | None) -> list[uuid.UUID]:
        """Runs started under ``key``, in any tenant; in any type unless the type filter is
        set (then the partial unique indexes, which lead with the type, answer it). Split by
        tenant kind so each half matches one of those indexes."""
        if not key or "\x00" in key:
            return []
        lookups: dict[str, Any] = {"idempotency_key": key}
        if workflow_type:
            lookups["workflow_type"] = workflow_type
        found = WorkflowRun.objects.filter(self.by_organization_kind(**lookups)).values_list(
            "id", flat=True
        )
        return list(found[:KEY_SEARCH_LIMIT])

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """An exact key (within the selected workflow type, if any) or an exact run id."""
        term = search_term.strip()
        if not term:
            return queryset, False
        workflow_type = request.GET.get(WorkflowTypeFilter.parameter_name) or None
        condition = Q(pk__in=self.run_ids_by_key(term, workflow_type))
        try:
            condition |= Q(pk=uuid.UUID(term))
        except ValueError:
            pass
        return queryset.filter(condition), False

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
        name = "runledger_workflowrun_change"
        runs = list(
            WorkflowRecovery.objects.filter(source_run_id=obj.id)
            .order_by("-created_at")
            .values_list("recovery_run_id", flat=True)[:20]
        )
        if not runs:
            return "-"
        links = (
            (admin_link(self.admin_site, name, run_id, "runledger-recovery-run"),)
            for run_id in runs
        )
        return format_html_join(", ", "{}", links)

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
            # By prerequisite: the (prerequisite, dependent) unique index answers it; the
            # edge table has no index on its run.
            raw = list(
                WorkflowStepDependency.objects.filter(prerequisite_step_id__in=list(key_of))
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

    # --- cancel and retry ------------------------------------------------------------------

    @admin.action(description="Cancel the selected workflow runs", permissions=["cancel"])
    def cancel_selected_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> None:
        self._act_on_selection(request, queryset, "cancel")

    @admin.action(description="Retry the selected workflow runs", permissions=["retry"])
    def retry_selected_runs(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> None:
        self._act_on_selection(request, queryset, "retry")

    def _act_on_selection(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], name: str
    ) -> None:
        run_ids = selected_ids(
            self, request, queryset, limit=ACTION_LIMIT, noun="workflow run", action=name
        )
        if run_ids is not None:
            self._act(request, run_ids, name)

    def _act(self, request: HttpRequest, run_ids: list[uuid.UUID], name: str) -> list[Any]:
        """Run one action on each run, each in its own transaction; report what happened.
        Returns what the service returned for each run it did not refuse."""
        service: Callable[[uuid.UUID], Any] = _cancel if name == "cancel" else _retry
        past = "canceled" if name == "cancel" else "retried"
        results: list[Any] = []
        unchanged: Counter[str] = Counter()
        refused: Counter[str] = Counter()
        for run_id in run_ids:
            try:
                result = service(run_id)
            except RunledgerError as error:
                refused[_ACTION_ERRORS.get(error.code, error.client_message)] += 1
                continue
            results.append(result)
            if name == "cancel" and result != WorkflowRunStatus.CANCELED:
                unchanged[f"it had already {str(result).lower().replace('_', ' ')}"] += 1
                continue
            if name == "retry" and result.disposition == "existing":
                unchanged["it had already been retried; retry its recovery run to go on"] += 1
                continue
            run = WorkflowRun(pk=run_id)
            message = (
                "Canceled (admin action)"
                if name == "cancel"
                else f"Retried as run {result.run_id} (admin action)"
            )
            self.log_change(request, run, message)
        done = len(results) - sum(unchanged.values())
        report_action(
            self,
            request,
            noun="workflow run",
            past=past,
            done=done,
            unchanged=unchanged,
            refused=refused,
        )
        return results

    def get_urls(self) -> list[URLPattern]:
        urls = [
            path(
                "<uuid:object_id>/cancel/",
                self.admin_site.admin_view(self.cancel_view),
                name=WORKFLOW_CANCEL_URL_NAME,
            ),
            path(
                "<uuid:object_id>/retry/",
                self.admin_site.admin_view(self.retry_view),
                name=WORKFLOW_RETRY_URL_NAME,
            ),
        ]
        return [*urls, *super().get_urls()]

    def cancel_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        """The Cancel run button: POST only, with its own permission; back to the run."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not (self.has_view_permission(request) and self.has_cancel_permission(request)):
            raise PermissionDenied
        self._act(request, [object_id], "cancel")
        return self._run_page(object_id)

    def retry_view(self, request: HttpRequest, object_id: uuid.UUID) -> HttpResponse:
        """The Retry run button: POST only, with its own permission; on to the recovery run
        (the same one for a second click)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not (self.has_view_permission(request) and self.has_retry_permission(request)):
            raise PermissionDenied
        results = self._act(request, [object_id], "retry")
        return self._run_page(results[0].run_id if results else object_id)

    def _run_page(self, run_id: uuid.UUID) -> HttpResponse:
        return HttpResponseRedirect(
            reverse(
                "admin:runledger_workflowrun_change",
                args=(run_id,),
                current_app=self.admin_site.name,
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
        if obj is not None:
            picture = self.picture(obj)
            context["runledger_steps"] = picture.rows
            context["runledger_graph"] = picture.svg
            context["runledger_steps_listed_all"] = picture.listed_all
            context["runledger_steps_shown"] = STEPS_SHOWN
            context["runledger_graph_max_steps"] = GRAPH_MAX_STEPS
            context["runledger_may_cancel"] = (
                obj.status in _UNFINISHED and self.has_cancel_permission(request)
            )
            context["runledger_may_retry"] = obj.status in _RETRYABLE and self.has_retry_permission(
                request
            )
        return super().render_change_form(request, context, add, change, form_url, obj)


def _cancel(run_id: uuid.UUID) -> WorkflowRunStatus:
    return cancel_workflow(run_id, scope=ReadScope.ADMIN)


def _retry(run_id: uuid.UUID) -> Any:
    return retry_workflow(
        run_id, scope=ReadScope.ADMIN, request_key=RETRY_REQUEST_KEY, reason=RETRY_REASON
    )


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
