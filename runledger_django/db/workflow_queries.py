"""The raw SQL of workflows, one named constant each (services/workflows runs them).

Each comment names the ORM gap the statement fills: set-based inserts from arrays (unnest),
``ON CONFLICT ... WHERE`` arbiters, advisory locks, row locks in a fixed order, and data-
modifying CTEs that write a transition's rows in one round trip. Parameters are ``%(name)s``;
values are never formatted into the text. The tag in a statement's first comment names it in
pg_stat_activity (reference 3.13: the lock waits tests observe).

Lock order everywhere (reference 3.13): job rows, then step rows, then the run's release
advisory lock, then the run row, then the active claim.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- starting a run --------------------------------------------------------------------------

# The enabled definitions of a start's job types, FOR SHARE so that no one disables one until
# the start commits (the ORM has FOR UPDATE only; a share lock does not wait for other starts).
DEFINITIONS_FOR_START: Final[LiteralString] = """
/* runledger:workflow_start_definitions */
SELECT job_type, default_priority, max_attempts, default_timeout_seconds
FROM runledger_job_definitions
WHERE job_type = ANY(%(job_types)s::text[]) AND is_enabled
FOR SHARE
"""

# The active key's transaction lock: the scope and the key hashed into the two-int form, so
# starts with one key serialise while every other key goes on (no ORM form).
LOCK_ACTIVE_KEY: Final[LiteralString] = """
SELECT /* runledger:workflow_lock_active_key */
       pg_advisory_xact_lock(hashtext(%(scope)s), hashtext(%(active_key)s))
"""

# The run holding an active key, if any.
ACTIVE_CLAIM: Final[LiteralString] = """
SELECT claim.workflow_run_id, run.status
FROM runledger_workflow_active_claims claim
JOIN runledger_workflow_runs run ON run.id = claim.workflow_run_id
WHERE claim.scope = %(scope)s AND claim.active_key = %(active_key)s
"""

INSERT_ACTIVE_CLAIM: Final[LiteralString] = """
INSERT INTO runledger_workflow_active_claims (workflow_run_id, scope, active_key)
VALUES (%(run_id)s, %(scope)s, %(active_key)s)
"""

_INSERT_RUN: Final[LiteralString] = """
/* runledger:workflow_start_run */
INSERT INTO runledger_workflow_runs (
    id, workflow_type, organization_id, status, idempotency_key, active_key, metadata,
    enqueue_request, fail_fast, result_step_key, steps_total, steps_waiting
)
VALUES (
    %(run_id)s, %(workflow_type)s, %(organization_id)s, %(status)s, %(idempotency_key)s,
    %(active_key)s, CAST(%(metadata)s AS jsonb), CAST(%(request)s AS jsonb), %(fail_fast)s,
    %(result_step_key)s, %(steps_total)s, %(steps_waiting)s
)
"""

# An unkeyed run: always a new row.
INSERT_RUN: Final[LiteralString] = _INSERT_RUN + "RETURNING id"

# A keyed run: the arbiter predicates match the two partial unique indexes, so a second start
# with the key inserts nothing and returns no row (the ORM's ignore_conflicts names no arbiter).
INSERT_RUN_KEYED_ORG: Final[LiteralString] = (
    _INSERT_RUN
    + """ON CONFLICT (workflow_type, organization_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL
DO NOTHING
RETURNING id"""
)
INSERT_RUN_KEYED_GLOBAL: Final[LiteralString] = (
    _INSERT_RUN
    + """ON CONFLICT (workflow_type, idempotency_key)
    WHERE idempotency_key IS NOT NULL AND organization_id IS NULL
DO NOTHING
RETURNING id"""
)

# The run already stored under a key, FOR SHARE (it cannot vanish before the caller commits),
# and whether its stored request equals this one as jsonb ({"a":1} equals {"a":1.0}).
EXISTING_RUN: Final[LiteralString] = """
/* runledger:workflow_existing_run */
SELECT run.id, run.status, run.enqueue_request = CAST(%(request)s AS jsonb),
       run.enqueue_request IS NULL
FROM runledger_workflow_runs run
WHERE run.workflow_type = %(workflow_type)s
  AND run.organization_id IS NOT DISTINCT FROM CAST(%(organization_id)s AS uuid)
  AND run.idempotency_key = %(idempotency_key)s
FOR SHARE
"""

# The whole graph in one statement: steps and edges from arrays, the root steps' jobs (a step
# without prerequisites is released at once) and their ENQUEUED events. The foreign keys
# between the new steps and the new jobs are checked at the end of the statement, when both
# exist. Blocked steps get no job row.
INSERT_GRAPH: Final[LiteralString] = """
/* runledger:workflow_start_graph */
WITH step_rows AS (
    SELECT *
    FROM unnest(%(ids)s::uuid[], %(keys)s::text[], %(kinds)s::text[], %(job_types)s::text[],
                %(payloads)s::text[], %(priorities)s::integer[], %(max_attempts)s::integer[],
                %(timeouts)s::integer[], %(resource_keys)s::text[], %(pending)s::integer[],
                %(job_ids)s::uuid[])
        AS s(id, step_key, kind, job_type, payload, priority, max_attempts, timeout_seconds,
             resource_key, pending, job_id)
),
steps AS (
    INSERT INTO runledger_workflow_steps (
        id, workflow_run_id, step_key, execution_kind, job_type, organization_id, payload,
        priority, max_attempts, timeout_seconds, stage, execution_resource_key, status, job_id,
        released_at, dependency_count_total, dependency_count_pending
    )
    SELECT id, %(run_id)s, step_key, kind, job_type, CAST(%(organization_id)s AS uuid),
           CAST(payload AS jsonb), priority, max_attempts, timeout_seconds,
           CASE WHEN kind = 'JOB' THEN 'queued' END, resource_key,
           CASE WHEN pending > 0 THEN 'BLOCKED'
                WHEN kind = 'JOB' THEN 'ENQUEUED'
                ELSE 'WAITING_FOR_EXTERNAL' END,
           job_id, CASE WHEN pending = 0 THEN now() END, pending, pending
    FROM step_rows
),
edges AS (
    INSERT INTO runledger_workflow_step_dependencies (
        workflow_run_id, prerequisite_step_id, dependent_step_id, release_mode
    )
    SELECT %(run_id)s, edge.prerequisite, edge.dependent, edge.mode
    FROM unnest(%(edge_from)s::uuid[], %(edge_to)s::uuid[], %(edge_modes)s::text[])
        AS edge(prerequisite, dependent, mode)
),
jobs AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        execution_resource_key, workflow_step_id
    )
    SELECT job_id, job_type, CAST(%(organization_id)s AS uuid), CAST(payload AS jsonb), priority,
           max_attempts, timeout_seconds, resource_key, id
    FROM step_rows
    WHERE job_id IS NOT NULL
    RETURNING id, run_number, stage, job_type
),
events AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage,
           jsonb_build_object('job_type', job_type, 'workflow_run_id', %(run_id)s::text)
    FROM jobs
)
SELECT count(*) FROM jobs
"""
