"""RunledgerTaskBackend's enqueue and result reads: Django's backend contract (reference
django-tasks.md section 6), Django's own custom-backend behaviours, and idempotent enqueue.

Most tests run in the test's transaction, as a view's enqueue would; those that look from
another session at what committed use ``transaction=True``.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; test_import.py covers Django 5.2"
)

import datetime as dt
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import async_to_sync
from django.core.checks import Error
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection, transaction
from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.base import Task, TaskResult
from django.tasks.exceptions import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultMismatch,
)
from django.tasks.signals import task_enqueued
from django.test.utils import CaptureQueriesContext

from runledger_django import RunledgerError
from runledger_django.models import JobDefinition, JobEnqueueIntent
from runledger_django.tasks import RunledgerTask, RunledgerTaskBackend, with_idempotency_key
from runledger_django.tasks.backend import task_source
from tests.conftest import OpenSession, run_sql
from tests.tasks import app_tasks
from tests.tasks.app_tasks import add, always_fails, report_context, send_receipt
from tests.tasks.conftest import TASK_TEST_SETTINGS
from tests.worker.processes import BASE_DIR

pytestmark = pytest.mark.django_db

ADD_TYPE = "task:default:tests.tasks.app_tasks.add"
RECEIPT_TYPE = "task:emails:tests.tasks.app_tasks.send_receipt"


@pytest.fixture
def enqueued_signals() -> Iterator[list[tuple[Any, TaskResult[Any, Any]]]]:
    received: list[tuple[Any, TaskResult[Any, Any]]] = []

    def receiver(sender: Any, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        received.append((sender, task_result))

    task_enqueued.connect(receiver)
    yield received
    task_enqueued.disconnect(receiver)


def intent_row(result_id: str) -> dict[str, Any]:
    return dict(
        JobEnqueueIntent.objects.values(
            "job_type", "payload", "priority", "next_run_at", "idempotency_key", "status"
        ).get(id=result_id)
    )


# -- the backend class ----------------------------------------------------------------------


def test_backend__capabilities__all_supported_and_own_task_class() -> None:
    backend = task_backends["default"]

    assert type(backend) is RunledgerTaskBackend
    assert (
        backend.supports_defer,
        backend.supports_priority,
        backend.supports_async_task,
        backend.supports_get_result,
    ) == (True, True, True, True)
    assert backend.task_class is RunledgerTask
    assert issubclass(RunledgerTask, Task)


def test_task_decorator__configured_backend__builds_runledger_tasks() -> None:
    """``@task`` takes the configured backend's task class, so with_idempotency_key exists
    on every task a project defines; Django 6.1 forwards extra decorator arguments to it."""
    decorated = task(priority=5)(app_tasks.add.func)
    # Django 6.1 forwards other decorator arguments to the task class; the stubs omit it.
    keyed = task(idempotency_key="fixed")(app_tasks.add.func)  # type: ignore[call-overload]

    assert isinstance(decorated, RunledgerTask)
    assert (decorated.priority, decorated.idempotency_key) == (5, None)
    assert decorated.with_idempotency_key("k").idempotency_key == "k"
    assert decorated.with_idempotency_key("k") == with_idempotency_key(decorated, "k")
    assert keyed.idempotency_key == "fixed"


def test_with_idempotency_key__task_of_another_task_class__type_error(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
    plain = task(app_tasks.add.func)

    with pytest.raises(TypeError, match="not a RunledgerTask"):
        with_idempotency_key(plain, "k")


def test_backend__init_and_import__no_models_no_database() -> None:
    """Importing the package and building a backend, before the app registry is even set up,
    imports no model and opens no connection (the database settings point nowhere)."""
    code = (
        "import sys, django\n"
        "from django.conf import settings\n"
        "settings.configure(DATABASES={'default': {'ENGINE': 'django.db.backends.postgresql',"
        " 'HOST': '127.0.0.1', 'PORT': 1, 'NAME': 'nowhere'}}, INSTALLED_APPS=[], USE_TZ=True)\n"
        "from runledger_django.tasks import RunledgerTaskBackend\n"
        "backend = RunledgerTaskBackend('default', {'OPTIONS': {'MAX_ATTEMPTS': 2}})\n"
        "print(sorted(m for m in sys.modules if m.endswith('.models') and 'runledger' in m))\n"
        "from django.db import connections\n"
        "print(connections['default'].connection)\n"
    )
    completed = subprocess.run(  # noqa: S603  (fixed interpreter and arguments)
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["[]", "None"]


def test_backend__override_settings__rebuilt_with_new_options(settings: Any) -> None:
    """Django rebuilds its backends when TASKS changes; the new options apply at once."""
    first = task_backends["default"]
    settings.TASKS = {
        "default": {**TASK_TEST_SETTINGS["default"], "QUEUES": ["default"]},
    }
    second = task_backends["default"]

    assert second is not first
    assert second.queues == {"default"}
    with pytest.raises(InvalidTask, match="Queue 'emails' is not valid for backend"):
        send_receipt.enqueue(1)


# -- enqueue --------------------------------------------------------------------------------


def test_enqueue__new_task__ready_result_as_the_contract_describes() -> None:
    result = send_receipt.enqueue(7, email="grace@example.com")

    assert result.task == send_receipt
    assert isinstance(result.id, str) and len(result.id) < 64
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at is not None and result.enqueued_at.tzinfo is not None
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None, None, None)
    assert (result.args, result.kwargs) == ([7], {"email": "grace@example.com"})
    assert result.backend == "default"
    assert (result.errors, result.worker_ids, result.attempts) == ([], [], 0)
    assert not result.is_finished
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value


def test_enqueue__new_task__intent_carries_type_priority_and_run_after() -> None:
    run_after = dt.datetime(2031, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    result = send_receipt.using(priority=-40, run_after=run_after).enqueue(7)

    row = intent_row(result.id)
    assert row == {
        "job_type": RECEIPT_TYPE,
        "payload": {"backend": "default", "keyed": False, "args": [7], "kwargs": {}},
        "priority": -40,
        "next_run_at": run_after,
        "idempotency_key": row["idempotency_key"],
        "status": "PENDING",
    }
    # Without a key of the caller's, the intent's own id is its key.
    assert row["idempotency_key"] == uuid.UUID(result.id).hex


def test_enqueue__task_already_defined__one_query_on_the_callers_connection() -> None:
    add.enqueue(1, 2)  # the first enqueue of a task in a process makes sure of its definition

    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        add.enqueue(3, 4)

    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) == 1, statements
    assert "runledger_record_intent_v2(" in statements[0]  # the insert (migration 0013)


def test_enqueue__sends_task_enqueued_with_the_backend_class(
    enqueued_signals: list[tuple[Any, TaskResult[Any, Any]]],
) -> None:
    result = add.enqueue(1, 2)

    assert enqueued_signals == [(RunledgerTaskBackend, result)]


def test_enqueue__task_no_longer_valid__validated_again_before_any_query(settings: Any) -> None:
    """Django's test_validate_on_enqueue: the task was valid when defined; TASKS changed."""
    settings.TASKS = {"default": {**TASK_TEST_SETTINGS["default"], "QUEUES": ["default"]}}

    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidTask):
        send_receipt.enqueue(1)

    assert queries.captured_queries == []


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((dt.datetime(2030, 1, 1, tzinfo=dt.UTC),), {}, TypeError, "Unsupported type"),
        ((), {"ids": {1, 2}}, TypeError, "Unsupported type"),
        ((b"\xff",), {}, ValueError, "Unsupported value"),
    ],
)
def test_enqueue__argument_normalize_json_refuses__its_error_before_any_sql(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries, pytest.raises(error, match=match):
            add.enqueue(*args, **kwargs)
        assert queries.captured_queries == []
        assert run_sql("SELECT 1") == [(1,)]  # the caller's transaction is still usable


@pytest.mark.parametrize(
    "value", [float("nan"), {1: "an int key"}, "NUL \x00 in text"], ids=["nan", "int-key", "nul"]
)
def test_enqueue__value_json_cannot_keep__invalid_payload_before_any_sql(value: Any) -> None:
    """normalize_json lets these through; a JSON round trip would change or refuse them."""
    with CaptureQueriesContext(connection) as queries, pytest.raises(RunledgerError) as caught:
        add.enqueue(value, 1)

    assert (caught.value.code, caught.value.category) == ("job.invalid_payload", "validation")
    assert queries.captured_queries == []


def test_enqueue__invalid_options__refused_before_any_sql(settings: Any) -> None:
    settings.TASKS = {"default": {**TASK_TEST_SETTINGS["default"], "OPTIONS": {"MAX_ATTEMPTS": 0}}}

    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidTaskBackend):
        add.enqueue(1, 2)

    assert queries.captured_queries == []


def test_enqueue__rolled_back_with_the_caller__result_gone() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        result = add.enqueue(1, 2)
        assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
        raise RuntimeError("the view failed after enqueueing")

    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)


def test_aenqueue__async_caller__same_result_as_enqueue(
    enqueued_signals: list[tuple[Any, TaskResult[Any, Any]]],
) -> None:
    result = async_to_sync(add.aenqueue)(2, 3)

    assert result.status == TaskResultStatus.READY and result.args == [2, 3]
    assert default_task_backend.get_result(result.id) == result
    assert enqueued_signals == [(RunledgerTaskBackend, result)]


# -- idempotency ----------------------------------------------------------------------------


def test_with_idempotency_key__same_key_same_arguments__same_result_no_second_intent(
    enqueued_signals: list[tuple[Any, TaskResult[Any, Any]]],
) -> None:
    first = with_idempotency_key(send_receipt, "receipt:7").enqueue(7)
    again = with_idempotency_key(send_receipt, "receipt:7").enqueue(7)

    assert again == first
    assert JobEnqueueIntent.objects.filter(job_type=RECEIPT_TYPE).count() == 1
    assert [result for _, result in enqueued_signals] == [first]  # a replay enqueues nothing


def test_with_idempotency_key__other_arguments__conflict_and_caller_transaction_usable() -> None:
    with transaction.atomic():
        with_idempotency_key(send_receipt, "receipt:7").enqueue(7)
        with pytest.raises(RunledgerError) as caught:
            with_idempotency_key(send_receipt, "receipt:7").enqueue(8)
        assert run_sql("SELECT count(*) FROM runledger_job_enqueue_intents") == [(1,)]

    assert (caught.value.code, caught.value.category) == (
        "job.intent_idempotency_conflict",
        "conflict",
    )


def test_with_idempotency_key__other_priority__conflict() -> None:
    """Priority and run_after are part of the request the key stands for."""
    with_idempotency_key(send_receipt, "receipt:7").enqueue(7)

    with pytest.raises(RunledgerError) as caught:
        with_idempotency_key(send_receipt, "receipt:7").using(priority=99).enqueue(7)

    assert caught.value.code == "job.intent_idempotency_conflict"


def test_with_idempotency_key__scoped_to_the_task__other_task_is_another_result() -> None:
    receipt = with_idempotency_key(send_receipt, "order:7").enqueue(7)
    sum_ = with_idempotency_key(add, "order:7").enqueue(7, 0)

    assert receipt.id != sum_.id


def test_enqueue__without_key__every_enqueue_is_a_new_task() -> None:
    assert add.enqueue(1, 2).id != add.enqueue(1, 2).id


@pytest.mark.parametrize("key", ["", "   ", "k" * 1025, "nul\x00"])
def test_with_idempotency_key__unusable_key__invalid_task_at_once(key: str) -> None:
    with pytest.raises(InvalidTask, match="Invalid idempotency key"):
        with_idempotency_key(add, key)


def test_with_idempotency_key__kept_by_using__and_rebuilt_by_get_result() -> None:
    keyed = with_idempotency_key(send_receipt, "receipt:9").using(priority=3)
    result = keyed.enqueue(9)

    assert isinstance(keyed, RunledgerTask) and keyed.idempotency_key == "receipt:9"
    assert default_task_backend.get_result(result.id).task == keyed


# -- reading results ------------------------------------------------------------------------


def test_get_result__nothing_changed__equals_the_enqueued_result() -> None:
    result = send_receipt.using(run_after=dt.datetime(2030, 5, 6, tzinfo=dt.UTC)).enqueue(
        1, email="x@example.com"
    )

    assert default_task_backend.get_result(result.id) == result


@pytest.mark.parametrize(
    "result_id",
    ["0190f5a6-0000-7000-8000-000000000000", "123", "", "not-a-uuid", "%", "x" * 100],
)
def test_get_result__missing_or_malformed_id__does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result_id)


def test_get_result__intent_of_a_plain_job_type__does_not_exist() -> None:
    from runledger_django import record_intent

    outcome = record_intent("shop.send_receipt", {"order_id": 1}, idempotency_key="k")

    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(outcome.intent_id))


def test_task_get_backend__django_s_backend__until_tasks_changes(settings: Any) -> None:
    """The task remembers its backend per thread, and forgets it when TASKS changes (Django
    then builds new backends, with the new options)."""
    first = add.get_backend()
    assert first is task_backends["default"]
    assert add.get_backend() is first

    settings.TASKS = {"default": {**TASK_TEST_SETTINGS["default"], "QUEUES": ["default"]}}

    second = add.get_backend()
    assert second is not first
    assert second is task_backends["default"]
    assert second.queues == {"default"}


def test_task_get_backend__other_thread__its_own_backend_as_django_gives_it() -> None:
    here = add.get_backend()

    with ThreadPoolExecutor(1) as pool:
        there = pool.submit(lambda: (add.get_backend(), task_backends["default"])).result()

    assert there[0] is there[1]
    assert here is task_backends["default"]


def test_get_result__result_of_another_alias__does_not_exist(settings: Any) -> None:
    settings.TASKS = {**TASK_TEST_SETTINGS, "other": TASK_TEST_SETTINGS["default"]}
    result = add.using(backend="other").enqueue(1, 2)

    assert task_backends["other"].get_result(result.id) == result
    assert result.backend == "other"
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result.id)


def test_refresh_and_task_get_result__read_the_rows_again() -> None:
    result = add.enqueue(1, 2)
    # What promotion writes when it refuses an intent (test_worker.py has the real one).
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET status = 'CONFLICTED', conflicted_at = now(),"
        " promotion_attempts = 1, last_attempted_at = now(),"
        " last_error_code = 'job.idempotency_conflict', last_error_message = 'refused'"
        " WHERE id = %s",
        [result.id],
    )

    assert add.get_result(result.id).status == TaskResultStatus.FAILED
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].traceback == "RunledgerError: job.idempotency_conflict: refused\n"
    assert result.finished_at is not None
    with pytest.raises(TaskResultMismatch):
        always_fails.get_result(result.id)


def test_aget_result__async_caller__same_result() -> None:
    result = report_context.enqueue()

    assert async_to_sync(default_task_backend.aget_result)(result.id) == result
    assert async_to_sync(report_context.aget_result)(result.id) == result


def test_get_result__task_no_longer_importable__invalid_task() -> None:
    from runledger_django import record_intent

    outcome = record_intent(
        "task:default:tests.tasks.app_tasks.gone",
        {"backend": "default", "keyed": False, "args": [], "kwargs": {}},
        idempotency_key="gone",
        priority=0,
    )

    with pytest.raises(InvalidTask, match="cannot be loaded"):
        default_task_backend.get_result(str(outcome.intent_id))


# -- the caller's transaction and the definitions -------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_enqueue__first_enqueue_of_a_task__definition_committed_outside_the_callers_transaction(
    open_session: OpenSession,
) -> None:
    """The definition is committed on another connection before the caller commits; the
    caller's transaction holds no row lock on the definitions (only the ACCESS SHARE table
    lock of the insert's probe for a missing definition, as any reader does), and the intent
    stays invisible to other sessions until the caller commits (tasks-db's
    test_doesnt_wait_until_transaction_commit)."""
    other = open_session()
    with transaction.atomic():
        result = send_receipt.enqueue(5)
        seen = other.execute(
            "SELECT (SELECT count(*) FROM runledger_job_enqueue_intents),"
            " (SELECT max_attempts FROM runledger_job_definitions WHERE job_type = %s),"
            " (SELECT default_timeout_seconds FROM runledger_job_definitions WHERE job_type = %s)",
            [RECEIPT_TYPE, RECEIPT_TYPE],
        ).fetchone()
        locks = run_sql(
            "SELECT mode FROM pg_locks WHERE pid = pg_backend_pid()"
            " AND relation = 'runledger_job_definitions'::regclass"
        )
    committed = other.execute(
        "SELECT id::text FROM runledger_job_enqueue_intents WHERE job_type = %s", [RECEIPT_TYPE]
    ).fetchall()

    assert seen == (0, 3, 60)  # OPTIONS MAX_ATTEMPTS and TIMEOUT_SECONDS
    assert locks == [("AccessShareLock",)]
    assert committed == [(result.id,)]


@pytest.mark.django_db(transaction=True)
def test_enqueue__definition_edited_by_an_operator__kept(open_session: OpenSession) -> None:
    JobDefinition.objects.create(job_type=ADD_TYPE, max_attempts=9, is_enabled=False)

    add.enqueue(1, 2)

    assert JobDefinition.objects.values_list("max_attempts", "is_enabled").get(
        job_type=ADD_TYPE
    ) == (9, False)


# -- the worker's listing of task job types -------------------------------------------------


def test_task_source__one_queue__prefix_match_on_the_pattern_index() -> None:
    """The listing is one LIKE prefix match; Django gave the definitions' text primary key a
    text_pattern_ops index, which serves it under every collation."""
    JobDefinition.objects.bulk_create(
        JobDefinition(job_type=f"task:{'emails' if n % 100 == 0 else 'default'}:app{n}.t")
        for n in range(5000)
    )
    run_sql("ANALYZE runledger_job_definitions")

    with CaptureQueriesContext(connection) as queries:
        found = task_source.job_types(["emails"], using="default")
    plan = run_sql("EXPLAIN (FORMAT JSON) " + queries.captured_queries[0]["sql"])[0][0]

    assert len(found) == 50 and len(queries.captured_queries) == 1
    assert "runledger_job_definitions_job_type_" in str(plan) and "_like" in str(plan)


# -- checks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "check_id"),
    [
        ({"OPTIONS": {"UNKNOWN": 1}}, "runledger.E103"),
        ({"OPTIONS": ["MAX_ATTEMPTS"]}, "runledger.E103"),
        ({"OPTIONS": {"MAX_ATTEMPTS": 0}}, "runledger.E104"),
        ({"OPTIONS": {"MAX_ATTEMPTS": True}}, "runledger.E104"),
        ({"OPTIONS": {"TIMEOUT_SECONDS": 2**31}}, "runledger.E105"),
        ({"OPTIONS": {"DATABASE": "missing"}}, "runledger.E106"),
        ({"QUEUES": ["default", " "]}, "runledger.E107"),
        ({"QUEUES": ["q" * 300]}, "runledger.E107"),
    ],
)
def test_check__invalid_configuration__stable_id(
    settings: Any, params: dict[str, Any], check_id: str
) -> None:
    settings.TASKS = {
        "default": {"BACKEND": "runledger_django.tasks.RunledgerTaskBackend", **params}
    }

    with pytest.raises(SystemCheckError, match=check_id):
        call_command("check")


def test_check__app_not_installed__e101(settings: Any) -> None:
    settings.INSTALLED_APPS = [app for app in settings.INSTALLED_APPS if app != "runledger_django"]

    messages = task_backends["default"].check()

    assert [(type(m), m.id) for m in messages] == [(Error, "runledger.E101")]


def test_check__database_not_postgresql__e102() -> None:
    """In a process whose database is SQLite (the suite's own must stay PostgreSQL)."""
    code = (
        "import django\n"
        "from django.conf import settings\n"
        "settings.configure(DATABASES={'default': {'ENGINE': 'django.db.backends.sqlite3',"
        " 'NAME': ':memory:'}}, INSTALLED_APPS=['runledger_django'], USE_TZ=True,"
        " TASKS={'default': {'BACKEND': 'runledger_django.tasks.RunledgerTaskBackend'}})\n"
        "django.setup()\n"
        "from django.tasks import task_backends\n"
        "print([message.id for message in task_backends['default'].check()])\n"
    )
    completed = subprocess.run(  # noqa: S603  (fixed interpreter and arguments)
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == ["['runledger.E102']"]


def test_check__valid_configuration__no_messages() -> None:
    assert task_backends["default"].check() == []
    call_command("check")
