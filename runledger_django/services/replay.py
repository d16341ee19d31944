"""Replay of a succeeded job: a new job made from it, idempotent per request key (reference 5).

The source is never changed. The replay is a new, unkeyed run-1 job with the source's job type,
tenant, payload, priority, attempts, timeout and execution resource; its lineage is a row of
``runledger_job_replays`` and its ENQUEUED event's payload.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db.backends.utils import CursorWrapper

from ..db import replay_queries
from ..db.transaction import ensure_read_committed, execute
from ..domain import JobStatus, ReadScope, ReplayOutcome
from ..errors import Code, RunledgerError
from ..uuid7 import uuid7
from ..validation import is_blank
from ._lease import DEFAULT_USING, scope_params
from ._owned import join_or_own
from .wakeup import JOBS_CHANNEL, wake_after_commit

REQUEST_KEY_MAX_BYTES = 512


def _text(value: object, blank: Code, *, max_bytes: int | None = None) -> str:
    if not isinstance(value, str) or is_blank(value) or "\x00" in value:
        raise RunledgerError.for_code(blank, "expected non-blank text")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise RunledgerError.for_code(blank, "text has a lone surrogate") from None
    if max_bytes is not None and size > max_bytes:
        raise RunledgerError.for_code(
            Code.REPLAY_REQUEST_KEY_TOO_LONG, f"request key is {size} bytes"
        )
    return value


def replay_job(
    job_id: uuid.UUID | str,
    *,
    scope: ReadScope,
    reason: str,
    request_key: str,
    expected_run_number: int | None = None,
    using: str = DEFAULT_USING,
) -> ReplayOutcome:
    """Make a new job from a SUCCEEDED one; return the replay.

    The same ``request_key`` and ``reason`` again return the same replay (disposition
    ``"existing"``, with its current status), from any process and concurrently too; the same
    key with another reason is a conflict. ``expected_run_number``, when given, is the source
    run the caller saw: a job that moved on since is refused rather than replayed.

    Transaction: joins the caller's atomic block (READ COMMITTED required; an existing replay
    returned stays row-locked until the caller commits, so no worker claims it meanwhile) or
    owns one. Workers are woken after the commit.

    Raises:
        RunledgerError: ``job.replay_request_key_blank``, ``job.replay_request_key_too_long``,
            ``job.replay_reason_blank``, ``job.invalid_argument`` before any SQL;
            ``job.not_found`` (also outside ``scope``: a scope never reveals another tenant's
            jobs); ``job.invalid_state_transition`` (not SUCCEEDED);
            ``job.replay_expectation_mismatch``; ``job.replay_idempotency_conflict``;
            ``job.compare_and_replay_unsupported_isolation``.
    """
    key = _text(request_key, Code.REPLAY_REQUEST_KEY_BLANK, max_bytes=REQUEST_KEY_MAX_BYTES)
    why = _text(reason, Code.REPLAY_REASON_BLANK)
    if expected_run_number is not None and (
        type(expected_run_number) is not int or expected_run_number < 1
    ):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, "expected_run_number must be a positive int"
        )
    params: dict[str, Any] = {
        **scope_params(job_id, scope),
        "request_key": key,
        "reason": why,
        "replay_job_id": uuid7(),
    }

    def body(cursor: CursorWrapper) -> ReplayOutcome:
        return _replay(cursor, params, expected_run_number)

    def in_caller(cursor: CursorWrapper) -> ReplayOutcome:
        ensure_read_committed(
            cursor, operation="replay_job", code=Code.COMPARE_AND_REPLAY_UNSUPPORTED_ISOLATION
        )
        return body(cursor)

    outcome = join_or_own(using, in_caller, lambda cursor: None, body, operation="replay job")
    if outcome.disposition == "inserted":
        wake_after_commit(using, JOBS_CHANNEL)
    return outcome


def _replay(
    cursor: CursorWrapper, params: dict[str, Any], expected_run_number: int | None
) -> ReplayOutcome:
    context = "replay job"
    source = execute(cursor, replay_queries.LOCK_SOURCE, params, context=context).fetchone()
    job_id = params["job_id"]
    if source is None:
        raise RunledgerError.for_code(Code.NOT_FOUND, f"job {job_id} is not in the scope")
    status, run_number = str(source[0]), int(source[1])
    if source[2]:
        raise RunledgerError.for_code(
            Code.WF_REQUEUE_NOT_SUPPORTED, f"job {job_id} is a workflow step's; retry its run"
        )
    if expected_run_number is not None and expected_run_number != run_number:
        raise RunledgerError.for_code(
            Code.REPLAY_EXPECTATION_MISMATCH,
            f"job {job_id} is at run {run_number} ({status}), not {expected_run_number}",
        )
    if status != JobStatus.SUCCEEDED:
        raise RunledgerError.for_code(
            Code.INVALID_STATE_TRANSITION, f"job {job_id} is {status}; only SUCCEEDED replays"
        )
    params = {**params, "run_number": run_number}
    existing = execute(cursor, replay_queries.EXISTING_REPLAY, params, context=context).fetchone()
    if existing is not None:
        replay_id, reason, replay_status, replay_run = existing
        if reason != params["reason"]:
            raise RunledgerError.for_code(
                Code.REPLAY_IDEMPOTENCY_CONFLICT,
                f"replay key of job {job_id} run {run_number} was used with another reason",
            )
        execute(cursor, replay_queries.LOCK_REPLAY, {"replay_job_id": replay_id}, context=context)
        return ReplayOutcome(
            job_id=replay_id,
            status=JobStatus(replay_status),
            run_number=replay_run,
            disposition="existing",
            source_job_id=job_id,
            source_run_number=run_number,
        )
    row = execute(cursor, replay_queries.INSERT_REPLAY, params, context=context).fetchone()
    if row is None:  # the source vanished under our lock: impossible, but never a silent None
        raise RunledgerError.for_code(Code.NOT_FOUND, f"job {job_id} disappeared")
    return ReplayOutcome(
        job_id=row[0],
        status=JobStatus(row[1]),
        run_number=row[2],
        disposition="inserted",
        source_job_id=job_id,
        source_run_number=run_number,
    )
