"""Poison job rows on the worker's paths (issue 13, item 3): a job written by hand that cannot
be claimed or decoded is dead-lettered with ``job.invalid_persisted_row`` on its first pass,
and the jobs before and after it are claimed and run in that same pass. The CHECKs that refuse
such rows at insert, and the intent paths, are in tests/integration/test_poison_rows.py.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable

import pytest

from runledger_django import ReadScope, RunledgerError, requeue_job, run_jobs
from runledger_django.domain import FailureKind, JobFailure, JobStatus
from runledger_django.services.claim import claim_jobs
from runledger_django.services.job_retention import prune_jobs
from runledger_django.services.lifecycle import complete_job_failure
from runledger_django.services.reaper import reap_expired_leases
from runledger_django.worker.execution import Execution, execute
from runledger_django.worker.registry import Handler, Registry
from tests.conftest import run_sql
from tests.worker.conftest import (
    LEASE,
    TYPE,
    WORKER,
    Enqueue,
    Register,
    attempt_rows,
    claim_one,
    event_rows,
    expire_lease,
    job_row,
)

pytestmark = pytest.mark.django_db

COUNTER_MAX = 2**31 - 2
"""The largest attempt or run number chk_job_queue_values_in_range allows."""
HUGE_NUMBER = "repeat('9', 5000)::numeric"
"""A number jsonb keeps and Python's int() refuses (past its 4300-digit limit)."""
INVALID_ROW = ("job.invalid_persisted_row", "Job contains invalid persisted state.")


def claim(limit: int = 10) -> list[uuid.UUID]:
    return [
        job.lease.job_id
        for job in claim_jobs([TYPE], worker_id=WORKER, limit=limit, lease_seconds=LEASE)
    ]


def attempt_one_short_of_the_bound(job_id: uuid.UUID) -> None:
    """The claim's attempt + 1 would reach 2**31 - 1, which the queue's CHECK refuses."""
    run_sql("UPDATE runledger_job_queue SET attempt = %s WHERE id = %s", [COUNTER_MAX, job_id])


def attempt_rows_ahead(job_id: uuid.UUID) -> None:
    """A hand-made reset: the job's attempt counter is back at 0, its attempt 1 row is not."""
    run_sql(
        "INSERT INTO runledger_job_attempts (job_id, job_type, run_number, attempt, worker_id,"
        " finished_at, outcome) VALUES (%s, %s, 1, 1, 'old-worker', now(), 'SUCCEEDED')",
        [job_id, TYPE],
    )


UNCLAIMABLE: dict[str, Callable[[uuid.UUID], None]] = {
    "attempt-at-the-bound": attempt_one_short_of_the_bound,
    "attempt-rows-ahead": attempt_rows_ahead,
}


@pytest.mark.parametrize("poison", list(UNCLAIMABLE.values()), ids=list(UNCLAIMABLE))
def test_claim_jobs__job_that_cannot_be_leased__dead_lettered_neighbours_claimed(
    enqueue: Enqueue, poison: Callable[[uuid.UUID], None]
) -> None:
    """Before, the claim failed as a whole on every pass: no job of the type ever ran again."""
    before = enqueue({"n": 1})
    job_id = enqueue({"n": 2})
    poison(job_id)
    after = enqueue({"n": 3})
    attempts_before = attempt_rows(job_id)

    # Jobs enqueued in one transaction tie in the claim's order (the same due and creation
    # times): which of the two comes first is the index's, not the test's.
    assert sorted(claim()) == sorted([before, after])

    row = job_row(job_id)
    assert (row["status"], row["last_error_code"], row["last_error_message"]) == (
        "DEAD_LETTERED",
        *INVALID_ROW,
    )
    assert (row["status_reason"], row["worker_id"], row["finished_at"] is not None) == (
        "TERMINAL",
        None,
        True,
    )
    assert attempt_rows(job_id) == attempts_before  # nothing ran
    assert event_rows(job_id)[-1]["event_type"] == "DEAD_LETTERED"
    assert event_rows(job_id)[-1]["payload"] == {
        "kind": "TERMINAL",
        "error_code": "job.invalid_persisted_row",
        "reason": "FAILURE_KIND_NON_RETRYABLE",
    }
    assert claim() == []  # the next claim is a clean batch again


def test_claim_jobs__one_slot_and_an_unclaimable_job_first__the_healthy_one_behind_claimed(
    enqueue: Enqueue,
) -> None:
    """A worker with one free slot is not sent away empty by the job it dead-lettered."""
    job_id = enqueue({"n": 1})
    attempt_one_short_of_the_bound(job_id)
    healthy = enqueue({"n": 2})

    assert claim(limit=1) == [healthy]
    assert job_row(job_id)["status"] == "DEAD_LETTERED"


@pytest.mark.django_db(transaction=True)
def test_run_jobs__unclaimable_job_among_healthy_ones__all_others_run_in_the_same_call(
    enqueue: Enqueue, register: Register
) -> None:
    ran: list[int] = []
    register(TYPE, lambda job: ran.append(job.payload["n"]))
    jobs = [enqueue({"n": n}) for n in range(4)]
    attempt_one_short_of_the_bound(jobs[1])

    report = run_jobs([TYPE])

    assert (report.claimed, report.succeeded) == (3, 3)
    assert sorted(ran) == [0, 2, 3]
    assert [job_row(j)["status"] for j in jobs] == [
        "SUCCEEDED",
        "DEAD_LETTERED",
        "SUCCEEDED",
        "SUCCEEDED",
    ]


@pytest.mark.parametrize("column", ["payload", "checkpoint"])
def test_claimed_batch__json_python_cannot_parse__that_job_dead_lettered_others_run(
    enqueue: Enqueue, column: str
) -> None:
    """The job is leased with its batch; its attempt fails terminally without running the
    handler, and the rest of the batch runs as usual."""
    jobs = [enqueue({"n": n}) for n in range(3)]
    run_sql(
        f"UPDATE runledger_job_queue SET {column} = jsonb_build_object('n', {HUGE_NUMBER}) "
        "WHERE id = %s",
        [jobs[1]],
    )
    claimed = claim_jobs([TYPE], worker_id=WORKER, limit=10, lease_seconds=LEASE)
    ran: list[int] = []
    registry = Registry()
    registry.register(Handler(job_type=TYPE, func=lambda job: ran.append(job.payload["n"])))

    runs = [
        execute(Execution(job, lease_seconds=LEASE), registry, using="default") for job in claimed
    ]

    assert [job.lease.job_id for job in claimed] == jobs
    assert [job.decode_error is not None for job in claimed] == [False, True, False]
    assert [(run.outcome, run.error_code) for run in runs] == [
        ("succeeded", None),
        ("dead_lettered", "job.invalid_persisted_row"),
        ("succeeded", None),
    ]
    assert ran == [0, 2]


# --- what the outcome statements return -------------------------------------------------------


@pytest.fixture
def unchecked_queue() -> None:
    """The queue without its range CHECK, inside this test's transaction only (DDL rolls back
    with it): a server that skipped migration 0007's validation, or rows from before it."""
    run_sql("ALTER TABLE runledger_job_queue DROP CONSTRAINT chk_job_queue_values_in_range")


def test_complete_job_failure__dead_letter_of_a_job_with_an_unreadable_next_run_at__no_error(
    enqueue: Enqueue, unchecked_queue: None
) -> None:
    """A dead letter keeps the job's own next_run_at; the statement must not hand it back to
    Python, which cannot read 'infinity'."""
    job_id = enqueue()
    lease = claim_one().lease
    run_sql("UPDATE runledger_job_queue SET next_run_at = 'infinity' WHERE id = %s", [job_id])

    outcome = complete_job_failure(
        lease, JobFailure(kind=FailureKind.TERMINAL, code="job.terminal_failure", message="no")
    )

    assert (outcome.status, outcome.next_run_at) == (JobStatus.DEAD_LETTERED, None)
    assert run_sql("SELECT status FROM runledger_job_queue WHERE id = %s", [job_id]) == [
        ("DEAD_LETTERED",)
    ]


def test_reap_expired_leases__dead_letter_of_a_job_with_an_unreadable_next_run_at__reaped(
    enqueue: Enqueue, unchecked_queue: None
) -> None:
    healthy = enqueue()
    spent = enqueue()
    for _ in range(2):
        claim_one()
    run_sql(
        "UPDATE runledger_job_queue SET attempt = max_attempts, next_run_at = 'infinity' "
        "WHERE id = %s",
        [spent],
    )
    run_sql("UPDATE runledger_job_attempts SET attempt = 3 WHERE job_id = %s", [spent])
    for job_id in (healthy, spent):
        expire_lease(job_id)

    report = reap_expired_leases([TYPE])

    assert (report.retried, report.dead_lettered, report.deferred) == (1, 1, 0)
    assert len(report.next_run_ats) == 1


# --- operator actions ------------------------------------------------------------------------


def test_requeue_job__run_number_cannot_grow__refused_cleanly_other_dead_letters_requeued(
    enqueue: Enqueue,
) -> None:
    """One more run would break the counter bound: refused as a state that allows no requeue,
    never as a failed statement."""
    exhausted, other = enqueue(), enqueue()
    run_sql(
        "UPDATE runledger_job_queue SET status = 'DEAD_LETTERED', finished_at = now(),"
        " run_number = CASE WHEN id = %s THEN %s ELSE 1 END WHERE id IN (%s, %s)",
        [exhausted, COUNTER_MAX, exhausted, other],
    )
    before = job_row(exhausted)

    with pytest.raises(RunledgerError) as raised:
        requeue_job(exhausted, scope=ReadScope.ADMIN)

    assert raised.value.code == "job.invalid_state_transition"
    assert job_row(exhausted) == before
    assert requeue_job(other, scope=ReadScope.ADMIN) == JobStatus.PENDING


@pytest.mark.django_db(transaction=True)
def test_prune_jobs__json_python_cannot_parse__deleted_with_the_others(enqueue: Enqueue) -> None:
    """Retention selects and deletes by id: it never parses what it removes."""
    jobs = [enqueue({"n": n}) for n in range(3)]
    run_sql(
        f"UPDATE runledger_job_queue SET payload = jsonb_build_object('n', {HUGE_NUMBER}),"
        f" output = to_jsonb({HUGE_NUMBER}) WHERE id = %s",
        [jobs[1]],
    )
    run_sql(
        "UPDATE runledger_job_queue SET status = 'SUCCEEDED', finished_at = now() - interval '2 days',"
        " created_at = now() - interval '2 days' WHERE id = ANY(%s)",
        [jobs],
    )

    result = prune_jobs(dt.timedelta(days=1))

    assert result.counts.succeeded == 3
    assert not run_sql("SELECT 1 FROM runledger_job_queue WHERE id = ANY(%s)", [jobs])
