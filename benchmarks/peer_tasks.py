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


def tasks_db_bulk_create(arguments: list[dict[str, Any]]) -> list[Any]:
    """``send_receipt`` rows for many argument sets in one ``bulk_create``, each built as the
    django-tasks-db backend's ``enqueue`` builds its row (``bulk_create`` sends no signal, so
    the "run after" placeholder its pre-save handler would set is set here)."""
    task = tasks_db_task()
    backend = task.get_backend()
    models = importlib.import_module("django_tasks_db.models")
    compat = importlib.import_module("django_tasks_db.compat")
    run_after = models.get_date_max() if task.run_after is None else task.run_after
    rows = [
        models.DBTaskResult(
            id=backend._get_id(),
            args_kwargs=compat.normalize_json({"args": [], "kwargs": kwargs}),
            priority=task.priority,
            task_path=task.module_path,
            queue_name=task.queue_name,
            run_after=run_after,
            backend_name=backend.alias,
        )
        for kwargs in arguments
    ]
    return list(models.DBTaskResult.objects.bulk_create(rows))
