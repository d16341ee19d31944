"""What a pooled server connection keeps from its clients' sessions, and the server-side
binding variant of Django's psycopg settings behind PgBouncer.

The pipeline test's last word is that the pooled server connections carry no session state;
the control test here shows that inspection would see it if there were some. With
``OPTIONS["server_side_binding"]`` psycopg sends each statement alone over the extended
protocol, with the unnamed statement (Django leaves ``prepare_threshold`` unset), which
PgBouncer in transaction pooling passes through whatever its version.

``transaction=True``: the processes commit, and the test reads what they committed.
"""

from __future__ import annotations

import pytest

from runledger_django.models import Job, JobEnqueueIntent
from tests.pgbouncer.bouncer import PgBouncer, pooled_server_states
from tests.pgbouncer.conftest import SpawnWorker, run_client
from tests.pgbouncer.shop import RECEIPT, WAREHOUSE, warehouse_attempts_so_far

pytestmark = pytest.mark.django_db(transaction=True)


def test_pooled_server_states__session_state_left_through_pgbouncer__is_found(
    pgbouncer: PgBouncer,
) -> None:
    """The control: what a careless client leaves on the (separate) control pool shows up."""
    database = PgBouncer.CONTROL_DB
    with pgbouncer.connect(database) as careless:
        careless.execute("SET lock_timeout = '1234ms'")
        careless.execute("SELECT pg_advisory_lock(4242)")
        careless.execute("LISTEN runledger_control_channel")
        careless.execute("PREPARE runledger_control_statement AS SELECT 1")
    try:
        states = pooled_server_states(pgbouncer, database)
    finally:
        pgbouncer.admin(f"RECONNECT {database}")  # close those servers once released

    found = {
        field: [item for state in states for item in getattr(state, field)]
        for field in ("settings", "advisory_locks", "listening", "prepared_statements")
    }
    assert found == {
        "settings": ["lock_timeout=1234"],
        "advisory_locks": ["4242"],
        "listening": ["runledger_control_channel"],
        "prepared_statements": ["runledger_control_statement"],
    }


def test_server_side_binding__through_pgbouncer__records_promotes_and_runs_unprepared(
    pgbouncer: PgBouncer, spawn_worker: SpawnWorker, shop_definitions: None
) -> None:
    [checkout] = run_client(
        pgbouncer, ("checkout", {"orders": 4, "threads": 4}), SERVER_SIDE_BINDING=True
    )
    assert [answer["status"] for order in checkout["orders"] for answer in order] == [201, 200] * 4
    burst = spawn_worker("--promote", "--burst", "--concurrency", "4", SERVER_SIDE_BINDING=True)
    assert burst.wait() == 0, burst.stderr_lines

    assert JobEnqueueIntent.objects.filter(status="PROMOTED").count() == 8
    assert Job.objects.filter(job_type=RECEIPT, status="SUCCEEDED").count() == 4
    for job_id in Job.objects.filter(job_type=WAREHOUSE).values_list("id", flat=True):
        assert warehouse_attempts_so_far(job_id)  # retried (or, on a slow machine, dead)
    for state in pooled_server_states(pgbouncer):
        assert state.prepared_statements == []
        assert state.settings == []
