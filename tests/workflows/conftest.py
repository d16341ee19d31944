"""Workflow test helpers: definitions, claiming and finishing a step's job like a worker."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from runledger_django.domain import ClaimedJob, FailureKind, JobFailure
from runledger_django.models import Job, WorkflowRun, WorkflowStep
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.conftest import MakeDefinition
from tests.worker.conftest import register  # noqa: F401  (the handler registry fixture)

STEP_TYPE = "wf.step"
OTHER_TYPE = "wf.other"
WORKER = "worker-wf"


@pytest.fixture
def step_types(make_definition: MakeDefinition) -> None:
    make_definition(STEP_TYPE, max_attempts=1)
    make_definition(OTHER_TYPE, max_attempts=3)


def claim_step(run_id: uuid.UUID, key: str, *, worker: str = WORKER) -> ClaimedJob:
    """Lease exactly the job of step ``key`` (by bumping it to the front of the queue)."""
    step = WorkflowStep.objects.get(workflow_run_id=run_id, step_key=key)
    assert step.job_id is not None, f"step {key} has no job"
    Job.objects.filter(id=step.job_id).update(priority=1_000_000)
    job_type = Job.objects.values_list("job_type", flat=True).get(id=step.job_id)
    claimed = claim_jobs([job_type], worker_id=worker, limit=1, lease_seconds=60)
    assert [job.lease.job_id for job in claimed] == [step.job_id]
    return claimed[0]


def succeed(run_id: uuid.UUID, key: str, output: Any = None) -> ClaimedJob:
    job = claim_step(run_id, key)
    complete_job_success(job.lease, output=output)
    return job


def fail(run_id: uuid.UUID, key: str, *, retryable: bool = False) -> ClaimedJob:
    job = claim_step(run_id, key)
    complete_job_failure(
        job.lease,
        JobFailure(
            kind=FailureKind.RETRYABLE if retryable else FailureKind.TERMINAL,
            code="test.failed",
            message="it failed",
            policy_retry_delay_ms=1 if retryable else None,
        ),
    )
    return job


def statuses(run_id: uuid.UUID) -> dict[str, str]:
    return dict(
        WorkflowStep.objects.filter(workflow_run_id=run_id).values_list("step_key", "status")
    )


def run_row(run_id: uuid.UUID) -> dict[str, Any]:
    return dict(WorkflowRun.objects.values().get(id=run_id))


Finish = Callable[..., ClaimedJob]
