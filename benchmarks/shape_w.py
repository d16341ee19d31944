"""(w) Drain rate: no-op jobs run per second by runledger_worker, django-tasks-db's db_worker and
Procrastinate's worker, in the same run, on the same durable server.

Each contender's worker processes start on an empty queue and settle; then ``jobs`` due jobs
land in one transaction, and the drain is timed from the database, from the first job's start
(runledger: its attempt's ``leased_at``; tasks-db: ``started_at``; Procrastinate: its
``started`` event) to the last job's finish. Rounds are interleaved, rotating the order, and
medians reported. db_worker runs one task at a time per process, so it is compared at the same
number of processes and at the same number of jobs in flight. Procrastinate runs a plain
function in a thread, as our handlers are; its coroutine twin is one more row.

Every drain is also timed as issue 22 times it: from the moment the worker processes are
started (after the jobs landed and the job table was analysed) to the last job's finish, start-up
included; those rows ("from the workers' start") carry issue 22's targets. Each drain's tables
are truncated first (new files, statistics from the ANALYZE after the enqueue).

Default: 10,000 jobs, 3 rounds of 12 contenders (about 15 minutes on 2 cores); --quick: 1,000
jobs, one round, without the 8-process db_worker and the coroutine row.

    .venv/bin/python -m benchmarks.shape_w --quick
    .venv/bin/python -m benchmarks.shape_w --jobs 20000 --rounds 5
    .venv/bin/python -m benchmarks.shape_w --select rl-1x8,pc-1x8,pca-1x8
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

from .common import Context, Row, progress, ratio
from .worker_common import (
    Drain,
    Procrastinate,
    Runledger,
    StatementsOnly,
    System,
    TasksDb,
    drain,
    loadavg,
)

SHAPE = "w"
TARGET_ONE_PROCESS = 1000.0
TARGET_VS_TASKS_DB = 3.0

# Issue 22 item 2, on every drain timed from the workers' start (``Drain.from_start_rate``):
# (ours, peers, why, floor); ours and peers are keys, the best median of each side counts.
ISSUE_TARGETS = [
    (
        ("rl-1x1", "rl-1x8"),
        ("pc-1x1", "pc-1x8", "pc-2x8", "pca-1x8"),
        "one process / Procrastinate's best",
        3.0,
    ),
    (("rl-1x1", "rl-1x8"), ("tdb-1",), "one process / one db_worker process", 5.0),
    (("rl-1x1",), ("pc-1x1",), "concurrency 1 / Procrastinate's concurrency 1", 1.5),
    (("rl-1x8",), ("sql-1x8",), "1 x 8 / its statements' own bound at 1 x 8", 0.85),
]


@dataclass(frozen=True)
class Contender:
    key: str
    label: str
    system: System
    processes: int
    concurrency: int


def contenders(quick: bool, select: set[str] | None = None) -> list[Contender]:
    ours, tasks_db, proc = Runledger(), TasksDb(), Procrastinate()
    statements = StatementsOnly()
    proc_async = Procrastinate(is_async=True)
    chosen = [
        Contender("rl-1x1", "runledger 1 process x 1 thread", ours, 1, 1),
        Contender("rl-1x8", "runledger 1 process x 8 threads", ours, 1, 8),
        Contender("rl-2x8", "runledger 2 processes x 8 threads", ours, 2, 8),
        Contender(
            "sql-1x8", "the worker's statements alone, 1 process x 8 threads", statements, 1, 8
        ),
        Contender(
            "sql-2x8", "the worker's statements alone, 2 processes x 8 threads", statements, 2, 8
        ),
        Contender("tdb-1", "django-tasks-db 1 process", tasks_db, 1, 1),
        Contender("tdb-2", "django-tasks-db 2 processes", tasks_db, 2, 1),
        Contender("tdb-8", "django-tasks-db 8 processes", tasks_db, 8, 1),
        Contender("pc-1x1", "procrastinate 1 process x concurrency 1", proc, 1, 1),
        Contender("pc-1x8", "procrastinate 1 process x concurrency 8", proc, 1, 8),
        Contender("pc-2x8", "procrastinate 2 processes x concurrency 8", proc, 2, 8),
        Contender(
            "pca-1x8", "procrastinate 1 process x concurrency 8, async task", proc_async, 1, 8
        ),
    ]
    if select:
        chosen = [c for c in chosen if c.key in select]
    elif quick:
        chosen = [c for c in chosen if c.key not in {"tdb-8", "pca-1x8"}]
    return [c for c in chosen if c.system.available()]


RATIOS = [
    ("rl-1x1", "tdb-1", "same processes, one job at a time", TARGET_VS_TASKS_DB),
    ("rl-1x8", "tdb-8", "same jobs in flight", TARGET_VS_TASKS_DB),
    ("rl-2x8", "tdb-2", "same processes", TARGET_VS_TASKS_DB),
    ("rl-1x1", "pc-1x1", "same shape", 1.0),
    ("rl-1x8", "pc-1x8", "same shape", 1.0),
    ("rl-2x8", "pc-2x8", "same shape", 1.0),
    ("rl-1x8", "pca-1x8", "its coroutine task", 1.0),
]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def run(ctx: Context) -> None:
    jobs = int(ctx.state.get("jobs") or ctx.size(10_000, 1_000))
    rounds = int(ctx.state.get("rounds") or ctx.size(3, 1))
    chosen = contenders(ctx.quick, ctx.state.get("select"))
    missing = {"django-tasks-db", "procrastinate"} - {c.system.name for c in chosen}
    if missing:
        ctx.add(
            Row(
                SHAPE,
                f"peers missing ({', '.join(sorted(missing))}): install the bench extra",
                0,
                "ms",
                ok=False,
            )
        )
    results: dict[str, list[Drain]] = {c.key: [] for c in chosen}
    failures: dict[str, str] = {}
    load_start = loadavg()
    for round_no in range(rounds):
        shift = round_no % len(chosen)
        for contender in chosen[shift:] + chosen[:shift]:
            if contender.key in failures:
                continue
            try:
                result = drain(
                    contender.system,
                    processes=contender.processes,
                    concurrency=contender.concurrency,
                    jobs=jobs,
                    tag=f"w-{contender.key}",
                )
            except Exception as error:  # one peer's failure must not hide the others
                failures[contender.key] = f"{type(error).__name__}: {error}"
                progress(f"(w) {contender.label}: FAILED {failures[contender.key][:400]}")
                continue
            results[contender.key].append(result)
            progress(
                f"(w) round {round_no + 1}/{rounds} {contender.label}: {result.rate:,.0f} jobs/s"
                f" ({result.window.steady_jobs:,} in {result.window.steady_seconds:.2f}s;"
                f" worker CPU {result.worker_cpu_ms_per_job:.3f} ms/job, database"
                f" {result.backend_cpu_ms_per_job or 0:.3f} ms/job; load {result.load[0]:.2f})"
            )
    _report(ctx, chosen, results, failures, jobs=jobs, rounds=rounds, load_start=load_start)


def _report(
    ctx: Context,
    chosen: list[Contender],
    results: dict[str, list[Drain]],
    failures: dict[str, str],
    *,
    jobs: int,
    rounds: int,
    load_start: tuple[float, float, float],
) -> None:
    medians: dict[str, float] = {}
    for contender in chosen:
        if contender.key in failures:
            ctx.add(
                Row(
                    SHAPE,
                    f"{contender.label}: FAILED {failures[contender.key]}"[:160],
                    0,
                    "jobs/s",
                    ok=False,
                )
            )
            continue
        drains = results[contender.key]
        rates = [d.rate for d in drains]
        medians[contender.key] = _median(rates)
        cpu = _median([d.worker_cpu_ms_per_job for d in drains])
        backend = [value for d in drains if (value := d.backend_cpu_ms_per_job) is not None]
        ctx.add(
            Row(
                SHAPE,
                f"drain {jobs:,}: {contender.label}",
                medians[contender.key],
                "jobs/s",
                detail={"jobs": jobs, "rounds": [d.to_dict() for d in drains]},
            )
        )
        database = _median(backend) if backend else 0.0
        ctx.add(
            Row(
                SHAPE,
                f"  {contender.label}: CPU per job (worker {cpu:.2f} + database {database:.2f})",
                cpu + database,
                "ms",
                detail={"worker_ms": cpu, "database_ms": database if backend else None},
            )
        )
    one_process = [medians[k] for k in ("rl-1x1", "rl-1x8") if k in medians]
    if one_process:
        best = max(one_process)
        ctx.add(
            Row(
                SHAPE,
                "runledger, one process (best of 1 and 8 threads)",
                best,
                "jobs/s",
                target=f">= {TARGET_ONE_PROCESS:,.0f} jobs/s",
                ok=best >= TARGET_ONE_PROCESS,
            )
        )
    for ours, peer, why, floor in RATIOS:
        if ours not in medians or peer not in medians:
            continue
        value = ratio(medians[ours], medians[peer])
        per_round = [
            round(ratio(a.rate, b.rate), 3)
            for a, b in zip(results[ours], results[peer], strict=False)
        ]
        label = {c.key: c.label for c in chosen}
        target = f">= {floor:.2f}x" if floor > 1 else "> 1.00x"
        ctx.add(
            Row(
                SHAPE,
                f"{label[ours]} / {label[peer]} ({why})",
                value,
                "x",
                target=target,
                ok=value >= floor if floor > 1 else value > floor,
                detail={"per_round": per_round},
            )
        )
    tasks_db = [medians[k] for k in ("tdb-1", "tdb-2", "tdb-8") if k in medians]
    ours_all = [medians[k] for k in ("rl-1x1", "rl-1x8", "rl-2x8") if k in medians]
    if tasks_db and ours_all:
        value = ratio(max(ours_all), max(tasks_db))
        ctx.add(
            Row(
                SHAPE,
                "runledger best / django-tasks-db best",
                value,
                "x",
                target=f">= {TARGET_VS_TASKS_DB:.2f}x",
                ok=value >= TARGET_VS_TASKS_DB,
            )
        )
        if "sql-2x8" in medians:
            value = ratio(medians["sql-2x8"], max(tasks_db))
            ctx.add(
                Row(
                    SHAPE,
                    "the worker's statements alone / django-tasks-db best (no worker reaches more)",
                    value,
                    "x",
                )
            )
    _issue_rows(ctx, chosen, results)
    load_end = loadavg()
    ctx.add(
        Row(
            SHAPE,
            f"load average (1 min) at start / end, {rounds} rounds",
            load_end[0],
            "load",
            detail={"start": load_start, "end": load_end},
        )
    )


def _issue_rows(ctx: Context, chosen: list[Contender], results: dict[str, list[Drain]]) -> None:
    """Issue 22's timing: each drain from the workers' start to the last finish."""
    label = {c.key: c.label for c in chosen}
    medians: dict[str, float] = {}
    for contender in chosen:
        drains = results.get(contender.key) or []
        if not drains:
            continue
        rates = [d.from_start_rate for d in drains]
        medians[contender.key] = _median(rates)
        ctx.add(
            Row(
                SHAPE,
                f"from the workers' start: {contender.label}",
                medians[contender.key],
                "jobs/s",
                detail={
                    "per_round": [round(rate, 1) for rate in rates],
                    "spread": round(max(rates) - min(rates), 1),
                },
            )
        )
    for ours, peers, why, floor in ISSUE_TARGETS:
        mine = [(medians[k], k) for k in ours if k in medians]
        theirs = [(medians[k], k) for k in peers if k in medians]
        if not mine or not theirs:
            continue
        (best, best_key), (peer, peer_key) = max(mine), max(theirs)
        value = ratio(best, peer)
        per_round = [
            round(ratio(a.from_start_rate, b.from_start_rate), 3)
            for a, b in zip(results[best_key], results[peer_key], strict=False)
        ]
        ctx.add(
            Row(
                SHAPE,
                f"from the workers' start, {why} ({label[best_key]} / {label[peer_key]})",
                value,
                "x",
                target=f">= {floor:.2f}x",
                ok=value >= floor,
                detail={"per_round": per_round},
            )
        )


if __name__ == "__main__":
    from .worker_common import standalone

    sys.exit(
        standalone(SHAPE, "drain rate: runledger_worker against the peers' workers", sys.argv[1:])
    )
