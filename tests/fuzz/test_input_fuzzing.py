"""Property-based fuzzing of every argument of record_intent and enqueue_job.

Each example draws every argument from a valid or a hostile strategy (recursive JSON and
non-JSON-native payloads, NUL and lone surrogates, huge ints, NaN, bools for ints, int32
edges, naive, aware and out-of-range datetimes, broken tzinfos, unknown stages, keys around
their byte limits, organization ids of every shape). An oracle written from SPEC.md, not from
validation.py, says whether the input must be accepted, must be rejected, or may go either way.

The property: the call succeeds (and stores exactly the input) or raises a ``validation``
RunledgerError with nothing written; inside the caller's ``transaction.atomic()`` that
transaction stays usable (a query and a later valid call in the same block work).

The ``in_caller_transaction`` tests run in the test's transaction; each example runs in a
savepoint it rolls back, so examples never see each other's rows. The ``own_transaction``
tests are ``transaction=True``: only without an atomic block around the call do the functions
own their transaction, and those examples delete what they committed.
"""

from __future__ import annotations

import collections
import datetime as dt
import enum
import json
import math
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

from runledger_django import (
    EnqueueOutcome,
    IntentOutcome,
    RunledgerError,
    enqueue_job,
    record_intent,
)
from runledger_django.domain import JobStage
from runledger_django.errors import ErrorCategory
from runledger_django.models import JobDefinition
from tests.conftest import TEST_JOB_TYPE

pytestmark = pytest.mark.django_db

REPO_ROOT = Path(__file__).resolve().parents[2]

FUZZ_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    derandomize=False,
    print_blob=True,
    database=DirectoryBasedExampleDatabase(REPO_ROOT / ".hypothesis" / "examples"),
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

# --- the oracle (from SPEC.md and reference 10.5, independent of validation.py) --------------

VALID, EITHER, INVALID = 0, 1, 2
"""Verdicts, ordered so that ``max`` combines them."""

WHITE_SPACE = frozenset(
    [chr(c) for c in range(0x09, 0x0E)]
    + [" ", "\u0085", "\u00a0", "\u1680"]
    + [chr(c) for c in range(0x2000, 0x200B)]
    + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
)
"""Unicode White_Space (Rust's ``str::trim``): the reference's blank set."""
NOT_WHITE_SPACE = ["\x1c", "\x1d", "\x1e", "\x1f", "\u200b", "\u180e", "\ufeff", "\x7f"]
"""Look blank, or are blank to Python's ``isspace``, but are not White_Space."""
HOSTILE_CHARS = [
    "\x00",
    "\ud800",
    "\udbff",
    "\udc00",
    "\udfff",
    "\ufffe",
    "\uffff",
    "\U0010ffff",
    "\u202e",
    "\\",
    '"',
    "'",
    "%",
    "_",
]
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
STAGES = ("queued", "scheduled", "running", "completed")
JOB_TYPE_MAX, KEY_MAX, RESOURCE_MAX = 255, 1024, 512
DEFINED_TYPES = (
    TEST_JOB_TYPE,
    "jobs.fuzz.ünïcödé 日本",
    "j" * JOB_TYPE_MAX,
    "é" * 127 + "j",
    "\x1cjobs.fuzz.not-white-space",
)
"""Enabled definitions for enqueue_job: two sit on the 255-byte limit, one on the blank rule's
edge (U+001C is blank to Python's ``isspace`` but not White_Space)."""
DISABLED_TYPE = "jobs.fuzz.disabled"


def text_verdict(value: object, max_bytes: int) -> int:
    if not isinstance(value, str):
        return INVALID
    if "\x00" in value:
        return INVALID
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return INVALID
    if all(char in WHITE_SPACE for char in value) or size > max_bytes:
        return INVALID
    return VALID if type(value) is str else EITHER


def payload_verdict(payload: object) -> int:
    """JSON-native data that jsonb can store: dicts with str keys, lists, tuples, str, int,
    finite float, bool, None. Subclasses of those may go either way; so may nesting between
    200 and 300 levels and ints too long for Python's int-to-str limit."""
    verdict = VALID
    stack: list[tuple[object, int]] = [(payload, 1)]
    while stack:
        value, level = stack.pop()
        if type(value) not in (type(None), bool, int, float, str, list, tuple, dict):
            if not isinstance(value, str | int | float | list | tuple | dict):
                return INVALID
            verdict = max(verdict, EITHER)  # a subclass of a JSON-native type
        elif isinstance(value, float):
            if not math.isfinite(value):
                return INVALID
        elif isinstance(value, int) and not isinstance(value, bool):
            if value.bit_length() * math.log10(2) > 4250:
                verdict = max(verdict, EITHER)
        elif isinstance(value, str):
            if _unstorable(value):
                return INVALID
        elif isinstance(value, list | tuple | dict):
            if level > 300:
                return INVALID
            if level > 200:
                verdict = max(verdict, EITHER)
            children: Iterable[object] = value
            if isinstance(value, dict):
                if any(type(key) is not str or _unstorable(key) for key in value):
                    return INVALID
                children = value.values()
            stack.extend((child, level + 1) for child in children)
    return verdict


def _unstorable(text: str) -> bool:
    if "\x00" in text:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def organization_verdict(value: object) -> int:
    if value is None or type(value) is uuid.UUID:
        return VALID
    if isinstance(value, str):
        try:
            parsed = uuid.UUID(value)
        except ValueError:
            return INVALID
        return VALID if str(parsed) == value else EITHER
    return INVALID


def int32_verdict(value: object, *, positive: bool) -> int:
    if value is None:
        return VALID
    if type(value) is not int:
        return INVALID
    low = 1 if positive else INT32_MIN
    return VALID if low <= value <= INT32_MAX else INVALID


STORABLE_FROM = dt.datetime(1, 1, 2, tzinfo=dt.UTC)
STORABLE_UNTIL = dt.datetime(9999, 12, 31, tzinfo=dt.UTC)


def datetime_verdict(value: object) -> int:
    if value is None:
        return VALID
    if not isinstance(value, dt.datetime):
        return INVALID
    try:
        if value.utcoffset() is None:
            return INVALID
        utc = value.astimezone(dt.UTC)
    except (OverflowError, ValueError, TypeError):
        return INVALID
    # The tables keep a day inside Python's range (migration 0007), so every time zone's
    # local time of a stored time is a datetime too.
    return VALID if STORABLE_FROM <= utc < STORABLE_UNTIL else INVALID


def stage_verdict(value: object) -> int:
    if value is None or (type(value) is str and value in STAGES):
        return VALID
    if isinstance(value, str) and str(value) in STAGES:
        return EITHER
    return INVALID


def resource_key_verdict(value: object) -> int:
    return VALID if value is None else text_verdict(value, RESOURCE_MAX)


# --- strategies ------------------------------------------------------------------------------

OMIT = object()
"""Leave the keyword argument out of the call."""

chars = st.one_of(
    st.characters(),
    st.sampled_from(sorted(WHITE_SPACE) + NOT_WHITE_SPACE + HOSTILE_CHARS),
)
any_text = st.text(alphabet=chars, max_size=24)
clean_text = st.text(alphabet=st.characters(exclude_characters="\x00"), max_size=24)
"""Storable text: no NUL and (Hypothesis's default) no surrogates; possibly blank."""
non_blank_text = st.tuples(
    clean_text, st.text(alphabet="abxyz09.:-é日😀", min_size=1, max_size=3), clean_text
).map("".join)


@st.composite
def text_of_bytes(draw: st.DrawFn, limit: int, *, valid: bool) -> str:
    """A string within a few bytes of ``limit`` UTF-8 bytes, made of 1- to 4-byte characters;
    ``valid`` keeps it within the limit and storable."""
    unit = draw(st.sampled_from(["k", "é", "日", "😀"]))
    target = draw(st.integers(limit - 6, limit if valid else limit + 6))
    width = len(unit.encode())
    text = unit * (target // width) + "k" * (target % width)
    prefixes = ["", " "] if valid else ["", " ", "\u3000", "\x00", "\ud800"]
    prefix = draw(st.sampled_from(prefixes))
    return prefix + text[len(prefix) :]


class Color(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 7


class Text(str):
    __slots__ = ()


class Number(int):
    pass


class BrokenOffset(dt.tzinfo):
    """A tzinfo whose offset Python itself refuses (more than a day)."""

    def utcoffset(self, when: dt.datetime | None) -> dt.timedelta:
        return dt.timedelta(hours=30)

    def dst(self, when: dt.datetime | None) -> dt.timedelta | None:
        return None

    def tzname(self, when: dt.datetime | None) -> str:
        return "BROKEN"


class WrongTypeOffset(dt.tzinfo):
    """A tzinfo whose offset is not a timedelta at all."""

    def utcoffset(self, when: dt.datetime | None) -> dt.timedelta:
        return 3600  # type: ignore[return-value]

    def dst(self, when: dt.datetime | None) -> dt.timedelta | None:
        return None

    def tzname(self, when: dt.datetime | None) -> str:
        return "WRONG"


class NoOffset(dt.tzinfo):
    """A tzinfo that is attached yet says it does not know the offset (so: naive)."""

    def utcoffset(self, when: dt.datetime | None) -> None:
        return None

    def dst(self, when: dt.datetime | None) -> None:
        return None

    def tzname(self, when: dt.datetime | None) -> None:
        return None


def nested(depth: int, as_dict: bool) -> object:
    value: object = 1
    for _ in range(depth - 1):
        value = {"n": value} if as_dict else [value]
    return value


def cyclic() -> list[object]:
    loop: list[object] = []
    loop.append(loop)
    return loop


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([INT32_MIN - 1, INT32_MAX + 1, 2**63, -(2**63) - 1, 2**64, 10**300]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([-0.0, 5e-324, 1.7976931348623157e308, 1e-310]),
    clean_text,
)
valid_payloads = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(clean_text, children, max_size=4),
    ),
    max_leaves=12,
)
hostile_scalars = st.one_of(
    json_scalars,
    any_text,
    st.sampled_from([math.nan, math.inf, -math.inf]),
    # Beyond 4,300 digits repr() refuses, so build these lazily (the strategy's repr is shown).
    st.sampled_from([4299, 4300, 4301, -5000]).map(lambda n: 10 ** abs(n) * (1 if n > 0 else -1)),
    st.datetimes(),
    st.dates(),
    st.decimals(allow_nan=True),
    st.binary(max_size=4),
    st.uuids(),
    st.complex_numbers(max_magnitude=10),
    st.sets(st.integers(), max_size=2),
    st.frozensets(st.integers(), max_size=2),
    st.builds(bytearray, st.binary(max_size=2)),
    st.sampled_from([Color.RED, Level.HIGH, Text("sub"), Number(3), object(), ...]),
)
hostile_keys = st.one_of(
    any_text,
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(),
    st.tuples(st.integers()),
    st.just(Color.RED),
    st.just(Text("key")),
)
hostile_payloads = st.one_of(
    st.recursive(
        hostile_scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.tuples(children),
            st.dictionaries(hostile_keys, children, max_size=3),
            st.builds(collections.OrderedDict, st.dictionaries(clean_text, children, max_size=2)),
        ),
        max_leaves=12,
    ),
    st.builds(nested, st.integers(190, 320), st.booleans()),
    st.builds(nested, st.just(5000), st.booleans()),
    st.builds(cyclic),
)

offsets = st.integers(-1439, 1439).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))
aware_datetimes = st.one_of(
    st.datetimes(
        min_value=dt.datetime(2, 1, 1), max_value=dt.datetime(9998, 12, 31), timezones=offsets
    ),
    st.datetimes(timezones=st.timezones()),
)
EXTREME_DATETIMES: dict[str, Callable[[], dt.datetime]] = {
    "min utc": lambda: dt.datetime.min.replace(tzinfo=dt.UTC),
    "max utc": lambda: dt.datetime.max.replace(tzinfo=dt.UTC),
    "min +23:59": lambda: dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(minutes=1439))),
    "max -23:59": lambda: dt.datetime.max.replace(tzinfo=dt.timezone(-dt.timedelta(minutes=1439))),
    "no offset": lambda: dt.datetime(2030, 1, 1, tzinfo=NoOffset()),
    "offset beyond a day": lambda: dt.datetime(2030, 1, 1, tzinfo=BrokenOffset()),
    "offset not a timedelta": lambda: dt.datetime(2030, 1, 1, tzinfo=WrongTypeOffset()),
}
"""Built on draw: a datetime with a broken tzinfo cannot even be hashed."""
extreme_datetimes = st.one_of(
    st.sampled_from(sorted(EXTREME_DATETIMES)).map(lambda name: EXTREME_DATETIMES[name]()),
    st.datetimes(timezones=offsets),
)

strings_for_ints = st.sampled_from(["1", "0x10", "", "NaN"])
int_values = st.one_of(
    st.integers(INT32_MIN - 2, INT32_MAX + 2),
    st.sampled_from([INT32_MIN, INT32_MIN - 1, INT32_MAX, INT32_MAX + 1, 0, -1, 1, 2**63]),
    st.booleans(),
    st.floats(),
    strings_for_ints,
    st.decimals(allow_nan=False, allow_infinity=False, places=0),
    st.just(Level.HIGH),
    st.just(Number(5)),
)
organization_values = st.one_of(
    st.uuids(),
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.uuids().map(lambda u: "{" + str(u) + "}"),
    st.uuids().map(lambda u: u.hex),
    st.uuids().map(lambda u: u.urn),
    st.uuids().map(lambda u: u.bytes),
    st.uuids().map(lambda u: u.int),
    any_text,
    st.just(" " + str(uuid.UUID(int=1))),
)

VALID_ARGUMENTS: dict[str, st.SearchStrategy[Any]] = {
    "job_type": st.sampled_from(DEFINED_TYPES),
    "payload": valid_payloads,
    "idempotency_key": st.one_of(non_blank_text, text_of_bytes(KEY_MAX, valid=True)),
    "organization_id": st.one_of(st.just(OMIT), st.none(), st.uuids(), st.uuids().map(str)),
    "priority": st.one_of(st.just(OMIT), st.none(), st.integers(INT32_MIN, INT32_MAX)),
    "max_attempts": st.one_of(st.just(OMIT), st.none(), st.integers(1, INT32_MAX)),
    "timeout_seconds": st.one_of(st.just(OMIT), st.none(), st.integers(1, INT32_MAX)),
    "next_run_at": st.one_of(st.just(OMIT), st.none(), aware_datetimes),
    "stage": st.one_of(st.just(OMIT), st.none(), st.sampled_from(STAGES)),
    "execution_resource_key": st.one_of(
        st.just(OMIT),
        st.none(),
        non_blank_text,
        text_of_bytes(RESOURCE_MAX, valid=True),
    ),
}
HOSTILE_ARGUMENTS: dict[str, st.SearchStrategy[Any]] = {
    "job_type": st.one_of(
        any_text,
        text_of_bytes(JOB_TYPE_MAX, valid=False),
        st.sampled_from(["", " ", "\u3000\t", DISABLED_TYPE, None, 1, b"jobs", Color.RED]),
        st.lists(st.sampled_from(NOT_WHITE_SPACE), min_size=1, max_size=3).map("".join),
    ),
    "payload": hostile_payloads,
    "idempotency_key": st.one_of(
        any_text,
        text_of_bytes(KEY_MAX, valid=False),
        st.sampled_from([None, "", "\u2028", 7, b"key", Text("key"), ("k",)]),
        st.lists(st.sampled_from(NOT_WHITE_SPACE), min_size=1, max_size=3).map("".join),
    ),
    "organization_id": organization_values,
    "priority": int_values,
    "max_attempts": int_values,
    "timeout_seconds": int_values,
    "next_run_at": st.one_of(
        extreme_datetimes,
        st.datetimes(),
        st.dates(),
        st.sampled_from(["2030-01-01T00:00:00Z", 0, 1.5, dt.time(1, tzinfo=dt.UTC)]),
    ),
    "stage": st.one_of(
        any_text,
        st.sampled_from(["Queued", " queued", "queued\x00", "failed", JobStage.RUNNING, 1, b"x"]),
    ),
    "execution_resource_key": st.one_of(
        any_text,
        text_of_bytes(RESOURCE_MAX, valid=False),
        st.sampled_from(["", "\t", 5, b"r", Text("r")]),
        st.lists(st.sampled_from(NOT_WHITE_SPACE), min_size=1, max_size=3).map("".join),
    ),
}
ARGUMENTS = tuple(VALID_ARGUMENTS)


@dataclass
class Call:
    """One call's arguments and the oracle's verdict on them."""

    arguments: dict[str, Any]
    verdict: int

    @property
    def keywords(self) -> dict[str, Any]:
        return {
            name: value
            for name, value in self.arguments.items()
            if name not in ("job_type", "payload")
        }


def judge(arguments: dict[str, Any], *, for_intent: bool) -> int:
    job_type = arguments["job_type"]
    verdicts = [
        text_verdict(job_type, JOB_TYPE_MAX),
        payload_verdict(arguments["payload"]),
        organization_verdict(arguments.get("organization_id")),
        int32_verdict(arguments.get("priority"), positive=False),
        int32_verdict(arguments.get("max_attempts"), positive=True),
        int32_verdict(arguments.get("timeout_seconds"), positive=True),
        datetime_verdict(arguments.get("next_run_at")),
        stage_verdict(arguments.get("stage")),
        resource_key_verdict(arguments.get("execution_resource_key")),
    ]
    key = arguments.get("idempotency_key")
    if key is not None or for_intent:
        verdicts.append(text_verdict(key, KEY_MAX))
    if not for_intent and verdicts[0] == VALID and job_type not in DEFINED_TYPES:
        verdicts.append(INVALID)  # no enabled definition: job.definition_not_found_or_disabled
    return max(verdicts)


def make_call(*, for_intent: bool, **arguments: Any) -> Call:
    return Call(arguments, judge(arguments, for_intent=for_intent))


def found_examples(*, for_intent: bool) -> list[Call]:
    """Inputs the fuzzer found that broke the property once, replayed on every run."""
    return [
        make_call(
            for_intent=for_intent,
            job_type=TEST_JOB_TYPE,
            payload={},
            idempotency_key="k",
            next_run_at=EXTREME_DATETIMES[name](),
        )
        # A tzinfo whose utcoffset() Python rejects made validation raise ValueError/TypeError.
        for name in ("offset beyond a day", "offset not a timedelta")
    ] + [
        # The smallest int32 priority, bound client-side as ``-2147483648::integer``, parsed as
        # -(2147483648::integer) and overflowed (SQLSTATE 22003) in enqueue's insert.
        make_call(
            for_intent=for_intent,
            job_type=TEST_JOB_TYPE,
            payload=None,
            idempotency_key="0",
            priority=INT32_MIN,
        )
    ]


def with_found_examples(*, for_intent: bool) -> Callable[[Any], Any]:
    def decorate(test: Any) -> Any:
        for call in found_examples(for_intent=for_intent):
            test = example(call=call)(test)
        return test

    return decorate


@st.composite
def calls(draw: st.DrawFn, *, for_intent: bool) -> Call:
    """Up to three hostile arguments, the others valid, so both outcomes stay frequent; the
    payload, the richest argument, is hostile in about a third of the calls."""
    hostile = draw(st.sets(st.sampled_from(ARGUMENTS), max_size=2))
    if draw(st.integers(0, 2)) == 0:
        hostile.add("payload")
    arguments: dict[str, Any] = {}
    for name in ARGUMENTS:
        value = draw(HOSTILE_ARGUMENTS[name] if name in hostile else VALID_ARGUMENTS[name])
        if value is not OMIT:
            arguments[name] = value
    if not for_intent and "idempotency_key" not in hostile and draw(st.booleans()):
        del arguments["idempotency_key"]  # unkeyed enqueue
    return Call(arguments, judge(arguments, for_intent=for_intent))


# --- database observations ---------------------------------------------------------------------


def row_counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM runledger_job_enqueue_intents), "
            "(SELECT count(*) FROM runledger_job_queue), "
            "(SELECT count(*) FROM runledger_job_events)"
        )
        intents, jobs, events = cursor.fetchone()
    return {"intents": intents, "jobs": jobs, "events": events}


def expected_payload_json(payload: object) -> str:
    return json.dumps(payload, allow_nan=False)


def expected_org(value: object) -> uuid.UUID | None:
    return None if value is None else uuid.UUID(str(value))


def stored_row(table: str, row_id: uuid.UUID, payload: object) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT job_type, organization_id, idempotency_key, payload = %s::jsonb, priority, "
            "max_attempts, timeout_seconds, next_run_at, stage, execution_resource_key "
            f"FROM {table} WHERE id = %s",
            [expected_payload_json(payload), row_id],
        )
        row = cursor.fetchone()
    assert row is not None
    names = (
        "job_type",
        "organization_id",
        "idempotency_key",
        "payload_equal",
        "priority",
        "max_attempts",
        "timeout_seconds",
        "next_run_at",
        "stage",
        "execution_resource_key",
    )
    return dict(zip(names, row, strict=True))


VERDICT_NAMES = {VALID: "valid", EITHER: "either", INVALID: "invalid"}


def assert_rejected(error: RunledgerError, call: Call) -> None:
    event(f"{VERDICT_NAMES[call.verdict]} input rejected ({error.code})")
    assert error.category == ErrorCategory.VALIDATION, (error.code, error.internal_message, call)
    assert call.verdict != VALID, ("a valid call was rejected", error.code, call)


def assert_intent_stored(outcome: IntentOutcome, call: Call) -> None:
    event(f"{VERDICT_NAMES[call.verdict]} input stored")
    assert call.verdict != INVALID, ("an invalid call was accepted", call)
    assert outcome.disposition == "inserted"
    arguments = call.arguments
    row = stored_row("runledger_job_enqueue_intents", outcome.intent_id, arguments["payload"])
    run_at = arguments.get("next_run_at")
    assert row == {
        "job_type": arguments["job_type"],
        "organization_id": expected_org(arguments.get("organization_id")),
        "idempotency_key": arguments["idempotency_key"],
        "payload_equal": True,
        "priority": arguments.get("priority"),
        "max_attempts": arguments.get("max_attempts"),
        "timeout_seconds": arguments.get("timeout_seconds"),
        "next_run_at": as_utc(run_at),
        "stage": arguments.get("stage") or "queued",
        "execution_resource_key": arguments.get("execution_resource_key"),
    }


def assert_job_stored(outcome: EnqueueOutcome, call: Call) -> None:
    event(f"{VERDICT_NAMES[call.verdict]} input stored")
    assert call.verdict != INVALID, ("an invalid call was accepted", call)
    assert outcome.disposition == "inserted"
    arguments = call.arguments
    row = stored_row("runledger_job_queue", outcome.job_id, arguments["payload"])
    run_at = arguments.get("next_run_at")
    if run_at is None:
        row.pop("next_run_at")
    definition = JobDefinition.objects.get(job_type=arguments["job_type"])
    expected = {
        "job_type": arguments["job_type"],
        "organization_id": expected_org(arguments.get("organization_id")),
        "idempotency_key": arguments.get("idempotency_key"),
        "payload_equal": True,
        "priority": _default(arguments.get("priority"), definition.default_priority),
        "max_attempts": _default(arguments.get("max_attempts"), definition.max_attempts),
        "timeout_seconds": _default(
            arguments.get("timeout_seconds"), definition.default_timeout_seconds
        ),
        "stage": arguments.get("stage") or "queued",
        "execution_resource_key": arguments.get("execution_resource_key"),
    }
    if run_at is not None:
        expected["next_run_at"] = as_utc(run_at)
    assert row == expected


def as_utc(value: dt.datetime | None) -> dt.datetime | None:
    """The instant in UTC: Python never calls a time in a DST gap or fold equal to a time in
    another zone (PEP 495), so compare instants in one zone."""
    return None if value is None else value.astimezone(dt.UTC)


def _default(value: int | None, fallback: int) -> int:
    return fallback if value is None else value


def call_record(call: Call) -> IntentOutcome:
    return record_intent(call.arguments["job_type"], call.arguments["payload"], **call.keywords)


def call_enqueue(call: Call) -> EnqueueOutcome:
    return enqueue_job(call.arguments["job_type"], call.arguments["payload"], **call.keywords)


def follow_up_record() -> None:
    outcome = record_intent(TEST_JOB_TYPE, {"follow": "up"}, idempotency_key=str(uuid.uuid4()))
    assert outcome.disposition == "inserted"


def follow_up_enqueue() -> None:
    outcome = enqueue_job(TEST_JOB_TYPE, {"follow": "up"}, idempotency_key=str(uuid.uuid4()))
    assert outcome.disposition == "inserted"


@pytest.fixture
def definitions() -> None:
    JobDefinition.objects.bulk_create(
        [JobDefinition(job_type=job_type, max_attempts=3) for job_type in DEFINED_TYPES]
        + [JobDefinition(job_type=DISABLED_TYPE, is_enabled=False)]
    )


def delete_everything() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM runledger_job_enqueue_intents")
        cursor.execute("DELETE FROM runledger_job_queue")


def check_in_caller_transaction(
    call: Call,
    attempt: Callable[[Call], Any],
    check_stored: Callable[[Any, Call], None],
    follow_up: Callable[[], None],
) -> None:
    with transaction.atomic():  # the caller's transaction (a savepoint of the test's)
        before = row_counts()
        try:
            outcome = attempt(call)
        except RunledgerError as error:
            assert_rejected(error, call)
            assert row_counts() == before, "a rejected call wrote rows"
        else:
            check_stored(outcome, call)
        # Still usable: a query and a later valid call in the same block.
        follow_up()
        transaction.set_rollback(True)


def check_in_own_transaction(
    call: Call,
    attempt: Callable[[Call], Any],
    check_stored: Callable[[Any, Call], None],
    follow_up: Callable[[], None],
) -> None:
    assert not connection.in_atomic_block
    before = row_counts()
    try:
        try:
            outcome = attempt(call)
        except RunledgerError as error:
            assert_rejected(error, call)
            assert row_counts() == before, "a rejected call wrote rows"
        else:
            check_stored(outcome, call)
        follow_up()
    finally:
        delete_everything()


@FUZZ_SETTINGS
@given(call=calls(for_intent=True))
@with_found_examples(for_intent=True)
def test_record_intent__fuzzed_arguments_in_caller_transaction__stored_or_rejected_cleanly(
    call: Call,
) -> None:
    check_in_caller_transaction(call, call_record, assert_intent_stored, follow_up_record)


@FUZZ_SETTINGS
@given(call=calls(for_intent=False))
@with_found_examples(for_intent=False)
def test_enqueue_job__fuzzed_arguments_in_caller_transaction__stored_or_rejected_cleanly(
    definitions: None, call: Call
) -> None:
    check_in_caller_transaction(call, call_enqueue, assert_job_stored, follow_up_enqueue)


@pytest.mark.django_db(transaction=True)
@FUZZ_SETTINGS
@given(call=calls(for_intent=True))
@with_found_examples(for_intent=True)
def test_record_intent__fuzzed_arguments_in_own_transaction__stored_or_rejected_cleanly(
    call: Call,
) -> None:
    check_in_own_transaction(call, call_record, assert_intent_stored, follow_up_record)


@pytest.mark.django_db(transaction=True)
@FUZZ_SETTINGS
@given(call=calls(for_intent=False))
@with_found_examples(for_intent=False)
def test_enqueue_job__fuzzed_arguments_in_own_transaction__stored_or_rejected_cleanly(
    definitions: None, call: Call
) -> None:
    check_in_own_transaction(call, call_enqueue, assert_job_stored, follow_up_enqueue)
