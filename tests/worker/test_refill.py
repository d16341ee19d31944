"""Successes that claim the next jobs in their own statement (``complete_and_claim`` and the
worker's ``Refill``): on a deep queue a busy worker spends one commit per batch, not two.

The statement is real and so is the worker; where a worker stops while such a statement
runs, the race is played by hand (the stop flag set before the claimed jobs arrive).
"""

from __future__ import annotations

import threading
import uuid

import pytest
from pytest_django import DjangoAssertNumQueries

from runledger_django import RunledgerError
from runledger_django.services.claim import claim_jobs, complete_and_claim
from runledger_django.worker.registry import Registry
from runledger_django.worker.runtime import Worker, WorkerConfig
from tests.worker.conftest import LEASE, TYPE, WORKER, Enqueue, claim_one, job_row, other_lease
from tests.worker.test_poison_jobs import attempt_one_short_of_the_bound

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)
def test_complete_and_claim__successes_recorded_and_next_jobs_leased_in_one_transaction(
    enqueue: Enqueue, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    ids = [enqueue() for _ in range(4)]
    done = claim_jobs([TYPE], worker_id=WORKER, limit=2, lease_seconds=LEASE)

    with django_assert_num_queries(1):
        recorded, claimed = complete_and_claim(
            [(job.lease, None) for job in done], [TYPE], limit=2, lease_seconds=LEASE
        )

    assert recorded == {job.lease.job_id for job in done}
    assert {job.lease.job_id for job in claimed} == set(ids) - recorded
    finished = {job_row(job_id)["finished_at"] for job_id in recorded}
    statuses = {job_row(job.lease.job_id)["status"] for job in claimed}
    # now() is the transaction's start: the successes and the claim share one.
    assert finished == {job.claimed_at for job in claimed} and statuses == {"LEASED"}
    assert {job.lease.worker_id for job in claimed} == {WORKER}


def test_complete_and_claim__a_refused_lease__not_recorded_the_claim_still_made(
    enqueue: Enqueue,
) -> None:
    enqueue()
    enqueue()
    lease = claim_one().lease
    stale = other_lease(lease, attempt=lease.attempt + 1)

    recorded, claimed = complete_and_claim([(stale, None)], [TYPE], limit=1, lease_seconds=LEASE)

    assert recorded == set()
    assert job_row(lease.job_id)["status"] == "LEASED"
    assert len(claimed) == 1 and claimed[0].lease.job_id != lease.job_id


def test_complete_and_claim__the_claim_fails__the_successes_are_not_recorded_either(
    enqueue: Enqueue,
) -> None:
    enqueue()
    poisoned = enqueue()
    lease = claim_one().lease
    attempt_one_short_of_the_bound(poisoned)

    with pytest.raises(RunledgerError):
        complete_and_claim([(lease, None)], [TYPE], limit=1, lease_seconds=LEASE)

    assert job_row(lease.job_id)["status"] == "LEASED"
    assert job_row(poisoned)["status"] == "PENDING"


@pytest.mark.django_db(transaction=True)
def test_worker__jobs_claimed_by_a_success_while_stopping__handed_back_not_run(
    enqueue: Enqueue,
) -> None:
    ids = {enqueue(), enqueue()}
    worker = Worker(
        WorkerConfig(job_types=[TYPE], concurrency=2, worker_id=f"refill-{uuid.uuid4().hex[:8]}"),
        Registry(),
        stop=threading.Event(),
    )
    claimed = claim_jobs([TYPE], worker_id=worker.config.worker_id, limit=2, lease_seconds=LEASE)
    worker.background_stop.set()  # the worker began to stop while the statement ran

    worker._refilled(claimed, 2)

    assert worker.executions() == [] and worker.tasks.empty()
    assert {job_row(job_id)["status"] for job_id in ids} == {"PENDING"}
    assert worker.deep  # the claim came back full; stopping decides, not the queue


def test_worker__refill__none_asked_when_the_queue_is_shallow_or_the_worker_stops() -> None:
    worker = Worker(WorkerConfig(job_types=[TYPE]), Registry(), stop=threading.Event())
    assert worker._refill_job_types() is None  # no full claim seen yet
    worker.deep = True
    assert worker._refill_job_types() == [TYPE]
    worker.stop.set()
    assert worker._refill_job_types() is None
