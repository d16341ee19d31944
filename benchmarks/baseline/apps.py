"""App config of the benchmark baseline."""

from __future__ import annotations

from django.apps import AppConfig


class BaselineConfig(AppConfig):
    name = "benchmarks.baseline"
    label = "bench_baseline"
    default_auto_field = "django.db.models.BigAutoField"
