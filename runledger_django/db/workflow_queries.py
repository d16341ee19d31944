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

# The run holding an active key, if any. A claim whose run finished while a canceled job of
# it still held a live lease was kept (release_pending): once no such lease is live, the key
# is free and the claim goes (reference 3.11; the next start does what the seed's reaper did).
ACTIVE_CLAIM: Final[LiteralString] = """
SELECT claim.workflow_run_id, run.status,
       claim.release_pending AND NOT EXISTS (
           SELECT 1 FROM runledger_workflow_steps step
           JOIN runledger_job_queue job ON job.id = step.job_id
           WHERE step.workflow_run_id = claim.workflow_run_id AND job.status = 'CANCELED'
             AND job.lease_expires_at > clock_timestamp()) AS releasable
FROM runledger_workflow_active_claims claim
JOIN runledger_workflow_runs run ON run.id = claim.workflow_run_id
WHERE claim.scope = %(scope)s AND claim.active_key = %(active_key)s
"""

DELETE_ACTIVE_CLAIM: Final[LiteralString] = """
DELETE FROM runledger_workflow_active_claims
WHERE scope = %(scope)s AND active_key = %(active_key)s
"""

INSERT_ACTIVE_CLAIM: Final[LiteralString] = """
INSERT INTO runledger_workflow_active_claims (workflow_run_id, scope, active_key)
VALUES (%(run_id)s, %(scope)s, %(active_key)s)
"""

_INSERT_RUN: Final[LiteralString] = """
/* runledger:workflow_start_run */
INSERT INTO runledger_workflow_runs (
    id, workflow_type, organization_id, status, idempotency_key, active_key, metadata,
    enqueue_request, fail_fast, result_step_key, steps_total, steps_waiting, steps_succeeded
)
VALUES (
    %(run_id)s, %(workflow_type)s, %(organization_id)s, %(status)s, %(idempotency_key)s,
    %(active_key)s, CAST(%(metadata)s AS jsonb), CAST(%(request)s AS jsonb), %(fail_fast)s,
    %(result_step_key)s, %(steps_total)s, %(steps_waiting)s, %(steps_succeeded)s
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
# without prerequisites is released at once) and their ENQUEUED events. A recovery run also
# carries steps over as SUCCEEDED with their outputs (``carried``); an append inserts its
# steps BLOCKED (``hold``) and decides the ready ones with PROPAGATE. The foreign keys
# between the new steps and the new jobs are checked at the end of the statement, when both
# exist. Blocked steps get no job row.
INSERT_GRAPH: Final[LiteralString] = """
/* runledger:workflow_start_graph */
WITH step_rows AS (
    SELECT *
    FROM unnest(%(ids)s::uuid[], %(keys)s::text[], %(kinds)s::text[], %(job_types)s::text[],
                %(payloads)s::text[], %(priorities)s::integer[], %(max_attempts)s::integer[],
                %(timeouts)s::integer[], %(resource_keys)s::text[], %(pending)s::integer[],
                %(job_ids)s::uuid[], %(totals)s::integer[], %(carried)s::boolean[],
                %(outputs)s::text[], %(unsatisfied)s::integer[])
        AS s(id, step_key, kind, job_type, payload, priority, max_attempts, timeout_seconds,
             resource_key, pending, job_id, total, carried, output, unsatisfied)
),
steps AS (
    INSERT INTO runledger_workflow_steps (
        id, workflow_run_id, step_key, execution_kind, job_type, organization_id, payload,
        priority, max_attempts, timeout_seconds, stage, execution_resource_key, status, job_id,
        released_at, dependency_count_total, dependency_count_pending, finished_at, output,
        dependency_count_unsatisfied
    )
    SELECT id, %(run_id)s, step_key, kind, job_type, CAST(%(organization_id)s AS uuid),
           CAST(payload AS jsonb), priority, max_attempts, timeout_seconds,
           CASE WHEN kind = 'JOB' THEN 'queued' END, resource_key,
           CASE WHEN carried THEN 'SUCCEEDED'
                WHEN pending > 0 OR %(hold)s THEN 'BLOCKED'
                WHEN kind = 'JOB' THEN 'ENQUEUED'
                ELSE 'WAITING_FOR_EXTERNAL' END,
           job_id, CASE WHEN (pending = 0 AND NOT %(hold)s) OR carried THEN now() END, total,
           pending, CASE WHEN carried THEN now() END, CAST(output AS jsonb), unsatisfied
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

# --- finishing steps and propagating (reference 3.3) -----------------------------------------

# The run's release lock (reference 3.13): completions and releases take the shared form and
# never exclude each other; a cancellation takes the exclusive form. The key is the run id
# folded to 64 bits by the service. Waits are bounded by the transaction's lock_timeout.
LOCK_RUN_SHARED: Final[LiteralString] = """
SELECT /* runledger:workflow_lock_run_shared */ pg_advisory_xact_lock_shared(%(lock_key)s)
"""
TRY_LOCK_RUN_SHARED: Final[LiteralString] = """
SELECT /* runledger:workflow_try_lock_run_shared */
       pg_try_advisory_xact_lock_shared(%(lock_key)s)
"""
LOCK_RUN_EXCLUSIVE: Final[LiteralString] = """
SELECT /* runledger:workflow_lock_run_exclusive */ pg_advisory_xact_lock(%(lock_key)s)
"""

# The steps of jobs that just reached a terminal status, set to the step outcome, in id order
# (two batches finishing steps of one run never wait on each other in a cycle). A step
# already terminal (its run was canceled) is left alone and not returned. A success copies
# the job's output (written by this transaction's completion statement); a failure or a
# cancel copies the job's reason and error.
FINISH_JOB_STEPS: Final[LiteralString] = """
/* runledger:workflow_finish_job_steps */
WITH finished AS (
    SELECT * FROM unnest(%(step_ids)s::uuid[], %(outcomes)s::text[]) AS f(id, outcome)
),
locked AS MATERIALIZED (
    SELECT step.id, finished.outcome, step.job_id
    FROM runledger_workflow_steps step
    JOIN finished ON finished.id = step.id
    WHERE step.status = 'ENQUEUED'
    ORDER BY step.id
    FOR UPDATE OF step
)
UPDATE runledger_workflow_steps step
SET status = locked.outcome,
    finished_at = COALESCE(step.finished_at, statement_timestamp()),
    output = CASE WHEN locked.outcome = 'SUCCEEDED' THEN job.output END,
    status_reason = CASE WHEN locked.outcome = 'SUCCEEDED' THEN NULL ELSE job.status_reason END,
    last_error_code = CASE WHEN locked.outcome = 'SUCCEEDED' THEN NULL
                           ELSE job.last_error_code END,
    last_error_message = CASE WHEN locked.outcome = 'SUCCEEDED' THEN NULL
                              ELSE job.last_error_message END
FROM locked
LEFT JOIN runledger_job_queue job ON job.id = locked.job_id
WHERE step.id = locked.id
RETURNING step.id, step.workflow_run_id, step.status
"""

# The same as FINISH_JOB_STEPS for the worker's own workflow completions, sent in the round
# trip of the completion statement: the steps are found from the jobs that statement just
# made terminal (a step still ENQUEUED behind a terminal job can only be this transaction's:
# whoever else ended the job finished its step in the same transaction), then the shared
# release lock of each run is taken, after the step rows (the lock order of 3.13).
FINISH_JOBS_AND_LOCK_RUNS: Final[LiteralString] = """
/* runledger:workflow_finish_jobs */
WITH job AS MATERIALIZED (
    SELECT job.id, job.workflow_step_id, job.status, job.output, job.status_reason,
           job.last_error_code, job.last_error_message
    FROM runledger_job_queue job
    WHERE job.id = ANY(%(finish_job_ids)s::uuid[]) AND job.workflow_step_id IS NOT NULL
      AND job.status IN ('SUCCEEDED', 'DEAD_LETTERED', 'CANCELED')
),
locked AS MATERIALIZED (
    SELECT step.id,
           CASE job.status WHEN 'SUCCEEDED' THEN 'SUCCEEDED'
                           WHEN 'DEAD_LETTERED' THEN 'FAILED' ELSE 'CANCELED' END AS outcome,
           job.output, job.status_reason, job.last_error_code, job.last_error_message
    FROM runledger_workflow_steps step
    JOIN job ON job.workflow_step_id = step.id
    WHERE step.status = 'ENQUEUED'
    ORDER BY step.id
    FOR UPDATE OF step
),
finished AS (
    UPDATE runledger_workflow_steps step
    SET status = locked.outcome,
        finished_at = COALESCE(step.finished_at, statement_timestamp()),
        output = CASE WHEN locked.outcome = 'SUCCEEDED' THEN locked.output END,
        status_reason = CASE WHEN locked.outcome = 'SUCCEEDED' THEN NULL
                             ELSE locked.status_reason END,
        last_error_code = CASE WHEN locked.outcome = 'SUCCEEDED' THEN NULL
                               ELSE locked.last_error_code END,
        last_error_message = CASE WHEN locked.outcome = 'SUCCEEDED' THEN NULL
                                  ELSE locked.last_error_message END
    FROM locked
    WHERE step.id = locked.id
    RETURNING step.id, step.workflow_run_id, step.status
),
-- The run's release-lock key as the service computes it (run_lock_key): the UUID's high and
-- low 64 bits XORed, XORed with the namespace 0x72756e6c00000000.
locks AS (
    SELECT pg_advisory_xact_lock_shared(
        ('x' || left(replace(workflow_run_id::text, '-', ''), 16))::bit(64)::bigint
        # ('x' || right(replace(workflow_run_id::text, '-', ''), 16))::bit(64)::bigint
        # 8247619702734454784)
    FROM (SELECT DISTINCT workflow_run_id FROM finished) runs
)
SELECT finished.id, finished.workflow_run_id, finished.status, (SELECT count(*) FROM locks)
FROM finished
"""

# One breadth-first level of propagation (reference 3.3 step 5) for steps of one run that just
# became terminal: each dependent's pending counter drops by its finished prerequisites, and
# its unsatisfied counter rises by those behind an ON_SUCCESS edge that did not succeed, under
# the dependent's row lock, taken in id order (item 23: no deadlock between completions that
# share dependents). A dependent whose pending reaches 0 while BLOCKED is released in the same
# statement (a job step gets its job and ENQUEUED event; an external step starts waiting) or,
# with an unsatisfied prerequisite, canceled; the caller propagates the canceled ones next.
# The FOR UPDATE lock returns the newest row version, so counters are exact when completions
# race (reference 11). A dependent of another run (a forged edge) is reported, never touched.
PROPAGATE: Final[LiteralString] = """
/* runledger:workflow_propagate */
WITH finished AS (
    SELECT * FROM unnest(%(step_ids)s::uuid[], %(outcomes)s::text[]) AS f(id, outcome)
),
agg AS MATERIALIZED (
    SELECT edge.dependent_step_id AS id, count(*)::integer AS done,
           (count(*) FILTER (WHERE edge.release_mode = 'ON_SUCCESS'
                               AND finished.outcome <> 'SUCCEEDED'))::integer AS unmet
    FROM runledger_workflow_step_dependencies edge
    JOIN finished ON finished.id = edge.prerequisite_step_id
    GROUP BY edge.dependent_step_id
    -- Steps to decide as they are (appended steps with nothing left to wait for).
    UNION ALL
    SELECT direct.id, 0, 0 FROM unnest(%(direct_ids)s::uuid[]) AS direct(id)
),
run AS MATERIALIZED (
    SELECT run.status IN ('RUNNING', 'WAITING_FOR_EXTERNAL') AS open,
           -- fail_fast: after the first failure nothing more is released, only canceled.
           run.fail_fast AND (run.steps_failed > 0 OR %(failing)s) AS closing
    FROM runledger_workflow_runs run WHERE run.id = %(run_id)s
),
locked AS MATERIALIZED (
    SELECT step.id, step.workflow_run_id, step.status, step.execution_kind,
           step.dependency_count_pending, step.dependency_count_unsatisfied
    FROM runledger_workflow_steps step
    WHERE step.id IN (SELECT id FROM agg)
    ORDER BY step.id
    FOR UPDATE
),
decided AS MATERIALIZED (
    SELECT locked.id, locked.workflow_run_id <> %(run_id)s AS foreign_step,
           locked.dependency_count_pending - agg.done AS pending,
           locked.dependency_count_unsatisfied + agg.unmet AS unsatisfied,
           CASE WHEN locked.status <> 'BLOCKED'
                     OR locked.dependency_count_pending - agg.done > 0
                     OR NOT COALESCE((SELECT open FROM run), false) THEN NULL
                WHEN locked.dependency_count_unsatisfied + agg.unmet > 0
                     OR (SELECT closing FROM run) THEN 'CANCELED'
                WHEN locked.execution_kind = 'JOB' THEN 'ENQUEUED'
                ELSE 'WAITING_FOR_EXTERNAL' END AS next_status
    FROM locked JOIN agg ON agg.id = locked.id
),
with_job AS MATERIALIZED (
    SELECT decided.*,
           CASE WHEN decided.next_status = 'ENQUEUED' THEN runledger_uuidv7() END AS job_id
    FROM decided
),
updated AS (
    UPDATE runledger_workflow_steps step
    SET dependency_count_pending = with_job.pending,
        dependency_count_unsatisfied = with_job.unsatisfied,
        status = COALESCE(with_job.next_status, step.status),
        job_id = COALESCE(with_job.job_id, step.job_id),
        released_at = CASE WHEN with_job.next_status IN ('ENQUEUED', 'WAITING_FOR_EXTERNAL')
                           THEN COALESCE(step.released_at, statement_timestamp())
                           ELSE step.released_at END,
        finished_at = CASE WHEN with_job.next_status = 'CANCELED' THEN statement_timestamp()
                           ELSE step.finished_at END,
        output = CASE WHEN with_job.next_status IS NULL THEN step.output END,
        status_reason = CASE WHEN with_job.next_status = 'CANCELED'
                             THEN 'DEPENDENCY_UNSATISFIED'
                             WHEN with_job.next_status IS NULL THEN step.status_reason END,
        last_error_code = CASE WHEN with_job.next_status = 'CANCELED'
                               THEN 'workflow.dependency_unsatisfied'
                               WHEN with_job.next_status IS NULL THEN step.last_error_code END,
        last_error_message = CASE WHEN with_job.next_status = 'CANCELED'
                                  THEN 'A prerequisite did not succeed.'
                                  WHEN with_job.next_status IS NULL
                                  THEN step.last_error_message END
    FROM with_job
    WHERE step.id = with_job.id AND NOT with_job.foreign_step
    RETURNING step.id, step.job_id, step.job_type, step.organization_id, step.payload,
              step.priority, step.max_attempts, step.timeout_seconds, step.stage,
              step.execution_resource_key, with_job.next_status
),
jobs AS (
    INSERT INTO runledger_job_queue (
        id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
        stage, execution_resource_key, workflow_step_id
    )
    SELECT job_id, job_type, organization_id, payload, priority, max_attempts,
           timeout_seconds, stage, execution_resource_key, id
    FROM updated
    WHERE next_status = 'ENQUEUED'
    RETURNING id, run_number, stage, job_type
),
events AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage,
           jsonb_build_object('job_type', job_type, 'workflow_run_id', %(run_id)s::text)
    FROM jobs
),
-- The run's counters for what this level started waiting or canceled (RUN_TRANSITION, next,
-- adds the finished steps and derives the status).
counted AS (
    UPDATE runledger_workflow_runs run
    SET steps_waiting = run.steps_waiting + tally.waiting,
        steps_canceled = run.steps_canceled + tally.canceled
    FROM (
        SELECT (count(*) FILTER (WHERE next_status = 'WAITING_FOR_EXTERNAL'))::integer
                   AS waiting,
               (count(*) FILTER (WHERE next_status = 'CANCELED'))::integer AS canceled
        FROM updated
    ) tally
    WHERE run.id = %(run_id)s AND tally.waiting + tally.canceled > 0
)
SELECT with_job.id, with_job.next_status, with_job.foreign_step FROM with_job
"""

# A run's counters moved by the deltas of one transaction, and its status derived from them
# (reference 2.2; item 24: O(1) per transition, no count over the steps). The run row lock
# serialises the last transitions of concurrent completions, so exactly one of them sees the
# run become terminal. CANCELED is never overwritten. On the first terminal transition: the
# result is taken from the result step (SUCCEEDED only), the active key is freed (or kept
# until a canceled job's live lease expired), and one notification is sent, in this
# transaction (a rollback sends none).
RUN_TRANSITION: Final[LiteralString] = """
/* runledger:workflow_run_transition */
WITH old AS MATERIALIZED (
    SELECT run.id, run.status, run.fail_fast, run.result_step_key,
           run.steps_total + %(d_total)s AS total,
           run.steps_waiting + %(d_waiting)s AS waiting,
           run.steps_succeeded + %(d_succeeded)s AS succeeded,
           run.steps_failed + %(d_failed)s AS failed,
           run.steps_canceled + %(d_canceled)s AS canceled
    FROM runledger_workflow_runs run
    WHERE run.id = %(run_id)s
    FOR UPDATE
),
next AS MATERIALIZED (
    SELECT old.*,
           CASE WHEN old.status = 'CANCELED' OR %(cancel)s THEN 'CANCELED'
                WHEN old.total - old.succeeded - old.failed - old.canceled - old.waiting > 0
                THEN 'RUNNING'
                WHEN old.waiting > 0 THEN 'WAITING_FOR_EXTERNAL'
                WHEN old.failed + old.canceled > 0 THEN 'COMPLETED_WITH_ERRORS'
                ELSE 'SUCCEEDED' END AS next_status
    FROM old
),
updated AS (
    UPDATE runledger_workflow_runs run
    SET steps_total = next.total,
        steps_waiting = next.waiting,
        steps_succeeded = next.succeeded,
        steps_failed = next.failed,
        steps_canceled = next.canceled,
        status = next.next_status,
        finished_at = CASE WHEN next.next_status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED') THEN COALESCE(run.finished_at, statement_timestamp()) END,
        result = CASE WHEN next.next_status = 'SUCCEEDED' AND next.status <> 'SUCCEEDED'
                      THEN (SELECT result_step.output FROM runledger_workflow_steps result_step
                            WHERE result_step.workflow_run_id = run.id
                              AND result_step.step_key = run.result_step_key)
                      WHEN next.next_status = 'SUCCEEDED' THEN run.result END
    FROM next
    WHERE run.id = next.id
    RETURNING run.id, run.status
),
became_terminal AS MATERIALIZED (
    SELECT updated.id, updated.status
    FROM updated JOIN old ON old.id = updated.id
    WHERE updated.status IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED') AND old.status NOT IN ('SUCCEEDED', 'COMPLETED_WITH_ERRORS', 'CANCELED')
),
claim_kept AS (
    UPDATE runledger_workflow_active_claims claim
    SET release_pending = true
    FROM became_terminal
    WHERE claim.workflow_run_id = became_terminal.id
      AND EXISTS (
          SELECT 1 FROM runledger_workflow_steps step
          JOIN runledger_job_queue job ON job.id = step.job_id
          WHERE step.workflow_run_id = became_terminal.id AND job.status = 'CANCELED'
            AND job.lease_expires_at > clock_timestamp())
),
claim_freed AS (
    DELETE FROM runledger_workflow_active_claims claim
    USING became_terminal
    WHERE claim.workflow_run_id = became_terminal.id
      AND NOT EXISTS (
          SELECT 1 FROM runledger_workflow_steps step
          JOIN runledger_job_queue job ON job.id = step.job_id
          WHERE step.workflow_run_id = became_terminal.id AND job.status = 'CANCELED'
            AND job.lease_expires_at > clock_timestamp())
),
notified AS (
    SELECT pg_notify('runledger_workflow_run_terminal',
                     json_build_object('workflow_run_id', id, 'status', status)::text)
    FROM became_terminal
)
SELECT old.status, updated.status, old.fail_fast, (SELECT count(*) FROM notified)
FROM updated JOIN old ON old.id = updated.id
"""

# --- reads for a running step ----------------------------------------------------------------

# What a step's handler sees (JobContext): its run, its key and its direct prerequisites'
# outputs by key.
STEP_CONTEXT: Final[LiteralString] = """
SELECT step.workflow_run_id, step.step_key,
       COALESCE((
           SELECT jsonb_object_agg(prerequisite.step_key, prerequisite.output)::text
           FROM runledger_workflow_step_dependencies edge
           JOIN runledger_workflow_steps prerequisite
             ON prerequisite.id = edge.prerequisite_step_id
           WHERE edge.dependent_step_id = step.id
       ), '{}')
FROM runledger_workflow_steps step
WHERE step.id = %(step_id)s
"""

# --- run-level operations: cancel, external completion, reads -----------------------------

_RUN_IN_SCOPE: Final[LiteralString] = """
    run.id = %(run_id)s
    AND (%(admin)s OR run.organization_id IS NOT DISTINCT FROM CAST(%(organization_id)s AS uuid))
"""

# A run's status, in the caller's scope (a wrong tenant sees nothing).
RUN_STATUS_IN_SCOPE: Final[LiteralString] = """
SELECT run.status FROM runledger_workflow_runs run
WHERE run.id = %(run_id)s
  AND (%(admin)s OR run.organization_id IS NOT DISTINCT FROM CAST(%(organization_id)s AS uuid))
"""

# Every job row of a run, locked in id order (reference 3.9 steps 1 and 3): a cancel waits for
# completions in flight on job rows before it holds any step row or the exclusive run lock.
LOCK_RUN_JOBS: Final[LiteralString] = """
/* runledger:workflow_cancel_lock_jobs */
SELECT job.id FROM runledger_job_queue job
WHERE job.id IN (
    SELECT step.job_id FROM runledger_workflow_steps step
    WHERE step.workflow_run_id = %(run_id)s AND step.job_id IS NOT NULL
)
ORDER BY job.id
FOR UPDATE OF job
"""

# Then every step row in id order and the run row (reference 3.9 step 4).
LOCK_RUN_STEPS: Final[LiteralString] = """
/* runledger:workflow_cancel_lock_steps */
SELECT count(*) FROM (
    SELECT step.id FROM runledger_workflow_steps step
    WHERE step.workflow_run_id = %(run_id)s
    ORDER BY step.id
    FOR UPDATE
) locked
"""
LOCK_RUN_ROW: Final[LiteralString] = """
SELECT run.status, run.organization_id
FROM runledger_workflow_runs run WHERE run.id = %(run_id)s FOR UPDATE
"""

# The sweep of a run cancel: every unfinished step CANCELED, and the jobs of its enqueued steps
# canceled as an operator's cancel does (attempt closed, event; a running handler keeps its
# lease expiry as the quiescence marker and is fenced at its next write). No dependent is
# released. Returns how many steps were canceled and how many of them were waiting.
CANCEL_RUN_SWEEP: Final[LiteralString] = """
/* runledger:workflow_cancel_sweep */
WITH open_steps AS MATERIALIZED (
    SELECT step.id, step.job_id, step.status
    FROM runledger_workflow_steps step
    WHERE step.workflow_run_id = %(run_id)s
      AND step.status IN ('BLOCKED', 'ENQUEUED', 'WAITING_FOR_EXTERNAL')
),
steps AS (
    UPDATE runledger_workflow_steps step
    SET status = 'CANCELED',
        finished_at = statement_timestamp(),
        output = NULL,
        status_reason = 'WORKFLOW_CANCELED',
        last_error_code = NULL,
        last_error_message = NULL
    FROM open_steps
    WHERE step.id = open_steps.id
),
canceled AS (
    UPDATE runledger_job_queue job
    SET status = 'CANCELED',
        last_heartbeat_at = NULL,
        worker_id = NULL,
        finished_at = now(),
        output = NULL,
        status_reason = 'WORKFLOW_CANCELED'
    FROM open_steps
    WHERE job.id = open_steps.job_id AND job.status IN ('PENDING', 'LEASED')
    RETURNING job.id, job.run_number, job.attempt, job.stage, job.progress_done,
              job.progress_total,
              CASE WHEN job.lease_expires_at > clock_timestamp() THEN job.lease_expires_at
                   END AS lease_quiesces_at
),
attempt_row AS (
    UPDATE runledger_job_attempts attempt_row
    SET finished_at = now(), outcome = 'CANCELED'
    FROM canceled
    WHERE attempt_row.job_id = canceled.id AND attempt_row.run_number = canceled.run_number
      AND attempt_row.attempt = canceled.attempt AND attempt_row.finished_at IS NULL
),
event AS (
    INSERT INTO runledger_job_events (
        job_id, run_number, attempt, event_type, stage, progress_done, progress_total, payload
    )
    SELECT id, run_number, NULLIF(attempt, 0), 'CANCELED', stage, progress_done,
           progress_total,
           jsonb_strip_nulls(jsonb_build_object('reason', 'WORKFLOW_CANCELED',
                                                'lease_quiesces_at', lease_quiesces_at))
    FROM canceled
)
SELECT count(*)::integer,
       (count(*) FILTER (WHERE status = 'WAITING_FOR_EXTERNAL'))::integer,
       (SELECT count(*) FROM canceled)::integer
FROM open_steps
"""

# An external step of a run in scope, locked (reference 3.7).
EXTERNAL_STEP_FOR_UPDATE: Final[LiteralString] = (
    """
/* runledger:workflow_external_step */
SELECT step.id, step.execution_kind, step.status,
       step.output IS NOT DISTINCT FROM CAST(%(output)s AS jsonb)
FROM runledger_workflow_steps step
JOIN runledger_workflow_runs run ON run.id = step.workflow_run_id
WHERE step.step_key = %(step_key)s AND """
    + _RUN_IN_SCOPE
    + """
FOR UPDATE OF step
"""
)

FINISH_EXTERNAL_STEP: Final[LiteralString] = """
/* runledger:workflow_finish_external_step */
UPDATE runledger_workflow_steps step
SET status = %(status)s,
    finished_at = statement_timestamp(),
    output = CAST(%(output)s AS jsonb),
    status_reason = CASE WHEN %(status)s = 'SUCCEEDED' THEN NULL ELSE 'EXTERNAL' END
WHERE step.id = %(step_id)s AND step.status = 'WAITING_FOR_EXTERNAL'
RETURNING step.id
"""

# --- recovery runs (retry_workflow) -----------------------------------------------------------

# The source run, locked so that concurrent retries of it serialise (the second finds the
# first's lineage row).
LOCK_SOURCE_RUN: Final[LiteralString] = (
    """
/* runledger:workflow_retry_source */
SELECT run.status, run.workflow_type, run.organization_id, run.active_key, run.metadata::text,
       run.enqueue_request::text, run.fail_fast, run.result_step_key
FROM runledger_workflow_runs run
WHERE """
    + _RUN_IN_SCOPE
    + """
FOR UPDATE
"""
)

EXISTING_RECOVERY: Final[LiteralString] = """
SELECT recovery.recovery_run_id, recovery.mode, run.status
FROM runledger_workflow_recoveries recovery
JOIN runledger_workflow_runs run ON run.id = recovery.recovery_run_id
WHERE recovery.source_run_id = %(run_id)s AND recovery.request_key = %(request_key)s
"""

# The source's steps as stored (payloads and resolved settings) and its edges.
SOURCE_STEPS: Final[LiteralString] = """
SELECT step.id, step.step_key, step.execution_kind, step.job_type, step.payload::text,
       step.priority, step.max_attempts, step.timeout_seconds, step.execution_resource_key,
       step.status, step.output::text
FROM runledger_workflow_steps step
WHERE step.workflow_run_id = %(run_id)s
ORDER BY step.id
"""
SOURCE_EDGES: Final[LiteralString] = """
SELECT edge.prerequisite_step_id, edge.dependent_step_id, edge.release_mode
FROM runledger_workflow_steps step
JOIN runledger_workflow_step_dependencies edge ON edge.prerequisite_step_id = step.id
WHERE step.workflow_run_id = %(run_id)s
ORDER BY edge.id
"""

INSERT_RECOVERY: Final[LiteralString] = """
INSERT INTO runledger_workflow_recoveries (
    recovery_run_id, source_run_id, request_key, mode, reason
)
VALUES (%(recovery_run_id)s, %(run_id)s, %(request_key)s, %(mode)s, %(reason)s)
"""

# --- appends (reference 3.8) ------------------------------------------------------------------

EXISTING_MUTATION: Final[LiteralString] = """
SELECT mutation.request = CAST(%(request)s AS jsonb), mutation.step_ids
FROM runledger_workflow_run_mutations mutation
WHERE mutation.workflow_run_id = %(run_id)s AND mutation.mutation_key = %(mutation_key)s
"""

# The run's steps, locked in id order (an append reads the state of the prerequisites it
# names and the window; none may move until it commits).
LOCK_RUN_STEP_STATES: Final[LiteralString] = """
/* runledger:workflow_append_lock_steps */
SELECT step.id, step.step_key, step.status, step.execution_kind
FROM runledger_workflow_steps step
WHERE step.workflow_run_id = %(run_id)s
ORDER BY step.id
FOR UPDATE
"""

INSERT_MUTATION: Final[LiteralString] = """
INSERT INTO runledger_workflow_run_mutations (
    workflow_run_id, mutation_key, metadata, request, step_ids
)
VALUES (%(run_id)s, %(mutation_key)s, CAST(%(metadata)s AS jsonb), CAST(%(request)s AS jsonb),
        CAST(%(step_ids)s AS jsonb))
"""

# --- workflow intents (checklist item 10) ----------------------------------------------------

_INSERT_INTENT: Final[LiteralString] = """
/* runledger:workflow_record_intent */
INSERT INTO runledger_workflow_intents (
    id, workflow_type, organization_id, idempotency_key, enqueue_request, job_types
)
VALUES (%(id)s, %(workflow_type)s, %(organization_id)s, %(idempotency_key)s,
        CAST(%(request)s AS jsonb), CAST(%(job_types)s AS jsonb))
"""

# Record an intent unless its key is taken; the scope's partial unique index is the arbiter
# (the ORM cannot name an arbiter with a WHERE). A conflicting insert still in flight is waited
# for: the key's owner decides, as record_intent does.
INSERT_INTENT_GLOBAL: Final[LiteralString] = (
    _INSERT_INTENT
    + """ON CONFLICT (workflow_type, idempotency_key) WHERE organization_id IS NULL
DO NOTHING
RETURNING id"""
)

INSERT_INTENT_ORG: Final[LiteralString] = (
    _INSERT_INTENT
    + """ON CONFLICT (workflow_type, organization_id, idempotency_key)
    WHERE organization_id IS NOT NULL
DO NOTHING
RETURNING id"""
)

# The intent stored under a key and whether its request equals this one as jsonb. No row lock:
# a promoter holds the row while it promotes, and a recorder must not wait for it.
EXISTING_INTENT: Final[LiteralString] = """
/* runledger:workflow_existing_intent */
SELECT intent.id, intent.status, intent.workflow_run_id,
       intent.enqueue_request = CAST(%(request)s AS jsonb)
FROM runledger_workflow_intents intent
WHERE intent.workflow_type = %(workflow_type)s
  AND intent.organization_id IS NOT DISTINCT FROM CAST(%(organization_id)s AS uuid)
  AND intent.idempotency_key = %(idempotency_key)s
"""

# The pending intents a promoter may take now: due, and every job type they name has an enabled
# definition (the enabled set is computed once, an InitPlan).
_ELIGIBLE_INTENTS: Final[LiteralString] = """FROM runledger_workflow_intents intent
WHERE intent.status = 'PENDING'
  AND intent.next_promotion_at <= now()
  AND intent.job_types <@ (
      SELECT COALESCE(jsonb_agg(definition.job_type), '[]'::jsonb)
      FROM runledger_job_definitions definition
      WHERE definition.is_enabled)
"""

# The eligible pending intents, in claim order: due, and every job type they name has an
# enabled definition (the enabled set is computed once, an InitPlan; an intent naming a type
# not synced yet is never claimed, so it waits without spending attempts, as a job intent of
# an unknown type does). SKIP LOCKED splits the backlog between concurrent promoters; the lock
# is on intent rows only, so definitions stay shareable.
CLAIM_INTENTS: Final[LiteralString] = (
    """
/* runledger:workflow_claim_intents */
SELECT intent.id, intent.organization_id, intent.idempotency_key,
       intent.enqueue_request::text
"""
    + _ELIGIBLE_INTENTS
    + """ORDER BY intent.next_promotion_at, intent.created_at, intent.id
LIMIT %(limit)s
FOR NO KEY UPDATE OF intent SKIP LOCKED
"""
)

# The idle check, outside any transaction block (one round trip, no locks): is any intent due
# whose types are all defined? It walks idx_workflow_intents_pending, which holds only PENDING
# rows, so an idle promoter reads nothing but that index's first page.
HAS_ELIGIBLE_INTENT: Final[LiteralString] = (
    """
/* runledger:workflow_intents_eligible */
SELECT 1
"""
    + _ELIGIBLE_INTENTS
    + """LIMIT 1
"""
)

_ONE_PENDING_INTENT: Final[LiteralString] = """
WHERE intent.id = %(id)s AND intent.status = 'PENDING'"""

_COUNT_INTENT_ATTEMPT: Final[LiteralString] = (
    "promotion_attempts = LEAST(intent.promotion_attempts, 2147483645) + 1"
)

# The transitions of a claimed intent (each touches exactly one PENDING row).
MARK_INTENT_PROMOTED: Final[LiteralString] = (
    """
UPDATE runledger_workflow_intents intent
SET status = 'PROMOTED', workflow_run_id = %(run_id)s, promoted_at = now(),
    last_attempted_at = now(), last_error_code = NULL, last_error_message = NULL, """
    + _COUNT_INTENT_ATTEMPT
    + _ONE_PENDING_INTENT
)

MARK_INTENT_CONFLICTED: Final[LiteralString] = (
    """
UPDATE runledger_workflow_intents intent
SET status = 'CONFLICTED', conflicted_at = now(), last_attempted_at = now(),
    last_error_code = %(code)s, last_error_message = %(message)s, """
    + _COUNT_INTENT_ATTEMPT
    + _ONE_PENDING_INTENT
)

# A failure that may pass (a lock wait that timed out, a failing trigger): retry later with
# the job intents' capped, jittered backoff.
MARK_INTENT_DEFERRED: Final[LiteralString] = (
    """
UPDATE runledger_workflow_intents intent
SET last_attempted_at = now(), last_error_code = %(code)s, last_error_message = %(message)s,
    next_promotion_at = now()
        + LEAST(interval '4 minutes',
                interval '1 second' * power(2.0, LEAST(promotion_attempts, 9)::double precision))
        + random() * LEAST(interval '1 minute',
                interval '0.25 seconds' * power(2.0, LEAST(promotion_attempts, 9)::double precision)),
    """
    + _COUNT_INTENT_ATTEMPT
    + _ONE_PENDING_INTENT
)
