"""PostgreSQL restarted while an atomic handler's COMMIT is in flight (checklist item 67).

A worker subprocess runs the atomic handler of tests/exactly_app/jobs.py against a throwaway
embedded server (tests/outage/test_outage.py's ``Cluster``), which the test stops in immediate
mode while the handler's COMMIT waits:
- at the commit gate (a deferred trigger waiting for an advisory lock the test holds): the
  commit record was never written, so the restart aborts it; the worker settles the outcome
  from the job's row (not committed), the attempt fails, the next one applies the effect;
- for a synchronous standby that never answers: the commit is durable locally, so recovery
  keeps it; the worker settles it as committed and records nothing more.
Either way the effect rows number exactly one. The tests wait on pg_stat_activity and on the
worker's log lines; the only fixed wait is the restart itself.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.exactly_app import EFFECT
from tests.outage.test_outage import (  # the fixture too: one throwaway server per module
    Cluster,
    Command,
    cluster,  # noqa: F401
    wait_for_rows,
)

pytestmark = pytest.mark.slow

GATE = 7070


def wait_for_commit(conn: psycopg.Connection[Any], wait_event: str) -> int:
    """The pid of the backend whose COMMIT waits on ``wait_event``."""
    for _ in range(3000):
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE query = 'COMMIT' AND wait_event = %s",
            [wait_event],
        ).fetchone()
        if row is not None:
            return int(row[0])
        conn.execute("SELECT pg_sleep(0.01)")
    raise AssertionError(f"no COMMIT waited on {wait_event}")


def enqueue(server: Cluster, payload: str) -> str:
    with server.connect() as conn:
        conn.execute(
            "INSERT INTO runledger_job_definitions (job_type, max_attempts, "
            "default_timeout_seconds, default_priority, is_enabled) "
            "VALUES (%s, 5, 60, 100, true) ON CONFLICT DO NOTHING",
            [EFFECT],
        )
        row = conn.execute(
            "INSERT INTO runledger_job_queue (id, job_type, payload, max_attempts) "
            "VALUES (gen_random_uuid(), %s, %s::jsonb, 5) RETURNING id",
            [EFFECT, payload],
        ).fetchone()
    assert row is not None
    return str(row[0])


def effects(server: Cluster, job_id: str) -> list[int]:
    with server.connect() as conn:
        rows = conn.execute(
            "SELECT attempt FROM exact_effects WHERE job_id = %s ORDER BY id", [job_id]
        ).fetchall()
    return [int(row[0]) for row in rows]


@pytest.fixture
def fresh(cluster: Cluster) -> Cluster:  # noqa: F811  (the imported fixture)
    try:
        with cluster.connect() as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        cluster.start()
    with cluster.connect() as conn:
        conn.execute(
            "TRUNCATE exact_effects, runledger_job_queue, runledger_job_definitions CASCADE"
        )
    return cluster


def test_worker__server_restarted_while_commit_waits_at_gate__aborted_then_applied_once(
    fresh: Cluster,
) -> None:
    server = fresh
    job_id = enqueue(server, f'{{"gate": {GATE}}}')
    holder = server.connect()
    holder.execute("SELECT pg_advisory_lock(%s)", [GATE])
    worker = Command(server, "runledger_worker", "--job-type", EFFECT)
    try:
        with server.connect() as conn:
            wait_for_commit(conn, "advisory")
        server.stop("immediate")  # the gate's holder goes down with the server
        holder.close()
        server.start()
        worker.wait_for_line("committed=False")
        with server.connect() as conn:  # skip the retry's backoff: the path is the point
            conn.execute(
                "UPDATE runledger_job_queue SET next_run_at = now() WHERE id = %s", [job_id]
            )
        wait_for_rows(
            server,
            f"SELECT count(*) FROM runledger_job_queue WHERE id = '{job_id}' "
            "AND status = 'SUCCEEDED'",
            1,
        )
        assert effects(server, job_id) == [2]
        assert worker.stop() == 0
    finally:
        worker.kill()


def test_worker__server_restarted_while_commit_waits_for_standby__settled_committed(
    fresh: Cluster,
) -> None:
    server = fresh
    with server.connect("postgres") as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        conn.execute("ALTER SYSTEM SET synchronous_commit = 'local'")
        conn.execute("SELECT pg_reload_conf()")
    job_id = enqueue(server, '{"sync_commit": true}')
    worker = Command(server, "runledger_worker", "--job-type", EFFECT)
    try:
        with server.connect() as conn:
            wait_for_commit(conn, "SyncRep")
        server.stop("immediate")
        server.start()
        with server.connect("postgres") as conn:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("ALTER SYSTEM RESET synchronous_commit")
            conn.execute("SELECT pg_reload_conf()")
        worker.wait_for_line("committed=True")
        with server.connect() as conn:
            row = conn.execute(
                "SELECT status, attempt FROM runledger_job_queue WHERE id = %s", [job_id]
            ).fetchone()
        assert row == ("SUCCEEDED", 1)
        assert effects(server, job_id) == [1]
        assert worker.stop() == 0
        assert worker.count("could not record a job outcome") == 0
    finally:
        worker.kill()
        with server.connect("postgres") as conn:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("ALTER SYSTEM RESET synchronous_commit")
            conn.execute("SELECT pg_reload_conf()")
