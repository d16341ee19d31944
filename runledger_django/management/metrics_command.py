"""The shape the ``intent_metrics`` and ``job_metrics`` commands share: the same scope options,
one JSON list or one fixed-width table of per-job-type rows."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand

from ..domain import ReadScope, format_timestamp
from . import cli


class MetricsCommand(BaseCommand):
    """Subclasses name their rows (``noun``, ``record``), their columns and how to read them."""

    noun: str
    """What a row counts, plural: "intents", "jobs"."""
    record: str
    """The name of the rows' dataclass, for --json's help."""
    columns: tuple[str, ...]
    """The dataclass's field names, in order: the job type first, a timestamp last, counts
    between. The table's headers and the JSON keys."""

    def fetch(self, **arguments: Any) -> Sequence[Any]:
        raise NotImplementedError

    def add_arguments(self, parser: ArgumentParser) -> None:
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument(
            "--organization",
            type=cli.organization_id,
            metavar="UUID",
            help=f"Only {self.noun} of this organization.",
        )
        scope.add_argument(
            "--global",
            action="store_true",
            dest="global_scope",
            help=f"Only {self.noun} without an organization.",
        )
        parser.add_argument("--job-type", type=cli.job_type, help="Only this job type (exact).")
        parser.add_argument(
            "--limit", type=cli.page_limit, default=100, help="Rows, 1 to 1000. Default: 100."
        )
        parser.add_argument("--offset", type=cli.offset, default=0, help="Rows to skip.")
        parser.add_argument(
            "--json",
            action="store_true",
            help=f"Print one JSON list of objects keyed by {self.record}' field names.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["organization"] is not None:
            scope = ReadScope.organization(options["organization"])
        elif options["global_scope"]:
            scope = ReadScope.GLOBAL
        else:
            scope = ReadScope.ADMIN
        with cli.runledger_errors(), cli.log_level_from_verbosity(options["verbosity"]):
            rows = self.fetch(
                scope=scope,
                job_type=options["job_type"],
                limit=options["limit"],
                offset=options["offset"],
            )
        if options["json"]:
            self.stdout.write(json.dumps([row.to_dict() for row in rows]))
        elif rows:
            self.stdout.write(render_table(rows, self.columns))
        else:
            self.stdout.write(f"No {self.noun[:-1]} metrics in this scope.")


def render_table(rows: Sequence[Any], columns: Sequence[str]) -> str:
    """A fixed-width table: text left-aligned, counts right-aligned, ``-`` for no timestamp."""
    cells = [list(columns)]
    for row in rows:
        values = [getattr(row, name) for name in columns]
        cells.append(
            [
                values[0],
                *(str(value) for value in values[1:-1]),
                format_timestamp(values[-1]) or "-",
            ]
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    numeric = set(range(1, len(columns) - 1))
    return "\n".join(
        "  ".join(
            value.rjust(width) if i in numeric else value.ljust(width)
            for i, (value, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in cells
    )
