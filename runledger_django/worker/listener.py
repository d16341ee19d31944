"""The wake-up listener: LISTEN on a connection of its own and poke the worker's loops.

Before relying on notifications it checks that they reach it at all: behind a pooler in
transaction mode (PgBouncer) LISTEN sticks to whichever server connection ran it, and nothing
arrives. The listener then says so once and ends, and the worker polls.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections

from ..services.wakeup import (
    INTENTS_CHANNEL,
    JOBS_CHANNEL,
    SCHEDULES_CHANNEL,
    listen_probe,
    notify_now,
    subscribe,
    unlisten_probe,
)

logger = logging.getLogger(__name__)

RECONNECT_FIRST_SECONDS = 0.5
RECONNECT_CAP_SECONDS = 10.0
POLL_SECONDS = 0.5
"""How often the listener looks at its stop flag while no notification arrives."""
PROBE_SECONDS = 2.0
"""How long the listener waits for its own probe notification. A direct connection gets it
within milliseconds; through a transaction-pooling proxy it never comes."""
PROBE_CHANNEL_PREFIX = "runledger_probe_"
"""Each probe listens on a channel of its own (this prefix and a random suffix), so no other
session ever notifies it and a subscription a pooler strands on a server costs nothing."""
UNREACHABLE_MESSAGE = (
    "wake-up notifications do not reach this worker (a transaction-pooling proxy?); "
    "polling every %g s"
)


class Listener(threading.Thread):
    """Calls ``on_notify(channel)`` for every notification, and for both channels right after
    each (re)connection, since anything sent while it was away was missed.

    It never issues a query while idle: it blocks on the socket. On every connection it first
    sends itself a notification from a second connection (a probe on a private channel); when
    that does not arrive within PROBE_SECONDS it logs one line, sets ``unreachable`` and ends,
    and the worker goes on polling every ``poll_interval`` seconds.
    ``RUNLEDGER["WORKER_LISTEN"] = False`` skips the listener and its probe altogether.
    """

    def __init__(
        self,
        *,
        using: str,
        promote: bool,
        on_notify: Callable[[str], None],
        stop: threading.Event,
        poll_interval: float,
        on_disconnect: Callable[[], None] | None = None,
        schedules: bool = False,
        channels: Sequence[str] | None = None,
    ) -> None:
        super().__init__(name="runledger-listener", daemon=True)
        self.using = using
        self.channels = (
            list(channels)
            if channels is not None
            else [
                JOBS_CHANNEL,
                *([INTENTS_CHANNEL] if promote else []),
                *([SCHEDULES_CHANNEL] if schedules else []),
            ]
        )
        self.on_notify = on_notify
        self.on_disconnect = on_disconnect
        self.stop = stop
        self.poll_interval = poll_interval
        self.connected = threading.Event()
        """Set while the listener is subscribed and its probe came back."""
        self.unreachable = threading.Event()
        """Set when the probe never arrived: the listener has ended and the worker polls."""

    def _open(self) -> Any:
        wrapper = connections[self.using]
        conn = wrapper.get_new_connection(wrapper.get_connection_params())
        conn.autocommit = True
        return conn

    def _notifications_arrive(self, conn: Any) -> bool:
        """Whether a notification sent by another session reaches ``conn`` while it idles.

        Only another session can tell: a backend delivers its own notifications to whichever
        client holds it when its transaction ends, and through a pooler that is the sender.
        """
        name = PROBE_CHANNEL_PREFIX + uuid.uuid4().hex
        listen_probe(conn, name)
        sender = self._open()
        try:
            notify_now(sender, name)
        finally:
            sender.close()
        deadline = time.monotonic() + PROBE_SECONDS
        arrived = False
        while not arrived and not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            for notify in conn.notifies(timeout=min(remaining, POLL_SECONDS)):
                if notify.channel == name:
                    arrived = True
                    break
        # Through a pooler this may reach another server than the LISTEN did; the stranded
        # subscription is to a channel nobody will ever notify again.
        unlisten_probe(conn, name)
        return arrived

    def run(self) -> None:
        import psycopg

        delay = RECONNECT_FIRST_SECONDS
        while not self.stop.is_set():
            conn = None
            try:
                conn = self._open()
                if not self._notifications_arrive(conn):
                    if not self.stop.is_set():
                        logger.warning(UNREACHABLE_MESSAGE, self.poll_interval)
                        self.unreachable.set()
                    return
                subscribe(conn, self.channels)
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
