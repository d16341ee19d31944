"""The harness's resource check against real concurrent claims: a claim statement that found a
key free in its snapshot but inserted the claim row only after another attempt of that key had
come and gone records a leased_at before that whole attempt, and the check must judge the order
the claim rows really had (the event ids), not those statement times."""

from __future__ import annotations

from typing import Any

import pytest

from reliability.job_checks import JobWorld, _check_resources, _Context, epoch
from reliability.ledger import read_ledger
from runledger_django import enqueue_job
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_success
from tests.conftest import (
    InThread,
    MakeDefinition,
    Observer,
    OpenSession,
    run_sql,
    wait_for_lock_wait,
)

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = "jobs.test.resource_order"
KEY = "printer-1"
PARK = (4242, 7)


def _park_claims_of(job_id: str) -> None:
    """Make the INSERT of ``job_id``'s claim row wait (before its conflict check) until the
    holder of PARK lets go: a claim statement slowed after its snapshot."""
    run_sql(
        "CREATE FUNCTION runledger_test_park_claim() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF NEW.job_id = '{job_id}' THEN PERFORM pg_advisory_xact_lock_shared({PARK[0]},"
        f" {PARK[1]}); END IF; RETURN NEW; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_park_claim BEFORE INSERT"
        " ON runledger_job_execution_resource_claims"
        " FOR EACH ROW EXECUTE FUNCTION runledger_test_park_claim()"
    )


def _unpark() -> None:
    run_sql(
        "DROP TRIGGER IF EXISTS runledger_test_park_claim ON runledger_job_execution_resource_claims"
    )
    run_sql("DROP FUNCTION IF EXISTS runledger_test_park_claim()")


def _world(ids: list[str]) -> JobWorld:
    world = JobWorld()
    world.add_ledger(read_ledger(ids), retained=False)
    return world


def test_check_resources__claim_slowed_after_its_snapshot__times_overlap_but_claims_in_order(
    make_definition: MakeDefinition,
    open_session: OpenSession,
    observer: Observer,
    in_thread: InThread,
) -> None:
    make_definition(TYPE)
    slow_job = str(enqueue_job(TYPE, {}, execution_resource_key=KEY, priority=1).job_id)
    _park_claims_of(slow_job)
    holder = open_session()
    holder.execute("SELECT pg_advisory_lock(%s, %s)", PARK)
    try:
        # The slow claim takes its snapshot (the key is free), locks its job, then waits.
        slow = in_thread(claim_jobs, [TYPE], worker_id="slow", limit=1, lease_seconds=60)
        wait_for_lock_wait(observer, "runledger:claim_jobs")
        # Meanwhile another worker leases the key for a job enqueued later, runs it, ends it.
        fast_job = str(enqueue_job(TYPE, {}, execution_resource_key=KEY, priority=50).job_id)
        [fast] = claim_jobs([TYPE], worker_id="fast", limit=1, lease_seconds=60)
        assert str(fast.lease.job_id) == fast_job
        complete_job_success(fast.lease, output={"n": 1})
        holder.execute("SELECT pg_advisory_unlock(%s, %s)", PARK)
        [claimed] = slow.result(timeout=30)
        assert str(claimed.lease.job_id) == slow_job
    finally:
        holder.execute("SELECT pg_advisory_unlock_all()")
        _unpark()

    world = _world([slow_job, fast_job])
    slow_attempt: dict[str, Any] = world.attempts[slow_job][0]
    fast_attempt: dict[str, Any] = world.attempts[fast_job][0]
    # By the statement times the slow lease began before the fast attempt and still runs.
    assert epoch(slow_attempt["leased_at"]) < epoch(fast_attempt["leased_at"])  # type: ignore[operator]
    assert epoch(fast_attempt["leased_at"]) < epoch(fast_attempt["finished_at"])  # type: ignore[operator]
    assert slow_attempt["finished_at"] is None
    complete_job_success(claimed.lease, output={"n": 2})
    world = _world([slow_job, fast_job])
    assert epoch(world.attempts[slow_job][0]["finished_at"]) > epoch(fast_attempt["finished_at"])  # type: ignore[operator]
    # The event ids give the claims' real order: the fast attempt ended before the slow one
    # leased.
    ids = {
        (event["job_id"], event["event_type"]): event["id"]
        for events in world.events.values()
        for event in events
    }
    assert ids[(fast_job, "SUCCEEDED")] < ids[(slow_job, "LEASED")]

    context = _Context(world)
    _check_resources(context)
    assert context.violations == []
    assert context.counts["keyed overlaps in time, sequential by the claim"] == 1
    assert context.counts["keyed attempts"] == 2
    # Judged by the times alone (a record without event ids), the same claims look shared.
    for events in world.events.values():
        for event in events:
            del event["id"]
    context = _Context(world)
    _check_resources(context)
    assert context.violations == [
        f"resource {KEY!r} was leased by job {fast_job} while job {slow_job} still held it"
    ]


def test_check_resources__lease_events_out_of_claim_order__reported(
    make_definition: MakeDefinition,
) -> None:
    """The same check on ids that say two attempts held the key at once."""
    make_definition(TYPE)
    first = str(enqueue_job(TYPE, {}, execution_resource_key=KEY).job_id)
    [lease] = claim_jobs([TYPE], worker_id="w", limit=1, lease_seconds=60)
    complete_job_success(lease.lease, output=None)
    second = str(enqueue_job(TYPE, {}, execution_resource_key=KEY).job_id)
    [lease] = claim_jobs([TYPE], worker_id="w", limit=1, lease_seconds=60)
    complete_job_success(lease.lease, output=None)
    world = _world([first, second])
    context = _Context(world)
    _check_resources(context)
    assert context.violations == []
    # Plant: the second's LEASED event drawn before the first's SUCCEEDED one.
    [leased] = [e for e in world.events[second] if e["event_type"] == "LEASED"]
    [succeeded] = [e for e in world.events[first] if e["event_type"] == "SUCCEEDED"]
    leased["id"] = succeeded["id"] - 1
    context = _Context(world)
    _check_resources(context)
    assert context.violations == [
        f"resource {KEY!r} was leased by job {second} while job {first} still held it"
    ]
