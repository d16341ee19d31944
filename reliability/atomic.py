"""The harness's exactly-once part: an ``atomic=True`` handler that writes one effect row per
run inside its transaction, and the check that every SUCCEEDED job of its type kept exactly
one, the one of its successful attempt, whatever kills and restarts did to the others.

The handler follows the same plans as every other harness handler (sleeps longer than a lease,
progress writes, deliberate failures), and journals its runs in the handler-run table on a
connection of its own, committed at once, so a run the transaction lost still shows that it
started. Only the effect row is in the handler's transaction.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connection, connections

from runledger_django import JobContext, RetryJob, job_handler

from .common import ATOMIC, INSERT_HANDLER_RUN, MAX_ATTEMPTS, plan_for

EFFECTS_TABLE = "reliability_atomic_effects"

CREATE_EFFECTS = f"""
CREATE TABLE {EFFECTS_TABLE} (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id uuid NOT NULL,
    run_number integer NOT NULL,
    attempt integer NOT NULL,
    worker_id text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_INSERT_EFFECT = (
    f"INSERT INTO {EFFECTS_TABLE} (job_id, run_number, attempt, worker_id) "  # noqa: S608
    "VALUES (%s, %s, %s, %s)"
)
_EFFECTS_OF_SUCCEEDED = f"""
SELECT job.id::text, job.status, job.run_number, job.attempt,
       count(effect.id), min(effect.run_number), min(effect.attempt)
FROM runledger_job_queue job
LEFT JOIN {EFFECTS_TABLE} effect ON effect.job_id = job.id
WHERE job.job_type = %s
GROUP BY job.id
"""  # noqa: S608  (a constant table name)
_ORPHAN_EFFECTS = f"""
SELECT count(*) FROM {EFFECTS_TABLE} effect
WHERE NOT EXISTS (SELECT 1 FROM runledger_job_queue job WHERE job.id = effect.job_id)
"""  # noqa: S608

_journals = threading.local()


class DeliberateFailureError(Exception):
    """A plan's deliberate exception, raised inside the transaction (its effect rolls back)."""


def _journal(job: JobContext, phase: str, result: str | None = None) -> None:
    """One handler-run row, committed at once on this thread's journal connection (never in
    the handler's transaction); a connection a restart broke is replaced once."""
    values: list[Any] = [
        job.job_id,
        job.job_type,
        job.run_number,
        job.attempt,
        job.worker_id,
        os.getpid(),
        phase,
        result,
    ]
    for tries_left in (1, 0):
        side = getattr(_journals, "connection", None)
        if side is None:
            side = connections.create_connection("default")
            _journals.connection = side
        try:
            with side.cursor() as cursor:
                cursor.execute(INSERT_HANDLER_RUN, values)
            return
        except DatabaseError:
            side.close()
            _journals.connection = None
            if not tries_left:
                raise


@job_handler(ATOMIC, atomic=True, max_attempts=MAX_ATTEMPTS, timeout_seconds=600)
def run_atomic(job: JobContext) -> dict[str, Any]:
    """Run one attempt as its plan says, with its effect row in the completing transaction."""
    plan = plan_for(str(job.job_id), job.attempt)
    _journal(job, "started")
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_EFFECT, [job.job_id, job.run_number, job.attempt, job.worker_id])
    if plan.sleep:
        time.sleep(plan.sleep)
    if plan.writes:
        job.set_progress(1, 2)  # on the context's own connection: the row stays unlocked
    if plan.fail == "retry":
        _journal(job, "finished", "retry")
        raise RetryJob("deliberate retry", after=timedelta(seconds=plan.retry_after))
    if plan.fail == "raise":
        _journal(job, "finished", "raise")
        raise DeliberateFailureError(f"deliberate failure of attempt {job.attempt}")
    _journal(job, "finished", "success")
    return {"attempt": job.attempt, "worker_id": job.worker_id}


def check_effects() -> tuple[list[str], Counter[str]]:
    """Every SUCCEEDED atomic job has exactly one effect row, written by its successful
    attempt; no effect belongs to a job that does not exist."""
    violations: list[str] = []
    counts: Counter[str] = Counter()
    with connection.cursor() as cursor:
        cursor.execute(_EFFECTS_OF_SUCCEEDED, [ATOMIC])
        rows = cursor.fetchall()
        cursor.execute(_ORPHAN_EFFECTS)
        orphans = int(cursor.fetchone()[0])
    for job_id, status, run_number, attempt, effects, effect_run, effect_attempt in rows:
        counts["atomic jobs"] += 1
        counts["atomic effects"] += int(effects)
        if effects > 1:
            counts["atomic duplicate effects"] += int(effects) - 1
        if status != "SUCCEEDED":
            continue  # check_jobs reports it
        if effects != 1:
            violations.append(f"atomic job {job_id} SUCCEEDED with {effects} effect rows, not 1")
        elif (effect_run, effect_attempt) != (run_number, attempt):
            violations.append(
                f"atomic job {job_id}: its effect is of run {effect_run} attempt "
                f"{effect_attempt}, not of its successful attempt {run_number}/{attempt}"
            )
    if orphans:
        violations.append(f"{orphans} atomic effect rows belong to no job")
    counts["atomic duplicate effects"] += 0
    return violations, counts
