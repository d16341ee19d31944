"""The worker registry's services and admin page against real PostgreSQL (checklist item 30,
the parts that need no worker process): the beat's upsert and pruning, the live count per job
type, input checks before any SQL, and the read-only admin with its live/stale column."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from runledger_django.errors import RunledgerError
from runledger_django.models import WorkerRecord
from runledger_django.services.worker_registry import (
    WorkerIdentity,
    beat_worker,
    live_workers_by_job_type,
    remove_worker,
)
from tests.conftest import OpenSession, run_sql

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:runledger_workerrecord_changelist"


def identity(worker_id: str = "w-1", job_types: Any = ("a.one",), **changes: Any) -> Any:
    values: dict[str, Any] = {
        "worker_id": worker_id,
        "job_types": list(job_types) if isinstance(job_types, tuple) else job_types,
        "concurrency": 4,
        **changes,
    }
    return WorkerIdentity(**values)


def beat(worker: WorkerIdentity, *, heartbeat: float = 10, retention: float = 3600) -> int:
    return beat_worker(worker, heartbeat_seconds=heartbeat, retention_seconds=retention)


def age(worker_id: str, seconds: int) -> None:
    """Make a worker's last beat ``seconds`` old, as a worker that died that long ago."""
    run_sql(
        "UPDATE runledger_workers SET last_heartbeat_at = now() - make_interval(secs => %s) "
        "WHERE worker_id = %s",
        [seconds, worker_id],
    )


def test_beat__first_inserts__later_refresh_and_keep_started_at() -> None:
    assert beat(identity()) == 0
    row = WorkerRecord.objects.get()
    assert (row.worker_id, row.job_types, row.concurrency, row.heartbeat_seconds) == (
        "w-1",
        ["a.one"],
        4,
        10.0,
    )
    assert row.pid > 0
    assert row.hostname
    age("w-1", 5)
    run_sql("UPDATE runledger_workers SET started_at = started_at - interval '1 hour'")
    aged = WorkerRecord.objects.get()
    beat(identity(job_types=("a.one", "a.two"), concurrency=8), heartbeat=20)
    again = WorkerRecord.objects.get()
    assert (again.job_types, again.concurrency, again.heartbeat_seconds) == (
        ["a.one", "a.two"],
        8,
        20.0,
    )
    assert again.started_at == aged.started_at == row.started_at - dt.timedelta(hours=1)
    assert again.last_heartbeat_at == aged.last_heartbeat_at + dt.timedelta(seconds=5)


def test_live_count__per_job_type__stale_rows_left_out() -> None:
    beat(identity("w-1", ("a.one", "a.two")))
    beat(identity("w-2", ("a.two",)))
    beat(identity("w-3", ("a.three",)), heartbeat=2)
    assert live_workers_by_job_type() == {"a.one": 1, "a.three": 1, "a.two": 2}
    age("w-3", 7)  # three beats of 2 s missed
    age("w-1", 25)  # under three beats of 10 s
    assert live_workers_by_job_type() == {"a.one": 1, "a.two": 2}
    age("w-1", 31)
    assert live_workers_by_job_type() == {"a.two": 1}


def test_prune__rows_past_retention_only__never_the_beating_worker() -> None:
    beat(identity("w-old"))
    beat(identity("w-recent"))
    age("w-old", 7200)
    age("w-recent", 600)
    assert beat(identity("w-new"), retention=3600) == 1
    assert sorted(WorkerRecord.objects.values_list("worker_id", flat=True)) == [
        "w-new",
        "w-recent",
    ]
    age("w-new", 7200)  # its own row, however old, is refreshed, not pruned
    assert beat(identity("w-new"), retention=3600) == 0
    assert WorkerRecord.objects.filter(worker_id="w-new").exists()


@pytest.mark.django_db(transaction=True)
def test_prune__stale_row_locked_elsewhere__skipped_without_waiting(
    open_session: OpenSession,
) -> None:
    """Two workers pruning at once never wait on each other: a locked stale row is skipped
    (the beat returns while the lock is still held) and pruned by a later beat."""
    beat(identity("w-old"))
    age("w-old", 7200)
    holder = open_session(autocommit=False)
    holder.execute("SELECT 1 FROM runledger_workers WHERE worker_id = 'w-old' FOR UPDATE")
    assert beat(identity("w-new"), retention=3600) == 0
    holder.rollback()
    assert beat(identity("w-new"), retention=3600) == 1


def test_remove__deletes_the_row_once() -> None:
    beat(identity())
    assert remove_worker("w-1") is True
    assert remove_worker("w-1") is False
    assert not WorkerRecord.objects.exists()


@pytest.mark.parametrize(
    ("worker", "heartbeat", "retention"),
    [
        (identity(worker_id=" "), 10, 60),
        (identity(worker_id="x" * 65), 10, 60),
        (identity(job_types="a.one"), 10, 60),
        (identity(job_types=["a.one", ""]), 10, 60),
        (identity(concurrency=0), 10, 60),
        (identity(concurrency=True), 10, 60),
        (identity(hostname="a\x00b"), 10, 60),
        (identity(), 0, 60),
        (identity(), float("inf"), 60),
        (identity(), True, 60),
        (identity(), 10, -1),
        ("not an identity", 10, 60),
    ],
)
def test_beat__bad_input__refused_before_any_sql(
    worker: Any, heartbeat: Any, retention: Any, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as info:
        beat_worker(worker, heartbeat_seconds=heartbeat, retention_seconds=retention)
    assert info.value.category == "validation"


# --- the admin -------------------------------------------------------------------------------


def test_admin__live_and_stale__filtered__bounded_count__read_only(
    admin_client: Client, django_assert_max_num_queries: Any
) -> None:
    beat(identity("w-live", ("a.one", "a.two")))
    beat(identity("w-dead", ("a.one",)))
    age("w-dead", 3600)
    url = reverse(CHANGELIST)
    with django_assert_max_num_queries(8) as captured:
        response = admin_client.get(url)
    assert response.status_code == 200
    page = response.content.decode()
    rows = re.findall(r"<tr>.*?</tr>", page, flags=re.S)
    states = {
        worker_id: state
        for row in rows
        for worker_id in re.findall(r"w-(?:live|dead)", row)[:1]
        for state in re.findall(r'field-state">(live|stale)<', row)
    }
    assert states == {"w-live": "live", "w-dead": "stale"}
    assert "a.one, a.two" in page
    counts = [
        q["sql"]
        for q in captured.captured_queries
        if "COUNT(" in q["sql"].upper() and "runledger_workers" in q["sql"]
    ]
    assert counts
    assert all(re.search(r"\bLIMIT 10001\b", sql) for sql in counts), counts
    live_only = admin_client.get(url, {"state": "live"}).content.decode()
    assert "w-live" in live_only
    assert "w-dead" not in live_only
    stale_only = admin_client.get(url, {"state": "stale"}).content.decode()
    assert "w-dead" in stale_only
    assert "w-live" not in stale_only
    detail = admin_client.get(reverse("admin:runledger_workerrecord_change", args=["w-live"]))
    assert detail.status_code == 200
    assert admin_client.get(reverse("admin:runledger_workerrecord_add")).status_code == 403
    deleted = admin_client.post(
        reverse("admin:runledger_workerrecord_delete", args=["w-dead"]), {"post": "yes"}
    )
    assert deleted.status_code == 403
    assert WorkerRecord.objects.count() == 2
