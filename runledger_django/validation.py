"""Pure input rules: blank checks, storable values, and the canonical request snapshot v1.

Everything here runs before any SQL, so bad input never reaches PostgreSQL as a raw error and
the caller's transaction stays usable.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from .domain import (
    PAGE_LIMIT_MAX,
    RATE_LIMIT_COUNT_MAX,
    EnqueueRequest,
    IntentStatus,
    JobStage,
    coerce_uuid,
    format_timestamp,
)
from .errors import Code, RunledgerError

# Rust's str::trim (Unicode White_Space), not Python's isspace(), which also counts
# U+001C..U+001F; the database CHECKs use the same set (reference 10.5).
WHITESPACE = frozenset(
    [chr(c) for c in range(0x09, 0x0E)]
    + [" ", "\u0085", "\u00a0", "\u1680"]
    + [chr(c) for c in range(0x2000, 0x200B)]
    + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
)

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
JOB_TYPE_MAX_BYTES = 255
IDEMPOTENCY_KEY_MAX_BYTES = 1024
"""With the job type and organization id this keeps unique-index entries under btree's limit."""
EXECUTION_RESOURCE_KEY_MAX_BYTES = 512
PAYLOAD_MAX_DEPTH = 256
PAYLOAD_MAX_BYTES = 64 * 1024 * 1024
"""jsonb stops at 255 MB and the payload is stored twice (column and snapshot)."""
SEARCH_QUERY_MAX_CHARS = 255
STAGES = frozenset(stage.value for stage in JobStage)
STORED_TIME_MIN = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
STORED_TIME_MAX = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)
"""The exclusive upper bound of a stored time. Both bounds sit a day inside Python's datetime
range, so any time zone's local time of a stored value is a datetime too; the tables' CHECKs
(migration 0007) refuse what lies outside."""


def is_blank(value: str) -> bool:
    """True when every character is Unicode White_Space (or there are none)."""
    # Almost every value starts with a visible character: answer without walking it.
    return not value or (value[0] in WHITESPACE and all(char in WHITESPACE for char in value))


def utf8_length(value: str) -> int:
    """The length of ``value`` in UTF-8 bytes, without encoding ASCII text."""
    return len(value) if value.isascii() else len(value.encode("utf-8"))


def _storable_text_problem(value: str) -> str | None:
    """Why PostgreSQL's text type cannot hold ``value``, or None."""
    if "\x00" in value:
        return "contains NUL"
    if value.isascii():  # no surrogate can hide in ASCII: skip the trial encoding
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate"
    return None


def storable_text(value: str) -> bool:
    """Whether PostgreSQL's text type can hold ``value`` (no NUL, no lone surrogate)."""
    return _storable_text_problem(value) is None


def _text(value: object, code: Code, field: str, *, persisted_row: bool = False) -> str:
    if not isinstance(value, str):
        raise RunledgerError.for_code(code, f"{field} must be a string, got {type(value).__name__}")
    text = str(value)  # a StrEnum member becomes its value
    problem = _storable_text_problem(text)
    if problem:
        raise RunledgerError.for_code(code, f"{field} {problem}", persisted_row=persisted_row)
    return text


def validate_job_type(value: object, *, persisted_row: bool = False) -> str:
    job_type = _text(value, Code.INVALID_JOB_TYPE, "job_type", persisted_row=persisted_row)
    if is_blank(job_type):
        raise RunledgerError.for_code(
            Code.INVALID_JOB_TYPE,
            "job enqueue intent job_type was blank",
            persisted_row=persisted_row,
        )
    # A persisted row already fit its unique index: the limit guards new requests only, so a
    # long type written before (or around) it is promoted, not deferred forever.
    if not persisted_row and utf8_length(job_type) > JOB_TYPE_MAX_BYTES:
        raise RunledgerError.for_code(
            Code.INVALID_JOB_TYPE_LENGTH, f"job_type longer than {JOB_TYPE_MAX_BYTES} bytes"
        )
    return job_type


def validate_idempotency_key(value: object, *, for_intent: bool) -> str:
    code = Code.INTENT_INVALID_IDEMPOTENCY_KEY if for_intent else Code.INVALID_IDEMPOTENCY_KEY
    key = _text(value, code, "idempotency_key")
    if is_blank(key):
        raise RunledgerError.for_code(code, "idempotency key was blank")
    if utf8_length(key) > IDEMPOTENCY_KEY_MAX_BYTES:
        raise RunledgerError.for_code(
            Code.INVALID_IDEMPOTENCY_KEY_LENGTH,
            f"idempotency key longer than {IDEMPOTENCY_KEY_MAX_BYTES} bytes",
        )
    return key


def _int32(value: object, code: Code, field: str, *, positive: bool) -> int | None:
    if value is None:
        return None
    # bool is an int subclass; True as a priority is a bug, not a 1.
    if type(value) is not int:
        raise RunledgerError.for_code(code, f"{field} must be an int, got {type(value).__name__}")
    if not INT32_MIN <= value <= INT32_MAX or (positive and value <= 0):
        raise RunledgerError.for_code(code, f"{field} out of range")
    return value


PAUSE_NOTE_MAX_CHARS = 500


def validate_pause_note(value: object, field: str) -> str | None:
    """A pause's reason or actor: None, or short storable text."""
    if value is None:
        return None
    text = _text(value, Code.DEFINITION_INVALID_PAUSE_NOTE, field)
    if is_blank(text) or len(text) > PAUSE_NOTE_MAX_CHARS:
        raise RunledgerError.for_code(
            Code.DEFINITION_INVALID_PAUSE_NOTE,
            f"{field} must be 1 to {PAUSE_NOTE_MAX_CHARS} non-blank characters",
        )
    return text


def validate_limits(
    max_concurrency: object, rate_limit: object
) -> tuple[int | None, int | None, int | None]:
    """A job type's limits as the definition stores them: (max_concurrency, rate count,
    rate period seconds), each None or a positive 32-bit int; ``rate_limit`` is None or a
    (count, period_seconds) pair."""
    code = Code.DEFINITION_INVALID_LIMIT
    concurrency = _int32(max_concurrency, code, "max_concurrency", positive=True)
    if rate_limit is None:
        return concurrency, None, None
    if not isinstance(rate_limit, tuple | list) or len(rate_limit) != 2:
        raise RunledgerError.for_code(
            code, "rate_limit must be None or a (count, period_seconds) pair"
        )
    count = _int32(rate_limit[0], code, "rate_limit count", positive=True)
    period = _int32(rate_limit[1], code, "rate_limit period_seconds", positive=True)
    if count is None or period is None:
        raise RunledgerError.for_code(code, "rate_limit needs both a count and a period")
    if count > RATE_LIMIT_COUNT_MAX:
        raise RunledgerError.for_code(
            code, f"rate_limit count above {RATE_LIMIT_COUNT_MAX}: use a shorter period"
        )
    return concurrency, count, period


def validate_organization_id(value: object) -> uuid.UUID | None:
    return None if value is None else coerce_uuid(value)


def aware_utc(value: object, code: Code, field: str) -> dt.datetime:
    """Return ``value`` as an aware datetime in UTC, or raise ``code``.

    Naive values, tzinfos whose offsets Python refuses (a bad ``utcoffset()`` raises ValueError
    or TypeError) and instants that leave the representable range are all rejected.
    """
    if not isinstance(value, dt.datetime):
        raise RunledgerError.for_code(
            code, f"{field} must be a datetime, got {type(value).__name__}"
        )
    try:
        if value.utcoffset() is None:
            raise RunledgerError.for_code(code, f"{field} is naive")
        return value.astimezone(dt.UTC)
    except (ValueError, TypeError, OverflowError) as exc:
        raise RunledgerError.for_code(
            code, f"{field} has an unusable offset ({type(exc).__name__})"
        ) from None


def storable_time(value: object, code: Code, field: str) -> dt.datetime:
    """Return ``value`` as an aware UTC datetime the tables can store, or raise ``code``.

    Refused here rather than by the CHECK, so the caller's transaction stays usable.
    """
    checked = aware_utc(value, code, field)
    if not STORED_TIME_MIN <= checked < STORED_TIME_MAX:
        raise RunledgerError.for_code(code, f"{field} is outside the storable range")
    return checked


def validate_next_run_at(value: object) -> dt.datetime | None:
    if value is None:
        return None
    return storable_time(value, Code.INVALID_NEXT_RUN_AT, "next_run_at")


def validate_stage(value: object, *, persisted_row: bool = False) -> str:
    if value is None:
        return JobStage.QUEUED.value
    if isinstance(value, str) and str(value) in STAGES:
        return str(value)
    raise RunledgerError.for_code(
        Code.INVALID_STAGE, "stage is not a known JobStage", persisted_row=persisted_row
    )


def validate_execution_resource_key(value: object) -> str | None:
    if value is None:
        return None
    code = Code.INVALID_EXECUTION_RESOURCE_KEY
    key = _text(value, code, "execution_resource_key")
    if is_blank(key) or utf8_length(key) > EXECUTION_RESOURCE_KEY_MAX_BYTES:
        raise RunledgerError.for_code(code, "execution resource key blank or too long")
    return key


def _leaf_problem(value: object, kind: type) -> str | None:
    """Why a value that is not a container, None, a bool or an int cannot be stored, or None."""
    if kind is str:
        problem = _storable_text_problem(value)  # type: ignore[arg-type]
        return f"a string {problem}" if problem else None
    if kind is float:
        return None if math.isfinite(value) else "a float is not finite"  # type: ignore[arg-type]
    return f"contains a {kind.__name__}, which is not JSON-native"


def _payload_problem(payload: object) -> str | None:
    """Why ``payload`` is not JSON-native data that jsonb can store, or None."""
    kind = type(payload)
    if not (kind is dict or kind is list or kind is tuple):
        if payload is None or kind is bool or kind is int:
            return None
        return _leaf_problem(payload, kind)
    stack: list[tuple[object, int]] = [(payload, 0)]
    while stack:
        value, depth = stack.pop()
        if depth >= PAYLOAD_MAX_DEPTH:
            return f"nested deeper than {PAYLOAD_MAX_DEPTH} levels"
        items: Iterable[object]
        if type(value) is dict:
            for key in value:
                if type(key) is not str:
                    return f"a dict key is {type(key).__name__}, not str"
                problem = _storable_text_problem(key)
                if problem:
                    return f"a dict key {problem}"
            items = value.values()
        else:
            items = value  # type: ignore[assignment]
        for item in items:
            # Leaves are checked here rather than pushed: most of a payload is leaves.
            kind = type(item)
            if item is None or kind is bool or kind is int:
                continue
            if kind is dict or kind is list or kind is tuple:
                stack.append((item, depth + 1))
                continue
            problem = _leaf_problem(item, kind)
            if problem:
                return problem
    return None


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""Compact JSON without ASCII escaping; built once (json.dumps with options builds one a call)."""


def encode_payload(payload: object) -> str:
    """Return the payload as compact JSON text, or raise ``job.invalid_payload``."""
    problem = _payload_problem(payload)
    if problem is None:
        try:
            text = _ENCODER.encode(payload)
        except ValueError as exc:  # e.g. an int beyond the int-to-str digit limit
            problem = f"not serializable ({type(exc).__name__})"
        else:
            # A UTF-8 character takes at most 4 bytes: only long text needs encoding to count.
            if len(text) > PAYLOAD_MAX_BYTES or (
                len(text) > PAYLOAD_MAX_BYTES // 4 and len(text.encode("utf-8")) > PAYLOAD_MAX_BYTES
            ):
                problem = f"larger than {PAYLOAD_MAX_BYTES} bytes"
            else:
                return text
    raise RunledgerError.for_code(Code.INVALID_PAYLOAD, f"payload {problem}")


def _json_int(value: int | None) -> str:
    """JSON for a validated int or None (a Python int's str is its JSON number)."""
    return "null" if value is None else str(value)


_STAGE_JSON = {stage: _ENCODER.encode(stage) for stage in STAGES}


def canonical_snapshot_json(
    *,
    payload_json: str,
    priority: int | None,
    max_attempts: int | None,
    timeout_seconds: int | None,
    next_run_at: dt.datetime | None,
    stage: str,
    execution_resource_key: str | None,
) -> str:
    """Canonical enqueue request v1 (reference 3.3) as JSON text.

    Key order and spacing are fixed so the text is byte-for-byte stable; equality is still
    decided by jsonb ``=`` in PostgreSQL, which also normalises numbers.
    """
    timestamp = format_timestamp(next_run_at)
    parts = [
        '{"payload":',
        payload_json,
        ',"priority":',
        _json_int(priority),
        ',"max_attempts":',
        _json_int(max_attempts),
        ',"timeout_seconds":',
        _json_int(timeout_seconds),
        # The timestamp format has only digits and "-:.TZ": nothing to escape.
        ',"next_run_at":',
        "null" if timestamp is None else f'"{timestamp}"',
        ',"stage":',
        _STAGE_JSON.get(stage) or _ENCODER.encode(stage),
    ]
    if execution_resource_key is not None:
        parts += [',"execution_resource_key":', _ENCODER.encode(execution_resource_key)]
    parts.append("}")
    return "".join(parts)


def prepare_enqueue(
    job_type: object,
    payload: object,
    *,
    idempotency_key: object,
    organization_id: object = None,
    priority: object = None,
    max_attempts: object = None,
    timeout_seconds: object = None,
    next_run_at: object = None,
    stage: object = None,
    execution_resource_key: object = None,
    for_intent: bool,
) -> EnqueueRequest:
    """Validate a request in the reference's order and build its snapshot (reference 4.1)."""
    checked_type = validate_job_type(job_type)
    key = (
        validate_idempotency_key(idempotency_key, for_intent=for_intent)
        if idempotency_key is not None or for_intent
        else None
    )
    checked_max_attempts = _int32(
        max_attempts,
        Code.INTENT_INVALID_MAX_ATTEMPTS if for_intent else Code.INVALID_MAX_ATTEMPTS,
        "max_attempts",
        positive=True,
    )
    checked_timeout = _int32(
        timeout_seconds,
        Code.INTENT_INVALID_TIMEOUT if for_intent else Code.INVALID_TIMEOUT,
        "timeout_seconds",
        positive=True,
    )
    resource_key = validate_execution_resource_key(execution_resource_key)
    checked_stage = validate_stage(stage)
    checked_priority = _int32(priority, Code.INVALID_PRIORITY, "priority", positive=False)
    org = validate_organization_id(organization_id)
    run_at = validate_next_run_at(next_run_at)
    payload_json = encode_payload(payload)
    snapshot = None
    if key is not None:
        snapshot = canonical_snapshot_json(
            payload_json=payload_json,
            priority=checked_priority,
            max_attempts=checked_max_attempts,
            timeout_seconds=checked_timeout,
            next_run_at=run_at,
            stage=checked_stage,
            execution_resource_key=resource_key,
        )
    return EnqueueRequest(
        job_type=checked_type,
        organization_id=org,
        payload_json=payload_json,
        priority=checked_priority,
        max_attempts=checked_max_attempts,
        timeout_seconds=checked_timeout,
        next_run_at=run_at,
        idempotency_key=key,
        stage=checked_stage,
        execution_resource_key=resource_key,
        snapshot_json=snapshot or "",
    )


@dataclass(frozen=True, slots=True)
class Page:
    limit: int
    offset: int


def validate_page(limit: object, offset: object, *, max_limit: int = PAGE_LIMIT_MAX) -> Page:
    """``1 <= limit <= max_limit`` and ``offset >= 0``, else ``job.invalid_pagination``."""
    if (
        type(limit) is not int
        or type(offset) is not int
        or not 1 <= limit <= max_limit
        or not 0 <= offset <= 2**63 - 1
    ):
        raise RunledgerError.for_code(Code.INVALID_PAGINATION, "limit or offset out of range")
    return Page(limit, offset)


def validate_status_filter(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and str(value) in IntentStatus.values:
        return str(value)
    raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "status filter is not an IntentStatus")


def validate_search_text(value: object, field: str) -> str | None:
    if value is None:
        return None
    text = _text(value, Code.INVALID_ARGUMENT, field)
    if len(text) > SEARCH_QUERY_MAX_CHARS:
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, f"{field} too long")
    return text


def validate_uuid_argument(value: object, field: str) -> uuid.UUID:
    try:
        return coerce_uuid(value, Code.INVALID_ARGUMENT)
    except RunledgerError:
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, f"{field} is not a UUID") from None


def validate_job_types(values: object) -> list[str]:
    """A promotion allow-list: an iterable of job type strings (not a bare string)."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, "job_types must be an iterable of strings"
        )
    result: list[str] = []
    for value in values:
        job_type = validate_job_type(value)
        if job_type not in result:
            result.append(job_type)
    return result
