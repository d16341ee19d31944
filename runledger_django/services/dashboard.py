"""The admin dashboard's data: time series over the last hour or day, and the queue sampler.

Throughput and failures are read back from the attempts (their finish times, bucketed): the
history is exact for as long as retention keeps the attempts. Queue depth and oldest-due age
cannot be read back from the jobs table after the fact (rows change state and are pruned), so
a sampler pass records the live queue once a minute in ``runledger_queue_samples`` and the
charts read those samples; where no sampler ran, the chart says so instead of showing zeros.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, cast

from django.db import connections

from ..db import dashboard_queries
from ..db.transaction import (
    STATEMENT_TIMEOUT,
    cap_timeout,
    execute,
    run_capped_together,
)
from ..domain import (
    DASHBOARD_WINDOWS,
    DashboardWindow,
    ErrorCodeSeries,
    QueueDashboard,
    QueueSampleReport,
)
from ..errors import Code, RunledgerError
from ..validation import validate_search_text
from ._owned import in_owned_transaction

logger = logging.getLogger(__name__)

DEFAULT_USING = "default"

READ_STATEMENT_MS = 3_000
"""The dashboard's reads give up after this long: a page that cannot be drawn quickly should
fail fast rather than hold a connection (each read is designed for tens of milliseconds)."""
READ_LOCK_MS = 1_000
TOP_ERROR_CODES = 5
"""Error codes charted by name; the rest are folded into one "other" series."""
SAMPLE_RETENTION = dt.timedelta(days=7)
"""How long queue samples are kept: a week of minutes is types x 10,080 rows at most."""
SAMPLE_PRUNE_BATCH = 10_000
SAMPLE_STATEMENT_MS = 10_000
"""The sampler's statements give up after this long (it reads the whole live queue)."""


def queue_dashboard(
    *,
    window: str = "hour",
    job_type: str | None = None,
    using: str = DEFAULT_USING,
) -> QueueDashboard:
    """Return throughput, failures by error code, depth and oldest-due age per bucket.

    ``window`` is ``"hour"`` (60 one-minute buckets) or ``"day"`` (288 five-minute buckets),
    ending with the bucket that holds now. ``job_type`` (exact) narrows every series to one
    type; None shows every type together. Every statement is bounded by the window and read
    through an index; they run in one transaction, so they share their buckets.

    Transaction: one read transaction of four statements (one round trip in autocommit), with
    a short statement timeout.

    Raises:
        RunledgerError: ``job.invalid_argument`` (an unknown window, a bad job type), before
            any SQL; a classified database error.
    """
    if window not in DASHBOARD_WINDOWS:
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"window must be one of {', '.join(DASHBOARD_WINDOWS)}"
        )
    exact_type = validate_search_text(job_type, "job_type")
    bucket_seconds, bucket_count = DASHBOARD_WINDOWS[window]
    params = {
        "bucket": dt.timedelta(seconds=bucket_seconds),
        "buckets": bucket_count,
        "job_type": exact_type,
        "top_codes": TOP_ERROR_CODES,
    }
    depth = (
        dashboard_queries.DEPTH_TOTAL if exact_type is None else dashboard_queries.DEPTH_FOR_TYPE
    )
    window_rows, throughput_rows, failure_rows, depth_rows = run_capped_together(
        using,
        (
            dashboard_queries.DASHBOARD_WINDOW,
            dashboard_queries.THROUGHPUT,
            dashboard_queries.FAILURES_BY_CODE,
            depth,
        ),
        params,
        lock_ms=READ_LOCK_MS,
        statement_ms=READ_STATEMENT_MS,
        tag="/* runledger:dashboard */",
        context="read the dashboard",
    )
    generated_at, since = window_rows[0]
    step = dt.timedelta(seconds=bucket_seconds)
    starts = tuple(since + step * index for index in range(bucket_count))
    slot = {start: index for index, start in enumerate(starts)}

    def column(rows: list[tuple[Any, ...]], position: int, empty: Any) -> list[Any]:
        values = [empty] * bucket_count
        for row in rows:
            index = slot.get(row[0])
            if index is not None:
                values[index] = row[position]
        return values

    return QueueDashboard(
        window=cast(DashboardWindow, window),
        job_type=exact_type,
        bucket_seconds=bucket_seconds,
        bucket_starts=starts,
        generated_at=generated_at,
        succeeded=tuple(int(v) for v in column(throughput_rows, 1, 0)),
        retried=tuple(int(v) for v in column(throughput_rows, 2, 0)),
        dead_lettered=tuple(int(v) for v in column(throughput_rows, 3, 0)),
        failures_by_code=_failure_series(failure_rows, slot, bucket_count),
        due=tuple(_int_or_none(v) for v in column(depth_rows, 1, None)),
        scheduled=tuple(_int_or_none(v) for v in column(depth_rows, 2, None)),
        leased=tuple(_int_or_none(v) for v in column(depth_rows, 3, None)),
        oldest_due_age_seconds=tuple(
            None if v is None else float(v) for v in column(depth_rows, 4, None)
        ),
    )


def _failure_series(
    rows: list[tuple[Any, ...]], slot: dict[dt.datetime, int], bucket_count: int
) -> tuple[ErrorCodeSeries, ...]:
    """One series per named code (most failures first, then by code), "other" (None) last."""
    counts: dict[str | None, list[int]] = {}
    for bucket, code, count in rows:
        index = slot.get(bucket)
        if index is None:
            continue
        counts.setdefault(code, [0] * bucket_count)[index] += int(count)
    named = sorted(
        (code for code in counts if code is not None),
        key=lambda code: (-sum(counts[code]), code),
    )
    order: list[str | None] = [*named, *([None] if None in counts else [])]
    return tuple(ErrorCodeSeries(code=code, counts=tuple(counts[code])) for code in order)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def sample_queue(*, using: str = DEFAULT_USING) -> QueueSampleReport:
    """Record the live queue of every job type (and their total) for the current minute, and
    remove samples older than ``SAMPLE_RETENTION`` (one bounded batch).

    Safe to call from many processes at once and more often than once a minute: one holds
    the sampler lock and the others skip; a minute already sampled is not sampled again. Call
    it about once a minute (``manage.py sample_queue --loop``, cron, or a worker's periodic
    hook); minutes without a pass show as gaps in the charts.

    Transaction: owns one short READ COMMITTED transaction.

    Raises:
        RunledgerError: ``job.invalid_argument`` inside an atomic block (the pass owns its
            transaction); a classified database error.
    """
    if connections[using].in_atomic_block:
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT,
            "sample_queue owns its transaction and was called inside an atomic block",
        )

    def body(cursor: Any) -> QueueSampleReport:
        locked = execute(cursor, dashboard_queries.TRY_LOCK_SAMPLER, None, context="sample")
        if not locked.fetchone()[0]:
            return QueueSampleReport(sampled_at=None, job_types=0, pruned=0, skipped="locked")
        done = execute(cursor, dashboard_queries.MINUTE_SAMPLED, None, context="sample")
        if done.fetchone()[0]:
            return QueueSampleReport(sampled_at=None, job_types=0, pruned=0, skipped="done")
        cap_timeout(cursor, STATEMENT_TIMEOUT, SAMPLE_STATEMENT_MS)
        written = execute(
            cursor, dashboard_queries.INSERT_SAMPLES, None, context="sample the queue"
        ).fetchall()
        pruned = execute(
            cursor,
            dashboard_queries.PRUNE_SAMPLES,
            {"keep": SAMPLE_RETENTION, "limit": SAMPLE_PRUNE_BATCH},
            context="prune queue samples",
        ).rowcount
        return QueueSampleReport(
            sampled_at=written[0][0] if written else None,
            job_types=sum(1 for (_, job_type) in written if job_type is not None),
            pruned=max(pruned, 0),
            skipped=None if written else "done",
        )

    report = in_owned_transaction(using, body, operation="sample the queue")
    logger.debug(
        "queue sampled",
        extra={"job_types": report.job_types, "pruned": report.pruned, "skipped": report.skipped},
    )
    return report
