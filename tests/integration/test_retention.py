"""Retention of promoted intents: cutoff cleanup and exact-job cleanup (reference 4.5, 8.1).

Tests that need promoted intents are ``transaction=True`` because promotion owns its
transaction; so are the tests that set a transaction's isolation level, which must be the
transaction's first statement. The rest run inside the per-test transaction.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from runledger_django import (
    RunledgerError,
    delete_promoted_intents_before,
    delete_promoted_intents_for_jobs,
    enqueue_job,
    promote_intents,
    record_intent,
)
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent
from runledger_django.services.retention import PLANNER_SETTINGS
from tests.conftest import TEST_JOB_TYPE, MakeDefinition, run_sql

TYPE = TEST_JOB_TYPE
OWNS_TRANSACTION = pytest.mark.django_db(transaction=True)
pytestmark = pytest.mark.django_db


def show(setting: str) -> str:
    [(value,)] = run_sql(f"SHOW {setting}")
    return str(value)


def promoted(keys: list[str]) -> dict[str, uuid.UUID]:
    """Record and promote one intent per key; return each key's job id."""
    for key in keys:
        record_intent(TYPE, {"key": key}, idempotency_key=key)
    report = promote_intents([TYPE], limit=1000)
    assert report.inserted_jobs == len(keys)
    rows = JobEnqueueIntent.objects.filter(idempotency_key__in=keys)
    return {row.idempotency_key: row.promoted_job_id for row in rows if row.promoted_job_id}


def intent_keys() -> set[str]:
    return set(JobEnqueueIntent.objects.values_list("idempotency_key", flat=True))


# --- the reference scenario: convergence on old jobs and exact retention -------------------


@OWNS_TRANSACTION
def test_retention__direct_enqueues_converge_or_conflict__exact_cleanup_releases_the_old_job(
    make_definition: MakeDefinition,
) -> None:
    definition = make_definition(is_enabled=False)
    pending = record_intent(TYPE, {"key": "pending"}, idempotency_key="pending").intent_id
    assert promote_intents([TYPE], limit=10).to_dict() == promote_intents([]).to_dict()
    assert JobEnqueueIntent.objects.get(id=pending).status == "PENDING"

    JobDefinition.objects.filter(pk=definition.pk).update(is_enabled=True)
    old = enqueue_job(TYPE, {"key": "equivalent"}, idempotency_key="equivalent").job_id
    run_sql(
        "UPDATE runledger_job_queue SET created_at = now() - interval '1 year' WHERE id = %s",
        [old],
    )
    enqueue_job(TYPE, {"other": "request"}, idempotency_key="conflicting")
    converged = record_intent(TYPE, {"key": "equivalent"}, idempotency_key="equivalent").intent_id
    conflicted = record_intent(TYPE, {"key": "conflicting"}, idempotency_key="conflicting")

    report = promote_intents([TYPE], limit=10)

    assert report.to_dict() == {
        "inserted_jobs": 1,
        "existing_jobs": 1,
        "conflicted": 1,
        "definition_became_unavailable": 0,
        "retry_deferred": 0,
        "total_promoted": 2,
        "batch_was_full": False,
    }
    assert JobEnqueueIntent.objects.get(id=converged).promoted_job_id == old
    with pytest.raises(IntegrityError) as caught:
        run_sql("DELETE FROM runledger_job_queue WHERE id = %s", [old])
    cause = caught.value.__cause__
    assert isinstance(cause, psycopg.Error)
    assert cause.sqlstate in ("23001", "23503")  # RESTRICT: 23001 on 18, 23503 before
    assert cause.diag.constraint_name == "fk_job_enqueue_intents_promoted_job"

    # The promotion is new even though its job is a year old: a time cutoff cannot order them.
    assert delete_promoted_intents_before(timezone.now() - dt.timedelta(days=1), limit=10) == 0

    with transaction.atomic():
        assert delete_promoted_intents_for_jobs([]) == 0
        run_sql("SET LOCAL lock_timeout = '11s'")
        run_sql("SET LOCAL statement_timeout = '41s'")
        assert delete_promoted_intents_for_jobs([old]) == 1
        assert (show("lock_timeout"), show("statement_timeout")) == ("11s", "41s")
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM runledger_job_queue WHERE id = %s", [old])
            assert cursor.rowcount == 1

    assert not JobEnqueueIntent.objects.filter(id=converged).exists()
    assert not Job.objects.filter(id=old).exists()
    state = JobEnqueueIntent.objects.get(id=conflicted.intent_id).state
    assert (state.state, state.promotion_attempts) == ("conflicted", 1)
    assert state.error is not None
    assert state.error.code == "job.idempotency_conflict"


# --- cutoff cleanup ------------------------------------------------------------------------


@OWNS_TRANSACTION
def test_delete_promoted_intents_before__bounded__oldest_promotions_first(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    jobs = promoted([f"cut-{n}" for n in range(5)])
    for n in range(5):
        # cut-0 is the oldest promotion.
        run_sql(
            "UPDATE runledger_job_enqueue_intents SET promoted_at = now() - %s * interval '1 hour'"
            " WHERE idempotency_key = %s",
            [10 - n, f"cut-{n}"],
        )
    cutoff = timezone.now()

    assert delete_promoted_intents_before(cutoff, limit=2) == 2
    assert intent_keys() == {"cut-2", "cut-3", "cut-4"}
    assert delete_promoted_intents_before(cutoff, limit=2) == 2
    assert delete_promoted_intents_before(cutoff, limit=2) == 1
    assert delete_promoted_intents_before(cutoff, limit=2) == 0
    # The jobs stay: only the intents (and with them the FK fence) go.
    assert Job.objects.filter(id__in=jobs.values()).count() == 5


@OWNS_TRANSACTION
def test_delete_promoted_intents_before__pending_conflicted_and_newer__never_deleted(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    promoted(["old-promoted", "new-promoted"])
    enqueue_job(TYPE, {"other": True}, idempotency_key="conflicted")
    record_intent(TYPE, {"key": "conflicted"}, idempotency_key="conflicted")
    assert promote_intents([TYPE]).conflicted == 1
    record_intent(TYPE, {"key": "pending"}, idempotency_key="pending")
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET created_at = now() - interval '30 days',"
        " conflicted_at = CASE WHEN status = 'CONFLICTED' THEN now() - interval '30 days' END,"
        " promoted_at = CASE idempotency_key WHEN 'old-promoted' THEN now() - interval '30 days'"
        " WHEN 'new-promoted' THEN now() END"
    )

    deleted = delete_promoted_intents_before(timezone.now() - dt.timedelta(days=1), limit=1000)

    assert deleted == 1
    assert intent_keys() == {"new-promoted", "conflicted", "pending"}


@pytest.mark.parametrize("limit", [0, -1, 1001, None, "10"])
def test_delete_promoted_intents_before__invalid_limit__rejected_before_sql(
    limit: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as caught:
        delete_promoted_intents_before(timezone.now(), limit=limit)
    assert (caught.value.code, caught.value.category) == (
        "job.invalid_pagination",
        ErrorCategory.VALIDATION,
    )


@pytest.mark.parametrize("cutoff", [dt.datetime(2030, 1, 1), "2030-01-01T00:00:00Z", None])
def test_delete_promoted_intents_before__not_an_aware_datetime__rejected_before_sql(
    cutoff: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as caught:
        delete_promoted_intents_before(cutoff, limit=10)
    assert (caught.value.code, caught.value.category) == (
        "job.invalid_argument",
        ErrorCategory.VALIDATION,
    )


def test_delete_promoted_intents_before__limit_1000__accepted() -> None:
    assert delete_promoted_intents_before(timezone.now(), limit=1000) == 0


# --- exact-job cleanup: arguments and the transaction contract ------------------------------


@OWNS_TRANSACTION
@pytest.mark.parametrize("job_ids", [[], [uuid.uuid4()]])
def test_delete_promoted_intents_for_jobs__outside_atomic_block__raises_before_sql(
    job_ids: list[uuid.UUID], django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as caught:
        delete_promoted_intents_for_jobs(job_ids)
    assert (caught.value.code, caught.value.category) == (
        "job.intent_retention_requires_transaction",
        ErrorCategory.VALIDATION,
    )


def test_delete_promoted_intents_for_jobs__empty_list__zero_without_sql(
    django_assert_num_queries: DjangoAssertNumQueries,
) -> None:
    with django_assert_num_queries(0):
        assert delete_promoted_intents_for_jobs([]) == 0
        assert delete_promoted_intents_for_jobs(iter([])) == 0


def test_delete_promoted_intents_for_jobs__batch_limit__1000_accepted_1001_rejected() -> None:
    assert delete_promoted_intents_for_jobs([uuid.uuid4() for _ in range(1000)]) == 0

    with pytest.raises(RunledgerError) as caught:
        delete_promoted_intents_for_jobs(uuid.uuid4() for _ in range(1001))

    assert (caught.value.code, caught.value.category) == (
        "job.intent_retention_batch_too_large",
        ErrorCategory.VALIDATION,
    )
    assert caught.value.client_message == (
        "Job enqueue intent retention batch must contain at most 1,000 job IDs."
    )
    assert run_sql("SELECT 1") == [(1,)]


@pytest.mark.parametrize("job_ids", [["not-a-uuid"], [42], "0190f0e0-0000-7000-8000-000000000000"])
def test_delete_promoted_intents_for_jobs__malformed_ids__rejected_before_sql(
    job_ids: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as caught:
        delete_promoted_intents_for_jobs(job_ids)
    assert (caught.value.code, caught.value.category) == (
        "job.invalid_argument",
        ErrorCategory.VALIDATION,
    )


@OWNS_TRANSACTION
@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_delete_promoted_intents_for_jobs__stale_snapshot_isolation__rejected_before_locking(
    isolation: str,
) -> None:
    """An older snapshot would miss promotions committed just before the fence."""
    with transaction.atomic():
        run_sql(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
        with pytest.raises(RunledgerError) as caught:
            delete_promoted_intents_for_jobs([uuid.uuid4()])
        assert (caught.value.code, caught.value.category) == (
            "job.intent_retention_unsupported_isolation",
            ErrorCategory.VALIDATION,
        )
        assert caught.value.client_message == (
            "Job enqueue intent retention requires READ COMMITTED transaction isolation."
        )
        assert run_sql("SELECT 1") == [(1,)]
        held = run_sql(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        assert held == [(0,)]


# --- exact-job cleanup: what it deletes, and the caller's settings ---------------------------


@OWNS_TRANSACTION
def test_delete_promoted_intents_for_jobs__exact_ids__deletes_only_their_promoted_intents(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    jobs = promoted(["first", "second", "third"])
    record_intent(TYPE, {"key": "pending"}, idempotency_key="pending")

    with transaction.atomic():
        # Text ids are accepted; an unknown id changes nothing.
        deleted = delete_promoted_intents_for_jobs(
            [str(jobs["first"]), jobs["third"], uuid.uuid4()]
        )

    assert deleted == 2
    assert intent_keys() == {"second", "pending"}
    assert Job.objects.count() == 3


@OWNS_TRANSACTION
@pytest.mark.parametrize(
    ("lock_timeout", "statement_timeout"),
    [(None, None), ("100ms", "2s"), ("1min", "2min"), ("30000ms", "35001ms")],
)
def test_delete_promoted_intents_for_jobs__caller_timeouts__restored_exactly(
    make_definition: MakeDefinition, lock_timeout: str | None, statement_timeout: str | None
) -> None:
    make_definition()
    jobs = promoted(["restore"])
    with transaction.atomic():
        if lock_timeout:
            run_sql(f"SET LOCAL lock_timeout = '{lock_timeout}'")
        if statement_timeout:
            run_sql(f"SET LOCAL statement_timeout = '{statement_timeout}'")
        before = (show("lock_timeout"), show("statement_timeout"))

        assert delete_promoted_intents_for_jobs(list(jobs.values())) == 1

        assert (show("lock_timeout"), show("statement_timeout")) == before


@OWNS_TRANSACTION
@pytest.mark.parametrize(
    ("caller_lock", "caller_statement", "seen"),
    [
        (None, None, ("5s", "35s")),
        ("100ms", "2s", ("100ms", "2s")),
        ("1min", "1h", ("5s", "35s")),
    ],
)
def test_delete_promoted_intents_for_jobs__critical_section__capped_keeping_stricter_values(
    make_definition: MakeDefinition,
    caller_lock: str | None,
    caller_statement: str | None,
    seen: tuple[str, str],
) -> None:
    """Row-lock waits are capped at 5 s and statements at 35 s unless the caller is stricter."""
    make_definition()
    jobs = promoted(["capped"])
    run_sql("CREATE TABLE runledger_test_seen (lock_timeout text, statement_timeout text)")
    run_sql(
        "CREATE FUNCTION runledger_test_seen_settings() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN INSERT INTO runledger_test_seen VALUES (current_setting('lock_timeout'),"
        " current_setting('statement_timeout')); RETURN OLD; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_seen_settings BEFORE DELETE"
        " ON runledger_job_enqueue_intents FOR EACH ROW"
        " EXECUTE FUNCTION runledger_test_seen_settings()"
    )
    try:
        with transaction.atomic():
            if caller_lock:
                run_sql(f"SET LOCAL lock_timeout = '{caller_lock}'")
            if caller_statement:
                run_sql(f"SET LOCAL statement_timeout = '{caller_statement}'")
            assert delete_promoted_intents_for_jobs(list(jobs.values())) == 1
        assert run_sql("SELECT * FROM runledger_test_seen") == [seen]
    finally:
        run_sql("DROP TRIGGER runledger_test_seen_settings ON runledger_job_enqueue_intents")
        run_sql("DROP FUNCTION runledger_test_seen_settings()")
        run_sql("DROP TABLE runledger_test_seen")


def planner_settings() -> dict[str, str]:
    return {name: show(name) for name in PLANNER_SETTINGS}


@OWNS_TRANSACTION
def test_delete_promoted_intents_for_jobs__caller_planner_settings__restored_exactly(
    make_definition: MakeDefinition,
) -> None:
    """Retention plans its statements with the settings a promotion pass pins, inside the
    caller's transaction, and hands the caller's own settings back."""
    make_definition()
    jobs = promoted(["planner"])
    with transaction.atomic():
        run_sql("SET LOCAL enable_hashjoin = off")
        run_sql("SET LOCAL enable_sort = off")
        before = planner_settings()

        assert delete_promoted_intents_for_jobs(list(jobs.values())) == 1

        assert planner_settings() == before
        assert show("enable_hashjoin") == "off"
    assert planner_settings()["enable_nestloop"] == "on"


@OWNS_TRANSACTION
def test_delete_promoted_intents_before__inside_caller_block__planner_settings_restored(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    promoted(["old-planner"])
    run_sql("UPDATE runledger_job_enqueue_intents SET promoted_at = now() - interval '2 days'")
    cutoff = timezone.now() - dt.timedelta(days=1)
    with transaction.atomic():
        before = planner_settings()
        assert delete_promoted_intents_before(cutoff, limit=10) == 1
        assert planner_settings() == before
