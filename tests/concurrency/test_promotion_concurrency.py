"""Promotion against real concurrent sessions: other promoters, definition writers, lock holders.

``transaction=True`` throughout: promotion owns its transaction, and the other sessions (threads
with their own Django connection, raw psycopg sessions) must see committed rows. Waits are
observed in pg_stat_activity; a trigger that waits on an advisory lock held by the test parks a
pass at a chosen statement, so no test sleeps to synchronise.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import transaction

from runledger_django import (
    PromotionReport,
    RunledgerError,
    delete_promoted_intents_for_jobs,
    enqueue_job,
    promote_intents,
    record_intent,
)
from runledger_django.db import promotion_queries
from runledger_django.errors import ErrorCategory
from runledger_django.models import Job, JobEnqueueIntent
from tests.concurrency.conftest import release_park
from tests.conftest import (
    TEST_JOB_TYPE,
    InThread,
    MakeDefinition,
    Observer,
    OpenSession,
    run_sql,
    wait_for_lock_wait,
)

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = TEST_JOB_TYPE


def record(key: str) -> uuid.UUID:
    return record_intent(TYPE, {"key": key}, idempotency_key=key).intent_id


def intent_values(intent_id: uuid.UUID) -> dict[str, Any]:
    return dict(
        JobEnqueueIntent.objects.values(
            "status", "promotion_attempts", "promoted_job_id", "last_error_code"
        ).get(id=intent_id)
    )


PENDING_UNTOUCHED = {
    "status": "PENDING",
    "promotion_attempts": 0,
    "promoted_job_id": None,
    "last_error_code": None,
}


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Run ``fn``; return (result or raised RunledgerError, elapsed seconds)."""
    start = time.monotonic()
    try:
        result: Any = fn(*args, **kwargs)
    except RunledgerError as error:
        result = error
    return result, time.monotonic() - start


# --- concurrent promoters ----------------------------------------------------------------------


def test_promote_intents__second_promoter_while_first_holds_the_row__skips_it(
    make_definition: MakeDefinition,
    in_thread: InThread,
    observer: Observer,
    park_promoted_update: psycopg.Connection[Any],
) -> None:
    """SKIP LOCKED: a concurrent pass claims nothing instead of waiting or promoting twice."""
    make_definition()
    intent_id = record("one")
    first = in_thread(promote_intents, [TYPE], limit=1)
    wait_for_lock_wait(observer, "runledger:promote_job_enqueue_intents_batch")

    second = promote_intents([TYPE], limit=1)

    release_park(park_promoted_update)
    assert second == PromotionReport()
    assert first.result(timeout=10).total_promoted == 1
    assert Job.objects.filter(idempotency_key="one").count() == 1
    assert intent_values(intent_id)["status"] == "PROMOTED"


def test_promote_intents__racing_promoters__every_intent_promoted_exactly_once(
    make_definition: MakeDefinition, in_thread: InThread
) -> None:
    make_definition()
    keys = [f"race-{n}" for n in range(40)]
    for key in keys:
        record(key)
    start = threading.Barrier(4)

    def drain() -> int:
        start.wait(timeout=10)
        total = 0
        while True:
            report = promote_intents([TYPE], limit=3)
            total += report.total_promoted
            if not report.batch_was_full:
                return total

    promoted = sum(future.result(timeout=60) for future in [in_thread(drain) for _ in range(4)])
    # A pass may end early while a neighbour holds the last rows; one more drains them.
    promoted += promote_intents([TYPE], limit=1000).total_promoted

    assert promoted == 40
    assert Job.objects.count() == 40
    assert set(Job.objects.values_list("idempotency_key", flat=True)) == set(keys)
    assert set(JobEnqueueIntent.objects.values_list("status", flat=True)) == {"PROMOTED"}


def test_promote_intents__duplicate_recorder_holds_key_share__promotion_does_not_wait(
    make_definition: MakeDefinition, in_thread: InThread
) -> None:
    """The recorder's FOR KEY SHARE is compatible with the claim and the promoted update."""
    make_definition()
    intent_id = record("shared")
    recorded = threading.Event()
    finish = threading.Event()

    def duplicate_recorder() -> str:
        with transaction.atomic():
            outcome = record_intent(TYPE, {"key": "shared"}, idempotency_key="shared")
            recorded.set()
            assert finish.wait(timeout=10)
        return outcome.disposition

    recorder = in_thread(duplicate_recorder)
    assert recorded.wait(timeout=10)
    try:
        run_sql("SET lock_timeout = '1s'")
        report = promote_intents([TYPE])
    finally:
        run_sql("RESET lock_timeout")
        finish.set()

    assert report.inserted_jobs == 1
    assert recorder.result(timeout=10) == "existing"
    assert intent_values(intent_id)["status"] == "PROMOTED"


def wait_for_definition_share_lock(observer: Observer) -> None:
    """Wait until the set-based statement waits for the definition row's writer (its share
    lock on the definitions, taken before any job is inserted).

    The statement is found by its tag: pg_stat_activity keeps only the first 1 kB of the text.
    """
    waiting = wait_for_lock_wait(observer, "runledger:promote_job_enqueue_intents_batch")
    assert "FOR SHARE" in promotion_queries.PROMOTE_BATCH
    rows = observer.execute(
        "SELECT relation::regclass::text FROM pg_locks WHERE pid = %s AND locktype = 'tuple'",
        [waiting["pid"]],
    ).fetchall()
    assert rows == [("runledger_job_definitions",)]


# --- definitions change under a pass --------------------------------------------------------------


def test_promote_intents__definition_disabled_after_eligibility__intent_stays_pending(
    make_definition: MakeDefinition,
    in_thread: InThread,
    open_session: OpenSession,
    observer: Observer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The insert's definition share lock waits for the disabling writer, then re-checks."""
    make_definition()
    intent_id = record("disabled-late")
    writer = open_session(autocommit=False)
    writer.execute(
        "UPDATE runledger_job_definitions SET is_enabled = false WHERE job_type = %s", [TYPE]
    )
    caplog.set_level(logging.WARNING, logger="runledger_django")
    promotion = in_thread(promote_intents, [TYPE])
    wait_for_definition_share_lock(observer)

    writer.commit()
    report = promotion.result(timeout=10)

    assert report.to_dict() == {
        **PromotionReport().to_dict(),
        "definition_became_unavailable": 1,
    }
    assert intent_values(intent_id) == PENDING_UNTOUCHED
    assert Job.objects.count() == 0
    assert [r.__dict__["runledger"] for r in caplog.records] == [
        {
            "intent_id": str(intent_id),
            "error_code": "job.definition_not_found_or_disabled",
            "error_sqlstate": "none",
            "error_constraint": "none",
            "promotion_outcome": "definition_became_unavailable",
        }
    ]


def test_promote_intents__definition_writer_rolls_back__promotes_after_the_wait(
    make_definition: MakeDefinition,
    in_thread: InThread,
    open_session: OpenSession,
    observer: Observer,
) -> None:
    make_definition()
    intent_id = record("disable-undone")
    writer = open_session(autocommit=False)
    writer.execute(
        "UPDATE runledger_job_definitions SET is_enabled = false WHERE job_type = %s", [TYPE]
    )
    promotion = in_thread(promote_intents, [TYPE])
    wait_for_definition_share_lock(observer)

    writer.rollback()

    assert promotion.result(timeout=10).inserted_jobs == 1
    assert intent_values(intent_id)["status"] == "PROMOTED"


# --- lock waits inside a pass are bounded -------------------------------------------------------


@pytest.mark.slow
def test_promote_intents__row_lock_wait__bounded_and_releases_the_retention_fence(
    make_definition: MakeDefinition,
    in_thread: InThread,
    open_session: OpenSession,
    observer: Observer,
) -> None:
    """A stuck existing job costs one deferral after 5 s; retention then gets the fence."""
    make_definition()
    job_id = enqueue_job(TYPE, {"key": "held"}, idempotency_key="held").job_id
    intent_id = record("held")
    blocker = open_session(autocommit=False)
    blocker.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [job_id])
    promotion = in_thread(timed, promote_intents, [TYPE])
    wait_for_lock_wait(observer, "FOR NO KEY UPDATE")

    def retention() -> float:
        start = time.monotonic()
        with transaction.atomic():
            delete_promoted_intents_for_jobs([uuid.uuid4()])
        return time.monotonic() - start

    retained = in_thread(retention)
    wait_for_lock_wait(observer, "runledger:lock_job_enqueue_intent_retention")
    report, promotion_seconds = promotion.result(timeout=15)
    retention_seconds = retained.result(timeout=15)
    blocker.rollback()

    assert isinstance(report, PromotionReport)
    assert report.to_dict() == {**PromotionReport().to_dict(), "retry_deferred": 1}
    assert 4 <= promotion_seconds < 7
    assert retention_seconds < 6
    assert intent_values(intent_id) == {
        **PENDING_UNTOUCHED,
        "promotion_attempts": 1,
        "last_error_code": "db.query_failed",
    }
    assert JobEnqueueIntent.objects.get(id=intent_id).last_error_message == (
        "Database operation failed."
    )


@pytest.mark.slow
def test_promote_intents__burst_with_one_job_held__others_settle_set_based_held_one_deferred(
    make_definition: MakeDefinition, open_session: OpenSession
) -> None:
    """The set-based settle skips a job another session holds; the per-row path then waits
    for it within the 5 s lock budget and defers its intent, as for a single row."""
    make_definition()
    jobs = [enqueue_job(TYPE, {"key": f"b{n}"}, idempotency_key=f"b{n}").job_id for n in range(30)]
    intents = [record(f"b{n}") for n in range(30)]
    blocker = open_session(autocommit=False)
    blocker.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [jobs[7]])

    report, seconds = timed(promote_intents, [TYPE], limit=1000)
    blocker.rollback()

    assert isinstance(report, PromotionReport)
    assert report.to_dict() == {
        **PromotionReport().to_dict(),
        "existing_jobs": 29,
        "retry_deferred": 1,
        "total_promoted": 29,
    }
    assert 4 <= seconds < 7
    assert intent_values(intents[7])["last_error_code"] == "db.query_failed"
    assert {intent_values(i)["status"] for i in intents[:7] + intents[8:]} == {"PROMOTED"}


# --- a lost session aborts the pass instead of deferring rows --------------------------------------


def test_promote_intents__session_terminated_in_set_based_statement__pass_fails_nothing_kept(
    make_definition: MakeDefinition,
    in_thread: InThread,
    observer: Observer,
    park_promoted_update: psycopg.Connection[Any],
) -> None:
    make_definition()
    intent_id = record("terminated")
    promotion = in_thread(timed, promote_intents, [TYPE])
    waiting = wait_for_lock_wait(observer, "runledger:promote_job_enqueue_intents_batch")

    observer.execute("SELECT pg_terminate_backend(%s)", [waiting["pid"]])
    error, _ = promotion.result(timeout=10)

    assert isinstance(error, RunledgerError)
    assert (error.code, error.category, error.sqlstate) == (
        "db.query_failed",
        ErrorCategory.INTERNAL,
        "57P01",
    )
    assert error.__cause__ is not None
    assert intent_values(intent_id) == PENDING_UNTOUCHED
    assert Job.objects.count() == 0


def test_promote_intents__session_terminated_in_per_row_path__propagates_not_deferred(
    make_definition: MakeDefinition,
    in_thread: InThread,
    open_session: OpenSession,
    observer: Observer,
) -> None:
    make_definition()
    job_id = enqueue_job(TYPE, {"key": "converging"}, idempotency_key="converging").job_id
    healthy = record("healthy")
    converging = record("converging")
    blocker = open_session(autocommit=False)
    blocker.execute("SELECT id FROM runledger_job_queue WHERE id = %s FOR UPDATE", [job_id])
    promotion = in_thread(timed, promote_intents, [TYPE])
    waiting = wait_for_lock_wait(observer, "FOR NO KEY UPDATE")

    observer.execute("SELECT pg_terminate_backend(%s)", [waiting["pid"]])
    error, _ = promotion.result(timeout=10)
    blocker.rollback()

    assert isinstance(error, RunledgerError)
    assert error.sqlstate == "57P01"
    assert intent_values(converging) == PENDING_UNTOUCHED
    # The healthy row the set-based statement promoted is rolled back with the pass.
    assert intent_values(healthy) == PENDING_UNTOUCHED
    assert Job.objects.count() == 1
