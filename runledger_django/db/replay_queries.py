"""The raw SQL of replaying a succeeded job as a new one (reference 5).

Parameters are ``%(name)s``; values are never formatted into the text. A replay runs three
statements in one READ COMMITTED transaction: lock the source, then look for the request's
lineage with a snapshot taken after that lock, then insert the replay when there is none.
"""

from __future__ import annotations

from typing import Final, LiteralString

# The source job in the caller's scope, locked so that replays of one source take turns: a
# retry that waited here finds the first one's lineage in its next statement. FOR NO KEY UPDATE
# leaves the foreign keys that point at the job (KEY SHARE) and heartbeats of nothing (a
# SUCCEEDED job has no lease) alone.
LOCK_SOURCE: Final[LiteralString] = """
/* runledger:replay_job */
SELECT job.status, job.run_number, job.workflow_step_id IS NOT NULL
FROM runledger_job_queue job
WHERE job.id = %(job_id)s
  AND (%(admin)s OR job.organization_id IS NOT DISTINCT FROM %(organization_id)s)
FOR NO KEY UPDATE
"""

# The replay an earlier request with this key made of this source run, with its current state;
# a matching retry locks the replay's row until the caller commits (claims skip it), a
# conflicting one does not (the reason is compared under the lock's condition).
EXISTING_REPLAY: Final[LiteralString] = """
SELECT replay.replay_job_id, replay.reason, job.status, job.run_number
FROM runledger_job_replays replay
JOIN runledger_job_queue job ON job.id = replay.replay_job_id
WHERE replay.source_job_id = %(job_id)s AND replay.source_run_number = %(run_number)s
  AND replay.request_key = %(request_key)s
"""

LOCK_REPLAY: Final[LiteralString] = """
SELECT job.id FROM runledger_job_queue job WHERE job.id = %(replay_job_id)s FOR UPDATE
"""

# The replay: a new, unkeyed job at run 1 copying the source's job type, tenant, payload,
# priority, max attempts, timeout and execution resource, and nothing else (no progress,
# checkpoint, output, timestamps or idempotency key); its lineage row; and its ENQUEUED event,
# whose payload names the source run, the request key and the reason.
INSERT_REPLAY: Final[LiteralString] = """
WITH source AS (
    SELECT job.job_type, job.organization_id, job.payload, job.priority, job.max_attempts,
           job.timeout_seconds, job.execution_resource_key
    FROM runledger_job_queue job
    WHERE job.id = %(job_id)s
),
inserted AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        next_run_at, execution_resource_key
    )
    SELECT %(replay_job_id)s, job_type, organization_id, payload, priority, max_attempts,
           timeout_seconds, now(), execution_resource_key
    FROM source
    RETURNING id, status, run_number, stage, job_type
),
lineage AS (
    INSERT INTO runledger_job_replays (
        replay_job_id, source_job_id, source_run_number, request_key, reason
    )
    SELECT id, %(job_id)s, %(run_number)s, %(request_key)s, %(reason)s FROM inserted
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage,
           jsonb_build_object('job_type', job_type,
                              'replayed_from_job_id', CAST(%(job_id)s AS text),
                              'replayed_from_run_number', CAST(%(run_number)s AS integer),
                              'replay_request_key', CAST(%(request_key)s AS text),
                              'reason', CAST(%(reason)s AS text))
    FROM inserted
)
SELECT id, status, run_number FROM inserted
"""
