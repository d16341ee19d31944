"""Run the benchmarks and print a table; the JSON goes to benchmarks/results/<timestamp>.json.

    python3 dev.py bench                 # every shape, default sizes (a few minutes)
    python3 dev.py bench --quick         # a smoke run with small sizes
    python3 dev.py bench --only a,c      # some shapes
    python3 dev.py bench --only p        # the soak (about 45 minutes; never in a plain run)
    python3 dev.py bench --profile       # also write a pyinstrument profile per shape

The server is the embedded PostgreSQL 18, or DATABASE_URL's. The run drops and recreates its
own database there (``runledger_bench``, or RUNLEDGER_BENCH_DB), migrates it, and drops it at
the end unless ``--keep-db``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.metadata
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SHAPES = {
    "a": ("recording vs ORM insert and peers, own transaction", "benchmarks.shape_a"),
    "b": ("recording vs ORM insert and peers, 1,000 in one transaction", "benchmarks.shape_b"),
    "c": ("promotion: fresh and analysed bursts against plain SQL", "benchmarks.shape_c"),
    "d": ("metrics and list at one million intents", "benchmarks.shape_d"),
    "e": ("admin changelist at one million intents", "benchmarks.shape_e"),
    "f": ("recording vs ORM insert and peers, beside an Order", "benchmarks.shape_f"),
    "g": ("job_metrics at one million jobs", "benchmarks.shape_g"),
    "h": ("jobs admin changelist at one million jobs", "benchmarks.shape_h"),
    "i": ("write cost of the job-operations indexes; prune_jobs batches", "benchmarks.shape_i"),
    "j": ("admin search by idempotency key alone at one million rows", "benchmarks.shape_j"),
    "k": ("record_intent's cost of migration 0007's index and CHECK", "benchmarks.shape_k"),
    "m": ("Prometheus queue gauges: one scrape at one million jobs", "benchmarks.shape_m"),
    "l": ("queue control: claim with limits configured against without", "benchmarks.shape_l"),
    "s": ("periodic schedules: fires/s, the due pass, latency, idle", "benchmarks.shape_s"),
    "o": ("exactly-once: atomic no-op drain rate against a plain one", "benchmarks.shape_o"),
    "n": ("observability: drain rate with tracing on against off", "benchmarks.shape_n"),
    "u": ("admin dashboard: chart queries at one million jobs", "benchmarks.shape_u"),
    "v": ("bulk producers: record_intents / enqueue_jobs vs loops and peers", "benchmarks.shape_v"),
    "q": ("workflow graph starts: 10 to 600 steps, against the seed", "benchmarks.shape_q"),
    "r": (
        "workflow cost: 1,000-step fan-out/fan-in drain against plain jobs",
        "benchmarks.shape_r",
    ),
    "t": ("Django Tasks API: RunledgerTaskBackend vs django-tasks-db", "benchmarks.shape_t"),
    "p": ("soak: per-minute drain under churn and a long transaction", "benchmarks.shape_p"),
    "w": ("worker drain rate: runledger_worker, db_worker, Procrastinate", "benchmarks.shape_w"),
    "x": ("worker latency: commit to handler start at low load", "benchmarks.shape_x"),
    "y": ("idle worker: statements per second", "benchmarks.shape_y"),
    "z": ("worker statements' own limit: as sent today and prepared", "benchmarks.shape_z"),
}
OPT_IN = {"p"}
"""Shapes a plain run leaves out: the soak (p) takes about 45 minutes; name it in --only."""
PACKAGES = ["Django", "psycopg", "django-tasks", "django-tasks-db", "procrastinate"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--only", default="", help="comma-separated shapes to run (a-k, t, w-z); default: all"
    )
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark database")
    parser.add_argument("--profile", action="store_true", help="pyinstrument profile per shape")
    parser.add_argument("--output", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or [
        s for s in SHAPES if s not in OPT_IN
    ]
    unknown = [s for s in chosen if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shapes: {', '.join(unknown)} (choose from {', '.join(SHAPES)})")
    args.shapes = [s for s in SHAPES if s in chosen]
    return args


def _connect_args(server: dict[str, Any], dbname: str) -> dict[str, Any]:
    kwargs = {
        "dbname": dbname,
        "user": server.get("USER") or None,
        "password": server.get("PASSWORD") or None,
        "host": server.get("HOST") or None,
        "port": server.get("PORT") or None,
    }
    return {key: value for key, value in kwargs.items() if value is not None}


def recreate_database(
    server: dict[str, Any], maintenance: str, name: str, *, drop_only: bool = False
) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(**_connect_args(server, maintenance), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if not drop_only:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def _package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _server_label() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        return "embedded"
    host = url.split("@")[-1]  # never print credentials
    return f"DATABASE_URL {host}"


def print_table(rows: list[Any]) -> None:
    from .common import fmt_spread, fmt_value

    headers = ("shape", "measurement", "value", "rounds", "target", "")
    lines = [
        (
            row.shape,
            row.name,
            fmt_value(row.value, row.unit),
            fmt_spread(row.detail.get("spread"), row.unit),
            row.target,
            "" if row.ok is None else ("ok" if row.ok else "MISSED"),
        )
        for row in rows
    ]
    widths = [
        max(len(str(cell)) for cell in column) for column in zip(headers, *lines, strict=False)
    ]

    def fmt(cells: tuple[str, ...]) -> str:
        return "  ".join(
            (cell.rjust(width) if index in (2, 3) else cell.ljust(width))
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    print(fmt(headers))
    print("  ".join("-" * width for width in widths))
    previous = None
    for row, line in zip(rows, lines, strict=True):
        if previous is not None and row.shape != previous:
            print()
        previous = row.shape
        print(fmt(line))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    from benchmarks import settings as bench_settings

    server = dict(bench_settings.DATABASES["default"])
    maintenance = bench_settings.MAINTENANCE_DB_NAME
    name = bench_settings.BENCH_DB_NAME
    # Promoter processes inherit the resolved server instead of starting their own handle.
    os.environ["RUNLEDGER_BENCH_DATABASE"] = json.dumps(
        {key: value for key, value in server.items() if key != "NAME"}
        | {"NAME": maintenance, "MAINTENANCE_NAME": maintenance}
    )
    from .common import progress

    progress(f"recreating database {name} on the {_server_label()} server")
    recreate_database(server, maintenance, name)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, connections

    call_command("migrate", verbosity=0, interactive=False)
    connection.ensure_connection()
    server_version = int(connection.pg_version)  # type: ignore[attr-defined]

    from .common import Context, Row

    ctx = Context(quick=args.quick, server_version=server_version)
    started = dt.datetime.now(dt.UTC)
    failed = False
    for shape in args.shapes:
        title, module_name = SHAPES[shape]
        progress(f"shape ({shape}): {title}")
        module = importlib.import_module(module_name)
        profiler: Any = None
        if args.profile:
            profiler = importlib.import_module("pyinstrument").Profiler()
            profiler.start()
        shape_started = time.monotonic()
        try:
            module.run(ctx)
        except Exception as error:  # report it and go on with the other shapes
            failed = True
            traceback.print_exc()
            ctx.add(Row(shape, f"FAILED: {type(error).__name__}: {error}"[:160], 0, "ms", ok=False))
        finally:
            if profiler is not None:
                profiler.stop()
                RESULTS_DIR.mkdir(exist_ok=True)
                out = RESULTS_DIR / f"profile-{shape}-{started:%Y%m%dT%H%M%S}.txt"
                out.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
                progress(f"profile written to {out}")
        progress(f"shape ({shape}) took {time.monotonic() - shape_started:.0f}s")

    finished = dt.datetime.now(dt.UTC)
    header = (
        f"runledger_django benchmarks: PostgreSQL {server_version // 10000}.{server_version % 10000}"
        f" ({_server_label()}), Python {platform.python_version()},"
        f" Django {django.get_version()}, {os.cpu_count()} CPUs"
        + (", --quick" if args.quick else "")
    )
    print()
    print(header)
    print()
    print_table(ctx.rows)
    targets = [row for row in ctx.rows if row.target]
    if targets:
        print("\nAgainst the targets:\n")
        print_table(targets)
    document = {
        "started_at": started.isoformat(),
        "finished_at": finished.isoformat(),
        "argv": argv,
        "quick": args.quick,
        "shapes": args.shapes,
        "server": {"version_num": server_version, "where": _server_label()},
        "python": platform.python_version(),
        "packages": _package_versions(),
        "cpus": os.cpu_count(),
        "rows": [row.to_dict() for row in ctx.rows],
    }
    output = args.output or RESULTS_DIR / (
        f"{started:%Y%m%dT%H%M%SZ}-pg{server_version // 10000}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"\nJSON: {output}")
    connections.close_all()
    if not args.keep_db:
        recreate_database(server, maintenance, name, drop_only=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
