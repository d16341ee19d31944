"""Job definitions for tasks, created outside the caller's transaction whenever one is missing.

Promotion and the workers only see job types that have an enabled definition, so a task's
definition must exist before its intent can become a job. The enqueue joins the caller's
transaction and must never wait there for a definition (a missing, disabled or locked one
must not block a checkout), so the intent's insert only reports, through an index probe that
never waits, that the task's job type has no definition (``record_prepared``'s
``on_missing_definition``); the definition is then created on a connection of its own: a
short-lived thread (Django keeps connections per thread) runs the ordinary
``ensure_job_definitions`` in autocommit and closes its connection. It commits at once, so a
rolled-back enqueue leaves a harmless, unused definition behind.

Nothing is remembered per process: a definition deleted by an operator, or flushed away by a
test suite between tests (``TransactionTestCase``, pytest-django's ``transaction=True``), is
made again by the next enqueue of the task, and the intents recorded meanwhile are promoted
as soon as it exists.
"""

from __future__ import annotations

import threading

from django.db import connections

from ..domain import JobDefaults

TASK_DEFAULT_PRIORITY = 0
"""Django's default task priority. Every task intent carries its own priority, so this only
tells operators browsing definitions what an unset priority means."""


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
