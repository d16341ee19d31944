"""Claiming due jobs (reference 3) and creating definitions for registered handlers.

Upstream: queue_lease_validation.rs. The claim is one statement: candidate selection with
FOR UPDATE SKIP LOCKED, the resource-claim insert, the lease (and running mark), the attempt
rows and the LEASED events; any failure among them rolls all of it back.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from pytest_django import DjangoAssertNumQueries

from runledger_django import RunledgerError
from runledger_django.domain import JobDefaults
from runledger_django.models import JobDefinition
from runledger_django.services.claim import (
    claim_jobs,
    ensure_job_definitions,
    resource_head_window,
)
from runledger_django.services.lifecycle import complete_job_success
from runledger_django.worker.execution import Execution, execute
from runledger_django.worker.registry import Handler, Registry
from tests.conftest import InThread, MakeDefinition, OpenSession, run_sql
from tests.worker.conftest import (
    TYPE,
    WORKER,
    Enqueue,
    attempt_rows,
    claim_one,
    event_rows,
    event_types,
    job_row,
    resource_claims,
)
from tests.worker.plans import function_plans

pytestmark = pytest.mark.django_db

OTHER_TYPE = "jobs.test.other"


def claim(limit: int = 10, **kwargs: Any) -> list[uuid.UUID]:
    types = kwargs.pop("job_types", [TYPE])
    return [
        job.lease.job_id
        for job in claim_jobs(
            types, worker_id=kwargs.pop("worker_id", WORKER), limit=limit, lease_seconds=60
        )
    ]


# --- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [0, -1, 1.5, True, None, 86_401], ids=repr)
def test_claim_jobs__invalid_lease_duration__rejected_without_touching_pending_jobs(
    enqueue: Enqueue, django_assert_num_queries: DjangoAssertNumQueries, seconds: Any
) -> None:
    """claim_entrypoints_reject_non_positive_lease_duration_without_mutating_pending_jobs."""
    job_id = enqueue()
    before = job_row(job_id)

    with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
        claim_jobs([TYPE], worker_id=WORKER, limit=1, lease_seconds=seconds)

    assert (raised.value.code, raised.value.category) == (
        "job.invalid_lease_duration",
        "validation",
    )
    assert job_row(job_id) == before
    assert attempt_rows(job_id) == []


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"limit": 0}, "job.invalid_pagination"),
        ({"limit": 1001}, "job.invalid_pagination"),
        ({"worker_id": " "}, "job.invalid_argument"),
        ({"worker_id": "w" * 65}, "job.invalid_argument"),
        ({"worker_id": "a\x00"}, "job.invalid_argument"),
        ({"job_types": TYPE}, "job.invalid_argument"),
        ({"job_types": [" "]}, "job.invalid_job_type"),
    ],
    ids=lambda value: repr(value)[:30],
)
def test_claim_jobs__invalid_arguments__rejected_before_sql(
    enqueue: Enqueue,
    django_assert_num_queries: DjangoAssertNumQueries,
    kwargs: dict[str, Any],
    code: str,
) -> None:
    enqueue()
    arguments: dict[str, Any] = {
        "job_types": [TYPE],
        "worker_id": WORKER,
        "limit": 1,
        "lease_seconds": 60,
        **kwargs,
    }
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
        claim_jobs(arguments.pop("job_types"), **arguments)
    assert raised.value.code == code


def test_claim_jobs__no_job_types__nothing_claimed_without_sql(
    enqueue: Enqueue, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    enqueue()
    with django_assert_num_queries(0):
        assert claim_jobs([], worker_id=WORKER, limit=5, lease_seconds=60) == []


# --- what is claimed, in what order -------------------------------------------------------------


def test_claim_jobs__order__priority_then_next_run_at_then_creation(
    enqueue: Enqueue, make_definition: MakeDefinition
) -> None:
    make_definition(OTHER_TYPE)
    low = enqueue(priority=1)
    late = enqueue(priority=5)
    early = enqueue(priority=5)
    run_sql(
        "UPDATE runledger_job_queue SET next_run_at = now() - interval '1 minute' WHERE id = %s",
        [early],
    )
    high = enqueue(priority=9)
    enqueue(job_type=OTHER_TYPE, priority=100)
    future = enqueue(priority=100, next_run_at=run_sql("SELECT now() + interval '1 hour'")[0][0])

    assert claim(limit=2) == [high, early]
    assert claim(limit=10) == [late, low]
    assert job_row(future)["status"] == "PENDING"


def test_claim_jobs__limit__at_most_that_many(enqueue: Enqueue) -> None:
    ids = [enqueue() for _ in range(5)]

    assert claim(limit=3) == ids[:3]
    assert claim(limit=3) == ids[3:]
    assert claim(limit=3) == []


def test_claim_jobs__event_insert_fails__every_phase_rolled_back(enqueue: Enqueue) -> None:
    """claim_rolls_back_all_phase_writes_when_event_recording_fails: a CHECK that refuses the
    LEASED event (added inside the test transaction, so it vanishes with it) makes the claim
    fail, and no lease, attempt row, resource claim or event of it remains."""
    keyed = enqueue(execution_resource_key="printer-1")
    plain = enqueue()
    before = {job_id: (job_row(job_id), event_rows(job_id)) for job_id in (keyed, plain)}
    run_sql(
        "ALTER TABLE runledger_job_events ADD CONSTRAINT test_refuse_leased "
        "CHECK (event_type <> 'LEASED') NOT VALID"
    )

    with pytest.raises(RunledgerError) as raised:
        claim(limit=10)

    assert (raised.value.sqlstate, raised.value.constraint) == ("23514", "test_refuse_leased")
    assert {job_id: (job_row(job_id), event_rows(job_id)) for job_id in (keyed, plain)} == before
    assert attempt_rows(keyed) == attempt_rows(plain) == []
    assert resource_claims() == []


@pytest.fixture
def refuse_leased_events() -> Iterator[None]:
    """A trigger that fails every LEASED event insert, dropped at teardown."""
    run_sql(
        "CREATE FUNCTION runledger_test_refuse_leased() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF NEW.event_type = 'LEASED' THEN RAISE EXCEPTION 'no leases today'; END IF;"
        " RETURN NEW; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_refuse_leased BEFORE INSERT ON runledger_job_events "
        "FOR EACH ROW EXECUTE FUNCTION runledger_test_refuse_leased()"
    )
    yield
    run_sql("DROP TRIGGER runledger_test_refuse_leased ON runledger_job_events")
    run_sql("DROP FUNCTION runledger_test_refuse_leased()")


@pytest.mark.django_db(transaction=True)
def test_claim_jobs__own_transaction_event_insert_fails__every_phase_rolled_back(
    enqueue: Enqueue, refuse_leased_events: None
) -> None:
    """The same on the production path: the claim as one autocommit statement."""
    keyed = enqueue(execution_resource_key="printer-1")
    plain = enqueue()

    with pytest.raises(RunledgerError) as raised:
        claim(limit=10)

    assert raised.value.code == "db.query_failed"
    for job_id in (keyed, plain):
        row = job_row(job_id)
        assert (row["status"], row["attempt"], row["worker_id"]) == ("PENDING", 0, None)
        assert event_types(job_id) == ["ENQUEUED"]
        assert attempt_rows(job_id) == []
    assert resource_claims() == []
    assert not connection.in_atomic_block


@pytest.mark.django_db(transaction=True)
def test_claim_jobs__row_locked_by_another_session__skipped_not_waited_for(
    enqueue: Enqueue, open_session: OpenSession
) -> None:
    busy = enqueue()
    free = enqueue()
    holder = open_session(autocommit=False)
    holder.execute("SELECT 1 FROM runledger_job_queue WHERE id = %s FOR UPDATE", [busy])

    assert claim(limit=2) == [free]

    holder.rollback()
    assert claim(limit=2) == [busy]


@pytest.mark.django_db(transaction=True)
def test_claim_jobs__concurrent_claimers__split_the_queue_without_overlap(
    enqueue: Enqueue, in_thread: InThread
) -> None:
    ids = {enqueue() for _ in range(40)}
    start = threading.Barrier(4)

    def claimer(number: int) -> list[uuid.UUID]:
        start.wait(30)
        claimed: list[uuid.UUID] = []
        while batch := claim(limit=3, worker_id=f"claimer-{number}"):
            claimed += batch
        return claimed

    results = [in_thread(claimer, number) for number in range(4)]
    batches = [future.result(timeout=60) for future in results]

    everything = [job_id for batch in batches for job_id in batch]
    assert sorted(everything) == sorted(ids)
    assert len(set(everything)) == len(everything)


def test_resource_head_window__scales_with_claim_size_within_fixed_bounds() -> None:
    """resource_head_window_scales_with_claim_size_within_fixed_bounds."""
    assert [resource_head_window(n) for n in (1, 16, 17, 100, 256, 257, 1000)] == [
        1024,
        1024,
        1088,
        6400,
        16384,
        16384,
        16384,
    ]


def test_claimed_job__payload_python_cannot_decode__dead_lettered_as_invalid_row(
    enqueue: Enqueue,
) -> None:
    """jsonb holds numbers Python refuses to parse (past the int digit limit): the job is
    leased already, so its attempt dead-letters with job.invalid_persisted_row instead of
    crashing the worker."""
    job_id = enqueue()
    run_sql(
        "UPDATE runledger_job_queue SET payload = jsonb_build_object('n', repeat('9', 5000)::numeric) "
        "WHERE id = %s",
        [job_id],
    )
    claimed = claim_one()
    assert claimed.payload is None
    assert claimed.decode_error is not None

    calls: list[object] = []
    registry = Registry()
    registry.register(Handler(job_type=TYPE, func=calls.append))
    run = execute(Execution(claimed, lease_seconds=60), registry, using="default")

    assert (run.outcome, run.error_code) == ("dead_lettered", "job.invalid_persisted_row")
    assert calls == []
    assert job_row(job_id)["status"] == "DEAD_LETTERED"


# --- definitions for registered job types --------------------------------------------------------


def test_ensure_job_definitions__missing_types__created_with_handler_defaults(
    make_definition: MakeDefinition,
) -> None:
    make_definition(TYPE, max_attempts=9, default_timeout_seconds=5, is_enabled=False)

    created = ensure_job_definitions(
        [
            JobDefaults(job_type=TYPE, max_attempts=2, timeout_seconds=30, priority=7),
            JobDefaults(job_type=OTHER_TYPE, max_attempts=2, timeout_seconds=30, priority=7),
            JobDefaults(job_type="jobs.test.bare"),
        ]
    )

    assert created == [OTHER_TYPE, "jobs.test.bare"]
    rows = {
        row["job_type"]: row
        for row in JobDefinition.objects.values(
            "job_type", "max_attempts", "default_timeout_seconds", "default_priority", "is_enabled"
        )
    }
    # The operator's edits win over the code; new types get the handler's declared defaults,
    # and what a handler leaves out keeps the table's defaults.
    assert rows == {
        TYPE: {
            "job_type": TYPE,
            "max_attempts": 9,
            "default_timeout_seconds": 5,
            "default_priority": 100,
            "is_enabled": False,
        },
        OTHER_TYPE: {
            "job_type": OTHER_TYPE,
            "max_attempts": 2,
            "default_timeout_seconds": 30,
            "default_priority": 7,
            "is_enabled": True,
        },
        "jobs.test.bare": {
            "job_type": "jobs.test.bare",
            "max_attempts": 8,
            "default_timeout_seconds": 900,
            "default_priority": 100,
            "is_enabled": True,
        },
    }
    assert ensure_job_definitions([JobDefaults(job_type=OTHER_TYPE, max_attempts=4)]) == []


def test_ensure_job_definitions__nothing_registered__no_sql(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    with django_assert_num_queries(0):
        assert ensure_job_definitions([]) == []


def test_claim_jobs__disabled_definition__its_jobs_still_run(enqueue: Enqueue) -> None:
    """Disabling a definition stops new enqueues, not the jobs already queued."""
    job_id = enqueue()
    JobDefinition.objects.filter(job_type=TYPE).update(is_enabled=False)

    [claimed] = claim_jobs([TYPE], worker_id=WORKER, limit=1, lease_seconds=60)
    complete_job_success(claimed.lease)

    assert (claimed.lease.job_id, job_row(job_id)["status"]) == (job_id, "SUCCEEDED")


# --- plans ------------------------------------------------------------------------------------


def _claim_plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes += _claim_plan_nodes(child)
    return nodes


@pytest.mark.parametrize("analysed", [False, True], ids=["never-analysed", "analysed"])
def test_claim_jobs__large_backlog__walks_the_claim_index_and_stops_at_the_limit(
    make_definition: MakeDefinition, analysed: bool
) -> None:
    """No cliff: whatever the statistics say, in the generic plan the claim function runs with,
    the candidates come from idx_job_queue_claim in its own order and the claim stops at the
    limit, never a scan and sort of the whole backlog (before, a claim on a queue nobody had
    analysed read and sorted every pending job of its types)."""
    from runledger_django.db import lifecycle_queries

    make_definition(TYPE)
    make_definition(OTHER_TYPE)
    run_sql(
        "INSERT INTO runledger_job_queue (id, job_type, max_attempts) "
        "SELECT gen_random_uuid(), CASE WHEN g %% 2 = 0 THEN %s ELSE %s END, 3 "
        "FROM generate_series(1, 20000) AS g",
        [TYPE, OTHER_TYPE],
    )
    if analysed:
        run_sql("ANALYZE runledger_job_queue")
    params: dict[str, Any] = {
        "job_types": [TYPE],
        "limit": 8,
        "head_window": resource_head_window(8),
        "worker_id": WORKER,
        "lease_seconds": 60,
    }
    # The generic plan the function cached (and ran: the claim leases in the test's
    # transaction, which rolls back).
    plans = function_plans(lifecycle_queries.CLAIM_JOBS, params)
    assert len(plans) == 1, [(p["Query Text"][:300], p["Plan"]["Node Type"]) for p in plans]
    plan = plans[0]["Plan"]
    nodes = _claim_plan_nodes(plan)
    queue_scans = [
        node
        for node in nodes
        if node.get("Relation Name") == "runledger_job_queue" and node["Node Type"] != "ModifyTable"
    ]
    assert all(node["Node Type"] != "Seq Scan" for node in queue_scans), queue_scans
    assert any(node.get("Index Name") == "idx_job_queue_claim" for node in queue_scans)
    # The candidates' LockRows sits directly on the ordered index scan: no sort in between.
    lock_rows = [node for node in nodes if node["Node Type"] == "LockRows"]
    assert [node["Plans"][0]["Node Type"] for node in lock_rows] == ["Index Scan"]
