"""The raw SQL of ``runledger_check``: the server's version, the schema objects the product
relies on by name, and the backlog's bounded reads.

Every statement reads catalogs or index-backed rows only and runs under a statement cap, so a
readiness probe built on the command never piles up on a struggling database. Parameters are
``%(name)s``; values are never formatted into the text.
"""

from __future__ import annotations

from typing import Final, LiteralString

# The server's version as a number (150004) and as text ("15.4"); also the round trip that
# proves the database answers.
SERVER_VERSION: Final[LiteralString] = """
/* runledger:check_server_version */
SELECT current_setting('server_version_num')::int, current_setting('server_version')
"""

# Which of the wanted objects (kind, name) the search path does not show. The ORM cannot
# read the catalogs; one statement answers for every object.
MISSING_SCHEMA_OBJECTS: Final[LiteralString] = """
/* runledger:check_schema_objects */
SELECT wanted.kind, wanted.name
FROM unnest(%(kinds)s::text[], %(names)s::text[]) AS wanted (kind, name)
WHERE NOT CASE wanted.kind
    WHEN 'table' THEN EXISTS (
        SELECT 1 FROM pg_class c
        WHERE c.relname = wanted.name AND c.relkind IN ('r', 'p') AND pg_table_is_visible(c.oid))
    WHEN 'index' THEN EXISTS (
        SELECT 1 FROM pg_class c
        WHERE c.relname = wanted.name AND c.relkind = 'i' AND pg_table_is_visible(c.oid))
    WHEN 'constraint' THEN EXISTS (
        SELECT 1 FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
        WHERE k.conname = wanted.name AND pg_table_is_visible(c.oid))
    WHEN 'function' THEN EXISTS (
        SELECT 1 FROM pg_proc p
        WHERE p.proname = wanted.name AND pg_function_is_visible(p.oid))
    WHEN 'trigger' THEN EXISTS (
        SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE t.tgname = wanted.name AND NOT t.tgisinternal AND pg_table_is_visible(c.oid))
    ELSE false
END
ORDER BY wanted.kind, wanted.name
"""

# The oldest due job's age in seconds (0 without one) and the due jobs counted up to a bound,
# both on the claim index (status = 'PENDING', next_run_at in its key): the age reads every
# due row's index entry once, the count stops at the bound.
BACKLOG: Final[LiteralString] = """
/* runledger:check_backlog */
SELECT
    COALESCE(EXTRACT(EPOCH FROM now() - (
        SELECT min(job.next_run_at) FROM runledger_job_queue job
        WHERE job.status = 'PENDING' AND job.next_run_at <= now()
    )), 0)::float8,
    (SELECT count(*) FROM (
        SELECT 1 FROM runledger_job_queue job
        WHERE job.status = 'PENDING' AND job.next_run_at <= now()
        LIMIT %(count_bound)s
    ) AS due)
"""

# Job types (of the definitions, a small table) with at least one due job: EXISTS stops at
# the first one, found through the (job_type, status, created_at) index.
JOB_TYPES_WITH_DUE_JOBS: Final[LiteralString] = """
/* runledger:check_due_job_types */
SELECT definition.job_type
FROM runledger_job_definitions definition
WHERE EXISTS (
    SELECT 1 FROM runledger_job_queue job
    WHERE job.job_type = definition.job_type AND job.status = 'PENDING'
      AND job.next_run_at <= now()
)
ORDER BY definition.job_type
"""
