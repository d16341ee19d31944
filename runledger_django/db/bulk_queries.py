"""The raw SQL of the bulk producers: many intents or jobs per statement.

The ORM cannot express what these need: the batch as three JSON array parameters (each
request's id, key and scalar columns, its payload, the rest of its snapshot), zipped back
into rows by ``ROWS FROM (jsonb_array_elements(...), json_array_elements(...), ...) WITH
ORDINALITY`` (so a batch costs the same statements at 10 rows as at 10,000; three long texts
bind and parse far faster than one array literal per column, and the payloads are embedded as
JSON, never sent twice), ``ON CONFLICT DO NOTHING`` against the partial unique index of each
row's scope, and inserts made in key order, so two batches with overlapping keys wait for each other instead
of deadlocking. Each statement leads with its ``/* runledger:... */`` tag, the part of a long
text pg_stat_activity keeps. Parameters are ``%(name)s``; values are never formatted into the text.

Keys are ordered ``COLLATE "C"`` (byte order, the same in every session whatever the database
collation); the global scope's keys come before the organizations'. The resolution statements
lock what they find in that same order.
"""

from __future__ import annotations

from typing import Final, LiteralString

_READ_COMMITTED: Final[LiteralString] = (
    "current_setting('transaction_isolation') IN ('read committed', 'read uncommitted')"
)

_GLOBAL_KEY_ORDER: Final[LiteralString] = 'job_type COLLATE "C", idempotency_key COLLATE "C"'
_ORG_KEY_ORDER: Final[LiteralString] = (
    'job_type COLLATE "C", organization_id, idempotency_key COLLATE "C"'
)

# --- intents ----------------------------------------------------------------------------------

_INTENT_COLUMNS: Final[LiteralString] = """
    id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
    next_run_at, idempotency_key, stage, enqueue_request_version, enqueue_request,
    execution_resource_key, trace_context"""

# A batch's rows: "heads" holds each request's id, key and scalar columns in a JSON array,
# "payloads" the payloads themselves and "rests" each snapshot but its payload (the snapshot is
# the payload under "payload" plus these keys: a payload travels once), a JSON null for an
# unkeyed job, whose snapshot is NULL. The heads are parsed as one jsonb document (each ->> of
# an element is then a lookup, where on json it parses the element again); payloads and rests
# stay json, walked once, and only they become jsonb.
_ROWS: Final[LiteralString] = """ROWS FROM (
        jsonb_array_elements(%(heads)s::jsonb),
        json_array_elements(%(payloads)s::json),
        json_array_elements(%(rests)s::json)
    ) WITH ORDINALITY AS r(h, p, rest, ord)"""

_REQUESTED: Final[LiteralString] = """
requested AS (
    SELECT (h->>0)::uuid AS id, h->>2 AS job_type, (h->>3)::uuid AS organization_id,
           p::jsonb AS payload, (h->>4)::integer AS priority, (h->>5)::integer AS max_attempts,
           (h->>6)::integer AS timeout_seconds, (h->>7)::timestamptz AS next_run_at,
           h->>1 AS idempotency_key, h->>8 AS stage,
           CASE WHEN json_typeof(rest) <> 'null'
                THEN jsonb_build_object('payload', p::jsonb) || rest::jsonb END AS snapshot,
           h->>9 AS execution_resource_key, ord
    FROM {rows}
)""".replace("{rows}", _ROWS)

# One insert for the whole batch, in key order (the global scope's keys first, then the
# organizations') and, under one key, in batch order: the first of a key is inserted, and the
# later ones find its row in the unique index and do nothing (they resolve against it
# afterwards: converge or conflict, as a later call would). ON CONFLICT without a target takes
# every unique index as arbiter, here the partial index of the row's own scope (and the
# primary key, whose fresh UUIDv7s do not collide), so both scopes go in one statement: no
# CTE to materialise and scan twice. Under an isolation level stricter than READ COMMITTED
# nothing is written and the caller asks which level it is (as record_intent's function does).
RECORD_INTENTS: Final[LiteralString] = (
    """/* runledger:record_intents */
INSERT INTO runledger_job_enqueue_intents ({columns})
SELECT (h->>0)::uuid, h->>2, (h->>3)::uuid, p::jsonb, (h->>4)::integer, (h->>5)::integer,
       (h->>6)::integer, (h->>7)::timestamptz, h->>1, h->>8, 1,
       jsonb_build_object('payload', p::jsonb) || rest::jsonb, h->>9, %(trace_context)s::jsonb
FROM {rows}
WHERE {read_committed}
ORDER BY (h->>3) IS NOT NULL, (h->>2) COLLATE "C", (h->>3)::uuid, (h->>1) COLLATE "C", ord
ON CONFLICT DO NOTHING
RETURNING id
""".replace("{rows}", _ROWS)
    .replace("{read_committed}", _READ_COMMITTED)
    .replace("{columns}", _INTENT_COLUMNS)
)

# The requests to resolve: "heads" holds each one's position (1-based), job type,
# organization and key, "snapshots" its snapshot.
_RESOLVE_REQUESTED: Final[LiteralString] = """WITH requested AS (
    SELECT (h->>0)::bigint AS ord, h->>1 AS job_type, (h->>2)::uuid AS organization_id,
           h->>3 AS idempotency_key, s::jsonb AS snapshot
    FROM ROWS FROM (
        json_array_elements(%(heads)s::json), json_array_elements(%(snapshots)s::json)
    ) AS r(h, s)
),"""

# The existing intents of the requests that inserted nothing, locked FOR KEY SHARE (as
# record_intent's lookup: safe from deletion until the caller commits, compatible with the
# promoter). A new statement, so it sees a winner that committed while the insert waited.
FIND_EXISTING_INTENTS: Final[LiteralString] = """/* runledger:record_intents_resolve */
{requested}
global_found AS (
    SELECT r.ord, i.id, i.status, i.promoted_job_id, i.enqueue_request = r.snapshot AS same
    FROM requested r
    JOIN runledger_job_enqueue_intents i
      ON i.job_type = r.job_type AND i.idempotency_key = r.idempotency_key
    WHERE r.organization_id IS NULL AND i.organization_id IS NULL
    ORDER BY i.job_type COLLATE "C", i.idempotency_key COLLATE "C"
    FOR KEY SHARE OF i
),
org_found AS (
    SELECT r.ord, i.id, i.status, i.promoted_job_id, i.enqueue_request = r.snapshot AS same
    FROM requested r
    JOIN runledger_job_enqueue_intents i
      ON i.job_type = r.job_type AND i.organization_id = r.organization_id
     AND i.idempotency_key = r.idempotency_key
    WHERE i.organization_id IS NOT NULL
    ORDER BY i.job_type COLLATE "C", i.organization_id, i.idempotency_key COLLATE "C"
    FOR KEY SHARE OF i
)
SELECT * FROM global_found UNION ALL SELECT * FROM org_found
""".replace("{requested}", _RESOLVE_REQUESTED)

# --- jobs ---------------------------------------------------------------------------------------

_JOB_COLUMNS: Final[LiteralString] = """
    id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
    next_run_at, idempotency_key, stage, enqueue_request, execution_resource_key, trace_context"""

_JOB_VALUES: Final[LiteralString] = """
    id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
    next_run_at, idempotency_key, stage, snapshot, execution_resource_key,
    %(trace_context)s::jsonb"""

# enqueue_job's statement for many rows: each request's enabled definition, share-locked in
# type order until the transaction ends, gives its defaults; a request whose type has none
# inserts nothing. Keyed requests insert in key order, the first of a key winning (the others
# resolve against it); unkeyed ones always insert. Every inserted job gets its ENQUEUED event here.
ENQUEUE_JOBS: Final[LiteralString] = (
    """/* runledger:enqueue_jobs */
WITH {requested},
definition AS (
    SELECT job_type, default_priority, max_attempts, default_timeout_seconds
    FROM runledger_job_definitions
    WHERE job_type = ANY(%(definition_types)s::text[]) AND is_enabled = true
      AND (NOT %(require_read_committed)s OR {read_committed})
    ORDER BY job_type
    FOR SHARE
),
resolved AS (
    SELECT r.id, r.job_type, r.organization_id, r.payload,
           COALESCE(r.priority, d.default_priority) AS priority,
           COALESCE(r.max_attempts, d.max_attempts) AS max_attempts,
           COALESCE(r.timeout_seconds, d.default_timeout_seconds) AS timeout_seconds,
           COALESCE(r.next_run_at, now()) AS next_run_at,
           r.idempotency_key, r.stage, r.snapshot, r.execution_resource_key, r.ord
    FROM requested r JOIN definition d ON d.job_type = r.job_type
),
unkeyed_rows AS (
    INSERT INTO runledger_job_queue ({columns})
    SELECT {values}
    FROM resolved WHERE idempotency_key IS NULL
    ORDER BY ord
    RETURNING id, status, run_number, stage, job_type
),
global_rows AS (
    INSERT INTO runledger_job_queue ({columns})
    SELECT {values}
    FROM resolved WHERE idempotency_key IS NOT NULL AND organization_id IS NULL
    ORDER BY {global_order}, ord
    ON CONFLICT (job_type, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NULL DO NOTHING
    RETURNING id, status, run_number, stage, job_type
),
org_rows AS (
    INSERT INTO runledger_job_queue ({columns})
    SELECT {values}
    FROM resolved WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL
    ORDER BY {org_order}, ord
    ON CONFLICT (job_type, organization_id, idempotency_key)
        WHERE idempotency_key IS NOT NULL AND organization_id IS NOT NULL DO NOTHING
    RETURNING id, status, run_number, stage, job_type
),
inserted AS (
    SELECT * FROM unkeyed_rows
    UNION ALL SELECT * FROM global_rows
    UNION ALL SELECT * FROM org_rows
),
event AS (
    INSERT INTO runledger_job_events (job_id, run_number, event_type, stage, payload)
    SELECT id, run_number, 'ENQUEUED', stage, jsonb_build_object('job_type', job_type)
    FROM inserted
)
SELECT id, status, run_number FROM inserted
""".replace("{requested}", _REQUESTED)
    .replace("{where}", "")
    .replace("{read_committed}", _READ_COMMITTED)
    .replace("{columns}", _JOB_COLUMNS)
    .replace("{values}", _JOB_VALUES)
    .replace("{global_order}", _GLOBAL_KEY_ORDER)
    .replace("{org_order}", _ORG_KEY_ORDER)
)

# The existing keyed jobs of the requests that inserted nothing, locked FOR NO KEY UPDATE (as
# enqueue_job's lookup), in key order; snapshot equality is jsonb = in PostgreSQL.
FIND_EXISTING_JOBS: Final[LiteralString] = """/* runledger:enqueue_jobs_resolve */
{requested}
global_found AS (
    SELECT r.ord, job.id, job.status, job.run_number,
           job.enqueue_request = r.snapshot AS same, job.enqueue_request IS NULL AS legacy
    FROM requested r
    JOIN runledger_job_queue job
      ON job.job_type = r.job_type AND job.idempotency_key = r.idempotency_key
    WHERE r.organization_id IS NULL AND job.organization_id IS NULL
      AND job.idempotency_key IS NOT NULL
    ORDER BY job.job_type COLLATE "C", job.idempotency_key COLLATE "C"
    FOR NO KEY UPDATE OF job
),
org_found AS (
    SELECT r.ord, job.id, job.status, job.run_number,
           job.enqueue_request = r.snapshot AS same, job.enqueue_request IS NULL AS legacy
    FROM requested r
    JOIN runledger_job_queue job
      ON job.job_type = r.job_type AND job.organization_id = r.organization_id
     AND job.idempotency_key = r.idempotency_key
    WHERE job.organization_id IS NOT NULL AND job.idempotency_key IS NOT NULL
    ORDER BY job.job_type COLLATE "C", job.organization_id, job.idempotency_key COLLATE "C"
    FOR NO KEY UPDATE OF job
)
SELECT * FROM global_found UNION ALL SELECT * FROM org_found
""".replace("{requested}", _RESOLVE_REQUESTED)

ENABLED_DEFINITIONS: Final[LiteralString] = """/* runledger:enqueue_jobs_definitions */
SELECT job_type FROM runledger_job_definitions
WHERE job_type = ANY(%(job_types)s::text[]) AND is_enabled = true
"""
