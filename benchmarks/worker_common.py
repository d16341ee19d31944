"""What the worker shapes (w, x, y) and ``benchmarks.worker_profile`` share.

Worker processes run the real commands (``manage.py runledger_worker``, ``manage.py db_worker``,
Procrastinate's ``procrastinate worker``) as child processes on the benchmark database. Each
child gets its own ``application_name`` (through ``PGAPPNAME``), so the parent can see from
``pg_stat_activity`` when it is connected, and which backends serve it. A backlog is made in
one transaction: one job through the system's own enqueue API, the rest cloned from it in SQL,
so every system gets identical rows and the enqueue is not what is timed. The backlog is in and
analyzed (as autovacuum would after a burst) before the workers start; the drain is timed from
the database: when each job started and finished, and which process ran it (``Window``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from benchmarks import settings as bench_settings

from .common import define_job_types, progress, scalar, sql

ROOT = Path(__file__).resolve().parent.parent
APP_PREFIX = "rlbench-"
READY_TIMEOUT_SECONDS = 180.0
SETTLE_SECONDS = 1.0
"""After every child is connected: let each finish starting (first claim, first reaper pass)."""
STOP_TIMEOUT_SECONDS = 30.0

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# --- child processes ---------------------------------------------------------------------


def child_env(app_name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: the benchmark settings, the parent's resolved server (run.py
    puts it in RUNLEDGER_BENCH_DATABASE) and an application name to find its backends by."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    env["RUNLEDGER_BENCH_DB"] = str(connection.settings_dict["NAME"])
    env["PGAPPNAME"] = app_name
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


def manage(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


def cpu_seconds(pid: int) -> float | None:
    """User plus system CPU of a process (all its threads), from /proc; None where unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


@dataclass
class Group:
    """The child processes of one contender, with their logs."""

    tag: str
    procs: list[subprocess.Popen[bytes]]
    logs: list[Path]
    logdir: Path

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(
                    f"{self.tag}: child {proc.pid} exited with {proc.returncode}:\n{tail}"
                )

    def cpu(self) -> float:
        return sum(cpu_seconds(pid) or 0.0 for pid in self.pids)


def spawn(
    tag: str, argvs: Sequence[Sequence[str]], extra_env: Mapping[str, str] | None = None
) -> Group:
    """Start one child per argv; child ``i`` connects as ``rlbench-<tag>-<i>``."""
    logdir = Path(tempfile.mkdtemp(prefix=f"rlbench-{tag}-"))
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    for index, argv in enumerate(argvs):
        log = logdir / f"{index}.log"
        with log.open("wb") as handle:
            procs.append(
                subprocess.Popen(  # noqa: S603  (our own interpreter and commands)
                    list(argv),
                    cwd=ROOT,
                    env=child_env(f"{APP_PREFIX}{tag}-{index}", extra_env),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=handle,
                )
            )
        logs.append(log)
    return Group(tag, procs, logs, logdir)


Query = Callable[[str, Any], list[tuple[Any, ...]]]
"""Runs one statement and returns its rows: ``common.sql`` on the benchmark database, or a
session on another server (shape y's scratch server)."""


def connections_by_child(tag: str, query: Query = sql) -> dict[str, int]:
    rows = query(
        "SELECT application_name, count(*) FROM pg_stat_activity "
        "WHERE application_name LIKE %s GROUP BY application_name",
        [f"{APP_PREFIX}{tag}-%"],
    )
    return {str(name): int(count) for name, count in rows}


def backend_pids(tag: str) -> list[int]:
    rows = sql(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
        [f"{APP_PREFIX}{tag}-%"],
    )
    return [int(pid) for (pid,) in rows]


def wait_ready(
    group: Group, min_connections: int, *, settle: float = SETTLE_SECONDS, query: Query = sql
) -> None:
    """Wait until every child holds ``min_connections`` connections, then ``settle`` more."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    wanted = {f"{APP_PREFIX}{group.tag}-{i}" for i in range(len(group.procs))}
    while True:
        group.check_alive()
        counts = connections_by_child(group.tag, query)
        if all(counts.get(name, 0) >= min_connections for name in wanted):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{group.tag}: children not connected after {READY_TIMEOUT_SECONDS}s"
            )
        time.sleep(0.1)
    time.sleep(settle)
    group.check_alive()


def stop(group: Group) -> None:
    """SIGTERM (every system stops cleanly on it), then SIGKILL whatever is left; the logs go
    too (a child that failed has already had its log's tail raised)."""
    for proc in group.procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    for proc in group.procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(group.logdir, ignore_errors=True)


@contextmanager
def running(
    tag: str,
    argvs: Sequence[Sequence[str]],
    min_connections: int,
    extra_env: Mapping[str, str] | None = None,
    query: Query = sql,
) -> Iterator[Group]:
    group = spawn(tag, argvs, extra_env)
    try:
        wait_ready(group, min_connections, query=query)
        yield group
    finally:
        stop(group)


def backends_cpu(pids: Sequence[int]) -> dict[int, float]:
    values = {pid: cpu_seconds(pid) for pid in pids}
    return {pid: value for pid, value in values.items() if value is not None}


# --- backlogs: one through the API, the rest cloned --------------------------------------------


def copy_columns(table: str, *, skip: Sequence[str] = ()) -> list[str]:
    """The columns a clone copies: neither generated nor identity, nor in ``skip``."""
    rows = sql(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND table_name = %s "
        "AND is_generated = 'NEVER' AND is_identity = 'NO' ORDER BY ordinal_position",
        [table],
    )
    return [str(name) for (name,) in rows if name not in skip]


def clone_rows(
    table: str,
    where: str,
    params: Sequence[Any],
    count: int,
    *,
    skip: Sequence[str] = (),
    replace: Mapping[str, str] | None = None,
) -> int:
    """Insert ``count`` copies of the one row ``where`` selects (``g`` is the copy's number in
    ``replace`` expressions, ``t`` the template); omitted columns take their defaults."""
    replace = dict(replace or {})
    columns = copy_columns(table, skip=skip)
    names = ", ".join(f'"{name}"' for name in columns)
    values = ", ".join(replace.get(name, f't."{name}"') for name in columns)
    statement = (
        f'INSERT INTO "{table}" ({names}) SELECT {values} '
        f'FROM "{table}" t CROSS JOIN generate_series(1, %s) g WHERE {where}'
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [count, *params])
        return int(cursor.rowcount)


def spread(count: int) -> str:
    """An offset that gives clone ``g`` its own instant, a microsecond apart and all in the past:
    jobs enqueued one by one never share a timestamp, and a claim ordered by time should not be
    timed on a 20,000-row tie that only a bulk clone creates."""
    return f"({int(count)} - g + 1) * interval '1 microsecond'"


@dataclass(frozen=True)
class Window:
    """When each job of a drain started and finished, and which worker process ran it.

    ``rate`` counts from the moment every worker process had started its first job (the last
    process to get going, ``all_active``) to the last finish, and only the jobs started from
    then on: processes that start a second apart would otherwise be timed partly alone. With
    one process that is exactly "first start to last finish" (``full_rate``).
    """

    starts: list[dt.datetime]
    finishes: list[dt.datetime]
    workers: list[str]

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, ...]]) -> Window:
        return cls(
            starts=[row[1] for row in rows],
            finishes=[row[2] for row in rows],
            workers=[str(row[0]) for row in rows],
        )

    @property
    def succeeded(self) -> int:
        return len(self.starts)

    @property
    def worker_count(self) -> int:
        return len(set(self.workers))

    @property
    def all_active(self) -> dt.datetime:
        first: dict[str, dt.datetime] = {}
        for worker, start in zip(self.workers, self.starts, strict=True):
            if worker not in first or start < first[worker]:
                first[worker] = start
        return max(first.values())

    @property
    def steady_jobs(self) -> int:
        since = self.all_active
        return sum(1 for start in self.starts if start >= since)

    @property
    def steady_seconds(self) -> float:
        return (max(self.finishes) - self.all_active).total_seconds()

    @property
    def full_seconds(self) -> float:
        return (max(self.finishes) - min(self.starts)).total_seconds()

    @property
    def rate(self) -> float:
        seconds = self.steady_seconds
        return self.steady_jobs / seconds if seconds > 0 else 0.0

    @property
    def full_rate(self) -> float:
        seconds = self.full_seconds
        return self.succeeded / seconds if seconds > 0 else 0.0


class System:
    """A queue whose worker the shapes start: how to reset, fill, watch and time it."""

    name = ""
    min_connections = 1
    """Connections each idle worker process holds once it is up."""
    tables: tuple[str, ...] = ()
    """Analyzed once the backlog is in, as autovacuum would after a burst."""

    def available(self) -> bool:
        return True

    def reset(self) -> None:
        raise NotImplementedError

    def enqueue(self, count: int) -> None:
        raise NotImplementedError

    def remaining(self) -> int:
        raise NotImplementedError

    def active_workers(self) -> int:
        """Worker processes that have started at least one job."""
        raise NotImplementedError

    def window(self) -> Window:
        raise NotImplementedError

    def argv(self, concurrency: int) -> list[str]:
        raise NotImplementedError

    def check(self, count: int) -> None:
        """Every job ran exactly once and succeeded."""

    def analyze(self) -> None:
        for table in self.tables:
            sql(f'ANALYZE "{table}"')


class Runledger(System):
    name = "runledger"
    min_connections = 2  # the loop's connection and the wake-up listener's
    tables = ("runledger_job_queue", "runledger_job_events")

    def __init__(self, job_type: str | None = None) -> None:
        from .baseline.jobs import NOOP_JOB_TYPE

        self.job_type = job_type or NOOP_JOB_TYPE

    def reset(self) -> None:
        sql(
            "TRUNCATE runledger_job_enqueue_intents, runledger_job_events, runledger_job_attempts,"
            " runledger_job_execution_resource_claims, runledger_job_queue,"
            " runledger_job_definitions RESTART IDENTITY CASCADE"
        )
        define_job_types([self.job_type])

    def enqueue(self, count: int) -> None:
        from runledger_django import enqueue_job

        with transaction.atomic():
            template = enqueue_job(self.job_type, {"n": 0}).job_id
            if count > 1:
                clone_rows(
                    "runledger_job_queue",
                    "t.id = %s",
                    [template],
                    count - 1,
                    skip=("id", "updated_at"),
                    replace={
                        "payload": "jsonb_build_object('n', g)",
                        "next_run_at": f"t.next_run_at - {spread(count)}",
                        "created_at": f"t.created_at - {spread(count)}",
                    },
                )
                sql(
                    "INSERT INTO runledger_job_events (job_id, run_number, attempt, event_type,"
                    " stage, payload) SELECT job.id, e.run_number, e.attempt, e.event_type,"
                    " e.stage, e.payload FROM runledger_job_events e"
                    " JOIN runledger_job_queue job ON job.id <> e.job_id WHERE e.job_id = %s",
                    [template],
                )

    def remaining(self) -> int:
        return int(
            scalar(
                "SELECT count(*) FROM runledger_job_queue "
                "WHERE job_type = %s AND status IN ('PENDING', 'LEASED')",
                [self.job_type],
            )
        )

    def active_workers(self) -> int:
        return int(
            scalar(
                "SELECT count(DISTINCT worker_id) FROM runledger_job_attempts WHERE job_type = %s",
                [self.job_type],
            )
        )

    def window(self) -> Window:
        return Window.from_rows(
            sql(
                "SELECT worker_id, leased_at, finished_at FROM runledger_job_attempts "
                "WHERE job_type = %s AND outcome = 'SUCCEEDED'",
                [self.job_type],
            )
        )

    def argv(self, concurrency: int, *options: str) -> list[str]:
        return manage(
            "runledger_worker",
            "--job-type",
            self.job_type,
            "--concurrency",
            str(concurrency),
            "--verbosity",
            "0",
            *options,
        )

    def check(self, count: int) -> None:
        attempts, jobs = sql(
            "SELECT (SELECT count(*) FROM runledger_job_attempts WHERE job_type = %s),"
            " (SELECT count(*) FROM runledger_job_queue WHERE job_type = %s"
            "  AND status = 'SUCCEEDED')",
            [self.job_type, self.job_type],
        )[0]
        if attempts != count or jobs != count:
            raise RuntimeError(f"runledger: {attempts} attempts, {jobs} succeeded, {count} jobs")


class StatementsOnly(Runledger):
    """The worker's claim and success statements run back to back by ``sql_drain``, with no
    worker around them: the bound any runtime on these statements and this schema meets."""

    name = "runledger statements only"
    min_connections = 1  # each thread's own connection; no listener

    def __init__(self, batch: int = 8) -> None:
        super().__init__()
        self.batch = batch

    def argv(self, concurrency: int, *options: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "benchmarks.sql_drain",
            "--job-type",
            self.job_type,
            "--threads",
            str(concurrency),
            "--batch",
            str(self.batch),
            *options,
        ]


class TasksDb(System):
    name = "django-tasks-db"

    def available(self) -> bool:
        return bench_settings.HAS_DJANGO_TASKS_DB

    @property
    def table(self) -> str:
        from django.apps import apps

        label, model = "django_tasks_database", "DBTaskResult"  # not in the type-check settings
        return str(apps.get_model(label, model)._meta.db_table)

    @property
    def tables(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.table,)

    def reset(self) -> None:
        sql(f'TRUNCATE "{self.table}"')

    def enqueue(self, count: int) -> None:
        from .peer_workers import tasks_db_task

        task = tasks_db_task()
        with transaction.atomic():
            template = task.enqueue().id
            if count > 1:
                clone_rows(
                    self.table,
                    "t.id = %s",
                    [template],
                    count - 1,
                    replace={
                        "id": "gen_random_uuid()",
                        "enqueued_at": f"t.enqueued_at - {spread(count)}",
                    },
                )

    def remaining(self) -> int:
        return int(
            scalar(f"SELECT count(*) FROM \"{self.table}\" WHERE status IN ('READY', 'RUNNING')")
        )

    def active_workers(self) -> int:
        return int(
            scalar(
                f'SELECT count(DISTINCT worker_ids->>-1) FROM "{self.table}" '
                "WHERE started_at IS NOT NULL"
            )
        )

    def window(self) -> Window:
        return Window.from_rows(
            sql(
                f'SELECT worker_ids->>-1, started_at, finished_at FROM "{self.table}" '
                "WHERE status = 'SUCCESSFUL'"
            )
        )

    def argv(self, concurrency: int) -> list[str]:
        if concurrency != 1:
            raise ValueError("db_worker runs one task at a time: scale it with processes")
        return manage("db_worker", "--no-startup-delay", "--no-reload", "--verbosity", "0")

    def check(self, count: int) -> None:
        succeeded = int(
            scalar(f"SELECT count(*) FROM \"{self.table}\" WHERE status = 'SUCCESSFUL'")
        )
        if succeeded != count:
            raise RuntimeError(f"django-tasks-db: {succeeded} of {count} succeeded")


class Procrastinate(System):
    name = "procrastinate"
    tables = ("procrastinate_jobs", "procrastinate_events")

    def __init__(self, *, is_async: bool = False) -> None:
        self.is_async = is_async
        """Run the coroutine no-op (on Procrastinate's event loop) instead of the plain one."""
        if is_async:
            self.name = "procrastinate (async task)"

    def available(self) -> bool:
        return bench_settings.HAS_PROCRASTINATE

    def reset(self) -> None:
        sql("TRUNCATE procrastinate_jobs, procrastinate_events RESTART IDENTITY CASCADE")

    def enqueue(self, count: int) -> None:
        from .peer_workers import procrastinate_task

        task = procrastinate_task(is_async=self.is_async)
        with transaction.atomic():
            template = task.defer()
            if count > 1:
                clone_rows("procrastinate_jobs", "t.id = %s", [template], count - 1, skip=("id",))

    def remaining(self) -> int:
        return int(
            scalar("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")
        )

    def active_workers(self) -> int:
        return int(
            scalar(
                "SELECT count(DISTINCT worker_id) FROM procrastinate_jobs WHERE status <> 'todo'"
            )
        )

    def window(self) -> Window:
        # The worker id is read while the workers run: a stopping worker deletes its row,
        # which sets its jobs' worker_id to NULL.
        return Window.from_rows(
            sql(
                "SELECT job.worker_id, started.at, finished.at FROM procrastinate_jobs job"
                " JOIN procrastinate_events started ON started.job_id = job.id"
                "  AND started.type = 'started'"
                " JOIN procrastinate_events finished ON finished.job_id = job.id"
                "  AND finished.type = 'succeeded'"
            )
        )

    def argv(self, concurrency: int) -> list[str]:
        from .peer_workers import PROCRASTINATE_ASYNC_QUEUE, PROCRASTINATE_QUEUE

        return [
            sys.executable,
            "-m",
            "benchmarks.peer_workers",
            "procrastinate",
            "worker",
            "--queues",
            PROCRASTINATE_ASYNC_QUEUE if self.is_async else PROCRASTINATE_QUEUE,
            "--concurrency",
            str(concurrency),
        ]

    def check(self, count: int) -> None:
        failed, succeeded = sql(
            "SELECT count(*) FILTER (WHERE status <> 'succeeded'),"
            " count(*) FILTER (WHERE status = 'succeeded') FROM procrastinate_jobs"
        )[0]
        if failed or succeeded != count:
            raise RuntimeError(f"procrastinate: {succeeded} succeeded, {failed} not, {count} jobs")


# --- one drain ----------------------------------------------------------------------------


@dataclass
class Drain:
    """One timed drain of ``jobs`` jobs by ``processes`` x ``concurrency`` workers."""

    system: str
    processes: int
    concurrency: int
    jobs: int
    window: Window
    wall_seconds: float
    cpu_jobs: int
    """Jobs started while the CPU below was counted (from all-active to drained)."""
    worker_cpu_seconds: float
    backend_cpu_seconds: float | None
    load: tuple[float, float, float]
    extra: dict[str, Any] = field(default_factory=dict)
    spawned_at: dt.datetime | None = None
    """The database clock just before the worker processes were started (issue 22's timing)."""

    @property
    def rate(self) -> float:
        return self.window.rate

    @property
    def from_start_seconds(self) -> float:
        """From the workers' start (not their first job) to the last job's finish."""
        if self.spawned_at is None or not self.window.finishes:
            return 0.0
        return (max(self.window.finishes) - self.spawned_at).total_seconds()

    @property
    def from_start_rate(self) -> float:
        """Every job over ``from_start_seconds``: what a deployment that starts its workers on
        a backlog sees, process start-up, imports and first connections included."""
        seconds = self.from_start_seconds
        return self.window.succeeded / seconds if seconds > 0 else 0.0

    @property
    def worker_cpu_ms_per_job(self) -> float:
        return self.worker_cpu_seconds * 1000 / max(1, self.cpu_jobs)

    @property
    def backend_cpu_ms_per_job(self) -> float | None:
        if self.backend_cpu_seconds is None:
            return None
        return self.backend_cpu_seconds * 1000 / max(1, self.cpu_jobs)

    def to_dict(self) -> dict[str, Any]:
        backend = self.backend_cpu_ms_per_job
        return {
            "rate": round(self.rate, 1),
            "full_rate": round(self.window.full_rate, 1),
            "from_start_rate": round(self.from_start_rate, 1),
            "from_start_seconds": round(self.from_start_seconds, 4),
            "steady_jobs": self.window.steady_jobs,
            "steady_seconds": round(self.window.steady_seconds, 4),
            "full_seconds": round(self.window.full_seconds, 4),
            "workers_seen": self.window.worker_count,
            "wall_seconds": round(self.wall_seconds, 4),
            "worker_cpu_ms_per_job": round(self.worker_cpu_ms_per_job, 4),
            "backend_cpu_ms_per_job": None if backend is None else round(backend, 4),
            "loadavg_1m": round(self.load[0], 2),
            **self.extra,
        }


def loadavg() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)


def drain(
    system: System,
    *,
    processes: int,
    concurrency: int,
    jobs: int,
    tag: str,
    argv: Sequence[str] | None = None,
    during: Callable[[Group], Callable[[], None]] | None = None,
) -> Drain:
    """Fill the queue with ``jobs`` due jobs, analyze it, start the workers, time the drain.

    CPU (the worker processes', and their database backends' where /proc shows them) is
    counted from the moment every process has started a job to the end of the drain.
    ``during`` (optional) is called with the group at that moment and returns a callable to
    run once the drain is over (the profiler attaches py-spy that way).
    """
    system.reset()
    system.enqueue(jobs)
    system.analyze()
    command = list(argv) if argv is not None else system.argv(concurrency)
    load = loadavg()
    spawned_at = scalar("SELECT clock_timestamp()")
    group = spawn(tag, [command] * processes)
    try:
        started = time.monotonic()
        deadline = started + READY_TIMEOUT_SECONDS + max(180.0, jobs / 20)
        active = False
        cpu_before = group.cpu()  # replaced once every process runs jobs
        backends_before: dict[int, float] = {}
        finish: Callable[[], None] | None = None
        while True:
            group.check_alive()
            if not active and system.active_workers() >= processes:
                active = True
                cpu_before = group.cpu()
                backends_before = backends_cpu(backend_pids(tag))
                finish = during(group) if during is not None else None
            if system.remaining() == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{tag}: drain did not finish; {system.remaining()} left")
            time.sleep(0.1)
        wall = time.monotonic() - started
        if finish is not None:
            finish()
        cpu_after = group.cpu()
        backends_after = backends_cpu(backend_pids(tag))
        window = system.window()
    finally:
        stop(group)
    system.check(jobs)
    backend_cpu = None
    if backends_after:
        backend_cpu = sum(
            value - backends_before.get(pid, 0.0) for pid, value in backends_after.items()
        )
    return Drain(
        system=system.name,
        processes=processes,
        concurrency=concurrency,
        jobs=jobs,
        window=window,
        wall_seconds=wall,
        cpu_jobs=window.steady_jobs if active else jobs,
        worker_cpu_seconds=cpu_after - cpu_before,
        backend_cpu_seconds=backend_cpu,
        load=load,
        extra={} if active else {"all_processes_ran_jobs": False},
        spawned_at=spawned_at,
    )


# --- running a shape on its own ---------------------------------------------------------------


def standalone(letter: str, title: str, argv: Sequence[str]) -> int:
    """``python -m benchmarks.shape_<letter>``: run.py's setup and report, for one shape that
    run.py does not list yet. ``--jobs``, ``--rounds`` and ``--seconds`` override the sizes and
    ``--select`` picks scenarios (they are in ``ctx.state``)."""
    import argparse
    import importlib
    import platform

    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.shape_{letter}", description=title)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--keep-db", action="store_true", help="keep the benchmark database")
    parser.add_argument("--output", type=Path, default=None, help="JSON file to write")
    parser.add_argument("--jobs", type=int, default=None, help="override the job count")
    parser.add_argument("--rounds", type=int, default=None, help="override the round count")
    parser.add_argument(
        "--select", default="", help="comma-separated scenario keys to run (default: all)"
    )
    parser.add_argument("--seconds", type=float, default=None, help="override a time window")
    args = parser.parse_args(list(argv))

    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    from . import run as bench_run

    server = dict(bench_settings.DATABASES["default"])
    maintenance = bench_settings.MAINTENANCE_DB_NAME
    name = bench_settings.BENCH_DB_NAME
    os.environ["RUNLEDGER_BENCH_DATABASE"] = json.dumps(
        {key: value for key, value in server.items() if key != "NAME"}
        | {"NAME": maintenance, "MAINTENANCE_NAME": maintenance}
    )
    progress(f"recreating database {name} on the {bench_run._server_label()} server")
    bench_run.recreate_database(server, maintenance, name)

    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from .common import Context, Row

    call_command("migrate", verbosity=0, interactive=False)
    connection.ensure_connection()
    version = int(connection.pg_version)  # type: ignore[attr-defined]
    ctx = Context(quick=args.quick, server_version=version)
    if args.jobs is not None:
        ctx.state["jobs"] = args.jobs
    if args.rounds is not None:
        ctx.state["rounds"] = args.rounds
    if args.seconds is not None:
        ctx.state["seconds"] = args.seconds
    if args.select:
        ctx.state["select"] = {key.strip() for key in args.select.split(",") if key.strip()}
    started = dt.datetime.now(dt.UTC)
    failed = False
    progress(f"shape ({letter}): {title}")
    try:
        importlib.import_module(f"benchmarks.shape_{letter}").run(ctx)
    except Exception as error:
        import traceback

        failed = True
        traceback.print_exc()
        ctx.add(Row(letter, f"FAILED: {type(error).__name__}: {error}"[:160], 0, "ms", ok=False))
    header = (
        f"runledger_django benchmarks: PostgreSQL {version // 10000}.{version % 10000}"
        f" ({bench_run._server_label()}), Python {platform.python_version()},"
        f" Django {django.get_version()}, {os.cpu_count()} CPUs"
        + (", --quick" if args.quick else "")
    )
    print()
    print(header)
    print()
    bench_run.print_table(ctx.rows)
    targets = [row for row in ctx.rows if row.target]
    if targets:
        print("\nAgainst the targets:\n")
        bench_run.print_table(targets)
    document = {
        "started_at": started.isoformat(),
        "finished_at": dt.datetime.now(dt.UTC).isoformat(),
        "argv": list(argv),
        "quick": args.quick,
        "shapes": [letter],
        "server": {"version_num": version, "where": bench_run._server_label()},
        "python": platform.python_version(),
        "packages": bench_run._package_versions(),
        "cpus": os.cpu_count(),
        "rows": [row.to_dict() for row in ctx.rows],
    }
    output = args.output or bench_run.RESULTS_DIR / (
        f"{started:%Y%m%dT%H%M%SZ}-pg{version // 10000}-{letter}.json"
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"\nJSON: {output}")
    connections.close_all()
    if not args.keep_db:
        bench_run.recreate_database(server, maintenance, name, drop_only=True)
    return 1 if failed else 0
