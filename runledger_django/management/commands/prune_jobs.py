"""``manage.py prune_jobs --older-than 30d``: queue retention, fenced with the promoted intents."""

from __future__ import annotations

import argparse
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...domain import RETENTION_BATCH_MAX, format_timestamp
from ...services.job_retention import (
    JOB_PRUNE_BATCH_SIZE,
    PRUNABLE_STATUSES,
    JobPruneCounts,
    count_prunable_jobs,
    prune_jobs,
)
from .. import cli

STATUS_NAMES = [status.value for status in PRUNABLE_STATUSES]


def statuses(text: str) -> list[str]:
    """``DEAD_LETTERED`` or ``SUCCEEDED,CANCELED`` (case-insensitive)."""
    chosen = [part.strip().upper() for part in text.split(",") if part.strip()]
    unknown = [status for status in chosen if status not in STATUS_NAMES]
    if not chosen or unknown:
        raise argparse.ArgumentTypeError(
            f"invalid status {text!r}: choose from {', '.join(STATUS_NAMES)}"
        )
    return chosen


class Command(BaseCommand):
    help = (
        "Delete finished jobs (SUCCEEDED, DEAD_LETTERED, CANCELED) that ended before "
        "--older-than, with their attempts, events and promoted intents, in short batches "
        "behind the retention fence, so deduplication never breaks. PENDING and LEASED jobs "
        "are never deleted."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--older-than",
            type=cli.duration,
            required=True,
            metavar="DURATION",
            help="Keep jobs that finished within this, such as 30d, 12h or 45m (w for weeks).",
        )
        parser.add_argument(
            "--status",
            type=statuses,
            action="extend",
            default=None,
            metavar="STATUS",
            help="Only jobs in this status (repeatable, or comma-separated): "
            f"{', '.join(STATUS_NAMES)}. Default: all three.",
        )
        parser.add_argument(
            "--batch-size",
            type=cli.prune_batch_size,
            default=JOB_PRUNE_BATCH_SIZE,
            help=f"Jobs one retention transaction deletes, 1 to {RETENTION_BATCH_MAX}. Promotion "
            f"waits while a batch holds the fence. Default: {JOB_PRUNE_BATCH_SIZE}.",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only count what would be deleted.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]
        older_than = options["older_than"]
        age = cli.age_text(older_than.total_seconds())
        progress = cli.Progress(self.stdout, verbosity=verbosity)

        def on_batch(batch: JobPruneCounts, total: JobPruneCounts) -> None:
            progress.update(
                f"deleted {total.jobs} jobs",
                f"batch: deleted {batch.jobs} jobs and {batch.intents} promoted intents "
                f"({total.jobs} jobs so far)",
            )

        with cli.runledger_errors(), cli.log_level_from_verbosity(verbosity):
            if options["dry_run"]:
                result = count_prunable_jobs(older_than, statuses=options["status"])
                counts = result.counts
                self.stdout.write(
                    f"Would delete {_jobs_text(counts)} finished before "
                    f"{format_timestamp(result.cutoff)} (older than {age}), with their "
                    f"{counts.intents} promoted intents, {counts.attempts} attempts and "
                    f"{counts.events} events."
                )
                return
            try:
                result = prune_jobs(
                    older_than,
                    statuses=options["status"],
                    batch_size=options["batch_size"],
                    on_batch=on_batch,
                )
            finally:
                progress.done()
        if verbosity >= 1:
            batches = "batch" if result.batches == 1 else "batches"
            self.stdout.write(
                f"Deleted {_jobs_text(result.counts)} finished before "
                f"{format_timestamp(result.cutoff)} (older than {age}), with their "
                f"{result.counts.intents} promoted intents, in {result.batches} {batches}."
            )


def _jobs_text(counts: JobPruneCounts) -> str:
    return (
        f"{counts.jobs} jobs ({counts.succeeded} succeeded, {counts.dead_lettered} "
        f"dead-lettered, {counts.canceled} canceled)"
    )
