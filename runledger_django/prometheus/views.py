"""The Django view of the queue gauges: ``path("metrics/", metrics_view)``, protected by the
host (wrap it in ``staff_member_required``, a token check, or serve it on an internal URL).

It exports from a registry of its own, never the process's default one, so it works the same
under ``prometheus_client`` multiprocess mode (where the default registry is not exported)
and beside a host's own ``/metrics``. Web processes emit no runledger counters: the gauges are
read from PostgreSQL at scrape time, so every process serves the same values.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from .client import prometheus_client
from .collector import QueueCollector

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

_registry: CollectorRegistry | None = None
_registry_lock = threading.Lock()


def view_registry() -> CollectorRegistry:
    """The view's registry (one per process): its collector's cache spans requests."""
    global _registry
    with _registry_lock:
        if _registry is None:
            registry = prometheus_client().CollectorRegistry(auto_describe=False)
            registry.register(QueueCollector())
            _registry = registry
        return _registry


@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The queue gauges in the Prometheus (or OpenMetrics, as the scraper asks) text format.

    Always 200 while the process runs: a database that does not answer shows as
    ``runledger_collector_up 0``.
    """
    client = prometheus_client()
    encoder, content_type = client.exposition.choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(view_registry()), content_type=content_type)
