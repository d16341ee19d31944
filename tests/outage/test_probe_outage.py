"""The worker's probes through a real database outage (checklist item 23).

The worker runs as a subprocess against the outage tests' throwaway embedded server, which the
test stops and starts (never the suite's own server). While the server is down /livez stays
200 (the loop keeps turning through its backoff) and /readyz says 503; when it is back /readyz
recovers; past the outage limit the worker exits 75 for its supervisor to restart it.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.outage.test_outage import (
    OUTAGE_LINE,
    OUTAGE_SECONDS,
    RECOVERY_LINE,
    Cluster,
    Command,
    cluster,
    running,
)

__all__ = ["cluster", "running"]

HEALTH_LINE = re.compile(r"health probes on http://[^:]+:(\d+)")
WORKER = ("runledger_worker", "--json", "--health-port", "0", "--health-host", "127.0.0.1")


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def health_port(command: Command) -> int:
    command.wait_for_line("health probes on")
    match = HEALTH_LINE.search(command.lines[-1])
    assert match is not None, command.lines
    return int(match.group(1))


def wait_for_status(port: int, path: str, status: int, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        answer, body = probe(port, path)
        if answer == status:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never answered {status}; last: {answer} {body}")
        time.sleep(0.05)


def probes_during(port: int, seconds: float) -> list[tuple[int, int]]:
    """(/livez, /readyz) statuses sampled over ``seconds`` (the outage being ridden out)."""
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append((probe(port, "/livez")[0], probe(port, "/readyz")[0]))
        time.sleep(0.1)
    return samples


@pytest.mark.slow
def test_outage__livez_stays_200__readyz_503_then_recovers(running: Cluster) -> None:
    command = Command(running, *WORKER)
    try:
        port = health_port(command)
        wait_for_status(port, "/readyz", 200)
        running.stop("fast")
        command.wait_for_line(OUTAGE_LINE)
        body = wait_for_status(port, "/readyz", 503)
        assert body["database"] == "unavailable"
        samples = probes_during(port, OUTAGE_SECONDS)  # the server stays down this long
        assert {live for live, _ in samples} == {200}, samples
        assert {ready for _, ready in samples} == {503}, samples
        running.start()
        command.wait_for_line(RECOVERY_LINE)
        body = wait_for_status(port, "/readyz", 200)
        assert body["database"] == "ok"
        assert probe(port, "/livez")[0] == 200
        code = command.stop()
    finally:
        command.kill()
    assert code == 0, "".join(command.lines)


@pytest.mark.slow
def test_outage_past_the_limit__livez_200_while_backing_off__exit_75(running: Cluster) -> None:
    command = Command(running, *WORKER, RUNLEDGER_OUTAGE_LIMIT="3")
    try:
        port = health_port(command)
        wait_for_status(port, "/readyz", 200)
        running.stop("fast")
        command.wait_for_line(OUTAGE_LINE)
        wait_for_status(port, "/readyz", 503)
        lives = []
        while command.process.poll() is None:
            try:
                lives.append(probe(port, "/livez")[0])
            except OSError:
                break  # the process is exiting: its server went with it
            time.sleep(0.1)
        code = command.wait()
    finally:
        command.kill()
        running.start()
    assert code == 75, "".join(command.lines)
    assert lives, "no probe answered during the outage"
    assert set(lives) == {200}, lives
