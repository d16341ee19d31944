"""The scheduler loop: it sleeps until the earliest cursor (not the poll interval), costs one
statement per look while idle, wakes early when poked, and runs in ``runledger_worker``
(``--burst`` syncs, fires, drains; ``--no-schedules`` turns it off)."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from runledger_django.domain import SchedulePassReport
from runledger_django.models import Job, JobDefinition, JobSchedule
from runledger_django.services.outage import Outage
from runledger_django.services.schedules import save_schedule
from runledger_django.worker.scheduler import Scheduler
from tests.worker.conftest import wait_until
from tests.worker.processes import WorkerProcess
from tests.worker_app import NOOP

from ..conftest import run_sql
from .conftest import SCHEDULED_TYPE

pytestmark = pytest.mark.django_db(transaction=True)


class CountingScheduler(Scheduler):
    """Counts the statements its own connection runs, and signals after each look."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.statements = 0
        self.looked = threading.Condition()

    def run(self) -> None:
        def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            self.statements += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(count):
            super().run()

    def _step(self) -> float | None:
        delay = super()._step()
        with self.looked:
            self.looked.notify_all()
        return delay

    def wait_for_looks(self, count: int, timeout: float = 30.0) -> None:
        with self.looked:
            assert self.looked.wait_for(lambda: self.looks >= count, timeout=timeout)


@pytest.fixture
def start_scheduler() -> Iterator[Any]:
    started: list[tuple[Scheduler, threading.Event]] = []

    def start(**kwargs: Any) -> CountingScheduler:
        stop = threading.Event()
        kwargs.setdefault("poll_seconds", 30.0)
        scheduler = CountingScheduler(
            job_types=lambda: None,
            stop=stop,
            batch_size=100,
            outage=Outage(limit_seconds=60, logger=logging.getLogger(__name__), what="test"),
            sync=False,
            **kwargs,
        )
        scheduler.start()
        started.append((scheduler, stop))
        return scheduler

    yield start
    for scheduler, stop in started:
        stop.set()
        scheduler.poke()
        scheduler.join(timeout=30)


def test_scheduler__sleeps_until_the_cursor__not_the_poll(
    scheduled_definition: JobDefinition, start_scheduler: Any
) -> None:
    fired = threading.Event()
    passes: list[SchedulePassReport] = []

    def on_pass(report: SchedulePassReport) -> None:
        passes.append(report)
        if sum(p.fired for p in passes) >= 2:
            fired.set()

    save_schedule("every-second", SCHEDULED_TYPE, every=1)
    start_scheduler(poll_seconds=30.0, on_pass=on_pass)
    assert fired.wait(timeout=15), "two fires did not come within 15 s, with a 30 s poll"
    jobs = Job.objects.order_by("created_at")
    assert jobs.count() >= 2


def test_scheduler__idle__one_statement_per_look(start_scheduler: Any) -> None:
    scheduler = start_scheduler(poll_seconds=0.2)
    scheduler.wait_for_looks(5)
    assert scheduler.passes == 0
    assert scheduler.statements <= scheduler.looks + 1  # the next look may be on its way


def test_scheduler__poked__looks_again_at_once(
    scheduled_definition: JobDefinition, start_scheduler: Any
) -> None:
    fired = threading.Event()
    scheduler = start_scheduler(poll_seconds=30.0, on_pass=lambda report: fired.set())
    scheduler.wait_for_looks(1)
    save_schedule("new", SCHEDULED_TYPE, cron="0 3 * * *", run_on_create=True)
    scheduler.poke()
    assert fired.wait(timeout=15)
    assert Job.objects.count() == 1


def worker(*args: str, declare: bool = False, **settings: Any) -> WorkerProcess:
    """A worker subprocess; ``declare``: its jobs.py declares a schedule (run on create)."""
    return WorkerProcess(
        list(args), {**settings, **({"DECLARE_SCHEDULE": True} if declare else {})}
    )


def wait_for_listen(application_name: str, channel: str = "runledger_schedules") -> None:
    """Until a session of the process is subscribed (its last query is the LISTEN)."""
    wait_until(
        lambda: run_sql(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND query = %s",
            [application_name, f"LISTEN {channel}"],
        ),
        timeout=30,
        what=f"a LISTEN {channel} session",
    )


def test_runledger_worker__schedule_saved__woken_before_its_poll() -> None:
    """A 30 s poll, and a schedule saved to fire at once: the NOTIFY after the save wakes the
    worker's scheduler, so its job runs long before the poll would have looked."""
    JobDefinition.objects.create(job_type=NOOP, max_attempts=3)
    process = worker("--job-type", NOOP, SCHEDULE_POLL_SECONDS=30)
    try:
        wait_for_listen(process.application_name)
        save_schedule("woken", NOOP, cron="0 3 * * *", run_on_create=True)
        wait_until(
            lambda: Job.objects.filter(status="SUCCEEDED").exists(),
            timeout=20,
            what="the saved schedule's job to run",
        )
    finally:
        process.stop()


def test_runledger_worker__burst__syncs_fires_and_drains() -> None:
    process = worker("--burst", "--job-type", NOOP, declare=True)
    try:
        assert process.wait(timeout=60) == 0, process.stderr_lines
    finally:
        process.stop()
    schedule = JobSchedule.objects.get(name="worker-tests-declared")
    assert schedule.declared and schedule.fire_count == 1
    job = Job.objects.get()
    assert (job.job_type_id, job.status) == (NOOP, "SUCCEEDED")
    assert job.payload["_schedule"]["schedule_name"] == "worker-tests-declared"


def test_runledger_worker__no_schedules__neither_syncs_nor_fires() -> None:
    process = worker("--burst", "--no-schedules", "--job-type", NOOP, declare=True)
    try:
        assert process.wait(timeout=60) == 0, process.stderr_lines
    finally:
        process.stop()
    assert not JobSchedule.objects.exists()
    assert not Job.objects.exists()


def test_runledger_worker__long_running__fires_its_schedules_and_runs_them() -> None:
    JobDefinition.objects.create(job_type=NOOP, max_attempts=3)
    save_schedule(
        "worker-every-second",
        NOOP,
        cron="* * * * * *",
        next_fire_at=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1),
    )
    process = worker("--job-type", NOOP)
    try:
        wait_until(
            lambda: Job.objects.filter(status="SUCCEEDED").count() >= 3,
            timeout=60,
            what="three scheduled jobs to run",
        )
    finally:
        process.stop()


def test_scheduler__stop_while_a_sync_holds_the_table__ends_within_seconds(
    scheduled_definition: JobDefinition, observer: Any, start_scheduler: Any
) -> None:
    """A pass blocked behind a sync's lock gives up after its 1 s lock wait, so a stopping
    scheduler ends within a few seconds while the conflicting lock is still held."""
    import psycopg

    from ..conftest import connection_kwargs, wait_for_lock_wait

    save_schedule(
        "due", SCHEDULED_TYPE, cron="* * * * *", next_fire_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    )
    holder = psycopg.connect(**connection_kwargs())
    try:
        holder.execute("LOCK TABLE runledger_job_schedules IN SHARE ROW EXCLUSIVE MODE")
        stop = threading.Event()
        scheduler = CountingScheduler(
            job_types=lambda: None,
            stop=stop,
            poll_seconds=30.0,
            batch_size=100,
            outage=Outage(limit_seconds=60, logger=logging.getLogger(__name__), what="test"),
            sync=False,
        )
        scheduler.start()
        wait_for_lock_wait(observer, "ROW EXCLUSIVE")
        stop.set()
        scheduler.poke()
        scheduler.join(timeout=5)
        assert not scheduler.is_alive()
    finally:
        holder.rollback()
        holder.close()
