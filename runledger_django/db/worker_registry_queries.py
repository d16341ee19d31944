"""The raw SQL of the worker registry (``runledger_workers``).

The beat is an upsert (the ORM's ``update_or_create`` takes two round trips and races) that
also prunes rows long dead, in the same statement: an idle worker adds one statement per beat
interval and no more. Live means "beat within ``stale_beats`` of its own cadence", judged by
the database clock, so workers and readers never compare clocks of different hosts.
Parameters are ``%(name)s``; values are never formatted into the text.
"""

from __future__ import annotations

from typing import Final, LiteralString

# Register or beat one worker, and delete rows of other workers silent for longer than the
# retention (SIGKILLed, lost with their node). SKIP LOCKED: two workers pruning at once never
# wait for each other. A worker whose row was pruned (or deleted by hand) while it stalled
# gets it back at its next beat; started_at keeps the first insert's time.
BEAT_WORKER: Final[LiteralString] = """
/* runledger:beat_worker */
WITH pruned AS (
    DELETE FROM runledger_workers
    WHERE worker_id IN (
        SELECT old.worker_id FROM runledger_workers old
        WHERE old.last_heartbeat_at < now() - make_interval(secs => %(retention_seconds)s)
          AND old.worker_id <> %(worker_id)s
        FOR UPDATE SKIP LOCKED
    )
    RETURNING 1
)
INSERT INTO runledger_workers AS worker (
    worker_id, hostname, pid, version, job_types, concurrency, heartbeat_seconds,
    started_at, last_heartbeat_at
)
VALUES (
    %(worker_id)s, %(hostname)s, %(pid)s, %(version)s, %(job_types)s::jsonb, %(concurrency)s,
    %(heartbeat_seconds)s, now(), now()
)
ON CONFLICT (worker_id) DO UPDATE
SET job_types = EXCLUDED.job_types,
    concurrency = EXCLUDED.concurrency,
    heartbeat_seconds = EXCLUDED.heartbeat_seconds,
    last_heartbeat_at = now()
RETURNING (SELECT count(*) FROM pruned)
"""

# A clean exit: the row goes with the worker.
DELETE_WORKER: Final[LiteralString] = """
/* runledger:delete_worker */
DELETE FROM runledger_workers WHERE worker_id = %(worker_id)s RETURNING 1
"""

# Live workers per job type (the ORM cannot unnest a JSON list). The table holds one row per
# worker of the fleet, so the scan is as small as the fleet.
LIVE_WORKERS_BY_JOB_TYPE: Final[LiteralString] = """
/* runledger:live_workers_by_job_type */
SELECT job_type.value, count(*)
FROM runledger_workers worker
CROSS JOIN LATERAL jsonb_array_elements_text(worker.job_types) AS job_type (value)
WHERE worker.last_heartbeat_at
      > now() - make_interval(secs => worker.heartbeat_seconds * %(stale_beats)s)
GROUP BY job_type.value
ORDER BY job_type.value
"""
