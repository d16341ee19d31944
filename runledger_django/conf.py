"""The RUNLEDGER settings dict, read at call time so override_settings just works."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings

RUN_DURATION_BUCKETS: tuple[float, ...] = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900),
    *(1800, 3600),
)
"""Handler wall time, seconds: job-shaped, up to an hour (the default timeout is 900 s)."""
START_DELAY_BUCKETS: tuple[float, ...] = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800),
    3600,
)
"""Claim time minus due time, seconds."""

DEFAULTS: dict[str, Any] = {
    "PROMOTE_JOB_TYPES": None,
    "PROMOTION_BATCH_SIZE": 500,
    "PROMOTER_INTERVAL": 0.5,
    "PRUNE_BATCH_SIZE": 1000,
    "LEASE_SECONDS": 60,
    "REAPER_INTERVAL_SECONDS": 15,
    "WORKER_GRACE_SECONDS": 30,
    "WORKER_POLL_INTERVAL": 1.0,
    "WORKER_IDLE_POLL_SECONDS": 10.0,
    "WAKEUP_NOTIFY": True,
    "WORKER_LISTEN": True,
    "OUTAGE_LIMIT_SECONDS": 300,
    # periodic schedules
    "SCHEDULE_POLL_SECONDS": 30,
    "SCHEDULE_BATCH_SIZE": 500,
    # Prometheus metrics (the optional extra ``prometheus``)
    "METRICS_JOB_TYPE_LIMIT": 100,
    "METRICS_TIMEOUT_MS": 1000,
    "METRICS_CACHE_SECONDS": 5.0,
    "METRICS_RUN_DURATION_BUCKETS": RUN_DURATION_BUCKETS,
    "METRICS_START_DELAY_BUCKETS": START_DELAY_BUCKETS,
    "METRICS_ERROR_CLASS_LABEL": False,
    # probes and the worker registry
    "LIVENESS_MAX_AGE_SECONDS": None,
    "READINESS_DB_MAX_AGE_SECONDS": None,
    "WORKER_HEARTBEAT_SECONDS": 15,
    "WORKER_RETENTION_SECONDS": 86_400,
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
    def WORKER_IDLE_POLL_SECONDS(self) -> float:  # noqa: N802
        """While notifications reach a worker, how often it looks for work none announced once
        its last claim found nothing (it asks when the next job comes due, and claims then).
        Never below WORKER_POLL_INTERVAL; unused when WAKEUP_NOTIFY is off. Default: 10.0."""
        return float(self._get("WORKER_IDLE_POLL_SECONDS"))

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

    # --- Prometheus metrics ---

    @property
    def METRICS_JOB_TYPE_LIMIT(self) -> int:  # noqa: N802
        """How many job types carry their own ``job_type`` label (1 to 10000); the rest, in
        job type order, are folded into ``job_type="other"``, so a queue with thousands of
        types cannot blow up a Prometheus server. Default: 100."""
        return int(self._get("METRICS_JOB_TYPE_LIMIT"))

    @property
    def METRICS_TIMEOUT_MS(self) -> int:  # noqa: N802
        """The lock and statement timeout of the scrape-time queue statement (1 to 60000
        ms). A scrape past it reports ``runledger_collector_up 0`` rather than hanging.
        Default: 1000."""
        return int(self._get("METRICS_TIMEOUT_MS"))

    @property
    def METRICS_CACHE_SECONDS(self) -> float:  # noqa: N802
        """How long a collector reuses its last queue state (0: read on every scrape), so
        several Prometheus servers or a fast scrape interval cost one statement. Default: 5."""
        return float(self._get("METRICS_CACHE_SECONDS"))

    @property
    def METRICS_RUN_DURATION_BUCKETS(self) -> tuple[float, ...]:  # noqa: N802
        """Upper bounds (seconds, increasing) of ``runledger_job_run_duration_seconds``.
        Default: 0.005 s to 3600 s, job-shaped (see docs/metrics.md)."""
        return tuple(float(bound) for bound in self._get("METRICS_RUN_DURATION_BUCKETS"))

    @property
    def METRICS_START_DELAY_BUCKETS(self) -> tuple[float, ...]:  # noqa: N802
        """Upper bounds (seconds, increasing) of ``runledger_job_start_delay_seconds``.
        Default: 0.005 s to 3600 s."""
        return tuple(float(bound) for bound in self._get("METRICS_START_DELAY_BUCKETS"))

    @property
    def METRICS_ERROR_CLASS_LABEL(self) -> bool:  # noqa: N802
        """Add the exception's class as an ``error_class`` label of
        ``runledger_job_failures_total``. Off by default: classes are many and unbounded in
        principle; the product error code is the bounded label. Default: False."""
        return bool(self._get("METRICS_ERROR_CLASS_LABEL"))

    # --- probes and the worker registry ---

    @property
    def LIVENESS_MAX_AGE_SECONDS(self) -> float | None:  # noqa: N802
        """How long the worker's supervisor loop may go without a tick before ``/livez``
        answers 503. None: the larger of 60 s, three poll intervals and two reaper intervals
        (longer than any statement cap plus backoff, so a slow database never fails it).
        Default: None."""
        value = self._get("LIVENESS_MAX_AGE_SECONDS")
        return None if value is None else float(value)

    @property
    def READINESS_DB_MAX_AGE_SECONDS(self) -> float | None:  # noqa: N802
        """How old the worker's last successful database round trip may be for ``/readyz``
        to answer 200. None: the larger of 30 s and twice the longest of the poll, reaper
        and registry heartbeat intervals. Default: None."""
        value = self._get("READINESS_DB_MAX_AGE_SECONDS")
        return None if value is None else float(value)

    @property
    def WORKER_HEARTBEAT_SECONDS(self) -> float:  # noqa: N802
        """How often a worker beats its ``runledger_workers`` row (one statement each). A row
        that missed three beats reads as stale. Default: 15."""
        return float(self._get("WORKER_HEARTBEAT_SECONDS"))

    @property
    def WORKER_RETENTION_SECONDS(self) -> float:  # noqa: N802
        """How long a stale worker row (a SIGKILLed worker) stays visible before a live
        worker's beat deletes it. Default: 86400 (a day)."""
        return float(self._get("WORKER_RETENTION_SECONDS"))

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
