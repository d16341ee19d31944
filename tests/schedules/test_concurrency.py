"""Several schedulers at once, each on its own connection: every fire is exactly one job, none
is lost, and no scheduler waits on another's rows (SKIP LOCKED)."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter

import pytest
from django.db import connections

from runledger_django.models import Job, JobDefinition, JobSchedule, ScheduleFire
from runledger_django.services.schedules import run_schedule_pass, save_schedule

from .conftest import SCHEDULED_TYPE, at

pytestmark = pytest.mark.django_db(transaction=True)

SCHEDULERS = 4
SCHEDULES = 40
SECONDS = 60


def test_run_schedule_pass__four_concurrent_schedulers__exactly_one_job_per_fire(
    scheduled_definition: JobDefinition,
) -> None:
    """40 per-second schedules over a simulated minute: 2,400 fires, four schedulers racing
    through the same clock with small batches."""
    base = at("2026-05-26T12:00:00")
    for number in range(SCHEDULES):
        save_schedule(
            f"s{number:02d}",
            SCHEDULED_TYPE,
            cron="* * * * * *",
            catch_up="all",
            catch_up_limit=SECONDS,  # no truncation, however far a scheduler runs ahead
            next_fire_at=base,
        )
    barrier = threading.Barrier(SCHEDULERS)
    errors: list[BaseException] = []
    claimed = Counter[int]()

    def scheduler(index: int) -> None:
        try:
            barrier.wait()
            for second in range(SECONDS):
                now = base + dt.timedelta(seconds=second)
                while True:
                    report = run_schedule_pass(limit=7, now=now)
                    claimed[index] += report.claimed
                    if not report.batch_was_full:
                        break
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=scheduler, args=(n,)) for n in range(SCHEDULERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # The last fires may still be due for a scheduler that ran ahead: drain at the end.
    end = base + dt.timedelta(seconds=SECONDS - 1)
    while run_schedule_pass(now=end).batch_was_full:
        pass
    fires = Counter(
        (job.payload["_schedule"]["schedule_name"], job.payload["_schedule"]["scheduled_for"])
        for job in Job.objects.only("payload")
    )
    assert max(fires.values()) == 1
    expected = {
        (f"s{n:02d}", (base + dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ"))
        for n in range(SCHEDULES)
        for s in range(SECONDS)
    }
    assert set(fires) == expected
    assert ScheduleFire.objects.filter(outcome="enqueued").count() == len(expected)
    assert sum(JobSchedule.objects.values_list("fire_count", flat=True)) == len(expected)
    assert sum(1 for count in claimed.values() if count) > 1  # they really shared the work
