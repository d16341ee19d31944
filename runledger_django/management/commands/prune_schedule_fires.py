"""``manage.py prune_schedule_fires``: ledger retention (the newest fire of each schedule stays)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand
from django.utils import timezone

from ...services.schedules import prune_schedule_fires
from .. import cli


class Command(BaseCommand):
    help = (
        "Delete schedule fires recorded before --older-than, in bounded batches; the newest "
        "fire of each schedule is always kept. A pruned fire could run again only if an "
        "operator moved a cursor back onto it, so keep more than any retime you expect."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--older-than", type=cli.duration, required=True, metavar="DURATION")
        parser.add_argument("--dry-run", action="store_true", help="Count only.")

    def handle(self, *args: Any, **options: Any) -> None:
        cutoff = timezone.now() - options["older_than"]
        with cli.runledger_errors():
            count = prune_schedule_fires(cutoff, dry_run=options["dry_run"])
        age = cli.age_text(options["older_than"].total_seconds())
        verb = "Would delete" if options["dry_run"] else "Deleted"
        self.stdout.write(f"{verb} {count} schedule fires older than {age}.")
