"""When the loop claims on a deep queue: once half the executors are free, or after a wait
bounded by a fraction of a job's typical run (``Worker._batch_until``). No database: the
decision is pure arithmetic on the worker's state; the drains of benchmarks/shape_w measure
what it buys."""

from __future__ import annotations

import threading

import pytest

from runledger_django.worker.registry import Registry
from runledger_django.worker.runtime import (
    BATCH_WAIT_FRACTION,
    BATCH_WAIT_MAX_SECONDS,
    Worker,
    WorkerConfig,
)


def make_worker(concurrency: int = 8) -> Worker:
    config = WorkerConfig(job_types=["batching.type"], concurrency=concurrency)
    return Worker(config, Registry(), stop=threading.Event())


@pytest.mark.parametrize("free", [4, 5, 8])
def test_batch_until__half_the_executors_free__claims_now(free: int) -> None:
    worker = make_worker()
    worker.run_time.add(1.0)

    assert worker._batch_until(free, 100.0, None) is None


def test_batch_until__one_free_and_no_run_seen_yet__claims_now() -> None:
    assert make_worker()._batch_until(1, 100.0, None) is None


def test_batch_until__one_free__waits_a_fraction_of_the_typical_run_then_claims() -> None:
    worker = make_worker()
    worker.run_time.add(0.01)
    wait = BATCH_WAIT_FRACTION * 0.01

    until = worker._batch_until(1, 100.0, None)

    assert until == pytest.approx(100.0 + wait)
    assert worker._batch_until(2, 100.0 + wait / 2, until) == until  # still short of half
    assert worker._batch_until(2, 100.0 + wait, until) is None


def test_batch_until__long_runs__the_wait_is_capped() -> None:
    worker = make_worker()
    worker.run_time.add(60.0)

    assert worker._batch_until(1, 100.0, None) == pytest.approx(100.0 + BATCH_WAIT_MAX_SECONDS)


def test_batch_until__one_executor__never_waits() -> None:
    worker = make_worker(concurrency=1)
    worker.run_time.add(1.0)

    assert worker._batch_until(1, 100.0, None) is None
