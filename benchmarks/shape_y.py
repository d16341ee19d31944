"""(y) Idle cost: the queries an idle ``runledger_worker`` sends, with and without --promote.

Counted exactly where possible: a throwaway server (``benchmarks.scratch_server``, the embedded
build with ``pg_stat_statements`` preloaded) gets a migrated database of its own; each worker
runs against it with nothing to do, its start-up is left to finish, the statistics are reset,
and after the window every statement the worker's database executed is summed: that is the
verdict. pg_stat_statements cannot see message boundaries, so a statement sent in the same
simple-protocol message as another (a job transition's timeout-cap prelude, a pass's settings)
counts apart; the second row leaves out the transitions' preludes, which are never a round
trip of their own. Without the embedded build (a DATABASE_URL-only setup) it falls back to the
benchmark database's transactions (``pg_stat_database``, read from another database so the
parent's own reads are not counted), which the server reports up to a second or so late: a
transaction of several statements counts once there.

    .venv/bin/python -m benchmarks.shape_y --quick
    .venv/bin/python -m benchmarks.shape_y --seconds 60
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection

from .common import Context, Row, connect_kwargs, progress
from .worker_common import ROOT, Query, Runledger, child_env, loadavg, manage, running

SHAPE = "y"
TARGET_PER_SECOND = 1.0
"""Issue 22: at most one statement a second (Procrastinate's idle worker sends about 0.9)."""
WARM_SECONDS = 5.0
"""Start-up (definitions, the first reaper pass, the first claims) happens before counting."""
IDLE_DB = "rl_bench_idle"
PRELUDE_MARK = "WITH previous AS MATERIALIZED"


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    concurrency: int
    options: tuple[str, ...]


SCENARIOS = [
    Scenario("plain", "idle runledger_worker", 1, ()),
    Scenario("promote", "idle runledger_worker --promote", 1, ("--promote",)),
    Scenario("promote-c8", "idle runledger_worker --promote --concurrency 8", 8, ("--promote",)),
]


@dataclass
class Scratch:
    """The throwaway server: a session on its maintenance database, and the children's env."""

    session: Any
    env: dict[str, str]

    def query(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        cursor = self.session.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


@contextmanager
def scratch() -> Iterator[Scratch]:
    import psycopg

    from .scratch_server import scratch_server

    with scratch_server() as server:
        env = {
            "RUNLEDGER_BENCH_DATABASE": json.dumps(server | {"MAINTENANCE_NAME": server["NAME"]}),
            "RUNLEDGER_BENCH_DB": IDLE_DB,
        }
        with psycopg.connect(
            dbname="postgres",
            user="postgres",
            host=server["HOST"],
            port=server["PORT"],
            autocommit=True,
        ) as session:
            session.execute(f"CREATE DATABASE {IDLE_DB}")
            session.execute("CREATE EXTENSION pg_stat_statements")
            subprocess.run(  # noqa: S603  (our own manage.py)
                manage("migrate", "--verbosity", "0"),
                cwd=ROOT,
                env=child_env("rlbench-y-migrate", env),
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                timeout=600,
            )
            yield Scratch(session, env)


@contextmanager
def maintenance_session() -> Iterator[Scratch]:
    """A session on the server's maintenance database, whose reads the benchmark database's
    counters do not see (the fallback's measuring connection)."""
    import psycopg

    from benchmarks import settings as bench_settings

    kwargs = connect_kwargs() | {"dbname": bench_settings.MAINTENANCE_DB_NAME}
    with psycopg.connect(**kwargs, autocommit=True) as session:
        yield Scratch(session, {})


def _has_embedded_build() -> bool:
    from .scratch_server import binaries

    try:
        return (binaries() / "pg_ctl").exists()
    except ImportError:
        return False


def count_statements(query: Query, seconds: float) -> dict[str, Any]:
    """Reset pg_stat_statements, wait, and sum what the idle database executed."""
    query("SELECT pg_stat_statements_reset()", None)
    time.sleep(seconds)
    rows = query(
        "SELECT s.query, s.calls, s.toplevel FROM pg_stat_statements s"
        " JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s AND s.calls > 0"
        " ORDER BY s.calls DESC",
        [IDLE_DB],
    )
    top = [(str(q), int(calls)) for q, calls, toplevel in rows if toplevel]
    statements = sum(calls for _, calls in top)
    preludes = sum(calls for q, calls in top if PRELUDE_MARK in q)
    return {
        "method": "pg_stat_statements",
        "seconds": seconds,
        "statements": statements,
        "without_cap_preludes": statements - preludes,
        "statements_per_s": statements / seconds,
        "without_cap_preludes_per_s": (statements - preludes) / seconds,
        "by_statement": [
            {"calls": calls, "query": " ".join(q.split())[:120]} for q, calls in top[:8]
        ],
    }


def count_transactions(query: Query, dbname: str, seconds: float) -> dict[str, Any]:
    """The fallback: transactions the benchmark database committed or rolled back. ``query``
    runs on another database, so the parent's own reads are not counted."""

    def total() -> int:
        query("SELECT pg_stat_clear_snapshot()", None)
        rows = query(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            [dbname],
        )
        return int(rows[0][0])

    before = total()
    time.sleep(seconds)
    count = max(0, total() - before)
    return {
        "method": "pg_stat_database transactions",
        "seconds": seconds,
        "transactions": count,
        "statements_per_s": count / seconds,
    }


def run(ctx: Context) -> None:
    seconds = float(ctx.state.get("seconds") or ctx.size(30, 10))
    select = ctx.state.get("select")
    chosen = [s for s in SCENARIOS if not select or s.key in select]
    system = Runledger()
    results: dict[str, dict[str, Any]] = {}
    if _has_embedded_build():
        with scratch() as server:
            for scenario in chosen:
                argv = system.argv(scenario.concurrency, *scenario.options)
                with running(
                    f"y-{scenario.key}",
                    [argv],
                    system.min_connections,
                    server.env,
                    query=server.query,
                ):
                    time.sleep(WARM_SECONDS)
                    results[scenario.key] = count_statements(server.query, seconds)
                    results[scenario.key]["loadavg_1m"] = loadavg()[0]
                _progress(scenario, results[scenario.key])
    else:
        progress("(y) no embedded build for pg_stat_statements: counting transactions instead")
        system.reset()
        dbname = str(connection.settings_dict["NAME"])
        # A backend reports its counters late, but always when it ends: close ours so what
        # the run did before (migrations, the reset) is not counted as the worker's.
        connection.close()
        with maintenance_session() as session:
            for scenario in chosen:
                argv = system.argv(scenario.concurrency, *scenario.options)
                with running(
                    f"y-{scenario.key}", [argv], system.min_connections, query=session.query
                ):
                    time.sleep(WARM_SECONDS)
                    results[scenario.key] = count_transactions(session.query, dbname, seconds)
                    results[scenario.key]["loadavg_1m"] = loadavg()[0]
                _progress(scenario, results[scenario.key])
    for scenario in chosen:
        result = results[scenario.key]
        value = float(result["statements_per_s"])
        exact = result["method"] == "pg_stat_statements"
        ctx.add(
            Row(
                SHAPE,
                f"{scenario.label}: "
                + (
                    f"statements/s (pg_stat_statements, {seconds:.0f} s)"
                    if exact
                    else f"transactions/s (a lower bound on queries, {seconds:.0f} s)"
                ),
                value,
                "queries/s" if exact else "transactions/s",
                target=f"<= {TARGET_PER_SECOND:.0f}/s",
                ok=value <= TARGET_PER_SECOND,
                detail=result,
            )
        )
        if exact:
            ctx.add(
                Row(
                    SHAPE,
                    f"  {scenario.label}: the same without the job transitions' cap preludes",
                    float(result["without_cap_preludes_per_s"]),
                    "queries/s",
                )
            )


def _progress(scenario: Scenario, result: dict[str, Any]) -> None:
    if result["method"] != "pg_stat_statements":
        progress(
            f"(y) {scenario.label}: {result['statements_per_s']:.2f} transactions/s"
            f" over {result['seconds']:.0f}s"
        )
        return
    progress(
        f"(y) {scenario.label}: {result['statements_per_s']:.2f} statements/s,"
        f" {result['without_cap_preludes_per_s']:.2f} without the transitions' cap preludes,"
        f" over {result['seconds']:.0f}s"
    )
    for item in result.get("by_statement", []):
        progress(f"(y)     {item['calls']:4d}  {item['query'][:100]}")


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(standalone(SHAPE, "idle cost: queries per second of an idle worker", sys.argv[1:]))
