"""The child processes of the reliability harness: recorders, promoters, retention, toggler,
real ``runledger_worker`` processes and a lease monitor.

Imported only after ``django.setup()``. Every loop survives the planned server outage: on a
connection-level error it closes its Django connections and tries again. Every child writes
what it observed to its own journal, which the harness checks against the database at the end.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.core.management import call_command
from django.db import Error as DjangoDatabaseError
from django.db import connection, connections, transaction

from runledger_django import (
    IntentOutcome,
    RunledgerError,
    enqueue_job,
    promote_intents,
    promote_workflow_intents,
)
from runledger_django.api import delete_promoted_intents_for_jobs, record_intent
from runledger_django.db.classify import is_session_fatal
from runledger_django.domain import IntentStatus, JobStatus
from runledger_django.errors import Code
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent

from .common import (
    ALPHA,
    ATOMIC,
    BETA,
    CONCURRENCY_ENV,
    DORMANT,
    INTENT_CONFLICT,
    JOB_TYPES,
    MAX_ATTEMPTS,
    ORGANIZATIONS,
    OVERDUE_SECONDS,
    PAUSE_ENV,
    RETAINED_TYPES,
    STABLE,
    TOGGLED,
    Journal,
)
from .ledger import read_ledger

T = TypeVar("T")

TRANSIENT_SQLSTATES = frozenset({"55P03", "40P01", "40001", "57014"})
"""Lock timeout, deadlock, serialization failure, statement cancel: retry, never corruption."""
PROMOTION_LIMITS = (1, 2, 7, 24, 25, 100, 500)
GIVE_UP_AFTER_STOP_SECONDS = 60.0
"""After the stop request an unsettled write keeps retrying this long (the server is up by then)."""


def is_transient(exc: BaseException) -> bool:
    """True for failures an operator would retry: a lost or refused connection, an
    unconfirmed commit, a lock or statement timeout, a deadlock."""
    if isinstance(exc, RunledgerError):
        if exc.code == Code.DB_TRANSACTION_COMMIT_UNCONFIRMED:
            return True
        if exc.sqlstate in TRANSIENT_SQLSTATES:
            return True
        cause = exc.__cause__
        return cause is not None and exc.code == Code.DB_QUERY_FAILED and is_session_fatal(cause)
    if isinstance(exc, DjangoDatabaseError):
        return is_session_fatal(exc)
    return False


def describe(exc: BaseException) -> dict[str, Any]:
    """What a journal keeps of an error (the harness is server side: internal text is fine)."""
    if isinstance(exc, RunledgerError):
        return {
            "type": "RunledgerError",
            "code": exc.code,
            "category": str(exc.category),
            "sqlstate": exc.sqlstate,
            "message": exc.internal_message[:300],
        }
    return {"type": type(exc).__name__, "message": str(exc)[:300]}


def close_connections() -> None:
    """Drop every Django connection; the next query reconnects (or fails while the server is down)."""
    connections.close_all()


class _DeliberateRollbackError(Exception):
    """Raised inside an atomic block to roll back deliberately."""


@dataclass
class Spec:
    """One record_intent request, reproducible for retries."""

    job_type: str
    organization_id: str | None
    key: str
    payload: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)

    def record(self) -> IntentOutcome:
        return record_intent(
            self.job_type,
            self.payload,
            idempotency_key=self.key,
            organization_id=self.organization_id,
            **self.options,
        )

    def fields(self) -> dict[str, Any]:
        return {
            "job_type": self.job_type,
            "organization_id": self.organization_id,
            "key": self.key,
            "payload": self.payload,
            "options": self.options,
        }

    def conflicting(self, rng: random.Random) -> Spec:
        """The same key naming a different request."""
        choice = rng.randrange(3)
        if choice == 0:
            payload = {**self.payload, "x": 1}
            return Spec(self.job_type, self.organization_id, self.key, payload, self.options)
        options = dict(self.options)
        if choice == 1:
            options["priority"] = int(options.get("priority", 0)) + 1000
        else:
            options["stage"] = "scheduled" if options.get("stage") != "scheduled" else "queued"
        return Spec(self.job_type, self.organization_id, self.key, self.payload, options)


class Worker:
    """A child's loop scaffolding: stop file, journal, counters."""

    ready_at_start = True
    """The child is ready once constructed (else it touches ``ready_file`` itself)."""

    def __init__(
        self, name: str, rng: random.Random, journal: Journal, stop_file: Path, ready_file: Path
    ) -> None:
        self.name = name
        self.rng = rng
        self.journal = journal
        self.stop_file = stop_file
        self.ready_file = ready_file
        self.stop_seen_at: float | None = None

    def run(self) -> None:
        raise NotImplementedError

    def stopping(self) -> bool:
        if self.stop_seen_at is None and self.stop_file.exists():
            self.stop_seen_at = time.monotonic()
        return self.stop_seen_at is not None

    def settle(self, operation: str, attempt: Callable[[], T]) -> tuple[T, int] | None:
        """Retry ``attempt`` through transient failures until it returns or raises something
        else; returns the result and the number of attempts. Every failed attempt is an
        unknown outcome (it may or may not have committed) and is journaled as one."""
        delay = 0.02
        attempts = 0
        while True:
            attempts += 1
            try:
                return attempt(), attempts
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.journal.write("unknown", op=operation, error=describe(exc))
                close_connections()
            if (
                self.stopping()
                and self.stop_seen_at is not None
                and time.monotonic() - self.stop_seen_at > GIVE_UP_AFTER_STOP_SECONDS
            ):
                return None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)

    def violation(self, message: str, **fields: Any) -> None:
        self.journal.write("violation", message=message, **fields)


class Recorder(Worker):
    """Records fresh intents, retries earlier keys (which must converge) and sends deliberate
    conflicts (which must raise). Journals every intent it saw committed, fsync'ed."""

    WEIGHTS = (
        ("fresh", 45),
        ("batch", 12),
        ("rolled_back", 5),
        ("duplicate", 22),
        ("conflict", 10),
        ("promotion_conflict", 6),
    )
    TYPE_WEIGHTS = (
        (ALPHA, 30),
        (BETA, 20),
        (STABLE, 25),
        (TOGGLED, 15),
        (DORMANT, 10),
        (ATOMIC, 20),
    )

    def __init__(
        self, name: str, rng: random.Random, journal: Journal, stop_file: Path, ready_file: Path
    ) -> None:
        super().__init__(name, rng, journal, stop_file, ready_file)
        self.pause = float(os.environ.get(PAUSE_ENV, "0"))
        self.sequence = 0
        self.known: dict[str, tuple[Spec, str]] = {}
        self.keys: list[str] = []
        self.stable_keys: list[str] = []

    def run(self) -> None:
        operations = [name for name, _ in self.WEIGHTS]
        weights = [weight for _, weight in self.WEIGHTS]
        while not self.stopping():
            if self.pause:
                time.sleep(self.rng.uniform(0, 2 * self.pause))
            operation = self.rng.choices(operations, weights)[0]
            if operation in ("duplicate", "conflict") and not self.stable_keys:
                operation = "fresh"
            try:
                getattr(self, f"op_{operation}")()
            except Exception as exc:
                # Neither a transient failure (settle retries those) nor an expected outcome.
                self.journal.write("unexpected", op=operation, error=describe(exc))
                close_connections()

    def fresh_spec(self, job_type: str | None = None) -> Spec:
        self.sequence += 1
        rng = self.rng
        if job_type is None:
            job_type = rng.choices(
                [t for t, _ in self.TYPE_WEIGHTS], [w for _, w in self.TYPE_WEIGHTS]
            )[0]
        options: dict[str, Any] = {}
        if rng.random() < 0.3:
            options["priority"] = rng.randrange(-5, 200)
        if rng.random() < 0.2:
            options["stage"] = rng.choice(["queued", "scheduled"])
        # Budgets and deadlines the workers' kills and deliberate failures cannot exhaust: every
        # job must end SUCCEEDED.
        if rng.random() < 0.2:
            options["max_attempts"] = rng.randrange(MAX_ATTEMPTS - 10, MAX_ATTEMPTS + 10)
        if rng.random() < 0.2:
            options["timeout_seconds"] = rng.randrange(60, 3600)
        if rng.random() < 0.1:
            options["execution_resource_key"] = f"resource-{rng.randrange(5)}"
        payload = {
            "recorder": self.name,
            "sequence": self.sequence,
            "items": [rng.randrange(1000) for _ in range(rng.randrange(4))],
            "note": rng.choice(["", "plain", "ünïcödé", "日本語", "x" * 64]),
        }
        return Spec(
            job_type, rng.choice(ORGANIZATIONS), f"{self.name}:{self.sequence}", payload, options
        )

    def committed(
        self, operation: str, spec: Spec, outcome: IntentOutcome, *, expect: str | None = None
    ) -> None:
        intent_id = str(outcome.intent_id)
        self.journal.write(
            "committed",
            op=operation,
            id=intent_id,
            disposition=outcome.disposition,
            status=outcome.status.value,
            expect=expect,
            **spec.fields(),
        )
        if spec.key not in self.known:
            self.keys.append(spec.key)
            if spec.job_type == STABLE:
                self.stable_keys.append(spec.key)
        self.known[spec.key] = (spec, intent_id)

    def unresolved(self, operation: str, specs: list[Spec]) -> None:
        for spec in specs:
            self.journal.write("unresolved", op=operation, **spec.fields())

    def op_fresh(self) -> None:
        spec = self.fresh_spec()
        settled = self.settle("record", spec.record)
        if settled is None:
            self.unresolved("fresh", [spec])
            return
        outcome, attempts = settled
        if attempts == 1 and outcome.disposition != "inserted":
            self.violation("a fresh key resolved to an existing intent", key=spec.key)
        self.committed("fresh", spec, outcome)

    def op_batch(self) -> None:
        """Several intents in the caller's transaction, beside its business work."""
        specs = [self.fresh_spec() for _ in range(self.rng.randint(2, 3))]

        def body() -> list[IntentOutcome]:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
                return [spec.record() for spec in specs]

        settled = self.settle("record_batch", body)
        if settled is None:
            self.unresolved("batch", specs)
            return
        for spec, outcome in zip(specs, settled[0], strict=True):
            self.committed("batch", spec, outcome)

    def op_rolled_back(self) -> None:
        """An intent recorded in a transaction that rolls back must never exist."""
        spec = self.fresh_spec()
        try:
            with transaction.atomic():
                spec.record()
                raise _DeliberateRollbackError
        except _DeliberateRollbackError:
            pass
        except Exception as exc:
            if not is_transient(exc):
                raise
            close_connections()  # nothing was committed either way
        self.journal.write("rolled_back", **spec.fields())

    def op_duplicate(self) -> None:
        key = self.rng.choice(self.keys)
        spec, known_id = self.known[key]
        settled = self.settle("duplicate", spec.record)
        if settled is None:
            self.unresolved("duplicate", [spec])
            return
        outcome, attempts = settled
        intent_id = str(outcome.intent_id)
        if intent_id != known_id:
            # Only retention deletes intents, and then the retry inserts a new one.
            if spec.job_type not in RETAINED_TYPES:
                self.violation("a retry of a never-retained key changed intent", key=key)
            elif outcome.disposition == "existing" and attempts == 1:
                self.violation("a retry resolved to an intent it never recorded", key=key)
        self.committed("duplicate", spec, outcome)

    def op_conflict(self) -> None:
        """Same key, different request: must raise, and leave the caller's transaction usable."""
        spec, _ = self.known[self.rng.choice(self.stable_keys)]
        variant = spec.conflicting(self.rng)
        follow = self.fresh_spec() if self.rng.random() < 0.5 else None

        def body() -> tuple[RunledgerError | None, IntentOutcome | None]:
            if follow is None:
                return _conflict_of(variant), None
            with transaction.atomic():
                conflict = _conflict_of(variant)
                return conflict, follow.record()

        settled = self.settle("conflict", body)
        if settled is None:
            self.unresolved("after_conflict", [follow] if follow else [])
            return
        (conflict, follow_outcome), _ = settled
        if conflict is None:
            self.violation("a conflicting request was accepted", key=spec.key)
        elif conflict.category != "conflict":
            self.violation("a conflict had the wrong category", key=spec.key)
        else:
            self.journal.write("conflict_raised", key=spec.key, in_transaction=follow is not None)
        if follow is not None and follow_outcome is not None:
            self.committed("after_conflict", follow, follow_outcome)

    def op_promotion_conflict(self) -> None:
        """A job enqueued directly under the key first: promotion must mark the intent
        CONFLICTED (a conflict the harness creates on purpose)."""
        spec = self.fresh_spec(STABLE)

        def enqueue() -> str:
            return str(
                enqueue_job(
                    STABLE,
                    {"direct": spec.key},
                    idempotency_key=spec.key,
                    organization_id=spec.organization_id,
                ).job_id
            )

        enqueued = self.settle("enqueue_job", enqueue)
        if enqueued is None:
            return
        self.journal.write(
            "direct_job",
            job_id=enqueued[0],
            job_type=STABLE,
            organization_id=spec.organization_id,
            key=spec.key,
        )
        settled = self.settle("record", spec.record)
        if settled is None:
            self.unresolved("promotion_conflict", [spec])
            return
        self.committed("promotion_conflict", spec, settled[0], expect="conflicted")


def _conflict_of(spec: Spec) -> RunledgerError | None:
    """The conflict error the request raised, or None when it was (wrongly) accepted."""
    try:
        spec.record()
    except RunledgerError as error:
        if error.code == INTENT_CONFLICT:
            return error
        raise
    return None


class Promoter(Worker):
    """Promotion passes back to back with varied limits; the harness SIGKILLs promoters."""

    def run(self) -> None:
        while not self.stopping():
            limit = self.rng.choice(PROMOTION_LIMITS)
            try:
                report = promote_intents(JOB_TYPES, limit=limit)
                flows = promote_workflow_intents(limit=min(limit, 24))
            except Exception as exc:
                kind = "error" if is_transient(exc) else "unexpected"
                self.journal.write(kind, op="promote", limit=limit, error=describe(exc))
                close_connections()
                time.sleep(self.rng.uniform(0.02, 0.2))
                continue
            if flows.anything_happened:
                self.journal.write("flow_pass", limit=limit, **flows.to_dict())
            if report.anything_happened:
                self.journal.write("pass", limit=limit, **report.to_dict())
            elif not flows.anything_happened:
                time.sleep(self.rng.uniform(0.01, 0.05))


class Retention(Worker):
    """Queue retention while workers run: selects, without locks, promoted intents whose job
    SUCCEEDED, then deletes them with the exact-ID recipe (the intents first, the jobs and, by
    cascade, their attempts and events second). The deleted jobs' whole record is read in the
    same transaction and journaled, so the checks still see how each job ran."""

    def run(self) -> None:
        while not self.stopping():
            time.sleep(self.rng.uniform(0.02, 0.2))
            try:
                rows = list(
                    JobEnqueueIntent.objects.filter(
                        status=IntentStatus.PROMOTED,
                        job_type__in=RETAINED_TYPES,
                        promoted_job__status=JobStatus.SUCCEEDED,
                    )
                    .order_by("promoted_at", "id")
                    .values_list("id", "promoted_job_id")[: self.rng.randint(1, 40)]
                )
            except Exception as exc:
                self._failed("select", exc)
                continue
            if rows:
                self.retain([str(row[0]) for row in rows], [str(row[1]) for row in rows])

    def retain(self, intent_ids: list[str], job_ids: list[str]) -> None:
        ledger: dict[str, Any] | None = None
        try:
            with transaction.atomic():
                deleted = delete_promoted_intents_for_jobs(job_ids)
                ledger = read_ledger(job_ids)
                jobs_deleted, _ = Job.objects.filter(
                    id__in=job_ids, status=JobStatus.SUCCEEDED
                ).delete()
        except Exception as exc:
            # Rolled back, or (connection lost around the commit) perhaps committed: the
            # harness then checks the batch went all or nothing, and if the jobs are gone it
            # takes their record from here.
            self.journal.write("retention_unknown", intents=intent_ids, jobs=job_ids, ledger=ledger)
            self._failed("retain", exc)
            return
        self.journal.write(
            "retained",
            intents=intent_ids,
            jobs=job_ids,
            deleted=deleted,
            jobs_deleted=jobs_deleted,
            ledger=ledger,
        )
        if deleted != len(intent_ids) or jobs_deleted != len(job_ids):
            self.violation(
                "retention deleted other rows than it selected",
                selected=len(intent_ids),
                deleted=deleted,
                jobs_deleted=jobs_deleted,
            )

    def _failed(self, operation: str, exc: Exception) -> None:
        kind = "error" if is_transient(exc) else "unexpected"
        self.journal.write(kind, op=operation, error=describe(exc))
        close_connections()


class Toggler(Worker):
    """Disables and re-enables one job definition while promoters run."""

    def run(self) -> None:
        enabled = True
        while not self.stopping():
            time.sleep(self.rng.uniform(0.1, 0.6))
            try:
                JobDefinition.objects.filter(job_type=TOGGLED).update(is_enabled=not enabled)
            except Exception as exc:
                kind = "error" if is_transient(exc) else "unexpected"
                self.journal.write(kind, op="toggle", error=describe(exc))
                close_connections()
                continue
            enabled = not enabled
            self.journal.write("toggled", enabled=enabled)


BANNER = re.compile(r"runledger worker (\S+):")


class _RunLines:
    """``runledger_worker --json`` output: one journal record per finished attempt."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                self.journal.write("run", t=time.time(), **json.loads(line))
        return len(text)

    def flush(self) -> None:
        """Every record is written at once."""


class _Banner:
    """``runledger_worker``'s stderr: its banner names the worker id; then the child is ready."""

    def __init__(self, journal: Journal, ready_file: Path) -> None:
        self.journal = journal
        self.ready_file = ready_file

    def write(self, text: str) -> int:
        match = BANNER.search(text)
        if match:
            self.journal.write("worker", worker_id=match.group(1), t=time.time())
            self.ready_file.touch()
        elif text.strip():
            self.journal.write("stderr", text=text[-2000:])
        return len(text)

    def flush(self) -> None:
        """Every record is written at once."""


class RunWorker(Worker):
    """A real ``runledger_worker --json`` (the management command, in this process): it runs
    until SIGTERM, which the harness sends at the end or at random moments; the harness also
    SIGKILLs it. Half the workers also promote (``--promote``)."""

    ready_at_start = False

    def run(self) -> None:
        concurrency = os.environ.get(CONCURRENCY_ENV, "2")
        promote = self.rng.random() < 0.5
        self.journal.write("config", pid=os.getpid(), concurrency=concurrency, promote=promote)
        call_command(
            "runledger_worker",
            "--json",
            "--concurrency",
            concurrency,
            *(["--promote"] if promote else []),
            stdout=_RunLines(self.journal),
            stderr=_Banner(self.journal, self.ready_file),
        )


class Monitor(Worker):
    """Samples the queue twice a second for leases the reapers should have taken long ago, and
    for an execution resource leased twice."""

    def run(self) -> None:
        while not self.stopping():
            time.sleep(0.5)
            try:
                with connection.cursor() as cursor:
                    cursor.execute(_OVERDUE_LEASES, {"seconds": OVERDUE_SECONDS})
                    overdue = cursor.fetchall()
                    cursor.execute(_SHARED_RESOURCES)
                    shared = cursor.fetchall()
            except Exception as exc:
                kind = "error" if is_transient(exc) else "unexpected"
                self.journal.write(kind, op="monitor", error=describe(exc))
                close_connections()
                continue
            for job_id, worker_id, expired_for, at in overdue:
                self.journal.write(
                    "overdue",
                    job_id=str(job_id),
                    worker_id=worker_id,
                    expired_for=float(expired_for),
                    at=at.isoformat(),
                )
            for key, count, at in shared:
                self.journal.write("resource_shared", key=key, count=int(count), at=at.isoformat())


_OVERDUE_LEASES = """
SELECT id, worker_id, extract(epoch FROM now() - lease_expires_at), now()
FROM runledger_job_queue
WHERE status = 'LEASED' AND lease_expires_at < now() - make_interval(secs => %(seconds)s)
"""
_SHARED_RESOURCES = """
SELECT execution_resource_key, count(*), now()
FROM runledger_job_queue
WHERE status = 'LEASED' AND execution_resource_key IS NOT NULL
GROUP BY execution_resource_key
HAVING count(*) > 1
"""


ROLES: dict[str, type[Worker]] = {
    "recorder": Recorder,
    "promoter": Promoter,
    "retention": Retention,
    "toggler": Toggler,
    "worker": RunWorker,
    "monitor": Monitor,
}
"""Each role's class; its ``run`` loops until the stop file appears."""
