"""Release and propagation in the prerequisite's terminal transaction (reference 3.3).

transaction=True: the worker's completions run outside any transaction, so the service owns
the one that writes the job's terminal status and releases its dependents; that path (and the
plain job's single statement) only exists in autocommit mode.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runledger_django import RunledgerError, Workflow, start_workflow
from runledger_django.domain import JobLease, ReadScope
from runledger_django.models import Job, JobEvent, WorkflowStep
from runledger_django.services.claim import claim_jobs, complete_and_claim
from runledger_django.services.job_control import cancel_job, requeue_job
from runledger_django.services.lifecycle import (
    complete_job_success,
    complete_jobs_success,
    continue_job,
    encode_output,
)
from runledger_django.services.reaper import reap_expired_leases
from runledger_django.services.replay import replay_job
from runledger_django.services.workflows.release import run_lock_key
from tests.conftest import MakeDefinition, run_sql
from tests.workflows.conftest import (
    OTHER_TYPE,
    STEP_TYPE,
    WORKER,
    claim_step,
    fail,
    run_row,
    statuses,
    succeed,
)

pytestmark = pytest.mark.django_db(transaction=True)


def diamond(**options: Any) -> Workflow:
    flow = Workflow("diamond", **options)
    charge = flow.step("charge", STEP_TYPE, {"n": 1})
    reserve = flow.step("reserve", STEP_TYPE, {"n": 2})
    ship = flow.step("ship", STEP_TYPE, {"n": 3}, after=[charge, reserve])
    flow.step("notify", STEP_TYPE, {"n": 4}, after=[ship], when="terminal")
    return flow


def test_release__diamond__each_step_after_its_prerequisites(step_types: None) -> None:
    run = start_workflow(diamond(result_step="notify")).run_id
    succeed(run, "charge", {"receipt": "r-1"})
    assert statuses(run)["ship"] == "BLOCKED"
    ship = WorkflowStep.objects.get(workflow_run_id=run, step_key="ship")
    assert (ship.dependency_count_pending, ship.job_id) == (1, None)
    succeed(run, "reserve")
    ship.refresh_from_db()
    assert (ship.status, ship.dependency_count_pending) == ("ENQUEUED", 0)
    assert ship.job_id is not None
    job = Job.objects.get(id=ship.job_id)
    assert (job.payload, job.workflow_step_id, job.status) == ({"n": 3}, ship.id, "PENDING")
    assert JobEvent.objects.filter(job_id=job.id, event_type="ENQUEUED").count() == 1
    assert run_row(run)["status"] == "RUNNING"
    succeed(run, "ship")
    succeed(run, "notify", {"sent": True})
    row = run_row(run)
    assert row["status"] == "SUCCEEDED"
    assert row["finished_at"] is not None
    assert row["result"] == {"sent": True}
    assert (row["steps_succeeded"], row["steps_failed"], row["steps_canceled"]) == (4, 0, 0)
    charge = WorkflowStep.objects.get(workflow_run_id=run, step_key="charge")
    assert charge.output == {"receipt": "r-1"}
    assert charge.finished_at is not None


def test_release__failed_prerequisite__success_dependent_canceled_terminal_one_runs(
    step_types: None,
) -> None:
    run = start_workflow(diamond(result_step="notify")).run_id
    fail(run, "charge")
    succeed(run, "reserve")
    ship = WorkflowStep.objects.get(workflow_run_id=run, step_key="ship")
    assert ship.status == "CANCELED"
    assert ship.last_error_code == "workflow.dependency_unsatisfied"
    assert ship.status_reason == "DEPENDENCY_UNSATISFIED"
    assert ship.job_id is None
    assert statuses(run)["notify"] == "ENQUEUED"
    assert WorkflowStep.objects.get(workflow_run_id=run, step_key="charge").status == "FAILED"
    succeed(run, "notify", {"sent": True})
    row = run_row(run)
    assert row["status"] == "COMPLETED_WITH_ERRORS"
    assert row["result"] is None
    assert (row["steps_succeeded"], row["steps_failed"], row["steps_canceled"]) == (2, 1, 1)


def test_release__cancellation_cascades_breadth_first(step_types: None) -> None:
    flow = Workflow("cascade")
    root = flow.step("root", STEP_TYPE)
    a = flow.step("a", STEP_TYPE, after=[root])
    b = flow.step("b", STEP_TYPE, after=[a])
    flow.step("c", STEP_TYPE, after=[b])
    flow.step("after_all", STEP_TYPE, after=[b], when="terminal")
    run = start_workflow(flow).run_id
    fail(run, "root")
    assert statuses(run) == {
        "root": "FAILED",
        "a": "CANCELED",
        "b": "CANCELED",
        "c": "CANCELED",
        "after_all": "ENQUEUED",
    }


def test_release__fan_out_of_64_under_failed_gate__all_canceled_fan_in_released(
    step_types: None,
) -> None:
    flow = Workflow("fan")
    gate = flow.step("gate", STEP_TYPE)
    children = [flow.step(f"child{i:02}", STEP_TYPE, after=[gate]) for i in range(64)]
    flow.step("fan_in", STEP_TYPE, after=children, when="terminal")
    run = start_workflow(flow).run_id
    fail(run, "gate")
    found = statuses(run)
    assert sum(1 for key, status in found.items() if key.startswith("child")) == 64
    assert {status for key, status in found.items() if key.startswith("child")} == {"CANCELED"}
    fan_in = WorkflowStep.objects.get(workflow_run_id=run, step_key="fan_in")
    assert (fan_in.status, fan_in.dependency_count_pending) == ("ENQUEUED", 0)
    assert fan_in.dependency_count_unsatisfied == 0
    assert Job.objects.count() == 2


def test_release__retryable_failure__step_stays_enqueued_same_job_dependents_blocked(
    step_types: None,
) -> None:
    flow = Workflow("retry")
    first = flow.step("first", OTHER_TYPE)
    flow.step("second", STEP_TYPE, after=[first])
    run = start_workflow(flow).run_id
    job = fail(run, "first", retryable=True)
    step = WorkflowStep.objects.get(workflow_run_id=run, step_key="first")
    assert (step.status, step.job_id) == ("ENQUEUED", job.lease.job_id)
    assert Job.objects.get(id=job.lease.job_id).status == "PENDING"
    assert statuses(run)["second"] == "BLOCKED"
    assert Job.objects.count() == 1
    Job.objects.filter(id=job.lease.job_id).update(next_run_at=run_sql("SELECT now()")[0][0])
    succeed(run, "first")
    assert statuses(run)["second"] == "ENQUEUED"


def test_release__plain_job__completion_runs_no_workflow_sql(
    step_types: None, make_definition: MakeDefinition
) -> None:
    make_definition("plain.job")
    Job.objects.create(job_type_id="plain.job", max_attempts=1)
    with CaptureQueriesContext(connection) as captured:
        claimed = claim_jobs(["plain.job"], worker_id=WORKER, limit=1, lease_seconds=60)
        complete_job_success(claimed[0].lease, output={"ok": 1})
    assert len(captured) == 2
    assert not any("workflow" in query["sql"].replace("workflow_step_id", "") for query in captured)


def test_release__plain_jobs__grouped_success_one_statement(
    step_types: None, make_definition: MakeDefinition
) -> None:
    make_definition("plain.job")
    for _ in range(3):
        Job.objects.create(job_type_id="plain.job", max_attempts=1)
    claimed = claim_jobs(["plain.job"], worker_id=WORKER, limit=3, lease_seconds=60)
    with CaptureQueriesContext(connection) as captured:
        done = complete_jobs_success([(job.lease, None) for job in claimed])
    assert len(done) == 3
    assert len(captured) == 1


def test_release__grouped_success_of_workflow_and_plain_jobs__both_recorded(
    step_types: None, make_definition: MakeDefinition
) -> None:
    make_definition("plain.job")
    Job.objects.create(job_type_id="plain.job", max_attempts=1)
    run = start_workflow(diamond()).run_id
    claimed = claim_jobs(["plain.job", STEP_TYPE], worker_id=WORKER, limit=3, lease_seconds=60)
    assert len(claimed) == 3
    done = complete_jobs_success([(job.lease, encode_output({"k": 1})) for job in claimed])
    assert done == {job.lease.job_id for job in claimed}
    assert statuses(run)["ship"] == "ENQUEUED"


def test_release__complete_and_claim__workflow_success_releases_and_refills(
    step_types: None,
) -> None:
    run = start_workflow(diamond()).run_id
    first = claim_jobs([STEP_TYPE], worker_id=WORKER, limit=2, lease_seconds=60)
    done, refilled = complete_and_claim(
        [(job.lease, None) for job in first], [STEP_TYPE], limit=2, lease_seconds=60
    )
    assert len(done) == 2
    ship = WorkflowStep.objects.get(workflow_run_id=run, step_key="ship")
    assert [job.lease.job_id for job in refilled] == [ship.job_id]
    assert refilled[0].lease.workflow_step_id == ship.id


def test_release__lease_without_step_id__still_releases(step_types: None) -> None:
    """A lease built by hand (no step id) of a workflow job goes the workflow way."""
    run = start_workflow(diamond()).run_id
    charge = claim_step(run, "charge")
    bare = JobLease(
        job_id=charge.lease.job_id,
        run_number=charge.lease.run_number,
        attempt=charge.lease.attempt,
        worker_id=charge.lease.worker_id,
    )
    complete_job_success(bare, output=None)
    assert statuses(run)["charge"] == "SUCCEEDED"
    succeed(run, "reserve")
    assert statuses(run)["ship"] == "ENQUEUED"


def test_release__lost_lease__refused_nothing_released(step_types: None) -> None:
    run = start_workflow(diamond()).run_id
    charge = claim_step(run, "charge")
    other = JobLease(
        job_id=charge.lease.job_id,
        run_number=charge.lease.run_number,
        attempt=charge.lease.attempt,
        worker_id="someone-else",
        workflow_step_id=charge.lease.workflow_step_id,
    )
    with pytest.raises(RunledgerError) as caught:
        complete_job_success(other)
    assert caught.value.code == "job.lease_owner_mismatch"
    assert statuses(run)["charge"] == "ENQUEUED"


def test_release__inside_caller_block_rolled_back__nothing_released(step_types: None) -> None:
    run = start_workflow(diamond()).run_id
    succeed(run, "charge")
    reserve = claim_step(run, "reserve")

    class RollbackError(Exception):
        pass

    with pytest.raises(RollbackError), transaction.atomic():
        complete_job_success(reserve.lease)
        assert statuses(run)["ship"] == "ENQUEUED"
        raise RollbackError
    assert statuses(run)["ship"] == "BLOCKED"
    assert Job.objects.get(id=reserve.lease.job_id).status == "LEASED"
    assert Job.objects.filter(workflow_step_id__isnull=False).count() == 2


def test_release__job_canceled__step_canceled_terminal_dependent_runs(step_types: None) -> None:
    flow = Workflow("cancel-one")
    first = flow.step("first", STEP_TYPE)
    flow.step("on_success", STEP_TYPE, after=[first])
    flow.step("always", STEP_TYPE, after=[first], when="terminal")
    run = start_workflow(flow).run_id
    job_id = WorkflowStep.objects.get(workflow_run_id=run, step_key="first").job_id
    assert job_id is not None
    cancel_job(job_id, scope=ReadScope.ADMIN)
    assert statuses(run) == {"first": "CANCELED", "on_success": "CANCELED", "always": "ENQUEUED"}


def test_release__reaper_dead_letters_expired_lease__step_failed_and_propagated(
    step_types: None,
) -> None:
    run = start_workflow(diamond()).run_id
    charge = claim_step(run, "charge")
    Job.objects.filter(id=charge.lease.job_id).update(
        lease_expires_at=run_sql("SELECT now() - interval '1 minute'")[0][0]
    )
    report = reap_expired_leases([STEP_TYPE])
    assert report.dead_lettered == 1
    succeed(run, "reserve")
    assert statuses(run)["charge"] == "FAILED"
    assert statuses(run)["ship"] == "CANCELED"
    assert statuses(run)["notify"] == "ENQUEUED"


def test_release__reaper_retries_expired_lease__dependents_blocked_then_released_once(
    step_types: None,
) -> None:
    flow = Workflow("reaped")
    first = flow.step("first", OTHER_TYPE)
    flow.step("second", STEP_TYPE, after=[first])
    run = start_workflow(flow).run_id
    lost = claim_step(run, "first")
    Job.objects.filter(id=lost.lease.job_id).update(
        lease_expires_at=run_sql("SELECT now() - interval '1 minute'")[0][0]
    )
    assert reap_expired_leases([OTHER_TYPE], retry_delay_ms=1).retried == 1
    assert statuses(run) == {"first": "ENQUEUED", "second": "BLOCKED"}
    with pytest.raises(RunledgerError):
        complete_job_success(lost.lease)  # the first worker's late completion is fenced
    assert statuses(run)["second"] == "BLOCKED"
    Job.objects.filter(id=lost.lease.job_id).update(next_run_at=run_sql("SELECT now()")[0][0])
    succeed(run, "first")
    assert statuses(run)["second"] == "ENQUEUED"
    assert Job.objects.filter(job_type_id=STEP_TYPE).count() == 1


def test_requeue_and_replay__workflow_job__refused(step_types: None) -> None:
    run = start_workflow(diamond()).run_id
    failed = fail(run, "charge")
    with pytest.raises(RunledgerError) as caught:
        requeue_job(failed.lease.job_id, scope=ReadScope.ADMIN)
    assert caught.value.code == "job.workflow_requeue_not_supported"
    done = succeed(run, "reserve")
    with pytest.raises(RunledgerError) as caught:
        replay_job(done.lease.job_id, scope=ReadScope.ADMIN, reason="again", request_key="k")
    assert caught.value.code == "job.workflow_requeue_not_supported"


def test_continue_job__workflow_step__refused_nothing_changes(step_types: None) -> None:
    run = start_workflow(diamond()).run_id
    charge = claim_step(run, "charge")
    with pytest.raises(RunledgerError) as caught:
        continue_job(charge.lease)
    assert caught.value.code == "job.workflow_handler_continuation_not_enabled"
    assert Job.objects.get(id=charge.lease.job_id).status == "LEASED"


def test_release__forged_edge_across_runs__internal_state_all_rolled_back(
    step_types: None,
) -> None:
    first = start_workflow(diamond()).run_id
    second = start_workflow(diamond()).run_id
    source = WorkflowStep.objects.get(workflow_run_id=first, step_key="charge")
    target = WorkflowStep.objects.get(workflow_run_id=second, step_key="ship")
    # Only a writer bypassing the foreign keys can make this edge.
    run_sql("SET session_replication_role = replica")
    run_sql(
        "INSERT INTO runledger_workflow_step_dependencies"
        " (workflow_run_id, prerequisite_step_id, dependent_step_id, release_mode)"
        " VALUES (%s, %s, %s, 'ON_SUCCESS')",
        [first, source.id, target.id],
    )
    run_sql("RESET session_replication_role")
    charge = claim_step(first, "charge")
    with pytest.raises(RunledgerError) as caught:
        complete_job_success(charge.lease)
    assert caught.value.code == "workflow.internal_state"
    assert Job.objects.get(id=charge.lease.job_id).status == "LEASED"
    assert statuses(first)["charge"] == "ENQUEUED"
    assert WorkflowStep.objects.get(id=target.id).dependency_count_pending == 2


def test_release__external_root_and_job_root__run_waits_for_external(step_types: None) -> None:
    flow = Workflow("gated")
    flow.external("approval")
    flow.step("work", STEP_TYPE)
    run = start_workflow(flow).run_id
    assert run_row(run)["status"] == "RUNNING"
    succeed(run, "work")
    row = run_row(run)
    assert (row["status"], row["steps_waiting"], row["finished_at"]) == (
        "WAITING_FOR_EXTERNAL",
        1,
        None,
    )


def test_release__run_counters__same_statements_for_a_small_and_a_large_run(
    step_types: None,
) -> None:
    """The run's status moves by counters (item 24): finishing a step of a run with 400
    other steps takes the same statements, and reads no step row but its own dependents',
    as finishing one in a run of 3 (the first completion of a session also reads its
    isolation level once)."""

    def run_with(others: int) -> uuid.UUID:
        flow = Workflow("sized")
        root = flow.step("root", STEP_TYPE)
        flow.step("next", STEP_TYPE, after=[root])
        other_root = flow.step("other_root", STEP_TYPE)
        for index in range(others):
            flow.step(f"other{index}", STEP_TYPE, after=[other_root])
        return start_workflow(flow).run_id

    sizes = []
    for others in (0, 1, 400):
        run = run_with(others)
        root = claim_step(run, "root")
        with CaptureQueriesContext(connection) as captured:
            complete_job_success(root.lease)
        # Wake-ups are coalesced in time, so whether one was sent is not the point here.
        sizes.append(sum("synchronous_commit" not in query["sql"] for query in captured))
        assert statuses(run)["next"] == "ENQUEUED"
    assert sizes[1] == sizes[2]


def test_run_lock_key__database_and_service_agree(step_types: None) -> None:
    """The worker's fused completion takes the run lock by a key the database computes;
    cancel takes it by the service's: they must be one lock."""
    for _ in range(20):
        run_id = uuid.uuid4()
        folded = run_sql(
            "SELECT ('x' || left(replace(%(id)s::text, '-', ''), 16))::bit(64)::bigint"
            " # ('x' || right(replace(%(id)s::text, '-', ''), 16))::bit(64)::bigint"
            " # 8247619702734454784",
            {"id": run_id},
        )[0][0]
        assert folded == run_lock_key(run_id)
