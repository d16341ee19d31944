"""The single place where database errors become RunledgerError (reference 7.1)."""

from __future__ import annotations

import re

import psycopg
from django.db import DatabaseError

from ..domain import (
    FK_JOB_QUEUE_JOB_TYPE,
    FK_SCHEDULE_JOB_TYPE,
    GUARD_DEFINITION_ACTIVE_SCHEDULE,
    UQ_JOB_QUEUE_GLOBAL,
    UQ_JOB_QUEUE_ORG,
)
from ..errors import Code, RunledgerError

_BY_CONSTRAINT: dict[str, Code] = {
    UQ_JOB_QUEUE_ORG: Code.ALREADY_ENQUEUED,
    UQ_JOB_QUEUE_GLOBAL: Code.ALREADY_ENQUEUED,
    FK_JOB_QUEUE_JOB_TYPE: Code.DEFINITION_NOT_FOUND,
    GUARD_DEFINITION_ACTIVE_SCHEDULE: Code.DEFINITION_ACTIVE_SCHEDULE_EXISTS,
    FK_SCHEDULE_JOB_TYPE: Code.SCHEDULE_DEFINITION_NOT_FOUND_OR_DISABLED,
}

_BY_SQLSTATE: dict[str, Code] = {
    "23505": Code.DB_UNIQUE_VIOLATION,
    "23503": Code.DB_RELATED_RESOURCE_MISSING,
    "23001": Code.DB_RELATED_RESOURCE_STILL_REFERENCED,
    "23514": Code.DB_BUSINESS_RULE_VIOLATION,
    "23502": Code.DB_REQUIRED_FIELD_MISSING,
    "42501": Code.DB_PERMISSION_DENIED,
}

# The tables other rows point at (migrations 0002, 0004 and 0010: every foreign key into the schema
# references one of these, whatever the key is called). Only a statement that deletes or
# re-keys one of them can be refused for rows still pointing at it.
REFERENCED_TABLES = (
    "runledger_job_definitions",
    "runledger_job_queue",
    "runledger_job_schedules",
    "runledger_workflow_runs",
    "runledger_workflow_steps",
)

# SQLSTATEs after which the session or its transaction cannot go on: promotion must abort the
# pass rather than defer one row (connection exceptions, shutdown, transaction_timeout).
FATAL_SQLSTATE_PREFIXES = ("08", "57P", "25P04", "53", "58")


def driver_error(exc: BaseException) -> psycopg.Error | None:
    """The psycopg error behind a Django DatabaseError, if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, psycopg.Error):
            return seen
        seen = seen.__cause__
    return None


def sqlstate_of(exc: BaseException) -> str | None:
    error = driver_error(exc)
    return error.sqlstate if error is not None else None


def classify(exc: DatabaseError, context: str) -> RunledgerError:
    """Turn a database error into a RunledgerError; raise it ``from exc`` to keep the source.

    Decided by SQLSTATE, constraint and table, never by the wording of the server's message,
    which follows ``lc_messages``. A foreign key that restricts deletion reports 23001 on
    PostgreSQL 18 and 23503 before it; see ``_still_referenced`` for how 23503 is split.
    """
    error = driver_error(exc)
    sqlstate = error.sqlstate if error is not None else None
    constraint = error.diag.constraint_name if error is not None else None
    code: Code | None
    if _still_referenced(error):
        # Checked before the constraint names: a foreign key's name does not say which side
        # failed, and deleting a used definition is not a missing definition.
        code = Code.DB_RELATED_RESOURCE_STILL_REFERENCED
    else:
        code = _BY_CONSTRAINT.get(constraint or "")
    if code is None:
        code = _BY_SQLSTATE.get(sqlstate or "", Code.DB_QUERY_FAILED)
    detail = error.diag.message_primary if error is not None else None
    return RunledgerError.for_code(
        code,
        f"{context}: {detail or type(exc).__name__}",
        sqlstate=sqlstate,
        constraint=constraint,
    )


def _still_referenced(error: psycopg.Error | None) -> bool:
    """A delete or key update refused because other rows still point at the row."""
    if error is None:
        return False
    if error.sqlstate == "23001":
        return True
    if error.sqlstate != "23503":
        return False
    # NOTE: before PostgreSQL 18 (and for NO ACTION keys on 18) both sides of a foreign key
    # raise 23503, and every structured field is the same for both: PostgreSQL reports the
    # referencing table and the key's name whether an insert missed its parent or a delete hit
    # a parent still in use (ri_triggers.c, errtableconstraint(fk_rel, ...) in both branches).
    # What differs is which tables the primary message names: the referenced table only when
    # the statement acted on it. Table names are arguments of the message and no translation
    # may drop an argument, so this holds in every lc_messages; the words are never read.
    referencing = error.diag.table_name
    constraint = error.diag.constraint_name
    message = error.diag.message_primary or ""
    for parent in REFERENCED_TABLES:
        # The referencing side's message names only the referencing table and the key.
        expected = (parent == referencing) + (parent == constraint)
        if _mentions(message, parent) > expected:
            return True
    return False


def _mentions(message: str, identifier: str) -> int:
    """How often ``identifier`` stands in ``message`` as a whole name (not inside another)."""
    return len(re.findall(rf"(?<![\w$]){re.escape(identifier)}(?![\w$])", message))


def is_session_fatal(exc: BaseException) -> bool:
    """True when the error leaves no usable session (or transaction) to carry on in."""
    error = driver_error(exc)
    if error is None:
        return True
    sqlstate = error.sqlstate
    if sqlstate is None:
        return True  # client-side: closed connection, protocol failure
    return sqlstate.startswith(FATAL_SQLSTATE_PREFIXES)
