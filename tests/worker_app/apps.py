"""The test handlers' app: installed only by tests/worker_settings.py (the subprocesses)."""

from __future__ import annotations

from django.apps import AppConfig


class WorkerTestsConfig(AppConfig):
    name = "tests.worker_app"
    label = "runledger_worker_tests"
    default = True
