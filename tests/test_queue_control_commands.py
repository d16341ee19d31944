"""``pause_job_type``, ``resume_job_type`` and the limits service through their callers
(docs/queue-control.md): output, ``--json``, errors, and the definitions they change."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from runledger_django import RunledgerError, set_job_type_limits
from runledger_django.domain import JobDefaults
from runledger_django.errors import Code
from runledger_django.models import JobDefinition
from runledger_django.services.claim import ensure_job_definitions
from tests.conftest import TEST_JOB_TYPE, MakeDefinition

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_pause_command__json__reports_the_pause_and_keeps_the_first(
    make_definition: MakeDefinition,
) -> None:
    make_definition()

    first = json.loads(
        run("pause_job_type", TEST_JOB_TYPE, "--reason", "partner down", "--actor", "ops", "--json")
    )
    with transaction.atomic():
        second = json.loads(run("pause_job_type", TEST_JOB_TYPE, "--json"))

    assert first["paused"] is True and first["changed"] is True
    assert (first["paused_reason"], first["paused_by"]) == ("partner down", "ops")
    assert first["paused_at"].endswith("+00:00")
    assert second["changed"] is False and second["paused_at"] == first["paused_at"]
    assert list(first) == [
        "job_type",
        "paused",
        "paused_at",
        "paused_reason",
        "paused_by",
        "max_concurrency",
        "rate_limit_count",
        "rate_limit_period_seconds",
        "changed",
    ]


def test_resume_command__text__says_what_changed(make_definition: MakeDefinition) -> None:
    make_definition()
    assert run("pause_job_type", TEST_JOB_TYPE).startswith(f"{TEST_JOB_TYPE}: paused since ")

    assert run("resume_job_type", TEST_JOB_TYPE).strip() == f"{TEST_JOB_TYPE}: running"
    assert run("resume_job_type", TEST_JOB_TYPE).strip() == f"{TEST_JOB_TYPE}: running (unchanged)"
    assert JobDefinition.objects.get().paused_at is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pause_job_type", "jobs.test.nobody"], "job.definition_not_found: "),
        (["resume_job_type", "jobs.test.nobody"], "job.definition_not_found: "),
        (["pause_job_type", TEST_JOB_TYPE, "--reason", " "], "job_definition.invalid_pause_note"),
        (["pause_job_type", " "], "invalid job type"),
    ],
)
def test_pause_resume_commands__bad_input__command_error(
    make_definition: MakeDefinition, args: list[str], message: str
) -> None:
    make_definition()
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert JobDefinition.objects.get().paused_at is None


def test_set_job_type_limits__sets_and_clears(make_definition: MakeDefinition) -> None:
    make_definition()

    limited = set_job_type_limits(TEST_JOB_TYPE, max_concurrency=5, rate_limit=(10, 60))
    cleared = set_job_type_limits(TEST_JOB_TYPE)

    assert (limited.max_concurrency, limited.rate_limit_count) == (5, 10)
    assert (limited.rate_limit_period_seconds, cleared.max_concurrency) == (60, None)
    assert JobDefinition.objects.values_list(
        "max_concurrency", "rate_limit_count", "rate_limit_period_seconds"
    ).get() == (None, None, None)


@pytest.mark.parametrize(
    "limits",
    [
        {"max_concurrency": 0},
        {"max_concurrency": "5"},
        {"rate_limit": (5,)},
        {"rate_limit": (5, -1)},
        {"rate_limit": (10_001, 60)},
        {"rate_limit": 5},
    ],
    ids=repr,
)
def test_set_job_type_limits__bad_limit__validation_error_before_any_sql(
    limits: dict[str, Any], django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
        set_job_type_limits(TEST_JOB_TYPE, **limits)
    assert raised.value.code == Code.DEFINITION_INVALID_LIMIT.value


def test_set_job_type_limits__unknown_type__definition_not_found() -> None:
    with pytest.raises(RunledgerError) as raised:
        set_job_type_limits("jobs.test.nobody", max_concurrency=1)
    assert raised.value.code == Code.DEFINITION_NOT_FOUND.value


def test_definition_sync__new_type__created_with_the_declared_limits() -> None:
    ensure_job_definitions(
        [JobDefaults(job_type=TEST_JOB_TYPE, max_concurrency=3, rate_limit=(10, 60))]
    )

    assert JobDefinition.objects.values_list(
        "max_concurrency", "rate_limit_count", "rate_limit_period_seconds", "paused_at"
    ).get() == (3, 10, 60, None)
