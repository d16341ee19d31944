"""``runledger_worker --health-port/--health-file`` as real processes, where signals matter.

Checklist items 25 (after SIGTERM /readyz is 503 at once, /livez 200 until exit), 28 (the
file is removed on a clean exit; the checker exits 1 on a stale or missing file without
importing Django) and 30 (a SIGKILLed worker's row goes stale, leaves the live count and is
pruned). Tests synchronise on printed lines, the handlers' start log and rows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runledger_django import enqueue_job
from runledger_django.models import WorkerRecord
from runledger_django.services.worker_registry import (
    WorkerIdentity,
    beat_worker,
    live_workers_by_job_type,
)
from tests.probes.conftest import body_once, probe
from tests.worker.conftest import SpawnWorker, wait_until
from tests.worker.processes import BASE_DIR, WorkerProcess
from tests.worker_app import BLOCK, NOOP

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("app_definitions")]

FAST = {"WORKER_POLL_INTERVAL": 0.2, "REAPER_INTERVAL_SECONDS": 0.5}
HEALTH_LINE = re.compile(r"health probes on http://([^:]+):(\d+)")


@pytest.fixture
def files(tmp_path: Path) -> Iterator[dict[str, Path]]:
    paths = {
        "log": tmp_path / "starts.log",
        "release": tmp_path / "release",
        "health": tmp_path / "worker.health",
    }
    yield paths
    paths["release"].touch()


def health_port(worker: WorkerProcess) -> int:
    match = HEALTH_LINE.search(worker.wait_for_line("health probes on"))
    assert match is not None
    return int(match.group(2))


def checker(*args: str) -> subprocess.CompletedProcess[str]:
    """The standalone checker, in an interpreter that reports whether Django got imported."""
    code = (
        "import sys\n"
        "from runledger_django import healthcheck\n"
        "status = healthcheck.main(sys.argv[1:])\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "print('django modules:', loaded)\n"
        "sys.exit(status)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    return subprocess.run(  # noqa: S603  (our interpreter, our arguments)
        [sys.executable, "-c", code, *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_sigterm__readyz_503_at_once__livez_200_until_exit__file_and_row_removed(
    spawn_worker: SpawnWorker, files: dict[str, Path]
) -> None:
    enqueue_job(BLOCK, {"log": str(files["log"]), "release": str(files["release"])})
    worker = spawn_worker(
        "--job-type",
        BLOCK,
        "--health-port",
        "0",
        "--health-host",
        "127.0.0.1",
        "--health-file",
        str(files["health"]),
        WORKER_GRACE_SECONDS=60,
        WORKER_HEARTBEAT_SECONDS=0.2,
        **FAST,
    )
    port = health_port(worker)
    wait_until(lambda: files["log"].exists(), what="the handler to start")
    wait_until(lambda: probe(port, "/readyz")[0] == 200, what="the worker to be ready")
    worker_id = WorkerRecord.objects.get().worker_id
    fresh = checker(str(files["health"]), "--max-age", "30", "--ready")
    assert fresh.returncode == 0, fresh.stderr
    assert "django modules: []" in fresh.stdout

    worker.signal(signal.SIGTERM)
    # Signal delivery is asynchronous: the first answer after it lands is already 503.
    body = body_once(lambda: probe(port, "/readyz"), 503, what="/readyz to refuse")
    assert body["stopping"] is True
    # The handler still runs within the grace period: the worker is alive and says so.
    for _ in range(20):
        assert probe(port, "/livez")[0] == 200
        assert probe(port, "/readyz")[0] == 503
        time.sleep(0.05)
    assert worker.process.poll() is None
    files["release"].touch()
    assert worker.wait() == 0, worker.stderr_lines[-20:]
    assert not files["health"].exists()
    assert not WorkerRecord.objects.filter(worker_id=worker_id).exists()
    gone = checker(str(files["health"]))
    assert gone.returncode == 1
    assert "no health file" in gone.stderr
    assert "django modules: []" in gone.stdout


def test_checker__stale_or_foreign_file__exits_1(tmp_path: Path) -> None:
    stale = tmp_path / "stale.health"
    stale.write_text(json.dumps({"written_at": time.time() - 120, "ready": True}))
    result = checker(str(stale), "--max-age", "60")
    assert result.returncode == 1
    assert "stale" in result.stderr
    fresh = tmp_path / "fresh.health"
    fresh.write_text(json.dumps({"written_at": time.time(), "ready": False}))
    assert checker(str(fresh), "--max-age", "60").returncode == 0
    not_ready = checker(str(fresh), "--max-age", "60", "--ready")
    assert not_ready.returncode == 1
    assert "not ready" in not_ready.stderr
    foreign = tmp_path / "foreign.health"
    foreign.write_text("hello")
    assert checker(str(foreign)).returncode == 1
    module = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "runledger_django.healthcheck", str(stale), "--max-age", "60"],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert module.returncode == 1, module.stderr


def test_sigkill__row_goes_stale__leaves_the_live_count__pruned_by_a_live_beat(
    spawn_worker: SpawnWorker,
) -> None:
    worker = spawn_worker(
        "--job-type", NOOP, "--job-type", BLOCK, WORKER_HEARTBEAT_SECONDS=1, **FAST
    )
    worker.wait_for_line("runledger worker")
    row = wait_until(lambda: WorkerRecord.objects.first(), what="the worker's row")
    first_beat = row.last_heartbeat_at
    wait_until(
        lambda: WorkerRecord.objects.get(pk=row.pk).last_heartbeat_at > first_beat,
        what="a fresh beat",
    )
    assert (row.pid, sorted(row.job_types)) == (worker.pid, sorted([NOOP, BLOCK]))
    assert live_workers_by_job_type() == {BLOCK: 1, NOOP: 1}

    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait(30)
    # Three missed beats of 1 s: the row stays, the count drops.
    wait_until(lambda: live_workers_by_job_type() == {}, what="the row to go stale")
    killed: Any = WorkerRecord.objects.get(pk=row.pk)
    assert killed.last_heartbeat_at >= first_beat

    survivor = WorkerIdentity(worker_id="survivor-1", job_types=[NOOP], concurrency=1)
    assert beat_worker(survivor, heartbeat_seconds=60, retention_seconds=3600) == 0
    assert WorkerRecord.objects.filter(pk=row.pk).exists()
    assert beat_worker(survivor, heartbeat_seconds=60, retention_seconds=0.001) == 1
    assert list(WorkerRecord.objects.values_list("worker_id", flat=True)) == ["survivor-1"]
    assert live_workers_by_job_type() == {NOOP: 1}
