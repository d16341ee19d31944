"""The worker side: which task job types a worker runs, and running one as Django's do.

A ``TaskSource`` is a ``HandlerSource`` of the worker registry; ``backend.py`` makes the one of
a process for its backend class (``task_source``) and registers it from the first backend
instance (``runledger_worker`` instantiates the configured backends at start). A
worker without ``--job-type`` asks it every few seconds for the enabled task definitions of
its queues; ``resolve`` hands back a handler that imports the task by its module path when the
job runs. The handler rebuilds the ``TaskResult`` from the rows (so ``TaskContext.attempt`` is
1 on the first run), sends ``task_started``, calls the task, and sends ``task_finished``, for a
failure from inside the ``except`` block (Django's receivers log it with the traceback), then
re-raises so runledger's retries, dead letters and timeouts apply as to any handler.
"""

from __future__ import annotations

import datetime as dt
import functools
import traceback
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from django.conf import settings
from django.tasks.base import TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, InvalidTaskBackend
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from ..domain import FailureKind
from ..errors import Code, RunledgerError
from ..validation import encode_payload
from ..worker.outcomes import TerminalJobError, class_path, failure_from_exception
from ..worker.registry import Handler
from .formats import BackendOptions, TaskPayload, read_options
from .naming import TASK_PREFIX, parse_task_job_type, queue_prefix

if TYPE_CHECKING:
    from ..worker.context import JobContext


class TaskBackend(Protocol):
    """What the worker side needs of a RunledgerTaskBackend: the result a claimed job stands
    for (``backend.py`` defines the class; see ``TaskSource``)."""

    def result_of_job(self, job_id: uuid.UUID) -> TaskResult[..., Any]: ...

    @property
    def backend_options(self) -> BackendOptions: ...


__all__ = ["TaskRunner", "TaskSource"]

# Terminal failures of a task's job (errors.Code has their client messages):
TASK_NOT_FOUND = Code.TASK_NOT_FOUND.value
"""The task's module path imports nothing: it moved, was renamed, or is not deployed on this
worker yet. Terminal: requeue the job once the code is there."""
TASK_INVALID = Code.TASK_INVALID.value
"""The path names something that is not a ``django.tasks`` Task, or the task is not valid for
its backend here (a queue no longer in QUEUES, ...)."""
TASK_BACKEND_UNAVAILABLE = Code.TASK_BACKEND_UNAVAILABLE.value
"""The task's backend alias is not a RunledgerTaskBackend in this worker's TASKS."""
TASK_PAYLOAD_INVALID = Code.TASK_PAYLOAD_INVALID.value
"""The job of a task's job type does not carry a task's payload (it was not enqueued through
the backend)."""


def serving_databases(backend_class: type[TaskBackend]) -> frozenset[str]:
    """The databases of the ``backend_class`` backends (RunledgerTaskBackends) in the current
    TASKS setting (read each time, so ``override_settings`` applies; no query)."""
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, Mapping):
        return frozenset()
    databases = set()
    for params in configured.values():
        if not isinstance(params, Mapping):
            continue
        try:
            found = import_string(str(params.get("BACKEND")))
        except ImportError:
            continue
        if isinstance(found, type) and issubclass(found, backend_class):
            databases.add(read_options(params.get("OPTIONS", {})).database)
    return frozenset(databases)


class TaskSource:
    """The job types of Django tasks, found in the job definitions the backend creates.

    ``backend_class`` is RunledgerTaskBackend: given by ``backend.py``, which makes the source,
    so this module (the worker side) never imports the backend that registers it.
    """

    def __init__(self, backend_class: type[TaskBackend]) -> None:
        self.backend_class = backend_class

    def job_types(self, queues: Sequence[str] | None, *, using: str) -> list[str]:
        """The enabled task job types on ``queues`` (None: every queue), when this worker's
        TASKS has a runledger backend on database ``using``; otherwise none, without a query.

        One query: a LIKE prefix match on the definitions' primary key, served by the
        text_pattern_ops index Django creates for a text primary key, whatever the
        collation (docs/tasks.md has the measurements).
        """
        if using not in serving_databases(self.backend_class):
            return []
        from ..services.task_results import enabled_job_types

        prefixes = [TASK_PREFIX] if queues is None else [queue_prefix(q) for q in queues]
        found = enabled_job_types(prefixes, using=using)
        wanted = None if queues is None else set(queues)
        types = []
        for job_type in found:
            parsed = parse_task_job_type(job_type)
            if parsed is not None and (wanted is None or parsed[0] in wanted):
                types.append(job_type)
        return sorted(types)

    def resolve(self, job_type: str) -> Handler | None:
        """A handler for any task job type; whether the task imports is found out when the
        job runs (and fails it with a clear code)."""
        return _handler(job_type, self.backend_class)


@functools.lru_cache(maxsize=4096)
def _handler(job_type: str, backend_class: type[TaskBackend]) -> Handler | None:
    parsed = parse_task_job_type(job_type)
    if parsed is None:
        return None
    return Handler(job_type=job_type, func=TaskRunner(parsed[1], backend_class))


class TaskRunner:
    """The handler of one task job type."""

    def __init__(self, module_path: str, backend_class: type[TaskBackend]) -> None:
        self.module_path = module_path
        self.backend_class = backend_class

    def __repr__(self) -> str:
        return f"TaskRunner({self.module_path!r})"

    def __call__(self, job: JobContext) -> Any:
        payload = TaskPayload.decode(job.payload)
        if payload is None:
            raise TerminalJobError(
                "The job does not carry a task's payload.", code=TASK_PAYLOAD_INVALID
            )
        backend = _backend(payload.backend, self.backend_class)
        try:
            result = backend.result_of_job(job.job_id)
        except InvalidTask as error:
            missing = isinstance(error.__cause__, ImportError)
            raise TerminalJobError(
                str(error), code=TASK_NOT_FOUND if missing else TASK_INVALID
            ) from error
        task = result.task
        sender = type(backend)
        task_started.send(sender=sender, task_result=result)
        try:
            if backend.backend_options.atomic_tasks:
                # The task's writes and its job's success commit together (ATOMIC_TASKS).
                with job.complete_atomically() as completion:
                    value = self._call(task, result, job)
                    completion.output = value
            else:
                value = self._call(task, result, job)
        except BaseException as exc:
            task_finished.send(sender=sender, task_result=_failed(result, exc, job))
            raise
        finished = replace(result, status=TaskResultStatus.SUCCESSFUL, finished_at=timezone.now())
        object.__setattr__(finished, "_return_value", value)
        task_finished.send(sender=sender, task_result=finished)
        return value

    def _call(self, task: Any, result: TaskResult[Any, Any], job: JobContext) -> Any:
        if task.takes_context:
            context = RunledgerTaskContext(
                task_result=result,
                scheduled_for=job.scheduled_for,
                schedule_name=job.schedule_name,
            )
            raw = task.call(context, *result.args, **result.kwargs)
        else:
            raw = task.call(*result.args, **result.kwargs)
        value = _json_output(raw)
        if job.remaining.total_seconds() <= 0:
            # Past the deadline the worker records a timeout, whatever the task returned.
            raise RunledgerError.for_code(
                Code.TIMEOUT_EXCEEDED, f"task {self.module_path} passed its deadline"
            )
        return value


if TYPE_CHECKING:
    _TaskContext = TaskContext[..., Any]  # generic in django-stubs only
else:
    _TaskContext = TaskContext


# Django's TaskContext is a frozen dataclass; django-stubs types it as a plain generic class.
@dataclass(frozen=True, slots=True, kw_only=True)
class RunledgerTaskContext(_TaskContext):  # type: ignore[misc]
    """Django's ``TaskContext`` plus the fire a schedule made this task's job for."""

    scheduled_for: dt.datetime | None = None
    """The fire (aware UTC) when a schedule made the job; None otherwise."""
    schedule_name: str | None = None


def _backend(alias: str, backend_class: type[TaskBackend]) -> TaskBackend:
    from django.tasks import task_backends

    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as error:
        raise TerminalJobError(
            f"Task backend {alias!r} is not configured on this worker: {error}",
            code=TASK_BACKEND_UNAVAILABLE,
        ) from error
    if not isinstance(backend, backend_class):
        raise TerminalJobError(
            f"Task backend {alias!r} is a {type(backend).__name__} on this worker, not a "
            "RunledgerTaskBackend.",
            code=TASK_BACKEND_UNAVAILABLE,
        )
    return backend


def _json_output(raw: object) -> Any:
    """The return value as Django normalises it, checked to be storable; a value that is not
    fails the attempt terminally (``job.invalid_output``), as for any handler."""
    try:
        value = normalize_json(raw)
        encode_payload(value)
    except (TypeError, ValueError, RunledgerError) as exc:
        detail = (
            exc.client_message
            if isinstance(exc, RunledgerError)
            else f"{type(exc).__name__}: {exc}"
        )
        raise TerminalJobError(
            f"The task returned a value that is not JSON-native ({detail}).",
            code=Code.INVALID_OUTPUT.value,
        ) from exc
    return value


def _failed(
    result: TaskResult[Any, Any], exc: BaseException, job: JobContext
) -> TaskResult[Any, Any]:
    """The result as this failure leaves it: READY when runledger will retry the task,
    FAILED when this attempt was its last; the error is the one the attempt row records."""
    failure = failure_from_exception(exc, attempt=job.attempt, job_id=job.job_id)
    final = not FailureKind(failure.kind).is_retryable or job.attempt >= job.max_attempts
    error = TaskError(
        exception_class_path=class_path(exc), traceback="".join(traceback.format_exception(exc))
    )
    return replace(
        result,
        status=TaskResultStatus.FAILED if final else TaskResultStatus.READY,
        finished_at=timezone.now() if final else None,
        errors=[*result.errors, error],
    )
