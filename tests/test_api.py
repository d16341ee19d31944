"""The public surface: pinned so that every change to it is deliberate."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import runledger_django
from runledger_django import api

PUBLIC_NAMES = [
    "BackfillReport",
    "ContinueJob",
    "EnqueueOutcome",
    "IntentMetrics",
    "IntentOutcome",
    "IntentRequest",
    "IntentStatus",
    "JobContext",
    "JobMetrics",
    "JobRequest",
    "JobTarget",
    "JobTypeControl",
    "PromotionReport",
    "ReadScope",
    "ReplayOutcome",
    "RetryJob",
    "RunledgerError",
    "ScheduleMetrics",
    "SchedulePassReport",
    "StepHandle",
    "TargetSpec",
    "TerminalJobError",
    "WorkReport",
    "Workflow",
    "WorkflowHandle",
    "WorkflowIntentOutcome",
    "WorkflowPromotionReport",
    "WorkflowRunStatus",
    "WorkflowStart",
    "WorkflowStepStatus",
    "append_workflow_steps",
    "backfill_schedule",
    "cancel_job",
    "cancel_workflow",
    "complete_external_step",
    "delete_promoted_intents_before",
    "delete_promoted_intents_for_jobs",
    "delete_schedule",
    "enqueue_job",
    "enqueue_jobs",
    "get_intent",
    "get_schedule",
    "get_workflow_run",
    "intent_metrics",
    "job_handler",
    "job_metrics",
    "list_intents",
    "list_schedules",
    "list_workflow_runs",
    "list_workflow_steps",
    "next_fires",
    "pause_job_type",
    "pause_schedule",
    "promote_intents",
    "promote_workflow_intents",
    "record_intent",
    "record_intents",
    "record_workflow_intent",
    "replay_job",
    "requeue_job",
    "resume_job_type",
    "resume_schedule",
    "retime_schedule",
    "retry_workflow",
    "run_jobs",
    "run_schedule_pass",
    "save_schedule",
    "schedule",
    "schedule_metrics",
    "set_job_type_limits",
    "start_workflow",
    "trigger_schedule",
    "workflow_handle",
]

# Where each name of the worker runtime is defined (SPEC "Running jobs"): the facade only
# re-exports, and JobAttempt is a model, importable from runledger_django.models only.
WORKER_RUNTIME_ORIGINS = {
    "JobContext": "runledger_django.worker.context",
    "RetryJob": "runledger_django.worker.outcomes",
    "TerminalJobError": "runledger_django.worker.outcomes",
    "job_handler": "runledger_django.worker.registry",
    "run_jobs": "runledger_django.worker.run",
    "WorkReport": "runledger_django.domain",
    "cancel_job": "runledger_django.services.job_control",
    "requeue_job": "runledger_django.services.job_control",
    "ContinueJob": "runledger_django.worker.outcomes",
    "replay_job": "runledger_django.services.replay",
    "ReplayOutcome": "runledger_django.domain",
}

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def test_all__package_and_api__pinned_and_sorted() -> None:
    assert runledger_django.__all__ == PUBLIC_NAMES
    assert api.__all__ == PUBLIC_NAMES


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_package_attribute__same_object_as_api(name: str) -> None:
    assert getattr(runledger_django, name) is getattr(api, name)


@pytest.mark.parametrize(("name", "module"), sorted(WORKER_RUNTIME_ORIGINS.items()))
def test_worker_runtime_names__reexported_from_their_modules(name: str, module: str) -> None:
    assert getattr(runledger_django, name).__module__ == module


def test_job_attempt__importable_from_models_not_the_package() -> None:
    from runledger_django.models import JobAttempt

    assert JobAttempt._meta.db_table == "runledger_job_attempts"
    assert "JobAttempt" not in runledger_django.__all__


def test_dir__lists_the_public_names() -> None:
    assert set(PUBLIC_NAMES) <= set(dir(runledger_django))


def test_getattr__unknown_name__attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'enqueue_many'"):
        runledger_django.enqueue_many  # noqa: B018
    with pytest.raises(AttributeError):
        runledger_django.decode_intent_state  # noqa: B018


def test_version__from_distribution_metadata__the_version_pyproject_sets() -> None:
    """pyproject.toml's [project] version is the only place the version is written."""
    with (PROJECT_ROOT / "pyproject.toml").open("rb") as handle:
        written = tomllib.load(handle)["project"]["version"]
    assert runledger_django.__version__ == metadata.version("runledger-django") == written


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - fixed interpreter and code
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_import__without_settings__imports_no_models_or_services() -> None:
    """The package is imported while INSTALLED_APPS loads: it must not touch the app registry."""
    result = run_python(
        """
        import sys
        import runledger_django
        loaded = sorted(name for name in sys.modules if name.startswith("runledger_django."))
        print(runledger_django.__version__, loaded)
        assert loaded == [], loaded
        assert "django.db.models" not in sys.modules
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{runledger_django.__version__} []")


def test_import__settings_configured_but_apps_not_ready__no_app_registry_error() -> None:
    result = run_python(
        """
        import django.conf
        django.conf.settings.configure(INSTALLED_APPS=["runledger_django"])
        import runledger_django
        import runledger_django.apps
        assert "runledger_django.models" not in __import__("sys").modules
        """
    )
    assert result.returncode == 0, result.stderr
