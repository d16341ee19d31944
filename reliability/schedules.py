"""The harness's schedules: runtime schedules fired by scheduler processes and by every worker,
all of them killed and restarted with the rest, and the check that each fire made one job.

Imported only after ``django.setup()``. The schedules fire jobs of the STABLE type, so the job
checks hold for them as for any job (each SUCCEEDED once, attempts and runs agree); the intent
checks leave them out (they have no intent). Before the drain every schedule is paused, so the
workers can run out of jobs.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections import Counter
from typing import Any

from django.db import connection, connections

from runledger_django.models import JobSchedule
from runledger_django.services.outage import Outage
from runledger_django.services.schedules import pause_schedule, save_schedule
from runledger_django.services.schedules.timing import Timing, format_scheduled_for
from runledger_django.worker.scheduler import Scheduler

from .common import STABLE
from .workers import Worker

SCHEDULED_TYPE = STABLE
GAPLESS = "rel-every-second"
"""Catch-up ``all`` with room for any outage of the run: every second has exactly one fire."""
SCHEDULES: dict[str, dict[str, Any]] = {
    GAPLESS: {"cron": "* * * * * *", "catch_up": "all", "catch_up_limit": 10_000},
    "rel-every-2s": {"every": 2, "catch_up": "all", "catch_up_limit": 10_000},
    "rel-jittered": {"cron": "* * * * * *", "jitter": 2},
    "rel-overlap-skip": {"cron": "* * * * * *", "overlap": "skip"},
    "rel-serialized": {"every": 3, "overlap": "serialize"},
}
POLL_SECONDS = 1.0


def prepare() -> None:
    """Create the run's schedules (after the definitions exist)."""
    for name, options in SCHEDULES.items():
        save_schedule(name, SCHEDULED_TYPE, **options)
    connections.close_all()


def pause_all() -> None:
    """Stop every schedule before the drain (a pause is what an operator would do). A pass in
    flight holds a row for a moment, longer on a loaded machine than the pause's 5 s lock
    wait: a lock timeout is retried, as an operator would."""
    from runledger_django import RunledgerError

    deadline = time.monotonic() + 120
    for name in SCHEDULES:
        while True:
            try:
                pause_schedule(name)
                break
            except RunledgerError as error:
                if error.sqlstate != "55P03" or time.monotonic() > deadline:
                    raise
                connections.close_all()
    connections.close_all()


class SchedulerRole(Worker):
    """A scheduler on its own (as ``run_schedules --loop`` runs it) until the stop file."""

    def run(self) -> None:
        stop = threading.Event()
        passes = Counter[str]()

        def on_pass(report: Any) -> None:
            passes["fired"] += report.fired
            passes["passes"] += 1

        scheduler = Scheduler(
            job_types=lambda: None,
            stop=stop,
            poll_seconds=POLL_SECONDS,
            batch_size=int(self.rng.choice([1, 2, 7, 500])),
            outage=Outage(limit_seconds=3600, logger=_logger(), what=self.name),
            sync=False,
            on_pass=on_pass,
        )
        scheduler.start()
        while not self.stopping() and scheduler.is_alive():
            time.sleep(0.1)
        stop.set()
        scheduler.poke()
        scheduler.join(60)
        self.journal.write("scheduler", fired=passes["fired"], passes=passes["passes"])


def _logger() -> Any:
    import logging

    return logging.getLogger("runledger_django.reliability")


def check(counts: dict[str, int]) -> list[str]:
    """One job per fire; every enqueued fire's job exists and names its fire; the gapless
    schedule fired every second between its first and last fire. Adds the counts."""
    violations: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id::text, payload -> '_schedule' ->> 'schedule_id', "
            "payload -> '_schedule' ->> 'scheduled_for', status FROM runledger_job_queue "
            "WHERE payload ? '_schedule'"
        )
        jobs = cursor.fetchall()
        cursor.execute(
            "SELECT f.schedule_id::text, f.scheduled_for, f.outcome, f.job_id::text, f.kind "
            "FROM runledger_schedule_fires f"
        )
        fires = cursor.fetchall()
    per_fire = Counter((schedule_id, scheduled) for _, schedule_id, scheduled, _ in jobs)
    for fire, count in per_fire.items():
        if count > 1:
            violations.append(f"{count} jobs for one schedule fire {fire}")
    job_fire = {job_id: (schedule_id, scheduled) for job_id, schedule_id, scheduled, _ in jobs}
    enqueued = [row for row in fires if row[2] == "enqueued"]
    for schedule_id, scheduled_for, _, job_id, _ in enqueued:
        if job_id is None:
            violations.append(f"fire {schedule_id} {scheduled_for} lost its job")
        elif job_fire.get(job_id) != (schedule_id, format_scheduled_for(scheduled_for)):
            violations.append(f"fire {schedule_id} {scheduled_for} points at another job")
    if len(enqueued) != len(jobs):
        violations.append(f"{len(enqueued)} enqueued fires but {len(jobs)} scheduled jobs")
    violations += _gapless(fires)
    counts["schedule fires (jobs)"] = len(enqueued)
    counts["schedule fires skipped"] = sum(row[2].startswith("skipped") for row in fires)
    counts["schedule fires failed (retried)"] = sum(row[2] == "failed" for row in fires)
    return violations


def _gapless(fires: list[tuple[Any, ...]]) -> list[str]:
    schedule = JobSchedule.objects.get(name=GAPLESS)
    times = sorted(row[1] for row in fires if row[0] == str(schedule.id) and row[4] != "manual")
    if len(times) < 2:
        return [f"{GAPLESS} fired {len(times)} times"]
    timing = Timing(
        cron=schedule.cron_expr,
        interval_seconds=None,
        timezone="UTC",
        jitter_seconds=0,
        schedule_id=uuid.UUID(str(schedule.id)),
    )
    expected = []
    current = times[0]
    while current <= times[-1]:
        expected.append(current)
        current = timing.next_after_cursor(current)
    if times != expected:
        missing = sorted(set(expected) - set(times))[:5]
        return [f"{GAPLESS} skipped fires, e.g. {[t.isoformat() for t in missing]}"]
    if times[-1] - times[0] < dt.timedelta(seconds=2):
        return [f"{GAPLESS} fired over less than two seconds"]
    return []
