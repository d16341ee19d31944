"""``run_jobs``: run due jobs in the calling thread, for tests, scripts and cron."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..conf import conf
from ..domain import WorkReport
from ..errors import Code, RunledgerError
from ..services._lease import DEFAULT_USING, refuse_inside_atomic
from ..services.claim import claim_jobs, ensure_job_definitions
from ..services.reaper import reap_expired_leases
from ..validation import validate_job_types
from .execution import Execution, execute
from .heartbeat import Heartbeater
from .registry import Registry, load_task_backends, registry
from .runtime import make_worker_id


def handled_job_types(
    job_types: Iterable[str] | None, handlers: Registry = registry, *, using: str = DEFAULT_USING
) -> list[str]:
    """The job types to run: every runnable one by default (registered handlers and what the
    registry's sources find), else those asked for, each of which must have a handler (a job
    nobody can run is better left PENDING than claimed)."""
    if job_types is None:
        return handlers.runnable_job_types(None, using=using)
    types = validate_job_types(job_types)
    missing = [job_type for job_type in types if handlers.get(job_type) is None]
    if missing:
        raise RunledgerError.for_code(
            Code.INVALID_ARGUMENT, f"no handler registered for job types {missing!r}"
        )
    return types


def run_jobs(
    job_types: Iterable[str] | None = None,
    *,
    limit: int | None = None,
    using: str = DEFAULT_USING,
) -> WorkReport:
    """Run due jobs one after another in the calling thread until none is due.

    Like a worker start, it first creates missing definitions for the registered types and
    reaps expired leases of its job types. Jobs whose retry lies in the future are not due,
    so a failing job runs once per call. A helper thread renews the running job's lease.

    Transaction: every step owns a short transaction; refuses to run inside an atomic block.

    Args:
        job_types: the types to run (each needs a registered handler); default every
            registered type.
        limit: stop after this many jobs.

    Returns:
        What ran: claimed, succeeded, retried, dead-lettered, and results the lease fence
        discarded (``lease_lost``).

    Raises:
        RunledgerError: ``job.worker_requires_own_transaction``; ``job.invalid_argument``;
            a database error (including one recording a job's outcome: that job's lease then
            expires and the reaper retries it).
    """
    refuse_inside_atomic(using, "run_jobs")
    if limit is not None and (type(limit) is not int or limit < 0):
        raise RunledgerError.for_code(Code.INVALID_ARGUMENT, "limit must be a non-negative int")
    load_task_backends()
    types = handled_job_types(job_types, using=using)
    if not types:
        return WorkReport()
    handlers = [registry.get(job_type) for job_type in types]
    ensure_job_definitions(
        [handler.defaults() for handler in handlers if handler is not None], using=using
    )
    while reap_expired_leases(types, using=using).batch_was_full:
        pass
    lease_seconds = conf.LEASE_SECONDS
    worker_id = make_worker_id()
    current: list[Execution] = []
    stop = threading.Event()
    heartbeater = Heartbeater(
        lambda: list(current), lease_seconds=lease_seconds, using=using, stop=stop
    )
    heartbeater.start()
    counts = {
        "claimed": 0,
        "succeeded": 0,
        "retried": 0,
        "dead_lettered": 0,
        "lease_lost": 0,
        "continued": 0,
    }
    try:
        while limit is None or counts["claimed"] < limit:
            claimed = claim_jobs(
                types, worker_id=worker_id, limit=1, lease_seconds=lease_seconds, using=using
            )
            if not claimed:
                break
            counts["claimed"] += 1
            execution = Execution(claimed[0], lease_seconds=lease_seconds)
            current.append(execution)
            try:
                run = execute(execution, registry, using=using)
            finally:
                execution.done.set()
                current.clear()
            if run.outcome == "persist_failed" and run.error is not None:
                raise run.error
            counts[run.outcome] += 1
    finally:
        stop.set()
        heartbeater.join()
    return WorkReport(**counts)
