"""The heartbeat thread: renews the leases of every running job, every third of the lease."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from ..errors import RunledgerError
from ..services.lifecycle import heartbeat_leases
from ..services.outage import is_outage
from .execution import Execution

logger = logging.getLogger(__name__)

BUSY_RETRY_SECONDS = 0.05
"""How soon a lease whose row was locked elsewhere is tried again."""


class Heartbeater(threading.Thread):
    """Renews leases in one statement per tick, on a connection of its own.

    A lease whose row another session holds (the handler's own transaction, say) is retried
    every 50 ms until the tick's budget, a third of the lease, runs out; then the attempt is
    given up as lost (the reference's ``job.lease_maintenance_failed``), nothing more is
    written for it, and the reaper takes the job once the lease expires.
    """

    def __init__(
        self,
        executions: Callable[[], list[Execution]],
        *,
        lease_seconds: int,
        using: str,
        stop: threading.Event,
        on_outage: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="runledger-heartbeat", daemon=True)
        self.on_outage = on_outage
        self.executions = executions
        self.interval = lease_seconds / 3
        self.lease_seconds = lease_seconds
        self.using = using
        self.stop = stop

    def run(self) -> None:
        try:
            next_tick = time.monotonic() + self.interval
            while not self.stop.wait(max(0.0, next_tick - time.monotonic())):
                tick = time.monotonic()
                next_tick = tick + self.interval
                try:
                    self.beat([e for e in self.executions() if e.active], budget_end=next_tick)
                except Exception:
                    # A dead heartbeat thread would let every lease expire: log and go on.
                    logger.exception("job heartbeat failed unexpectedly")
                    connections[self.using].close_if_unusable_or_obsolete()
        finally:
            connections.close_all()

    def beat(self, pending: list[Execution], *, budget_end: float) -> None:
        while pending:
            try:
                result = heartbeat_leases(
                    [execution.lease for execution in pending],
                    lease_seconds=self.lease_seconds,
                    using=self.using,
                )
            except RunledgerError as error:
                if is_outage(error) and self.on_outage is not None:
                    self.on_outage()
                # The worker loop logs an outage once; a lease that expires meanwhile is
                # fenced off and reaped, so the next tick simply tries again.
                logger.log(
                    logging.DEBUG if is_outage(error) else logging.WARNING,
                    "job heartbeat failed error_code=%s error_sqlstate=%s",
                    error.code,
                    error.sqlstate or "none",
                    extra={"runledger": error.log_fields()},
                )
                connections[self.using].close_if_unusable_or_obsolete()
                return
            for execution in pending:
                # A job that finished while the statement ran is not lost: its lease ended.
                if execution.lease.job_id in result.lost and execution.active:
                    execution.mark_lost("a heartbeat found the lease gone")
            pending = [e for e in pending if e.lease.job_id in result.busy and e.active]
            if not pending:
                return
            if time.monotonic() >= budget_end:
                for execution in pending:
                    execution.mark_lost("the lease could not be renewed in time")
                return
            if self.stop.wait(BUSY_RETRY_SECONDS):
                return
