"""Value types: JSON shapes of reference 5, scopes, and the persisted-lifecycle decoder."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from typing import Any

import pytest

from runledger_django.domain import (
    EnqueueOutcome,
    IntentMetrics,
    IntentOutcome,
    IntentState,
    IntentStatus,
    JobStatus,
    PromotionError,
    PromotionReport,
    ReadScope,
    format_timestamp,
)
from runledger_django.errors import RunledgerError
from runledger_django.models.intents import decode_intent_state

INTENT_ID = uuid.UUID("0190f6c2-1c2d-7a3b-8c4d-5e6f708192a3")
JOB_ID = uuid.UUID("0190f6c2-1c2d-7a3b-8c4d-5e6f708192a4")
T1 = dt.datetime(2026, 5, 22, 10, 30, 45, 123456, tzinfo=dt.UTC)
T2 = dt.datetime(2026, 5, 22, 10, 31, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
ERROR = PromotionError(code="job.idempotency_conflict", message="Job enqueue retry conflicts.")


# --- IntentOutcome -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "job_id", "state"),
    [
        (IntentStatus.PENDING, None, {"state": "pending"}),
        (IntentStatus.PROMOTED, JOB_ID, {"state": "promoted", "job_id": str(JOB_ID)}),
        (IntentStatus.CONFLICTED, None, {"state": "conflicted"}),
    ],
)
def test_intent_outcome_to_dict__each_status__json_ready(
    status: IntentStatus, job_id: uuid.UUID | None, state: dict[str, str]
) -> None:
    outcome = IntentOutcome(
        intent_id=INTENT_ID, status=status, job_id=job_id, disposition="existing"
    )
    data = outcome.to_dict()
    assert data == {
        "intent_id": str(INTENT_ID),
        "status": status.value,
        "state": state,
        "job_id": str(job_id) if job_id else None,
        "disposition": "existing",
    }
    assert json.loads(json.dumps(data)) == data


def test_intent_outcome__frozen() -> None:
    outcome = IntentOutcome(
        intent_id=INTENT_ID, status=IntentStatus.PENDING, job_id=None, disposition="inserted"
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.status = IntentStatus.PROMOTED  # type: ignore[misc]


def test_intent_status__str_enum_of_words() -> None:
    assert [status.value for status in IntentStatus] == ["PENDING", "PROMOTED", "CONFLICTED"]
    assert IntentStatus.PENDING == "PENDING"
    assert isinstance(IntentStatus.CONFLICTED, str)
    with pytest.raises(ValueError, match="pending"):
        IntentStatus("pending")


# --- IntentState (reference 5) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (IntentState(state="initial_pending"), {"state": "initial_pending"}),
        (
            IntentState(
                state="retry_pending", promotion_attempts=1, last_attempted_at=T1, error=ERROR
            ),
            {
                "state": "retry_pending",
                "promotion_attempts": 1,
                "last_attempted_at": "2026-05-22T10:30:45.123456Z",
                "error": {"code": ERROR.code, "message": ERROR.message},
            },
        ),
        (
            IntentState(
                state="promoted",
                promotion_attempts=2,
                last_attempted_at=T1,
                job_id=JOB_ID,
                promoted_at=T2,
            ),
            {
                "state": "promoted",
                "promotion_attempts": 2,
                "last_attempted_at": "2026-05-22T10:30:45.123456Z",
                "job_id": str(JOB_ID),
                "promoted_at": "2026-05-22T08:31:00.000000Z",
            },
        ),
        (
            IntentState(
                state="conflicted",
                promotion_attempts=3,
                last_attempted_at=T1,
                conflicted_at=T1,
                error=ERROR,
            ),
            {
                "state": "conflicted",
                "promotion_attempts": 3,
                "last_attempted_at": "2026-05-22T10:30:45.123456Z",
                "conflicted_at": "2026-05-22T10:30:45.123456Z",
                "error": {"code": ERROR.code, "message": ERROR.message},
            },
        ),
    ],
    ids=["initial_pending", "retry_pending", "promoted", "conflicted"],
)
def test_intent_state_to_dict__each_variant__reference_shape(
    state: IntentState, expected: dict[str, Any]
) -> None:
    data = state.to_dict()
    assert data == expected
    assert list(data) == list(expected)  # the reference's key order
    assert json.loads(json.dumps(data)) == data


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("initial_pending", IntentStatus.PENDING),
        ("retry_pending", IntentStatus.PENDING),
        ("promoted", IntentStatus.PROMOTED),
        ("conflicted", IntentStatus.CONFLICTED),
    ],
)
def test_intent_state_status__each_variant(state: Any, status: IntentStatus) -> None:
    assert IntentState(state=state).status == status


def test_format_timestamp__utc_six_digits_and_z() -> None:
    assert format_timestamp(None) is None
    assert format_timestamp(T1) == "2026-05-22T10:30:45.123456Z"
    assert format_timestamp(T2) == "2026-05-22T08:31:00.000000Z"


# --- decoding persisted lifecycle columns (reference 5) ----------------------------------------

INITIAL: dict[str, Any] = {
    "status": "PENDING",
    "promotion_attempts": 0,
    "last_attempted_at": None,
    "promoted_job_id": None,
    "promoted_at": None,
    "conflicted_at": None,
    "last_error_code": None,
    "last_error_message": None,
}
RETRY = {
    **INITIAL,
    "promotion_attempts": 1,
    "last_attempted_at": T1,
    "last_error_code": ERROR.code,
    "last_error_message": ERROR.message,
}
PROMOTED = {
    **INITIAL,
    "status": "PROMOTED",
    "promotion_attempts": 2,
    "last_attempted_at": T1,
    "promoted_job_id": JOB_ID,
    "promoted_at": T2,
}
CONFLICTED = {
    **RETRY,
    "status": "CONFLICTED",
    "promotion_attempts": 3,
    "conflicted_at": T1,
}


@pytest.mark.parametrize(
    ("columns", "state"),
    [
        (INITIAL, IntentState(state="initial_pending")),
        (
            RETRY,
            IntentState(
                state="retry_pending", promotion_attempts=1, last_attempted_at=T1, error=ERROR
            ),
        ),
        (
            PROMOTED,
            IntentState(
                state="promoted",
                promotion_attempts=2,
                last_attempted_at=T1,
                job_id=JOB_ID,
                promoted_at=T2,
            ),
        ),
        (
            CONFLICTED,
            IntentState(
                state="conflicted",
                promotion_attempts=3,
                last_attempted_at=T1,
                conflicted_at=T1,
                error=ERROR,
            ),
        ),
    ],
    ids=["initial_pending", "retry_pending", "promoted", "conflicted"],
)
def test_decode_intent_state__valid_shapes__typed_state(
    columns: dict[str, Any], state: IntentState
) -> None:
    assert decode_intent_state(**columns) == state


@pytest.mark.parametrize(
    "columns",
    [
        {**INITIAL, "status": "UNKNOWN"},
        {**INITIAL, "last_attempted_at": T1},
        {**INITIAL, "promotion_attempts": 1},
        {**RETRY, "last_error_message": None},
        {**RETRY, "last_error_code": " "},
        {**RETRY, "last_error_code": ""},
        {**RETRY, "promoted_job_id": JOB_ID},
        {**PROMOTED, "promoted_job_id": None},
        {**PROMOTED, "promoted_at": None},
        {**PROMOTED, "conflicted_at": T1},
        {**PROMOTED, "last_error_code": ERROR.code, "last_error_message": ERROR.message},
        {**CONFLICTED, "promoted_job_id": JOB_ID},
        {**CONFLICTED, "promoted_at": T1},
        {**CONFLICTED, "last_error_code": None},
        {**CONFLICTED, "conflicted_at": None},
        {**CONFLICTED, "promotion_attempts": 0},
    ],
    ids=[
        "unknown-status",
        "attempted-initial",
        "attempts-without-error",
        "incomplete-retry",
        "blank-error-code",
        "empty-error-code",
        "pending-with-job",
        "promoted-without-job",
        "promoted-without-time",
        "promoted-and-conflicted",
        "promoted-with-error",
        "conflicted-with-job",
        "conflicted-with-promoted-time",
        "conflicted-without-error",
        "conflicted-without-time",
        "conflicted-without-attempts",
    ],
)
def test_decode_intent_state__impossible_shapes__intent_invalid_persisted_row(
    columns: dict[str, Any],
) -> None:
    with pytest.raises(RunledgerError) as info:
        decode_intent_state(**columns)
    assert info.value.code == "job.intent_invalid_persisted_row"
    assert info.value.category == "internal"
    assert info.value.client_message == "Job enqueue intent contains invalid persisted state."


# --- ReadScope ---------------------------------------------------------------------------------


def test_read_scope__constants() -> None:
    assert ReadScope.GLOBAL.kind == "global"
    assert ReadScope.GLOBAL.organization_id is None
    assert not ReadScope.GLOBAL.is_admin
    assert ReadScope.ADMIN.kind == "admin"
    assert ReadScope.ADMIN.is_admin
    assert ReadScope.GLOBAL != ReadScope.ADMIN


def test_read_scope_organization__uuid_or_text__same_scope() -> None:
    org = uuid.uuid4()
    scope = ReadScope.organization(org)
    assert scope == ReadScope.organization(str(org))
    assert (scope.kind, scope.organization_id, scope.is_admin) == ("organization", org, False)
    assert scope != ReadScope.organization(uuid.uuid4())
    assert len({scope, ReadScope.organization(str(org)), ReadScope.GLOBAL}) == 2


@pytest.mark.parametrize("value", [None, "nope", 7, b"x"], ids=repr)
def test_read_scope_organization__not_a_uuid__invalid_organization_id(value: Any) -> None:
    """A missing organization never silently widens or narrows the scope."""
    with pytest.raises(RunledgerError) as info:
        ReadScope.organization(value)
    assert info.value.code == "job.invalid_organization_id"
    assert info.value.category == "validation"


def test_read_scope__frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        ReadScope.GLOBAL.kind = "admin"  # type: ignore[misc]


# --- other results -----------------------------------------------------------------------------


def test_enqueue_outcome_to_dict__json_ready() -> None:
    outcome = EnqueueOutcome(
        job_id=JOB_ID, status=JobStatus.CANCELED, run_number=1, disposition="existing"
    )
    assert outcome.to_dict() == {
        "job_id": str(JOB_ID),
        "status": "CANCELED",
        "run_number": 1,
        "disposition": "existing",
    }


def test_promotion_report__default__all_zero() -> None:
    report = PromotionReport()
    assert report.to_dict() == {
        "inserted_jobs": 0,
        "existing_jobs": 0,
        "conflicted": 0,
        "definition_became_unavailable": 0,
        "retry_deferred": 0,
        "total_promoted": 0,
        "batch_was_full": False,
    }
    assert not report.anything_happened
    assert PromotionReport(retry_deferred=1).anything_happened


def test_intent_metrics_to_dict__field_names_and_timestamp() -> None:
    metrics = IntentMetrics(
        job_type="jobs.a",
        pending_count=2,
        retrying_count=1,
        max_promotion_attempts=3,
        conflicted_24h=0,
        promoted_24h=4,
        oldest_pending_at=T1,
    )
    assert metrics.to_dict() == {
        "job_type": "jobs.a",
        "pending_count": 2,
        "retrying_count": 1,
        "max_promotion_attempts": 3,
        "conflicted_24h": 0,
        "promoted_24h": 4,
        "oldest_pending_at": "2026-05-22T10:30:45.123456Z",
    }
    assert (
        dataclasses.replace(metrics, oldest_pending_at=None).to_dict()["oldest_pending_at"] is None
    )
