"""Handler registration: ``@job_handler``'s options and one handler per job type."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from runledger_django import JobContext, job_handler
from runledger_django.domain import JobDefaults
from runledger_django.worker.registry import Handler, Registry, registry

TYPE = "unit.registry.handler"


def noop(job: JobContext) -> None:
    return None


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    """Job types a test registered in the process-wide registry; removed afterwards."""
    types: list[str] = []
    yield types
    for job_type in types:
        registry.unregister(job_type)


def test_job_handler__registers_function_with_its_defaults(cleanup: list[str]) -> None:
    cleanup.append(TYPE)

    decorated = job_handler(TYPE, max_attempts=5, timeout_seconds=60, priority=-3)(noop)

    assert decorated is noop
    handler = registry.get(TYPE)
    assert handler == Handler(
        job_type=TYPE, func=noop, max_attempts=5, timeout_seconds=60, priority=-3
    )
    assert handler.defaults() == JobDefaults(
        job_type=TYPE, max_attempts=5, timeout_seconds=60, priority=-3
    )


def test_job_handler__same_job_type_twice__improperly_configured_first_kept(
    cleanup: list[str],
) -> None:
    cleanup.append(TYPE)
    job_handler(TYPE)(noop)

    with pytest.raises(ImproperlyConfigured, match="already has a handler"):
        job_handler(TYPE)(lambda job: None)

    handler = registry.get(TYPE)
    assert handler is not None and handler.func is noop


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"max_attempts": True},
        {"max_attempts": 2.0},
        {"max_attempts": 2**31},
        {"timeout_seconds": 0},
        {"timeout_seconds": "60"},
        {"priority": 2**31},
        {"priority": -(2**31) - 1},
        {"priority": 1.5},
    ],
    ids=repr,
)
def test_job_handler__invalid_option__improperly_configured(options: dict[str, Any]) -> None:
    with pytest.raises(ImproperlyConfigured):
        job_handler(TYPE, **options)
    assert registry.get(TYPE) is None


@pytest.mark.parametrize("job_type", ["", " \u3000", 7, None, "x" * 300], ids=repr)
def test_job_handler__invalid_job_type__improperly_configured(job_type: Any) -> None:
    with pytest.raises(ImproperlyConfigured):
        job_handler(job_type)


def test_job_handler__decorating_a_non_callable__improperly_configured() -> None:
    with pytest.raises(ImproperlyConfigured, match="must decorate a function"):
        job_handler(TYPE)(42)  # type: ignore[type-var]
    assert registry.get(TYPE) is None


def test_registry__own_instance__sorted_types_and_unregister() -> None:
    own = Registry()
    for job_type in ("b.type", "a.type", "c.type"):
        own.register(Handler(job_type=job_type, func=noop))

    assert own.job_types() == ["a.type", "b.type", "c.type"]
    assert [handler.job_type for handler in own.handlers()] == ["a.type", "b.type", "c.type"]
    own.unregister("b.type")
    own.unregister("never.registered")
    assert own.job_types() == ["a.type", "c.type"]
    assert registry.get("a.type") is None  # the process-wide registry is another one
    with pytest.raises(ImproperlyConfigured):
        own.register(Handler(job_type="a.type", func=noop))


# --- queue control limits (docs/queue-control.md) --------------------------------------------


def test_job_handler__limits__declared_as_definition_defaults(cleanup: list[str]) -> None:
    cleanup.append(TYPE)

    job_handler(TYPE, max_concurrency=5, rate_limit=(10, 60))(noop)

    handler = registry.get(TYPE)
    assert handler is not None
    assert handler.defaults() == JobDefaults(job_type=TYPE, max_concurrency=5, rate_limit=(10, 60))


@pytest.mark.parametrize(
    "options",
    [
        {"max_concurrency": 0},
        {"max_concurrency": True},
        {"max_concurrency": 2**31},
        {"rate_limit": (10,)},
        {"rate_limit": (0, 60)},
        {"rate_limit": (10, 0)},
        {"rate_limit": (10001, 60)},
        {"rate_limit": "10/60"},
        {"rate_limit": (None, 60)},
    ],
    ids=repr,
)
def test_job_handler__invalid_limit__improperly_configured(options: dict[str, Any]) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"^job_handler: "):
        job_handler(TYPE, **options)
    assert registry.get(TYPE) is None
