"""Fixtures of the schedules tests: a definition, saved schedules, and a clock to pass."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from runledger_django.models import JobDefinition, JobSchedule
from runledger_django.services.schedules import save_schedule

SCHEDULED_TYPE = "tests.scheduled"
UTC = dt.UTC

MakeSchedule = Callable[..., JobSchedule]


def at(text: str) -> dt.datetime:
    """An aware UTC datetime from ``YYYY-MM-DDTHH:MM[:SS]``."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture
def scheduled_definition(make_definition: Callable[..., JobDefinition]) -> JobDefinition:
    return make_definition(SCHEDULED_TYPE)


@pytest.fixture
def make_schedule(scheduled_definition: JobDefinition) -> MakeSchedule:
    """Save a runtime schedule of SCHEDULED_TYPE (every minute unless told), optionally with
    its cursor put at ``cursor``."""

    def make(
        name: str = "every-minute", *, cursor: dt.datetime | None = None, **kw: Any
    ) -> JobSchedule:
        kw.setdefault("cron", None if "every" in kw else "* * * * *")
        target = kw.pop("target", SCHEDULED_TYPE)
        row = save_schedule(name, target, next_fire_at=cursor, **kw)
        return row

    return make
