"""Schedulers behind PgBouncer in transaction pooling: two workers fire a per-second schedule
through it, polling (LISTEN cannot work there), and every fire is exactly one job."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from runledger_django.models import Job, JobDefinition, ScheduleFire
from runledger_django.services.schedules import save_schedule
from tests.pgbouncer.bouncer import PgBouncer
from tests.pgbouncer.conftest import SpawnWorker
from tests.worker.conftest import wait_until
from tests.worker_app import NOOP

pytestmark = pytest.mark.django_db(transaction=True)


def test_schedulers__through_pgbouncer__one_job_per_fire(
    pgbouncer: PgBouncer, spawn_worker: SpawnWorker
) -> None:
    JobDefinition.objects.create(job_type=NOOP, max_attempts=3)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    save_schedule(
        "through-the-pool",
        NOOP,
        cron="* * * * * *",
        catch_up="all",
        next_fire_at=now - dt.timedelta(seconds=3),
    )
    workers = [
        spawn_worker("--job-type", NOOP, WORKER_POLL_INTERVAL=0.2, SCHEDULE_POLL_SECONDS=1)
        for _ in range(2)
    ]
    wait_until(
        lambda: Job.objects.filter(status="SUCCEEDED").count() >= 8,
        timeout=60,
        what="eight scheduled jobs to succeed",
    )
    for worker in workers:
        worker.stop()
    fires = Counter(
        job.payload["_schedule"]["scheduled_for"] for job in Job.objects.only("payload")
    )
    assert max(fires.values()) == 1
    assert ScheduleFire.objects.filter(outcome="enqueued").count() == len(fires)
    seconds = sorted(fires)
    assert seconds[0] == (now - dt.timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
