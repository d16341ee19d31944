"""App configuration: registers the system checks and nothing else."""

from __future__ import annotations

from django.apps import AppConfig


class RunledgerConfig(AppConfig):
    name = "runledger_django"
    label = "runledger"
    verbose_name = "Runledger job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the checks)
