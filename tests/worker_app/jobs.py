"""Handlers for worker subprocesses; each blocks on, or leaves, something a test can observe.

Files are the signals: a handler appends a line to ``payload["log"]`` when it starts (so a
test sees which attempt ran where, and how often), and a blocking handler waits until
``payload["release"]`` exists. Nothing here touches the database beyond what the worker does,
so a handler left blocked by a killed worker holds no lock and no backend.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from runledger_django import JobContext, RetryJob, TerminalJobError, job_handler

from . import BLOCK, FLAKY, NOOP

POLL_SECONDS = 0.01
MAX_BLOCK_SECONDS = 120.0
"""A blocked handler gives up after this long, so no test can leave one behind for ever."""


def _log_start(job: JobContext) -> None:
    log = job.payload.get("log") if isinstance(job.payload, dict) else None
    if log:
        line = f"{job.job_id} {job.run_number} {job.attempt} {job.worker_id} {os.getpid()}\n"
        with Path(log).open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()


@job_handler(NOOP, max_attempts=3, timeout_seconds=60)
def noop(job: JobContext) -> dict[str, Any]:
    """Succeed at once with the payload's ``n`` as output."""
    _log_start(job)
    return {"n": job.payload.get("n") if isinstance(job.payload, dict) else None}


@job_handler(BLOCK, max_attempts=3, timeout_seconds=60)
def block(job: JobContext) -> dict[str, Any]:
    """Wait for the release file, then succeed (or fail as ``payload["then"]`` says)."""
    _log_start(job)
    release = Path(job.payload["release"])
    give_up = time.monotonic() + float(job.payload.get("max_seconds", MAX_BLOCK_SECONDS))
    while not release.exists():
        if time.monotonic() > give_up:
            raise TerminalJobError("the test never released this handler")
        time.sleep(POLL_SECONDS)
    if job.payload.get("then") == "retry":
        raise RetryJob("asked to retry", after=3600)
    return {"released": True, "attempt": job.attempt}


@job_handler(FLAKY, max_attempts=5, timeout_seconds=60)
def flaky(job: JobContext) -> dict[str, Any]:
    """Fail the first ``payload["failures"]`` attempts with an ordinary exception."""
    _log_start(job)
    if job.attempt <= int(job.payload.get("failures", 0)):
        raise ValueError(f"flaky attempt {job.attempt}")
    return {"attempt": job.attempt}


if os.environ.get("RUNLEDGER_TEST_DECLARE_SCHEDULE") == "1":
    # Only the schedules' worker tests declare it: other worker tests count every job.
    from runledger_django import schedule

    schedule("worker-tests-declared", NOOP, cron="0 3 * * *", run_on_create=True)
