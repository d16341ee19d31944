"""A PostgreSQL restart under running schedulers loses and doubles no fire (issue 18).

Two schedulers (``run_schedules --loop`` and a worker) fire a per-second schedule with catch-up
``all`` against the throwaway server of the outage tests; the server is restarted in immediate
mode (every session killed, transactions in flight lost) while they run. Afterwards every
second from the first fire to the last has exactly one job.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter

import pytest

from .test_outage import Cluster, Command, cluster, outage_then_recovery, running  # noqa: F401

FIRES = "SELECT count(*) FROM runledger_schedule_fires WHERE outcome = 'enqueued'"


def fire_count(server: Cluster) -> int:
    with server.connect() as conn:
        row = conn.execute(FIRES).fetchone()
    return int(row[0]) if row else 0


def wait_for_more_fires(server: Cluster, at_least: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            count = fire_count(server)
        except Exception:
            count = -1
        if count >= at_least:
            return count
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {at_least} fires after {timeout} s")
        time.sleep(0.05)


@pytest.mark.slow
def test_schedulers__immediate_restart__every_second_exactly_once(
    running: Cluster,  # noqa: F811 - the outage tests' fixture
) -> None:
    env = {"RUNLEDGER_OUTAGE_SCHEDULES": "1"}
    alone = Command(running, "run_schedules", "--loop", "-v", "2", **env)
    worker = Command(running, "runledger_worker", **env)
    try:
        before = wait_for_more_fires(running, 3)
        running.stop("immediate")
        outage_then_recovery(alone, running)
        wait_for_more_fires(running, before + 4)
        assert alone.stop() == 0, "".join(alone.lines)
        assert worker.stop() == 0, "".join(worker.lines)
    finally:
        alone.kill()
        worker.kill()
    with running.connect() as conn:
        jobs = [
            row[0]
            for row in conn.execute(
                "SELECT payload -> '_schedule' ->> 'scheduled_for' FROM runledger_job_queue"
            )
        ]
        ledger = conn.execute(
            "SELECT count(*), count(job_id) FROM runledger_schedule_fires "
            "WHERE outcome = 'enqueued'"
        ).fetchone()
    counts = Counter(jobs)
    assert max(counts.values()) == 1
    seconds = sorted(dt.datetime.fromisoformat(text.replace("Z", "+00:00")) for text in counts)
    span = int((seconds[-1] - seconds[0]).total_seconds()) + 1
    assert len(seconds) == span, "a second in the middle has no job"
    assert ledger == (len(jobs), len(jobs))
