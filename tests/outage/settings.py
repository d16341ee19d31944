"""Settings for the processes of the outage tests: a throwaway embedded server that the tests
stop and start, named by environment variables; short intervals so outages end quickly."""

from __future__ import annotations

import os

from example_project import base_settings as base

SECRET_KEY = "runledger-outage-tests-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = base.USE_TZ
TIME_ZONE = base.TIME_ZONE
INSTALLED_APPS = [
    *base.DJANGO_APPS,
    "runledger_django",
    "tests.outage.app.apps.OutageAppConfig",
    "tests.exactly_app",
]
MIDDLEWARE = [*base.MIDDLEWARE]
TEMPLATES = base.TEMPLATES
DEFAULT_AUTO_FIELD = base.DEFAULT_AUTO_FIELD
ROOT_URLCONF = "tests.outage.settings"
urlpatterns: list[object] = []

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "outage",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": os.environ.get("RUNLEDGER_OUTAGE_HOST", ""),
        "PORT": os.environ.get("RUNLEDGER_OUTAGE_PORT", ""),
        "OPTIONS": {"connect_timeout": 2},
    }
}

RUNLEDGER = {
    "OUTAGE_LIMIT_SECONDS": float(os.environ.get("RUNLEDGER_OUTAGE_LIMIT", "120")),
    "WORKER_POLL_INTERVAL": 0.2,
    "WORKER_IDLE_POLL_SECONDS": 1.0,
    "PROMOTER_INTERVAL": 0.2,
    "REAPER_INTERVAL_SECONDS": 1,
    "LEASE_SECONDS": 5,
    "WORKER_GRACE_SECONDS": 5,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(levelname)s %(name)s %(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"runledger_django": {"level": "INFO", "handlers": ["stderr"]}},
}
