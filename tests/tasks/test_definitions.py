"""A task's job definition comes back whenever it is gone: after a test suite flushed the tables
between tests, or after an operator deleted it. The backend remembers nothing per process, so
a user's own suite needs no knowledge of runledger to keep its tasks running.

``transaction=True`` throughout: the flush, promotion and the worker run outside any atomic
block, as they do in a ``TransactionTestCase``.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; test_import.py covers Django 5.2"
)

from typing import Any

import psycopg
from django.core.management import call_command
from django.db import connection, transaction
from django.tasks import TaskResultStatus
from django.tasks.base import TaskResult
from django.test import TransactionTestCase

from runledger_django.models import JobDefinition, JobEnqueueIntent
from runledger_django.tasks.naming import task_job_type
from tests.conftest import connection_kwargs
from tests.tasks.app_tasks import add
from tests.tasks.test_worker import drain

pytestmark = pytest.mark.django_db(transaction=True)

ADD_TYPE = task_job_type("default", add.module_path)


def run_to_completion(result: TaskResult[Any, Any]) -> TaskResult[Any, Any]:
    drain()
    result.refresh()
    return result


def flush_as_transaction_test_case_does() -> None:
    """TransactionTestCase._fixture_teardown's flush (available_apps unset)."""
    call_command(
        "flush",
        verbosity=0,
        interactive=False,
        database="default",
        reset_sequences=False,
        allow_cascade=False,
        inhibit_post_migrate=False,
    )


def test_enqueue__tables_flushed_since_the_last_enqueue__the_task_still_runs() -> None:
    first = add.enqueue(1, 2)
    assert run_to_completion(first).status == TaskResultStatus.SUCCESSFUL

    flush_as_transaction_test_case_does()
    assert not JobDefinition.objects.filter(job_type=ADD_TYPE).exists()
    second = add.enqueue(2, 3)

    assert JobDefinition.objects.filter(job_type=ADD_TYPE).exists()
    finished = run_to_completion(second)
    assert (finished.status, finished.return_value) == (TaskResultStatus.SUCCESSFUL, 5)


def test_enqueue__definition_deleted_by_an_operator__made_again_and_every_intent_runs() -> None:
    first = add.enqueue(1, 1)  # recorded, not promoted yet: no job holds the definition
    JobDefinition.objects.filter(job_type=ADD_TYPE).delete()

    second = add.enqueue(2, 2)

    definition = JobDefinition.objects.get(job_type=ADD_TYPE)
    assert definition.is_enabled and definition.default_priority == 0
    assert [run_to_completion(r).return_value for r in (first, second)] == [2, 4]


def test_enqueue__definition_deleted_in_the_callers_transaction__made_on_its_own_connection() -> (
    None
):
    """The definition is made beside the caller's transaction, so it survives the caller's
    rollback and the task enqueued after that still runs."""
    add.enqueue(0, 0)
    with transaction.atomic():
        JobDefinition.objects.filter(job_type=ADD_TYPE).delete()
        add.enqueue(1, 1)  # sees the deletion: the definition is made again, committed
        transaction.set_rollback(True)
    result = add.enqueue(3, 4)

    assert JobDefinition.objects.filter(job_type=ADD_TYPE).count() == 1
    assert run_to_completion(result).return_value == 7


def test_enqueue__definition_row_updated_by_an_open_transaction__never_waits() -> None:
    """The missing-definition probe reads under MVCC: an operator's uncommitted edit of the
    definition (a row lock and a new row version) never holds up an enqueue."""
    add.enqueue(0, 0)
    with psycopg.connect(**connection_kwargs()) as operator:
        operator.execute(
            "UPDATE runledger_job_definitions SET max_attempts = 3 WHERE job_type = %s",
            [ADD_TYPE],
        )
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL lock_timeout = '2s'")  # a wait would fail, not hang
            result = add.enqueue(5, 6)
        operator.rollback()

    assert JobEnqueueIntent.objects.filter(id=result.id).exists()
    assert run_to_completion(result).return_value == 11


class FlushedBetweenTests(TransactionTestCase):
    """A user's own suite: Django flushes every table after each test. The second test's
    task runs although the first one's enqueue already made the definition in this process
    (unittest runs the tests in name order)."""

    def run_add(self, a: int, b: int) -> None:
        result = run_to_completion(add.enqueue(a, b))
        self.assertEqual((result.status, result.return_value), (TaskResultStatus.SUCCESSFUL, a + b))

    def test_1_first(self) -> None:
        self.run_add(1, 2)

    def test_2_after_a_flush(self) -> None:
        self.run_add(3, 4)
