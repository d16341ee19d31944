"""Real ``manage.py runledger_worker`` processes for the tests, and the means to watch them.

A worker subprocess runs with tests/worker_settings.py against the test database: its handlers
are those of tests/worker_app/jobs.py, its timings come from environment variables, and its
connections carry an application_name so a test can find its backends. Output lines are read
by a thread into a queue, so a test waits for a line (an event) instead of sleeping.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.db import connection

BASE_DIR = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """A DATABASE_URL naming the test database (a socket directory goes in the query)."""
    settings = connection.settings_dict
    options = settings.get("OPTIONS") or {}
    user = quote(str(settings["USER"] or ""), safe="")
    password = settings["PASSWORD"]
    auth = f"{user}:{quote(str(password), safe='')}@" if password else f"{user}@"
    host = str(settings["HOST"] or options.get("host") or "")
    port = settings["PORT"] or options.get("port")
    name = settings["NAME"]
    if host.startswith("/"):
        query = f"?host={quote(host, safe='/')}" + (f"&port={port}" if port else "")
        return f"postgres://{auth}/{name}{query}"
    return f"postgres://{auth}{host}{f':{port}' if port else ''}/{name}"


class WorkerProcess:
    """One ``runledger_worker`` subprocess; its stdout and stderr lines arrive in queues."""

    def __init__(self, args: list[str], settings: dict[str, Any]) -> None:
        self.application_name = f"rl-test-{uuid.uuid4().hex[:12]}"
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.worker_settings",
            "DATABASE_URL": database_url(),
            "RUNLEDGER_TEST_DB": str(connection.settings_dict["NAME"]),
            "RUNLEDGER_TEST_APPLICATION_NAME": self.application_name,
            "PYTHONUNBUFFERED": "1",
        }
        for key, value in settings.items():
            env[f"RUNLEDGER_TEST_{key}"] = (
                ("1" if value else "0") if isinstance(value, bool) else str(value)
            )
        self.process = subprocess.Popen(  # noqa: S603  (fixed interpreter and arguments)
            [sys.executable, "-m", "django", "runledger_worker", *args],
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout: queue.Queue[str] = queue.Queue()
        self.stderr: queue.Queue[str] = queue.Queue()
        self.stdout_lines: list[str] = []
        self.stderr_lines: list[str] = []
        self._readers = [
            threading.Thread(
                target=self._read, args=(self.process.stdout, self.stdout), daemon=True
            ),
            threading.Thread(
                target=self._read, args=(self.process.stderr, self.stderr), daemon=True
            ),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, lines: queue.Queue[str]) -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for_line(self, fragment: str, *, timeout: float = 30.0, stream: str = "stdout") -> str:
        """Return the next line of ``stream`` containing ``fragment`` (earlier lines are kept
        in ``stdout_lines``/``stderr_lines``)."""
        lines = self.stdout if stream == "stdout" else self.stderr
        seen = self.stdout_lines if stream == "stdout" else self.stderr_lines
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"worker printed no line with {fragment!r} on {stream}; "
                    f"stdout={self.stdout_lines!r} stderr={self.stderr_lines[-80:]!r}"
                )
            try:
                line = lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                if self.process.poll() is not None and lines.empty():
                    self._drain_readers()
                    if lines.empty():
                        raise AssertionError(
                            f"worker exited ({self.process.returncode}) before printing "
                            f"{fragment!r}; stdout={self.stdout_lines!r} "
                            f"stderr={self.stderr_lines[-80:]!r}"
                        ) from None
                continue
            seen.append(line)
            if fragment in line:
                return line

    def _drain_readers(self) -> None:
        for reader in self._readers:
            reader.join(timeout=5)

    def signal(self, signum: signal.Signals) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float = 60.0) -> int:
        """Wait for the exit; collect every remaining output line; return the status."""
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self._collect()
            raise AssertionError(
                f"worker did not exit within {timeout} s; stdout={self.stdout_lines!r} "
                f"stderr={self.stderr_lines[-80:]!r}"
            ) from None
        self._collect()
        return status

    def _collect(self) -> None:
        self._drain_readers()
        for lines, seen in ((self.stdout, self.stdout_lines), (self.stderr, self.stderr_lines)):
            while not lines.empty():
                seen.append(lines.get())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._collect()
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def stop_all(processes: list[WorkerProcess]) -> None:
    for process in processes:
        process.stop()


def release_signal(process: WorkerProcess) -> None:
    """SIGTERM: what a supervisor sends to stop a worker."""
    process.signal(signal.SIGTERM)
