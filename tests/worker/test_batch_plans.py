"""The statements that write many leases of one worker reach their rows through an index
condition on the ids, on a queue far larger than the batch, never analysed or analysed. (Which
index is the planner's: with misleading statistics PostgreSQL 18 may prefer a skip scan of the
(created_at, id) index to the primary key. Not pinned yet.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from runledger_django.db import lifecycle_queries, session_queries
from tests.conftest import run_sql
from tests.worker.conftest import LIFECYCLE_CAPS, TYPE, Enqueue, claim_one
from tests.worker.plans import QUEUE_STATS, function_plans, set_queue_stats

pytestmark = pytest.mark.django_db

BACKLOG = 5000


@pytest.mark.parametrize(
    ("statement", "extra"),
    [
        (lifecycle_queries.COMPLETE_SUCCESS_MANY, {"outputs": [None, None], "workflow": False}),
        (lifecycle_queries.HAND_BACK_LEASES, {"reason": "worker shutting down"}),
    ],
    ids=["complete_jobs_success", "hand_back_leases"],
)
@pytest.mark.parametrize("stats", QUEUE_STATS)
def test_many_lease_statement__large_queue__every_queue_read_is_an_index_lookup(
    enqueue: Enqueue, statement: str, extra: dict[str, Any], stats: str
) -> None:
    leases = [claim_one().lease for _ in [enqueue() for _ in range(2)]]
    # Each row its own creation time, as a real queue's: one shared time would make a skip
    # scan of the (created_at, id) index as good as the primary key (PostgreSQL 18 takes it).
    run_sql(
        "INSERT INTO runledger_job_queue (id, job_type, payload, status, max_attempts, "
        "worker_id, lease_expires_at, started_at, created_at) "
        "SELECT runledger_uuidv7(), %s, '{}'::jsonb, 'LEASED', 3, 'worker-' || (g %% 7), "
        "now() + interval '1 minute', now(), now() - g * interval '1 second' "
        "FROM generate_series(1, %s) AS g",
        [TYPE, BACKLOG],
    )
    set_queue_stats(stats)
    params = {
        "job_ids": [lease.job_id for lease in leases],
        "run_numbers": [lease.run_number for lease in leases],
        "attempts": [lease.attempt for lease in leases],
        "worker_id": leases[0].worker_id,
        **extra,
    }
    if statement == lifecycle_queries.COMPLETE_SUCCESS_MANY:
        # A function (migration 0016): the generic plan it cached and ran.
        [function_plan] = function_plans(statement, params)
        plan = function_plan["Plan"]
    else:
        with connection.cursor() as cursor:
            cursor.execute(session_queries.CAP_LIFECYCLE_TIMEOUTS, LIFECYCLE_CAPS)
            cursor.execute("EXPLAIN (FORMAT JSON) " + statement, params)
            plan = cursor.fetchone()[0][0]["Plan"]

    reads = [
        node
        for node in _walk(plan)
        if node.get("Relation Name") == "runledger_job_queue" and "Scan" in node["Node Type"]
    ]
    assert len(reads) == 2, reads
    for node in reads:
        # An index scan bounded by the ids: never a walk of a whole index filtered row by row
        # (what hand-back's ORDER BY id did with sorts pinned off).
        assert node["Node Type"] == "Index Scan", node
        assert "id = " in node.get("Index Cond", ""), node


def _walk(node: dict[str, Any]) -> Any:
    yield node
    for child in node.get("Plans", []):
        yield from _walk(child)
