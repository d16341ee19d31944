"""Settings for ``manage.py runledger_worker`` subprocesses started by the worker tests.

The suite's settings plus the app whose ``jobs.py`` holds the test handlers, the test database
(the one pytest created, named by RUNLEDGER_TEST_DB) and short worker timings read from the
environment, so a test can give a subprocess a 2-second lease without touching the suite's own
settings. The subprocess's connections carry an application_name, so a test can find (and
terminate) exactly that worker's backends in pg_stat_activity.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.worker_app"]

DATABASES["default"]["NAME"] = DATABASES["default"]["TEST"]["NAME"]
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = os.environ.get(
    "RUNLEDGER_TEST_APPLICATION_NAME", "runledger-test-worker"
)


def _number(name: str) -> float | None:
    value = os.environ.get(f"RUNLEDGER_TEST_{name}")
    return None if value is None else float(value)


RUNLEDGER: dict[str, object] = {}
for _key in (
    "LEASE_SECONDS",
    "REAPER_INTERVAL_SECONDS",
    "WORKER_GRACE_SECONDS",
    "WORKER_POLL_INTERVAL",
    "WORKER_IDLE_POLL_SECONDS",
    "OUTAGE_LIMIT_SECONDS",
    "SCHEDULE_POLL_SECONDS",
    "WORKER_HEARTBEAT_SECONDS",
    "WORKER_RETENTION_SECONDS",
    "LIVENESS_MAX_AGE_SECONDS",
    "READINESS_DB_MAX_AGE_SECONDS",
):
    _value = _number(_key)
    if _value is not None:
        RUNLEDGER[_key] = int(_value) if _key == "LEASE_SECONDS" else _value
for _key in ("WORKER_LISTEN", "WAKEUP_NOTIFY"):
    if f"RUNLEDGER_TEST_{_key}" in os.environ:
        RUNLEDGER[_key] = os.environ[f"RUNLEDGER_TEST_{_key}"] == "1"
