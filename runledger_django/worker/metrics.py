"""The worker's own Prometheus metrics: events counted where they happen, in the process.

Reference (observability) 2.1 and 2.3. The worker is one process with threads, so one
registry is exact and no multiprocess directory is needed. ``WorkerMetrics`` is the set of
hooks the runtime calls (all no-ops); ``PrometheusWorkerMetrics`` fills them. Labels are
bounded: job types past ``METRICS_JOB_TYPE_LIMIT`` read ``other``; error codes are the
product's codes plus at most ``CUSTOM_ERROR_CODE_LIMIT`` of a handler's own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ..conf import conf
from ..domain import OTHER_JOB_TYPE_LABEL, ClaimedJob, ReapReport
from ..errors import Code
from ..prometheus.client import prometheus_client
from ..prometheus.collector import QueueCollector

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

    from .execution import JobRun

logger = logging.getLogger(__name__)

OUTCOMES: tuple[str, ...] = (
    "succeeded",
    "retried",
    "dead_lettered",
    "continued",
    "lease_lost",
    "persist_failed",
    "released",
)
"""``outcome`` values: how an attempt ended as this worker saw it. A cancelled job's running
attempt ends ``lease_lost`` (its lease went with the cancel); ``released``: handed back at
shutdown; ``persist_failed``: the outcome could not be written (the reaper retries the job)."""
REAPER_RESULTS: tuple[str, ...] = ("requeued", "dead_lettered")
CLAIM_RESULTS: tuple[str, ...] = ("claimed", "empty", "error")
CLAIM_BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)
CLAIM_DURATION_BUCKETS: tuple[float, ...] = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CUSTOM_ERROR_CODE_LIMIT = 50
"""Error codes outside the product's catalog (a handler's ``TerminalJobError(code=...)``)
that get their own label value in one process; later ones read ``other``."""
CHILD_CACHE_MAX = 4096
"""Entries of each per-job child cache of ``PrometheusWorkerMetrics`` (cleared whole when full)."""
PRODUCT_ERROR_CODES = frozenset(code.value for code in Code)


class WorkerMetrics:
    """The hooks the worker runtime calls; this base records nothing (metrics off)."""

    def serving(self, job_types: Sequence[str], *, concurrency: int) -> None:
        """The worker runs these job types (at start, and when its sources find more)."""

    def claimed(self, count: int, seconds: float | None) -> None:
        """A claim statement leased ``count`` jobs (``seconds``: its time, when measured)."""

    def claim_failed(self) -> None:
        """A claim statement failed (the loop backs off)."""

    def dispatched(self, jobs: Sequence[ClaimedJob]) -> None:
        """Claimed jobs go to the executors."""

    def finished(self, run: JobRun) -> None:
        """An attempt ended (or its outcome was recorded by the loop, for a timeout)."""

    def released(self, job_types: Sequence[str]) -> None:
        """Leases of these jobs were handed back at shutdown."""

    def reaped(self, report: ReapReport) -> None:
        """A reaper pass ran."""

    def throttled(self, job_type: str, reason: str) -> None:
        """A claim left due jobs of ``job_type`` behind for its limit (queue control)."""

    def tick(self, *, busy: int, concurrency: int) -> None:
        """The supervisor loop went round once."""


NO_METRICS = WorkerMetrics()


class PrometheusWorkerMetrics(WorkerMetrics):
    """The worker metrics on a ``prometheus_client`` registry (a new one unless given).

    Every (job type, outcome) series exists at 0 as soon as the worker serves the type, so
    the first increment shows in ``rate()``. Settings are read once, here.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        client = prometheus_client()
        self.registry: CollectorRegistry = (
            registry if registry is not None else client.CollectorRegistry(auto_describe=True)
        )
        self.type_limit = conf.METRICS_JOB_TYPE_LIMIT
        self.error_class_label = conf.METRICS_ERROR_CLASS_LABEL
        self._lock = threading.Lock()
        self._types: set[str] = set()
        """Job types with a label of their own (at most ``type_limit``)."""
        self._zeroed: set[str] = set()
        self._info: tuple[str, str] | None = None
        self._custom_codes: set[str] = set()
        self._per_job: dict[tuple[str, str], tuple[Any, Any]] = {}
        """(job type, outcome) -> its attempts counter and run-duration histogram children:
        two ``labels()`` lookups per finished job otherwise (label checks, a lock, a tuple)."""
        self._delays: dict[str, Any] = {}
        """Job type -> its start-delay histogram child."""
        counter, gauge, histogram = client.Counter, client.Gauge, client.Histogram
        on = {"registry": self.registry}
        self.attempts = counter(
            "runledger_job_attempts_total",
            "Attempts finished by this worker, by outcome.",
            ["job_type", "outcome"],
            **on,
        )
        self.failures = counter(
            "runledger_job_failures_total",
            "Failed attempts by product error code.",
            ["job_type", "error_code", *(["error_class"] if self.error_class_label else [])],
            **on,
        )
        self.run_duration = histogram(
            "runledger_job_run_duration_seconds",
            "Handler wall time, failures included, by outcome.",
            ["job_type", "outcome"],
            buckets=conf.METRICS_RUN_DURATION_BUCKETS,
            **on,
        )
        self.start_delay = histogram(
            "runledger_job_start_delay_seconds",
            "Claim time minus the later of creation and next_run_at (database clock).",
            ["job_type"],
            buckets=conf.METRICS_START_DELAY_BUCKETS,
            **on,
        )
        self.claims = counter(
            "runledger_worker_claims_total", "Claim statements by result.", ["result"], **on
        )
        self.claim_batch = histogram(
            "runledger_worker_claim_batch_size",
            "Jobs leased per claim statement.",
            buckets=CLAIM_BATCH_BUCKETS,
            **on,
        )
        self.claim_duration = histogram(
            "runledger_worker_claim_duration_seconds",
            "Time of the worker loop's claim statement.",
            buckets=CLAIM_DURATION_BUCKETS,
            **on,
        )
        self.throttled_claims = counter(
            "runledger_worker_claims_throttled_total",
            "Claims that left due jobs of a limited type behind, by the limit that held them.",
            ["job_type", "reason"],
            **on,
        )
        self.reaper = counter(
            "runledger_reaper_reaped_total",
            "Expired leases the reaper moved, by result.",
            ["job_type", "result"],
            **on,
        )
        self.threads = gauge(
            "runledger_worker_threads", "Executor threads, busy or idle.", ["state"], **on
        )
        self.last_tick = gauge(
            "runledger_worker_loop_last_tick_timestamp_seconds",
            "Unix time of the last supervisor-loop tick.",
            **on,
        )
        self.info = gauge(
            "runledger_worker_info", "Build information.", ["version", "concurrency"], **on
        )
        for result in CLAIM_RESULTS:
            self.claims.labels(result)
        for state in ("busy", "idle"):
            self.threads.labels(state)

    # --- labels ----------------------------------------------------------------------------

    def _type_label(self, job_type: str) -> str:
        with self._lock:
            if job_type in self._types:
                return job_type
            if len(self._types) < self.type_limit:
                self._types.add(job_type)
                label = job_type
            else:
                label = OTHER_JOB_TYPE_LABEL
            fresh = label not in self._zeroed
            self._zeroed.add(label)
        if fresh:
            self._zero(label)
        return label

    def _zero(self, label: str) -> None:
        for outcome in OUTCOMES:
            self.attempts.labels(label, outcome)
            self.run_duration.labels(label, outcome)
        self.start_delay.labels(label)
        for result in REAPER_RESULTS:
            self.reaper.labels(label, result)

    def _code_label(self, code: str) -> str:
        if code in PRODUCT_ERROR_CODES:
            return code
        with self._lock:
            if code in self._custom_codes:
                return code
            if len(self._custom_codes) < CUSTOM_ERROR_CODE_LIMIT:
                self._custom_codes.add(code)
                return code
        return "other"

    # --- hooks -----------------------------------------------------------------------------

    def serving(self, job_types: Sequence[str], *, concurrency: int) -> None:
        for job_type in sorted(job_types):
            self._type_label(job_type)
        info = (_version(), str(concurrency))
        if info != self._info:  # set once: a scrape never sees the series missing
            self.info.clear()
            self.info.labels(*info).set(1)
            self._info = info

    def claimed(self, count: int, seconds: float | None) -> None:
        self.claims.labels("claimed" if count else "empty").inc()
        self.claim_batch.observe(count)
        if seconds is not None:
            self.claim_duration.observe(seconds)

    def claim_failed(self) -> None:
        self.claims.labels("error").inc()

    def dispatched(self, jobs: Sequence[ClaimedJob]) -> None:
        for job in jobs:
            if job.due_at is not None:
                delay = (job.claimed_at - job.due_at).total_seconds()
                child = self._delays.get(job.job_type)
                if child is None:
                    child = self.start_delay.labels(self._type_label(job.job_type))
                    if len(self._delays) >= CHILD_CACHE_MAX:
                        self._delays.clear()
                    self._delays[job.job_type] = child
                child.observe(max(0.0, delay))

    def finished(self, run: JobRun) -> None:
        children = self._per_job.get((run.job_type, run.outcome))
        if children is None:
            label = self._type_label(run.job_type)
            children = (
                self.attempts.labels(label, run.outcome),
                self.run_duration.labels(label, run.outcome),
            )
            if len(self._per_job) >= CHILD_CACHE_MAX:
                self._per_job.clear()  # (types folded into "other" are many keys)
            self._per_job[(run.job_type, run.outcome)] = children
        children[0].inc()
        children[1].observe(run.duration_seconds)
        if run.outcome in ("retried", "dead_lettered") and run.error_code is not None:
            labels = [self._type_label(run.job_type), self._code_label(run.error_code)]
            if self.error_class_label:
                labels.append(run.error_class or "none")
            self.failures.labels(*labels).inc()

    def released(self, job_types: Sequence[str]) -> None:
        for job_type in job_types:
            self.attempts.labels(self._type_label(job_type), "released").inc()

    def reaped(self, report: ReapReport) -> None:
        for job_type, result in report.moved:
            self.reaper.labels(self._type_label(job_type), result).inc()

    def throttled(self, job_type: str, reason: str) -> None:
        self.throttled_claims.labels(self._type_label(job_type), reason).inc()

    def tick(self, *, busy: int, concurrency: int) -> None:
        self.last_tick.set(time.time())
        self.threads.labels("busy").set(busy)
        self.threads.labels("idle").set(max(0, concurrency - busy))


def _version() -> str:
    try:
        return metadata.version("runledger-django")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class _Bridge:
    """Another registry's metrics, collected through this one."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.source = registry

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self.source.collect()


@dataclass
class MetricsServer:
    """The worker's ``/metrics`` HTTP server (a thread of ``prometheus_client``'s)."""

    metrics: PrometheusWorkerMetrics
    port: int
    _server: Any

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_metrics_server(
    port: int,
    *,
    addr: str = "0.0.0.0",  # noqa: S104  (a scrape target listens where Prometheus reaches it)
    queue_gauges: bool = False,
    include_default_registry: bool = False,
    using: str = "default",
) -> MetricsServer:
    """Serve the worker metrics (with ``queue_gauges``, the queue collector's too) on
    ``addr:port`` (port 0: any free port, see ``MetricsServer.port``).

    The worker's metrics live on a registry of their own, so several workers in one process
    (tests) never collide; ``include_default_registry`` serves ``prometheus_client``'s
    default registry beside them (process metrics, and metrics the handlers define).

    Raises:
        ImproperlyConfigured: prometheus_client is not installed.
        OSError: the port cannot be bound.
    """
    client = prometheus_client()
    metrics = PrometheusWorkerMetrics()
    if include_default_registry:
        metrics.registry.register(_Bridge(client.REGISTRY))
    if queue_gauges:
        metrics.registry.register(QueueCollector(using=using, close_connection=True))
    server, _thread = client.start_http_server(port, addr=addr, registry=metrics.registry)
    bound = int(server.server_port)
    logger.info("serving worker metrics on %s:%d", addr, bound)
    return MetricsServer(metrics=metrics, port=bound, _server=server)
