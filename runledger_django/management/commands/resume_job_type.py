"""``manage.py resume_job_type``: let workers claim a paused job type again."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...services.queue_control import resume_job_type
from .. import cli
from .pause_job_type import write_control


class Command(BaseCommand):
    help = (
        "Resume a paused job type: idle workers are woken at once. Resuming a running type "
        "changes nothing."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("job_type", type=cli.job_type, help="The job type to resume.")
        parser.add_argument("--json", action="store_true", help="Print the type's state as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        with cli.runledger_errors():
            control = resume_job_type(options["job_type"])
        write_control(self, control, options["json"])
