"""Promotion: pending intents become ordinary jobs, exactly once per key (reference 4.4).

``promote_intents`` checks a call and runs one pass (``promotion_pass.py`` holds the pass:
its budget, the set-based batch, the per-row fallback, and what a failed row does);
``run_promoter`` drains or loops over passes (the ``promote_intents`` command runs it through
``services/operations.py``); each of its passes also promotes due workflow intents.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from django.db import connections

from ..domain import PROMOTION_BATCH_LIMIT_MAX, PromotionReport
from ..errors import Code, RunledgerError
from ..validation import validate_job_types, validate_page
from . import tracing
from .outage import Outage
from .promotion_pass import run_pass
from .workflows import promote_workflow_intents

logger = logging.getLogger(__name__)

DEFAULT_USING = "default"


def promote_intents(
    job_types: Iterable[str],
    *,
    limit: int = PROMOTION_BATCH_LIMIT_MAX,
    using: str = DEFAULT_USING,
) -> PromotionReport:
    """Run one promotion pass over ``job_types``.

    Transaction: owns its transaction (READ COMMITTED, 25 s total, 5 s lock waits) and refuses
    to run inside an atomic block. A pass that finds nothing eligible locks nothing and never
    takes the retention fence, so it does not wait for retention.

    Args:
        job_types: the allow-list; a promoter should only promote types its workers run.
        limit: rows to claim (1 to 1000). At most 24 rows per pass take the per-row savepoint
            path; the rest of a large batch promotes set-based.

    Returns:
        The report; ``batch_was_full`` means eligible work may remain, so drain again now.

    Raises:
        RunledgerError: ``job.invalid_pagination``; ``job.invalid_job_type``;
            ``job.intent_promotion_requires_own_transaction``; ``db.query_failed`` (for example
            a fence wait that timed out); ``job.intent_promotion_budget_exhausted`` when the
            25 s budget ran out (everything the pass did is rolled back).
    """
    page = validate_page(limit, 0)
    types = validate_job_types(job_types)
    if not types:
        return PromotionReport()
    connection = connections[using]
    if connection.in_atomic_block:
        raise RunledgerError.for_code(
            Code.INTENT_PROMOTION_REQUIRES_OWN_TRANSACTION,
            "promote_intents was called inside an atomic block",
        )
    return tracing.promotion(lambda: run_pass(types, limit=page.limit, using=using))


def run_promoter(
    job_types: Callable[[], list[str]],
    *,
    limit: int,
    interval: float,
    stop: threading.Event,
    loop: bool,
    on_pass: Callable[[PromotionReport], None] | None = None,
    outage_limit: float = 300.0,
    using: str = DEFAULT_USING,
) -> int:
    """Drain (``loop=False``) or keep promoting until ``stop`` is set; return passes run.

    Full batches are drained back to back without waiting. A stop request never interrupts a
    pass: it commits or rolls back first. In drain mode a failed pass raises. In loop mode a
    failed pass is retried with capped, jittered backoff; an unreachable database is logged
    once per outage, and past ``outage_limit`` seconds of it the loop raises
    ``OutageLimitExceededError`` so a supervisor restarts the process.
    """
    connection = connections[using]
    if connection.in_atomic_block:
        # Refuse before dropping an obsolete connection could close the caller's transaction.
        raise RunledgerError.for_code(
            Code.INTENT_PROMOTION_REQUIRES_OWN_TRANSACTION,
            "run_promoter was called inside an atomic block",
        )
    outage = Outage(limit_seconds=outage_limit, logger=logger, what="promoter")
    passes = 0
    while not stop.is_set():
        # A long-running promoter outlives CONN_MAX_AGE and server restarts: reconnect as a
        # request would, on this alias only.
        connection.close_if_unusable_or_obsolete()
        try:
            report = promote_intents(job_types(), limit=limit, using=using)
            flows = promote_workflow_intents(using=using)
        except RunledgerError as error:
            if not loop:
                raise
            stop.wait(max(interval, outage.failed(error)))
            continue
        outage.succeeded()
        passes += 1
        if on_pass is not None:
            on_pass(report)
        if report.batch_was_full or flows.batch_was_full:
            continue
        if not loop:
            break
        stop.wait(interval)
    return passes
