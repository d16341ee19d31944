"""Finishing steps and propagating (reference 3.3): the hook the job lifecycle calls, inside
the transaction of a workflow job's terminal write, and the propagation that external
completions and recoveries share.

Everything here requires the caller's transaction: the dependents' release commits with the
prerequisite's SUCCEEDED (or FAILED, CANCELED), so a crash never loses or doubles a release.
A plain job never gets here: the lifecycle calls in only when its statement returned a
workflow step id.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction

from ...db import workflow_queries
from ...db.transaction import (
    LOCK_TIMEOUT,
    cap_timeout,
    ensure_read_committed,
    execute,
    last_statement_of_transaction,
    restore_setting,
    run_capped_together,
)
from ...domain import JobStatus, ReadScope, WorkflowRunStatus, WorkflowStepStatus
from ...errors import Code, RunledgerError
from .._owned import owned_atomic
from ..wakeup import JOBS_CHANNEL, wake_after_commit

logger = logging.getLogger(__name__)

STATEMENT_CAP_MS = 30_000
RELEASE_LOCK_CAP_MS = 5_000
"""How long a completion waits for the run's release lock while a cancellation holds it
(reference 3.3 step 4); a stricter lock_timeout of the caller is kept."""
LOCK_NOT_AVAILABLE = "55P03"
_LOCK_NAMESPACE = 0x7275_6E6C_0000_0000

JOB_OUTCOMES = {
    JobStatus.SUCCEEDED.value: WorkflowStepStatus.SUCCEEDED.value,
    JobStatus.DEAD_LETTERED.value: WorkflowStepStatus.FAILED.value,
    JobStatus.CANCELED.value: WorkflowStepStatus.CANCELED.value,
}
"""A workflow job's terminal status and the step outcome it means (reference 2.2)."""


_CHECKED_SESSION = "runledger_workflow_read_committed_session"


def ensure_session_read_committed(using: str) -> None:
    """A workflow job's terminal write in a transaction this package owns: its isolation is
    the connection's default, read once per database session.

    Raises:
        RunledgerError: ``workflow.terminal_completion_unsupported_isolation``.
    """
    connection = connections[using]
    session = connection.connection
    if session is not None and getattr(connection, _CHECKED_SESSION, None) is session:
        return
    with connection.cursor() as cursor:
        ensure_read_committed(
            cursor,
            operation="a workflow job's completion",
            code=Code.WF_TERMINAL_COMPLETION_UNSUPPORTED_ISOLATION,
        )
    setattr(connection, _CHECKED_SESSION, connection.connection)


def run_lock_key(run_id: uuid.UUID) -> int:
    """The run's advisory key: its UUID folded to 64 bits (high half XOR low half) XOR a
    namespace, as a signed bigint (reference 3.13)."""
    value = run_id.int
    folded = ((value >> 64) ^ (value & (2**64 - 1))) ^ _LOCK_NAMESPACE
    return folded - 2**64 if folded >= 2**63 else folded


@dataclass(slots=True)
class RunDelta:
    """What one transaction did to a run's step counters."""

    succeeded: int = 0
    failed: int = 0
    canceled: int = 0
    waiting: int = 0
    total: int = 0
    """Steps appended."""
    released_jobs: int = 0
    finished: list[tuple[uuid.UUID, str]] = field(default_factory=list)
    """(step id, outcome) pairs whose dependents still have to be told."""
    decide: list[uuid.UUID] = field(default_factory=list)
    """Blocked steps with nothing left to wait for, to release or cancel (appended ones)."""

    def count(self, outcome: str) -> None:
        if outcome == WorkflowStepStatus.SUCCEEDED:
            self.succeeded += 1
        elif outcome == WorkflowStepStatus.FAILED:
            self.failed += 1
        else:
            self.canceled += 1


@dataclass(frozen=True, slots=True)
class RunTransition:
    previous: WorkflowRunStatus
    status: WorkflowRunStatus
    fail_fast: bool


def on_jobs_terminal(
    finished: Iterable[tuple[uuid.UUID, str]], *, using: str
) -> dict[uuid.UUID, RunTransition]:
    """Finish the steps of workflow jobs that just reached a terminal job status, then release
    or cancel their dependents and move their runs' counters.

    ``finished`` holds (workflow step id, job status) pairs. A step that is already terminal
    (its run was canceled while the job ran) is left alone.

    Transaction: requires the caller's atomic block (the job's terminal write), READ
    COMMITTED (the lifecycle checks it).

    Raises:
        RunledgerError: ``workflow.release_conflict`` (a cancellation held the run's release
            lock for 5 s; the caller rolls back and the job stays LEASED);
            ``workflow.internal_state`` (an edge leaves its run: nothing may commit).
    """
    pairs = [(step_id, JOB_OUTCOMES[status]) for step_id, status in finished]
    if not pairs:
        return {}
    connection = connections[using]
    with connection.cursor() as cursor:
        rows = execute(
            cursor,
            workflow_queries.FINISH_JOB_STEPS,
            {
                "step_ids": [step_id for step_id, _ in pairs],
                "outcomes": [outcome for _, outcome in pairs],
            },
            context="finish workflow steps",
        ).fetchall()
        deltas: dict[uuid.UUID, RunDelta] = defaultdict(RunDelta)
        for step_id, run_id, status in rows:
            delta = deltas[run_id]
            delta.count(status)
            delta.finished.append((step_id, status))
        return propagate_runs(cursor, deltas, using=using)


def complete_with_release(
    using: str,
    sql: str,
    params: dict[str, Any],
    job_ids: list[uuid.UUID],
    *,
    context: str,
) -> list[tuple[Any, ...]]:
    """A worker's terminal write of workflow jobs and their steps' propagation, in a
    transaction this function owns: the terminal statement, the steps' finish and the runs'
    release locks go in one round trip (under the lifecycle caps, which then hold for the
    rest of the transaction), the propagation and the run counters follow. Returns the
    terminal statement's rows.

    Transaction: owns one (the caller checked it is outside any).

    Raises:
        RunledgerError: as ``on_jobs_terminal``; the terminal statement's errors.
    """
    with owned_atomic(using, operation=context):
        ensure_session_read_committed(using)
        try:
            with last_statement_of_transaction(using):
                rows, finished = run_capped_together(
                    using,
                    (sql, workflow_queries.FINISH_JOBS_AND_LOCK_RUNS),
                    {**params, "workflow": True, "finish_job_ids": job_ids},
                    lock_ms=RELEASE_LOCK_CAP_MS,
                    statement_ms=STATEMENT_CAP_MS,
                    tag="",
                    context=context,
                )
        except RunledgerError as error:
            if error.sqlstate == LOCK_NOT_AVAILABLE:
                raise RunledgerError.for_code(
                    Code.WF_RELEASE_CONFLICT,
                    "a run of these jobs is being canceled; its release lock was not granted",
                    sqlstate=LOCK_NOT_AVAILABLE,
                ) from error
            raise
        deltas: dict[uuid.UUID, RunDelta] = defaultdict(RunDelta)
        for step_id, run_id, status, _ in finished:
            delta = deltas[run_id]
            delta.count(status)
            delta.finished.append((step_id, status))
        if deltas:
            with connections[using].cursor() as cursor:
                propagate_runs(cursor, deltas, using=using, lock_held=True, capped=True)
    return rows


def propagate_runs(
    cursor: Any,
    deltas: dict[uuid.UUID, RunDelta],
    *,
    using: str,
    lock_held: bool = False,
    capped: bool = False,
) -> dict[uuid.UUID, RunTransition]:
    """Propagate each run's finished steps and apply its counters, runs in id order.

    ``lock_held``: the caller already holds the runs' release locks. ``capped``: this
    transaction's lock_timeout is already capped (the worker's own transaction).
    """
    transitions: dict[uuid.UUID, RunTransition] = {}
    if not deltas:
        return transitions
    if capped:
        _propagate_all(cursor, deltas, transitions, using=using, lock_held=lock_held, fused=True)
        return transitions
    previous = cap_timeout(cursor, LOCK_TIMEOUT, RELEASE_LOCK_CAP_MS)
    try:
        _propagate_all(cursor, deltas, transitions, using=using, lock_held=lock_held, fused=False)
    finally:
        if not connections[using].needs_rollback:
            restore_setting(cursor, LOCK_TIMEOUT, previous)
    return transitions


def _propagate_all(
    cursor: Any,
    deltas: dict[uuid.UUID, RunDelta],
    transitions: dict[uuid.UUID, RunTransition],
    *,
    using: str,
    lock_held: bool,
    fused: bool,
) -> None:
    for run_id in sorted(deltas):
        delta = deltas[run_id]
        if not lock_held:
            _lock_run_shared(cursor, run_id)
        transition = _propagate(cursor, run_id, delta, using=using, fused=fused)
        transitions[run_id] = transition
        if transition.fail_fast and delta.failed and not transition.status.is_terminal:
            _cancel_after_commit(run_id, using)
    if any(delta.released_jobs for delta in deltas.values()):
        wake_after_commit(using, JOBS_CHANNEL)


def _cancel_after_commit(run_id: uuid.UUID, using: str) -> None:
    """fail_fast: the first failure cancels the rest of the run. Nothing more is released
    from this commit on (propagation cancels what becomes ready); the jobs already enqueued
    are canceled, and running handlers fenced, by a run cancel right after the commit, with
    the cancel's own lock order (taking other job rows here could deadlock with their
    completions)."""
    from .cancel import cancel_workflow

    def cancel() -> None:
        try:
            cancel_workflow(run_id, scope=ReadScope.ADMIN, using=using)
        except RunledgerError as error:
            # Not lost: nothing more is released, and the run still ends terminal.
            logger.warning(
                "fail_fast could not cancel a workflow run run_id=%s error_code=%s",
                run_id,
                error.code,
            )

    transaction.on_commit(cancel, using=using)


def _lock_run_shared(cursor: Any, run_id: uuid.UUID) -> None:
    try:
        execute(
            cursor,
            workflow_queries.LOCK_RUN_SHARED,
            {"lock_key": run_lock_key(run_id)},
            context="lock workflow run for release",
        )
    except RunledgerError as error:
        if error.sqlstate == LOCK_NOT_AVAILABLE:
            raise RunledgerError.for_code(
                Code.WF_RELEASE_CONFLICT,
                f"run {run_id} is being canceled; its release lock was not granted",
                sqlstate=LOCK_NOT_AVAILABLE,
            ) from error
        raise


def _propagate(
    cursor: Any, run_id: uuid.UUID, delta: RunDelta, *, using: str, fused: bool
) -> RunTransition:
    """Breadth-first: each level releases or cancels the dependents that became ready; the
    canceled ones are the next level's finished steps (reference 3.3 step 5). PROPAGATE
    counts what it started waiting or canceled on the run; the run's transition adds the
    finished steps. ``fused``: in the worker's own transaction (already capped), each level
    and the run's transition go in one round trip."""
    level: Sequence[tuple[uuid.UUID, str]] = delta.finished
    counters = RunDelta(
        succeeded=delta.succeeded,
        failed=delta.failed,
        canceled=delta.canceled,
        waiting=delta.waiting,
        total=delta.total,
    )
    transition: RunTransition | None = None
    direct = list(delta.decide)
    while level or direct:
        params = {
            "run_id": run_id,
            "step_ids": [step_id for step_id, _ in level],
            "outcomes": [outcome for _, outcome in level],
            "failing": delta.failed > 0,
            "direct_ids": direct,
        }
        if fused:
            with last_statement_of_transaction(using):
                rows, moved = run_capped_together(
                    using,
                    (workflow_queries.PROPAGATE, workflow_queries.RUN_TRANSITION),
                    {**params, **_counter_params(run_id, counters)},
                    lock_ms=RELEASE_LOCK_CAP_MS,
                    statement_ms=STATEMENT_CAP_MS,
                    tag="",
                    context="propagate workflow steps",
                )
            transition = _transition(run_id, moved[0] if moved else None)
            counters = RunDelta()
        else:
            rows = execute(
                cursor, workflow_queries.PROPAGATE, params, context="propagate workflow steps"
            ).fetchall()
        if any(row[2] for row in rows):
            raise RunledgerError.for_code(
                Code.WF_INTERNAL_STATE, f"an edge of run {run_id} leads to another run"
            )
        level, direct = [], []
        for step_id, next_status, _ in rows:
            if next_status == WorkflowStepStatus.ENQUEUED:
                delta.released_jobs += 1
            elif next_status == WorkflowStepStatus.CANCELED:
                level.append((step_id, WorkflowStepStatus.CANCELED.value))
    delta.finished = []
    delta.decide = []
    if transition is None:
        transition = apply_run_delta(cursor, run_id, counters)
    return transition


def _counter_params(run_id: uuid.UUID, delta: RunDelta, *, cancel: bool = False) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "d_succeeded": delta.succeeded,
        "d_failed": delta.failed,
        "d_canceled": delta.canceled,
        "d_waiting": delta.waiting,
        "d_total": delta.total,
        "cancel": cancel,
    }


def apply_run_delta(
    cursor: Any, run_id: uuid.UUID, delta: RunDelta, *, cancel: bool = False
) -> RunTransition:
    """Move the run's counters by ``delta`` and derive its status (``cancel``: CANCELED)."""
    row = execute(
        cursor,
        workflow_queries.RUN_TRANSITION,
        _counter_params(run_id, delta, cancel=cancel),
        context="move workflow run counters",
    ).fetchone()
    return _transition(run_id, row)


def _transition(run_id: uuid.UUID, row: tuple[Any, ...] | None) -> RunTransition:
    if row is None:
        raise RunledgerError.for_code(Code.WF_INTERNAL_STATE, f"run {run_id} has no row")
    return RunTransition(
        previous=WorkflowRunStatus(row[0]), status=WorkflowRunStatus(row[1]), fail_fast=row[2]
    )


def step_context(step_id: uuid.UUID, *, using: str) -> tuple[uuid.UUID, str, dict[str, Any]]:
    """(run id, step key, upstream outputs by step key) of a workflow job's step.

    Transaction: one read (or the caller's atomic block).

    Raises:
        RunledgerError: ``workflow.internal_state`` when the step is gone.
    """
    import json

    with connections[using].cursor() as cursor:
        row = execute(
            cursor,
            workflow_queries.STEP_CONTEXT,
            {"step_id": step_id},
            context="read workflow step context",
        ).fetchone()
    if row is None:
        raise RunledgerError.for_code(Code.WF_INTERNAL_STATE, f"step {step_id} does not exist")
    return row[0], row[1], json.loads(row[2])
