"""Declared sync on real PostgreSQL: the code owns the declared fields, the operator owns the
pause, removed declarations are deactivated, a second sync writes nothing, concurrent syncs
take turns, and a sync that fails names its schedule and writes nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from runledger_django.domain import ScheduleSpec
from runledger_django.errors import RunledgerError
from runledger_django.models import JobDefinition, JobSchedule
from runledger_django.services.schedules import (
    pause_schedule,
    resume_schedule,
    run_schedule_pass,
    save_schedule,
    sync_declared_schedules,
)
from runledger_django.services.schedules.spec import build_spec
from runledger_django.worker.registry import Handler, Registry
from runledger_django.worker.scheduler import Declarations, sync_declarations

from ..conftest import connection_kwargs, run_sql, wait_for_lock_wait
from .conftest import SCHEDULED_TYPE, at

pytestmark = pytest.mark.django_db(transaction=True)


def spec(name: str = "nightly", **kwargs: Any) -> ScheduleSpec:
    kwargs.setdefault("cron", "0 3 * * *")
    return build_spec(name, kwargs.pop("target", SCHEDULED_TYPE), **kwargs)


def row_versions() -> list[tuple[str, str, Any]]:
    return [
        (name, xmin, updated)
        for name, xmin, updated in run_sql(
            "SELECT name, xmin::text, updated_at FROM runledger_job_schedules ORDER BY name"
        )
    ]


def test_sync__creates_declared_rows__first_fire_after_now(
    scheduled_definition: JobDefinition,
) -> None:
    report = sync_declared_schedules([spec("a"), spec("b", every=60, cron=None)])
    assert report.created == ("a", "b")
    rows = {row.name: row for row in JobSchedule.objects.all()}
    assert all(row.declared and row.is_active for row in rows.values())
    assert run_schedule_pass().claimed == 0


def test_sync__twice__second_changes_nothing(scheduled_definition: JobDefinition) -> None:
    specs = [spec("a", payload={"k": [1, 2.5, None]}, jitter=30), spec("b", timezone="Asia/Tokyo")]
    sync_declared_schedules(specs)
    before = row_versions()
    report = sync_declared_schedules(specs)
    assert (report.created, report.updated, report.deactivated) == ((), (), ())
    assert report.unchanged == ("a", "b")
    assert row_versions() == before


def test_sync__declared_fields_follow_the_code(scheduled_definition: JobDefinition) -> None:
    sync_declared_schedules([spec("a", payload={"v": 1})])
    cursor = JobSchedule.objects.get().next_fire_at
    report = sync_declared_schedules([spec("a", payload={"v": 2}, jitter=5, overlap="skip")])
    assert report.updated == ("a",)
    row = JobSchedule.objects.get()
    assert (row.payload_template, row.max_jitter_seconds, row.overlap) == ({"v": 2}, 5, "skip")
    assert row.next_fire_at == cursor  # same cron: the cursor stays
    sync_declared_schedules([spec("a", cron="0 4 * * *")])
    assert JobSchedule.objects.get().next_fire_at.hour == 4


def test_sync__operator_pause_survives_a_deploy(scheduled_definition: JobDefinition) -> None:
    sync_declared_schedules([spec("a")])
    paused_at = pause_schedule("a").paused_at
    sync_declared_schedules([spec("a", payload={"v": 2})])
    sync_declared_schedules([spec("a", payload={"v": 2})])
    row = JobSchedule.objects.get()
    assert (row.paused_at, row.is_active, row.payload_template) == (paused_at, True, {"v": 2})
    assert resume_schedule("a").paused_at is None


def test_sync__declared_inactive__applied_and_reactivated(
    scheduled_definition: JobDefinition,
) -> None:
    sync_declared_schedules([spec("a")])
    sync_declared_schedules([spec("a", enabled=False)])
    assert JobSchedule.objects.get().is_active is False
    sync_declared_schedules([spec("a")])
    assert JobSchedule.objects.get().is_active is True


def test_sync__removed_declaration__deactivated_runtime_rows_untouched(
    scheduled_definition: JobDefinition,
) -> None:
    save_schedule("runtime", SCHEDULED_TYPE, cron="* * * * *")
    sync_declared_schedules([spec("a"), spec("b")])
    report = sync_declared_schedules([spec("b")])
    assert report.deactivated == ("a",)
    active = dict(JobSchedule.objects.values_list("name", "is_active"))
    assert active == {"a": False, "b": True, "runtime": True}
    empty = sync_declared_schedules([])
    assert empty.deactivated == ("b",)
    assert JobSchedule.objects.get(name="runtime").is_active is True


def test_sync__runtime_schedule_with_a_declared_name__taken_over(
    scheduled_definition: JobDefinition,
) -> None:
    save_schedule("a", SCHEDULED_TYPE, cron="* * * * *")
    report = sync_declared_schedules([spec("a")])
    assert report.updated == ("a",)
    row = JobSchedule.objects.get()
    assert (row.declared, row.cron_expr) == (True, "0 3 * * *")


def test_sync__unknown_or_disabled_type__names_the_schedule_writes_nothing(
    scheduled_definition: JobDefinition,
) -> None:
    with pytest.raises(RunledgerError) as info:
        sync_declared_schedules([spec("fine"), spec("broken", target="tests.nobody")])
    assert info.value.code == "job_schedule.definition_not_found_or_disabled"
    assert "'broken'" in info.value.internal_message
    assert not JobSchedule.objects.exists()
    JobDefinition.objects.create(job_type="tests.off", is_enabled=False)
    with pytest.raises(RunledgerError):
        sync_declared_schedules([spec("off", target="tests.off")])
    report = sync_declared_schedules([spec("off", target="tests.off", enabled=False)])
    assert report.created == ("off",)


def test_sync__duplicate_names__refused_before_sql() -> None:
    with pytest.raises(RunledgerError) as info:
        sync_declared_schedules([spec("a"), spec("a", cron="0 4 * * *")])
    assert info.value.code == "job_schedule.invalid_argument"


def test_sync__concurrent_syncs__take_turns_one_creates(
    scheduled_definition: JobDefinition,
) -> None:
    specs = [spec(f"s{n}") for n in range(20)]
    barrier = threading.Barrier(4)
    reports: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        from django.db import connections

        try:
            barrier.wait()
            reports.append(sync_declared_schedules(specs))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(len(report.created) for report in reports) == [0, 0, 0, 20]
    assert JobSchedule.objects.count() == 20


def test_sync__waits_behind_a_pass__and_a_pass_waits_behind_it(
    scheduled_definition: JobDefinition,
    observer: psycopg.Connection[Any],
    in_thread: Callable[..., Any],
) -> None:
    """The sync's SHARE ROW EXCLUSIVE and a pass's ROW EXCLUSIVE exclude each other; the
    pass's wait is bounded (1 s) so a held sync lock fails it fast."""
    save_schedule("due", SCHEDULED_TYPE, cron="* * * * *", next_fire_at=at("2000-01-01T00:00"))
    holder = psycopg.connect(**connection_kwargs())
    try:
        holder.execute("LOCK TABLE runledger_job_schedules IN SHARE ROW EXCLUSIVE MODE")
        future = in_thread(run_schedule_pass)
        wait_for_lock_wait(observer, "ROW EXCLUSIVE")
        with pytest.raises(RunledgerError) as info:
            future.result(timeout=10)
        assert info.value.sqlstate == "55P03"
    finally:
        holder.rollback()
        holder.close()
    assert run_schedule_pass().fired == 1


def test_sync_declarations__creates_missing_definitions_with_handler_defaults() -> None:
    handlers = Registry()
    handlers.register(Handler(job_type="tests.declared", func=lambda job: None, max_attempts=2))
    declared = Declarations()
    declared.add(spec("d", target="tests.declared"))
    report = sync_declarations(handlers=handlers, declared=declared)
    assert report.created == ("d",)
    assert JobDefinition.objects.get(job_type="tests.declared").max_attempts == 2


def test_run_schedule_pass__behind_a_short_sync__waits_then_fires(
    scheduled_definition: JobDefinition,
    observer: psycopg.Connection[Any],
    in_thread: Callable[..., Any],
) -> None:
    save_schedule("due", SCHEDULED_TYPE, cron="* * * * *", next_fire_at=at("2000-01-01T00:00"))
    holder = psycopg.connect(**connection_kwargs())
    try:
        holder.execute("LOCK TABLE runledger_job_schedules IN SHARE ROW EXCLUSIVE MODE")
        future = in_thread(run_schedule_pass)
        wait_for_lock_wait(observer, "ROW EXCLUSIVE")
        holder.rollback()
        assert future.result(timeout=10).fired == 1
    finally:
        holder.close()


@pytest.mark.slow
def test_sync__table_held__gives_up_after_five_seconds(
    scheduled_definition: JobDefinition,
) -> None:
    holder = psycopg.connect(**connection_kwargs())
    try:
        holder.execute("LOCK TABLE runledger_job_schedules IN ROW EXCLUSIVE MODE")
        with pytest.raises(RunledgerError) as info:
            sync_declared_schedules([spec("a")])
        assert info.value.sqlstate == "55P03"
    finally:
        holder.rollback()
        holder.close()
    assert not JobSchedule.objects.exists()
