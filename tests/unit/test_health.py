"""The probes' state and server without a worker: the default windows, what makes each probe
fail, the JSON body, and the health file's write rules (checklist items 24 to 28, the parts
that need no database)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger_django import healthcheck
from runledger_django.worker.health import (
    Health,
    HealthServer,
    default_liveness_max_age,
    default_readiness_max_age,
)


@pytest.fixture
def health() -> Health:
    state = Health(liveness_max_age=30, readiness_db_max_age=10)
    state.attach(stopping=lambda: False, inflight=lambda: 2, worker_id="w-1")
    return state


@pytest.fixture
def server(health: Health) -> Iterator[HealthServer]:
    running = HealthServer(health, host="127.0.0.1", port=0).start()
    yield running
    running.close()


def get(server: HealthServer, path: str, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.address[1]}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310  (http only)
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_default_windows__cover_the_longest_sleep_statement_and_backoff() -> None:
    assert default_liveness_max_age(1.0, 15.0) == 60.0
    assert default_liveness_max_age(30.0, 15.0) == 90.0
    assert default_liveness_max_age(1.0, 45.0) == 90.0
    assert default_readiness_max_age(1.0, 15.0, 15.0) == 30.0
    assert default_readiness_max_age(1.0, 15.0, 60.0) == 120.0


def test_readiness__needs_start_a_recent_round_trip_no_outage_and_no_stop(
    health: Health,
) -> None:
    now = 1000.0
    health.last_tick = now
    assert not health.is_ready(now)  # not started
    health.started = True
    assert not health.is_ready(now)  # no database round trip yet
    health.last_database_ok = now - 5
    assert health.is_ready(now)
    assert not health.is_ready(now + 6)  # the last round trip is too old
    health.database_failed()
    assert not health.is_ready(now)
    health.database_ok()
    assert health.is_ready()
    stopping = [False]
    health.stopping = lambda: stopping[0]
    stopping[0] = True
    assert not health.is_ready()
    health.tick()
    assert health.is_live()  # draining never touches liveness


def test_liveness__only_the_loop_ticks_count(health: Health) -> None:
    health.last_tick = 1000.0
    health.database_failed()
    assert health.is_live(1030.0)
    assert not health.is_live(1030.5)
    health.tick()
    assert health.is_live()


def test_server__each_probe__status_and_body__head__404(
    health: Health, server: HealthServer
) -> None:
    assert get(server, "/livez")[0] == 200
    status, body = get(server, "/readyz")
    assert status == 503
    document = json.loads(body)
    assert {key: document[key] for key in ("live", "ready", "started", "database")} == {
        "live": True,
        "ready": False,
        "started": False,
        "database": "unknown",
    }
    assert (document["inflight"], document["worker_id"]) == (2, "w-1")
    assert get(server, "/startupz")[0] == 503
    health.database_ok()
    health.mark_started()
    assert get(server, "/readyz")[0] == 200
    assert get(server, "/startupz?verbose=1")[0] == 200
    assert get(server, "/livez", method="HEAD") == (200, b"")
    status, body = get(server, "/")
    assert status == 404
    assert json.loads(body)["probes"] == ["/livez", "/readyz", "/startupz"]


def test_health_file__written_at_start__on_state_change__removed(
    tmp_path: Path, health: Health
) -> None:
    path = tmp_path / "w.health"
    health.health_file = path
    health._file_path = path
    health.open_file()
    first = json.loads(path.read_text())
    assert (first["started"], first["ready"]) == (False, False)
    health.database_ok()
    health.mark_started()  # a state change is written at once, not a second later
    assert json.loads(path.read_text())["ready"] is True
    assert healthcheck.check(path, max_age=5, ready=True) == ""
    assert not list(tmp_path.glob(".*tmp"))
    health.remove_file()
    assert not path.exists()
    health.tick()
    assert not path.exists()  # a late tick does not bring it back
    assert "no health file" in healthcheck.check(path, max_age=5)


def test_health_file__unwritable__logged_once__worker_goes_on(
    tmp_path: Path, health: Health, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "missing-directory" / "w.health"
    health.health_file = path
    with caplog.at_level(logging.WARNING, logger="runledger_django.worker.health"):
        health.open_file()
        health.mark_started()
        health.database_ok()
        health.tick()
    failures = [r for r in caplog.records if r.message.startswith("could not write the health")]
    assert len(failures) == 1
    assert health.is_ready()
