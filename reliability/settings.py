"""Django settings of the reliability harness, for the harness and every child process.

The harness starts its own embedded server and passes its connection through the environment
(``RUNLEDGER_RELIABILITY_DATABASE``), so importing these settings never starts, looks for or
stops a server, and DATABASE_URL plays no part.
"""

from __future__ import annotations

import json
import os

from django.core.exceptions import ImproperlyConfigured

from reliability.common import (
    APPLICATION_PREFIX,
    DATABASE_ENV,
    HARNESS_NAME,
    LEASE_SECONDS,
    LOG_ENV,
    NAME_ENV,
    REAPER_INTERVAL_SECONDS,
    WORKER_GRACE_SECONDS,
)

SECRET_KEY = "runledger-reliability-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
# jobs_app holds the handlers (jobs.py) that the harness's runledger_worker processes run.
INSTALLED_APPS = ["runledger_django", "reliability.jobs_app"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

try:
    DATABASES = {"default": json.loads(os.environ[DATABASE_ENV])}
except KeyError:
    raise ImproperlyConfigured(
        f"{DATABASE_ENV} is unset: run the harness with `python -m reliability`"
    ) from None
# Every session names its process, so the harness can tell a killed child's lingering
# session from a live worker's.
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = APPLICATION_PREFIX + (
    os.environ.get(NAME_ENV) or HARNESS_NAME
)

# Short leases and a frequent reaper: a killed worker's jobs run again within seconds.
RUNLEDGER = {
    "LEASE_SECONDS": LEASE_SECONDS,
    "REAPER_INTERVAL_SECONDS": REAPER_INTERVAL_SECONDS,
    "WORKER_GRACE_SECONDS": WORKER_GRACE_SECONDS,
    "WORKER_POLL_INTERVAL": 0.5,
    "OUTAGE_LIMIT_SECONDS": 120,
}

# Promotion and worker failures during the planned outage and the kills log warnings; keep
# them out of the report, in the run's log file.
_log_file = os.environ.get(LOG_ENV)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {
        "run": (
            {"class": "logging.FileHandler", "filename": _log_file, "delay": True}
            if _log_file
            else {"class": "logging.NullHandler"}
        ),
    },
    "loggers": {
        "runledger_django": {"handlers": ["run"], "level": "WARNING", "propagate": False},
    },
}
