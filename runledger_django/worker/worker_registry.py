"""The worker's row in ``runledger_workers``: inserted at start, beaten by the loop, deleted on
a clean exit (services/worker_registry.py holds the statements' contract).

Only the supervisor loop beats it, never a handler thread, so a worker whose loop is blocked
goes stale like a killed one. A failed beat is logged and never holds up the work: the row
merely ages until the next beat succeeds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from django.db import connections

from ..errors import RunledgerError
from ..services.outage import is_outage
from ..services.worker_registry import WorkerIdentity, beat_worker, remove_worker

logger = logging.getLogger(__name__)


class Presence:
    """One worker's registry row, as its loop keeps it."""

    def __init__(
        self,
        *,
        worker_id: str,
        job_types: Callable[[], Sequence[str]],
        concurrency: int,
        heartbeat_seconds: float,
        retention_seconds: float,
        using: str,
        on_success: Callable[[], None],
        on_outage: Callable[[], None],
    ) -> None:
        self.worker_id = worker_id
        self.job_types = job_types
        self.concurrency = concurrency
        self.heartbeat_seconds = heartbeat_seconds
        self.retention_seconds = retention_seconds
        self.using = using
        self.on_success = on_success
        self.on_outage = on_outage

    def beat(self) -> bool:
        """Insert or refresh the row; False (logged) when the database refused."""
        identity = WorkerIdentity(
            worker_id=self.worker_id,
            job_types=list(self.job_types()),
            concurrency=self.concurrency,
        )
        try:
            beat_worker(
                identity,
                heartbeat_seconds=self.heartbeat_seconds,
                retention_seconds=self.retention_seconds,
                using=self.using,
            )
        except RunledgerError as error:
            outage = is_outage(error)
            if outage:
                self.on_outage()
            # The loop logs an outage once; any other failure is worth a line per beat.
            logger.log(
                logging.DEBUG if outage else logging.WARNING,
                "could not beat the worker registry error_code=%s",
                error.code,
                extra={"runledger": error.log_fields()},
            )
            connections[self.using].close_if_unusable_or_obsolete()
            return False
        self.on_success()
        return True

    def leave(self) -> None:
        """A clean exit deletes the row; a failure leaves it to go stale and be pruned."""
        try:
            remove_worker(self.worker_id, using=self.using)
        except RunledgerError as error:
            logger.warning(
                "could not remove the worker from the registry error_code=%s",
                error.code,
                extra={"runledger": error.log_fields()},
            )
