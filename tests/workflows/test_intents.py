"""Workflow intents (checklist item 10): recorded in the caller's transaction, promoted into
exactly one run per idempotency key, waiting for job definitions that do not exist yet."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runledger_django import (
    RunledgerError,
    Workflow,
    promote_workflow_intents,
    record_workflow_intent,
    start_workflow,
)
from runledger_django.models import Job, WorkflowIntent, WorkflowRun, WorkflowStep
from runledger_django.services.workflows.intents import _rebuild
from runledger_django.services.workflows.validation import prepare_workflow
from tests.conftest import (
    InThread,
    MakeDefinition,
    Observer,
    OpenSession,
    run_sql,
    wait_for_lock_wait,
)

pytestmark = pytest.mark.django_db(transaction=True)

CHARGE = "later.charge"
SHIP = "later.ship"


def fulfil(order: int = 1, *, notify_when: str = "terminal") -> Workflow:
    flow = Workflow("orders.fulfil", metadata={"order": order}, result_step="notify")
    charge = flow.step("charge", CHARGE, {"order": order}, priority=5)
    reserve = flow.step("reserve", SHIP, {"order": order}, max_attempts=2)
    gate = flow.external("approve", after=[reserve])
    ship = flow.step("ship", SHIP, None, after=[charge, gate], timeout_seconds=9)
    flow.step("notify", SHIP, {"order": order}, after=[ship], when=notify_when)
    return flow


def sync_definitions(make_definition: MakeDefinition) -> None:
    make_definition(CHARGE)
    make_definition(SHIP)


def intent_row(intent_id: uuid.UUID) -> dict[str, Any]:
    return dict(WorkflowIntent.objects.values().get(id=intent_id))


def test_record__definitions_not_synced__waits_untouched_then_promotes_into_one_run(
    make_definition: MakeDefinition,
) -> None:
    with transaction.atomic():
        recorded = record_workflow_intent(fulfil(), idempotency_key="order:1")
    assert (recorded.status, recorded.disposition, recorded.workflow_run_id) == (
        "PENDING",
        "inserted",
        None,
    )
    waiting = promote_workflow_intents()
    assert not waiting.anything_happened
    row = intent_row(recorded.intent_id)
    assert (row["status"], row["promotion_attempts"], row["job_types"]) == (
        "PENDING",
        0,
        [CHARGE, SHIP],
    )
    assert WorkflowRun.objects.count() == 0
    make_definition(CHARGE)
    assert not promote_workflow_intents().anything_happened  # one of two types synced
    make_definition(SHIP)
    promoted = promote_workflow_intents()
    assert (promoted.inserted_runs, promoted.total_promoted) == (1, 1)
    row = intent_row(recorded.intent_id)
    run = WorkflowRun.objects.get()
    assert (row["status"], row["workflow_run_id"], row["promotion_attempts"]) == (
        "PROMOTED",
        run.id,
        1,
    )
    assert (run.idempotency_key, run.workflow_type, run.metadata, run.result_step_key) == (
        "order:1",
        "orders.fulfil",
        {"order": 1},
        "notify",
    )
    steps = {step.step_key: step for step in WorkflowStep.objects.filter(workflow_run=run)}
    assert {key: step.status for key, step in steps.items()} == {
        "charge": "ENQUEUED",
        "reserve": "ENQUEUED",
        "approve": "BLOCKED",
        "ship": "BLOCKED",
        "notify": "BLOCKED",
    }
    assert (steps["charge"].priority, steps["reserve"].max_attempts) == (5, 2)
    assert steps["ship"].timeout_seconds == 9
    assert Job.objects.count() == 2
    assert not promote_workflow_intents().anything_happened
    again = record_workflow_intent(fulfil(), idempotency_key="order:1")
    assert (again.intent_id, again.status, again.workflow_run_id, again.disposition) == (
        recorded.intent_id,
        "PROMOTED",
        run.id,
        "existing",
    )
    # A direct keyed start of the same graph is the run the intent became.
    direct = start_workflow(fulfil(), idempotency_key="order:1")
    assert (direct.run_id, direct.disposition) == (run.id, "existing")


def test_record__identical_retry_same_intent__other_graph_conflicts_caller_usable() -> None:
    first = record_workflow_intent(fulfil(), idempotency_key="k")
    with transaction.atomic():
        second = record_workflow_intent(fulfil(), idempotency_key="k")
        assert (second.intent_id, second.disposition) == (first.intent_id, "existing")
        with pytest.raises(RunledgerError) as caught:
            record_workflow_intent(fulfil(notify_when="success"), idempotency_key="k")
        assert caught.value.code == "workflow.enqueue_conflicting_retry"
        # The caller's transaction is still usable.
        assert run_sql("SELECT count(*) FROM runledger_workflow_intents") == [(1,)]
    organization = uuid.uuid4()
    scoped = record_workflow_intent(fulfil(), idempotency_key="k", organization_id=organization)
    assert scoped.disposition == "inserted"
    assert scoped.intent_id != first.intent_id
    assert WorkflowIntent.objects.count() == 2


@pytest.mark.parametrize(
    ("flow", "key", "organization", "code"),
    [
        (Workflow("empty"), "k", None, "workflow.invalid_dag_empty"),
        (fulfil(), None, None, "workflow.invalid_dag_idempotency_key_blank"),
        (fulfil(), "  ", None, "workflow.invalid_dag_idempotency_key_blank"),
        (fulfil(), "k", "not-a-uuid", "job.invalid_organization_id"),
        ("not a workflow", "k", None, "workflow.invalid_dag"),
    ],
)
def test_record__bad_request__classified_before_any_sql(
    flow: Any, key: Any, organization: Any, code: str
) -> None:
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        with pytest.raises(RunledgerError) as caught:
            record_workflow_intent(flow, idempotency_key=key, organization_id=organization)
        assert caught.value.code == code
        assert len(queries) == 0
    assert WorkflowIntent.objects.count() == 0


def test_record__cycle__classified_before_any_sql() -> None:
    flow = Workflow("cycle")
    flow.step("a", CHARGE, after=["b"])
    flow.step("b", CHARGE, after=["a"])
    with CaptureQueriesContext(connection) as queries, pytest.raises(RunledgerError) as caught:
        record_workflow_intent(flow, idempotency_key="k")
    assert caught.value.code == "workflow.invalid_dag_cycle"
    assert len(queries) == 0


def test_record__caller_rolls_back__no_intent_and_nothing_to_promote(
    make_definition: MakeDefinition,
) -> None:
    sync_definitions(make_definition)

    class AbortError(Exception):
        pass

    with pytest.raises(AbortError), transaction.atomic():
        record_workflow_intent(fulfil(), idempotency_key="gone")
        assert WorkflowIntent.objects.count() == 1
        raise AbortError
    assert WorkflowIntent.objects.count() == 0
    assert not promote_workflow_intents().anything_happened
    assert WorkflowRun.objects.count() == 0


@pytest.mark.usefixtures("session_repeatable_read")
def test_record__repeatable_read__refused_with_the_isolation_code() -> None:
    with transaction.atomic():
        with pytest.raises(RunledgerError) as caught:
            record_workflow_intent(fulfil(), idempotency_key="k")
        assert caught.value.code == "workflow.enqueue_idempotency_unsupported_isolation"
    assert WorkflowIntent.objects.count() == 0


def test_promote__inside_an_atomic_block__refused() -> None:
    with transaction.atomic(), pytest.raises(RunledgerError) as caught:
        promote_workflow_intents()
    assert caught.value.code == "job.intent_promotion_requires_own_transaction"


def test_promote__key_already_started_with_the_same_graph__adopts_that_run(
    make_definition: MakeDefinition,
) -> None:
    sync_definitions(make_definition)
    recorded = record_workflow_intent(fulfil(), idempotency_key="order:2")
    direct = start_workflow(fulfil(), idempotency_key="order:2")
    report = promote_workflow_intents()
    assert (report.inserted_runs, report.existing_runs) == (0, 1)
    assert intent_row(recorded.intent_id)["workflow_run_id"] == direct.run_id
    assert WorkflowRun.objects.count() == 1


def test_promote__key_started_with_another_graph__intent_conflicted_with_the_code(
    make_definition: MakeDefinition,
) -> None:
    sync_definitions(make_definition)
    recorded = record_workflow_intent(fulfil(), idempotency_key="order:3")
    start_workflow(fulfil(notify_when="success"), idempotency_key="order:3")
    report = promote_workflow_intents()
    assert report.conflicted == 1
    row = intent_row(recorded.intent_id)
    assert (row["status"], row["last_error_code"], row["workflow_run_id"]) == (
        "CONFLICTED",
        "workflow.enqueue_conflicting_retry",
        None,
    )
    assert WorkflowRun.objects.count() == 1
    assert not promote_workflow_intents().anything_happened


def test_promote__definition_disabled_after_sync__waits_again(
    make_definition: MakeDefinition,
) -> None:
    make_definition(CHARGE)
    make_definition(SHIP, is_enabled=False)
    recorded = record_workflow_intent(fulfil(), idempotency_key="order:4")
    assert not promote_workflow_intents().anything_happened
    assert intent_row(recorded.intent_id)["promotion_attempts"] == 0


def test_promote__limit_reached__batch_full_and_the_rest_on_the_next_pass(
    make_definition: MakeDefinition,
) -> None:
    sync_definitions(make_definition)
    for index in range(3):
        record_workflow_intent(fulfil(index), idempotency_key=f"order:{index}")
    first = promote_workflow_intents(limit=2)
    assert (first.inserted_runs, first.batch_was_full) == (2, True)
    second = promote_workflow_intents(limit=2)
    assert (second.inserted_runs, second.batch_was_full) == (1, False)
    assert WorkflowRun.objects.count() == 3
    assert set(WorkflowIntent.objects.values_list("status", flat=True)) == {"PROMOTED"}


def test_promote__stored_request_tampered__intent_conflicted_nothing_started(
    make_definition: MakeDefinition,
) -> None:
    sync_definitions(make_definition)
    recorded = record_workflow_intent(fulfil(), idempotency_key="order:5")
    run_sql(
        "UPDATE runledger_workflow_intents SET enqueue_request ="
        " enqueue_request || '{\"unknown\": 1}'::jsonb"
        " WHERE id = %s",
        [recorded.intent_id],
    )
    report = promote_workflow_intents()
    assert report.conflicted == 1
    assert intent_row(recorded.intent_id)["last_error_code"] == "job.intent_snapshot_mismatch"
    assert WorkflowRun.objects.count() == 0


def test_rebuild__every_field_of_the_request__round_trips() -> None:
    prepared = prepare_workflow(fulfil(7), idempotency_key="k")
    rebuilt = _rebuild(uuid.uuid4(), None, "k", prepared.request)
    assert rebuilt.request == prepared.request
    assert [step.key for step in rebuilt.steps][-1] == "notify"


def test_two_promoters_racing__every_intent_promoted_into_exactly_one_run(
    make_definition: MakeDefinition, in_thread: InThread
) -> None:
    sync_definitions(make_definition)
    total = 30
    for index in range(total):
        record_workflow_intent(fulfil(index), idempotency_key=f"race:{index}")
    barrier = threading.Barrier(2)

    def drain() -> int:
        barrier.wait(10)
        started = 0
        while True:
            report = promote_workflow_intents(limit=4)
            started += report.inserted_runs
            assert report.existing_runs == report.conflicted == report.retry_deferred == 0
            if not report.anything_happened:
                return started

    promoters = [in_thread(drain), in_thread(drain)]
    assert sum(promoter.result(timeout=60) for promoter in promoters) == total
    rows = run_sql(
        "SELECT intent.idempotency_key, run.idempotency_key, intent.status,"
        " (SELECT count(*) FROM runledger_workflow_runs other"
        "  WHERE other.idempotency_key = intent.idempotency_key)"
        " FROM runledger_workflow_intents intent"
        " JOIN runledger_workflow_runs run ON run.id = intent.workflow_run_id"
    )
    assert len(rows) == total
    assert all(
        key == run_key and status == "PROMOTED" and runs == 1 for key, run_key, status, runs in rows
    )
    assert WorkflowRun.objects.count() == total


@pytest.mark.parametrize("starter_commits", [True, False])
def test_promoter_racing_an_open_direct_start__waits_then_exactly_one_run(
    make_definition: MakeDefinition,
    in_thread: InThread,
    observer: Observer,
    starter_commits: bool,
) -> None:
    sync_definitions(make_definition)
    recorded = record_workflow_intent(fulfil(), idempotency_key="order:9")
    holding = threading.Event()
    go = threading.Event()

    class AbortError(Exception):
        pass

    def start_and_hold() -> uuid.UUID:
        try:
            with transaction.atomic():
                run_id = start_workflow(fulfil(), idempotency_key="order:9").run_id
                holding.set()
                assert go.wait(10)
                if not starter_commits:
                    raise AbortError
        except AbortError:
            pass
        return run_id

    starter = in_thread(start_and_hold)
    assert holding.wait(10)
    promoter = in_thread(promote_workflow_intents)
    # The promoter's keyed insert waits for the open start's key.
    wait_for_lock_wait(observer, "runledger:workflow_start_run")
    go.set()
    direct_run = starter.result(timeout=10)
    report = promoter.result(timeout=10)
    run = WorkflowRun.objects.get()
    assert intent_row(recorded.intent_id)["workflow_run_id"] == run.id
    if starter_commits:
        assert (report.inserted_runs, report.existing_runs) == (0, 1)
        assert run.id == direct_run
    else:
        assert (report.inserted_runs, report.existing_runs) == (1, 0)
        assert run.id != direct_run


def test_promoter__intent_held_by_another_promoter__skipped_without_waiting(
    make_definition: MakeDefinition, open_session: OpenSession
) -> None:
    sync_definitions(make_definition)
    recorded = record_workflow_intent(fulfil(), idempotency_key="held")
    other = open_session(autocommit=False)
    other.execute(
        "SELECT 1 FROM runledger_workflow_intents WHERE id = %s FOR NO KEY UPDATE",
        (recorded.intent_id,),
    )
    assert not promote_workflow_intents().anything_happened
    other.rollback()
    assert promote_workflow_intents().inserted_runs == 1
    assert WorkflowRun.objects.count() == 1


def test_promote__nothing_eligible__one_statement_and_no_transaction_block() -> None:
    record_workflow_intent(fulfil(), idempotency_key="waits")  # its types are not synced
    with CaptureQueriesContext(connection) as queries:
        assert not promote_workflow_intents().anything_happened
    assert [query["sql"].split("*/")[0].strip() for query in queries] == [
        "/* runledger:workflow_intents_eligible"
    ]
