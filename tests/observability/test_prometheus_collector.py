"""The scrape-time queue collector and its Django view (reference observability 10, items 1-7).

Each test builds the queue state with the public API plus direct UPDATEs (moving a job's
clock, expiring a lease) and scrapes the view as a request would. The collector's statement
joins the test's transaction, so ``now()`` is the same instant in the setup and the scrape.
"""

from __future__ import annotations

import datetime as dt
import uuid
from concurrent.futures import Future
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runledger_django import enqueue_job, record_intent
from runledger_django.domain import OTHER_JOB_TYPE_LABEL
from runledger_django.errors import RunledgerError
from runledger_django.prometheus.collector import STATES
from runledger_django.services.claim import claim_jobs
from runledger_django.services.job_retention import prune_jobs
from runledger_django.services.queue_state import read_queue_state
from tests.conftest import InThread, MakeDefinition, OpenSession, run_sql, wait_for_lock_wait
from tests.observability.conftest import Scrape, scrape_view

pytestmark = pytest.mark.django_db

A = "metrics.type_a"
B = "metrics.type_b"


def enqueue(job_type: str, **options: Any) -> uuid.UUID:
    return enqueue_job(job_type, {}, **options).job_id


def set_due(job_id: uuid.UUID, seconds_ago: float) -> None:
    run_sql(
        "UPDATE runledger_job_queue SET next_run_at = now() - %s * interval '1 second', "
        "created_at = now() - interval '1 day' WHERE id = %s",
        [seconds_ago, job_id],
    )


def dead_letter(job_id: uuid.UUID) -> None:
    run_sql(
        "UPDATE runledger_job_queue SET status = 'DEAD_LETTERED', finished_at = now() "
        "WHERE id = %s",
        [job_id],
    )


def jobs_gauges(scrape: Scrape, job_type: str) -> dict[str, float]:
    return {
        state: scrape.value("runledger_jobs", job_type=job_type, state=state) for state in STATES
    }


def test_view__two_types_empty_queue__every_series_reads_zero(
    make_definition: MakeDefinition,
) -> None:
    """Item 1: a drained queue reads 0 for every (type, state), not nothing."""
    make_definition(A)
    make_definition(B, is_enabled=False)

    scrape = scrape_view()

    assert scrape.status == 200
    assert scrape.value("runledger_collector_up") == 1
    for job_type in (A, B):
        assert jobs_gauges(scrape, job_type) == dict.fromkeys(STATES, 0.0)
        assert scrape.value("runledger_job_oldest_due_age_seconds", job_type=job_type) == 0
        assert scrape.value("runledger_job_oldest_leased_age_seconds", job_type=job_type) == 0
    assert scrape.series("runledger_job_type_enabled") == {
        frozenset({("job_type", A)}): 1.0,
        frozenset({("job_type", B)}): 0.0,
    }
    assert set(scrape.series("runledger_jobs")) == {
        frozenset({("job_type", t), ("state", s)}) for t in (A, B) for s in STATES
    }
    assert scrape.series("runledger_intents") == {
        frozenset({("job_type", t), ("state", s)}): 0.0
        for t in (A, B)
        for s in ("pending", "retrying")
    }
    assert scrape.value("runledger_intent_oldest_pending_age_seconds", job_type=A) == 0


def test_view__age_counts_from_due_time__scheduled_and_backoff_leave_it_zero(
    make_definition: MakeDefinition,
) -> None:
    """Item 2: a job due 10 s ago is 10 s old, whenever it was created; a job due tomorrow
    or waiting out a retry backoff is scheduled, not old."""
    make_definition(A)
    make_definition(B)
    set_due(enqueue(A), 10)
    enqueue(A, next_run_at=dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    backoff = enqueue(B)
    run_sql(
        "UPDATE runledger_job_queue SET attempt = 1, next_run_at = now() + interval '30 seconds',"
        " created_at = now() - interval '1 hour' WHERE id = %s",
        [backoff],
    )

    scrape = scrape_view()

    assert 10 <= scrape.value("runledger_job_oldest_due_age_seconds", job_type=A) < 20
    assert jobs_gauges(scrape, A) == {**dict.fromkeys(STATES, 0.0), "due": 1, "scheduled": 1}
    assert jobs_gauges(scrape, B) == {**dict.fromkeys(STATES, 0.0), "scheduled": 1}
    assert scrape.value("runledger_job_oldest_due_age_seconds", job_type=B) == 0


def test_view__expired_lease__counts_as_lease_expired__states_partition_the_rows(
    make_definition: MakeDefinition,
) -> None:
    """Item 3: an expired, unreaped lease is ``lease_expired`` and not also ``leased``; the
    states sum to the PENDING, LEASED and DEAD_LETTERED rows."""
    make_definition(A)
    for _ in range(3):
        enqueue(A)
    set_due(enqueue(A), 5)
    dead_letter(enqueue(A))
    enqueue(A, next_run_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    leased = claim_jobs([A], worker_id="w-1", limit=2, lease_seconds=60)
    run_sql(
        "UPDATE runledger_job_queue SET lease_expires_at = now() - interval '1 second' "
        "WHERE id = %s",
        [leased[0].lease.job_id],
    )
    run_sql(
        "UPDATE runledger_job_attempts SET leased_at = now() - interval '90 seconds' "
        "WHERE job_id = %s",
        [leased[0].lease.job_id],
    )

    scrape = scrape_view()

    gauges = jobs_gauges(scrape, A)
    assert gauges == {
        "due": 2,
        "scheduled": 1,
        "leased": 1,
        "lease_expired": 1,
        "dead_lettered": 1,
    }
    rows = run_sql(
        "SELECT count(*) FROM runledger_job_queue "
        "WHERE status IN ('PENDING', 'LEASED', 'DEAD_LETTERED')"
    )
    assert sum(gauges.values()) == rows[0][0] == 6
    assert 90 <= scrape.value("runledger_job_oldest_leased_age_seconds", job_type=A) < 100


@pytest.mark.django_db(transaction=True)
def test_view__pruning_succeeded_jobs__changes_no_exposed_value(
    make_definition: MakeDefinition,
) -> None:
    """Item 4: nothing exposed is a count of finished rows: pruning them moves no series (and
    the collector exposes no counter a prune could reset)."""
    make_definition(A)
    enqueue(A)
    for _ in range(3):
        job_id = enqueue(A)
        run_sql(
            "UPDATE runledger_job_queue SET status = 'SUCCEEDED', "
            "created_at = now() - interval '3 days', finished_at = now() - interval '2 days' "
            "WHERE id = %s",
            [job_id],
        )
    before = scrape_view()

    result = prune_jobs(dt.timedelta(days=1))

    after = scrape_view()
    assert result.counts.succeeded == 3
    assert run_sql("SELECT count(*) FROM runledger_job_queue")[0][0] == 1

    def stable(scrape: Scrape) -> dict[Any, float]:
        return {
            key: value
            for key, value in scrape.samples.items()
            if key[0] not in ("runledger_collector_duration_seconds",)
            and not key[0].endswith("_age_seconds")
        }

    assert stable(after) == stable(before)
    assert "counter" not in set(after.types.values())


def test_view__pending_intents__counted_per_type__an_undefined_type_shows_too(
    make_definition: MakeDefinition,
) -> None:
    """Intents waiting for promotion, split into never attempted and retrying; an intent of a
    type without a definition (it would wait forever) gets its series, without the
    definition's gauges."""
    make_definition(A)
    for n in range(3):
        record_intent(A, {}, idempotency_key=f"a-{n}")
    retrying = record_intent(A, {}, idempotency_key="a-retry").intent_id
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET promotion_attempts = 2, "
        "last_attempted_at = now(), next_promotion_at = now() + interval '1 minute', "
        "last_error_code = 'job.definition_unavailable', last_error_message = 'not enabled', "
        "created_at = now() - interval '2 minutes' WHERE id = %s",
        [retrying],
    )
    orphan = "metrics.no_definition"
    record_intent(orphan, {}, idempotency_key="o-1")

    scrape = scrape_view()

    assert scrape.series("runledger_intents") == {
        frozenset({("job_type", A), ("state", "pending")}): 3.0,
        frozenset({("job_type", A), ("state", "retrying")}): 1.0,
        frozenset({("job_type", orphan), ("state", "pending")}): 1.0,
        frozenset({("job_type", orphan), ("state", "retrying")}): 0.0,
    }
    assert 120 <= scrape.value("runledger_intent_oldest_pending_age_seconds", job_type=A) < 130
    assert jobs_gauges(scrape, orphan) == dict.fromkeys(STATES, 0.0)
    assert set(scrape.series("runledger_job_type_enabled")) == {frozenset({("job_type", A)})}


def test_view__types_past_the_limit__fold_into_other(
    make_definition: MakeDefinition, settings: Any
) -> None:
    """Item 6: at most METRICS_JOB_TYPE_LIMIT labels of their own, in job type order; the
    rest sum into ``other``, which carries no definition gauges."""
    settings.RUNLEDGER = {**settings.RUNLEDGER, "METRICS_JOB_TYPE_LIMIT": 2}
    types = [f"metrics.fold_{n}" for n in range(5)]
    for job_type in types:
        make_definition(job_type)
        set_due(enqueue(job_type), 30 + types.index(job_type))
    dead_letter(enqueue(types[4]))

    scrape = scrape_view()

    labels = {dict(labels)["job_type"] for labels in scrape.series("runledger_jobs")}
    assert labels == {types[0], types[1], OTHER_JOB_TYPE_LABEL}
    assert jobs_gauges(scrape, OTHER_JOB_TYPE_LABEL) == {
        **dict.fromkeys(STATES, 0.0),
        "due": 3,
        "dead_lettered": 1,
    }
    assert (
        34
        <= scrape.value("runledger_job_oldest_due_age_seconds", job_type=OTHER_JOB_TYPE_LABEL)
        < 44
    )
    assert {dict(labels)["job_type"] for labels in scrape.series("runledger_job_type_enabled")} == {
        types[0],
        types[1],
    }


@pytest.mark.django_db(transaction=True)
def test_view__database_does_not_answer__200_with_collector_down(
    make_definition: MakeDefinition,
    open_session: OpenSession,
    in_thread: InThread,
    settings: Any,
) -> None:
    """Item 7: a queue table locked by a migration (the scrape's statement waits on the lock)
    gives a 200 with ``runledger_collector_up 0`` once the timeout fires, while the lock is
    still held: the scrape is bounded by the timeout, not by the lock holder."""
    settings.RUNLEDGER = {**settings.RUNLEDGER, "METRICS_TIMEOUT_MS": 300}
    make_definition(A)
    holder = open_session(autocommit=False)
    holder.execute("LOCK TABLE runledger_job_queue IN ACCESS EXCLUSIVE MODE")
    observer = open_session()

    pending: Future[Scrape] = in_thread(scrape_view)
    wait_for_lock_wait(observer, "runledger:queue_state")
    scrape = pending.result(timeout=60)
    still_locked = observer.execute(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
        "WHERE c.relname = 'runledger_job_queue' AND l.mode = 'AccessExclusiveLock' "
        "AND l.granted"
    ).fetchone()
    holder.rollback()

    assert still_locked == (1,)
    assert scrape.status == 200
    assert scrape.value("runledger_collector_up") == 0
    assert "runledger_jobs" not in scrape.types
    assert scrape.value("runledger_collector_duration_seconds") > 0
    after = scrape_view()
    assert after.value("runledger_collector_up") == 1
    assert after.value("runledger_jobs", job_type=A, state="due") == 0


def test_view__inside_the_callers_transaction__a_failed_read_leaves_it_usable(
    make_definition: MakeDefinition, open_session: OpenSession, settings: Any
) -> None:
    """Under ATOMIC_REQUESTS the read runs in a savepoint of the request's transaction: a
    timeout rolls back only the savepoint, and the request goes on."""
    settings.RUNLEDGER = {**settings.RUNLEDGER, "METRICS_TIMEOUT_MS": 100}
    make_definition(A)
    holder = open_session(autocommit=False)
    holder.execute("LOCK TABLE runledger_job_queue IN ACCESS EXCLUSIVE MODE")

    with transaction.atomic():
        scrape = scrape_view()
        holder.rollback()
        usable = run_sql("SELECT count(*) FROM runledger_job_definitions")

    assert scrape.value("runledger_collector_up") == 0
    assert usable == [(1,)]
    assert scrape_view().value("runledger_collector_up") == 1


def test_view__cache__a_second_scrape_within_the_ttl_reuses_the_read(
    make_definition: MakeDefinition, settings: Any
) -> None:
    """Several scrapers (two Prometheus servers, a fast interval) cost one statement per
    METRICS_CACHE_SECONDS."""
    make_definition(A)
    first = scrape_view()  # read (no cache in these tests), and remembered
    settings.RUNLEDGER = {**settings.RUNLEDGER, "METRICS_CACHE_SECONDS": 3600}
    enqueue(A)
    cached = scrape_view()
    settings.RUNLEDGER = {**settings.RUNLEDGER, "METRICS_CACHE_SECONDS": 0}
    fresh = scrape_view()

    assert first.value("runledger_jobs", job_type=A, state="due") == 0
    assert cached.samples == first.samples
    assert fresh.value("runledger_jobs", job_type=A, state="due") == 1


def test_view__post__is_refused() -> None:
    from django.test import RequestFactory

    from runledger_django.prometheus import metrics_view

    assert metrics_view(RequestFactory().post("/metrics/")).status_code == 405


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"type_limit": 0, "timeout_ms": 100}, "type_limit"),
        ({"type_limit": True, "timeout_ms": 100}, "type_limit"),
        ({"type_limit": 10, "timeout_ms": 0}, "timeout_ms"),
        ({"type_limit": 10, "timeout_ms": 60_001}, "timeout_ms"),
    ],
)
def test_read_queue_state__bad_arguments__refused_before_sql(
    options: dict[str, Any], fragment: str, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as caught:
        read_queue_state(**options)

    assert caught.value.code == "job.invalid_argument"
    assert fragment in caught.value.internal_message


def test_read_queue_state__one_statement(make_definition: MakeDefinition) -> None:
    """The whole state is one statement, whatever the number of types."""
    for n in range(5):
        make_definition(f"metrics.one_{n}")
    with CaptureQueriesContext(connection) as queries:
        states = read_queue_state(type_limit=10, timeout_ms=1000)
    assert [state.job_type for state in states] == [f"metrics.one_{n}" for n in range(5)]
    tagged = [q for q in queries.captured_queries if "runledger:queue_state" in q["sql"]]
    assert len(tagged) == 1


def test_view__workers_live__fresh_rows_count_per_type_stale_ones_do_not(
    make_definition: MakeDefinition,
) -> None:
    """The gauge the "no live worker for due jobs" alert reads: a worker counts for each type
    it serves while its row is fresh, and stops counting once it missed its beats."""
    from runledger_django.services.worker_registry import WorkerIdentity, beat_worker

    make_definition(A)
    make_definition(B)
    for worker_id, types in (("w-both", [A, B]), ("w-a", [A]), ("w-dead", [A, B])):
        beat_worker(
            WorkerIdentity(worker_id=worker_id, job_types=types, concurrency=2),
            heartbeat_seconds=10,
            retention_seconds=3600,
        )
    run_sql(
        "UPDATE runledger_workers SET last_heartbeat_at = now() - interval '31 seconds' "
        "WHERE worker_id = 'w-dead'"
    )

    scrape = scrape_view()

    assert scrape.series("runledger_workers_live") == {
        frozenset({("job_type", A)}): 2.0,
        frozenset({("job_type", B)}): 1.0,
    }


def test_view__paused_and_limited_type__its_gauges_read_the_definition(
    make_definition: MakeDefinition,
) -> None:
    """Item 36's gauge and the limits: a paused type reads 1, a running one 0; a limit is a
    series only where one is set (absent reads as unlimited)."""
    from runledger_django import pause_job_type, set_job_type_limits

    make_definition(A)
    make_definition(B)
    pause_job_type(A, reason="partner outage", actor="ops")
    set_job_type_limits(A, max_concurrency=3, rate_limit=(30, 60))

    scrape = scrape_view()

    assert scrape.series("runledger_job_type_paused") == {
        frozenset({("job_type", A)}): 1.0,
        frozenset({("job_type", B)}): 0.0,
    }
    assert scrape.series("runledger_job_type_concurrency_limit") == {
        frozenset({("job_type", A)}): 3.0
    }
    assert scrape.series("runledger_job_type_rate_limit_per_second") == {
        frozenset({("job_type", A)}): 0.5
    }
