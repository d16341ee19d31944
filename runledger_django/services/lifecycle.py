"""Worker-side writes to a leased job: heartbeats, progress, success, failure and hand-back.

Every function here is fenced by the exact lease (reference 2): a write from a worker that no
longer holds the job, or whose lease expired (even while it waited for the row lock), changes
nothing and raises ``job.lease_owner_mismatch``. Each is one statement under the lifecycle
caps (5 s lock waits, 30 s in all), with times from the database clock.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.db import DatabaseError, connections, transaction

from ..db import lifecycle_queries
from ..db.classify import classify
from ..db.transaction import ensure_read_committed, last_statement_of_transaction
from ..domain import (
    ContinuationOutcome,
    FailureKind,
    FailureOutcome,
    HeartbeatResult,
    JobFailure,
    JobLease,
    JobStatus,
)
from ..errors import Code, RunledgerError
from ..validation import INT32_MAX, encode_payload, is_blank, storable_time
from ._lease import (
    DEFAULT_USING,
    lease_mismatch,
    lease_params,
    leases_params,
    transition,
    validate_lease,
    validate_lease_seconds,
)
from ._owned import owned_atomic
from .workflows import release as workflow_release

STAGE_MAX_BYTES = 255
INT64_MAX = 2**63 - 1

_UNSET: Any = object()


def heartbeat_leases(
    leases: Sequence[JobLease], *, lease_seconds: int, using: str = DEFAULT_USING
) -> HeartbeatResult:
    """Extend many leases of one worker to ``now() + lease_seconds`` (reference 5).

    A lease whose row another session holds locked is reported ``busy`` rather than waited
    for; retry it shortly. A ``lost`` lease is no longer this worker's: stop writing to it.

    Transaction: one statement, its own transaction (or the caller's atomic block).
    """
    seconds = validate_lease_seconds(lease_seconds)
    params = leases_params(leases)
    if not params["job_ids"]:
        return HeartbeatResult(renewed=frozenset(), busy=frozenset(), lost=frozenset())
    rows = transition(
        using,
        lifecycle_queries.HEARTBEAT_LEASES,
        {**params, "lease_seconds": seconds},
        context="heartbeat job leases",
    )
    renewed = frozenset(row[0] for row in rows if row[1])
    busy = frozenset(row[0] for row in rows if row[2])
    lost = frozenset(row[0] for row in rows if not row[1] and not row[2])
    return HeartbeatResult(renewed=renewed, busy=busy, lost=lost)


def _progress_value(value: object, field: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise RunledgerError.for_code(
            Code.INVALID_PROGRESS, f"{field} must be a non-negative 64-bit int"
        )
    return value


def validate_stage_text(value: object) -> str:
    """A handler's stage: any non-blank text that fits an index entry."""
    if (
        not isinstance(value, str)
        or is_blank(value)
        or "\x00" in value
        or len(value.encode("utf-8", "surrogatepass")) > STAGE_MAX_BYTES
    ):
        raise RunledgerError.for_code(
            Code.INVALID_STAGE, f"stage must be 1 to {STAGE_MAX_BYTES} bytes of non-blank text"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RunledgerError.for_code(Code.INVALID_STAGE, "stage has a lone surrogate") from None
    return value


def encode_json_value(value: object, code: Code) -> str:
    """JSON text for a checkpoint or an output, or ``code`` when it is not JSON-native."""
    try:
        return encode_payload(value)
    except RunledgerError as error:
        raise RunledgerError.for_code(code, error.internal_message) from None


def update_job_progress(
    lease: JobLease,
    *,
    progress_done: int | None = None,
    progress_total: int | None = None,
    stage: str | None = None,
    checkpoint: Any = _UNSET,
    using: str = DEFAULT_USING,
) -> None:
    """Write progress, stage and checkpoint of a running job (reference 4).

    Omitted values keep what is stored; the merged progress must have done <= total. A stage
    writes a STAGE_CHANGED event and progress a PROGRESS event; a checkpoint alone writes none.
    ``checkpoint=None`` stores JSON null (it is a value; omit it to keep the stored one).

    Transaction: one statement (inside the caller's atomic block it joins it, so a checkpoint
    can commit with the handler's own writes).

    Raises:
        RunledgerError: ``job.invalid_progress``, ``job.invalid_stage``,
            ``job.invalid_checkpoint`` before any SQL; ``job.invalid_progress`` when the merged
            values are inconsistent; ``job.lease_owner_mismatch``.
    """
    checked = validate_lease(lease)
    done = _progress_value(progress_done, "progress_done")
    total = _progress_value(progress_total, "progress_total")
    if done is not None and total is not None and done > total:
        raise RunledgerError.for_code(Code.INVALID_PROGRESS, "progress_done exceeds progress_total")
    stage_text = None if stage is None else validate_stage_text(stage)
    set_checkpoint = checkpoint is not _UNSET
    checkpoint_text = (
        encode_json_value(checkpoint, Code.INVALID_CHECKPOINT) if set_checkpoint else None
    )
    rows = transition(
        using,
        lifecycle_queries.UPDATE_PROGRESS,
        {
            **lease_params(checked),
            "progress_done": done,
            "progress_total": total,
            "stage": stage_text,
            "set_checkpoint": set_checkpoint,
            "checkpoint": checkpoint_text,
        },
        context="update job progress",
    )
    matched, valid, written = rows[0]
    if matched and not valid:
        raise RunledgerError.for_code(
            Code.INVALID_PROGRESS, f"job {checked.job_id} merged progress is inconsistent"
        )
    if not written:
        raise lease_mismatch(checked)


def complete_job_success(
    lease: JobLease, *, output: Any = None, using: str = DEFAULT_USING
) -> dt.datetime:
    """Mark a leased job SUCCEEDED with ``output`` (JSON-native; None stores nothing).

    Returns the finish time (database clock).

    Transaction: one statement, its own transaction (or the caller's atomic block).

    Raises:
        RunledgerError: ``job.invalid_output`` before any SQL; ``job.lease_owner_mismatch``.
    """
    checked = validate_lease(lease)
    output_text = encode_output(output)
    rows = terminal_write(
        using,
        lifecycle_queries.COMPLETE_SUCCESS,
        {**lease_params(checked), "output": output_text},
        context="complete job",
        workflow=checked.workflow_step_id is not None,
        finished=lambda rows: [(row[1], JobStatus.SUCCEEDED.value) for row in rows if row[1]],
    )
    if not rows:
        raise lease_mismatch(checked)
    finished_at: dt.datetime = rows[0][0]
    return finished_at


def complete_jobs_success(
    successes: Sequence[tuple[JobLease, str | None]], *, using: str = DEFAULT_USING
) -> set[uuid.UUID]:
    """Mark many leased jobs of one worker SUCCEEDED in one statement; return the ids of those
    recorded (the fence refused the others, as ``complete_job_success`` would).

    Each output is already encoded by ``encode_output``. All leases name the same worker.

    Transaction: one statement, its own transaction (or the caller's atomic block).

    Raises:
        RunledgerError: ``job.invalid_argument`` before any SQL; a database error fails the
            whole batch (nothing is recorded).
    """
    params = leases_params([lease for lease, _ in successes])
    if not params["job_ids"]:
        return set()
    plain = [item for item in successes if item[0].workflow_step_id is None]
    flagged = [item for item in successes if item[0].workflow_step_id is not None]
    recorded: set[uuid.UUID] = set()
    if plain:
        rows = terminal_write(
            using,
            lifecycle_queries.COMPLETE_SUCCESS_MANY,
            {
                **leases_params([lease for lease, _ in plain]),
                "outputs": [text for _, text in plain],
            },
            context="complete jobs",
            workflow=False,
            finished=_succeeded_steps,
            retry_when_short=False,
        )
        recorded = {row[0] for row in rows}
        # A lease that carries no step id but names a workflow job was left alone: it goes
        # with the workflow jobs, whose dependents are released in their transaction.
        flagged += [item for item in plain if item[0].job_id not in recorded]
    if flagged:
        rows = terminal_write(
            using,
            lifecycle_queries.COMPLETE_SUCCESS_MANY,
            {
                **leases_params([lease for lease, _ in flagged]),
                "outputs": [text for _, text in flagged],
            },
            context="complete workflow jobs",
            workflow=True,
            finished=_succeeded_steps,
        )
        recorded |= {row[0] for row in rows}
    return recorded


def _succeeded_steps(rows: Sequence[tuple[Any, ...]]) -> list[tuple[uuid.UUID, str]]:
    return [(row[1], JobStatus.SUCCEEDED.value) for row in rows if row[1] is not None]


def terminal_write(
    using: str,
    sql: str,
    params: dict[str, Any],
    *,
    context: str,
    workflow: bool,
    finished: Callable[[Sequence[tuple[Any, ...]]], list[tuple[uuid.UUID, str]]],
    retry_when_short: bool = True,
    plain_guard: bool = True,
) -> list[tuple[Any, ...]]:
    """Run a job's terminal statement and, for a workflow job, its step's propagation in the
    same transaction (reference 3.3).

    A plain job outside a transaction costs the one statement it always did: its statement
    is sent with ``workflow`` false, which leaves a workflow job's row alone, so a lease that
    did not say it was a workflow job is sent again inside a transaction (only when nothing
    matched: a lost lease costs one statement more). ``finished`` picks the (step id, job
    status) pairs of workflow jobs from the statement's rows.

    Inside the caller's transaction, a failed propagation marks it for rollback: the job's
    terminal write must not commit without its dependents' release. A statement without the
    guard (``plain_guard`` false: an operator's cancel, the reaper) always runs in a
    transaction.
    """
    connection = connections[using]
    try:
        # get_autocommit() connects first: a restarting server must give a classified error
        # (an outage the worker rides out), as the statement itself would.
        in_transaction = connection.in_atomic_block or not connection.get_autocommit()
    except DatabaseError as exc:
        raise classify(exc, context) from exc
    if in_transaction:
        rows = transition(using, sql, {**params, "workflow": True}, context=context)
        steps = finished(rows)
        if steps:
            try:
                with connection.cursor() as cursor:
                    ensure_read_committed(
                        cursor,
                        operation="a workflow job's completion",
                        code=Code.WF_TERMINAL_COMPLETION_UNSUPPORTED_ISOLATION,
                    )
                workflow_release.on_jobs_terminal(steps, using=using)
            except BaseException:
                if connection.in_atomic_block:
                    transaction.set_rollback(True, using=using)
                raise
        return rows
    if not workflow and plain_guard:
        rows = transition(using, sql, {**params, "workflow": False}, context=context)
        if rows or not retry_when_short:
            return rows
    if plain_guard:
        # A worker's workflow completion: statement, steps and run locks in one round trip.
        job_ids = params["job_ids"] if "job_ids" in params else [params["job_id"]]
        return workflow_release.complete_with_release(
            using, sql, params, list(job_ids), context=context
        )
    with owned_atomic(using, operation=context):
        with last_statement_of_transaction(using):
            rows = transition(using, sql, {**params, "workflow": True}, context=context)
        steps = finished(rows)
        if steps:
            # Checked once the statement said it was a workflow job (a plain job's terminal
            # write is one statement, at any isolation, as it always was); a refusal rolls
            # the write back with the rest.
            workflow_release.ensure_session_read_committed(using)
            workflow_release.on_jobs_terminal(steps, using=using)
    return rows


def encode_output(output: Any) -> str | None:
    """A handler's return value as stored JSON text (None stores nothing).

    Raises:
        RunledgerError: ``job.invalid_output`` when it is not JSON-native.
    """
    return None if output is None else encode_json_value(output, Code.INVALID_OUTPUT)


def _retry_timing(failure: JobFailure) -> tuple[int | None, int | None, dt.datetime | None]:
    """The policy delay and the handler's request, checked (reference 7.3)."""
    policy = failure.policy_retry_delay_ms
    if type(policy) is not int or not 0 < policy <= INT32_MAX:
        raise RunledgerError.for_code(
            Code.INVALID_RETRY_TIMING, "a retryable failure needs a positive policy delay"
        )
    after = failure.retry_after_ms
    if after is not None and (type(after) is not int or not 0 <= after <= INT32_MAX):
        raise RunledgerError.for_code(
            Code.INVALID_RETRY_TIMING, "retry_after_ms must be 0 to 2**31-1 milliseconds"
        )
    if after == 0:
        after = None  # "retry after no time at all" leaves the policy in charge
    at = None
    if failure.retry_at is not None:
        at = storable_time(failure.retry_at, Code.INVALID_RETRY_TIMING, "retry_at")
    return policy, after, at


def complete_job_failure(
    lease: JobLease, failure: JobFailure, *, using: str = DEFAULT_USING
) -> FailureOutcome:
    """Record a failed attempt: retry it, or dead-letter the job (reference 7).

    A TERMINAL or PANICKED failure dead-letters at once; so does any failure of the last
    allowed attempt. Otherwise the job is PENDING again at the handler's requested time
    (``retry_after_ms`` or ``retry_at``) or, without one, after the policy delay. Retry timing
    is neither checked nor used when the job dead-letters: whether the last attempt failed is
    only known under the row lock, so invalid timing goes to the statement, which then
    dead-letters an exhausted job and leaves any other untouched.

    Transaction: one statement, its own transaction (or the caller's atomic block).

    Raises:
        RunledgerError: ``job.invalid_argument`` before any SQL; ``job.invalid_retry_timing``
            (a retryable failure that would retry; nothing is written);
            ``job.lease_owner_mismatch``.
    """
    checked = validate_lease(lease)
    if not isinstance(failure, JobFailure):
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "expected a JobFailure")
    kind = FailureKind(failure.kind)
    policy: int | None = None
    after: int | None = None
    at: dt.datetime | None = None
    invalid_timing: RunledgerError | None = None
    if kind.is_retryable:
        try:
            policy, after, at = _retry_timing(failure)
        except RunledgerError as error:
            invalid_timing = error
    rows = terminal_write(
        using,
        lifecycle_queries.COMPLETE_FAILURE,
        {
            **lease_params(checked),
            "retryable": kind.is_retryable,
            "kind": kind.value,
            "code": _text(failure.code, "job.handler_failed"),
            "message": _text(failure.message, "Job failed."),
            "error_class": failure.error_class,
            "traceback": failure.traceback,
            "policy_retry_delay_ms": policy,
            "retry_after_ms": after,
            "retry_at": at,
            "timing_valid": invalid_timing is None,
        },
        context="fail job",
        workflow=checked.workflow_step_id is not None,
        finished=lambda rows: [
            (row[2], row[0])
            for row in rows
            if row[2] is not None and row[0] == JobStatus.DEAD_LETTERED.value
        ],
    )
    if not rows:
        raise invalid_timing or lease_mismatch(checked)
    status, next_run_at, _ = rows[0]
    job_status = JobStatus(status)
    return FailureOutcome(
        status=job_status,
        next_run_at=next_run_at if job_status == JobStatus.PENDING else None,
    )


def _text(value: object, fallback: str) -> str:
    """Stored error text: never blank, never NUL (PostgreSQL text cannot hold it)."""
    text = value if isinstance(value, str) else ""
    text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    return text if text.strip() else fallback


def continue_job(
    lease: JobLease,
    *,
    delay_microseconds: int = 0,
    checkpoint: Any = _UNSET,
    using: str = DEFAULT_USING,
) -> ContinuationOutcome:
    """End a handler's slice: close the attempt, and put the same job back PENDING as its next
    run (``run_number`` + 1, attempt 0, a fresh attempt budget), due after the delay, with
    ``checkpoint`` stored (omitted: the stored one is kept) (reference 8).

    Transaction: one statement, its own transaction (or the caller's atomic block: an atomic
    handler's slice commits with its checkpoint).

    Raises:
        RunledgerError: ``job.invalid_continuation_delay``, ``job.invalid_checkpoint`` before
            any SQL; ``job.lease_owner_mismatch``.
    """
    checked = validate_lease(lease)
    if checked.workflow_step_id is not None:
        raise RunledgerError.for_code(
            Code.WF_HANDLER_CONTINUATION_NOT_ENABLED,
            f"job {checked.job_id} is a workflow step; its handler cannot continue",
        )
    if type(delay_microseconds) is not int or not 0 <= delay_microseconds <= INT64_MAX:
        raise RunledgerError.for_code(
            Code.INVALID_CONTINUATION_DELAY, "delay_microseconds must be a non-negative int"
        )
    set_checkpoint = checkpoint is not _UNSET
    rows = transition(
        using,
        lifecycle_queries.CONTINUE_JOB,
        {
            **lease_params(checked),
            "delay_us": delay_microseconds,
            "set_checkpoint": set_checkpoint,
            "checkpoint": (
                encode_json_value(checkpoint, Code.INVALID_CHECKPOINT) if set_checkpoint else None
            ),
        },
        context="continue job",
    )
    if not rows:
        raise lease_mismatch(checked)
    run_number, next_run_at = rows[0]
    return ContinuationOutcome(run_number=run_number, next_run_at=next_run_at)


def hand_back_leases(
    leases: Sequence[JobLease], *, reason: str, using: str = DEFAULT_USING
) -> set[Any]:
    """Return leased jobs to PENDING, due now, without spending their attempt.

    For a worker that stops (or is stuck) with handlers unfinished: the attempt is closed as
    INTERRUPTED, never as a failure, so a deploy cannot dead-letter a job. Returns the ids
    handed back; a lease the worker no longer holds is skipped.

    Transaction: one statement, its own transaction (or the caller's atomic block).
    """
    params = leases_params(leases)
    if not params["job_ids"]:
        return set()
    rows = transition(
        using,
        lifecycle_queries.HAND_BACK_LEASES,
        {**params, "reason": _text(reason, "WORKER_STOPPED")},
        context="hand back job leases",
    )
    return {row[0] for row in rows}
