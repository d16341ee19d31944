"""One test per row of the job state machine as we implement it (reference runledger-worker 2).

Each test drives a transition through the service layer and compares whole rows: the queue
row, the attempt rows and the events in the order they were written. The tests run inside the
per-test transaction, where ``now()`` is one fixed instant, so every time a transition takes
from ``now()`` is known exactly; times taken from ``clock_timestamp()`` (a failure's retry
time) are bracketed by the clock read before and after.

Our rows differ from the reference's on purpose:
- Row 1 fuses claim and mark-running: the claim leases the job and sets stage ``running`` in
  one statement, so there is no prestart claim and no separate RUNNING write.
- Row 5 (handler continuation, LEASED -> PENDING with a new run) does not exist: SPEC has no
  continuation, so nothing here or in the runtime produces it.
- Row 8 is our analogue of the unstarted-claim release: a stopping worker hands its unfinished
  jobs back (PENDING, due now), the attempt row stays on record as INTERRUPTED and the job is
  never dead-lettered by it, whatever its attempt count.
- Row 6 honours the handler's requested time exactly (``RetryJob(after=/at=)``), even when it
  is earlier than the policy backoff: SPEC wins over the reference's max(policy, hint).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from runledger_django import ReadScope, RunledgerError, cancel_job, requeue_job
from runledger_django.domain import FailureKind, FailureOutcome, JobFailure, JobStatus
from runledger_django.models import JobExecutionResourceClaim
from runledger_django.services.claim import claim_jobs
from runledger_django.services.lifecycle import (
    complete_job_failure,
    complete_job_success,
    hand_back_leases,
    heartbeat_leases,
    update_job_progress,
)
from runledger_django.services.reaper import REAPER_RETRY_DELAY_MS, reap_expired_leases
from tests.conftest import run_sql
from tests.worker.conftest import (
    LEASE,
    TYPE,
    WORKER,
    Enqueue,
    attempt_rows,
    claim_one,
    db_clock,
    db_now,
    event_rows,
    expire_lease,
    job_row,
    make_due,
    resource_claims,
    stamp,
)

pytestmark = pytest.mark.django_db

SECOND = dt.timedelta(seconds=1)
ENQUEUED = {
    "event_type": "ENQUEUED",
    "run_number": 1,
    "attempt": None,
    "stage": "queued",
    "progress_done": None,
    "progress_total": None,
    "payload": {"job_type": TYPE},
}


def pending_row(now: dt.datetime, **changes: Any) -> dict[str, Any]:
    """A freshly enqueued job of the test type, as enqueue_job leaves it."""
    row: dict[str, Any] = {
        "status": "PENDING",
        "run_number": 1,
        "attempt": 0,
        "max_attempts": 3,
        "timeout_seconds": 60,
        "priority": 100,
        "next_run_at": now,
        "lease_expires_at": None,
        "last_heartbeat_at": None,
        "worker_id": None,
        "started_at": None,
        "finished_at": None,
        "stage": "queued",
        "progress_done": None,
        "progress_total": None,
        "checkpoint": None,
        "status_reason": None,
        "last_error_code": None,
        "last_error_message": None,
        "output": None,
    }
    row.update(changes)
    return row


def leased_row(now: dt.datetime, **changes: Any) -> dict[str, Any]:
    leased: dict[str, Any] = {
        "status": "LEASED",
        "attempt": 1,
        "lease_expires_at": now + LEASE * SECOND,
        "last_heartbeat_at": now,
        "worker_id": WORKER,
        "started_at": now,
        "stage": "running",
    }
    return pending_row(now, **{**leased, **changes})


def open_attempt(now: dt.datetime, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "job_type": TYPE,
        "organization_id": None,
        "run_number": 1,
        "attempt": 1,
        "worker_id": WORKER,
        "leased_at": now,
        "finished_at": None,
        "outcome": None,
        "failure_kind": None,
        "error_code": None,
        "error_message": None,
        "error_class": None,
        "retry_delay_ms": None,
        "requested_retry_not_before": None,
        "effective_next_run_at": None,
        "retry_timing_source": None,
    }
    row.update(changes)
    return row


def event(event_type: str, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "event_type": event_type,
        "run_number": 1,
        "attempt": 1,
        "stage": "running",
        "progress_done": None,
        "progress_total": None,
        "payload": {},
    }
    row.update(changes)
    return row


LEASED_EVENT = event("LEASED", payload={"worker_id": WORKER, "lease_duration_seconds": LEASE})


def failure(kind: FailureKind, **changes: Any) -> JobFailure:
    values: dict[str, Any] = {
        "kind": kind,
        "code": "job.handler_failed",
        "message": "ValueError: boom",
        "policy_retry_delay_ms": 10_000,
    }
    values.update(changes)
    return JobFailure(**values)


# --- row 1: PENDING -> LEASED (claimed and running) ---------------------------------------------


def test_claim_jobs__pending_job__leased_running_with_attempt_row_and_event(
    enqueue: Enqueue,
) -> None:
    job_id = enqueue({"n": 1})
    now = db_now()

    claimed = claim_one()

    assert (claimed.lease.job_id, claimed.lease.run_number, claimed.lease.attempt) == (
        job_id,
        1,
        1,
    )
    assert claimed.lease.worker_id == WORKER
    assert (claimed.job_type, claimed.organization_id, claimed.payload) == (TYPE, None, {"n": 1})
    assert (claimed.max_attempts, claimed.timeout_seconds, claimed.checkpoint) == (3, 60, None)
    assert (claimed.claimed_at, claimed.lease_expires_at) == (now, now + LEASE * SECOND)
    assert claimed.deadline == now + 60 * SECOND
    assert job_row(job_id) == leased_row(now)
    assert attempt_rows(job_id) == [open_attempt(now)]
    assert event_rows(job_id) == [ENQUEUED, LEASED_EVENT]
    assert resource_claims() == []


def test_claim_jobs__keyed_job__durable_resource_claim_for_the_exact_lease(
    enqueue: Enqueue,
) -> None:
    job_id = enqueue(execution_resource_key="printer-1")
    now = db_now()

    claim_one()

    assert job_row(job_id) == leased_row(now)
    assert resource_claims() == [
        {
            "resource_key": "printer-1",
            "job_id": job_id,
            "run_number": 1,
            "attempt": 1,
            "worker_id": WORKER,
            "release_after": None,
        }
    ]


def test_claim_jobs__retried_job__next_attempt_keeps_first_start_and_checkpoint(
    enqueue: Enqueue,
) -> None:
    job_id = enqueue()
    now = db_now()
    first = claim_one()
    update_job_progress(first.lease, checkpoint={"cursor": 7})
    complete_job_failure(first.lease, failure(FailureKind.RETRYABLE, policy_retry_delay_ms=1))
    make_due(job_id)

    second = claim_one(worker_id="worker-b")

    assert (second.lease.attempt, second.checkpoint) == (2, {"cursor": 7})
    row = job_row(job_id)
    assert (row["attempt"], row["started_at"], row["worker_id"]) == (2, now, "worker-b")
    assert [(a["attempt"], a["worker_id"]) for a in attempt_rows(job_id)] == [
        (1, WORKER),
        (2, "worker-b"),
    ]


# --- row 2: LEASED -> LEASED (heartbeat) -------------------------------------------------------


def test_heartbeat_leases__live_lease__extended_with_heartbeat_event(enqueue: Enqueue) -> None:
    job_id = enqueue(execution_resource_key="printer-1")
    now = db_now()
    claimed = claim_one()

    result = heartbeat_leases([claimed.lease], lease_seconds=90)

    assert (result.renewed, result.busy, result.lost) == (
        frozenset({job_id}),
        frozenset(),
        frozenset(),
    )
    assert job_row(job_id) == leased_row(now, lease_expires_at=now + 90 * SECOND)
    assert attempt_rows(job_id) == [open_attempt(now)]
    assert event_rows(job_id, since=2) == [event("HEARTBEAT", payload={"worker_id": WORKER})]
    # The key's claim follows the lease it belongs to (the sync trigger).
    assert JobExecutionResourceClaim.objects.get(resource_key="printer-1").lease_expires_at == (
        now + 90 * SECOND
    )


# --- row 3: LEASED -> LEASED (progress, stage, checkpoint) --------------------------------------


def test_update_job_progress__stage_progress_and_checkpoint__one_write_two_events(
    enqueue: Enqueue,
) -> None:
    job_id = enqueue()
    now = db_now()
    claimed = claim_one()

    update_job_progress(
        claimed.lease,
        progress_done=3,
        progress_total=10,
        stage="downloading",
        checkpoint={"cursor": 3},
    )

    assert job_row(job_id) == leased_row(
        now, stage="downloading", progress_done=3, progress_total=10, checkpoint={"cursor": 3}
    )
    progress = {"stage": "downloading", "progress_done": 3, "progress_total": 10}
    assert event_rows(job_id, since=2) == [
        event("STAGE_CHANGED", **progress),
        event("PROGRESS", **progress),
    ]
    assert attempt_rows(job_id) == [open_attempt(now)]


def test_update_job_progress__partial_values__merged_with_stored_ones(enqueue: Enqueue) -> None:
    job_id = enqueue()
    now = db_now()
    claimed = claim_one()
    update_job_progress(claimed.lease, progress_done=2, progress_total=10)

    update_job_progress(claimed.lease, progress_done=5)
    update_job_progress(claimed.lease, checkpoint=None)
    update_job_progress(claimed.lease, checkpoint={"page": 2})

    assert job_row(job_id) == leased_row(
        now, progress_done=5, progress_total=10, checkpoint={"page": 2}
    )
    # Checkpoint-only writes record no event; each progress write records one PROGRESS.
    assert event_rows(job_id, since=2) == [
        event("PROGRESS", progress_done=2, progress_total=10),
        event("PROGRESS", progress_done=5, progress_total=10),
    ]


def test_update_job_progress__stage_only__stage_changed_event_without_progress(
    enqueue: Enqueue,
) -> None:
    job_id = enqueue()
    claimed = claim_one()

    update_job_progress(claimed.lease, stage="uploading")

    assert event_rows(job_id, since=2) == [event("STAGE_CHANGED", stage="uploading")]


# --- row 4: LEASED -> SUCCEEDED ----------------------------------------------------------------


def test_complete_job_success__output__succeeded_row_attempt_and_event(enqueue: Enqueue) -> None:
    job_id = enqueue()
    now = db_now()
    claimed = claim_one()
    update_job_progress(claimed.lease, progress_done=10, progress_total=10, checkpoint=[1])

    finished_at = complete_job_success(claimed.lease, output={"sent": 3, "to": ["a"]})

    # The statement's time: inside the caller's (here the test's) transaction, when the success
    # was written, not when the transaction began (an atomic handler's transaction is long).
    assert now <= finished_at <= db_clock()
    assert job_row(job_id) == pending_row(
        now,
        status="SUCCEEDED",
        attempt=1,
        started_at=now,
        finished_at=finished_at,
        stage="completed",
        progress_done=10,
        progress_total=10,
        checkpoint=[1],
        output={"sent": 3, "to": ["a"]},
    )
    assert attempt_rows(job_id) == [open_attempt(now, finished_at=finished_at, outcome="SUCCEEDED")]
    assert event_rows(job_id, since=3) == [
        event("SUCCEEDED", stage="completed", progress_done=10, progress_total=10)
    ]


def test_complete_job_success__no_output__stores_null(enqueue: Enqueue) -> None:
    job_id = enqueue()
    claimed = claim_one()

    complete_job_success(claimed.lease)

    assert job_row(job_id)["output"] is None
    assert job_row(job_id)["status"] == "SUCCEEDED"


# --- row 6: LEASED -> PENDING (retryable failure) ----------------------------------------------


def test_complete_job_failure__retryable__pending_at_policy_backoff(enqueue: Enqueue) -> None:
    job_id = enqueue()
    now = db_now()
    claimed = claim_one()
    before = db_clock()

    outcome = complete_job_failure(claimed.lease, failure(FailureKind.RETRYABLE))

    after = db_clock()
    row = job_row(job_id)
    next_run_at = row["next_run_at"]
    assert before + 10 * SECOND <= next_run_at <= after + 10 * SECOND
    assert outcome == FailureOutcome(status=JobStatus.PENDING, next_run_at=next_run_at)
    assert row == pending_row(
        now,
        attempt=1,
        next_run_at=next_run_at,
        started_at=now,
        stage="running",  # a retried job keeps its stage (reference 16)
        status_reason="RETRYABLE",
        last_error_code="job.handler_failed",
        last_error_message="ValueError: boom",
    )
    assert attempt_rows(job_id) == [
        open_attempt(
            now,
            finished_at=now,
            outcome="RETRY_SCHEDULED",
            failure_kind="RETRYABLE",
            error_code="job.handler_failed",
            error_message="ValueError: boom",
            retry_delay_ms=10_000,
            effective_next_run_at=next_run_at,
            retry_timing_source="POLICY",
        )
    ]
    assert event_rows(job_id, since=2) == [
        event(
            "FAILED",
            payload={
                "kind": "RETRYABLE",
                "error_code": "job.handler_failed",
                "error_message": "ValueError: boom",
            },
        ),
        event(
            "RETRY_SCHEDULED",
            payload={
                "retry_delay_ms": 10_000,
                "retry_timing_source": "POLICY",
                "next_run_at": stamp(next_run_at),
            },
        ),
    ]


@pytest.mark.parametrize("kind", [FailureKind.TIMEOUT, FailureKind.LEASE_EXPIRED])
def test_complete_job_failure__other_retryable_kinds__retried(
    enqueue: Enqueue, kind: FailureKind
) -> None:
    job_id = enqueue()
    claimed = claim_one()

    outcome = complete_job_failure(claimed.lease, failure(kind, code="job.timeout_exceeded"))

    assert outcome.status == JobStatus.PENDING
    assert job_row(job_id)["status_reason"] == kind.value
    assert attempt_rows(job_id)[0]["outcome"] == "RETRY_SCHEDULED"


def test_complete_job_failure__retry_after__pending_at_exactly_that_delay(
    enqueue: Enqueue,
) -> None:
    """RetryJob(after=2 s) runs again 2 s later, although the policy would wait 10 s."""
    job_id = enqueue()
    claimed = claim_one()
    before = db_clock()

    outcome = complete_job_failure(
        claimed.lease, failure(FailureKind.RETRYABLE, retry_after_ms=2_000)
    )

    after = db_clock()
    next_run_at = job_row(job_id)["next_run_at"]
    assert before + 2 * SECOND <= next_run_at <= after + 2 * SECOND
    assert outcome.next_run_at == next_run_at
    attempt = attempt_rows(job_id)[0]
    assert (
        attempt["retry_delay_ms"],
        attempt["requested_retry_not_before"],
        attempt["effective_next_run_at"],
        attempt["retry_timing_source"],
    ) == (10_000, next_run_at, next_run_at, "HANDLER_NOT_BEFORE")
    assert event_rows(job_id)[-1]["payload"] == {
        "retry_delay_ms": 10_000,
        "requested_retry_not_before": stamp(next_run_at),
        "retry_timing_source": "HANDLER_NOT_BEFORE",
        "next_run_at": stamp(next_run_at),
    }


@pytest.mark.parametrize("offset_seconds", [-5, 3, 3600], ids=["past", "before-policy", "later"])
def test_complete_job_failure__retry_at__pending_at_exactly_that_time(
    enqueue: Enqueue, offset_seconds: int
) -> None:
    """RetryJob(at=t) is honoured as given, even before the policy's time (SPEC wins)."""
    job_id = enqueue()
    claimed = claim_one()
    at = db_clock().replace(microsecond=123456) + offset_seconds * SECOND

    outcome = complete_job_failure(claimed.lease, failure(FailureKind.RETRYABLE, retry_at=at))

    assert outcome == FailureOutcome(status=JobStatus.PENDING, next_run_at=at)
    assert job_row(job_id)["next_run_at"] == at
    attempt = attempt_rows(job_id)[0]
    assert (attempt["requested_retry_not_before"], attempt["retry_timing_source"]) == (
        at,
        "HANDLER_NOT_BEFORE",
    )


# --- row 7: LEASED -> DEAD_LETTERED ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "attempt_of_max", "reason"),
    [
        (FailureKind.TERMINAL, 1, "FAILURE_KIND_NON_RETRYABLE"),
        (FailureKind.PANICKED, 1, "FAILURE_KIND_NON_RETRYABLE"),
        (FailureKind.RETRYABLE, 3, "ATTEMPTS_EXHAUSTED"),
        (FailureKind.TIMEOUT, 3, "ATTEMPTS_EXHAUSTED"),
    ],
    ids=["terminal", "panicked", "exhausted", "exhausted-by-timeout"],
)
def test_complete_job_failure__dead_letter__row_attempt_and_events(
    enqueue: Enqueue, kind: FailureKind, attempt_of_max: int, reason: str
) -> None:
    job_id = enqueue()
    now = db_now()
    if attempt_of_max > 1:
        # Two earlier attempts already failed (the row as two retries would leave it).
        run_sql("UPDATE runledger_job_queue SET attempt = 2 WHERE id = %s", [job_id])
    claimed = claim_one()
    assert claimed.lease.attempt == attempt_of_max
    before = len(event_rows(job_id))

    outcome = complete_job_failure(
        claimed.lease, failure(kind, code="job.terminal_failure", message="no address")
    )

    assert outcome == FailureOutcome(status=JobStatus.DEAD_LETTERED, next_run_at=None)
    assert job_row(job_id) == pending_row(
        now,
        status="DEAD_LETTERED",
        attempt=attempt_of_max,
        started_at=now,
        finished_at=now,
        stage="running",
        status_reason=kind.value,
        last_error_code="job.terminal_failure",
        last_error_message="no address",
    )
    assert attempt_rows(job_id) == [
        open_attempt(
            now,
            attempt=attempt_of_max,
            finished_at=now,
            outcome="DEAD_LETTERED",
            failure_kind=kind.value,
            error_code="job.terminal_failure",
            error_message="no address",
        )
    ]
    assert event_rows(job_id, since=before) == [
        event(
            "FAILED",
            attempt=attempt_of_max,
            payload={
                "kind": kind.value,
                "error_code": "job.terminal_failure",
                "error_message": "no address",
            },
        ),
        event(
            "DEAD_LETTERED",
            attempt=attempt_of_max,
            payload={"kind": kind.value, "error_code": "job.terminal_failure", "reason": reason},
        ),
    ]


# --- row 5: no continuation in our SPEC; row 8: hand back (worker shutdown) --------------------


@pytest.mark.parametrize("attempts_spent", [0, 2], ids=["first-attempt", "last-attempt"])
def test_hand_back_leases__worker_stops__pending_due_now_attempt_interrupted(
    enqueue: Enqueue, attempts_spent: int
) -> None:
    """Handing back is not a failure: even the last allowed attempt leaves the job PENDING."""
    job_id = enqueue()
    now = db_now()
    run_sql(
        "UPDATE runledger_job_queue SET attempt = %s, next_run_at = now() - interval '1 hour' "
        "WHERE id = %s",
        [attempts_spent, job_id],
    )
    claimed = claim_one()
    attempt = attempts_spent + 1
    update_job_progress(claimed.lease, checkpoint={"cursor": 4})

    handed = hand_back_leases([claimed.lease], reason="WORKER_SHUTDOWN")

    assert handed == {job_id}
    assert job_row(job_id) == pending_row(
        now,
        attempt=attempt,
        next_run_at=now,
        started_at=now,
        stage="running",
        checkpoint={"cursor": 4},
        status_reason="WORKER_SHUTDOWN",
    )
    assert attempt_rows(job_id) == [
        open_attempt(now, attempt=attempt, finished_at=now, outcome="INTERRUPTED")
    ]
    assert event_rows(job_id, since=2) == [
        event(
            "REQUEUED",
            attempt=attempt,
            payload={"reason": "WORKER_SHUTDOWN", "requeue_kind": "BASIC"},
        )
    ]
    # Due at once: another worker takes it, with the checkpoint.
    again = claim_one(worker_id="worker-b")
    assert (again.lease.attempt, again.checkpoint) == (attempt + 1, {"cursor": 4})


def test_hand_back_leases__lease_no_longer_held__skipped(enqueue: Enqueue) -> None:
    job_id = enqueue()
    claimed = claim_one()
    complete_job_success(claimed.lease)

    assert hand_back_leases([claimed.lease], reason="WORKER_SHUTDOWN") == set()
    assert job_row(job_id)["status"] == "SUCCEEDED"


# --- rows 9 and 10: the reaper ----------------------------------------------------------------


def test_reap_expired_leases__attempts_left__pending_after_flat_delay(enqueue: Enqueue) -> None:
    job_id = enqueue(execution_resource_key="printer-1")
    now = db_now()
    claim_one()
    expire_lease(job_id)

    report = reap_expired_leases([TYPE])

    next_run_at = now + REAPER_RETRY_DELAY_MS // 1000 * SECOND
    assert (report.retried, report.dead_lettered, report.deferred) == (1, 0, 0)
    assert report.next_run_ats == (next_run_at,)
    assert job_row(job_id) == pending_row(
        now,
        attempt=1,  # the next claim increments it
        next_run_at=next_run_at,
        started_at=now,
        stage="running",
        status_reason="LEASE_EXPIRED",
        last_error_code="job.lease_expired",
        last_error_message="Job lease expired before completion.",
    )
    assert attempt_rows(job_id) == [
        open_attempt(
            now,
            finished_at=now,
            outcome="RETRY_SCHEDULED",
            failure_kind="LEASE_EXPIRED",
            error_code="job.lease_expired",
            error_message="Job lease expired before completion.",
            retry_delay_ms=REAPER_RETRY_DELAY_MS,
            effective_next_run_at=next_run_at,
            retry_timing_source="POLICY",
        )
    ]
    assert event_rows(job_id, since=2) == [
        event(
            "FAILED",
            payload={
                "kind": "LEASE_EXPIRED",
                "error_code": "job.lease_expired",
                "error_message": "Job lease expired before completion.",
                "started_without_renewal_heartbeat": True,
            },
        ),
        event(
            "RETRY_SCHEDULED",
            payload={
                "kind": "LEASE_EXPIRED",
                "retry_delay_ms": REAPER_RETRY_DELAY_MS,
                "next_run_at": stamp(next_run_at),
                "started_without_renewal_heartbeat": True,
            },
        ),
    ]
    assert resource_claims() == []


def test_reap_expired_leases__max_attempts_reached__dead_lettered(enqueue: Enqueue) -> None:
    job_id = enqueue(max_attempts=1, execution_resource_key="printer-1")
    now = db_now()
    claim_one()
    expire_lease(job_id)

    report = reap_expired_leases([TYPE])

    assert (report.retried, report.dead_lettered, report.next_run_ats) == (0, 1, ())
    assert job_row(job_id) == pending_row(
        now,
        max_attempts=1,
        attempt=1,
        started_at=now,
        finished_at=now,
        status="DEAD_LETTERED",
        stage="running",
        status_reason="LEASE_EXPIRED",
        last_error_code="job.lease_expired",
        last_error_message="Job lease expired before completion.",
    )
    assert attempt_rows(job_id) == [
        open_attempt(
            now,
            finished_at=now,
            outcome="DEAD_LETTERED",
            failure_kind="LEASE_EXPIRED",
            error_code="job.lease_expired",
            error_message="Job lease expired before completion.",
        )
    ]
    assert event_rows(job_id, since=2) == [
        event(
            "FAILED",
            payload={
                "kind": "LEASE_EXPIRED",
                "error_code": "job.lease_expired",
                "error_message": "Job lease expired before completion.",
                "started_without_renewal_heartbeat": True,
            },
        ),
        event(
            "DEAD_LETTERED",
            payload={
                "kind": "LEASE_EXPIRED",
                "error_code": "job.lease_expired",
                "reason": "LEASE_EXPIRED",
                "started_without_renewal_heartbeat": True,
            },
        ),
    ]
    assert resource_claims() == []


def test_reap_expired_leases__live_lease__untouched(enqueue: Enqueue) -> None:
    job_id = enqueue()
    now = db_now()
    claim_one()

    report = reap_expired_leases([TYPE])

    assert report.reaped == 0
    assert job_row(job_id) == leased_row(now)


# --- row 11: PENDING/LEASED -> CANCELED --------------------------------------------------------


def test_cancel_job__pending__canceled_with_event_and_no_attempt(enqueue: Enqueue) -> None:
    job_id = enqueue()
    now = db_now()

    assert cancel_job(job_id, scope=ReadScope.GLOBAL) == JobStatus.CANCELED

    assert job_row(job_id) == pending_row(
        now, status="CANCELED", finished_at=now, status_reason="CANCELED"
    )
    assert attempt_rows(job_id) == []
    assert event_rows(job_id, since=1) == [
        event("CANCELED", attempt=None, stage="queued", payload={"reason": "CANCELED"})
    ]
    assert claim_jobs([TYPE], worker_id=WORKER, limit=10, lease_seconds=LEASE) == []


def test_cancel_job__leased__lease_expiry_kept_as_quiescence_marker(enqueue: Enqueue) -> None:
    job_id = enqueue(execution_resource_key="printer-1")
    now = db_now()
    claimed = claim_one()
    expiry = now + LEASE * SECOND

    assert cancel_job(job_id, scope=ReadScope.ADMIN) == JobStatus.CANCELED

    assert job_row(job_id) == leased_row(
        now,
        status="CANCELED",
        worker_id=None,
        last_heartbeat_at=None,
        finished_at=now,
        status_reason="CANCELED",
    )
    assert attempt_rows(job_id) == [open_attempt(now, finished_at=now, outcome="CANCELED")]
    assert event_rows(job_id, since=2) == [
        event("CANCELED", payload={"reason": "CANCELED", "lease_quiesces_at": stamp(expiry)})
    ]
    # The resource stays held until the old lease would have expired.
    assert resource_claims() == [
        {
            "resource_key": "printer-1",
            "job_id": job_id,
            "run_number": 1,
            "attempt": 1,
            "worker_id": WORKER,
            "release_after": expiry,
        }
    ]
    # The running handler is fenced at its next write.
    with pytest.raises(RunledgerError) as raised:
        complete_job_success(claimed.lease, output={"late": True})
    assert raised.value.code == "job.lease_owner_mismatch"
    assert job_row(job_id)["status"] == "CANCELED"


def test_cancel_job__leased_with_expired_lease__no_quiescence_marker_resource_released(
    enqueue: Enqueue,
) -> None:
    job_id = enqueue(execution_resource_key="printer-1")
    claim_one()
    expire_lease(job_id)

    cancel_job(job_id, scope=ReadScope.GLOBAL)

    assert event_rows(job_id)[-1]["payload"] == {"reason": "CANCELED"}
    assert resource_claims() == []


@pytest.mark.parametrize("status", ["SUCCEEDED", "DEAD_LETTERED", "CANCELED"])
def test_cancel_job__finished_job__invalid_state_transition(enqueue: Enqueue, status: str) -> None:
    job_id = enqueue()
    claimed = claim_one()
    if status == "SUCCEEDED":
        complete_job_success(claimed.lease)
    elif status == "DEAD_LETTERED":
        complete_job_failure(claimed.lease, failure(FailureKind.TERMINAL))
    else:
        cancel_job(job_id, scope=ReadScope.GLOBAL)
    before = job_row(job_id)

    with pytest.raises(RunledgerError) as raised:
        cancel_job(job_id, scope=ReadScope.GLOBAL)

    assert (raised.value.code, raised.value.category) == (
        "job.invalid_state_transition",
        "conflict",
    )
    assert job_row(job_id) == before


def test_cancel_job__unknown_id__not_found() -> None:
    with pytest.raises(RunledgerError) as raised:
        cancel_job(uuid.uuid4(), scope=ReadScope.ADMIN)
    assert raised.value.code == "job.not_found"


# --- row 12: DEAD_LETTERED/CANCELED -> PENDING (requeue) ---------------------------------------


def test_requeue_job__dead_lettered__fresh_run_attempt_zero_progress_kept(
    enqueue: Enqueue,
) -> None:
    job_id = enqueue()
    now = db_now()
    claimed = claim_one()
    update_job_progress(claimed.lease, progress_done=4, progress_total=9, checkpoint={"at": 4})
    complete_job_failure(claimed.lease, failure(FailureKind.TERMINAL))
    before = len(event_rows(job_id))

    assert requeue_job(job_id, scope=ReadScope.GLOBAL) == JobStatus.PENDING

    assert job_row(job_id) == pending_row(
        now,
        run_number=2,
        progress_done=4,
        progress_total=9,
        checkpoint={"at": 4},
        status_reason="REQUEUED",
    )
    assert event_rows(job_id, since=before) == [
        event(
            "REQUEUED",
            attempt=None,
            stage="queued",
            progress_done=4,
            progress_total=9,
            payload={
                "reason": "REQUEUED",
                "previous_status": "DEAD_LETTERED",
                "next_run_number": 2,
                "state_policy": "preserve_progress_and_checkpoint",
                "requeue_kind": "COMPARE_AND_REQUEUE",
            },
        )
    ]
    # The fresh run starts at attempt 1 and resumes from the checkpoint.
    again = claim_one()
    assert (again.lease.run_number, again.lease.attempt, again.checkpoint) == (2, 1, {"at": 4})
    assert [(a["run_number"], a["attempt"]) for a in attempt_rows(job_id)] == [(1, 1), (2, 1)]


def test_requeue_job__canceled_pending__requeued(enqueue: Enqueue) -> None:
    job_id = enqueue()
    cancel_job(job_id, scope=ReadScope.GLOBAL)

    assert requeue_job(job_id, scope=ReadScope.GLOBAL) == JobStatus.PENDING

    row = job_row(job_id)
    assert (row["status"], row["run_number"], row["attempt"], row["finished_at"]) == (
        "PENDING",
        2,
        0,
        None,
    )
    assert event_rows(job_id)[-1]["payload"]["previous_status"] == "CANCELED"


def test_requeue_job__canceled_while_lease_live__cancellation_not_quiesced(
    enqueue: Enqueue,
) -> None:
    job_id = enqueue(execution_resource_key="printer-1")
    claim_one()
    cancel_job(job_id, scope=ReadScope.GLOBAL)
    before = job_row(job_id)

    with pytest.raises(RunledgerError) as raised:
        requeue_job(job_id, scope=ReadScope.GLOBAL)

    assert (raised.value.code, raised.value.category) == (
        "job.cancellation_not_quiesced",
        "conflict",
    )
    assert job_row(job_id) == before
    assert len(resource_claims()) == 1

    # Once the old lease has expired, the job is quiescent and requeues, freeing the key.
    expire_lease(job_id)
    assert requeue_job(job_id, scope=ReadScope.GLOBAL) == JobStatus.PENDING
    assert resource_claims() == []
    assert job_row(job_id)["lease_expires_at"] is None


@pytest.mark.parametrize("status", ["PENDING", "LEASED", "SUCCEEDED"])
def test_requeue_job__not_dead_or_canceled__invalid_state_transition(
    enqueue: Enqueue, status: str
) -> None:
    job_id = enqueue()
    if status != "PENDING":
        claimed = claim_one()
        if status == "SUCCEEDED":
            complete_job_success(claimed.lease)
    before = job_row(job_id)

    with pytest.raises(RunledgerError) as raised:
        requeue_job(job_id, scope=ReadScope.ADMIN)

    assert raised.value.code == "job.invalid_state_transition"
    assert job_row(job_id) == before


def test_requeue_job__outside_scope_or_unknown__not_found(enqueue: Enqueue) -> None:
    org = uuid.uuid4()
    job_id = enqueue(organization_id=org)
    cancel_job(job_id, scope=ReadScope.organization(org))
    before = job_row(job_id)

    for scope in (ReadScope.GLOBAL, ReadScope.organization(uuid.uuid4())):
        with pytest.raises(RunledgerError) as raised:
            requeue_job(job_id, scope=scope)
        assert raised.value.code == "job.not_found"
    with pytest.raises(RunledgerError) as raised:
        requeue_job(uuid.uuid4(), scope=ReadScope.ADMIN)
    assert raised.value.code == "job.not_found"
    assert job_row(job_id) == before
    assert requeue_job(job_id, scope=ReadScope.organization(org)) == JobStatus.PENDING
