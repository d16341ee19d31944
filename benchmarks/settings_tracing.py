"""The benchmark settings with OpenTelemetry on, every span recorded (benchmarks/tracing_sdk.py).
Shape n runs ``runledger_worker --settings=benchmarks.settings_tracing`` against the plain
settings."""

from __future__ import annotations

from benchmarks import tracing_sdk
from benchmarks.settings import *  # noqa: F403

tracing_sdk.install()
