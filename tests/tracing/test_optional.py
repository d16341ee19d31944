"""Tracing is optional (checklist item 18): without ``opentelemetry-api`` the app works and
stores no context; with the API but no SDK nothing is recorded, stored or failed.

The "API absent" case runs in a subprocess whose imports of ``opentelemetry`` fail (as when
the extra is not installed), rather than uninstalling the package from the test venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from opentelemetry import trace

from runledger_django import enqueue_job, promote_intents, record_intent, run_jobs
from runledger_django.models import Job, JobEnqueueIntent
from runledger_django.services import tracing
from runledger_django.worker.context import JobContext
from tests.conftest import MakeDefinition
from tests.tracing.fixtures import Register, reset_global_provider
from tests.worker.processes import BASE_DIR, database_url
from tests.worker_app import NOOP

pytestmark = pytest.mark.django_db(transaction=True)

WITHOUT_THE_API = r"""
import json, sys

sys.modules["opentelemetry"] = None  # every "import opentelemetry..." now raises ImportError

import django

django.setup()

import tests.worker_app.jobs  # noqa: F401  (registers the NOOP handler)
from runledger_django import enqueue_job, promote_intents, record_intent, run_jobs
from runledger_django.models import Job, JobEnqueueIntent
from runledger_django.services import tracing
from tests.worker_app import NOOP

intent = record_intent(NOOP, {"n": 1}, idempotency_key="without-the-api")
direct = enqueue_job(NOOP, {"n": 2})
promote_intents([NOOP])
report = run_jobs([NOOP])
print(json.dumps({
    "active": tracing.active(),
    "api_loaded": sorted(name for name, module in sys.modules.items()
                         if name.startswith("opentelemetry") and module is not None),
    "ran": [report.claimed, report.succeeded],
    "intent_context": JobEnqueueIntent.objects.get(id=intent.intent_id).trace_context,
    "job_contexts": sorted(map(str, Job.objects.values_list("trace_context", flat=True))),
}))
"""


def test_without_the_api__records_promotes_and_runs_and_stores_no_context(
    make_definition: MakeDefinition,
) -> None:
    make_definition(NOOP)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "DATABASE_URL": database_url(),
        "RUNLEDGER_TEST_DB": str(connection.settings_dict["NAME"]),
    }
    completed = subprocess.run(  # noqa: S603  (fixed interpreter and arguments)
        [sys.executable, "-c", WITHOUT_THE_API],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report == {
        "active": False,
        "api_loaded": [],
        "ran": [2, 2],
        "intent_context": None,
        "job_contexts": ["None", "None"],
    }


@pytest.fixture
def handled(register: Register, make_definition: MakeDefinition) -> list[bool]:
    """A handler of NOOP that reports whether a recording span was current while it ran."""
    make_definition(NOOP)
    seen: list[bool] = []

    def handler(job: JobContext) -> None:
        seen.append(trace.get_current_span().is_recording())

    register(NOOP, handler)
    return seen


def record_and_run() -> list[Any]:
    intent = record_intent(NOOP, {"n": 1}, idempotency_key="api-only")
    enqueue_job(NOOP, {"n": 2})
    promote_intents([NOOP])
    report = run_jobs([NOOP])
    return [
        report.succeeded,
        JobEnqueueIntent.objects.get(id=intent.intent_id).trace_context,
        sorted(map(str, Job.objects.values_list("trace_context", flat=True))),
    ]


def test_api_without_an_sdk__nothing_recorded_or_stored_and_nothing_fails(
    handled: list[bool],
) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert tracing.active() is False

    assert record_and_run() == [2, None, ["None", "None"]]
    assert handled == [False, False]


@pytest.fixture
def noop_provider() -> Iterator[None]:
    reset_global_provider(trace.NoOpTracerProvider())
    try:
        yield
    finally:
        reset_global_provider(None)


def test_api_with_its_no_op_provider__spans_invalid__nothing_stored_and_nothing_fails(
    handled: list[bool], noop_provider: None
) -> None:
    """A provider set that records nothing: the hooks run, every span is invalid, and an
    invalid context is not stored."""
    assert tracing.active() is True

    assert record_and_run() == [2, None, ["None", "None"]]
    assert handled == [False, False]
