"""How a Django task maps onto a runledger job type, and back.

``task:<queue name>:<module path>`` carries everything a worker needs to find and run a task
(its queue, for ``--queue``, and the import path of the ``Task`` object) in a column the queue
already indexes, so the intents, the promotion path and the queue schema stay as they are.
"""

from __future__ import annotations

from ..errors import RunledgerError
from ..validation import validate_job_type

TASK_PREFIX = "task:"
"""Every task's job type starts with this; no ``@job_handler`` type should."""


class JobTypeError(ValueError):
    """A queue and task cannot form a valid job type (the caller turns it into InvalidTask)."""


def task_job_type(queue_name: object, module_path: str) -> str:
    """The job type of a task on a queue, checked against the job type rules.

    A module path never contains ``:`` (Python names cannot), so the last ``:`` separates it
    from the queue name, which may contain anything but NUL and must not be blank.
    """
    if not isinstance(queue_name, str) or not queue_name.strip():
        raise JobTypeError("the queue name must be a non-blank string")
    try:
        return validate_job_type(f"{TASK_PREFIX}{queue_name}:{module_path}")
    except RunledgerError as error:
        raise JobTypeError(
            f"queue {queue_name!r} and task {module_path!r} make an invalid job type: "
            f"{error.client_message}"
        ) from None


def parse_task_job_type(job_type: str) -> tuple[str, str] | None:
    """``(queue_name, module_path)`` of a task's job type, or None for any other job type."""
    if not job_type.startswith(TASK_PREFIX):
        return None
    queue_name, separator, module_path = job_type[len(TASK_PREFIX) :].rpartition(":")
    if not separator or not queue_name or not module_path:
        return None
    return queue_name, module_path


def queue_prefix(queue_name: str) -> str:
    """The prefix of every task job type on ``queue_name`` (a superset when the name of
    another queue extends it with ``:``; callers compare the parsed queue exactly)."""
    return f"{TASK_PREFIX}{queue_name}:"
