"""Classification on a server that speaks German: the same errors, the same codes.

The embedded PostgreSQL 18 is built without NLS (its ``pg_config.h`` leaves ``ENABLE_NLS``
undefined), so ``lc_messages`` changes nothing there. These tests therefore always use a server
with translations: ``RUNLEDGER_TRANSLATED_DATABASE_URL``, else ``DATABASE_URL``, else the
PostgreSQL 15 service CI keeps at 127.0.0.1:5432. They create a scratch database on it, migrate
the runledger app into it, and provoke each error twice in one session, under
``lc_messages = 'C'`` and ``'de_DE.UTF-8'``.

``SET lc_messages`` needs a superuser and the de_DE.UTF-8 locale on the server's machine
(``.ci/run`` generates it). Without them the tests skip, unless
``RUNLEDGER_REQUIRE_TRANSLATED_SERVER=1`` (set by CI) makes them fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import environ
import psycopg
import pytest
from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import ConnectionHandler
from pytest_django import DjangoDbBlocker

from runledger_django.db.classify import classify, driver_error

BASE_DIR = Path(__file__).resolve().parents[2]
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/postgres"
GERMAN = "de_DE.UTF-8"
JOB_TYPE = "jobs.test.translated"

Statement = tuple[str, list[Any]]


def _unavailable(reason: str) -> NoReturn:
    """Skip, unless CI demands these tests (RUNLEDGER_REQUIRE_TRANSLATED_SERVER=1): then fail."""
    if os.environ.get("RUNLEDGER_REQUIRE_TRANSLATED_SERVER") == "1":
        pytest.fail(f"{reason}, and RUNLEDGER_REQUIRE_TRANSLATED_SERVER=1 requires these tests")
    pytest.skip(f"{reason} (see the module docstring)")


def _server_url() -> str:
    return (
        os.environ.get("RUNLEDGER_TRANSLATED_DATABASE_URL")
        or os.environ.get("DATABASE_URL")
        or DEFAULT_URL
    )


def _psycopg_kwargs(config: dict[str, Any]) -> dict[str, Any]:
    kwargs = {
        "dbname": config.get("NAME"),
        "user": config.get("USER"),
        "password": config.get("PASSWORD"),
        "host": config.get("HOST"),
        "port": config.get("PORT"),
    }
    return {key: value for key, value in kwargs.items() if value}


def _probe_german(maintenance: psycopg.Connection[Any]) -> None:
    """Fail or skip unless this session can switch its messages to German."""
    try:
        maintenance.execute("SELECT set_config('lc_messages', %s, false)", [GERMAN])
    except psycopg.errors.InsufficientPrivilege:
        _unavailable("SET lc_messages needs a superuser on the translated server")
    except psycopg.errors.InvalidParameterValue:
        _unavailable(f"the {GERMAN} locale is missing on the translated server's machine")
    try:
        maintenance.execute("SELECT 1 / 0")
    except psycopg.errors.DivisionByZero as error:
        if error.diag.message_primary == "division by zero":
            _unavailable("the server has no message translations (built without NLS)")
    finally:
        maintenance.execute("RESET lc_messages")


def _migrate(url: str) -> None:
    """Migrate the runledger app into ``url``'s database with ``manage.py migrate`` (a process
    of its own: Django's migration machinery only works on the suite's configured aliases)."""
    result = subprocess.run(
        [sys.executable, "-m", "django", "migrate", "runledger", "--verbosity", "0"],
        cwd=BASE_DIR,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def translated(django_db_blocker: DjangoDbBlocker) -> Iterator[BaseDatabaseWrapper]:
    """A Django connection to a scratch database, migrated, on a server with translations."""
    url = _server_url()
    config = environ.Env.db_url_config(url)
    try:
        maintenance = psycopg.connect(**_psycopg_kwargs(config), autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        _unavailable(f"no translated server at {config.get('HOST')}:{config.get('PORT')}: {exc}")
    scratch = f"{os.environ.get('RUNLEDGER_TEST_DB', 'test_runledger')}_de"
    handler: ConnectionHandler | None = None
    with maintenance:
        _probe_german(maintenance)
        maintenance.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
        maintenance.execute(f'CREATE DATABASE "{scratch}"')
        try:
            _migrate(urlunsplit(urlsplit(url)._replace(path=f"/{scratch}")))
            with django_db_blocker.unblock():
                # A handler of its own, under an alias the suite does not know: nothing here
                # can reach the suite's databases, and they never see this one.
                handler = ConnectionHandler(
                    {
                        "default": {"ENGINE": "django.db.backends.dummy"},
                        "translated": {**config, "NAME": scratch},
                    }
                )
                conn = handler["translated"]
                conn.set_autocommit(False)
                yield conn
        finally:
            if handler is not None:
                handler.close_all()
            maintenance.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')


@dataclass(frozen=True)
class Provoked:
    english: DatabaseError
    german: DatabaseError


def provoke(conn: BaseDatabaseWrapper, setup: list[Statement], failing: Statement) -> Provoked:
    """Run ``setup`` then ``failing`` twice in rolled-back transactions, in English and German."""
    errors: dict[str, DatabaseError] = {}
    for language in ("C", GERMAN):
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT set_config('lc_messages', %s, true)", [language])
                for sql, params in setup:
                    cursor.execute(sql, params)
                with pytest.raises(DatabaseError) as info:
                    cursor.execute(*failing)
                errors[language] = info.value
        finally:
            conn.rollback()
    return Provoked(english=errors["C"], german=errors[GERMAN])


def message(error: DatabaseError) -> str:
    driver = driver_error(error)
    assert driver is not None
    return driver.diag.message_primary or ""


DEFINITION: Statement = (
    "INSERT INTO runledger_job_definitions (job_type, max_attempts) VALUES (%s, 3)",
    [JOB_TYPE],
)
JOB_ID = uuid.UUID("01890000-0000-7000-8000-000000000001")
JOB: Statement = (
    "INSERT INTO runledger_job_queue (id, job_type, max_attempts) VALUES (%s, %s, 3)",
    [JOB_ID, JOB_TYPE],
)


def promoted_intent(job_id: uuid.UUID) -> Statement:
    request: dict[str, Any] = {
        "payload": {},
        "priority": None,
        "max_attempts": None,
        "timeout_seconds": None,
        "next_run_at": None,
        "stage": "queued",
    }
    return (
        "INSERT INTO runledger_job_enqueue_intents (job_type, payload, idempotency_key, stage, "
        "enqueue_request, status, promotion_attempts, last_attempted_at, promoted_at, "
        "promoted_job_id) VALUES (%s, '{}'::jsonb, %s, 'queued', %s::jsonb, 'PROMOTED', 1, "
        "now(), now(), %s)",
        [JOB_TYPE, f"translated-{uuid.uuid4()}", json.dumps(request), job_id],
    )


CASES: dict[str, tuple[list[Statement], Statement, tuple[str, str, str]]] = {
    "job-without-definition": (
        [],
        JOB,
        ("job.definition_not_found", "23503", "fk_job_queue_job_type"),
    ),
    "delete-definition-in-use": (
        [DEFINITION, JOB],
        ("DELETE FROM runledger_job_definitions WHERE job_type = %s", [JOB_TYPE]),
        ("db.related_resource_still_referenced", "23503", "fk_job_queue_job_type"),
    ),
    "promoted-link-to-missing-job": (
        [],
        promoted_intent(uuid.uuid4()),
        ("db.related_resource_missing", "23503", "fk_job_enqueue_intents_promoted_job"),
    ),
    "delete-promoted-job": (
        [DEFINITION, JOB, promoted_intent(JOB_ID)],
        ("DELETE FROM runledger_job_queue WHERE id = %s", [JOB_ID]),
        ("db.related_resource_still_referenced", "23503", "fk_job_enqueue_intents_promoted_job"),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_classify__german_server_messages__same_code_as_english(
    translated: BaseDatabaseWrapper, case: str
) -> None:
    """Both sides of both RESTRICT keys raise 23503 before PostgreSQL 18; in German the
    classifier must still tell a missing parent from a parent still in use."""
    setup, failing, expected = CASES[case]
    provoked = provoke(translated, setup, failing)

    english, german = message(provoked.english), message(provoked.german)
    assert english.startswith(("insert or update on table", "update or delete on table"))
    assert german != english
    assert "verletzt Fremdschlüssel-Constraint" in german
    for error in (provoked.english, provoked.german):
        classified = classify(error, "translated operation")
        assert (classified.code, classified.sqlstate, classified.constraint) == expected


def test_unavailable__not_required__skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUNLEDGER_REQUIRE_TRANSLATED_SERVER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="locale is missing"):
        _unavailable("the locale is missing")


def test_unavailable__required_by_ci__fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNLEDGER_REQUIRE_TRANSLATED_SERVER", "1")
    with pytest.raises(pytest.fail.Exception, match="REQUIRE_TRANSLATED_SERVER=1 requires"):
        _unavailable("the locale is missing")
