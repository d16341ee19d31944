"""A real PgBouncer in transaction pooling mode in front of the PostgreSQL under test.

Hostile on purpose: a pool of two server connections shared by every client, no reset query,
and round-robin server selection, so a client's consecutive transactions land on different
server connections and whatever a session leaves behind is inherited by the next client.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

POOL_SIZE = 2
START_SECONDS = 10.0

TRACKED_PARAMETERS = frozenset(
    {
        "application_name",
        "client_encoding",
        "datestyle",
        "standard_conforming_strings",
        "timezone",
    }
)
"""Parameters PgBouncer itself keeps per client and SETs on the server it assigns; finding
them set at session level on a pooled server is PgBouncer's doing, not a leak."""
PER_TRANSACTION = frozenset(
    {"transaction_isolation", "transaction_read_only", "transaction_deferrable"}
)
"""Every transaction starts these from their ``default_`` settings, yet after a
``SET TRANSACTION`` (runledger's owned READ COMMITTED blocks) PostgreSQL goes on reporting the
last value with source 'session': not state a later transaction inherits."""


def find_binary() -> str | None:
    """The pgbouncer executable (Debian puts it in /usr/sbin, often off a user's PATH)."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    fallback = Path("/usr/sbin/pgbouncer")
    return str(fallback) if fallback.exists() else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_as(backend_host: str) -> str | None:
    """The user to switch to when started as root (PgBouncer refuses to run as root): the
    owner of the server's socket directory, who can reach the socket, else ``postgres``."""
    if os.geteuid() != 0:
        return None
    if backend_host.startswith("/"):
        return pwd.getpwuid(Path(backend_host).stat().st_uid).pw_name
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("no unprivileged user to run pgbouncer as")


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class Backend:
    """Where PgBouncer connects: the server the test database lives on."""

    host: str
    port: str
    user: str
    password: str
    database: str

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Backend:
        return cls(
            host=str(settings["HOST"] or "/var/run/postgresql"),
            port=str(settings["PORT"] or 5432),
            user=str(settings["USER"] or "postgres"),
            password=str(settings["PASSWORD"] or ""),
            database=str(settings["NAME"]),
        )

    def connstring(self, **extra: str) -> str:
        parts = {"host": self.host, "port": self.port, "user": self.user, **extra}
        if self.password:
            parts["password"] = self.password
        return " ".join(f"{key}={_quote(value)}" for key, value in parts.items())


class PgBouncer:
    """One pgbouncer process on a free port of 127.0.0.1, stopped by :meth:`stop`.

    Two pools: ``*`` routes any database name to the same name on the backend (the clients'
    pool), and ``CONTROL_DB`` is a separate pool on the test database that only the control
    test dirties, so its leaked SET never reaches the clients' pool.
    """

    CONTROL_DB = "runledger_control"

    def __init__(self, binary: str, backend: Backend) -> None:
        self.binary = binary
        self.backend = backend
        self.port = _free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="runledger-pgbouncer-"))
        self.directory.chmod(0o755)  # readable by the user pgbouncer switches to
        self.log_path = self.directory / "pgbouncer.log"
        self.process: subprocess.Popen[bytes] | None = None

    def _config(self) -> str:
        control = self.backend.connstring(dbname=self.backend.database)
        return "\n".join(
            [
                "[databases]",
                f"{self.CONTROL_DB} = {control}",
                f"* = {self.backend.connstring()}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {self.port}",
                "unix_socket_dir =",
                "auth_type = any",
                "admin_users = pgbouncer",
                "pool_mode = transaction",
                f"default_pool_size = {POOL_SIZE}",
                "min_pool_size = 0",
                "reserve_pool_size = 0",
                "max_client_conn = 200",
                "server_round_robin = 1",
                "server_reset_query =",
                "server_reset_query_always = 0",
                "server_connect_timeout = 5",
                "server_login_retry = 1",
                "query_wait_timeout = 60",
                "client_login_timeout = 10",
                "log_connections = 1",  # counted by connections_made()
                "log_disconnections = 0",
                "log_stats = 0",
                "",
            ]
        )

    def start(self) -> None:
        """Start pgbouncer and wait until its console answers; a port taken meanwhile by
        someone else (between _free_port and the bind) costs a retry on another one."""
        for _ in range(3):
            if self._launch():
                return
            if "Address already in use" not in self.log():
                break
            self.port = _free_port()
        log = self.log()
        self.stop()
        raise RuntimeError(f"pgbouncer did not start:\n{log}")

    def _launch(self) -> bool:
        config = self.directory / "pgbouncer.ini"
        config.write_text(self._config())
        config.chmod(0o644)
        command = [self.binary]
        user = _run_as(self.backend.host)
        if user is not None:
            command += ["-u", user]
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(  # noqa: S603  (a fixed binary and our own config)
                [*command, str(config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_SECONDS
        # A console answering on the port is ours only once our own log says we listen: a
        # concurrent run's pgbouncer may hold the port this one failed to bind.
        listening = f"listening on 127.0.0.1:{self.port}"
        while True:
            if listening in self.log():
                try:
                    self.admin("SHOW VERSION")
                    return True
                except psycopg.OperationalError:
                    pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._terminate()
                return False
            time.sleep(0.02)

    def _terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def stop(self) -> None:
        self._terminate()
        shutil.rmtree(self.directory, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def url(self, database: str | None = None) -> str:
        """A DATABASE_URL through PgBouncer (the user is ignored: auth_type = any)."""
        return f"postgres://postgres@127.0.0.1:{self.port}/{database or self.backend.database}"

    def connect(self, database: str | None = None) -> psycopg.Connection[tuple[Any, ...]]:
        """A client connection through PgBouncer, autocommit."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname=database or self.backend.database,
            autocommit=True,
        )

    def admin(self, command: str) -> list[dict[str, Any]]:
        """Run a console command (SHOW POOLS, SHOW SERVERS, ...); rows as dicts."""
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user="pgbouncer", dbname="pgbouncer", autocommit=True
        ) as conn:
            cursor = conn.execute(command)
            if cursor.description is None:
                return []  # a command (RECONNECT, ...)
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def connections_made(self, database: str | None = None) -> tuple[int, int]:
        """Client logins and server connections opened for ``database`` so far, from the
        log: how many clients the pool's few server connections served."""
        wanted = re.escape(database or self.backend.database)
        log = self.log()
        clients = len(re.findall(rf": {wanted}/\S+ login attempt:", log))
        servers = len(re.findall(rf": {wanted}/\S+ new connection to server", log))
        return clients, servers

    def servers(self, database: str | None = None) -> list[dict[str, Any]]:
        wanted = database or self.backend.database
        return [row for row in self.admin("SHOW SERVERS") if row["database"] == wanted]


IGNORED = TRACKED_PARAMETERS | PER_TRANSACTION

SESSION_STATE = """
SELECT pg_backend_pid(),
       ARRAY(SELECT name || '=' || setting FROM pg_settings
             WHERE source = 'session' AND lower(name) <> ALL(%(ignored)s) ORDER BY name),
       ARRAY(SELECT name FROM pg_prepared_statements ORDER BY name),
       ARRAY(SELECT pg_listening_channels() ORDER BY 1),
       ARRAY(SELECT objid::text FROM pg_locks
             WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY 1),
       ARRAY(SELECT name FROM pg_cursors WHERE is_holdable ORDER BY name)
"""


@dataclass
class ServerState:
    """What one pooled server connection carries from earlier clients' sessions."""

    pid: int
    settings: list[str]
    """GUCs set at session level, other than those PgBouncer tracks itself and the
    per-transaction ones."""
    prepared_statements: list[str]
    listening: list[str]
    advisory_locks: list[str]
    holdable_cursors: list[str]


def pooled_server_states(bouncer: PgBouncer, database: str | None = None) -> list[ServerState]:
    """The session state of every server connection in ``database``'s pool.

    Each of POOL_SIZE clients opens a transaction, which pins one server connection until it
    ends, so together they hold the whole pool and each reads its own server's state. Raises
    when a server connection that existed before was not among them.
    """
    existing = {row["remote_pid"] for row in bouncer.servers(database)}
    clients = [bouncer.connect(database) for _ in range(POOL_SIZE)]
    try:
        states = []
        for client in clients:
            client.execute("BEGIN")
            row = client.execute(SESSION_STATE, {"ignored": sorted(IGNORED)}).fetchone()
            assert row is not None
            states.append(ServerState(*row))
        for client in clients:
            client.execute("COMMIT")
    finally:
        for client in clients:
            client.close()
    seen = {state.pid for state in states}
    missing = existing - seen
    if missing:
        raise AssertionError(f"server connections {missing} were not inspected (seen {seen})")
    return states
