"""Wake-up notifications: tell idle workers (and promoters) that work became due.

A NOTIFY inside the caller's transaction would serialise every committing transaction that
sent one on PostgreSQL's notification queue lock, so it is sent after the commit, on the same
connection, as a tiny transaction of its own that does not wait for a WAL flush. Sends are
coalesced per process and channel: a burst of commits costs one notification, and a listener
that was woken keeps looking for a moment (see the worker), so nothing waits for the poll.
Notifications are an optimisation only: workers poll as well, so a lost one costs at most one
poll interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from functools import partial
from typing import Any

from django.db import DatabaseError, connections, transaction

from ..conf import conf
from ..db import lifecycle_queries, schedule_queries

logger = logging.getLogger(__name__)

JOBS_CHANNEL = "runledger_jobs"
"""Jobs became due: enqueued, promoted, requeued or handed back."""
INTENTS_CHANNEL = "runledger_intents"
"""Intents were recorded: promoters have work."""
SCHEDULES_CHANNEL = "runledger_schedules"
"""A schedule was saved, resumed or retimed: schedulers look at the cursors again."""

COALESCE_SECONDS = 0.02
"""At most one notification per channel and process in this window. A listener that was
woken keeps looking for longer than this (the worker's HOT_SECONDS), so work committed inside
the window is found without a notification of its own."""

_last_sent: dict[tuple[str, str], float] = {}
_lock = threading.Lock()


def wake_after_commit(using: str, channel: str) -> None:
    """Notify ``channel`` once the current transaction commits (now, in autocommit mode).

    Under manual transaction management (autocommit off, no atomic block) there is no commit
    hook to use, so nothing is sent and the pollers pick the work up.
    """
    if not conf.WAKEUP_NOTIFY:
        return
    connection = connections[using]
    if connection.in_atomic_block:
        transaction.on_commit(partial(_send, using, channel), using=using, robust=True)
    elif connection.get_autocommit():
        _send(using, channel)


def _send(using: str, channel: str) -> None:
    now = time.monotonic()
    key = (using, channel)
    with _lock:
        last = _last_sent.get(key)
        if last is not None and now - last < COALESCE_SECONDS:
            return
        _last_sent[key] = now
    connection = connections[using]
    if connection.in_atomic_block or not connection.get_autocommit():
        return  # an on_commit callback that runs inside a later transaction of the caller's
    try:
        with connection.cursor() as cursor:
            cursor.execute(lifecycle_queries.NOTIFY, {"channel": channel})
    except DatabaseError as exc:
        # The caller's work is committed; a lost wake-up only costs a poll interval.
        logger.debug("wake-up notification failed: %s", type(exc).__name__)


# --- the listening side: a worker's listener runs these on raw psycopg connections -----------

_LISTEN = {
    JOBS_CHANNEL: lifecycle_queries.LISTEN_JOBS,
    INTENTS_CHANNEL: lifecycle_queries.LISTEN_INTENTS,
    SCHEDULES_CHANNEL: schedule_queries.LISTEN_SCHEDULES,
}


def subscribe(conn: Any, channels: Sequence[str]) -> None:
    """LISTEN on each of ``channels`` (``JOBS_CHANNEL``, ``INTENTS_CHANNEL``,
    ``SCHEDULES_CHANNEL``), in that order.

    ``conn`` is a psycopg connection of the caller's own, in autocommit mode: a subscription
    lasts as long as the session, so it never goes through Django's connection handling.
    """
    for channel in channels:
        conn.execute(_LISTEN[channel])


def listen_probe(conn: Any, channel: str) -> None:
    """LISTEN on a probe's private ``channel`` (an identifier: it cannot be a parameter)."""
    from psycopg import sql

    conn.execute(sql.SQL(lifecycle_queries.LISTEN_PROBE).format(channel=sql.Identifier(channel)))


def unlisten_probe(conn: Any, channel: str) -> None:
    """Drop the subscription ``listen_probe`` made."""
    from psycopg import sql

    conn.execute(sql.SQL(lifecycle_queries.UNLISTEN_PROBE).format(channel=sql.Identifier(channel)))


def notify_now(conn: Any, channel: str) -> None:
    """Notify ``channel`` from ``conn`` (a raw connection in autocommit mode) at once, without
    coalescing: the listener's probe, which must come from a session of its own."""
    conn.execute(lifecycle_queries.NOTIFY, {"channel": channel})
