"""Settings of the example project (django-environ; DATABASE_URL overrides the embedded server)."""

from __future__ import annotations

from pathlib import Path

import environ

from example_project import base_settings as base
from runledger_django.embedded import database_settings, default_data_dir

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env(DEBUG=(bool, True))

SECRET_KEY = env.str("SECRET_KEY", default="runledger-example-not-secret")
DEBUG = env("DEBUG")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "testserver"])
USE_TZ = base.USE_TZ
TIME_ZONE = base.TIME_ZONE

DATABASES = {
    "default": env.db_url("DATABASE_URL")
    if env.str("DATABASE_URL", default="")
    else database_settings(default_data_dir(BASE_DIR), name="postgres")
}

INSTALLED_APPS = [*base.DJANGO_APPS, "django.contrib.staticfiles", *base.PROJECT_APPS]
MIDDLEWARE = ["django.middleware.security.SecurityMiddleware", *base.MIDDLEWARE]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = base.TEMPLATES
STATIC_URL = base.STATIC_URL
DEFAULT_AUTO_FIELD = base.DEFAULT_AUTO_FIELD

RUNLEDGER = {"PROMOTE_JOB_TYPES": None}

# Django's Tasks API (Django 6 and newer; Django 5.2 ignores the setting): @task functions are
# recorded as intents in the caller's transaction and run by runledger_worker --promote.
TASKS = {"default": {"BACKEND": "runledger_django.tasks.RunledgerTaskBackend"}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"runledger_django": {"handlers": ["console"], "level": "WARNING"}},
}
