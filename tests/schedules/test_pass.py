"""The scheduler pass on real PostgreSQL: one job per fire, the ledger, the cursor, catch-up."""

from __future__ import annotations

import pytest

from runledger_django.models import Job, JobSchedule, ScheduleFire
from runledger_django.services.schedules import run_schedule_pass

from .conftest import MakeSchedule, at

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_schedule_pass__due_cron__one_job_ledger_row_and_cursor(
    make_schedule: MakeSchedule,
) -> None:
    schedule = make_schedule(cursor=at("2026-05-26T12:00"), payload={"kind": "daily"})
    report = run_schedule_pass(now=at("2026-05-26T12:00:30"))
    assert (report.claimed, report.fired, report.skipped, report.failed) == (1, 1, 0, 0)
    job = Job.objects.get()
    assert job.stage == "scheduled"
    assert job.payload == {
        "kind": "daily",
        "_schedule": {
            "schedule_id": str(schedule.id),
            "schedule_name": "every-minute",
            "scheduled_for": "2026-05-26T12:00:00Z",
        },
    }
    fire = ScheduleFire.objects.get()
    assert (fire.job_id, fire.outcome, fire.scheduled_for) == (
        job.id,
        "enqueued",
        at("2026-05-26T12:00"),
    )
    moved = JobSchedule.objects.get()
    assert moved.next_fire_at == at("2026-05-26T12:01")
    assert (moved.fire_count, moved.last_job_id) == (1, job.id)
    again = run_schedule_pass(now=at("2026-05-26T12:00:30"))
    assert again.claimed == 0
    assert Job.objects.count() == 1
