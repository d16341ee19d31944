"""Input rules that run before any SQL: blank checks, storable values, and snapshot v1."""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runledger_django import validation
from runledger_django.domain import EnqueueRequest, JobStage
from runledger_django.errors import ErrorCategory, RunledgerError
from runledger_django.models import JobDefinition
from runledger_django.validation import (
    EXECUTION_RESOURCE_KEY_MAX_BYTES,
    IDEMPOTENCY_KEY_MAX_BYTES,
    INT32_MAX,
    INT32_MIN,
    JOB_TYPE_MAX_BYTES,
    PAYLOAD_MAX_BYTES,
    PAYLOAD_MAX_DEPTH,
    WHITESPACE,
    encode_payload,
    is_blank,
    prepare_enqueue,
    validate_job_type,
    validate_job_types,
    validate_page,
    validate_stage,
)

# The reference's list (10.5): Rust's str::trim set, i.e. Unicode White_Space.
REFERENCE_WHITESPACE = frozenset(
    [chr(c) for c in range(0x09, 0x0E)]
    + ["\u0020", "\u0085", "\u00a0", "\u1680"]
    + [chr(c) for c in range(0x2000, 0x200B)]
    + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
)
# Python's str.isspace() says these are space; Rust and the database CHECKs do not.
INFORMATION_SEPARATORS = ["\x1c", "\x1d", "\x1e", "\x1f"]

GOLDEN_SCHEDULED = (
    '{"payload":{"kind":"golden"},"priority":10,"max_attempts":3,"timeout_seconds":30,'
    '"next_run_at":"2026-05-22T10:30:45.000000Z","stage":"scheduled"}'
)
GOLDEN_DEFAULT = (
    '{"payload":{"target":"same-request"},"priority":null,"max_attempts":null,'
    '"timeout_seconds":null,"next_run_at":null,"stage":"queued"}'
)


def prepare(*, for_intent: bool = True, **overrides: Any) -> EnqueueRequest:
    """prepare_enqueue with a valid request, changed by ``overrides``."""
    values: dict[str, Any] = {
        "job_type": "jobs.test.validation",
        "payload": {"ok": True},
        "idempotency_key": "key-1",
    }
    values.update(overrides)
    job_type = values.pop("job_type")
    payload = values.pop("payload")
    return prepare_enqueue(job_type, payload, for_intent=for_intent, **values)


def rejected(*, for_intent: bool = True, **overrides: Any) -> RunledgerError:
    """The validation error prepare_enqueue raises for ``overrides``."""
    with pytest.raises(RunledgerError) as info:
        prepare(for_intent=for_intent, **overrides)
    error = info.value
    assert error.category == ErrorCategory.VALIDATION
    assert error.sqlstate is None
    assert error.constraint is None
    return error


def nested_lists(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


# --- blank checks ------------------------------------------------------------------------


def test_whitespace__is_exactly_the_reference_set() -> None:
    assert WHITESPACE == REFERENCE_WHITESPACE


def test_whitespace__is_python_isspace_minus_information_separators() -> None:
    """Guards the set against a Unicode update: every other isspace() character is in it."""
    python_space = {chr(c) for c in range(0x110000) if chr(c).isspace()}
    assert python_space - set(INFORMATION_SEPARATORS) == WHITESPACE


@pytest.mark.parametrize("char", sorted(REFERENCE_WHITESPACE), ids=lambda c: f"U+{ord(c):04X}")
def test_is_blank__unicode_white_space__blank(char: str) -> None:
    assert is_blank(char)
    assert is_blank(char * 3)


@pytest.mark.parametrize(
    "value",
    [*INFORMATION_SEPARATORS, "\u200b", "\ufeff", "\u180e", "a", " a ", "\ta\u3000", "\x00"],
    ids=repr,
)
def test_is_blank__other_characters__not_blank(value: str) -> None:
    assert not is_blank(value)


def test_is_blank__empty__blank() -> None:
    assert is_blank("")


def test_is_blank__mixed_whitespace__blank() -> None:
    assert is_blank(" \t\n\u00a0\u2007\u3000\u2029")


@pytest.mark.parametrize("char", INFORMATION_SEPARATORS, ids=lambda c: f"U+{ord(c):04X}")
def test_prepare_enqueue__information_separator_values__accepted(char: str) -> None:
    """U+001C..U+001F are not White_Space, so they make a job type or key non-blank."""
    request = prepare(job_type=char, idempotency_key=char, execution_resource_key=char)
    assert (request.job_type, request.idempotency_key, request.execution_resource_key) == (
        char,
        char,
        char,
    )


# --- job type ------------------------------------------------------------------------------


@pytest.mark.parametrize("job_type", ["", " ", "\t", "\u00a0", "\u3000 \u2028"], ids=repr)
def test_prepare_enqueue__blank_job_type__invalid_job_type(job_type: str) -> None:
    error = rejected(job_type=job_type)
    assert error.code == "job.invalid_job_type"
    assert error.client_message == "Job type must not be blank."
    assert error.internal_message == "job enqueue intent job_type was blank"


@pytest.mark.parametrize(
    "job_type", [None, 1, b"jobs.x", ["jobs.x"], "jobs\x00x", "jobs.\ud800"], ids=repr
)
def test_prepare_enqueue__unstorable_job_type__invalid_job_type(job_type: object) -> None:
    assert rejected(job_type=job_type).code == "job.invalid_job_type"


def test_prepare_enqueue__job_type_at_byte_limit__accepted() -> None:
    job_type = "é" * (JOB_TYPE_MAX_BYTES // 2) + "a"
    assert len(job_type.encode()) == JOB_TYPE_MAX_BYTES
    assert prepare(job_type=job_type).job_type == job_type


def test_prepare_enqueue__job_type_over_byte_limit__invalid_job_type_length() -> None:
    """The limit counts UTF-8 bytes, not characters."""
    job_type = "é" * (JOB_TYPE_MAX_BYTES // 2 + 1)
    assert len(job_type) < JOB_TYPE_MAX_BYTES < len(job_type.encode())
    assert rejected(job_type=job_type).code == "job.invalid_job_type_length"


def test_prepare_enqueue__str_enum_job_type__stored_as_its_value() -> None:
    class JobTypes(enum.StrEnum):
        RECEIPT = "orders.send_receipt"

    request = prepare(job_type=JobTypes.RECEIPT)
    assert type(request.job_type) is str
    assert request.job_type == "orders.send_receipt"


# --- idempotency key -----------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "", "   ", "\t", "\u00a0", "\u205f"], ids=repr)
def test_prepare_enqueue__intent_without_usable_key__intent_invalid_idempotency_key(
    key: str | None,
) -> None:
    error = rejected(idempotency_key=key)
    assert error.code == "job.intent_invalid_idempotency_key"
    assert error.client_message == "Job enqueue intent idempotency key must not be blank."


@pytest.mark.parametrize("key", ["", "   ", "\u2003"], ids=repr)
def test_prepare_enqueue__enqueue_with_blank_key__invalid_idempotency_key(key: str) -> None:
    assert rejected(for_intent=False, idempotency_key=key).code == "job.invalid_idempotency_key"


@pytest.mark.parametrize("key", [1, b"key", uuid.uuid4(), "key\x00", "\udfff"], ids=repr)
def test_prepare_enqueue__unstorable_key__invalid_key(key: object) -> None:
    assert rejected(idempotency_key=key).code == "job.intent_invalid_idempotency_key"
    assert rejected(for_intent=False, idempotency_key=key).code == "job.invalid_idempotency_key"


def test_prepare_enqueue__key_at_byte_limit__accepted() -> None:
    key = "€" * (IDEMPOTENCY_KEY_MAX_BYTES // 3) + "k"
    assert len(key.encode()) == IDEMPOTENCY_KEY_MAX_BYTES
    assert prepare(idempotency_key=key).idempotency_key == key


@pytest.mark.parametrize("for_intent", [True, False])
def test_prepare_enqueue__key_over_byte_limit__invalid_idempotency_key_length(
    for_intent: bool,
) -> None:
    key = "€" * (IDEMPOTENCY_KEY_MAX_BYTES // 3) + "kk"
    assert len(key.encode()) == IDEMPOTENCY_KEY_MAX_BYTES + 1
    error = rejected(for_intent=for_intent, idempotency_key=key)
    assert error.code == "job.invalid_idempotency_key_length"


def test_prepare_enqueue__unkeyed_enqueue__no_key_and_no_snapshot() -> None:
    request = prepare(for_intent=False, idempotency_key=None)
    assert request.idempotency_key is None
    assert request.snapshot_json == ""


def test_prepare_enqueue__keyed_enqueue__carries_key_and_snapshot() -> None:
    request = prepare(for_intent=False, idempotency_key="k", payload={"target": "same-request"})
    assert request.idempotency_key == "k"
    assert request.snapshot_json == GOLDEN_DEFAULT


# --- integers --------------------------------------------------------------------------------

BAD_INTS = [True, False, 2**31, -(2**31) - 1, 1.0, "3", decimal.Decimal(3)]


@pytest.mark.parametrize("value", [0, -1, INT32_MIN, *BAD_INTS], ids=repr)
def test_prepare_enqueue__bad_max_attempts__invalid_max_attempts(value: object) -> None:
    error = rejected(max_attempts=value)
    assert error.code == "job.intent_invalid_max_attempts"
    assert error.client_message == "Job enqueue intent max attempts must be positive."
    assert rejected(for_intent=False, max_attempts=value).code == "job.invalid_max_attempts"


@pytest.mark.parametrize("value", [0, -1, INT32_MIN, *BAD_INTS], ids=repr)
def test_prepare_enqueue__bad_timeout__invalid_timeout(value: object) -> None:
    error = rejected(timeout_seconds=value)
    assert error.code == "job.intent_invalid_timeout"
    assert error.client_message == "Job enqueue intent timeout must be positive."
    assert rejected(for_intent=False, timeout_seconds=value).code == "job.invalid_timeout"


def test_prepare_enqueue__positive_int32_bounds__accepted() -> None:
    request = prepare(max_attempts=1, timeout_seconds=INT32_MAX)
    assert (request.max_attempts, request.timeout_seconds) == (1, INT32_MAX)
    request = prepare(max_attempts=INT32_MAX, timeout_seconds=1)
    assert (request.max_attempts, request.timeout_seconds) == (INT32_MAX, 1)


@pytest.mark.parametrize("value", [INT32_MIN, -1, 0, 1, INT32_MAX])
def test_prepare_enqueue__any_int32_priority__accepted(value: int) -> None:
    assert prepare(priority=value).priority == value


@pytest.mark.parametrize("value", BAD_INTS, ids=repr)
def test_prepare_enqueue__bad_priority__invalid_priority(value: object) -> None:
    """Booleans are ints in Python, but True as a priority is a bug, not a 1."""
    assert rejected(priority=value).code == "job.invalid_priority"


def test_prepare_enqueue__int_enum_priority__rejected() -> None:
    class Priority(enum.IntEnum):
        HIGH = 10

    assert rejected(priority=Priority.HIGH).code == "job.invalid_priority"


# --- execution resource key ------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["", "   ", "\u3000", "\u00a0\t", "r\x00", "\ud800", 5, b"r"],
    ids=repr,
)
def test_prepare_enqueue__bad_execution_resource_key__invalid_execution_resource_key(
    key: object,
) -> None:
    error = rejected(execution_resource_key=key)
    assert error.code == "job.invalid_execution_resource_key"
    assert error.client_message == (
        "Execution resource key must be non-blank and at most 512 bytes."
    )


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("r" * EXECUTION_RESOURCE_KEY_MAX_BYTES, True),
        ("r" * (EXECUTION_RESOURCE_KEY_MAX_BYTES + 1), False),
        ("é" * (EXECUTION_RESOURCE_KEY_MAX_BYTES // 2), True),
        ("é" * (EXECUTION_RESOURCE_KEY_MAX_BYTES // 2) + "r", False),
        ("€" * 170 + "rr", True),
        ("€" * 171, False),
    ],
    ids=["512-ascii", "513-ascii", "512-two-byte", "513-two-byte", "512-three-byte", "513-3b"],
)
def test_prepare_enqueue__execution_resource_key_length__counts_utf8_bytes(
    key: str, ok: bool
) -> None:
    if ok:
        assert prepare(execution_resource_key=key).execution_resource_key == key
    else:
        assert rejected(execution_resource_key=key).code == "job.invalid_execution_resource_key"


# --- stage, organization, next_run_at --------------------------------------------------------


@pytest.mark.parametrize("stage", ["future_stage", "QUEUED", "", " queued", 1, b"queued"], ids=repr)
def test_prepare_enqueue__unknown_stage__invalid_stage(stage: object) -> None:
    error = rejected(stage=stage)
    assert error.code == "job.invalid_stage"


@pytest.mark.parametrize("stage", [*JobStage, *JobStage.values])
def test_prepare_enqueue__known_stage__stored_as_db_value(stage: str) -> None:
    stored = prepare(stage=stage).stage
    assert type(stored) is str
    assert stored == str(stage)


def test_prepare_enqueue__no_stage__queued() -> None:
    assert prepare().stage == "queued"


@pytest.mark.parametrize(
    "org", ["not-a-uuid", "", 123, b"0" * 16, uuid.uuid4().int, ["x"]], ids=repr
)
def test_prepare_enqueue__bad_organization_id__invalid_organization_id(org: object) -> None:
    assert rejected(organization_id=org).code == "job.invalid_organization_id"


def test_prepare_enqueue__organization_id_text__becomes_uuid() -> None:
    org = uuid.uuid4()
    assert prepare(organization_id=str(org)).organization_id == org
    assert prepare(organization_id=org).organization_id == org
    assert prepare(organization_id=None).organization_id is None


@pytest.mark.parametrize(
    "value",
    [
        dt.datetime(2026, 5, 22, 10, 30, 45),  # naive on purpose
        dt.date(2026, 5, 22),
        "2026-05-22T10:30:45Z",
        1_779_446_445,
    ],
    ids=["naive", "date", "text", "epoch"],
)
def test_prepare_enqueue__bad_next_run_at__invalid_next_run_at(value: object) -> None:
    assert rejected(next_run_at=value).code == "job.invalid_next_run_at"


def test_prepare_enqueue__next_run_at_with_offset__converted_to_utc() -> None:
    local = dt.datetime(2026, 5, 22, 12, 30, 45, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    request = prepare(next_run_at=local)
    assert request.next_run_at == local
    assert request.next_run_at is not None
    assert request.next_run_at.utcoffset() == dt.timedelta(0)
    assert '"next_run_at":"2026-05-22T10:30:45.123456Z"' in request.snapshot_json


def test_prepare_enqueue__next_run_at_overflowing_utc__invalid_next_run_at() -> None:
    """datetime.min with a positive offset is before year 1 in UTC."""
    value = dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=5)))
    assert rejected(next_run_at=value).code == "job.invalid_next_run_at"


# --- payload -----------------------------------------------------------------------------------


class _Opaque:
    pass


NOT_JSON_NATIVE: list[object] = [
    dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    dt.date(2026, 1, 1),
    decimal.Decimal("1.5"),
    {1, 2},
    frozenset({1}),
    b"bytes",
    bytearray(b"x"),
    uuid.uuid4(),
    _Opaque(),
    1j,
    JobStage.QUEUED,
]


@pytest.mark.parametrize("value", NOT_JSON_NATIVE, ids=lambda v: type(v).__name__)
def test_prepare_enqueue__non_json_native_payload__invalid_payload(value: object) -> None:
    """Rejected rather than silently converted, at the top and nested anywhere."""
    for payload in (value, {"a": value}, [1, value], ({"deep": [value]},)):
        error = rejected(payload=payload)
        assert error.code == "job.invalid_payload"
        assert error.client_message == (
            "Job payload must be JSON-native data that PostgreSQL can store."
        )


def test_prepare_enqueue__model_instance_payload__invalid_payload() -> None:
    definition = JobDefinition(job_type="jobs.test.validation")
    assert rejected(payload=definition).code == "job.invalid_payload"
    assert rejected(payload={"definition": definition}).code == "job.invalid_payload"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=repr)
def test_prepare_enqueue__non_finite_float__invalid_payload(value: float) -> None:
    for payload in (value, {"x": value}, [value]):
        assert rejected(payload=payload).code == "job.invalid_payload"


@pytest.mark.parametrize(
    "payload",
    [
        "nul\x00inside",
        {"k": "nul\x00"},
        ["\ud800"],
        {"k": "lone \udfff surrogate"},
        {"nul\x00key": 1},
        {"\ud83d": 1},
    ],
    ids=["nul", "nested-nul", "surrogate", "nested-surrogate", "nul-key", "surrogate-key"],
)
def test_prepare_enqueue__text_postgresql_cannot_store__invalid_payload(payload: object) -> None:
    assert rejected(payload=payload).code == "job.invalid_payload"


@pytest.mark.parametrize("key", [1, 1.5, None, True, ("a",), uuid.UUID(int=0)], ids=repr)
def test_prepare_enqueue__non_string_dict_key__invalid_payload(key: object) -> None:
    """json.dumps would quietly turn these keys into strings."""
    assert rejected(payload={key: 1}).code == "job.invalid_payload"


def test_prepare_enqueue__payload_at_depth_limit__accepted() -> None:
    request = prepare(payload=nested_lists(PAYLOAD_MAX_DEPTH))
    assert request.payload_json == "[" * PAYLOAD_MAX_DEPTH + "1" + "]" * PAYLOAD_MAX_DEPTH


def test_prepare_enqueue__payload_over_depth_limit__invalid_payload() -> None:
    assert rejected(payload=nested_lists(PAYLOAD_MAX_DEPTH + 1)).code == "job.invalid_payload"
    deep: dict[str, object] = {}
    node = deep
    for _ in range(PAYLOAD_MAX_DEPTH):
        child: dict[str, object] = {}
        node["k"] = child
        node = child
    assert rejected(payload=deep).code == "job.invalid_payload"


def test_prepare_enqueue__self_referencing_payload__invalid_payload() -> None:
    loop: list[object] = []
    loop.append(loop)
    assert rejected(payload=loop).code == "job.invalid_payload"


def test_prepare_enqueue__int_beyond_str_digit_limit__invalid_payload() -> None:
    assert rejected(payload={"n": 10**5000}).code == "job.invalid_payload"


def test_encode_payload__over_size_limit__invalid_payload(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit counts UTF-8 bytes of the JSON text (a small limit keeps the test cheap)."""
    assert PAYLOAD_MAX_BYTES == 64 * 1024 * 1024
    monkeypatch.setattr(validation, "PAYLOAD_MAX_BYTES", 12)
    assert encode_payload("a" * 10) == '"' + "a" * 10 + '"'
    for payload in ("a" * 11, "é" * 6, ["a" * 9]):
        with pytest.raises(RunledgerError) as info:
            encode_payload(payload)
        assert info.value.code == "job.invalid_payload"


@pytest.mark.parametrize(
    ("payload", "text"),
    [
        (None, "null"),
        (True, "true"),
        (0, "0"),
        (-(2**63), str(-(2**63))),
        (1.5, "1.5"),
        (1.7e18, "1.7e+18"),
        ("ünï \u2028 😀", '"ünï \u2028 😀"'),
        ((1, [2, {"a": None}]), '[1,[2,{"a":null}]]'),
        ({"b": 1, "a": 2}, '{"b":1,"a":2}'),
        ({"\x1c": "\t"}, '{"\\u001c":"\\t"}'),
    ],
    ids=[
        "null",
        "bool",
        "zero",
        "int64-min",
        "float",
        "exponent",
        "unicode",
        "tuple",
        "keys",
        "ctl",
    ],
)
def test_encode_payload__json_native__compact_json(payload: object, text: str) -> None:
    assert encode_payload(payload) == text


json_native = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@given(json_native)
def test_encode_payload__any_json_native_value__round_trips(payload: object) -> None:
    assert json.loads(encode_payload(payload)) == payload


# --- validation order --------------------------------------------------------------------------


def test_prepare_enqueue__several_problems__reported_in_reference_order() -> None:
    """Reference 4.1: job type, key, max attempts, timeout, resource key; then the rest."""
    everything_bad: dict[str, Any] = {
        "job_type": " ",
        "idempotency_key": " ",
        "max_attempts": 0,
        "timeout_seconds": 0,
        "execution_resource_key": " ",
        "stage": "nope",
        "priority": True,
        "organization_id": "nope",
        "next_run_at": "nope",
        "payload": {1: 2},
    }
    expected = [
        ("job_type", "job.invalid_job_type"),
        ("idempotency_key", "job.intent_invalid_idempotency_key"),
        ("max_attempts", "job.intent_invalid_max_attempts"),
        ("timeout_seconds", "job.intent_invalid_timeout"),
        ("execution_resource_key", "job.invalid_execution_resource_key"),
        ("stage", "job.invalid_stage"),
        ("priority", "job.invalid_priority"),
        ("organization_id", "job.invalid_organization_id"),
        ("next_run_at", "job.invalid_next_run_at"),
        ("payload", "job.invalid_payload"),
    ]
    for field, code in expected:
        assert rejected(**everything_bad).code == code
        everything_bad.pop(field)
    prepare(**everything_bad)


# --- canonical snapshot v1 ---------------------------------------------------------------------


def test_prepare_enqueue__golden_scheduled_request__snapshot_is_byte_for_byte() -> None:
    request = prepare(
        payload={"kind": "golden"},
        priority=10,
        max_attempts=3,
        timeout_seconds=30,
        next_run_at=dt.datetime(2026, 5, 22, 10, 30, 45, tzinfo=dt.UTC),
        stage="scheduled",
    )
    assert request.snapshot_json == GOLDEN_SCHEDULED


def test_prepare_enqueue__golden_default_request__snapshot_is_byte_for_byte() -> None:
    assert prepare(payload={"target": "same-request"}).snapshot_json == GOLDEN_DEFAULT


@pytest.mark.parametrize(
    ("microsecond", "text"),
    [(0, "000000"), (5, "000005"), (123456, "123456"), (999999, "999999")],
)
def test_prepare_enqueue__next_run_at__six_fractional_digits(microsecond: int, text: str) -> None:
    run_at = dt.datetime(2035, 4, 3, 2, 1, 0, microsecond, tzinfo=dt.UTC)
    snapshot = json.loads(prepare(next_run_at=run_at).snapshot_json)
    assert snapshot["next_run_at"] == f"2035-04-03T02:01:00.{text}Z"


def test_prepare_enqueue__early_year__zero_padded() -> None:
    run_at = dt.datetime(9, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    snapshot = json.loads(prepare(next_run_at=run_at).snapshot_json)
    assert snapshot["next_run_at"] == "0009-01-02T03:04:05.000000Z"


def test_prepare_enqueue__no_resource_key__key_omitted_not_null() -> None:
    snapshot = json.loads(prepare().snapshot_json)
    assert "execution_resource_key" not in snapshot
    assert list(snapshot) == [
        "payload",
        "priority",
        "max_attempts",
        "timeout_seconds",
        "next_run_at",
        "stage",
    ]


def test_prepare_enqueue__resource_key__appended_last() -> None:
    request = prepare(payload={"target": "same-request"}, execution_resource_key="acct:ü")
    assert request.snapshot_json == GOLDEN_DEFAULT[:-1] + ',"execution_resource_key":"acct:ü"}'


def test_prepare_enqueue__snapshot__payload_embedded_as_encoded() -> None:
    payload = {"z": [1.5, None, "ü"], "a": {"n": 1.7e18}}
    request = prepare(payload=payload)
    assert request.payload_json == encode_payload(payload)
    assert json.loads(request.snapshot_json)["payload"] == payload
    assert request.snapshot_json.startswith('{"payload":' + request.payload_json + ",")


def test_prepare_enqueue__intent_and_keyed_enqueue__same_snapshot() -> None:
    """Promotion compares an intent's snapshot with a direct keyed job's: they must agree."""
    options: dict[str, Any] = {
        "payload": {"p": 1},
        "priority": 5,
        "stage": JobStage.RUNNING,
        "next_run_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
    }
    assert (
        prepare(for_intent=True, **options).snapshot_json
        == prepare(for_intent=False, **options).snapshot_json
    )


# --- other argument rules ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "offset"), [(0, 0), (-1, 0), (1001, 0), (1, -1), (True, 0), (1, 1.0), ("1", 0)]
)
def test_validate_page__out_of_range__invalid_pagination(limit: object, offset: object) -> None:
    with pytest.raises(RunledgerError) as info:
        validate_page(limit, offset)
    assert info.value.code == "job.invalid_pagination"
    assert info.value.client_message == "Pagination limit and offset are invalid."


@pytest.mark.parametrize(("limit", "offset"), [(1, 0), (1000, 0), (50, 10**6)])
def test_validate_page__in_range__accepted(limit: int, offset: int) -> None:
    page = validate_page(limit, offset)
    assert (page.limit, page.offset) == (limit, offset)


def test_validate_job_types__bare_string__invalid_argument() -> None:
    with pytest.raises(RunledgerError) as info:
        validate_job_types("jobs.a")
    assert info.value.code == "job.invalid_argument"


def test_validate_job_types__duplicates__kept_once_in_order() -> None:
    assert validate_job_types(["b", "a", "b"]) == ["b", "a"]
    with pytest.raises(RunledgerError) as info:
        validate_job_types(["a", " "])
    assert info.value.code == "job.invalid_job_type"


def test_validate_job_type__persisted_row_over_byte_limit__accepted() -> None:
    """The limit guards new requests; a stored row already fit its index and must promote."""
    job_type = "j" * (JOB_TYPE_MAX_BYTES + 45)
    assert validate_job_type(job_type, persisted_row=True) == job_type
    with pytest.raises(RunledgerError) as info:
        validate_job_type(job_type)
    assert info.value.code == "job.invalid_job_type_length"


@pytest.mark.parametrize("job_type", ["\t", "\u00a0"], ids=repr)
def test_validate_job_type__persisted_blank__internal_invalid_job_type(job_type: str) -> None:
    with pytest.raises(RunledgerError) as info:
        validate_job_type(job_type, persisted_row=True)
    assert (info.value.code, info.value.category) == ("job.invalid_job_type", "internal")
    assert info.value.client_message == "Job type in persisted row is invalid."


@pytest.mark.parametrize("stage", ["future_stage", "QUEUED"])
def test_validate_stage__persisted_unknown__internal_invalid_stage(stage: str) -> None:
    with pytest.raises(RunledgerError) as info:
        validate_stage(stage, persisted_row=True)
    assert (info.value.code, info.value.category) == ("job.invalid_stage", "internal")
    assert info.value.client_message == "Job stage in persisted row is invalid."
