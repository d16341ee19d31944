"""Handler registration: ``@job_handler`` and discovery of ``jobs.py`` modules."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from ..domain import JobDefaults
from ..errors import RunledgerError
from ..validation import INT32_MAX, INT32_MIN, validate_job_type, validate_limits

if TYPE_CHECKING:
    from .context import JobContext

HandlerFunc = Callable[["JobContext"], Any]
F = TypeVar("F", bound=HandlerFunc)


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler and the defaults it declares for its job type's definition."""

    job_type: str
    func: HandlerFunc
    max_attempts: int | None = None
    timeout_seconds: int | None = None
    priority: int | None = None
    atomic: bool = False
    """The handler runs in the transaction that completes its job (worker/atomic.py)."""
    max_concurrency: int | None = None
    rate_limit: tuple[int, int] | None = None

    def defaults(self) -> JobDefaults:
        return JobDefaults(
            job_type=self.job_type,
            max_attempts=self.max_attempts,
            timeout_seconds=self.timeout_seconds,
            priority=self.priority,
            max_concurrency=self.max_concurrency,
            rate_limit=self.rate_limit,
        )


DEFAULT_QUEUE = "default"
"""The queue of handlers registered with ``@job_handler``."""


class HandlerSource(Protocol):
    """Job types whose handlers are found at run time rather than registered up front (the
    ``django.tasks`` backend: any task function, on any of its queues)."""

    def job_types(self, queues: Sequence[str] | None, *, using: str) -> list[str]:
        """The job types this source can run now, on ``queues`` (None: every queue). May read
        the database (a worker refreshes them every poll interval)."""

    def resolve(self, job_type: str) -> Handler | None:
        """The handler for ``job_type``, or None when it is not one of this source's."""


class Registry:
    """Job type -> handler. One per process (``registry``); tests may build their own.

    Handlers registered with ``@job_handler`` run on the ``default`` queue; sources add job
    types found at run time.
    """

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._sources: list[HandlerSource] = []
        self._lock = threading.Lock()

    def add_source(self, source: HandlerSource) -> None:
        with self._lock:
            if source not in self._sources:
                self._sources.append(source)

    def remove_source(self, source: HandlerSource) -> None:
        with self._lock:
            if source in self._sources:
                self._sources.remove(source)

    def sources(self) -> list[HandlerSource]:
        return list(self._sources)

    def register(self, handler: Handler) -> None:
        with self._lock:
            if handler.job_type in self._handlers:
                raise ImproperlyConfigured(
                    f"Job type {handler.job_type!r} already has a handler "
                    f"({_describe(self._handlers[handler.job_type].func)})."
                )
            self._handlers[handler.job_type] = handler

    def unregister(self, job_type: str) -> None:
        with self._lock:
            self._handlers.pop(job_type, None)

    def get(self, job_type: str) -> Handler | None:
        handler = self._handlers.get(job_type)
        if handler is None:
            for source in self.sources():
                handler = source.resolve(job_type)
                if handler is not None:
                    break
        return handler

    def job_types(self) -> list[str]:
        """The job types registered with ``@job_handler`` (sources not included)."""
        return sorted(self._handlers)

    def runnable_job_types(self, queues: Sequence[str] | None, *, using: str) -> list[str]:
        """Every job type a worker serving ``queues`` runs now: the registered handlers' (on
        the default queue) and those its sources find."""
        types = set(self._handlers) if queues is None or DEFAULT_QUEUE in queues else set()
        for source in self.sources():
            types.update(source.job_types(queues, using=using))
        return sorted(types)

    def handlers(self) -> list[Handler]:
        return [self._handlers[job_type] for job_type in self.job_types()]


registry = Registry()
"""The process-wide registry that ``@job_handler`` fills and workers read."""


def _describe(func: object) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def _int_option(value: object, name: str, *, positive: bool) -> int | None:
    if value is None:
        return None
    low = 1 if positive else INT32_MIN
    if type(value) is not int or not low <= value <= INT32_MAX:
        kind = "a positive" if positive else "a"
        raise ImproperlyConfigured(f"job_handler {name} must be {kind} 32-bit int or None.")
    return value


def job_handler(
    job_type: str,
    *,
    max_attempts: int | None = None,
    timeout_seconds: int | None = None,
    priority: int | None = None,
    atomic: bool = False,
    max_concurrency: int | None = None,
    rate_limit: tuple[int, int] | None = None,
) -> Callable[[F], F]:
    """Register the decorated function as the handler of ``job_type``.

    The function takes one :class:`JobContext`. Its return value (JSON-native, or None) is the
    job's output; :class:`RetryJob` retries at a chosen time, :class:`TerminalJobError`
    dead-letters at once, any other exception retries with backoff.

    Args:
        job_type: the job type it runs; one handler per type and process.
        max_attempts, timeout_seconds, priority: the defaults of the job definition a worker
            creates for this type when there is none; an existing definition is never changed.
        atomic: run the handler inside a READ COMMITTED transaction on the queue's
            connection and write the job's success (or ``ContinueJob``'s continuation) in
            that same transaction, fenced by the lease: the handler's database writes and
            the job's end commit together, exactly once (docs/running-jobs.md).
        max_concurrency, rate_limit: the limits of the definition a worker creates for this
            type (docs/queue-control.md): at most ``max_concurrency`` LEASED jobs across every
            worker, at most ``rate_limit[0]`` starts per ``rate_limit[1]`` seconds. Like the
            other defaults they seed a new definition only; the admin or
            ``set_job_type_limits`` change them afterwards, and the database wins.

    Raises:
        ImproperlyConfigured: a second handler for the same type, or an invalid option.
    """
    try:
        checked_type = validate_job_type(job_type)
    except RunledgerError as error:
        raise ImproperlyConfigured(f"job_handler: {error.client_message}") from None
    options = {
        "max_attempts": _int_option(max_attempts, "max_attempts", positive=True),
        "timeout_seconds": _int_option(timeout_seconds, "timeout_seconds", positive=True),
        "priority": _int_option(priority, "priority", positive=False),
    }
    if not isinstance(atomic, bool):
        raise ImproperlyConfigured("job_handler atomic must be True or False.")
    try:
        concurrency, count, period = validate_limits(max_concurrency, rate_limit)
    except RunledgerError as error:
        raise ImproperlyConfigured(f"job_handler: {error.internal_message}") from None
    rate = None if count is None or period is None else (count, period)

    def register(func: F) -> F:
        if not callable(func):
            raise ImproperlyConfigured(f"job_handler({job_type!r}) must decorate a function.")
        registry.register(
            Handler(
                job_type=checked_type,
                func=func,
                atomic=atomic,
                max_concurrency=concurrency,
                rate_limit=rate,
                **options,
            )
        )
        return func

    return register


def autodiscover() -> None:
    """Import the ``jobs`` module of every installed app, as the admin does with ``admin``."""
    autodiscover_modules("jobs")


def load_task_backends() -> None:
    """Instantiate the configured ``django.tasks`` backends (Django 6 and newer), so that a
    ``runledger_django.tasks`` backend registers its handler source before a worker lists its
    job types. Through Django's own handler: this layer does not import the tasks package
    (it sits above the worker), and ``--skip-checks`` skips the system check that would
    otherwise have instantiated them."""
    try:
        from django.tasks import task_backends
    except ImportError:  # Django 5.2 has no Tasks framework
        return
    task_backends.all()
