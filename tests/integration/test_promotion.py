"""promote_intents: one pass turns pending intents into ordinary jobs (reference 4.4, 8.1).

The tests are ``transaction=True``: promotion owns its transaction and refuses to run inside an
atomic block, so a pass cannot run inside the per-test transaction (tests that are refused
before any pass use the plain marker). Triggers stand in for failing rows; they are dropped
again at teardown.

A pass first promotes the claimed batch set-based; every row that does not insert cleanly
(existing key, conflict, drift, invalid stage, a failing trigger) falls back to the reference's
per-row savepoint path, at most 24 rows per pass. The tests cover both paths.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from pytest_django import DjangoAssertNumQueries

from runledger_django import (
    PromotionReport,
    ReadScope,
    RunledgerError,
    delete_promoted_intents_before,
    enqueue_job,
    intent_metrics,
    list_intents,
    promote_intents,
    record_intent,
)
from runledger_django.domain import format_timestamp
from runledger_django.errors import Code, ErrorCategory
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent, JobEvent
from runledger_django.services.promotion_pass import failure_action
from tests.conftest import TEST_JOB_TYPE, MakeDefinition, insert_raw_intent, run_sql

pytestmark = pytest.mark.django_db(transaction=True)
NO_PROMOTION_PASS = pytest.mark.django_db
"""For tests that never reach a pass: they can run inside the cheaper per-test transaction."""

TYPE = TEST_JOB_TYPE
InstallTrigger = Callable[[str, str, str], None]
DropConstraint = Callable[[str, str, str], None]


def assert_report(report: PromotionReport, **expected: Any) -> None:
    """Compare the whole report, and check its invariant on every pass."""
    assert report.to_dict() == {**PromotionReport().to_dict(), **expected}
    assert report.total_promoted == report.inserted_jobs + report.existing_jobs


def drift(intent_id: uuid.UUID) -> None:
    """Make the stored snapshot disagree with the redundant columns (a terminal conflict)."""
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET enqueue_request = '{}'::jsonb WHERE id = %s",
        [intent_id],
    )


def record(key: str, payload: Any = None, **kwargs: Any) -> uuid.UUID:
    outcome = record_intent(
        kwargs.pop("job_type", TYPE),
        {"key": key} if payload is None else payload,
        idempotency_key=key,
        **kwargs,
    )
    return outcome.intent_id


def intent_values(intent_id: uuid.UUID) -> dict[str, Any]:
    return dict(
        JobEnqueueIntent.objects.values(
            "status",
            "promotion_attempts",
            "promoted_job_id",
            "last_error_code",
            "last_error_message",
        ).get(id=intent_id)
    )


def job_of(intent: JobEnqueueIntent) -> uuid.UUID:
    """The promoted job id of an intent that must have one."""
    assert intent.promoted_job_id is not None
    return intent.promoted_job_id


PENDING_UNTOUCHED = {
    "status": "PENDING",
    "promotion_attempts": 0,
    "promoted_job_id": None,
    "last_error_code": None,
    "last_error_message": None,
}


@pytest.fixture
def install_trigger() -> Iterator[InstallTrigger]:
    """Create a row trigger whose plpgsql body is given; dropped at teardown."""
    installed: list[tuple[str, str]] = []

    def install(table: str, timing: str, body: str) -> None:
        name = f"runledger_test_trigger_{len(installed)}"
        run_sql(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body} END $$"
        )
        run_sql(f"CREATE TRIGGER {name} {timing} ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()")
        installed.append((name, table))

    yield install
    for name, table in installed:
        run_sql(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        run_sql(f"DROP FUNCTION IF EXISTS {name}()")


@pytest.fixture
def drop_constraint() -> Iterator[DropConstraint]:
    """Drop a CHECK to build a row the schema forbids; teardown deletes such rows and restores
    the constraint exactly as the catalog had it."""
    dropped: list[tuple[str, str, str, str]] = []

    def drop(table: str, name: str, cleanup: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = %s", [name]
            )
            row = cursor.fetchone()
        assert row is not None, name
        run_sql(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        dropped.append((table, name, row[0], cleanup))

    yield drop
    for table, name, definition, cleanup in dropped:
        run_sql(cleanup)
        run_sql(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")


# --- the ordinary job a promotion creates -------------------------------------------------


def test_promote_intents__overrides__creates_ordinary_job_event_metrics_and_cleanup_state(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    org = uuid.uuid4()
    run_at = dt.datetime(2035, 4, 3, 2, 1, 0, 123456, tzinfo=dt.UTC)
    intent_id = record(
        "analytics:acct_1",
        {"account": "acct_1"},
        organization_id=org,
        priority=250,
        max_attempts=5,
        timeout_seconds=45,
        next_run_at=run_at,
        stage="scheduled",
        execution_resource_key="analytics:account:acct_1",
    )
    stored = JobEnqueueIntent.objects.get(id=intent_id)
    assert stored.next_run_at == run_at
    assert stored.enqueue_request["next_run_at"] == "2035-04-03T02:01:00.123456Z"
    scope = ReadScope.organization(org)
    assert [m.to_dict() for m in intent_metrics(scope=scope)] == [
        {
            "job_type": TYPE,
            "pending_count": 1,
            "retrying_count": 0,
            "max_promotion_attempts": 0,
            "conflicted_24h": 0,
            "promoted_24h": 0,
            "oldest_pending_at": format_timestamp(stored.created_at),
        }
    ]

    report = promote_intents([TYPE], limit=10)

    assert_report(report, inserted_jobs=1, total_promoted=1)
    intent = JobEnqueueIntent.objects.get(id=intent_id)
    state = intent.state
    assert (state.state, state.promotion_attempts, state.job_id) == (
        "promoted",
        1,
        intent.promoted_job_id,
    )
    assert intent.enqueue_request_version == 1
    assert intent.last_attempted_at is not None
    assert intent.promoted_at == intent.last_attempted_at
    job = Job.objects.values(
        "status",
        "priority",
        "max_attempts",
        "timeout_seconds",
        "next_run_at",
        "stage",
        "execution_resource_key",
        "organization_id",
        "idempotency_key",
        "payload",
        "run_number",
        "attempt",
        "enqueue_request",
    ).get(id=job_of(intent))
    assert job == {
        "status": "PENDING",
        "priority": 250,
        "max_attempts": 5,
        "timeout_seconds": 45,
        "next_run_at": run_at,
        "stage": "scheduled",
        "execution_resource_key": "analytics:account:acct_1",
        "organization_id": org,
        "idempotency_key": "analytics:acct_1",
        "payload": {"account": "acct_1"},
        "run_number": 1,
        "attempt": 0,
        "enqueue_request": stored.enqueue_request,
    }
    events = JobEvent.objects.filter(job_id=job_of(intent))
    assert list(events.values("event_type", "run_number", "attempt", "stage", "payload")) == [
        {
            "event_type": "ENQUEUED",
            "run_number": 1,
            "attempt": None,
            "stage": "scheduled",
            "payload": {"job_type": TYPE},
        }
    ]
    [after] = intent_metrics(scope=scope)
    assert (after.pending_count, after.retrying_count, after.max_promotion_attempts) == (0, 0, 0)
    assert (after.promoted_24h, after.oldest_pending_at) == (1, None)

    run_sql(
        "UPDATE runledger_job_enqueue_intents SET promoted_at = now() - interval '25 hours'"
        " WHERE id = %s",
        [intent_id],
    )
    assert intent_metrics(scope=scope) == []
    listed = list_intents(scope=scope, status="PROMOTED", job_type_query="enqueue_intent")
    assert [row.id for row in listed] == [intent_id]

    cutoff = timezone.now() + dt.timedelta(seconds=1)
    assert delete_promoted_intents_before(cutoff, limit=10) == 1
    assert not JobEnqueueIntent.objects.filter(id=intent_id).exists()
    assert Job.objects.filter(id=job_of(intent)).exists()


def test_promote_intents__no_overrides__current_definition_defaults_apply(
    make_definition: MakeDefinition,
) -> None:
    """Defaults are read at promotion time, not at record time."""
    definition = make_definition()
    intent_id = record("defaults")
    JobDefinition.objects.filter(pk=definition.pk).update(
        default_priority=-7, max_attempts=9, default_timeout_seconds=11
    )

    assert_report(promote_intents([TYPE]), inserted_jobs=1, total_promoted=1)

    intent = JobEnqueueIntent.objects.get(id=intent_id)
    job = Job.objects.values("priority", "max_attempts", "timeout_seconds", "stage").get(
        id=job_of(intent)
    )
    assert job == {"priority": -7, "max_attempts": 9, "timeout_seconds": 11, "stage": "queued"}
    # next_run_at defaults to now() of the promotion transaction, as does promoted_at.
    assert Job.objects.get(id=job_of(intent)).next_run_at == intent.promoted_at


def test_promote_intents__jsonb_numeric_normalisation__retry_converges_and_promotes(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    first = record_intent(TYPE, {"value": 1.7e18}, idempotency_key="numeric")
    retry = record_intent(TYPE, {"value": 1700000000000000000}, idempotency_key="numeric")
    assert (retry.intent_id, retry.disposition) == (first.intent_id, "existing")

    assert_report(
        promote_intents([TYPE], limit=1), inserted_jobs=1, total_promoted=1, batch_was_full=True
    )

    intent = JobEnqueueIntent.objects.get(id=first.intent_id)
    assert intent.status == "PROMOTED"
    assert Job.objects.get(id=job_of(intent)).payload == {"value": 1700000000000000000}


# --- the set-based fast path --------------------------------------------------------------


def pass_statements(server_version_num: int) -> int:
    """Statements of a pass whose batch promotes set-based: the idle look outside any
    transaction, then SET TRANSACTION, the lock cap (and transaction_timeout cap on 17+),
    planner settings, the eligibility check, the fence, savepoint, the claiming batch
    statement, release."""
    return 9 + (1 if server_version_num >= 170000 else 0)


def statements(captured: CaptureQueriesContext) -> list[str]:
    """Captured SQL without transaction control (Django 6 also records BEGIN and COMMIT) and
    without the client-side budget's statement_timeout re-caps (one per 0.25 s on 15/16)."""
    return [
        query["sql"]
        for query in captured.captured_queries
        if query["sql"].strip().upper() not in ("BEGIN", "COMMIT", "ROLLBACK")
        and "current_setting('statement_timeout')" not in query["sql"]
    ]


@pytest.mark.parametrize("size", [1, 30])
def test_promote_intents__healthy_batch__promotes_set_based_in_constant_statements(
    make_definition: MakeDefinition, server_version_num: int, size: int
) -> None:
    """More rows than the 24-savepoint bound promote in one pass without any per-row statement."""
    make_definition()
    orgs = [None, uuid.uuid4(), uuid.uuid4()]
    ids = [record(f"fast-{n}", organization_id=orgs[n % 3]) for n in range(size)]

    with CaptureQueriesContext(connection) as captured:
        report = promote_intents([TYPE], limit=1000)

    assert len(statements(captured)) == pass_statements(server_version_num)
    assert_report(report, inserted_jobs=size, total_promoted=size)
    intents = JobEnqueueIntent.objects.filter(id__in=ids)
    assert {row.status for row in intents} == {"PROMOTED"}
    assert {row.promotion_attempts for row in intents} == {1}
    job_ids = {job_of(row) for row in intents}
    assert len(job_ids) == size
    jobs = Job.objects.filter(id__in=job_ids)
    assert {(job.idempotency_key, job.organization_id) for job in jobs} == {
        (f"fast-{n}", orgs[n % 3]) for n in range(size)
    }
    assert JobEvent.objects.filter(job_id__in=job_ids, event_type="ENQUEUED").count() == size


def test_promote_intents__existing_key_in_batch__others_fast_one_converges(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    direct = enqueue_job(TYPE, {"key": "converge"}, idempotency_key="converge")
    healthy = [record("healthy-1"), record("healthy-2")]
    converging = record("converge")

    assert_report(promote_intents([TYPE]), inserted_jobs=2, existing_jobs=1, total_promoted=3)

    intent = JobEnqueueIntent.objects.get(id=converging)
    assert (intent.status, intent.promoted_job_id) == ("PROMOTED", direct.job_id)
    assert Job.objects.filter(idempotency_key="converge").count() == 1
    # Convergence writes no second ENQUEUED event for the existing job.
    assert JobEvent.objects.filter(job_id=direct.job_id).count() == 1
    assert {JobEnqueueIntent.objects.get(id=i).status for i in healthy} == {"PROMOTED"}


def test_promote_intents__existing_key_other_request__conflicted_others_promoted(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    enqueue_job(TYPE, {"different": True}, idempotency_key="conflict")
    healthy = record("healthy")
    conflicting = record("conflict")

    assert_report(promote_intents([TYPE]), inserted_jobs=1, conflicted=1, total_promoted=1)

    intent = JobEnqueueIntent.objects.get(id=conflicting)
    assert intent_values(conflicting) == {
        "status": "CONFLICTED",
        "promotion_attempts": 1,
        "promoted_job_id": None,
        "last_error_code": "job.idempotency_conflict",
        "last_error_message": "Job enqueue retry conflicts with the existing idempotency key.",
    }
    assert intent.state.state == "conflicted"
    assert intent.conflicted_at == intent.last_attempted_at
    assert JobEnqueueIntent.objects.get(id=healthy).status == "PROMOTED"


@pytest.fixture
def legacy_jobs_allowed(drop_constraint: DropConstraint) -> None:
    """Keyed jobs without a request snapshot, as rows written before snapshots existed."""
    drop_constraint(
        "runledger_job_queue",
        "ck_job_queue_idempotency_enqueue_request",
        "DELETE FROM runledger_job_queue WHERE idempotency_key IS NOT NULL"
        " AND enqueue_request IS NULL",
    )


@pytest.mark.usefixtures("legacy_jobs_allowed")
def test_promote_intents__legacy_job_without_snapshot__conflicted(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    legacy = enqueue_job(TYPE, {"key": "legacy"}, idempotency_key="legacy")
    run_sql("UPDATE runledger_job_queue SET enqueue_request = NULL WHERE id = %s", [legacy.job_id])
    intent_id = record("legacy")

    assert_report(promote_intents([TYPE]), conflicted=1)

    assert intent_values(intent_id)["last_error_code"] == "job.legacy_idempotency_snapshot_missing"


def test_promote_intents__missing_existing_job__retry_deferred(
    make_definition: MakeDefinition, install_trigger: InstallTrigger
) -> None:
    """A keyed insert that inserts nothing and finds no winner is retried, never conflicted."""
    make_definition()
    install_trigger(
        "runledger_job_queue",
        "BEFORE INSERT",
        "IF NEW.idempotency_key = 'vanishing' THEN RETURN NULL; END IF; RETURN NEW;",
    )
    healthy = record("healthy")
    vanishing = record("vanishing")

    assert_report(promote_intents([TYPE]), inserted_jobs=1, retry_deferred=1, total_promoted=1)

    assert intent_values(vanishing) == {
        "status": "PENDING",
        "promotion_attempts": 1,
        "promoted_job_id": None,
        "last_error_code": "job.idempotency_conflict_missing_existing",
        "last_error_message": "Job enqueue retry could not be resolved.",
    }
    assert JobEnqueueIntent.objects.get(id=healthy).status == "PROMOTED"


# --- rows that fall back to the per-row path ----------------------------------------------


def test_promote_intents__invalid_persisted_stage__conflicts_without_starving_valid_intent(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    # A stage this version does not know: only a newer writer (or corruption) produces it.
    poison = insert_raw_intent(stage="future_stage", idempotency_key="poison")
    healthy = record("healthy")

    assert_report(promote_intents([TYPE]), inserted_jobs=1, conflicted=1, total_promoted=1)

    row = JobEnqueueIntent.objects.get(id=poison)
    assert intent_values(poison) == {
        "status": "CONFLICTED",
        "promotion_attempts": 1,
        "promoted_job_id": None,
        "last_error_code": "job.invalid_stage",
        "last_error_message": "Job stage in persisted row is invalid.",
    }
    assert row.conflicted_at is not None
    assert JobEnqueueIntent.objects.get(id=healthy).status == "PROMOTED"
    assert not Job.objects.filter(idempotency_key="poison").exists()


def test_promote_intents__invalid_persisted_resource_key__conflicts_without_starving_valid_intent(
    make_definition: MakeDefinition, drop_constraint: DropConstraint
) -> None:
    make_definition()
    drop_constraint(
        "runledger_job_enqueue_intents",
        "chk_job_enqueue_intents_execution_resource_key",
        "DELETE FROM runledger_job_enqueue_intents WHERE idempotency_key = 'blank-resource'",
    )
    poison = insert_raw_intent(idempotency_key="blank-resource", execution_resource_key="\u3000")
    healthy = record("healthy")

    assert_report(promote_intents([TYPE]), inserted_jobs=1, conflicted=1, total_promoted=1)

    assert intent_values(poison) == {
        "status": "CONFLICTED",
        "promotion_attempts": 1,
        "promoted_job_id": None,
        "last_error_code": "job.invalid_execution_resource_key",
        "last_error_message": "Execution resource key must be non-blank and at most 512 bytes.",
    }
    assert JobEnqueueIntent.objects.get(id=healthy).status == "PROMOTED"


def test_promote_intents__snapshot_drift__conflicted_on_first_pass_without_starving(
    make_definition: MakeDefinition,
) -> None:
    """A deliberate departure from the reference, which defers drift forever: nothing rewrites
    a snapshot or its columns, so no later pass could decide otherwise."""
    make_definition()
    poison = record("poison")
    drift(poison)
    healthy = record("healthy")

    assert_report(promote_intents([TYPE]), inserted_jobs=1, conflicted=1, total_promoted=1)

    state = JobEnqueueIntent.objects.get(id=poison).state
    assert (state.state, state.promotion_attempts) == ("conflicted", 1)
    assert state.error is not None
    assert state.error.to_dict() == {
        "code": "job.intent_snapshot_mismatch",
        "message": "Job enqueue intent request snapshot is inconsistent.",
    }
    assert JobEnqueueIntent.objects.get(id=healthy).status == "PROMOTED"
    assert not Job.objects.filter(idempotency_key="poison").exists()
    run_sql("UPDATE runledger_job_enqueue_intents SET next_promotion_at = now() - interval '1 s'")
    assert_report(promote_intents([TYPE]))


def test_promote_intents__event_trigger_fails_for_one_row__defers_it_and_rolls_back_its_job(
    make_definition: MakeDefinition, install_trigger: InstallTrigger
) -> None:
    make_definition()
    install_trigger(
        "runledger_job_events",
        "BEFORE INSERT",
        "IF (SELECT payload ->> 'fail' FROM runledger_job_queue WHERE id = NEW.job_id) = 'yes'"
        " THEN RAISE EXCEPTION 'event rejected'; END IF; RETURN NEW;",
    )
    failing = record("failing", {"fail": "yes"})
    healthy = record("healthy", {"fail": "no"})

    assert_report(promote_intents([TYPE]), inserted_jobs=1, retry_deferred=1, total_promoted=1)

    assert not Job.objects.filter(idempotency_key="failing").exists()
    row = JobEnqueueIntent.objects.get(id=failing)
    assert intent_values(failing) == {
        "status": "PENDING",
        "promotion_attempts": 1,
        "promoted_job_id": None,
        "last_error_code": "db.query_failed",
        "last_error_message": "Database operation failed.",
    }
    assert row.last_attempted_at is not None
    assert row.next_promotion_at > row.last_attempted_at
    [metrics] = intent_metrics(scope=ReadScope.GLOBAL)
    assert (metrics.retrying_count, metrics.max_promotion_attempts) == (1, 1)
    assert JobEnqueueIntent.objects.get(id=healthy).status == "PROMOTED"

    # The deferred row is not eligible yet: the next pass finds nothing.
    assert_report(promote_intents([TYPE]))

    run_sql("DROP TRIGGER runledger_test_trigger_0 ON runledger_job_events")
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET next_promotion_at = now() WHERE id = %s",
        [failing],
    )
    assert_report(promote_intents([TYPE]), inserted_jobs=1, total_promoted=1)
    assert intent_values(failing)["status"] == "PROMOTED"
    assert intent_values(failing)["promotion_attempts"] == 2
    assert intent_values(failing)["last_error_code"] is None


def test_promote_intents__worker_version__skips_newer_snapshot_versions_without_mutating_them(
    make_definition: MakeDefinition, drop_constraint: DropConstraint
) -> None:
    make_definition()
    drop_constraint(
        "runledger_job_enqueue_intents",
        "chk_job_enqueue_intents_enqueue_request_version",
        "DELETE FROM runledger_job_enqueue_intents WHERE enqueue_request_version <> 1",
    )
    newer = insert_raw_intent(idempotency_key="v2", enqueue_request_version=2)
    current = record("v1")

    assert_report(promote_intents([TYPE]), inserted_jobs=1, total_promoted=1)

    assert intent_values(newer) == PENDING_UNTOUCHED
    assert intent_values(current)["status"] == "PROMOTED"
    # Never claimed, so a later pass still finds nothing for it.
    assert_report(promote_intents([TYPE]))


def test_promote_intents__25_drifted_rows__caps_savepoint_batch_below_subtransaction_cache(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    for n in range(25):
        drift(record(f"drift-{n}"))

    report = promote_intents([TYPE], limit=1000)

    assert_report(report, conflicted=24, batch_was_full=True)
    [metrics] = intent_metrics(scope=ReadScope.GLOBAL)
    assert metrics.to_dict() | {"oldest_pending_at": None} == {
        "job_type": TYPE,
        "pending_count": 1,
        "retrying_count": 0,
        "max_promotion_attempts": 0,
        "conflicted_24h": 24,
        "promoted_24h": 0,
        "oldest_pending_at": None,
    }


def test_promote_intents__fast_rows_beside_25_fallbacks__all_fast_rows_promoted(
    make_definition: MakeDefinition,
) -> None:
    """The 24-savepoint bound applies to fallback rows only; healthy rows are not held back."""
    make_definition()
    for n in range(25):
        drift(record(f"drift-{n}"))
    healthy = [record(f"healthy-{n}") for n in range(10)]

    report = promote_intents([TYPE], limit=1000)

    assert_report(report, inserted_jobs=10, conflicted=24, total_promoted=10, batch_was_full=True)
    assert {JobEnqueueIntent.objects.get(id=i).status for i in healthy} == {"PROMOTED"}


# --- a burst of existing keys settles set-based ----------------------------------------------

BURST = 30
"""More rows needing a decision than the per-row path takes in one pass."""


def per_row_statements(captured: CaptureQueriesContext) -> list[str]:
    """The per-row path's statements: it reads the claimed rows' columns to decode them."""
    return [q["sql"] for q in captured.captured_queries if "AS enqueue_request" in q["sql"]]


@pytest.mark.parametrize("organization_id", [None, uuid.UUID(int=9)], ids=["global", "org"])
def test_promote_intents__burst_of_identical_direct_enqueues__converges_set_based(
    make_definition: MakeDefinition, organization_id: uuid.UUID | None
) -> None:
    make_definition()
    jobs = {
        f"direct-{n}": enqueue_job(
            TYPE,
            {"key": f"direct-{n}"},
            idempotency_key=f"direct-{n}",
            organization_id=organization_id,
        ).job_id
        for n in range(BURST)
    }
    intents = {key: record(key, organization_id=organization_id) for key in jobs}

    with CaptureQueriesContext(connection) as captured:
        report = promote_intents([TYPE], limit=1000)

    assert_report(report, existing_jobs=BURST, total_promoted=BURST)
    assert per_row_statements(captured) == []
    assert {
        key: JobEnqueueIntent.objects.get(id=intent_id).promoted_job_id
        for key, intent_id in intents.items()
    } == jobs
    assert {intent_values(i)["promotion_attempts"] for i in intents.values()} == {1}
    # Convergence writes no job and no second ENQUEUED event.
    assert Job.objects.count() == BURST
    assert JobEvent.objects.count() == BURST


@pytest.mark.usefixtures("legacy_jobs_allowed")
def test_promote_intents__burst_of_other_requests_and_a_legacy_job__conflicted_set_based(
    make_definition: MakeDefinition, caplog: pytest.LogCaptureFixture
) -> None:
    make_definition()
    for n in range(BURST):
        enqueue_job(TYPE, {"other": n}, idempotency_key=f"clash-{n}")
    run_sql(
        "UPDATE runledger_job_queue SET enqueue_request = NULL WHERE idempotency_key = 'clash-0'"
    )
    intents = [record(f"clash-{n}") for n in range(BURST)]
    healthy = record("healthy")
    caplog.set_level(logging.WARNING, logger="runledger_django")

    with CaptureQueriesContext(connection) as captured:
        report = promote_intents([TYPE], limit=1000)

    assert_report(report, inserted_jobs=1, conflicted=BURST, total_promoted=1)
    assert per_row_statements(captured) == []
    legacy, *others = [intent_values(i) for i in intents]
    assert legacy == {
        "status": "CONFLICTED",
        "promotion_attempts": 1,
        "promoted_job_id": None,
        "last_error_code": "job.legacy_idempotency_snapshot_missing",
        "last_error_message": (
            "Job enqueue retry cannot be resolved because the existing idempotency key is "
            "missing its request snapshot."
        ),
    }
    assert {tuple(row.items()) for row in others} == {
        tuple(
            {
                "status": "CONFLICTED",
                "promotion_attempts": 1,
                "promoted_job_id": None,
                "last_error_code": "job.idempotency_conflict",
                "last_error_message": (
                    "Job enqueue retry conflicts with the existing idempotency key."
                ),
            }.items()
        )
    }
    assert intent_values(healthy)["status"] == "PROMOTED"
    warned = sorted(
        (r.__dict__["runledger"]["intent_id"], r.__dict__["runledger"]["promotion_outcome"])
        for r in caplog.records
        if "runledger" in r.__dict__ and "promotion_outcome" in r.__dict__["runledger"]
    )
    assert warned == sorted((str(i), "conflicted") for i in intents)


def test_promote_intents__burst_beside_drifted_rows__drift_still_decided_per_row(
    make_definition: MakeDefinition,
) -> None:
    """Set-based settling only decides rows with an existing job; drift is left to the per-row
    path, which compares the snapshot Python builds and conflicts it."""
    make_definition()
    for n in range(BURST):
        enqueue_job(TYPE, {"key": f"direct-{n}"}, idempotency_key=f"direct-{n}")
    converging = [record(f"direct-{n}") for n in range(BURST)]
    drifted = [record(f"drift-{n}") for n in range(3)]
    for intent_id in drifted:
        drift(intent_id)

    report = promote_intents([TYPE], limit=1000)

    assert_report(report, existing_jobs=BURST, conflicted=3, total_promoted=BURST)
    assert {intent_values(i)["status"] for i in converging} == {"PROMOTED"}
    assert {(intent_values(i)["status"], intent_values(i)["last_error_code"]) for i in drifted} == {
        ("CONFLICTED", "job.intent_snapshot_mismatch")
    }


def test_promote_intents__burst_when_the_settling_statement_fails__rows_take_the_per_row_path(
    make_definition: MakeDefinition, install_trigger: InstallTrigger
) -> None:
    """A failing set-based settle is undone; the pass goes on with the first 24 rows."""
    make_definition()
    for n in range(BURST):
        enqueue_job(TYPE, {"key": f"direct-{n}"}, idempotency_key=f"direct-{n}")
    intents = [record(f"direct-{n}") for n in range(BURST)]
    install_trigger(
        "runledger_job_enqueue_intents",
        "BEFORE UPDATE",
        "IF current_query() LIKE '%%converge_job_enqueue_intents_batch%%' THEN"
        " RAISE EXCEPTION 'settle rejected'; END IF; RETURN NEW;",
    )

    report = promote_intents([TYPE], limit=1000)

    assert_report(report, existing_jobs=24, total_promoted=24, batch_was_full=True)
    assert [intent_values(i)["status"] for i in intents] == ["PROMOTED"] * 24 + ["PENDING"] * 6


# --- retry backoff -------------------------------------------------------------------------


def delays_us(intent_ids: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    rows = run_sql(
        "SELECT id, (extract(epoch FROM next_promotion_at - last_attempted_at)"
        " * 1000000)::bigint FROM runledger_job_enqueue_intents WHERE id = ANY(%s)",
        [intent_ids],
    )
    return {row[0]: row[1] for row in rows}


def refuse_jobs(install_trigger: InstallTrigger) -> None:
    """Every job insert fails (a trigger raises): each intent is retry-deferred per row."""
    install_trigger(
        "runledger_job_queue", "BEFORE INSERT", "RAISE EXCEPTION 'no jobs today'; RETURN NEW;"
    )


def test_promote_intents__deferred_retries__jittered_within_the_backoff_cap(
    make_definition: MakeDefinition, install_trigger: InstallTrigger
) -> None:
    make_definition()
    ids = [record(f"jitter-{n}") for n in range(8)]
    refuse_jobs(install_trigger)

    assert_report(promote_intents([TYPE]), retry_deferred=8)

    delays = delays_us(ids)
    assert all(1_000_000 <= delay <= 1_250_000 for delay in delays.values()), delays
    assert len(set(delays.values())) > 1


# Old attempt count -> (base delay, jitter bound), in seconds (reference 4.4).
BACKOFF = {
    0: (1, 0.25),
    1: (2, 0.5),
    2: (4, 1),
    3: (8, 2),
    4: (16, 4),
    5: (32, 8),
    6: (64, 16),
    7: (128, 32),
    8: (240, 60),
    9: (240, 60),
    10: (240, 60),
    1000: (240, 60),
}


def test_promote_intents__retry_delay__follows_the_backoff_table_by_old_attempt_count(
    make_definition: MakeDefinition, install_trigger: InstallTrigger
) -> None:
    make_definition()
    by_attempts: dict[uuid.UUID, int] = {}
    for attempts in BACKOFF:
        intent_id = record(f"backoff-{attempts}")
        if attempts:
            # A retry-pending row: the lifecycle CHECK wants the attempt time and an error.
            run_sql(
                "UPDATE runledger_job_enqueue_intents SET promotion_attempts = %s,"
                " last_attempted_at = now() - interval '1 hour',"
                " last_error_code = 'db.query_failed',"
                " last_error_message = 'Database operation failed.',"
                " next_promotion_at = now() - interval '1 minute' WHERE id = %s",
                [attempts, intent_id],
            )
        by_attempts[intent_id] = attempts
    refuse_jobs(install_trigger)

    assert_report(promote_intents([TYPE]), retry_deferred=len(BACKOFF))

    for intent_id, delay in delays_us(list(by_attempts)).items():
        base, jitter = BACKOFF[by_attempts[intent_id]]
        assert base * 1_000_000 <= delay <= (base + jitter) * 1_000_000, (by_attempts, delay)
        assert intent_values(intent_id)["promotion_attempts"] == by_attempts[intent_id] + 1


# --- classification (reference 8.2) --------------------------------------------------------


def db_error(sqlstate: str | None) -> DatabaseError:
    """A Django database error caused by a psycopg error with ``sqlstate`` (None: client-side)."""
    cause: psycopg.Error = (
        psycopg.errors.lookup(sqlstate)("server said no")
        if sqlstate
        else psycopg.OperationalError("the connection is lost")
    )
    error = DatabaseError("wrapped")
    error.__cause__ = cause
    return error


def row_error(code: Code, cause: BaseException | None = None, **kwargs: Any) -> RunledgerError:
    error = RunledgerError.for_code(code, "detail", **kwargs)
    error.__cause__ = cause
    return error


def case_id(value: object) -> str:
    if not isinstance(value, RunledgerError):
        return str(value)
    cause = value.__cause__
    detail = cause.__cause__ if isinstance(cause, DatabaseError) else cause
    suffix = getattr(detail, "sqlstate", None) or type(detail).__name__ if detail else ""
    return f"{value.code}-{suffix}" if suffix else value.code


@NO_PROMOTION_PASS
@pytest.mark.parametrize(
    ("error", "action"),
    [
        (row_error(Code.INTENT_INVALID_PERSISTED_ROW), "conflicted"),
        (row_error(Code.INVALID_JOB_TYPE, persisted_row=True), "conflicted"),
        (row_error(Code.INVALID_EXECUTION_RESOURCE_KEY), "conflicted"),
        (row_error(Code.INVALID_STAGE, persisted_row=True), "conflicted"),
        (row_error(Code.IDEMPOTENCY_CONFLICT_MISSING_EXISTING), "retry_deferred"),
        (row_error(Code.INTENT_SNAPSHOT_MISMATCH), "conflicted"),
        (row_error(Code.ENQUEUE_REQUEST_SNAPSHOT_FAILED), "conflicted"),
        (row_error(Code.INTENT_TRANSITION_FAILED), "retry_deferred"),
        (
            RunledgerError(
                category=ErrorCategory.INTERNAL,
                code="job.future_row_error",
                client_message="A code this version does not know.",
                internal_message="detail",
            ),
            "retry_deferred",
        ),
        (row_error(Code.DB_QUERY_FAILED, db_error("55P03"), sqlstate="55P03"), "retry_deferred"),
        (row_error(Code.DB_QUERY_FAILED, db_error("P0001"), sqlstate="P0001"), "retry_deferred"),
        (row_error(Code.DB_BUSINESS_RULE_VIOLATION, db_error("23514")), "retry_deferred"),
        (row_error(Code.DB_QUERY_FAILED, db_error("57014")), "retry_deferred"),
        (row_error(Code.DB_QUERY_FAILED, db_error(None)), "propagate"),
        (row_error(Code.DB_QUERY_FAILED, db_error("08006")), "propagate"),
        (row_error(Code.DB_QUERY_FAILED, db_error("57P01")), "propagate"),
        (row_error(Code.DB_QUERY_FAILED, db_error("25P04")), "propagate"),
        (row_error(Code.DB_QUERY_FAILED, RuntimeError("not a database error")), "propagate"),
        (row_error(Code.DB_TRANSACTION_COMMIT_UNCONFIRMED), "propagate"),
        (row_error(Code.INTENT_PROMOTION_BUDGET_EXHAUSTED), "propagate"),
    ],
    ids=lambda value: case_id(value),
)
def test_failure_action__classification_matrix(error: RunledgerError, action: str) -> None:
    """Only intrinsically invalid rows are terminal; session loss aborts the pass."""
    assert failure_action(error) == action


# --- transitions ---------------------------------------------------------------------------


def test_promote_intents__conflict_transition_touches_no_row__pass_fails_and_rolls_back(
    make_definition: MakeDefinition, install_trigger: InstallTrigger
) -> None:
    """A marking UPDATE that misses its row aborts the pass: nothing it did is kept."""
    make_definition()
    install_trigger(
        "runledger_job_enqueue_intents",
        "BEFORE UPDATE",
        "IF NEW.status = 'CONFLICTED' THEN RETURN NULL; END IF; RETURN NEW;",
    )
    healthy = record("healthy")
    insert_raw_intent(stage="future_stage", idempotency_key="poison")

    with pytest.raises(RunledgerError) as caught:
        promote_intents([TYPE])

    assert (caught.value.code, caught.value.category) == (
        "job.intent_transition_failed",
        ErrorCategory.INTERNAL,
    )
    assert caught.value.client_message == "Job enqueue intent could not be updated."
    assert intent_values(healthy) == PENDING_UNTOUCHED
    assert Job.objects.count() == 0


def test_promote_intents__promoted_transition_touches_no_row__deferred_and_job_rolled_back(
    make_definition: MakeDefinition, install_trigger: InstallTrigger
) -> None:
    """Inside the row's savepoint the failed transition defers the row and undoes its job,
    also when the set-based statement had inserted that job first."""
    make_definition()
    install_trigger(
        "runledger_job_enqueue_intents",
        "BEFORE UPDATE",
        "IF NEW.status = 'PROMOTED' AND NEW.idempotency_key = 'skipped' THEN RETURN NULL;"
        " END IF; RETURN NEW;",
    )
    healthy = record("healthy")
    skipped = record("skipped")

    assert_report(promote_intents([TYPE]), inserted_jobs=1, retry_deferred=1, total_promoted=1)

    assert intent_values(skipped) == {
        "status": "PENDING",
        "promotion_attempts": 1,
        "promoted_job_id": None,
        "last_error_code": "job.intent_transition_failed",
        "last_error_message": "Job enqueue intent could not be updated.",
    }
    assert not Job.objects.filter(idempotency_key="skipped").exists()
    assert JobEnqueueIntent.objects.get(id=healthy).status == "PROMOTED"
    assert Job.objects.count() == 1


def test_promote_intents__commit_fails__reports_commit_unconfirmed(
    make_definition: MakeDefinition,
) -> None:
    """A failed COMMIT leaves the pass's outcome unknown to the caller; a retry is safe."""
    make_definition()
    intent_id = record("commit")
    run_sql(
        "CREATE FUNCTION runledger_test_reject_commit() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'rejected at commit'; END $$"
    )
    run_sql(
        "CREATE CONSTRAINT TRIGGER runledger_test_reject_commit AFTER UPDATE"
        " ON runledger_job_enqueue_intents DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
        " EXECUTE FUNCTION runledger_test_reject_commit()"
    )
    try:
        with pytest.raises(RunledgerError) as caught:
            promote_intents([TYPE])
    finally:
        run_sql("DROP TRIGGER runledger_test_reject_commit ON runledger_job_enqueue_intents")
        run_sql("DROP FUNCTION runledger_test_reject_commit()")

    assert (caught.value.code, caught.value.category) == (
        "db.transaction_commit_unconfirmed",
        ErrorCategory.INTERNAL,
    )
    assert caught.value.__cause__ is not None
    assert intent_values(intent_id) == PENDING_UNTOUCHED
    assert_report(promote_intents([TYPE]), inserted_jobs=1, total_promoted=1)


# --- eligibility ----------------------------------------------------------------------------


def test_promote_intents__disabled_or_missing_definition__stays_pending_and_uncounted(
    make_definition: MakeDefinition,
) -> None:
    make_definition(is_enabled=False)
    disabled = record("disabled")
    missing = record("missing", job_type="jobs.test.no_definition")

    assert_report(promote_intents([TYPE, "jobs.test.no_definition"]))

    assert intent_values(disabled) == PENDING_UNTOUCHED
    assert intent_values(missing) == PENDING_UNTOUCHED
    JobDefinition.objects.filter(job_type=TYPE).update(is_enabled=True)
    assert_report(promote_intents([TYPE]), inserted_jobs=1, total_promoted=1)


def test_promote_intents__type_not_in_allow_list__untouched(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    make_definition("jobs.test.other")
    other = record("other", job_type="jobs.test.other")
    mine = record("mine")

    assert_report(promote_intents([TYPE]), inserted_jobs=1, total_promoted=1)

    assert intent_values(other) == PENDING_UNTOUCHED
    assert intent_values(mine)["status"] == "PROMOTED"


def test_promote_intents__future_next_promotion_at__not_claimed(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    later = record("later")
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET next_promotion_at = now() + interval '1 hour'"
        " WHERE id = %s",
        [later],
    )
    assert_report(promote_intents([TYPE]))
    assert intent_values(later) == PENDING_UNTOUCHED


def test_promote_intents__claim_order__oldest_next_promotion_first(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    newer = record("newer")
    older = record("older")
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET next_promotion_at = now() - interval '1 hour'"
        " WHERE id = %s",
        [older],
    )
    assert_report(
        promote_intents([TYPE], limit=1), inserted_jobs=1, total_promoted=1, batch_was_full=True
    )
    assert (intent_values(older)["status"], intent_values(newer)["status"]) == (
        "PROMOTED",
        "PENDING",
    )


# --- batch_was_full ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("eligible", "limit", "full"),
    [(3, 2, True), (3, 3, True), (3, 4, False), (30, 24, True), (30, 1000, False)],
)
def test_promote_intents__batch_was_full__when_the_claim_reached_the_limit(
    make_definition: MakeDefinition, eligible: int, limit: int, full: bool
) -> None:
    make_definition()
    for n in range(eligible):
        record(f"full-{n}")
    promoted = min(eligible, limit)

    report = promote_intents([TYPE], limit=limit)

    assert_report(report, inserted_jobs=promoted, total_promoted=promoted, batch_was_full=full)


def test_promote_intents__default_limit__claims_24_and_drains_in_passes(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    for n in range(30):
        record(f"drain-{n}")
    assert_report(promote_intents([TYPE]), inserted_jobs=24, total_promoted=24, batch_was_full=True)
    assert_report(promote_intents([TYPE]), inserted_jobs=6, total_promoted=6)
    assert_report(promote_intents([TYPE]))


# --- arguments, the idle path and the transaction contract ------------------------------------


@NO_PROMOTION_PASS
@pytest.mark.parametrize("limit", [0, -1, 1001, True, 2.0, "5", None])
def test_promote_intents__invalid_limit__rejected_before_sql(
    limit: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as caught:
        promote_intents([TYPE], limit=limit)
    assert (caught.value.code, caught.value.category) == (
        "job.invalid_pagination",
        ErrorCategory.VALIDATION,
    )


@pytest.mark.parametrize("limit", [1, 1000])
def test_promote_intents__limit_bounds__accepted(
    make_definition: MakeDefinition, limit: int
) -> None:
    make_definition()
    record("bounds")
    assert promote_intents([TYPE], limit=limit).total_promoted == 1


@NO_PROMOTION_PASS
@pytest.mark.parametrize(
    ("job_types", "code"),
    [
        (TYPE, "job.invalid_argument"),
        ([" \t"], "job.invalid_job_type"),
        ([7], "job.invalid_job_type"),
    ],
)
def test_promote_intents__invalid_job_types__rejected_before_sql(
    job_types: Any, code: str, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as caught:
        promote_intents(job_types)
    assert (caught.value.code, caught.value.category) == (code, ErrorCategory.VALIDATION)


@NO_PROMOTION_PASS
def test_promote_intents__empty_job_types__zero_report_without_sql(
    make_definition: MakeDefinition, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    make_definition()
    record("ignored")
    with django_assert_num_queries(0):
        report = promote_intents([])
    assert report == PromotionReport()


def test_promote_intents__nothing_eligible__no_lock_no_fence(
    make_definition: MakeDefinition,
) -> None:
    """An idle pass is one round trip: the planner settings and the eligibility check as one
    simple-protocol query outside any transaction block. It locks nothing, takes no fence and
    opens no transaction, so an idle promoter costs one query per poll."""
    make_definition()
    with CaptureQueriesContext(connection) as captured:
        report = promote_intents([TYPE])
    assert report == PromotionReport()
    sent = [query["sql"] for query in captured.captured_queries]
    assert len(sent) == 1, sent
    assert "enable_nestloop" in sent[0]
    assert "LIMIT 1" in sent[0]
    assert "FOR NO KEY UPDATE" not in sent[0]
    assert "pg_advisory" not in sent[0]
    assert connection.get_autocommit()


@NO_PROMOTION_PASS
def test_promote_intents__inside_atomic_block__raises_before_sql(
    make_definition: MakeDefinition, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    make_definition()
    record("inside")
    with (
        transaction.atomic(),
        django_assert_num_queries(0),
        pytest.raises(RunledgerError) as caught,
    ):
        promote_intents([TYPE])
    assert (caught.value.code, caught.value.category) == (
        "job.intent_promotion_requires_own_transaction",
        ErrorCategory.VALIDATION,
    )
    assert JobEnqueueIntent.objects.get(idempotency_key="inside").status == "PENDING"


def test_promote_intents__session_defaults_to_repeatable_read__pass_runs_read_committed(
    make_definition: MakeDefinition, install_trigger: InstallTrigger
) -> None:
    """The owned transaction overrides a stricter session default."""
    make_definition()
    run_sql("CREATE TABLE runledger_test_seen (isolation text)")
    try:
        install_trigger(
            "runledger_job_enqueue_intents",
            "BEFORE UPDATE",
            "INSERT INTO runledger_test_seen VALUES (current_setting('transaction_isolation'));"
            " RETURN NEW;",
        )
        record("isolation")
        run_sql("SET default_transaction_isolation = 'repeatable read'")
        try:
            assert promote_intents([TYPE]).inserted_jobs == 1
        finally:
            run_sql("RESET default_transaction_isolation")
        assert run_sql("SELECT isolation FROM runledger_test_seen") == [("read committed",)]
    finally:
        run_sql("DROP TABLE runledger_test_seen")


def log_fields(log_record: logging.LogRecord) -> Any:
    """The structured fields a runledger log record carries in ``extra``."""
    return log_record.__dict__["runledger"]


# --- logs ----------------------------------------------------------------------------------------


def test_promote_intents__logs__sanitised_fields_without_payload_or_key(
    make_definition: MakeDefinition, caplog: pytest.LogCaptureFixture
) -> None:
    make_definition()
    hidden_key = "secret-idempotency-key-7f3a"
    hidden_value = "payload-secret-9c1e"
    poison = insert_raw_intent(
        stage="future_stage", idempotency_key=hidden_key, payload={"token": hidden_value}
    )
    drifted = record(f"{hidden_key}-drift", {"token": hidden_value})
    drift(drifted)
    record(f"{hidden_key}-ok", {"token": hidden_value})
    caplog.set_level(logging.INFO, logger="runledger_django")

    promote_intents([TYPE])

    fields = [
        log_fields(record_) for record_ in caplog.records if record_.levelno == logging.WARNING
    ]
    assert sorted(fields, key=lambda f: f["error_code"]) == [
        {
            "intent_id": str(drifted),
            "error_code": "job.intent_snapshot_mismatch",
            "error_sqlstate": "none",
            "error_constraint": "none",
            "promotion_outcome": "conflicted",
        },
        {
            "intent_id": str(poison),
            "error_code": "job.invalid_stage",
            "error_sqlstate": "none",
            "error_constraint": "none",
            "promotion_outcome": "conflicted",
        },
    ]
    [summary] = [r for r in caplog.records if r.levelno == logging.INFO]
    assert summary.getMessage().startswith("processed durable job enqueue intents")
    assert log_fields(summary) == {
        "inserted_jobs": 1,
        "existing_jobs": 0,
        "conflicted": 2,
        "definition_became_unavailable": 0,
        "retry_deferred": 0,
        "total_promoted": 1,
        "batch_was_full": False,
    }
    everything = caplog.text + repr([vars(r) for r in caplog.records])
    assert hidden_key not in everything
    assert hidden_value not in everything


def test_promote_intents__database_error_in_row__log_carries_sqlstate(
    make_definition: MakeDefinition,
    install_trigger: InstallTrigger,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_definition()
    install_trigger(
        "runledger_job_queue",
        "BEFORE INSERT",
        "RAISE EXCEPTION 'rejected %', NEW.payload USING ERRCODE = 'P0001';",
    )
    intent_id = record("trigger", {"secret": "payload-secret-2b7d"})
    caplog.set_level(logging.WARNING, logger="runledger_django")

    assert_report(promote_intents([TYPE]), retry_deferred=1)

    [warning] = caplog.records
    assert log_fields(warning) == {
        "intent_id": str(intent_id),
        "error_code": "db.query_failed",
        "error_sqlstate": "P0001",
        "error_constraint": "none",
        "promotion_outcome": "retry_deferred",
    }
    assert "payload-secret-2b7d" not in caplog.text + repr(vars(warning))


# --- the converged job is fenced by the foreign key ----------------------------------------


def test_promote_intents__converged_old_job__cannot_be_deleted_while_linked(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    direct = enqueue_job(TYPE, {"key": "old"}, idempotency_key="old")
    run_sql(
        "UPDATE runledger_job_queue SET created_at = now() - interval '1 year' WHERE id = %s",
        [direct.job_id],
    )
    record("old")
    assert_report(promote_intents([TYPE]), existing_jobs=1, total_promoted=1)

    with pytest.raises(IntegrityError) as caught:
        run_sql("DELETE FROM runledger_job_queue WHERE id = %s", [direct.job_id])

    cause = caught.value.__cause__
    assert isinstance(cause, psycopg.Error)
    # PostgreSQL 18 reports RESTRICT as 23001, earlier servers as 23503.
    assert cause.sqlstate in ("23001", "23503")
    assert cause.diag.constraint_name == "fk_job_enqueue_intents_promoted_job"


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"organization_id": uuid.UUID(int=7)},
        {"priority": -(2**31), "max_attempts": 5, "timeout_seconds": 45},
        {"next_run_at": dt.datetime(2035, 4, 3, 2, 1, 0, 123456, tzinfo=dt.UTC)},
        {"next_run_at": dt.datetime(999, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=5)))},
        {"stage": "scheduled", "execution_resource_key": "analytics:account:é"},
    ],
    ids=["defaults", "organization", "numbers", "next-run-at", "year-999-offset", "resource-key"],
)
def test_promote_intents__every_request_shape__promotes_set_based_without_the_per_row_path(
    make_definition: MakeDefinition, options: dict[str, Any]
) -> None:
    """The set-based statement rebuilds the canonical snapshot in SQL; a shape it rebuilt
    differently from Python would silently fall back to the slow per-row path."""
    make_definition()
    intent_id = record("shape", {"n": 1.5, "s": "ü", "list": [1, None, True]}, **options)

    with CaptureQueriesContext(connection) as queries:
        assert_report(promote_intents([TYPE]), inserted_jobs=1, total_promoted=1)

    assert JobEnqueueIntent.objects.get(id=intent_id).status == "PROMOTED"
    assert not [q for q in queries.captured_queries if "AS enqueue_request" in q["sql"]]
