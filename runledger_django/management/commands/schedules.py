"""``manage.py schedules``: the schedules with their next fires, as a table or JSON."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...domain import ReadScope
from ...services.schedules import describe, schedule_overview, schedule_summary
from ...services.schedules.timing import zone
from .. import cli


def fire_count(text: str) -> int:
    return cli.bounded_int(text, 1, 100, "count")


class Command(BaseCommand):
    help = "List the schedules with their next fire times (in UTC and in each one's zone)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--next",
            type=fire_count,
            default=1,
            metavar="N",
            help="Show the next N fires of each schedule (1 to 100, default 1).",
        )
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument(
            "--organization",
            type=cli.organization_id,
            default=None,
            metavar="UUID",
            help="Only this tenant's schedules.",
        )
        scope.add_argument(
            "--global", action="store_true", help="Only schedules without an organization."
        )
        parser.add_argument(
            "--job-type", type=cli.job_type, default=None, help="Only this job type's schedules."
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print one JSON list of objects (name, job_type, next_fires, ...).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["organization"] is not None:
            scope = ReadScope.organization(options["organization"])
        elif options["global"]:
            scope = ReadScope.GLOBAL
        else:
            scope = ReadScope.ADMIN
        with cli.runledger_errors():
            overview = schedule_overview(
                scope=scope, job_type=options["job_type"], count=options["next"]
            )
        if options["json"]:
            data = [schedule_summary(row, fires) for row, fires in overview]
            self.stdout.write(json.dumps(data, indent=2))
            return
        if not overview:
            self.stdout.write("No schedules.")
            return
        for row, fires in overview:
            state = "paused" if row.paused_at else ("active" if row.is_active else "inactive")
            declared = ", declared in code" if row.declared else ""
            self.stdout.write(f"{row.name}  [{state}{declared}]  {row.job_type_id}")
            self.stdout.write(f"    {describe(row)} ({row.timezone})")
            tz = zone(row.timezone)
            for fire in fires:
                local = fire.astimezone(tz)
                self.stdout.write(
                    f"    next {fire:%Y-%m-%d %H:%M:%S} UTC  ({local:%Y-%m-%d %H:%M:%S %Z})"
                )
            if row.last_fired_at is not None:
                self.stdout.write(
                    f"    last fire {row.last_scheduled_for:%Y-%m-%d %H:%M:%S} UTC, "
                    f"job {row.last_job_id}"
                )
            if row.consecutive_failures:
                self.stdout.write(
                    f"    failing: {row.consecutive_failures} in a row ({row.last_error_code})"
                )
