"""The raw SQL of the admin dashboard: its time window, throughput and failures per bucket
from the attempts, depth and oldest-due age per bucket from the queue samples, and the sampler
pass that writes those samples.

Each comment names the ORM gap the statement fills (``date_bin`` buckets, ordered aggregates,
``ON CONFLICT`` on partial unique indexes, advisory locks). Parameters are ``%(name)s``;
values are never formatted into the text. Every read is bounded by the window, which the
statements compute from ``now()``: the page runs them in one transaction, so they agree on
their buckets.
"""

from __future__ import annotations

from typing import Final, LiteralString

# The buckets are aligned on this origin, so a bucket means the same minutes on every page.
_ORIGIN: Final[LiteralString] = "TIMESTAMPTZ '2000-01-01 00:00:00+00'"
# The start of the newest bucket (the one now() falls in), the first bucket of the window, and
# the end of the window.
_LAST: Final[LiteralString] = "date_bin(%(bucket)s::interval, now(), " + _ORIGIN + ")"
_SINCE: Final[LiteralString] = "(" + _LAST + " - (%(buckets)s - 1) * %(bucket)s::interval)"
_UNTIL: Final[LiteralString] = "(" + _LAST + " + %(bucket)s::interval)"


def _windowed(text: LiteralString) -> LiteralString:
    """``text`` with its {origin}, {since} and {until} placeholders filled in."""
    return text.replace("{origin}", _ORIGIN).replace("{since}", _SINCE).replace("{until}", _UNTIL)


# The window every other statement of the page uses (same transaction, same now()).
DASHBOARD_WINDOW: Final[LiteralString] = _windowed("SELECT now(), {since}")

# Attempts that succeeded, were retried or were dead-lettered, per bucket of their finish
# time. idx_job_attempts_finished_metrics holds every column read (an index-only scan of the
# window); date_bin has no ORM function.
THROUGHPUT: Final[LiteralString] = _windowed("""
/* runledger:dashboard_throughput */
SELECT date_bin(%(bucket)s::interval, finished_at, {origin}) AS bucket,
       count(*) FILTER (WHERE outcome = 'SUCCEEDED'),
       count(*) FILTER (WHERE outcome = 'RETRY_SCHEDULED'),
       count(*) FILTER (WHERE outcome = 'DEAD_LETTERED')
FROM runledger_job_attempts
WHERE outcome IN ('SUCCEEDED', 'RETRY_SCHEDULED', 'DEAD_LETTERED')
  AND finished_at >= {since} AND finished_at < {until}
  AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
GROUP BY 1
""")

# Failed attempts (retried or dead-lettered) per bucket and error code: the codes with the
# most failures in the window by name, the rest folded into one NULL code ("other"), so the
# chart's series stay few whatever the handlers raise. The same index finds the window; only
# the failed rows are read from the table (for their error code).
FAILURES_BY_CODE: Final[LiteralString] = _windowed("""
/* runledger:dashboard_failures */
WITH failed AS MATERIALIZED (
    SELECT date_bin(%(bucket)s::interval, finished_at, {origin}) AS bucket,
           coalesce(error_code, '') AS code
    FROM runledger_job_attempts
    WHERE outcome IN ('RETRY_SCHEDULED', 'DEAD_LETTERED')
      AND finished_at >= {since} AND finished_at < {until}
      AND (%(job_type)s::text IS NULL OR job_type = %(job_type)s::text)
),
top_codes AS (
    SELECT code FROM failed GROUP BY code ORDER BY count(*) DESC, code LIMIT %(top_codes)s
)
SELECT failed.bucket, top_codes.code, count(*)
FROM failed LEFT JOIN top_codes ON top_codes.code = failed.code
GROUP BY 1, 2
""")

# Depth and age per bucket from the samples: the last sample's counts in each bucket (a
# consistent snapshot of the queue) and the highest oldest-due age of the bucket. One text
# per population, so each plan uses its partial unique index: one job type, or the totals.
_DEPTH: Final[LiteralString] = _windowed("""
SELECT date_bin(%(bucket)s::interval, sampled_at, {origin}) AS bucket,
       (array_agg(due_count ORDER BY sampled_at DESC))[1],
       (array_agg(scheduled_count ORDER BY sampled_at DESC))[1],
       (array_agg(leased_count ORDER BY sampled_at DESC))[1],
       max(oldest_due_age_seconds)
FROM runledger_queue_samples
WHERE {population}
  AND sampled_at >= {since} AND sampled_at < {until}
GROUP BY 1
""")
DEPTH_FOR_TYPE: Final[LiteralString] = "/* runledger:dashboard_depth */" + _DEPTH.replace(
    "{population}", "job_type IS NOT NULL AND job_type = %(job_type)s::text"
)
DEPTH_TOTAL: Final[LiteralString] = "/* runledger:dashboard_depth */" + _DEPTH.replace(
    "{population}", "job_type IS NULL"
)

# --- the sampler pass ---------------------------------------------------------------------------

# Only one sampler works at a time, across every process: the loser of the lock skips its pass
# (advisory locks have no ORM API). Transaction-scoped, so a crash never leaves it held.
TRY_LOCK_SAMPLER: Final[LiteralString] = (
    "SELECT /* runledger:lock_queue_sampler */ pg_try_advisory_xact_lock(1920298604, 1935764336)"
)

# Whether this minute already has its total row (another sampler came first).
MINUTE_SAMPLED: Final[LiteralString] = """
SELECT EXISTS (
    SELECT 1 FROM runledger_queue_samples
    WHERE job_type IS NULL AND sampled_at = date_trunc('minute', now())
)
"""

# The live queue per job type, as job_metrics counts it (PENDING due and scheduled from
# idx_job_queue_pending_metrics, LEASED from idx_job_queue_leased_expiry), every defined type
# with zeros, and the total of every type, stamped with the current minute. ON CONFLICT DO
# NOTHING (against the partial unique indexes) makes a repeated pass in one minute harmless.
INSERT_SAMPLES: Final[LiteralString] = """
/* runledger:sample_queue */
WITH live AS (
    SELECT job_type,
           count(*) FILTER (WHERE next_run_at <= now()) AS due,
           count(*) FILTER (WHERE next_run_at > now()) AS scheduled,
           0::bigint AS leased,
           0::bigint AS expired,
           min(next_run_at) FILTER (WHERE next_run_at <= now()) AS oldest_due_at
    FROM runledger_job_queue
    WHERE status = 'PENDING'
    GROUP BY job_type
    UNION ALL
    SELECT job_type, 0, 0, count(*), count(*) FILTER (WHERE lease_expires_at < now()), NULL
    FROM runledger_job_queue
    WHERE status = 'LEASED'
    GROUP BY job_type
    UNION ALL
    SELECT job_type, 0, 0, 0, 0, NULL FROM runledger_job_definitions
),
per_type AS MATERIALIZED (
    SELECT job_type, sum(due)::bigint AS due, sum(scheduled)::bigint AS scheduled,
           sum(leased)::bigint AS leased, sum(expired)::bigint AS expired,
           min(oldest_due_at) AS oldest_due_at
    FROM live
    GROUP BY job_type
)
INSERT INTO runledger_queue_samples (
    sampled_at, job_type, due_count, scheduled_count, leased_count, expired_lease_count,
    oldest_due_age_seconds)
SELECT date_trunc('minute', now()), job_type, due, scheduled, leased, expired,
       greatest(coalesce(extract(epoch FROM now() - oldest_due_at), 0), 0)
FROM per_type
UNION ALL
SELECT date_trunc('minute', now()), NULL, coalesce(sum(due), 0), coalesce(sum(scheduled), 0),
       coalesce(sum(leased), 0), coalesce(sum(expired), 0),
       greatest(coalesce(extract(epoch FROM now() - min(oldest_due_at)), 0), 0)
FROM per_type
ON CONFLICT DO NOTHING
RETURNING sampled_at, job_type
"""

# Retention: a bounded batch of the samples older than the kept period, oldest first
# (idx_queue_samples_sampled_at). A pass runs every minute, so a batch keeps up.
PRUNE_SAMPLES: Final[LiteralString] = """
/* runledger:prune_queue_samples */
DELETE FROM runledger_queue_samples
WHERE id IN (
    SELECT id FROM runledger_queue_samples
    WHERE sampled_at < now() - %(keep)s::interval
    ORDER BY sampled_at, id
    LIMIT %(limit)s
)
"""
