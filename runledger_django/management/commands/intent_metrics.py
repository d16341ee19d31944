"""``manage.py intent_metrics``: per-job-type intent health, as a table or JSON."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...domain import IntentMetrics, ReadScope, format_timestamp
from ...services.metrics import intent_metrics
from .. import cli

COLUMNS = (
    "job_type",
    "pending_count",
    "retrying_count",
    "max_promotion_attempts",
    "conflicted_24h",
    "promoted_24h",
    "oldest_pending_at",
)
"""IntentMetrics' field names, in order; the table's headers and the JSON keys."""


class Command(BaseCommand):
    help = (
        "Print per-job-type intent metrics: pending and retrying counts, the highest promotion "
        "attempt count, conflicts and promotions in the last 24 hours, and the oldest pending "
        "intent. Every row by default; --organization or --global narrow the scope."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument(
            "--organization",
            type=cli.organization_id,
            metavar="UUID",
            help="Only intents of this organization.",
        )
        scope.add_argument(
            "--global",
            action="store_true",
            dest="global_scope",
            help="Only intents without an organization.",
        )
        parser.add_argument("--job-type", type=cli.job_type, help="Only this job type (exact).")
        parser.add_argument(
            "--limit", type=cli.page_limit, default=100, help="Rows, 1 to 1000. Default: 100."
        )
        parser.add_argument("--offset", type=cli.offset, default=0, help="Rows to skip.")
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print one JSON list of objects keyed by IntentMetrics' field names.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["organization"] is not None:
            scope = ReadScope.organization(options["organization"])
        elif options["global_scope"]:
            scope = ReadScope.GLOBAL
        else:
            scope = ReadScope.ADMIN
        with cli.runledger_errors(), cli.log_level_from_verbosity(options["verbosity"]):
            rows = intent_metrics(
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
            self.stdout.write("No intent metrics in this scope.")


def render_table(rows: list[IntentMetrics]) -> str:
    """A fixed-width table: text left-aligned, counts right-aligned, ``-`` for no timestamp."""
    cells = [list(COLUMNS)]
    for row in rows:
        cells.append(
            [
                row.job_type,
                str(row.pending_count),
                str(row.retrying_count),
                str(row.max_promotion_attempts),
                str(row.conflicted_24h),
                str(row.promoted_24h),
                format_timestamp(row.oldest_pending_at) or "-",
            ]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(COLUMNS))]
    numeric = {1, 2, 3, 4, 5}
    lines = []
    for line in cells:
        lines.append(
            "  ".join(
                value.rjust(width) if i in numeric else value.ljust(width)
                for i, (value, width) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )
    return "\n".join(lines)
