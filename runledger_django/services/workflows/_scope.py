"""The checks every run-level operation shares: the run id and read scope, READ COMMITTED."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import DatabaseError, connections, transaction

from ...db import workflow_queries
from ...db.classify import classify
from ...db.transaction import ensure_read_committed, execute, owned_read_committed
from ...domain import ReadScope, WorkflowRunStatus, coerce_uuid
from ...errors import Code, RunledgerError


def scope_params(run_id: object, scope: object) -> dict[str, Any]:
    """The run id and scope of a run operation, checked before any SQL."""
    if not isinstance(scope, ReadScope):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"scope must be a ReadScope, got {type(scope).__name__}"
        )
    checked: uuid.UUID = coerce_uuid(run_id, Code.WF_RUN_NOT_FOUND)
    return {
        "run_id": checked,
        "admin": scope.is_admin,
        "organization_id": scope.organization_id,
    }


def not_found(run_id: object) -> RunledgerError:
    return RunledgerError.for_code(Code.WF_RUN_NOT_FOUND, f"run {run_id} is not in the scope")


@contextmanager
def read_committed(using: str, *, operation: str, code: Code) -> Iterator[Any]:
    """Join the caller's READ COMMITTED transaction (in a savepoint), or own one; yield a
    cursor. Refuses another isolation before anything is written."""
    connection = connections[using]
    try:
        # Opening the transaction may connect: a server that is away gives a classified
        # error, as the statements inside do.
        if connection.in_atomic_block or not connection.get_autocommit():
            with transaction.atomic(using=using), connection.cursor() as cursor:
                ensure_read_committed(cursor, operation=operation, code=code)
                yield cursor
        else:
            with owned_read_committed(using) as cursor:
                yield cursor
    except DatabaseError as exc:
        raise classify(exc, operation) from exc


def run_status(cursor: Any, params: dict[str, Any]) -> WorkflowRunStatus:
    row = execute(
        cursor, workflow_queries.RUN_STATUS_IN_SCOPE, params, context="read workflow run"
    ).fetchone()
    if row is None:
        raise not_found(params["run_id"])
    return WorkflowRunStatus(row[0])
