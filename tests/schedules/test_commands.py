"""The schedule commands: ``schedules`` (table, --next, --json), ``run_schedules`` (--once,
--json), ``backfill_schedule`` and ``prune_schedule_fires``; and ``prune_jobs`` never removes
a fire (a pruned fire cannot run again)."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.core.management import CommandError, call_command

from runledger_django.models import Job, JobSchedule, ScheduleFire
from runledger_django.services.schedules import retime_schedule, run_schedule_pass

from ..conftest import run_sql
from .conftest import MakeSchedule, at

pytestmark = pytest.mark.django_db(transaction=True)


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_schedules__json__names_types_and_next_fires(make_schedule: MakeSchedule) -> None:
    make_schedule("nightly", cron="30 2 * * *", timezone="Europe/Berlin", jitter=60)
    make_schedule("beat", every=90)
    data = json.loads(run("schedules", "--json", "--next", "3"))
    assert [item["name"] for item in data] == ["beat", "nightly"]
    nightly = data[1]
    assert nightly["job_type"] == "tests.scheduled"
    assert len(nightly["next_fires"]) == 3 and all(f.endswith("Z") for f in nightly["next_fires"])
    assert nightly["description"] == "At 02:30 every day"
    assert data[0]["description"] == "every 1 minute 30 seconds"


def test_schedules__table__local_and_utc(make_schedule: MakeSchedule) -> None:
    make_schedule("nightly", cron="30 2 * * *", timezone="Europe/Berlin")
    text = run("schedules", "--next", "2")
    assert "nightly  [active]  tests.scheduled" in text
    assert text.count(" UTC  (") == 2 and ("CET)" in text or "CEST)" in text)


def test_schedules__organization_scope(make_schedule: MakeSchedule) -> None:
    org = uuid.uuid4()
    make_schedule("tenant", organization_id=org)
    make_schedule("global")
    names = [
        item["name"] for item in json.loads(run("schedules", "--json", "--organization", str(org)))
    ]
    assert names == ["tenant"]
    assert run("schedules", "--global", "--job-type", "nobody.here") == "No schedules.\n"


def test_run_schedules__once_json__one_object_of_the_pass(make_schedule: MakeSchedule) -> None:
    make_schedule(cursor=at("2000-01-01T00:00"))
    data = json.loads(run("run_schedules", "--once", "--json", "--no-sync"))
    assert (data["fired"], data["skipped"], data["failed"]) == (1, 0, 0)
    assert Job.objects.count() == 1


def test_backfill_schedule__range__fires_once_and_repeat_is_a_noop(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("hourly", cron="0 * * * *")
    out = run(
        "backfill_schedule",
        "hourly",
        "--from",
        "2026-05-01T00:00Z",
        "--to",
        "2026-05-01T05:00Z",
        "--json",
    )
    assert json.loads(out) == {"fired": 5, "existing": 0, "truncated": False}
    again = json.loads(
        run(
            "backfill_schedule",
            "hourly",
            "--from",
            "2026-05-01",
            "--to",
            "2026-05-01T06:00Z",
            "--json",
        )
    )
    assert again == {"fired": 1, "existing": 5, "truncated": False}
    assert ScheduleFire.objects.filter(kind="backfill").count() == 6
    assert Job.objects.count() == 6
    hours = sorted(job.payload["_schedule"]["scheduled_for"] for job in Job.objects.all())
    assert hours[0] == "2026-05-01T00:00:00Z" and hours[-1] == "2026-05-01T05:00:00Z"


def test_backfill_schedule__bad_range__command_error(make_schedule: MakeSchedule) -> None:
    make_schedule("hourly", cron="0 * * * *")
    with pytest.raises(CommandError, match=r"job_schedule\.invalid_argument"):
        run(
            "backfill_schedule",
            "hourly",
            "--from",
            "2026-05-02T00:00Z",
            "--to",
            "2026-05-01T00:00Z",
        )
    with pytest.raises(CommandError, match=r"job_schedule\.not_found"):
        run("backfill_schedule", "nope", "--from", "2026-05-01T00:00Z", "--to", "2026-05-02T00:00Z")
    with pytest.raises(CommandError):
        run(
            "backfill_schedule", "hourly", "--from", "2026-05-01T00:00", "--to", "2026-05-02T00:00Z"
        )


def test_prune_jobs__fires_stay_without_their_jobs_and_never_run_again(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"))
    run_schedule_pass(now=at("2026-05-26T12:00"))
    run_sql(
        "UPDATE runledger_job_queue SET status = 'SUCCEEDED', stage = 'completed', "
        "finished_at = now() - interval '40 days', created_at = now() - interval '41 days'"
    )
    run("prune_jobs", "--older-than", "30d")
    assert not Job.objects.exists()
    fire = ScheduleFire.objects.get()
    assert (fire.job_id, fire.outcome) == (None, "enqueued")
    assert JobSchedule.objects.get().last_job_id is not None  # a dangling id, harmless
    retime_schedule("every-minute", at("2026-05-26T12:00"))
    assert run_schedule_pass(now=at("2026-05-26T12:00:30")).fired == 0


def test_prune_schedule_fires__old_rows_but_never_the_newest(make_schedule: MakeSchedule) -> None:
    make_schedule("a", cursor=at("2026-05-26T12:00"), catch_up="all")
    make_schedule("b", cursor=at("2026-05-26T12:00"))
    run_schedule_pass(now=at("2026-05-26T12:03"))
    run_sql("UPDATE runledger_schedule_fires SET created_at = now() - interval '100 days'")
    assert "Would delete 3 " in run("prune_schedule_fires", "--older-than", "90d", "--dry-run")
    assert "Deleted 3 " in run("prune_schedule_fires", "--older-than", "90d")
    remaining = dict(ScheduleFire.objects.values_list("schedule__name", "scheduled_for"))
    assert remaining == {"a": at("2026-05-26T12:03"), "b": at("2026-05-26T12:00")}
