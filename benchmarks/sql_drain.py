"""The statements' own drain limit (shape w's ``sql`` rows): threads that run nothing but the
worker's claim and success statements, back to back, each on its own connection.

No handler, no executor hand-off, no heartbeats, no validation or decoding: every thread claims
up to ``--batch`` jobs (the worker's claim statement, under the same caps, in one round trip)
and records their successes in one statement (the worker's group-commit statement). The rows
written, the commits per batch and the durability are the worker's; what is left out is the
worker. No worker can drain faster than this on the same server, so it bounds what any change
to the runtime can reach without changing the statements or the schema.

    .venv/bin/python -m benchmarks.sql_drain --job-type bench.noop --threads 8 --batch 8
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

IDLE_SECONDS = 0.005
"""A thread that found nothing due waits this long before it claims again."""


def _drain(job_type: str, batch: int, stop: threading.Event, worker_id: str) -> None:
    from django.db import connections

    from runledger_django.db import lifecycle_queries
    from runledger_django.services._lease import transition

    claim = {
        "job_types": [job_type],
        "limit": batch,
        "head_window": batch,
        "worker_id": worker_id,
        "lease_seconds": 60,
    }
    try:
        while not stop.is_set():
            rows = transition("default", lifecycle_queries.CLAIM_JOBS, claim, context="claim jobs")
            if not rows:
                stop.wait(IDLE_SECONDS)
                continue
            transition(
                "default",
                lifecycle_queries.COMPLETE_SUCCESS_MANY,
                {
                    "job_ids": [row[0] for row in rows],
                    "run_numbers": [row[1] for row in rows],
                    "attempts": [row[2] for row in rows],
                    "outputs": [None] * len(rows),
                    "worker_id": worker_id,
                    "workflow": False,
                },
                context="complete jobs",
            )
    finally:
        connections.close_all()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job-type", required=True)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threads = [
        threading.Thread(
            target=_drain,
            args=(args.job_type, args.batch, stop, f"sql-{os.getpid()}"),
            name=f"sql-drain-{number}",
        )
        for number in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
