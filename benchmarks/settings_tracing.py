"""The benchmark settings with OpenTelemetry on, as a host would set it up: the SDK's tracer
provider with a batch span processor, exporting to an exporter that drops the spans (the
export's own cost belongs to the host's exporter, not to runledger). Shape n runs
``runledger_worker --settings=benchmarks.settings_tracing`` against the plain settings.

Each process adds how many spans it exported to SPANS_FILE when it exits, so the shape can
check that the traced drain really traced.
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

from benchmarks.settings import *  # noqa: F403
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


_exporter = DroppingExporter()
atexit.register(_report, _exporter)  # registered first, so it runs after the provider's flush
_provider = TracerProvider()
_provider.add_span_processor(BatchSpanProcessor(_exporter))
trace.set_tracer_provider(_provider)
