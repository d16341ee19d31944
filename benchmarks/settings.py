"""Django settings of the benchmark run: a dedicated database on the embedded server or on
DATABASE_URL's server, the admin, and the peers when the ``bench`` extra is installed."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from example_project import base_settings as base

BASE_DIR = Path(__file__).resolve().parent.parent
BENCH_DB_NAME = os.environ.get("RUNLEDGER_BENCH_DB", "runledger_bench")

SECRET_KEY = "runledger-bench-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = base.USE_TZ
TIME_ZONE = base.TIME_ZONE
ALLOWED_HOSTS = ["testserver", "localhost"]


def _server_settings() -> dict[str, Any]:
    # Promoter processes get the parent's resolved entry: starting another embedded-server
    # handle in each child would tie the server's lifetime to them.
    inherited = os.environ.get("RUNLEDGER_BENCH_DATABASE")
    if inherited:
        return dict(json.loads(inherited))
    if os.environ.get("DATABASE_URL"):
        import environ

        return dict(environ.Env().db_url("DATABASE_URL"))
    from runledger_django.embedded import database_settings, default_data_dir

    return database_settings(default_data_dir(BASE_DIR))


_server = _server_settings()
MAINTENANCE_DB_NAME = str(_server.get("MAINTENANCE_NAME") or _server["NAME"] or "postgres")
"""The database the run connects to while it drops and recreates the benchmark database."""
DATABASES = {
    "default": {
        **{key: value for key, value in _server.items() if key != "MAINTENANCE_NAME"},
        "NAME": BENCH_DB_NAME,
        "CONN_MAX_AGE": None,
    }
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


HAS_DJANGO_TASKS_DB = _installed("django_tasks_db") and (
    _installed("django.tasks") or _installed("django_tasks")
)
HAS_PROCRASTINATE = _installed("procrastinate.contrib.django")

INSTALLED_APPS = [*base.INSTALLED_APPS, "benchmarks.baseline"]
if HAS_DJANGO_TASKS_DB:
    if not _installed("django.tasks"):
        INSTALLED_APPS.append("django_tasks")  # the backport on Django 5.2
    INSTALLED_APPS.append("django_tasks_db")
if HAS_PROCRASTINATE:
    INSTALLED_APPS.append("procrastinate.contrib.django")

TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
PROCRASTINATE_AUTODISCOVER_MODULE_NAME = ""

MIDDLEWARE = [*base.MIDDLEWARE]
ROOT_URLCONF = "benchmarks.urls"
TEMPLATES = base.TEMPLATES
STATIC_URL = base.STATIC_URL
DEFAULT_AUTO_FIELD = base.DEFAULT_AUTO_FIELD
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
RUNLEDGER: dict[str, Any] = {}

# Promotion logs one INFO line per pass and a warning per fallback row; keep them off the table.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"runledger_django": {"level": "ERROR"}, "procrastinate": {"level": "ERROR"}},
}
