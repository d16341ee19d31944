"""Replay of succeeded jobs: ``replay_job`` and its lineage (checklist items 56-59 of
reference/workflows.md section 12; upstream compare_and_replay tests of the seed)."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Any

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction

from runledger_django import ReadScope, RunledgerError, enqueue_job, replay_job
from runledger_django.domain import FailureKind, JobFailure
from runledger_django.models import Job, JobReplay
from runledger_django.services.job_retention import prune_jobs
from runledger_django.services.lifecycle import complete_job_failure, complete_job_success
from tests.conftest import InThread, MakeDefinition, run_sql, wait_for_lock_wait
from tests.worker.conftest import TYPE, claim_one, event_rows, job_row

ORG = uuid.UUID("0193aaaa-0000-7000-8000-000000000001")
OTHER_ORG = uuid.UUID("0193aaaa-0000-7000-8000-000000000002")


@pytest.fixture
def setup(make_definition: MakeDefinition) -> None:
    make_definition()


def succeeded_job(**enqueue: Any) -> uuid.UUID:
    job_id = enqueue_job(
        TYPE,
        {"invoice": 7},
        priority=enqueue.pop("priority", 5),
        max_attempts=enqueue.pop("max_attempts", 4),
        timeout_seconds=enqueue.pop("timeout_seconds", 33),
        **enqueue,
    ).job_id
    lease = claim_one(job_types=[TYPE]).lease
    run_sql(
        "UPDATE runledger_job_queue SET checkpoint = '{\"c\": 1}', progress_done = 1, "
        "progress_total = 2 WHERE id = %s",
        [job_id],
    )
    complete_job_success(lease, output={"done": True})
    return job_id


@pytest.mark.django_db
def test_replay_job__succeeded__new_run_one_job_copying_exactly_and_lineage(setup: None) -> None:
    """Item 56."""
    source = succeeded_job(
        organization_id=ORG, idempotency_key="invoice-7", execution_resource_key="inv:7"
    )
    before = job_row(source)
    events_before = event_rows(source)

    outcome = replay_job(
        source, scope=ReadScope.organization(ORG), reason="resend", request_key="r-1"
    )

    assert (outcome.status, outcome.run_number, outcome.disposition) == ("PENDING", 1, "inserted")
    assert (outcome.source_job_id, outcome.source_run_number) == (source, 1)
    replay = Job.objects.get(pk=outcome.job_id)
    original = Job.objects.get(pk=source)
    copied = ("job_type_id", "organization_id", "payload", "priority", "max_attempts")
    assert [getattr(replay, name) for name in copied] == [
        getattr(original, name) for name in copied
    ]
    assert (replay.timeout_seconds, replay.execution_resource_key) == (33, "inv:7")
    assert (replay.idempotency_key, replay.checkpoint, replay.output) == (None, None, None)
    assert (replay.progress_done, replay.progress_total, replay.attempt) == (None, None, 0)
    assert job_row(source) == before and event_rows(source) == events_before
    lineage = JobReplay.objects.get(replay_job_id=outcome.job_id)
    assert (lineage.source_job_id, lineage.source_run_number, lineage.request_key) == (
        source,
        1,
        "r-1",
    )
    assert lineage.reason == "resend"
    enqueued = event_rows(outcome.job_id)
    assert [e["event_type"] for e in enqueued] == ["ENQUEUED"]
    assert enqueued[0]["payload"] == {
        "job_type": TYPE,
        "replayed_from_job_id": str(source),
        "replayed_from_run_number": 1,
        "replay_request_key": "r-1",
        "reason": "resend",
    }


@pytest.mark.django_db
def test_replay_job__same_key__existing_and_other_reason_conflicts(setup: None) -> None:
    """Item 57 (sequential)."""
    source = succeeded_job()
    first = replay_job(source, scope=ReadScope.ADMIN, reason="again", request_key="k")
    again = replay_job(source, scope=ReadScope.ADMIN, reason="again", request_key="k")
    assert (again.job_id, again.disposition) == (first.job_id, "existing")
    with pytest.raises(RunledgerError) as caught:
        replay_job(source, scope=ReadScope.ADMIN, reason="something else", request_key="k")
    assert caught.value.code == "job.replay_idempotency_conflict"
    other = replay_job(source, scope=ReadScope.ADMIN, reason="again", request_key="k2")
    assert other.job_id != first.job_id
    assert JobReplay.objects.filter(source_job_id=source).count() == 2


@pytest.mark.django_db(transaction=True)
def test_replay_job__concurrent_retries__one_replay(
    setup: None, in_thread: InThread, observer: psycopg.Connection[Any]
) -> None:
    """Item 57 (concurrent): a retry waits for the first request's lock on the source, then
    finds its lineage: one replay, both callers get it."""
    source = succeeded_job()
    entered, go = threading.Event(), threading.Event()

    def first() -> uuid.UUID:
        with transaction.atomic():
            outcome = replay_job(source, scope=ReadScope.ADMIN, reason="r", request_key="k")
            entered.set()
            assert go.wait(30)
        return outcome.job_id

    one = in_thread(first)
    assert entered.wait(30)
    two = in_thread(replay_job, source, scope=ReadScope.ADMIN, reason="r", request_key="k")
    wait_for_lock_wait(observer, "runledger:replay_job")
    go.set()
    assert one.result(timeout=30) == two.result(timeout=30).job_id
    assert two.result().disposition == "existing"
    assert JobReplay.objects.filter(source_job_id=source).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"request_key": " "}, "job.replay_request_key_blank"),
        ({"request_key": None}, "job.replay_request_key_blank"),
        ({"request_key": "é" * 257}, "job.replay_request_key_too_long"),
        ({"reason": "\t"}, "job.replay_reason_blank"),
        ({"reason": 5}, "job.replay_reason_blank"),
        ({"expected_run_number": 0}, "job.invalid_argument"),
        ({"scope": "admin"}, "job.invalid_argument"),
    ],
)
def test_replay_job__bad_input__refused_before_any_sql(
    setup: None, kwargs: dict[str, Any], code: str, django_assert_num_queries: Any
) -> None:
    """Item 58 (input): checked before any lookup; the caller's transaction stays usable."""
    arguments: dict[str, Any] = {"scope": ReadScope.ADMIN, "reason": "r", "request_key": "k"}
    arguments.update(kwargs)
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as caught:
        replay_job(uuid.uuid4(), **arguments)
    assert caught.value.code == code


@pytest.mark.django_db
def test_replay_job__stale_run_wrong_scope_or_not_succeeded__refused(setup: None) -> None:
    """Item 58: a stale observed run, a scope that does not own the job (not found: a scope
    never reveals another tenant's job), and jobs that are not SUCCEEDED."""
    source = succeeded_job(organization_id=ORG)
    with pytest.raises(RunledgerError) as caught:
        replay_job(
            source, scope=ReadScope.ADMIN, reason="r", request_key="k", expected_run_number=2
        )
    assert caught.value.code == "job.replay_expectation_mismatch"
    for scope in (ReadScope.organization(OTHER_ORG), ReadScope.GLOBAL):
        with pytest.raises(RunledgerError) as caught:
            replay_job(source, scope=scope, reason="r", request_key="k")
        assert caught.value.code == "job.not_found"
    pending = enqueue_job(TYPE, {}).job_id
    with pytest.raises(RunledgerError) as caught:
        replay_job(pending, scope=ReadScope.ADMIN, reason="r", request_key="k")
    assert caught.value.code == "job.invalid_state_transition"
    assert JobReplay.objects.count() == 0
    ok = replay_job(
        source, scope=ReadScope.ADMIN, reason="r", request_key="k", expected_run_number=1
    )
    assert ok.disposition == "inserted"


@pytest.mark.django_db(transaction=True)
def test_replay_job__repeatable_read_caller__refused(setup: None) -> None:
    source = succeeded_job()
    with transaction.atomic():
        run_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(RunledgerError) as caught:
            replay_job(source, scope=ReadScope.ADMIN, reason="r", request_key="k")
        assert caught.value.code == "job.compare_and_replay_unsupported_isolation"
        assert run_sql("SELECT 1") == [(1,)]  # still usable


@pytest.mark.django_db(transaction=True)
def test_replay_job__rolled_back__nothing_left_and_key_replays_anew(setup: None) -> None:
    """Item 59."""
    source = succeeded_job()
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        rolled = replay_job(source, scope=ReadScope.ADMIN, reason="r", request_key="k")
        _ = 1 / 0
    assert not Job.objects.filter(pk=rolled.job_id).exists()
    assert JobReplay.objects.count() == 0
    again = replay_job(source, scope=ReadScope.ADMIN, reason="r", request_key="k")
    assert (again.disposition, again.job_id != rolled.job_id) == ("inserted", True)


@pytest.mark.django_db(transaction=True)
def test_replay_lineage__retention__source_cascades_replay_alone_refused(setup: None) -> None:
    source = succeeded_job()
    replay = replay_job(source, scope=ReadScope.ADMIN, reason="r", request_key="k").job_id
    with pytest.raises(IntegrityError), transaction.atomic():
        run_sql("DELETE FROM runledger_job_events WHERE job_id = %s", [replay])
        run_sql("DELETE FROM runledger_job_queue WHERE id = %s", [replay])
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM runledger_job_events WHERE job_id = ANY(%s)", [[source, replay]]
        )
        cursor.execute("DELETE FROM runledger_job_attempts WHERE job_id = ANY(%s)", [[source]])
        cursor.execute("DELETE FROM runledger_job_queue WHERE id = ANY(%s)", [[source, replay]])
    assert JobReplay.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_prune_jobs__dead_lettered_replay_of_a_kept_source__pruned_with_its_lineage(
    setup: None,
) -> None:
    """Retention of dead letters only: the replay goes, its lineage with it, the SUCCEEDED
    source stays (the lineage's foreign key would refuse the replay deleted alone)."""
    source = succeeded_job()
    replay = replay_job(source, scope=ReadScope.ADMIN, reason="r", request_key="k").job_id
    lease = claim_one(job_types=[TYPE]).lease
    assert lease.job_id == replay
    complete_job_failure(
        lease, JobFailure(kind=FailureKind.TERMINAL, code="job.terminal_failure", message="no")
    )
    run_sql(
        "UPDATE runledger_job_queue SET created_at = created_at - interval '2 days', "
        "finished_at = finished_at - interval '2 days'"
    )
    result = prune_jobs(dt.timedelta(days=1), statuses=["DEAD_LETTERED"])
    assert not Job.objects.filter(pk=replay).exists()
    assert Job.objects.filter(pk=source).exists()
    assert JobReplay.objects.count() == 0
    assert (result.counts.dead_lettered, result.counts.succeeded) == (1, 0)
