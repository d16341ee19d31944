"""The one place ``prometheus_client`` is imported: lazily, with an error that says what to
install, so the app runs without it and only asking for metrics needs it."""

from __future__ import annotations

import importlib
from types import ModuleType

from django.core.exceptions import ImproperlyConfigured

INSTALL_HINT = "pip install 'runledger-django[prometheus]'"


def prometheus_client() -> ModuleType:
    """The ``prometheus_client`` module; ImproperlyConfigured when it is not installed."""
    try:
        return importlib.import_module("prometheus_client")
    except ImportError as exc:
        raise ImproperlyConfigured(
            f"Prometheus metrics need the prometheus_client package: {INSTALL_HINT}"
        ) from exc


def prometheus_core() -> ModuleType:
    """``prometheus_client.core`` (the metric families of custom collectors)."""
    prometheus_client()
    return importlib.import_module("prometheus_client.core")
