"""Queue retention: delete old finished jobs with their attempts, events and promoted intents.

Each batch is one short transaction behind the retention fence (reference 4.5): the promoted
intents of exactly the batch's jobs go first, through ``delete_promoted_intents_for_jobs``, then
the jobs, whose attempts, events and resource claims cascade. While a job or its intent exists
its idempotency key deduplicates; once both are gone the key records a new intent. A promoter
waits for the fence only while one batch's transaction is open, so batches stay small.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from django.db import connections
from django.utils import timezone

from ..db import operations_queries
from ..db.transaction import (
    LOCK_TIMEOUT,
    STATEMENT_TIMEOUT,
    cap_timeout,
    execute,
    owned_read_committed,
)
from ..domain import RETENTION_BATCH_MAX, JobStatus
from ..errors import Code, RunledgerError
from .retention import delete_promoted_intents_for_jobs

logger = logging.getLogger(__name__)

DEFAULT_USING = "default"

PRUNABLE_STATUSES = (JobStatus.SUCCEEDED, JobStatus.DEAD_LETTERED, JobStatus.CANCELED)
"""The terminal statuses; PENDING and LEASED jobs are work, never history."""

JOB_PRUNE_BATCH_SIZE = 100
"""Jobs one retention transaction deletes by default. Each job takes its attempts and events
along (a long job with heartbeats has hundreds), and promotion passes wait while the batch
holds the fence: small batches keep that wait in milliseconds."""

RETRYABLE_SQLSTATES = frozenset({"55P03", "57014", "40P01"})
"""Lock timeout, statement timeout, deadlock: the batch rolled back as a whole; run it again."""

BATCH_ATTEMPTS = 3
ROW_LOCK_TIMEOUT_MS = 5_000
"""Row-lock waits of the job delete and its cascades (the fence helper uses the same cap)."""
STATEMENT_TIMEOUT_MS = 30_000


@dataclass(frozen=True, slots=True)
class JobPruneCounts:
    """Rows a prune removed (or, for a dry run, would remove)."""

    succeeded: int = 0
    dead_lettered: int = 0
    canceled: int = 0
    intents: int = 0
    """Promoted intents that pointed at the removed jobs."""
    attempts: int | None = None
    """Attempts and events cascade with their jobs; only a dry run counts them."""
    events: int | None = None

    @property
    def jobs(self) -> int:
        return self.succeeded + self.dead_lettered + self.canceled


@dataclass(frozen=True, slots=True)
class JobPruneResult:
    """What a prune run did: the cutoff it used, the rows it removed, the batches it took."""

    cutoff: dt.datetime
    statuses: tuple[JobStatus, ...]
    counts: JobPruneCounts = field(default_factory=JobPruneCounts)
    batches: int = 0


class _BatchChangedError(Exception):
    """A job of the batch changed after it was selected: roll the batch back, select again."""


def validate_statuses(values: Iterable[str] | None) -> tuple[JobStatus, ...]:
    """The statuses a prune may delete: a subset of SUCCEEDED, DEAD_LETTERED, CANCELED."""
    if values is None:
        return PRUNABLE_STATUSES
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, "statuses must be an iterable of job statuses"
        )
    chosen: list[JobStatus] = []
    for value in values:
        if not isinstance(value, str) or value not in PRUNABLE_STATUSES:
            raise RunledgerError.for_code(
                Code.INVALID_ARGUMENT,
                "prunable statuses are SUCCEEDED, DEAD_LETTERED and CANCELED",
            )
        status = JobStatus(value)
        if status not in chosen:
            chosen.append(status)
    if not chosen:
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "choose at least one status")
    return tuple(sorted(chosen, key=PRUNABLE_STATUSES.index))


def _cutoff(older_than: object) -> dt.datetime:
    if not isinstance(older_than, dt.timedelta) or older_than < dt.timedelta(0):
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, "older_than must be a non-negative timedelta"
        )
    return timezone.now() - older_than


def _params(cutoff: dt.datetime, statuses: Sequence[JobStatus]) -> dict[str, object]:
    return {"cutoff": cutoff, "statuses": [status.value for status in statuses]}


def count_prunable_jobs(
    older_than: dt.timedelta,
    *,
    statuses: Iterable[str] | None = None,
    using: str = DEFAULT_USING,
) -> JobPruneResult:
    """Count what ``prune_jobs`` with these arguments would delete; delete nothing.

    Transaction: one read statement (autocommit, or the caller's atomic block).

    Raises:
        RunledgerError: ``job.invalid_argument``.
    """
    chosen = validate_statuses(statuses)
    cutoff = _cutoff(older_than)
    with connections[using].cursor() as cursor:
        row = execute(
            cursor,
            operations_queries.COUNT_PRUNABLE,
            _params(cutoff, chosen),
            context="count prunable jobs",
        ).fetchone()
    succeeded, dead_lettered, canceled, intents, attempts, events = (int(v) for v in row or ())
    counts = JobPruneCounts(
        succeeded=succeeded,
        dead_lettered=dead_lettered,
        canceled=canceled,
        intents=intents,
        attempts=attempts,
        events=events,
    )
    return JobPruneResult(cutoff=cutoff, statuses=chosen, counts=counts)


def prune_jobs(
    older_than: dt.timedelta,
    *,
    statuses: Iterable[str] | None = None,
    batch_size: int = JOB_PRUNE_BATCH_SIZE,
    on_batch: Callable[[JobPruneCounts, JobPruneCounts], None] | None = None,
    using: str = DEFAULT_USING,
) -> JobPruneResult:
    """Delete finished jobs that ended more than ``older_than`` ago, in bounded batches.

    Each batch selects the oldest candidates without locks, then deletes, in one transaction
    behind the retention fence, their promoted intents and the jobs (attempts, events and
    execution-resource claims cascade). A job requeued between selection and deletion is kept:
    its batch rolls back and is selected again. A job cancelled while leased waits until its
    old lease has expired (its handler may still run). The cutoff is fixed once, so the run
    ends; it stops after the first batch smaller than ``batch_size``.
    ``on_batch(batch_counts, total_counts)`` sees every committed batch.

    Transaction: every batch owns a short READ COMMITTED transaction, so an interrupted run
    keeps what it deleted; refuses to run inside an atomic block. A batch that hits a lock or
    statement timeout or a deadlock is rolled back and tried again, up to three times.

    Raises:
        RunledgerError: ``job.invalid_argument`` (statuses, ``older_than``, or called inside an
            atomic block); ``job.invalid_pagination`` unless ``1 <= batch_size <= 1000``;
            ``db.query_failed`` when a batch kept timing out.
    """
    if connections[using].in_atomic_block:
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT,
            "prune_jobs owns its transactions and was called inside an atomic block",
        )
    chosen = validate_statuses(statuses)
    if type(batch_size) is not int or not 1 <= batch_size <= RETENTION_BATCH_MAX:
        raise RunledgerError.for_code(
            Code.INVALID_PAGINATION, f"batch_size must be 1 to {RETENTION_BATCH_MAX}"
        )
    cutoff = _cutoff(older_than)
    params = _params(cutoff, chosen)
    total = JobPruneCounts()
    batches = 0
    while True:
        job_ids = _select_batch(params, batch_size, using)
        if not job_ids:
            break
        try:
            counts = _delete_batch(job_ids, params, using)
        except _BatchChangedError:
            logger.info("prune_jobs: a job changed after selection; selecting the batch again")
            continue
        batches += 1
        total = JobPruneCounts(
            succeeded=total.succeeded + counts.succeeded,
            dead_lettered=total.dead_lettered + counts.dead_lettered,
            canceled=total.canceled + counts.canceled,
            intents=total.intents + counts.intents,
        )
        if on_batch is not None:
            on_batch(counts, total)
        if len(job_ids) < batch_size:
            break
    return JobPruneResult(cutoff=cutoff, statuses=chosen, counts=total, batches=batches)


def _select_batch(params: dict[str, object], limit: int, using: str) -> list[uuid.UUID]:
    with connections[using].cursor() as cursor:
        rows = execute(
            cursor,
            operations_queries.PRUNABLE_JOB_IDS,
            {**params, "limit": limit},
            context="select prunable jobs",
        ).fetchall()
    return [row[0] for row in rows]


def _delete_batch(
    job_ids: list[uuid.UUID], params: dict[str, object], using: str
) -> JobPruneCounts:
    for attempt in range(1, BATCH_ATTEMPTS + 1):
        try:
            return _delete_batch_once(job_ids, params, using)
        except RunledgerError as error:
            if error.sqlstate not in RETRYABLE_SQLSTATES or attempt == BATCH_ATTEMPTS:
                raise
            logger.warning(
                "prune_jobs: batch rolled back, retrying error_code=%s sqlstate=%s attempt=%d",
                error.code,
                error.sqlstate,
                attempt,
                extra={"runledger": error.log_fields()},
            )
    raise AssertionError("unreachable")  # pragma: no cover


def _delete_batch_once(
    job_ids: list[uuid.UUID], params: dict[str, object], using: str
) -> JobPruneCounts:
    with owned_read_committed(using) as cursor:
        # The fence, then the intents of exactly these jobs, then the jobs' row locks: the
        # first lock this transaction takes (reference 4.5).
        intents = delete_promoted_intents_for_jobs(job_ids, using=using)
        cap_timeout(cursor, LOCK_TIMEOUT, ROW_LOCK_TIMEOUT_MS)
        cap_timeout(cursor, STATEMENT_TIMEOUT, STATEMENT_TIMEOUT_MS)
        row = execute(
            cursor,
            operations_queries.DELETE_PRUNABLE_JOBS,
            {**params, "job_ids": job_ids},
            context="delete prunable jobs",
        ).fetchone()
        changed, succeeded, dead_lettered, canceled = (int(v) for v in row or (0, 0, 0, 0))
        if changed:
            # Leaving the atomic block by an exception rolls the intents back too.
            raise _BatchChangedError
    return JobPruneCounts(
        succeeded=succeeded, dead_lettered=dead_lettered, canceled=canceled, intents=intents
    )
