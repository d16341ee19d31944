"""The example shop's whole story through PgBouncer in transaction pooling mode.

Views record intents, promoters promote, workers run, operators cancel and requeue in the
admin, retention prunes, all in processes whose only database is PgBouncer with two server
connections shared by every client, no reset query and round-robin assignment. Afterwards the
pooled server connections must carry nothing from any client's session: no SET, no prepared
statement, no LISTEN, no advisory lock, no holdable cursor.

``transaction=True``: the processes commit, and the test reads what they committed.
"""

from __future__ import annotations

import json
import signal

import pytest

from example_project.shop.fulfilment import FULFIL_JOB_TYPES
from example_project.shop.models import Order
from runledger_django.models import Job, JobEnqueueIntent
from runledger_django.worker.listener import UNREACHABLE_MESSAGE
from tests.conftest import run_sql
from tests.pgbouncer.bouncer import POOL_SIZE, PgBouncer, pooled_server_states
from tests.pgbouncer.conftest import SpawnWorker, run_client
from tests.pgbouncer.shop import (
    RECEIPT,
    WAREHOUSE,
    WAREHOUSE_RUN_1,
    attempt_outcomes,
    jobs_of,
    statuses,
    warehouse_attempts_so_far,
)
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

ORDERS = 12
THREADS = 6
"""Six request threads, six client connections, two server connections."""
CONCURRENCY = 4
POLL = 0.2
FALLBACK = UNREACHABLE_MESSAGE.split(" (")[0]


def test_shop__through_transaction_pooling__every_attempt_runs_once_and_no_session_state_is_left(
    pgbouncer: PgBouncer, spawn_worker: SpawnWorker, shop_definitions: None
) -> None:
    # Views record the intents, in the transaction of the order they belong to.
    [checkout] = run_client(pgbouncer, ("checkout", {"orders": ORDERS, "threads": THREADS}))
    for first, retry in checkout["orders"]:
        assert (first["status"], retry["status"]) == (201, 200)
        for kind in ("intent", "warehouse_intent"):
            assert first["body"][kind]["status"] == "PENDING"
            assert (first["body"][kind]["disposition"], retry["body"][kind]["disposition"]) == (
                "inserted",
                "existing",
            )
            assert retry["body"][kind]["intent_id"] == first["body"][kind]["intent_id"]
    assert checkout["failed"]["status"] == 409
    assert Order.objects.count() == ORDERS
    assert not Order.objects.filter(reference="pgb-failed").exists()
    assert JobEnqueueIntent.objects.filter(status="PENDING").count() == 2 * ORDERS
    assert not JobEnqueueIntent.objects.filter(idempotency_key__endswith="pgb-failed").exists()

    # promote_intents promotes the receipts; an operator cancels two and requeues one.
    [[promoted]] = run_client(
        pgbouncer, ("commands", [["promote_intents", "--job-type", RECEIPT, "--json"]])
    )
    passes = [json.loads(line) for line in promoted.splitlines()]
    assert sum(report["inserted_jobs"] for report in passes) == ORDERS
    receipts = jobs_of(RECEIPT)
    assert [job["status"] for job in receipts] == ["PENDING"] * ORDERS
    requeued, canceled = str(receipts[0]["id"]), str(receipts[1]["id"])
    [operator] = run_client(
        pgbouncer, ("admin", {"cancel": [requeued, canceled], "requeue": [requeued]})
    )
    assert operator["actions"] == {"cancel_selected_jobs": 302, "requeue_selected_jobs": 302}
    assert set(operator["pages"].values()) == {200}
    assert [(job["status"], job["run_number"]) for job in jobs_of(RECEIPT)[:2]] == [
        ("PENDING", 2),
        ("CANCELED", 1),
    ]

    # runledger_worker --promote --burst: promotes the warehouse intents, runs what is due.
    burst = spawn_worker("--promote", "--burst", "--concurrency", str(CONCURRENCY), "-v", "0")
    assert burst.wait() == 0, burst.stderr_lines
    assert statuses(RECEIPT) == {"SUCCEEDED": ORDERS - 1, "CANCELED": 1}
    assert JobEnqueueIntent.objects.filter(status="PROMOTED").count() == 2 * ORDERS
    # The demo warehouse answers no job's first run: each attempt asks to be retried 300 ms
    # later (a slow burst runs the retries that fall due meanwhile too, up to the dead letter).
    assert set(statuses(WAREHOUSE)) <= {"PENDING", "DEAD_LETTERED"}
    assert all(warehouse_attempts_so_far(job["id"]) for job in jobs_of(WAREHOUSE))

    # A long-running worker that does not listen (RUNLEDGER["WORKER_LISTEN"] = False): it
    # polls, and the retries run until they dead-letter.
    worker = spawn_worker(
        "--promote",
        "--concurrency",
        str(CONCURRENCY),
        WORKER_POLL_INTERVAL=POLL,
        WORKER_LISTEN=False,
    )
    wait_until(lambda: statuses(WAREHOUSE) == {"DEAD_LETTERED": ORDERS}, what="the dead letters")

    # Requeued by an operator, the warehouse jobs run again, found by polling.
    dead = [str(job["id"]) for job in jobs_of(WAREHOUSE)]
    [operator] = run_client(pgbouncer, ("admin", {"requeue": dead}))
    assert operator["actions"] == {"requeue_selected_jobs": 302}
    assert set(operator["pages"].values()) == {200}
    wait_until(lambda: statuses(WAREHOUSE) == {"SUCCEEDED": ORDERS}, what="the requeued runs")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.stderr_lines
    assert not any(FALLBACK in line for line in worker.stderr_lines)  # it never probed

    # Every receipt was sent exactly once, the requeued one included; the canceled one never.
    for job in jobs_of(RECEIPT):
        if job["id"] == receipts[1]["id"]:
            assert (job["status"], attempt_outcomes(job["id"])) == ("CANCELED", [])
            continue
        assert job["output"]["already_sent"] is False
        run = 2 if job["id"] == receipts[0]["id"] else 1
        assert attempt_outcomes(job["id"]) == [(run, 1, "SUCCEEDED")]
    for job in jobs_of(WAREHOUSE):
        assert attempt_outcomes(job["id"]) == [*WAREHOUSE_RUN_1, (2, 1, "SUCCEEDED")]
    assert Order.objects.filter(receipt_sent_at__isnull=False).count() == ORDERS - 1

    # job_metrics, then retention: the receipts' intents age first, then every finished job.
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET promoted_at = now() - interval '2 hours' "
        "WHERE job_type = %s",
        [RECEIPT],
    )
    run_sql(
        "UPDATE runledger_job_queue SET finished_at = now() - interval '2 hours', "
        "created_at = now() - interval '3 hours'"
    )
    [[metrics, pruned_intents, pruned_jobs]] = run_client(
        pgbouncer,
        (
            "commands",
            [
                ["job_metrics", "--json"],
                ["prune_intents", "--older-than", "1h"],
                ["prune_jobs", "--older-than", "1h"],
            ],
        ),
    )
    by_type = {row["job_type"]: row for row in json.loads(metrics)}
    assert {key: by_type[RECEIPT][key] for key in ("succeeded_24h", "due_count")} == {
        "succeeded_24h": ORDERS - 1,
        "due_count": 0,
    }
    assert {
        key: by_type[WAREHOUSE][key]
        for key in ("succeeded_24h", "retried_24h", "dead_lettered_24h", "due_count")
    } == {
        "succeeded_24h": ORDERS,
        "retried_24h": 2 * ORDERS,
        "dead_lettered_24h": ORDERS,
        "due_count": 0,
    }
    assert f"Deleted {ORDERS} promoted intents" in pruned_intents
    jobs = (2 + len(FULFIL_JOB_TYPES)) * ORDERS  # two intents' jobs and the four steps
    assert f"Deleted {jobs} jobs ({jobs - 1} succeeded, 0 dead-lettered, 1 canceled)" in pruned_jobs
    assert f"with their {ORDERS} promoted intents" in pruned_jobs
    assert (Job.objects.count(), JobEnqueueIntent.objects.count()) == (0, 0)
    assert Order.objects.count() == ORDERS

    # Every client of the story was served by the same two server connections at most, and
    # nothing any client did outlived its transaction on them.
    clients, servers = pgbouncer.connections_made()
    assert servers <= POOL_SIZE < clients
    for state in pooled_server_states(pgbouncer):
        assert state.settings == []
        assert state.prepared_statements == []
        assert state.listening == []
        assert state.advisory_locks == []
        assert state.holdable_cursors == []
