"""Settings of the subprocesses the task tests start (``runledger_worker --settings=...`` and
``shell``): the worker tests' settings plus TASKS naming RunledgerTaskBackend, as in a project
that switched to it."""

from __future__ import annotations

from tests.tasks.task_settings import TASKS as TASKS
from tests.worker_settings import *  # noqa: F403
