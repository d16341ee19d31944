"""The probes' and the worker registry's settings: checked by ``manage.py check`` with ids of
their own, read at call time, and handed to the worker by the command."""

from __future__ import annotations

from typing import Any

import pytest
from pytest_django import Settings as SettingsWrapper

from runledger_django.checks import check_settings
from runledger_django.conf import conf


def check_ids(settings: SettingsWrapper, value: Any) -> list[str]:
    settings.RUNLEDGER = value
    return [message.id for message in check_settings() if message.id]


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("LIVENESS_MAX_AGE_SECONDS", 0, "runledger.E080"),
        ("LIVENESS_MAX_AGE_SECONDS", "30", "runledger.E080"),
        ("LIVENESS_MAX_AGE_SECONDS", float("inf"), "runledger.E080"),
        ("READINESS_DB_MAX_AGE_SECONDS", -1, "runledger.E081"),
        ("READINESS_DB_MAX_AGE_SECONDS", True, "runledger.E081"),
        ("WORKER_HEARTBEAT_SECONDS", None, "runledger.E082"),
        ("WORKER_HEARTBEAT_SECONDS", 0, "runledger.E082"),
        ("WORKER_RETENTION_SECONDS", float("nan"), "runledger.E083"),
    ],
    ids=repr,
)
def test_check__bad_probe_setting__its_own_id(
    settings: SettingsWrapper, key: str, value: Any, check_id: str
) -> None:
    assert check_ids(settings, {key: value}) == [check_id]


def test_check__good_probe_settings__pass(settings: SettingsWrapper) -> None:
    value = {
        "LIVENESS_MAX_AGE_SECONDS": None,
        "READINESS_DB_MAX_AGE_SECONDS": 45,
        "WORKER_HEARTBEAT_SECONDS": 0.5,
        "WORKER_RETENTION_SECONDS": 3600,
    }
    assert check_ids(settings, value) == []
    assert (conf.LIVENESS_MAX_AGE_SECONDS, conf.READINESS_DB_MAX_AGE_SECONDS) == (None, 45.0)
    assert (conf.WORKER_HEARTBEAT_SECONDS, conf.WORKER_RETENTION_SECONDS) == (0.5, 3600.0)
    settings.RUNLEDGER = {"LIVENESS_MAX_AGE_SECONDS": 90}
    assert conf.LIVENESS_MAX_AGE_SECONDS == 90.0
    assert conf.WORKER_HEARTBEAT_SECONDS == 15.0
