"""Job definitions for tasks, created outside the caller's transaction, once per process.

Promotion and the workers only see job types that have an enabled definition, so a task's
definition must exist before its first intent can become a job. ``record_intent`` never
touches definitions (a missing, disabled or locked one must not block a checkout), and the
enqueue joins the caller's transaction, so the definition is created on a connection of its
own: a short-lived thread (Django keeps connections per thread) runs the ordinary
``ensure_job_definitions`` in autocommit and closes its connection. The definition commits at
once, before the caller's intent can; a rolled-back enqueue leaves a harmless, unused
definition behind. Each process does this once per database and job type.
"""

from __future__ import annotations

import threading

from django.db import connections

from ..domain import JobDefaults

_ensured: set[tuple[str, str]] = set()
_lock = threading.Lock()

TASK_DEFAULT_PRIORITY = 0
"""Django's default task priority. Every task intent carries its own priority, so this only
tells operators browsing definitions what an unset priority means."""


def is_ensured(using: str, job_type: str) -> bool:
    return (using, job_type) in _ensured


def ensure_task_definition(
    job_type: str,
    *,
    max_attempts: int | None,
    timeout_seconds: int | None,
    using: str,
) -> None:
    """Make sure ``job_type`` has a definition, without touching the calling thread's
    connection or transaction; an existing definition (an operator's edits) is kept.

    Raises:
        RunledgerError: the definition could not be read or created (a classified database
            error); nothing was written on the caller's connection.
    """
    if (using, job_type) in _ensured:
        return
    defaults = JobDefaults(
        job_type=job_type,
        max_attempts=max_attempts,
        timeout_seconds=timeout_seconds,
        priority=TASK_DEFAULT_PRIORITY,
    )
    failures: list[BaseException] = []

    def create() -> None:
        # Imported here: the backend is built while apps load, before models can be imported.
        from ..services.claim import ensure_job_definitions

        try:
            ensure_job_definitions([defaults], using=using)
        except BaseException as exc:  # handed to the caller's thread, re-raised there
            failures.append(exc)
        finally:
            connections.close_all()  # this thread's connections only

    thread = threading.Thread(target=create, name="runledger-task-definition", daemon=True)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]
    with _lock:
        _ensured.add((using, job_type))


def forget_ensured() -> None:
    """Forget which definitions this process made sure of (after tables were truncated, as
    tests do); the next enqueue of each task checks again."""
    with _lock:
        _ensured.clear()
