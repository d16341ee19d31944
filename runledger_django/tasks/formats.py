"""What a task's rows and a backend's settings look like: the payload a task's intent and job
carry (``TaskPayload``), and a backend's parsed ``OPTIONS`` (``read_options``). The backend
writes and reads both; the worker side (``runner.py``) reads them too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS

from ..validation import INT32_MAX

OPTION_KEYS = ("DATABASE", "MAX_ATTEMPTS", "TIMEOUT_SECONDS", "ATOMIC_TASKS")


@dataclass(frozen=True, slots=True)
class TaskPayload:
    """What a task's job carries: the backend alias, whether the caller chose the key, and
    the normalised arguments."""

    backend: str
    keyed: bool
    args: list[Any]
    kwargs: dict[str, Any]

    @classmethod
    def decode(cls, value: object) -> TaskPayload | None:
        """The payload of a task's intent or job, or None when it is not one."""
        if not isinstance(value, dict):
            return None
        backend, keyed = value.get("backend"), value.get("keyed")
        args, kwargs = value.get("args"), value.get("kwargs")
        if not (
            isinstance(backend, str)
            and isinstance(keyed, bool)
            and isinstance(args, list)
            and isinstance(kwargs, dict)
        ):
            return None
        return cls(backend=backend, keyed=keyed, args=args, kwargs=kwargs)


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """``OPTIONS`` of a backend, read once per instance."""

    database: str
    """The database alias the intents go to (default ``"default"``); a worker runs the tasks
    of the backends whose database it works on."""
    max_attempts: int | None
    """Attempts of a new task's definition (None: the table default, 8). Operators change it
    per task afterwards, in the admin's job definitions."""
    timeout_seconds: int | None
    """The run time limit of a new task's definition (None: the table default, 900 s)."""
    atomic_tasks: bool
    """Run each task of this backend as an ``atomic=True`` handler: the task's writes to
    ``DATABASE`` and its job's success commit together (Django's ``ATOMIC_REQUESTS``, for
    tasks). Give atomic tasks a backend alias of their own to choose per task."""
    problems: tuple[tuple[str, str, str], ...]
    """``(check id, message, hint)`` for every invalid option."""


def read_options(options: object) -> BackendOptions:
    """Parse ``OPTIONS`` without raising: ``check()`` reports the problems, ``enqueue()``
    refuses to run with any."""
    problems: list[tuple[str, str, str]] = []
    if not isinstance(options, Mapping):
        problems.append(
            ("runledger.E103", "OPTIONS must be a dict.", f"Known keys: {', '.join(OPTION_KEYS)}.")
        )
        options = {}
    unknown = sorted(str(key) for key in options if key not in OPTION_KEYS)
    if unknown:
        problems.append(
            (
                "runledger.E103",
                f"OPTIONS has unknown keys: {', '.join(unknown)}.",
                f"Known keys: {', '.join(OPTION_KEYS)}.",
            )
        )
    database = options.get("DATABASE", DEFAULT_DB_ALIAS)
    if not isinstance(database, str) or database not in settings.DATABASES:
        problems.append(
            (
                "runledger.E106",
                f"OPTIONS['DATABASE'] must name a database in DATABASES, got {database!r}.",
                "Leave it out to use 'default'.",
            )
        )
        database = DEFAULT_DB_ALIAS
    numbers: dict[str, int | None] = {}
    for key, check_id in (
        ("MAX_ATTEMPTS", "runledger.E104"),
        ("TIMEOUT_SECONDS", "runledger.E105"),
    ):
        value = options.get(key)
        if value is not None and (type(value) is not int or not 0 < value <= INT32_MAX):
            problems.append(
                (
                    check_id,
                    f"OPTIONS['{key}'] must be a positive 32-bit int or None, got {value!r}.",
                    "It is the default of each new task's job definition.",
                )
            )
            value = None
        numbers[key] = value
    atomic_tasks = options.get("ATOMIC_TASKS", False)
    if not isinstance(atomic_tasks, bool):
        problems.append(
            (
                "runledger.E108",
                f"OPTIONS['ATOMIC_TASKS'] must be True or False, got {atomic_tasks!r}.",
                "True runs each task in the transaction that records its success.",
            )
        )
        atomic_tasks = False
    return BackendOptions(
        database=database,
        max_attempts=numbers["MAX_ATTEMPTS"],
        timeout_seconds=numbers["TIMEOUT_SECONDS"],
        atomic_tasks=atomic_tasks,
        problems=tuple(problems),
    )
