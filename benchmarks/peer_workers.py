"""The peers' no-op tasks for the worker benchmarks, and a launcher for Procrastinate's worker.

django-tasks-db's ``db_worker`` finds its task by import path, so the Task is bound at module
level here (``benchmarks.peer_workers.tasks_db_noop``). Procrastinate's worker only runs tasks
registered on its app before it starts, and the benchmark settings turn autodiscovery off, so
``python -m benchmarks.peer_workers procrastinate worker ...`` registers the task and then runs
the Django integration's own ``procrastinate`` management command, unchanged. The peers come
with the ``bench`` extra, so they are imported by name, at call time.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

PROCRASTINATE_QUEUE = "bench_drain"
PROCRASTINATE_TASK_NAME = "bench.noop"
PROCRASTINATE_ASYNC_QUEUE = "bench_drain_async"
PROCRASTINATE_ASYNC_TASK_NAME = "bench.noop_async"
_registered: dict[str, Any] = {}


def tasks_db_noop() -> None:
    """The django-tasks body; rebound to its Task below when the peer is installed."""


def procrastinate_noop() -> None:
    """The Procrastinate body: a plain function, as our handler is (Procrastinate runs it in a
    thread)."""


async def procrastinate_noop_async() -> None:
    """The same as a coroutine, which Procrastinate runs on its event loop, not in a thread."""


def _tasks_module() -> Any:
    try:
        return importlib.import_module("django.tasks")
    except ImportError:  # Django 5.2: the backport
        return importlib.import_module("django_tasks")


def tasks_db_task() -> Any:
    """``tasks_db_noop`` as a Task on the default (django-tasks-db) backend."""
    if "tasks_db" not in _registered:
        task = _tasks_module().task(globals()["tasks_db_noop"])
        globals()["tasks_db_noop"] = task
        _registered["tasks_db"] = task
    return _registered["tasks_db"]


def procrastinate_task(*, is_async: bool = False) -> Any:
    """``procrastinate_noop`` (or its coroutine twin) registered on the Django integration's
    app; registering one registers both, so one worker process can run either."""
    if "procrastinate" not in _registered:
        app = importlib.import_module("procrastinate.contrib.django").app
        _registered["procrastinate"] = app.task(
            name=PROCRASTINATE_TASK_NAME, queue=PROCRASTINATE_QUEUE
        )(procrastinate_noop)
        _registered["procrastinate_async"] = app.task(
            name=PROCRASTINATE_ASYNC_TASK_NAME, queue=PROCRASTINATE_ASYNC_QUEUE
        )(procrastinate_noop_async)
    return _registered["procrastinate_async" if is_async else "procrastinate"]


def _bind_at_import() -> None:
    # db_worker imports this module to find the Task; only then, and only if the peer is there.
    from django.apps import apps

    if apps.ready and apps.is_installed("django_tasks_db"):
        tasks_db_task()


_bind_at_import()


def main(argv: list[str]) -> int:
    """``procrastinate ARGS...``: register the task, then run ``manage.py procrastinate ARGS``."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    if argv[:1] == ["procrastinate"]:
        procrastinate_task()
    execute_from_command_line(["peer_workers", *argv])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
