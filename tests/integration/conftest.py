"""Fixtures of the integration tests."""

from __future__ import annotations

import pytest
from pytest_django import Settings as SettingsWrapper


@pytest.fixture
def no_notify(settings: SettingsWrapper) -> None:
    """The wake-up NOTIFY after a commit is a query of its own (tests/worker/test_wakeup.py):
    statement counts count the write alone."""
    settings.RUNLEDGER = {"WAKEUP_NOTIFY": False}
