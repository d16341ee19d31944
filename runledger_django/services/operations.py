"""Orchestration behind the management commands: which types to promote, drains, prune loops.

Commands parse arguments and print; the decisions they rely on live here so that cron jobs,
systemd units and tests all get the same behaviour.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.db import DatabaseError
from django.utils import timezone

from ..conf import conf
from ..db.classify import classify
from ..domain import PromotionReport
from ..models import JobDefinition
from ..validation import validate_job_types
from .promotion import run_promoter
from .retention import count_promoted_intents_before, delete_promoted_intents_before

DEFAULT_USING = "default"


def promotion_job_types(
    explicit: Sequence[str] | None = None, *, using: str = DEFAULT_USING
) -> list[str]:
    """Return the allow-list a promoter should use, in order of precedence.

    ``explicit`` (``--job-type``) when given, else ``RUNLEDGER["PROMOTE_JOB_TYPES"]``, else every
    enabled job definition, read now (a loop calls this before every pass, so a type enabled in
    the admin is picked up without a restart).

    Transaction: one autocommit read of job definitions when it falls through to them.

    Raises:
        RunledgerError: ``job.invalid_job_type`` for a blank or unstorable type; a classified
            database error when the definitions cannot be read (a loop retries those).
    """
    fixed = _fixed_job_types(explicit)
    return fixed if fixed is not None else _enabled_job_types(using)


def _fixed_job_types(explicit: Sequence[str] | None) -> list[str] | None:
    """The validated allow-list from ``--job-type`` or settings; None means every enabled type."""
    if explicit:
        return validate_job_types(explicit)
    configured = conf.PROMOTE_JOB_TYPES
    return None if configured is None else validate_job_types(configured)


def _enabled_job_types(using: str) -> list[str]:
    try:
        return list(
            JobDefinition.objects.using(using)
            .filter(is_enabled=True)
            .order_by("job_type")
            .values_list("job_type", flat=True)
        )
    except DatabaseError as exc:
        raise classify(exc, "read enabled job definitions") from exc


@dataclass
class PromotionTotals:
    """Running sums over the passes of one drain or loop, for progress and the summary."""

    passes: int = 0
    inserted_jobs: int = 0
    existing_jobs: int = 0
    conflicted: int = 0
    definition_became_unavailable: int = 0
    retry_deferred: int = 0
    total_promoted: int = 0

    def add(self, report: PromotionReport) -> None:
        self.passes += 1
        self.inserted_jobs += report.inserted_jobs
        self.existing_jobs += report.existing_jobs
        self.conflicted += report.conflicted
        self.definition_became_unavailable += report.definition_became_unavailable
        self.retry_deferred += report.retry_deferred
        self.total_promoted += report.total_promoted


def run_promotion(
    job_types: Sequence[str] | None = None,
    *,
    limit: int | None = None,
    interval: float | None = None,
    loop: bool = False,
    stop: threading.Event | None = None,
    on_pass: Callable[[PromotionReport, PromotionTotals], None] | None = None,
    using: str = DEFAULT_USING,
) -> PromotionTotals:
    """Drain pending intents (default) or keep promoting until ``stop`` is set (``loop``).

    Passes run back to back while a batch comes back full; a drain ends after the first pass
    that was not full, a loop then waits ``interval`` seconds (woken early by ``stop``).
    ``limit`` and ``interval`` default to ``PROMOTION_BATCH_SIZE`` and ``PROMOTER_INTERVAL``;
    ``on_pass(report, totals_so_far)`` sees every completed pass.

    Transaction: every pass owns its transaction (see ``promote_intents``), so this refuses to
    run inside an atomic block. Setting ``stop`` never interrupts a pass: the pass in flight
    commits or rolls back, then the loop returns.

    Raises:
        RunledgerError: ``job.intent_promotion_requires_own_transaction``; whatever a pass
            raises in drain mode (a loop logs failed passes and retries with backoff);
            ``job.invalid_job_type`` for a bad allow-list.
        OutageLimitExceededError: in loop mode, the database stayed unreachable for longer
            than ``RUNLEDGER["OUTAGE_LIMIT_SECONDS"]``.
    """
    # A fixed allow-list is validated once, up front: a loop retries failed passes forever,
    # which must not include a typo on the command line.
    fixed = _fixed_job_types(job_types)
    totals = PromotionTotals()

    def types_for_pass() -> list[str]:
        return fixed if fixed is not None else _enabled_job_types(using)

    def record(report: PromotionReport) -> None:
        totals.add(report)
        if on_pass is not None:
            on_pass(report, totals)

    run_promoter(
        types_for_pass,
        limit=conf.PROMOTION_BATCH_SIZE if limit is None else limit,
        interval=conf.PROMOTER_INTERVAL if interval is None else interval,
        stop=stop if stop is not None else threading.Event(),
        loop=loop,
        on_pass=record,
        outage_limit=conf.OUTAGE_LIMIT_SECONDS,
        using=using,
    )
    return totals


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What a prune run did (or, for a dry run, would do)."""

    cutoff: dt.datetime
    deleted: int
    batches: int


def prune_cutoff(older_than: dt.timedelta) -> dt.datetime:
    """The promotion-time cutoff for ``older_than``, fixed once so a prune run terminates."""
    return timezone.now() - older_than


def count_prunable_intents(older_than: dt.timedelta, *, using: str = DEFAULT_USING) -> PruneResult:
    """Count the promoted intents a prune with ``older_than`` would delete; deletes nothing.

    Transaction: one read statement (autocommit, or the caller's atomic block).
    """
    cutoff = prune_cutoff(older_than)
    count = count_promoted_intents_before(cutoff, using=using)
    return PruneResult(cutoff=cutoff, deleted=count, batches=0)


def prune_promoted_intents(
    older_than: dt.timedelta,
    *,
    batch_size: int | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    using: str = DEFAULT_USING,
) -> PruneResult:
    """Delete promoted intents older than ``older_than`` in bounded batches until none remain.

    The cutoff is computed once, so intents promoted while this runs are left for next time,
    and the loop ends after the first batch that deleted fewer rows than ``batch_size``
    (default ``PRUNE_BATCH_SIZE``). Pending and conflicted intents are never touched.
    ``on_batch(deleted_in_batch, deleted_so_far)`` reports progress.

    Transaction: every batch is one statement and, in autocommit mode, its own transaction, so
    an interrupted run keeps what it deleted. Inside a caller's atomic block the batches join
    it and nothing commits until the caller does (row locks accumulate: avoid that for big runs).

    Raises:
        RunledgerError: ``job.invalid_pagination`` unless ``1 <= batch_size <= 1000``.
    """
    size = conf.PRUNE_BATCH_SIZE if batch_size is None else batch_size
    cutoff = prune_cutoff(older_than)
    total = 0
    batches = 0
    while True:
        deleted = delete_promoted_intents_before(cutoff, limit=size, using=using)
        batches += 1
        total += deleted
        if on_batch is not None:
            on_batch(deleted, total)
        if deleted < size:
            return PruneResult(cutoff=cutoff, deleted=total, batches=batches)
