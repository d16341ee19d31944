"""A backend for Django's Tasks framework (``django.tasks``, Django 6.0 and newer).

``TASKS = {"default": {"BACKEND": "runledger_django.tasks.RunledgerTaskBackend"}}`` makes
``@task`` functions enqueue runledger intents in the caller's transaction and ``runledger_worker``
run them with leases, retries, dead letters and the reaper (docs/tasks.md). Importing this
package touches neither models nor the database.
"""

from __future__ import annotations

import django
from django.core.exceptions import ImproperlyConfigured

if django.VERSION < (6, 0):
    raise ImproperlyConfigured(
        "runledger_django.tasks is a backend for django.tasks, which Django 6.0 introduced; "
        f"this project runs Django {django.get_version()}. Upgrade Django, or call "
        "runledger_django.record_intent() and run handlers registered with @job_handler."
    )

from .backend import RunledgerTask, RunledgerTaskBackend, with_idempotency_key

__all__ = ["RunledgerTask", "RunledgerTaskBackend", "with_idempotency_key"]
