"""Per-type max_concurrency in the claim (docs/queue-control.md; reference 6, checklist 37-41).

The single-session tests run in the test's transaction: each claim there is a savepoint of it,
and the advisory lock of a limited claim is re-entrant for one session. The concurrent ones
are ``transaction=True``: real claimers in threads, each on its own connection, and real
in-process workers whose LEASED jobs another session samples while they run.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runledger_django import JobContext, enqueue_job, set_job_type_limits
from runledger_django.domain import ClaimedJob
from runledger_django.models import Job, JobAttempt, JobDefinition
from runledger_django.services import claim as claim_service
from runledger_django.services.claim import claim_jobs, complete_and_claim
from runledger_django.services.lifecycle import complete_job_success
from runledger_django.services.reaper import reap_expired_leases
from tests.conftest import MakeDefinition, OpenSession, run_sql
from tests.worker.conftest import (
    LEASE,
    TYPE,
    WORKER,
    Enqueue,
    SpawnWorker,
    expire_lease,
    make_due,
    race_claims,
    wait_until,
)
from tests.worker.test_worker_loop import StartWorker, gates, start_worker  # noqa: F401
from tests.worker_app import BLOCK

OTHER = "jobs.test.other"


@pytest.fixture(autouse=True)
def fresh_hints() -> Iterator[None]:
    """The claim's per-process hint (which lists held a limited type) starts empty."""
    claim_service._limited_hints.clear()
    yield
    claim_service._limited_hints.clear()


@pytest.fixture
def other_type(make_definition: MakeDefinition) -> None:
    make_definition(OTHER)


def limit_type(job_type: str = TYPE, **limits: Any) -> None:
    JobDefinition.objects.filter(job_type=job_type).update(**limits)


def leased(job_type: str = TYPE) -> int:
    return Job.objects.filter(job_type=job_type, status="LEASED").count()


def claim(limit: int, types: list[str] | None = None, worker_id: str = WORKER) -> list[ClaimedJob]:
    return claim_jobs(types or [TYPE], worker_id=worker_id, limit=limit, lease_seconds=LEASE)


def finish(job: ClaimedJob) -> None:
    complete_job_success(job.lease)


# --- one session ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_claim__max_concurrency__leases_at_most_the_remaining_slots(enqueue: Enqueue) -> None:
    limit_type(max_concurrency=2)
    jobs = [enqueue() for _ in range(5)]
    before = {row["id"]: row for row in Job.objects.filter(id__in=jobs).values()}

    assert len(claim(4)) == 2
    assert claim(4) == []

    assert leased() == 2
    # Over the limit: PENDING, untouched (no attempt spent, next_run_at as enqueued).
    for row in Job.objects.filter(id__in=jobs, status="PENDING").values():
        assert (row["attempt"], row["next_run_at"]) == (0, before[row["id"]]["next_run_at"])


@pytest.mark.django_db
def test_claim__limited_and_unlimited_types__others_fill_the_batch_limited_get_first_pick(
    enqueue: Enqueue, other_type: None
) -> None:
    limit_type(max_concurrency=2)
    for _ in range(4):
        enqueue()
    for _ in range(20):
        enqueue(job_type=OTHER)

    first = claim(4, [TYPE, OTHER])
    second = claim(4, [TYPE, OTHER])

    assert [job.job_type for job in first].count(TYPE) <= 2
    # Once a claim has seen the limited type, it takes its free slots first: never starved.
    assert [job.job_type for job in second][:2] == [TYPE, TYPE] or leased() == 2
    assert (leased(), leased(OTHER), len(first) + len(second)) == (2, 6, 8)


@pytest.mark.django_db
def test_complete_and_claim__limited_type__refill_respects_the_limit(enqueue: Enqueue) -> None:
    limit_type(max_concurrency=2)
    for _ in range(5):
        enqueue()
    running = claim(5)
    assert len(running) == 2

    done, refill = complete_and_claim(
        [(running[0].lease, None)], [TYPE], limit=3, lease_seconds=LEASE
    )

    assert done == {running[0].lease.job_id}
    assert len(refill) == 1
    assert leased() == 2


@pytest.mark.django_db
def test_claim__limit_raised_applies_at_next_claim_lowered_never_preempts(
    enqueue: Enqueue,
) -> None:
    limit_type(max_concurrency=2)
    for _ in range(6):
        enqueue()
    running = claim(6)
    assert len(running) == 2

    set_job_type_limits(TYPE, max_concurrency=1)
    assert claim(6) == []
    assert leased() == 2  # nothing pre-empted
    finish(running[0])
    assert claim(6) == []  # one still runs: at the lowered limit
    finish(running[1])
    assert len(claim(6)) == 1

    set_job_type_limits(TYPE, max_concurrency=4)
    assert len(claim(6)) == 3
    assert leased() == 4


@pytest.mark.django_db
def test_claim__expired_lease_holds_its_slot_until_the_reaper_frees_it(enqueue: Enqueue) -> None:
    limit_type(max_concurrency=1)
    first = enqueue()
    enqueue()
    [job] = claim(2)
    assert job.lease.job_id == first
    expire_lease(first)

    # Its handler may still run: the slot stays taken until the reaper moves the job.
    assert claim(2) == []
    report = reap_expired_leases([TYPE])
    assert report.retried == 1  # the reaper is never held back by the limit
    make_due(first)

    assert len(claim(2)) == 1
    assert leased() == 1


@pytest.mark.django_db
def test_claim__paused_limited_type__not_claimed(enqueue: Enqueue) -> None:
    limit_type(max_concurrency=3, paused_at=run_sql("SELECT now()")[0][0])
    enqueue()
    assert claim(2) == []


@pytest.mark.django_db(transaction=True)
def test_claim__unlimited_types__one_statement_no_advisory_lock(
    enqueue: Enqueue, other_type: None, django_assert_num_queries: Any
) -> None:
    """The fast path: unlimited, unpaused types cost the claim statement alone (outside a
    transaction, one round trip), with no lock but the rows' own."""
    limit_type(OTHER, paused_at=run_sql("SELECT now()")[0][0])
    for _ in range(3):
        enqueue()
    with django_assert_num_queries(1) as captured:
        assert len(claim(3, [TYPE, OTHER])) == 3
    sql = captured.captured_queries[0]["sql"]
    assert "runledger:claim_jobs" in sql
    assert "advisory" not in sql


# --- concurrent claimers ----------------------------------------------------------------------

CLAIMERS = 40
"""Concurrent claimers: the reference's 100 would take every connection of a shared test
server (max_connections is 100 by default); 40 still race for 3 slots."""


@pytest.mark.django_db(transaction=True)
def test_claim__many_concurrent_claimers__limit_holds_losers_claim_other_work(
    enqueue: Enqueue, other_type: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One process serialises its own limited claims; these threads stand in for separate
    # processes, so they race in the database for the type's lock and its slots.
    monkeypatch.setattr(claim_service, "_limited_claims", contextlib.nullcontext())
    limit_type(max_concurrency=3)
    for _ in range(3 * CLAIMERS):
        enqueue()
        enqueue(job_type=OTHER)
    # Every claimer has seen the limited type before: each gives it first pick, so all race.
    claim_service._limited_hints[("default", (TYPE, OTHER))] = True
    results, errors = race_claims(
        CLAIMERS, lambda n: claim(2, [TYPE, OTHER], worker_id=f"claimer-{n}")
    )

    assert errors == []
    # The first claimer to take the type's lock leases a whole batch (2 of the 3 slots); the
    # third slot goes to a claimer that comes after its commit, if any does: one that finds the
    # lock taken skips the type this round. The limit holds either way.
    raced = leased()
    assert 2 <= raced <= 3
    assert sum(job.job_type == TYPE for batch in results for job in batch) == raced
    # A claimer that lost the race for a slot (or its lock) filled its batch with other work.
    assert sorted(len(batch) for batch in results) == [2] * CLAIMERS
    # Whatever the race left free, the next claim takes, and nothing beyond the limit.
    assert len(claim(3)) == 3 - raced
    assert leased() == 3


# --- many workers -------------------------------------------------------------------------


class Running:
    """Handler-side count of the limited type's running handlers, and its peak."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.now -= 1


def sample_leased(
    observer: psycopg.Connection[Any], stop: threading.Event, samples: list[int]
) -> None:
    while not stop.is_set():
        row = observer.execute(
            "SELECT count(*) FROM runledger_job_queue WHERE job_type = %s AND status = 'LEASED'",
            [TYPE],
        ).fetchone()
        assert row is not None
        samples.append(int(row[0]))


@pytest.mark.django_db(transaction=True)
def test_workers__max_concurrency_2__never_more_than_2_leased_at_any_sampled_instant(
    enqueue: Enqueue,
    other_type: None,
    start_worker: StartWorker,  # noqa: F811
    open_session: OpenSession,
) -> None:
    """4 workers x 8 threads, 20 long jobs of a type limited to 2, and a stream of other jobs:
    another session samples the LEASED count continuously; the handlers count themselves."""
    limit_type(max_concurrency=2)
    running = Running()

    def long_job(job: JobContext) -> None:
        with running:
            time.sleep(0.2)  # the work itself: a slow partner API

    for _ in range(20):
        enqueue()
    for _ in range(60):
        enqueue(job_type=OTHER)
    samples: list[int] = []
    stop = threading.Event()
    sampler = threading.Thread(target=sample_leased, args=(open_session(), stop, samples))
    sampler.start()
    try:
        workers = [
            start_worker({TYPE: long_job, OTHER: lambda job: None}, concurrency=8) for _ in range(4)
        ]
        wait_until(
            lambda: Job.objects.filter(status="SUCCEEDED").count() == 80,
            timeout=120,
            what="every job succeeded",
        )
    finally:
        stop.set()
        sampler.join(30)
    for worker in workers:
        worker.finish()

    assert max(samples) == 2, max(samples)  # reached, never passed
    assert running.peak == 2
    assert len(samples) > 50  # the sampler really watched the run


# --- a dead worker's slot ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_worker_sigkilled__its_slot_freed_by_the_reaper__the_next_job_runs(
    app_definitions: None, spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    """max_concurrency=1: worker A is SIGKILLed while its job runs, so the slot stays taken
    (its lease may still be live). Worker B's reaper, never held back by the limit, retries the
    expired lease once it runs out; the freed slot goes to the next due job."""
    log, release = tmp_path / "starts.log", tmp_path / "release"
    payload = {"log": str(log), "release": str(release)}
    limit_type(BLOCK, max_concurrency=1)
    first_job = enqueue_job(BLOCK, payload).job_id
    second_job = enqueue_job(BLOCK, payload).job_id
    fast = {"WORKER_POLL_INTERVAL": 0.2, "REAPER_INTERVAL_SECONDS": 0.5, "LEASE_SECONDS": 2}
    try:
        first = spawn_worker("--concurrency", "4", **fast)
        wait_until(lambda: log.exists() and log.read_text(), what="worker A's handler")
        first.signal(signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
        assert leased(BLOCK) == 1

        second = spawn_worker("--concurrency", "4", **fast)
        wait_until(
            lambda: len(log.read_text().splitlines()) == 2, what="worker B's start of the next job"
        )
        started = [line.split()[0] for line in log.read_text().splitlines()]
        assert started == [str(first_job), str(second_job)]
        assert JobAttempt.objects.get(job_id=first_job).failure_kind == "LEASE_EXPIRED"
        assert leased(BLOCK) == 1
    finally:
        release.touch()
    wait_until(lambda: job_status(second_job) == "SUCCEEDED", what="the second job")
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def job_status(job_id: uuid.UUID) -> str:
    return str(Job.objects.values_list("status", flat=True).get(id=job_id))
