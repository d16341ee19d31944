"""The benchmark settings with OpenTelemetry on and one trace in ten sampled, as production
setups often run (a parent-based ratio sampler; a run's span starts a trace of its own, so
the ratio decides)."""

from __future__ import annotations

from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from benchmarks import tracing_sdk
from benchmarks.settings import *  # noqa: F403

tracing_sdk.install(ParentBased(TraceIdRatioBased(0.1)))
