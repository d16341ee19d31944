"""Settings for the test suite: PostgreSQL only, embedded unless DATABASE_URL names a server."""

from __future__ import annotations

import os
from pathlib import Path

import environ

from example_project import base_settings as base
from runledger_django.embedded import database_settings, default_data_dir

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "runledger-tests-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = base.USE_TZ
TIME_ZONE = base.TIME_ZONE

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": environ.Env().db_url("DATABASE_URL")}
else:
    DATABASES = {"default": database_settings(default_data_dir(BASE_DIR))}
# Concurrent test runs on one server need their own test databases.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("RUNLEDGER_TEST_DB", "test_runledger")}

INSTALLED_APPS = [*base.INSTALLED_APPS, "tests.exactly_app"]
MIDDLEWARE = [*base.MIDDLEWARE]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = base.TEMPLATES
DEFAULT_AUTO_FIELD = base.DEFAULT_AUTO_FIELD
STATIC_URL = base.STATIC_URL
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"runledger_django": {"level": "DEBUG"}},
}
