"""start_workflow: the graph checked before any SQL, the caller's transaction, keys, roots."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from runledger_django import RunledgerError, Workflow, start_workflow
from runledger_django.models import (
    Job,
    JobEvent,
    WorkflowActiveClaim,
    WorkflowRun,
    WorkflowStep,
    WorkflowStepDependency,
)
from tests.conftest import MakeDefinition, run_sql

pytestmark = pytest.mark.django_db

CHARGE = "wf.charge"
SHIP = "wf.ship"


@pytest.fixture
def definitions(make_definition: MakeDefinition) -> None:
    make_definition(CHARGE, max_attempts=4, default_timeout_seconds=30, default_priority=7)
    make_definition(SHIP)


def fulfil(**options: Any) -> Workflow:
    flow = Workflow("orders.fulfil", **options)
    charge = flow.step("charge", CHARGE, {"order": 1})
    reserve = flow.step("reserve", SHIP, {"order": 1})
    ship = flow.step("ship", SHIP, {"order": 1}, after=[charge, reserve])
    flow.step("notify", SHIP, None, after=[ship], when="terminal")
    return flow


def counts() -> tuple[int, int, int, int, int]:
    return (
        WorkflowRun.objects.count(),
        WorkflowStep.objects.count(),
        WorkflowStepDependency.objects.count(),
        Job.objects.count(),
        JobEvent.objects.count(),
    )


def test_start_workflow__diamond__roots_enqueued_rest_blocked_without_jobs(
    definitions: None,
) -> None:
    start = start_workflow(fulfil())
    assert start.disposition == "inserted"
    assert start.status == "RUNNING"
    steps = {
        step["step_key"]: step
        for step in WorkflowStep.objects.filter(workflow_run_id=start.run_id).values()
    }
    assert {key: step["status"] for key, step in steps.items()} == {
        "charge": "ENQUEUED",
        "reserve": "ENQUEUED",
        "ship": "BLOCKED",
        "notify": "BLOCKED",
    }
    assert steps["ship"]["job_id"] is None and steps["notify"]["job_id"] is None
    assert steps["ship"]["dependency_count_pending"] == 2
    assert steps["charge"]["priority"] == 7 and steps["charge"]["max_attempts"] == 4
    assert steps["charge"]["timeout_seconds"] == 30
    jobs = list(Job.objects.values("id", "job_type", "workflow_step_id", "payload", "priority"))
    assert len(jobs) == 2
    assert {job["workflow_step_id"] for job in jobs} == {
        steps["charge"]["id"],
        steps["reserve"]["id"],
    }
    assert {job["id"] for job in jobs} == {steps["charge"]["job_id"], steps["reserve"]["job_id"]}
    assert JobEvent.objects.filter(event_type="ENQUEUED").count() == 2
    run = WorkflowRun.objects.values().get(id=start.run_id)
    assert run["steps_total"] == 4 and run["finished_at"] is None
    modes = set(WorkflowStepDependency.objects.values_list("release_mode", flat=True))
    assert modes == {"ON_SUCCESS", "ON_TERMINAL"}


def test_start_workflow__chain_of_50__one_job_one_event(definitions: None) -> None:
    flow = Workflow("chain")
    previous = flow.step("s0", SHIP)
    for index in range(1, 50):
        previous = flow.step(f"s{index}", SHIP, after=[previous])
    start_workflow(flow)
    assert counts() == (1, 50, 49, 1, 1)


def test_start_workflow__json_null_payload__survives(definitions: None) -> None:
    flow = Workflow("nulls")
    flow.step("job", SHIP, None)
    flow.external("gate")
    start = start_workflow(flow)
    rows = run_sql(
        "SELECT step_key, payload IS NULL, payload = 'null'::jsonb FROM runledger_workflow_steps"
        " WHERE workflow_run_id = %s ORDER BY step_key",
        [start.run_id],
    )
    assert rows == [("gate", False, True), ("job", False, True)]
    assert run_sql("SELECT payload = 'null'::jsonb FROM runledger_job_queue") == [(True,)]


def test_start_workflow__caller_rolls_back__nothing_left(definitions: None) -> None:
    class BoomError(Exception):
        pass

    with pytest.raises(BoomError), transaction.atomic():
        start_workflow(fulfil())
        assert counts() == (1, 4, 3, 2, 2)
        raise BoomError
    assert counts() == (0, 0, 0, 0, 0)


def test_start_workflow__same_key_same_graph__existing_nothing_new(definitions: None) -> None:
    first = start_workflow(fulfil(), idempotency_key="order:1")
    before = counts()
    again = start_workflow(fulfil(), idempotency_key="order:1")
    assert again.run_id == first.run_id
    assert again.disposition == "existing"
    assert counts() == before


def test_start_workflow__same_key_other_graph__conflict(definitions: None) -> None:
    start_workflow(fulfil(), idempotency_key="order:1")
    other = fulfil()
    other.step("extra", SHIP)
    with transaction.atomic():
        with pytest.raises(RunledgerError) as caught:
            start_workflow(other, idempotency_key="order:1")
        assert caught.value.code == "workflow.enqueue_conflicting_retry"
        assert WorkflowRun.objects.count() == 1  # the caller's transaction is still usable


def test_start_workflow__missing_definition__refused_nothing_written(definitions: None) -> None:
    flow = fulfil()
    flow.step("missing", "wf.nobody")
    with transaction.atomic():
        with pytest.raises(RunledgerError) as caught:
            start_workflow(flow)
        assert caught.value.code == "workflow.definition_not_found_or_disabled"
        assert counts() == (0, 0, 0, 0, 0)


def test_start_workflow__disabled_definition__refused(make_definition: MakeDefinition) -> None:
    make_definition(CHARGE, is_enabled=False)
    flow = Workflow("w")
    flow.step("a", CHARGE)
    with pytest.raises(RunledgerError) as caught:
        start_workflow(flow)
    assert caught.value.code == "workflow.definition_not_found_or_disabled"


def test_start_workflow__defaults_resolved_at_start(
    definitions: None, make_definition: MakeDefinition
) -> None:
    start = start_workflow(fulfil())
    from runledger_django.models import JobDefinition

    JobDefinition.objects.filter(job_type=SHIP).update(
        default_priority=1, max_attempts=9, default_timeout_seconds=5
    )
    ship = WorkflowStep.objects.get(workflow_run_id=start.run_id, step_key="ship")
    assert (ship.priority, ship.max_attempts, ship.timeout_seconds) == (100, 3, 60)


def test_start_workflow__step_overrides__stored(definitions: None) -> None:
    flow = Workflow("w")
    flow.step(
        "a",
        CHARGE,
        {},
        priority=-5,
        max_attempts=1,
        timeout_seconds=9,
        execution_resource_key="r:1",
    )
    start = start_workflow(flow)
    step = WorkflowStep.objects.get(workflow_run_id=start.run_id)
    assert (step.priority, step.max_attempts, step.timeout_seconds) == (-5, 1, 9)
    job = Job.objects.get()
    assert (job.priority, job.max_attempts, job.timeout_seconds) == (-5, 1, 9)
    assert job.execution_resource_key == "r:1"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("level", "keys"),
    [
        ("REPEATABLE READ", {"idempotency_key": "k"}),
        ("SERIALIZABLE", {"active_key": "k"}),
    ],
)
def test_start_workflow__keyed_outside_read_committed__isolation_code_nothing_written(
    definitions: None, level: str, keys: dict[str, str]
) -> None:
    transaction.set_autocommit(False)
    try:
        run_sql(f"SET TRANSACTION ISOLATION LEVEL {level}")
        with pytest.raises(RunledgerError) as caught:
            start_workflow(fulfil(), **keys)
        assert caught.value.code == "workflow.enqueue_idempotency_unsupported_isolation"
        assert counts() == (0, 0, 0, 0, 0)
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)


def test_start_workflow__active_key__second_start_returns_the_running_run(
    definitions: None,
) -> None:
    first = start_workflow(fulfil(), active_key="customer:9")
    second = start_workflow(fulfil(), active_key="customer:9")
    assert second.run_id == first.run_id
    assert second.disposition == "active"
    assert WorkflowActiveClaim.objects.count() == 1
    tenant = start_workflow(
        fulfil(), active_key="customer:9", organization_id="00000000-0000-0000-0000-000000000001"
    )
    assert tenant.disposition == "inserted"


def test_start_workflow__statements__bounded(
    definitions: None, django_assert_max_num_queries: Any
) -> None:
    flow = Workflow("wide")
    root = flow.step("root", SHIP)
    for index in range(300):
        flow.step(f"child{index}", SHIP, after=[root])
    connection.ensure_connection()
    with django_assert_max_num_queries(6):
        start_workflow(flow)
    assert counts()[:3] == (1, 301, 300)
