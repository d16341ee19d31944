"""The worker's health probes: ``/livez``, ``/readyz``, ``/startupz`` and the health file.

Everything here answers from memory: the worker loop records its ticks, its database
round trips and its start, and the probes read those numbers. No probe runs SQL, imports
``django.db`` or passes through Django's request stack (no ``ALLOWED_HOSTS``, no middleware),
so a probe answers at once while every handler thread is busy and while the database is down.

- live: the supervisor loop ticked within ``liveness_max_age``. Database trouble, long
  handlers and draining never make it fail: only a loop that stopped turning does, the one
  thing a restart cures.
- ready: started, not stopping (from the moment SIGTERM arrives), no outage under way, and a
  database round trip within ``readiness_db_max_age``.
- started: handler discovery and the definitions' sync finished; stays true.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

HEALTH_FILE_INTERVAL_SECONDS = 1.0
"""The loop rewrites the health file at its ticks, at most this often (a hot loop ticks every
10 ms)."""
LIVENESS_FLOOR_SECONDS = 60.0
"""The default liveness window is at least this long: longer than the longest statement cap
(30 s) plus the longest outage backoff (10 s), so a slow database never fails liveness."""
READINESS_FLOOR_SECONDS = 30.0


def default_liveness_max_age(poll_interval: float, reaper_interval: float) -> float:
    """The longest a healthy loop goes without a tick, with a wide margin: it sleeps at most
    a poll interval (idle) or a reaper interval (every executor busy) between ticks."""
    return max(LIVENESS_FLOOR_SECONDS, 3 * poll_interval, 2 * reaper_interval)


def default_readiness_max_age(
    poll_interval: float, reaper_interval: float, heartbeat_seconds: float
) -> float:
    """A busy worker claims nothing, but still reaps and beats: two of the longest gaps."""
    return max(READINESS_FLOOR_SECONDS, 2 * max(poll_interval, reaper_interval, heartbeat_seconds))


def worker_health(
    *,
    poll_interval: float,
    reaper_interval: float,
    heartbeat_seconds: float,
    liveness_max_age: float | None = None,
    readiness_db_max_age: float | None = None,
    health_file: Path | None = None,
    version: str = "",
) -> Health:
    """A worker's health state, with the default windows where none is given."""
    return Health(
        liveness_max_age=liveness_max_age
        if liveness_max_age is not None
        else default_liveness_max_age(poll_interval, reaper_interval),
        readiness_db_max_age=readiness_db_max_age
        if readiness_db_max_age is not None
        else default_readiness_max_age(poll_interval, reaper_interval, heartbeat_seconds),
        health_file=health_file,
        version=version,
    )


class Health:
    """The in-memory state the probes read; written by the worker loop.

    Each field is one float or bool, replaced whole, so readers need no lock.
    """

    def __init__(
        self,
        *,
        liveness_max_age: float,
        readiness_db_max_age: float,
        health_file: Path | None = None,
        version: str = "",
    ) -> None:
        self.liveness_max_age = liveness_max_age
        self.readiness_db_max_age = readiness_db_max_age
        self.health_file = health_file
        self._file_path = health_file
        self.version = version
        self.last_tick = time.monotonic()
        self.last_database_ok: float | None = None
        self.database_down = False
        self.started = False
        self.stopping: Callable[[], bool] = lambda: False
        """Set by the worker to its stop flag: a SIGTERM is seen from the instant it lands."""
        self.inflight: Callable[[], int] = lambda: 0
        self.details: dict[str, Any] = {}
        self._file_written = 0.0
        self._file_state: tuple[bool, bool] | None = None
        self._file_failed = False

    # --- written by the worker -------------------------------------------------------------

    def attach(
        self, *, stopping: Callable[[], bool], inflight: Callable[[], int], worker_id: str
    ) -> None:
        """Called by the worker that this state describes."""
        self.stopping = stopping
        self.inflight = inflight
        self.details = {"worker_id": worker_id}

    def tick(self) -> None:
        """The loop turned; rewrite the health file when it is due, or at once when the
        worker became (or stopped being) started or ready."""
        now = time.monotonic()
        self.last_tick = now
        path = self.health_file
        if path is None:
            return
        state = (self.started, self.is_ready(now))
        if state != self._file_state or now - self._file_written >= HEALTH_FILE_INTERVAL_SECONDS:
            self._file_written = now
            self._file_state = state
            self._write_file(path)

    def mark_started(self) -> None:
        self.started = True
        self.tick()

    def database_ok(self) -> None:
        self.last_database_ok = time.monotonic()
        self.database_down = False

    def database_failed(self) -> None:
        """The database went away (an outage, not one failing statement)."""
        self.database_down = True

    # --- read by the probes ----------------------------------------------------------------

    def is_live(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return now - self.last_tick <= self.liveness_max_age

    def is_ready(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        last = self.last_database_ok
        return (
            self.started
            and not self.stopping()
            and not self.database_down
            and last is not None
            and now - last <= self.readiness_db_max_age
        )

    def snapshot(self) -> dict[str, Any]:
        """The probes' JSON body: small, and the same for every endpoint."""
        now = time.monotonic()
        last = self.last_database_ok
        return {
            "live": self.is_live(now),
            "ready": self.is_ready(now),
            "started": self.started,
            "stopping": self.stopping(),
            "database": "unavailable"
            if self.database_down
            else ("unknown" if last is None else "ok"),
            "seconds_since_tick": round(now - self.last_tick, 3),
            "seconds_since_database": None if last is None else round(now - last, 3),
            "inflight": self.inflight(),
            "version": self.version,
            **self.details,
        }

    # --- the health file -------------------------------------------------------------------

    def _write_file(self, path: Path) -> None:
        """Replace the file whole (a checker never reads half of it); a failure is logged
        once and never stops the worker."""
        body = {**self.snapshot(), "written_at": time.time(), "pid": os.getpid()}
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            temporary.write_text(json.dumps(body), encoding="utf-8")
            os.replace(temporary, path)
        except OSError as error:
            if not self._file_failed:
                logger.warning("could not write the health file %s: %s", path, error)
            self._file_failed = True
            return
        self._file_failed = False

    def remove_file(self) -> None:
        """A clean exit takes the file along, so an exec probe sees the worker gone."""
        self.health_file = None  # a late tick must not bring it back
        if self._file_path is None:
            return
        try:
            self._file_path.unlink(missing_ok=True)
        except OSError as error:
            logger.warning("could not remove the health file %s: %s", self._file_path, error)

    def open_file(self) -> None:
        """Write the file at once: the worker is starting (live, not yet started)."""
        if self.health_file is not None:
            self._file_written = time.monotonic()
            self._write_file(self.health_file)


PROBES = {"/livez": "is_live", "/readyz": "is_ready", "/startupz": "started"}


class _ProbeHandler(BaseHTTPRequestHandler):
    """GET or HEAD one probe; 200 or 503 with the state as JSON; anything else is 404."""

    server: _ProbeServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        check = PROBES.get(path)
        health = self.server.health
        if check is None:
            status, payload = 404, {"error": "not found", "probes": sorted(PROBES)}
        else:
            value = getattr(health, check)
            ok = value() if callable(value) else bool(value)
            status, payload = (200 if ok else 503), health.snapshot()
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Probes every few seconds would flood stderr: log them at DEBUG only."""
        logger.debug("health probe %s", format % args)


class _ProbeServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], health: Health) -> None:
        super().__init__(address, _ProbeHandler)
        self.health = health


class HealthServer:
    """The probe endpoints on ``host:port`` in a daemon thread (one more thread per request,
    so a slow client never holds up the next probe)."""

    def __init__(self, health: Health, *, host: str, port: int) -> None:
        self._server = _ProbeServer((host, port), health)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.5},
            name="runledger-health",
            daemon=True,
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
