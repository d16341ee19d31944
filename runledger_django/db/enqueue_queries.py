"""The raw SQL of the ordinary enqueue: the insert with its partial-index arbiter, the
existing keyed job it converges on, and the definition check.

Each comment names the ORM gap the statement fills. Parameters are ``%(name)s``; values are
never formatted into the text. Scope variants (organization vs global) are separate texts so
PostgreSQL can infer the matching partial unique index and keep generic plans indexable.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- enqueue (INSERT ... SELECT ... FOR SHARE with a partial-index arbiter) ------------------

_ENQUEUE_INSERT_HEAD: Final[LiteralString] = """
WITH definition AS (
    SELECT default_priority, max_attempts, default_timeout_seconds
    FROM runledger_job_definitions
    WHERE job_type = %(job_type)s AND is_enabled = true
      AND (NOT %(require_read_committed)s
           OR current_setting('transaction_isolation') IN ('read committed', 'read uncommitted'))
    FOR SHARE
),
inserted AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, idempotency_key, stage, enqueue_request, execution_resource_key,
        trace_context
    )
    SELECT %(id)s, %(job_type)s, %(organization_id)s, %(payload)s::jsonb,
           COALESCE(CAST(%(priority)s AS integer), definition.default_priority),
           COALESCE(CAST(%(max_attempts)s AS integer), definition.max_attempts),
           COALESCE(CAST(%(timeout_seconds)s AS integer), definition.default_timeout_seconds),
           COALESCE(CAST(%(next_run_at)s AS timestamptz), now()),
           %(idempotency_key)s, %(stage)s, %(snapshot)s::jsonb, %(execution_resource_key)s,
           %(trace_context)s::jsonb
    FROM definition
"""

_ENQUEUE_INSERT_TAIL: Final[LiteralString] = """
    RETURNING id, status, run_number, stage, job_type
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage, jsonb_build_object('job_type', job_type)
    FROM inserted
)
SELECT id, status, run_number FROM inserted
"""

# Unkeyed: always a new row (no arbiter); the ENQUEUED event is written in the same statement.
ENQUEUE_INSERT_UNKEYED: Final[LiteralString] = _ENQUEUE_INSERT_HEAD + _ENQUEUE_INSERT_TAIL

# Keyed, organization scope: the arbiter predicate matches uq_job_queue_type_idempotency_org.
ENQUEUE_INSERT_KEYED_ORG: Final[LiteralString] = (
    _ENQUEUE_INSERT_HEAD
    + """
    ON CONFLICT (job_type, organization_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL DO NOTHING
"""
    + _ENQUEUE_INSERT_TAIL
)

# Keyed, global scope: the arbiter predicate matches uq_job_queue_type_idempotency_global.
ENQUEUE_INSERT_KEYED_GLOBAL: Final[LiteralString] = (
    _ENQUEUE_INSERT_HEAD
    + """
    ON CONFLICT (job_type, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NULL DO NOTHING
"""
    + _ENQUEUE_INSERT_TAIL
)

# A keyed job by its scope's partial unique index. The key is matched as a one-value range and
# the match ordered by it: with sorts disabled (a promotion pass pins that), the unique index is
# then the only index that yields the order, whatever the statistics say. Under stale statistics
# the planner otherwise costs every index scan as reading the whole index, and picks the
# smallest one that filters on the organization or the type: every job of the tenant, per row.
JOB_BY_KEY_ORG: Final[LiteralString] = """
job.job_type = {job_type} AND job.organization_id = {organization_id}
  AND job.idempotency_key >= {key} AND job.idempotency_key <= {key}
ORDER BY job.idempotency_key LIMIT 1"""
JOB_BY_KEY_GLOBAL: Final[LiteralString] = """
job.job_type = {job_type} AND job.organization_id IS NULL
  AND job.idempotency_key >= {key} AND job.idempotency_key <= {key}
ORDER BY job.idempotency_key LIMIT 1"""

_FIND_EXISTING_JOB: Final[LiteralString] = """
SELECT job.id, job.status, job.run_number,
       job.enqueue_request = %(snapshot)s::jsonb AS same_request,
       job.enqueue_request IS NULL AS legacy
FROM runledger_job_queue job
WHERE"""

# The existing keyed job, locked FOR NO KEY UPDATE ("mutation-ready"); snapshot equality is
# decided by jsonb = in PostgreSQL. Separate scope texts keep the partial unique index usable.
FIND_EXISTING_JOB_ORG: Final[LiteralString] = (
    _FIND_EXISTING_JOB
    + JOB_BY_KEY_ORG.replace("{job_type}", "%(job_type)s")
    .replace("{organization_id}", "%(organization_id)s")
    .replace("{key}", "%(idempotency_key)s")
    + " FOR NO KEY UPDATE"
)
FIND_EXISTING_JOB_GLOBAL: Final[LiteralString] = (
    _FIND_EXISTING_JOB
    + JOB_BY_KEY_GLOBAL.replace("{job_type}", "%(job_type)s").replace(
        "{key}", "%(idempotency_key)s"
    )
    + " FOR NO KEY UPDATE"
)

DEFINITION_IS_ENABLED: Final[LiteralString] = """
SELECT EXISTS (
    SELECT 1 FROM runledger_job_definitions WHERE job_type = %(job_type)s AND is_enabled = true
)
"""
