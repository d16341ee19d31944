"""Running one claimed job: its handler's outcome, JobContext's fenced writes, and run_jobs().

Upstream: completion_and_retry.rs, lease_fencing.rs, terminal_hooks.rs and
execution_services.rs (the parts without observers, hooks, continuations or retry-delay
overrides, none of which SPEC has). ``execute`` runs inside the per-test transaction; the
run_jobs tests are ``transaction=True`` because run_jobs refuses to run inside an atomic block.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from runledger_django import (
    JobContext,
    ReadScope,
    RetryJob,
    RunledgerError,
    TerminalJobError,
    WorkReport,
    cancel_job,
    run_jobs,
)
from runledger_django.models import JobDefinition
from runledger_django.worker.execution import Execution, JobRun, execute
from runledger_django.worker.registry import Handler, HandlerFunc, Registry
from tests.conftest import OpenSession, run_sql
from tests.worker.conftest import (
    TYPE,
    Enqueue,
    Register,
    attempt_rows,
    claim_one,
    db_clock,
    event_rows,
    event_types,
    expire_lease,
    job_row,
    make_due,
)

pytestmark = pytest.mark.django_db

Run = Callable[..., JobRun]


@pytest.fixture
def run_one(enqueue: Enqueue) -> Run:
    """Enqueue one job, claim it and execute ``handler`` for it; return how it ended."""

    def run(handler: HandlerFunc | None, payload: Any = None, **enqueue_kwargs: Any) -> JobRun:
        enqueue(payload, **enqueue_kwargs)
        claimed = claim_one()
        registry = Registry()
        if handler is not None:
            registry.register(Handler(job_type=TYPE, func=handler))
        return execute(Execution(claimed, lease_seconds=60), registry, using="default")

    return run


def only_job() -> uuid.UUID:
    return uuid.UUID(str(run_sql("SELECT id FROM runledger_job_queue")[0][0]))


def attempt_of(job_id: uuid.UUID) -> dict[str, Any]:
    return attempt_rows(job_id)[-1]


# --- what a handler's end means ------------------------------------------------------------------


def test_execute__returns_json__succeeded_with_output(run_one: Run) -> None:
    run = run_one(lambda job: {"echo": job.payload, "attempt": job.attempt}, {"n": 1})

    job_id = only_job()
    assert (run.outcome, run.error_code, run.next_run_at) == ("succeeded", None, None)
    assert job_row(job_id)["output"] == {"echo": {"n": 1}, "attempt": 1}
    assert attempt_of(job_id)["outcome"] == "SUCCEEDED"


def test_execute__returns_none__succeeded_without_output(run_one: Run) -> None:
    run = run_one(lambda job: None)
    assert run.outcome == "succeeded"
    assert job_row(only_job())["output"] is None


def test_execute__raises_exception__retried_with_backoff_and_error_details(run_one: Run) -> None:
    """process_claimed_job_observer_reports_retryable_failure_after_commit."""

    def handler(job: JobContext) -> None:
        raise ValueError("boom")

    before = db_clock()
    run = run_one(handler)

    job_id = only_job()
    attempt = attempt_of(job_id)
    assert (run.outcome, run.error_code) == ("retried", "job.handler_failed")
    assert run.next_run_at == job_row(job_id)["next_run_at"]
    assert (attempt["failure_kind"], attempt["error_message"], attempt["error_class"]) == (
        "RETRYABLE",
        "ValueError: boom",
        "builtins.ValueError",
    )
    traceback = run_sql(
        "SELECT error_traceback FROM runledger_job_attempts WHERE job_id = %s", [job_id]
    )[0][0]
    assert "raise ValueError" in traceback
    # About 10 s after the first attempt (the jitter is at most half a second).
    delay = (job_row(job_id)["next_run_at"] - before).total_seconds()
    assert 9.4 < delay < 11.5
    assert attempt["retry_delay_ms"] is not None
    assert 9_500 <= attempt["retry_delay_ms"] <= 10_500


def test_execute__retry_job_at__next_run_exactly_then(run_one: Run) -> None:
    """process_claimed_job_observer_reports_absolute_retry_time_after_commit."""
    at = dt.datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC)

    def handler(job: JobContext) -> None:
        raise RetryJob("rate limited", at=at)

    run = run_one(handler)

    assert (run.outcome, run.error_code, run.next_run_at) == ("retried", "job.retry_requested", at)
    assert job_row(only_job())["next_run_at"] == at
    assert attempt_of(only_job())["error_message"] == "rate limited"


def test_execute__retry_job_far_beyond_int32_ms__provider_time_preserved(run_one: Run) -> None:
    """absolute_retry_timing_preserves_provider_reset_time_without_a_delay_limit."""
    at = db_clock() + dt.timedelta(days=60)

    def handler(job: JobContext) -> None:
        raise RetryJob(at=at)

    assert run_one(handler).next_run_at == at


def test_execute__terminal_error__dead_lettered_with_its_code(run_one: Run) -> None:
    def handler(job: JobContext) -> None:
        raise TerminalJobError("no e-mail address", code="shop.no_email")

    run = run_one(handler)

    job_id = only_job()
    assert (run.outcome, run.error_code) == ("dead_lettered", "shop.no_email")
    assert (job_row(job_id)["status"], job_row(job_id)["last_error_message"]) == (
        "DEAD_LETTERED",
        "no e-mail address",
    )


def test_execute__terminal_error_with_reserved_code__recorded_not_taken_for_lease_loss(
    run_one: Run,
) -> None:
    """process_claimed_job_persists_handler_failure_with_reserved_lease_code: a handler may
    use a runtime code for its own failure; it is stored, and the lease is not lost."""

    def handler(job: JobContext) -> None:
        raise TerminalJobError("upstream lease gone", code="job.lease_owner_mismatch")

    run = run_one(handler)

    assert (run.outcome, run.error_code) == ("dead_lettered", "job.lease_owner_mismatch")
    assert job_row(only_job())["last_error_code"] == "job.lease_owner_mismatch"


@pytest.mark.parametrize("panic", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_execute__handler_raises_base_exception__panicked_dead_letter(
    run_one: Run, panic: type[BaseException]
) -> None:
    """process_claimed_job_catches_main_handler_panic: a BaseException that is no Exception
    is a panic (PANICKED, job.handler_panic), which dead-letters; it never escapes."""

    def handler(job: JobContext) -> None:
        raise panic("abort")

    run = run_one(handler)

    job_id = only_job()
    assert (run.outcome, run.error_code) == ("dead_lettered", "job.handler_panic")
    assert (attempt_of(job_id)["failure_kind"], job_row(job_id)["status"]) == (
        "PANICKED",
        "DEAD_LETTERED",
    )


def test_execute__no_handler__terminal_handler_not_registered(run_one: Run) -> None:
    run = run_one(None)
    assert (run.outcome, run.error_code) == ("dead_lettered", "job.handler_not_registered")
    assert attempt_of(only_job())["failure_kind"] == "TERMINAL"


@pytest.mark.parametrize("output", [{1, 2}, dt.date(2030, 1, 1), {"x": float("nan")}], ids=repr)
def test_execute__output_not_json_native__terminal_invalid_output(
    run_one: Run, output: object
) -> None:
    """Our analogue of process_claimed_job_terminally_fails_invalid_success_progress: a
    success that cannot be stored fails terminally rather than being retried for ever."""
    run = run_one(lambda job: output)
    assert (run.outcome, run.error_code) == ("dead_lettered", "job.invalid_output")
    assert job_row(only_job())["output"] is None


def test_execute__failure_at_max_attempts_of_the_row__dead_lettered(run_one: Run) -> None:
    """process_claimed_job_observer_reports_dead_letter_failure_from_completion_outcome: the
    disposition comes from the row's max_attempts under its lock, not from the claimed copy."""

    def handler(job: JobContext) -> None:
        assert job.max_attempts == 3
        run_sql("UPDATE runledger_job_queue SET max_attempts = 1 WHERE id = %s", [job.job_id])
        raise ValueError("boom")

    run = run_one(handler)

    assert run.outcome == "dead_lettered"
    assert event_rows(only_job())[-1]["payload"]["reason"] == "ATTEMPTS_EXHAUSTED"


def test_execute__result_at_the_deadline__timeout_retry(enqueue: Enqueue) -> None:
    """success_and_continuation_must_be_observed_strictly_before_the_deadline and
    process_claimed_job_observer_reports_timeout_failure_after_commit: a result observed at or
    after the deadline is a TIMEOUT (retryable), whatever the handler returned."""
    enqueue()
    execution = Execution(claim_one(), lease_seconds=60)
    registry = Registry()

    def handler(job: JobContext) -> dict[str, bool]:
        execution.deadline = time.monotonic()  # the clock reaches the deadline mid-handler
        return {"done": True}

    registry.register(Handler(job_type=TYPE, func=handler))
    run = execute(execution, registry, using="default")

    job_id = only_job()
    assert (run.outcome, run.error_code) == ("retried", "job.timeout_exceeded")
    assert (job_row(job_id)["status"], job_row(job_id)["output"]) == ("PENDING", None)
    assert attempt_of(job_id)["failure_kind"] == "TIMEOUT"


# --- JobContext -------------------------------------------------------------------------------


def test_job_context__attributes__the_claimed_job(enqueue: Enqueue) -> None:
    org = uuid.uuid4()
    job_id = enqueue({"n": 5}, organization_id=org, timeout_seconds=30)
    claimed = claim_one()
    context = JobContext(Execution(claimed, lease_seconds=60), using="default")

    assert (context.job_id, context.job_type, context.organization_id, context.payload) == (
        job_id,
        TYPE,
        org,
        {"n": 5},
    )
    assert (context.attempt, context.max_attempts, context.run_number) == (1, 3, 1)
    assert (context.worker_id, context.checkpoint) == (claimed.lease.worker_id, None)
    assert context.deadline == claimed.claimed_at + dt.timedelta(seconds=30)
    assert dt.timedelta(seconds=25) < context.remaining <= dt.timedelta(seconds=30)
    assert (
        repr(context) == f"JobContext(job_id={job_id}, job_type={TYPE!r}, attempt=1, run_number=1)"
    )


def test_job_context__writes__recorded_behind_the_lease(run_one: Run) -> None:
    def handler(job: JobContext) -> str:
        job.set_stage("fetching")
        job.set_progress(2, 4)
        job.save_checkpoint({"page": 2})
        job.heartbeat()
        assert job.checkpoint == {"page": 2}
        return "ok"

    run = run_one(handler)

    job_id = only_job()
    assert run.outcome == "succeeded"
    row = job_row(job_id)
    assert (row["progress_done"], row["progress_total"], row["checkpoint"]) == (2, 4, {"page": 2})
    assert event_types(job_id) == [
        "ENQUEUED",
        "LEASED",
        "STAGE_CHANGED",
        "PROGRESS",
        "HEARTBEAT",
        "SUCCEEDED",
    ]


def test_job_context__write_refused__checkpoint_not_acknowledged(run_one: Run) -> None:
    """failed_progress_transaction_does_not_acknowledge_or_persist_checkpoint."""
    seen: list[Any] = []

    def handler(job: JobContext) -> None:
        job.save_checkpoint({"page": 1})
        with pytest.raises(RunledgerError) as raised:
            job.save_checkpoint({"bad": {1, 2}})
        seen.append((raised.value.code, job.checkpoint))

    run_one(handler)

    assert seen == [("job.invalid_checkpoint", {"page": 1})]
    assert job_row(only_job())["checkpoint"] == {"page": 1}


def test_job_context__checkpoint_inside_handlers_atomic_block__rolls_back_with_it(
    run_one: Run,
) -> None:
    """A checkpoint written inside the handler's transaction commits (or not) with its work."""

    def handler(job: JobContext) -> None:
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            job.save_checkpoint({"page": 9})
            _ = 1 / 0

    run_one(handler)

    assert job_row(only_job())["checkpoint"] is None


def test_job_context__cancelled_mid_run__write_refused_result_discarded(run_one: Run) -> None:
    """A running handler sees a cancel at its next fenced write; nothing more is written and
    its result is discarded, even though it swallows the error and returns normally
    (progress_detects_expired_and_replaced_leases_and_aborts_even_if_error_is_swallowed)."""
    codes: list[str] = []

    def handler(job: JobContext) -> dict[str, bool]:
        cancel_job(job.job_id, scope=ReadScope.GLOBAL)
        try:
            job.set_progress(1, 2)
        except RunledgerError as error:
            codes.append(error.code)
        try:
            job.save_checkpoint({"x": 1})  # refused at once: the lease is known to be lost
        except RunledgerError as error:
            codes.append(error.code)
        return {"ignored": True}

    run = run_one(handler)

    job_id = only_job()
    assert codes == ["job.lease_owner_mismatch", "job.lease_owner_mismatch"]
    assert (run.outcome, run.error_code) == ("lease_lost", "job.lease_owner_mismatch")
    row = job_row(job_id)
    assert (row["status"], row["output"], row["checkpoint"], row["progress_done"]) == (
        "CANCELED",
        None,
        None,
        None,
    )
    assert event_types(job_id) == ["ENQUEUED", "LEASED", "CANCELED"]
    assert attempt_of(job_id)["outcome"] == "CANCELED"


def test_execute__lease_expired_and_reaped_mid_run__success_refused_as_lease_loss(
    run_one: Run,
) -> None:
    """success_and_failure_lease_mismatches_report_lease_loss: a result that comes back after
    the job was reaped is reported as a lost lease, not as a failure to persist."""
    from runledger_django.services.reaper import reap_expired_leases

    def handler(job: JobContext) -> str:
        expire_lease(job.job_id)
        reap_expired_leases([TYPE])
        return "late"

    run = run_one(handler)

    assert (run.outcome, run.error_code) == ("lease_lost", "job.lease_owner_mismatch")
    assert job_row(only_job())["status"] == "PENDING"


def test_execute__failure_after_lease_taken_over__reported_as_lease_loss(run_one: Run) -> None:
    def handler(job: JobContext) -> None:
        expire_lease(job.job_id)
        from runledger_django.services.reaper import reap_expired_leases

        reap_expired_leases([TYPE])
        make_due(job.job_id)
        claim_one(worker_id="worker-b")
        raise ValueError("late failure")

    run = run_one(handler)

    job_id = only_job()
    assert run.outcome == "lease_lost"
    row = job_row(job_id)
    assert (row["status"], row["attempt"], row["worker_id"]) == ("LEASED", 2, "worker-b")
    assert attempt_of(job_id)["outcome"] is None


def test_job_context__past_deadline__write_raises_timeout(enqueue: Enqueue) -> None:
    enqueue()
    execution = Execution(claim_one(), lease_seconds=60)
    execution.deadline = time.monotonic() - 0.001
    context = JobContext(execution, using="default")

    with pytest.raises(RunledgerError) as raised:
        context.set_stage("too late")

    assert raised.value.code == "job.timeout_exceeded"
    assert "STAGE_CHANGED" not in event_types(only_job())


@pytest.mark.django_db(transaction=True)
def test_job_context__progress__committed_before_the_call_returns(
    run_one: Run, open_session: OpenSession
) -> None:
    """awaited_progress_commits_before_return: another session sees the progress as soon as
    set_progress returns, while the handler still runs."""
    observer: psycopg.Connection[Any] = open_session()
    seen: list[Any] = []

    def handler(job: JobContext) -> None:
        job.set_progress(3, 7)
        seen.append(
            observer.execute(
                "SELECT progress_done, progress_total FROM runledger_job_queue WHERE id = %s",
                [job.job_id],
            ).fetchone()
        )

    run_one(handler)

    assert seen == [(3, 7)]


# --- run_jobs ------------------------------------------------------------------------------------


@pytest.fixture
def outcomes(register: Register) -> Iterator[dict[str, Any]]:
    """A handler of the test type whose behaviour each payload chooses."""
    calls: dict[str, Any] = {"runs": []}

    def handler(job: JobContext) -> Any:
        calls["runs"].append((job.payload["do"], job.attempt))
        action = job.payload["do"]
        if action == "fail":
            raise ValueError("boom")
        if action == "terminal":
            raise TerminalJobError("no")
        if action == "cancel":
            cancel_job(job.job_id, scope=ReadScope.GLOBAL)
            return "discarded"
        return {"done": action}

    register(TYPE, handler, max_attempts=4)
    yield calls


@pytest.mark.django_db(transaction=True)
def test_run_jobs__mixed_outcomes__report_counts_each(
    enqueue: Enqueue, outcomes: dict[str, Any]
) -> None:
    for action in ("ok", "fail", "terminal", "cancel", "ok"):
        enqueue({"do": action})

    report = run_jobs([TYPE])

    assert report == WorkReport(claimed=5, succeeded=2, retried=1, dead_lettered=1, lease_lost=1)
    # The failed job's retry lies ~10 s ahead: not due, so it ran once.
    assert run_jobs([TYPE]) == WorkReport()
    assert [action for action, _ in outcomes["runs"]] == ["ok", "fail", "terminal", "cancel", "ok"]


@pytest.mark.django_db(transaction=True)
def test_run_jobs__limit__stops_after_that_many(enqueue: Enqueue, outcomes: dict[str, Any]) -> None:
    for _ in range(3):
        enqueue({"do": "ok"})

    assert run_jobs([TYPE], limit=2) == WorkReport(claimed=2, succeeded=2)
    assert run_jobs([TYPE], limit=0) == WorkReport()
    assert run_jobs(limit=5).claimed == 1


@pytest.mark.django_db(transaction=True)
def test_run_jobs__registered_type_without_definition__definition_created_then_run(
    outcomes: dict[str, Any],
) -> None:
    """Like a worker start, run_jobs creates definitions for registered types (the handler's
    defaults); an existing one is never changed."""
    assert not JobDefinition.objects.filter(job_type=TYPE).exists()

    assert run_jobs([TYPE]) == WorkReport()

    assert JobDefinition.objects.values_list("job_type", "max_attempts").get(job_type=TYPE) == (
        TYPE,
        4,
    )


@pytest.mark.django_db(transaction=True)
def test_run_jobs__expired_leases__reaped_first(enqueue: Enqueue, outcomes: dict[str, Any]) -> None:
    job_id = enqueue({"do": "ok"})
    claim_one()
    expire_lease(job_id)

    assert run_jobs([TYPE]) == WorkReport()

    assert job_row(job_id)["status_reason"] == "LEASE_EXPIRED"
    make_due(job_id)
    assert run_jobs([TYPE]) == WorkReport(claimed=1, succeeded=1)
    assert attempt_of(job_id)["attempt"] == 2


@pytest.mark.django_db(transaction=True)
def test_run_jobs__handler_leaves_transaction_open__retried_and_its_work_rolled_back(
    enqueue: Enqueue, register: Register
) -> None:
    """A handler that returns inside a transaction (an atomic block entered by hand) did not
    commit its work: the attempt fails instead of succeeding, the leftover transaction is
    rolled back, and the next job runs on a clean connection."""

    def leaky(job: JobContext) -> str:
        transaction.atomic().__enter__()
        run_sql(
            "INSERT INTO shop_orders (reference, customer_email, total_cents, created_at) "
            "VALUES ('leaked', 'a@example.com', 1, now())"
        )
        return "done"

    register(TYPE, leaky, max_attempts=3)
    job_id = enqueue({})

    report = run_jobs([TYPE])

    assert report == WorkReport(claimed=1, retried=1)
    assert job_row(job_id)["last_error_code"] == "job.handler_left_transaction_open"
    assert attempt_of(job_id)["outcome"] == "RETRY_SCHEDULED"
    assert run_sql("SELECT count(*) FROM shop_orders WHERE reference = 'leaked'") == [(0,)]
    assert not connection.in_atomic_block
    assert connection.get_autocommit()


def test_run_jobs__inside_atomic_block__refused(outcomes: dict[str, Any]) -> None:
    with pytest.raises(RunledgerError) as raised:
        run_jobs([TYPE])
    assert (raised.value.code, raised.value.category) == (
        "job.worker_requires_own_transaction",
        "validation",
    )


@pytest.mark.parametrize(
    ("job_types", "limit"),
    [(["jobs.nobody.handles"], None), ("single.string", None), (None, -1), (None, 1.5)],
    ids=["no-handler", "bare-string", "negative-limit", "float-limit"],
)
@pytest.mark.django_db(transaction=True)
def test_run_jobs__bad_arguments__rejected(
    outcomes: dict[str, Any], job_types: Any, limit: Any
) -> None:
    with pytest.raises(RunledgerError) as raised:
        run_jobs(job_types, limit=limit)
    assert raised.value.code == "job.invalid_argument"


@pytest.fixture
def refuse_attempt_updates() -> Iterator[None]:
    """A trigger that fails every close of an attempt row with a revealing message."""
    run_sql(
        "CREATE FUNCTION runledger_test_refuse_close() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'password=hunter2 in the server text'; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_refuse_close BEFORE UPDATE ON runledger_job_attempts "
        "FOR EACH ROW EXECUTE FUNCTION runledger_test_refuse_close()"
    )
    yield
    run_sql("DROP TRIGGER runledger_test_refuse_close ON runledger_job_attempts")
    run_sql("DROP FUNCTION runledger_test_refuse_close()")


@pytest.mark.django_db(transaction=True)
def test_run_jobs__outcome_cannot_be_recorded__raises_sanitized_lease_left_for_reaper(
    enqueue: Enqueue,
    outcomes: dict[str, Any],
    refuse_attempt_updates: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """completion_persist_error_diagnostic_omits_internal_query_details: the log line and the
    error's repr carry the code and SQLSTATE, never the server's text; the job stays LEASED
    (its lease expires and the reaper retries it)."""
    job_id = enqueue({"do": "ok"})
    caplog.set_level(logging.DEBUG, logger="runledger_django")

    with pytest.raises(RunledgerError) as raised:
        run_jobs([TYPE])

    assert (raised.value.code, raised.value.sqlstate) == ("db.query_failed", "P0001")
    assert "hunter2" not in repr(raised.value)
    assert "hunter2" not in str(raised.value)
    assert "hunter2" not in caplog.text
    assert "could not record a job outcome" in caplog.text
    assert job_row(job_id)["status"] == "LEASED"
