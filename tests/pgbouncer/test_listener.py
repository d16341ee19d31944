"""The wake-up listener finds out by itself whether notifications reach it.

Through PgBouncer in transaction pooling LISTEN sticks to the server connection that ran it,
which goes back to the pool at once: nothing is ever delivered. The listener's probe (a
notification to a private channel, sent from a second connection) never arrives, so it logs
one line, ends, and the worker polls. On a direct connection the probe arrives within
milliseconds and the listener carries on as before.

``transaction=True``: notifications are delivered at commit only, and the listener and the
worker use connections of their own.
"""

from __future__ import annotations

import queue
import signal
import threading
import uuid
from collections.abc import Iterator

import pytest

from runledger_django import enqueue_job, record_intent
from runledger_django.models import Job
from runledger_django.services.wakeup import INTENTS_CHANNEL, JOBS_CHANNEL
from runledger_django.worker.listener import UNREACHABLE_MESSAGE, Listener
from tests.conftest import TEST_JOB_TYPE, MakeDefinition
from tests.pgbouncer.bouncer import PgBouncer, pooled_server_states
from tests.pgbouncer.conftest import SpawnWorker, fulfilment_definitions, run_client
from tests.worker.conftest import wait_until
from tests.worker_app import NOOP

pytestmark = pytest.mark.django_db(transaction=True)

FALLBACK = UNREACHABLE_MESSAGE.split(" (")[0]
POLL = 0.2


def all_succeeded(job_ids: list[uuid.UUID]) -> bool:
    return Job.objects.filter(id__in=job_ids, status="SUCCEEDED").count() == len(job_ids)


def test_runledger_worker__through_pgbouncer__says_once_it_polls_and_runs_every_job(
    pgbouncer: PgBouncer, spawn_worker: SpawnWorker, make_definition: MakeDefinition
) -> None:
    make_definition(NOOP)
    before = [enqueue_job(NOOP, {"n": n}).job_id for n in range(3)]
    worker = spawn_worker("--job-type", NOOP, "--concurrency", "3", WORKER_POLL_INTERVAL=POLL)

    line = worker.wait_for_line(FALLBACK, stream="stderr")
    assert f"polling every {POLL:g} s" in line
    after = [enqueue_job(NOOP, {"n": n}).job_id for n in range(3, 6)]  # the listener has ended
    wait_until(lambda: all_succeeded(before + after), what="every job to run")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.stderr_lines

    assert sum(FALLBACK in line for line in worker.stderr_lines) == 1
    # It gave up before subscribing: no pooled server listens on the wake-up channels.
    for state in pooled_server_states(pgbouncer):
        assert {JOBS_CHANNEL, INTENTS_CHANNEL}.isdisjoint(state.listening)


class DirectListener:
    """A listener on the test database's own (direct) connection settings, recording what it
    hears in a queue so a test waits for an event, not a time."""

    def __init__(self) -> None:
        self.received: queue.Queue[str] = queue.Queue()
        self.stop = threading.Event()
        self.listener = Listener(
            using="default",
            promote=True,
            on_notify=self.received.put,
            stop=self.stop,
            poll_interval=30.0,
        )
        self.listener.start()

    def wait_subscribed(self) -> None:
        assert self.listener.connected.wait(10)
        # Right after subscribing it pokes both channels (work may have come meanwhile).
        assert {self.next(), self.next()} == {JOBS_CHANNEL, INTENTS_CHANNEL}

    def next(self) -> str:
        return self.received.get(timeout=10)

    def finish(self) -> None:
        self.stop.set()
        self.listener.join(10)


@pytest.fixture
def direct_listener() -> Iterator[DirectListener]:
    listener = DirectListener()
    yield listener
    listener.finish()


def test_listener__direct_connection__probe_arrives_and_notifications_wake_it(
    direct_listener: DirectListener,
    make_definition: MakeDefinition,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_definition()
    direct_listener.wait_subscribed()

    enqueue_job(TEST_JOB_TYPE, {})
    assert direct_listener.next() == JOBS_CHANNEL
    record_intent(TEST_JOB_TYPE, {}, idempotency_key=f"direct-{uuid.uuid4()}")
    assert direct_listener.next() == INTENTS_CHANNEL

    direct_listener.finish()
    assert not direct_listener.listener.unreachable.is_set()
    assert FALLBACK not in caplog.text


def test_listener__direct_connection__hears_views_that_commit_through_pgbouncer(
    pgbouncer: PgBouncer, direct_listener: DirectListener, make_definition: MakeDefinition
) -> None:
    """A worker given a direct connection is woken by web processes behind PgBouncer: NOTIFY
    needs no session, only LISTEN does."""
    fulfilment_definitions(make_definition)
    direct_listener.wait_subscribed()

    [checkout] = run_client(pgbouncer, ("checkout", {"orders": 1, "threads": 1}))

    assert checkout["orders"][0][0]["status"] == 201
    assert direct_listener.next() == INTENTS_CHANNEL
