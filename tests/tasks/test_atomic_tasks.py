"""``ATOMIC_TASKS``: a backend whose tasks run in the transaction that records their success."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; test_import.py covers Django 5.2"
)

from django.tasks import TaskResultStatus

from runledger_django import promote_intents, run_jobs
from runledger_django.tasks.formats import read_options
from tests.exactly_app.models import Effect
from tests.tasks.app_tasks import close_invoice


def effects(result_id: str) -> list[int]:
    return list(Effect.objects.filter(job_id=result_id).values_list("attempt", flat=True))


def run_task() -> None:
    promote_intents([f"task:default:{close_invoice.module_path}"])
    run_jobs()


@pytest.mark.django_db(transaction=True)
def test_atomic_task__succeeds__effect_and_success_commit_together() -> None:
    result = close_invoice.enqueue()
    run_task()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"closed": result.id}
    assert effects(result.id) == [1]


@pytest.mark.django_db(transaction=True)
def test_atomic_task__raises__effect_rolled_back_and_retried() -> None:
    result = close_invoice.enqueue(fail=True)
    run_task()
    result.refresh()
    assert result.status == TaskResultStatus.READY  # a retry waits
    assert len(result.errors) == 1
    assert effects(result.id) == []


def test_read_options__atomic_tasks_not_a_bool__reported() -> None:
    options = read_options({"ATOMIC_TASKS": "yes"})
    assert options.atomic_tasks is False
    assert [problem[0] for problem in options.problems] == ["runledger.E108"]
