"""The reliability harness, run for real: a CI-sized run passes, and nothing outlives it.

The harness runs as a subprocess (``python -m reliability``) with its own embedded PostgreSQL 18
server, whatever DATABASE_URL says; these tests never touch the test database, so they carry no
``django_db`` mark. Each starts a server and spawns processes, hence ``slow``.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reliability.harness import process_alive, sweep_stale_runs, wait_for_exit

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[2]
CI_SECONDS = 6
CI_KILL_INTERVAL = 0.8
"""Often enough that a CI-sized run has every kind of kill (the first three differ)."""


class Harness:
    """A running ``python -m reliability`` whose output lines can be waited for."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(  # noqa: S603  (this interpreter, fixed arguments)
            [sys.executable, "-m", "reliability", *args],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._pump_thread = threading.Thread(target=self._pump, daemon=True)
        self._pump_thread.start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float = 120.0) -> re.Match[str]:
        """The first line matching ``pattern`` (lines before it are kept in ``lines``)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matched {pattern!r}:\n{self.output}") from None
            if line is None:
                raise AssertionError(f"harness exited before {pattern!r}:\n{self.output}")
            self.lines.append(line)
            match = re.search(pattern, line)
            if match:
                return match

    def finish(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def kill(self) -> None:
        """Make sure it is gone and its output pipe closed."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._pump_thread.join(10)


@pytest.fixture
def harnesses() -> Iterator[list[Harness]]:
    started: list[Harness] = []
    yield started
    for harness in started:
        harness.kill()
    sweep_stale_runs()  # whatever a failed test left behind


def _pids(match: re.Match[str]) -> list[int]:
    return [int(pid) for pid in match.group(1).split(",")]


def _counts(output: str) -> dict[str, int]:
    return {
        name.strip(): int(value)
        for name, value in re.findall(r"^\s{2}(\S[^\n]*?)\s{2,}(\d+)$", output, re.MULTILINE)
    }


def test_harness__ci_sized_run__passes_and_leaves_nothing_running(
    harnesses: list[Harness],
) -> None:
    harness = Harness("--seconds", str(CI_SECONDS), "--kill-interval", str(CI_KILL_INTERVAL))
    harnesses.append(harness)
    run_dir = Path(harness.wait_for(r"run directory (\S+)").group(1))
    servers = [int(harness.wait_for(r"server started pid=(\d+)").group(1))]
    children = _pids(harness.wait_for(r"children started pids=([\d,]+)"))
    servers.append(int(harness.wait_for(r"server restarted .* -> (\d+)").group(1)))

    code = harness.finish(timeout=300)

    assert code == 0, harness.output
    assert "violations: 0" in harness.output
    counts = _counts(harness.output)
    assert counts["server restarts"] == 1, harness.output
    for name in ("promoter kills", "worker kills (SIGKILL)", "worker stops (SIGTERM)"):
        assert counts[name] >= 1, (name, harness.output)
    for name in ("recorded", "duplicates converged", "conflicts raised", "promoted", "retained"):
        assert counts[name] > 0, (name, harness.output)
    # Workflow runs went through the same chaos; each step was checked (workflows.check).
    assert counts["workflow runs"] > 0, harness.output
    assert counts["workflow steps checked"] == 8 * counts["workflow runs"], harness.output
    # Every job ran and succeeded once, retries happened, and each extra run was explained.
    assert counts["jobs succeeded"] == counts["jobs checked"] > 0, harness.output
    assert counts["retained jobs checked"] > 0, harness.output
    assert counts["jobs run"] == counts["jobs checked"], harness.output
    assert counts["attempts ended by deliberate RetryJob"] > 0, harness.output
    assert counts["extra runs"] == counts["extra runs explained"] > 0, harness.output
    assert not any(process_alive(pid) for pid in servers + children)
    assert not run_dir.exists()


def test_harness__planted_violations__each_reported_and_the_run_fails(
    harnesses: list[Harness],
) -> None:
    """The checks read the real tables: a second success event, an attempt run twice, a run
    no attempt records and a lease left expired, planted after the drain, are all caught (no
    server restart: this run is about the checks, not the chaos)."""
    harness = Harness(
        "--seconds",
        "3",
        "--recorders",
        "1",
        "--promoters",
        "1",
        "--restarts",
        "0",
        "--plant-violations",
    )
    harnesses.append(harness)

    code = harness.finish(timeout=300)

    assert code == 1, harness.output
    planted = re.findall(r"planted: .*?job (\S+)", harness.output)
    assert len(planted) == 4, harness.output
    violations = [line for line in harness.lines if "VIOLATION:" in line]
    expected = [
        (planted[0], "events disagree with its attempts"),
        (planted[1], "ran 2 times"),
        (planted[2], "which no attempt row records"),
        (planted[3], "ended LEASED"),
    ]
    for job_id, phrase in expected:
        assert any(job_id in line and phrase in line for line in violations), (
            phrase,
            harness.output,
        )
    workflow_runs = re.findall(r"planted: .*?workflow (?:run )?(\S+)", harness.output)
    assert len(workflow_runs) == 2, harness.output
    for key, phrase in zip(workflow_runs, ("counters pending=1", "succeeded=7"), strict=True):
        assert any(key in line and phrase in line for line in violations), (
            phrase,
            harness.output,
        )
    assert "violations: 6" in harness.output, harness.output


def test_harness__sigkilled__next_sweep_stops_its_server_and_children_die(
    harnesses: list[Harness],
) -> None:
    """A SIGKILLed harness cannot clean up: its server keeps running until the next start."""
    harness = Harness("--seconds", "120", "--recorders", "1", "--promoters", "1")
    harnesses.append(harness)
    run_dir = Path(harness.wait_for(r"run directory (\S+)").group(1))
    server = int(harness.wait_for(r"server started pid=(\d+)").group(1))
    children = _pids(harness.wait_for(r"children started pids=([\d,]+)"))

    os.kill(harness.process.pid, signal.SIGKILL)
    harness.process.wait(10)

    assert all(wait_for_exit(pid, 10) for pid in children)  # parent-death signal
    assert process_alive(server)
    assert server in sweep_stale_runs()
    assert not process_alive(server)
    assert not run_dir.exists()


def test_harness__sigterm__stops_server_and_children_then_exits_143(
    harnesses: list[Harness],
) -> None:
    harness = Harness("--seconds", "120", "--recorders", "1", "--promoters", "1")
    harnesses.append(harness)
    run_dir = Path(harness.wait_for(r"run directory (\S+)").group(1))
    server = int(harness.wait_for(r"server started pid=(\d+)").group(1))
    children = _pids(harness.wait_for(r"children started pids=([\d,]+)"))
    harness.wait_for(r"running for")

    harness.process.terminate()
    code = harness.finish(timeout=60)

    assert code == 143, harness.output
    assert "server stopped" in harness.output
    assert not any(process_alive(pid) for pid in [server, *children])
    assert not run_dir.exists()
