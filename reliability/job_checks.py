"""The invariants of running jobs, checked over what the run left behind.

Pure (standard library only): ``checks`` loads the database rows, the retention journals'
records of deleted jobs, the handler-run table, the workers' ``--json`` lines and the
harness's chaos log into a :class:`JobWorld`; :func:`check_jobs` returns every violation and
the counts. Tests plant violations in a world of their own and see them reported.

What must hold once the drain is over:

- every job SUCCEEDED exactly once as a committed outcome: status SUCCEEDED, exactly one
  attempt with outcome SUCCEEDED (its last attempt), exactly one SUCCEEDED event, and the
  output the handler returned on that attempt;
- attempts, events and the queue row agree: one LEASED event per attempt, FAILED and
  RETRY_SCHEDULED per retried attempt, REQUEUED per handed-back attempt, one ENQUEUED event;
  attempts numbered 1..n, all finished;
- a retry the handler asked for (``RetryJob(after=...)``) was scheduled at that time (never
  earlier, at most a lock wait later), a policy retry at the backoff, and no attempt was
  leased before its retry was due;
- every handler run matches the attempt it was leased as (same job, run, attempt and worker),
  no attempt ran twice, and a committed success belongs to a run that finished;
- every attempt that did not succeed is explained: a deliberate failure of the job's plan, a
  SIGKILLed worker (reaped), a SIGTERMed worker (handed back), or the server restart (the
  attempt was open across it, or, leased later, it failed on a connection the restart broke:
  its handler raised a database error or its worker could not record the outcome). So every
  handler run beyond a job's first is explained too;
- at most one attempt holds an execution resource at a time;
- no lease stayed expired and LEASED past the reapers' interval (the monitor's samples);
- every worker that lived through the restart finished jobs after it;
- what each worker reported (``--json``) is what the database holds, except a success whose
  commit reply the restart swallowed.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from .common import plan_for

RESTART_SLACK_SECONDS = 2.0
"""An attempt open this close to the restart window counts as open across it."""
OVERDUE_EXCUSE_SECONDS = 20.0
"""After the restart, workers reconnect with backoff before they reap again."""
TIMING_TOLERANCE_SECONDS = 1.0
"""A retry's schedule is computed from clock_timestamp() inside the statement that records it;
the attempt's finished_at is that statement's now(). The gap is a lock wait at most."""
AFTER_RESTART_MIN_JOBS = 30
"""Only require every surviving worker to work after the restart when others did this much."""

DATABASE_ERRORS = ("django.db.", "psycopg.")
"""Exception classes of a handler that failed on its database connection."""

Key = tuple[str, int, int]
"""(job id, run number, attempt)."""

LIFECYCLE_EVENTS = frozenset(
    {"ENQUEUED", "LEASED", "SUCCEEDED", "FAILED", "RETRY_SCHEDULED", "REQUEUED"}
    | {"DEAD_LETTERED", "CANCELED"}
)
EXPECTED_EVENTS = {
    "SUCCEEDED": ("SUCCEEDED",),
    "RETRY_SCHEDULED": ("FAILED", "RETRY_SCHEDULED"),
    "INTERRUPTED": ("REQUEUED",),
    "DEAD_LETTERED": ("FAILED", "DEAD_LETTERED"),
    "CANCELED": ("CANCELED",),
}
"""The lifecycle events each attempt outcome writes besides its LEASED event."""


@dataclass(frozen=True)
class WorkerFacts:
    """One worker process of the run, as the harness saw it."""

    name: str
    worker_id: str | None
    spawned_at: float
    signal: str | None = None
    """SIGKILL or SIGTERM when the harness sent one during the chaos; None otherwise."""
    signaled_at: float | None = None


@dataclass
class JobWorld:
    """Everything the job checks read; timestamps are ISO 8601 text, as journals keep them."""

    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    retained: set[str] = field(default_factory=set)
    """Jobs retention deleted (their record comes from its journal)."""
    runs: list[dict[str, Any]] = field(default_factory=list)
    """Rows of the handler-run table: job_id, run_number, attempt, worker_id, phase, result."""
    reports: list[dict[str, Any]] = field(default_factory=list)
    """The workers' ``--json`` lines (outcome per finished attempt) with the wall time ``t``."""
    workers: list[WorkerFacts] = field(default_factory=list)
    restarts: list[tuple[float, float]] = field(default_factory=list)
    """Wall-clock (start, end) of each server restart."""
    overdue: list[dict[str, Any]] = field(default_factory=list)
    shared_resources: list[dict[str, Any]] = field(default_factory=list)

    def add_ledger(self, ledger: dict[str, list[dict[str, Any]]], *, retained: bool) -> None:
        """Add the jobs of one ``read_ledger`` result (a later record of a job replaces one)."""
        ids = {job["id"] for job in ledger["jobs"]}
        for job_id in ids:
            self.attempts[job_id] = []
            self.events[job_id] = []
        for job in ledger["jobs"]:
            self.jobs[job["id"]] = job
            if retained:
                self.retained.add(job["id"])
        for attempt in ledger["attempts"]:
            if attempt["job_id"] in ids:
                self.attempts[attempt["job_id"]].append(attempt)
        for event in ledger["events"]:
            if event["job_id"] in ids:
                self.events[event["job_id"]].append(event)


def epoch(value: str | None) -> float | None:
    return None if value is None else dt.datetime.fromisoformat(value).timestamp()


def key_of(row: dict[str, Any]) -> Key:
    return (str(row["job_id"]), int(row["run_number"]), int(row["attempt"]))


@dataclass
class _Context:
    world: JobWorld
    violations: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    starts: dict[Key, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    finishes: dict[Key, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    persist_failed: dict[Key, float] = field(default_factory=dict)
    signals: dict[str, str] = field(default_factory=dict)
    """Worker id -> the signal the harness sent its process."""
    attempt_rows: dict[Key, dict[str, Any]] = field(default_factory=dict)
    explanations: dict[Key, str] = field(default_factory=dict)

    def violation(self, message: str) -> None:
        self.violations.append(message)


def check_jobs(world: JobWorld) -> tuple[list[str], Counter[str]]:
    """Every violation of the job invariants (readable lines), and the counts of what ran."""
    context = _Context(world)
    for worker in world.workers:
        if worker.worker_id is not None and worker.signal is not None:
            context.signals[worker.worker_id] = worker.signal
    for run in world.runs:
        target = context.starts if run["phase"] == "started" else context.finishes
        target[key_of(run)].append(run)
    for report in world.reports:
        if report["outcome"] == "persist_failed" and (report.get("error_code") or "").startswith(
            "db."
        ):
            context.persist_failed[key_of(report)] = float(report["t"])
    for attempts in world.attempts.values():
        for attempt in attempts:
            context.attempt_rows[key_of(attempt)] = attempt
    for job_id in sorted(world.jobs):
        _check_job(context, job_id)
    _check_runs(context)
    _check_reports(context)
    _check_resources(context)
    _check_samples(context)
    _check_workers_after_restart(context)
    return context.violations, context.counts


# --- one job ------------------------------------------------------------------------------


def _check_job(context: _Context, job_id: str) -> None:
    world = context.world
    job = world.jobs[job_id]
    attempts = sorted(world.attempts.get(job_id, []), key=lambda a: (a["run_number"], a["attempt"]))
    counts = context.counts
    counts["jobs checked"] += 1
    if job_id in world.retained:
        counts["retained jobs checked"] += 1
    label = f"job {job_id} ({job['job_type']})"
    if job["status"] != "SUCCEEDED":
        context.violation(
            f"{label} ended {job['status']} (last error {job['last_error_code']}), not SUCCEEDED"
        )
    else:
        counts["jobs succeeded"] += 1
    successes = [a for a in attempts if a["outcome"] == "SUCCEEDED"]
    if len(successes) != 1:
        context.violation(f"{label} has {len(successes)} attempts that SUCCEEDED, not one")
    elif attempts[-1] is not successes[0] or (
        successes[0]["run_number"],
        successes[0]["attempt"],
    ) != (job["run_number"], job["attempt"]):
        context.violation(f"{label}: its successful attempt is not its last")
    else:
        success = successes[0]
        expected_output = {"attempt": success["attempt"], "worker_id": success["worker_id"]}
        if job["output"] != expected_output:
            context.violation(
                f"{label}: output {job['output']!r} is not that of its successful attempt"
            )
    numbers = [(a["run_number"], a["attempt"]) for a in attempts]
    if numbers != [(1, n) for n in range(1, len(attempts) + 1)]:
        context.violation(f"{label}: attempts {numbers} are not run 1, attempts 1..n")
    for attempt in attempts:
        if attempt["outcome"] is None or attempt["finished_at"] is None:
            context.violation(
                f"{label}: attempt {attempt['attempt']} is unfinished after the drain"
            )
    _check_events(context, label, job_id, attempts)
    _check_retry_timing(context, label, job_id, attempts)
    for attempt in attempts:
        counts["attempts"] += 1
        if attempt["outcome"] != "SUCCEEDED":
            _explain(context, label, attempt)


def _check_events(
    context: _Context, label: str, job_id: str, attempts: list[dict[str, Any]]
) -> None:
    events = context.world.events.get(job_id, [])
    expected: Counter[tuple[str, int, int | None]] = Counter({("ENQUEUED", 1, None): 1})
    for attempt in attempts:
        number = (attempt["run_number"], attempt["attempt"])
        expected[("LEASED", *number)] += 1
        for event_type in EXPECTED_EVENTS.get(attempt["outcome"], ()):
            expected[(event_type, *number)] += 1
    actual: Counter[tuple[str, int, int | None]] = Counter()
    known = {(a["run_number"], a["attempt"]) for a in attempts}
    for event in events:
        number = (event["run_number"], event["attempt"])
        if event["event_type"] in LIFECYCLE_EVENTS:
            actual[(event["event_type"], *number)] += 1
        elif number not in known:
            context.violation(f"{label}: a {event['event_type']} event of no attempt {number}")
    if actual != expected:
        missing = sorted((expected - actual).elements(), key=str)
        extra = sorted((actual - expected).elements(), key=str)
        context.violation(
            f"{label}: events disagree with its attempts (missing {missing}, extra {extra})"
        )
    context.counts["events checked"] += len(events)


def _check_retry_timing(
    context: _Context, label: str, job_id: str, attempts: list[dict[str, Any]]
) -> None:
    followers: list[dict[str, Any] | None] = [*attempts[1:], None]
    for attempt, following in zip(attempts, followers, strict=False):
        if attempt["outcome"] != "RETRY_SCHEDULED" or attempt["failure_kind"] != "RETRYABLE":
            continue
        finished = epoch(attempt["finished_at"])
        due = epoch(attempt["effective_next_run_at"])
        if finished is None or due is None:
            context.violation(f"{label}: retried attempt {attempt['attempt']} has no schedule")
            continue
        if attempt["error_code"] == "job.retry_requested":
            plan = plan_for(job_id, attempt["attempt"])
            asked = due - finished - plan.retry_after
            if (
                attempt["retry_timing_source"] != "HANDLER_NOT_BEFORE"
                or attempt["requested_retry_not_before"] != attempt["effective_next_run_at"]
                or not -0.001 <= asked <= TIMING_TOLERANCE_SECONDS
            ):
                context.violation(
                    f"{label}: RetryJob(after={plan.retry_after:.3f}s) on attempt "
                    f"{attempt['attempt']} was scheduled {due - finished:.3f}s later "
                    f"({attempt['retry_timing_source']})"
                )
        elif attempt["retry_delay_ms"] is not None:
            policy = due - finished - attempt["retry_delay_ms"] / 1000
            if attempt["retry_timing_source"] != "POLICY" or not (
                -0.001 <= policy <= TIMING_TOLERANCE_SECONDS
            ):
                context.violation(
                    f"{label}: the policy retry of attempt {attempt['attempt']} was scheduled "
                    f"{due - finished:.3f}s later, not after {attempt['retry_delay_ms']} ms"
                )
        if following is not None:
            leased = epoch(following["leased_at"])
            if leased is not None and leased < due:
                context.violation(
                    f"{label}: attempt {following['attempt']} was leased {due - leased:.3f}s "
                    "before its retry was due"
                )


def _in_restart(context: _Context, start: float | None, end: float | None) -> bool:
    """True when the interval [start, end] (end None: still open) meets a restart window."""
    for restart_start, restart_end in context.world.restarts:
        if (start is None or start <= restart_end + RESTART_SLACK_SECONDS) and (
            end is None or end >= restart_start - RESTART_SLACK_SECONDS
        ):
            return True
    return False


def _explain(context: _Context, label: str, attempt: dict[str, Any]) -> None:
    """Name why an attempt that did not succeed is not a bug, or report it."""
    key = key_of(attempt)
    reason = _reason(context, attempt)
    if reason is None:
        finishes = [run["result"] for run in context.finishes.get(key, [])]
        context.violation(
            f"{label}: attempt {attempt['attempt']} by {attempt['worker_id']} ended "
            f"{attempt['outcome']} ({attempt['failure_kind']} {attempt['error_code']} "
            f"{attempt['error_class']}) with no kill, restart or deliberate failure to explain "
            f"it (handler runs {len(context.starts.get(key, []))}, finished {finishes})"
        )
        return
    context.explanations[key] = reason
    context.counts[f"attempts ended by {reason}"] += 1


def _reason(context: _Context, attempt: dict[str, Any]) -> str | None:
    key = key_of(attempt)
    outcome, kind = attempt["outcome"], attempt["failure_kind"]
    results = {run["result"] for run in context.finishes.get(key, [])}
    plan = plan_for(key[0], key[2])
    if outcome == "RETRY_SCHEDULED" and kind == "RETRYABLE" and plan.fail in results:
        if plan.fail == "retry" and attempt["error_code"] == "job.retry_requested":
            return "deliberate RetryJob"
        if (
            plan.fail == "raise"
            and attempt["error_code"] == "job.handler_failed"
            and str(attempt["error_class"]).endswith(".DeliberateFailureError")
        ):
            return "deliberate exception"
    signal = context.signals.get(attempt["worker_id"])
    if outcome == "RETRY_SCHEDULED" and kind == "LEASE_EXPIRED" and signal == "SIGKILL":
        return "SIGKILL (reaped)"
    if outcome == "INTERRUPTED" and signal == "SIGTERM":
        return "SIGTERM (handed back)"
    leased = epoch(attempt["leased_at"])
    failed_at = context.persist_failed.get(key)
    after_restart = leased is not None and any(leased > end for _, end in context.world.restarts)
    if after_restart and (
        (failed_at is not None and kind == "LEASE_EXPIRED")
        or (kind == "RETRYABLE" and str(attempt["error_class"]).startswith(DATABASE_ERRORS))
    ):
        # Leased once the server was back, yet the handler's queries or the outcome write
        # failed: the worker used a connection the restart had broken.
        return "restart (a connection it broke)"
    if _in_restart(context, leased, epoch(attempt["finished_at"])):
        return "restart (open across it)"
    return None


# --- handler runs, worker reports, resources, samples ---------------------------------------


def _check_runs(context: _Context) -> None:
    counts = context.counts
    jobs_with_runs: set[str] = set()
    for key, starts in sorted(context.starts.items()):
        jobs_with_runs.add(key[0])
        counts["handler runs"] += len(starts)
        attempt = context.attempt_rows.get(key)
        where = f"job {key[0]} run {key[1]} attempt {key[2]}"
        if attempt is None:
            context.violation(f"a handler ran {where}, which no attempt row records")
            continue
        if len(starts) > 1:
            context.violation(f"{where} ran {len(starts)} times")
        for start in starts:
            if start["worker_id"] != attempt["worker_id"]:
                context.violation(
                    f"a handler of {start['worker_id']} ran {where}, leased to "
                    f"{attempt['worker_id']}"
                )
        finishes = context.finishes.get(key, [])
        if attempt["outcome"] != "SUCCEEDED":
            if key in context.explanations:
                counts["extra runs explained"] += len(starts)
            if not finishes:
                counts["runs cut off (kill or restart)"] += 1
    for key, attempt in context.attempt_rows.items():
        if attempt["outcome"] != "SUCCEEDED":
            if key not in context.starts:
                counts["attempts without a handler run"] += 1
            continue
        results = [run["result"] for run in context.finishes.get(key, [])]
        if results != ["success"]:
            context.violation(
                f"job {key[0]} attempt {key[2]} SUCCEEDED, but its handler runs finished {results}"
            )
    for key in context.finishes:
        if key not in context.starts:
            context.violation(f"job {key[0]} attempt {key[2]} finished without starting")
    counts["jobs run"] = len(jobs_with_runs)
    counts["extra runs"] = counts["handler runs"] - len(jobs_with_runs)


def _check_reports(context: _Context) -> None:
    """What each worker said happened must be what the database holds."""
    for report in context.world.reports:
        key = key_of(report)
        outcome = report["outcome"]
        context.counts[f"worker reports {outcome}"] += 1
        attempt = context.attempt_rows.get(key)
        where = f"{report['worker_id']} reported job {key[0]} attempt {key[2]} {outcome}"
        if attempt is None:
            context.violation(f"{where}, but no such attempt is on record")
        elif attempt["worker_id"] != report["worker_id"]:
            context.violation(f"{where}, but {attempt['worker_id']} leased it")
        elif outcome == "succeeded" and attempt["outcome"] != "SUCCEEDED":
            context.violation(f"{where}, but the attempt ended {attempt['outcome']}")
        elif outcome == "retried" and attempt["outcome"] != "RETRY_SCHEDULED":
            context.violation(f"{where}, but the attempt ended {attempt['outcome']}")
        elif outcome == "dead_lettered":
            context.violation(f"{where}: no harness job may dead-letter")
        elif outcome in ("lease_lost", "persist_failed") and attempt["outcome"] == "SUCCEEDED":
            # Across a restart a commit can land without its reply: the worker saw an error
            # (or, retrying, its own finished lease) for a success the database holds.
            t = float(report["t"])
            if _in_restart(context, t, t):
                context.counts["successes the worker could not confirm"] += 1
            else:
                context.violation(f"{where}, yet the attempt SUCCEEDED")


END_EVENTS = frozenset(LIFECYCLE_EVENTS - {"ENQUEUED", "LEASED"})
"""The events written by the statement that ends a lease (and deletes its resource claim)."""


@dataclass(frozen=True)
class _KeyedAttempt:
    start: float
    end: float
    job_id: str
    leased_event: int | None
    """The id of the attempt's LEASED event, None when its record holds no event ids."""
    end_event: int | None
    """The highest id of the events that ended it (SUCCEEDED, FAILED, REQUEUED, ...)."""


def _keyed_attempts(world: JobWorld, job_id: str) -> list[_KeyedAttempt]:
    event_ids: dict[tuple[int, int], dict[str, int]] = defaultdict(dict)
    for event in world.events.get(job_id, []):
        if event.get("id") is None or event["attempt"] is None:
            continue
        ids = event_ids[(int(event["run_number"]), int(event["attempt"]))]
        if event["event_type"] == "LEASED":
            ids["leased"] = int(event["id"])
        elif event["event_type"] in END_EVENTS:
            ids["end"] = max(ids.get("end", 0), int(event["id"]))
    keyed = []
    for attempt in world.attempts.get(job_id, []):
        start, end = epoch(attempt["leased_at"]), epoch(attempt["finished_at"])
        if start is None or end is None:
            continue  # reported as unfinished by _check_job
        ids = event_ids.get((int(attempt["run_number"]), int(attempt["attempt"])), {})
        keyed.append(_KeyedAttempt(start, end, job_id, ids.get("leased"), ids.get("end")))
    return keyed


def _check_resources(context: _Context) -> None:
    """At most one attempt holds an execution resource at a time: a key's next lease begins
    only after its previous attempt ended (the claim row goes with that attempt).

    The order is judged by the event ids, not by leased_at/finished_at. Those are statement
    times: leased_at is the claim statement's now(), taken when the statement arrived, before
    it found the key free; finished_at the ending statement's, before its commit. A claim that
    sees the key free in its snapshot and only then (a lock wait on another key's claim row, a
    descheduled backend) inserts the claim row can find another attempt's claim row already
    come and gone in between, so its leased_at precedes that whole attempt, although its lease
    really began after it (tests/worker/test_execution_resources.py shows one). The ids are
    sound instead: they come from the events' identity sequence (CACHE 1; nextval is not
    transactional and never goes back, a crash only skips values), drawn when the row is
    inserted. The ending events are inserted by the statement whose trigger deletes the claim
    row, before that commits; the next LEASED event by the claim statement after its INSERT of
    the claim row, which can succeed only once the old row's deletion committed (ON CONFLICT
    waits for an uncommitted one). So ordered by LEASED id, each keyed attempt's LEASED id is
    above the ending ids of all before it, or two attempts held the key at once. A time overlap
    that this order clears is counted, not reported; a record without event ids (a journal of
    an older harness) is judged by its times as before."""
    world = context.world
    by_key: dict[str, list[_KeyedAttempt]] = defaultdict(list)
    for job_id, job in world.jobs.items():
        if job["resource_key"] is not None:
            by_key[job["resource_key"]].extend(_keyed_attempts(world, job_id))
    for resource_key, keyed in by_key.items():
        context.counts["keyed attempts"] += len(keyed)
        overlaps = _overlaps(sorted(keyed, key=lambda a: (a.start, a.end, a.job_id)), "time")
        if all(a.leased_event is not None and a.end_event is not None for a in keyed):
            ordered = sorted(keyed, key=lambda a: a.leased_event or 0)
            clashes = _overlaps(ordered, "events")
            context.counts["keyed overlaps in time, sequential by the claim"] += len(
                {pair for pair in overlaps if pair[::-1] not in clashes and pair not in clashes}
            )
            overlaps = clashes
        for job_id, holder in sorted(overlaps):
            context.violation(
                f"resource {resource_key!r} was leased by job {job_id} while job {holder} "
                "still held it"
            )
    for sample in world.shared_resources:
        context.violation(f"resource {sample['key']!r} LEASED {sample['count']} times at once")


def _overlaps(ordered: list[_KeyedAttempt], by: str) -> set[tuple[str, str]]:
    """(job, holder) pairs of ``ordered`` (by lease start) whose lease began before the
    holding one ended: by the times, or by the event ids."""
    found: set[tuple[str, str]] = set()
    held_until, holder = float("-inf"), ""
    for attempt in ordered:
        if by == "time":
            start, end = attempt.start, attempt.end
        else:
            start, end = float(attempt.leased_event or 0), float(attempt.end_event or 0)
        if start < held_until:
            found.add((attempt.job_id, holder))
        if end > held_until:
            held_until, holder = end, attempt.job_id
    return found


def _check_samples(context: _Context) -> None:
    for sample in context.world.overdue:
        at = epoch(sample["at"])
        if at is not None and any(
            start - 1 <= at <= end + OVERDUE_EXCUSE_SECONDS for start, end in context.world.restarts
        ):
            context.counts["overdue leases excused by the restart"] += 1
            continue
        context.violation(
            f"job {sample['job_id']} stayed LEASED {sample['expired_for']:.1f}s after its lease "
            f"expired (worker {sample['worker_id']}, seen at {sample['at']})"
        )


def _check_workers_after_restart(context: _Context) -> None:
    """A worker that lived through the restart must have come back: it finishes jobs after."""
    world = context.world
    for restart_start, restart_end in world.restarts:
        finished_after: Counter[str] = Counter(
            report["worker_id"]
            for report in world.reports
            if float(report["t"]) > restart_end and report["outcome"] == "succeeded"
        )
        if sum(finished_after.values()) < AFTER_RESTART_MIN_JOBS:
            continue
        for worker in world.workers:
            if worker.worker_id is None or worker.spawned_at >= restart_start:
                continue
            if worker.signaled_at is not None and worker.signaled_at < restart_end + 30:
                continue  # killed too soon after the restart to be expected to work
            if not finished_after[worker.worker_id]:
                context.violation(
                    f"{worker.name} ({worker.worker_id}) lived through the restart but "
                    "finished no job after it"
                )
