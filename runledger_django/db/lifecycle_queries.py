"""The raw SQL of the job lifecycle (the worker runtime), one named constant each: the claim,
heartbeats and progress, success and failure, the hand-back, the reaper, and LISTEN/NOTIFY
(reference runledger-worker 2-11).

Each transition is ONE statement: a chain of data-modifying CTEs that moves the queue row,
closes or opens its attempt row and appends its events, so a transition is atomic without an
explicit transaction and costs one round trip. Worker-side writes re-check the exact lease
(id, run number, attempt, worker id, still LEASED, lease not expired) *after* taking the row
lock, so a lease that expires while the write waits is refused (reference 2, "lease fence").
The tag comment leads each text so operators and tests can find it in pg_stat_activity. The
caps sent in front of a transition are in ``session_queries``.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- claim -------------------------------------------------------------------------------------

# The fast claim: the PL/pgSQL function ``runledger_claim_jobs`` (migration 0016), whose
# statement is planned once per session (a generic plan, pinned), not on every claim. It leases
# up to ``limit`` due jobs of the given types and marks them running, in one statement
# (reference 3 and 4 fused: the worker starts every job it claims at once, so the claim itself
# is the durable RUNNING mark).
#
# Keyed jobs first pass through a bounded window of free resource keys (``head_window``), from
# which only the first job per key may be a candidate: a dense key cannot fill the batch, and
# unkeyed jobs are never held back. Candidates are locked FOR UPDATE SKIP LOCKED, so claimers
# split the queue; a keyed candidate is leased only if its claim row was inserted, in key
# order (one order for every claimer: no deadlock), and a lost race leaves it PENDING. The
# candidates walk idx_job_queue_claim in its own order and stop at the limit.
#
# Queue control (docs/queue-control.md): only the requested types whose definition is neither
# paused nor limited are claimed here. A limited type is left to CLAIM_LIMITED_JOBS, and the
# claim returns a marker row for it (its id NULL) so the caller knows to run that one. A paused
# type is in neither: no claim leases it from the moment its pause commits.
#
# The columns every claim returns, in this order (services/claim.py decodes them): the fast
# claim's and the limited claim's function share this list.
_CLAIMED_COLUMNS: Final[LiteralString] = """id, run_number, attempt, job_type, organization_id,
       payload, max_attempts, timeout_seconds, checkpoint, claimed_at, lease_expires_at,
       due_at, trace_context, workflow_step_id"""

_CLAIM_CALL: Final[LiteralString] = (
    "SELECT "
    + _CLAIMED_COLUMNS
    + """
FROM runledger_claim_jobs(%(job_types)s::text[], %(limit)s::integer, %(head_window)s::integer,
                          %(worker_id)s::text, %(lease_seconds)s::integer, {job_id})
"""
)

CLAIM_JOBS: Final[LiteralString] = "/* runledger:claim_jobs */\n" + _CLAIM_CALL.replace(
    "{job_id}", "NULL::uuid"
)

# The claim of one job, by id, for the per-row fallback after a failed batch: the same
# function, so the job is leased exactly as a batch would lease it (or skipped, when another
# claimer holds it or its resource key is busy).
CLAIM_ONE_JOB: Final[LiteralString] = "/* runledger:claim_one_job */\n" + _CLAIM_CALL.replace(
    "{job_id}", "%(job_id)s::uuid"
)

# The fast path's job types (the unpaused, unlimited ones among the requested), for the
# fallback's read of candidate ids below (the function has its own copy).
_FAST_SCOPE: Final[LiteralString] = """claim_type AS MATERIALIZED (
    SELECT definition.job_type,
           definition.max_concurrency IS NULL AND definition.rate_limit_count IS NULL AS open
    FROM runledger_job_definitions definition
    WHERE definition.job_type = ANY(%(job_types)s::text[]) AND definition.paused_at IS NULL
),
open_type AS (SELECT array_agg(job_type) AS job_types FROM claim_type WHERE open)"""
_FAST_TYPES: Final[LiteralString] = (
    "job.job_type = ANY(CAST((SELECT job_types FROM open_type) AS text[]))"
)

# --- claims of limited job types (docs/queue-control.md) -------------------------------------

# The claim of the limited types among the worker's: the PL/pgSQL function of migration 0017
# (0015's, its rate limit rewritten as GCRA), planned once per session. It takes a
# transaction-scoped advisory lock per limited type (the two-key form: this key space, the
# type's hash), skipping a type another claimer holds; then, in a later query of the same
# transaction (whose snapshot sees every claim the lock's previous holder committed; READ
# COMMITTED takes one per query), it reads each locked type's definition, counts its LEASED
# jobs (an expired, unreaped lease still counts: its handler may run) and the starts its rate
# admits now (GCRA: the whole emission intervals, period / count, between the later of the
# type's theoretical arrival time and now, and now plus the period, in integer microseconds),
# leases at most what both limits leave, in claim order, as the fast path leases (resource keys
# included), and advances the arrival time by one interval per job leased (one upserted row).
# A type its limit held back (fewer slots than asked, all taken, another job due) gets a marker
# row: id NULL, the reason ("concurrency" or "rate") in the payload column. The lock ends with
# the transaction, so it also works behind PgBouncer in transaction mode.
LIMIT_LOCK_SPACE: Final[int] = 1920298605
CLAIM_LIMITED_JOBS: Final[LiteralString] = (
    "/* runledger:claim_limited_jobs */\nSELECT "
    + _CLAIMED_COLUMNS
    + """
FROM runledger_claim_limited(%(job_types)s::text[], %(limit)s, %(head_window)s,
                             %(worker_id)s, %(lease_seconds)s, %(limit_lock_space)s)
"""
)

# How long until the earliest PENDING job of the types comes due (negative: due now; NULL: none
# within the horizon). A quiet worker's look for work nobody announced: one plain read, no lock,
# no timeout prelude. idx_job_queue_pending_metrics holds every PENDING row's type and time, so
# it is read index-only; the horizon bounds what it reads on a queue of far-future jobs. A
# paused type's backlog is not work (its resume sends a NOTIFY), so it never looks due.
PEEK_DUE_JOBS: Final[LiteralString] = """
/* runledger:peek_due_jobs */
SELECT extract(epoch FROM min(job.next_run_at) - now())::float8
FROM runledger_job_queue job
WHERE job.status = 'PENDING'
  AND job.job_type = ANY(ARRAY(
      SELECT definition.job_type FROM runledger_job_definitions definition
      WHERE definition.job_type = ANY(%(job_types)s::text[]) AND definition.paused_at IS NULL
  ))
  AND job.next_run_at <= now() + %(horizon_seconds)s * interval '1 second'
"""

# The due jobs a failed batch claim covered, in claim order, without locks: each is then
# claimed alone (CLAIM_ONE_JOB), so one row that cannot be leased costs the others nothing.
# The fast path's types only: paused and limited types are not the fallback's.
CLAIM_CANDIDATE_IDS: Final[LiteralString] = (
    "WITH "
    + _FAST_SCOPE
    + """
SELECT job.id FROM runledger_job_queue job
WHERE job.status = 'PENDING'
  AND job.next_run_at <= now()
  AND """
    + _FAST_TYPES
    + """
ORDER BY job.priority DESC, job.next_run_at, job.created_at
LIMIT %(limit)s
"""
)

# Dead-letter a PENDING job that cannot be leased as it is stored (the claim of it alone failed
# on its own values: an attempt counter at its bound, attempt rows ahead of it). No attempt
# row: nothing ran. The event says why, as a terminal failure's does.
DEAD_LETTER_UNCLAIMABLE: Final[LiteralString] = """
/* runledger:dead_letter_unclaimable_job */
WITH moved AS (
    UPDATE runledger_job_queue job
    SET status = 'DEAD_LETTERED',
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        finished_at = now(),
        output = NULL,
        status_reason = 'TERMINAL',
        last_error_code = %(code)s,
        last_error_message = %(message)s
    WHERE job.id = %(job_id)s AND job.status = 'PENDING'
    RETURNING job.id, job.run_number, job.attempt, job.stage, job.progress_done,
              job.progress_total, job.workflow_step_id
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload
    )
    SELECT id, run_number, NULLIF(attempt, 0), 'DEAD_LETTERED', stage, progress_done,
           progress_total,
           jsonb_build_object('kind', 'TERMINAL', 'error_code', CAST(%(code)s AS text),
                              'reason', 'FAILURE_KIND_NON_RETRYABLE')
    FROM moved
)
SELECT id, workflow_step_id FROM moved
"""

# --- the lease fence ------------------------------------------------------------------------

# The exact lease, without the expiry test: used to take the row lock. The expiry is tested
# again (against clock_timestamp()) once the lock is held.
_EXACT_LEASE: Final[LiteralString] = """
    job.id = %(job_id)s AND job.run_number = %(run_number)s AND job.attempt = %(attempt)s
    AND job.worker_id = %(worker_id)s AND job.status = 'LEASED'
    AND job.lease_expires_at IS NOT NULL
"""

_LIVE_LEASE: Final[LiteralString] = _EXACT_LEASE + " AND job.lease_expires_at > clock_timestamp()\n"

# "LEASED", written so that no index can take it as a condition. The statements that lock many
# leases reach their rows by primary key; given ``status = 'LEASED'`` as well, PostgreSQL 18
# with stale statistics walked every LEASED row of an index that holds the status (skipping its
# leading column) instead.
_NOT_AN_INDEX_QUAL_LEASED: Final[LiteralString] = "(job.status = 'LEASED') IS TRUE"

# Renew many leases of one worker at once: the PL/pgSQL function ``runledger_heartbeat_leases``
# (migration 0016, planned once per session). Rows another session has locked (a handler
# holding its own job row, a cancel in flight) are skipped, not waited for: the caller retries
# those shortly, so one busy row never delays the heartbeats of the others. Each lease comes
# back renewed, busy (still held, row locked elsewhere) or lost; a renewal writes a HEARTBEAT
# event.
HEARTBEAT_LEASES: Final[LiteralString] = """
/* runledger:heartbeat_leases */
SELECT id, renewed, busy
FROM runledger_heartbeat_leases(%(job_ids)s::uuid[], %(run_numbers)s::integer[],
                                %(attempts)s::integer[], %(worker_id)s::text,
                                %(lease_seconds)s::integer)
"""

# Progress, stage and checkpoint writes of a running handler (reference 4): waits for the row
# lock (bounded by the caller's lock cap), merges the omitted fields with the stored ones,
# and writes only when the merged progress is valid and the lease is still live. Returns
# whether the lease matched, whether the merged progress is valid, and whether it wrote.
UPDATE_PROGRESS: Final[LiteralString] = (
    """
/* runledger:update_job_progress */
WITH locked AS MATERIALIZED (
    SELECT job.id, job.progress_done, job.progress_total
    FROM runledger_job_queue job
    WHERE """
    + _EXACT_LEASE
    + """
    FOR UPDATE
),
merged AS MATERIALIZED (
    SELECT id,
           COALESCE(CAST(%(progress_done)s AS bigint), progress_done) AS done,
           COALESCE(CAST(%(progress_total)s AS bigint), progress_total) AS total
    FROM locked
),
checked AS MATERIALIZED (
    SELECT id, done, total,
           (done IS NULL OR done >= 0) AND (total IS NULL OR total >= 0)
               AND (done IS NULL OR total IS NULL OR done <= total) AS valid
    FROM merged
),
updated AS (
    UPDATE runledger_job_queue job
    SET progress_done = checked.done,
        progress_total = checked.total,
        stage = COALESCE(CAST(%(stage)s AS text), job.stage),
        checkpoint = CASE WHEN %(set_checkpoint)s THEN CAST(%(checkpoint)s AS jsonb)
                          ELSE job.checkpoint END
    FROM checked
    WHERE job.id = checked.id AND checked.valid AND """
    + _LIVE_LEASE
    + """
    RETURNING job.id, job.run_number, job.attempt, job.stage, job.progress_done,
              job.progress_total
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total
    )
    SELECT updated.id, updated.run_number, updated.attempt, kind.event_type, updated.stage,
           updated.progress_done, updated.progress_total
    FROM updated
    CROSS JOIN LATERAL (
        VALUES (1, 'STAGE_CHANGED', CAST(%(stage)s AS text) IS NOT NULL),
               (2, 'PROGRESS', CAST(%(progress_done)s AS bigint) IS NOT NULL
                               OR CAST(%(progress_total)s AS bigint) IS NOT NULL)
    ) AS kind(position, event_type, wanted)
    WHERE kind.wanted
    ORDER BY kind.position
)
SELECT (SELECT count(*) FROM locked) AS matched,
       COALESCE((SELECT bool_and(valid) FROM checked), true) AS valid,
       (SELECT count(*) FROM updated) AS written
"""
)

# --- outcomes -----------------------------------------------------------------------------

# The outcomes are PL/pgSQL functions of migration 0016 (planned once per session). Each is
# fenced by the exact lease: the row is locked by (id, run number, attempt, worker, LEASED),
# then the lease is checked against clock_timestamp() under the lock, so a lease that expired
# while the write waited is refused. ``workflow`` false leaves a workflow step's job untouched
# (its dependents must be released in the same transaction; the service then sends it again
# inside one). A success's finish time is the statement's: one written at the end of an atomic
# handler's transaction finished then, not when that transaction began.

# Success (reference 6): SUCCEEDED with the handler's output, the attempt closed, one event.
# Returns the finish time and the workflow step id; no row: the fence refused it.
COMPLETE_SUCCESS: Final[LiteralString] = """
/* runledger:complete_job_success */
SELECT finished_at, workflow_step_id
FROM runledger_complete_success(%(job_id)s::uuid, %(run_number)s::integer,
                                %(attempt)s::integer, %(worker_id)s::text, %(output)s::text,
                                %(workflow)s::boolean)
"""

# Success of many leases of one worker in one statement (a group commit: executors that finish
# together share one transaction, one WAL flush). Each lease is fenced exactly as in
# COMPLETE_SUCCESS; each row is reached by primary key. Returns the ids recorded (and their
# workflow step ids); a lease missing was refused.
COMPLETE_SUCCESS_MANY: Final[LiteralString] = """
/* runledger:complete_jobs_success */
SELECT id, workflow_step_id
FROM runledger_complete_success_many(%(job_ids)s::uuid[], %(run_numbers)s::integer[],
                                     %(attempts)s::integer[], %(outputs)s::text[],
                                     %(worker_id)s::text, %(workflow)s::boolean)
"""

# Failure (reference 7): retry at the handler's requested time or the policy backoff, or
# dead-letter when the kind is not retryable or the attempts are spent. The disposition is
# decided under the row lock from the stored attempt and max_attempts, on the database clock;
# invalid retry timing (checked by the caller, ``timing_valid``) may only dead-letter, never
# retry. Returns the status, the next run time (NULL for a dead letter) and the step id.
COMPLETE_FAILURE: Final[LiteralString] = """
/* runledger:complete_job_failure */
SELECT status, next_run_at, workflow_step_id
FROM runledger_complete_failure(
    %(job_id)s::uuid, %(run_number)s::integer, %(attempt)s::integer, %(worker_id)s::text,
    %(workflow)s::boolean, %(retryable)s::boolean, %(kind)s::text, %(code)s::text,
    %(message)s::text, %(error_class)s::text, %(traceback)s::text,
    %(policy_retry_delay_ms)s::integer, %(retry_after_ms)s::bigint,
    %(retry_at)s::timestamptz, %(timing_valid)s::boolean)
"""

# --- continuation and settling an atomic completion ---------------------------------------

# Continuation (reference 8), timed like a success (statement_timestamp: the end of an atomic
# slice's transaction, not its start): the slice ends as a success of its attempt, and the same job comes
# back PENDING as its next run (run_number + 1, attempt 0: a fresh attempt budget), stage
# queued, due at the lock's clock plus the delay, with the new checkpoint (or the stored one)
# and its progress kept. Leaving LEASED releases an execution resource through the claim
# trigger, so the next slice contends for it again. The REQUEUED event is written on the run
# that just ended. Fenced like a success: the row is locked by the exact lease, then the live
# lease is checked against the clock. Returns the next run number and when it is due.
CONTINUE_JOB: Final[LiteralString] = (
    "/* runledger:continue_job */\n"
    + """WITH locked AS MATERIALIZED (
    SELECT job.id, clock_timestamp() AS base FROM runledger_job_queue job
    WHERE """
    + _EXACT_LEASE
    + " AND job.workflow_step_id IS NULL"
    + """
    FOR UPDATE
),
advanced AS (
    UPDATE runledger_job_queue job
    SET status = 'PENDING',
        stage = 'queued',
        run_number = job.run_number + 1,
        attempt = 0,
        next_run_at = locked.base
            + CAST(%(delay_us)s AS bigint) * interval '1 microsecond',
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        started_at = NULL,
        finished_at = NULL,
        checkpoint = CASE WHEN %(set_checkpoint)s THEN CAST(%(checkpoint)s AS jsonb)
                          ELSE job.checkpoint END,
        output = NULL,
        status_reason = 'HANDLER_CONTINUATION',
        last_error_code = NULL,
        last_error_message = NULL
    FROM locked
    WHERE job.id = locked.id AND """
    + _LIVE_LEASE
    + """
    RETURNING job.id, job.run_number, job.next_run_at, job.progress_done, job.progress_total
),
attempt_row AS (
    UPDATE runledger_job_attempts attempt_row
    SET finished_at = statement_timestamp(), outcome = 'CONTINUED'
    FROM advanced
    WHERE attempt_row.job_id = advanced.id AND attempt_row.run_number = %(run_number)s
      AND attempt_row.attempt = %(attempt)s
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload,
        occurred_at
    )
    SELECT id, %(run_number)s, %(attempt)s, 'REQUEUED', 'queued', progress_done,
           progress_total,
           jsonb_build_object('reason', 'HANDLER_CONTINUATION',
                              'requeue_kind', 'HANDLER_CONTINUATION',
                              'next_run_number', run_number,
                              'next_run_at', next_run_at,
                              'delay_microseconds', CAST(%(delay_us)s AS bigint)),
           statement_timestamp()
    FROM advanced
)
SELECT run_number, next_run_at FROM advanced
"""
)

# After a commit whose outcome is unknown (the connection broke during COMMIT): wait for the
# job's row lock, which the completion statement took and which the old transaction holds
# until it has committed or aborted, whatever its client saw. Then the attempt row, read by a
# second statement with a snapshot taken after that wait, says what happened: SUCCEEDED or
# CONTINUED means the completion committed (nobody else writes those outcomes into this
# worker's attempt).
LOCK_JOB_ROW: Final[LiteralString] = """
/* runledger:settle_atomic_commit */
SELECT job.id FROM runledger_job_queue job WHERE job.id = %(job_id)s FOR UPDATE
"""

ATTEMPT_OUTCOME: Final[LiteralString] = """
SELECT attempt_row.outcome FROM runledger_job_attempts attempt_row
WHERE attempt_row.job_id = %(job_id)s AND attempt_row.run_number = %(run_number)s
  AND attempt_row.attempt = %(attempt)s
"""

# Hand leases back (worker shutdown or a stuck worker): the jobs are due again at once and the
# interrupted attempt stays on record; it is not a failure, so it never dead-letters a job.
# The rows are reached by primary key with the ids the planner sees. No ORDER BY: with sorts
# pinned off it would walk the whole primary key in order, and only this worker's own
# statements ever wait for several of its rows.
HAND_BACK_LEASES: Final[LiteralString] = (
    """
/* runledger:hand_back_leases */
WITH lease AS (
    SELECT *
    FROM unnest(%(job_ids)s::uuid[], %(run_numbers)s::integer[], %(attempts)s::integer[])
        AS lease(id, run_number, attempt)
),
locked AS MATERIALIZED (
    SELECT job.id
    FROM runledger_job_queue job
    WHERE job.id = ANY(%(job_ids)s::uuid[])
      AND (job.id, job.run_number, job.attempt) IN (
              SELECT id, run_number, attempt FROM lease)
      AND job.worker_id = %(worker_id)s AND """
    + _NOT_AN_INDEX_QUAL_LEASED
    + """
    FOR UPDATE OF job
),
released AS (
    UPDATE runledger_job_queue job
    SET status = 'PENDING',
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        next_run_at = now(),
        output = NULL,
        status_reason = %(reason)s
    FROM locked
    WHERE job.id = locked.id AND job.worker_id = %(worker_id)s AND job.status = 'LEASED'
    RETURNING job.id, job.run_number, job.attempt, job.stage
),
attempt_row AS (
    UPDATE runledger_job_attempts attempt_row
    SET finished_at = now(), outcome = 'INTERRUPTED'
    FROM released
    WHERE attempt_row.job_id = released.id AND attempt_row.run_number = released.run_number
      AND attempt_row.attempt = released.attempt
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, attempt, event_type, stage, payload)
    SELECT id, run_number, attempt, 'REQUEUED', stage,
           jsonb_build_object('reason', CAST(%(reason)s AS text), 'requeue_kind', 'BASIC')
    FROM released
)
SELECT id FROM released
"""
)

# --- the reaper ------------------------------------------------------------------------------

# Expired leases of the given types (reference 10): retried after a flat delay, or dead-lettered
# when the attempts are spent. SKIP LOCKED passes over rows a late worker is still writing.
# ``only_job_id`` restricts the pass to one row (the per-row fallback after a failed batch).
# Only a retried job returns its next_run_at; a dead letter's was never the reaper's.
REAP_EXPIRED_LEASES: Final[LiteralString] = """
/* runledger:reap_expired_leases */
WITH expired AS MATERIALIZED (
    SELECT job.id, job.attempt >= job.max_attempts AS dead, job.stage,
           job.last_heartbeat_at, attempt_row.leased_at
    FROM runledger_job_queue job
    LEFT JOIN runledger_job_attempts attempt_row
      ON attempt_row.job_id = job.id AND attempt_row.run_number = job.run_number
     AND attempt_row.attempt = job.attempt
    WHERE job.status = 'LEASED' AND job.lease_expires_at < now()
      AND job.job_type = ANY(%(job_types)s::text[])
      AND (CAST(%(only_job_id)s AS uuid) IS NULL OR job.id = CAST(%(only_job_id)s AS uuid))
    ORDER BY job.lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE OF job SKIP LOCKED
),
moved AS (
    UPDATE runledger_job_queue job
    SET status = CASE WHEN expired.dead THEN 'DEAD_LETTERED' ELSE 'PENDING' END,
        lease_expires_at = NULL,
        last_heartbeat_at = NULL,
        worker_id = NULL,
        finished_at = CASE WHEN expired.dead THEN now() ELSE job.finished_at END,
        next_run_at = CASE WHEN expired.dead THEN job.next_run_at
                           ELSE now() + %(retry_delay_ms)s * interval '1 millisecond' END,
        output = NULL,
        status_reason = 'LEASE_EXPIRED',
        last_error_code = 'job.lease_expired',
        last_error_message = 'Job lease expired before completion.'
    FROM expired
    WHERE job.id = expired.id AND job.status = 'LEASED'
    RETURNING job.id, job.run_number, job.attempt, job.status, job.next_run_at, job.stage,
              job.progress_done, job.progress_total, expired.dead, job.job_type,
              job.workflow_step_id,
              expired.stage = 'running' AND (expired.last_heartbeat_at IS NULL
                                             OR expired.last_heartbeat_at <= expired.leased_at)
                  AS started_without_renewal_heartbeat
),
attempt_row AS (
    UPDATE runledger_job_attempts attempt_row
    SET finished_at = now(),
        outcome = CASE WHEN moved.dead THEN 'DEAD_LETTERED' ELSE 'RETRY_SCHEDULED' END,
        failure_kind = 'LEASE_EXPIRED',
        error_code = 'job.lease_expired',
        error_message = 'Job lease expired before completion.',
        retry_delay_ms = CASE WHEN moved.dead THEN NULL ELSE %(retry_delay_ms)s END,
        effective_next_run_at = CASE WHEN moved.dead THEN NULL ELSE moved.next_run_at END,
        retry_timing_source = CASE WHEN moved.dead THEN NULL ELSE 'POLICY' END
    FROM moved
    WHERE attempt_row.job_id = moved.id AND attempt_row.run_number = moved.run_number
      AND attempt_row.attempt = moved.attempt
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload
    )
    SELECT moved.id, moved.run_number, moved.attempt, kind.event_type, moved.stage,
           moved.progress_done, moved.progress_total, kind.payload
    FROM moved
    CROSS JOIN LATERAL (
        VALUES
            (1, 'FAILED',
             jsonb_build_object('kind', 'LEASE_EXPIRED', 'error_code', 'job.lease_expired',
                                'error_message', 'Job lease expired before completion.',
                                'started_without_renewal_heartbeat',
                                moved.started_without_renewal_heartbeat)),
            (2, CASE WHEN moved.dead THEN 'DEAD_LETTERED' ELSE 'RETRY_SCHEDULED' END,
             CASE WHEN moved.dead
                  THEN jsonb_build_object('kind', 'LEASE_EXPIRED',
                                          'error_code', 'job.lease_expired',
                                          'reason', 'LEASE_EXPIRED',
                                          'started_without_renewal_heartbeat',
                                          moved.started_without_renewal_heartbeat)
                  ELSE jsonb_build_object('kind', 'LEASE_EXPIRED',
                                          'retry_delay_ms', %(retry_delay_ms)s,
                                          'next_run_at', moved.next_run_at,
                                          'started_without_renewal_heartbeat',
                                          moved.started_without_renewal_heartbeat) END)
    ) AS kind(position, event_type, payload)
    ORDER BY moved.id, kind.position
)
SELECT id, status, CASE WHEN dead THEN NULL ELSE next_run_at END, job_type, workflow_step_id
FROM moved
"""

# The expired leases a failed batch covered, for the per-row fallback (no lock: each row is
# retried in its own savepoint, which locks it).
EXPIRED_LEASE_IDS: Final[LiteralString] = """
SELECT id FROM runledger_job_queue
WHERE status = 'LEASED' AND lease_expires_at < now()
  AND job_type = ANY(%(job_types)s::text[])
ORDER BY lease_expires_at
LIMIT %(limit)s
"""

# A row the reaper could not move: push its lease forward so it stops heading every batch.
DEFER_EXPIRED_LEASE: Final[LiteralString] = """
UPDATE runledger_job_queue
SET lease_expires_at = now() + %(retry_delay_ms)s * interval '1 millisecond'
WHERE id = %(job_id)s AND status = 'LEASED' AND lease_expires_at < now()
"""

# Claims no live lease owns any more: a cancelled lease past its old expiry, or a row whose job
# left that exact lease by a path the triggers did not see (reference 10.3). A LEASED job
# whose lease merely expired keeps its claim until the reaper moves the job.
RELEASE_STALE_RESOURCE_CLAIMS: Final[LiteralString] = """
/* runledger:release_stale_resource_claims */
DELETE FROM runledger_job_execution_resource_claims claim
WHERE claim.resource_key IN (
    SELECT stale.resource_key
    FROM runledger_job_execution_resource_claims stale
    WHERE (stale.release_after <= clock_timestamp()
           OR stale.lease_expires_at <= clock_timestamp())
      AND NOT EXISTS (
          SELECT 1 FROM runledger_job_queue job
          WHERE job.id = stale.job_id AND job.status = 'LEASED'
            AND job.run_number = stale.run_number AND job.attempt = stale.attempt
            AND job.worker_id = stale.worker_id
      )
    ORDER BY COALESCE(stale.release_after, stale.lease_expires_at)
    LIMIT %(limit)s
    FOR UPDATE OF stale SKIP LOCKED
)
RETURNING claim.resource_key
"""

# --- wake-ups ----------------------------------------------------------------------------------

# A worker's listening connection subscribes to the channels services/wakeup.py notifies.
LISTEN_JOBS: Final[LiteralString] = "LISTEN runledger_jobs"
LISTEN_INTENTS: Final[LiteralString] = "LISTEN runledger_intents"

# The listener's probe: subscribe to a private channel, and drop it once the probe is decided.
# LISTEN takes an identifier, never a parameter: {channel} is filled by psycopg.sql.Identifier.
LISTEN_PROBE: Final[LiteralString] = "LISTEN {channel}"
UNLISTEN_PROBE: Final[LiteralString] = "UNLISTEN {channel}"

# Wake listeners after a commit. synchronous_commit is switched off for this tiny transaction
# only: a notification needs no durable commit, and it must not wait for a WAL flush.
NOTIFY: Final[LiteralString] = (
    "SELECT set_config('synchronous_commit', 'off', true), pg_notify(%(channel)s, '')"
)
