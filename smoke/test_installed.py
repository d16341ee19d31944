"""The installed wheel, used as a project uses it: migrate, check, record, promote, run, browse.

pytest-django builds the test database with ``migrate``, so every migration the wheel ships
has run before the first test. transaction=True where a worker subprocess must see committed
rows.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client
from django.urls import reverse

import runledger_django
from runledger_django import IntentStatus, promote_intents, record_intent
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent
from smoke_app import ECHO

SMOKE_DIR = Path(__file__).resolve().parent
CHECKOUT = SMOKE_DIR.parent
PACKAGE_DIR = Path(runledger_django.__file__).resolve().parent
WORKER_TIMEOUT = 120


def checkout_version() -> str:
    with (CHECKOUT / "pyproject.toml").open("rb") as handle:
        return str(tomllib.load(handle)["project"]["version"])


def test_import__runledger_django__from_the_installed_wheel_not_the_checkout() -> None:
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert PACKAGE_DIR.is_relative_to(site_packages), PACKAGE_DIR
    assert not PACKAGE_DIR.is_relative_to(CHECKOUT), PACKAGE_DIR
    direct_url = metadata.distribution("runledger-django").read_text("direct_url.json")
    assert direct_url is not None
    assert "dir_info" not in json.loads(direct_url)  # a wheel file, not an (editable) folder
    assert runledger_django.__version__ == metadata.version("runledger-django")
    assert runledger_django.__version__ == checkout_version()
    assert (PACKAGE_DIR / "py.typed").is_file()


@pytest.mark.django_db
def test_migrate__every_migration_the_wheel_ships__applied_and_models_match() -> None:
    shipped = sorted(path.stem for path in (PACKAGE_DIR / "migrations").glob("0*.py"))
    applied = sorted(
        name
        for app, name in MigrationRecorder(connection).applied_migrations()
        if app == "runledger"
    )
    assert shipped and applied == shipped
    call_command("migrate", "--check", verbosity=0)
    call_command("makemigrations", "runledger", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db
def test_check__deploy_and_database_tags__no_issue() -> None:
    out = io.StringIO()
    call_command(
        "check", "--deploy", "--database", "default", "--fail-level", "WARNING", stdout=out
    )
    assert "System check identified no issues" in out.getvalue()


def run_worker(*args: str) -> list[dict[str, object]]:
    """``manage.py runledger_worker --burst --json`` in a process of its own, on the test
    database; returns its JSON lines (one per finished attempt)."""
    env = {**os.environ, "RUNLEDGER_SMOKE_DB_NAME": str(connection.settings_dict["NAME"])}
    result = subprocess.run(  # noqa: S603  (this interpreter, fixed arguments)
        [sys.executable, "-m", "django", "runledger_worker", "--burst", "--json", *args],
        cwd=SMOKE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.django_db(transaction=True)
def test_runledger_worker__intent_recorded_and_promoted__job_succeeds() -> None:
    assert run_worker() == []  # nothing due; the worker defines the handler's job type
    assert JobDefinition.objects.filter(job_type=ECHO, is_enabled=True).exists()
    with transaction.atomic():
        outcome = record_intent(ECHO, {"n": 1}, idempotency_key="smoke-1")
    assert outcome.status == IntentStatus.PENDING

    report = promote_intents([ECHO])

    intent = JobEnqueueIntent.objects.get(id=outcome.intent_id)
    assert (report.inserted_jobs, intent.status) == (1, IntentStatus.PROMOTED)
    assert intent.promoted_job_id is not None
    [run] = run_worker()
    job = Job.objects.get(id=intent.promoted_job_id)
    assert (run["job_id"], run["outcome"]) == (str(job.id), "succeeded")
    assert (job.status, job.output) == ("SUCCEEDED", {"echo": {"n": 1}})


@pytest.mark.django_db
def test_admin__every_registered_runledger_page__renders_for_a_superuser() -> None:
    """Every changelist of the runledger app, found in the admin's registry (pages added later
    are covered too), renders through the installed templates."""
    user = get_user_model().objects.create_superuser("smoke", "smoke@smoke.invalid", "smoke")
    client = Client()
    client.force_login(user)
    models = [model for model in admin.site._registry if model._meta.app_label == "runledger"]
    assert models
    origins: set[str] = set()
    for model in models:
        url = reverse(f"admin:runledger_{model._meta.model_name}_changelist")
        response = client.get(url, follow=True, secure=True)
        assert response.status_code == 200, (url, response.redirect_chain)
        origins |= {str(t.origin.name) for t in response.templates if t.origin is not None}
    app_index = client.get(reverse("admin:app_list", args=("runledger",)), secure=True)
    assert app_index.status_code == 200
    origins |= {str(t.origin.name) for t in app_index.templates if t.origin is not None}
    own = {name for name in origins if Path(name).is_relative_to(PACKAGE_DIR / "templates")}
    assert {Path(name).name for name in own} >= {"change_list.html", "app_index.html"}, origins
