"""The harness's job checks flag what they promise to flag.

``check_jobs`` is pure, so each test builds a small world of jobs, attempts, events, handler
runs and worker reports: a clean one that must pass, then the same world with one violation
planted, which must be reported. No database and no processes.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from reliability.common import AttemptPlan, plan_for
from reliability.job_checks import JobWorld, WorkerFacts, check_jobs

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
RESTART = (T0.timestamp() + 100, T0.timestamp() + 102)


def at(seconds: float) -> str:
    return (T0 + dt.timedelta(seconds=seconds)).isoformat()


def job_id_where(accept: Callable[[AttemptPlan], bool], start: int) -> str:
    """The first job id from ``start`` on whose first attempt's plan passes ``accept``."""
    number = start
    while not accept(plan_for(str(uuid.UUID(int=number)), 1)):
        number += 1
    return str(uuid.UUID(int=number))


PLAIN = job_id_where(lambda p: p.fail is None, 1)
RETRIED = job_id_where(lambda p: p.fail == "retry", 10_000)
RAISED = job_id_where(lambda p: p.fail == "raise", 20_000)


class World:
    """Builds a JobWorld the way a run leaves it."""

    def __init__(self) -> None:
        self.world = JobWorld(restarts=[RESTART])
        self.clock = 0.0

    def job(self, job_id: str, *, resource_key: str | None = None) -> None:
        self.world.jobs[job_id] = {
            "id": job_id,
            "job_type": "reliability.alpha",
            "organization_id": None,
            "key": job_id,
            "status": "PENDING",
            "run_number": 1,
            "attempt": 0,
            "output": None,
            "resource_key": resource_key,
            "lease_expires_at": None,
            "last_error_code": None,
        }
        self.world.attempts[job_id] = []
        self.world.events[job_id] = [self.event(job_id, "ENQUEUED", None)]

    @staticmethod
    def event(job_id: str, event_type: str, attempt: int | None) -> dict[str, Any]:
        return {"job_id": job_id, "run_number": 1, "attempt": attempt, "event_type": event_type}

    def attempt(
        self,
        job_id: str,
        worker_id: str,
        outcome: str,
        *,
        failure_kind: str | None = None,
        error_code: str | None = None,
        error_class: str | None = None,
        result: str | None = "success",
        started: bool = True,
        leased_at: float | None = None,
        retry_after: float | None = None,
        retry_delay_ms: int | None = None,
    ) -> dict[str, Any]:
        """Append one finished attempt, its events, its handler runs and its report."""
        job = self.world.jobs[job_id]
        number = len(self.world.attempts[job_id]) + 1
        start = self.clock if leased_at is None else leased_at
        finish = start + 0.1
        self.clock = finish + 0.1
        row: dict[str, Any] = {
            "job_id": job_id,
            "run_number": 1,
            "attempt": number,
            "worker_id": worker_id,
            "leased_at": at(start),
            "finished_at": at(finish),
            "outcome": outcome,
            "failure_kind": failure_kind,
            "error_code": error_code,
            "error_class": error_class,
            "retry_delay_ms": retry_delay_ms,
            "requested_retry_not_before": None,
            "effective_next_run_at": None,
            "retry_timing_source": None,
        }
        if retry_after is not None:
            due = at(finish + retry_after)
            row.update(
                requested_retry_not_before=due,
                effective_next_run_at=due,
                retry_timing_source="HANDLER_NOT_BEFORE",
            )
            self.clock = max(self.clock, finish + retry_after)
        elif retry_delay_ms is not None:
            row.update(
                effective_next_run_at=at(finish + retry_delay_ms / 1000),
                retry_timing_source="POLICY",
            )
            self.clock = max(self.clock, finish + retry_delay_ms / 1000)
        self.world.attempts[job_id].append(row)
        events = self.world.events[job_id]
        events.append(self.event(job_id, "LEASED", number))
        for event_type in {
            "SUCCEEDED": ["SUCCEEDED"],
            "RETRY_SCHEDULED": ["FAILED", "RETRY_SCHEDULED"],
            "INTERRUPTED": ["REQUEUED"],
        }[outcome]:
            events.append(self.event(job_id, event_type, number))
        run = {"job_id": job_id, "run_number": 1, "attempt": number, "worker_id": worker_id}
        if started:
            self.world.runs.append({**run, "phase": "started", "result": None})
            if result is not None:
                self.world.runs.append({**run, "phase": "finished", "result": result})
        report = {
            "SUCCEEDED": "succeeded",
            "RETRY_SCHEDULED": "retried" if failure_kind == "RETRYABLE" else None,
            "INTERRUPTED": "lease_lost",
        }[outcome]
        if report is not None and started:
            self.world.reports.append(
                {**run, "outcome": report, "error_code": error_code, "t": T0.timestamp()}
            )
        job["attempt"] = number
        if outcome == "SUCCEEDED":
            job.update(status="SUCCEEDED", output={"attempt": number, "worker_id": worker_id})
        return row

    def worker(self, worker_id: str, signal: str | None = None) -> None:
        self.world.workers.append(
            WorkerFacts(
                name=f"worker-{len(self.world.workers) + 1}",
                worker_id=worker_id,
                spawned_at=T0.timestamp(),
                signal=signal,
                signaled_at=None if signal is None else T0.timestamp() + 50,
            )
        )


def clean_world() -> World:
    """Jobs that succeeded at once, after a deliberate RetryJob, after a deliberate exception,
    after a SIGKILL, after a SIGTERM hand-back, across the restart, and, after the restart, on
    a connection it broke (an outcome its worker reported persist_failed; a handler that
    raised the database's error)."""
    world = World()
    for worker_id, signal in (("w-live", None), ("w-killed", "SIGKILL"), ("w-termed", "SIGTERM")):
        world.worker(worker_id, signal)
    world.job(PLAIN)
    world.attempt(PLAIN, "w-live", "SUCCEEDED")

    world.job(RETRIED)
    world.attempt(
        RETRIED,
        "w-live",
        "RETRY_SCHEDULED",
        failure_kind="RETRYABLE",
        error_code="job.retry_requested",
        result="retry",
        retry_after=plan_for(RETRIED, 1).retry_after,
    )
    for number in range(2, 5):
        if plan_for(RETRIED, number).fail is None:
            break
        world.attempt(
            RETRIED,
            "w-live",
            "RETRY_SCHEDULED",
            failure_kind="RETRYABLE",
            error_code="job.retry_requested",
            result="retry",
            retry_after=plan_for(RETRIED, number).retry_after,
        )
    world.attempt(RETRIED, "w-live", "SUCCEEDED")

    world.job(RAISED)
    world.attempt(
        RAISED,
        "w-live",
        "RETRY_SCHEDULED",
        failure_kind="RETRYABLE",
        error_code="job.handler_failed",
        error_class="reliability.jobs_app.jobs.DeliberateFailureError",
        result="raise",
        retry_delay_ms=10_200,
    )
    world.attempt(RAISED, "w-live", "SUCCEEDED")

    killed = job_id_where(lambda p: p.fail is None, 30_000)
    world.job(killed, resource_key="resource-1")
    world.attempt(
        killed,
        "w-killed",
        "RETRY_SCHEDULED",
        failure_kind="LEASE_EXPIRED",
        error_code="job.lease_expired",
        result=None,
    )
    world.attempt(killed, "w-live", "SUCCEEDED")

    termed = job_id_where(lambda p: p.fail is None, 40_000)
    world.job(termed, resource_key="resource-1")
    world.attempt(termed, "w-termed", "INTERRUPTED", result=None)
    world.attempt(termed, "w-live", "SUCCEEDED")

    restarted = job_id_where(lambda p: p.fail is None, 50_000)
    world.job(restarted)
    world.attempt(
        restarted,
        "w-live",
        "RETRY_SCHEDULED",
        failure_kind="LEASE_EXPIRED",
        error_code="job.lease_expired",
        leased_at=RESTART[0] - T0.timestamp() - 0.5,
    )
    world.attempt(restarted, "w-live", "SUCCEEDED", leased_at=RESTART[1] - T0.timestamp() + 5)

    stale = job_id_where(lambda p: p.fail is None, 80_000)
    world.job(stale)
    lost = world.attempt(
        stale,
        "w-live",
        "RETRY_SCHEDULED",
        failure_kind="LEASE_EXPIRED",
        error_code="job.lease_expired",
        leased_at=RESTART[1] - T0.timestamp() + 30,
    )
    world.world.reports.append(
        {
            "job_id": stale,
            "run_number": 1,
            "attempt": lost["attempt"],
            "worker_id": "w-live",
            "outcome": "persist_failed",
            "error_code": "db.query_failed",
            "t": RESTART[1] + 30.2,
        }
    )
    world.attempt(stale, "w-live", "SUCCEEDED")

    broken = job_id_where(lambda p: p.fail is None, 90_000)
    world.job(broken)
    world.attempt(
        broken,
        "w-live",
        "RETRY_SCHEDULED",
        failure_kind="RETRYABLE",
        error_code="job.handler_failed",
        error_class="django.db.utils.OperationalError",
        started=False,
        leased_at=RESTART[1] - T0.timestamp() + 40,
        retry_delay_ms=10_100,
    )
    world.attempt(broken, "w-live", "SUCCEEDED")
    return world


def test_check_jobs__clean_world__no_violation_and_every_extra_run_explained() -> None:
    violations, counts = check_jobs(clean_world().world)

    assert violations == []
    assert counts["jobs succeeded"] == counts["jobs checked"] == 8
    assert counts["extra runs"] == counts["extra runs explained"] >= 6
    assert counts["attempts ended by deliberate RetryJob"] >= 1
    assert counts["attempts ended by deliberate exception"] == 1
    assert counts["attempts ended by SIGKILL (reaped)"] == 1
    assert counts["attempts ended by SIGTERM (handed back)"] == 1
    assert counts["attempts ended by restart (open across it)"] == 1
    assert counts["attempts ended by restart (a connection it broke)"] == 2


def _first(world: World, job_id: str, number: int = 1) -> dict[str, Any]:
    return world.world.attempts[job_id][number - 1]


def plant_second_success_event(world: World) -> None:
    world.world.events[PLAIN].append(World.event(PLAIN, "SUCCEEDED", 1))


def plant_second_run(world: World) -> None:
    world.world.runs.append(
        {
            "job_id": PLAIN,
            "run_number": 1,
            "attempt": 1,
            "worker_id": "w-live",
            "phase": "started",
            "result": None,
        }
    )


def plant_phantom_run(world: World) -> None:
    world.world.runs.append(
        {
            "job_id": PLAIN,
            "run_number": 1,
            "attempt": 7,
            "worker_id": "w-live",
            "phase": "started",
            "result": None,
        }
    )


def plant_run_by_other_worker(world: World) -> None:
    for run in world.world.runs:
        if run["job_id"] == PLAIN:
            run["worker_id"] = "w-other"


def plant_unexplained_reap(world: World) -> None:
    """A lease that expired under a worker nobody killed, far from the restart: a job whose
    worker lost it while alive (its handler may have run twice)."""
    world.world.workers[1] = WorkerFacts(
        name="worker-2", worker_id="w-killed", spawned_at=T0.timestamp()
    )


def plant_lease_lost_unreported(world: World) -> None:
    """A lease lost after the restart with no persist failure behind it is unexplained."""
    world.world.reports[:] = [r for r in world.world.reports if r["outcome"] != "persist_failed"]


def plant_handler_database_error_before_restart(world: World) -> None:
    """A handler's database error with no restart before it is not the restart's doing."""
    world.world.restarts = [(RESTART[0] + 1000, RESTART[1] + 1000)]


def plant_stuck_lease(world: World) -> None:
    world.world.jobs[PLAIN].update(status="LEASED", lease_expires_at=at(1))


def plant_two_successes(world: World) -> None:
    attempt = _first(world, RAISED)
    attempt.update(outcome="SUCCEEDED", failure_kind=None, error_code=None)
    events = world.world.events[RAISED]
    events[:] = [e for e in events if not (e["attempt"] == 1 and e["event_type"] != "LEASED")]
    events.append(World.event(RAISED, "SUCCEEDED", 1))


def plant_success_without_finish(world: World) -> None:
    world.world.runs[:] = [
        run
        for run in world.world.runs
        if not (run["job_id"] == PLAIN and run["phase"] == "finished")
    ]


def plant_wrong_output(world: World) -> None:
    world.world.jobs[PLAIN]["output"] = {"attempt": 2, "worker_id": "w-live"}


def plant_early_retry(world: World) -> None:
    _first(world, RAISED, 2)["leased_at"] = _first(world, RAISED)["finished_at"]


def plant_retry_at_wrong_time(world: World) -> None:
    first = _first(world, RETRIED)
    late = dt.datetime.fromisoformat(first["effective_next_run_at"]) + dt.timedelta(seconds=5)
    first.update(
        requested_retry_not_before=late.isoformat(), effective_next_run_at=late.isoformat()
    )


def plant_unplanned_retry(world: World) -> None:
    """A RetryJob from an attempt whose plan says succeed: not the harness's doing."""
    job_id = job_id_where(lambda p: p.fail is None, 60_000)
    world.job(job_id)
    world.attempt(
        job_id,
        "w-live",
        "RETRY_SCHEDULED",
        failure_kind="RETRYABLE",
        error_code="job.retry_requested",
        result="retry",
        retry_after=0.5,
    )
    world.attempt(job_id, "w-live", "SUCCEEDED")


def plant_shared_resource(world: World) -> None:
    killed = next(j for j, job in world.world.jobs.items() if job["resource_key"] and j != PLAIN)
    termed = next(j for j, job in world.world.jobs.items() if job["resource_key"] and j != killed)
    world.world.attempts[termed][0]["leased_at"] = world.world.attempts[killed][1]["leased_at"]


def plant_overdue_sample(world: World) -> None:
    world.world.overdue.append(
        {"job_id": PLAIN, "worker_id": "w-live", "expired_for": 9.0, "at": at(10)}
    )


def plant_false_report(world: World) -> None:
    world.world.reports.append(
        {
            "job_id": RAISED,
            "run_number": 1,
            "attempt": 1,
            "worker_id": "w-live",
            "outcome": "succeeded",
            "error_code": None,
            "t": T0.timestamp(),
        }
    )


def plant_job_never_run(world: World) -> None:
    world.job(job_id_where(lambda p: p.fail is None, 70_000))


def plant_persist_failed_success(world: World) -> None:
    """Far from any restart, a worker cannot have missed the reply of its own success."""
    world.world.reports.append(
        {
            "job_id": PLAIN,
            "run_number": 1,
            "attempt": 1,
            "worker_id": "w-live",
            "outcome": "persist_failed",
            "error_code": "db.query_failed",
            "t": T0.timestamp() + 10,
        }
    )


def plant_unfinished_attempt(world: World) -> None:
    _first(world, RAISED).update(finished_at=None)


PLANTED = [
    (plant_second_success_event, "events disagree with its attempts"),
    (plant_second_run, "ran 2 times"),
    (plant_phantom_run, "which no attempt row records"),
    (plant_run_by_other_worker, "leased to w-live"),
    (plant_unexplained_reap, "with no kill, restart or deliberate failure"),
    (plant_unplanned_retry, "with no kill, restart or deliberate failure"),
    (plant_lease_lost_unreported, "with no kill, restart or deliberate failure"),
    (plant_handler_database_error_before_restart, "django.db.utils.OperationalError) with no"),
    (plant_stuck_lease, "ended LEASED"),
    (plant_two_successes, "has 2 attempts that SUCCEEDED"),
    (plant_success_without_finish, "SUCCEEDED, but its handler runs finished []"),
    (plant_wrong_output, "is not that of its successful attempt"),
    (plant_early_retry, "before its retry was due"),
    (plant_retry_at_wrong_time, "RetryJob(after="),
    (plant_shared_resource, "while job"),
    (plant_overdue_sample, "stayed LEASED 9.0s after its lease expired"),
    (plant_false_report, "reported job"),
    (plant_unfinished_attempt, "is unfinished after the drain"),
    (plant_job_never_run, "ended PENDING"),
    (plant_persist_failed_success, "persist_failed, yet the attempt SUCCEEDED"),
]


@pytest.mark.parametrize(
    ("plant", "expected"), PLANTED, ids=[plant.__name__ for plant, _ in PLANTED]
)
def test_check_jobs__planted_violation__reported(
    plant: Callable[[World], None], expected: str
) -> None:
    world = clean_world()
    plant(world)

    violations, _ = check_jobs(world.world)

    assert any(expected in line for line in violations), violations


def test_check_jobs__overdue_lease_during_the_restart__excused() -> None:
    world = clean_world()
    world.world.overdue.append(
        {"job_id": PLAIN, "worker_id": "w-live", "expired_for": 9.0, "at": at(104)}
    )

    violations, counts = check_jobs(world.world)

    assert violations == []
    assert counts["overdue leases excused by the restart"] == 1


def test_check_jobs__success_reported_failed_across_the_restart__excused() -> None:
    """A commit whose reply the restart swallowed: the worker saw an error, the job SUCCEEDED."""
    world = clean_world()
    world.world.reports.append(
        {
            "job_id": PLAIN,
            "run_number": 1,
            "attempt": 1,
            "worker_id": "w-live",
            "outcome": "persist_failed",
            "error_code": "db.transaction_commit_unconfirmed",
            "t": RESTART[0] + 0.5,
        }
    )

    violations, counts = check_jobs(world.world)

    assert violations == []
    assert counts["successes the worker could not confirm"] == 1


def test_check_jobs__worker_idle_after_the_restart__reported() -> None:
    """A worker alive across the restart that never works again did not come back."""
    world = clean_world()
    world.world.workers.append(
        WorkerFacts(name="worker-9", worker_id="w-gone", spawned_at=T0.timestamp())
    )
    world.world.reports += [
        {
            "job_id": PLAIN,
            "run_number": 1,
            "attempt": 1,
            "worker_id": "w-live",
            "outcome": "succeeded",
            "error_code": None,
            "t": RESTART[1] + 1,
        }
    ] * 40

    violations, _ = check_jobs(world.world)

    assert any("worker-9 (w-gone) lived through the restart" in line for line in violations)
