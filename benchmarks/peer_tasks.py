"""The task the peers enqueue, and its django-tasks and Procrastinate registrations.

Only the enqueue side is measured; no worker ever runs a body. The peers are imported by name
at call time: they come with the ``bench`` extra, which the dev environment lacks.
"""

from __future__ import annotations

import importlib
from typing import Any

_registered: dict[str, Any] = {}


def send_receipt(order_id: int, email: str) -> None:
    """The django-tasks body. Registering it rebinds this name to its Task: the backend looks
    the task up again by its module path, which must name the Task, not the function."""


def deferred_receipt(order_id: int, email: str) -> None:
    """The Procrastinate body (registered under an explicit name)."""


def tasks_db_task() -> Any:
    """``send_receipt`` as a django-tasks Task on the django-tasks-db backend."""
    if "tasks_db" not in _registered:
        try:
            tasks = importlib.import_module("django.tasks")
        except ImportError:  # Django 5.2: the backport
            tasks = importlib.import_module("django_tasks")
        task = tasks.task(globals()["send_receipt"])
        globals()["send_receipt"] = task
        _registered["tasks_db"] = task
    return _registered["tasks_db"]


def procrastinate_task() -> Any:
    """``deferred_receipt`` as a Procrastinate task on the Django integration's app."""
    if "procrastinate" not in _registered:
        app = importlib.import_module("procrastinate.contrib.django").app
        _registered["procrastinate"] = app.task(name="bench.send_receipt", queue="bench")(
            deferred_receipt
        )
    return _registered["procrastinate"]
