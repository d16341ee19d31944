"""What the harness and its child processes share: names, paths and append-only journals.

Standard library only: child processes import this before Django is set up.
"""

from __future__ import annotations

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
DATABASE_NAME = "runledger_reliability"

ALPHA = "reliability.alpha"
BETA = "reliability.beta"
STABLE = "reliability.stable"
"""Never retained and never disabled: deliberate conflicts target its keys."""
TOGGLED = "reliability.toggled"
"""Its definition is disabled and re-enabled all run long."""
DORMANT = "reliability.dormant"
"""Disabled until the final drain: a backlog that only the drain may promote."""
JOB_TYPES = (ALPHA, BETA, STABLE, TOGGLED, DORMANT)
RETAINED_TYPES = (ALPHA, BETA, TOGGLED)
ORGANIZATIONS = (
    None,
    "0198a5c4-3b6e-7c1a-8f00-000000000001",
    "0198a5c4-3b6e-7c1a-8f00-000000000002",
)

INTENT_CONFLICT = "job.intent_idempotency_conflict"
ENQUEUE_CONFLICT = "job.idempotency_conflict"


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
