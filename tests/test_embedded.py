"""The embedded server stops with its last owner, however that owner ends (issue 14, item 3).

Real owner processes (tests/embedded_owner.py, and ``manage.py runserver`` with Django's
autoreloader) on a throwaway data directory in the temp dir, never the suite's own server, so
no test here can stop the database the suite runs on. The test process never joins that server
itself: it reads ``postmaster.pid`` and the owner list, and connects as a plain client.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from tests.embedded_owner import OWN_HANDLER_STATUS

BASE_DIR = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60.0  # the first owner runs initdb
STOP_TIMEOUT = 30.0

Spawn = Callable[[str], subprocess.Popen[str]]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def postmaster_pid(data_dir: Path) -> int | None:
    """The running postmaster's pid, from postmaster.pid; None once the server has stopped."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    pid = int(lines[0])
    return pid if _alive(pid) else None


def owners(data_dir: Path) -> list[int]:
    path = data_dir / ".handle_pids.json"
    return list(json.loads(path.read_text() or "[]")) if path.exists() else []


def select_one(data_dir: Path) -> tuple[int, ...] | None:
    """Run SELECT 1 as a client through the socket postmaster.pid names."""
    lines = (data_dir / "postmaster.pid").read_text().splitlines()
    with psycopg.connect(
        host=lines[4], port=lines[3], user="postgres", dbname="postgres", connect_timeout=5
    ) as conn:
        return conn.execute("SELECT 1").fetchone()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = STOP_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.02)


def wait_ready(process: subprocess.Popen[str]) -> None:
    """Wait for the owner's ``ready`` line: it has joined the server and set up its signals."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT)
    line = process.stdout.readline() if ready else ""
    assert line == "ready\n", f"owner never got ready (exit status {process.poll()})"


def stop_leftover(data_dir: Path) -> None:
    """Fast-stop a server a failed test left running (SIGINT is PostgreSQL's fast shutdown)."""
    pid = postmaster_pid(data_dir)
    if pid is not None:
        os.kill(pid, signal.SIGINT)
        wait_until(lambda: postmaster_pid(data_dir) is None, "the leftover server stopped")


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    """A data directory for this module only; one initdb serves every test in it."""
    root = Path(tempfile.mkdtemp(prefix="runledger-embedded-test-"))
    try:
        yield root / "pgdata"
    finally:
        stop_leftover(root / "pgdata")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def spawn(data_dir: Path) -> Iterator[Spawn]:
    """Start owner processes in a role (see tests/embedded_owner.py); each waits until ready."""
    started: list[subprocess.Popen[str]] = []

    def spawn_(role: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(  # noqa: S603  (fixed arguments)
            [sys.executable, "-m", "tests.embedded_owner", role, str(data_dir)],
            cwd=BASE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        wait_ready(process)
        return process

    assert postmaster_pid(data_dir) is None, "a previous test left the server running"
    yield spawn_
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
    stop_leftover(data_dir)


def end(process: subprocess.Popen[str], how: str) -> int:
    """End an owner by SIGTERM, SIGINT or a normal exit; return its exit status."""
    if how == "exit":
        assert process.stdin is not None
        process.stdin.close()
    else:
        process.send_signal(signal.SIGTERM if how == "TERM" else signal.SIGINT)
    return process.wait(timeout=STOP_TIMEOUT)


@pytest.mark.parametrize(
    ("how", "status"),
    [("TERM", -signal.SIGTERM), ("INT", -signal.SIGINT), ("exit", 0)],
    ids=["SIGTERM", "SIGINT", "exit"],
)
def test_start_server__last_owner_ends__server_stopped(
    data_dir: Path, spawn: Spawn, how: str, status: int
) -> None:
    """Whether the owner is terminated, interrupted or exits, the server is down by the time
    it is gone, and SIGTERM still ends it as SIGTERM (the status a supervisor expects)."""
    owner = spawn("plain")
    assert postmaster_pid(data_dir) is not None

    assert end(owner, how) == status
    assert postmaster_pid(data_dir) is None
    assert not (data_dir / "postmaster.pid").exists()
    assert owners(data_dir) == []


def test_start_server__one_of_two_owners_sigterm__server_keeps_serving(
    data_dir: Path, spawn: Spawn
) -> None:
    first, second = spawn("plain"), spawn("plain")
    postmaster = postmaster_pid(data_dir)

    assert end(first, "TERM") == -signal.SIGTERM
    assert postmaster_pid(data_dir) == postmaster
    assert owners(data_dir) == [second.pid]
    assert select_one(data_dir) == (1,)

    assert end(second, "TERM") == -signal.SIGTERM
    assert postmaster_pid(data_dir) is None


def test_start_server__other_owner_killed__last_live_owner_stops_server(
    data_dir: Path, spawn: Spawn
) -> None:
    """An owner that died by SIGKILL stays on the list; the last live owner drops it on its
    way out instead of leaving the server to a later run."""
    killed, survivor = spawn("plain"), spawn("plain")
    killed.kill()
    killed.wait(timeout=STOP_TIMEOUT)
    assert killed.pid in owners(data_dir)

    assert end(survivor, "TERM") == -signal.SIGTERM
    assert postmaster_pid(data_dir) is None


def test_start_server__process_has_own_sigterm_handler__kept_and_server_stopped(
    data_dir: Path, spawn: Spawn
) -> None:
    """A handler installed before the server starts is left in place: SIGTERM runs it (exit
    status 7), and its normal exit stops the server."""
    owner = spawn("own-handler")

    assert end(owner, "TERM") == OWN_HANDLER_STATUS
    assert postmaster_pid(data_dir) is None


def test_start_server__command_restores_handlers__sigterm_stops_server(
    data_dir: Path, spawn: Spawn
) -> None:
    """A command that sets its own SIGTERM handler and restores the previous one afterwards
    (cli.stop_on_signals) puts ours back."""
    owner = spawn("command")

    assert end(owner, "TERM") == -signal.SIGTERM
    assert postmaster_pid(data_dir) is None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_runserver__autoreloader_sigterm__server_stopped(data_dir: Path, tmp_path: Path) -> None:
    """The case of the issue: ``manage.py runserver`` with its autoreloader, stopped by SIGTERM.

    Django turns SIGTERM into ``sys.exit(0)`` in the reloader parent, which SIGKILLs the serving
    child on its way out; both own the server, so the parent must drop the killed child."""
    assert postmaster_pid(data_dir) is None
    log = (tmp_path / "runserver.log").open("w")
    parent = subprocess.Popen(  # noqa: S603  (fixed arguments)
        [sys.executable, "-m", "django", "runserver", f"127.0.0.1:{_free_port()}"],
        cwd=BASE_DIR,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.embedded_settings",
            "RUNLEDGER_EMBEDDED_TEST_DATA_DIR": str(data_dir),
        },
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # The serving child joins last, after the parent installed Django's handler.
        wait_until(
            lambda: any(pid != parent.pid and _alive(pid) for pid in owners(data_dir)),
            "the autoreloader's serving child joined the server",
            timeout=START_TIMEOUT,
        )
        [child] = [pid for pid in owners(data_dir) if pid != parent.pid and _alive(pid)]
        assert parent.pid in owners(data_dir)

        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=STOP_TIMEOUT) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        log.close()

    assert not _alive(child)
    assert postmaster_pid(data_dir) is None, (tmp_path / "runserver.log").read_text()
    assert owners(data_dir) == []
