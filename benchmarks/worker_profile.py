"""Where a runledger worker's time goes while it drains no-op jobs.

    .venv/bin/python -m benchmarks.worker_profile                  # 20,000 jobs, threads 1 and 8
    .venv/bin/python -m benchmarks.worker_profile --jobs 3000 --concurrency 8
    .venv/bin/python -m benchmarks.worker_profile --systems runledger,django-tasks-db,procrastinate

On a throwaway durable server with ``pg_stat_statements`` (``benchmarks.scratch_server``) it runs
shape w's drain with one worker process (runledger's, or a peer's for comparison) and, from the moment the worker runs jobs
to the end of the drain, samples the worker with py-spy (``--gil``: the thread running Python
code, so the samples are the worker's Python CPU, not its waits) and
counts every statement the database executed. It prints, per job: the worker's CPU, its
database backends' CPU, the statements (round trips) and their execution and planning time;
and the Python functions and packages the samples fall in. The py-spy stacks and a JSON
summary go to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DB_NAME = "rl_bench_profile"
PRELUDE_MARK = "WITH previous AS MATERIALIZED"
"""The timeout-cap prelude sent in the same message as each transition (not a round trip)."""

PARENT_MARKS = (
    "pg_stat_statements",
    "pg_stat_activity",
    "pg_current_wal_lsn",
    "pg_wal_lsn_diff",
    "SELECT count(",
    "SELECT (SELECT count(",
    "leased_at, finished_at",
    "started_at, finished_at",
    "started.at, finished.at",
)
"""The benchmark's own statements (progress polls, the window, these counters): not the worker's."""

BUCKETS = [
    ("runledger_django/worker/", "runledger worker loop and executors"),
    ("runledger_django/services/", "runledger services"),
    ("runledger_django/db/", "runledger db helpers"),
    ("runledger_django/", "runledger (other)"),
    ("django/db/", "Django database layer"),
    ("django/", "Django (other)"),
    ("psycopg/", "psycopg"),
    ("psycopg_binary/", "psycopg"),
    ("/logging/", "logging"),
    ("/json/", "json"),
    ("threading.py", "threading and queue"),
    ("queue.py", "threading and queue"),
    ("uuid.py", "uuid"),
]


def _bucket(frame: str) -> str:
    path = frame.rpartition("(")[2]
    for needle, name in BUCKETS:
        if needle in path:
            return name
    return "other"


def _function(frame: str) -> str:
    """``func (path:line)`` without the line, and with the path cut to its package."""
    name, _, where = frame.rpartition(" (")
    path = where.rstrip(")").rpartition(":")[0] or where.rstrip(")")
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})"


def summarize_stacks(raw: Path, top: int = 20) -> dict[str, Any]:
    """Self and inclusive sample counts per function, and self samples per package."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    buckets: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame for frame in stack.split(";") if frame and "(" in frame]
        if not frames:
            continue
        total += count
        own[_function(frames[-1])] += count
        buckets[_bucket(frames[-1])] += count
        for name in {_function(frame) for frame in frames}:
            inclusive[name] += count
    return {
        "samples": total,
        "self": own.most_common(top),
        "inclusive": inclusive.most_common(top),
        "packages": buckets.most_common(),
    }


def statement_stats(dbname: str) -> list[dict[str, Any]]:
    from .common import sql

    rows = sql(
        "SELECT s.query, s.calls, s.total_exec_time, s.total_plan_time, s.rows, s.toplevel"
        " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
        " WHERE d.datname = %s AND s.calls > 0 ORDER BY s.total_exec_time DESC",
        [dbname],
    )
    return [
        {
            "query": " ".join(str(query).split())[:160],
            "calls": int(calls),
            "exec_ms": float(exec_ms),
            "plan_ms": float(plan_ms),
            "rows": int(rows_),
            "toplevel": bool(toplevel),
        }
        for query, calls, exec_ms, plan_ms, rows_, toplevel in rows
    ]


def _py_spy() -> str:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else "py-spy"


def _system(name: str) -> Any:
    from .worker_common import Procrastinate, Runledger, TasksDb

    systems = {"runledger": Runledger, "django-tasks-db": TasksDb, "procrastinate": Procrastinate}
    return systems[name]()


def profile_once(
    system_name: str, concurrency: int, jobs: int, rate: int, stamp: str
) -> dict[str, Any]:
    from .common import sql
    from .worker_common import Group, drain

    system = _system(system_name)
    raw = RESULTS_DIR / f"worker-profile-{stamp}-{system_name}-c{concurrency}.txt"
    spy: list[subprocess.Popen[bytes]] = []

    wal: list[Any] = []

    def during(group: Group) -> Any:
        sql("SELECT pg_stat_statements_reset()")
        wal.append(sql("SELECT pg_current_wal_lsn()")[0][0])
        spy.append(
            subprocess.Popen(  # noqa: S603  (py-spy from the bench extra)
                [
                    *(_py_spy(), "record", "--pid", str(group.pids[0]), "--rate", str(rate)),
                    *("--format", "raw", "--output", str(raw), "--nonblocking", "--gil"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )

        def finish() -> None:
            wal.append(sql("SELECT pg_current_wal_lsn()")[0][0])
            spy[0].send_signal(signal.SIGINT)
            try:
                spy[0].wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy[0].kill()

        return finish

    result = drain(
        system,
        processes=1,
        concurrency=concurrency,
        jobs=jobs,
        tag=f"prof-{system_name}-c{concurrency}",
        during=during,
    )
    counted = max(1, result.cpu_jobs)
    wal_bytes = (
        float(sql("SELECT pg_wal_lsn_diff(%s, %s)", [wal[1], wal[0]])[0][0])
        if len(wal) == 2
        else 0.0
    )
    statements = statement_stats(DB_NAME)
    ours = [s for s in statements if not any(mark in s["query"] for mark in PARENT_MARKS)]
    top = [s for s in ours if s["toplevel"]]
    prelude = sum(s["calls"] for s in top if PRELUDE_MARK in s["query"])
    stacks: dict[str, Any] = summarize_stacks(raw) if raw.exists() else {"samples": 0}
    if spy and spy[0].returncode not in (0, None) and not raw.exists():
        error = spy[0].stderr.read().decode(errors="replace") if spy[0].stderr else ""
        stacks["error"] = error[-500:]
    return {
        "system": system_name,
        "concurrency": concurrency,
        "jobs": jobs,
        "rate_jobs_per_s": round(result.rate, 1),
        "jobs_counted": counted,
        "worker_cpu_ms_per_job": round(result.worker_cpu_ms_per_job, 4),
        "backend_cpu_ms_per_job": result.backend_cpu_ms_per_job,
        "statements_per_job": round(sum(s["calls"] for s in top) / counted, 3),
        "round_trips_per_job": round((sum(s["calls"] for s in top) - prelude) / counted, 3),
        "nested_statements_per_job": round(
            sum(s["calls"] for s in ours if not s["toplevel"]) / counted, 3
        ),
        "db_exec_ms_per_job": round(sum(s["exec_ms"] for s in top) / counted, 4),
        "db_plan_ms_per_job": round(sum(s["plan_ms"] for s in ours) / counted, 4),
        "wal_bytes_per_job": round(wal_bytes / counted),
        "statements": [
            s
            | {
                "calls_per_job": round(s["calls"] / counted, 3),
                "mean_exec_ms": round(s["exec_ms"] / s["calls"], 4),
                "mean_plan_ms": round(s["plan_ms"] / s["calls"], 4),
            }
            for s in ours[:12]
        ],
        "stacks": stacks,
        "stacks_file": str(raw),
        "loadavg_1m": result.load[0],
    }


def print_report(report: dict[str, Any]) -> None:
    c = report["concurrency"]
    print(f"\n=== {report['system']}, concurrency {c}: {report['rate_jobs_per_s']:,} jobs/s")
    print(
        f"per job: worker CPU {report['worker_cpu_ms_per_job']:.3f} ms, database backends CPU "
        f"{report['backend_cpu_ms_per_job'] or 0:.3f} ms; {report['statements_per_job']:.2f} "
        f"statements in {report['round_trips_per_job']:.2f} round trips (and "
        f"{report['nested_statements_per_job']:.2f} run by triggers); execution "
        f"{report['db_exec_ms_per_job']:.3f} ms, planning {report['db_plan_ms_per_job']:.3f} ms;"
        f" WAL {report['wal_bytes_per_job']:,} bytes (load {report['loadavg_1m']:.2f})"
    )
    print("statements (per job, mean execution / planning ms):")
    for s in report["statements"]:
        nested = "" if s["toplevel"] else "(trigger) "
        print(
            f"  {s['calls_per_job']:6.3f}/job  {s['mean_exec_ms']:7.3f} / {s['mean_plan_ms']:6.3f}"
            f"  {nested}{s['query'][:100]}"
        )
    stacks = report["stacks"]
    total = stacks.get("samples") or 0
    if not total:
        print(f"no py-spy samples {stacks.get('error', '')}")
        return
    print(f"py-spy: {total} samples holding the GIL; self time by package:")
    for name, count in stacks["packages"]:
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("top functions, self:")
    for name, count in stacks["self"][:15]:
        print(f"  {100 * count / total:5.1f}%  {name}")
    print("top functions, inclusive:")
    for name, count in stacks["inclusive"][:25]:
        print(f"  {100 * count / total:5.1f}%  {name}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.worker_profile")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", default="1,8", help="comma-separated thread counts")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument(
        "--systems",
        default="runledger",
        help="comma-separated: runledger, django-tasks-db, procrastinate (db_worker runs at 1)",
    )
    args = parser.parse_args(argv)
    from .scratch_server import scratch_server

    stamp = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}"
    RESULTS_DIR.mkdir(exist_ok=True)
    with scratch_server(settings={"pg_stat_statements.track_planning": "on"}) as server:
        # Django and every worker process use this server: the settings read these at import.
        os.environ["RUNLEDGER_BENCH_DATABASE"] = json.dumps(
            server | {"MAINTENANCE_NAME": server["NAME"]}
        )
        os.environ["RUNLEDGER_BENCH_DB"] = DB_NAME
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
        import psycopg

        with psycopg.connect(
            dbname="postgres", user="postgres", host=server["HOST"], port=server["PORT"]
        ) as admin:
            admin.autocommit = True
            admin.execute(f"CREATE DATABASE {DB_NAME}")
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections

        from .common import sql

        call_command("migrate", verbosity=0, interactive=False)
        sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        reports = []
        levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
        for system_name in [name.strip() for name in args.systems.split(",") if name.strip()]:
            for concurrency in [1] if system_name == "django-tasks-db" else levels:
                started = time.monotonic()
                report = profile_once(system_name, concurrency, args.jobs, args.rate, stamp)
                print_report(report)
                print(f"({time.monotonic() - started:.0f}s)")
                reports.append(report)
        connections.close_all()
    out = RESULTS_DIR / f"worker-profile-{stamp}.json"
    out.write_text(json.dumps({"argv": argv, "reports": reports}, indent=2, default=str) + "\n")
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
