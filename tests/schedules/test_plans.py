"""The scheduler's statements are index-backed at scale, whatever the statistics say: the idle
look and the due claim walk the partial due index and read only due rows, and a pass's write
reaches schedules, definitions and jobs by key only (issue 18, checklist item 83).

20,000 active schedules with future cursors and 50 due ones, committed, under no statistics,
stale ones (analysed while empty) and fresh ones. Each statement runs under EXPLAIN ANALYZE in
a transaction that is rolled back.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, transaction

from runledger_django.db import schedule_queries as q
from runledger_django.models import JobDefinition
from runledger_django.services.schedules.passes import DueSchedule, Writes, plan_row

from ..conftest import run_sql
from .conftest import SCHEDULED_TYPE, at

pytestmark = pytest.mark.django_db(transaction=True)

ROWS = 20_000
DUE = 50
STATISTICS = ["never_analysed", "empty_analysed", "analysed"]
DUE_INDEX = "idx_job_schedules_next_fire"
DEFINITION_KEYS = {
    "runledger_job_definitions_pkey",
    # Django's text_pattern_ops twin of the text primary key: an equality lookup too.
    "runledger_job_definitions_job_type_d77efdf2_like",
}


def insert_schedules(count: int, *, due: bool) -> None:
    run_sql(
        """
        INSERT INTO runledger_job_schedules (id, name, job_type, cron_expr, next_fire_at,
                                             next_scheduled_for)
        SELECT gen_random_uuid(), %(prefix)s || g, %(job_type)s, '* * * * *', c, c
        FROM generate_series(1, %(count)s) AS g,
             LATERAL (SELECT CASE WHEN %(due)s THEN now() - interval '1 minute'
                                  ELSE now() + (g || ' seconds')::interval END AS c) AS cursor
        """,
        {
            "prefix": "due-" if due else "future-",
            "job_type": SCHEDULED_TYPE,
            "count": count,
            "due": due,
        },
    )


@pytest.fixture(params=STATISTICS)
def schedules(request: pytest.FixtureRequest) -> Iterator[str]:
    JobDefinition.objects.create(job_type=SCHEDULED_TYPE)
    if request.param == "empty_analysed":
        run_sql("ANALYZE runledger_job_schedules")
    insert_schedules(ROWS, due=False)
    insert_schedules(DUE, due=True)
    if request.param == "analysed":
        run_sql("ANALYZE runledger_job_schedules")
    yield request.param
    run_sql("TRUNCATE runledger_schedule_fires, runledger_job_schedules CASCADE")


def explain(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        raw = cursor.fetchone()[0]
        document = json.loads(raw) if isinstance(raw, str) else raw
        plan: dict[str, Any] = document[0]["Plan"]
        transaction.set_rollback(True)
    return plan


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def scans_of(plan: dict[str, Any], table: str) -> list[dict[str, Any]]:
    return [
        node
        for node in nodes(plan)
        if node.get("Relation Name") == table and node["Node Type"] != "ModifyTable"
    ]


def assert_index_only(plan: dict[str, Any], table: str, indexes: set[str], max_rows: int) -> None:
    scans = scans_of(plan, table)
    for scan in scans:
        if scan["Node Type"] == "Bitmap Heap Scan":
            # A bitmap over the allowed index reads the same rows, in heap order.
            used = {node.get("Index Name") for node in nodes(scan) if node is not scan}
        else:
            assert scan["Node Type"] in ("Index Scan", "Index Only Scan"), scan["Node Type"]
            used = {scan.get("Index Name")}
        assert used and used <= indexes, used
        rows = scan["Actual Rows"] * scan.get("Actual Loops", 1)
        removed = scan.get("Rows Removed by Filter", 0)
        assert rows + removed <= max_rows, (rows, removed)


def test_peek_schedules__walks_the_due_index__one_row(schedules: str) -> None:
    for sql, params in (
        (q.PEEK_SCHEDULES, {}),
        (q.PEEK_SCHEDULES_OF_TYPES, {"job_types": [SCHEDULED_TYPE]}),
    ):
        plan = explain(sql, params)
        assert_index_only(plan, "runledger_job_schedules", {DUE_INDEX}, max_rows=1)
        assert scans_of(plan, "runledger_job_schedules")


def test_claim_due_schedules__due_rows_only(schedules: str) -> None:
    for sql in (q.CLAIM_DUE_SCHEDULES, q.CLAIM_DUE_SCHEDULES_OF_TYPES):
        plan = explain(sql, {"limit": 500, "now": None, "job_types": [SCHEDULED_TYPE]})
        assert_index_only(plan, "runledger_job_schedules", {DUE_INDEX}, max_rows=DUE + 1)
        assert_index_only(plan, "runledger_job_definitions", DEFINITION_KEYS, max_rows=2 * DUE)


def test_materialize_fires__keys_only(schedules: str) -> None:
    rows = run_sql(
        """
        SELECT id, name, job_type, cron_expr, interval_seconds, timezone, max_jitter_seconds,
               catch_up, catch_up_grace_seconds, catch_up_limit, overlap, next_fire_at,
               next_scheduled_for, NULL, true
        FROM runledger_job_schedules WHERE name LIKE 'due-%%'
        """
    )
    writes = Writes()
    for row in rows:
        plan_row(DueSchedule.from_row(row), at("2099-01-01T00:00"), writes)
    plan = explain(q.MATERIALIZE_FIRES, writes.params())
    assert_index_only(
        plan, "runledger_job_schedules", {"runledger_job_schedules_pkey"}, max_rows=3 * DUE
    )
    assert_index_only(plan, "runledger_job_definitions", DEFINITION_KEYS, max_rows=DUE)
    assert not scans_of(plan, "runledger_job_queue")  # inserted, never scanned
    assert uuid.UUID(str(rows[0][0]))
