"""Running a write in a transaction the library owns, with an honest commit outcome."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from django.db import DatabaseError, connections, transaction
from django.db.backends.utils import CursorWrapper

from ..db.classify import classify, is_session_fatal
from ..db.transaction import owned_read_committed
from ..errors import Code, RunledgerError

T = TypeVar("T")


def commit_unconfirmed(operation: str, exc: BaseException) -> RunledgerError:
    """The server may or may not have committed: the caller must look before retrying blindly
    (an identical retry of a keyed write is always safe)."""
    error = RunledgerError.for_code(
        Code.DB_TRANSACTION_COMMIT_UNCONFIRMED,
        f"commit {operation} transaction: outcome unknown",
    )
    error.__cause__ = exc
    return error


def in_owned_transaction(using: str, body: Callable[[CursorWrapper], T], *, operation: str) -> T:
    """Run ``body`` in an owned READ COMMITTED transaction; commit on success."""
    body_done = False
    try:
        with owned_read_committed(using) as cursor:
            result = body(cursor)
            body_done = True
    except DatabaseError as exc:
        if body_done:
            raise commit_unconfirmed(operation, exc) from exc
        raise classify(exc, operation) from exc
    return result


@contextmanager
def owned_atomic(using: str, *, operation: str) -> Iterator[None]:
    """``transaction.atomic`` for a transaction the library owns, whose own statements raise
    classified errors as the statements inside it do: opening it may connect (a server that is
    restarting), and a failed COMMIT has an unknown outcome."""
    body_done = False
    try:
        with transaction.atomic(using=using):
            yield
            body_done = True
    except DatabaseError as exc:
        if body_done:
            raise commit_unconfirmed(operation, exc) from exc
        raise classify(exc, operation) from exc


def run_owned(
    using: str,
    single_statement: Callable[[CursorWrapper], T | None],
    body: Callable[[CursorWrapper], T],
    *,
    operation: str,
) -> T:
    """Try the one-statement autocommit path, then fall back to an owned transaction.

    In autocommit mode one statement is its own READ COMMITTED-or-stricter transaction; it
    returns None when it could not finish alone (an existing key to resolve, or a session
    default stricter than READ COMMITTED, which the statement refuses to write under).
    """
    connection = connections[using]
    if connection.get_autocommit():
        with connection.cursor() as cursor:
            try:
                result = single_statement(cursor)
            except RunledgerError as error:
                cause = error.__cause__
                if cause is not None and is_session_fatal(cause) and error.sqlstate is None:
                    # The statement was sent; whether it committed is unknown.
                    raise commit_unconfirmed(operation, cause) from cause
                raise
        if result is not None:
            return result
    return in_owned_transaction(using, body, operation=operation)


def join_or_own(
    using: str,
    in_caller: Callable[[CursorWrapper], T],
    single_statement: Callable[[CursorWrapper], T | None],
    in_owned: Callable[[CursorWrapper], T],
    *,
    operation: str,
) -> T:
    """Join the caller's transaction when there is one, else own one (``run_owned``).

    With autocommit off (an atomic block, or Django's manual transaction management) the caller
    owns the transaction: ``in_caller`` runs in it and nothing here commits.
    """
    connection = connections[using]
    if connection.in_atomic_block or not connection.get_autocommit():
        with connection.cursor() as cursor:
            return in_caller(cursor)
    return run_owned(using, single_statement, in_owned, operation=operation)
