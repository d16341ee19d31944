"""Headless Chromium renders the admin dashboard in light and dark mode, and saves screenshots.

The charts are server-rendered SVG styled through the admin's colour variables: the browser
shows they are drawn, that the theme reaches them (a bar's computed fill and the page
background change with ``prefers-color-scheme``), that the data tables open without any
script, and that the page asks nothing of any host but its own.

As in ``test_admin_browser``: transaction=True, and no ORM call while the browser is open.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

import django.contrib.admin
import pytest
from django.contrib.auth.models import User
from django.db import connection
from pytest_django import Settings
from pytest_django.live_server_helper import LiveServer

import runledger_django
from runledger_django import enqueue_job
from runledger_django.domain import FailureKind, JobFailure
from runledger_django.models import JobDefinition
from runledger_django.services.claim import claim_jobs
from runledger_django.services.dashboard import sample_queue
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.browser.test_admin_browser import (
    ADMIN_PASSWORD,
    CHROMIUM_ARGS,
    PAGE_TIMEOUT_MS,
    RECEIPT,
    WAREHOUSE,
    shot,
)

# The two fixtures, re-exported (``as`` the same name) for pytest to find here.
from tests.browser.test_admin_browser import chromium as chromium
from tests.browser.test_admin_browser import superuser as superuser

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def dashboard_static(settings: Settings, tmp_path: Path) -> None:
    """Serve the admin's static files and ours from one STATIC_ROOT (the test settings have
    no staticfiles app to find them), laid out as collectstatic would."""
    root = tmp_path / "static"
    root.mkdir()
    (root / "admin").symlink_to(Path(django.contrib.admin.__file__).parent / "static" / "admin")
    ours = Path(runledger_django.__file__).parent / "static" / "runledger_django"
    (root / "runledger_django").symlink_to(ours)
    settings.STATIC_ROOT = str(root)


def _finished(job_type: str, outcomes: list[str], minutes_ago: float, code: str) -> None:
    job_id = enqueue_job(job_type, {"n": uuid.uuid4().hex}, max_attempts=len(outcomes)).job_id
    for outcome in outcomes:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id]
            )
        [claimed] = claim_jobs([job_type], worker_id="browser-worker", limit=1, lease_seconds=60)
        if outcome == "SUCCEEDED":
            complete_job_success(claimed.lease, output=None)
        else:
            retry = outcome == "RETRY_SCHEDULED"
            complete_job_failure(
                claimed.lease,
                JobFailure(
                    kind=FailureKind.RETRYABLE if retry else FailureKind.TERMINAL,
                    code=code,
                    message="the warehouse did not answer",
                    policy_retry_delay_ms=1000,
                    retry_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
                ),
            )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runledger_job_attempts SET finished_at = now() - make_interval(secs => %s) "
            "WHERE job_id = %s",
            [minutes_ago * 60, job_id],
        )


@pytest.fixture
def busy_hour() -> None:
    """An hour of work: receipts succeeding every few minutes, warehouse calls failing under
    two codes, a backlog, and an hour of queue samples (the recent minute from the sampler;
    the older ones written directly, since a test cannot wait an hour for the sampler)."""
    for job_type in (RECEIPT, WAREHOUSE):
        JobDefinition.objects.create(job_type=job_type, max_attempts=3)
    for minute in range(0, 60, 3):
        for _ in range(1 + (minute * 7) % 5):
            _finished(RECEIPT, ["SUCCEEDED"], minute + 0.5, "")
        if minute % 9 == 0:
            _finished(WAREHOUSE, ["RETRY_SCHEDULED", "SUCCEEDED"], minute + 0.5, "partner.timeout")
        if minute % 12 == 0:
            _finished(WAREHOUSE, ["DEAD_LETTERED"], minute + 0.5, "partner.refused")
    past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=90)
    for n in range(6):
        enqueue_job(WAREHOUSE, {"backlog": n}, next_run_at=past)
    report = sample_queue()
    assert report.skipped is None
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runledger_queue_samples (sampled_at, job_type, due_count, "
            "scheduled_count, leased_count, expired_lease_count, oldest_due_age_seconds) "
            "SELECT %s - make_interval(mins => m), NULL, (m * 13) %% 40, 3 + m %% 4, m %% 3, 0, "
            "(m * 17) %% 300 FROM generate_series(2, 59) AS m",
            [report.sampled_at],
        )


@contextmanager
def open_page(executable: Path, scheme: Literal["light", "dark"]) -> Iterator[Page]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=PAGE_TIMEOUT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(executable), headless=True, args=CHROMIUM_ARGS
        )
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900}, color_scheme=scheme)
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def _render(page: Page, base: str, name: str, shots: list[Path]) -> dict[str, str]:
    """Log in, open the dashboard from the index, check the charts, screenshot; return the
    computed colours that the theme decides."""
    from playwright.sync_api import expect

    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    expect(page).to_have_url(f"{base}/admin/")
    page.click("tr.model-dashboardpage a")
    expect(page).to_have_url(re.compile(r"/admin/runledger/dashboardpage/$"))
    expect(page.locator("h1")).to_have_text("Dashboard")

    figures = page.locator("figure.runledger-chart")
    expect(figures).to_have_count(4)
    for chart_id in ("throughput", "failures", "depth", "oldest-due"):
        svg = page.locator(f"#runledger-{chart_id} svg[role=img]")
        expect(svg).to_be_visible()
        expect(svg.locator("g.bucket")).to_have_count(60)
    expect(page.locator("#runledger-throughput rect.bar.succeeded").first).to_be_visible()
    expect(page.locator("#runledger-failures .legend-text")).to_have_text(
        ["partner.timeout", "partner.refused"]
    )
    shots.append(shot(page, f"dashboard-{name}"))

    # The data table opens without script (a <details> element) and shows the numbers.
    page.click("#runledger-depth summary")
    table = page.locator("#runledger-depth-data")
    expect(table).to_be_visible()
    expect(table.locator("tbody tr")).to_have_count(60)
    shots.append(shot(page, f"dashboard-{name}-depth-table"))

    # One job type, over the day.
    page.select_option("#id_window", "day")
    page.select_option("#id_job_type", WAREHOUSE)
    page.click("#dashboard-filter input[type=submit]")
    expect(page).to_have_url(re.compile(r"window=day"))
    expect(page.locator("#runledger-throughput svg g.bucket")).to_have_count(288)
    expect(page.locator("#runledger-throughput figcaption")).to_contain_text(WAREHOUSE)
    shots.append(shot(page, f"dashboard-{name}-day-one-type"))

    colours: dict[str, str] = page.evaluate(
        """() => ({
            background: getComputedStyle(document.body).backgroundColor,
            bar: getComputedStyle(document.querySelector('rect.bar.succeeded')).fill,
            text: getComputedStyle(document.querySelector('.runledger-chart-svg text')).fill,
        })"""
    )
    return colours


def test_dashboard__light_and_dark__charts_drawn_themed_and_self_contained(
    live_server: LiveServer,
    dashboard_static: None,
    chromium: Path,
    superuser: User,
    busy_hour: None,
) -> None:
    base = live_server.url
    colours: dict[str, dict[str, str]] = {}
    requested: list[str] = []
    shots: list[Path] = []
    for scheme in ("light", "dark"):
        with open_page(chromium, scheme) as page:
            page.on("request", lambda request: requested.append(request.url))
            css = page.request.get(f"{base}/static/runledger_django/dashboard.css")
            assert css.ok, "the dashboard's stylesheet is served"
            colours[scheme] = _render(page, base, scheme, shots)

    light, dark = colours["light"], colours["dark"]
    assert light["background"] != dark["background"]
    assert light["bar"] != dark["bar"], "the bars follow the theme"
    assert light["text"] != dark["text"], "the axis labels follow the theme"
    assert dark["bar"] not in {"", "none", "rgb(0, 0, 0)"}

    own = urlsplit(base).netloc
    assert requested and {urlsplit(url).netloc for url in requested} == {own}
    assert len(shots) == 6
    assert all(path.stat().st_size > 0 for path in shots)
