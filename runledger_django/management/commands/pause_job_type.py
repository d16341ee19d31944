"""``manage.py pause_job_type``: stop claims of a job type on every worker (docs/queue-control.md)."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...domain import JobTypeControl
from ...services.queue_control import pause_job_type
from .. import cli


class Command(BaseCommand):
    help = (
        "Pause a job type: workers stop claiming it from their next claim; recording, "
        "promotion and enqueueing go on, running jobs finish. Pausing a paused type keeps its "
        "first pause. Undo with resume_job_type."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("job_type", type=cli.job_type, help="The job type to pause.")
        parser.add_argument("--reason", default=None, help="Why (shown in the admin).")
        parser.add_argument("--actor", default=None, help="Who (shown in the admin).")
        parser.add_argument("--json", action="store_true", help="Print the type's state as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        with cli.runledger_errors():
            control = pause_job_type(
                options["job_type"], reason=options["reason"], actor=options["actor"]
            )
        write_control(self, control, options["json"])


def write_control(command: BaseCommand, control: JobTypeControl, as_json: bool) -> None:
    """One JSON object, or one line saying what changed (shared with resume_job_type)."""
    if as_json:
        command.stdout.write(json.dumps(control.to_dict()))
        return
    state = "paused" if control.paused else "running"
    since = f" since {control.to_dict()['paused_at']}" if control.paused else ""
    note = "" if control.changed else " (unchanged)"
    command.stdout.write(f"{control.job_type}: {state}{since}{note}")
