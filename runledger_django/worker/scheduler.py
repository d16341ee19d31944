"""Schedules in the worker: ``schedule(...)`` declarations, their sync, and the scheduler loop.

``schedule(...)`` in a ``jobs.py`` module declares a schedule; the declaration is validated at
once (a bad one fails the import with its ``job_schedule.*`` code). A starting worker (or
``run_schedules``) syncs the declarations to the table, then runs the scheduler: a thread
that sleeps until the earliest cursor of its job types' schedules or the poll interval,
whichever comes first, and runs passes while schedules are due. Idle, it costs one statement
per look. Any number of them may run: the passes share the due rows, never a fire.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from ..conf import conf
from ..domain import JobDefaults, SchedulePassReport, ScheduleSpec, ScheduleSyncReport
from ..errors import RunledgerError
from ..services.claim import ensure_job_definitions
from ..services.outage import Outage, OutageLimitExceededError, is_outage
from ..services.schedules import (
    build_spec,
    next_due_at,
    run_schedule_pass,
    sync_declared_schedules,
)
from ..services.wakeup import SCHEDULES_CHANNEL
from .listener import Listener
from .registry import Registry, registry

logger = logging.getLogger(__name__)

TASK_PREFIX = "task:"
CONTENDED_WAIT_SECONDS = 0.25
"""A pass that found its due schedules taken by another scheduler waits this long before it
looks again (the other one is committing them)."""
WAKE_SLACK_SECONDS = 0.002
"""Sleep a hair past a cursor, so the pass after the wake finds it due."""


class Declarations:
    """The schedules declared in code, by name. One per process (``declarations``)."""

    def __init__(self) -> None:
        self._specs: dict[str, ScheduleSpec] = {}
        self._lock = threading.Lock()

    def add(self, spec: ScheduleSpec) -> None:
        with self._lock:
            if spec.name in self._specs:
                raise ImproperlyConfigured(f"Schedule {spec.name!r} is declared twice.")
            self._specs[spec.name] = spec

    def remove(self, name: str) -> None:
        with self._lock:
            self._specs.pop(name, None)

    def clear(self) -> None:
        with self._lock:
            self._specs.clear()

    def specs(self) -> list[ScheduleSpec]:
        with self._lock:
            return [self._specs[name] for name in sorted(self._specs)]


declarations = Declarations()
"""The process-wide declarations that ``schedule(...)`` fills and workers sync."""


def schedule(
    name: str,
    target: Any,
    *,
    cron: str | None = None,
    every: dt.timedelta | int | None = None,
    timezone: str = "UTC",
    payload: Any = None,
    args: Any = None,
    kwargs: Any = None,
    organization_id: Any = None,
    priority: int | None = None,
    jitter: dt.timedelta | int | None = None,
    catch_up: str = "latest",
    catch_up_grace: dt.timedelta | int = 60,
    catch_up_limit: int = 100,
    overlap: str = "allow",
    enabled: bool = True,
    run_on_create: bool = False,
) -> ScheduleSpec:
    """Declare the schedule ``name`` in a ``jobs.py`` module; workers sync it at start.

    ``target`` is a job type or a ``django.tasks`` Task of RunledgerTaskBackend (with ``args``
    and ``kwargs``). Give ``cron`` (5 fields, 6 with seconds first, or a nickname such as
    ``@daily``, read in ``timezone``) or ``every`` (a timedelta, anchored to the Unix epoch).
    The code owns these fields: a deploy applies them (a changed cron, interval or zone moves
    the cursor to the next fire), and a declaration removed from the code deactivates its
    schedule. An operator's pause is never undone by a deploy.

    Raises:
        RunledgerError: a ``job_schedule.invalid_*`` code for a bad field.
        ImproperlyConfigured: the name is declared twice.
    """
    spec = build_spec(
        name,
        target,
        cron=cron,
        every=every,
        timezone=timezone,
        payload=payload,
        args=args,
        kwargs=kwargs,
        organization_id=organization_id,
        priority=priority,
        jitter=jitter,
        catch_up=catch_up,
        catch_up_grace=catch_up_grace,
        catch_up_limit=catch_up_limit,
        overlap=overlap,
        enabled=enabled,
        run_on_create=run_on_create,
    )
    declarations.add(spec)
    return spec


def sync_declarations(
    *,
    handlers: Registry = registry,
    declared: Declarations = declarations,
    using: str = "default",
) -> ScheduleSyncReport:
    """Make sure the declared schedules' job types have definitions (with their handlers'
    defaults; a task's with the table's), then sync the declarations.

    Raises:
        RunledgerError: the sync failed (the code names the reason, the log the schedule).
    """
    specs = declared.specs()
    defaults: dict[str, JobDefaults] = {}
    for spec in specs:
        handler = handlers.get(spec.job_type)
        if handler is not None and not spec.job_type.startswith(TASK_PREFIX):
            defaults[spec.job_type] = handler.defaults()
        elif spec.job_type.startswith(TASK_PREFIX):
            defaults[spec.job_type] = JobDefaults(job_type=spec.job_type, priority=0)
    if defaults:
        ensure_job_definitions(list(defaults.values()), using=using)
    return sync_declared_schedules(specs, using=using)


class Scheduler(threading.Thread):
    """The scheduler loop, on a thread (and connection) of its own.

    ``job_types`` is read before every look (a worker's list may grow); None means every
    schedule. ``on_pass`` is called after every pass that claimed schedules (the worker claims
    the new jobs at once; ``run_schedules --loop --json`` prints it).
    """

    def __init__(
        self,
        *,
        job_types: Callable[[], list[str] | None],
        stop: threading.Event,
        poll_seconds: float,
        batch_size: int,
        outage: Outage | None = None,
        using: str = "default",
        sync: bool = True,
        on_pass: Callable[[SchedulePassReport], None] | None = None,
        on_outage: Callable[[], None] | None = None,
        on_outage_limit: Callable[[OutageLimitExceededError], None] | None = None,
        epoch: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(name="runledger-scheduler", daemon=True)
        self.job_types = job_types
        self.stop = stop
        self.poll_seconds = poll_seconds
        self.batch_size = batch_size
        self.outage = outage or _quiet_outage()
        """``run_schedules`` passes its own (it logs the outage); in a worker the scheduler
        backs off on a private, silent one: the worker's loop reports outages, and the
        scheduler's failures must neither lengthen the loop's waits nor end its outage."""
        self.using = using
        self.sync = sync
        self.on_pass = on_pass
        self.on_outage = on_outage
        self.on_outage_limit = on_outage_limit
        self.wake = threading.Event()
        self.synced = threading.Event()
        """Set once the declarations were synced (or the sync gave up with a logged error)."""
        self.passes = 0
        self.looks = 0
        self.epoch = epoch
        self._seen_epoch = epoch() if epoch is not None else 0
        self._retried = False

    def poke(self) -> None:
        """Look again now (a schedule was saved, resumed or retimed)."""
        self.wake.set()

    def run(self) -> None:
        try:
            if self.sync:
                self._sync()
            self.synced.set()
            while not self.stop.is_set():
                delay = self._step()
                if delay is None:
                    return
                if delay > 0:
                    self.wake.wait(delay)
                self.wake.clear()
        finally:
            self.synced.set()
            connections.close_all()

    def _sync(self) -> None:
        while not self.stop.is_set():
            try:
                sync_declarations(using=self.using)
            except RunledgerError as error:
                if not is_outage(error):
                    logger.error(
                        "declared schedules could not be synced; existing schedules still "
                        "fire error_code=%s detail=%s",
                        error.code,
                        error.internal_message,
                        extra={"runledger": error.log_fields()},
                    )
                    return
                if self._failed(error) is None:
                    return
                continue
            self.outage.succeeded()
            return

    def _failed(self, error: RunledgerError) -> float | None:
        """Back off after a database failure; None when the outage limit was passed.

        The first session-level failure after a success is retried at once on a new
        connection: after a server restart the old one is dead while the server is back."""
        if is_outage(error) and not self._retried:
            self._retried = True
            connections.close_all()
            return 0.0
        if is_outage(error) and self.on_outage is not None:
            self.on_outage()
        connections[self.using].close_if_unusable_or_obsolete()
        try:
            wait = self.outage.failed(error)
        except OutageLimitExceededError as exceeded:
            if self.on_outage_limit is not None:
                self.on_outage_limit(exceeded)
            return None
        self.stop.wait(wait)
        return 0.0

    def _step(self) -> float | None:
        """One look (and the passes it calls for); the seconds to sleep, None to end."""
        types = self.job_types()
        if types is not None and not types:
            return self.poll_seconds
        if self.epoch is not None and self.epoch() != self._seen_epoch:
            # The worker saw the database go away: this thread's connection is dead too.
            self._seen_epoch = self.epoch()
            connections.close_all()
        try:
            self.looks += 1
            now, earliest = next_due_at(types, using=self.using)
            if earliest is None or earliest > now:
                self.outage.succeeded()
                self._retried = False
                if earliest is None:
                    return self.poll_seconds
                wait = (earliest - now).total_seconds() + WAKE_SLACK_SECONDS
                return min(self.poll_seconds, wait)
            claimed = self.drain(types)
        except RunledgerError as error:
            return self._failed(error)
        except Exception:
            # A background thread must not die silently: log, back off, go on.
            logger.exception("scheduler pass failed unexpectedly")
            connections[self.using].close_if_unusable_or_obsolete()
            return self.poll_seconds
        self.outage.succeeded()
        self._retried = False
        return 0.0 if claimed else CONTENDED_WAIT_SECONDS

    def drain(self, types: list[str] | None) -> int:
        """Passes until one leaves no due schedule behind; the schedules claimed."""
        claimed = 0
        while not self.stop.is_set():
            report = run_schedule_pass(types, limit=self.batch_size, using=self.using)
            self.passes += 1
            claimed += report.claimed
            if report.claimed and self.on_pass is not None:
                self.on_pass(report)
            if not report.batch_was_full:
                break
        return claimed


def _quiet_outage() -> Outage:
    """Backoff without log lines and without a limit (the worker's loop has both)."""
    quiet = logging.getLogger(f"{__name__}.quiet")
    quiet.propagate = False
    quiet.addHandler(logging.NullHandler())
    quiet.setLevel(logging.CRITICAL + 1)
    return Outage(limit_seconds=math.inf, logger=quiet, what="scheduler")


def burst_schedules(
    job_types: list[str] | None, *, batch_size: int, using: str = "default"
) -> SchedulePassReport:
    """``runledger_worker --burst``: sync the declarations, then one scheduler pass (drained
    while batches come back full). A failed sync is logged; due schedules still fire."""
    try:
        sync_declarations(using=using)
    except RunledgerError as error:
        if is_outage(error):
            raise
        logger.error(
            "declared schedules could not be synced error_code=%s detail=%s",
            error.code,
            error.internal_message,
            extra={"runledger": error.log_fields()},
        )
    total = SchedulePassReport()
    started = time.monotonic()
    while True:
        report = run_schedule_pass(job_types, limit=batch_size, using=using)
        total = total + report
        if not report.batch_was_full:
            break
    logger.debug("burst scheduler pass took %.3f s", time.monotonic() - started)
    return total


def listen_for_schedules(
    on_notify: Callable[[], None], *, stop: threading.Event, using: str = "default"
) -> threading.Thread | None:
    """Start a listener that calls ``on_notify`` when a schedule is saved (``run_schedules
    --loop``); None where notifications are off. Behind a transaction-pooling proxy the
    listener finds out that nothing arrives and ends: the scheduler then polls."""
    if not conf.WORKER_LISTEN:
        return None
    listener = Listener(
        using=using,
        promote=False,
        channels=[SCHEDULES_CHANNEL],
        on_notify=lambda channel: on_notify(),
        stop=stop,
        poll_interval=conf.SCHEDULE_POLL_SECONDS,
    )
    listener.start()
    return listener
