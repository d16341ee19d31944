"""System checks: RUNLEDGER settings (always) and the database server (``check --database``)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.checks import Error
from django.core.checks import Warning as CheckWarning
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from psycopg import IsolationLevel
from pytest_django import Settings as SettingsWrapper

from runledger_django.checks import check_settings, database_messages
from runledger_django.conf import conf


def check_ids(settings: SettingsWrapper, value: Any) -> list[str]:
    settings.RUNLEDGER = value
    return [message.id for message in check_settings() if message.id]


def assert_check_fails(settings: SettingsWrapper, value: Any, check_id: str) -> None:
    settings.RUNLEDGER = value
    with pytest.raises(SystemCheckError, match=rf"\({check_id}\)"):
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())


def test_check__no_runledger_setting__passes(settings: SettingsWrapper) -> None:
    del settings.RUNLEDGER
    call_command("check", stdout=io.StringIO())


def test_check__every_key_valid__passes(settings: SettingsWrapper) -> None:
    settings.RUNLEDGER = {
        "PROMOTE_JOB_TYPES": ["orders.send_receipt", "\x1cnot-blank"],
        "PROMOTION_BATCH_SIZE": 1000,
        "PROMOTER_INTERVAL": 2,
        "PRUNE_BATCH_SIZE": 1,
        "LEASE_SECONDS": 1,
        "REAPER_INTERVAL_SECONDS": 0.5,
        "WORKER_GRACE_SECONDS": 0,
        "WORKER_POLL_INTERVAL": 0.05,
        "WAKEUP_NOTIFY": False,
        "WORKER_LISTEN": False,
        "OUTAGE_LIMIT_SECONDS": 600,
    }
    call_command("check", stdout=io.StringIO())


@pytest.mark.parametrize("value", [["a"], "PROMOTE_JOB_TYPES", None, 5], ids=repr)
def test_check__runledger_not_a_dict__e001(settings: SettingsWrapper, value: Any) -> None:
    assert_check_fails(settings, value, "runledger.E001")
    assert check_ids(settings, value) == ["runledger.E001"]


def test_check__unknown_key__e002(settings: SettingsWrapper) -> None:
    assert_check_fails(settings, {"PROMOTION_BATCHSIZE": 10}, "runledger.E002")
    assert check_ids(settings, {"PROMOTION_BATCHSIZE": 10}) == ["runledger.E002"]


@pytest.mark.parametrize(
    "value",
    [
        "orders.send_receipt",
        ["ok", " "],
        ["ok", "\u00a0"],
        ["ok", 1],
        {"orders.a"},
        [None],
        ["nul\x00"],
        ["x" * 256],
    ],
    ids=repr,
)
def test_check__bad_promote_job_types__e003(settings: SettingsWrapper, value: Any) -> None:
    assert_check_fails(settings, {"PROMOTE_JOB_TYPES": value}, "runledger.E003")
    assert check_ids(settings, {"PROMOTE_JOB_TYPES": value}) == ["runledger.E003"]


@pytest.mark.parametrize("value", [None, [], ("orders.a", "orders.b")], ids=repr)
def test_check__good_promote_job_types__passes(settings: SettingsWrapper, value: Any) -> None:
    assert check_ids(settings, {"PROMOTE_JOB_TYPES": value}) == []


@pytest.mark.parametrize("value", [0, -1, 1001, True, "24", 24.0, None], ids=repr)
def test_check__bad_promotion_batch_size__e004(settings: SettingsWrapper, value: Any) -> None:
    assert_check_fails(settings, {"PROMOTION_BATCH_SIZE": value}, "runledger.E004")
    assert check_ids(settings, {"PROMOTION_BATCH_SIZE": value}) == ["runledger.E004"]


@pytest.mark.parametrize(
    "value",
    [0, -0.5, True, "1", None, float("nan"), float("inf"), 1e300],
    ids=repr,
)
def test_check__bad_promoter_interval__e005(settings: SettingsWrapper, value: Any) -> None:
    """Infinite or huge waits overflow Event.wait() and would crash the promoter loop."""
    assert_check_fails(settings, {"PROMOTER_INTERVAL": value}, "runledger.E005")
    assert check_ids(settings, {"PROMOTER_INTERVAL": value}) == ["runledger.E005"]


@pytest.mark.parametrize("value", [0.001, 1, 3600.5])
def test_check__good_promoter_interval__passes(settings: SettingsWrapper, value: Any) -> None:
    assert check_ids(settings, {"PROMOTER_INTERVAL": value}) == []


@pytest.mark.parametrize("value", [0, 1001, False, "1000", 10.0], ids=repr)
def test_check__bad_prune_batch_size__e006(settings: SettingsWrapper, value: Any) -> None:
    assert_check_fails(settings, {"PRUNE_BATCH_SIZE": value}, "runledger.E006")
    assert check_ids(settings, {"PRUNE_BATCH_SIZE": value}) == ["runledger.E006"]


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("LEASE_SECONDS", 0, "runledger.E020"),
        ("LEASE_SECONDS", 1.5, "runledger.E020"),
        ("LEASE_SECONDS", 86_401, "runledger.E020"),
        ("LEASE_SECONDS", True, "runledger.E020"),
        ("REAPER_INTERVAL_SECONDS", 0, "runledger.E021"),
        ("REAPER_INTERVAL_SECONDS", float("inf"), "runledger.E021"),
        ("WORKER_GRACE_SECONDS", -1, "runledger.E022"),
        ("WORKER_GRACE_SECONDS", "30", "runledger.E022"),
        ("WORKER_POLL_INTERVAL", 0, "runledger.E023"),
        ("WORKER_POLL_INTERVAL", float("nan"), "runledger.E023"),
        ("OUTAGE_LIMIT_SECONDS", 0, "runledger.E024"),
        ("OUTAGE_LIMIT_SECONDS", 1e300, "runledger.E024"),
        ("WORKER_IDLE_POLL_SECONDS", 0, "runledger.E027"),
        ("WORKER_IDLE_POLL_SECONDS", "10", "runledger.E027"),
        ("WAKEUP_NOTIFY", 1, "runledger.E025"),
        ("WORKER_LISTEN", "yes", "runledger.E026"),
    ],
    ids=repr,
)
def test_check__bad_worker_setting__its_own_id(
    settings: SettingsWrapper, key: str, value: Any, check_id: str
) -> None:
    """A worker would crash (an Event.wait() overflow) or misbehave on these values."""
    assert_check_fails(settings, {key: value}, check_id)
    assert check_ids(settings, {key: value}) == [check_id]


@pytest.mark.parametrize(
    ("key", "value", "check_id"),
    [
        ("TRACING_ENABLED", 1, "runledger.E070"),
        ("TRACING_ENABLED", "no", "runledger.E070"),
        ("TRACING_RUN_PARENT", "parent", "runledger.E071"),
        ("TRACING_RUN_PARENT", None, "runledger.E071"),
        ("TRACING_RUN_PARENT", ["link"], "runledger.E071"),
        ("TRACING_BAGGAGE", "yes", "runledger.E072"),
    ],
    ids=repr,
)
def test_check__bad_tracing_setting__its_own_id(
    settings: SettingsWrapper, key: str, value: Any, check_id: str
) -> None:
    assert_check_fails(settings, {key: value}, check_id)
    assert check_ids(settings, {key: value}) == [check_id]


@pytest.mark.parametrize("parent", ["link", "child", "none"])
def test_check__tracing_settings_valid__passes(settings: SettingsWrapper, parent: str) -> None:
    settings.RUNLEDGER = {
        "TRACING_ENABLED": False,
        "TRACING_RUN_PARENT": parent,
        "TRACING_BAGGAGE": True,
    }
    call_command("check", stdout=io.StringIO())
    assert (conf.TRACING_ENABLED, conf.TRACING_RUN_PARENT, conf.TRACING_BAGGAGE) == (
        False,
        parent,
        True,
    )


def test_conf__no_runledger_setting__tracing_defaults(settings: SettingsWrapper) -> None:
    del settings.RUNLEDGER
    assert (conf.TRACING_ENABLED, conf.TRACING_RUN_PARENT, conf.TRACING_BAGGAGE) == (
        True,
        "link",
        False,
    )


def test_check__several_problems__all_reported(settings: SettingsWrapper) -> None:
    value = {
        "NOPE": 1,
        "PROMOTE_JOB_TYPES": "a",
        "PROMOTION_BATCH_SIZE": 0,
        "PROMOTER_INTERVAL": 0,
        "PRUNE_BATCH_SIZE": 0,
    }
    assert check_ids(settings, value) == [
        "runledger.E002",
        "runledger.E003",
        "runledger.E004",
        "runledger.E005",
        "runledger.E006",
    ]


def test_check_settings__every_message__has_id_hint_and_error_level(
    settings: SettingsWrapper,
) -> None:
    settings.RUNLEDGER = {
        "NOPE": 1,
        "PROMOTE_JOB_TYPES": "a",
        "PROMOTION_BATCH_SIZE": 0,
        "PROMOTER_INTERVAL": -1,
        "PRUNE_BATCH_SIZE": 0,
    }
    messages = check_settings()
    assert len(messages) == 5
    assert all(isinstance(message, Error) and message.id and message.hint for message in messages)


# --- database checks -------------------------------------------------------------------------


def test_database_messages__not_postgresql__e010() -> None:
    messages = database_messages("default", "sqlite", None, None)
    assert [(type(m), m.id) for m in messages] == [(Error, "runledger.E010")]
    assert messages[0].hint


@pytest.mark.parametrize("version", [90624, 140012, 149999])
def test_database_messages__server_older_than_15__e011(version: int) -> None:
    messages = database_messages("default", "postgresql", version, None)
    assert [(type(m), m.id) for m in messages] == [(Error, "runledger.E011")]
    assert f"PostgreSQL {version // 10000}" in messages[0].msg


@pytest.mark.parametrize("version", [150000, 150020, 170004, 180006])
def test_database_messages__supported_server__no_message(version: int) -> None:
    assert database_messages("default", "postgresql", version, None) == []


@pytest.mark.parametrize(
    "level", [IsolationLevel.REPEATABLE_READ, IsolationLevel.SERIALIZABLE], ids=str
)
def test_database_messages__stricter_default_isolation__w010(level: IsolationLevel) -> None:
    messages = database_messages("default", "postgresql", 180006, level)
    assert [(type(m), m.id) for m in messages] == [(CheckWarning, "runledger.W010")]
    assert messages[0].hint


@pytest.mark.parametrize(
    "level", [IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED], ids=str
)
def test_database_messages__read_committed_default__no_message(level: IsolationLevel) -> None:
    assert database_messages("default", "postgresql", 150000, level) == []


@pytest.mark.django_db
def test_check_database__real_server__passes() -> None:
    stderr = io.StringIO()
    call_command("check", "--database", "default", stdout=io.StringIO(), stderr=stderr)
    assert "runledger" not in stderr.getvalue()


@pytest.mark.django_db
def test_check_database__repeatable_read_option__w010_without_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A warning, not an error: only record_intent inside the caller's atomic block needs RC."""
    options = {**connection.settings_dict.get("OPTIONS", {})}
    options["isolation_level"] = IsolationLevel.REPEATABLE_READ
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    stderr = io.StringIO()
    call_command("check", "--database", "default", stdout=io.StringIO(), stderr=stderr)
    assert "runledger.W010" in stderr.getvalue()


# --- conf: values read at call time ----------------------------------------------------------


def test_conf__no_runledger_setting__defaults(settings: SettingsWrapper) -> None:
    del settings.RUNLEDGER
    assert (
        conf.PROMOTE_JOB_TYPES,
        conf.PROMOTION_BATCH_SIZE,
        conf.PROMOTER_INTERVAL,
        conf.PRUNE_BATCH_SIZE,
    ) == (None, 500, 0.5, 1000)
    assert (
        conf.LEASE_SECONDS,
        conf.REAPER_INTERVAL_SECONDS,
        conf.WORKER_GRACE_SECONDS,
        conf.WORKER_POLL_INTERVAL,
        conf.WAKEUP_NOTIFY,
        conf.WORKER_LISTEN,
        conf.OUTAGE_LIMIT_SECONDS,
    ) == (60, 15.0, 30.0, 1.0, True, True, 300.0)


def test_conf__settings_changed__read_at_call_time(settings: SettingsWrapper) -> None:
    settings.RUNLEDGER = {"PROMOTE_JOB_TYPES": ("a", "b"), "PROMOTION_BATCH_SIZE": 7}
    assert conf.PROMOTE_JOB_TYPES == ["a", "b"]
    assert conf.PROMOTION_BATCH_SIZE == 7
    assert conf.PRUNE_BATCH_SIZE == 1000
    settings.RUNLEDGER = {"PROMOTER_INTERVAL": 3}
    assert conf.PROMOTER_INTERVAL == 3.0
    assert conf.PROMOTE_JOB_TYPES is None
