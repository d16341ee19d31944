"""The worker's probes in-process: a real Worker in a thread, its probe server on a free port.

Checklist items (reference/observability.md section 10): 24 (a blocked loop fails /livez,
long handlers never do), 26 (/startupz 503 until the definitions' sync, then 200 for good),
27 (probes answer while every handler thread is busy and a scrape runs, and run no SQL), 28 (the health file
is rewritten while the loop turns). The loop is blocked by real row locks the test holds and
observes in pg_stat_activity; handlers block on events the test sets.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.backends.signals import connection_created

from runledger_django import JobContext, healthcheck
from runledger_django.models import WorkerRecord
from runledger_django.prometheus.collector import QueueCollector
from runledger_django.worker import health as health_module
from tests.conftest import OpenSession, wait_for_lock_wait
from tests.probes.conftest import StartWorker, body_once
from tests.worker.conftest import TYPE, Enqueue, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def gate(gates: list[threading.Event]) -> threading.Event:
    event = threading.Event()
    gates.append(event)
    return event


def blocking(started: list[Any], release: threading.Event) -> Any:
    def handler(job: JobContext) -> dict[str, Any]:
        started.append(job.job_id)
        release.wait(60)
        return {}

    return handler


@pytest.fixture
def connections_opened() -> Iterator[list[str]]:
    """The names of the threads that open a database connection while the test runs."""
    names: list[str] = []

    def record(sender: Any, connection: Any, **kwargs: Any) -> None:
        names.append(threading.current_thread().name)

    connection_created.connect(record)
    yield names
    connection_created.disconnect(record)


# --- item 26: startup ----------------------------------------------------------------------


def test_startupz__503_until_the_definitions_sync__then_200_for_good(
    start_worker: StartWorker, open_session: OpenSession
) -> None:
    """A definition insert another session holds uncommitted makes the worker's sync wait;
    meanwhile /startupz and /readyz say 503 and /livez 200; once the sync ends /startupz
    says 200, and still does after the worker stopped."""
    blocker = open_session(autocommit=False)
    blocker.execute(
        "INSERT INTO runledger_job_definitions (job_type, max_attempts, default_timeout_seconds) "
        "VALUES (%s, 3, 60)",
        [TYPE],
    )
    running = start_worker({TYPE: lambda job: {}})
    wait_for_lock_wait(open_session(), "runledger_job_definitions", timeout=30)
    assert running.status("/startupz") == 503
    status, body = running.probe("/readyz")
    assert (status, body["started"], body["ready"]) == (503, False, False)
    assert running.status("/livez") == 200
    blocker.commit()
    wait_until(lambda: running.status("/startupz") == 200, what="the worker to start")
    wait_until(lambda: running.status("/readyz") == 200, what="the worker to be ready")
    running.finish()
    assert running.status("/startupz") == 200
    assert running.status("/readyz") == 503


# --- item 24: liveness -----------------------------------------------------------------------


def test_livez__every_handler_busy_for_many_windows__stays_200(
    start_worker: StartWorker, enqueue: Enqueue, gates: list[threading.Event]
) -> None:
    """Handlers that run for many liveness windows never fail /livez: only the loop's ticks
    count, and a loop with every executor busy still turns."""
    started: list[Any] = []
    release = gate(gates)
    for number in range(2):
        enqueue({"n": number})
    running = start_worker(
        {TYPE: blocking(started, release)},
        concurrency=2,
        reaper_interval=0.1,
        health={"liveness_max_age": 1.0},
    )
    wait_until(lambda: len(started) == 2, what="both handlers to run")
    statuses = []
    deadline = time.monotonic() + 4.0  # four liveness windows with every handler busy
    while time.monotonic() < deadline:
        statuses.append(running.probe("/livez"))
        time.sleep(0.05)
    assert {status for status, _ in statuses} == {200}
    assert {body["inflight"] for _, body in statuses} == {2}
    release.set()
    running.finish()


def test_livez__supervisor_loop_blocked__503_then_200_when_it_turns_again(
    start_worker: StartWorker, open_session: OpenSession
) -> None:
    """The loop's registry beat waits on a row lock the test holds: the loop stops ticking
    and /livez turns 503 (readiness too); when the lock goes, both recover."""
    running = start_worker({TYPE: lambda job: {}}, health={"liveness_max_age": 0.5})
    wait_until(lambda: running.status("/readyz") == 200, what="the worker to be ready")
    worker_id = running.worker.config.worker_id
    blocker = open_session(autocommit=False)
    blocker.execute("SELECT 1 FROM runledger_workers WHERE worker_id = %s FOR UPDATE", [worker_id])
    wait_for_lock_wait(open_session(), "runledger:beat_worker", timeout=30)
    # The beat waits up to the lifecycle lock cap (5 s): the window is 0.5 s.
    body = body_once(
        lambda: running.probe("/livez"),
        503,
        timeout=4.5,
        what="/livez to fail while the loop is blocked",
    )
    assert body["live"] is False
    assert body["seconds_since_tick"] >= 0.5  # the body rounds it; the check compares it whole
    blocker.rollback()
    wait_until(lambda: running.status("/livez") == 200, what="/livez to recover")
    running.finish()


# --- item 27: no SQL, answers while busy -----------------------------------------------------


def test_probes__every_handler_busy_and_a_scrape_running__answer_without_sql(
    start_worker: StartWorker,
    enqueue: Enqueue,
    gates: list[threading.Event],
    connections_opened: list[str],
    open_session: OpenSession,
    settings: Any,
) -> None:
    """With every handler thread blocked and a metrics scrape in flight (its statement waits
    on a table lock another session holds, observed in pg_stat_activity), each probe
    answers, and no probe thread ever opens a database connection (so none runs SQL)."""
    settings.RUNLEDGER = {**getattr(settings, "RUNLEDGER", {}), "METRICS_TIMEOUT_MS": 60_000}
    started: list[Any] = []
    release = gate(gates)
    for number in range(3):
        enqueue({"n": number})
    running = start_worker({TYPE: blocking(started, release)}, concurrency=3)
    wait_until(lambda: len(started) == 3, what="every handler to run")
    wait_until(lambda: running.status("/readyz") == 200, what="the worker to be ready")
    # The intents table: the scrape reads it, a worker without --promote never does.
    locker = open_session(autocommit=False)
    locker.execute("LOCK TABLE runledger_job_enqueue_intents IN ACCESS EXCLUSIVE MODE")
    scraped: list[bool] = []
    collector = QueueCollector(close_connection=True)
    scrape = threading.Thread(
        target=lambda: scraped.append(collector.read()[0] is not None), name="test-scrape"
    )
    scrape.start()
    wait_for_lock_wait(open_session(), "runledger:queue_state", timeout=30)
    before = list(connections_opened)
    slowest = 0.0
    for _ in range(50):
        for path in ("/livez", "/readyz", "/startupz"):
            began = time.perf_counter()
            status, body = running.probe(path)
            slowest = max(slowest, time.perf_counter() - began)
            assert status == 200, (path, body)
            assert body["inflight"] == 3
    assert connections_opened == before, connections_opened
    assert scrape.is_alive(), "the scrape ended before the probes were asked"
    assert running.probe("/metrics-or-anything")[0] == 404
    print(f"slowest of 150 probes, handlers busy, a scrape running: {slowest * 1000:.1f} ms")  # noqa: T201
    locker.rollback()
    scrape.join(60)
    assert scraped == [True]
    release.set()
    running.finish()


def test_health_module__imports_nothing_of_django_or_the_database() -> None:
    """The probe code cannot reach the database: its module imports the standard library
    only (the worker feeds it numbers)."""
    tree = ast.parse(inspect.getsource(health_module))
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert not {name for name in imported if name.startswith((".", "django", "psycopg"))}


# --- item 28 (in-process part): the file follows the loop ------------------------------------


def test_health_file__rewritten_while_the_loop_turns(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    path = tmp_path / "worker.health"
    running = start_worker({TYPE: lambda job: {}}, health={"health_file": path})
    wait_until(lambda: running.status("/readyz") == 200, what="the worker to be ready")
    first = wait_until(lambda: path.exists() and json.loads(path.read_text()), what="a file")
    wait_until(
        lambda: json.loads(path.read_text())["written_at"] > first["written_at"],
        what="the file to be rewritten",
    )
    body = json.loads(path.read_text())
    assert body["worker_id"] == running.worker.config.worker_id
    assert body["live"] is True
    assert healthcheck.check(path, max_age=30) == ""
    assert healthcheck.check(path, max_age=30, ready=True) == ""
    assert "stale" in healthcheck.check(path, max_age=30, now=body["written_at"] + 31)
    running.finish()


# --- item 30 (in-process part): the registry row ---------------------------------------------


def test_registry__row_beaten_while_running__deleted_on_clean_exit(
    start_worker: StartWorker,
) -> None:
    running = start_worker({TYPE: lambda job: {}}, concurrency=2)
    worker_id = running.worker.config.worker_id
    row = wait_until(lambda: WorkerRecord.objects.filter(worker_id=worker_id).first())
    assert (row.job_types, row.concurrency, row.heartbeat_seconds) == ([TYPE], 2, 0.2)
    wait_until(
        lambda: (
            WorkerRecord.objects.get(worker_id=worker_id).last_heartbeat_at > row.last_heartbeat_at
        ),
        what="a beat",
    )
    assert WorkerRecord.objects.get(worker_id=worker_id).started_at == row.started_at
    running.finish()
    assert not WorkerRecord.objects.filter(worker_id=worker_id).exists()


def test_command__health_port_taken__refused_before_the_worker_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        with pytest.raises(CommandError, match="cannot serve the health probes"):
            call_command(
                "runledger_worker",
                "--health-port",
                port,
                "--health-host",
                "127.0.0.1",
                stdout=io.StringIO(),
            )
    assert not WorkerRecord.objects.exists()
