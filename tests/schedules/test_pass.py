"""The scheduler pass on real PostgreSQL: one job per fire, the ledger, the cursor, catch-up,
overlap, failures isolated per row, and what a pass does with the due set."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import connection, transaction

from runledger_django.errors import RunledgerError
from runledger_django.models import Job, JobDefinition, JobSchedule, ScheduleFire
from runledger_django.services.schedules import (
    pause_schedule,
    retime_schedule,
    run_schedule_pass,
)
from runledger_django.services.schedules.passes import (
    DueSchedule,
    materialize,
    resource_key,
)
from runledger_django.worker.context import scheduled_for_of

from ..conftest import run_sql
from .conftest import SCHEDULED_TYPE, MakeSchedule, at

pytestmark = pytest.mark.django_db(transaction=True)


def jobs_by_fire() -> list[tuple[str, str | None]]:
    return sorted(
        (job.payload["_schedule"]["scheduled_for"], job.execution_resource_key)
        for job in Job.objects.all()
    )


def test_run_schedule_pass__due_cron__one_job_ledger_row_and_cursor(
    make_schedule: MakeSchedule,
) -> None:
    schedule = make_schedule(cursor=at("2026-05-26T12:00"), payload={"kind": "daily"})
    report = run_schedule_pass(now=at("2026-05-26T12:00:30"))
    assert (report.claimed, report.fired, report.skipped, report.failed) == (1, 1, 0, 0)
    job = Job.objects.get()
    definition = JobDefinition.objects.get(job_type=SCHEDULED_TYPE)
    assert (job.job_type_id, job.organization_id, job.stage, job.status) == (
        SCHEDULED_TYPE,
        None,
        "scheduled",
        "PENDING",
    )
    assert (job.priority, job.max_attempts, job.timeout_seconds) == (
        definition.default_priority,
        definition.max_attempts,
        definition.default_timeout_seconds,
    )
    assert job.idempotency_key is None
    assert job.payload == {
        "kind": "daily",
        "_schedule": {
            "schedule_id": str(schedule.id),
            "schedule_name": "every-minute",
            "scheduled_for": "2026-05-26T12:00:00Z",
        },
    }
    assert scheduled_for_of(job.payload) == at("2026-05-26T12:00")
    fire = ScheduleFire.objects.get()
    assert (fire.job_id, fire.outcome, fire.kind, fire.scheduled_for) == (
        job.id,
        "enqueued",
        "scheduled",
        at("2026-05-26T12:00"),
    )
    moved = JobSchedule.objects.get()
    assert moved.next_fire_at == moved.next_scheduled_for == at("2026-05-26T12:01")
    assert (moved.fire_count, moved.last_job_id, moved.last_scheduled_for) == (
        1,
        job.id,
        at("2026-05-26T12:00"),
    )
    assert moved.last_fired_at is not None
    assert run_schedule_pass(now=at("2026-05-26T12:00:30")).claimed == 0
    assert Job.objects.count() == 1


def test_run_schedule_pass__job_is_runnable_now(make_schedule: MakeSchedule) -> None:
    make_schedule(cursor=at("2020-01-01T00:00"))
    run_schedule_pass()
    (due,) = run_sql("SELECT next_run_at <= now() FROM runledger_job_queue")
    assert due == (True,)


def test_run_schedule_pass__organization__copied_into_the_job(make_schedule: MakeSchedule) -> None:
    org = uuid.uuid4()
    make_schedule(cursor=at("2020-01-01T00:00"), organization_id=org)
    run_schedule_pass()
    assert Job.objects.get().organization_id == org


def test_run_schedule_pass__template_not_an_object__wrapped_under_payload(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"), payload=[1, 2])
    run_schedule_pass(now=at("2026-05-26T12:00"))
    payload = Job.objects.get().payload
    assert payload["payload"] == [1, 2]
    assert payload["_schedule"]["scheduled_for"] == "2026-05-26T12:00:00Z"


def test_run_schedule_pass__not_due__nothing(make_schedule: MakeSchedule) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"))
    assert run_schedule_pass(now=at("2026-05-26T11:59:59")).claimed == 0
    assert not ScheduleFire.objects.exists()


def test_run_schedule_pass__database_clock_decides__without_now(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule(cursor=at("2999-01-01T00:00"))
    past = make_schedule("past", cursor=at("2000-01-01T00:00"))
    report = run_schedule_pass()
    assert (report.claimed, report.fired) == (1, 1)
    assert Job.objects.get().payload["_schedule"]["schedule_id"] == str(past.id)


def test_run_schedule_pass__inactive_or_paused__never_claimed(make_schedule: MakeSchedule) -> None:
    make_schedule("off", cursor=at("2000-01-01T00:00"), enabled=False)
    make_schedule("paused", cursor=at("2000-01-01T00:00"))
    pause_schedule("paused")
    assert run_schedule_pass().claimed == 0


def test_run_schedule_pass__latest_after_downtime__one_job_oldest_fire_then_future(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"))
    report = run_schedule_pass(now=at("2026-05-26T12:05:30"))
    assert (report.fired, report.coalesced) == (1, 5)
    assert jobs_by_fire() == [("2026-05-26T12:00:00Z", None)]
    schedule = JobSchedule.objects.get()
    assert (schedule.next_fire_at, schedule.coalesced_count) == (at("2026-05-26T12:06"), 5)
    assert run_schedule_pass(now=at("2026-05-26T12:05:30")).claimed == 0


def test_run_schedule_pass__all__every_missed_fire_then_bounded(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("all", cursor=at("2026-05-26T12:00"), catch_up="all", catch_up_limit=3)
    report = run_schedule_pass(now=at("2026-05-26T12:05:30"))
    assert (report.fired, report.coalesced) == (3, 3)
    assert [fire for fire, _ in jobs_by_fire()] == [
        "2026-05-26T12:00:00Z",
        "2026-05-26T12:01:00Z",
        "2026-05-26T12:02:00Z",
    ]
    assert JobSchedule.objects.get().next_fire_at == at("2026-05-26T12:06")


def test_run_schedule_pass__skip__late_fires_recorded_recent_ones_run(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("skip", cursor=at("2026-05-26T12:00"), catch_up="skip", catch_up_grace=90)
    report = run_schedule_pass(now=at("2026-05-26T12:05:30"))
    assert (report.fired, report.skipped) == (2, 4)
    assert [fire for fire, _ in jobs_by_fire()] == ["2026-05-26T12:04:00Z", "2026-05-26T12:05:00Z"]
    skipped = ScheduleFire.objects.filter(outcome="skipped_late").order_by("scheduled_for")
    assert [fire.scheduled_for.minute for fire in skipped] == [0, 1, 2, 3]
    assert all(fire.job_id is None for fire in skipped)
    assert JobSchedule.objects.get().skip_count == 4


def test_run_schedule_pass__overlap_skip__previous_job_pending__recorded_not_run(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("slow", cursor=at("2026-05-26T12:00"), overlap="skip")
    run_schedule_pass(now=at("2026-05-26T12:00"))
    report = run_schedule_pass(now=at("2026-05-26T12:01"))
    assert (report.fired, report.skipped) == (0, 1)
    fire = ScheduleFire.objects.get(scheduled_for=at("2026-05-26T12:01"))
    assert (fire.outcome, fire.job_id) == ("skipped_overlap", None)
    assert JobSchedule.objects.get().next_fire_at == at("2026-05-26T12:02")
    Job.objects.update(status="SUCCEEDED", stage="completed", finished_at=at("2026-05-26T12:01"))
    assert run_schedule_pass(now=at("2026-05-26T12:02")).fired == 1


def test_run_schedule_pass__overlap_skip_catching_up__one_job_rest_skipped(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("slow", cursor=at("2026-05-26T12:00"), overlap="skip", catch_up="all")
    report = run_schedule_pass(now=at("2026-05-26T12:02:10"))
    assert (report.fired, report.skipped) == (1, 2)


def test_run_schedule_pass__overlap_allow__jobs_side_by_side(make_schedule: MakeSchedule) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"))
    run_schedule_pass(now=at("2026-05-26T12:00"))
    run_schedule_pass(now=at("2026-05-26T12:01"))
    assert Job.objects.filter(status="PENDING").count() == 2


def test_run_schedule_pass__overlap_serialize__shared_resource_key(
    make_schedule: MakeSchedule,
) -> None:
    schedule = make_schedule("one-at-a-time", cursor=at("2026-05-26T12:00"), overlap="serialize")
    run_schedule_pass(now=at("2026-05-26T12:00"))
    run_schedule_pass(now=at("2026-05-26T12:01"))
    key = resource_key(schedule.id)
    assert jobs_by_fire() == [("2026-05-26T12:00:00Z", key), ("2026-05-26T12:01:00Z", key)]


def test_run_schedule_pass__cursor_moved_back__ledger_hit_no_second_job(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"))
    run_schedule_pass(now=at("2026-05-26T12:00"))
    retime_schedule("every-minute", at("2026-05-26T12:00"))
    report = run_schedule_pass(now=at("2026-05-26T12:00:10"))
    assert (report.claimed, report.fired) == (1, 0)
    assert Job.objects.count() == 1
    assert JobSchedule.objects.get().next_fire_at == at("2026-05-26T12:01")


def test_run_schedule_pass__pruned_job__fire_stays_and_never_runs_again(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"))
    run_schedule_pass(now=at("2026-05-26T12:00"))
    run_sql("DELETE FROM runledger_job_events")
    Job.objects.all().delete()
    fire = ScheduleFire.objects.get()
    assert (fire.job_id, fire.outcome) == (None, "enqueued")
    retime_schedule("every-minute", at("2026-05-26T12:00"))
    assert run_schedule_pass(now=at("2026-05-26T12:00:10")).fired == 0
    assert not Job.objects.exists()


def test_run_schedule_pass__disabled_definition__no_job_deferred_others_fire(
    make_schedule: MakeSchedule, make_definition: object
) -> None:
    make_schedule("broken", cursor=at("2026-05-26T12:00"))
    JobDefinition.objects.create(job_type="tests.other")
    make_schedule("fine", cursor=at("2026-05-26T12:00:01"), target="tests.other")
    # A disable the guard would refuse, done behind its back (replication role skips triggers).
    run_sql("SET session_replication_role = replica")
    try:
        run_sql(
            "UPDATE runledger_job_definitions SET is_enabled = false WHERE job_type = %s",
            [SCHEDULED_TYPE],
        )
    finally:
        run_sql("SET session_replication_role = DEFAULT")
    report = run_schedule_pass(now=at("2026-05-26T12:00:30"))
    assert (report.claimed, report.fired, report.failed) == (2, 1, 1)
    broken = JobSchedule.objects.get(name="broken")
    assert broken.next_fire_at == at("2026-05-26T12:01:00")
    assert broken.next_scheduled_for == at("2026-05-26T12:00")
    assert (broken.consecutive_failures, broken.last_error_code) == (
        1,
        "job_schedule.definition_not_found_or_disabled",
    )
    fire = ScheduleFire.objects.get(schedule=broken)
    assert (fire.outcome, fire.attempts, fire.error_code) == (
        "failed",
        1,
        "job_schedule.definition_not_found_or_disabled",
    )


def test_run_schedule_pass__deferred_failure__keeps_scheduled_for_and_recovers(
    make_schedule: MakeSchedule, caplog: pytest.LogCaptureFixture
) -> None:
    row = make_schedule(cursor=at("2026-05-26T12:00"))
    run_sql("UPDATE runledger_job_schedules SET cron_expr = 'not a cron'")
    first = run_schedule_pass(now=at("2026-05-26T12:00:05"))
    assert (first.fired, first.failed) == (0, 1)
    logged = [r.getMessage() for r in caplog.records if "deferred" in r.getMessage()]
    assert logged and str(row.id) in logged[0] and "every-minute" in logged[0]
    assert "job_schedule.invalid_cron" in logged[0]
    run_sql("UPDATE runledger_job_schedules SET cron_expr = '* * * * *'")
    second = run_schedule_pass(now=at("2026-05-26T12:00:40"))
    assert second.fired == 1
    assert jobs_by_fire() == [("2026-05-26T12:00:00Z", None)]
    fire = ScheduleFire.objects.get()
    assert (fire.outcome, fire.attempts) == ("enqueued", 2)
    schedule = JobSchedule.objects.get()
    assert (schedule.consecutive_failures, schedule.next_fire_at) == (0, at("2026-05-26T12:01"))


def test_run_schedule_pass__failing_rows_first__valid_row_fires_next_pass(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("bad-1", cursor=at("2026-05-26T12:00:00"))
    make_schedule("bad-2", cursor=at("2026-05-26T12:00:01"))
    make_schedule("good", cursor=at("2026-05-26T12:00:02"))
    run_sql("UPDATE runledger_job_schedules SET cron_expr = 'nope' WHERE name LIKE 'bad-%%'")
    first = run_schedule_pass(limit=2, now=at("2026-05-26T12:00:05"))
    assert (first.claimed, first.failed, first.batch_was_full) == (2, 2, True)
    second = run_schedule_pass(limit=2, now=at("2026-05-26T12:00:06"))
    assert (second.claimed, second.fired) == (1, 1)


def test_run_schedule_pass__batch_bounded__rest_next_pass(make_schedule: MakeSchedule) -> None:
    for number in range(5):
        make_schedule(f"s{number}", cursor=at("2026-05-26T12:00"))
    first = run_schedule_pass(limit=3, now=at("2026-05-26T12:00"))
    assert (first.claimed, first.batch_was_full) == (3, True)
    second = run_schedule_pass(limit=3, now=at("2026-05-26T12:00"))
    assert (second.claimed, second.batch_was_full) == (2, False)
    assert Job.objects.count() == 5


def test_run_schedule_pass__seconds_cron__one_job_per_second(make_schedule: MakeSchedule) -> None:
    make_schedule("fast", cursor=at("2026-05-26T12:00:00"), cron="* * * * * *", catch_up="all")
    run_schedule_pass(now=at("2026-05-26T12:00:04"))
    run_schedule_pass(now=at("2026-05-26T12:00:04"))
    assert [fire for fire, _ in jobs_by_fire()] == [
        f"2026-05-26T12:00:0{second}Z" for second in range(5)
    ]


def test_run_schedule_pass__row_by_row_when_the_set_write_fails(
    make_schedule: MakeSchedule,
) -> None:
    """A row the set-based write cannot take (a template jsonb refuses to merge) is deferred
    on the per-row path; its neighbour still fires, and the savepoint is gone afterwards."""
    make_schedule("good", cursor=at("2026-05-26T12:00"))
    make_schedule("bad", cursor=at("2026-05-26T12:00"))
    run_sql(
        "ALTER TABLE runledger_job_queue ADD CONSTRAINT chk_test_no_bad_payload "
        "CHECK (payload -> '_schedule' ->> 'schedule_name' <> 'bad') NOT VALID"
    )
    try:
        report = run_schedule_pass(now=at("2026-05-26T12:00:10"))
        assert (report.claimed, report.fired, report.failed) == (2, 1, 1)
        bad = JobSchedule.objects.get(name="bad")
        assert bad.last_error_code == "db.business_rule_violation"
        assert bad.next_fire_at == at("2026-05-26T12:00:40")
    finally:
        run_sql("ALTER TABLE runledger_job_queue DROP CONSTRAINT chk_test_no_bad_payload")


def test_materialize__claimed_row_missing__aborts_without_a_job(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"))
    ghost = DueSchedule(
        id=uuid.uuid4(),
        name="ghost",
        job_type=SCHEDULED_TYPE,
        cron="* * * * *",
        interval_seconds=None,
        timezone="UTC",
        jitter_seconds=0,
        catch_up="latest",
        grace_seconds=60,
        catch_up_limit=100,
        overlap="allow",
        next_fire_at=at("2026-05-26T12:00"),
        next_scheduled_for=at("2026-05-26T12:00"),
        last_job_status=None,
        definition_enabled=True,
    )
    with pytest.raises(RunledgerError) as info, transaction.atomic():
        with connection.cursor() as cursor:
            materialize(cursor, [ghost], at("2026-05-26T12:00:10"))
    assert info.value.code == "job_schedule.not_found"
    assert not Job.objects.exists()
    assert not ScheduleFire.objects.exists()


def test_materialize__savepoint_released_after_a_failure(make_schedule: MakeSchedule) -> None:
    make_schedule(cursor=at("2026-05-26T12:00"))
    run_sql("UPDATE runledger_job_schedules SET cron_expr = 'nope'")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        report = materialize(
            cursor,
            [
                DueSchedule.from_row(
                    [
                        *JobSchedule.objects.values_list(
                            "id",
                            "name",
                            "job_type",
                            "cron_expr",
                            "interval_seconds",
                            "timezone",
                            "max_jitter_seconds",
                            "catch_up",
                            "catch_up_grace_seconds",
                            "catch_up_limit",
                            "overlap",
                            "next_fire_at",
                            "next_scheduled_for",
                        ).get(),
                        None,
                        True,
                    ]
                )
            ],
            at("2026-05-26T12:00:10"),
        )
        assert report.failed == 1
        cursor.execute("SAVEPOINT probe")
        with pytest.raises(Exception) as info:
            cursor.execute("RELEASE SAVEPOINT materialize_due_schedule")
        assert getattr(info.value.__cause__, "sqlstate", None) == "3B001"
        cursor.execute("ROLLBACK TO SAVEPOINT probe")


def test_run_schedule_pass__inside_atomic__refused_before_sql() -> None:
    with transaction.atomic(), pytest.raises(RunledgerError) as info:
        run_schedule_pass()
    assert info.value.code == "job_schedule.requires_own_transaction"


@pytest.mark.parametrize(
    "kwargs",
    [{"limit": 0}, {"limit": 1001}, {"now": dt.datetime(2026, 1, 1)}, {"job_types": "a"}],
)
def test_run_schedule_pass__bad_arguments__refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(RunledgerError) as info:
        run_schedule_pass(**kwargs)  # type: ignore[arg-type]
    assert info.value.category.value == "validation"


def test_run_schedule_pass__job_types__only_theirs(make_schedule: MakeSchedule) -> None:
    JobDefinition.objects.create(job_type="tests.other")
    make_schedule("mine", cursor=at("2000-01-01T00:00"))
    make_schedule("theirs", cursor=at("2000-01-01T00:00"), target="tests.other")
    assert run_schedule_pass([SCHEDULED_TYPE]).fired == 1
    assert Job.objects.get().job_type_id == SCHEDULED_TYPE
    assert run_schedule_pass([]).claimed == 0
