"""Transaction mechanics: isolation checks, owned READ COMMITTED blocks, timeout caps, fences."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, connections, transaction
from django.db.backends.utils import CursorWrapper

from ..errors import Code, RunledgerError
from . import session_queries
from .classify import classify

READ_COMMITTED_LEVELS = frozenset({"read committed", "read uncommitted"})

LOCK_TIMEOUT = "lock_timeout"
STATEMENT_TIMEOUT = "statement_timeout"


def timeout_text(ms: int) -> str:
    """The setting text of a whole-millisecond timeout, e.g. ``"5000ms"``."""
    if type(ms) is not int or ms < 0:
        raise ValueError("timeouts are whole, non-negative milliseconds")
    return f"{ms}ms"


def server_version(using: str) -> int:
    connection = connections[using]
    connection.ensure_connection()
    return int(connection.pg_version)  # type: ignore[attr-defined]


def has_transaction_timeout(using: str) -> bool:
    """transaction_timeout exists from PostgreSQL 17 on."""
    return server_version(using) >= 170000


def isolation_level(cursor: CursorWrapper) -> str:
    cursor.execute(session_queries.SHOW_TRANSACTION_ISOLATION)
    row = cursor.fetchone()
    return str(row[0]).lower() if row else ""


def ensure_read_committed(cursor: CursorWrapper, *, operation: str, code: Code) -> None:
    """Refuse to go on in a stale-snapshot isolation level; only reads, so the transaction
    stays usable. Keyed paths need a second statement to see rows committed meanwhile."""
    level = isolation_level(cursor)
    if level not in READ_COMMITTED_LEVELS:
        raise RunledgerError.for_code(
            code, f"{operation} requires READ COMMITTED isolation; got {level}"
        )


@contextmanager
def owned_read_committed(using: str) -> Iterator[CursorWrapper]:
    """Own a READ COMMITTED transaction, whatever the connection's default isolation.

    Commits when the block succeeds, rolls back when it raises. Callers check first that they
    are not inside an atomic block: SET TRANSACTION must be the transaction's first statement.
    """
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(session_queries.SET_READ_COMMITTED)
        yield cursor


def cap_timeout(cursor: CursorWrapper, name: str, cap_ms: int) -> str:
    """Cap ``lock_timeout`` or ``statement_timeout`` for this transaction, keeping a stricter
    caller value. Returns the previous text for :func:`restore_setting`."""
    if name not in (LOCK_TIMEOUT, STATEMENT_TIMEOUT):
        raise ValueError(f"not a capped timeout: {name}")
    cursor.execute(
        session_queries.CAP_TIMEOUT,
        {"name": name, "cap_ms": cap_ms, "cap_text": timeout_text(cap_ms)},
    )
    row = cursor.fetchone()
    return str(row[0]) if row else ""


def cap_transaction_timeout(cursor: CursorWrapper, cap_ms: int) -> str:
    """Cap ``transaction_timeout`` (PostgreSQL 17+), re-arming a fresh deadline from now when
    the previous value was looser. Returns the previous text."""
    cursor.execute(
        session_queries.CAP_TRANSACTION_TIMEOUT,
        {"cap_ms": cap_ms, "cap_text": timeout_text(cap_ms)},
    )
    row = cursor.fetchone()
    return str(row[0]) if row else ""


def restore_setting(cursor: CursorWrapper, name: str, value: str) -> None:
    """Put a setting back to the exact text it had before a cap."""
    cursor.execute(session_queries.RESTORE_SETTING, {"name": name, "value": value})


def set_statement_timeout(cursor: CursorWrapper, ms: int) -> None:
    cursor.execute(session_queries.SET_LOCAL_STATEMENT_TIMEOUT, {"value": timeout_text(ms)})


def execute(
    cursor: CursorWrapper, sql: str, params: dict[str, Any] | None, *, context: str
) -> CursorWrapper:
    """Run one statement, turning a database error into a classified RunledgerError."""
    try:
        cursor.execute(sql, params)
    except DatabaseError as exc:
        connection = cursor.db
        if connection.in_atomic_block:
            # The server aborted the caller's transaction: make its atomic block roll back
            # instead of trying to commit (what transaction.mark_for_rollback_on_error does).
            connection.needs_rollback = True
        raise classify(exc, context) from exc
    return cursor


def uses_client_side_binding(using: str) -> bool:
    """Whether one execute() may carry several statements (psycopg's client-side cursors)."""
    options = connections[using].settings_dict.get("OPTIONS") or {}
    return not options.get("server_side_binding")


def run_capped(
    using: str,
    sql: str,
    params: dict[str, Any],
    *,
    lock_ms: int,
    statement_ms: int,
    context: str,
) -> list[tuple[Any, ...]]:
    """Run one statement with ``lock_timeout`` and ``statement_timeout`` capped (stricter values
    already in force are kept) and the planner pinned to index-driven plans; return its rows.

    Outside any transaction the caps and the statement go as one simple-protocol query, which
    PostgreSQL runs as one implicit transaction: one round trip, and the caps vanish with it.
    Inside the caller's atomic block (or with server-side binding, which allows one statement
    per execute) it runs in a savepoint and puts every setting back exactly afterwards.
    """
    return run_capped_together(
        using,
        (sql,),
        params,
        lock_ms=lock_ms,
        statement_ms=statement_ms,
        tag="",
        context=context,
    )[0]


@functools.lru_cache(maxsize=64)
def _with_caps(sql: str) -> str:
    """The caps and the statement as one query text, compacted once per statement: a text
    under 4 kB is parsed once by psycopg and cached, a longer one is split on every call.

    The statement's ``/* runledger:... */`` tag moves to the very front: pg_stat_activity
    keeps only the first kilobyte of a query, and that is where operators look for it.
    """
    body = sql.lstrip()
    tag = ""
    if body.startswith("/*"):
        end = body.index("*/") + 2
        tag, body = body[:end], body[end:]
    return compact_sql(f"{tag}\n{session_queries.CAP_LIFECYCLE_TIMEOUTS};\n{body}")


def compact_sql(sql: str) -> str:
    """Drop ``--`` comments and runs of white space outside string literals; block comments
    (the ``/* runledger:... */`` tags operators look for) stay."""
    out: list[str] = []
    i, n = 0, len(sql)
    in_literal = False
    while i < n:
        char = sql[i]
        if in_literal:
            out.append(char)
            if char == "'":
                in_literal = False
        elif char == "'":
            in_literal = True
            out.append(char)
        elif char == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
            continue
        elif char.isspace():
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(char)
        i += 1
    return "".join(out).strip()


_LAST_STATEMENT = "runledger_last_statement"


@contextmanager
def last_statement_of_transaction(using: str) -> Iterator[None]:
    """Within the block, a capped transition run inside the caller's transaction is that
    transaction's last statement before its COMMIT (an atomic job completion): it goes with
    its caps in one round trip, with no savepoint around it and no restore after it. A failure
    aborts the transaction, which the caller then rolls back whole; a success is followed by
    the commit, which ends the caps with the transaction."""
    connection = connections[using]
    setattr(connection, _LAST_STATEMENT, True)
    try:
        yield
    finally:
        setattr(connection, _LAST_STATEMENT, False)


def run_capped_together(
    using: str,
    statements: tuple[str, ...],
    params: dict[str, Any],
    *,
    lock_ms: int,
    statement_ms: int,
    tag: str,
    context: str,
) -> list[list[tuple[Any, ...]]]:
    """``run_capped`` for several statements in one transaction (one round trip outside a
    transaction): each statement's rows, in order. Any failure rolls all of them back."""
    caps = {
        "cap_lock_ms": lock_ms,
        "cap_lock_text": timeout_text(lock_ms),
        "cap_statement_ms": statement_ms,
        "cap_statement_text": timeout_text(statement_ms),
    }
    try:
        return _run_capped_each(using, statements, params, caps, context, tag=tag)
    except DatabaseError as exc:
        # Opening the connection (or a savepoint on a dead one) fails outside execute().
        raise classify(exc, context) from exc


def _run_capped_each(
    using: str,
    statements: tuple[str, ...],
    params: dict[str, Any],
    caps: dict[str, Any],
    context: str,
    *,
    tag: str,
) -> list[list[tuple[Any, ...]]]:
    connection = connections[using]
    results: list[list[tuple[Any, ...]]] = []
    last = getattr(connection, _LAST_STATEMENT, False) and connection.in_atomic_block
    if (
        last or (connection.get_autocommit() and not connection.in_atomic_block)
    ) and uses_client_side_binding(using):
        with connection.cursor() as cursor:
            execute(
                cursor,
                _with_caps(tag + ";\n".join(statements)),
                {**params, **caps},
                context=context,
            )
            for _ in statements:
                cursor.nextset()
                results.append(list(cursor.fetchall()) if cursor.description else [])
            return results
    with transaction.atomic(using=using), connection.cursor() as cursor:
        row = execute(
            cursor, session_queries.CAP_LIFECYCLE_TIMEOUTS, caps, context=context
        ).fetchone()
        assert row is not None  # noqa: S101  (the statement always returns one row)
        for sql in statements:
            rows = execute(cursor, sql, params, context=context)
            results.append(list(rows.fetchall()) if rows.description else [])
        for name, previous in zip(session_queries.CAPPED_SETTINGS, row, strict=False):
            restore_setting(cursor, name, str(previous))
        return results
