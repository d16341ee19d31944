"""Headless Chromium on the workflow runs' admin: a fan-out/fan-in run mid-flight and a failed
run, drawn as SVG, with screenshots (light and dark), the steps linked to their jobs, and the
cancel and retry buttons.

The runs are moved by the services a worker uses (claim, success, dead letter), so each step's
status is what the engine wrote. As in test_admin_browser, every ORM call happens before the
browser opens or after it closes.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pytest_django.live_server_helper import LiveServer

from runledger_django import Workflow, start_workflow
from runledger_django.domain import FailureKind, JobFailure
from runledger_django.models import JobDefinition, WorkflowRecovery, WorkflowRun, WorkflowStep
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.browser.test_admin_browser import (  # noqa: F401  (the fixtures, by usefixtures)
    ADMIN_PASSWORD,
    CHROMIUM,
    admin_static,
    chromium,
    open_page,
    shot,
    superuser,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("chromium", "admin_static", "superuser"),
]

SPLIT, PART, MERGE, PUBLISH = "reports.split", "reports.part", "reports.merge", "reports.publish"
CHARGE, RESERVE, SHIP, NOTIFY = "shop.charge", "shop.reserve", "shop.ship", "shop.notify"
WORKER = "browser-worker"


def define(*job_types: str) -> None:
    for job_type in job_types:
        JobDefinition.objects.create(job_type=job_type, max_attempts=3)


def succeed(job_type: str, count: int = 1) -> None:
    for claimed in claim_jobs([job_type], worker_id=WORKER, limit=count, lease_seconds=300):
        complete_job_success(claimed.lease, output={"done": claimed.job_type})


def dead_letter(job_type: str, code: str, message: str) -> None:
    [claimed] = claim_jobs([job_type], worker_id=WORKER, limit=1, lease_seconds=300)
    complete_job_failure(
        claimed.lease, JobFailure(kind=FailureKind.TERMINAL, code=code, message=message)
    )


def statuses(run_id: uuid.UUID) -> dict[str, str]:
    return dict(
        WorkflowStep.objects.filter(workflow_run_id=run_id).values_list("step_key", "status")
    )


@pytest.fixture
def fan_run() -> str:
    """split, then six parts side by side, then merge (a chord), then publish: the split and
    three parts succeeded, one part is running, two wait for a worker, merge is blocked."""
    define(SPLIT, PART, MERGE, PUBLISH)
    flow = Workflow("reports.monthly")
    split = flow.step("split", SPLIT, {"month": "2026-11"})
    parts = [flow.step(f"region-{n}", PART, {"region": n}, after=[split]) for n in range(6)]
    merge = flow.chord(parts, flow.step("merge", MERGE))
    flow.step("publish", PUBLISH, after=[merge])
    run_id = start_workflow(flow, idempotency_key="report:2026-11").run_id
    succeed(SPLIT)
    succeed(PART, 3)
    claim_jobs([PART], worker_id=WORKER, limit=1, lease_seconds=300)  # running
    steps = statuses(run_id)
    assert sorted(steps.values()) == sorted(
        ["SUCCEEDED"] * 4 + ["ENQUEUED"] * 3 + ["BLOCKED"] * 2
    ), steps
    return str(run_id)


@pytest.fixture
def failed_run() -> str:
    """charge succeeded, reserve was dead-lettered, so ship was canceled; notify ran anyway
    (a terminal edge): the run completed with errors."""
    define(CHARGE, RESERVE, SHIP, NOTIFY)
    flow = Workflow("orders.fulfil")
    charge = flow.step("charge", CHARGE, {"order_id": 1001})
    reserve = flow.step("reserve", RESERVE, {"order_id": 1001})
    ship = flow.step("ship", SHIP, {"order_id": 1001}, after=[charge, reserve])
    flow.step("notify", NOTIFY, {"order_id": 1001}, after=[ship], when="terminal")
    run_id = start_workflow(flow, idempotency_key="fulfil:1001").run_id
    succeed(CHARGE)
    dead_letter(RESERVE, "warehouse.out_of_stock", "no stock for SKU 42")
    succeed(NOTIFY)
    assert statuses(run_id) == {
        "charge": "SUCCEEDED",
        "reserve": "FAILED",
        "ship": "CANCELED",
        "notify": "SUCCEEDED",
    }
    assert WorkflowRun.objects.get(id=run_id).status == "COMPLETED_WITH_ERRORS"
    return str(run_id)


def login(page: Page, base: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    expect(page).to_have_url(f"{base}/admin/")


def test_workflows__fan_out_fan_in_mid_flight__drawn_and_linked(
    live_server: LiveServer, fan_run: str
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    shots: list[Path] = []
    with open_page(CHROMIUM) as page:
        login(page, base)
        page.click("div.app-runledger tr.model-workflowrun a")
        expect(page).to_have_url(re.compile(r"/admin/runledger/workflowrun/$"))
        page.click("#changelist-filter a[href*='status__exact=RUNNING']")
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("4 of 9 succeeded, 5 to go")
        shots.append(shot(page, "21-workflow-runs"))

        rows.first.locator(f"a[href*='{fan_run}']").first.click()
        graph = page.locator("svg.runledger-workflow-graph")
        expect(graph).to_be_visible()
        expect(
            page.get_by_role("group", name=re.compile("Steps of reports.monthly"))
        ).to_be_visible()
        expect(graph.locator(".wf-node")).to_have_count(9)
        expect(graph.locator("path.wf-edge")).to_have_count(6 + 6 + 1)
        expect(graph.locator("path.wf-edge-terminal")).to_have_count(6)
        expect(graph.locator(".wf-status-succeeded")).to_have_count(4)
        expect(graph.locator(".wf-status-running")).to_have_count(1)
        expect(graph.locator(".wf-status-enqueued")).to_have_count(2)
        expect(graph.locator(".wf-status-blocked")).to_have_count(2)
        expect(page.locator("#runledger-cancel-run")).to_be_visible()
        expect(page.locator("#runledger-retry-run")).to_have_count(0)
        # The statuses are the admin theme's colours: a succeeded step is not a failed one.
        succeeded = graph.locator(".wf-status-succeeded rect").first
        running = graph.locator(".wf-status-running rect").first
        assert succeeded.evaluate("e => getComputedStyle(e).fill") != running.evaluate(
            "e => getComputedStyle(e).fill"
        )
        shots.append(shot(page, "22-workflow-fan-out-mid-flight"))

        # Dark mode: the same page in the admin's dark theme.
        page.emulate_media(color_scheme="dark")
        page.reload()
        expect(graph).to_be_visible()
        text_fill = graph.locator("text.wf-key").first.evaluate("e => getComputedStyle(e).fill")
        assert text_fill != "rgb(51, 51, 51)", "node labels follow the dark theme's text colour"
        shots.append(shot(page, "23-workflow-fan-out-dark"))
        page.emulate_media(color_scheme="light")

        # A step is a link to its job.
        running_step = graph.locator("a.wf-status-running")
        step_key = running_step.get_attribute("data-step")
        running_step.click()
        expect(page).to_have_url(re.compile(r"/admin/runledger/job/[0-9a-f-]+/change/"))
        expect(page.locator("#content")).to_contain_text(PART)
        expect(page.locator("#content")).to_contain_text("LEASED")
        shots.append(shot(page, "24-workflow-step-job"))
    assert step_key and step_key.startswith("region-")
    assert all(path.stat().st_size > 0 for path in shots)


def test_workflows__failed_run__drawn_then_retried(
    live_server: LiveServer, failed_run: str
) -> None:
    from playwright.sync_api import expect

    base = live_server.url
    shots: list[Path] = []
    with open_page(CHROMIUM) as page:
        login(page, base)
        page.goto(f"{base}/admin/runledger/workflowrun/?status__exact=COMPLETED_WITH_ERRORS")
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("2 of 4 succeeded, 1 failed, 1 canceled")
        rows.first.locator(f"a[href*='{failed_run}']").first.click()

        graph = page.locator("svg.runledger-workflow-graph")
        expect(graph.locator(".wf-status-failed")).to_have_count(1)
        expect(graph.locator(".wf-status-canceled")).to_have_count(1)
        expect(graph.locator("[data-step='reserve'] text.wf-status")).to_have_text("failed")
        steps = page.locator("#runledger-workflow-steps")
        expect(steps.locator("tr[data-step='reserve']")).to_contain_text("warehouse.out_of_stock")
        expect(steps.locator("tr[data-step='ship']")).to_contain_text(
            "workflow.dependency_unsatisfied"
        )
        expect(page.locator("#runledger-cancel-run")).to_have_count(0)
        shots.append(shot(page, "25-workflow-failed"))

        page.click("#runledger-retry-run")
        expect(page.locator("ul.messagelist")).to_contain_text("Retried 1 workflow run.")
        expect(page.locator("a.runledger-recovered-from")).to_have_text(failed_run)
        retried = page.locator("svg.runledger-workflow-graph")
        expect(retried.locator("[data-step='charge']")).to_have_class(re.compile("succeeded"))
        expect(retried.locator("[data-step='reserve']")).to_have_class(re.compile("enqueued"))
        expect(retried.locator("[data-step='ship']")).to_have_class(re.compile("blocked"))
        shots.append(shot(page, "26-workflow-retried"))

    recovery = WorkflowRecovery.objects.get(source_run_id=uuid.UUID(failed_run))
    assert WorkflowRun.objects.get(id=recovery.recovery_run_id).status == "RUNNING"
    assert WorkflowRun.objects.get(id=failed_run).status == "COMPLETED_WITH_ERRORS"
    assert all(path.stat().st_size > 0 for path in shots)
