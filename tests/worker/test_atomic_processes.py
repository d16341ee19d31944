"""Exactly-once effects across real worker crashes: ``runledger_worker`` subprocesses running the
atomic handlers of tests/exactly_app/jobs.py, SIGKILLed inside the handler's transaction,
before and after its completion statement.

The tests synchronise on the handler's start file (which carries its backend's pid), on that
backend in pg_stat_activity (idle in its open transaction, or waiting at COMMIT for the gate
lock the test holds) and on rows; never on sleeps. In every case the handler's effect rows
number exactly one per job at the end.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runledger_django import enqueue_job
from tests.conftest import MakeDefinition, wait_for_lock_wait
from tests.exactly_app import EFFECT, LATE, SLICES
from tests.exactly_app.models import Effect
from tests.worker.conftest import SpawnWorker, attempt_rows, job_row, make_due, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

FAST = {
    "WORKER_POLL_INTERVAL": 0.2,
    "WORKER_IDLE_POLL_SECONDS": 1.0,
    "REAPER_INTERVAL_SECONDS": 0.5,
    "LEASE_SECONDS": 2,
}
GATE = 9090


@pytest.fixture
def files(tmp_path: Path) -> Iterator[dict[str, Path]]:
    paths = {"started": tmp_path / "started", "release": tmp_path / "release"}
    yield paths
    paths["release"].touch()


@pytest.fixture(autouse=True)
def definitions(make_definition: MakeDefinition) -> None:
    for job_type in (EFFECT, LATE, SLICES):
        make_definition(job_type, max_attempts=5, default_timeout_seconds=60)


def started(files: dict[str, Path]) -> list[list[str]]:
    path = files["started"]
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def state_of(observer: psycopg.Connection[Any], pid: int) -> str | None:
    row = observer.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return None if row is None else str(row[0])


def reaped(job_id: uuid.UUID) -> bool:
    return [a["failure_kind"] for a in attempt_rows(job_id)][:1] == ["LEASE_EXPIRED"]


def due_and_succeeded(job_id: uuid.UUID) -> bool:
    """Skip the reaper's retry delay (the path is the point, not the wait); then look."""
    make_due(job_id)
    return bool(job_row(job_id)["status"] == "SUCCEEDED")


def effects(job_id: uuid.UUID) -> list[int]:
    return list(Effect.objects.filter(job_id=job_id).values_list("attempt", flat=True))


@pytest.mark.parametrize("job_type", [EFFECT, LATE])
def test_worker__sigkilled_inside_atomic_transaction__effect_applied_once(
    spawn_worker: SpawnWorker,
    files: dict[str, Path],
    observer: psycopg.Connection[Any],
    job_type: str,
) -> None:
    """Killed before the completion statement (``atomic=True``: inside the handler; the
    ``complete_atomically`` handler: inside its block): the server rolls the open transaction
    back with its connection; another worker reaps the lease and runs the job again, and its
    effect is the only one."""
    payload = {"started": str(files["started"]), "release": str(files["release"])}
    job_id = enqueue_job(job_type, payload).job_id
    first = spawn_worker("--job-type", job_type, **FAST)
    line = wait_until(lambda: started(files), what="the handler to start")[0]
    pid = int(line[2])
    assert state_of(observer, pid) == "idle in transaction"
    assert observer.execute(
        "SELECT count(*) FROM exact_effects WHERE job_id = %s", [job_id]
    ).fetchone() == (0,)  # written, not committed
    first.signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    wait_until(lambda: state_of(observer, pid) is None, what="the killed worker's backend to go")
    assert effects(job_id) == []

    files["release"].touch()
    second = spawn_worker("--job-type", job_type, **FAST)
    wait_until(lambda: reaped(job_id), what="the reaper")
    wait_until(lambda: due_and_succeeded(job_id), what="the re-run")
    assert effects(job_id) == [2]
    assert [a["outcome"] for a in attempt_rows(job_id)] == ["RETRY_SCHEDULED", "SUCCEEDED"]
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


@pytest.mark.parametrize("then", ["commit_finishes", "backend_terminated"])
def test_worker__sigkilled_after_completion_statement__effect_applied_once(
    spawn_worker: SpawnWorker, observer: psycopg.Connection[Any], then: str
) -> None:
    """Killed after the completion statement, while COMMIT waits at the gate: the outcome is
    the server's. If the commit goes through (the gate opens), the job is SUCCEEDED by the
    dead worker's attempt and nothing runs again; if the server aborts it (the backend is
    terminated), the lease expires, another worker runs the job, and only its effect stays."""
    observer.execute("SELECT pg_advisory_lock(%s)", [GATE])
    job_id = enqueue_job(EFFECT, {"gate": GATE}).job_id
    first = spawn_worker("--job-type", EFFECT, **FAST)
    waiting = wait_for_lock_wait(observer, "COMMIT", timeout=30)
    assert job_row(job_id)["status"] == "LEASED"  # the completion is written, not committed
    first.signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    if then == "commit_finishes":
        observer.execute("SELECT pg_advisory_unlock(%s)", [GATE])
    else:
        observer.execute("SELECT pg_terminate_backend(%s)", [waiting["pid"]])
        observer.execute("SELECT pg_advisory_unlock(%s)", [GATE])
    wait_until(lambda: state_of(observer, waiting["pid"]) is None, what="the backend to end")

    if then == "commit_finishes":
        row = job_row(job_id)
        assert (row["status"], row["attempt"]) == ("SUCCEEDED", 1)
        assert effects(job_id) == [1]
        burst = spawn_worker("--job-type", EFFECT, "--burst", **FAST)
        assert burst.wait() == 0
        assert effects(job_id) == [1]
        return
    assert effects(job_id) == []
    second = spawn_worker("--job-type", EFFECT, **FAST)
    wait_until(lambda: reaped(job_id), what="the reaper")
    wait_until(lambda: due_and_succeeded(job_id), what="the re-run")
    assert effects(job_id) == [2]
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def test_worker__atomic_slices_across_a_kill__each_slice_applied_once(
    spawn_worker: SpawnWorker,
) -> None:
    """Item 68 across processes: three slices, each with its effect and its checkpoint in one
    transaction."""
    job_id = enqueue_job(SLICES, {"slices": 3}).job_id
    worker = spawn_worker("--job-type", SLICES, **FAST)
    wait_until(lambda: job_row(job_id)["status"] == "SUCCEEDED", what="three slices")
    runs = sorted(Effect.objects.filter(job_id=job_id).values_list("run_number", flat=True))
    assert runs == [1, 2, 3]
    assert job_row(job_id)["output"] == {"slices": 3}
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
