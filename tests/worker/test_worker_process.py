"""``manage.py runledger_worker`` as real processes: draining together, crashes, stuck handlers,
signals, a lost database connection, ``--burst``, ``--promote`` and ``--json``.

Each worker is a subprocess (tests/worker/processes.py) running the handlers of
tests/worker_app/jobs.py against the test database, with short timings from environment
variables. Tests synchronise on what a worker prints, on rows, on the handlers' start log and
on the worker's backends in pg_stat_activity (the listener's LISTEN connection closes when a
stopping worker begins to shut down); they never sleep in place of an event.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connections

from runledger_django import Workflow, enqueue_job, record_intent, record_workflow_intent
from runledger_django.models import Job, JobAttempt, JobEvent, WorkflowIntent, WorkflowRun
from runledger_django.worker.registry import Handler, Registry
from runledger_django.worker.runtime import EXIT_STUCK, Worker, WorkerConfig
from tests.conftest import connection_kwargs, run_sql
from tests.worker.conftest import (
    SpawnWorker,
    attempt_rows,
    event_types,
    job_row,
    make_due,
    wait_until,
)
from tests.worker.processes import WorkerProcess
from tests.worker_app import BLOCK, FLAKY, NOOP

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("app_definitions")]

FAST = {
    "WORKER_POLL_INTERVAL": 0.2,
    "WORKER_IDLE_POLL_SECONDS": 1.0,
    "REAPER_INTERVAL_SECONDS": 0.5,
}


@pytest.fixture
def files(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """The handlers' start log and a release file; released at teardown, so no handler of a
    still-running worker blocks past the test."""
    paths = {"log": tmp_path / "starts.log", "release": tmp_path / "release"}
    yield paths
    paths["release"].touch()


def block_payload(files: dict[str, Path], **extra: Any) -> dict[str, Any]:
    return {"log": str(files["log"]), "release": str(files["release"]), **extra}


def starts(files: dict[str, Path]) -> list[list[str]]:
    """One entry per handler start: job id, run number, attempt, worker id, process id."""
    if not files["log"].exists():
        return []
    return [line.split() for line in files["log"].read_text().splitlines()]


def listening(worker: WorkerProcess) -> bool:
    """Whether the worker's wake-up listener is connected (its backend's last query)."""
    return bool(
        run_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND query LIKE 'LISTEN%%'",
            [worker.application_name],
        )[0][0]
    )


def started_shutdown(worker: WorkerProcess) -> None:
    """A stopping worker closes its listener first: wait for that (the signal arrived)."""
    wait_until(lambda: listening(worker), what="the listener to connect")
    worker.signal(signal.SIGTERM)
    wait_until(lambda: not listening(worker), what="the worker to begin stopping")


def json_lines(worker: WorkerProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in worker.stdout_lines if line.startswith("{")]


# --- many workers, each job once ---------------------------------------------------------------


def test_workers__processes_and_threads_drain_one_queue__each_job_succeeds_once(
    spawn_worker: SpawnWorker, files: dict[str, Path]
) -> None:
    """Two worker processes and two in-process Worker threads drain the same queue; every job
    succeeds exactly once: one handler start, one attempt row and one SUCCEEDED event each."""
    processes = [spawn_worker("--concurrency", "2", **FAST) for _ in range(2)]
    for process in processes:
        process.wait_for_line("runledger worker")
    registry = Registry()
    lock = threading.Lock()

    def in_process_handler(job: Any) -> dict[str, Any]:
        with lock, Path(job.payload["log"]).open("a") as log:
            log.write(
                f"{job.job_id} {job.run_number} {job.attempt} {job.worker_id} {os.getpid()}\n"
            )
        return {"n": job.payload["n"]}

    registry.register(Handler(job_type=NOOP, func=in_process_handler))
    stop = threading.Event()
    threads = []
    for number in range(2):
        config = WorkerConfig(
            job_types=[NOOP], concurrency=2, poll_interval=0.2, worker_id=f"thread-{number}"
        )
        worker = Worker(config, registry, stop=stop)

        def main(worker: Worker = worker) -> None:
            try:
                worker.run()
            finally:
                connections.close_all()

        thread = threading.Thread(target=main, daemon=True)
        thread.start()
        threads.append(thread)

    ids = [enqueue_job(NOOP, {"n": n, "log": str(files["log"])}).job_id for n in range(150)]
    try:
        wait_until(
            lambda: Counter(Job.objects.values_list("status", flat=True)) == {"SUCCEEDED": 150},
            timeout=60,
            what="every job to succeed",
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)

    assert sorted(Counter(row[0] for row in starts(files)).items()) == sorted(
        (str(job_id), 1) for job_id in ids
    )
    assert Counter(JobAttempt.objects.values_list("job_id", flat=True)) == Counter(
        dict.fromkeys(ids, 1)
    )
    succeeded = JobEvent.objects.filter(event_type="SUCCEEDED").values_list("job_id", flat=True)
    assert Counter(succeeded) == Counter(dict.fromkeys(ids, 1))
    for process in processes:
        process.signal(signal.SIGTERM)
    assert [process.wait() for process in processes] == [0, 0]


# --- a crashed worker, a stuck handler --------------------------------------------------------------


@pytest.mark.slow
def test_worker__sigkilled_mid_job__job_rerun_by_another_worker_after_lease_expiry(
    spawn_worker: SpawnWorker, files: dict[str, Path]
) -> None:
    """Worker A is SIGKILLed while its handler runs; its 2 s lease expires, worker B's reaper
    returns the job to PENDING (attempt 1: LEASE_EXPIRED), and B runs it again. The reaper's
    flat 30 s retry delay is skipped by making the job due (the test asserts the path, not
    the delay)."""
    job_id = enqueue_job(BLOCK, block_payload(files)).job_id
    first = spawn_worker(LEASE_SECONDS=2, **FAST)
    wait_until(lambda: starts(files), what="worker A's handler to start")
    first.signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    assert job_row(job_id)["status"] == "LEASED"

    second = spawn_worker(LEASE_SECONDS=2, **FAST)
    wait_until(
        lambda: [a["failure_kind"] for a in attempt_rows(job_id)] == ["LEASE_EXPIRED"],
        what="worker B's reaper to take the expired lease",
    )
    files["release"].touch()
    make_due(job_id)
    wait_until(lambda: job_row(job_id)["status"] == "SUCCEEDED", what="the re-run")

    attempts = attempt_rows(job_id)
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [
        (1, "RETRY_SCHEDULED"),
        (2, "SUCCEEDED"),
    ]
    assert attempts[0]["worker_id"] != attempts[1]["worker_id"]
    runs = starts(files)
    assert [(run[2], run[4]) for run in runs] == [("1", str(first.pid)), ("2", str(second.pid))]
    assert job_row(job_id)["output"] == {"released": True, "attempt": 2}
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


@pytest.mark.slow
def test_worker__handler_stuck_past_deadline_and_grace__other_jobs_handed_back_exit_70(
    spawn_worker: SpawnWorker, files: dict[str, Path]
) -> None:
    """The stuck attempt is failed with job.timeout_exceeded at its 1 s deadline without
    waiting for the handler; 1 s of grace later the worker hands back its other job (PENDING,
    due now, attempt INTERRUPTED) and exits 70 for its supervisor to restart it."""
    stuck = enqueue_job(BLOCK, block_payload(files, n=1), timeout_seconds=1).job_id
    other = enqueue_job(BLOCK, block_payload(files, n=2)).job_id
    worker = spawn_worker("--concurrency", "2", "--grace", "1", "--json", **FAST)

    status = worker.wait(60)

    assert status == EXIT_STUCK, worker.stderr_lines
    assert any("stuck" in line for line in worker.stderr_lines)
    stuck_row, stuck_attempt = job_row(stuck), attempt_rows(stuck)[0]
    assert (stuck_row["status"], stuck_row["last_error_code"]) == (
        "PENDING",
        "job.timeout_exceeded",
    )
    assert (stuck_attempt["outcome"], stuck_attempt["failure_kind"]) == (
        "RETRY_SCHEDULED",
        "TIMEOUT",
    )
    other_row = job_row(other)
    assert (other_row["status"], other_row["status_reason"], other_row["attempt"]) == (
        "PENDING",
        "WORKER_STUCK",
        1,
    )
    assert other_row["next_run_at"] <= run_sql("SELECT now()")[0][0]
    assert attempt_rows(other)[0]["outcome"] == "INTERRUPTED"
    assert event_types(other)[-1] == "REQUEUED"
    assert [
        (line["job_id"], line["outcome"], line["error_code"]) for line in json_lines(worker)
    ] == [(str(stuck), "retried", "job.timeout_exceeded")]


# --- signals -----------------------------------------------------------------------------------


def test_worker__sigterm_with_a_running_handler__finishes_within_grace_exit_0(
    spawn_worker: SpawnWorker, files: dict[str, Path]
) -> None:
    job_id = enqueue_job(BLOCK, block_payload(files)).job_id
    worker = spawn_worker(**FAST)
    wait_until(lambda: starts(files), what="the handler to start")

    started_shutdown(worker)
    later = enqueue_job(NOOP, {}).job_id  # a stopping worker claims nothing more
    files["release"].touch()

    assert worker.wait() == 0
    assert job_row(job_id)["status"] == "SUCCEEDED"
    assert [a["outcome"] for a in attempt_rows(job_id)] == ["SUCCEEDED"]
    assert job_row(later)["status"] == "PENDING"
    assert worker.stdout_lines[-1].endswith("stopped by signal.")


def test_worker__sigterm_with_a_handler_longer_than_grace__handed_back_exit_0(
    spawn_worker: SpawnWorker, files: dict[str, Path]
) -> None:
    job_id = enqueue_job(BLOCK, block_payload(files)).job_id
    worker = spawn_worker("--grace", "0.5", **FAST)
    wait_until(lambda: starts(files), what="the handler to start")

    started_shutdown(worker)

    assert worker.wait() == 0
    row = job_row(job_id)
    assert (row["status"], row["status_reason"], row["worker_id"], row["attempt"]) == (
        "PENDING",
        "WORKER_SHUTDOWN",
        None,
        1,
    )
    assert row["next_run_at"] <= run_sql("SELECT now()")[0][0]
    assert [a["outcome"] for a in attempt_rows(job_id)] == ["INTERRUPTED"]
    assert event_types(job_id)[-1] == "REQUEUED"


def test_worker__second_signal__hands_back_at_once(
    spawn_worker: SpawnWorker, files: dict[str, Path]
) -> None:
    """With 120 s of grace, only the second SIGTERM can end the worker within the wait."""
    job_id = enqueue_job(BLOCK, block_payload(files)).job_id
    worker = spawn_worker("--grace", "120", **FAST)
    wait_until(lambda: starts(files), what="the handler to start")
    started_shutdown(worker)

    worker.signal(signal.SIGTERM)

    assert worker.wait(timeout=60) == 0
    assert (job_row(job_id)["status"], job_row(job_id)["status_reason"]) == (
        "PENDING",
        "WORKER_SHUTDOWN",
    )


# --- a lost database connection -----------------------------------------------------------------


@pytest.fixture
def admin_session() -> Iterator[psycopg.Connection[Any]]:
    """A session on the maintenance database, to refuse and re-allow connections to ours."""
    session = psycopg.connect(**{**connection_kwargs(), "dbname": "postgres"}, autocommit=True)
    yield session
    session.close()


def test_worker__backends_terminated_while_reconnects_refused__recovers_and_runs_jobs(
    spawn_worker: SpawnWorker, admin_session: psycopg.Connection[Any]
) -> None:
    """Every backend of a running worker is terminated, and for a moment the database refuses
    new connections: the worker rides it out (one outage line), reconnects, and goes on
    running jobs: the next outcome its executor records, on a connection that died while it
    waited for work, is written on a new one."""
    worker = spawn_worker("--json", OUTAGE_LIMIT_SECONDS=60, **FAST)
    before = enqueue_job(NOOP, {"n": 1}).job_id
    worker.wait_for_line('"succeeded"')
    database = run_sql("SELECT current_database()")[0][0]
    admin_session.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS false')
    try:
        terminated = run_sql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            [worker.application_name],
        )[0][0]
        assert terminated >= 2  # the loop's and the listener's connections at least
        worker.wait_for_line("database unreachable", stream="stderr")
    finally:
        admin_session.execute(f'ALTER DATABASE "{database}" WITH ALLOW_CONNECTIONS true')
    after = [enqueue_job(NOOP, {"n": n}).job_id for n in (2, 3)]

    wait_until(
        lambda: all(job_row(job_id)["status"] == "SUCCEEDED" for job_id in after),
        what="jobs enqueued after the outage",
    )
    assert job_row(before)["status"] == "SUCCEEDED"
    # Each ran once: the executor's dead connection cost no outcome (no reaper round trip).
    assert [[a["outcome"] for a in attempt_rows(job_id)] for job_id in after] == [
        ["SUCCEEDED"],
        ["SUCCEEDED"],
    ]
    assert worker.process.poll() is None
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert any("reachable again" in line for line in worker.stderr_lines)
    assert not any("could not record" in line for line in worker.stderr_lines)


# --- --burst, --promote, --json --------------------------------------------------------------------


def test_worker__burst__drains_then_exits_0(spawn_worker: SpawnWorker) -> None:
    ids = [enqueue_job(NOOP, {"n": n}).job_id for n in range(5)]
    future = enqueue_job(
        NOOP, {"n": 9}, next_run_at=run_sql("SELECT now() + interval '1 hour'")[0][0]
    ).job_id

    worker = spawn_worker("--burst", "--concurrency", "2")

    assert worker.wait() == 0
    assert all(job_row(job_id)["status"] == "SUCCEEDED" for job_id in ids)
    assert job_row(future)["status"] == "PENDING"
    assert worker.stdout_lines[-1] == (
        "Claimed 5 jobs: 5 succeeded, 0 retried, 0 dead-lettered, 0 lease lost; "
        "burst finished: nothing due."
    )


def test_worker__burst_promote__promotes_intents_first_then_runs_their_jobs(
    spawn_worker: SpawnWorker,
) -> None:
    intents = [record_intent(NOOP, {"n": n}, idempotency_key=f"k{n}") for n in range(3)]

    worker = spawn_worker("--burst", "--promote", "--job-type", NOOP)

    assert worker.wait() == 0
    jobs = Job.objects.filter(job_type=NOOP)
    assert sorted(job.idempotency_key or "" for job in jobs) == ["k0", "k1", "k2"]
    assert {job.status for job in jobs} == {"SUCCEEDED"}
    assert len(intents) == 3


def test_worker__burst_promote__starts_workflow_intents_and_runs_their_steps(
    spawn_worker: SpawnWorker,
) -> None:
    flow = Workflow("worker.chain")
    first = flow.step("first", NOOP, {"n": 1})
    flow.step("second", NOOP, {"n": 2}, after=[first])
    intent = record_workflow_intent(flow, idempotency_key="chain")

    worker = spawn_worker("--burst", "--promote", "--job-type", NOOP)

    assert worker.wait() == 0
    run = WorkflowRun.objects.get()
    assert (run.status, run.idempotency_key, run.steps_succeeded) == ("SUCCEEDED", "chain", 2)
    promoted = WorkflowIntent.objects.get(id=intent.intent_id)
    assert (promoted.status, promoted.workflow_run_id) == ("PROMOTED", run.id)


def test_worker__json__one_object_per_finished_attempt(spawn_worker: SpawnWorker) -> None:
    ok = enqueue_job(NOOP, {"n": 1}).job_id
    flaky = enqueue_job(FLAKY, {"failures": 1}).job_id

    worker = spawn_worker("--burst", "--json")

    assert worker.wait() == 0
    lines = {line["job_id"]: line for line in json_lines(worker)}
    assert len(json_lines(worker)) == 2
    worker_id = lines[str(ok)]["worker_id"]
    assert set(lines[str(ok)]) == {
        "job_id",
        "job_type",
        "run_number",
        "attempt",
        "worker_id",
        "outcome",
        "error_code",
        "duration_seconds",
        "next_run_at",
    }
    assert {
        key: lines[str(ok)][key] for key in ("job_type", "attempt", "outcome", "error_code")
    } == {
        "job_type": NOOP,
        "attempt": 1,
        "outcome": "succeeded",
        "error_code": None,
    }
    retried = lines[str(flaky)]
    assert (retried["outcome"], retried["error_code"], retried["worker_id"]) == (
        "retried",
        "job.handler_failed",
        worker_id,
    )
    assert retried["next_run_at"] is not None
    assert (job_row(flaky)["status"], job_row(ok)["status"]) == ("PENDING", "SUCCEEDED")
    # The banner goes to stderr so stdout stays pure JSON lines.
    assert all(line.startswith("{") for line in worker.stdout_lines)


def test_worker__job_type_without_handler__refused_exit_1(spawn_worker: SpawnWorker) -> None:
    worker = spawn_worker("--job-type", "worker_tests.unknown", "--burst")

    assert worker.wait() == 1
    assert any("job.invalid_argument" in line for line in worker.stderr_lines)
