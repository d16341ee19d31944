"""A scheduler SIGKILLed in the middle of a pass, while it holds a due schedule's row lock,
commits nothing: the fire is neither lost nor doubled, and the next pass fires it once.

The pass runs in a real ``manage.py run_schedules --once`` subprocess. The test makes it wait
inside its write (the job type's definition row is locked by the test, and the pass share-locks
it), sees the wait and the held row lock from other sessions, kills the process, and watches
its backend go away before it looks at the result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
from django.db import connection

from runledger_django.models import Job, ScheduleFire
from runledger_django.services.schedules import run_schedule_pass

from ..conftest import connection_kwargs
from ..worker.processes import BASE_DIR, database_url
from .conftest import SCHEDULED_TYPE, MakeSchedule, at

pytestmark = pytest.mark.django_db(transaction=True)

TAG = "runledger:materialize_schedule_fires"


def scheduler_process(application_name: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
        "DATABASE_URL": database_url(),
        "RUNLEDGER_TEST_DB": str(connection.settings_dict["NAME"]),
        "RUNLEDGER_TEST_APPLICATION_NAME": application_name,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "django", "run_schedules", "--once", "--no-sync"],
        cwd=BASE_DIR,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def backend_waiting(observer: psycopg.Connection[Any], application_name: str) -> int | None:
    row = observer.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
        "AND wait_event_type = 'Lock' AND position(%s in query) > 0",
        [application_name, TAG],
    ).fetchone()
    return None if row is None else int(row[0])


def backend_gone(observer: psycopg.Connection[Any], pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while observer.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone():
        if time.monotonic() > deadline:
            raise AssertionError("the killed scheduler's backend is still there")
        time.sleep(0.01)


def test_scheduler__sigkill_mid_pass__nothing_lost_nothing_doubled(
    make_schedule: MakeSchedule, observer: psycopg.Connection[Any]
) -> None:
    make_schedule(cursor=at("2000-01-01T00:00"))
    blocker = psycopg.connect(**connection_kwargs())
    application_name = "rl-test-killed-scheduler"
    process = scheduler_process(application_name)
    try:
        blocker.execute(
            "SELECT 1 FROM runledger_job_definitions WHERE job_type = %s FOR UPDATE",
            [SCHEDULED_TYPE],
        )
        deadline = time.monotonic() + 60
        pid = None
        while pid is None:
            pid = backend_waiting(observer, application_name)
            if pid is None:
                assert process.poll() is None, "the scheduler ended before it waited"
                assert time.monotonic() < deadline, "the scheduler never waited in its write"
                time.sleep(0.002)
        # It holds the due row's lock: another scheduler skips the row.
        with observer.transaction():
            free = observer.execute(
                "SELECT id FROM runledger_job_schedules FOR UPDATE SKIP LOCKED"
            ).fetchall()
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert free == []
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        blocker.rollback()
        blocker.close()
    backend_gone(observer, pid)
    assert not Job.objects.exists()
    assert not ScheduleFire.objects.exists()
    report = run_schedule_pass()
    assert report.fired == 1
    assert run_schedule_pass().claimed == 0
    assert Job.objects.count() == 1
