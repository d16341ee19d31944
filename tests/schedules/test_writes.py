"""Runtime writes on real PostgreSQL: save (the seed's upsert rules and ours), pause, resume,
run now, retime, delete, next fires, reads under a scope, and the guards with definitions."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from django.db import DatabaseError, connection, transaction

from runledger_django.domain import ReadScope
from runledger_django.errors import RunledgerError
from runledger_django.models import Job, JobDefinition, JobSchedule, ScheduleFire
from runledger_django.services.schedules import (
    delete_schedule,
    get_schedule,
    list_schedules,
    next_fires,
    pause_schedule,
    resume_schedule,
    retime_schedule,
    run_schedule_pass,
    save_schedule,
    trigger_schedule,
)
from runledger_django.services.schedules.timing import Timing

from ..conftest import run_sql
from .conftest import SCHEDULED_TYPE, MakeSchedule, at

pytestmark = pytest.mark.django_db(transaction=True)


def db_now() -> dt.datetime:
    value: dt.datetime = run_sql("SELECT now()")[0][0]
    return value


def expected_first_fire(row: JobSchedule, after: dt.datetime) -> dt.datetime:
    return Timing(
        cron=row.cron_expr,
        interval_seconds=row.interval_seconds,
        timezone=row.timezone,
        jitter_seconds=row.max_jitter_seconds,
        schedule_id=row.id,
    ).first_fire_after(after)


def test_save_schedule__new__first_fire_after_now_never_immediately(
    scheduled_definition: JobDefinition,
) -> None:
    before = db_now()
    row = save_schedule("hourly", SCHEDULED_TYPE, cron="0 * * * *")
    assert row.next_fire_at > before
    assert row.next_fire_at == row.next_scheduled_for
    assert row.next_fire_at.minute == 0 and row.next_fire_at.second == 0
    assert row.next_fire_at.tzinfo is not None and row.next_fire_at.utcoffset() == dt.timedelta(0)
    assert run_schedule_pass().claimed == 0


def test_save_schedule__run_on_create__fires_at_once(scheduled_definition: JobDefinition) -> None:
    save_schedule("now-too", SCHEDULED_TYPE, cron="0 3 * * *", run_on_create=True)
    assert run_schedule_pass().fired == 1


def test_save_schedule__existing__refreshes_fields_keeps_org_and_active_flag(
    scheduled_definition: JobDefinition,
) -> None:
    org = uuid.uuid4()
    first = save_schedule(
        "tenant", SCHEDULED_TYPE, cron="0 3 * * *", organization_id=org, enabled=False
    )
    JobDefinition.objects.create(job_type="tests.other")
    again = save_schedule(
        "tenant", "tests.other", cron="0 3 * * *", payload={"v": 2}, jitter=10, priority=5
    )
    assert again.id == first.id
    assert (again.organization_id, again.is_active) == (org, False)
    assert (again.job_type_id, again.payload_template, again.max_jitter_seconds) == (
        "tests.other",
        {"v": 2},
        10,
    )
    assert again.priority == 5
    assert again.next_fire_at == first.next_fire_at  # same cron: the cursor stays
    enabled = save_schedule("tenant", "tests.other", cron="0 3 * * *", enabled=True)
    assert enabled.is_active is True


def test_save_schedule__same_cron_with_cursor__kept_changed_cron__supplied_cursor(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("s", cursor=at("2030-01-01T00:00"))
    kept = save_schedule("s", SCHEDULED_TYPE, cron="* * * * *", next_fire_at=at("2031-01-01T00:00"))
    assert kept.next_fire_at == at("2030-01-01T00:00")
    moved = save_schedule("s", SCHEDULED_TYPE, cron="*/5 * * * *", next_fire_at=at("2031-01-01"))
    assert moved.next_fire_at == at("2031-01-01T00:00")


@pytest.mark.parametrize(
    "change", [{"cron": "0 4 * * *"}, {"timezone": "Europe/Berlin"}, {"cron": None, "every": 3600}]
)
def test_save_schedule__timing_changed__cursor_first_fire_after_now_ledger_untouched(
    make_schedule: MakeSchedule, change: dict[str, object]
) -> None:
    make_schedule("s", cursor=at("2026-05-26T03:00"), cron="0 3 * * *")
    run_schedule_pass(now=at("2026-05-26T03:00"))
    before = db_now()
    kwargs: dict[str, object] = {"cron": "0 3 * * *", **change}
    row = save_schedule("s", SCHEDULED_TYPE, **kwargs)  # type: ignore[arg-type]
    assert before < row.next_fire_at <= expected_first_fire(row, before) + dt.timedelta(minutes=1)
    assert ScheduleFire.objects.get().scheduled_for == at("2026-05-26T03:00")


def test_save_schedule__zone_changed__cursor_in_the_new_zone(make_schedule: MakeSchedule) -> None:
    make_schedule("s", cron="0 9 * * *")
    berlin = save_schedule("s", SCHEDULED_TYPE, cron="0 9 * * *", timezone="Europe/Berlin")
    assert berlin.next_fire_at.hour in (7, 8)  # 09:00 CEST or CET, in UTC


def test_save_schedule__application_time_zone__does_not_move_cursors(
    make_schedule: MakeSchedule, settings: object
) -> None:
    row = make_schedule("s", cron="30 2 * * *", timezone="America/New_York")
    settings.TIME_ZONE = "Asia/Tokyo"  # type: ignore[attr-defined]
    again = save_schedule("s", SCHEDULED_TYPE, cron="30 2 * * *", timezone="America/New_York")
    assert again.next_fire_at == row.next_fire_at
    (stored,) = run_sql(
        "SELECT to_char(next_fire_at AT TIME ZONE 'America/New_York', 'HH24:MI') "
        "FROM runledger_job_schedules"
    )
    assert stored == ("02:30",) or stored == ("03:00",)


def test_run_schedule_pass__database_time_zone__same_instants(
    open_session: object, make_schedule: MakeSchedule
) -> None:
    """Another session's TimeZone (the database's default, say) reads the same instants."""
    row = make_schedule("s", cursor=at("2026-05-26T12:00"))
    session = open_session()  # type: ignore[operator]
    session.execute("SET TIME ZONE 'Pacific/Chatham'")
    (value,) = session.execute(
        "SELECT next_fire_at = %s FROM runledger_job_schedules", [at("2026-05-26T12:00")]
    ).fetchone()
    assert value is True
    assert row.next_fire_at == at("2026-05-26T12:00")


def test_save_schedule__missing_or_disabled_definition__refused_nothing_written() -> None:
    with pytest.raises(RunledgerError) as info:
        save_schedule("s", "tests.nobody", cron="* * * * *")
    assert info.value.code == "job_schedule.definition_not_found_or_disabled"
    JobDefinition.objects.create(job_type="tests.off", is_enabled=False)
    with pytest.raises(RunledgerError) as info:
        save_schedule("s", "tests.off", cron="* * * * *")
    assert info.value.code == "job_schedule.definition_not_found_or_disabled"
    assert not JobSchedule.objects.exists()


def test_save_schedule__inactive_may_use_a_disabled_definition() -> None:
    JobDefinition.objects.create(job_type="tests.off", is_enabled=False)
    row = save_schedule("s", "tests.off", cron="* * * * *", enabled=False)
    assert row.is_active is False
    with pytest.raises(RunledgerError) as info:
        save_schedule("s", "tests.off", cron="* * * * *", enabled=True)
    assert info.value.code == "job_schedule.definition_not_found_or_disabled"
    assert JobSchedule.objects.get().is_active is False


def test_save_schedule__bad_input_inside_atomic__caller_transaction_usable(
    scheduled_definition: JobDefinition,
) -> None:
    with transaction.atomic():
        with pytest.raises(RunledgerError):
            save_schedule("s", SCHEDULED_TYPE, cron="bad cron")
        with pytest.raises(RunledgerError):
            save_schedule("t", "tests.nobody", cron="* * * * *")
        save_schedule("u", SCHEDULED_TYPE, cron="* * * * *")
    assert list(JobSchedule.objects.values_list("name", flat=True)) == ["u"]


def test_save_schedule__many_in_one_transaction__all_or_nothing(
    scheduled_definition: JobDefinition,
) -> None:
    tenants = [uuid.uuid4() for _ in range(20)]
    with pytest.raises(RuntimeError), transaction.atomic():
        for tenant in tenants:
            save_schedule(
                f"digest:{tenant}", SCHEDULED_TYPE, cron="0 7 * * *", organization_id=tenant
            )
        raise RuntimeError("roll back")
    assert not JobSchedule.objects.exists()
    with transaction.atomic():
        for tenant in tenants:
            save_schedule(
                f"digest:{tenant}", SCHEDULED_TYPE, cron="0 7 * * *", organization_id=tenant
            )
    assert JobSchedule.objects.count() == 20


def test_definition_disable__active_schedule__refused_until_paused(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("s")
    with pytest.raises(DatabaseError) as info:
        JobDefinition.objects.filter(job_type=SCHEDULED_TYPE).update(is_enabled=False)
    assert info.value.__cause__.diag.constraint_name == "chk_job_definitions_no_active_schedule"  # type: ignore[union-attr]
    pause_schedule("s")
    JobDefinition.objects.filter(job_type=SCHEDULED_TYPE).update(is_enabled=False)
    with pytest.raises(RunledgerError) as refused:
        resume_schedule("s")
    assert refused.value.code == "job_schedule.definition_not_found_or_disabled"
    assert JobSchedule.objects.get().paused_at is not None


def test_definition_disable__classified__active_schedule_exists(
    make_schedule: MakeSchedule,
) -> None:
    from runledger_django.db.classify import classify

    make_schedule("s")
    with pytest.raises(DatabaseError) as info:
        JobDefinition.objects.filter(job_type=SCHEDULED_TYPE).update(is_enabled=False)
    assert classify(info.value, "disable").code == "job_definition.active_schedule_exists"


def test_pause_resume__cursor_to_first_fire_after_now__no_flood(
    make_schedule: MakeSchedule,
) -> None:
    make_schedule("s", cursor=at("2026-05-26T12:00"))
    paused = pause_schedule("s")
    assert paused.paused_at is not None and paused.is_active
    before = db_now()
    resumed = resume_schedule("s")
    assert resumed.paused_at is None
    assert before < resumed.next_fire_at <= before + dt.timedelta(minutes=1)
    assert run_schedule_pass().claimed == 0


def test_resume__catch_up_all__missed_fires_run(make_schedule: MakeSchedule) -> None:
    make_schedule("s", cursor=at("2026-05-26T12:00"), catch_up="all", catch_up_limit=3)
    pause_schedule("s")
    assert resume_schedule("s").next_fire_at == at("2026-05-26T12:00")
    assert run_schedule_pass().fired == 3


def test_pause__twice__keeps_the_first_time(make_schedule: MakeSchedule) -> None:
    make_schedule("s")
    first = pause_schedule("s").paused_at
    assert pause_schedule("s").paused_at == first


def test_trigger_schedule__one_manual_job__cursor_unchanged(make_schedule: MakeSchedule) -> None:
    row = make_schedule("s", cursor=at("2030-01-01T00:00"), overlap="serialize")
    pause_schedule("s")
    job_id = trigger_schedule("s")
    second = trigger_schedule("s")
    assert job_id != second
    job = Job.objects.get(pk=job_id)
    assert job.payload["_schedule"]["manual"] is True
    assert job.execution_resource_key == f"schedule:{row.id}"
    fires = ScheduleFire.objects.filter(kind="manual")
    assert {fire.job_id for fire in fires} == {job_id, second}
    assert JobSchedule.objects.get().next_fire_at == at("2030-01-01T00:00")


def test_delete_schedule__jobs_stay(make_schedule: MakeSchedule) -> None:
    make_schedule("s", cursor=at("2026-05-26T12:00"))
    run_schedule_pass(now=at("2026-05-26T12:00"))
    delete_schedule("s")
    assert not JobSchedule.objects.exists()
    assert not ScheduleFire.objects.exists()
    assert Job.objects.count() == 1
    with pytest.raises(RunledgerError) as info:
        delete_schedule("s")
    assert info.value.code == "job_schedule.not_found"


def test_declared_schedule__runtime_save_and_delete__refused(make_schedule: MakeSchedule) -> None:
    make_schedule("s")
    JobSchedule.objects.update(declared=True)
    for call in (
        lambda: save_schedule("s", SCHEDULED_TYPE, cron="* * * * *"),
        lambda: delete_schedule("s"),
    ):
        with pytest.raises(RunledgerError) as info:
            call()
        assert info.value.code == "job_schedule.declared_in_code"
    assert pause_schedule("s").paused_at is not None


def test_next_fires__jitter_applied_strictly_after(make_schedule: MakeSchedule) -> None:
    """With ``after`` the fires follow from the timing; without it, from the cursor."""
    row = make_schedule("s", cron="0 * * * *", jitter=600)
    fires = next_fires("s", 3, after=at("2026-05-26T12:30"))
    timing = Timing(
        cron="0 * * * *",
        interval_seconds=None,
        timezone="UTC",
        jitter_seconds=600,
        schedule_id=row.id,
    )
    assert fires[0] == timing.first_fire_after(at("2026-05-26T12:30"))
    assert fires == sorted(fires) and len(set(fires)) == 3
    assert all(fire > at("2026-05-26T12:30") for fire in fires)
    upcoming = next_fires("s")
    assert len(upcoming) == 5 and upcoming[0] == JobSchedule.objects.get().next_fire_at
    with pytest.raises(RunledgerError) as info:
        next_fires("nope")
    assert info.value.code == "job_schedule.not_found"


def test_get_and_list__scope__tenant_rows_only_and_no_mutation(
    scheduled_definition: JobDefinition,
) -> None:
    org = uuid.uuid4()
    save_schedule(f"{org}:digest", SCHEDULED_TYPE, cron="0 7 * * *", organization_id=org)
    save_schedule("global", SCHEDULED_TYPE, cron="0 7 * * *")
    stamp = run_sql("SELECT xmin::text FROM runledger_job_schedules ORDER BY name")
    assert [r.name for r in list_schedules(scope=ReadScope.organization(org))] == [f"{org}:digest"]
    assert [r.name for r in list_schedules(scope=ReadScope.GLOBAL)] == ["global"]
    assert len(list_schedules(scope=ReadScope.ADMIN)) == 2
    assert get_schedule("global", scope=ReadScope.organization(org)) is None
    found = get_schedule(f"{org}:digest", scope=ReadScope.organization(org))
    assert found is not None and found.organization_id == org
    assert run_sql("SELECT xmin::text FROM runledger_job_schedules ORDER BY name") == stamp


def test_retime_schedule__cursor_set(make_schedule: MakeSchedule) -> None:
    make_schedule("s")
    row = retime_schedule("s", at("2026-01-01T00:00"))
    assert row.next_fire_at == row.next_scheduled_for == at("2026-01-01T00:00")
    with pytest.raises(RunledgerError) as info:
        retime_schedule("s", dt.datetime(2026, 1, 1))
    assert info.value.code == "job_schedule.invalid_argument"


def test_guard_lock_wait__bounded_five_seconds(
    make_schedule: MakeSchedule, open_session: object
) -> None:
    """A definition row locked by another session: the schedule write gives up after its 5 s
    lock wait with 55P03 instead of hanging."""
    import psycopg

    from ..conftest import connection_kwargs

    make_schedule("s")
    holder = psycopg.connect(**connection_kwargs())
    try:
        holder.execute(
            "SELECT 1 FROM runledger_job_definitions WHERE job_type = %s FOR UPDATE",
            [SCHEDULED_TYPE],
        )
        with pytest.raises(RunledgerError) as info:
            save_schedule("t", SCHEDULED_TYPE, cron="* * * * *")
        assert info.value.sqlstate == "55P03"
    finally:
        holder.rollback()
        holder.close()
    assert connection.is_usable()
