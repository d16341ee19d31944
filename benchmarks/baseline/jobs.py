"""The handlers the worker benchmarks run (shapes w, x, y and ``benchmarks.worker_profile``).

``runledger_worker`` imports this module because it is the ``jobs.py`` of an installed app.
"""

from __future__ import annotations

import time

from runledger_django import JobContext, job_handler

NOOP_JOB_TYPE = "bench.noop"
ATOMIC_NOOP_JOB_TYPE = "bench.atomic_noop"
STAMP_JOB_TYPE = "bench.stamp_start"


@job_handler(NOOP_JOB_TYPE, max_attempts=3, timeout_seconds=60)
def noop(job: JobContext) -> None:
    """Does nothing, so a drain measures the runtime's own cost per job."""


@job_handler(ATOMIC_NOOP_JOB_TYPE, max_attempts=3, timeout_seconds=60, atomic=True)
def atomic_noop(job: JobContext) -> None:
    """Does nothing inside the transaction that records its success (shape o): what the
    exactly-once completion costs over a plain one."""


@job_handler(STAMP_JOB_TYPE, max_attempts=3, timeout_seconds=60)
def stamp_start(job: JobContext) -> dict[str, float]:
    """Return the wall-clock time the handler started: the job's output carries it back to the
    latency benchmark, with no extra write."""
    started = time.time()
    return {"started": started}
