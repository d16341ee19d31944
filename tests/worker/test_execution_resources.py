"""Execution-resource exclusivity: at most one LEASED job per key (reference 1.7, 3 and 10.3).

Upstream: job_execution_resources.rs. A keyed job is leased only together with the key's
durable claim row (a trigger refuses a lease without it); the claim follows the lease and is
deleted by every end of it, except a live cancellation, which keeps it until the cancelled
lease would have expired. Races use real concurrent connections (threads, each with its own).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections, transaction

from runledger_django import ReadScope, RunledgerError, cancel_job
from runledger_django.db.classify import classify
from runledger_django.domain import FailureKind, JobFailure, JobLease
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import (
    complete_job_failure,
    complete_job_success,
    hand_back_leases,
)
from runledger_django.services.reaper import reap_expired_leases
from tests.conftest import InThread, MakeDefinition, run_sql
from tests.worker.conftest import (
    TYPE,
    WORKER,
    Enqueue,
    expire_lease,
    job_row,
    resource_claims,
)

pytestmark = pytest.mark.django_db

OTHER_TYPE = "jobs.test.other"


def claim(limit: int = 10, *, worker_id: str = WORKER, types: list[str] | None = None) -> list[Any]:
    return claim_jobs(types or [TYPE], worker_id=worker_id, limit=limit, lease_seconds=60)


def claimed_ids(limit: int = 10, **kwargs: Any) -> list[uuid.UUID]:
    return [job.lease.job_id for job in claim(limit, **kwargs)]


def leased_keys() -> list[str | None]:
    return [
        row[0]
        for row in run_sql(
            "SELECT execution_resource_key FROM runledger_job_queue WHERE status = 'LEASED' "
            "ORDER BY execution_resource_key"
        )
    ]


@pytest.mark.parametrize("key", [" ", "\u3000", "\t\n", "", "r" * 513], ids=repr)
def test_enqueue_job__blank_or_long_resource_key__rejected(enqueue: Enqueue, key: str) -> None:
    with pytest.raises(RunledgerError) as raised:
        enqueue(execution_resource_key=key)
    assert raised.value.code == "job.invalid_execution_resource_key"


def test_lease__keyed_job_without_its_durable_claim__refused_by_the_database(
    enqueue: Enqueue,
) -> None:
    """database_rejects_a_resource_lease_without_its_durable_claim: a writer that bypasses
    the claim (or holds a claim row of another lease) cannot lease a keyed job."""
    job_id = enqueue(execution_resource_key="printer-1")
    lease_sql = (
        "UPDATE runledger_job_queue SET status = 'LEASED', attempt = 1, worker_id = 'rogue', "
        "lease_expires_at = now() + interval '1 minute' WHERE id = %s"
    )

    def refused() -> tuple[str | None, str | None]:
        with pytest.raises(DatabaseError) as raised, transaction.atomic():
            run_sql(lease_sql, [job_id])
        error = classify(raised.value, "lease")
        assert error.code == "db.business_rule_violation"
        return error.sqlstate, error.constraint

    assert refused() == ("23514", "chk_job_queue_execution_resource_claim_required")
    run_sql(
        "INSERT INTO runledger_job_execution_resource_claims "
        "(resource_key, job_id, run_number, attempt, worker_id, lease_expires_at) "
        "VALUES ('printer-1', %s, 1, 1, 'someone-else', now() + interval '1 minute')",
        [job_id],
    )
    assert refused() == ("23514", "chk_job_queue_execution_resource_claim_required")
    assert job_row(job_id)["status"] == "PENDING"


@pytest.mark.django_db(transaction=True)
def test_claim_jobs__concurrent_claimers__exactly_one_owns_the_resource(
    enqueue: Enqueue,
) -> None:
    """one_of_one_hundred_concurrent_claimers_owns_the_resource: up to 100 claimers, each on
    its own connection, released together at a barrier, race for jobs of one key; exactly
    one job is leased. The count is 100 unless the server has fewer free connection slots
    (max_connections is 100 here, shared with whatever else is connected), in which case
    every free slot but a margin is used."""
    ids = {enqueue(execution_resource_key="shared") for _ in range(5)}
    free = run_sql(
        "SELECT current_setting('max_connections')::int - count(*) FROM pg_stat_activity "
        "WHERE backend_type = 'client backend'"
    )[0][0]
    claimers = min(100, free - 6)
    assert claimers >= 20, f"only {free} free connection slots on the server"
    connection.close()  # one slot more for the claimers
    ready = threading.Barrier(claimers, timeout=120)
    results: list[list[uuid.UUID]] = []
    errors: list[BaseException] = []

    def claimer(number: int) -> None:
        try:
            connections["default"].ensure_connection()
            ready.wait()
            results.append(claimed_ids(limit=1, worker_id=f"claimer-{number}"))
        except BaseException as exc:  # reported below with the test's own assertion
            errors.append(exc)
            ready.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(claimers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)

    assert errors == []
    winners = [job_id for batch in results for job_id in batch]
    assert len(results) == claimers
    assert len(winners) == 1
    assert winners[0] in ids
    [claim_row] = resource_claims()
    assert (claim_row["resource_key"], claim_row["job_id"]) == ("shared", winners[0])
    assert leased_keys() == ["shared"]


def test_claim_jobs__duplicate_keys__do_not_underfill_a_mixed_batch(enqueue: Enqueue) -> None:
    """duplicate_resource_keys_do_not_underfill_a_mixed_claim_batch: five jobs of one key come
    first in claim order; the batch of six still fills with the key's head, the unkeyed jobs
    and the other keys."""
    dense = [enqueue(priority=9, execution_resource_key="dense") for _ in range(5)]
    unkeyed = [enqueue(priority=5) for _ in range(3)]
    other = [enqueue(priority=1, execution_resource_key=f"other-{n}") for n in range(2)]

    assert claimed_ids(limit=6) == [dense[0], *unkeyed, *other]
    assert leased_keys() == ["dense", "other-0", "other-1", None, None, None]


def test_claim_jobs__claimed_dense_key__does_not_starve_an_unrelated_resource(
    enqueue: Enqueue,
) -> None:
    """a_claimed_dense_key_does_not_starve_an_unrelated_resource: hundreds of higher-priority
    jobs wait behind a held key; the next claim still finds the unrelated key's job."""
    held = enqueue(priority=50, execution_resource_key="dense")
    for _ in range(300):
        enqueue(priority=50, execution_resource_key="dense")
    unrelated = enqueue(priority=1, execution_resource_key="unrelated")
    assert claimed_ids(limit=1) == [held]

    assert claimed_ids(limit=1) == [unrelated]
    assert claimed_ids(limit=5) == []


def test_claim_jobs__identical_key_in_two_organizations__one_owner_globally(
    enqueue: Enqueue,
) -> None:
    """identical_resource_keys_coordinate_globally_across_organizations."""
    first = enqueue(organization_id=uuid.uuid4(), execution_resource_key="printer-1")
    second = enqueue(organization_id=uuid.uuid4(), execution_resource_key="printer-1")
    global_job = enqueue(execution_resource_key="printer-1")

    [owner] = claim(limit=10)
    assert owner.lease.job_id == first
    complete_job_success(owner.lease)

    assert claimed_ids(limit=10) == [second]
    assert job_row(global_job)["status"] == "PENDING"


@pytest.mark.django_db(transaction=True)
def test_claim_jobs__filtered_claimers__one_deadlock_free_key_order(
    enqueue: Enqueue, make_definition: MakeDefinition, in_thread: InThread
) -> None:
    """filtered_claimers_acquire_resource_keys_in_one_deadlock_free_order: two claimers with
    different type filters see the same keys in opposite claim orders; both insert claim rows
    in key order, so rounds of simultaneous claims never deadlock and never lease a key
    twice."""
    make_definition(OTHER_TYPE)
    keys = [f"key-{n:02d}" for n in range(12)]
    rounds = 15

    def fill() -> None:
        for priority, key in enumerate(keys):
            enqueue(priority=priority, execution_resource_key=key)
            enqueue(job_type=OTHER_TYPE, priority=len(keys) - priority, execution_resource_key=key)

    def claimer(types: list[str], start: threading.Barrier, done: threading.Barrier) -> int:
        leased = 0
        for _ in range(rounds):
            start.wait(60)
            batch = claim(limit=len(keys), worker_id=f"w-{types[0]}", types=types)
            leased += len(batch)
            done.wait(60)
            for job in batch:
                complete_job_success(job.lease)
        return leased

    start, done = threading.Barrier(3), threading.Barrier(3)
    fill()
    futures = [
        in_thread(claimer, [TYPE], start, done),
        in_thread(claimer, [OTHER_TYPE], start, done),
    ]
    for _ in range(rounds):
        start.wait(60)
        done.wait(60)
        keyed = leased_keys()
        assert len(keyed) == len(set(keyed)), keyed  # at most one lease per key
    totals = [future.result(timeout=60) for future in futures]

    assert sum(totals) == 2 * len(keys)


def test_claim_jobs__expired_lease__keeps_the_key_until_reaped_then_frees_it(
    enqueue: Enqueue,
) -> None:
    """an_expired_lease_cannot_leave_its_execution_resource_blocked: the expired owner still
    holds the key (its handler may still run) until the reaper moves it; then the next job of
    the key is claimable at once."""
    owner = enqueue(execution_resource_key="printer-1")
    waiting = enqueue(execution_resource_key="printer-1")
    claim(limit=1)
    expire_lease(owner)

    assert claimed_ids() == []
    report = reap_expired_leases([TYPE])

    assert report.retried == 1
    assert resource_claims() == []
    assert claimed_ids(limit=1) == [waiting]


def test_reap_expired_leases__bounded_batch__keeps_unreaped_owners_keys(
    enqueue: Enqueue,
) -> None:
    """bounded_reaper_does_not_release_a_resource_before_its_owner_is_reaped."""
    first = enqueue(execution_resource_key="a")
    second = enqueue(execution_resource_key="b")
    waiting = enqueue(execution_resource_key="b")
    claim(limit=2)
    run_sql(
        "UPDATE runledger_job_queue SET lease_expires_at = now() - interval '2 minutes' "
        "WHERE id = %s",
        [first],
    )
    expire_lease(second)

    report = reap_expired_leases([TYPE], limit=1)

    assert (report.retried, report.batch_was_full) == (1, True)
    assert [row["resource_key"] for row in resource_claims()] == ["b"]
    assert job_row(second)["status"] == "LEASED"
    assert waiting not in claimed_ids()


def _fail(lease: JobLease, kind: FailureKind) -> None:
    complete_job_failure(
        lease,
        JobFailure(kind=kind, code="job.handler_failed", message="m", policy_retry_delay_ms=1000),
    )


def _reap_retry(lease: JobLease) -> None:
    expire_lease(lease.job_id)
    reap_expired_leases([TYPE])


def _reap_dead_letter(lease: JobLease) -> None:
    run_sql("UPDATE runledger_job_queue SET max_attempts = 1 WHERE id = %s", [lease.job_id])
    _reap_retry(lease)


def _cancel_expired(lease: JobLease) -> None:
    expire_lease(lease.job_id)
    cancel_job(lease.job_id, scope=ReadScope.GLOBAL)


LEASE_EXITS: dict[str, Callable[[JobLease], object]] = {
    "success": lambda lease: complete_job_success(lease),
    "retry": lambda lease: _fail(lease, FailureKind.RETRYABLE),
    "dead-letter": lambda lease: _fail(lease, FailureKind.TERMINAL),
    "hand-back": lambda lease: hand_back_leases([lease], reason="WORKER_SHUTDOWN"),
    "reaper-retry": _reap_retry,
    "reaper-dead-letter": _reap_dead_letter,
    "cancel-expired": _cancel_expired,
}


@pytest.mark.parametrize("exit_by", list(LEASE_EXITS))
def test_lease_exit__every_non_cancellation_exit__releases_exactly_its_own_claim(
    enqueue: Enqueue, exit_by: str
) -> None:
    """every_non_cancellation_lease_exit_releases_the_exact_resource_owner: the key of the
    lease that ends is free again; a neighbour's claim is untouched."""
    job_id = enqueue(execution_resource_key="mine")
    neighbour = enqueue(execution_resource_key="neighbour")
    [mine, theirs] = claim(limit=2)
    assert (mine.lease.job_id, theirs.lease.job_id) == (job_id, neighbour)

    LEASE_EXITS[exit_by](mine.lease)

    assert [(row["resource_key"], row["job_id"]) for row in resource_claims()] == [
        ("neighbour", neighbour)
    ]
    follower = enqueue(execution_resource_key="mine")
    assert claimed_ids(limit=5) == [
        *([job_id] if exit_by == "hand-back" else []),
        *([] if exit_by == "hand-back" else [follower]),
    ]


def test_cancel_job__live_lease__holds_the_resource_until_the_lease_is_quiescent(
    enqueue: Enqueue,
) -> None:
    """live_cancellation_holds_resource_until_the_lease_is_quiescent: the cancelled handler
    may still run until its old lease expires, so no other job of the key starts before."""
    owner = enqueue(execution_resource_key="printer-1")
    follower = enqueue(execution_resource_key="printer-1")
    claim(limit=1)
    cancel_job(owner, scope=ReadScope.GLOBAL)

    assert claimed_ids() == []
    assert reap_expired_leases([TYPE]).released_resources == 0
    assert resource_claims()[0]["release_after"] is not None

    # The old lease expires: the reaper's cleanup releases the key.
    run_sql(
        "UPDATE runledger_job_execution_resource_claims "
        "SET release_after = now() - interval '1 second'"
    )
    assert reap_expired_leases([TYPE]).released_resources == 1
    assert resource_claims() == []
    assert claimed_ids() == [follower]
    assert job_row(owner)["status"] == "CANCELED"


def test_enqueue_then_claim__unkeyed_jobs__never_held_back_by_keyed_ones(
    enqueue: Enqueue,
) -> None:
    held = enqueue(priority=9, execution_resource_key="k")
    blocked = [enqueue(priority=9, execution_resource_key="k") for _ in range(3)]
    unkeyed = enqueue(priority=0)
    assert claimed_ids(limit=1) == [held]

    assert claimed_ids(limit=10) == [unkeyed]
    assert all(job_row(job_id)["status"] == "PENDING" for job_id in blocked)
