"""``manage.py sample_queue``: record the live queue for the dashboard's depth and age charts."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from ...domain import QueueSampleReport
from ...services.dashboard import sample_queue
from .. import cli


class Command(BaseCommand):
    help = (
        "Record the queue's depth and oldest-due age per job type for the current minute (the "
        "admin dashboard's history), and drop samples older than a week. Safe to run on "
        "several hosts at once. --loop samples every --interval seconds until SIGTERM or SIGINT."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--loop", action="store_true", help="Keep sampling until stopped.")
        parser.add_argument(
            "--interval",
            type=cli.interval,
            default=60.0,
            help="Seconds between passes with --loop (default 60).",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object per pass.")

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]

        def show(report: QueueSampleReport) -> None:
            if options["json"]:
                self.stdout.write(json.dumps(report.to_dict()))
            elif verbosity >= 1:
                if report.skipped:
                    self.stdout.write(f"skipped ({report.skipped})")
                else:
                    self.stdout.write(
                        f"sampled {report.job_types} job types at {report.sampled_at:%H:%M}; "
                        f"pruned {report.pruned} old samples"
                    )
            self.stdout.flush()

        with cli.runledger_errors(), cli.log_level_from_verbosity(verbosity):
            if not options["loop"]:
                show(sample_queue())
                return
            stop = cli.StopEvent()
            with cli.stop_on_signals(stop):
                while not stop.is_set():
                    show(sample_queue())
                    stop.wait(options["interval"])
