"""``RunledgerTaskBackend``: Django's Tasks API on runledger's intents, queue and worker.

An enqueue records an enqueue intent in the caller's transaction (``record_intent``), the
worker's promoter turns it into a job, and ``runledger_worker`` runs the job through the
handler source of ``runner.py``. Why intents, and not the queue directly: docs/tasks.md.
"""

from __future__ import annotations

import datetime as dt
import functools
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Self, TypeVar

from django.apps import apps
from django.conf import settings
from django.core.checks import CheckMessage, Error
from django.db import connections
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from ..domain import EnqueueRequest, IntentOutcome, JSONValue, TargetSpec
from ..errors import Code, RunledgerError
from ..services import tracing
from ..uuid7 import uuid7
from ..validation import prepare_enqueue, validate_idempotency_key
from ..worker.registry import registry
from . import definitions
from .formats import BackendOptions, TaskPayload, read_options
from .naming import JobTypeError, parse_task_job_type, task_job_type
from .results import build_result, django_time, enqueued_at_of
from .runner import TaskSource

if TYPE_CHECKING:
    from ..models import Job, JobEnqueueIntent


VALIDATION_CACHE_SIZE = 1024
"""Task options whose validation a backend remembers (cleared when full)."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


# django.tasks' Task is generic only in django-stubs; Generic makes RunledgerTask[[int], str]
# work at run time as well.
@dataclass(frozen=True, slots=True, kw_only=True)
class RunledgerTask(Task, Generic[_P, _R]):  # type: ignore[type-arg]
    """The backend's ``task_class``: Django's ``Task`` plus an idempotency key."""

    idempotency_key: str | None = None
    """With a key, enqueueing the same task with the same arguments again returns the first
    enqueue's result (from any process, before and after it ran); other arguments under the
    same key raise ``RunledgerError`` ``job.intent_idempotency_conflict``. Without one, every
    enqueue is a new task. Keys are scoped to the task and its queue."""

    def with_idempotency_key(self, key: str) -> Self:
        """This task with ``key`` (validated now: non-blank text of at most 1,024 bytes)."""
        return replace(self, idempotency_key=key)

    # --- schedules (and workflow steps): the JobTarget protocol of domain.py ---

    def job_target(self, args: Sequence[JSONValue], kwargs: Mapping[str, JSONValue]) -> TargetSpec:
        """The job this task makes with ``args`` and ``kwargs``: its job type
        (``task:<queue>:<module path>``), the payload its enqueue would write (unkeyed), and
        its priority. Pure: nothing is read or written.

        Raises:
            InvalidTask: the task is not valid for its backend, or its backend is not a
                RunledgerTaskBackend.
            TypeError, ValueError: an argument JSON cannot keep (``normalize_json``).
        """
        backend = self.get_backend()
        if not isinstance(backend, RunledgerTaskBackend):
            raise InvalidTask(f"{self.module_path}'s backend is not a RunledgerTaskBackend")
        job_type = backend._checked_job_type(self)
        payload: dict[str, JSONValue] = {
            "backend": backend.alias,
            "keyed": False,
            "args": normalize_json(list(args)),
            "kwargs": normalize_json(dict(kwargs)),
        }
        return TargetSpec(job_type=job_type, payload=payload, priority=int(self.priority))

    def get_backend(self) -> BaseTaskBackend:
        """Django's backend for this task, remembered per thread until TASKS changes.

        Django looks it up in ``task_backends`` on every enqueue, and twice for a keyed one
        (building the keyed task validates it): about a tenth of what the backend adds to
        ``record_intent``. Django replaces the handler's storage whenever TASKS changes, so
        a remembered backend is used only while that storage is the one it came from.
        """
        from django.tasks import task_backends

        storage: object = getattr(task_backends, "_connections", None)
        remembered: tuple[object, dict[str, BaseTaskBackend]] | None = getattr(
            _backends, "remembered", None
        )
        if storage is None or remembered is None or remembered[0] is not storage:
            remembered = (storage, {})
            _backends.remembered = remembered
        backend = remembered[1].get(self.backend)
        if backend is None:
            backend = task_backends[self.backend]
            if storage is not None:
                remembered[1][self.backend] = backend
        return backend


_backends = threading.local()
"""Per thread: ``(the task handler's storage, {alias: backend})`` (RunledgerTask.get_backend)."""


def with_idempotency_key(task: Task[_P, _R], key: str) -> Task[_P, _R]:
    """``task.with_idempotency_key(key)`` for type-checked code: django-stubs types what
    ``@task`` returns as ``Task``, which has no such method.

    Raises:
        TypeError: ``task`` was not built by this backend's task class (its ``@task`` ran
            while TASKS named another backend).
        InvalidTask: ``key`` is not usable.
    """
    if not isinstance(task, RunledgerTask):
        raise TypeError(
            f"{task.module_path} is a {type(task).__name__}, not a RunledgerTask: define it "
            "with @task while TASKS names RunledgerTaskBackend."
        )
    keyed: Task[_P, _R] = task.with_idempotency_key(key)
    return keyed


def check_task_key(key: object) -> None:
    """Refuse an idempotency key a task cannot carry (``InvalidTask``)."""
    try:
        validate_idempotency_key(key, for_intent=True)
    except RunledgerError as error:
        raise InvalidTask(f"Invalid idempotency key: {error.client_message}") from None


def _undecodable() -> RunledgerError:
    """A task's rows hold JSON Python cannot parse (an integer past its int-to-str digit limit,
    written by hand): its arguments or its result cannot be rebuilt."""
    return RunledgerError.for_code(
        Code.INTENT_INVALID_PERSISTED_ROW, "the task's stored payload or result does not decode"
    )


@functools.cache
def _record_prepared() -> Callable[..., IntentOutcome]:
    # Imported on first use: the backend is built while apps load, before models import.
    from ..services.intents import record_prepared

    return record_prepared


def load_task(module_path: str) -> Task[..., Any]:
    """The ``Task`` object a module path names (``@task`` puts it under the function's name).

    Raises:
        ImportError: nothing importable has that path (the task moved or was renamed).
        TypeError: the path names something that is not a ``django.tasks`` Task.
    """
    found = import_string(module_path)
    if not isinstance(found, Task):
        raise TypeError(f"{module_path} is a {type(found).__name__}, not a django.tasks Task")
    return found


class RunledgerTaskBackend(BaseTaskBackend):
    """Enqueue tasks as runledger intents in the caller's transaction; run them with
    ``runledger_worker``. ``OPTIONS``: ``DATABASE``, ``MAX_ATTEMPTS``, ``TIMEOUT_SECONDS``,
    ``ATOMIC_TASKS``."""

    task_class = RunledgerTask

    supports_defer = True
    """``run_after`` becomes the job's ``next_run_at``: it never runs earlier."""
    supports_async_task = True
    """Coroutine functions run through ``Task.call`` in the worker."""
    supports_get_result = True
    """Results are rows: any process reads them by id."""
    supports_priority = True
    """Priority (-100 to 100) is the job's priority; higher runs first."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._options: BackendOptions | None = None
        self._valid: dict[tuple[Any, ...] | None, str] = {}
        # The worker finds tasks through this source; registering it reads nothing.
        registry.add_source(task_source)

    @property
    def backend_options(self) -> BackendOptions:
        if self._options is None:
            self._options = read_options(self.options)
        return self._options

    @property
    def database(self) -> str:
        return self.backend_options.database

    # -- validation -------------------------------------------------------------------------

    def validate_task(self, task: Task[..., Any]) -> None:
        """Django's rules, then ours: the queue and module path form a valid job type, and an
        idempotency key is storable text. Django calls this whenever a task is built, so a
        task with an unusable key never exists to be enqueued."""
        self._checked_job_type(task)
        key = getattr(task, "idempotency_key", None)
        if key is not None:
            check_task_key(key)

    def _checked_job_type(self, task: Task[..., Any]) -> str:
        """Validate ``task`` and return its job type.

        Django validates a task again at every enqueue. The verdict depends only on the task's
        options, this backend's settings (a new TASKS makes a new backend) and USE_TZ, so it
        is remembered per options. The idempotency key is not among them: ``validate_task``
        checks it when the task is built, and ``prepare_enqueue`` again before any SQL.
        """
        options: tuple[Any, ...] | None = (
            task.func,
            task.priority,
            task.queue_name,
            task.run_after,
            task.takes_context,
            task.backend,
            settings.USE_TZ,
        )
        try:
            job_type = self._valid.get(options)
        except (TypeError, ValueError):  # an unhashable option: the rules below reject it
            options, job_type = None, None
        if job_type is None:
            super().validate_task(task)
            try:
                job_type = task_job_type(task.queue_name, task.module_path)
            except JobTypeError as error:
                raise InvalidTask(str(error)) from None
            if options is not None:
                if len(self._valid) >= VALIDATION_CACHE_SIZE:
                    self._valid.clear()
                self._valid[options] = job_type
        return job_type

    # -- enqueue ----------------------------------------------------------------------------

    def enqueue(
        self, task: Task[Any, Any], args: Any, kwargs: dict[str, Any]
    ) -> TaskResult[Any, Any]:
        """Record the task as an enqueue intent and return its READY result.

        Transaction: inside an atomic block it joins the caller's transaction (the task
        commits or rolls back with it); outside one it commits at once. It never writes,
        locks or waits for job definitions on the caller's connection: the insert reports a
        missing definition (a plain index probe), which is then made on a separate connection
        (definitions.py), whether this is the task's first enqueue or an operator or a test
        suite's flush deleted it since.

        Raises:
            InvalidTask: the task is not valid for this backend (Django's rules and ours).
            TypeError, ValueError: an argument ``normalize_json`` refuses.
            InvalidTaskBackend: invalid OPTIONS (``manage.py check`` names them).
            RunledgerError: ``job.intent_idempotency_conflict`` (same key, other arguments);
                ``job.invalid_payload`` for values JSON cannot keep (non-string dict keys,
                NaN); a classified database error. Input errors come before any SQL. When
                the missing definition cannot be made, the error is raised after the insert:
                inside the caller's transaction the intent is still uncommitted (it goes with
                the block the error leaves); outside one it has committed, and is promoted
                once the definition exists.
        """
        job_type = self._checked_job_type(task)
        options = self.backend_options
        if options.problems:
            raise InvalidTaskBackend(
                f"Task backend {self.alias!r} has invalid OPTIONS: {options.problems[0][1]}"
            )
        # The result normalises the arguments (normalize_json: TypeError, ValueError) and
        # prepare_enqueue validates the intent, both before any SQL. The id is chosen here, so
        # the result is complete before the insert and only the signal is left after it.
        intent_id = uuid7()
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=str(intent_id),
            status=TaskResultStatus.READY,
            enqueued_at=enqueued_at_of(intent_id, None),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        key = getattr(task, "idempotency_key", None)
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)  # USE_TZ = False: local time
        request = prepare_enqueue(
            job_type,
            {
                "backend": self.alias,
                "keyed": key is not None,
                "args": result.args,
                "kwargs": result.kwargs,
            },
            # Without a key of the caller's, the intent's own id is its key: unique, and
            # time-ordered (UUIDv7), so new keys append to the unique index.
            idempotency_key=intent_id.hex if key is None else key,
            priority=int(task.priority),
            next_run_at=run_after,
            for_intent=True,
        )
        database = options.database

        def make_definition() -> None:
            definitions.ensure_task_definition(
                job_type,
                max_attempts=options.max_attempts,
                timeout_seconds=options.timeout_seconds,
                using=database,
            )

        def record(traced: EnqueueRequest) -> IntentOutcome:
            return _record_prepared()(
                traced, intent_id=intent_id, using=database, on_missing_definition=make_definition
            )

        outcome = tracing.produce("create", "django.tasks", request, record)
        if outcome.disposition != "inserted":
            return self._read(outcome.intent_id, task=task)
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ----------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The current result of a task enqueued through this backend, from any process.

        Raises:
            TaskResultDoesNotExist: no such result (a malformed id included), or a result of
                another backend alias.
            InvalidTask: the result's task can no longer be imported.
            RunledgerError: a classified database error; ``job.intent_invalid_persisted_row``
                when the stored arguments or result do not decode.
        """
        try:
            intent_id = uuid.UUID(str(result_id))
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        return self._read(intent_id, result_id=result_id)

    def _read(
        self,
        intent_id: uuid.UUID,
        *,
        task: Task[..., Any] | None = None,
        result_id: object = None,
    ) -> TaskResult[..., Any]:
        from ..services.task_results import intent_with_job

        try:
            intent = intent_with_job(intent_id, using=self.database)
        except ValueError:
            raise _undecodable() from None
        if intent is None:
            raise TaskResultDoesNotExist(result_id if result_id is not None else str(intent_id))
        return self.result_of_intent(intent, task=task)

    def result_of_intent(
        self, intent: JobEnqueueIntent, *, task: Task[..., Any] | None = None
    ) -> TaskResult[..., Any]:
        """The result an intent (with its promoted job selected) stands for now; ``task``
        saves importing and rebuilding the task when the caller holds it."""
        payload = TaskPayload.decode(intent.payload)
        return self._result(
            result_id=intent.id,
            job_type=intent.job_type,
            payload=payload,
            priority=intent.priority,
            run_after=intent.next_run_at,
            idempotency_key=intent.idempotency_key if payload and payload.keyed else None,
            created_at=intent.created_at,
            intent=intent,
            job=intent.promoted_job,
            task=task,
        )

    def result_of_job(self, job_id: uuid.UUID) -> TaskResult[..., Any]:
        """The result of the task a claimed job runs: its intent's, or, for a job enqueued
        without one (``enqueue_job`` with a task's job type), one under the job's id.

        Raises:
            InvalidTask: the task cannot be imported or rebuilt (``__cause__`` says why).
            TaskResultDoesNotExist: the job is gone or does not carry a task of this backend.
        """
        from ..services.task_results import intent_or_job

        try:
            intent, job = intent_or_job(job_id, using=self.database)
        except ValueError:
            raise _undecodable() from None
        if intent is not None:
            return self.result_of_intent(intent)
        if job is None:
            raise TaskResultDoesNotExist(str(job_id))
        return self._result(
            result_id=job.id,
            job_type=job.job_type_id,
            payload=TaskPayload.decode(job.payload),
            priority=job.priority,
            run_after=None,
            idempotency_key=None,
            created_at=job.created_at,
            intent=None,
            job=job,
            task=None,
        )

    def _result(
        self,
        *,
        result_id: uuid.UUID,
        job_type: str,
        payload: TaskPayload | None,
        priority: int | None,
        run_after: dt.datetime | None,
        idempotency_key: str | None,
        created_at: dt.datetime,
        intent: JobEnqueueIntent | None,
        job: Job | None,
        task: Task[..., Any] | None,
    ) -> TaskResult[..., Any]:
        from ..services.task_results import attempts_of

        parsed = parse_task_job_type(job_type)
        if parsed is None or payload is None or payload.backend != self.alias:
            raise TaskResultDoesNotExist(str(result_id))
        queue_name, module_path = parsed
        if task is None:
            task = self.rebuild_task(
                module_path,
                queue_name=queue_name,
                priority=priority,
                run_after=run_after,
                idempotency_key=idempotency_key,
            )
        attempts = attempts_of(job, using=self.database)
        return build_result(
            task=task,
            result_id=str(result_id),
            enqueued_at=enqueued_at_of(result_id, created_at),
            args=payload.args,
            kwargs=payload.kwargs,
            backend=self.alias,
            intent=intent,
            job=job,
            attempts=attempts,
        )

    def rebuild_task(
        self,
        module_path: str,
        *,
        queue_name: str,
        priority: int | None,
        run_after: dt.datetime | None,
        idempotency_key: str | None,
    ) -> Task[..., Any]:
        """The task as it was enqueued: the imported Task with the stored options.

        Raises:
            InvalidTask: the path no longer names a Task, or the task is not valid here.
        """
        try:
            found = load_task(module_path)
        except (ImportError, TypeError) as exc:
            raise InvalidTask(f"Task {module_path!r} cannot be loaded: {exc}") from exc
        changes: dict[str, Any] = {
            "priority": 0 if priority is None else priority,
            "queue_name": queue_name,
            "run_after": None if run_after is None else django_time(run_after),
            "backend": self.alias,
        }
        if isinstance(found, RunledgerTask):
            changes["idempotency_key"] = idempotency_key
        return replace(found, **changes)

    # -- checks -----------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        """runledger.E101 the app is not installed, E102 the database is not PostgreSQL,
        E103-E106 and E108 invalid OPTIONS, E107 a queue name that cannot form a job type."""
        where = f"TASKS[{self.alias!r}]"
        messages: list[CheckMessage] = []
        if not apps.is_installed("runledger_django"):
            messages.append(
                Error(
                    f"{where} uses RunledgerTaskBackend, but runledger_django is not installed.",
                    hint="Add 'runledger_django' to INSTALLED_APPS and run migrate.",
                    id="runledger.E101",
                )
            )
        options = self.backend_options
        messages.extend(
            Error(f"{where}: {message}", hint=hint, id=check_id)
            for check_id, message, hint in options.problems
        )
        if options.database in settings.DATABASES:
            vendor = connections[options.database].vendor  # settings only; no connection
            if vendor != "postgresql":
                messages.append(
                    Error(
                        f"{where} stores tasks in database {options.database!r}, which is "
                        f"{vendor}, not PostgreSQL.",
                        hint="runledger_django needs PostgreSQL 15 or newer.",
                        id="runledger.E102",
                    )
                )
        for queue_name in sorted(self.queues, key=str):
            try:
                task_job_type(queue_name, "m.f")
            except JobTypeError as error:
                messages.append(
                    Error(
                        f"{where}: QUEUES has an unusable queue name: {error}.",
                        hint="Queue names are non-blank text; the job type "
                        "'task:<queue>:<module path>' must fit in 255 bytes.",
                        id="runledger.E107",
                    )
                )
        return messages


task_source = TaskSource(RunledgerTaskBackend)
"""The one source per process (the registry keeps each source once)."""
