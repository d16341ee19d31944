"""Periodic schedules: the service functions the worker, commands, admin and API call.

Modules: ``spec`` (input rules), ``timing`` (cron, DST, jitter, catch-up), ``passes`` (the
scheduler pass), ``writes`` (runtime changes), ``sync`` (declared schedules), ``reads``,
``backfill`` (backfill and ledger retention).
"""

from __future__ import annotations

from .backfill import backfill_schedule, prune_schedule_fires
from .passes import next_due_at, run_schedule_pass
from .reads import (
    describe,
    get_schedule,
    list_schedules,
    next_fires,
    schedule_metrics,
    schedule_overview,
    schedule_summary,
)
from .spec import build_spec
from .sync import sync_declared_schedules
from .writes import (
    delete_schedule,
    pause_schedule,
    resume_schedule,
    retime_schedule,
    save_schedule,
    trigger_schedule,
)

__all__ = [
    "backfill_schedule",
    "build_spec",
    "delete_schedule",
    "describe",
    "get_schedule",
    "list_schedules",
    "next_due_at",
    "next_fires",
    "pause_schedule",
    "prune_schedule_fires",
    "resume_schedule",
    "retime_schedule",
    "run_schedule_pass",
    "save_schedule",
    "schedule_metrics",
    "schedule_overview",
    "schedule_summary",
    "sync_declared_schedules",
    "trigger_schedule",
]
