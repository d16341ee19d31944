"""Group commit of successes: ``complete_jobs_success`` and the executors' Completer.

Concurrency is real: executors are threads with their own connections, and a write is held
back by a row lock another session takes, observed in pg_stat_activity.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import psycopg
import pytest
from pytest_django import DjangoAssertNumQueries

from runledger_django import RunledgerError
from runledger_django.db import lifecycle_queries
from runledger_django.domain import JobLease
from runledger_django.services.lifecycle import complete_jobs_success, encode_output
from runledger_django.worker.completer import Completer
from runledger_django.worker.execution import _succeed
from tests.conftest import InThread, OpenSession, wait_for_lock_wait
from tests.worker.conftest import (
    Enqueue,
    attempt_rows,
    claim_one,
    event_types,
    expire_lease,
    job_row,
    other_lease,
    wait_until,
)
from tests.worker.plans import function_plans

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)
def test_complete_jobs_success__many_leases__one_statement_records_each_with_its_output(
    enqueue: Enqueue, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    job_ids = [enqueue() for _ in range(3)]
    leases = [claim_one().lease for _ in job_ids]
    outputs = [{"n": 1}, None, ["a", "b"]]

    with django_assert_num_queries(1):
        recorded = complete_jobs_success(
            [(lease, encode_output(out)) for lease, out in zip(leases, outputs, strict=True)]
        )

    assert recorded == {lease.job_id for lease in leases}
    for lease, output in zip(leases, outputs, strict=True):
        row = job_row(lease.job_id)
        assert (row["status"], row["stage"], row["output"], row["worker_id"]) == (
            "SUCCEEDED",
            "completed",
            output,
            None,
        )
        assert [attempt["outcome"] for attempt in attempt_rows(lease.job_id)] == ["SUCCEEDED"]
        assert event_types(lease.job_id)[-1] == "SUCCEEDED"


def test_complete_jobs_success__expired_and_stale_leases__only_live_ones_recorded(
    enqueue: Enqueue,
) -> None:
    live, expired, stale = (enqueue() for _ in range(3))
    leases = {lease.job_id: lease for lease in (claim_one().lease for _ in range(3))}
    expire_lease(expired)
    expired_before = job_row(expired)
    stale_before = job_row(stale)

    recorded = complete_jobs_success(
        [
            (leases[live], None),
            (leases[expired], None),
            (other_lease(leases[stale], attempt=leases[stale].attempt + 1), None),
        ]
    )

    assert recorded == {live}
    assert job_row(live)["status"] == "SUCCEEDED"
    assert job_row(expired) == expired_before
    assert job_row(stale) == stale_before


def test_complete_jobs_success__plan__writes_each_row_through_its_primary_key(
    enqueue: Enqueue,
) -> None:
    leases = [claim_one().lease for _ in [enqueue() for _ in range(2)]]
    params: dict[str, Any] = {
        "job_ids": [lease.job_id for lease in leases],
        "run_numbers": [lease.run_number for lease in leases],
        "attempts": [lease.attempt for lease in leases],
        "outputs": [None, None],
        "worker_id": leases[0].worker_id,
        "workflow": False,
    }
    # The generic plan the function cached (and ran, in the test's transaction).
    [function_plan] = function_plans(lifecycle_queries.COMPLETE_SUCCESS_MANY, params)
    plan = function_plan["Plan"]

    nodes = list(_walk(plan))
    assert all(node["Node Type"] != "Seq Scan" for node in nodes), nodes
    [write] = [
        node
        for node in nodes
        if node.get("Operation") == "Update" and node.get("Relation Name") == "runledger_job_queue"
    ]
    [row] = [
        node
        for node in _walk(write)
        if node.get("Relation Name") == "runledger_job_queue" and node is not write
    ]
    # Each row written is reached through its primary key (never by a scan of the leases).
    assert (row["Node Type"], row.get("Index Name"), row.get("Index Cond")) == (
        "Index Scan",
        "runledger_job_queue_pkey",
        "(id = locked.id)",
    ), row


@pytest.mark.django_db(transaction=True)
def test_complete_jobs_success__row_updated_while_waiting_for_its_lock__recorded(
    enqueue: Enqueue, in_thread: InThread, open_session: OpenSession
) -> None:
    """A heartbeat that renews the lease while the batch waits for the row: the batch locks
    the newest version and must write that one, which its snapshot cannot see."""
    lease = claim_one().lease if enqueue() else None
    assert lease is not None
    holder = open_session(autocommit=False)
    holder.execute(
        "UPDATE runledger_job_queue SET lease_expires_at = now() + interval '2 minutes', "
        "last_heartbeat_at = now() WHERE id = %s",
        [lease.job_id],
    )
    writing: Future[set[Any]] = in_thread(complete_jobs_success, [(lease, None)])
    wait_for_lock_wait(open_session(), "runledger:complete_jobs_success", timeout=30)
    holder.commit()

    assert writing.result(timeout=30) == {lease.job_id}
    assert job_row(lease.job_id)["status"] == "SUCCEEDED"


@pytest.mark.django_db(transaction=True)
def test_completer__successes_arriving_during_a_write__share_the_next_statement(
    enqueue: Enqueue, in_thread: InThread, open_session: OpenSession
) -> None:
    first, second, third = (claim_one().lease for _ in [enqueue() for _ in range(3)])
    completer = Completer(using="default")
    holder, leader = _write_held_back(completer, first, in_thread, open_session)
    followers = [in_thread(completer.succeed, lease, None) for lease in (second, third)]
    wait_until(lambda: len(completer._pending) == 2, what="two queued successes")
    holder.rollback()

    assert [f.result(timeout=30) for f in (leader, *followers)] == [True, True, True]
    finished = [job_row(lease.job_id)["finished_at"] for lease in (first, second, third)]
    # now() is the transaction's start: the followers were written in one transaction.
    assert finished[1] == finished[2] != finished[0]


@pytest.mark.django_db(transaction=True)
def test_completer__one_bad_success_fails_its_batch__the_others_are_written_alone(
    enqueue: Enqueue, in_thread: InThread, open_session: OpenSession
) -> None:
    first, good, bad = (claim_one().lease for _ in [enqueue() for _ in range(3)])
    completer = Completer(using="default")
    holder, leader = _write_held_back(completer, first, in_thread, open_session)
    # Text that is no JSON stands in for a row the statement cannot write.
    poisoned: Future[bool] = in_thread(completer.succeed, bad, "{not json")
    wait_until(lambda: len(completer._pending) == 1, what="the bad success queued")
    executor: Future[None] = in_thread(_succeed, good, {"ok": True}, completer, using="default")
    wait_until(lambda: len(completer._pending) == 2, what="the good success queued")
    holder.rollback()

    assert leader.result(timeout=30) is True
    with pytest.raises(RunledgerError):
        poisoned.result(timeout=30)
    executor.result(timeout=30)
    assert job_row(good.job_id)["status"] == "SUCCEEDED"
    assert job_row(good.job_id)["output"] == {"ok": True}
    assert job_row(bad.job_id)["status"] == "LEASED"


def _write_held_back(
    completer: Completer, lease: JobLease, in_thread: InThread, open_session: OpenSession
) -> tuple[psycopg.Connection[Any], Future[bool]]:
    """Start ``lease``'s success in a thread and hold its write back on the job's row lock
    (observed waiting), so the successes that come next queue behind it."""
    holder = open_session(autocommit=False)
    holder.execute("SELECT 1 FROM runledger_job_queue WHERE id = %s FOR UPDATE", [lease.job_id])
    leader: Future[bool] = in_thread(completer.succeed, lease, None)
    wait_for_lock_wait(open_session(), "runledger:complete_jobs_success", timeout=30)
    return holder, leader


def _walk(node: dict[str, Any]) -> Any:
    yield node
    for child in node.get("Plans", []):
        yield from _walk(child)


@pytest.mark.django_db(transaction=True)
def test_completer__other_jobs_in_flight__the_writer_waits_for_their_successes_one_statement(
    enqueue: Enqueue, in_thread: InThread
) -> None:
    first, second, third = (claim_one().lease for _ in [enqueue() for _ in range(3)])
    # Long enough that only the arrivals can end the wait within the test's timeout.
    completer = Completer(
        using="default", running=lambda: 3, gather_seconds=600, gather_gap_seconds=600
    )
    writer = in_thread(completer.succeed, first, None)
    wait_until(lambda: completer._writing, what="the first success gathering")
    assert job_row(first.job_id)["status"] == "LEASED"  # nothing written while it gathers
    followers = [in_thread(completer.succeed, lease, None) for lease in (second, third)]

    assert [f.result(timeout=30) for f in (writer, *followers)] == [True, True, True]
    finished = {job_row(lease.job_id)["finished_at"] for lease in (first, second, third)}
    assert len(finished) == 1  # now() is the transaction's start: one statement wrote all


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("in_flight", "gap"),
    [(1, 600.0), (3, 0.05)],
    # Alone: nothing to wait for. With two others in flight that never finish: only the gap
    # ends the wait.
    ids=["nothing-else-in-flight", "no-success-within-the-gap"],
)
def test_completer__no_success_to_wait_for__the_writer_does_not_wait_out_the_window(
    enqueue: Enqueue, in_thread: InThread, in_flight: int, gap: float
) -> None:
    enqueue()
    lease = claim_one().lease
    completer = Completer(
        using="default", running=lambda: in_flight, gather_seconds=600, gather_gap_seconds=gap
    )

    # A writer that waited out the window would take ten minutes.
    assert in_thread(completer.succeed, lease, None).result(timeout=30) is True
    assert job_row(lease.job_id)["status"] == "SUCCEEDED"
