"""What every shape shares: timing statistics, result rows, raw sessions and table resets."""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.db import connection

JOB_TYPE = "bench.send_receipt"
"""The job type of the enqueue benchmarks (a, b, f)."""
ORGANIZATIONS = [uuid.UUID(int=0x0198_0000_0000_7000_8000_0000_0000_0000 + n) for n in range(1, 5)]
"""The tenants of the generated data; a fifth of the rows have no organization."""

RUNLEDGER_TABLES = (
    "runledger_job_enqueue_intents",
    "runledger_job_events",
    "runledger_job_queue",
    "runledger_job_definitions",
)


@dataclass(frozen=True)
class Stats:
    """Latency samples in seconds, reported in milliseconds."""

    samples: Sequence[float]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1000

    @property
    def p95_ms(self) -> float:
        return percentile(self.samples, 95) * 1000

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.samples) * 1000

    def to_dict(self) -> dict[str, float | int]:
        return {
            "n": len(self.samples),
            "median_ms": round(self.median_ms, 4),
            "p95_ms": round(self.p95_ms, 4),
            "mean_ms": round(self.mean_ms, 4),
            "min_ms": round(min(self.samples) * 1000, 4),
            "max_ms": round(max(self.samples) * 1000, 4),
        }


def percentile(samples: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Row:
    """One line of the result table: a measurement, its unit, and the target it answers."""

    shape: str
    name: str
    value: float
    unit: str
    target: str = ""
    ok: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "name": self.name,
            "value": round(self.value, 4),
            "unit": self.unit,
            "target": self.target,
            "ok": self.ok,
            "detail": self.detail,
        }


@dataclass
class Context:
    """The run's options and its collected rows."""

    quick: bool
    server_version: int
    rows: list[Row] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)

    def size(self, default: int, quick: int) -> int:
        return quick if self.quick else default

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row


def progress(message: str) -> None:
    """Progress goes to stderr so the table on stdout stays clean."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


SHUFFLE_SEED = 20261201
"""The order of the contenders in each round of ``interleaved``."""


def interleaved(
    ops: dict[str, Callable[[int], object]], *, count: int, warmup: int
) -> dict[str, Stats]:
    """Time each op ``count`` times, in a fresh order every round.

    Interleaving cancels slow drift (autovacuum, other tenants of the machine, a growing
    table) between the contenders instead of charging it to whichever ran later. The order is
    shuffled (seeded, so runs repeat) rather than rotated: an op pays part of the cost of the
    one before it (a peer that walks the ORM evicts the caches the next op needs, about
    25 us here), and under rotation the same contender almost always comes right after the
    same neighbour and carries that cost alone.
    """
    names = list(ops)
    samples: dict[str, list[float]] = {name: [] for name in names}
    order = random.Random(SHUFFLE_SEED)
    for i in range(warmup + count):
        order.shuffle(names)
        for name in names:
            op = ops[name]
            start = time.perf_counter()
            op(i)
            elapsed = time.perf_counter() - start
            if i >= warmup:
                samples[name].append(elapsed)
    return {name: Stats(values) for name, values in samples.items()}


def connect_kwargs() -> dict[str, Any]:
    """psycopg arguments for the benchmark database (the one Django uses)."""
    settings = connection.settings_dict
    kwargs: dict[str, Any] = {
        "dbname": settings["NAME"],
        "user": settings["USER"] or None,
        "password": settings["PASSWORD"] or None,
        "host": settings["HOST"] or None,
        "port": settings["PORT"] or None,
    }
    return {key: value for key, value in kwargs.items() if value is not None}


@contextmanager
def raw_session(*, autocommit: bool = True) -> Iterator[psycopg.Connection[Any]]:
    """A raw psycopg session on the benchmark database, for plain-SQL baselines and setup."""
    conn = psycopg.connect(**connect_kwargs(), autocommit=autocommit)
    try:
        yield conn
    finally:
        conn.close()


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement on Django's connection (autocommit) and return its rows, if any."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


def scalar(statement: str, params: Any = None) -> Any:
    return sql(statement, params)[0][0]


def reset_runledger(*extra_tables: str) -> None:
    """Empty the runledger tables (and ``extra_tables``) between shapes."""
    tables = ", ".join((*RUNLEDGER_TABLES, *extra_tables))
    sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")


def define_job_types(job_types: Sequence[str]) -> None:
    from runledger_django.models import JobDefinition  # after django.setup()

    JobDefinition.objects.bulk_create(
        [
            JobDefinition(
                job_type=job_type,
                max_attempts=3,
                default_timeout_seconds=60,
                default_priority=100,
            )
            for job_type in job_types
        ]
    )


def vacuum_analyze(*tables: str) -> None:
    """Settle the visibility map and statistics, as autovacuum would on a live system."""
    for table in tables:
        sql(f"VACUUM (ANALYZE) {table}")


def ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else math.inf


def verdict_at_most(value: float, limit: float) -> bool:
    return value <= limit


def fmt_value(value: float, unit: str) -> str:
    if unit in {"intents/s", "rows/s", "ops/s", "jobs/s"}:
        return f"{value:,.0f} {unit}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.3f} {unit}"


def fmt_spread(spread: Any, unit: str) -> str:
    """A row's lowest and highest per-round value (``detail["spread"]``), or nothing."""
    if not spread:
        return ""
    low, high = spread
    if unit == "x":
        return f"{low:.2f}-{high:.2f}x"
    return f"{fmt_value(low, unit)} - {fmt_value(high, unit)}"
