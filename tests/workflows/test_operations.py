"""Run-level operations: cancel, external gates, retry, reads and the result handle.

transaction=True: these own their READ COMMITTED transaction when called outside one, and
the completions they interleave with are a worker's (autocommit).
"""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction

from runledger_django import (
    ReadScope,
    RunledgerError,
    Workflow,
    cancel_workflow,
    complete_external_step,
    get_workflow_run,
    list_workflow_runs,
    list_workflow_steps,
    retry_workflow,
    start_workflow,
    workflow_handle,
)
from runledger_django.models import Job, WorkflowRecovery, WorkflowRun, WorkflowStep
from runledger_django.services.lifecycle import complete_job_success
from tests.conftest import run_sql
from tests.workflows.conftest import (
    STEP_TYPE,
    claim_step,
    fail,
    run_row,
    statuses,
    succeed,
)

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = ReadScope.ADMIN
TENANT = uuid.UUID("00000000-0000-0000-0000-00000000000a")


def gated() -> Workflow:
    flow = Workflow("gated", result_step="ship")
    approval = flow.external("approval")
    charge = flow.step("charge", STEP_TYPE)
    ship = flow.step("ship", STEP_TYPE, after=[approval, charge])
    flow.step("always", STEP_TYPE, after=[ship], when="terminal")
    return flow


# --- cancel ------------------------------------------------------------------------------------


def test_cancel_workflow__every_step_terminal_no_release_running_handler_fenced(
    step_types: None,
) -> None:
    run = start_workflow(gated()).run_id
    running = claim_step(run, "charge")
    assert cancel_workflow(run, scope=ADMIN) == "CANCELED"
    assert set(statuses(run).values()) == {"CANCELED"}
    assert Job.objects.get(id=running.lease.job_id).status == "CANCELED"
    assert Job.objects.count() == 1  # nothing released, not even behind when="terminal"
    with pytest.raises(RunledgerError) as caught:
        complete_job_success(running.lease, output={"late": True})
    assert caught.value.code == "job.lease_owner_mismatch"
    row = run_row(run)
    assert (row["status"], row["steps_canceled"], row["steps_waiting"]) == ("CANCELED", 4, 0)
    assert row["finished_at"] is not None
    assert cancel_workflow(run, scope=ADMIN) == "CANCELED"


def test_cancel_workflow__succeeded_run__unchanged_result_kept(step_types: None) -> None:
    flow = Workflow("one", result_step="only")
    flow.step("only", STEP_TYPE)
    run = start_workflow(flow).run_id
    succeed(run, "only", {"v": 1})
    assert cancel_workflow(run, scope=ADMIN) == "SUCCEEDED"
    assert run_row(run)["result"] == {"v": 1}


def test_cancel_workflow__wrong_scope__not_found(step_types: None) -> None:
    run = start_workflow(gated(), organization_id=TENANT).run_id
    with pytest.raises(RunledgerError) as caught:
        cancel_workflow(run, scope=ReadScope.GLOBAL)
    assert caught.value.code == "workflow.run_not_found"
    assert cancel_workflow(run, scope=ReadScope.organization(TENANT)) == "CANCELED"


def test_cancel_workflow__repeatable_read__refused_nothing_changed(step_types: None) -> None:
    run = start_workflow(gated()).run_id
    transaction.set_autocommit(False)
    try:
        run_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(RunledgerError) as caught:
            cancel_workflow(run, scope=ADMIN)
        assert caught.value.code == "workflow.cancel_unsupported_isolation"
        transaction.rollback()
    finally:
        transaction.set_autocommit(True)
    assert run_row(run)["status"] == "RUNNING"


# --- external gates ---------------------------------------------------------------------------


def test_complete_external_step__releases_what_it_gated_idempotent_retry(
    step_types: None,
) -> None:
    run = start_workflow(gated()).run_id
    succeed(run, "charge")
    assert statuses(run)["ship"] == "BLOCKED"
    assert complete_external_step(run, "approval", scope=ADMIN, output={"by": "ann"}) == (
        "SUCCEEDED"
    )
    assert statuses(run)["ship"] == "ENQUEUED"
    # jsonb-equal output: the same completion, nothing changes.
    assert complete_external_step(run, "approval", scope=ADMIN, output={"by": "ann"}) == (
        "SUCCEEDED"
    )
    assert Job.objects.filter(job_type_id=STEP_TYPE).count() == 2
    with pytest.raises(RunledgerError) as caught:
        complete_external_step(run, "approval", scope=ADMIN, output={"by": "bob"})
    assert caught.value.code == "workflow.external_step_conflicting_output_retry"
    with pytest.raises(RunledgerError) as caught:
        complete_external_step(run, "approval", scope=ADMIN, status="FAILED")
    assert caught.value.code == "workflow.external_step_conflicting_completion_retry"
    row = run_row(run)
    assert (row["steps_waiting"], row["steps_succeeded"]) == (0, 2)


def test_complete_external_step__numbers_compare_as_jsonb(step_types: None) -> None:
    run = start_workflow(gated()).run_id
    complete_external_step(run, "approval", scope=ADMIN, output={"score": 1})
    assert complete_external_step(run, "approval", scope=ADMIN, output={"score": 1.0}) == (
        "SUCCEEDED"
    )


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"status": "RUNNING"}, "workflow.external_step_invalid_terminal_status"),
        ({"status": "FAILED", "output": {"x": 1}}, "workflow.external_step_output_invalid_status"),
        ({"step_key": "charge"}, "workflow.external_step_not_external"),
        ({"step_key": "nope"}, "workflow.external_step_not_found"),
    ],
)
def test_complete_external_step__bad_requests__own_codes_nothing_changed(
    step_types: None, kwargs: dict[str, object], code: str
) -> None:
    run = start_workflow(gated()).run_id
    step_key = kwargs.pop("step_key", "approval")
    with pytest.raises(RunledgerError) as caught:
        complete_external_step(run, step_key, scope=ADMIN, **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == code
    assert statuses(run)["approval"] == "WAITING_FOR_EXTERNAL"


def test_complete_external_step__not_yet_waiting__refused(step_types: None) -> None:
    flow = Workflow("late-gate")
    first = flow.step("first", STEP_TYPE)
    flow.external("gate", after=[first])
    run = start_workflow(flow).run_id
    with pytest.raises(RunledgerError) as caught:
        complete_external_step(run, "gate", scope=ADMIN)
    assert caught.value.code == "workflow.external_step_not_waiting"
    succeed(run, "first")
    assert statuses(run)["gate"] == "WAITING_FOR_EXTERNAL"
    assert run_row(run)["status"] == "WAITING_FOR_EXTERNAL"
    complete_external_step(run, "gate", scope=ADMIN, status="FAILED")
    row = run_row(run)
    assert (row["status"], row["steps_failed"]) == ("COMPLETED_WITH_ERRORS", 1)


def test_complete_external_step__failed_gate__success_dependent_canceled(
    step_types: None,
) -> None:
    run = start_workflow(gated()).run_id
    complete_external_step(run, "approval", scope=ADMIN, status="CANCELED")
    succeed(run, "charge")
    assert statuses(run)["ship"] == "CANCELED"
    assert statuses(run)["always"] == "ENQUEUED"


# --- retry -------------------------------------------------------------------------------------


def test_retry_workflow__keeps_successes_and_outputs_reruns_the_rest(step_types: None) -> None:
    flow = Workflow("retry-me", result_step="ship")
    charge = flow.step("charge", STEP_TYPE, {"amount": 5})
    reserve = flow.step("reserve", STEP_TYPE)
    ship = flow.step("ship", STEP_TYPE, after=[charge, reserve])
    flow.step("notify", STEP_TYPE, after=[ship], when="terminal")
    source = start_workflow(flow).run_id
    succeed(source, "charge", {"receipt": "r-9"})
    fail(source, "reserve")
    succeed(source, "notify")
    assert run_row(source)["status"] == "COMPLETED_WITH_ERRORS"

    retry = retry_workflow(source, scope=ADMIN)
    assert retry.disposition == "inserted"
    recovery = retry.run_id
    assert statuses(recovery) == {
        "charge": "SUCCEEDED",
        "reserve": "ENQUEUED",
        "ship": "BLOCKED",
        "notify": "BLOCKED",
    }
    charge_step = WorkflowStep.objects.get(workflow_run_id=recovery, step_key="charge")
    assert (charge_step.output, charge_step.job_id, charge_step.payload) == (
        {"receipt": "r-9"},
        None,
        {"amount": 5},
    )
    assert statuses(source)["reserve"] == "FAILED"  # the source is never modified
    assert WorkflowRecovery.objects.get(recovery_run_id=recovery).source_run_id == source
    assert retry_workflow(source, scope=ADMIN).run_id == recovery  # idempotent per key

    succeed(recovery, "reserve")
    shipped = succeed(recovery, "ship", {"label": "L1"})
    assert shipped.lease.workflow_step_id is not None
    succeed(recovery, "notify")
    row = run_row(recovery)
    assert (row["status"], row["result"], row["steps_succeeded"]) == (
        "SUCCEEDED",
        {"label": "L1"},
        4,
    )


def test_retry_workflow__running_or_succeeded_source__refused(step_types: None) -> None:
    flow = Workflow("w")
    flow.step("only", STEP_TYPE)
    run = start_workflow(flow).run_id
    with pytest.raises(RunledgerError) as caught:
        retry_workflow(run, scope=ADMIN)
    assert caught.value.code == "workflow.recovery_source_not_terminal"
    succeed(run, "only")
    with pytest.raises(RunledgerError) as caught:
        retry_workflow(run, scope=ADMIN)
    assert caught.value.code == "workflow.recovery_source_not_terminal"


def test_retry_workflow__deleting_only_the_recovery_run__refused(step_types: None) -> None:
    run = start_workflow(gated()).run_id
    cancel_workflow(run, scope=ADMIN)
    recovery = retry_workflow(run, scope=ADMIN).run_id
    with pytest.raises(Exception):  # noqa: B017  (the database's FK refusal)
        with transaction.atomic():
            WorkflowRun.objects.filter(id=recovery).delete()
    WorkflowRun.objects.filter(id__in=[run, recovery]).delete()
    assert WorkflowRun.objects.count() == 0


def test_retry_workflow__active_key_held__refused(step_types: None) -> None:
    run = start_workflow(gated(), active_key="order:1").run_id
    cancel_workflow(run, scope=ADMIN)
    start_workflow(gated(), active_key="order:1")  # the key was freed: a new run holds it
    with pytest.raises(RunledgerError) as caught:
        retry_workflow(run, scope=ADMIN)
    assert caught.value.code == "workflow.recovery_active_constraint"


# --- reads and handles --------------------------------------------------------------------


def test_reads__scoped(step_types: None) -> None:
    mine = start_workflow(gated(), organization_id=TENANT).run_id
    theirs = start_workflow(gated()).run_id
    tenant = ReadScope.organization(TENANT)
    assert get_workflow_run(mine, scope=tenant).id == mine
    with pytest.raises(RunledgerError) as caught:
        get_workflow_run(theirs, scope=tenant)
    assert caught.value.code == "workflow.run_not_found"
    assert [run.id for run in list_workflow_runs(scope=tenant)] == [mine]
    assert {run.id for run in list_workflow_runs(scope=ADMIN)} == {mine, theirs}
    assert list_workflow_runs(scope=ADMIN, status="SUCCEEDED") == []
    assert {step.step_key for step in list_workflow_steps(mine, scope=tenant)} == {
        "approval",
        "charge",
        "ship",
        "always",
    }
    with pytest.raises(RunledgerError):
        list_workflow_steps(mine, scope=ReadScope.GLOBAL)


def test_handle__result_codes(step_types: None) -> None:
    undeclared = Workflow("no-result")
    undeclared.step("only", STEP_TYPE)
    run = start_workflow(undeclared).run_id
    with pytest.raises(RunledgerError) as caught:
        workflow_handle(run, scope=ADMIN).result(timeout=5)
    assert caught.value.code == "workflow.result_not_declared"

    declared = Workflow("result", result_step="only")
    declared.step("only", STEP_TYPE)
    run = start_workflow(declared).run_id
    handle = workflow_handle(run, scope=ADMIN)
    with pytest.raises(RunledgerError) as caught:
        handle.result(timeout=0)
    assert caught.value.code == "workflow.result_wait_timeout"
    succeed(run, "only", {"done": 1})
    assert handle.result(timeout=0) == {"done": 1}
    assert handle.status() == "SUCCEEDED"

    failing = start_workflow(declared).run_id
    fail(failing, "only")
    with pytest.raises(RunledgerError) as caught:
        workflow_handle(failing, scope=ADMIN).result(timeout=0)
    assert caught.value.code == "workflow.result_unsuccessful_terminal"

    missing = start_workflow(declared).run_id
    succeed(missing, "only", None)
    with pytest.raises(RunledgerError) as caught:
        workflow_handle(missing, scope=ADMIN).result(timeout=0)
    assert caught.value.code == "workflow.result_missing"

    with pytest.raises(RunledgerError) as caught:
        workflow_handle(uuid.uuid4(), scope=ADMIN)
    assert caught.value.code == "workflow.run_not_found"


def test_active_key__terminal_run_frees_it(step_types: None) -> None:
    flow = Workflow("keyed")
    flow.step("only", STEP_TYPE)
    first = start_workflow(flow, active_key="k").run_id
    assert start_workflow(flow, active_key="k").disposition == "active"
    succeed(first, "only")
    again = start_workflow(flow, active_key="k")
    assert again.disposition == "inserted"
    assert again.run_id != first


def test_fail_fast__first_failure_cancels_the_rest(step_types: None) -> None:
    flow = Workflow("fast", fail_fast=True)
    flow.step("breaks", STEP_TYPE)
    slow = flow.step("slow", STEP_TYPE)
    flow.step("after_slow", STEP_TYPE, after=[slow])
    flow.step("after_all", STEP_TYPE, after=[slow], when="terminal")
    run = start_workflow(flow).run_id
    running = claim_step(run, "slow")
    fail(run, "breaks")
    assert statuses(run) == {
        "breaks": "FAILED",
        "slow": "CANCELED",
        "after_slow": "CANCELED",
        "after_all": "CANCELED",
    }
    assert run_row(run)["status"] == "CANCELED"
    assert Job.objects.get(id=running.lease.job_id).status == "CANCELED"
    assert Job.objects.count() == 2


def test_fail_fast__off__other_branches_go_on(step_types: None) -> None:
    flow = Workflow("patient")
    flow.step("breaks", STEP_TYPE)
    slow = flow.step("slow", STEP_TYPE)
    flow.step("after_slow", STEP_TYPE, after=[slow])
    run = start_workflow(flow).run_id
    fail(run, "breaks")
    succeed(run, "slow")
    assert statuses(run)["after_slow"] == "ENQUEUED"


def test_active_key__canceled_run_with_live_lease__key_taken_until_it_expires(
    step_types: None,
) -> None:
    flow = Workflow("keyed")
    flow.step("only", STEP_TYPE)
    first = start_workflow(flow, active_key="k").run_id
    running = claim_step(first, "only")
    cancel_workflow(first, scope=ADMIN)
    held = start_workflow(flow, active_key="k")
    assert (held.run_id, held.disposition, held.status) == (first, "active", "CANCELED")
    Job.objects.filter(id=running.lease.job_id).update(
        lease_expires_at=run_sql("SELECT now() - interval '1 second'")[0][0]
    )
    freed = start_workflow(flow, active_key="k")
    assert freed.disposition == "inserted"
