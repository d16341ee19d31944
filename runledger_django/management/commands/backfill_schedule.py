"""``manage.py backfill_schedule``: run a schedule's fires of a past time range."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...services.schedules import backfill_schedule
from .. import cli


def backfill_limit(text: str) -> int:
    return cli.bounded_int(text, 1, 10_000, "limit")


class Command(BaseCommand):
    help = (
        "Make the jobs of a schedule's fires from --from (inclusive) to --to (exclusive), "
        "oldest first. Fires already in the ledger are left alone: running it twice is safe."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("name", help="The schedule's name.")
        parser.add_argument("--from", dest="start", type=cli.timestamp, required=True)
        parser.add_argument("--to", dest="end", type=cli.timestamp, required=True)
        parser.add_argument(
            "--limit", type=backfill_limit, default=1000, help="At most this many fires."
        )
        parser.add_argument("--json", action="store_true", help="Print the report as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        with cli.runledger_errors():
            report = backfill_schedule(
                options["name"], options["start"], options["end"], limit=options["limit"]
            )
        if options["json"]:
            self.stdout.write(json.dumps(report.to_dict()))
            return
        self.stdout.write(
            f"Backfilled {report.fired} fires; {report.existing} were already in the ledger"
            + ("; more fires lie in the range (raise --limit)" if report.truncated else "")
            + "."
        )
