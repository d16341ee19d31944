"""Plan shapes of the promotion, retention and recording statements under any statistics.

A burst of pending intents lands in a table whose statistics describe something else: a
history of promoted intents of other job types, analysed before the burst (stale), no
statistics at all (never analysed), an analysis of the empty table, or a fresh ANALYZE. With
``pg_class.reltuples`` pinned low on top, the planner believes the burst is a handful of rows.
Each statement is run with EXPLAIN ANALYZE (in a transaction that is rolled back) and its plan must stay linear in the batch: no sequential or bitmap scan of a
runledger table, the intent table reached only by the claim's ordered walk, by ctid or through
the index that holds the key looked up, the queue only by primary or unique key, and no scan
of either reading more rows than the batch (a plan nested over the backlog would read the
backlog once per row).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runledger_django import promote_intents
from runledger_django.db import (
    intent_queries,
    operations_queries,
    promotion_queries,
    session_queries,
)
from runledger_django.errors import CATALOG, Code
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent
from runledger_django.services.promotion_pass import STAGE_VALUES
from tests.conftest import TEST_JOB_TYPE, MakeDefinition, run_sql

# Committed, and emptied by TRUNCATE afterwards: rows written and rolled back would stay behind
# as dead tuples, and a bloated table changes the plans of the tests that run after these.
pytestmark = pytest.mark.django_db(transaction=True)

TYPE = TEST_JOB_TYPE
HISTORY_TYPE = "jobs.test.history"
BATCH = 1000
BURST = 2500
"""More pending rows than a batch: a scan of the backlog reads more rows than the batch."""
HISTORY = 3000
ORG = uuid.UUID("0190a6b2-0000-7000-8000-0000000000aa")
TABLES = ("runledger_job_enqueue_intents", "runledger_job_queue")
STATISTICS = ["stale", "never_analysed", "empty_analysed", "analysed"]
SCOPES = {"global": None, "organization": ORG}

Access = set[tuple[str, str | None]]
INTENT_ACCESS: Access = {
    ("Index Scan", "idx_job_enqueue_intents_pending"),
    ("Index Scan", "idx_job_enqueue_intents_promoted_job"),
    ("Index Scan", "idx_job_enqueue_intents_promoted_cleanup"),
    ("Index Scan", "uq_job_enqueue_intents_type_idempotency_org"),
    ("Index Scan", "uq_job_enqueue_intents_type_idempotency_global"),
    ("Tid Scan", None),
}
QUEUE_ACCESS: Access = {
    ("Index Scan", "runledger_job_queue_pkey"),
    ("Index Scan", "uq_job_queue_type_idempotency_org"),
    ("Index Scan", "uq_job_queue_type_idempotency_global"),
}
ACCESS: dict[str, Access] = {
    "runledger_job_enqueue_intents": INTENT_ACCESS,
    "runledger_job_queue": QUEUE_ACCESS,
}


# --- data and statistics ----------------------------------------------------------------------


def _snapshot(payload: str) -> str:
    return (
        f"jsonb_build_object('payload', {payload}, 'priority', NULL::integer, "
        "'max_attempts', NULL::integer, 'timeout_seconds', NULL::integer, "
        "'next_run_at', NULL::text, 'stage', 'queued')"
    )


def insert_history(count: int) -> None:
    """Promoted intents of another job type, each with its job: a system that has been running."""
    run_sql(
        f"""
        WITH source AS (
            SELECT g, jsonb_build_object('n', g) AS payload, gen_random_uuid() AS job_id,
                   CASE WHEN g %% 2 = 0 THEN %(org)s::uuid END AS org,
                   now() - interval '3 days' + g * interval '1 second' AS at
            FROM generate_series(1, %(count)s) AS g
        ), jobs AS (
            INSERT INTO runledger_job_queue (id, job_type, organization_id, payload, status,
                max_attempts, idempotency_key, enqueue_request, created_at)
            SELECT job_id, %(type)s, org, payload, 'SUCCEEDED', 3, 'history:' || g,
                   {_snapshot("payload")}, at
            FROM source
        )
        INSERT INTO runledger_job_enqueue_intents (job_type, organization_id, payload,
            idempotency_key, enqueue_request, status, promotion_attempts, last_attempted_at,
            promoted_job_id, promoted_at, created_at)
        SELECT %(type)s, org, payload, 'history:' || g, {_snapshot("payload")}, 'PROMOTED', 1,
               at, job_id, at, at
        FROM source
        """,
        {"count": count, "type": HISTORY_TYPE, "org": ORG},
    )


def insert_burst(count: int, organization_id: uuid.UUID | None, *, prefix: str = "burst") -> None:
    """``count`` initial-pending intents of TYPE, as record_intent writes them."""
    run_sql(
        f"""
        INSERT INTO runledger_job_enqueue_intents (job_type, organization_id, payload,
            idempotency_key, enqueue_request, next_promotion_at, created_at)
        SELECT %(type)s, %(org)s::uuid, p.payload, %(prefix)s || g, {_snapshot("p.payload")},
               now() - interval '1 hour' + g * interval '1 millisecond',
               now() - interval '1 hour' + g * interval '1 millisecond'
        FROM generate_series(1, %(count)s) AS g,
             LATERAL (SELECT jsonb_build_object('n', g) AS payload) AS p
        """,
        {"count": count, "type": TYPE, "org": organization_id, "prefix": f"{prefix}:"},
    )


def insert_identical_jobs() -> None:
    """A job with the same key and request for every pending intent (direct enqueues)."""
    run_sql(
        """
        INSERT INTO runledger_job_queue (id, job_type, organization_id, payload, max_attempts,
            idempotency_key, stage, enqueue_request)
        SELECT gen_random_uuid(), job_type, organization_id, payload, 3, idempotency_key, stage,
               enqueue_request
        FROM runledger_job_enqueue_intents WHERE status = 'PENDING'
        """
    )


def forget_statistics() -> None:
    """What a table that was never analysed looks like."""
    run_sql(
        "DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])",
        [list(TABLES)],
    )
    run_sql(
        "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = ANY(%s::regclass[])"
        " OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = ANY(%s::regclass[]))",
        [list(TABLES), list(TABLES)],
    )


def pin_reltuples_low() -> None:
    """The estimate after a burst on a table analysed when it was small: about one row."""
    run_sql(
        "UPDATE pg_class SET reltuples = 1 WHERE oid = ANY(%s::regclass[])"
        " OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = ANY(%s::regclass[]))",
        [list(TABLES), list(TABLES)],
    )


def analyse() -> None:
    for table in TABLES:
        run_sql(f"ANALYZE {table}")


def prepare(statistics: str, organization_id: uuid.UUID | None, *, burst: int = BURST) -> None:
    """A history, then a burst of pending intents, with the statistics ``statistics`` names."""
    JobDefinition.objects.get_or_create(job_type=HISTORY_TYPE, defaults={"max_attempts": 3})
    for table in TABLES:
        run_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    if statistics == "empty_analysed":
        analyse()
    insert_history(HISTORY)
    if statistics == "stale":
        analyse()
    insert_burst(burst, organization_id)
    if statistics == "never_analysed":
        forget_statistics()
    elif statistics == "analysed":
        analyse()
    else:
        pin_reltuples_low()


@pytest.fixture(autouse=True)
def _restore_tables(transactional_db: None) -> Iterator[None]:
    """Put the tables back as a new test database has them: autovacuum on, no statistics
    (the rows go with the flush that follows)."""
    yield
    for table in TABLES:
        run_sql(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
    run_sql("DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])", [list(TABLES)])


# --- plans ----------------------------------------------------------------------------------------


def explain(sql: str, params: dict[str, Any] | None = None, *, pinned: bool) -> dict[str, Any]:
    """EXPLAIN ANALYZE ``sql`` in a savepoint that is rolled back, under the promotion
    transaction's planner settings when ``pinned``; return the plan's root."""
    with transaction.atomic(), connection.cursor() as cursor:
        if pinned:
            cursor.execute(session_queries.PROMOTION_PLANNER_SETTINGS)
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        row = cursor.fetchone()
        transaction.set_rollback(True)
    assert row is not None
    document = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    root: dict[str, Any] = document[0]["Plan"]
    return root


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def rows_read(node: dict[str, Any]) -> float:
    """Rows a scan node produced or filtered out (or index descents, on PostgreSQL 18), over
    all its loops."""
    per_loop = float(node.get("Actual Rows", 0)) + float(node.get("Rows Removed by Filter", 0))
    searches = float(node.get("Index Searches", 0))
    loops = float(node.get("Actual Loops", 1))
    return max(per_loop * loops, searches)


def assert_linear(plan: dict[str, Any], *, bound: int) -> None:
    """Every scan of a runledger table is a keyed access and reads at most ``bound`` rows."""
    for node in nodes(plan):
        relation = str(node.get("Relation Name"))
        if relation not in ACCESS or node["Node Type"] == "ModifyTable":
            continue
        access = (node["Node Type"], node.get("Index Name"))
        assert access in ACCESS[relation], (relation, access)
        assert rows_read(node) <= bound, (relation, access, rows_read(node))
    types = {node["Node Type"] for node in nodes(plan)}
    assert not types & {"Seq Scan", "Bitmap Heap Scan", "Bitmap Index Scan", "Merge Join"}


def result_of(sql: str, params: dict[str, Any]) -> tuple[Any, ...]:
    """Run ``sql`` under the promotion planner settings in a savepoint that is rolled back."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(session_queries.PROMOTION_PLANNER_SETTINGS)
        cursor.execute(sql, params)
        row = cursor.fetchone()
        transaction.set_rollback(True)
    assert row is not None
    return tuple(row)


BATCH_PARAMS = {"job_types": [TYPE], "limit": BATCH, "stages": STAGE_VALUES}


# --- promotion --------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("statistics", STATISTICS)
def test_promote_batch__any_statistics__claims_and_promotes_linearly(
    make_definition: MakeDefinition, statistics: str, scope: str
) -> None:
    make_definition()
    prepare(statistics, SCOPES[scope])

    plan = explain(promotion_queries.PROMOTE_BATCH, BATCH_PARAMS, pinned=True)
    claimed, inserted, promoted, unresolved, _tids = result_of(
        promotion_queries.PROMOTE_BATCH, BATCH_PARAMS
    )

    assert_linear(plan, bound=BATCH)
    assert "Nested Loop" not in {node["Node Type"] for node in nodes(plan)}
    claim = [n for n in nodes(plan) if n.get("Index Name") == "idx_job_enqueue_intents_pending"]
    assert [rows_read(node) for node in claim] == [BATCH]
    assert (claimed, inserted, promoted, unresolved) == (BATCH, BATCH, BATCH, None)


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("statistics", STATISTICS)
def test_converge_batch__any_statistics__reaches_jobs_by_unique_key(
    make_definition: MakeDefinition, statistics: str, scope: str
) -> None:
    """The burst of existing identical keys: the intents by ctid, each job by its scope's
    unique key, every intent settled."""
    make_definition()
    prepare(statistics, SCOPES[scope], burst=BATCH)
    insert_identical_jobs()
    params = {
        "tids": [
            row[0]
            for row in run_sql(
                "SELECT ctid::text FROM runledger_job_enqueue_intents WHERE status = 'PENDING'"
            )
        ],
        "stages": STAGE_VALUES,
        "conflict_code": Code.IDEMPOTENCY_CONFLICT,
        "conflict_message": CATALOG[Code.IDEMPOTENCY_CONFLICT][1],
        "legacy_code": Code.LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING,
        "legacy_message": CATALOG[Code.LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING][1],
    }

    plan = explain(promotion_queries.CONVERGE_BATCH, params, pinned=True)
    converged, conflicted, _codes = result_of(promotion_queries.CONVERGE_BATCH, params)

    assert_linear(plan, bound=BATCH)
    used = {node.get("Index Name") for node in nodes(plan)}
    unique = "uq_job_queue_type_idempotency_" + ("org" if SCOPES[scope] else "global")
    assert unique in used
    assert (len(converged), conflicted) == (BATCH, [])


@pytest.mark.parametrize("statistics", STATISTICS)
def test_claim_and_idle_check__any_statistics__walk_the_claim_order(
    make_definition: MakeDefinition, statistics: str
) -> None:
    make_definition()
    prepare(statistics, None)

    claim = explain(promotion_queries.PROMOTION_CLAIM, BATCH_PARAMS, pinned=True)
    idle = explain(promotion_queries.PROMOTION_HAS_ELIGIBLE, BATCH_PARAMS, pinned=True)

    assert_linear(claim, bound=BATCH)
    assert_linear(idle, bound=1)


@pytest.mark.parametrize("statistics", STATISTICS)
def test_fallback_rows__any_statistics__by_ctid(
    make_definition: MakeDefinition, statistics: str
) -> None:
    make_definition()
    prepare(statistics, None)
    tids = [
        row[0] for row in run_sql("SELECT ctid::text FROM runledger_job_enqueue_intents LIMIT 24")
    ]

    plan = explain(promotion_queries.PROMOTION_FALLBACK_ROWS, {"tids": tids}, pinned=True)

    assert_linear(plan, bound=len(tids))


# --- retention (pinned like a pass) and recording (the caller's transaction, as it is) -------


@pytest.mark.parametrize("statistics", STATISTICS)
def test_retention_statements__any_statistics__reach_their_batch_by_key(
    make_definition: MakeDefinition, statistics: str
) -> None:
    make_definition()
    prepare(statistics, ORG)
    job_ids = [
        row[0]
        for row in run_sql(
            "SELECT promoted_job_id FROM runledger_job_enqueue_intents"
            " WHERE status = 'PROMOTED' LIMIT 500"
        )
    ]
    cutoff = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)

    delete_exact = explain(
        operations_queries.DELETE_PROMOTED_FOR_JOBS, {"job_ids": job_ids}, pinned=True
    )
    lock_jobs = explain(operations_queries.LOCK_JOBS_IN_ID_ORDER, {"job_ids": job_ids}, pinned=True)
    delete_before = explain(
        operations_queries.DELETE_PROMOTED_BEFORE, {"cutoff": cutoff, "limit": 500}, pinned=True
    )

    for plan in (delete_exact, lock_jobs, delete_before):
        assert_linear(plan, bound=len(job_ids))
        assert max(rows_read(node) for node in nodes(plan) if "Relation Name" in node) == 500


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("statistics", STATISTICS)
def test_record_intent_lookup__any_statistics__by_unique_key(statistics: str, scope: str) -> None:
    organization_id = SCOPES[scope]
    prepare(statistics, organization_id)
    sql = (
        intent_queries.FIND_EXISTING_INTENT_ORG
        if organization_id
        else intent_queries.FIND_EXISTING_INTENT_GLOBAL
    )
    params = {
        "job_type": TYPE,
        "organization_id": organization_id,
        "idempotency_key": "burst:7",
        "snapshot": json.dumps({"payload": {"n": 7}}),
    }

    plan = explain(sql, params, pinned=False)

    assert_linear(plan, bound=1)
    unique = "uq_job_enqueue_intents_type_idempotency_" + ("org" if organization_id else "global")
    assert unique in {node.get("Index Name") for node in nodes(plan)}


# --- the whole pass on stale statistics ---------------------------------------------------------


@pytest.mark.parametrize("scope", SCOPES)
def test_promote_intents__stale_statistics__large_batch_promotes_set_based(
    make_definition: MakeDefinition, scope: str
) -> None:
    """A full pass on a burst the planner believes is one row promotes in one statement."""
    make_definition()
    prepare("stale", SCOPES[scope])

    with CaptureQueriesContext(connection) as captured:
        report = promote_intents([TYPE], limit=BATCH)

    assert (report.inserted_jobs, report.total_promoted, report.batch_was_full) == (
        BATCH,
        BATCH,
        True,
    )
    batches = [
        q for q in captured.captured_queries if "promote_job_enqueue_intents_batch" in q["sql"]
    ]
    assert len(batches) == 1
    assert not [q for q in captured.captured_queries if "AS enqueue_request" in q["sql"]]
    assert JobEnqueueIntent.objects.filter(job_type=TYPE, status="PROMOTED").count() == BATCH
    assert Job.objects.filter(job_type=TYPE).count() == BATCH
