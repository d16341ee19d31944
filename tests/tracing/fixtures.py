"""Fixtures of the tracing tests (imported by tests/tracing/conftest.py and the Tasks tracing
tests): an SDK tracer provider exporting to memory, set as the global provider for one test
and taken away again, so no other test records spans."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from runledger_django.worker.registry import Handler, HandlerFunc, registry


def reset_global_provider(provider: Any) -> None:
    # The API lets a process set its provider once; OpenTelemetry's own test utilities reset
    # these two globals the same way.
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    if provider is not None:
        trace.set_tracer_provider(provider)


class Spans:
    """The spans finished during the test, read by name."""

    def __init__(self, exporter: InMemorySpanExporter) -> None:
        self.exporter = exporter

    def all(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.all() if span.name == name]

    def one(self, name: str) -> ReadableSpan:
        found = self.named(name)
        assert len(found) == 1, [span.name for span in self.all()]
        return found[0]


@pytest.fixture
def spans() -> Iterator[Spans]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reset_global_provider(provider)
    try:
        yield Spans(exporter)
    finally:
        reset_global_provider(None)
        provider.shutdown()


@pytest.fixture
def tracer(spans: Spans) -> trace.Tracer:
    """The test's own tracer: its spans stand for the host's request spans."""
    return trace.get_tracer("tests.tracing")


Register = Callable[..., None]


@pytest.fixture
def register() -> Iterator[Register]:
    """Register handlers in the process-wide registry; unregistered at teardown."""
    added: list[str] = []

    def register_(job_type: str, func: HandlerFunc, **options: Any) -> None:
        registry.register(Handler(job_type=job_type, func=func, **options))
        added.append(job_type)

    yield register_
    for job_type in added:
        registry.unregister(job_type)
