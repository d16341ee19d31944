"""What every job transition shares: the lock and time caps, lease checks, parameter shapes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.db import connections

from ..db.transaction import run_capped
from ..domain import JobLease, ReadScope, coerce_uuid
from ..errors import Code, RunledgerError
from ..validation import is_blank

DEFAULT_USING = "default"

LOCK_CAP_MS = 5_000
"""Row-lock waits of every job transition (reference 13: the lifecycle lock cap)."""
STATEMENT_CAP_MS = 30_000
"""The whole of one transition (reference 13: the heartbeat and progress transaction cap)."""

WORKER_ID_MAX_CHARS = 64
"""Django's Tasks API keeps worker ids to 64 characters; ours fit in a TaskResult too."""
LEASE_SECONDS_MAX = 86_400


def transition(
    using: str, sql: str, params: dict[str, Any], *, context: str
) -> list[tuple[Any, ...]]:
    """Run one job transition statement under the lifecycle caps (one round trip)."""
    return run_capped(
        using, sql, params, lock_ms=LOCK_CAP_MS, statement_ms=STATEMENT_CAP_MS, context=context
    )


def validate_worker_id(value: object) -> str:
    if (
        not isinstance(value, str)
        or is_blank(value)
        or len(value) > WORKER_ID_MAX_CHARS
        or "\x00" in value
    ):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT,
            f"worker_id must be 1 to {WORKER_ID_MAX_CHARS} non-blank characters",
        )
    return value


def validate_lease_seconds(value: object) -> int:
    if type(value) is not int or not 0 < value <= LEASE_SECONDS_MAX:
        raise RunledgerError.for_code(
            Code.INVALID_LEASE_DURATION,
            f"lease_seconds must be an int from 1 to {LEASE_SECONDS_MAX}",
        )
    return value


def validate_lease(lease: object) -> JobLease:
    if not isinstance(lease, JobLease):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"expected a JobLease, got {type(lease).__name__}"
        )
    validate_worker_id(lease.worker_id)
    return lease


def lease_params(lease: JobLease) -> dict[str, Any]:
    return {
        "job_id": lease.job_id,
        "run_number": lease.run_number,
        "attempt": lease.attempt,
        "worker_id": lease.worker_id,
    }


def leases_params(leases: Sequence[JobLease]) -> dict[str, Any]:
    """Parameters for a statement over many leases of one worker (arrays for unnest)."""
    checked = [validate_lease(lease) for lease in leases]
    worker_ids = {lease.worker_id for lease in checked}
    if len(worker_ids) > 1:
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, "a batch of leases must belong to one worker"
        )
    return {
        "job_ids": [lease.job_id for lease in checked],
        "run_numbers": [lease.run_number for lease in checked],
        "attempts": [lease.attempt for lease in checked],
        "worker_id": worker_ids.pop() if worker_ids else "",
    }


def lease_mismatch(lease: JobLease) -> RunledgerError:
    return RunledgerError.for_code(
        Code.LEASE_OWNER_MISMATCH,
        f"job {lease.job_id} run {lease.run_number} attempt {lease.attempt} is not leased "
        "to this worker",
    )


def scope_params(job_id: object, scope: object) -> dict[str, Any]:
    """The job id and scope of an operator action, checked before any SQL."""
    if not isinstance(scope, ReadScope):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"scope must be a ReadScope, got {type(scope).__name__}"
        )
    checked: uuid.UUID = coerce_uuid(job_id, Code.INVALID_ARGUMENT)
    return {
        "job_id": checked,
        "admin": scope.is_admin,
        "organization_id": scope.organization_id,
    }


def refuse_inside_atomic(using: str, operation: str) -> None:
    """Running jobs takes many short transactions of its own, never the caller's."""
    connection = connections[using]
    if connection.in_atomic_block or not connection.get_autocommit():
        raise RunledgerError.for_code(
            Code.WORKER_REQUIRES_OWN_TRANSACTION, f"{operation} was called inside an atomic block"
        )
