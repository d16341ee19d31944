"""Tasks across processes: real ``runledger_worker`` subprocesses (one killed mid-task) and an
enqueue from another process under the same idempotency key.

``transaction=True``: the subprocesses see only what this process committed.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; test_import.py covers Django 5.2"
)

import json
import signal
from pathlib import Path
from typing import Any

from django.tasks import TaskResultStatus, default_task_backend

from runledger_django.models import Job, JobAttempt, JobEnqueueIntent
from runledger_django.tasks import with_idempotency_key
from tests.conftest import run_sql
from tests.tasks.app_tasks import add, block_first_attempt, send_receipt
from tests.tasks.conftest import SpawnWorker, run_in_subprocess, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ENQUEUE_IN_ANOTHER_PROCESS = """
import json
from runledger_django import RunledgerError
from tests.tasks.app_tasks import send_receipt
try:
    result = send_receipt.with_idempotency_key({key!r}).enqueue({order_id})
except RunledgerError as error:
    print(json.dumps({{"error": error.code}}))
else:
    print(json.dumps({{"id": result.id, "status": result.status,
                      "value": result.return_value if result.is_finished else None}}))
"""


def enqueue_elsewhere(key: str, order_id: int) -> dict[str, Any]:
    out = run_in_subprocess(ENQUEUE_IN_ANOTHER_PROCESS.format(key=key, order_id=order_id))
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_enqueue__same_key_from_another_process__same_result_before_and_after_the_run(
    spawn_worker: SpawnWorker,
) -> None:
    """A checkout retried by another web process: one intent, one job, one run."""
    first = with_idempotency_key(send_receipt, "receipt:7").enqueue(7)

    assert enqueue_elsewhere("receipt:7", 7) == {"id": first.id, "status": "READY", "value": None}
    assert enqueue_elsewhere("receipt:7", 8) == {"error": "job.intent_idempotency_conflict"}

    worker = spawn_worker("--promote", "--burst")
    assert worker.wait() == 0, worker.stderr_lines

    again = enqueue_elsewhere("receipt:7", 7)
    assert again == {
        "id": first.id,
        "status": "SUCCESSFUL",
        "value": {"order_id": 7, "sent_to": "ada@example.com"},
    }
    counts = (JobEnqueueIntent.objects.count(), Job.objects.count(), JobAttempt.objects.count())
    assert counts == (1, 1, 1)


def test_runledger_worker__subprocess__runs_tasks_of_its_queues_only(
    spawn_worker: SpawnWorker,
) -> None:
    receipt = send_receipt.enqueue(1)
    other = add.enqueue(1, 2)

    worker = spawn_worker("--queue", "emails", "--promote", "--burst", "--json")
    assert worker.wait() == 0, worker.stderr_lines

    runs = [json.loads(line) for line in worker.stdout_lines if line.startswith("{")]
    assert [(run["job_type"], run["outcome"]) for run in runs] == [
        ("task:emails:tests.tasks.app_tasks.send_receipt", "succeeded")
    ]
    receipt.refresh()
    other.refresh()
    assert (receipt.status, other.status) == ("SUCCESSFUL", "READY")


def test_two_workers__many_tasks__each_run_exactly_once(spawn_worker: SpawnWorker) -> None:
    results = [add.enqueue(i, i) for i in range(30)]

    workers = [
        spawn_worker("--promote", "--burst", "--concurrency", "2", WORKER_POLL_INTERVAL=0.1)
        for _ in range(2)
    ]
    assert [worker.wait() for worker in workers] == [0, 0]

    for result in results:
        result.refresh()
    assert {result.status for result in results} == {TaskResultStatus.SUCCESSFUL}
    assert [result.return_value for result in results] == [2 * i for i in range(30)]
    assert JobAttempt.objects.count() == 30  # one attempt each: no task ran twice


def test_killed_worker__lease_expires__reaped_and_run_again_by_another_worker(
    spawn_worker: SpawnWorker, tmp_path: Path
) -> None:
    """django-tasks-db leaves such a task RUNNING for ever (its issue 46). Here the lease
    expires, the next worker's reaper returns the job, and it runs again: READY in between,
    the lost attempt in ``errors`` and both workers in ``worker_ids``."""
    result = block_first_attempt.enqueue(str(tmp_path / "never-released"))
    first = spawn_worker("--promote", LEASE_SECONDS=2, WORKER_POLL_INTERVAL=0.2)
    wait_until(lambda: JobAttempt.objects.exists(), what="the first worker's claim")
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING and result.attempts == 1

    first.signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    expired = "SELECT lease_expires_at < clock_timestamp() FROM runledger_job_queue"
    wait_until(lambda: run_sql(expired)[0][0], what="the dead worker's lease to expire")
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING  # nobody has reaped it yet

    reaper = spawn_worker("--burst", LEASE_SECONDS=2)  # its loop reaps before it claims
    assert reaper.wait() == 0, reaper.stderr_lines
    result.refresh()
    assert (result.status, result.attempts, len(result.errors)) == ("READY", 1, 1)
    assert "job.lease_expired" in result.errors[0].traceback

    # Skip the reaper's 30 s back-off rather than wait for it.
    run_sql("UPDATE runledger_job_queue SET next_run_at = now()")
    second = spawn_worker("--burst", LEASE_SECONDS=2)
    assert second.wait() == 0, second.stderr_lines

    result.refresh()
    workers = list(JobAttempt.objects.order_by("attempt").values_list("worker_id", flat=True))
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 2)
    assert result.worker_ids == workers and len(set(workers)) == 2
    assert default_task_backend.get_result(result.id) == result
