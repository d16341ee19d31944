"""The worker's own metrics, scraped over HTTP from a real in-process worker (reference
observability 10, items 5, 9 and 11-17).

Each test starts a ``Worker`` with its metrics port on an ephemeral port of 127.0.0.1, lets
it run real jobs against PostgreSQL, and reads its ``/metrics``. Handlers block on events the
test sets; the test waits for reports and rows, never for time.

All tests are ``transaction=True``: the worker commits in its own connections.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from typing import Any

import pytest

from runledger_django import JobContext, ReadScope, TerminalJobError, cancel_job, enqueue_job
from runledger_django.services.claim import claim_jobs
from runledger_django.worker.metrics import OUTCOMES, REAPER_RESULTS
from tests.conftest import MakeDefinition, run_sql
from tests.observability.conftest import Scrape, StartMeteredWorker, scrape_view
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

A = "metrics.worker_a"
B = "metrics.worker_b"
C = "metrics.worker_c"

ALLOWED_LABELS = {
    "job_type",
    "state",
    "outcome",
    "error_code",
    "result",
    "reason",
    "version",
    "concurrency",
    "le",
}
"""Every label name a runledger series may carry (reference 2.1 rule 6)."""


def enqueue(job_type: str, **options: Any) -> uuid.UUID:
    return enqueue_job(job_type, {}, **options).job_id


def runledger(scrape: Scrape) -> dict[Any, float]:
    return {key: value for key, value in scrape.samples.items() if key[0].startswith("runledger_")}


def test_worker_start__every_type_and_outcome_series_exists_at_zero(
    make_definition: MakeDefinition, start_metered_worker: StartMeteredWorker
) -> None:
    """Item 11: the first increment of any series shows in rate(), because it was there at 0."""
    make_definition(A)
    make_definition(B)
    running = start_metered_worker({A: lambda job: None, B: lambda job: None})

    # The series and the build info are set one after the other at start: wait for both.
    scrape = wait_until(
        lambda: (
            (s := running.scrape()).series("runledger_job_attempts_total")
            and s.series("runledger_worker_info")
            and s
        ),
        what="the worker's series",
    )

    assert scrape.series("runledger_job_attempts_total") == {
        frozenset({("job_type", t), ("outcome", o)}): 0.0 for t in (A, B) for o in OUTCOMES
    }
    assert scrape.series("runledger_reaper_reaped_total") == {
        frozenset({("job_type", t), ("result", r)}): 0.0 for t in (A, B) for r in REAPER_RESULTS
    }
    for outcome in OUTCOMES:
        assert (
            scrape.value("runledger_job_run_duration_seconds_count", job_type=A, outcome=outcome)
            == 0
        )
    assert scrape.value("runledger_job_start_delay_seconds_count", job_type=B) == 0
    assert (
        scrape.value("runledger_worker_info", version=scrape_version(scrape), concurrency="1") == 1
    )


def scrape_version(scrape: Scrape) -> str:
    (labels,) = scrape.series("runledger_worker_info")
    return dict(labels)["version"]


def test_outcomes__one_each__add_one_to_their_counter_and_histogram(
    make_definition: MakeDefinition, start_metered_worker: StartMeteredWorker
) -> None:
    """Items 12 and 13: a success, a retry and a dead letter each count once under their
    outcome, with one run-duration observation there; the failures count under their product
    error code, and no exception class label appears without the opt-in."""
    for job_type in (A, B, C):
        make_definition(job_type)
    enqueue(A)
    enqueue(B)
    enqueue(C)

    def retry(job: JobContext) -> None:
        raise ValueError("partner API down")

    def give_up(job: JobContext) -> None:
        raise TerminalJobError("bad input", code="job.terminal_failure")

    running = start_metered_worker({A: lambda job: None, B: retry, C: give_up})
    wait_until(lambda: len(running.runs) == 3, what="three attempts")
    running.finish()
    scrape = running.scrape()

    attempts = scrape.series("runledger_job_attempts_total")
    moved = {
        dict(labels)["job_type"] + ":" + dict(labels)["outcome"]
        for labels, v in attempts.items()
        if v
    }
    assert moved == {f"{A}:succeeded", f"{B}:retried", f"{C}:dead_lettered"}
    assert all(value in (0, 1) for value in attempts.values())
    for job_type, outcome in ((A, "succeeded"), (B, "retried"), (C, "dead_lettered")):
        assert (
            scrape.value(
                "runledger_job_run_duration_seconds_count", job_type=job_type, outcome=outcome
            )
            == 1
        )
        assert (
            scrape.value(
                "runledger_job_run_duration_seconds_bucket",
                job_type=job_type,
                outcome=outcome,
                le="+Inf",
            )
            == 1
        )
    assert scrape.series("runledger_job_failures_total") == {
        frozenset({("job_type", B), ("error_code", "job.handler_failed")}): 1.0,
        frozenset({("job_type", C), ("error_code", "job.terminal_failure")}): 1.0,
    }
    assert scrape.value("runledger_worker_claims_total", result="claimed") >= 1
    assert scrape.value("runledger_worker_claim_batch_size_sum") == 3


def test_failures__exception_class_label__only_with_the_opt_in(
    make_definition: MakeDefinition, start_metered_worker: StartMeteredWorker, settings: Any
) -> None:
    """Item 13: METRICS_ERROR_CLASS_LABEL adds the handler's exception class."""
    settings.RUNLEDGER = {**settings.RUNLEDGER, "METRICS_ERROR_CLASS_LABEL": True}
    make_definition(B)
    enqueue(B)

    def retry(job: JobContext) -> None:
        raise ValueError("partner API down")

    running = start_metered_worker({B: retry})
    wait_until(lambda: len(running.runs) == 1, what="one attempt")
    running.finish()

    assert running.scrape().series("runledger_job_failures_total") == {
        frozenset(
            {
                ("job_type", B),
                ("error_code", "job.handler_failed"),
                ("error_class", "builtins.ValueError"),
            }
        ): 1.0
    }


def test_start_delay__scheduled_an_hour_ahead__counts_from_due_time(
    make_definition: MakeDefinition, start_metered_worker: StartMeteredWorker
) -> None:
    """Item 14: a job created an hour before it came due and claimed when due records the
    time since it came due (database clock), not since creation."""
    make_definition(A)
    job_id = enqueue(A, next_run_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    # An hour passes: the job was created an hour ago and is due now.
    run_sql(
        "UPDATE runledger_job_queue SET created_at = now() - interval '1 hour', "
        "next_run_at = now() WHERE id = %s",
        [job_id],
    )
    running = start_metered_worker({A: lambda job: None})
    wait_until(lambda: len(running.runs) == 1, what="the run")
    running.finish()

    scrape = running.scrape()
    ((leased_at, due_at),) = run_sql(
        "SELECT attempt_row.leased_at, job.next_run_at FROM runledger_job_attempts attempt_row "
        "JOIN runledger_job_queue job ON job.id = attempt_row.job_id WHERE job.id = %s",
        [job_id],
    )
    assert scrape.value("runledger_job_start_delay_seconds_count", job_type=A) == 1
    recorded = scrape.value("runledger_job_start_delay_seconds_sum", job_type=A)
    assert recorded == pytest.approx((leased_at - due_at).total_seconds(), abs=1e-6)
    assert recorded < 60  # from creation it would read over 3600


def test_lease_lost_and_reaper__count_under_their_outcome_and_result(
    make_definition: MakeDefinition,
    start_metered_worker: StartMeteredWorker,
    gates: list[threading.Event],
) -> None:
    """Item 15: a result the lease fence refuses (the job was cancelled while it ran) counts
    as ``lease_lost``; the reaper's requeue and dead letter count under their results."""
    make_definition(A, max_attempts=3)
    make_definition(B, max_attempts=1)
    for job_type in (B, B):
        enqueue(job_type)
    abandoned = claim_jobs([B], worker_id="gone-worker", limit=2, lease_seconds=60)
    run_sql(
        "UPDATE runledger_job_queue SET lease_expires_at = now() - interval '1 second', "
        "max_attempts = CASE WHEN id = %s THEN 3 ELSE 1 END WHERE status = 'LEASED'",
        [abandoned[0].lease.job_id],
    )
    started, release = threading.Event(), threading.Event()
    gates.append(release)

    def block(job: JobContext) -> None:
        started.set()
        release.wait(30)

    job_id = enqueue(A)
    running = start_metered_worker({A: block, B: lambda job: None}, reaper_interval=0.05)
    assert started.wait(30)
    cancel_job(job_id, scope=ReadScope.GLOBAL)
    release.set()
    wait_until(lambda: len(running.runs) == 1, what="the cancelled run")
    wait_until(
        lambda: sum(running.scrape().series("runledger_reaper_reaped_total").values()) == 2,
        what="the reaper's pass",
    )
    scrape = running.scrape()

    assert scrape.value("runledger_job_attempts_total", job_type=A, outcome="lease_lost") == 1
    assert scrape.value("runledger_job_attempts_total", job_type=A, outcome="succeeded") == 0
    assert scrape.series("runledger_reaper_reaped_total") == {
        frozenset({("job_type", A), ("result", "requeued")}): 0.0,
        frozenset({("job_type", A), ("result", "dead_lettered")}): 0.0,
        frozenset({("job_type", B), ("result", "requeued")}): 1.0,
        frozenset({("job_type", B), ("result", "dead_lettered")}): 1.0,
    }


def test_loop_tick__advances_while_every_handler_thread_is_busy(
    make_definition: MakeDefinition,
    start_metered_worker: StartMeteredWorker,
    gates: list[threading.Event],
) -> None:
    """Item 17: long handlers on every thread never stop the supervisor loop's tick, which
    is what a wedged-worker alert watches."""
    make_definition(A)
    release = threading.Event()
    gates.append(release)
    entered = threading.Semaphore(0)

    def block(job: JobContext) -> None:
        entered.release()
        release.wait(60)

    enqueue(A)
    enqueue(A)
    running = start_metered_worker({A: block}, concurrency=2, reaper_interval=0.05)
    assert entered.acquire(timeout=30) and entered.acquire(timeout=30)
    first = wait_until(
        lambda: (s := running.scrape()).value("runledger_worker_threads", state="busy") == 2 and s,
        what="both threads busy",
    )
    tick = first.value("runledger_worker_loop_last_tick_timestamp_seconds")

    later = wait_until(
        lambda: (
            (s := running.scrape()).value("runledger_worker_loop_last_tick_timestamp_seconds")
            > tick
            and s
        ),
        what="a later tick",
    )

    assert later.value("runledger_worker_threads", state="busy") == 2
    assert later.value("runledger_worker_threads", state="idle") == 0
    assert not running.runs  # both handlers are still running


def test_labels__no_series_carries_an_unbounded_label(
    make_definition: MakeDefinition, start_metered_worker: StartMeteredWorker
) -> None:
    """Item 5: scan every sample of the worker port (with the queue gauges) and the view:
    only bounded label names, and no tenant, job id, key, worker id or host as a value."""
    import socket

    make_definition(A)
    organization = uuid.uuid4()
    ids = {enqueue(A, organization_id=organization, idempotency_key=f"order-{n}") for n in range(3)}

    def fail(job: JobContext) -> None:
        raise ValueError(f"order {job.job_id} of {organization}")

    running = start_metered_worker({A: fail}, queue_gauges=True, worker_id="pod-7f9c-metrics")
    wait_until(lambda: len(running.runs) == 3, what="three attempts")
    scrapes = [running.scrape(), scrape_view()]

    forbidden = (
        {str(organization), "pod-7f9c-metrics", socket.gethostname()}
        | {str(job_id) for job_id in ids}
        | {f"order-{n}" for n in range(3)}
    )
    names: set[str] = set()
    for scrape in scrapes:
        for (name, labels), _value in runledger(scrape).items():
            names |= {label for label, _ in labels}
            assert not {value for _, value in labels} & forbidden, (name, labels)
    assert names <= ALLOWED_LABELS
    assert {"job_type", "state", "outcome", "error_code", "result", "le"} <= names


def test_view_and_worker_port__same_state__same_gauges(
    make_definition: MakeDefinition, start_metered_worker: StartMeteredWorker
) -> None:
    """Item 9: every exporter of the queue gauges reports the same values (dashboards take
    their max, never their sum)."""
    make_definition(A)
    make_definition(B)
    for _ in range(4):
        enqueue(B)
    enqueue(B, next_run_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    running = start_metered_worker({A: lambda job: None}, queue_gauges=True)

    port = wait_until(
        lambda: (s := running.scrape()).series("runledger_jobs") and s, what="queue gauges"
    )
    view = scrape_view()

    assert port.series("runledger_jobs") == view.series("runledger_jobs")
    assert view.value("runledger_jobs", job_type=B, state="due") == 4
    assert port.series("runledger_job_type_enabled") == view.series("runledger_job_type_enabled")
    assert port.value("runledger_collector_up") == view.value("runledger_collector_up") == 1
    port_age = port.value("runledger_job_oldest_due_age_seconds", job_type=B)
    view_age = view.value("runledger_job_oldest_due_age_seconds", job_type=B)
    assert 0 < port_age <= view_age < port_age + 60


def test_shutdown__a_job_handed_back__counts_as_released(
    make_definition: MakeDefinition,
    start_metered_worker: StartMeteredWorker,
    gates: list[threading.Event],
) -> None:
    """A stopping worker whose grace period is over hands its running job back: ``released``."""
    make_definition(A)
    started, release = threading.Event(), threading.Event()
    gates.append(release)

    def block(job: JobContext) -> None:
        started.set()
        release.wait(60)

    job_id = enqueue(A)
    running = start_metered_worker({A: block}, grace_seconds=0.0)
    assert started.wait(30)
    running.finish()

    scrape = running.scrape()
    assert scrape.value("runledger_job_attempts_total", job_type=A, outcome="released") == 1
    assert run_sql("SELECT status FROM runledger_job_queue WHERE id = %s", [job_id]) == [
        ("PENDING",)
    ]


def test_claims_held_back_by_a_limit__count_as_throttled_with_the_reason(
    make_definition: MakeDefinition,
    start_metered_worker: StartMeteredWorker,
    gates: list[threading.Event],
) -> None:
    """Item 44's counter: with max_concurrency 1 and a second job due, the claims that leave
    it behind count under reason="concurrency"; the type's other series are unaffected."""
    from runledger_django import set_job_type_limits

    make_definition(A)
    set_job_type_limits(A, max_concurrency=1)
    release = threading.Event()
    gates.append(release)
    for n in range(2):
        enqueue_job(A, {"n": n})
    running = start_metered_worker({A: lambda job: release.wait(30)}, concurrency=2)

    scrape = wait_until(
        lambda: (
            (
                (s := running.scrape()).get(
                    "runledger_worker_claims_throttled_total", job_type=A, reason="concurrency"
                )
                or 0
            )
            >= 1
            and s
        ),
        what="a throttled claim",
    )

    assert scrape.get("runledger_worker_claims_throttled_total", job_type=A, reason="rate") in (
        None,
        0.0,
    )
    release.set()
