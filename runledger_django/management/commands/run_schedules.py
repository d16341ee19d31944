"""``manage.py run_schedules``: the scheduler on its own, once or as a long-running process."""

from __future__ import annotations

import json
import threading
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import conf
from ...domain import SchedulePassReport
from ...services.outage import EXIT_OUTAGE, Outage, OutageLimitExceededError
from ...services.schedules import run_schedule_pass
from ...worker.registry import autodiscover, load_task_backends
from ...worker.scheduler import Scheduler, listen_for_schedules, sync_declarations
from .. import cli


class Command(BaseCommand):
    help = (
        "Fire due schedules: sync the schedules declared in jobs.py, then drain (passes while "
        "a batch comes back full) and exit. --once runs exactly one pass; --loop keeps "
        "running until SIGTERM or SIGINT, waking at each schedule's next fire."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--job-type",
            action="append",
            type=cli.job_type,
            default=None,
            metavar="JOB_TYPE",
            help="Fire the schedules of this job type (repeatable). Default: every schedule.",
        )
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="Run exactly one pass.")
        mode.add_argument("--loop", action="store_true", help="Keep running until stopped.")
        parser.add_argument(
            "--no-sync",
            action="store_true",
            help="Do not sync the declared schedules first.",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print one JSON object per pass (claimed, fired, skipped, coalesced, failed, "
            "batch_was_full); with --loop only passes that claimed schedules.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]
        as_json: bool = options["json"]
        job_types: list[str] | None = options["job_type"]
        autodiscover()
        load_task_backends()
        out_lock = threading.Lock()

        def show(report: SchedulePassReport) -> None:
            with out_lock:
                if as_json:
                    self.stdout.write(json.dumps(report.to_dict()))
                    self.stdout.flush()
                elif verbosity >= 1:
                    self.stdout.write(_summary(report))

        with cli.runledger_errors(), cli.log_level_from_verbosity(verbosity):
            if not options["loop"]:
                if not options["no_sync"]:
                    sync_declarations()
                total = SchedulePassReport()
                while True:
                    report = run_schedule_pass(job_types, limit=conf.SCHEDULE_BATCH_SIZE)
                    total = total + report
                    if options["once"] or not report.batch_was_full:
                        break
                show(total)
                return
            self._loop(job_types, sync=not options["no_sync"], on_pass=show)

    def _loop(self, job_types: list[str] | None, *, sync: bool, on_pass: Any) -> None:
        stop = cli.StopEvent()
        outage_error: list[OutageLimitExceededError] = []

        def give_up(error: OutageLimitExceededError) -> None:
            outage_error.append(error)
            stop.set()

        scheduler = Scheduler(
            job_types=lambda: job_types,
            stop=stop,
            poll_seconds=conf.SCHEDULE_POLL_SECONDS,
            batch_size=conf.SCHEDULE_BATCH_SIZE,
            outage=Outage(
                limit_seconds=conf.OUTAGE_LIMIT_SECONDS,
                logger=_logger(),
                what="run_schedules",
            ),
            sync=sync,
            on_pass=on_pass,
            on_outage_limit=give_up,
        )
        with cli.stop_on_signals(stop):
            listener = listen_for_schedules(scheduler.poke, stop=stop)
            scheduler.start()
            while scheduler.is_alive() and not stop.wait(0.5):
                pass
            stop.set()
            scheduler.poke()
            scheduler.join()
            if listener is not None:
                listener.join(timeout=5)
        if outage_error:
            raise CommandError(str(outage_error[0]), returncode=EXIT_OUTAGE)


def _logger() -> Any:
    import logging

    return logging.getLogger("runledger_django.schedules")


def _summary(report: SchedulePassReport) -> str:
    return (
        f"Schedules: {report.claimed} due, {report.fired} fired, {report.skipped} skipped, "
        f"{report.coalesced} coalesced, {report.failed} failed"
        + (" (more due)" if report.batch_was_full else "")
    )
