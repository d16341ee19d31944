"""The RUNLEDGER settings dict, read at call time so override_settings just works."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings

DEFAULTS: dict[str, Any] = {
    "PROMOTE_JOB_TYPES": None,
    "PROMOTION_BATCH_SIZE": 500,
    "PROMOTER_INTERVAL": 0.5,
    "PRUNE_BATCH_SIZE": 1000,
    "LEASE_SECONDS": 60,
    "REAPER_INTERVAL_SECONDS": 15,
    "WORKER_GRACE_SECONDS": 30,
    "WORKER_POLL_INTERVAL": 1.0,
    "WAKEUP_NOTIFY": True,
    "WORKER_LISTEN": True,
    "OUTAGE_LIMIT_SECONDS": 300,
    # periodic schedules
    "SCHEDULE_POLL_SECONDS": 30,
    "SCHEDULE_BATCH_SIZE": 500,
    # OpenTelemetry tracing (the opentelemetry extra)
    "TRACING_ENABLED": True,
    "TRACING_RUN_PARENT": "link",
    "TRACING_BAGGAGE": False,
}


class Settings:
    """One typed property per key of ``settings.RUNLEDGER``; checks.py validates the values."""

    @property
    def raw(self) -> dict[str, Any]:
        value = getattr(django_settings, "RUNLEDGER", None)
        return value if isinstance(value, dict) else {}

    def _get(self, key: str) -> Any:
        return self.raw.get(key, DEFAULTS[key])

    @property
    def PROMOTE_JOB_TYPES(self) -> list[str] | None:  # noqa: N802
        """Job types promote_intents handles when --job-type is not given; None means every
        enabled job definition. Default: None."""
        value = self._get("PROMOTE_JOB_TYPES")
        return None if value is None else list(value)

    @property
    def PROMOTION_BATCH_SIZE(self) -> int:  # noqa: N802
        """Rows one promotion pass claims (1 to 1000). Most promote set-based in one statement;
        at most 24 rows a pass take the per-row savepoint path. Default: 500 (a pass has about
        ten statements of fixed cost, so small batches cap the drain rate)."""
        return int(self._get("PROMOTION_BATCH_SIZE"))

    @property
    def PROMOTER_INTERVAL(self) -> float:  # noqa: N802
        """Seconds promote_intents --loop waits after a pass that found the queue drained.
        Default: 0.5."""
        return float(self._get("PROMOTER_INTERVAL"))

    @property
    def PRUNE_BATCH_SIZE(self) -> int:  # noqa: N802
        """Intents one prune_intents statement deletes (1 to 1000). Default: 1000."""
        return int(self._get("PRUNE_BATCH_SIZE"))

    @property
    def LEASE_SECONDS(self) -> int:  # noqa: N802
        """How long a worker's lease on a job lasts without a heartbeat; heartbeats renew it
        every third of this. A worker that dies leaves its jobs for the reaper after at most
        this long. Default: 60."""
        return int(self._get("LEASE_SECONDS"))

    @property
    def REAPER_INTERVAL_SECONDS(self) -> float:  # noqa: N802
        """Seconds between a worker's reaper passes over expired leases. Default: 15."""
        return float(self._get("REAPER_INTERVAL_SECONDS"))

    @property
    def WORKER_GRACE_SECONDS(self) -> float:  # noqa: N802
        """How long a stopping worker lets running handlers finish before it hands their jobs
        back; also how long past its deadline a stuck handler may hold a worker before the
        worker exits for its supervisor to restart it. Default: 30."""
        return float(self._get("WORKER_GRACE_SECONDS"))

    @property
    def WORKER_POLL_INTERVAL(self) -> float:  # noqa: N802
        """Seconds an idle worker (and its promoter) waits between looks for due work when no
        notification wakes it first. Default: 1.0."""
        return float(self._get("WORKER_POLL_INTERVAL"))

    @property
    def WAKEUP_NOTIFY(self) -> bool:  # noqa: N802
        """Send a NOTIFY after a commit that makes work due (enqueue_job, record_intent,
        promotion, requeue) so idle workers start it at once. It is sent after the caller's
        commit, never inside the caller's transaction. Default: True."""
        return bool(self._get("WAKEUP_NOTIFY"))

    @property
    def WORKER_LISTEN(self) -> bool:  # noqa: N802
        """Workers LISTEN for those notifications on a connection of their own. Turn it off
        where LISTEN cannot work (PgBouncer in transaction pooling): workers then rely on
        WORKER_POLL_INTERVAL alone. Default: True."""
        return bool(self._get("WORKER_LISTEN"))

    @property
    def OUTAGE_LIMIT_SECONDS(self) -> float:  # noqa: N802
        """How long a long-running worker or promoter keeps retrying an unreachable database
        before it exits non-zero so its supervisor restarts it. Default: 300."""
        return float(self._get("OUTAGE_LIMIT_SECONDS"))

    # --- periodic schedules ---

    @property
    def SCHEDULE_POLL_SECONDS(self) -> float:  # noqa: N802
        """The longest a scheduler sleeps between looks at the schedules (at least 1). It
        sleeps less when a cursor comes due sooner, and a saved schedule wakes it at once
        (where notifications reach it), so this bounds only how late a change made around
        the notifications is seen. An idle scheduler runs one statement per interval.
        Default: 30."""
        return float(self._get("SCHEDULE_POLL_SECONDS"))

    @property
    def SCHEDULE_BATCH_SIZE(self) -> int:  # noqa: N802
        """Due schedules one scheduler pass locks and fires together (1 to 1000). Default:
        500."""
        return int(self._get("SCHEDULE_BATCH_SIZE"))

    # --- OpenTelemetry tracing ---

    @property
    def TRACING_ENABLED(self) -> bool:  # noqa: N802
        """Make spans for enqueues and runs, and store the trace context beside intents and
        jobs, whenever ``opentelemetry-api`` is installed and the host has set up an SDK's
        tracer provider; without either, nothing is traced or stored anyway. Default: True."""
        return bool(self._get("TRACING_ENABLED"))

    @property
    def TRACING_RUN_PARENT(self) -> str:  # noqa: N802
        """How a run's ``process`` span relates to the span that enqueued its job: ``"link"``
        (a new trace that links to it: a job may run hours later), ``"child"`` (the run joins
        the enqueuing trace) or ``"none"``. Default: ``"link"``."""
        return str(self._get("TRACING_RUN_PARENT"))

    @property
    def TRACING_BAGGAGE(self) -> bool:  # noqa: N802
        """Store the enqueuing context's W3C baggage with the job and restore it while the
        handler runs. Off by default: baggage may carry personal data, and it would sit in
        the database as long as the job does. Default: False."""
        return bool(self._get("TRACING_BAGGAGE"))


conf = Settings()
