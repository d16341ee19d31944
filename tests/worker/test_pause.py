"""Pause and resume per job type (docs/queue-control.md; reference 5, checklist 31-35).

The state is the definition row's ``paused_at``, read by every claim: these tests pause with
the service and watch claims, the reaper, promotion, definition syncing and idle workers.
"""

from __future__ import annotations

import datetime as dt
import signal
import threading
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from django.db import connections, transaction

from runledger_django import (
    RunledgerError,
    enqueue_job,
    pause_job_type,
    promote_intents,
    record_intent,
    resume_job_type,
)
from runledger_django.domain import JobDefaults
from runledger_django.errors import Code
from runledger_django.models import Job, JobDefinition
from runledger_django.services.claim import claim_jobs, ensure_job_definitions
from runledger_django.services.lifecycle import complete_job_success
from runledger_django.services.reaper import reap_expired_leases
from runledger_django.worker.listener import Listener
from tests.conftest import MakeDefinition, OpenSession, wait_for_lock_wait
from tests.worker.conftest import (
    LEASE,
    TYPE,
    WORKER,
    Enqueue,
    SpawnWorker,
    expire_lease,
    job_row,
    wait_until,
)
from tests.worker.test_wakeup import CHANNEL, LONG_POLL
from tests.worker.test_worker_loop import StartWorker, gates, start_worker  # noqa: F401
from tests.worker_app import FLAKY, NOOP

OTHER = "jobs.test.other"


@pytest.fixture
def other_type(make_definition: MakeDefinition) -> None:
    make_definition(OTHER)


def claim(limit: int = 10, types: list[str] | None = None) -> list[Any]:
    return claim_jobs(types or [TYPE, OTHER], worker_id=WORKER, limit=limit, lease_seconds=LEASE)


def succeeded(job_id: uuid.UUID) -> bool:
    return bool(job_row(job_id)["status"] == "SUCCEEDED")


def paused_at(job_type: str = TYPE) -> dt.datetime | None:
    return JobDefinition.objects.get(job_type=job_type).paused_at


# --- claims, running jobs, other types (31) --------------------------------------------------


@pytest.mark.django_db
def test_pause__next_claim_skips_the_type__others_run__running_job_finishes(
    enqueue: Enqueue, other_type: None
) -> None:
    running = claim_jobs([TYPE], worker_id=WORKER, limit=1, lease_seconds=LEASE)
    assert running == []  # nothing enqueued yet
    first = enqueue()
    [job] = claim(1, [TYPE])
    waiting = [enqueue() for _ in range(3)]
    others = [enqueue(job_type=OTHER) for _ in range(2)]

    control = pause_job_type(TYPE, reason="partner API down", actor="ops")

    assert control.paused and control.changed
    assert (control.paused_reason, control.paused_by) == ("partner API down", "ops")
    claimed = claim(10)
    assert sorted(c.lease.job_id for c in claimed) == sorted(others)
    # The job already running finishes and records its outcome.
    complete_job_success(job.lease)
    assert job_row(first)["status"] == "SUCCEEDED"
    assert {job_row(job_id)["status"] for job_id in waiting} == {"PENDING"}
    assert {job_row(job_id)["attempt"] for job_id in waiting} == {0}


@pytest.mark.django_db(transaction=True)
def test_pause__every_worker__stops_claiming_while_other_types_drain(
    enqueue: Enqueue,
    other_type: None,
    start_worker: StartWorker,  # noqa: F811
) -> None:
    pause_job_type(TYPE)
    paused_jobs = [enqueue() for _ in range(5)]
    other_jobs = [enqueue(job_type=OTHER) for _ in range(10)]  # enqueued after: FIFO says later
    workers = [
        start_worker({TYPE: lambda job: None, OTHER: lambda job: None}, concurrency=2)
        for _ in range(3)
    ]

    wait_until(
        lambda: all(job_row(job_id)["status"] == "SUCCEEDED" for job_id in other_jobs),
        what="the other type's jobs",
    )
    assert {job_row(job_id)["status"] for job_id in paused_jobs} == {"PENDING"}

    resume_job_type(TYPE)
    wait_until(
        lambda: all(job_row(job_id)["status"] == "SUCCEEDED" for job_id in paused_jobs),
        what="the resumed type's jobs",
    )
    for worker in workers:
        worker.finish()


# --- idempotence and concurrent pauses (32) -----------------------------------------------


@pytest.mark.django_db
def test_pause_twice__keeps_the_first_time_reason_and_actor(definition: None) -> None:
    first = pause_job_type(TYPE, reason="first", actor="alice")
    with transaction.atomic():  # a later transaction: a later now()
        second = pause_job_type(TYPE, reason="second", actor="bob")

    assert second.changed is False
    assert (second.paused_at, second.paused_reason, second.paused_by) == (
        first.paused_at,
        "first",
        "alice",
    )
    assert paused_at() == first.paused_at


@pytest.mark.django_db
def test_resume_twice__harmless__and_clears_the_pause(definition: None) -> None:
    pause_job_type(TYPE, reason="why", actor="who")

    first = resume_job_type(TYPE)
    second = resume_job_type(TYPE)

    assert (first.changed, second.changed) == (True, False)
    assert (second.paused_at, second.paused_reason, second.paused_by) == (None, None, None)


@pytest.mark.django_db(transaction=True)
def test_concurrent_pauses_of_different_types__none_lost(make_definition: MakeDefinition) -> None:
    types = [f"jobs.test.pause.{n}" for n in range(12)]
    for job_type in types:
        make_definition(job_type)
    barrier = threading.Barrier(len(types))
    errors: list[BaseException] = []

    def pause(job_type: str) -> None:
        try:
            barrier.wait()
            pause_job_type(job_type)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pause, args=(job_type,)) for job_type in types]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert errors == []
    assert set(
        JobDefinition.objects.filter(paused_at__isnull=False).values_list("job_type", flat=True)
    ) == set(types)


@pytest.mark.django_db(transaction=True)
def test_concurrent_pauses_of_one_type__one_writes__both_report_its_time(
    definition: None, open_session: OpenSession
) -> None:
    """A pause that waits for another's row lock re-checks the row it then locks: it changes
    nothing and reports the winner's pause time."""
    holder = open_session(autocommit=False)
    holder.execute(
        "UPDATE runledger_job_definitions SET paused_at = now(), paused_by = 'holder' "
        "WHERE job_type = %s",
        [TYPE],
    )
    result: list[Any] = []

    def pause() -> None:
        try:
            result.append(pause_job_type(TYPE, actor="late"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=pause)
    thread.start()
    observer = open_session()
    wait_for_lock_wait(observer, "runledger:pause_job_type")
    holder.commit()
    thread.join(30)

    [late] = result
    assert late.changed is False
    assert late.paused_by == "holder"
    assert late.paused_at == paused_at()


# --- restarts and definition syncing (33) -------------------------------------------------


@pytest.mark.django_db
def test_definition_sync__never_clears_the_pause_nor_the_operators_limits(
    make_definition: MakeDefinition,
) -> None:
    make_definition(TYPE, max_concurrency=7)
    pause_job_type(TYPE, reason="deploy freeze")
    before = JobDefinition.objects.get(job_type=TYPE)

    created = ensure_job_definitions(
        [JobDefaults(job_type=TYPE, max_attempts=9, max_concurrency=2, rate_limit=(5, 60))]
    )

    after = JobDefinition.objects.get(job_type=TYPE)
    assert created == []
    assert (after.paused_at, after.paused_reason) == (before.paused_at, "deploy freeze")
    assert (after.max_concurrency, after.rate_limit_count, after.max_attempts) == (7, None, 3)


@pytest.mark.django_db(transaction=True)
def test_pause__survives_worker_restarts(
    enqueue: Enqueue,
    other_type: None,
    start_worker: StartWorker,  # noqa: F811
) -> None:
    pause_job_type(TYPE)
    paused = enqueue()
    for round_ in range(2):  # a start syncs definitions; the second is the restart
        marker = enqueue(job_type=OTHER)
        worker = start_worker({TYPE: lambda job: None, OTHER: lambda job: None})
        wait_until(partial(succeeded, marker), what=f"round {round_}")
        worker.finish()
        assert job_row(paused)["status"] == "PENDING"
        assert paused_at() is not None


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_pause__survives_killed_and_restarted_worker_processes(
    app_definitions: None, spawn_worker: SpawnWorker
) -> None:
    """Real ``runledger_worker`` processes, each syncing the definitions at start: one is
    SIGKILLed, the next starts; the paused type's job stays PENDING through both and the
    pause keeps its time, while another type's jobs run. A resume reaches the live one."""
    fast = {"WORKER_POLL_INTERVAL": 0.2, "WORKER_IDLE_POLL_SECONDS": 1.0}
    pause_job_type(NOOP, reason="partner outage")
    paused_since = paused_at(NOOP)
    paused = enqueue_job(NOOP, {}).job_id
    for round_ in range(2):
        marker = enqueue_job(FLAKY, {"round": round_}).job_id
        worker = spawn_worker(**fast)
        wait_until(partial(succeeded, marker), what=f"round {round_}'s job of another type")
        assert job_row(paused)["status"] == "PENDING"
        assert paused_at(NOOP) == paused_since
        if round_ == 0:
            worker.signal(signal.SIGKILL)
            assert worker.wait() == -signal.SIGKILL

    resume_job_type(NOOP)
    wait_until(partial(succeeded, paused), what="the resumed job, in the restarted worker")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


# --- resume wakes idle workers (34) -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_resume__idle_listening_worker__runs_the_job_long_before_its_poll_interval(
    definition: None,
    start_worker: StartWorker,  # noqa: F811
) -> None:
    pause_job_type(TYPE)
    # Enqueued before the worker starts: the resume's notification is then the only one this
    # process sends near it (sends are coalesced per process within COALESCE_SECONDS).
    job_id = enqueue_job(TYPE, {}).job_id
    worker = start_worker({TYPE: lambda job: None}, listen=True, poll_interval=LONG_POLL)
    listener = wait_until(
        lambda: next((t for t in worker.worker.threads if isinstance(t, Listener)), None),
        what="the listener thread",
    )
    assert listener.connected.wait(30)
    assert job_row(job_id)["status"] == "PENDING"  # its first claims found the type paused

    resume_job_type(TYPE)

    wait_until(
        lambda: job_row(job_id)["status"] == "SUCCEEDED",
        timeout=LONG_POLL / 2,
        what="the resumed job, long before the worker's next poll",
    )
    worker.finish()


@pytest.mark.django_db(transaction=True)
def test_resume__inside_callers_transaction__notifies_after_commit_only(
    definition: None, open_session: OpenSession
) -> None:
    pause_job_type(TYPE)
    listening = open_session()
    listening.execute(f"LISTEN {CHANNEL}")

    def received(timeout: float) -> list[str]:
        return [n.channel for n in listening.notifies(timeout=timeout, stop_after=1)]

    with transaction.atomic():
        resume_job_type(TYPE)
        assert received(0.3) == []
    assert received(10) == [CHANNEL]
    resume_job_type(TYPE)  # not paused: nothing changed, nothing sent
    assert received(0.3) == []


# --- the reaper and promotion go on (35) --------------------------------------------------


@pytest.mark.django_db
def test_pause__expired_leases_still_reaped__the_job_waits_pending(enqueue: Enqueue) -> None:
    job_id = enqueue()
    claim(1, [TYPE])
    pause_job_type(TYPE)
    expire_lease(job_id)

    report = reap_expired_leases([TYPE])

    assert report.retried == 1
    assert job_row(job_id)["status"] == "PENDING"
    Job.objects.filter(id=job_id).update(next_run_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert claim(5, [TYPE]) == []


@pytest.mark.django_db(transaction=True)
def test_pause__recording_and_promotion_go_on__jobs_wait(definition: None) -> None:
    pause_job_type(TYPE)
    outcome = record_intent(TYPE, {"n": 1}, idempotency_key="paused-1")

    report = promote_intents([TYPE])

    assert report.inserted_jobs == 1
    job = Job.objects.get(idempotency_key="paused-1")
    assert (job.status, outcome.intent_id is not None) == ("PENDING", True)
    assert claim(5, [TYPE]) == []


# --- bad input (before any SQL) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda: pause_job_type(7), Code.INVALID_JOB_TYPE),  # type: ignore[arg-type]
        (lambda: pause_job_type(" "), Code.INVALID_JOB_TYPE),
        (lambda: pause_job_type(TYPE, reason=""), Code.DEFINITION_INVALID_PAUSE_NOTE),
        (lambda: pause_job_type(TYPE, reason="x" * 501), Code.DEFINITION_INVALID_PAUSE_NOTE),
        (lambda: pause_job_type(TYPE, actor="a\x00b"), Code.DEFINITION_INVALID_PAUSE_NOTE),
        (lambda: pause_job_type(TYPE, actor=3), Code.DEFINITION_INVALID_PAUSE_NOTE),  # type: ignore[arg-type]
        (lambda: resume_job_type(None), Code.INVALID_JOB_TYPE),  # type: ignore[arg-type]
    ],
    ids=["int", "blank", "empty-reason", "long-reason", "nul-actor", "int-actor", "none"],
)
@pytest.mark.django_db
def test_pause_resume__bad_input__validation_error_before_any_sql(
    call: Callable[[], Any], code: Code, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
        call()
    assert raised.value.code == code.value
    assert raised.value.category.value == "validation"


@pytest.mark.django_db
def test_pause_resume__unknown_type__definition_not_found_transaction_usable() -> None:
    with transaction.atomic():
        for call in (pause_job_type, resume_job_type):
            with pytest.raises(RunledgerError) as raised:
                call("jobs.test.nobody")
            assert raised.value.code == Code.DEFINITION_NOT_FOUND.value
        assert JobDefinition.objects.count() == 0  # the caller's transaction still works
