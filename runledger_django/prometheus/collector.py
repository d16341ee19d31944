"""The scrape-time queue collector: gauges per job type read from PostgreSQL when scraped.

Reference (observability) 2.1 and 2.2. States are read, never counted: a gauge of due jobs
goes down when a worker drains them, and pruning finished jobs changes nothing exposed. Every
exporter of these gauges reports the same value, so dashboards aggregate them with ``max``.
The collector fails soft: when the database cannot answer within ``METRICS_TIMEOUT_MS`` the
scrape still succeeds with ``runledger_collector_up 0`` and no queue series.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from django.db import connections

from ..conf import conf
from ..domain import JobTypeQueueState
from ..services.queue_state import read_queue_state
from .client import prometheus_core

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

logger = logging.getLogger(__name__)

STATES: tuple[str, ...] = ("due", "scheduled", "leased", "lease_expired", "dead_lettered")
"""The values of ``runledger_jobs``' ``state`` label; they partition the gauged rows."""

DefinitionGauge = tuple[str, str, Callable[[JobTypeQueueState], float | None]]

DEFINITION_GAUGES: tuple[DefinitionGauge, ...] = (
    (
        "runledger_job_type_enabled",
        "1 when the job type's definition is enabled, else 0.",
        lambda state: None if state.enabled is None else float(state.enabled),
    ),
    (
        "runledger_job_type_paused",
        "1 while the job type is paused (no claims), else 0.",
        lambda state: None if state.paused is None else float(state.paused),
    ),
    (
        "runledger_job_type_concurrency_limit",
        "The job type's max_concurrency across all workers; absent when unlimited.",
        lambda state: None if state.concurrency_limit is None else float(state.concurrency_limit),
    ),
    (
        "runledger_job_type_rate_limit_per_second",
        "The job type's start rate limit, in starts per second; absent when unlimited.",
        lambda state: state.rate_limit_per_second,
    ),
    (
        "runledger_workers_live",
        "Live workers (a fresh runledger_workers row) serving the job type.",
        lambda state: None if state.workers_live is None else float(state.workers_live),
    ),
)
"""Gauges read from a job type's own definition: (name, help, value). A value of None leaves
the series out (a folded ``other`` label, or an unset limit: absent means unlimited). A new
definition column (paused, limits) becomes a gauge with one entry here and one field on
``JobTypeQueueState``."""


class QueueCollector:
    """A ``prometheus_client`` collector of the queue state, cached ``METRICS_CACHE_SECONDS``.

    ``close_connection`` closes the thread's database connection after each read: for a
    scrape served outside Django's request cycle (the worker's metrics port runs each scrape
    in a new thread, whose connection nothing else would close).
    """

    def __init__(self, *, using: str = "default", close_connection: bool = False) -> None:
        self.using = using
        self.close_connection = close_connection
        self._lock = threading.Lock()
        self._cached_at: float | None = None
        self._cached: tuple[list[JobTypeQueueState] | None, float] = (None, 0.0)

    def describe(self) -> list[Metric]:
        """Nothing: registering the collector must not query the database."""
        return []

    def collect(self) -> Iterator[Metric]:
        core = prometheus_core()
        states, duration = self.read()
        up = core.GaugeMetricFamily(
            "runledger_collector_up", "1 if the last queue-state read succeeded, else 0."
        )
        up.add_metric([], 0.0 if states is None else 1.0)
        yield up
        took = core.GaugeMetricFamily(
            "runledger_collector_duration_seconds", "How long the last queue-state read took."
        )
        took.add_metric([], duration)
        yield took
        if states is not None:
            yield from queue_families(states)

    def read(self) -> tuple[list[JobTypeQueueState] | None, float]:
        """The queue state (None when the read failed) and how long its read took."""
        ttl = conf.METRICS_CACHE_SECONDS
        with self._lock:  # concurrent scrapes share one statement
            now = time.monotonic()
            if self._cached_at is not None and ttl > 0 and now - self._cached_at < ttl:
                return self._cached
            started = time.perf_counter()
            states = self._read_states()
            self._cached = (states, time.perf_counter() - started)
            self._cached_at = time.monotonic()
            return self._cached

    def _read_states(self) -> list[JobTypeQueueState] | None:
        try:
            return read_queue_state(
                type_limit=conf.METRICS_JOB_TYPE_LIMIT,
                timeout_ms=conf.METRICS_TIMEOUT_MS,
                using=self.using,
            )
        except Exception as error:  # fail soft: a scrape must never error (reference 2.1)
            logger.warning(
                "could not read the queue state for metrics error_code=%s",
                getattr(error, "code", type(error).__name__),
            )
            connection = connections[self.using]
            if not connection.in_atomic_block:
                connection.close_if_unusable_or_obsolete()
            return None
        finally:
            if self.close_connection:
                connections[self.using].close()


def queue_families(states: list[JobTypeQueueState]) -> Iterator[Metric]:
    """The metric families of one queue-state read."""
    core = prometheus_core()
    jobs = core.GaugeMetricFamily(
        "runledger_jobs",
        "Jobs per job type and state: due, scheduled (due later, retry backoff included), "
        "leased, lease_expired (not yet reaped), dead_lettered.",
        labels=["job_type", "state"],
    )
    due_age = core.GaugeMetricFamily(
        "runledger_job_oldest_due_age_seconds",
        "Now minus the earliest next_run_at among due jobs; 0 when none is due.",
        labels=["job_type"],
    )
    leased_age = core.GaugeMetricFamily(
        "runledger_job_oldest_leased_age_seconds",
        "Now minus the start of the oldest current lease; 0 when none is leased.",
        labels=["job_type"],
    )
    intents = core.GaugeMetricFamily(
        "runledger_intents",
        "Pending enqueue intents per job type: pending (never attempted), retrying (promotion "
        "deferred at least once).",
        labels=["job_type", "state"],
    )
    intent_age = core.GaugeMetricFamily(
        "runledger_intent_oldest_pending_age_seconds",
        "Now minus the creation of the oldest pending intent; 0 when none.",
        labels=["job_type"],
    )
    definition = [
        (core.GaugeMetricFamily(name, text, labels=["job_type"]), value)
        for name, text, value in DEFINITION_GAUGES
    ]
    for state in states:
        label = [state.job_type]
        for name in STATES:
            jobs.add_metric([state.job_type, name], float(getattr(state, name)))
        due_age.add_metric(label, state.oldest_due_age_seconds)
        leased_age.add_metric(label, state.oldest_leased_age_seconds)
        intents.add_metric([state.job_type, "pending"], float(state.intents_pending))
        intents.add_metric([state.job_type, "retrying"], float(state.intents_retrying))
        intent_age.add_metric(label, state.oldest_intent_age_seconds)
        for family, value in definition:
            number = value(state)
            if number is not None:
                family.add_metric(label, number)
    yield jobs
    yield due_age
    yield leased_age
    yield intents
    yield intent_age
    for family, _ in definition:
        yield family


def register_queue_collector(registry: CollectorRegistry, **options: Any) -> QueueCollector:
    """Add a queue collector to ``registry`` (a host's own multiprocess registry, say)."""
    collector = QueueCollector(**options)
    registry.register(collector)
    return collector
