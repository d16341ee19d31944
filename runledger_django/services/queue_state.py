"""The queue state per job type that Prometheus collectors read at scrape time."""

from __future__ import annotations

from typing import Any

from ..db import queue_state_queries
from ..db.transaction import run_capped
from ..domain import OTHER_JOB_TYPE_LABEL, JobTypeQueueState
from ..errors import Code, RunledgerError
from ..models.workers import STALE_BEATS
from ._lease import DEFAULT_USING

MAX_TYPE_LIMIT = 10_000
MAX_TIMEOUT_MS = 60_000


def read_queue_state(
    *,
    type_limit: int,
    timeout_ms: int,
    using: str = DEFAULT_USING,
) -> list[JobTypeQueueState]:
    """Return the queue gauges of every job type, ordered by job type label.

    Every definition is listed, with zeros when it has no jobs, so a drained queue reads 0
    instead of vanishing; so is a type with pending intents but no definition. Definitions past the first ``type_limit`` (in job type order) are
    folded into one ``other`` label. The statement reads only the live queue and the dead
    letters, each from its own index; ``timeout_ms`` caps both its lock wait and its run.

    Transaction: one read statement (its own implicit transaction, or a savepoint of the
    caller's atomic block).

    Raises:
        RunledgerError: ``job.invalid_argument`` before any SQL; a classified database error
            (including the statement or lock timeout).
    """
    if type(type_limit) is not int or not 1 <= type_limit <= MAX_TYPE_LIMIT:
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"type_limit must be an int from 1 to {MAX_TYPE_LIMIT}"
        )
    if type(timeout_ms) is not int or not 1 <= timeout_ms <= MAX_TIMEOUT_MS:
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"timeout_ms must be an int from 1 to {MAX_TIMEOUT_MS}"
        )
    rows = run_capped(
        using,
        queue_state_queries.QUEUE_STATE,
        {
            "type_limit": type_limit,
            "other_label": OTHER_JOB_TYPE_LABEL,
            "stale_beats": STALE_BEATS,
        },
        lock_ms=timeout_ms,
        statement_ms=timeout_ms,
        context="read the queue state for metrics",
    )
    return [_state(row) for row in rows]


def _state(row: tuple[Any, ...]) -> JobTypeQueueState:
    (
        label,
        definitions,
        enabled,
        due,
        scheduled,
        leased,
        lease_expired,
        dead_lettered,
        oldest_due_age,
        oldest_leased_age,
        intents_pending,
        intents_retrying,
        oldest_intent_age,
        workers_live,
        paused,
        max_concurrency,
        rate_per_second,
    ) = row
    single = int(definitions) == 1 and label != OTHER_JOB_TYPE_LABEL
    return JobTypeQueueState(
        job_type=label,
        definitions=int(definitions),
        due=int(due),
        scheduled=int(scheduled),
        leased=int(leased),
        lease_expired=int(lease_expired),
        dead_lettered=int(dead_lettered),
        oldest_due_age_seconds=max(0.0, float(oldest_due_age)),
        oldest_leased_age_seconds=max(0.0, float(oldest_leased_age)),
        enabled=bool(enabled) if single and enabled is not None else None,
        intents_pending=int(intents_pending),
        intents_retrying=int(intents_retrying),
        oldest_intent_age_seconds=max(0.0, float(oldest_intent_age)),
        workers_live=int(workers_live) if single else None,
        paused=bool(paused) if single and paused is not None else None,
        concurrency_limit=int(max_concurrency) if single and max_concurrency is not None else None,
        rate_limit_per_second=(
            float(rate_per_second) if single and rate_per_second is not None else None
        ),
    )
