"""The Django admin: read-only intents and jobs, editable job definitions, metrics pages.

One module per concern (``intents``, ``jobs``, ``definitions``, ``metrics``, ``schedules``,
``workers``, ``dashboard`` with its ``charts``, ``workflows`` with its drawing in
``workflow_graph``) over the pieces they share (``shared``). Importing this package registers
every model admin, as Django's
admin autodiscovery expects of ``<app>.admin``. Nothing here writes an intent or a job
directly: the job actions call the services. Permissions are Django's model permissions.
"""

from . import dashboard, definitions, intents, jobs, metrics, schedules, workers, workflows

__all__ = [
    "dashboard",
    "definitions",
    "intents",
    "jobs",
    "metrics",
    "schedules",
    "workers",
    "workflows",
]
