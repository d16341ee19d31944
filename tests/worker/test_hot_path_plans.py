"""The worker's hot path plans once per session, and its cached plans are the index-driven ones.

Each hot statement (the claim, the claim of one job, the success of one lease and of many, the
failure, the heartbeat) is a PL/pgSQL function of migration 0016 that pins generic plans. The
plans read here are the ones the function cached and ran (auto_explain, tests/worker/plans.py),
on a queue far larger than the work, never analysed (statistics cleared) or analysed: no
sequential scan of the job queue, the claim walking idx_job_queue_claim and every lease write reaching its row by primary
key.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from runledger_django.db import lifecycle_queries
from runledger_django.domain import JobLease
from runledger_django.services.claim import resource_head_window
from tests.conftest import run_sql
from tests.worker.conftest import TYPE, WORKER, Enqueue, claim_one
from tests.worker.plans import QUEUE_STATS, function_plans, queue_reads, set_queue_stats, walk

pytestmark = pytest.mark.django_db

BACKLOG = 20_000

HOT_FUNCTIONS = (
    "runledger_claim_jobs",
    "runledger_complete_success",
    "runledger_complete_success_many",
    "runledger_complete_failure",
    "runledger_heartbeat_leases",
)


def _fill(stats: str) -> None:
    """A backlog of PENDING jobs of the type and LEASED jobs of other workers, each its own
    creation time (as a real queue's)."""
    run_sql(
        "INSERT INTO runledger_job_queue (id, job_type, payload, max_attempts, created_at) "
        "SELECT runledger_uuidv7(), %s, '{}'::jsonb, 3, now() - g * interval '1 second' "
        "FROM generate_series(1, %s) AS g",
        [TYPE, BACKLOG],
    )
    run_sql(
        "INSERT INTO runledger_job_queue (id, job_type, payload, status, max_attempts, "
        "worker_id, lease_expires_at, started_at, created_at) "
        "SELECT runledger_uuidv7(), %s, '{}'::jsonb, 'LEASED', 3, 'worker-' || (g %% 7), "
        "now() + interval '1 minute', now(), now() - g * interval '1 second' "
        "FROM generate_series(1, %s) AS g",
        [TYPE, BACKLOG // 4],
    )
    set_queue_stats(stats)


def _lease_params(lease: JobLease) -> dict[str, Any]:
    return {
        "job_id": lease.job_id,
        "run_number": lease.run_number,
        "attempt": lease.attempt,
        "worker_id": lease.worker_id,
        "workflow": False,
    }


def _many_params(leases: list[JobLease]) -> dict[str, Any]:
    return {
        "job_ids": [lease.job_id for lease in leases],
        "run_numbers": [lease.run_number for lease in leases],
        "attempts": [lease.attempt for lease in leases],
        "worker_id": leases[0].worker_id,
        "workflow": False,
    }


def _only_plan(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    plans = function_plans(sql, params)
    assert len(plans) == 1, [plan.get("Query Text", "")[:200] for plan in plans]
    return plans[0]


def _assert_no_queue_scan(plan: dict[str, Any]) -> list[dict[str, Any]]:
    reads = queue_reads(plan)
    assert reads, plan
    assert all(node["Node Type"] not in ("Seq Scan", "Bitmap Heap Scan") for node in reads), reads
    return reads


def _assert_by_primary_key(plan: dict[str, Any]) -> None:
    for node in _assert_no_queue_scan(plan):
        if node["Node Type"] in ("Index Scan", "Index Only Scan"):
            assert node.get("Index Name") == "runledger_job_queue_pkey", node
            assert "id = " in node.get("Index Cond", ""), node


def test_hot_functions__each__pins_generic_plans_and_the_planner_pins() -> None:
    """force_generic_plan: the plan is made once per session, never again per call (the first
    calls' custom plans would be planned each time); the pins keep that one plan index-driven
    whatever the statistics were when it was made."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT proname, proconfig, prolang = (SELECT oid FROM pg_language "
            "WHERE lanname = 'plpgsql') FROM pg_proc WHERE proname = ANY(%s) ORDER BY proname",
            [list(HOT_FUNCTIONS)],
        )
        rows = cursor.fetchall()
    assert sorted(row[0] for row in rows) == sorted(HOT_FUNCTIONS)
    for name, config, plpgsql in rows:
        assert plpgsql, name
        assert {
            "plan_cache_mode=force_generic_plan",
            "enable_sort=off",
            "enable_seqscan=off",
            "enable_bitmapscan=off",
            "jit=off",
        } <= set(config), (name, config)


@pytest.mark.parametrize("stats", QUEUE_STATS)
def test_claim_functions__large_backlog__walk_the_claim_index_under_the_lock(
    enqueue: Enqueue, stats: str
) -> None:
    job_id = enqueue()
    _fill(stats)
    params: dict[str, Any] = {
        "job_types": [TYPE],
        "limit": 8,
        "head_window": resource_head_window(8),
        "worker_id": WORKER,
        "lease_seconds": 60,
    }
    batch = _only_plan(lifecycle_queries.CLAIM_JOBS, params)
    reads = _assert_no_queue_scan(batch)
    assert any(node.get("Index Name") == "idx_job_queue_claim" for node in reads), reads
    lock_rows = [node for node in walk(batch["Plan"]) if node["Node Type"] == "LockRows"]
    assert [node["Plans"][0]["Node Type"] for node in lock_rows] == ["Index Scan"]

    one = _only_plan(lifecycle_queries.CLAIM_ONE_JOB, {**params, "job_id": job_id})
    _assert_no_queue_scan(one)


@pytest.mark.parametrize("stats", QUEUE_STATS)
def test_lease_functions__large_queue__reach_each_lease_by_primary_key(
    enqueue: Enqueue, stats: str
) -> None:
    leases = [claim_one().lease for _ in [enqueue() for _ in range(4)]]
    _fill(stats)

    _assert_by_primary_key(
        _only_plan(
            lifecycle_queries.HEARTBEAT_LEASES, {**_many_params(leases), "lease_seconds": 60}
        )
    )
    _assert_by_primary_key(
        _only_plan(lifecycle_queries.COMPLETE_SUCCESS, {**_lease_params(leases[0]), "output": None})
    )
    _assert_by_primary_key(
        _only_plan(
            lifecycle_queries.COMPLETE_SUCCESS_MANY,
            {**_many_params(leases[1:3]), "outputs": [None, None]},
        )
    )
    _assert_by_primary_key(
        _only_plan(
            lifecycle_queries.COMPLETE_FAILURE,
            {
                **_lease_params(leases[3]),
                "retryable": True,
                "kind": "RETRYABLE",
                "code": "job.handler_failed",
                "message": "Job failed.",
                "error_class": None,
                "traceback": None,
                "policy_retry_delay_ms": 1000,
                "retry_after_ms": None,
                "retry_at": None,
                "timing_valid": True,
            },
        )
    )
