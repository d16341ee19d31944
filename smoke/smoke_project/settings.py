"""Settings of the smoke project: what a production project around the wheel would set.

They pass ``check --deploy`` (HTTPS redirects and HSTS, secure cookies, a long random secret
key, DEBUG off), so the smoke suite runs Django's deployment checks with runledger_django
installed. The database is DATABASE_URL's, else an embedded PostgreSQL 18 (the ``embedded``
extra) in RUNLEDGER_SMOKE_DATA_DIR. A worker subprocess is pointed at the test database by
RUNLEDGER_SMOKE_DB_NAME.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


def database_from_url(url: str) -> dict[str, Any]:
    """A DATABASES entry from ``postgres://user:password@host:port/name`` (``?host=`` may name
    a socket directory); the project needs nothing beyond Django to read it."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": query.get("host", [parts.hostname or ""])[0],
        "PORT": str(parts.port or query.get("port", [""])[0]),
    }


if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": database_from_url(os.environ["DATABASE_URL"])}
else:
    from runledger_django.embedded import database_settings

    data_dir = os.environ.get("RUNLEDGER_SMOKE_DATA_DIR") or str(
        Path(tempfile.gettempdir()) / "runledger-smoke-pgdata"
    )
    DATABASES = {"default": database_settings(Path(data_dir))}
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("RUNLEDGER_TEST_DB", "test_runledger_smoke")}
if os.environ.get("RUNLEDGER_SMOKE_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["RUNLEDGER_SMOKE_DB_NAME"]

# A fresh key per process: nothing signed here outlives a test run.
SECRET_KEY = os.environ.get("RUNLEDGER_SMOKE_SECRET_KEY") or secrets.token_urlsafe(50)
DEBUG = False
ALLOWED_HOSTS = ["smoke.invalid"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "runledger_django",
    "smoke_app",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "smoke_project.urls"
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
STATIC_URL = "/static/"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

SECURE_SSL_REDIRECT = True
SECURE_HSTS_SECONDS = 31_536_000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
