"""Prometheus metrics (the optional extra ``prometheus``): the scrape-time queue collector and
the Django view that serves it. Nothing here imports ``prometheus_client`` until it is used.

    from runledger_django.prometheus import metrics_view
    urlpatterns = [path("metrics/", staff_member_required(metrics_view))]

The worker's own counters and histograms are in ``runledger_django.worker.metrics``.
"""

from __future__ import annotations

from .collector import QueueCollector, register_queue_collector
from .views import metrics_view

__all__ = ["QueueCollector", "metrics_view", "register_queue_collector"]
