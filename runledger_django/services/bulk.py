"""The bulk producers: ``record_intents`` and ``enqueue_jobs`` (SPEC "Public API").

A batch behaves as the same single calls made one after another in one transaction, except
that it is all or nothing: every request is validated before any SQL, and a request that would
have raised (a conflict, a missing definition) refuses the whole batch with the error naming its
index, leaving nothing written and the caller's transaction usable. It costs a constant number
of statements whatever its size: one insert for every row, then, only when some request
inserted nothing, one lookup of the existing rows (and for intents, one more insert and lookup
when a row vanished in between, as ``record_intent``'s second attempt).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper

from ..db import bulk_queries
from ..db.transaction import ensure_read_committed, execute
from ..domain import (
    EnqueueOutcome,
    EnqueueRequest,
    IntentOutcome,
    IntentRequest,
    IntentStatus,
    JobRequest,
    JobStatus,
)
from ..errors import Code, RunledgerError
from ..uuid7 import uuid7_many
from ..validation import encode_payload, prepare_enqueue, validate_idempotency_key
from . import tracing
from ._owned import in_owned_transaction
from .intents import decode_outcome_status
from .wakeup import INTENTS_CHANNEL, JOBS_CHANNEL, wake_after_commit

DEFAULT_USING = "default"

MAX_BATCH_SIZE = 10_000
"""Most requests per call."""
MAX_BATCH_TEXT = 64 * 1024 * 1024
"""Most characters of JSON (payloads and their snapshots) per call: the batch travels as JSON
texts that PostgreSQL parses as jsonb, whose values stop at 256 MB (4 bytes a character at
most)."""

T = TypeVar("T")


def record_intents(
    requests: Sequence[IntentRequest], *, using: str = DEFAULT_USING
) -> list[IntentOutcome]:
    """Record many intents at once: ``record_intent`` for each request, in one transaction.

    Returns one outcome per request, in order. A later request under a key seen earlier in the
    batch converges on the earlier one (``disposition="existing"``, the same intent) or, if it
    names a different request, is a conflict exactly as in a later call.

    Transaction: as ``record_intent`` (joins the caller's READ COMMITTED transaction, else owns
    one). Inside the caller's, the batch runs in a savepoint, so a refused batch leaves nothing.

    Raises:
        RunledgerError: ``job.batch_too_large`` above 10,000 requests or 64 MiB of JSON
            (payloads and snapshots); any error
            ``record_intent`` raises, with ``request_index`` naming the request (validation
            before any SQL).
    """
    prepared = _prepared(requests, IntentRequest, for_intent=True)
    if not prepared.requests:
        return []
    job_types = {request.job_type for request in prepared.requests}
    return tracing.produce_batch(
        "create",
        "record_intents",
        job_types,
        len(prepared.requests),
        lambda trace_context: _IntentBatch(prepared, trace_context).run(using),
    )


def enqueue_jobs(
    requests: Sequence[JobRequest], *, using: str = DEFAULT_USING
) -> list[EnqueueOutcome]:
    """Enqueue many jobs at once: ``enqueue_job`` for each request, in one transaction.

    Returns one outcome per request, in order; keyed duplicates inside the batch converge or
    conflict as across calls, unkeyed requests always insert. Idle workers are woken once after
    the commit.

    Transaction: as ``enqueue_job``; a batch with a keyed request requires READ COMMITTED.
    Inside the caller's transaction the batch runs in a savepoint, so a refused batch leaves
    nothing.

    Raises:
        RunledgerError: ``job.batch_too_large`` above 10,000 requests or 64 MiB of JSON
            (payloads and snapshots); any error
            ``enqueue_job`` raises, with ``request_index`` naming the request (validation
            before any SQL).
    """
    prepared = _prepared(requests, JobRequest, for_intent=False)
    if not prepared.requests:
        return []
    job_types = {request.job_type for request in prepared.requests}
    return tracing.produce_batch(
        "send",
        "enqueue_jobs",
        job_types,
        len(prepared.requests),
        lambda trace_context: _JobBatch(prepared, trace_context).run(using),
    )


# --- validation -------------------------------------------------------------------------------


class _Prepared(NamedTuple):
    """A validated batch: each request, the JSON text of its scalar columns but the id and the
    key (``_options_json``), and its snapshot without the payload (``"null"`` when none)."""

    requests: list[EnqueueRequest]
    options: list[str]
    rests: list[str]


class _Options(NamedTuple):
    """What every request with the same options shares: their validated values, the JSON of
    the scalar columns, and the snapshot's text after the payload."""

    template: EnqueueRequest
    json: str
    suffix: str
    """The canonical snapshot after its payload: ``,"priority":...}``."""
    rest: str
    """The same as an object of its own: ``{"priority":...}``."""


def _options_key(request: IntentRequest | JobRequest) -> tuple[object, ...]:
    """The options of a request, each with its type (``1`` and ``True`` validate differently
    but compare equal): the key under which a batch remembers their validation."""
    return (
        type(request.job_type),
        request.job_type,
        type(request.organization_id),
        request.organization_id,
        type(request.priority),
        request.priority,
        type(request.max_attempts),
        request.max_attempts,
        type(request.timeout_seconds),
        request.timeout_seconds,
        type(request.next_run_at),
        request.next_run_at,
        type(request.stage),
        request.stage,
        type(request.execution_resource_key),
        request.execution_resource_key,
    )


def _options_json(r: EnqueueRequest) -> str:
    """The scalar columns but the id and the key, as the items of a JSON array (the statement
    reads them by position: db/bulk_queries.py ``_REQUESTED``)."""
    return json.dumps(
        [
            r.job_type,
            None if r.organization_id is None else str(r.organization_id),
            r.priority,
            r.max_attempts,
            r.timeout_seconds,
            None if r.next_run_at is None else r.next_run_at.isoformat(),
            r.stage,
            r.execution_resource_key,
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )[1:-1]


def _prepared(
    requests: object, kind: type[IntentRequest] | type[JobRequest], *, for_intent: bool
) -> _Prepared:
    """Every request validated, or the first bad one's error naming its index (no SQL yet).

    A batch usually repeats its options (the same job type, organization, priority...) and
    varies only the payload and the key, so the options are validated once per distinct set:
    a later request with the same ones checks only its key and payload, in the order
    ``prepare_enqueue`` checks them, and shares the snapshot's tail and the columns' JSON.
    """
    if not isinstance(requests, list | tuple):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"requests must be a list of {kind.__name__}"
        )
    if len(requests) > MAX_BATCH_SIZE:
        raise RunledgerError.for_code(
            Code.BATCH_TOO_LARGE,
            f"{len(requests)} requests in one batch; at most {MAX_BATCH_SIZE}",
        )
    batch = _Prepared([], [], [])
    memo: dict[tuple[object, ...], _Options] = {}
    text = 0
    for index, request in enumerate(requests):
        if not isinstance(request, kind):
            raise RunledgerError.for_code(
                Code.INVALID_ARGUMENT, f"requests[{index}] is not a {kind.__name__}"
            ).at_request(index)
        try:
            options_key: tuple[object, ...] | None = _options_key(request)
            try:
                options = memo.get(options_key)  # type: ignore[arg-type]
            except Exception:  # an unhashable or odd value: validate it in full, unremembered
                options, options_key = None, None
            if options is None:
                prepared = prepare_enqueue(
                    request.job_type,
                    request.payload,
                    idempotency_key=request.idempotency_key,
                    organization_id=request.organization_id,
                    priority=request.priority,
                    max_attempts=request.max_attempts,
                    timeout_seconds=request.timeout_seconds,
                    next_run_at=request.next_run_at,
                    stage=request.stage,
                    execution_resource_key=request.execution_resource_key,
                    for_intent=for_intent,
                )
                rest = _snapshot_rest(prepared)
                options_json = _options_json(prepared)
                if options_key is not None and prepared.snapshot_json:
                    memo[options_key] = _Options(prepared, options_json, "," + rest[1:], rest)
            else:
                key = request.idempotency_key
                if key is not None or for_intent:
                    key = validate_idempotency_key(key, for_intent=for_intent)
                payload_json = encode_payload(request.payload)
                template = options.template
                snapshot = "" if key is None else _PAYLOAD_HEAD + payload_json + options.suffix
                prepared = EnqueueRequest(
                    job_type=template.job_type,
                    organization_id=template.organization_id,
                    payload_json=payload_json,
                    priority=template.priority,
                    max_attempts=template.max_attempts,
                    timeout_seconds=template.timeout_seconds,
                    next_run_at=template.next_run_at,
                    idempotency_key=key,
                    stage=template.stage,
                    execution_resource_key=template.execution_resource_key,
                    snapshot_json=snapshot,
                )
                options_json = options.json
                rest = "null" if key is None else options.rest
        except RunledgerError as error:
            raise error.at_request(index) from None
        batch.requests.append(prepared)
        batch.options.append(options_json)
        batch.rests.append(rest)
        text += len(prepared.payload_json) + len(prepared.snapshot_json)
    if text > MAX_BATCH_TEXT:
        raise RunledgerError.for_code(
            Code.BATCH_TOO_LARGE,
            f"{text} characters of payload and snapshot JSON in one batch; at most "
            f"{MAX_BATCH_TEXT}",
        )
    return batch


# --- transactions -----------------------------------------------------------------------------


def _in_transaction(using: str, body: Callable[[CursorWrapper], T], *, operation: str) -> T:
    """Run ``body`` all or nothing: in a savepoint of the caller's transaction when there is
    one (a refused batch rolls back to it, the caller's work stays), else in an owned READ
    COMMITTED transaction."""
    connection = connections[using]
    if connection.in_atomic_block:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            return body(cursor)
    if not connection.get_autocommit():
        # Manual transaction management: the caller's transaction, without an atomic block.
        savepoint = connection.savepoint()
        assert savepoint is not None  # noqa: S101  (autocommit is off: savepoints are allowed)
        try:
            with connection.cursor() as cursor:
                result = body(cursor)
        except BaseException:
            connection.savepoint_rollback(savepoint)
            raise
        connection.savepoint_commit(savepoint)
        return result
    return in_owned_transaction(using, body, operation=operation)


def _rows(batch: _Prepared, ords: Sequence[int] | None, ids: Sequence[uuid.UUID]) -> dict[str, Any]:
    """The requests at ``ords`` (1-based; None: all of them) under ``ids``, as the three JSON
    texts the statements expand into rows (db/bulk_queries.py): each request's id, key and
    scalar columns, its payload and the rest of its snapshot."""
    requests, options, rests = batch
    chosen = range(len(requests)) if ords is None else [o - 1 for o in ords]
    heads = ",".join(
        [
            '["'
            + str(intent_id)
            + '",'
            + ("null" if (key := requests[i].idempotency_key) is None else _quote(key))
            + ","
            + options[i]
            + "]"
            for i, intent_id in zip(chosen, ids, strict=True)
        ]
    )
    return {
        "heads": "[" + heads + "]",
        "payloads": "[" + ",".join([requests[i].payload_json for i in chosen]) + "]",
        "rests": "[" + ",".join([rests[i] for i in chosen]) + "]",
    }


def _snapshot_rest(request: EnqueueRequest) -> str:
    """The snapshot without its payload, as a JSON object (``null`` when there is none): the
    canonical snapshot's text starts with the payload under ``"payload"``
    (validation.canonical_snapshot_json), and the statement puts it back."""
    snapshot = request.snapshot_json
    if not snapshot:
        return "null"
    end = len(_PAYLOAD_HEAD) + len(request.payload_json)
    if not snapshot.startswith(_PAYLOAD_HEAD) or snapshot[end] != ",":
        raise RunledgerError.for_code(
            Code.ENQUEUE_REQUEST_SNAPSHOT_FAILED, "snapshot text does not lead with its payload"
        )
    return "{" + snapshot[end + 1 :]


_PAYLOAD_HEAD = '{"payload":'
_quote = json.encoder.encode_basestring
"""A JSON string for a str, as the payload encoder writes it (no ASCII escaping)."""


def _lookup(requests: Sequence[EnqueueRequest], ords: Sequence[int]) -> dict[str, Any]:
    """The keys and snapshots of the requests at ``ords`` (1-based), for a lookup."""
    chosen = [(ord_, requests[ord_ - 1]) for ord_ in ords]
    heads = json.dumps(
        [
            [
                ord_,
                r.job_type,
                None if r.organization_id is None else str(r.organization_id),
                r.idempotency_key,
            ]
            for ord_, r in chosen
        ],
        separators=(",", ":"),
    )
    return {
        "heads": heads,
        "snapshots": "[" + ",".join([r.snapshot_json for _, r in chosen]) + "]",
    }


def _ids_in_key_order(requests: Sequence[EnqueueRequest]) -> list[uuid.UUID]:
    """Fresh UUIDv7s, ascending in the order the statement inserts the rows (key order, as
    db/bulk_queries.py sorts them): each index that ends in the id (the primary key, the
    pending and newest-first indexes) then takes the batch as appends at its right edge
    instead of scattering it over its last pages, which costs a fifth of the insert.

    Python's str order is code point order, which is UTF-8 byte order (``COLLATE "C"``), and
    UUIDs compare as their 128-bit integers, as PostgreSQL compares uuid."""
    fresh = uuid7_many(len(requests))
    order = sorted(
        range(len(requests)),
        key=lambda i: (
            requests[i].organization_id is not None,
            requests[i].job_type,
            requests[i].organization_id or _NIL,
            requests[i].idempotency_key or "",
            i,
        ),
    )
    ids = fresh[:]
    for position, index in enumerate(order):
        ids[index] = fresh[position]
    return ids


_NIL = uuid.UUID(int=0)


def _refuse(errors: dict[int, RunledgerError]) -> None:
    """Raise the error of the earliest request, as a loop of single calls would have."""
    if errors:
        first = min(errors)
        raise errors[first].at_request(first - 1)


# --- intents ----------------------------------------------------------------------------------


class _IntentBatch:
    """One ``record_intents`` call: its requests, their ids, the outcomes found so far."""

    def __init__(self, batch: _Prepared, trace_context: str | None) -> None:
        self.batch = batch
        self.requests = requests = batch.requests
        self.ids = _ids_in_key_order(requests)
        self.trace_context = trace_context
        self.outcomes: list[IntentOutcome | None] = [None] * len(requests)

    def run(self, using: str) -> list[IntentOutcome]:
        _in_transaction(using, self._record, operation="record job enqueue intents")
        if any(o is not None and o.disposition == "inserted" for o in self.outcomes):
            wake_after_commit(using, INTENTS_CHANNEL)
        return [o for o in self.outcomes if o is not None]

    def _record(self, cursor: CursorWrapper) -> None:
        """Reference 4.2 for every request: insert, then resolve what inserted nothing; a row
        gone between the two statements is inserted once more, as ``record_intent`` does."""
        pending = list(range(1, len(self.requests) + 1))
        for attempt in (1, 2):
            pending = self._insert(cursor, pending)
            if not pending:
                return
            if attempt == 1:
                ensure_read_committed(
                    cursor,
                    operation="record job enqueue intents",
                    code=Code.INTENT_IDEMPOTENCY_UNSUPPORTED_ISOLATION,
                )
            pending = self._resolve(cursor, pending)
            if not pending:
                return
        _refuse(
            {
                ord_: RunledgerError.for_code(
                    Code.INTENT_IDEMPOTENCY_CONFLICT_MISSING_EXISTING,
                    f"intent of type {self.requests[ord_ - 1].job_type!r} vanished twice "
                    "before it could be resolved",
                )
                for ord_ in pending
            }
        )

    def _insert(self, cursor: CursorWrapper, ords: list[int]) -> list[int]:
        """Insert the requests at ``ords``; return those that inserted nothing."""
        every = len(ords) == len(self.requests)
        ids = self.ids if every else [self.ids[o - 1] for o in ords]
        params = _rows(self.batch, None if every else ords, ids)
        params["trace_context"] = self.trace_context
        rows = execute(
            cursor, bulk_queries.RECORD_INTENTS, params, context="record job enqueue intents"
        ).fetchall()
        inserted = {row[0] for row in rows}
        left: list[int] = []
        for ord_ in ords:
            intent_id = self.ids[ord_ - 1]
            if intent_id in inserted:
                self.outcomes[ord_ - 1] = IntentOutcome(
                    intent_id=intent_id,
                    status=IntentStatus.PENDING,
                    job_id=None,
                    disposition="inserted",
                )
            else:
                left.append(ord_)
        return left

    def _resolve(self, cursor: CursorWrapper, ords: list[int]) -> list[int]:
        """Resolve the requests at ``ords`` against the rows holding their keys; return those
        whose row was not found. A different request under a key is a conflict."""
        rows = execute(
            cursor,
            bulk_queries.FIND_EXISTING_INTENTS,
            _lookup(self.requests, ords),
            context="resolve job enqueue intents",
        ).fetchall()
        errors: dict[int, RunledgerError] = {}
        for ord_, intent_id, status, promoted_job_id, same in rows:
            if not same:
                errors[ord_] = RunledgerError.for_code(
                    Code.INTENT_IDEMPOTENCY_CONFLICT,
                    f"intent of type {self.requests[ord_ - 1].job_type!r} names a different "
                    "request",
                )
                continue
            self.outcomes[ord_ - 1] = IntentOutcome(
                intent_id=intent_id,
                status=decode_outcome_status(status, promoted_job_id),
                job_id=promoted_job_id,
                disposition="existing",
            )
        _refuse(errors)
        found = {row[0] for row in rows}
        return [ord_ for ord_ in ords if ord_ not in found]


# --- jobs -------------------------------------------------------------------------------------


class _JobBatch:
    """One ``enqueue_jobs`` call: its requests, their ids, the outcomes found so far."""

    def __init__(self, batch: _Prepared, trace_context: str | None) -> None:
        self.batch = batch
        self.requests = requests = batch.requests
        self.ids = uuid7_many(len(requests))
        self.trace_context = trace_context
        self.outcomes: list[EnqueueOutcome | None] = [None] * len(requests)
        self.keyed = any(r.idempotency_key is not None for r in requests)

    def run(self, using: str) -> list[EnqueueOutcome]:
        _in_transaction(using, self._enqueue, operation="enqueue jobs")
        if any(o is not None and o.disposition == "inserted" for o in self.outcomes):
            wake_after_commit(using, JOBS_CHANNEL)
        return [o for o in self.outcomes if o is not None]

    def _enqueue(self, cursor: CursorWrapper) -> None:
        """Reference 3.4 for every request: insert, then resolve the keyed requests that
        inserted nothing; an unkeyed one that inserted nothing had no enabled definition."""
        params = _rows(self.batch, None, self.ids)
        params["trace_context"] = self.trace_context
        params["definition_types"] = sorted({r.job_type for r in self.requests})
        params["require_read_committed"] = self.keyed
        rows = execute(cursor, bulk_queries.ENQUEUE_JOBS, params, context="enqueue jobs").fetchall()
        ord_of = {job_id: index + 1 for index, job_id in enumerate(self.ids)}
        for job_id, status, run_number in rows:
            self.outcomes[ord_of[job_id] - 1] = EnqueueOutcome(
                job_id=job_id,
                status=JobStatus(status),
                run_number=run_number,
                disposition="inserted",
            )
        left = [index + 1 for index, o in enumerate(self.outcomes) if o is None]
        if not left:
            return
        if self.keyed:
            ensure_read_committed(
                cursor,
                operation="keyed job enqueue",
                code=Code.ENQUEUE_IDEMPOTENCY_UNSUPPORTED_ISOLATION,
            )
        errors: dict[int, RunledgerError] = {}
        keyed_left: list[int] = []
        for ord_ in left:
            request = self.requests[ord_ - 1]
            if request.idempotency_key is None:
                errors[ord_] = _unavailable(request)
            else:
                keyed_left.append(ord_)
        if keyed_left:
            errors.update(self._resolve(cursor, keyed_left))
        _refuse(errors)

    def _resolve(self, cursor: CursorWrapper, ords: list[int]) -> dict[int, RunledgerError]:
        """Resolve keyed requests against their existing jobs (converge, conflict or explain
        why); return the errors by position."""
        rows = execute(
            cursor,
            bulk_queries.FIND_EXISTING_JOBS,
            _lookup(self.requests, ords),
            context="resolve keyed jobs",
        ).fetchall()
        errors: dict[int, RunledgerError] = {}
        for ord_, job_id, status, run_number, same, legacy in rows:
            job_type = self.requests[ord_ - 1].job_type
            if legacy:
                errors[ord_] = RunledgerError.for_code(
                    Code.LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING,
                    f"keyed job {job_id} of type {job_type!r} has no request snapshot",
                )
            elif not same:
                errors[ord_] = RunledgerError.for_code(
                    Code.IDEMPOTENCY_CONFLICT,
                    f"keyed job of type {job_type!r} names a different request",
                )
            else:
                try:
                    job_status = JobStatus(status)
                except ValueError:
                    errors[ord_] = RunledgerError.for_code(
                        Code.INVALID_STATUS, f"job {job_id} has status {status!r}"
                    )
                    continue
                self.outcomes[ord_ - 1] = EnqueueOutcome(
                    job_id=job_id, status=job_status, run_number=run_number, disposition="existing"
                )
        found = {row[0] for row in rows}
        missing = [ord_ for ord_ in ords if ord_ not in found]
        if missing:
            types = sorted({self.requests[o - 1].job_type for o in missing})
            enabled = {
                row[0]
                for row in execute(
                    cursor,
                    bulk_queries.ENABLED_DEFINITIONS,
                    {"job_types": types},
                    context="check job definitions",
                ).fetchall()
            }
            for ord_ in missing:
                request = self.requests[ord_ - 1]
                if request.job_type in enabled:
                    errors[ord_] = RunledgerError.for_code(
                        Code.IDEMPOTENCY_CONFLICT_MISSING_EXISTING,
                        f"keyed job of type {request.job_type!r} vanished before it could be "
                        "resolved",
                    )
                else:
                    errors[ord_] = _unavailable(request)
        return errors


def _unavailable(request: EnqueueRequest) -> RunledgerError:
    return RunledgerError.for_code(
        Code.DEFINITION_NOT_FOUND_OR_DISABLED,
        f"job type {request.job_type!r} has no enabled definition",
    )
