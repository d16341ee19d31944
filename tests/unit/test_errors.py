"""RunledgerError: what callers, end users and logs may see, and the code catalog."""

from __future__ import annotations

import copy
import logging
import pickle
import traceback
from pathlib import Path

import pytest

from runledger_django.errors import (
    CATALOG,
    PERSISTED_ROW_CATALOG,
    Code,
    ErrorCategory,
    RunledgerError,
)

SECRET = "secret-idempotency-key"  # noqa: S105 - a marker, not a password

V, C, F, I = "validation", "conflict", "forbidden", "internal"  # noqa: E741

# Reference 7.2 (and 7.1's database codes), verbatim.
REFERENCE_CATALOG: dict[str, tuple[str, str]] = {
    "job.invalid_job_type": (V, "Job type must not be blank."),
    "job.intent_invalid_idempotency_key": (
        V,
        "Job enqueue intent idempotency key must not be blank.",
    ),
    "job.intent_invalid_max_attempts": (V, "Job enqueue intent max attempts must be positive."),
    "job.intent_invalid_timeout": (V, "Job enqueue intent timeout must be positive."),
    "job.invalid_execution_resource_key": (
        V,
        "Execution resource key must be non-blank and at most 512 bytes.",
    ),
    "job.intent_idempotency_unsupported_isolation": (
        V,
        "Job enqueue intent recording requires READ COMMITTED transaction isolation.",
    ),
    "job.intent_idempotency_conflict": (
        C,
        "Job enqueue intent retry conflicts with the existing idempotency key.",
    ),
    "job.intent_idempotency_conflict_missing_existing": (
        I,
        "Job enqueue intent retry could not be resolved.",
    ),
    "job.intent_invalid_persisted_row": (I, "Job enqueue intent contains invalid persisted state."),
    "job.intent_snapshot_mismatch": (I, "Job enqueue intent request snapshot is inconsistent."),
    "job.intent_transition_failed": (I, "Job enqueue intent could not be updated."),
    "job.intent_retention_batch_too_large": (
        V,
        "Job enqueue intent retention batch must contain at most 1,000 job IDs.",
    ),
    "job.intent_retention_unsupported_isolation": (
        V,
        "Job enqueue intent retention requires READ COMMITTED transaction isolation.",
    ),
    "job.invalid_pagination": (V, "Pagination limit and offset are invalid."),
    "job.enqueue_request_snapshot_failed": (I, "Job enqueue request could not be recorded."),
    "job.definition_not_found_or_disabled": (V, "Job type is not available."),
    "job.idempotency_conflict": (
        C,
        "Job enqueue retry conflicts with the existing idempotency key.",
    ),
    "job.legacy_idempotency_snapshot_missing": (
        C,
        "Job enqueue retry cannot be resolved because the existing idempotency key is missing "
        "its request snapshot.",
    ),
    "job.idempotency_conflict_missing_existing": (I, "Job enqueue retry could not be resolved."),
    "job.enqueue_idempotency_unsupported_isolation": (
        V,
        "Job idempotent enqueue requires READ COMMITTED transaction isolation.",
    ),
    "job.invalid_status": (I, "Job status in persisted row is invalid."),
    "job.already_enqueued": (C, "Job is already enqueued for this idempotency key."),
    "job.definition_not_found": (V, "Job definition does not exist."),
    "db.unique_violation": (C, "Resource already exists."),
    "db.related_resource_missing": (V, "Related resource does not exist."),
    "db.related_resource_still_referenced": (
        V,
        "Related resource is still referenced and cannot be deleted.",
    ),
    "db.business_rule_violation": (V, "Request violates a business rule."),
    "db.required_field_missing": (V, "Required data is missing."),
    "db.permission_denied": (F, "Operation is not allowed."),
    "db.query_failed": (I, "Database operation failed."),
    "db.transaction_commit_unconfirmed": (I, "Database transaction commit was not confirmed."),
}

# The persisted-row variants of reference 7.2: same code, internal category.
REFERENCE_PERSISTED_ROW: dict[str, tuple[str, str]] = {
    "job.invalid_job_type": (I, "Job type in persisted row is invalid."),
    "job.invalid_stage": (I, "Job stage in persisted row is invalid."),
}

# Codes SPEC.md adds; all of them reject bad input or a misuse before any SQL.
SPEC_ADDED_CODES = {
    "job.invalid_payload": V,
    "job.invalid_organization_id": V,
    "job.invalid_next_run_at": V,
    "job.invalid_priority": V,
    "job.invalid_stage": V,
    "job.invalid_idempotency_key_length": V,
    "job.intent_promotion_requires_own_transaction": V,
    "job.intent_retention_requires_transaction": V,
}


def make_error(**overrides: object) -> RunledgerError:
    error = RunledgerError.for_code(
        Code.INTENT_IDEMPOTENCY_CONFLICT,
        f"intent of type 'jobs.x' with key {SECRET!r} names a different request",
        sqlstate="23505",
        constraint="uq_job_enqueue_intents_type_idempotency_global",
    )
    for name, value in overrides.items():
        setattr(error, name, value)
    return error


def test_str__is_the_client_message() -> None:
    error = make_error()
    assert str(error) == "Job enqueue intent retry conflicts with the existing idempotency key."
    assert error.args == (error.client_message,)


def test_repr__never_shows_the_internal_message() -> None:
    error = make_error()
    assert SECRET in error.internal_message
    text = repr(error)
    assert SECRET not in text
    assert "job.intent_idempotency_conflict" in text
    assert "'conflict'" in text
    assert "23505" in text
    assert "uq_job_enqueue_intents_type_idempotency_global" in text


def test_repr__with_a_database_cause__hides_the_cause_text() -> None:
    error = make_error()
    try:
        try:
            raise RuntimeError(f"duplicate key value ({SECRET})")
        except RuntimeError as cause:
            raise error from cause
    except RunledgerError as raised:
        assert SECRET not in repr(raised)
        assert "has_cause=True" in repr(raised)
        assert SECRET not in str(raised)


def test_format_exception_only__shows_the_client_message_only() -> None:
    text = "".join(traceback.format_exception_only(make_error()))
    assert SECRET not in text
    assert "Job enqueue intent retry conflicts" in text


def test_log_fields__code_sqlstate_and_constraint_only() -> None:
    assert make_error().log_fields() == {
        "error_code": "job.intent_idempotency_conflict",
        "error_sqlstate": "23505",
        "error_constraint": "uq_job_enqueue_intents_type_idempotency_global",
    }
    bare = RunledgerError.for_code(Code.DB_QUERY_FAILED, SECRET)
    assert bare.log_fields() == {
        "error_code": "db.query_failed",
        "error_sqlstate": "none",
        "error_constraint": "none",
    }


def test_log_fields__logged_with_error__no_secret_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("runledger_django.tests")
    error = make_error()
    with caplog.at_level(logging.WARNING, logger="runledger_django"):
        logger.warning("promotion did not complete: %s %r", error, error, extra=error.log_fields())
    assert caplog.records[0].error_code == "job.intent_idempotency_conflict"  # type: ignore[attr-defined]
    assert SECRET not in caplog.text


def test_pickle__round_trip__keeps_every_field() -> None:
    error = make_error()
    restored = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own object
    assert type(restored) is RunledgerError
    assert restored.__dict__ == error.__dict__
    assert str(restored) == str(error)
    assert repr(restored) == repr(error)
    assert restored.args == error.args
    with pytest.raises(RunledgerError) as info:
        raise restored
    assert info.value.code == "job.intent_idempotency_conflict"


def test_copy__keeps_every_field() -> None:
    error = make_error()
    assert copy.copy(error).__dict__ == error.__dict__
    assert copy.deepcopy(error).__dict__ == error.__dict__


@pytest.mark.parametrize("code", sorted(REFERENCE_CATALOG))
def test_for_code__reference_catalog__category_and_client_message(code: str) -> None:
    error = RunledgerError.for_code(Code(code), "internal")
    assert (error.category.value, error.client_message) == REFERENCE_CATALOG[code]
    assert error.code == code
    assert type(error.code) is str


@pytest.mark.parametrize("code", sorted(REFERENCE_PERSISTED_ROW))
def test_for_code__persisted_row__internal_category_and_message(code: str) -> None:
    error = RunledgerError.for_code(Code(code), "internal", persisted_row=True)
    assert (error.category.value, error.client_message) == REFERENCE_PERSISTED_ROW[code]


def test_for_code__persisted_row_flag_on_other_code__ordinary_entry() -> None:
    error = RunledgerError.for_code(Code.INVALID_PAGINATION, "internal", persisted_row=True)
    assert (error.category, error.client_message) == (
        ErrorCategory.VALIDATION,
        "Pagination limit and offset are invalid.",
    )


@pytest.mark.parametrize("code", sorted(SPEC_ADDED_CODES))
def test_for_code__spec_added_codes__validation(code: str) -> None:
    error = RunledgerError.for_code(Code(code), "internal")
    assert error.category.value == SPEC_ADDED_CODES[code]
    assert error.client_message.endswith(".")


def test_catalog__every_code_has_an_entry() -> None:
    assert set(CATALOG) == set(Code)
    assert set(PERSISTED_ROW_CATALOG) <= set(Code)


def test_catalog__client_messages_never_mention_internals() -> None:
    """Client messages are static: no placeholders, no table names."""
    for category, message in [*CATALOG.values(), *PERSISTED_ROW_CATALOG.values()]:
        assert isinstance(category, ErrorCategory)
        assert "{" not in message
        assert "runledger_" not in message


def test_error_category__values() -> None:
    assert {category.value for category in ErrorCategory} == {V, C, F, I}


def test_catalog__every_code_documented_with_its_client_message() -> None:
    """docs/errors.md is the operator's reference: every code and client message is in it."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    missing = [
        code.value
        for code, (_, message) in CATALOG.items()
        if f"`{code.value}`" not in text or message not in text
    ]
    assert missing == []
