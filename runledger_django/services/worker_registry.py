"""The worker registry: which workers run, what they serve, and whether they still beat.

A worker's supervisor loop calls ``beat_worker`` at start and every
``WORKER_HEARTBEAT_SECONDS`` (never a handler thread: a worker whose loop is blocked must go
stale), and ``remove_worker`` on a clean exit. Readers (the admin, the metrics collector,
``runledger_check``) judge liveness by the database clock against each row's own cadence.
"""

from __future__ import annotations

import json
import math
import os
import socket
from dataclasses import dataclass, field
from importlib import metadata

from ..db import worker_registry_queries as queries
from ..errors import Code, RunledgerError
from ..models.workers import STALE_BEATS
from ..validation import validate_job_types
from ._lease import DEFAULT_USING, transition, validate_worker_id

HOSTNAME_MAX_CHARS = 255


def _package_version() -> str:
    try:
        return metadata.version("runledger-django")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0+unknown"


VERSION = _package_version()
"""The runledger_django version this process runs (a worker's row shows it: deploy markers)."""


@dataclass(frozen=True)
class WorkerIdentity:
    """What a worker reports about itself in its row."""

    worker_id: str
    job_types: list[str]
    concurrency: int
    hostname: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    version: str = VERSION


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, f"{what} must be a number")
    if not (math.isfinite(value) and 0 < value <= 10 * 365 * 86_400):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"{what} must be a positive, finite number of seconds"
        )
    return float(value)


def _identity_params(identity: object) -> dict[str, object]:
    if not isinstance(identity, WorkerIdentity):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"expected a WorkerIdentity, got {type(identity).__name__}"
        )
    concurrency = identity.concurrency
    if type(concurrency) is not int or not 0 < concurrency <= 2**31 - 1:
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "concurrency must be a positive int")
    if type(identity.pid) is not int or not 0 <= identity.pid <= 2**31 - 1:
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "pid must be a non-negative int")
    texts = {"hostname": identity.hostname, "version": identity.version}
    for name, text in texts.items():
        if not isinstance(text, str) or "\x00" in text or len(text) > HOSTNAME_MAX_CHARS:
            raise RunledgerError.for_code(
                Code.INVALID_ARGUMENT,
                f"{name} must be text without NUL, at most {HOSTNAME_MAX_CHARS} characters",
            )
    return {
        "worker_id": validate_worker_id(identity.worker_id),
        "job_types": json.dumps(validate_job_types(identity.job_types)),
        "concurrency": concurrency,
        "hostname": identity.hostname,
        "pid": identity.pid,
        "version": identity.version,
    }


def beat_worker(
    identity: WorkerIdentity,
    *,
    heartbeat_seconds: float,
    retention_seconds: float,
    using: str = DEFAULT_USING,
) -> int:
    """Insert or refresh the worker's row, and delete rows silent past ``retention_seconds``.

    Transaction: one statement in its own implicit transaction, under the lifecycle lock cap.

    Returns:
        How many stale rows of other workers this beat deleted.

    Raises:
        RunledgerError: ``job.invalid_argument`` or ``job.invalid_job_type`` before any SQL;
            a classified database error.
    """
    params = _identity_params(identity)
    params["heartbeat_seconds"] = _seconds(heartbeat_seconds, "heartbeat_seconds")
    params["retention_seconds"] = _seconds(retention_seconds, "retention_seconds")
    rows = transition(using, queries.BEAT_WORKER, params, context="beat the worker registry")
    return int(rows[0][0]) if rows else 0


def remove_worker(worker_id: str, *, using: str = DEFAULT_USING) -> bool:
    """Delete the worker's row (a clean exit). Returns whether there was one.

    Transaction: one statement in its own implicit transaction.

    Raises:
        RunledgerError: ``job.invalid_argument`` before any SQL; a classified database error.
    """
    params = {"worker_id": validate_worker_id(worker_id)}
    return bool(
        transition(
            using,
            queries.DELETE_WORKER,
            params,
            context="remove the worker from the registry",
        )
    )


def live_workers_by_job_type(*, using: str = DEFAULT_USING) -> dict[str, int]:
    """How many live workers serve each job type (the ``runledger_workers_live`` gauge).

    Types no live worker serves are absent: the caller reports them as 0. A worker that
    missed ``STALE_BEATS`` beats of its own cadence (a SIGKILLed one) no longer counts.

    Transaction: one read in its own implicit transaction.

    Raises:
        RunledgerError: a classified database error.
    """
    rows = transition(
        using,
        queries.LIVE_WORKERS_BY_JOB_TYPE,
        {"stale_beats": STALE_BEATS},
        context="count live workers",
    )
    return {str(job_type): int(count) for job_type, count in rows}
