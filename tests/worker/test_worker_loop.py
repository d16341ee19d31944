"""The worker loop in-process: real Worker threads against real PostgreSQL.

Upstream: worker_loop.rs, capacity.rs, terminal_hooks.rs (the loop parts) and
completion_and_retry.rs (reporting after commit). Each test starts one or more ``Worker``s in
threads (each of their threads has its own connection) with a registry of its own, so the
process-wide registry is untouched. Handlers block on events the test sets; the test waits for
rows and outcomes, never for time, except where the scenario is a deadline.

All tests are ``transaction=True``: workers commit in their own connections.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from django.db import connections

from runledger_django import JobContext, ReadScope, cancel_job
from runledger_django.domain import JobStatus
from runledger_django.models import Job, JobAttempt, JobEvent
from runledger_django.worker.execution import JobRun, execute
from runledger_django.worker.registry import Handler, HandlerFunc, Registry
from runledger_django.worker.runtime import EXIT_OK, EXIT_STUCK, Worker, WorkerConfig, WorkerResult
from tests.conftest import OpenSession, run_sql
from tests.worker.conftest import (
    TYPE,
    Enqueue,
    attempt_rows,
    event_types,
    job_row,
    make_due,
    wait_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass
class RunningWorker:
    worker: Worker
    stop: threading.Event
    force: threading.Event
    thread: threading.Thread
    runs: list[JobRun] = field(default_factory=list)
    results: list[WorkerResult] = field(default_factory=list)

    def finish(self, *, force: bool = False, timeout: float = 60) -> WorkerResult:
        self.stop.set()
        if force:
            self.force.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        return self.results[0]

    def outcomes(self) -> list[str]:
        return [run.outcome for run in list(self.runs)]


StartWorker = Callable[..., RunningWorker]


@pytest.fixture
def gates() -> Iterator[list[threading.Event]]:
    """Events handlers wait on; all set at teardown so no handler thread is left blocked."""
    made: list[threading.Event] = []
    yield made
    for gate in made:
        gate.set()


def gate(gates: list[threading.Event]) -> threading.Event:
    event = threading.Event()
    gates.append(event)
    return event


@pytest.fixture
def start_worker(gates: list[threading.Event]) -> Iterator[StartWorker]:
    started: list[RunningWorker] = []

    def start(
        handlers: dict[str, HandlerFunc],
        *,
        on_run: Callable[[JobRun], None] | None = None,
        **overrides: Any,
    ) -> RunningWorker:
        registry = Registry()
        for job_type, func in handlers.items():
            registry.register(Handler(job_type=job_type, func=func))
        values: dict[str, Any] = {
            "job_types": list(handlers),
            "concurrency": 1,
            "lease_seconds": 60,
            "grace_seconds": 5.0,
            "poll_interval": 0.05,
            "listen": False,
            "worker_id": f"loop-{uuid.uuid4().hex[:8]}",
        }
        values.update(overrides)
        stop, force = threading.Event(), threading.Event()
        holder: dict[str, RunningWorker] = {}

        def record(run: JobRun) -> None:
            holder["running"].runs.append(run)
            if on_run is not None:
                on_run(run)

        worker = Worker(WorkerConfig(**values), registry, stop=stop, force=force, on_run=record)

        def main() -> None:
            try:
                holder["running"].results.append(worker.run())
            finally:
                connections.close_all()

        thread = threading.Thread(target=main, name="test-worker-loop", daemon=True)
        running = RunningWorker(worker=worker, stop=stop, force=force, thread=thread)
        holder["running"] = running
        started.append(running)
        thread.start()
        return running

    yield start
    for event in gates:  # handlers blocked on a gate would hold their executors forever
        event.set()
    for running in started:
        running.stop.set()
        running.force.set()
    for running in started:
        running.thread.join(60)
        # A worker that exited past a stuck handler left that executor running: once the gates
        # let it go it records its outcome, which must happen before the database is flushed.
        for thread in running.worker.threads:
            thread.join(60)


def failure_kinds(job_id: uuid.UUID) -> list[str | None]:
    return [attempt["failure_kind"] for attempt in attempt_rows(job_id)]


def statuses() -> Counter[str]:
    return Counter(Job.objects.values_list("status", flat=True))


def all_succeeded(count: int) -> Callable[[], bool]:
    return lambda: statuses() == Counter({"SUCCEEDED": count})


# --- many workers, each job once ---------------------------------------------------------------


def test_workers__several_in_process__every_job_succeeds_exactly_once(
    enqueue: Enqueue, start_worker: StartWorker
) -> None:
    ids = {enqueue({"n": n}) for n in range(60)}
    calls: list[uuid.UUID] = []
    lock = threading.Lock()

    def handler(job: JobContext) -> dict[str, Any]:
        with lock:
            calls.append(job.job_id)
        time.sleep(0.002)  # a little work, so the workers overlap
        return {"n": job.payload["n"]}

    workers = [start_worker({TYPE: handler}, concurrency=2) for _ in range(3)]
    wait_until(all_succeeded(len(ids)), what="every job to succeed")

    assert sorted(calls) == sorted(ids)
    assert Counter(JobAttempt.objects.values_list("job_id", flat=True)) == Counter(
        dict.fromkeys(ids, 1)
    )
    assert set(JobAttempt.objects.values_list("outcome", flat=True)) == {"SUCCEEDED"}
    succeeded = JobEvent.objects.filter(event_type="SUCCEEDED").values_list("job_id", flat=True)
    assert Counter(succeeded) == Counter(dict.fromkeys(ids, 1))
    results = [running.finish() for running in workers]
    assert [result.exit_code for result in results] == [EXIT_OK] * 3
    assert sum(result.report.succeeded for result in results) == len(ids)


def test_worker__batch_full__claims_the_next_batch_without_waiting_for_the_poll(
    enqueue: Enqueue, start_worker: StartWorker
) -> None:
    """worker_claims_next_batch_without_poll_delay_when_batch_is_full: with a 30 s poll
    interval and no notifications, seven jobs only drain quickly if every full batch is
    followed by another claim as soon as a slot frees."""
    for _ in range(7):
        enqueue()
    running = start_worker({TYPE: lambda job: None}, concurrency=2, poll_interval=30.0)

    wait_until(all_succeeded(7), timeout=20, what="the queue to drain before the poll interval")

    assert running.finish().report.claimed == 7


# --- handlers that fail, panic or crash the thread they run on -------------------------------------


def test_worker__deep_queue__each_success_claims_the_next_job_in_its_statement(
    enqueue: Enqueue, start_worker: StartWorker
) -> None:
    for _ in range(6):
        enqueue()
    running = start_worker({TYPE: lambda job: None}, concurrency=1)

    wait_until(all_succeeded(6), what="the queue to drain")

    assert running.finish().report.claimed == 6
    times = JobAttempt.objects.values_list("leased_at", "finished_at")
    leased = {leased_at for leased_at, _ in times}
    finished = {finished_at for _, finished_at in times}
    # The loop claimed the first job; every later one was claimed by the statement that
    # recorded the success before it.
    assert len(leased & finished) == 5


def test_worker__handler_raises_or_panics__worker_goes_on(
    enqueue: Enqueue, start_worker: StartWorker
) -> None:
    """run_worker_loop_continues_processing_after_handler_panic."""
    failing = enqueue({"do": "raise"})
    panicking = enqueue({"do": "panic"})
    fine = enqueue({"do": "ok"})

    def handler(job: JobContext) -> str:
        if job.payload["do"] == "raise":
            raise ValueError("boom")
        if job.payload["do"] == "panic":
            raise KeyboardInterrupt
        return "ok"

    running = start_worker({TYPE: handler})
    wait_until(lambda: job_row(fine)["status"] == "SUCCEEDED", what="the last job")

    assert (job_row(failing)["status"], job_row(panicking)["status"]) == (
        "PENDING",
        "DEAD_LETTERED",
    )
    assert job_row(panicking)["last_error_code"] == "job.handler_panic"
    assert running.thread.is_alive()
    result = running.finish()
    assert (result.exit_code, result.report.retried, result.report.dead_lettered) == (
        EXIT_OK,
        1,
        1,
    )


def test_worker__executor_thread_crashes__capacity_restored_and_work_goes_on(
    enqueue: Enqueue, start_worker: StartWorker
) -> None:
    """crashed_job_task_is_drained_and_restores_capacity: what runs around a handler (here
    the on_run report, as a broken stdout pipe would make it) raises once; the slot is freed
    and the next jobs still run on a worker of concurrency 1."""
    ids = [enqueue({"n": n}) for n in range(3)]
    crashed: list[uuid.UUID] = []

    def on_run(run: JobRun) -> None:
        if not crashed:
            crashed.append(run.job_id)
            raise BrokenPipeError("stdout went away")

    running = start_worker({TYPE: lambda job: job.payload}, on_run=on_run)

    wait_until(all_succeeded(3), timeout=30, what="every job after the crash")
    # A SUCCEEDED commits before its thread hands the slot back: wait for the three reports.
    wait_until(lambda: len(running.runs) == 3, what="the three runs reported")
    assert crashed == [ids[0]]
    assert running.worker.busy() == 0
    assert running.finish().exit_code == EXIT_OK


def test_worker__occupancy__never_more_handlers_than_its_concurrency(
    enqueue: Enqueue, start_worker: StartWorker, gates: list[threading.Event]
) -> None:
    """join_set_occupancy_is_worker_capacity: a worker of concurrency 2 holds at most two
    leases and runs at most two handlers, and claims again as each one ends."""
    for _ in range(5):
        enqueue()
    release = gate(gates)
    active, peak = [0], [0]
    lock = threading.Lock()

    def handler(job: JobContext) -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        release.wait(60)
        with lock:
            active[0] -= 1

    running = start_worker({TYPE: handler}, concurrency=2)
    wait_until(lambda: statuses()["LEASED"] == 2, what="two leases")
    # A lease is taken before its handler starts: wait for both handlers, not for the leases.
    wait_until(lambda: active[0] == 2, what="two handlers running")
    leased_peak = 2
    release.set()
    while statuses() != Counter({"SUCCEEDED": 5}):
        leased_peak = max(leased_peak, statuses()["LEASED"])
        time.sleep(0.005)

    assert (leased_peak, peak[0]) == (2, 2)
    assert running.finish().report.claimed == 5


# --- deadlines ------------------------------------------------------------------------------


def test_worker__handler_past_its_deadline__attempt_failed_without_waiting_late_result_fenced(
    enqueue: Enqueue, start_worker: StartWorker, gates: list[threading.Event]
) -> None:
    """The loop fails the attempt with job.timeout_exceeded at the deadline while the handler
    still runs; when the handler returns at last, the fence refuses its result."""
    job_id = enqueue(timeout_seconds=1)
    release = gate(gates)
    returned = threading.Event()

    def handler(job: JobContext) -> str:
        release.wait(60)
        returned.set()
        return "late"

    running = start_worker({TYPE: handler}, grace_seconds=60)
    wait_until(lambda: failure_kinds(job_id) == ["TIMEOUT"], what="the timeout")

    assert not returned.is_set()
    row, attempt = job_row(job_id), attempt_rows(job_id)[0]
    assert (row["status"], row["last_error_code"]) == ("PENDING", "job.timeout_exceeded")
    assert (attempt["outcome"], attempt["error_code"]) == (
        "RETRY_SCHEDULED",
        "job.timeout_exceeded",
    )
    assert running.outcomes() == ["retried"]

    release.set()
    wait_until(lambda: len(running.runs) == 2, what="the late result")
    assert running.outcomes() == ["retried", "lease_lost"]
    assert (job_row(job_id), attempt_rows(job_id)) == (row, [attempt])
    assert "SUCCEEDED" not in event_types(job_id)
    assert running.finish().report.lease_lost == 1


def test_worker__timed_out_job_claimed_again_while_old_handler_runs__both_attempts_tracked(
    enqueue: Enqueue, start_worker: StartWorker, gates: list[threading.Event]
) -> None:
    """The timed-out attempt's retry comes due while its handler still runs, and the same
    worker claims attempt 2: the worker keeps track of both (the stuck thread still takes a
    slot; attempt 2 keeps its heartbeats and deadline) until each one ends."""
    job_id = enqueue(timeout_seconds=1)
    first, second = gate(gates), gate(gates)

    def handler(job: JobContext) -> str:
        (first if job.attempt == 1 else second).wait(60)
        return f"attempt {job.attempt}"

    running = start_worker({TYPE: handler}, concurrency=2, grace_seconds=60)
    wait_until(lambda: failure_kinds(job_id) == ["TIMEOUT"], what="the timeout")
    run_sql("UPDATE runledger_job_queue SET timeout_seconds = 60 WHERE id = %s", [job_id])
    make_due(job_id)
    wait_until(lambda: job_row(job_id)["attempt"] == 2, what="attempt 2")
    wait_until(lambda: running.worker.busy() == 2, what="both attempts in flight")

    first.set()
    wait_until(lambda: running.outcomes() == ["retried", "lease_lost"], what="attempt 1's end")
    assert [e.lease.attempt for e in running.worker.executions()] == [2]
    assert running.worker.busy() == 1

    second.set()
    wait_until(lambda: job_row(job_id)["status"] == "SUCCEEDED", what="attempt 2's success")
    wait_until(lambda: len(running.outcomes()) == 3, what="attempt 2's report")
    assert job_row(job_id)["output"] == "attempt 2"
    assert running.worker.busy() == 0


# --- cancel during a run -------------------------------------------------------------------------


@pytest.mark.parametrize("then", ["write", "return"])
def test_worker__cancelled_while_running__write_refused_result_discarded_stays_canceled(
    enqueue: Enqueue, start_worker: StartWorker, gates: list[threading.Event], then: str
) -> None:
    job_id = enqueue()
    started, release = gate(gates), gate(gates)

    def handler(job: JobContext) -> str:
        started.set()
        release.wait(60)
        if then == "write":
            job.set_progress(1, 2)  # raises job.lease_owner_mismatch
        return "result of a cancelled run"

    running = start_worker({TYPE: handler})
    assert started.wait(30)
    assert cancel_job(job_id, scope=ReadScope.GLOBAL) == JobStatus.CANCELED
    release.set()
    wait_until(lambda: running.runs, what="the run to end")

    assert running.outcomes() == ["lease_lost"]
    row = job_row(job_id)
    assert (row["status"], row["output"], row["progress_done"]) == ("CANCELED", None, None)
    assert attempt_rows(job_id)[0]["outcome"] == "CANCELED"
    assert event_types(job_id) == ["ENQUEUED", "LEASED", "CANCELED"]


# --- reporting, stopping, bursts ----------------------------------------------------------------


def test_worker__on_run__called_after_the_outcome_committed(
    enqueue: Enqueue, start_worker: StartWorker, open_session: OpenSession
) -> None:
    """process_claimed_job_observer_reports_success_after_commit: the report of a finished
    attempt comes after its commit, so another session already sees it."""
    job_id = enqueue()
    observer: psycopg.Connection[Any] = open_session()
    seen: list[Any] = []

    def on_run(run: JobRun) -> None:
        row = observer.execute(
            "SELECT status FROM runledger_job_queue WHERE id = %s", [run.job_id]
        ).fetchone()
        seen.append((run.outcome, row))

    running = start_worker({TYPE: lambda job: 1}, on_run=on_run)
    wait_until(lambda: seen, what="the report")

    assert seen == [("succeeded", ("SUCCEEDED",))]
    assert job_row(job_id)["output"] == 1
    running.finish()


def test_worker__stop_with_a_handler_past_the_grace__handed_back_exit_ok(
    enqueue: Enqueue, start_worker: StartWorker, gates: list[threading.Event]
) -> None:
    job_id = enqueue()
    started, release = gate(gates), gate(gates)

    def handler(job: JobContext) -> None:
        started.set()
        release.wait(60)

    running = start_worker({TYPE: handler}, grace_seconds=0.2)
    assert started.wait(30)

    result = running.finish()

    assert (result.exit_code, result.reason) == (EXIT_OK, "stopped by signal")
    row = job_row(job_id)
    assert (row["status"], row["status_reason"], row["worker_id"]) == (
        "PENDING",
        "WORKER_SHUTDOWN",
        None,
    )
    assert attempt_rows(job_id)[0]["outcome"] == "INTERRUPTED"


def test_worker__burst__returns_once_nothing_is_due(
    enqueue: Enqueue, start_worker: StartWorker
) -> None:
    for _ in range(3):
        enqueue()
    future = enqueue(next_run_at=run_sql("SELECT now() + interval '1 hour'")[0][0])

    running = start_worker({TYPE: lambda job: None}, burst=True)
    running.thread.join(60)

    [result] = running.results
    assert (result.exit_code, result.reason) == (EXIT_OK, "burst finished: nothing due")
    assert (result.report.claimed, result.report.succeeded) == (3, 3)
    assert job_row(future)["status"] == "PENDING"


def test_worker__stuck_past_deadline_and_grace__hands_back_the_rest_exit_stuck(
    enqueue: Enqueue, start_worker: StartWorker, gates: list[threading.Event]
) -> None:
    """The in-process side of the exit status 70 the command returns (tested there too)."""
    stuck = enqueue({"stuck": True}, timeout_seconds=1)
    other = enqueue({"stuck": False})
    release = gate(gates)
    started = threading.Barrier(3)

    def handler(job: JobContext) -> None:
        started.wait(30)
        release.wait(60)

    running = start_worker({TYPE: handler}, concurrency=2, grace_seconds=0.5)
    started.wait(30)
    running.thread.join(60)

    [result] = running.results
    assert result.exit_code == EXIT_STUCK
    assert attempt_rows(stuck)[0]["error_code"] == "job.timeout_exceeded"
    row = job_row(other)
    assert (row["status"], row["status_reason"]) == ("PENDING", "WORKER_STUCK")
    assert attempt_rows(other)[0]["outcome"] == "INTERRUPTED"


class UnprintableError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("cannot describe myself")


def test_worker__exception_that_cannot_be_printed__recorded_as_a_retry(
    enqueue: Enqueue, start_worker: StartWorker
) -> None:
    """A handler's exception whose __str__ itself fails is still an ordinary failure."""
    job_id = enqueue()

    def handler(job: JobContext) -> None:
        raise UnprintableError

    running = start_worker({TYPE: handler})
    wait_until(lambda: running.runs, what="the run")

    assert running.outcomes() == ["retried"]
    attempt = attempt_rows(job_id)[0]
    assert (attempt["error_code"], attempt["error_message"]) == (
        "job.handler_failed",
        "UnprintableError",
    )


def test_worker__error_around_a_handler__lease_given_up_capacity_kept(
    enqueue: Enqueue, start_worker: StartWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """crashed_job_task_is_drained_and_restores_capacity, for a failure inside the executor
    itself (standing in for a bug there): the thread survives, the attempt's lease is no
    longer renewed (the reaper takes the job once it expires), and the next jobs run."""
    first = enqueue({"n": 0})
    others = [enqueue({"n": n}) for n in (1, 2)]
    real = execute
    broken: list[uuid.UUID] = []

    def flaky_execute(execution: Any, registry: Any, **options: Any) -> JobRun:
        if not broken:
            broken.append(execution.lease.job_id)
            raise RuntimeError("a bug around the handler")
        return real(execution, registry, **options)

    monkeypatch.setattr("runledger_django.worker.runtime.execute", flaky_execute)
    running = start_worker({TYPE: lambda job: job.payload})

    # A job's SUCCEEDED commits before its thread hands the slot back: wait for the reports.
    wait_until(lambda: len(running.outcomes()) == 3, what="the three runs reported")
    assert all(job_row(job_id)["status"] == "SUCCEEDED" for job_id in others)
    assert broken == [first]
    assert running.outcomes()[0] == "persist_failed"
    assert running.worker.busy() == 0
    assert running.worker.executions() == []
    assert job_row(first)["status"] == "LEASED"
    assert running.finish().exit_code == EXIT_OK


def test_worker__handler_connection_died_while_idle__handler_query_reconnects(
    start_worker: StartWorker, enqueue: Enqueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An executor whose connection died while it waited for work (a server restart, an idle
    timeout) finds out before the next handler runs, so the handler's own first query does
    not fail and burn an attempt."""
    from runledger_django.worker import runtime

    monkeypatch.setattr(runtime, "IDLE_CHECK_SECONDS", 0.0)
    backends: list[int] = []

    def query(job: JobContext) -> int:
        pid = run_sql("SELECT pg_backend_pid()")[0][0]
        backends.append(pid)
        return int(pid)

    running = start_worker({TYPE: query})
    first = enqueue({})
    wait_until(lambda: job_row(first)["status"] == JobStatus.SUCCEEDED)
    killed = run_sql("SELECT pg_terminate_backend(%s)", [backends[0]])
    assert killed == [(True,)]
    second = enqueue({})
    wait_until(lambda: job_row(second)["status"] == JobStatus.SUCCEEDED)
    running.finish()

    assert [a["failure_kind"] for a in attempt_rows(second)] == [None]
    assert backends[1] != backends[0]


def test_worker__outage_seen_by_the_loop__executors_reconnect_before_their_next_handler(
    start_worker: StartWorker, enqueue: Enqueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the worker loop saw the database go away, a busy executor (not idle long enough
    for the idle check) drops its connections before its next handler: the handler's first
    query does not fail on a connection the outage killed."""
    from runledger_django.worker import runtime

    monkeypatch.setattr(runtime, "IDLE_CHECK_SECONDS", 1e9)
    backends: list[int] = []

    def query(job: JobContext) -> int:
        pid = run_sql("SELECT pg_backend_pid()")[0][0]
        backends.append(pid)
        return int(pid)

    running = start_worker({TYPE: query})
    first = enqueue({})
    wait_until(lambda: job_row(first)["status"] == JobStatus.SUCCEEDED)
    epoch = running.worker.epoch
    # Every backend of the worker goes, as in a server restart; the loop finds out first.
    run_sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND backend_type = 'client backend'"
    )
    wait_until(lambda: running.worker.epoch != epoch)
    second = enqueue({})
    wait_until(lambda: job_row(second)["status"] == JobStatus.SUCCEEDED)
    running.finish()

    assert [a["failure_kind"] for a in attempt_rows(second)] == [None]
    assert backends[1] != backends[0]


def test_worker__sample_queue_on__records_the_dashboards_minute(
    enqueue: Enqueue, start_worker: StartWorker
) -> None:
    """A worker offers the dashboard's queue sample from its loop, so the depth and age charts
    fill without a separate sampler process."""
    from runledger_django.models import QueueSample

    enqueue({"n": 1}, next_run_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    running = start_worker({TYPE: lambda job: job.payload}, sample_queue=True)

    wait_until(lambda: QueueSample.objects.filter(job_type=TYPE).exists(), what="a sample")
    sample = QueueSample.objects.get(job_type=TYPE)
    assert (sample.due_count, sample.scheduled_count) == (0, 1)
    assert running.finish().exit_code == EXIT_OK
