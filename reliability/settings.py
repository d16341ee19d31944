"""Django settings of the reliability harness, for the harness and every child process.

The harness starts its own embedded server and passes its connection through the environment
(``RUNLEDGER_RELIABILITY_DATABASE``), so importing these settings never starts, looks for or
stops a server, and DATABASE_URL plays no part.
"""

from __future__ import annotations

import json
import os

from django.core.exceptions import ImproperlyConfigured

from reliability.common import DATABASE_ENV, LOG_ENV

SECRET_KEY = "runledger-reliability-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["runledger_django"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

try:
    DATABASES = {"default": json.loads(os.environ[DATABASE_ENV])}
except KeyError:
    raise ImproperlyConfigured(
        f"{DATABASE_ENV} is unset: run the harness with `python -m reliability`"
    ) from None

# Promotion failures during the planned outage log warnings; keep them out of the report.
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
