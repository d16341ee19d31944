"""Classification of real server errors (reference 7.1): each one is provoked on PostgreSQL.

Every statement runs in a savepoint of the test transaction; the role used for 42501 is
created inside it too, so nothing outlives the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connection, transaction

from runledger_django.db.classify import (
    REFERENCED_TABLES,
    classify,
    driver_error,
    is_session_fatal,
    sqlstate_of,
)
from runledger_django.errors import RunledgerError
from runledger_django.models import JobDefinition
from tests.conftest import TEST_JOB_TYPE, insert_raw_intent, run_sql

pytestmark = pytest.mark.django_db

SECRET = "secret-idempotency-key"  # noqa: S105 - a marker, not a password


def failure(sql: str, params: Any = None) -> DatabaseError:
    """The Django error a statement raises, after its savepoint rolled back."""
    with pytest.raises(DatabaseError) as info, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    return info.value


def classified(sql: str, params: Any = None) -> RunledgerError:
    error = classify(failure(sql, params), "test operation")
    assert SECRET not in repr(error)
    assert SECRET not in str(error)
    return error


def summary(error: RunledgerError) -> tuple[str, str, str | None, str | None]:
    return error.code, error.category.value, error.sqlstate, error.constraint


@pytest.fixture
def definition() -> JobDefinition:
    return JobDefinition.objects.create(job_type=TEST_JOB_TYPE, max_attempts=3)


def insert_job_sql(**columns: Any) -> tuple[str, dict[str, Any]]:
    values: dict[str, Any] = {"job_type": TEST_JOB_TYPE, "max_attempts": 3, **columns}
    names = ", ".join(values)
    placeholders = ", ".join(f"%({name})s" for name in values)
    return f"INSERT INTO runledger_job_queue ({names}) VALUES ({placeholders}) RETURNING id", values


def insert_job(**columns: Any) -> uuid.UUID:
    sql, params = insert_job_sql(**columns)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    assert row is not None
    return uuid.UUID(str(row[0]))


# --- constraint-specific mappings --------------------------------------------------------------


@pytest.mark.parametrize("organization_id", [None, uuid.uuid4()], ids=["global", "org"])
def test_classify__duplicate_keyed_job__already_enqueued(
    definition: JobDefinition, organization_id: uuid.UUID | None
) -> None:
    columns = {
        "idempotency_key": SECRET,
        "enqueue_request": "{}",
        "organization_id": organization_id,
    }
    insert_job(**columns)
    scope = "org" if organization_id else "global"
    assert summary(classified(*insert_job_sql(**columns))) == (
        "job.already_enqueued",
        "conflict",
        "23505",
        f"uq_job_queue_type_idempotency_{scope}",
    )


def test_classify__job_without_definition__definition_not_found() -> None:
    sql, params = insert_job_sql(job_type="jobs.test.missing")
    error = classified(sql, params)
    assert summary(error) == (
        "job.definition_not_found",
        "validation",
        "23503",
        "fk_job_queue_job_type",
    )
    assert error.client_message == "Job definition does not exist."


def test_classify__delete_definition_still_used__still_referenced(
    definition: JobDefinition, server_version_num: int
) -> None:
    """The same foreign key read from the other side: the definition exists, jobs use it."""
    insert_job()
    error = classified("DELETE FROM runledger_job_definitions WHERE job_type = %s", [TEST_JOB_TYPE])
    assert summary(error) == (
        "db.related_resource_still_referenced",
        "validation",
        "23001" if server_version_num >= 180000 else "23503",
        "fk_job_queue_job_type",
    )


def test_classify__both_sides_of_a_key__same_structured_fields(definition: JobDefinition) -> None:
    """Why the classifier looks past the structured fields: a missing parent and a parent still
    in use report the same table, schema and constraint (the referencing table's), so only the
    tables the message names tell the two apart. If PostgreSQL ever reports the referenced
    table instead, this fails and the classifier can drop the message names."""
    missing = driver_error(failure(*insert_job_sql(job_type="jobs.test.missing")))
    insert_job()
    in_use = driver_error(
        failure("DELETE FROM runledger_job_definitions WHERE job_type = %s", [TEST_JOB_TYPE])
    )
    assert missing is not None
    assert in_use is not None
    fields = [
        (error.diag.table_name, error.diag.schema_name, error.diag.constraint_name)
        for error in (missing, in_use)
    ]
    assert fields[0] == fields[1] == ("runledger_job_queue", "public", "fk_job_queue_job_type")


def test_classify__host_key_to_jobs__missing_or_still_referenced() -> None:
    """A host project's own NO ACTION key to the job queue: 23503 from both sides on every
    server (NO ACTION keeps 23503 on PostgreSQL 18 too), told apart without the message's words."""
    run_sql(
        "CREATE TABLE host_receipts (job_id uuid CONSTRAINT receipts_job "
        "REFERENCES runledger_job_queue (id))"
    )
    JobDefinition.objects.create(job_type=TEST_JOB_TYPE, max_attempts=3)
    job_id = insert_job()
    run_sql("INSERT INTO host_receipts VALUES (%s)", [job_id])

    missing = classified("INSERT INTO host_receipts VALUES (%s)", [uuid.uuid4()])
    in_use = classified("DELETE FROM runledger_job_queue WHERE id = %s", [job_id])

    assert summary(missing) == (
        "db.related_resource_missing",
        "validation",
        "23503",
        "receipts_job",
    )
    assert summary(in_use) == (
        "db.related_resource_still_referenced",
        "validation",
        "23503",
        "receipts_job",
    )


def test_classify__referenced_tables__every_parent_of_a_schema_key() -> None:
    """The classifier's list of parent tables covers every foreign key the migrations create."""
    parents = run_sql(
        """
        SELECT DISTINCT confrelid::regclass::text FROM pg_constraint
        WHERE contype = 'f' AND left(conrelid::regclass::text, 10) = 'runledger_'
        """
    )
    assert parents
    assert {parent for (parent,) in parents} <= set(REFERENCED_TABLES)


# --- by SQLSTATE -------------------------------------------------------------------------------


def test_classify__unique_violation__unique_violation() -> None:
    insert_raw_intent(idempotency_key=SECRET)
    with pytest.raises(DatabaseError) as info, transaction.atomic():
        insert_raw_intent(idempotency_key=SECRET)
    error = classify(info.value, "test operation")
    assert summary(error) == (
        "db.unique_violation",
        "conflict",
        "23505",
        "uq_job_enqueue_intents_type_idempotency_global",
    )
    assert error.client_message == "Resource already exists."
    assert SECRET not in repr(error)
    assert SECRET in error.internal_message or "duplicate key" in error.internal_message


def test_classify__missing_referenced_row__related_resource_missing() -> None:
    error = classified(
        "INSERT INTO runledger_job_events (job_id, event_type) VALUES (%s, 'ENQUEUED')",
        [uuid.uuid4()],
    )
    assert summary(error) == (
        "db.related_resource_missing",
        "validation",
        "23503",
        "fk_job_events_job",
    )
    assert error.client_message == "Related resource does not exist."


def test_classify__promoted_link_to_missing_job__related_resource_missing() -> None:
    """The promoted-job key on its referencing side: 23503 means missing, not restricted."""
    with pytest.raises(DatabaseError) as info, transaction.atomic():
        insert_raw_intent(
            status="PROMOTED",
            promotion_attempts=1,
            last_attempted_at="2026-01-01T00:00:00Z",
            promoted_at="2026-01-01T00:00:00Z",
            promoted_job_id=uuid.uuid4(),
        )
    assert summary(classify(info.value, "test operation")) == (
        "db.related_resource_missing",
        "validation",
        "23503",
        "fk_job_enqueue_intents_promoted_job",
    )


def test_classify__delete_promoted_job__still_referenced(
    definition: JobDefinition, server_version_num: int
) -> None:
    job_id = insert_job()
    insert_raw_intent(
        status="PROMOTED",
        promotion_attempts=1,
        last_attempted_at="2026-01-01T00:00:00Z",
        promoted_at="2026-01-01T00:00:00Z",
        promoted_job_id=job_id,
    )
    error = classified("DELETE FROM runledger_job_queue WHERE id = %s", [job_id])
    assert summary(error) == (
        "db.related_resource_still_referenced",
        "validation",
        "23001" if server_version_num >= 180000 else "23503",
        "fk_job_enqueue_intents_promoted_job",
    )
    assert error.client_message == "Related resource is still referenced and cannot be deleted."


def test_classify__check_violation__business_rule_violation() -> None:
    with pytest.raises(DatabaseError) as info, transaction.atomic():
        insert_raw_intent(max_attempts=0)
    error = classify(info.value, "test operation")
    assert summary(error) == (
        "db.business_rule_violation",
        "validation",
        "23514",
        "chk_job_enqueue_intents_max_attempts_positive",
    )
    assert error.client_message == "Request violates a business rule."


def test_classify__not_null_violation__required_field_missing() -> None:
    error = classified(
        "INSERT INTO runledger_job_enqueue_intents (job_type, payload, idempotency_key, "
        "enqueue_request) VALUES ('jobs.t', NULL, %s, '{}')",
        [SECRET],
    )
    assert summary(error)[:3] == ("db.required_field_missing", "validation", "23502")
    assert error.client_message == "Required data is missing."


def test_classify__no_privilege__permission_denied() -> None:
    role = f"runledger_test_{uuid.uuid4().hex[:12]}"
    with connection.cursor() as cursor:
        cursor.execute(f'CREATE ROLE "{role}" NOLOGIN')
    error = None
    with pytest.raises(DatabaseError) as info, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(f'SET LOCAL ROLE "{role}"')
            cursor.execute("SELECT count(*) FROM runledger_job_enqueue_intents")
    error = classify(info.value, "test operation")
    assert summary(error) == ("db.permission_denied", "forbidden", "42501", None)
    assert error.client_message == "Operation is not allowed."
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user = session_user")
        assert cursor.fetchone() == (True,)


def test_classify__lock_timeout__query_failed(
    open_session: Callable[..., psycopg.Connection[Any]],
) -> None:
    """55P03 is an outage-like failure, retried by promotion: internal, not a conflict."""
    holder = open_session(autocommit=False)
    holder.execute("LOCK TABLE runledger_job_definitions IN ACCESS EXCLUSIVE MODE")
    with pytest.raises(DatabaseError) as info, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '50ms'")
            cursor.execute("SELECT count(*) FROM runledger_job_definitions")
    holder.rollback()
    error = classify(info.value, "test operation")
    assert summary(error) == ("db.query_failed", "internal", "55P03", None)
    assert error.client_message == "Database operation failed."
    assert not is_session_fatal(info.value)


def test_classify__statement_timeout__query_failed_not_session_fatal() -> None:
    with pytest.raises(DatabaseError) as info, transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL statement_timeout = '20ms'")
            cursor.execute("SELECT pg_sleep(1)")
    assert summary(classify(info.value, "test operation")) == (
        "db.query_failed",
        "internal",
        "57014",
        None,
    )
    assert not is_session_fatal(info.value)


@pytest.mark.parametrize(
    ("sql", "sqlstate"),
    [
        ("SELECT 1 / 0", "22012"),
        ("SELECT * FROM runledger_no_such_table", "42P01"),
        (f"DO $$ BEGIN RAISE EXCEPTION '{SECRET}'; END $$", "P0001"),
        (f"SELECT '{SECRET}'::uuid", "22P02"),
    ],
    ids=["division", "undefined-table", "trigger-style-raise", "bad-uuid"],
)
def test_classify__unmapped_sqlstate__query_failed(sql: str, sqlstate: str) -> None:
    error = classified(sql)
    assert summary(error) == ("db.query_failed", "internal", sqlstate, None)
    assert error.client_message == "Database operation failed."
    assert error.internal_message.startswith("test operation: ")


def test_classify__internal_message__kept_for_the_server_only() -> None:
    error = classified(f"DO $$ BEGIN RAISE EXCEPTION '{SECRET}'; END $$")
    assert error.internal_message == f"test operation: {SECRET}"
    assert SECRET not in repr(error)
    assert SECRET not in str(error)
    assert SECRET not in str(error.log_fields())


def test_classify__error_without_driver_cause__query_failed_and_session_fatal() -> None:
    bare = DatabaseError("connection already closed")
    error = classify(bare, "test operation")
    assert summary(error) == ("db.query_failed", "internal", None, None)
    assert error.internal_message == "test operation: DatabaseError"
    assert sqlstate_of(bare) is None
    assert is_session_fatal(bare)
