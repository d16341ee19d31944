"""``manage.py prune_intents --older-than 7d``: delete old promoted intents in bounded batches."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...domain import format_timestamp
from ...services.operations import count_prunable_intents, prune_promoted_intents
from .. import cli


class Command(BaseCommand):
    help = (
        "Delete promoted intents whose promotion is older than --older-than, in bounded "
        "batches until none remain. Pending and conflicted intents are never deleted. Not "
        "coordinated with queue retention: a pruned intent no longer fences its job."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--older-than",
            type=cli.duration,
            required=True,
            metavar="DURATION",
            help="Promotion age to keep, such as 7d, 12h, 30m or 45s (w for weeks).",
        )
        parser.add_argument(
            "--batch-size",
            type=cli.prune_batch_size,
            default=None,
            help="Intents one statement deletes, 1 to 1000. Default: RUNLEDGER['PRUNE_BATCH_SIZE'].",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only count the intents that would be deleted.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]
        older_than = options["older_than"]
        age = cli.age_text(older_than.total_seconds())
        progress = cli.Progress(self.stdout, verbosity=verbosity)

        def on_batch(deleted: int, so_far: int) -> None:
            progress.update(
                f"deleted {so_far} promoted intents",
                f"batch: deleted {deleted} ({so_far} so far)",
            )

        with cli.runledger_errors(), cli.log_level_from_verbosity(verbosity):
            if options["dry_run"]:
                result = count_prunable_intents(older_than)
                self.stdout.write(
                    f"Would delete {result.deleted} promoted intents promoted before "
                    f"{format_timestamp(result.cutoff)} (older than {age})."
                )
                return
            try:
                result = prune_promoted_intents(
                    older_than, batch_size=options["batch_size"], on_batch=on_batch
                )
            finally:
                progress.done()
        if verbosity >= 1:
            batches = "batch" if result.batches == 1 else "batches"
            self.stdout.write(
                f"Deleted {result.deleted} promoted intents promoted before "
                f"{format_timestamp(result.cutoff)} (older than {age}) in {result.batches} "
                f"{batches}."
            )
