"""The raw SQL of queue control (docs/queue-control.md): pausing and resuming a job type, and
setting its limits. Each is one statement on the definition row; the claim statements that
enforce them are in ``lifecycle_queries``.

Reads come back with a fresh snapshot of their own (a separate statement), so a pause that
waited for a concurrent one reports the pause time that won.
"""

from __future__ import annotations

from typing import Final, LiteralString

_CONTROL_COLUMNS: Final[LiteralString] = """job_type, paused_at, paused_reason, paused_by,
          max_concurrency, rate_limit_count, rate_limit_period_seconds"""

# Pause a running type; a paused one keeps its first pause time, reason and actor (the UPDATE
# re-checks ``paused_at IS NULL`` on the row version it locks, so of two concurrent pauses
# exactly one writes).
PAUSE_JOB_TYPE: Final[LiteralString] = (
    """
/* runledger:pause_job_type */
UPDATE runledger_job_definitions
SET paused_at = now(), paused_reason = %(reason)s, paused_by = %(actor)s
WHERE job_type = %(job_type)s AND paused_at IS NULL
RETURNING """
    + _CONTROL_COLUMNS
)

# Resume a paused type (a running one is left as it is).
RESUME_JOB_TYPE: Final[LiteralString] = (
    """
/* runledger:resume_job_type */
UPDATE runledger_job_definitions
SET paused_at = NULL, paused_reason = NULL, paused_by = NULL
WHERE job_type = %(job_type)s AND paused_at IS NOT NULL
RETURNING """
    + _CONTROL_COLUMNS
)

# Set (or clear, with NULLs) a type's limits; the rate limit's state is kept, so a changed
# rate starts from the tokens already spent.
SET_JOB_TYPE_LIMITS: Final[LiteralString] = (
    """
/* runledger:set_job_type_limits */
UPDATE runledger_job_definitions
SET max_concurrency = %(max_concurrency)s, rate_limit_count = %(rate_limit_count)s,
    rate_limit_period_seconds = %(rate_limit_period_seconds)s
WHERE job_type = %(job_type)s
RETURNING """
    + _CONTROL_COLUMNS
)

# A type's control columns as they stand (after a pause or resume that changed nothing).
JOB_TYPE_CONTROL: Final[LiteralString] = """
SELECT job_type, paused_at, paused_reason, paused_by,
       max_concurrency, rate_limit_count, rate_limit_period_seconds
FROM runledger_job_definitions WHERE job_type = %(job_type)s
"""
