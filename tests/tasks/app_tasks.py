"""The tasks the backend tests enqueue and their workers import by module path.

They are defined with Django's ``@task`` under the tests' TASKS: the decorator takes the task
class of the backend the settings name when the module is imported, and the suite's own
settings name none (each test applies TASKS itself; the worker subprocesses' settings,
tests/tasks/worker_settings.py, have it). A task that must block waits for a file, so a test
releases it instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from django.tasks import TaskContext, task
from django.test.utils import override_settings

from tests.tasks.task_settings import TASKS

MAX_BLOCK_SECONDS = 120.0
"""A blocked task gives up after this long, so no test can leave one behind for ever."""


class ComplexError(Exception):
    """An exception that cannot be rebuilt from its message alone."""

    def __init__(self, code: int, detail: dict[str, Any]) -> None:
        super().__init__(f"failed with {code}")
        self.code = code
        self.detail = detail


with override_settings(TASKS=TASKS):

    @task
    def add(a: int, b: int) -> int:
        return a + b

    @task(backend="atomic", takes_context=True)
    def close_invoice(context: TaskContext[..., Any], *, fail: bool = False) -> dict[str, Any]:
        """An ATOMIC_TASKS task: its effect row commits with its success, or not at all."""
        from tests.exactly_app.models import Effect

        Effect.objects.create(
            job_id=context.task_result.id,
            run_number=1,
            attempt=context.attempt,
            worker_id="task",
        )
        if fail:
            raise ValueError("the invoice cannot be closed yet")
        return {"closed": context.task_result.id}

    @task(queue_name="emails", priority=10)
    def send_receipt(order_id: int, *, email: str = "ada@example.com") -> dict[str, Any]:
        return {"order_id": order_id, "sent_to": email}

    @task(takes_context=True)
    def report_context(context: TaskContext[..., Any]) -> dict[str, Any]:
        """What a task learns from its context: the attempt and the workers so far."""
        result = context.task_result
        return {"attempt": context.attempt, "id": result.id, "worker_ids": list(result.worker_ids)}

    @task(takes_context=True)
    def report_schedule(context: TaskContext[..., Any], note: str) -> dict[str, Any]:
        """What a scheduled task learns of its fire (RunledgerTaskContext)."""
        scheduled_for = getattr(context, "scheduled_for", None)
        return {
            "note": note,
            "scheduled_for": scheduled_for.isoformat() if scheduled_for else None,
            "schedule_name": getattr(context, "schedule_name", None),
        }

    @task(takes_context=True)
    def fail_until(context: TaskContext[..., Any], succeed_on: int) -> int:
        """Fail every attempt before ``succeed_on``, then return the attempt number."""
        if context.attempt < succeed_on:
            raise ValueError(f"attempt {context.attempt} fails")
        return context.attempt

    @task
    def always_fails() -> None:
        raise KeyError("boom")

    @task
    async def async_add(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    @task
    def raises(kind: str) -> None:
        """Raise what a task function might: SystemExit, KeyboardInterrupt, or ComplexError."""
        if kind == "system_exit":
            raise SystemExit(3)
        if kind == "keyboard_interrupt":
            raise KeyboardInterrupt
        raise ComplexError(7, {"why": "complex"})

    @task
    def returns_set() -> Any:
        return {1, 2}

    @task
    def returns_nan() -> float:
        return float("nan")

    @task
    def returns_nothing() -> None:
        return None

    @task(takes_context=True)
    def block_first_attempt(context: TaskContext[..., Any], release: str) -> int:
        """Block the first attempt until the file ``release`` exists (or for a long time: the
        test kills its worker instead); later attempts return their number at once."""
        if context.attempt == 1:
            deadline = time.monotonic() + MAX_BLOCK_SECONDS
            while not Path(release).exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return context.attempt

    not_a_task = "a module attribute that is not a Task"
