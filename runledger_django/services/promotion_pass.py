"""One promotion pass: its budget, the set-based batch, the per-row fallback, and the counts
of its report; and what a failed candidate does (``failure_action``).

A pass pins the planner, takes the shared retention fence, then claims a batch and inserts its
jobs in one set-based statement. Rows whose key already has a job converge (or conflict)
set-based when there are more of them than the per-row path takes; every other row that did not
insert cleanly (drift, a disabled definition, a failing trigger) goes through the per-row path
of the reference: one savepoint per row, at most 24 of them per pass. ``promotion.py`` is the
public face: it validates the call, then runs ``run_pass``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from django.db import DatabaseError, connections, transaction
from django.db.backends.utils import CursorWrapper

from ..db import promotion_queries, session_queries
from ..db.classify import classify, is_session_fatal
from ..db.transaction import (
    LOCK_TIMEOUT,
    STATEMENT_TIMEOUT,
    cap_timeout,
    cap_transaction_timeout,
    execute,
    has_transaction_timeout,
    owned_read_committed,
    uses_client_side_binding,
)
from ..domain import PROMOTION_BATCH_LIMIT_MAX, EnqueueRequest, PromotionReport
from ..errors import CATALOG, Code, RunledgerError
from ..validation import (
    STAGES,
    canonical_snapshot_json,
    validate_execution_resource_key,
    validate_job_type,
    validate_stage,
)
from ._owned import commit_unconfirmed
from .enqueue import DefinitionUnavailable, EnqueueConflict, Enqueued, enqueue_from_intent

# The pass logs under promotion's name, as it did before it had a module of its own: operators
# filter on that logger.
logger = logging.getLogger("runledger_django.services.promotion")

STAGE_VALUES = sorted(STAGES)
"""The stages a persisted row may carry; others are terminal conflicts on the per-row path."""
TRANSACTION_BUDGET_MS = 25_000
"""Total lifetime of a pass; below retention's 30 s fence wait (reference 4.5 liveness order)."""
LOCK_TIMEOUT_MS = 5_000
"""Row-lock and fence waits inside a pass."""
CLIENT_BUDGET_RECAP_SECONDS = 0.25
"""On PostgreSQL 15 and 16, how stale the statement_timeout cap may get (the overshoot bound)."""

TERMINAL_CODES = frozenset(
    {
        Code.INTENT_INVALID_PERSISTED_ROW,
        Code.INVALID_JOB_TYPE,
        Code.INVALID_EXECUTION_RESOURCE_KEY,
        Code.INVALID_STAGE,
        Code.INTENT_SNAPSHOT_MISMATCH,
        Code.ENQUEUE_REQUEST_SNAPSHOT_FAILED,
    }
)
"""Intrinsically invalid persisted requests; every other failure retries, so no work is lost.

A stored snapshot that differs from the row's columns (or that the columns cannot rebuild) is
one of them, unlike in the reference, which retries it: nothing ever rewrites either side, so
the next pass would find the same difference, forever."""

BATCH_FATAL_CODES = frozenset(
    {Code.DB_TRANSACTION_COMMIT_UNCONFIRMED, Code.INTENT_PROMOTION_BUDGET_EXHAUSTED}
)
"""Failures of the pass itself, never of one row."""

FailureAction = Literal["conflicted", "retry_deferred", "propagate"]


def failure_action(error: RunledgerError) -> FailureAction:
    """What a failed candidate does (reference 4.4 step 9d).

    Errors that leave no usable session or transaction (lost connection, shutdown,
    transaction_timeout, anything that is not a database error) abort the whole pass; the
    intrinsically invalid persisted-row codes (``TERMINAL_CODES``) conflict the intent;
    everything else, including codes this version does not know, defers it.
    """
    cause = error.__cause__
    if error.code in BATCH_FATAL_CODES:
        return "propagate"
    if cause is not None and (not isinstance(cause, DatabaseError) or is_session_fatal(cause)):
        return "propagate"
    if error.code in TERMINAL_CODES:
        return "conflicted"
    return "retry_deferred"


def run_pass(job_types: list[str], *, limit: int, using: str) -> PromotionReport:
    """Run one pass over validated ``job_types`` and ``limit``, outside any atomic block.

    Transaction: owns its transaction (see ``promote_intents``, which checks the arguments).
    """
    try:
        if _nothing_eligible(job_types, using):
            return PromotionReport()
        server_side = server_has_transaction_timeout(using)
    except DatabaseError as exc:  # connecting happens outside execute()
        raise classify(exc, "check eligible job enqueue intents") from exc
    return _Pass(using, job_types, limit, server_side=server_side).run()


def _nothing_eligible(job_types: list[str], using: str) -> bool:
    """The idle path: the eligibility check under the pinned planner settings, sent with them
    as one simple-protocol query (one implicit transaction) outside any transaction block, so
    an idle promoter costs one round trip per poll and takes no locks. Where a query can carry
    only one statement (server-side binding) it answers False and the pass checks instead."""
    connection = connections[using]
    if not (uses_client_side_binding(using) and connection.get_autocommit()):
        return False
    with connection.cursor() as cursor:
        execute(
            cursor,
            session_queries.PROMOTION_PLANNER_SETTINGS
            + ";\n"
            + promotion_queries.PROMOTION_HAS_ELIGIBLE,
            {"job_types": job_types},
            context="check eligible job enqueue intents",
        )
        cursor.nextset()
        return cursor.fetchone() is None


def server_has_transaction_timeout(using: str) -> bool:
    """Whether the server enforces the budget itself (17+); tests force the client path."""
    return has_transaction_timeout(using)


_SAVEPOINT_CONTROL = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")


@dataclass
class _Budget:
    """The 25 s pass budget kept by the client where transaction_timeout does not exist."""

    deadline: float
    last_cap: float | None = None

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline - 0.05

    def wrap(
        self,
        execute_next: Callable[..., Any],
        sql: str,
        params: Any,
        many: bool,
        context: dict[str, Any],
    ) -> Any:
        """Django execute wrapper: re-cap statement_timeout to what is left of the budget."""
        if sql.lstrip().upper().startswith(_SAVEPOINT_CONTROL):
            # NOTE: savepoint control passes untouched, even past the deadline: rolling back to
            # a savepoint is how a failed row unwinds, and after the failure the transaction
            # rejects every other statement (a re-cap would fail with 25P02 and leave the
            # transaction broken, so one bad row would abort the pass).
            return execute_next(sql, params, many, context)
        now = time.monotonic()
        if now >= self.deadline:
            raise _budget_exhausted("client-side promotion budget spent before a statement")
        if self.last_cap is None or now - self.last_cap >= CLIENT_BUDGET_RECAP_SECONDS:
            remaining_ms = max(1, int((self.deadline - now) * 1000))
            self.last_cap = now  # first: the cap below passes through this wrapper too
            cap_timeout(context["cursor"], STATEMENT_TIMEOUT, remaining_ms)
        return execute_next(sql, params, many, context)


def _budget_exhausted(
    detail: str = "promotion pass exceeded its 25 s budget", *, sqlstate: str | None = None
) -> RunledgerError:
    """The one place that builds the "budget exhausted" error, keeping the SQLSTATE of the
    statement the budget ended (25P04 or 57014) when there was one."""
    return RunledgerError.for_code(
        Code.INTENT_PROMOTION_BUDGET_EXHAUSTED, detail, sqlstate=sqlstate
    )


class _FastPathMismatchError(Exception):
    """The set-based statement marked fewer intents than it inserted jobs; undo it."""


@dataclass(frozen=True, slots=True)
class _Held:
    """A claimed row: its id, and its ctid, valid while the pass holds the row lock."""

    intent_id: uuid.UUID
    tid: str


@dataclass
class _Candidate:
    intent_id: uuid.UUID
    tid: str
    request: EnqueueRequest | None
    invalid: RunledgerError | None

    @property
    def row_key(self) -> dict[str, Any]:
        """The statement parameters that reach this claimed row (its ctid, its id as a guard)."""
        return {"tid": self.tid, "id": self.intent_id}


@dataclass
class _Counts:
    inserted_jobs: int = 0
    existing_jobs: int = 0
    conflicted: int = 0
    definition_became_unavailable: int = 0
    retry_deferred: int = 0
    batch_was_full: bool = False

    def report(self) -> PromotionReport:
        return PromotionReport(
            inserted_jobs=self.inserted_jobs,
            existing_jobs=self.existing_jobs,
            conflicted=self.conflicted,
            definition_became_unavailable=self.definition_became_unavailable,
            retry_deferred=self.retry_deferred,
            total_promoted=self.inserted_jobs + self.existing_jobs,
            batch_was_full=self.batch_was_full,
        )


class _Pass:
    def __init__(self, using: str, job_types: list[str], limit: int, *, server_side: bool) -> None:
        self.using = using
        self.job_types = job_types
        self.limit = limit
        self.server_side = server_side
        self.counts = _Counts()
        self.budget: _Budget | None = None

    def run(self) -> PromotionReport:
        if not self.server_side:
            self.budget = _Budget(deadline=time.monotonic() + TRANSACTION_BUDGET_MS / 1000)
        body_done = False
        try:
            # The budget wrapper starts after SET TRANSACTION, which must come first.
            with owned_read_committed(self.using) as cursor, self._budget_wrapper():
                self._critical_section(cursor)
                body_done = True
        except DatabaseError as exc:
            if body_done:
                # Only COMMIT is left: whether the pass's work landed is unknown (a retry is
                # safe, promotion is idempotent).
                failure = commit_unconfirmed("promote job enqueue intents", exc)
            else:
                failure = self._pass_failure(classify(exc, "promote job enqueue intents"))
            self._after_failure(failure, exc)
            raise failure from exc
        except RunledgerError as error:
            failure = self._pass_failure(error)
            self._after_failure(failure, error.__cause__)
            if failure is error:
                raise
            raise failure from error.__cause__
        report = self.counts.report()
        if report.anything_happened:
            logger.info(
                "processed durable job enqueue intents inserted_jobs=%d existing_jobs=%d "
                "conflicted=%d definition_became_unavailable=%d retry_deferred=%d",
                report.inserted_jobs,
                report.existing_jobs,
                report.conflicted,
                report.definition_became_unavailable,
                report.retry_deferred,
                extra={"runledger": report.to_dict()},
            )
        return report

    @contextmanager
    def _budget_wrapper(self) -> Iterator[None]:
        if self.budget is None:
            yield
            return
        with connections[self.using].execute_wrapper(self.budget.wrap):
            yield

    def _pass_failure(self, error: RunledgerError) -> RunledgerError:
        """A pass killed by transaction_timeout (25P04) or by the client-side budget's
        statement cap (57014 once the budget is spent) reports the exhausted budget."""
        if error.code == Code.INTENT_PROMOTION_BUDGET_EXHAUSTED:
            return error
        if error.sqlstate == "25P04" or (
            self.budget is not None and self.budget.expired() and error.sqlstate == "57014"
        ):
            return _budget_exhausted(sqlstate=error.sqlstate)
        return error

    def _after_failure(self, error: RunledgerError, cause: BaseException | None) -> None:
        if error.sqlstate == "25P04" or (cause is not None and is_session_fatal(cause)):
            # transaction_timeout and lost connections end the session; start afresh next time.
            connections[self.using].close()
        logger.warning(
            "durable job enqueue intent promotion pass failed error_code=%s error_sqlstate=%s",
            error.code,
            error.sqlstate or "none",
            extra={"runledger": error.log_fields()},
        )

    def _critical_section(self, cursor: CursorWrapper) -> None:
        if self.server_side:
            cap_transaction_timeout(cursor, TRANSACTION_BUDGET_MS)
        cap_timeout(cursor, LOCK_TIMEOUT, LOCK_TIMEOUT_MS)
        execute(
            cursor, session_queries.PROMOTION_PLANNER_SETTINGS, None, context="pin promotion plans"
        )
        eligible = execute(
            cursor,
            promotion_queries.PROMOTION_HAS_ELIGIBLE,
            {"job_types": self.job_types},
            context="check eligible job enqueue intents",
        ).fetchone()
        if eligible is None:
            return  # idle: nothing locked, the fence never taken
        execute(cursor, session_queries.LOCK_PROMOTION_FENCE, None, context="take promotion fence")
        unresolved = self._promote_set_based(cursor)
        if unresolved is None:
            # The statement was undone with its claim: claim again for the rows' own paths.
            unresolved = [
                _Held(intent_id, tid)
                for intent_id, tid in execute(
                    cursor,
                    promotion_queries.PROMOTION_CLAIM,
                    {"job_types": self.job_types, "limit": self.limit},
                    context="claim job enqueue intents",
                ).fetchall()
            ]
            self.counts.batch_was_full = len(unresolved) == self.limit
        if len(unresolved) > PROMOTION_BATCH_LIMIT_MAX:
            unresolved = self._converge_set_based(cursor, unresolved)
        if len(unresolved) > PROMOTION_BATCH_LIMIT_MAX:
            self.counts.batch_was_full = True
        fallback = unresolved[:PROMOTION_BATCH_LIMIT_MAX]
        if not fallback:
            return
        rows = execute(
            cursor,
            promotion_queries.PROMOTION_FALLBACK_ROWS,
            {"tids": [held.tid for held in fallback]},
            context="read claimed job enqueue intents",
        ).fetchall()
        by_id = {row[0]: row for row in rows}
        for held in fallback:  # in claim order
            self._promote_one(cursor, _decode(by_id[held.intent_id]))

    def _promote_set_based(self, cursor: CursorWrapper) -> list[_Held] | None:
        """Claim a batch and promote every row that inserts cleanly, in one statement.

        Returns the claimed rows left unresolved, in claim order, or None when the statement
        was undone (its claim with it): a failing row, or an intent left PENDING beside its
        inserted job (say a trigger skipped the update), sends the batch to the rows' own paths,
        where each failing row's job rolls back alone.
        """
        params = {"job_types": self.job_types, "limit": self.limit, "stages": STAGE_VALUES}
        try:
            with transaction.atomic(using=self.using):
                row = execute(
                    cursor,
                    promotion_queries.PROMOTE_BATCH,
                    params,
                    context="promote job enqueue intents",
                ).fetchone()
                claimed, inserted, promoted, ids, tids = row
                if promoted != inserted:
                    raise _FastPathMismatchError
        except _FastPathMismatchError:
            return None
        except RunledgerError as error:
            self._propagate_if_fatal(error)
            return None
        self.counts.batch_was_full = claimed == self.limit
        self.counts.inserted_jobs += promoted
        return [_Held(intent_id, tid) for intent_id, tid in zip(ids or (), tids or (), strict=True)]

    def _converge_set_based(self, cursor: CursorWrapper, unresolved: list[_Held]) -> list[_Held]:
        """Settle, in one statement, the rows whose key already has a job; return the rest.

        Only for more rows than the per-row path takes in one pass: a burst of identical
        direct enqueues would otherwise converge 24 rows a pass. Fewer rows keep the per-row
        path and its row-by-row lock order.
        """
        params = {
            "tids": [held.tid for held in unresolved],
            "stages": STAGE_VALUES,
            "conflict_code": Code.IDEMPOTENCY_CONFLICT,
            "conflict_message": CATALOG[Code.IDEMPOTENCY_CONFLICT][1],
            "legacy_code": Code.LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING,
            "legacy_message": CATALOG[Code.LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING][1],
        }
        try:
            with transaction.atomic(using=self.using):
                converged, conflicted, codes = execute(
                    cursor,
                    promotion_queries.CONVERGE_BATCH,
                    params,
                    context="converge job enqueue intents",
                ).fetchone()
        except RunledgerError as error:
            self._propagate_if_fatal(error)
            return unresolved
        self.counts.existing_jobs += len(converged)
        self.counts.conflicted += len(conflicted)
        for intent_id, code in zip(conflicted, codes, strict=True):
            _warn(intent_id, code, None, "conflicted")
        settled = {*converged, *conflicted}
        return [held for held in unresolved if held.intent_id not in settled]

    def _propagate_if_fatal(self, error: RunledgerError) -> FailureAction:
        cause = error.__cause__
        if self.budget is not None and self.budget.expired():
            raise _budget_exhausted(sqlstate=error.sqlstate) from cause
        action = failure_action(error)
        if action == "propagate":
            raise error
        return action

    def _promote_one(self, cursor: CursorWrapper, candidate: _Candidate) -> None:
        try:
            with transaction.atomic(using=self.using):
                if candidate.invalid is not None:
                    raise candidate.invalid
                assert candidate.request is not None  # noqa: S101  (decoded above)
                self._check_snapshot(cursor, candidate)
                resolution = enqueue_from_intent(cursor, candidate.request)
                if isinstance(resolution, Enqueued):
                    self._transition(
                        cursor,
                        promotion_queries.MARK_PROMOTED,
                        {**candidate.row_key, "job_id": resolution.outcome.job_id},
                    )
        except RunledgerError as error:
            if self._propagate_if_fatal(error) == "conflicted":
                self._mark_conflicted(cursor, candidate, error)
            else:
                self._mark_deferred(cursor, candidate, error)
            return
        if isinstance(resolution, Enqueued):
            if resolution.outcome.disposition == "inserted":
                self.counts.inserted_jobs += 1
            else:
                self.counts.existing_jobs += 1
        elif isinstance(resolution, DefinitionUnavailable):
            # Disabled or deleted after selection: untouched, no attempt consumed.
            self.counts.definition_became_unavailable += 1
            _warn(candidate.intent_id, resolution.code, None, "definition_became_unavailable")
        elif isinstance(resolution, EnqueueConflict):
            self._transition(
                cursor,
                promotion_queries.MARK_CONFLICTED,
                {
                    **candidate.row_key,
                    "code": resolution.code,
                    "message": resolution.client_message,
                },
            )
            self.counts.conflicted += 1
            _warn(candidate.intent_id, resolution.code, None, "conflicted")

    def _check_snapshot(self, cursor: CursorWrapper, candidate: _Candidate) -> None:
        assert candidate.request is not None  # noqa: S101
        row = execute(
            cursor,
            promotion_queries.INTENT_SNAPSHOT_MATCHES,
            {**candidate.row_key, "snapshot": candidate.request.snapshot_json},
            context="compare job enqueue intent snapshot",
        ).fetchone()
        if not (row and row[0]):
            raise RunledgerError.for_code(
                Code.INTENT_SNAPSHOT_MISMATCH,
                f"intent {candidate.intent_id} columns differ from its request snapshot",
            )

    def _mark_conflicted(
        self, cursor: CursorWrapper, candidate: _Candidate, error: RunledgerError
    ) -> None:
        self._transition(
            cursor,
            promotion_queries.MARK_CONFLICTED,
            {**candidate.row_key, "code": error.code, "message": error.client_message},
        )
        self.counts.conflicted += 1
        _warn(candidate.intent_id, error.code, error, "conflicted")

    def _mark_deferred(
        self, cursor: CursorWrapper, candidate: _Candidate, error: RunledgerError
    ) -> None:
        self._transition(
            cursor,
            promotion_queries.MARK_RETRY_DEFERRED,
            {**candidate.row_key, "code": error.code, "message": error.client_message},
        )
        self.counts.retry_deferred += 1
        _warn(candidate.intent_id, error.code, error, "retry_deferred")

    @staticmethod
    def _transition(cursor: CursorWrapper, sql: str, params: dict[str, Any]) -> None:
        """Every lifecycle transition must touch exactly one PENDING row."""
        affected = execute(cursor, sql, params, context="transition job enqueue intent").rowcount
        if affected != 1:
            raise RunledgerError.for_code(
                Code.INTENT_TRANSITION_FAILED,
                f"intent {params['id']} transition touched {affected} rows",
            )


def _warn(intent_id: uuid.UUID, code: str, error: RunledgerError | None, outcome: str) -> None:
    fields = {
        "intent_id": str(intent_id),
        "error_code": code,
        "error_sqlstate": (error.sqlstate if error else None) or "none",
        "error_constraint": (error.constraint if error else None) or "none",
        "promotion_outcome": outcome,
    }
    logger.warning(
        "durable job enqueue intent promotion did not complete intent_id=%s error_code=%s "
        "error_sqlstate=%s error_constraint=%s promotion_outcome=%s",
        *fields.values(),
        extra={"runledger": fields},
    )


def _decode(row: tuple[Any, ...]) -> _Candidate:
    """Rebuild the enqueue request from a claimed row's columns (reference 4.4 step 9a)."""
    (
        intent_id,
        tid,
        job_type,
        organization_id,
        payload_text,
        priority,
        max_attempts,
        timeout_seconds,
        next_run_at,
        idempotency_key,
        stage,
        execution_resource_key,
        _snapshot_text,
        trace_context,
    ) = row
    try:
        checked_type = validate_job_type(job_type, persisted_row=True)
        checked_stage = validate_stage(stage, persisted_row=True)
        resource_key = validate_execution_resource_key(execution_resource_key)
        snapshot = canonical_snapshot_json(
            payload_json=payload_text,
            priority=priority,
            max_attempts=max_attempts,
            timeout_seconds=timeout_seconds,
            next_run_at=next_run_at,
            stage=checked_stage,
            execution_resource_key=resource_key,
        )
    except RunledgerError as error:
        return _Candidate(intent_id=intent_id, tid=tid, request=None, invalid=error)
    except (TypeError, ValueError):
        return _Candidate(
            intent_id=intent_id,
            tid=tid,
            request=None,
            invalid=RunledgerError.for_code(
                Code.ENQUEUE_REQUEST_SNAPSHOT_FAILED, f"intent {intent_id} snapshot failed"
            ),
        )
    request = EnqueueRequest(
        job_type=checked_type,
        organization_id=organization_id,
        payload_json=payload_text,
        priority=priority,
        max_attempts=max_attempts,
        timeout_seconds=timeout_seconds,
        next_run_at=next_run_at,
        idempotency_key=idempotency_key,
        stage=checked_stage,
        execution_resource_key=resource_key,
        snapshot_json=snapshot,
        trace_context=trace_context,
    )
    return _Candidate(intent_id=intent_id, tid=tid, request=request, invalid=None)
