"""The wake-up listener: LISTEN on a connection of its own and poke the worker's loops."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

from ..db import job_queries
from ..services.wakeup import INTENTS_CHANNEL, JOBS_CHANNEL

logger = logging.getLogger(__name__)

RECONNECT_FIRST_SECONDS = 0.5
RECONNECT_CAP_SECONDS = 10.0
POLL_SECONDS = 0.5
"""How often the listener looks at its stop flag while no notification arrives."""


class Listener(threading.Thread):
    """Calls ``on_notify(channel)`` for every notification, and for both channels right after
    each (re)connection, since anything sent while it was away was missed.

    It never issues a query while idle: it blocks on the socket. Where LISTEN cannot work
    (PgBouncer in transaction pooling) turn it off with ``RUNLEDGER["WORKER_LISTEN"]``; the
    worker then polls.
    """

    def __init__(
        self,
        *,
        using: str,
        promote: bool,
        on_notify: Callable[[str], None],
        stop: threading.Event,
        on_disconnect: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="runledger-listener", daemon=True)
        self.using = using
        self.channels = [JOBS_CHANNEL, *([INTENTS_CHANNEL] if promote else [])]
        self.statements = [
            job_queries.LISTEN_JOBS,
            *([job_queries.LISTEN_INTENTS] if promote else []),
        ]
        self.on_notify = on_notify
        self.on_disconnect = on_disconnect
        self.stop = stop
        self.connected = threading.Event()

    def _connect(self) -> Any:
        wrapper = connections[self.using]
        conn = wrapper.get_new_connection(wrapper.get_connection_params())
        conn.autocommit = True
        for statement in self.statements:
            conn.execute(statement)
        return conn

    def run(self) -> None:
        import psycopg

        delay = RECONNECT_FIRST_SECONDS
        while not self.stop.is_set():
            conn = None
            try:
                conn = self._connect()
                self.connected.set()
                delay = RECONNECT_FIRST_SECONDS
                for channel in self.channels:
                    self.on_notify(channel)
                while not self.stop.is_set():
                    for notify in conn.notifies(timeout=POLL_SECONDS):
                        self.on_notify(notify.channel)
            except (psycopg.Error, OSError) as exc:
                self.connected.clear()
                if self.on_disconnect is not None:
                    self.on_disconnect()
                # The worker loop logs an outage once; this only matters when debugging.
                logger.debug(
                    "wake-up listener disconnected (%s); polling meanwhile", type(exc).__name__
                )
                self.stop.wait(delay)
                delay = min(delay * 2, RECONNECT_CAP_SECONDS)
            finally:
                if conn is not None:
                    conn.close()
