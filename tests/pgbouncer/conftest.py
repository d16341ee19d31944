"""The PgBouncer each test runs through, and the means to use it.

Without the pgbouncer binary these tests skip, unless RUNLEDGER_REQUIRE_PGBOUNCER=1 (as in CI)
makes that a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from tests.conftest import MakeDefinition
from tests.pgbouncer.bouncer import Backend, PgBouncer, find_binary
from tests.pgbouncer.shop import RECEIPT, WAREHOUSE
from tests.worker.processes import BASE_DIR, WorkerProcess, stop_all

SETTINGS = "tests.pgbouncer.settings"


@pytest.fixture(scope="session")
def pgbouncer_binary() -> str:
    """The pgbouncer executable; skips the test without one (fails it where required)."""
    binary = find_binary()
    if binary is None:
        reason = (
            "pgbouncer is not installed (Debian: apt-get install pgbouncer); "
            "RUNLEDGER_REQUIRE_PGBOUNCER=1 makes this a failure"
        )
        if os.environ.get("RUNLEDGER_REQUIRE_PGBOUNCER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return binary


@pytest.fixture
def pgbouncer(pgbouncer_binary: str, transactional_db: None) -> Iterator[PgBouncer]:
    """A PgBouncer in transaction pooling mode in front of the test database's server.

    One per test (it starts in milliseconds): each test's pool starts empty, so what a test
    finds left on the pooled server connections is that test's doing."""
    bouncer = PgBouncer(pgbouncer_binary, Backend.from_settings(connection.settings_dict))
    bouncer.start()
    yield bouncer
    bouncer.stop()


@pytest.fixture
def shop_definitions(make_definition: MakeDefinition) -> None:
    """The shop's job types as its handlers define them (a worker start would create them;
    here promote_intents may run before any worker)."""
    make_definition(RECEIPT, max_attempts=5, default_timeout_seconds=60)
    make_definition(WAREHOUSE, max_attempts=3, default_timeout_seconds=30)
    fulfilment_definitions(make_definition)


def fulfilment_definitions(make_definition: MakeDefinition) -> None:
    """The checkout also starts the order's fulfilment workflow, whose job types must exist."""
    from example_project.shop.fulfilment import FULFIL_JOB_TYPES

    for job_type in FULFIL_JOB_TYPES:
        make_definition(job_type)


def process_env(bouncer: PgBouncer, **settings: Any) -> dict[str, str]:
    """The environment of a process that reaches the test database only through PgBouncer."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "RUNLEDGER_TEST_DB": bouncer.backend.database,
        "RUNLEDGER_TEST_PGBOUNCER_PORT": str(bouncer.port),
        # Read by the base settings (so they never start the embedded server); the settings
        # replace it with PgBouncer's address either way.
        "DATABASE_URL": bouncer.url(),
        "PYTHONUNBUFFERED": "1",
    }
    for key, value in settings.items():
        env[f"RUNLEDGER_TEST_{key}"] = (
            ("1" if value else "0") if isinstance(value, bool) else str(value)
        )
    return env


def run_client(bouncer: PgBouncer, *steps: tuple[str, Any], **settings: Any) -> list[Any]:
    """Run ``tests.pgbouncer.client`` steps in one process through PgBouncer; return their
    results."""
    done = subprocess.run(  # noqa: S603  (fixed interpreter and module)
        [sys.executable, "-m", "tests.pgbouncer.client", json.dumps(steps)],
        cwd=BASE_DIR,
        env=process_env(bouncer, **settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{steps} failed:\n{done.stdout}\n{done.stderr}"
    return list(json.loads(done.stdout.splitlines()[-1]))


SpawnWorker = Callable[..., WorkerProcess]


@pytest.fixture
def spawn_worker(pgbouncer: PgBouncer) -> Iterator[SpawnWorker]:
    """Start ``manage.py runledger_worker`` processes whose every connection goes through
    PgBouncer; killed at teardown if still alive.

    The worker tests' process helper, pointed at these settings by ``--settings`` and at
    PgBouncer's port by RUNLEDGER_TEST_PGBOUNCER_PORT; ``settings`` become RUNLEDGER keys."""
    started: list[WorkerProcess] = []

    def spawn(*args: str, **settings: Any) -> WorkerProcess:
        process = WorkerProcess(
            ["--settings", SETTINGS, *args], {"PGBOUNCER_PORT": pgbouncer.port, **settings}
        )
        started.append(process)
        return process

    yield spawn
    stop_all(started)
