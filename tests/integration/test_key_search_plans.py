"""The admin's search by an idempotency key alone is index-backed on every server the suite
runs on (issue 13, item 4): PostgreSQL 15 to 17 cannot skip the job type and tenant that lead
the unique indexes, so the key is found through each table's key-prefix index.

The plans are read with EXPLAIN under no statistics, stale statistics (analysed while empty)
and fresh ones, over thousands of rows spread across job types and tenants, with one key
repeated in every tenant. The rows are committed and emptied by the flush that follows each
test: rows written and rolled back would stay behind as dead tuples, and a bloated table
changes the plans of the tests that run after.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib import admin
from django.db import connection
from django.db.models import QuerySet
from django.test import RequestFactory

from runledger_django.db import intent_queries, operations_queries
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent
from runledger_django.services.search import KEY_SEARCH_LIMIT, intent_ids_by_key, job_ids_by_key
from tests.conftest import run_sql

pytestmark = pytest.mark.django_db(transaction=True)

TYPES = [f"jobs.test.search_{n}" for n in range(8)]
TENANTS = [uuid.UUID(int=0x0190_0000_0000_7000_8000_0000_0000_0000 + n) for n in range(50)]
ROWS = 20_000
TABLES = ("runledger_job_enqueue_intents", "runledger_job_queue")
INDEXES = {
    "runledger_job_enqueue_intents": "idx_job_enqueue_intents_idempotency_key_prefix",
    "runledger_job_queue": "idx_job_queue_idempotency_key_prefix",
}
SNAPSHOT = (
    "jsonb_build_object('payload', '{}'::jsonb, 'priority', NULL::integer, "
    "'max_attempts', NULL::integer, 'timeout_seconds', NULL::integer, "
    "'next_run_at', NULL::text, 'stage', 'queued')"
)


def insert_rows() -> None:
    """ROWS intents and as many keyed jobs over eight types, fifty tenants and the global
    scope; the key 'shared' in every type of every tenant besides."""
    JobDefinition.objects.bulk_create([JobDefinition(job_type=t, max_attempts=3) for t in TYPES])
    source = """
        SELECT (%(types)s::text[])[1 + g %% 8] AS job_type,
               CASE WHEN g %% 51 = 0 THEN NULL ELSE (%(tenants)s::uuid[])[1 + g %% 50] END
                   AS organization_id,
               'order:' || g AS idempotency_key
        FROM generate_series(1, %(rows)s) AS g
        UNION ALL
        SELECT t, o, 'shared' FROM unnest(%(types)s::text[]) AS t, unnest(%(tenants)s::uuid[]) AS o
    """
    params = {"types": TYPES, "tenants": TENANTS, "rows": ROWS}
    run_sql(
        "INSERT INTO runledger_job_enqueue_intents (job_type, organization_id, payload,"
        f" idempotency_key, enqueue_request) SELECT job_type, organization_id, '{{}}',"
        f" idempotency_key, {SNAPSHOT} FROM ({source}) AS s",
        params,
    )
    run_sql(
        "INSERT INTO runledger_job_queue (id, job_type, organization_id, max_attempts,"
        f" idempotency_key, enqueue_request) SELECT gen_random_uuid(), job_type,"
        f" organization_id, 3, idempotency_key, {SNAPSHOT} FROM ({source}) AS s",
        params,
    )


def forget_statistics() -> None:
    run_sql("DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])", [list(TABLES)])
    run_sql(
        "UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = ANY(%s::regclass[])"
        " OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = ANY(%s::regclass[]))",
        [list(TABLES), list(TABLES)],
    )


def analyse() -> None:
    for table in TABLES:
        run_sql(f"ANALYZE {table}")


@pytest.fixture(autouse=True)
def _quiet_tables() -> Iterator[None]:
    """No autovacuum while a test reads plans (it would analyse behind the test's back); the
    tables as a new test database has them afterwards: autovacuum on, no statistics."""
    for table in TABLES:
        run_sql(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    yield
    for table in TABLES:
        run_sql(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
    run_sql("DELETE FROM pg_statistic WHERE starelid = ANY(%s::regclass[])", [list(TABLES)])


@pytest.fixture(params=["never_analysed", "stale", "analysed"])
def statistics(request: pytest.FixtureRequest) -> str:
    """The rows, under the statistics the parameter names."""
    if request.param == "stale":
        analyse()
    insert_rows()
    if request.param == "never_analysed":
        forget_statistics()
    elif request.param == "analysed":
        analyse()
    return str(request.param)


def plan_of(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        document = cursor.fetchone()[0]
    plan: dict[str, Any] = (json.loads(document) if isinstance(document, str) else document)[0][
        "Plan"
    ]
    return plan


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


def accesses(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """How the plan reaches each runledger table: (node type, index name)."""
    reached = []
    for node in nodes(plan):
        relation = node.get("Relation Name")
        index = node.get("Index Name")
        if node["Node Type"] == "Bitmap Heap Scan":
            continue  # its Bitmap Index Scan child names the index
        if (
            relation in TABLES
            or index in INDEXES.values()
            or str(index).startswith(("runledger_", "uq_job", "idx_job"))
        ):
            reached.append((node["Node Type"], index))
    return reached


@pytest.mark.parametrize(
    ("sql", "table"),
    [
        (intent_queries.INTENT_IDS_BY_KEY, "runledger_job_enqueue_intents"),
        (operations_queries.JOB_IDS_BY_KEY, "runledger_job_queue"),
    ],
    ids=["intents", "jobs"],
)
@pytest.mark.parametrize("key", ["order:4242", "shared"])
def test_search_by_key__any_statistics__through_the_key_prefix_index_only(
    statistics: str, sql: str, table: str, key: str
) -> None:
    plan = plan_of(sql, {"key": key, "limit": KEY_SEARCH_LIMIT})

    reached = accesses(plan)
    assert reached, plan
    assert {index for _, index in reached} == {INDEXES[table]}, reached
    assert {node_type for node_type, _ in reached} <= {
        "Index Scan",
        "Bitmap Index Scan",
    }, reached


def test_search_by_key__any_type_or_tenant__every_row_of_the_key(statistics: str) -> None:
    shared = len(TYPES) * len(TENANTS)

    assert len(intent_ids_by_key("shared")) == shared
    assert len(job_ids_by_key("shared")) == shared
    [intent] = intent_ids_by_key("order:4242")
    assert JobEnqueueIntent.objects.get(id=intent).idempotency_key == "order:4242"
    [job] = job_ids_by_key("order:4242")
    assert Job.objects.get(id=job).idempotency_key == "order:4242"


@pytest.mark.parametrize("model", [JobEnqueueIntent, Job], ids=["intents", "jobs"])
def test_admin_search__changelist_query__reads_the_rows_found_by_primary_key(
    statistics: str, model: type[JobEnqueueIntent] | type[Job]
) -> None:
    """The changelist's own query then reads the few rows by id: no walk of the creation
    order (which a key condition inside it could have invited)."""
    model_admin = admin.site._registry[model]
    request = RequestFactory().get("/", {"q": "order:4242"})
    queryset: QuerySet[Any] = model_admin.get_queryset(request)
    found, _ = model_admin.get_search_results(request, queryset, "order:4242")
    page = found.order_by("-created_at", "-id")[:100]

    document = page.explain(format="json")
    plan = json.loads(document)[0]["Plan"]
    reached = accesses(plan)

    assert [node_type for node_type, _ in reached] == ["Index Scan"], reached
    assert reached[0][1] == f"{model._meta.db_table}_pkey"
    assert len(list(page)) == 1


@pytest.mark.parametrize("key", ["", "   ", "nul\x00byte", "x" * 1025])
def test_search_by_key__key_no_row_can_hold__nothing_found_without_a_query(
    key: str, django_assert_num_queries: Any
) -> None:
    with django_assert_num_queries(0):
        assert intent_ids_by_key(key) == []
        assert job_ids_by_key(key) == []
