"""Wake-ups: LISTEN/NOTIFY start due work at once; polling is the fallback.

A commit that makes work due (enqueue_job, requeue_job, a promotion, a hand-back) is followed
by a NOTIFY on ``runledger_jobs``, sent after the caller's commit, never inside its
transaction. An idle worker that listens starts such a job long before its poll interval; one
that does not listen, or misses the notification, finds it at its next poll.

``transaction=True``: notifications are delivered at commit only, and workers use their own
connections.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils.timezone import now as timezone_now
from pytest_django import Settings as SettingsWrapper

from runledger_django import ReadScope, cancel_job, enqueue_job, record_intent, requeue_job
from runledger_django.worker.listener import Listener
from runledger_django.worker.registry import Handler, Registry
from runledger_django.worker.runtime import Worker, WorkerConfig
from tests.conftest import OpenSession
from tests.worker.conftest import TYPE, Enqueue, job_row, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

CHANNEL = "runledger_jobs"
LONG_POLL = 30.0
"""A poll interval no test waits out: a job that starts sooner was woken by a notification."""


class IdleWorker:
    """A Worker in a thread whose wake-ups (notifications and their arrival times) are
    recorded, so a test knows what woke it."""

    def __init__(
        self, *, listen: bool, poll_interval: float, idle_poll_interval: float | None = None
    ) -> None:
        registry = Registry()
        registry.register(Handler(job_type=TYPE, func=lambda job: "ran"))
        self.stop = threading.Event()
        self.notifications: list[tuple[str, float]] = []
        self.looks: list[str] = []
        """"claim" or "peek", in the order the loop sent them (the real statements run)."""
        self.worker = Worker(
            WorkerConfig(
                job_types=[TYPE],
                listen=listen,
                poll_interval=poll_interval,
                idle_poll_interval=idle_poll_interval,
                lease_seconds=60,
            ),
            registry,
            stop=self.stop,
        )
        real = self.worker.on_notify

        def recording(channel: str) -> None:
            self.notifications.append((channel, time.monotonic()))
            real(channel)

        self.worker.on_notify = recording  # type: ignore[method-assign]
        real_claim, real_peek = self.worker._claim, self.worker._peek_due

        def claim(free: int) -> Any:
            self.looks.append("claim")
            return real_claim(free)

        def peek() -> Any:
            self.looks.append("peek")
            return real_peek()

        self.worker._claim = claim  # type: ignore[method-assign]
        self.worker._peek_due = peek  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.worker.run()
        finally:
            connections.close_all()

    def listener(self) -> Listener | None:
        found = [t for t in self.worker.threads if isinstance(t, Listener)]
        return found[0] if found else None

    def wait_listening(self) -> None:
        wait_until(lambda: self.listener() is not None, what="the listener thread")
        listener = self.listener()
        assert listener is not None
        assert listener.connected.wait(30)
        # On (re)connecting it pokes itself once per channel: let that claim pass first.
        wait_until(lambda: self.notifications, what="the listener's first poke")

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(60)


@pytest.fixture
def idle_worker(definition: None) -> Iterator[Callable[..., IdleWorker]]:
    started: list[IdleWorker] = []

    def start(
        *,
        listen: bool = True,
        poll_interval: float = LONG_POLL,
        idle_poll_interval: float | None = None,
    ) -> IdleWorker:
        worker = IdleWorker(
            listen=listen, poll_interval=poll_interval, idle_poll_interval=idle_poll_interval
        )
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.finish()


def succeeded(job_id: uuid.UUID) -> Callable[[], bool]:
    return lambda: job_row(job_id)["status"] == "SUCCEEDED"


def test_idle_listening_worker__enqueue_job__runs_long_before_the_poll_interval(
    idle_worker: Callable[..., IdleWorker],
) -> None:
    worker = idle_worker()
    worker.wait_listening()
    pokes = len(worker.notifications)

    sent = time.monotonic()
    job_id = enqueue_job(TYPE, {}).job_id

    wait_until(succeeded(job_id), timeout=LONG_POLL / 2, what="the notified worker to run it")
    woken = [at for channel, at in worker.notifications[pokes:] if channel == CHANNEL]
    assert woken and woken[0] >= sent


def test_worker_without_listen__enqueued_job__found_by_polling(
    idle_worker: Callable[..., IdleWorker],
) -> None:
    worker = idle_worker(listen=False, poll_interval=0.2)
    wait_until(lambda: worker.worker.threads, what="the worker to start")

    job_id = enqueue_job(TYPE, {}).job_id

    wait_until(succeeded(job_id), what="the polling worker to run it")
    assert worker.listener() is None
    assert worker.notifications == []


def test_listening_worker__notification_lost__job_runs_at_the_next_poll(
    idle_worker: Callable[..., IdleWorker], settings: SettingsWrapper
) -> None:
    """With WAKEUP_NOTIFY off nothing is sent: the listening worker still starts the job,
    one poll interval later at most."""
    settings.RUNLEDGER = {"WAKEUP_NOTIFY": False}
    worker = idle_worker(poll_interval=0.5)
    worker.wait_listening()
    pokes = len(worker.notifications)

    job_id = enqueue_job(TYPE, {}).job_id

    wait_until(succeeded(job_id), what="the next poll")
    assert worker.notifications[pokes:] == []


def test_quiet_worker__nothing_due__peeks_instead_of_claiming(
    idle_worker: Callable[..., IdleWorker],
) -> None:
    """A listening worker whose claim found nothing asks when work comes due (one read, no
    lock) at each idle poll instead of claiming again: an idle worker's only statement."""
    worker = idle_worker(poll_interval=0.05, idle_poll_interval=0.2)
    worker.wait_listening()
    wait_until(lambda: worker.looks.count("peek") >= 1, what="the first peek")
    claims = worker.looks.count("claim")

    wait_until(lambda: worker.looks.count("peek") >= 4, what="three more idle polls")

    assert worker.looks.count("claim") == claims


def test_quiet_worker__job_due_nobody_announced__found_at_the_next_peek(
    idle_worker: Callable[..., IdleWorker], settings: SettingsWrapper
) -> None:
    """Work that arrives without a notification (here WAKEUP_NOTIFY is off for the enqueuer)
    is found by the next idle poll: the peek sees it due and the worker claims it."""
    worker = idle_worker(poll_interval=0.05, idle_poll_interval=0.2)
    worker.wait_listening()
    wait_until(lambda: worker.looks.count("peek") >= 1, what="the worker to go quiet")
    settings.RUNLEDGER = {"WAKEUP_NOTIFY": False}
    pokes = len(worker.notifications)
    start = len(worker.looks)

    job_id = enqueue_job(TYPE, {}).job_id

    wait_until(succeeded(job_id), what="the next idle poll to find it")
    assert worker.notifications[pokes:] == []
    after = worker.looks[start:]
    first_claim = after.index("claim")
    assert first_claim >= 1 and after[first_claim - 1] == "peek", after


def test_quiet_worker__job_enqueued_for_later__claimed_at_its_time_not_the_idle_poll(
    idle_worker: Callable[..., IdleWorker],
) -> None:
    """The peek tells the worker when the next job comes due; it claims then, so a job
    enqueued for two seconds ahead starts on time although the idle poll is far longer."""
    worker = idle_worker(poll_interval=0.05, idle_poll_interval=LONG_POLL)
    worker.wait_listening()

    due = timezone_now() + dt.timedelta(seconds=2)
    job_id = enqueue_job(TYPE, {}, next_run_at=due).job_id

    wait_until(succeeded(job_id), timeout=LONG_POLL / 2, what="the job at its time")
    assert job_row(job_id)["started_at"] >= due
    assert "peek" in worker.looks


def test_quiet_worker__without_listener__claims_every_poll(
    idle_worker: Callable[..., IdleWorker],
) -> None:
    """Where notifications cannot arrive, polling is how work is found: no peeks."""
    worker = idle_worker(listen=False, poll_interval=0.05, idle_poll_interval=LONG_POLL)
    wait_until(lambda: worker.looks.count("claim") >= 5, what="five polls")

    assert "peek" not in worker.looks


@pytest.fixture
def listening_session(open_session: OpenSession) -> psycopg.Connection[Any]:
    session = open_session()
    session.execute(f"LISTEN {CHANNEL}")
    return session


def notifications(session: psycopg.Connection[Any], *, timeout: float) -> list[str]:
    """Notifications on CHANNEL that reach ``session`` within ``timeout`` seconds (at most
    the first one, when one arrives)."""
    return [n.channel for n in session.notifies(timeout=timeout, stop_after=1)]


def test_enqueue_job__inside_callers_transaction__notify_only_after_commit(
    definition: None, listening_session: psycopg.Connection[Any]
) -> None:
    """Nothing is sent from inside the caller's transaction (no pg_notify among its
    statements; no notification while it is open); one arrives once it commits."""
    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        enqueue_job(TYPE, {"n": 1})
        enqueue_job(TYPE, {"n": 2})
        assert notifications(listening_session, timeout=0.3) == []

    assert not any("notify" in query["sql"].lower() for query in inside.captured_queries)
    assert notifications(listening_session, timeout=10) == [CHANNEL]


def test_enqueue_job__callers_transaction_rolls_back__nothing_sent(
    definition: None, listening_session: psycopg.Connection[Any]
) -> None:
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        enqueue_job(TYPE, {})
        _ = 1 / 0

    assert notifications(listening_session, timeout=0.5) == []


def test_enqueue_job__autocommit__notified_once_committed(
    definition: None, listening_session: psycopg.Connection[Any]
) -> None:
    enqueue_job(TYPE, {})
    assert notifications(listening_session, timeout=10) == [CHANNEL]


def test_requeue_job__inside_callers_transaction__notify_after_commit(
    enqueue: Enqueue, listening_session: psycopg.Connection[Any]
) -> None:
    job_id = enqueue()
    cancel_job(job_id, scope=ReadScope.GLOBAL)
    list(listening_session.notifies(timeout=0.5, stop_after=1))  # the enqueue's, if any

    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        requeue_job(job_id, scope=ReadScope.GLOBAL)
        assert notifications(listening_session, timeout=0.3) == []

    assert not any("notify" in query["sql"].lower() for query in inside.captured_queries)
    assert notifications(listening_session, timeout=10) == [CHANNEL]


def test_record_intent__inside_callers_transaction__never_notifies_inside_it(
    definition: None, listening_session: psycopg.Connection[Any]
) -> None:
    """SPEC: a NOTIFY inside the caller's transaction would serialise every committing
    transaction of the host application on PostgreSQL's notification lock."""
    with transaction.atomic(), CaptureQueriesContext(connection) as inside:
        record_intent(TYPE, {"n": 1}, idempotency_key="wake-1")

    assert not any("notify" in query["sql"].lower() for query in inside.captured_queries)


def test_quiet_worker__paused_type_backlog__not_seen_as_due(
    idle_worker: Callable[..., IdleWorker],
) -> None:
    """A paused type's due jobs are not work: the quiet worker keeps peeking rather than
    claiming every poll, and the resume's notification starts the job at once."""
    from runledger_django import pause_job_type, resume_job_type

    worker = idle_worker(poll_interval=0.05, idle_poll_interval=0.2)
    worker.wait_listening()
    pause_job_type(TYPE)
    job_id = enqueue_job(TYPE, {}).job_id
    wait_until(lambda: worker.looks.count("peek") >= 1, what="the worker to go quiet")
    claims = worker.looks.count("claim")

    wait_until(lambda: worker.looks.count("peek") >= 4, what="three more idle polls")
    assert worker.looks.count("claim") == claims
    assert job_row(job_id)["status"] == "PENDING"

    resume_job_type(TYPE)
    wait_until(succeeded(job_id), timeout=LONG_POLL / 2, what="the resumed job")
