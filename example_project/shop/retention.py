"""Queue retention that keeps the intent fence intact: the recipe of docs/operations.md.

Finished jobs older than a cutoff are deleted together with the promoted intents that point at
them. Deleting a job that a promoted intent still references fails at once (ON DELETE
RESTRICT), so the intents of exactly those jobs go first, in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import uuid

from django.db import transaction
from django.utils import timezone

from runledger_django import RunledgerError, delete_promoted_intents_for_jobs
from runledger_django.models import Job

FINISHED = ("SUCCEEDED", "DEAD_LETTERED", "CANCELED")
RETRYABLE_SQLSTATES = frozenset({"55P03", "57014", "40P01"})
"""Lock timeout, statement timeout, deadlock: the transaction rolled back; run it again."""


def purge_finished_jobs(
    older_than: dt.timedelta, *, batch_size: int = 500, attempts: int = 3
) -> int:
    """Delete finished jobs that ended before ``now - older_than``; return how many went."""
    cutoff = timezone.now() - older_than
    deleted = 0
    while True:
        # 1. Candidates, read without locks and outside the retention transaction.
        job_ids = list(
            Job.objects.filter(status__in=FINISHED, finished_at__lt=cutoff)
            .order_by("finished_at", "id")
            .values_list("id", flat=True)[:batch_size]
        )
        if not job_ids:
            return deleted
        deleted += _delete_batch(job_ids, attempts=attempts)


def _delete_batch(job_ids: list[uuid.UUID], *, attempts: int) -> int:
    for attempt in range(1, attempts + 1):
        try:
            with transaction.atomic():
                # 2. The first lock-taking statement: the fence, then the intents of exactly
                #    these jobs, then the jobs' row locks.
                delete_promoted_intents_for_jobs(job_ids)
                # 3. The jobs themselves (their events go with them, ON DELETE CASCADE).
                #    A job finished by now may have been requeued meanwhile: re-check status.
                count, _ = Job.objects.filter(id__in=job_ids, status__in=FINISHED).delete()
            # 4. Leaving the block commits, promptly: nothing else happens in it.
            return count
        except RunledgerError as error:
            if error.sqlstate not in RETRYABLE_SQLSTATES or attempt == attempts:
                raise
    return 0  # pragma: no cover  (the loop returns or raises)
