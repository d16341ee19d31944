"""The OpenTelemetry SDK as a host would set it up for shape n's traced workers: a tracer
provider with a batch span processor, exporting to an exporter that drops the spans (the
export's own cost belongs to the host's exporter, not to runledger).

Each process adds how many spans it exported to SPANS_FILE when it exits, so the shape can
check that a traced drain really traced.
"""

from __future__ import annotations

import atexit
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import Sampler

from benchmarks.settings import BENCH_DB_NAME

SPANS_FILE = Path(tempfile.gettempdir()) / f"runledger-bench-spans-{BENCH_DB_NAME}.txt"


class DroppingExporter(SpanExporter):
    """Counts the spans it is handed and drops them."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.count += len(spans)
        return SpanExportResult.SUCCESS


def _report(exporter: DroppingExporter) -> None:
    with SPANS_FILE.open("a") as out:
        out.write(f"{exporter.count}\n")


def install(sampler: Sampler | None = None) -> None:
    """Set the global tracer provider (the SDK's default sampler: every span recorded)."""
    exporter = DroppingExporter()
    atexit.register(_report, exporter)  # registered first: it runs after the provider's flush
    provider = TracerProvider() if sampler is None else TracerProvider(sampler=sampler)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
