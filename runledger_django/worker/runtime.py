"""The worker loop: claim due jobs, run them on a pool of threads, keep their leases alive,
enforce deadlines, reap expired leases, and stop cleanly.

Threads, each with its own database connection:
- the loop (the caller's thread): claims, dispatches, deadlines, the reaper, shutdown;
- ``concurrency`` executors, which run handlers and record their outcomes;
- the heartbeater; the wake-up listener; and, with ``promote``, a promoter.
The loop never waits on a handler: a handler past its deadline has its attempt failed from
the loop, and one stuck past the deadline plus the grace period makes the worker hand back
its other jobs and exit non-zero, as a supervisor would want (gunicorn's stuck-worker rule).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypeVar

from django.db import connections

from ..domain import ClaimedJob, JobLease, ReapReport, WorkReport
from ..errors import RunledgerError
from ..services.claim import (
    PEEK_HORIZON_MAX_SECONDS,
    add_throttle_listener,
    claim_jobs,
    ensure_job_definitions,
    remove_throttle_listener,
    seconds_until_due,
)
from ..services.dashboard import sample_queue
from ..services.lifecycle import hand_back_leases
from ..services.outage import EXIT_OUTAGE, Outage, OutageLimitExceededError, is_outage
from ..services.promotion import promote_intents
from ..services.reaper import REAPER_RETRY_DELAY_MS, reap_expired_leases
from ..services.wakeup import INTENTS_CHANNEL, JOBS_CHANNEL, SCHEDULES_CHANNEL, wake_after_commit
from ..services.worker_registry import VERSION
from ..services.workflows import promote_workflow_intents
from ..uuid7 import uuid7
from .completer import Completer, Refill
from .execution import (
    Execution,
    JobRun,
    drop_dead_connections,
    execute,
    record_timeout,
    tidy_connections,
)
from .health import Health, worker_health
from .heartbeat import Heartbeater
from .listener import Listener
from .metrics import NO_METRICS, WorkerMetrics
from .registry import Registry
from .scheduler import Scheduler, burst_schedules
from .worker_registry import Presence

logger = logging.getLogger(__name__)

T = TypeVar("T")

HOT_SECONDS = 0.05
"""After a wake-up or a non-empty claim, keep looking this long (every HOT_TICK_SECONDS):
work committed just after a coalesced notification is found without waiting for a poll."""
HOT_TICK_SECONDS = 0.01
BATCH_WAIT_MAX_SECONDS = 0.005
BATCH_WAIT_FRACTION = 0.2
"""With a deep queue (the last claim was full), a claim waits until half the executors are
free, at most this fraction of a job's typical run and never more than the maximum: one
statement then leases a batch instead of one job per finished handler. Each claim costs the
database about as much as a batch of eight does, so on a busy queue this is what bounds the
drain rate; an idle or shallow queue never waits."""
IDLE_CHECK_SECONDS = 5.0
"""An executor idle this long checks its connections before the next handler runs."""
MIN_REFRESH_SECONDS = 5.0
QUEUE_SAMPLE_SECONDS = 60.0
"""How often a worker offers the dashboard's queue sample (a minute already sampled by
another worker costs one short transaction)."""
INFINITY = float("inf")
THREAD_JOIN_SECONDS = 5.0
"""How long a stopped worker waits for its threads to end before ``run`` returns."""
"""At most this often a worker re-reads job types its sources find at run time."""
COMPLETION_WAIT_SECONDS = 15.0
"""At shutdown, how long the worker waits for atomic completions already writing their commit
(the lifecycle lock cap, the commit itself, and a settled outcome after a lost answer)."""
SHUTDOWN_REASON = "WORKER_SHUTDOWN"
STUCK_REASON = "WORKER_STUCK"

EXIT_OK = 0
EXIT_STUCK = 70
"""A handler ran past its deadline plus the grace period (EX_SOFTWARE)."""


def make_worker_id() -> str:
    """``host-pid-random``: unique per process, at most 64 characters (Django's Tasks limit)."""
    host = socket.gethostname().split(".")[0][:32] or "worker"
    return f"{host}-{os.getpid()}-{uuid7().hex[-8:]}"


@dataclass
class WorkerConfig:
    job_types: list[str]
    """The job types to run. Without ``fixed_job_types`` the worker refreshes this list from
    its registry (sources such as the Tasks backend find new types at run time)."""
    fixed_job_types: bool = True
    queues: list[str] | None = None
    """The queues to serve (None: every queue); handlers of ``@job_handler`` are on
    ``default``."""
    concurrency: int = 1
    promote: bool = False
    burst: bool = False
    lease_seconds: int = 60
    grace_seconds: float = 30.0
    poll_interval: float = 1.0
    idle_poll_interval: float | None = None
    """While wake-ups arrive (the listener is subscribed), how often a worker whose last claim
    found nothing, and its promoter, look for work no notification announced (another worker's
    retry coming due). The worker then asks when the next job comes due and claims only then.
    None: claim every ``poll_interval`` (always so where notifications cannot arrive)."""
    reaper_interval: float = 15.0
    sample_queue: bool = False
    """Record the queue's depth for the admin dashboard about once a minute (every worker may:
    one of them samples a minute, the others skip it)."""
    outage_limit: float = 300.0
    listen: bool = True
    promotion_batch_size: int = 500
    schedules: bool = True
    """Run the scheduler for the schedules of these job types (``--no-schedules``: off)."""
    schedule_poll_seconds: float = 30.0
    schedule_batch_size: int = 500
    using: str = "default"
    worker_id: str = field(default_factory=make_worker_id)
    heartbeat_seconds: float = 15.0
    """How often the loop beats the worker's ``runledger_workers`` row."""
    registry_retention_seconds: float = 86_400.0
    """Stale rows of other workers older than this are deleted by the beat."""


@dataclass
class WorkerResult:
    exit_code: int
    report: WorkReport
    reason: str


class _Counts:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.claimed = 0
        self.succeeded = 0
        self.retried = 0
        self.dead_lettered = 0
        self.lease_lost = 0
        self.continued = 0

    def add(self, run: JobRun) -> None:
        with self.lock:
            if run.outcome == "succeeded":
                self.succeeded += 1
            elif run.outcome == "retried":
                self.retried += 1
            elif run.outcome == "dead_lettered":
                self.dead_lettered += 1
            elif run.outcome == "lease_lost":
                self.lease_lost += 1
            elif run.outcome == "continued":
                self.continued += 1

    def report(self) -> WorkReport:
        with self.lock:
            return WorkReport(
                claimed=self.claimed,
                succeeded=self.succeeded,
                retried=self.retried,
                dead_lettered=self.dead_lettered,
                lease_lost=self.lease_lost,
                continued=self.continued,
            )


class _RunTime:
    """The typical time from dispatch to a recorded outcome (an exponential average)."""

    WEIGHT = 0.1

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        with self.lock:
            self.seconds = (
                seconds
                if not self.seconds
                else (self.seconds + self.WEIGHT * (seconds - self.seconds))
            )


class Worker:
    """One worker process's runtime. ``run()`` returns when stopped, drained (burst), stuck or
    cut off from the database for too long; the exit code says which."""

    def __init__(
        self,
        config: WorkerConfig,
        registry: Registry,
        *,
        stop: threading.Event,
        force: threading.Event | None = None,
        on_run: Callable[[JobRun], None] | None = None,
        metrics: WorkerMetrics | None = None,
        health: Health | None = None,
    ) -> None:
        self.config = config
        self.metrics = metrics or NO_METRICS
        self.registry = registry
        self.stop = stop
        self.force = force or threading.Event()
        self.on_run = on_run
        self.counts = _Counts()
        self.run_time = _RunTime()
        self.inflight: dict[JobLease, Execution] = {}
        self.inflight_lock = threading.Lock()
        self.wake = threading.Event()
        self.notified = threading.Event()
        self.promoter_wake = threading.Event()
        self.timers: list[float] = []
        self.timers_lock = threading.Lock()
        self.tasks: queue.Queue[Execution | None] = queue.Queue()
        self.background_stop = threading.Event()
        self.outage = Outage(
            limit_seconds=config.outage_limit, logger=logger, what=f"worker {config.worker_id}"
        )
        self.threads: list[threading.Thread] = []
        self.epoch = 0
        """Moves whenever a thread of this worker sees the database go away: every executor
        then drops its connections before its next handler, which would otherwise fail its
        first query on a connection the outage killed (and burn an attempt)."""
        self._epochs = itertools.count(1)
        self.defined: set[str] = set()
        """Job types whose definition this worker made sure of."""
        self.deep = False
        """The last claim came back full: more jobs are probably due. Successes then claim
        the next jobs in their own statement (``Refill``)."""
        self.dispatch_lock = threading.Lock()
        """Held while jobs claimed outside the loop are dispatched, and while the worker
        begins to stop: a job is either dispatched before shutdown looks, or handed back."""
        self.completer = Completer(
            using=config.using,
            running=self.busy,
            refill=Refill(
                job_types=self._refill_job_types,
                claimed=self._refilled,
                lease_seconds=config.lease_seconds,
            ),
        )
        """Executors finishing together record their successes in one statement, which on a
        deep queue also claims their next jobs."""
        self.stuck = False
        self.outage_error: OutageLimitExceededError | None = None
        self.scheduler: Scheduler | None = None
        self.listener: Listener | None = None
        self.health = health or worker_health(
            poll_interval=config.poll_interval,
            reaper_interval=config.reaper_interval,
            heartbeat_seconds=config.heartbeat_seconds,
            version=VERSION,
        )
        """What the probes answer (worker/health.py): the loop's ticks, database round trips
        and start; readiness ends the moment the stop flag (SIGTERM) is raised."""
        self.health.attach(
            stopping=self.stop.is_set, inflight=self.busy, worker_id=config.worker_id
        )
        self.presence = Presence(
            worker_id=config.worker_id,
            job_types=lambda: self.config.job_types,
            concurrency=config.concurrency,
            heartbeat_seconds=config.heartbeat_seconds,
            retention_seconds=config.registry_retention_seconds,
            using=config.using,
            on_success=self.health.database_ok,
            on_outage=self.note_outage,
        )
        """This worker's ``runledger_workers`` row, beaten by the loop."""

    # --- shared state ----------------------------------------------------------------------

    def executions(self) -> list[Execution]:
        with self.inflight_lock:
            return list(self.inflight.values())

    def busy(self) -> int:
        """Executor threads taken: running handlers, timed-out ones still running included."""
        with self.inflight_lock:
            return len(self.inflight)

    def note_outage(self) -> None:
        self.epoch = next(self._epochs)
        self.health.database_failed()

    def poke(self) -> None:
        self.notified.set()
        self.wake.set()

    def on_notify(self, channel: str) -> None:
        if channel == INTENTS_CHANNEL:
            self.promoter_wake.set()
        elif channel == JOBS_CHANNEL:
            self.poke()
        elif channel == SCHEDULES_CHANNEL and self.scheduler is not None:
            self.scheduler.poke()

    def wake_at(self, monotonic_time: float) -> None:
        with self.timers_lock:
            heapq.heappush(self.timers, monotonic_time)
        self.wake.set()

    # --- threads ---------------------------------------------------------------------------

    def _executor(self) -> None:
        last_job = time.monotonic()
        epoch = self.epoch
        try:
            while True:
                execution = self.tasks.get()
                if execution is None:
                    return
                if self.epoch != epoch:
                    # The database went away since this thread's last job: its connections
                    # are dead even if nothing here has used them since.
                    epoch = self.epoch
                    connections.close_all()
                elif time.monotonic() - last_job > IDLE_CHECK_SECONDS:
                    # A connection that sat idle may have died meanwhile (a server restart,
                    # an idle timeout): find out now, not in the handler's first query.
                    drop_dead_connections()
                try:
                    run = execute(
                        execution,
                        self.registry,
                        using=self.config.using,
                        completer=self.completer,
                    )
                except Exception:
                    # An error around a handler (execute never raises for the handler itself)
                    # must not cost the worker this thread, a slot of its capacity: give the
                    # lease up, so it expires and the reaper retries the job.
                    logger.exception(
                        "running a job failed unexpectedly job_id=%s", execution.lease.job_id
                    )
                    execution.mark_lost("running the job failed unexpectedly")
                    run = execution.make_run("persist_failed", None)
                finally:
                    tidy_connections()
                    last_job = time.monotonic()
                self._finished(execution, run)
        finally:
            connections.close_all()

    def _finished(self, execution: Execution, run: JobRun) -> None:
        execution.run = run
        execution.done.set()
        self.run_time.add(time.monotonic() - execution.started)
        with self.inflight_lock:
            self.inflight.pop(execution.lease, None)
        self.counts.add(run)
        self._schedule_retry(execution, run)
        self._report(run)
        self.wake.set()

    def _report(self, run: JobRun) -> None:
        """Tell ``on_run``; a failing report (a closed stdout) never stops the worker."""
        self.metrics.finished(run)
        if self.on_run is None:
            return
        try:
            self.on_run(run)
        except Exception:
            logger.exception("reporting a finished job failed job_id=%s", run.job_id)

    def _schedule_retry(self, execution: Execution, run: JobRun) -> None:
        if run.next_run_at is None:
            return
        # Database time to local monotonic time, through the claim's timestamp.
        delay = (run.next_run_at - execution.claimed.claimed_at).total_seconds()
        self.wake_at(execution.started + max(0.0, delay))

    def _refill_job_types(self) -> list[str] | None:
        if not self.deep or self.stop.is_set() or self.background_stop.is_set():
            return None
        return self.config.job_types

    def _refilled(self, claimed: list[ClaimedJob], asked: int) -> None:
        """Run jobs a success statement claimed; hand them back if the worker began to stop
        while that statement ran (shutdown no longer looks for new work)."""
        self.deep = len(claimed) == asked
        self.metrics.claimed(len(claimed), None)
        if not claimed:
            return
        with self.dispatch_lock:
            if not self.background_stop.is_set():
                self._dispatch(claimed)
                return
        self._hand_back([job.lease for job in claimed], SHUTDOWN_REASON)

    def _hand_back(self, leases: list[JobLease], reason: str) -> int | None:
        """Give ``leases`` back (their jobs due again at once) and wake the workers; how many
        were handed back, or None when the hand-back failed (logged: the reaper takes them
        once the leases expire)."""
        try:
            handed = hand_back_leases(leases, reason=reason, using=self.config.using)
        except RunledgerError as error:
            logger.error(
                "could not hand back job leases; the reaper will take them error_code=%s",
                error.code,
                extra={"runledger": error.log_fields()},
            )
            return None
        if handed:
            wake_after_commit(self.config.using, JOBS_CHANNEL)
        return len(handed)

    def _promoter(self) -> None:
        """Promote intents of the worker's job types; wake the claim loop when jobs appear."""
        config = self.config
        hot_until = 0.0
        try:
            while not self.background_stop.is_set():
                woken = self.promoter_wake.is_set()
                self.promoter_wake.clear()
                try:
                    report = promote_intents(
                        config.job_types, limit=config.promotion_batch_size, using=config.using
                    )
                    flows = promote_workflow_intents(using=config.using)
                except RunledgerError as error:
                    if is_outage(error):
                        self.note_outage()
                    connections[config.using].close_if_unusable_or_obsolete()
                    try:
                        wait = self.outage.failed(error)
                    except OutageLimitExceededError as exceeded:
                        self.stop_for_outage(exceeded)
                        return
                    self.background_stop.wait(wait)
                    continue
                except Exception:
                    # A background thread must not die silently: log, back off, go on.
                    logger.exception("intent promotion in the worker failed unexpectedly")
                    connections[config.using].close_if_unusable_or_obsolete()
                    self.background_stop.wait(config.poll_interval)
                    continue
                self.outage.succeeded()
                if report.total_promoted or flows.inserted_runs:
                    self.poke()
                    wake_after_commit(config.using, JOBS_CHANNEL)
                now = time.monotonic()
                if woken or report.anything_happened or flows.anything_happened:
                    hot_until = now + HOT_SECONDS
                if report.batch_was_full or flows.batch_was_full:
                    continue
                self.promoter_wake.wait(
                    HOT_TICK_SECONDS if now < hot_until else self._idle_poll_seconds()
                )
        finally:
            connections.close_all()

    def stop_for_outage(self, error: OutageLimitExceededError) -> None:
        self.outage_error = error
        self.stop.set()
        self.wake.set()

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> WorkerResult:
        """Run until stopped, drained (burst), stuck, or cut off from the database too long."""
        # Claims are made by this worker's threads in this process: its metrics count the
        # throttled ones (the listener is process-wide, so it goes when the worker stops).
        add_throttle_listener(self.metrics.throttled)
        try:
            return self._run()
        finally:
            remove_throttle_listener(self.metrics.throttled)

    def _run(self) -> WorkerResult:
        config = self.config
        self._start(threading.Thread(target=self._relay_stop, name="runledger-stop-relay"))
        for number in range(config.concurrency):
            self._start(
                threading.Thread(target=self._executor, name=f"runledger-executor-{number}")
            )
        self._start(
            Heartbeater(
                self.executions,
                lease_seconds=config.lease_seconds,
                using=config.using,
                stop=self.background_stop,
                on_outage=self.note_outage,
            )
        )
        if config.listen and not config.burst:
            self.listener = Listener(
                using=config.using,
                promote=config.promote,
                schedules=config.schedules,
                on_notify=self.on_notify,
                on_disconnect=self.note_outage,
                stop=self.background_stop,
                poll_interval=config.poll_interval,
            )
            self._start(self.listener)
        if config.promote and not config.burst:
            self._start(threading.Thread(target=self._promoter, name="runledger-promoter"))
        if config.schedules and not config.burst:
            self.scheduler = Scheduler(
                job_types=lambda: self.config.job_types,
                stop=self.background_stop,
                poll_seconds=config.schedule_poll_seconds,
                batch_size=config.schedule_batch_size,
                using=config.using,
                on_pass=lambda report: self.poke() if report.fired else None,
                on_outage=self.note_outage,
                epoch=lambda: self.epoch,
            )
            self._start(self.scheduler)
        try:
            reason = self._loop()
        except OutageLimitExceededError as exceeded:
            self.outage_error = exceeded
            reason = str(exceeded)
        except BaseException:
            self._shutdown(immediately=True)
            self.presence.leave()
            raise
        gone = self.outage_error is not None
        self._shutdown(immediately=self.stuck or gone or self.force.is_set())
        self.presence.leave()
        if not self.stuck:
            self._join_threads()
        if self.stuck:
            return WorkerResult(EXIT_STUCK, self.counts.report(), reason)
        if self.outage_error is not None:
            return WorkerResult(EXIT_OUTAGE, self.counts.report(), str(self.outage_error))
        return WorkerResult(EXIT_OK, self.counts.report(), reason)

    def _join_threads(self) -> None:
        """Let the threads end (each closes its database connections as it does), so a
        caller that drops the database or exits right after ``run`` finds no session of this
        worker left. A handler still running past the handback is waited for only briefly:
        its thread is a daemon."""
        deadline = time.monotonic() + THREAD_JOIN_SECONDS
        for thread in self.threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))

    def _start(self, thread: threading.Thread) -> None:
        thread.daemon = True  # a stuck handler must not keep the process alive
        self.threads.append(thread)
        thread.start()

    def _relay_stop(self) -> None:
        """Wake the loop when a stop is requested (signal handlers only flip the flag)."""
        while not self.background_stop.is_set():
            if self.stop.wait(0.5):
                self.wake.set()
                return

    def _with_database(self, action: Callable[[], T]) -> T | None:
        """Run ``action``; on a database failure back off and return None (burst: raise)."""
        try:
            result = action()
        except RunledgerError as error:
            if is_outage(error):
                self.note_outage()
            if self.config.burst:
                raise
            connections[self.config.using].close_if_unusable_or_obsolete()
            self.stop.wait(self.outage.failed(error))
            return None
        self.outage.succeeded()
        self.health.database_ok()
        return result

    def _refresh_job_types(self) -> bool:
        """Re-read the job types to run (sources may find new ones) and make sure each has a
        definition; the list is replaced whole, so the other threads never see it half-built.
        Returns True: ``_with_database`` reports a failure as None."""
        config = self.config
        if not config.fixed_job_types:
            config.job_types = self.registry.runnable_job_types(config.queues, using=config.using)
        self.metrics.serving(config.job_types, concurrency=config.concurrency)
        known = set(self.defined)
        new = [job_type for job_type in config.job_types if job_type not in known]
        if new:
            handlers = [self.registry.get(job_type) for job_type in new]
            defaults = [handler.defaults() for handler in handlers if handler is not None]
            ensure_job_definitions(defaults, using=config.using)
            self.defined.update(new)
        return True

    def _loop(self) -> str:
        config = self.config
        while self._with_database(self._refresh_job_types) is None:
            self.health.tick()
            if self.stop.is_set():
                return "stopped by signal"
        if config.burst and config.schedules:
            # --burst: sync the declarations and fire what is due, then drain the jobs.
            burst_schedules(
                config.job_types, batch_size=config.schedule_batch_size, using=config.using
            )
        self.presence.beat()
        self.health.mark_started()
        next_beat = time.monotonic() + config.heartbeat_seconds
        refresh = not config.fixed_job_types and bool(self.registry.sources())
        next_refresh = time.monotonic() + max(config.poll_interval, MIN_REFRESH_SECONDS)
        next_reap = time.monotonic()
        next_sample = time.monotonic() if config.sample_queue and not config.burst else INFINITY
        next_poll = 0.0
        hot_until = 0.0
        claim_more = True
        peek_next = False
        """The next poll asks when work comes due instead of claiming (a quiet worker)."""
        batch_until: float | None = None
        while not self.stop.is_set():
            self.metrics.tick(busy=self.busy(), concurrency=config.concurrency)
            self.health.tick()
            now = time.monotonic()
            if now >= next_beat:
                next_beat = now + config.heartbeat_seconds
                self.presence.beat()
            self._enforce_deadlines(now)
            if self.stuck:
                return "a handler is stuck past its deadline and the grace period"
            if now >= next_reap:
                if self._with_database(self._reap) is not None:
                    next_reap = time.monotonic() + config.reaper_interval
                continue
            if now >= next_sample:
                self._sample_queue()
                next_sample = time.monotonic() + QUEUE_SAMPLE_SECONDS
                continue
            if refresh and now >= next_refresh:
                if self._with_database(self._refresh_job_types) is not None:
                    next_refresh = now + max(config.poll_interval, MIN_REFRESH_SECONDS)
                continue
            if self.notified.is_set() or self._timer_due(now):
                self.notified.clear()
                claim_more = True
                hot_until = now + HOT_SECONDS
            if (
                peek_next
                and not claim_more
                and now >= max(next_poll, hot_until)
                and self.busy() < config.concurrency
            ):
                peeked = self._with_database(self._peek_due)
                if peeked is None:
                    continue
                peek_next, next_poll = self._after_peek(peeked[0])
                continue
            free = config.concurrency - self.busy()
            idle = self.busy() == 0
            wanted = claim_more or now >= next_poll or now < hot_until or (config.burst and idle)
            if free > 0 and wanted and claim_more and not idle:
                batch_until = self._batch_until(free, now, batch_until)
            else:
                batch_until = None
            if free > 0 and wanted and batch_until is None:
                claimed = self._with_database(partial(self._claim, free))
                if claimed is None:
                    continue
                self._dispatch(claimed)
                claim_more = self.deep = len(claimed) == free
                next_poll = time.monotonic() + config.poll_interval
                peek_next = not claimed and self._idle_poll_seconds() > config.poll_interval
                if claimed:
                    hot_until = time.monotonic() + HOT_SECONDS
                elif config.burst and idle:
                    return "burst finished: nothing due"
            self.wake.wait(
                self._wait_seconds(
                    next_poll,
                    min(next_reap, next_beat, next_sample),
                    hot_until,
                    claim_more,
                    batch_until,
                )
            )
            self.wake.clear()
        return "stopped" if self.outage_error is not None else "stopped by signal"

    def _sample_queue(self) -> None:
        """The dashboard's sample: a failure costs a gap in a chart, never the worker's work,
        so it is logged and the loop goes on (an outage is noted, as any statement's is)."""
        try:
            sample_queue(using=self.config.using)
        except RunledgerError as error:
            if is_outage(error):
                self.note_outage()
            connections[self.config.using].close_if_unusable_or_obsolete()
            logger.warning("sampling the queue for the dashboard failed error_code=%s", error.code)

    def _idle_poll_seconds(self) -> float:
        """The idle poll: ``idle_poll_interval`` while notifications reach this worker (the
        listener is subscribed and its probe came back), else ``poll_interval``."""
        quiet = self.config.idle_poll_interval
        listener = self.listener
        if quiet is None or listener is None or not listener.connected.is_set():
            return self.config.poll_interval
        return max(quiet, self.config.poll_interval)

    def _peek_due(self) -> tuple[float | None]:
        """When the next job comes due (a tuple: ``_with_database`` reports failure as None)."""
        horizon = min(self._idle_poll_seconds(), PEEK_HORIZON_MAX_SECONDS)
        return (
            seconds_until_due(
                self.config.job_types, horizon_seconds=horizon, using=self.config.using
            ),
        )

    def _after_peek(self, due_in: float | None) -> tuple[bool, float]:
        """What a peek decides: whether the next poll peeks again, and when it is. Due now
        (but not claimed a moment ago: held by its resource key, or another worker's):
        claim again after ``poll_interval``, as without peeks. Due later: claim at that time.
        Nothing within the horizon: peek again after the idle poll."""
        now = time.monotonic()
        if due_in is None:
            return True, now + self._idle_poll_seconds()
        if due_in <= 0:
            return False, now + self.config.poll_interval
        return False, now + min(due_in, self._idle_poll_seconds())

    def _batch_until(self, free: int, now: float, until: float | None) -> float | None:
        """When a claim for ``free`` executors on a deep queue should go out (None: now):
        once half the executors are free, or when the wait for them has lasted long enough."""
        if free * 2 >= self.config.concurrency:
            return None
        if until is None:
            typical = self.run_time.seconds  # one float: read whole, no lock needed
            until = now + min(BATCH_WAIT_MAX_SECONDS, BATCH_WAIT_FRACTION * typical)
        return None if now >= until else until

    def _claim(self, free: int) -> list[ClaimedJob]:
        if self.config.burst and self.config.promote:
            self._promote_burst()
        started = time.perf_counter()
        try:
            claimed = claim_jobs(
                self.config.job_types,
                worker_id=self.config.worker_id,
                limit=free,
                lease_seconds=self.config.lease_seconds,
                using=self.config.using,
            )
        except RunledgerError:
            self.metrics.claim_failed()
            raise
        self.metrics.claimed(len(claimed), time.perf_counter() - started)
        return claimed

    def _wait_seconds(
        self,
        next_poll: float,
        next_reap: float,
        hot_until: float,
        claim_more: bool,
        batch_until: float | None,
    ) -> float:
        now = time.monotonic()
        has_room = self.busy() < self.config.concurrency
        if has_room and claim_more and batch_until is None:
            return 0.0
        candidates = [next_reap]
        if batch_until is not None:
            candidates.append(batch_until)
        if has_room:
            candidates.append(now + HOT_TICK_SECONDS if now < hot_until else next_poll)
        with self.timers_lock:
            if self.timers:
                candidates.append(self.timers[0])
        for execution in self.executions():
            if not execution.done.is_set():
                extra = self.config.grace_seconds if execution.timed_out else 0.0
                candidates.append(execution.deadline + extra)
        return max(0.0, min(candidates) - now)

    def _timer_due(self, now: float) -> bool:
        due = False
        with self.timers_lock:
            while self.timers and self.timers[0] <= now:
                heapq.heappop(self.timers)
                due = True
        return due

    def _reap(self) -> ReapReport:
        report = reap_expired_leases(self.config.job_types, using=self.config.using)
        self.metrics.reaped(report)
        if report.next_run_ats:
            self.wake_at(time.monotonic() + REAPER_RETRY_DELAY_MS / 1000)
        if report.batch_was_full:
            self.wake.set()
        return report

    def _promote_burst(self) -> None:
        while promote_intents(
            self.config.job_types,
            limit=self.config.promotion_batch_size,
            using=self.config.using,
        ).batch_was_full:
            pass
        while promote_workflow_intents(using=self.config.using).batch_was_full:
            pass

    def _dispatch(self, claimed: Sequence[ClaimedJob]) -> None:
        with self.counts.lock:
            self.counts.claimed += len(claimed)
        self.metrics.dispatched(claimed)
        for job in claimed:
            execution = Execution(job, lease_seconds=self.config.lease_seconds)
            with self.inflight_lock:
                # Keyed by the exact lease, not the job: a timed-out attempt whose handler
                # still runs and the job's next attempt on this worker are both in flight.
                self.inflight[job.lease] = execution
            self.tasks.put(execution)

    def _enforce_deadlines(self, now: float) -> None:
        """Fail attempts whose handler is past its deadline; notice one stuck past grace."""
        for execution in self.executions():
            if execution.done.is_set() or execution.lost.is_set():
                continue
            if execution.timed_out:
                if now >= execution.deadline + self.config.grace_seconds and not self.stuck:
                    logger.error(
                        "job handler stuck past its deadline and the grace period; the worker "
                        "hands back its other jobs and exits job_id=%s job_type=%s",
                        execution.lease.job_id,
                        execution.claimed.job_type,
                    )
                    self.stuck = True
                continue
            if now < execution.deadline:
                continue
            try:
                run = record_timeout(execution, using=self.config.using)
            except RunledgerError as error:
                logger.warning(
                    "could not record a job timeout error_code=%s",
                    error.code,
                    extra={"runledger": error.log_fields()},
                )
                connections[self.config.using].close_if_unusable_or_obsolete()
                continue
            if run is None:
                execution.mark_lost("the timeout was refused by the lease fence")
                continue
            self.counts.add(run)
            self._schedule_retry(execution, run)
            self._report(run)

    # --- stopping --------------------------------------------------------------------------

    def _shutdown(self, *, immediately: bool) -> None:
        """Claim nothing more; let handlers finish within the grace period (unless
        ``immediately``); hand back the leases of the rest; stop the threads."""
        config = self.config
        with self.dispatch_lock:
            self.background_stop.set()
        self.promoter_wake.set()
        if self.scheduler is not None:
            self.scheduler.poke()  # it sleeps until its next cursor otherwise
        deadline = time.monotonic() + (0.0 if immediately else config.grace_seconds)
        while self._running() and time.monotonic() < deadline and not self.force.is_set():
            self.health.tick()
            self._enforce_deadlines(time.monotonic())
            self.wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
            self.wake.clear()
        leftovers = self._running()
        if leftovers:
            reason = STUCK_REASON if self.stuck else SHUTDOWN_REASON
            handed = self._hand_back([e.lease for e in leftovers], reason)
            if handed is not None:
                for execution in leftovers:
                    execution.mark_lost("handed back at shutdown")
                self.metrics.released([e.claimed.job_type for e in leftovers])
                logger.warning("handed back %d unfinished jobs at shutdown", handed)
        self._wait_for_completions()
        for _ in range(config.concurrency):
            self.tasks.put(None)

    def _wait_for_completions(self) -> None:
        """An atomic completion in flight (its handler's transaction past the completion
        statement) commits in a moment: the process must not exit under it, or the commit is
        lost and the job waits for the reaper. It is never handed back (its row is locked by
        that transaction, and its lease ends with the commit)."""
        deadline = time.monotonic() + COMPLETION_WAIT_SECONDS
        for execution in self.executions():
            if execution.completing:
                execution.done.wait(max(0.0, deadline - time.monotonic()))

    def _running(self) -> list[Execution]:
        """Attempts whose outcome is still this worker's to record."""
        return [e for e in self.executions() if e.active]
