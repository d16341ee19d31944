"""Settings for the processes the PgBouncer tests start: every connection goes through PgBouncer.

The worker tests' settings (the test database, the worker app's handlers, timings from
RUNLEDGER_TEST_* variables) with the database reached at PgBouncer's port
(RUNLEDGER_TEST_PGBOUNCER_PORT), plus what Django needs behind a transaction-pooling proxy: no
server-side cursors. RUNLEDGER_TEST_SERVER_SIDE_BINDING=1 turns on psycopg's server-side
binding, the variant the docs discuss. Worker subprocesses get these settings with
``--settings``, so the worker tests' process helper starts them unchanged.
"""

from __future__ import annotations

import os

from tests.worker_settings import *  # noqa: F403
from tests.worker_settings import DATABASES

_default = DATABASES["default"]
_options = _default.setdefault("OPTIONS", {})
# A socket directory and port given as URL query parameters land in OPTIONS.
_options.pop("host", None)
_options.pop("port", None)
_default.update(
    HOST="127.0.0.1",
    PORT=os.environ["RUNLEDGER_TEST_PGBOUNCER_PORT"],
    USER="postgres",  # PgBouncer logs in to the server as the user its config names
    PASSWORD="",
    DISABLE_SERVER_SIDE_CURSORS=True,
)
if os.environ.get("RUNLEDGER_TEST_SERVER_SIDE_BINDING") == "1":
    _options["server_side_binding"] = True
