"""TASKS of the backend tests: the pytest process applies it per test (and while defining the
test tasks), the worker subprocesses have it in their settings module."""

from __future__ import annotations

from typing import Any

TASKS: dict[str, Any] = {
    "default": {
        "BACKEND": "runledger_django.tasks.RunledgerTaskBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_ATTEMPTS": 3, "TIMEOUT_SECONDS": 60},
    },
    "atomic": {
        "BACKEND": "runledger_django.tasks.RunledgerTaskBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 3, "TIMEOUT_SECONDS": 60, "ATOMIC_TASKS": True},
    },
}
