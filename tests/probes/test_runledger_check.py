"""``manage.py runledger_check``: each failure class reported on its own, with its own exit code
(checklist item 29).

Broken states are made for real inside the test's transaction (a dropped index, a forgotten
migration row, an old due job) and rolled back with it; the unreachable database is a real
refused connection in a subprocess.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from runledger_django import enqueue_job
from runledger_django.errors import RunledgerError
from runledger_django.models import JobDefinition
from runledger_django.services import system_check
from runledger_django.services.system_check import SystemCheckOptions, run_system_checks
from runledger_django.services.worker_registry import WorkerIdentity, beat_worker
from tests.conftest import TEST_JOB_TYPE, MakeDefinition, run_sql
from tests.worker.conftest import Register
from tests.worker.processes import BASE_DIR

pytestmark = pytest.mark.django_db

CHECK_NAMES = [
    "database",
    "server_version",
    "migrations",
    "schema",
    "definitions",
    "backlog",
    "workers",
]


def check(*args: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    try:
        call_command("runledger_check", "--json", *args, stdout=out)
    except CommandError as error:
        return error.returncode, json.loads(out.getvalue())
    return 0, json.loads(out.getvalue())


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {name: outcome["status"] for name, outcome in report["checks"].items()}


@pytest.fixture
def defined(make_definition: MakeDefinition) -> None:
    """Definitions for every handler this process registers, so only the test's break fails."""
    from runledger_django.worker.registry import autodiscover, registry

    autodiscover()
    for job_type in registry.job_types():
        if not JobDefinition.objects.filter(job_type=job_type).exists():
            make_definition(job_type)


def due_job(seconds_ago: int) -> None:
    if not JobDefinition.objects.filter(job_type=TEST_JOB_TYPE).exists():
        JobDefinition.objects.create(job_type=TEST_JOB_TYPE)
    job_id = enqueue_job(TEST_JOB_TYPE, {}).job_id
    run_sql(
        "UPDATE runledger_job_queue SET next_run_at = now() - make_interval(secs => %s) "
        "WHERE id = %s",
        [seconds_ago, job_id],
    )


@pytest.mark.usefixtures("defined")
def test_healthy__every_check_ok__exit_0() -> None:
    code, report = check("--max-oldest-due-age", "300", "--max-due-jobs", "10")
    assert code == 0, report
    assert list(report["checks"]) == CHECK_NAMES
    assert set(statuses(report).values()) == {"ok"}
    assert report["ok"] is True
    assert report["checks"]["server_version"]["server_version_num"] >= 150000
    assert report["checks"]["migrations"]["unapplied"] == []
    assert report["checks"]["schema"]["missing"] == []
    assert report["checks"]["backlog"]["due_jobs"] == 0


def test_database_unreachable__exit_3__the_rest_skipped() -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/nowhere",
    }
    result = subprocess.run(
        [sys.executable, "-m", "django", "runledger_check", "--json"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    report = json.loads(result.stdout)
    assert report["checks"]["database"]["status"] == "failed"
    assert report["checks"]["database"]["error_code"].startswith("db.")
    assert {statuses(report)[name] for name in CHECK_NAMES[1:]} == {"skipped"}


@pytest.mark.usefixtures("defined")
def test_server_too_old__exit_4(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server cannot be downgraded: the supported minimum is raised past it instead."""
    monkeypatch.setattr(system_check, "MIN_SERVER_VERSION", 990000)
    code, report = check()
    assert code == 4
    assert statuses(report)["server_version"] == "failed"
    assert statuses(report)["migrations"] == "ok"


@pytest.mark.usefixtures("defined")
def test_migration_not_applied__exit_5__later_checks_skipped() -> None:
    run_sql(
        "DELETE FROM django_migrations WHERE app = 'runledger' AND name = '0011_worker_registry'"
    )
    code, report = check()
    assert code == 5
    assert report["checks"]["migrations"]["unapplied"] == ["runledger.0011_worker_registry"]
    assert statuses(report)["schema"] == "skipped"


@pytest.mark.usefixtures("defined")
def test_schema_object_missing__exit_6__named() -> None:
    run_sql("DROP INDEX idx_job_queue_pending_metrics")
    run_sql("DROP TRIGGER trg_job_queue_set_updated_at ON runledger_job_queue")
    code, report = check()
    assert code == 6
    assert report["checks"]["schema"]["missing"] == [
        "index idx_job_queue_pending_metrics",
        "trigger trg_job_queue_set_updated_at",
    ]


@pytest.mark.usefixtures("defined")
def test_handler_without_definition__exit_7__named(register: Register) -> None:
    register("probes.undefined", lambda job: {})
    JobDefinition.objects.create(job_type="probes.disabled", is_enabled=False)
    register("probes.disabled", lambda job: {})
    code, report = check()
    assert code == 7
    definitions = report["checks"]["definitions"]
    assert (definitions["missing"], definitions["disabled"]) == (
        ["probes.undefined"],
        ["probes.disabled"],
    )
    assert check("--skip", "definitions")[0] == 0


@pytest.mark.usefixtures("defined")
def test_backlog_thresholds__exit_8() -> None:
    due_job(400)
    code, report = check("--max-oldest-due-age", "300")
    assert code == 8
    assert 400 <= report["checks"]["backlog"]["oldest_due_age_seconds"] < 460
    assert check("--max-oldest-due-age", "600")[0] == 0
    code, report = check("--max-due-jobs", "0")
    assert (code, report["checks"]["backlog"]["due_jobs"]) == (8, 1)
    assert check("--max-due-jobs", "1")[0] == 0


@pytest.mark.usefixtures("defined")
def test_due_jobs_without_a_live_worker__exit_9_when_required() -> None:
    due_job(1)
    code, report = check("--require-workers")
    assert code == 9
    assert report["checks"]["workers"]["unserved"] == [TEST_JOB_TYPE]
    assert check()[0] == 0
    beat_worker(
        WorkerIdentity(worker_id="check-1", job_types=[TEST_JOB_TYPE], concurrency=1),
        heartbeat_seconds=60,
        retention_seconds=3600,
    )
    code, report = check("--require-workers")
    assert code == 0, report
    assert report["checks"]["workers"]["live_workers"] == {TEST_JOB_TYPE: 1}


@pytest.mark.usefixtures("defined")
def test_several_failures__each_reported__first_one_sets_the_code(register: Register) -> None:
    register("probes.undefined", lambda job: {})
    due_job(400)
    code, report = check("--max-oldest-due-age", "300")
    assert code == 7
    assert statuses(report)["definitions"] == "failed"
    assert statuses(report)["backlog"] == "failed"


def test_text_output__failure_line_and_exit_code(register: Register) -> None:
    register("probes.undefined", lambda job: {})
    out = io.StringIO()
    with pytest.raises(CommandError) as info:
        call_command("runledger_check", "--skip", "backlog", stdout=out)
    assert info.value.returncode == 7
    assert "definitions     FAILED" in out.getvalue()
    assert "probes.undefined" in out.getvalue()
    assert "backlog         skipped" in out.getvalue()


@pytest.mark.parametrize(
    "options",
    [
        SystemCheckOptions(skip=frozenset({"nope"})),
        SystemCheckOptions(max_oldest_due_age=-1),
        SystemCheckOptions(max_due_jobs=-1),
        SystemCheckOptions(handler_job_types=[" "]),
    ],
)
def test_bad_options__refused_before_any_sql(
    options: SystemCheckOptions, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
        run_system_checks(options)
    assert info.value.category == "validation"
