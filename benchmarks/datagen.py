"""Set-based data generators: pending backlogs for promotion, and a million-intent history.

Rows are written with INSERT ... SELECT generate_series, never through the API, so a million
rows take seconds. The snapshot column is built with jsonb_build_object from the same columns
promotion rebuilds it from; jsonb equality ignores key order, so the set-based fast path
accepts these rows exactly as it accepts recorded ones (``check_snapshots`` proves it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from django.db import connection

from runledger_django.validation import canonical_snapshot_json

from .common import ORGANIZATIONS, progress, scalar, sql

_PAYLOAD = "jsonb_build_object('order_id', g, 'email', 'customer-' || g || '@example.com')"
_SNAPSHOT = (
    "jsonb_build_object('payload', {payload}, 'priority', NULL::integer, "
    "'max_attempts', NULL::integer, 'timeout_seconds', NULL::integer, "
    "'next_run_at', NULL::text, 'stage', 'queued')"
)
_ORGANIZATION = "CASE WHEN g %% 5 = 0 THEN NULL ELSE (%(orgs)s::uuid[])[1 + g %% 4] END"


def insert_pending_intents(count: int, job_types: Sequence[str], *, key_prefix: str) -> None:
    """``count`` initial-pending intents spread over ``job_types`` and five scopes."""
    sql(
        f"""
        INSERT INTO runledger_job_enqueue_intents (
            job_type, organization_id, payload, idempotency_key, stage,
            enqueue_request_version, enqueue_request, created_at, next_promotion_at
        )
        SELECT (%(types)s::text[])[1 + g %% %(ntypes)s], {_ORGANIZATION}, p.payload,
               %(prefix)s || g, 'queued', 1, {_SNAPSHOT.format(payload="p.payload")},
               now() - interval '1 minute', now() - interval '1 minute'
        FROM generate_series(1, %(count)s) AS g,
             LATERAL (SELECT {_PAYLOAD} AS payload) AS p
        """,
        {
            "types": list(job_types),
            "ntypes": len(job_types),
            "orgs": ORGANIZATIONS,
            "prefix": key_prefix,
            "count": count,
        },
    )


def insert_identical_jobs_for_pending() -> None:
    """A job with the same key and the same request for every pending intent: promotion then
    inserts nothing set-based, and every row converges through the per-row savepoint path."""
    sql(
        """
        INSERT INTO runledger_job_queue (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            idempotency_key, stage, enqueue_request
        )
        SELECT runledger_uuidv7(), job_type, organization_id, payload, 100, 3, 60,
               idempotency_key, stage, enqueue_request
        FROM runledger_job_enqueue_intents WHERE status = 'PENDING'
        """
    )


def check_snapshots(sample: int = 5) -> None:
    """Fail fast if generated snapshots differ from the ones promotion recomputes."""
    checks = sql(
        "SELECT id, payload::text FROM runledger_job_enqueue_intents "
        "WHERE status = 'PENDING' LIMIT %s",
        [sample],
    )
    for intent_id, payload_text in checks:
        expected = canonical_snapshot_json(
            payload_json=payload_text,
            priority=None,
            max_attempts=None,
            timeout_seconds=None,
            next_run_at=None,
            stage="queued",
            execution_resource_key=None,
        )
        same = scalar(
            "SELECT enqueue_request = %s::jsonb FROM runledger_job_enqueue_intents WHERE id = %s",
            [expected, intent_id],
        )
        if not same:
            raise RuntimeError(f"generated snapshot of {intent_id} differs from promotion's")


@contextmanager
def _secondary_indexes_dropped(table: str) -> Iterator[None]:
    """Drop a table's secondary indexes for a bulk load and rebuild them afterwards.

    Building an index over sorted data once is several times faster than a million random
    btree inserts; the rebuilt indexes are the migration's own definitions.
    """
    definitions = sql(
        """
        SELECT indexrelid::regclass::text, pg_get_indexdef(indexrelid)
        FROM pg_index
        WHERE indrelid = %s::regclass AND NOT indisprimary
          AND NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conindid = pg_index.indexrelid)
        """,
        [table],
    )
    for name, _definition in definitions:
        sql(f"DROP INDEX {name}")
    try:
        yield
    finally:
        for _name, definition in definitions:
            sql(definition)


def generate_history(
    total: int, job_types: Sequence[str], *, quiet: bool = False
) -> dict[str, int]:
    """A realistic intent history of ``total`` rows over 30 days, with a job per promoted row.

    Mix: 97% promoted, 1.5% initial pending, 0.5% retrying, 1% conflicted; eight job types;
    four organizations and the global scope. Foreign-key triggers are skipped during the load
    (session_replication_role = replica); the data is consistent by construction.
    """
    started = time.perf_counter()
    say = (lambda _message: None) if quiet else progress
    params = {
        "types": list(job_types),
        "ntypes": len(job_types),
        "orgs": ORGANIZATIONS,
        "total": total,
    }
    sql("SET maintenance_work_mem = '512MB'")
    sql("SET session_replication_role = replica")
    try:
        sql("DROP TABLE IF EXISTS bench_history")
        # r decides the status, scattered over g so every period holds every status.
        sql(
            f"""
            CREATE UNLOGGED TABLE bench_history AS
            SELECT g, (g::bigint * 7919) %% 1000 AS r,
                   (%(types)s::text[])[1 + (g * 31) %% %(ntypes)s] AS job_type,
                   {_ORGANIZATION} AS organization_id,
                   {_PAYLOAD} AS payload,
                   now() - (%(total)s - g) * (interval '30 days' / %(total)s) AS created_at,
                   gen_random_uuid() AS intent_id,
                   gen_random_uuid() AS job_id
            FROM generate_series(1, %(total)s) AS g
            """,
            params,
        )
        say(f"history: {total:,} rows staged in {time.perf_counter() - started:.1f}s")
        with _secondary_indexes_dropped("runledger_job_queue"):
            sql(
                """
                INSERT INTO runledger_job_queue (
                    id, job_type, organization_id, payload, status, priority, max_attempts,
                    timeout_seconds, next_run_at, idempotency_key, stage, enqueue_request,
                    finished_at, created_at, updated_at
                )
                SELECT h.job_id, h.job_type, h.organization_id, h.payload,
                       CASE WHEN h.g > %(total)s - 2000 THEN 'PENDING' ELSE 'SUCCEEDED' END,
                       100, 3, 60, h.created_at + interval '1 second', 'order:' || h.g,
                       CASE WHEN h.g > %(total)s - 2000 THEN 'queued' ELSE 'completed' END,
                       jsonb_build_object('payload', h.payload, 'priority', NULL::integer,
                           'max_attempts', NULL::integer, 'timeout_seconds', NULL::integer,
                           'next_run_at', NULL::text, 'stage', 'queued'),
                       CASE WHEN h.g > %(total)s - 2000 THEN NULL
                            ELSE h.created_at + interval '5 seconds' END,
                       h.created_at + interval '1 second', h.created_at + interval '5 seconds'
                FROM bench_history h WHERE h.r < 970
                """,
                params,
            )
        say(f"history: jobs loaded at {time.perf_counter() - started:.1f}s")
        with _secondary_indexes_dropped("runledger_job_enqueue_intents"):
            sql(
                """
                INSERT INTO runledger_job_enqueue_intents (
                    id, job_type, organization_id, payload, idempotency_key, stage,
                    enqueue_request_version, enqueue_request, promotion_attempts,
                    next_promotion_at, last_attempted_at, status, promoted_job_id, promoted_at,
                    conflicted_at, last_error_code, last_error_message, created_at, updated_at
                )
                SELECT h.intent_id, h.job_type, h.organization_id, h.payload, 'order:' || h.g,
                       'queued', 1,
                       jsonb_build_object('payload', h.payload, 'priority', NULL::integer,
                           'max_attempts', NULL::integer, 'timeout_seconds', NULL::integer,
                           'next_run_at', NULL::text, 'stage', 'queued'),
                       CASE WHEN h.r BETWEEN 970 AND 984 THEN 0
                            WHEN h.r BETWEEN 985 AND 989 THEN 1 + h.g %% 6 ELSE 1 END,
                       CASE WHEN h.r BETWEEN 985 AND 989 THEN now() + interval '2 minutes'
                            ELSE h.created_at END,
                       CASE WHEN h.r BETWEEN 970 AND 984 THEN NULL
                            ELSE h.created_at + interval '1 second' END,
                       CASE WHEN h.r < 970 THEN 'PROMOTED'
                            WHEN h.r < 990 THEN 'PENDING' ELSE 'CONFLICTED' END,
                       CASE WHEN h.r < 970 THEN h.job_id END,
                       CASE WHEN h.r < 970 THEN h.created_at + interval '1 second' END,
                       CASE WHEN h.r >= 990 THEN h.created_at + interval '1 second' END,
                       CASE WHEN h.r BETWEEN 985 AND 989 THEN 'job.definition_unavailable'
                            WHEN h.r >= 990 THEN 'job.idempotency_conflict' END,
                       CASE WHEN h.r BETWEEN 985 AND 989 THEN 'definition not enabled'
                            WHEN h.r >= 990 THEN 'a different request holds this key' END,
                       h.created_at, h.created_at + interval '1 second'
                FROM bench_history h
                """,
                params,
            )
        say(f"history: intents loaded at {time.perf_counter() - started:.1f}s")
    finally:
        sql("SET session_replication_role = DEFAULT")
        sql("DROP TABLE IF EXISTS bench_history")
        sql("RESET maintenance_work_mem")
    sql("ANALYZE runledger_job_queue")  # (d) and (e) never scan it: statistics are enough
    sql("VACUUM (ANALYZE) runledger_job_enqueue_intents")  # index-only scans need the map
    counts = {
        str(status): int(count)
        for status, count in sql(
            "SELECT status, count(*) FROM runledger_job_enqueue_intents GROUP BY status"
        )
    }
    counts["retrying"] = int(
        scalar(
            "SELECT count(*) FROM runledger_job_enqueue_intents "
            "WHERE status = 'PENDING' AND promotion_attempts > 0"
        )
    )
    counts["seconds"] = round(time.perf_counter() - started)
    say(f"history ready: {counts}")
    connection.close()  # drop the session settings with the session
    return counts
