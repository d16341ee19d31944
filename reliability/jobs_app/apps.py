"""App config of the harness's handlers; ``jobs.py`` is found by the worker's autodiscovery."""

from __future__ import annotations

from django.apps import AppConfig


class JobsAppConfig(AppConfig):
    name = "reliability.jobs_app"
    label = "reliability_jobs"
