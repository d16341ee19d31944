"""Settings for the test suite: PostgreSQL only, embedded unless DATABASE_URL names a server."""

from __future__ import annotations

import os
from pathlib import Path

import environ

from runledger_django.embedded import database_settings, default_data_dir

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "runledger-tests-not-secret"  # noqa: S105
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": environ.Env().db_url("DATABASE_URL")}
else:
    DATABASES = {"default": database_settings(default_data_dir(BASE_DIR))}
# Concurrent test runs on one server need their own test databases.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("RUNLEDGER_TEST_DB", "test_runledger")}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "runledger_django",
    "example_project.shop.apps.ShopConfig",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "example_project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"runledger_django": {"level": "DEBUG"}},
}
