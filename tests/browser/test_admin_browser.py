"""Headless Chromium walks the admin as an operator would, and saves screenshots.

transaction=True (which ``live_server`` implies): the live server's thread must see committed
rows, and promotion refuses to run inside an atomic block.

Playwright's sync API runs an asyncio loop in this thread while a browser is open, and Django
refuses ORM calls under a running loop. So every database write and check happens before the
browser starts or after it closes; the pages themselves are served by the live server's thread,
which has no loop. No DJANGO_ALLOW_ASYNC_UNSAFE is needed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import django.contrib.admin
import pytest
from django.contrib.auth.models import User
from pytest_django import Settings
from pytest_django.live_server_helper import LiveServer

from runledger_django import IntentStatus, enqueue_job, promote_intents, record_intent
from runledger_django.domain import FailureKind, JobFailure
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
PAGE_TIMEOUT_MS = 15_000

ADMIN_PASSWORD = "browser-test-password"  # noqa: S105  (a throwaway test user)
RECEIPT = "shop.send_receipt"
WAREHOUSE = "shop.notify_warehouse"


def _unavailable(reason: str) -> None:
    """Skip, unless CI demands the browser tests (RUNLEDGER_REQUIRE_BROWSER=1): then fail."""
    if os.environ.get("RUNLEDGER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason}, and RUNLEDGER_REQUIRE_BROWSER=1 requires the browser tests")
    pytest.skip(f"{reason} (install Debian's chromium package to run the browser tests)")


@pytest.fixture
def chromium() -> Path:
    """Debian's Chromium; Playwright never downloads a browser of its own here."""
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("the playwright package is not installed (pip install '.[browser]')")
    return CHROMIUM


@contextmanager
def open_page(executable: Path) -> Iterator[Page]:
    """A fresh headless page; no ORM calls while it is open (see the module docstring)."""
    from playwright.sync_api import expect, sync_playwright

    # A loaded CI machine renders slowly; assertions wait as long as page actions do.
    expect.set_options(timeout=PAGE_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(executable), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def shot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


@pytest.fixture
def admin_static(settings: Settings) -> None:
    """Let the live server serve the admin's CSS and JS even without the staticfiles app.

    Without ``django.contrib.staticfiles`` the live server serves STATIC_ROOT, which is unset;
    the admin's own static directory has the same layout as a collected STATIC_ROOT.
    """
    if "django.contrib.staticfiles" not in settings.INSTALLED_APPS:
        settings.STATIC_ROOT = str(Path(django.contrib.admin.__file__).parent / "static")


@pytest.fixture
def superuser() -> User:
    return User.objects.create_superuser("admin", "admin@example.com", ADMIN_PASSWORD)


@pytest.fixture
def promoted_story() -> dict[str, str]:
    """Two receipts promoted into jobs, and one intent whose type has no definition yet."""
    JobDefinition.objects.create(
        job_type=RECEIPT, max_attempts=5, default_timeout_seconds=60, default_priority=100
    )
    first = record_intent(RECEIPT, {"order_id": 1}, idempotency_key="receipt:demo-1001")
    second = record_intent(RECEIPT, {"order_id": 2}, idempotency_key="receipt:demo-1002")
    waiting = record_intent(WAREHOUSE, {"order_id": 1}, idempotency_key="warehouse:demo-1001")
    report = promote_intents([RECEIPT, WAREHOUSE])
    assert (report.inserted_jobs, report.total_promoted) == (2, 2)
    promoted = JobEnqueueIntent.objects.get(id=second.intent_id)
    assert promoted.promoted_job_id is not None
    return {
        "first": str(first.intent_id),
        "second": str(second.intent_id),
        "second_job": str(promoted.promoted_job_id),
        "waiting": str(waiting.intent_id),
    }


def test_admin__operator_browses_intents_jobs_and_metrics(
    live_server: LiveServer,
    admin_static: None,
    chromium: Path,
    superuser: User,
    promoted_story: dict[str, str],
) -> None:
    """Log in, filter and search intents, follow an intent to its job, reach the metrics."""
    from playwright.sync_api import expect

    base = live_server.url
    ids = promoted_story
    shots: list[Path] = []
    with open_page(chromium) as page:
        page.goto(f"{base}/admin/login/?next=/admin/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", ADMIN_PASSWORD)
        page.click("input[type=submit]")
        expect(page).to_have_url(f"{base}/admin/")
        expect(page.locator("div.app-runledger")).to_be_visible()
        shots.append(shot(page, "01-admin-index"))

        # The intents changelist, narrowed by the status filter in the sidebar.
        page.click("div.app-runledger tr.model-jobenqueueintent a")
        expect(page).to_have_url(re.compile(r"/admin/runledger/jobenqueueintent/$"))
        page.click("#changelist-filter a[href*='status__exact=PROMOTED']")
        expect(page).to_have_url(re.compile(r"status__exact=PROMOTED"))
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(2)
        expect(page.locator("#result_list")).not_to_contain_text(ids["waiting"])
        shots.append(shot(page, "02-intents-filtered-promoted"))

        # Search by idempotency key, keeping the filter.
        page.fill("#searchbar", "receipt:demo-1002")
        page.press("#searchbar", "Enter")
        expect(page).to_have_url(re.compile(r"q=receipt"))
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text(ids["second"])
        shots.append(shot(page, "03-intents-searched"))

        # Open the intent, then the job it was promoted to.
        rows.first.locator(f"a[href*='{ids['second']}']").first.click()
        expect(page).to_have_url(
            re.compile(rf"/admin/runledger/jobenqueueintent/{ids['second']}/change/(\?.*)?$")
        )
        job_link = page.locator("div.field-promoted_job_link a.runledger-promoted-job-link")
        expect(job_link).to_have_text(ids["second_job"])
        shots.append(shot(page, "04-intent-detail"))
        job_link.click()
        expect(page).to_have_url(
            re.compile(rf"/admin/runledger/job/{ids['second_job']}/change/(\?.*)?$")
        )
        expect(page.locator("#content")).to_contain_text(RECEIPT)
        shots.append(shot(page, "05-promoted-job"))

        # From the admin index to the metrics page: its own entry in the app list.
        page.goto(f"{base}/admin/")
        page.click("tr.model-intentmetricspage a")
        expect(page).to_have_url(re.compile(r"/admin/runledger/jobenqueueintent/metrics/$"))
        expect(page.locator("h1")).to_have_text("Intent metrics")
        metrics_rows = page.locator("table#intent-metrics tr.intent-metrics-row")
        expect(metrics_rows).to_have_count(2)
        receipt_row = metrics_rows.filter(has_text=RECEIPT)
        expect(receipt_row.locator("td.field-promoted_24h")).to_have_text("2")
        expect(receipt_row.locator("td.field-pending_count")).to_have_text("0")
        warehouse_row = metrics_rows.filter(has_text=WAREHOUSE)
        expect(warehouse_row.locator("td.field-pending_count")).to_have_text("1")
        shots.append(shot(page, "06-intent-metrics"))

    # Browsing is read-only: the waiting intent is still pending, the screenshots exist.
    assert JobEnqueueIntent.objects.get(id=ids["waiting"]).status == IntentStatus.PENDING
    assert len(shots) == 6
    assert all(path.stat().st_size > 0 for path in shots)


@pytest.fixture
def dead_letter_story() -> dict[str, str]:
    """A receipt job that succeeded, and a warehouse job whose two attempts failed (the first
    retried, the second dead-lettered), through the services a worker uses."""
    for job_type in (RECEIPT, WAREHOUSE):
        JobDefinition.objects.create(job_type=job_type, max_attempts=2)
    done = enqueue_job(RECEIPT, {"order_id": 1}, idempotency_key="receipt:demo-1001").job_id
    [claimed] = claim_jobs([RECEIPT], worker_id="browser-worker", limit=1, lease_seconds=60)
    complete_job_success(claimed.lease, output={"sent_to": "ada@example.com"})
    dead = enqueue_job(WAREHOUSE, {"order_id": 1}, idempotency_key="warehouse:demo-1001").job_id
    for attempt in (1, 2):
        [claimed] = claim_jobs([WAREHOUSE], worker_id="browser-worker", limit=1, lease_seconds=60)
        failure = JobFailure(
            kind=FailureKind.RETRYABLE,
            code="job.retry_requested",
            message=f"the warehouse did not answer (attempt {attempt})",
            error_class="example_project.shop.jobs.RetryJob",
            traceback="Traceback (most recent call last):\n  ...\nRetryJob: no answer",
            policy_retry_delay_ms=1000,
            retry_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1),
        )
        complete_job_failure(claimed.lease, failure)
    assert Job.objects.get(id=dead).status == "DEAD_LETTERED"
    return {"done": str(done), "dead": str(dead)}


def test_admin__operator_requeues_a_dead_letter_and_reads_job_metrics(
    live_server: LiveServer,
    admin_static: None,
    chromium: Path,
    superuser: User,
    dead_letter_story: dict[str, str],
) -> None:
    """From the index to the dead letters, a dead letter's attempts, the requeue action, and
    the job metrics page."""
    from playwright.sync_api import expect

    base = live_server.url
    ids = dead_letter_story
    shots: list[Path] = []
    with open_page(chromium) as page:
        page.goto(f"{base}/admin/login/?next=/admin/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", ADMIN_PASSWORD)
        page.click("input[type=submit]")
        expect(page).to_have_url(f"{base}/admin/")

        # The dead letters: one click from the index.
        page.click("tr.model-deadletter a")
        expect(page).to_have_url(re.compile(r"/admin/runledger/job/\?status__exact=DEAD_LETTERED$"))
        rows = page.locator("#result_list tbody tr")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text(ids["dead"])
        expect(rows.first).to_contain_text("job.retry_requested")
        shots.append(shot(page, "07-jobs-dead-letters"))

        # The dead letter's page: both attempts, how each ended, and the events.
        rows.first.locator(f"a[href*='{ids['dead']}']").first.click()
        expect(page).to_have_url(re.compile(rf"/admin/runledger/job/{ids['dead']}/change/"))
        attempts_group = page.locator("#attempts-group")
        expect(attempts_group).to_contain_text("Retry Scheduled")
        expect(attempts_group).to_contain_text("Dead Lettered")
        expect(attempts_group).to_contain_text("the warehouse did not answer (attempt 2)")
        expect(page.locator("#events-group")).to_contain_text("Dead Lettered")
        expect(page.locator("pre.runledger-job-payload")).to_contain_text('"order_id": 1')
        expect(page.locator("#runledger-requeue-job")).to_be_visible()
        shots.append(shot(page, "08-job-with-attempts"))

        # The requeue action, from the dead letters' list.
        page.goto(f"{base}/admin/runledger/job/?status__exact=DEAD_LETTERED")
        page.locator("#result_list input.action-select").first.check()
        page.select_option("select[name=action]", "requeue_selected_jobs")
        expect(page.locator(".actions .action-counter")).to_contain_text("1 of 1 selected")
        shots.append(shot(page, "09-requeue-action"))
        page.click("button[name=index]")
        expect(page.locator("ul.messagelist")).to_contain_text("Requeued 1 job.")
        expect(page.locator("#result_list tbody tr")).to_have_count(0)
        shots.append(shot(page, "10-requeued"))

        # The job metrics page, from its entry on the index.
        page.goto(f"{base}/admin/")
        page.click("tr.model-jobmetricspage a")
        expect(page).to_have_url(re.compile(r"/admin/runledger/job/metrics/$"))
        expect(page.locator("h1")).to_have_text("Job metrics")
        metrics_rows = page.locator("table#job-metrics tr.job-metrics-row")
        expect(metrics_rows).to_have_count(2)
        warehouse_row = metrics_rows.filter(has_text=WAREHOUSE)
        expect(warehouse_row.locator("td.field-due_count")).to_have_text("1")
        expect(warehouse_row.locator("td.field-retried_24h")).to_have_text("1")
        expect(warehouse_row.locator("td.field-dead_lettered_24h")).to_have_text("1")
        receipt_row = metrics_rows.filter(has_text=RECEIPT)
        expect(receipt_row.locator("td.field-succeeded_24h")).to_have_text("1")
        shots.append(shot(page, "11-job-metrics"))

    requeued = Job.objects.values("status", "run_number", "attempt").get(id=ids["dead"])
    assert requeued == {"status": "PENDING", "run_number": 2, "attempt": 0}
    assert Job.objects.get(id=ids["done"]).status == "SUCCEEDED"
    assert len(shots) == 5
    assert all(path.stat().st_size > 0 for path in shots)
