"""Running tasks in-process: ``run_jobs`` and ``runledger_worker --burst`` through the handler
source, with Django's signals, TaskContext, retries, dead letters and queue selection.

``transaction=True`` throughout: promotion and the worker refuse to run inside an atomic block
and commit on their own connections. A retry's wait is skipped with an UPDATE of the job's
``next_run_at`` (the tests assert what is due, not how long time takes).
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; test_import.py covers Django 5.2"
)

import datetime as dt
import io
import logging
from collections.abc import Iterator
from typing import Any

from django.core.management import call_command
from django.db import connection
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.base import TaskResult
from django.tasks.signals import task_finished, task_started
from django.test.utils import CaptureQueriesContext

from runledger_django import (
    ReadScope,
    WorkReport,
    cancel_job,
    enqueue_job,
    promote_intents,
    run_jobs,
)
from runledger_django.models import Job, JobAttempt, JobDefinition, JobEnqueueIntent
from runledger_django.tasks import RunledgerTaskBackend, with_idempotency_key
from runledger_django.tasks.backend import task_source
from runledger_django.worker.registry import registry
from tests.conftest import OpenSession, run_sql
from tests.tasks.app_tasks import (
    add,
    always_fails,
    async_add,
    fail_until,
    raises,
    report_context,
    returns_nan,
    returns_nothing,
    returns_set,
    send_receipt,
)

pytestmark = pytest.mark.django_db(transaction=True)

TaskSignal = tuple[str, Any, "TaskResult[Any, Any]"]


def task_types() -> list[str]:
    return [t for t in registry.runnable_job_types(None, using="default") if t.startswith("task:")]


def promote() -> None:
    while promote_intents(task_types(), limit=500).batch_was_full:
        pass


def drain(limit: int | None = None) -> WorkReport:
    """What ``runledger_worker --promote --burst`` does for the tasks, in this thread."""
    promote()
    return run_jobs(task_types(), limit=limit)


def job_of(result: TaskResult[Any, Any]) -> Job:
    job_id = JobEnqueueIntent.objects.get(id=result.id).promoted_job_id
    assert job_id is not None, "the intent was not promoted"
    return Job.objects.get(id=job_id)


def make_due(result: TaskResult[Any, Any]) -> None:
    """Skip a retry's wait."""
    Job.objects.filter(id=job_of(result).id).update(next_run_at=dt.datetime.now(dt.UTC))


@pytest.fixture
def signals() -> Iterator[list[TaskSignal]]:
    received: list[TaskSignal] = []

    def started(sender: Any, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        received.append(("started", sender, task_result))

    def finished(sender: Any, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        received.append(("finished", sender, task_result))

    task_started.connect(started)
    task_finished.connect(finished)
    yield received
    task_started.disconnect(started)
    task_finished.disconnect(finished)


# -- success --------------------------------------------------------------------------------


def test_run__task_returns__successful_with_its_value_times_and_worker() -> None:
    result = add.enqueue(2, 3)

    assert drain() == WorkReport(claimed=1, succeeded=1)
    result.refresh()

    attempt = JobAttempt.objects.get()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 5
    assert result.worker_ids == [attempt.worker_id] and result.attempts == 1
    assert result.started_at == result.last_attempted_at == attempt.leased_at
    assert result.finished_at == job_of(result).finished_at
    assert result.enqueued_at is not None and result.started_at is not None
    assert result.enqueued_at <= result.started_at
    assert result.errors == []


def test_run__returns_none__successful_none() -> None:
    result = returns_nothing.enqueue()
    drain()

    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, None)


def test_run__takes_context__attempt_one_and_its_own_worker_on_the_first_run() -> None:
    result = report_context.enqueue()
    drain()

    result.refresh()
    assert result.return_value == {
        "attempt": 1,
        "id": result.id,
        "worker_ids": [JobAttempt.objects.get().worker_id],
    }


def test_run__async_task_function__awaited_through_task_call() -> None:
    result = async_add.enqueue(20, 22)
    drain()

    result.refresh()
    value: object = result.return_value  # the coroutine's result, not a coroutine
    assert (result.status, value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_run__signals__started_then_finished_with_the_backend_class(
    signals: list[TaskSignal],
) -> None:
    result = add.enqueue(1, 1)
    drain()

    assert [(name, sender) for name, sender, _ in signals] == [
        ("started", RunledgerTaskBackend),
        ("finished", RunledgerTaskBackend),
    ]
    started, finished = signals[0][2], signals[1][2]
    assert (started.id, started.status, started.attempts) == (result.id, "RUNNING", 1)
    assert (finished.id, finished.status, finished.return_value) == (result.id, "SUCCESSFUL", 2)


# -- failures, retries, dead letters --------------------------------------------------------


def test_run__fails_then_succeeds__ready_between_attempts_errors_and_workers_grow() -> None:
    result = fail_until.enqueue(3)

    assert drain() == WorkReport(claimed=1, retried=1)
    result.refresh()
    assert (result.status, result.attempts, len(result.errors)) == ("READY", 1, 1)
    assert result.finished_at is None
    assert result.errors[0].exception_class is ValueError
    assert "ValueError: attempt 1 fails" in result.errors[0].traceback

    make_due(result)
    assert drain() == WorkReport(claimed=1, retried=1)
    make_due(result)
    assert drain() == WorkReport(claimed=1, succeeded=1)
    result.refresh()

    workers = list(JobAttempt.objects.order_by("attempt").values_list("worker_id", flat=True))
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 3)
    assert result.worker_ids == workers and result.attempts == 3
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2
    assert "attempt 2 fails" in result.errors[1].traceback
    assert result.started_at is not None and result.last_attempted_at is not None
    assert result.started_at < result.last_attempted_at


def test_run__attempts_spent__failed_with_one_error_per_attempt(
    signals: list[TaskSignal], caplog: pytest.LogCaptureFixture
) -> None:
    result = always_fails.enqueue()
    for _ in range(3):  # OPTIONS MAX_ATTEMPTS = 3, the definition's max_attempts
        drain()
        if JobAttempt.objects.count() < 3:
            make_due(result)

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at == job_of(result).finished_at is not None
    assert [e.exception_class for e in result.errors] == [KeyError] * 3
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    finished = [r.status for name, _, r in signals if name == "finished"]
    assert finished == ["READY", "READY", "FAILED"]
    # Sent from inside the except block: Django's receiver logs the traceback.
    logged = [r for r in caplog.records if r.name == "django.tasks" and "state=" in r.message]
    failed = [r for r in logged if r.levelno == logging.ERROR]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert failed[0].exc_info[0] is KeyError


@pytest.mark.parametrize(
    ("kind", "path", "code"),
    [
        ("system_exit", "builtins.SystemExit", "job.handler_panic"),
        ("keyboard_interrupt", "builtins.KeyboardInterrupt", "job.handler_panic"),
        ("complex", "tests.tasks.app_tasks.ComplexError", "job.handler_failed"),
    ],
)
def test_run__task_raises__its_exception_recorded(kind: str, path: str, code: str) -> None:
    """SystemExit and KeyboardInterrupt raised by a task end the task, not the worker; they
    cannot be retried. Any exception's class path is importable from the result's error."""
    result = raises.enqueue(kind)

    drain()
    result.refresh()

    error = result.errors[0]
    assert JobAttempt.objects.values_list("error_code", flat=True).get() == code
    assert error.exception_class_path == path
    assert error.exception_class.__name__ == path.rsplit(".", 1)[1]
    assert result.status == ("READY" if code == "job.handler_failed" else "FAILED")


def test_run_jobs__limit__runs_that_many_tasks() -> None:
    first = add.enqueue(1, 1)
    second = add.enqueue(2, 2)

    assert drain(limit=1) == WorkReport(claimed=1, succeeded=1)
    first.refresh()
    second.refresh()
    assert sorted([first.status, second.status]) == ["READY", "SUCCESSFUL"]


def test_run__definition_allows_one_attempt__failed_at_once() -> None:
    """Operators change a task's attempts in its definition, as for any job type."""
    result = always_fails.enqueue()
    JobDefinition.objects.filter(job_type=job_type_of(result)).update(max_attempts=1)

    assert drain() == WorkReport(claimed=1, dead_lettered=1)
    result.refresh()
    assert (result.status, len(result.errors)) == (TaskResultStatus.FAILED, 1)


def job_type_of(result: TaskResult[Any, Any]) -> str:
    return str(JobEnqueueIntent.objects.get(id=result.id).job_type)


@pytest.mark.parametrize("task", [returns_set, returns_nan], ids=["set", "nan"])
def test_run__return_value_not_json__failed_invalid_output(
    task: Any, signals: list[TaskSignal]
) -> None:
    result = task.enqueue()

    assert drain() == WorkReport(claimed=1, dead_lettered=1)
    result.refresh()

    attempt = JobAttempt.objects.get()
    assert result.status == TaskResultStatus.FAILED
    assert (attempt.error_code, attempt.failure_kind) == ("job.invalid_output", "TERMINAL")
    assert result.errors[0].exception_class_path == (
        "runledger_django.worker.outcomes.TerminalJobError"
    )
    assert "not JSON-native" in result.errors[0].traceback
    assert [r.status for name, _, r in signals if name == "finished"] == ["FAILED"]


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("tests.tasks.app_tasks.gone", "job.task_not_found"),
        ("tests.tasks.no_such_module.task", "job.task_not_found"),
        ("tests.tasks.app_tasks.not_a_task", "job.task_invalid"),
    ],
)
def test_run__task_path_no_longer_a_task__dead_lettered_with_a_clear_code(
    path: str, code: str
) -> None:
    job_type = f"task:default:{path}"
    JobDefinition.objects.create(job_type=job_type, max_attempts=3)
    enqueue_job(job_type, {"backend": "default", "keyed": False, "args": [], "kwargs": {}})

    assert drain() == WorkReport(claimed=1, dead_lettered=1)
    assert JobAttempt.objects.values_list("error_code", "failure_kind").get() == (code, "TERMINAL")


def test_run__job_without_a_task_payload__dead_lettered() -> None:
    job_type = "task:default:tests.tasks.app_tasks.add"
    JobDefinition.objects.create(job_type=job_type, max_attempts=3)
    enqueue_job(job_type, {"a": 1})

    assert drain() == WorkReport(claimed=1, dead_lettered=1)
    assert JobAttempt.objects.values_list("error_code", flat=True).get() == (
        "job.task_payload_invalid"
    )


def test_run__job_enqueued_without_intent__runs_under_the_jobs_id(
    signals: list[TaskSignal],
) -> None:
    job_type = "task:default:tests.tasks.app_tasks.add"
    JobDefinition.objects.create(job_type=job_type, max_attempts=3)
    job_id = enqueue_job(
        job_type, {"backend": "default", "keyed": False, "args": [4, 5], "kwargs": {}}
    ).job_id

    assert drain() == WorkReport(claimed=1, succeeded=1)
    assert signals[-1][2].id == str(job_id) and signals[-1][2].return_value == 9


# -- states read from other rows ------------------------------------------------------------


def test_result__promotion_refused_the_intent__failed_with_the_reason() -> None:
    """A keyed job of the same type and key with another request exists (enqueued directly):
    promotion conflicts the intent, and the result says so."""
    result = with_idempotency_key(add, "sum:1").enqueue(1, 2)
    enqueue_job(
        job_type_of(result),
        {"backend": "default", "keyed": True, "args": [9, 9], "kwargs": {}},
        idempotency_key="sum:1",
    )

    promote()
    result.refresh()

    assert result.status == TaskResultStatus.FAILED and result.finished_at is not None
    assert result.errors[-1].traceback.startswith("RunledgerError: job.idempotency_conflict")


def test_result__job_canceled__failed() -> None:
    result = add.enqueue(1, 2)
    promote()
    cancel_job(job_of(result).id, scope=ReadScope.ADMIN)

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert "canceled" in result.errors[-1].traceback


def test_result__running__status_running_and_the_attempt_counted() -> None:
    result = add.enqueue(1, 2)
    promote()
    from runledger_django.services.claim import claim_jobs

    claim_jobs([job_type_of(result)], worker_id="worker-x", limit=1, lease_seconds=60)

    running = default_task_backend.get_result(result.id)
    assert (running.status, running.worker_ids, running.finished_at) == (
        "RUNNING",
        ["worker-x"],
        None,
    )


def test_get_result__promoted_and_run__two_queries() -> None:
    result = fail_until.enqueue(2)
    drain()

    with CaptureQueriesContext(connection) as queries:
        default_task_backend.get_result(result.id)

    assert len(queries.captured_queries) == 2  # the intent with its job, then the attempts


# -- order and selection --------------------------------------------------------------------


def test_run__priorities__higher_first() -> None:
    add.using(priority=-50).enqueue(0, 1)
    add.using(priority=90).enqueue(0, 2)
    add.enqueue(0, 3)

    drain()

    order = list(JobAttempt.objects.order_by("id").values_list("job__payload__args", flat=True))
    assert order == [[0, 2], [0, 3], [0, 1]]


def test_run__run_after_in_the_future__not_run_before_it_is_due() -> None:
    later = add.using(run_after=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).enqueue(1, 1)
    now = add.enqueue(2, 2)

    assert drain() == WorkReport(claimed=1, succeeded=1)
    later.refresh()
    now.refresh()
    assert (now.status, later.status) == ("SUCCESSFUL", "READY")
    assert job_of(later).next_run_at == later.task.run_after

    make_due(later)
    assert drain() == WorkReport(claimed=1, succeeded=1)


def test_run__row_locked_by_another_session__skipped_not_waited_for(
    open_session: OpenSession,
) -> None:
    locked = add.enqueue(1, 1)
    free = add.enqueue(2, 2)
    promote()
    locker = open_session(autocommit=False)
    locker.execute(
        "SELECT 1 FROM runledger_job_queue WHERE id = %s FOR UPDATE", [job_of(locked).id]
    )

    assert run_jobs(task_types()) == WorkReport(claimed=1, succeeded=1)
    locker.rollback()

    locked.refresh()
    free.refresh()
    assert (free.status, locked.status) == ("SUCCESSFUL", "READY")


def test_task_source__job_types__enabled_definitions_of_the_served_queues() -> None:
    add.enqueue(1, 1)
    send_receipt.enqueue(1)
    JobDefinition.objects.create(job_type="task:emails:extra.module.paused", is_enabled=False)
    JobDefinition.objects.create(job_type="task:emails:x:other.queue.task")  # queue "emails:x"
    JobDefinition.objects.create(job_type="shop.send_receipt")

    assert task_source.job_types(["emails"], using="default") == [
        "task:emails:tests.tasks.app_tasks.send_receipt"
    ]
    assert task_source.job_types(None, using="default") == [
        "task:default:tests.tasks.app_tasks.add",
        "task:emails:tests.tasks.app_tasks.send_receipt",
        "task:emails:x:other.queue.task",
    ]
    assert task_source.job_types(["emails:x", "nothing"], using="default") == [
        "task:emails:x:other.queue.task"
    ]


def test_task_source__no_runledger_backend_in_tasks__no_job_types_no_query(
    settings: Any,
) -> None:
    add.enqueue(1, 1)
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}

    with CaptureQueriesContext(connection) as queries:
        assert task_source.job_types(None, using="default") == []

    assert queries.captured_queries == []


def test_runledger_worker__queue_option__runs_only_the_tasks_of_that_queue() -> None:
    receipt = send_receipt.enqueue(7)
    other = add.enqueue(1, 2)
    out = io.StringIO()

    call_command("runledger_worker", "--queue", "emails", "--promote", "--burst", stdout=out)

    receipt.refresh()
    other.refresh()
    assert receipt.status == "SUCCESSFUL" and receipt.return_value == {
        "order_id": 7,
        "sent_to": "ada@example.com",
    }
    assert other.status == "READY"
    assert "Claimed 1 jobs: 1 succeeded" in out.getvalue()
    assert run_sql("SELECT count(*) FROM runledger_job_queue") == [(1,)]  # only emails promoted
