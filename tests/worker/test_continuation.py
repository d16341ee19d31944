"""Handler continuation: ``ContinueJob`` ends a slice and brings the same job back as its next
run (checklist items 49-53, 55 and 68 of reference/workflows.md section 12; upstream
job_continuation.rs and the continuation tests of completion_and_retry.rs).

Plain continuations run inside the per-test transaction (``execute`` on the test's
connection); the atomic ones are ``transaction=True`` (an atomic completion owns its
transaction).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from runledger_django import ContinueJob, JobContext, RunledgerError, enqueue_job, run_jobs
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import continue_job
from runledger_django.worker.execution import Execution, JobRun, execute
from runledger_django.worker.registry import Handler, HandlerFunc, Registry
from tests.conftest import MakeDefinition, run_sql
from tests.exactly_app.models import Effect
from tests.worker.conftest import (
    TYPE,
    Register,
    attempt_rows,
    claim_one,
    db_clock,
    event_rows,
    job_row,
    other_lease,
    resource_claims,
    stamp,
)


def run_once(handler: HandlerFunc, *, atomic: bool = False) -> JobRun:
    registry = Registry()
    registry.register(Handler(job_type=TYPE, func=handler, atomic=atomic))
    # In the per-test transaction now() stands still: a continuation due "now" (the clock at
    # its completion) is in that transaction's future.
    run_sql(
        "UPDATE runledger_job_queue SET next_run_at = now() "
        "WHERE status = 'PENDING' AND next_run_at <= clock_timestamp()"
    )
    claimed = claim_jobs([TYPE], worker_id="worker-c", limit=1, lease_seconds=60)
    assert len(claimed) == 1, "nothing due"
    return execute(Execution(claimed[0], lease_seconds=60), registry, using="default")


@pytest.fixture
def setup(make_definition: MakeDefinition) -> None:
    make_definition(max_attempts=1)


@pytest.mark.django_db
def test_execute__continue_job__same_job_next_run_checkpoint_kept(setup: None) -> None:
    """Items 49, 50: the attempt closes, the job is PENDING as run 2, attempt 0, checkpoint
    stored, a REQUEUED event on run 1 names the next run; the next run sees the checkpoint
    and the unchanged payload."""
    job_id = enqueue_job(TYPE, {"pages": 3}, execution_resource_key="report:9").job_id
    before = db_clock()
    run = run_once(lambda job: (_ for _ in ()).throw(ContinueJob(checkpoint={"page": 1})))

    row = job_row(job_id)
    assert (run.outcome, run.next_run_at) == ("continued", row["next_run_at"])
    assert (row["status"], row["run_number"], row["attempt"], row["stage"]) == (
        "PENDING",
        2,
        0,
        "queued",
    )
    assert (row["checkpoint"], row["status_reason"], row["output"]) == (
        {"page": 1},
        "HANDLER_CONTINUATION",
        None,
    )
    assert (row["worker_id"], row["lease_expires_at"], row["started_at"]) == (None, None, None)
    assert before <= row["next_run_at"]
    assert [(a["run_number"], a["outcome"]) for a in attempt_rows(job_id)] == [(1, "CONTINUED")]
    requeued = event_rows(job_id)[-1]
    assert (requeued["event_type"], requeued["run_number"], requeued["attempt"]) == (
        "REQUEUED",
        1,
        1,
    )
    assert requeued["payload"] == {
        "reason": "HANDLER_CONTINUATION",
        "requeue_kind": "HANDLER_CONTINUATION",
        "next_run_number": 2,
        "next_run_at": stamp(row["next_run_at"]),
        "delay_microseconds": 0,
    }
    assert resource_claims() == []  # released between slices

    seen: list[tuple[int, int, Any, Any]] = []

    def second(job: JobContext) -> None:
        seen.append((job.run_number, job.attempt, job.checkpoint, job.payload))

    assert run_once(second).outcome == "succeeded"
    assert seen == [(2, 1, {"page": 1}, {"pages": 3})]


@pytest.mark.django_db
def test_execute__continue_without_checkpoint__stored_checkpoint_kept(setup: None) -> None:
    job_id = enqueue_job(TYPE, {}).job_id

    def handler(job: JobContext) -> None:
        job.save_checkpoint({"cursor": "abc"})
        raise ContinueJob()

    assert run_once(handler).outcome == "continued"
    assert job_row(job_id)["checkpoint"] == {"cursor": "abc"}


@pytest.mark.django_db
def test_continue_job__wrong_worker_run_or_expired__mismatch_and_unchanged(setup: None) -> None:
    """Item 51."""
    job_id = enqueue_job(TYPE, {}).job_id
    lease = claim_one(job_types=[TYPE], worker_id="worker-c").lease
    before = job_row(job_id)
    for wrong in (
        other_lease(lease, worker_id="worker-z"),
        other_lease(lease, run_number=2),
        other_lease(lease, attempt=2),
    ):
        with pytest.raises(RunledgerError) as caught:
            continue_job(wrong, checkpoint={"x": 1})
        assert caught.value.code == "job.lease_owner_mismatch"
    run_sql(
        "UPDATE runledger_job_queue SET lease_expires_at = clock_timestamp() - interval '1 s' "
        "WHERE id = %s",
        [job_id],
    )
    with pytest.raises(RunledgerError) as caught:
        continue_job(lease)
    assert caught.value.code == "job.lease_owner_mismatch"
    after = job_row(job_id)
    assert {**after, "lease_expires_at": None} == {**before, "lease_expires_at": None}


@pytest.mark.django_db
@pytest.mark.parametrize("after", [-1, float("nan"), dt.timedelta(days=-1), "soon", 10**12])
def test_execute__continuation_delay_unschedulable__terminal_invalid_delay(
    setup: None, after: Any
) -> None:
    """Item 52 (first half); item 55: nothing of the continuation is written."""
    job_id = enqueue_job(TYPE, {}).job_id
    run = run_once(lambda job: (_ for _ in ()).throw(ContinueJob(after=after, checkpoint=1)))
    row = job_row(job_id)
    assert (run.outcome, run.error_code) == ("dead_lettered", "job.invalid_continuation_delay")
    assert (row["run_number"], row["checkpoint"]) == (1, None)


@pytest.mark.django_db
def test_execute__delayed_continuation__not_claimable_before_its_time(setup: None) -> None:
    """Item 52 (second half): due the delay after the completion, not before."""
    job_id = enqueue_job(TYPE, {}).job_id
    before = db_clock()
    run = run_once(lambda job: (_ for _ in ()).throw(ContinueJob(after=90.0000001)))
    row = job_row(job_id)
    assert run.outcome == "continued"
    delay = row["next_run_at"] - before
    assert dt.timedelta(seconds=90) < delay < dt.timedelta(seconds=100)
    assert event_rows(job_id)[-1]["payload"]["delay_microseconds"] == 90_000_001
    assert claim_jobs([TYPE], worker_id="worker-c", limit=1, lease_seconds=60) == []


@pytest.mark.django_db
def test_execute__continuations__not_bounded_by_max_attempts(setup: None) -> None:
    """Item 53: max_attempts is 1, yet five continuations and a final success all run: each
    slice is a new run with a fresh attempt budget."""
    job_id = enqueue_job(TYPE, {}).job_id

    def handler(job: JobContext) -> int | None:
        done = int(job.checkpoint or 0)
        if done < 5:
            raise ContinueJob(checkpoint=done + 1)
        return done

    outcomes = [run_once(handler).outcome for _ in range(6)]
    assert outcomes == ["continued"] * 5 + ["succeeded"]
    row = job_row(job_id)
    assert (row["status"], row["run_number"], row["attempt"], row["output"]) == (
        "SUCCEEDED",
        6,
        1,
        5,
    )


@pytest.mark.django_db
def test_execute__invalid_continuation_checkpoint__terminal_nothing_changes(setup: None) -> None:
    """Item 55: a checkpoint that cannot be stored fails the attempt; the job keeps its run and
    its stored checkpoint."""
    job_id = enqueue_job(TYPE, {}).job_id
    run = run_once(lambda job: (_ for _ in ()).throw(ContinueJob(checkpoint={1: "int key"})))
    row = job_row(job_id)
    assert (run.outcome, run.error_code) == ("dead_lettered", "job.invalid_checkpoint")
    assert (row["run_number"], row["checkpoint"]) == (1, None)


# --- item 68: a slice's writes and its checkpoint commit together -----------------------------


def slice_handler(job: JobContext) -> dict[str, int]:
    done = int((job.checkpoint or {}).get("done", 0))
    Effect.objects.create(
        job_id=job.job_id, run_number=job.run_number, attempt=job.attempt, worker_id=job.worker_id
    )
    if job.payload.get("fail_at") == done and job.attempt == 1:
        raise ValueError("this slice fails once")
    if done + 1 < 3:
        raise ContinueJob(checkpoint={"done": done + 1})
    return {"slices": done + 1}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("fail_at", [None, 1])
def test_run_jobs__atomic_slices__each_slice_applies_once_with_its_checkpoint(
    make_definition: MakeDefinition, register: Register, fail_at: int | None
) -> None:
    make_definition(max_attempts=3)
    register(TYPE, slice_handler, atomic=True)
    job_id = enqueue_job(TYPE, {"fail_at": fail_at}).job_id

    reports = []
    for _ in range(6):
        run_sql("UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id])
        reports.append(run_jobs([TYPE]))
        if job_row(job_id)["status"] == "SUCCEEDED":
            break
    row = job_row(job_id)
    assert (row["status"], row["output"], row["run_number"]) == ("SUCCEEDED", {"slices": 3}, 3)
    # One committed effect per slice: the failed attempt's effect rolled back with it.
    runs = sorted(Effect.objects.filter(job_id=job_id).values_list("run_number", flat=True))
    assert runs == [1, 2, 3]
    assert sum(report.continued for report in reports) == 2
    outcomes = [(a["run_number"], a["outcome"]) for a in attempt_rows(job_id)]
    expected = [(1, "CONTINUED"), (2, "CONTINUED"), (3, "SUCCEEDED")]
    if fail_at is not None:
        expected.insert(1, (2, "RETRY_SCHEDULED"))
    assert outcomes == expected
    assert isinstance(job_id, uuid.UUID)
