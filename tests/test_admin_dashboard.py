"""The admin dashboard through the test client, on real PostgreSQL data: attempts land in the
buckets of their finish time, the job type filter narrows every chart, samples feed depth and
age, permissions follow the job view permission, every query is bounded, and the page makes
no external request and runs no inline script (checklist items 45-49 at page level).

Attempts are made through the services a worker uses, then moved back in time with a direct
UPDATE of ``finished_at`` (timestamps come from SQL ``now()``; Python time is never frozen).
Most tests roll back, so ``now()`` is one instant for the whole test and bucket positions are
exact. The sampler owns its transaction, so its tests are transactional and locate the
sampled minute from the sampler's own report.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.urls import reverse
from pytest_django import DjangoAssertNumQueries

import runledger_django
from runledger_django import enqueue_job
from runledger_django.domain import FailureKind, JobFailure, QueueDashboard
from runledger_django.errors import RunledgerError
from runledger_django.models import QueueSample
from runledger_django.services.claim import claim_jobs
from runledger_django.services.dashboard import queue_dashboard, sample_queue
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.conftest import MakeDefinition
from tests.test_commands import _connection_kwargs

pytestmark = pytest.mark.django_db

DASHBOARD_URL = reverse("admin:runledger_dashboard")
RECEIPT = "shop.send_receipt"
WAREHOUSE = "shop.notify_warehouse"
HOUR_LAST = 59  # the newest of the hour's 60 one-minute buckets
DAY_LAST = 287  # the newest of the day's 288 five-minute buckets

Finish = Callable[..., uuid.UUID]


def move_attempts(job_id: uuid.UUID, minutes_ago: float) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runledger_job_attempts SET finished_at = now() - make_interval(secs => %s) "
            "WHERE job_id = %s",
            [minutes_ago * 60, job_id],
        )


@pytest.fixture
def finish(make_definition: MakeDefinition) -> Finish:
    """A job of ``job_type`` whose attempts end as ``outcomes`` (each one claim), all moved to
    ``minutes_ago`` before now."""
    defined: set[str] = set()

    def make(
        job_type: str,
        *outcomes: str,
        minutes_ago: float = 0,
        code: str = "job.handler_failed",
    ) -> uuid.UUID:
        if job_type not in defined:
            make_definition(job_type, max_attempts=len(outcomes) + 1)
            defined.add(job_type)
        job_id = enqueue_job(job_type, {"n": uuid.uuid4().hex}, max_attempts=len(outcomes)).job_id
        for outcome in outcomes:
            with connection.cursor() as cursor:  # due again after a retry
                cursor.execute(
                    "UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id]
                )
            [claimed] = claim_jobs([job_type], worker_id="dash-test", limit=1, lease_seconds=60)
            assert claimed.lease.job_id == job_id
            if outcome == "SUCCEEDED":
                complete_job_success(claimed.lease, output=None)
                continue
            failure = JobFailure(
                kind=FailureKind.RETRYABLE
                if outcome == "RETRY_SCHEDULED"
                else FailureKind.TERMINAL,
                code=code,
                message="the warehouse did not answer",
                policy_retry_delay_ms=1000,
                retry_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
            )
            complete_job_failure(claimed.lease, failure)
        move_attempts(job_id, minutes_ago)
        return job_id

    return make


def dashboard(client: Client, **params: str) -> tuple[Any, QueueDashboard]:
    response = client.get(DASHBOARD_URL, params)
    assert response.status_code == 200
    data = response.context["data"]
    assert isinstance(data, QueueDashboard)
    return response, data


def nonzero(values: tuple[Any, ...]) -> dict[int, Any]:
    return {index: value for index, value in enumerate(values) if value}


# --- buckets ----------------------------------------------------------------------------------


def test_dashboard__attempts__counted_in_the_bucket_of_their_finish(
    admin_client: Client, finish: Finish
) -> None:
    finish(RECEIPT, "SUCCEEDED")
    finish(RECEIPT, "SUCCEEDED")
    finish(RECEIPT, "SUCCEEDED", minutes_ago=5)
    finish(WAREHOUSE, "RETRY_SCHEDULED", "DEAD_LETTERED", minutes_ago=3)
    finish(RECEIPT, "SUCCEEDED", minutes_ago=120)  # the day's window only
    finish(RECEIPT, "SUCCEEDED", minutes_ago=25 * 60)  # older than both windows

    _, hour = dashboard(admin_client)
    assert (hour.window, hour.bucket_seconds, len(hour.bucket_starts)) == ("hour", 60, 60)
    assert nonzero(hour.succeeded) == {HOUR_LAST: 2, HOUR_LAST - 5: 1}
    assert nonzero(hour.retried) == {HOUR_LAST - 3: 1}
    assert nonzero(hour.dead_lettered) == {HOUR_LAST - 3: 1}
    assert hour.bucket_starts[HOUR_LAST] <= hour.generated_at
    assert hour.generated_at - hour.bucket_starts[HOUR_LAST] < dt.timedelta(minutes=1)
    assert all(b - a == dt.timedelta(minutes=1) for a, b in itertools.pairwise(hour.bucket_starts))

    _, day = dashboard(admin_client, window="day")
    assert (day.bucket_seconds, len(day.bucket_starts)) == (300, 288)
    assert sum(day.succeeded) == 4  # not the one from 25 hours ago
    assert day.succeeded[DAY_LAST - 24] == 1  # two hours = 24 buckets of five minutes
    assert sum(day.retried) == sum(day.dead_lettered) == 1


def test_dashboard__job_type_filter__every_series_narrowed(
    admin_client: Client, finish: Finish
) -> None:
    finish(RECEIPT, "SUCCEEDED", minutes_ago=1)
    finish(WAREHOUSE, "RETRY_SCHEDULED", "SUCCEEDED", minutes_ago=2)

    response, data = dashboard(admin_client, job_type=WAREHOUSE)
    assert data.job_type == WAREHOUSE
    assert nonzero(data.succeeded) == {HOUR_LAST - 2: 1}
    assert nonzero(data.retried) == {HOUR_LAST - 2: 1}
    assert "Attempts finished, last hour (shop.notify_warehouse)" in response.content.decode()

    _, both = dashboard(admin_client)
    assert nonzero(both.succeeded) == {HOUR_LAST - 1: 1, HOUR_LAST - 2: 1}


def test_dashboard__failures__by_error_code_top_codes_then_other(
    admin_client: Client, finish: Finish, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("runledger_django.services.dashboard.TOP_ERROR_CODES", 2)
    for _ in range(3):
        finish(WAREHOUSE, "DEAD_LETTERED", code="partner.timeout", minutes_ago=1)
    finish(WAREHOUSE, "RETRY_SCHEDULED", "DEAD_LETTERED", code="partner.refused", minutes_ago=2)
    finish(WAREHOUSE, "DEAD_LETTERED", code="partner.gone", minutes_ago=2)
    finish(WAREHOUSE, "SUCCEEDED")

    data = queue_dashboard(window="hour")
    series = {entry.code: nonzero(entry.counts) for entry in data.failures_by_code}
    assert list(series) == ["partner.timeout", "partner.refused", None]
    assert series == {
        "partner.timeout": {HOUR_LAST - 1: 3},
        "partner.refused": {HOUR_LAST - 2: 2},
        None: {HOUR_LAST - 2: 1},
    }


def test_dashboard__nothing_happened__explicit_empty_states(admin_client: Client) -> None:
    response, data = dashboard(admin_client)
    html = response.content.decode()

    assert not data.sampled
    assert sum(data.succeeded) == 0 and data.failures_by_code == ()
    assert "No attempt finished in this window." in html
    assert "No attempt failed in this window." in html
    assert len(re.findall(r'class="empty-text"[^>]*>No queue samples', html)) == 2  # depth, age
    assert 'id="dashboard-live-empty"' in html


def test_dashboard__markup_in_a_job_type__escaped_in_charts_and_tables(
    admin_client: Client, finish: Finish
) -> None:
    hostile = "<img src=x onerror=alert(1)>.job"
    finish(hostile, "RETRY_SCHEDULED", "SUCCEEDED", code="<b>bold</b>")

    response, data = dashboard(admin_client, job_type=hostile)
    html = response.content.decode()
    assert data.job_type == hostile and sum(data.succeeded) == 1
    assert "<img src=x" not in html and "<b>bold" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;.job" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html


def test_dashboard__bad_window__form_error_and_no_charts(admin_client: Client) -> None:
    response = admin_client.get(DASHBOARD_URL, {"window": "year"})
    assert response.status_code == 200
    assert response.context["data"] is None
    assert response.context["form"].errors["window"]


def test_queue_dashboard__bad_input__refused_before_sql(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    with django_assert_num_queries(0):
        with pytest.raises(RunledgerError) as info:
            queue_dashboard(window="week")
        assert info.value.code == "job.invalid_argument"
        with pytest.raises(RunledgerError) as info:
            queue_dashboard(job_type=123)  # type: ignore[arg-type]
        assert info.value.code == "job.invalid_argument"


# --- query cost -------------------------------------------------------------------------------


def test_dashboard__queries__few_time_bounded_and_no_unbounded_count(
    admin_client: Client,
    finish: Finish,
    django_assert_max_num_queries: DjangoAssertNumQueries,
) -> None:
    finish(RECEIPT, "SUCCEEDED")
    finish(WAREHOUSE, "RETRY_SCHEDULED", "DEAD_LETTERED")

    # Inside the test's transaction the capped reads run in a savepoint with their settings
    # put back one by one (13 statements); in autocommit they are one round trip.
    for params in ({}, {"window": "day"}, {"job_type": WAREHOUSE}):
        with django_assert_max_num_queries(20) as captured:
            response = admin_client.get(DASHBOARD_URL, params)
        assert response.status_code == 200
        sqls = [q["sql"] for q in captured.captured_queries]
        assert not [s for s in sqls if '"__count"' in s], "no paginator-style COUNT(*)"
        attempts = [s for s in sqls if "runledger_job_attempts" in s]
        assert attempts, "the charts read the attempts"
        for sql in attempts:
            for statement in sql.split(";"):
                if "FROM runledger_job_attempts" in statement:
                    assert "finished_at >=" in statement, statement
        samples = [s for s in sqls if "FROM runledger_queue_samples" in s]
        assert samples and all("sampled_at >=" in s for s in samples)


def test_dashboard_statements__plans__index_scans_only(finish: Finish) -> None:
    """Under the planner pins the page runs with, no chart statement scans a table whole."""
    from runledger_django.db import dashboard_queries, session_queries

    finish(RECEIPT, "SUCCEEDED")
    params: dict[str, Any] = {
        "bucket": dt.timedelta(minutes=5),
        "buckets": 288,
        "job_type": None,
        "top_codes": 5,
    }
    plans = {}
    with connection.cursor() as cursor:
        cursor.execute(
            session_queries.CAP_LIFECYCLE_TIMEOUTS,
            {
                "cap_lock_ms": 1000,
                "cap_lock_text": "1000ms",
                "cap_statement_ms": 3000,
                "cap_statement_text": "3000ms",
            },
        )
        for name in ("THROUGHPUT", "FAILURES_BY_CODE", "DEPTH_TOTAL", "DEPTH_FOR_TYPE"):
            cursor.execute(
                "EXPLAIN " + getattr(dashboard_queries, name),
                {**params, "job_type": RECEIPT if name == "DEPTH_FOR_TYPE" else None},
            )
            plans[name] = "\n".join(row[0] for row in cursor.fetchall())
    for name, plan in plans.items():
        assert "Seq Scan" not in plan, (name, plan)
        assert "Index" in plan, (name, plan)
    assert "idx_job_attempts_finished_metrics" in plans["THROUGHPUT"]
    assert "idx_job_attempts_finished_metrics" in plans["FAILURES_BY_CODE"]
    assert "uq_queue_samples_total_minute" in plans["DEPTH_TOTAL"]
    assert "uq_queue_samples_type_minute" in plans["DEPTH_FOR_TYPE"]


# --- permissions ------------------------------------------------------------------------------


def staff(client: Client, *codenames: str) -> Client:
    user = User.objects.create_user("staff", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="runledger", codename__in=codenames)
    )
    client.force_login(user)
    return client


def test_dashboard__anonymous__redirected_to_login(client: Client) -> None:
    response = client.get(DASHBOARD_URL)
    assert response.status_code == 302
    assert "/login/" in response["Location"]


def test_dashboard__staff_without_job_view__forbidden_and_not_listed(client: Client) -> None:
    staff(client, "view_jobenqueueintent")
    assert client.get(DASHBOARD_URL).status_code == 403
    index = client.get(reverse("admin:index")).content.decode()
    assert DASHBOARD_URL not in index


def test_dashboard__job_viewer__sees_it_from_the_index(client: Client) -> None:
    staff(client, "view_job")
    index = client.get(reverse("admin:index")).content.decode()
    assert 'class="model-dashboardpage"' in index
    entry = client.get(reverse("admin:runledger_dashboardpage_changelist"))
    assert entry.status_code == 200  # the entry's changelist is the page itself
    assert entry.context["title"] == "Dashboard"
    app_index = client.get(reverse("admin:app_list", kwargs={"app_label": "runledger"}))
    assert 'id="runledger-dashboard-link"' in app_index.content.decode()


# --- no script, no external request (item 49) ---------------------------------------------------


class _Resources(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.inline_scripts = 0
        self.urls: list[str] = []
        self.handlers: list[str] = []
        self._in_script_without_src = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "script" and not values.get("src"):
            self.inline_scripts += 1
        for name, value in attrs:
            if name in {"src", "href", "action", "xlink:href", "srcset", "poster", "data"}:
                self.urls.append(value or "")
            if name.startswith("on"):
                self.handlers.append(name)
            if name == "style" and value and "url(" in value:
                self.urls.append(value)


def test_dashboard__no_inline_script_no_handler_no_external_url(
    admin_client: Client, finish: Finish
) -> None:
    finish(RECEIPT, "SUCCEEDED")
    finish(WAREHOUSE, "RETRY_SCHEDULED", "DEAD_LETTERED", minutes_ago=4)
    html = admin_client.get(DASHBOARD_URL).content.decode()

    parser = _Resources()
    parser.feed(html)
    assert parser.inline_scripts == 0
    assert parser.handlers == []
    external = [url for url in parser.urls if re.match(r"^(?:[a-z][a-z0-9+.-]*:|//)", url, re.I)]
    assert external == []
    assert "<svg" in html and "runledger_django/dashboard.css" in html
    css = Path(runledger_django.__file__).parent / "static/runledger_django/dashboard.css"
    text = css.read_text()
    assert "url(" not in text and "@import" not in text
    assert "prefers-color-scheme: dark" in text and "var(--body-fg)" in text


# --- the sampler --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sample_queue__live_queue__recorded_per_type_and_total(
    admin_client: Client, make_definition: MakeDefinition
) -> None:
    make_definition(RECEIPT)
    make_definition(WAREHOUSE)
    for n in range(3):
        enqueue_job(
            RECEIPT, {"n": n}, next_run_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30)
        )
    enqueue_job(RECEIPT, {"n": 9}, next_run_at=dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    enqueue_job(WAREHOUSE, {"n": 1}, next_run_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5))
    claim_jobs([WAREHOUSE], worker_id="dash-test", limit=1, lease_seconds=60)

    report = sample_queue()
    assert report.skipped is None and report.job_types == 2 and report.sampled_at is not None
    rows = {
        row["job_type"]: row
        for row in QueueSample.objects.values(
            "job_type", "due_count", "scheduled_count", "leased_count", "oldest_due_age_seconds"
        )
    }
    assert set(rows) == {RECEIPT, WAREHOUSE, None}
    assert [rows[RECEIPT][k] for k in ("due_count", "scheduled_count", "leased_count")] == [3, 1, 0]
    assert [rows[WAREHOUSE][k] for k in ("due_count", "scheduled_count", "leased_count")] == [
        0,
        0,
        1,
    ]
    assert [rows[None][k] for k in ("due_count", "scheduled_count", "leased_count")] == [3, 1, 1]
    assert 30 <= rows[RECEIPT]["oldest_due_age_seconds"] < 120
    assert rows[WAREHOUSE]["oldest_due_age_seconds"] == 0
    assert rows[None]["oldest_due_age_seconds"] == rows[RECEIPT]["oldest_due_age_seconds"]

    again = sample_queue()  # the same minute (or the next one, if the clock just turned)
    if again.skipped is None:
        assert again.sampled_at == report.sampled_at + dt.timedelta(minutes=1)
    else:
        assert again.skipped == "done"
        assert QueueSample.objects.count() == 3

    response = admin_client.get(DASHBOARD_URL)
    data: QueueDashboard = response.context["data"]
    index = data.bucket_starts.index(report.sampled_at)
    assert data.sampled
    assert (data.due[index], data.scheduled[index], data.leased[index]) == (3, 1, 1)
    assert data.oldest_due_age_seconds[index] == rows[None]["oldest_due_age_seconds"]
    assert data.due[0] is None  # no sample an hour ago: a gap, not a zero
    html = response.content.decode()
    assert "No queue samples in this window." not in html

    _, one = dashboard(admin_client, job_type=WAREHOUSE)
    assert (one.due[index], one.leased[index]) == (0, 1)


@pytest.mark.django_db(transaction=True)
def test_sample_queue__old_samples__pruned_new_kept(make_definition: MakeDefinition) -> None:
    make_definition(RECEIPT)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO runledger_queue_samples (sampled_at, job_type, due_count, "
            "scheduled_count, leased_count, expired_lease_count, oldest_due_age_seconds) "
            "SELECT date_trunc('minute', now()) - make_interval(days => d), %s, 1, 0, 0, 0, 0 "
            "FROM unnest(ARRAY[1, 6, 8, 30]) AS d",
            [RECEIPT],
        )
    report = sample_queue()
    assert report.pruned == 2
    ages = sorted(
        round((report.sampled_at - at).total_seconds() / 86400)  # type: ignore[operator]
        for at in QueueSample.objects.filter(job_type=RECEIPT).values_list("sampled_at", flat=True)
    )
    assert ages == [0, 1, 6]


def test_sample_queue__inside_an_atomic_block__refused() -> None:
    with pytest.raises(RunledgerError) as info:
        sample_queue()
    assert info.value.code == "job.invalid_argument"


# --- the sample_queue command -------------------------------------------------------------------


def _sampled_then_signal(params: dict[str, Any], deadline: float) -> None:
    """Wait until the loop's first pass committed its total row (or the deadline), then TERM."""
    probe = psycopg.connect(**params, autocommit=True)
    try:
        while time.monotonic() < deadline:
            row = probe.execute(
                "SELECT count(*) FROM runledger_queue_samples WHERE job_type IS NULL"
            ).fetchone()
            if row is not None and row[0] > 0:
                break
            time.sleep(0.01)
    finally:
        probe.close()
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.django_db(transaction=True)
def test_sample_queue_command__json__one_pass_reported(make_definition: MakeDefinition) -> None:
    make_definition(RECEIPT)
    out = io.StringIO()
    call_command("sample_queue", "--json", stdout=out)

    report = json.loads(out.getvalue())
    assert set(report) == {"sampled_at", "job_types", "pruned", "skipped"}
    assert (report["job_types"], report["pruned"], report["skipped"]) == (1, 0, None)
    assert report["sampled_at"].endswith("Z")
    assert QueueSample.objects.filter(job_type=RECEIPT).count() == 1


@pytest.mark.django_db(transaction=True)
def test_sample_queue_command__loop_then_sigterm__stops_after_its_pass(
    make_definition: MakeDefinition,
) -> None:
    make_definition(RECEIPT)
    previous = signal.getsignal(signal.SIGTERM)
    killer = threading.Thread(
        target=_sampled_then_signal, args=(_connection_kwargs(), time.monotonic() + 10)
    )
    killer.start()
    out = io.StringIO()
    try:
        call_command("sample_queue", "--loop", "--interval", "0.05", stdout=out)
    finally:
        killer.join()

    assert signal.getsignal(signal.SIGTERM) == previous
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("sampled 1 job types at ")
    assert all(line.startswith(("sampled ", "skipped (done)")) for line in lines)
    assert QueueSample.objects.filter(job_type__isnull=True).count() in {1, 2}


def test_sample_queue_command__bad_interval__command_error() -> None:
    with pytest.raises(CommandError, match="invalid interval"):
        call_command("sample_queue", "--loop", "--interval", "0", stdout=io.StringIO())
