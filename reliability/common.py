"""What the harness and its child processes share: names, paths, journals and job plans.

Standard library only: child processes import this before Django is set up, and the job
checks recompute every handler's plan from it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SETTINGS_MODULE = "reliability.settings"
DATABASE_ENV = "RUNLEDGER_RELIABILITY_DATABASE"
"""JSON of the Django DATABASES entry the harness hands its children."""
LOG_ENV = "RUNLEDGER_RELIABILITY_LOG"
"""File that takes the runledger_django log records of every process of a run."""
NAME_ENV = "RUNLEDGER_RELIABILITY_NAME"
"""The process's name in the run (``worker-3``); its sessions carry it as application_name."""
CONCURRENCY_ENV = "RUNLEDGER_RELIABILITY_CONCURRENCY"
"""``runledger_worker --concurrency`` of the run's worker processes."""
PAUSE_ENV = "RUNLEDGER_RELIABILITY_RECORDER_PAUSE"
"""Mean seconds a recorder rests between operations, so the workers keep up with it."""
APPLICATION_PREFIX = "reliability:"
HARNESS_NAME = "harness"
DATABASE_NAME = "runledger_reliability"

ALPHA = "reliability.alpha"
BETA = "reliability.beta"
STABLE = "reliability.stable"
"""Never retained and never disabled: deliberate conflicts target its keys."""
TOGGLED = "reliability.toggled"
"""Its definition is disabled and re-enabled all run long."""
DORMANT = "reliability.dormant"
"""Disabled until the final drain: a backlog that only the drain may promote."""
ATOMIC = "reliability.atomic"
"""Run by an ``atomic=True`` handler whose effect row commits with its success (atomic.py)."""
JOB_TYPES = (ALPHA, BETA, STABLE, TOGGLED, DORMANT, ATOMIC)
RETAINED_TYPES = (ALPHA, BETA, TOGGLED)
ORGANIZATIONS = (
    None,
    "0198a5c4-3b6e-7c1a-8f00-000000000001",
    "0198a5c4-3b6e-7c1a-8f00-000000000002",
)

INTENT_CONFLICT = "job.intent_idempotency_conflict"
ENQUEUE_CONFLICT = "job.idempotency_conflict"

LEASE_SECONDS = 3
"""Short leases, so a SIGKILLed worker's jobs come back within seconds."""
REAPER_INTERVAL_SECONDS = 1
WORKER_GRACE_SECONDS = 1
"""Short, so a SIGTERMed worker hands its slow handlers' jobs back."""
MAX_ATTEMPTS = 30
"""Every job's budget: far above what kills and deliberate failures can spend, so each job
must end SUCCEEDED."""
OVERDUE_SECONDS = REAPER_INTERVAL_SECONDS + 5
"""A lease expired longer ago than this and still LEASED means the reapers are not reaping."""
HANDLER_RUNS_TABLE = "reliability_handler_runs"
"""The harness's own table: one row when a handler starts, one when it finishes."""
INSERT_HANDLER_RUN = (
    f"INSERT INTO {HANDLER_RUNS_TABLE} "  # noqa: S608  (a constant table name)
    "(job_id, job_type, run_number, attempt, worker_id, pid, phase, result) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
"""One handler-run row (the plain handlers' and the atomic one's)."""


@dataclass(frozen=True)
class AttemptPlan:
    """What the harness's handler does on one attempt of one job (derived from the job id, so
    the checks know which failures were deliberate)."""

    fail: str | None
    """``retry`` (raise RetryJob), ``raise`` (raise an ordinary exception), or None."""
    retry_after: float
    """RetryJob(after=...) in seconds, when ``fail`` is ``retry``."""
    sleep: float
    """Seconds the handler sleeps, some longer than a lease (heartbeats must keep it)."""
    writes: bool
    """Whether it writes progress and a checkpoint through the lease fence."""


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def plan_for(job_id: str, attempt: int) -> AttemptPlan:
    """The plan of ``attempt`` of job ``job_id``: 15 % of jobs retry through RetryJob on their
    first one to three attempts, 4 % raise on their first attempt (policy backoff, about 10 s);
    about 1 % of attempts outlast a lease, 10 % take up to 0.3 s, 20 % write progress."""
    job = _digest(job_id)
    selector = job % 1000
    fail: str | None = None
    failures = 0
    if selector < 150:
        fail, failures = "retry", 1 + (job >> 10) % 3
    elif selector < 190:
        fail, failures = "raise", 1
    one = _digest(f"{job_id}/{attempt}")
    pace = one % 1000
    if pace < 10:
        sleep = LEASE_SECONDS + 0.5 + (one >> 10) % 700 / 1000
    elif pace < 110:
        sleep = 0.02 + (one >> 10) % 280 / 1000
    else:
        sleep = 0.0
    return AttemptPlan(
        fail=fail if attempt <= failures else None,
        retry_after=0.1 + (job >> 20) % 900 / 1000,
        sleep=sleep,
        writes=(one >> 30) % 5 == 0,
    )


@dataclass(frozen=True)
class RunPaths:
    """The files of one run inside its directory."""

    root: Path

    @property
    def pgdata(self) -> Path:
        return self.root / "pgdata"

    @property
    def journals(self) -> Path:
        return self.root / "journals"

    @property
    def stop_file(self) -> Path:
        """Its existence tells every child to finish the operation in hand and exit."""
        return self.root / "stop"

    @property
    def log_file(self) -> Path:
        return self.root / "runledger.log"

    def ready_file(self, name: str) -> Path:
        return self.journals / f"{name}.ready"

    def journal(self, name: str) -> Path:
        return self.journals / f"{name}.jsonl"

    def stacks_file(self, name: str) -> Path:
        """Where a child dumps its threads' stacks on SIGUSR1."""
        return self.journals / f"{name}.stacks"


class Journal:
    """An append-only JSON-lines file; one ``write`` per record, so a killed writer can at
    most lose or tear its last line. ``durable`` fsyncs every record: a recorder's journal
    is the evidence of what committed."""

    def __init__(self, path: Path, *, durable: bool) -> None:
        self.durable = durable
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"k": kind, **fields}, separators=(",", ":"), default=str) + "\n"
        os.write(self._fd, line.encode())
        if self.durable:
            os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a journal; a torn last line (a SIGKILLed writer) is skipped."""
    records: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.endswith("\n"):
                break
            records.append(json.loads(line))
    return records
