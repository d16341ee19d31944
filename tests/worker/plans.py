"""The plans a hot-path function's statements really run with, read with auto_explain.

The worker's transitions are PL/pgSQL functions (migration 0016) whose statements are planned
once per session with a generic plan (``plan_cache_mode = force_generic_plan`` on each
function). EXPLAIN of the call shows only a function scan, so the test session loads
auto_explain, logs every nested statement's plan to the client (``client_min_messages = log``,
transaction-local) and collects them: the very plans PL/pgSQL cached and executed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from runledger_django.db import session_queries

from .conftest import LIFECYCLE_CAPS

_LOG_SETTINGS = """
SELECT set_config('auto_explain.log_min_duration', '0', true),
       set_config('auto_explain.log_nested_statements', 'on', true),
       set_config('auto_explain.log_format', 'json', true),
       set_config('client_min_messages', 'log', true)
"""

_QUIET = "SELECT set_config('auto_explain.log_min_duration', '-1', true)"


def function_plans(sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run ``sql`` (a call of a hot-path function) under the lifecycle caps in the test's
    transaction and return the plan of each of its own statements that reads the job queue."""
    messages: list[str] = []
    session = connection.connection
    assert session is not None

    def collect(diagnostic: Any) -> None:
        messages.append(str(diagnostic.message_primary or ""))

    with connection.cursor() as cursor:
        cursor.execute(session_queries.CAP_LIFECYCLE_TIMEOUTS, LIFECYCLE_CAPS)
        cursor.execute("LOAD 'auto_explain'")
        cursor.execute(_LOG_SETTINGS)
        session.add_notice_handler(collect)
        try:
            cursor.execute(sql, params)
            cursor.execute(_QUIET)
        finally:
            session.remove_notice_handler(collect)
    plans = []
    for message in messages:
        if "plan:" not in message:
            continue
        plan = json.loads(message[message.index("{") :])
        if _own(plan.get("Query Text", "")):
            plans.append(plan)
    return plans


def _own(text: str) -> bool:
    """A function's own statement on the queue (its alias is ``job``), not the call that ran
    it nor a foreign key's check."""
    return "runledger_job_queue job" in text and "runledger_" + "job_queue x" not in text


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


def queue_reads(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's reads of the job queue (scans, not the write node itself)."""
    return [
        node
        for node in walk(plan["Plan"])
        if node.get("Relation Name") == "runledger_job_queue" and node["Node Type"] != "ModifyTable"
    ]


QUEUE_STATS = ["analysed", "cleared"]
"""The statistics a plan test gives the planner: none at all (a queue never analysed), or the
backlog's own. Never those left by other tests: ANALYZE writes a table's row estimate in place,
so it survives the test transaction's rollback and would make the plan depend on test order."""

CLEARED_NEEDS_18 = (
    "pg_clear_relation_stats exists from PostgreSQL 18; before it, the estimates another test's "
    "ANALYZE left on the queue cannot be reset (the analysed variant runs on every server)"
)


def set_queue_stats(stats: str) -> None:
    """Give the queue ``stats`` (see QUEUE_STATS): call after filling it."""
    connection.ensure_connection()
    if stats == "cleared" and connection.pg_version < 180000:  # type: ignore[attr-defined]
        pytest.skip(CLEARED_NEEDS_18)
    with connection.cursor() as cursor:
        if stats == "cleared":
            cursor.execute("SELECT pg_clear_relation_stats('public', 'runledger_job_queue')")
        else:
            cursor.execute("ANALYZE runledger_job_queue")
