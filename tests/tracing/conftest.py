"""The tracing tests' fixtures live in fixtures.py, so the Tasks tracing tests share them."""

from tests.tracing.fixtures import register, spans, tracer

__all__ = ["register", "spans", "tracer"]
