"""``manage.py job_metrics``: per-job-type queue health, as a table or JSON."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...domain import JobMetrics, ReadScope, format_timestamp
from ...services.job_metrics import job_metrics
from .. import cli

COLUMNS = (
    "job_type",
    "due_count",
    "scheduled_count",
    "leased_count",
    "expired_lease_count",
    "succeeded_24h",
    "retried_24h",
    "dead_lettered_24h",
    "oldest_due_at",
)
"""JobMetrics' field names, in order; the table's headers and the JSON keys."""


class Command(BaseCommand):
    help = (
        "Print per-job-type job metrics: due, scheduled, leased and expired-lease counts, "
        "attempts that succeeded, were retried or were dead-lettered in the last 24 hours, and "
        "the oldest due job. Every row by default; --organization or --global narrow the scope."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument(
            "--organization",
            type=cli.organization_id,
            metavar="UUID",
            help="Only jobs of this organization.",
        )
        scope.add_argument(
            "--global",
            action="store_true",
            dest="global_scope",
            help="Only jobs without an organization.",
        )
        parser.add_argument("--job-type", type=cli.job_type, help="Only this job type (exact).")
        parser.add_argument(
            "--limit", type=cli.page_limit, default=100, help="Rows, 1 to 1000. Default: 100."
        )
        parser.add_argument("--offset", type=cli.offset, default=0, help="Rows to skip.")
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print one JSON list of objects keyed by JobMetrics' field names.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["organization"] is not None:
            scope = ReadScope.organization(options["organization"])
        elif options["global_scope"]:
            scope = ReadScope.GLOBAL
        else:
            scope = ReadScope.ADMIN
        with cli.runledger_errors(), cli.log_level_from_verbosity(options["verbosity"]):
            rows = job_metrics(
                scope=scope,
                job_type=options["job_type"],
                limit=options["limit"],
                offset=options["offset"],
            )
        if options["json"]:
            self.stdout.write(json.dumps([row.to_dict() for row in rows]))
        elif rows:
            self.stdout.write(render_table(rows))
        else:
            self.stdout.write("No job metrics in this scope.")


def render_table(rows: list[JobMetrics]) -> str:
    """A fixed-width table: text left-aligned, counts right-aligned, ``-`` for no timestamp."""
    cells = [list(COLUMNS)]
    for row in rows:
        cells.append(
            [
                row.job_type,
                str(row.due_count),
                str(row.scheduled_count),
                str(row.leased_count),
                str(row.expired_lease_count),
                str(row.succeeded_24h),
                str(row.retried_24h),
                str(row.dead_lettered_24h),
                format_timestamp(row.oldest_due_at) or "-",
            ]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    numeric = set(range(1, len(COLUMNS) - 1))
    return "\n".join(
        "  ".join(
            value.rjust(width) if i in numeric else value.ljust(width)
            for i, (value, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in cells
    )
