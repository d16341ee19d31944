"""``manage.py promote_intents``: drain pending intents into the job queue, or keep doing it."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...conf import conf
from ...domain import PromotionReport
from ...errors import RunledgerError
from ...services.operations import PromotionTotals, promotion_job_types, run_promotion
from ...services.outage import EXIT_OUTAGE, OutageLimitExceededError
from .. import cli


class Command(BaseCommand):
    help = (
        "Promote pending enqueue intents into jobs. By default drain: repeat passes while a "
        "batch comes back full, then exit (for cron). With --loop keep running until SIGTERM "
        "or SIGINT; the pass in flight commits or rolls back first, then the exit status is 0."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--job-type",
            action="append",
            type=cli.job_type,
            default=None,
            metavar="JOB_TYPE",
            help=(
                "Promote this job type (repeatable). Default: RUNLEDGER['PROMOTE_JOB_TYPES'], "
                "else every enabled job definition (re-read before every pass)."
            ),
        )
        parser.add_argument(
            "--limit",
            type=cli.page_limit,
            default=None,
            help="Intents one pass claims, 1 to 1000. Default: RUNLEDGER['PROMOTION_BATCH_SIZE'].",
        )
        parser.add_argument(
            "--loop",
            action="store_true",
            help="Keep promoting until SIGTERM or SIGINT instead of exiting once drained.",
        )
        parser.add_argument(
            "--interval",
            type=cli.interval,
            default=None,
            metavar="SECONDS",
            help=(
                "With --loop, seconds to wait after a pass that left nothing behind. "
                "Default: RUNLEDGER['PROMOTER_INTERVAL']."
            ),
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help=(
                "Print one JSON object per pass, keyed by PromotionReport's field names "
                "(with --loop, passes that found nothing are not printed)."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity: int = options["verbosity"]
        loop: bool = options["loop"]
        as_json: bool = options["json"]
        limit: int = options["limit"] or conf.PROMOTION_BATCH_SIZE
        wait: float = options["interval"] or conf.PROMOTER_INTERVAL
        progress = cli.Progress(self.stdout, verbosity=0 if as_json else verbosity)
        stop = cli.StopEvent()

        def on_pass(report: PromotionReport, sums: PromotionTotals) -> None:
            idle = not (report.anything_happened or report.batch_was_full)
            if as_json:
                if not (loop and idle):
                    self.stdout.write(json.dumps(report.to_dict()))
                    self.stdout.flush()
            elif not (loop and idle):
                progress.update(
                    f"promoted {sums.total_promoted} intents in {sums.passes} passes",
                    f"pass {sums.passes}: {_describe(report)}",
                )

        with cli.runledger_errors(), cli.log_level_from_verbosity(verbosity):
            self._announce(options["job_type"], loop=loop, as_json=as_json, verbosity=verbosity)
            with cli.stop_on_signals(stop):
                try:
                    totals = run_promotion(
                        options["job_type"],
                        limit=limit,
                        interval=wait,
                        loop=loop,
                        stop=stop,
                        on_pass=on_pass,
                    )
                except OutageLimitExceededError as exc:
                    raise CommandError(str(exc), returncode=EXIT_OUTAGE) from exc
                finally:
                    progress.done()
        if verbosity >= 1 and not as_json:
            stopped = " (stopped by signal)" if stop.is_set() else ""
            self.stdout.write(f"{_summary(totals)}{stopped}")

    def _announce(
        self, explicit: list[str] | None, *, loop: bool, as_json: bool, verbosity: int
    ) -> None:
        """Say which job types will be promoted. A loop must start even while the database
        is unreachable (it rides the outage out), so there a failed read only skips this."""
        try:
            job_types = promotion_job_types(explicit)
        except RunledgerError:
            if loop:
                return
            raise
        if not job_types and verbosity >= 1:
            self.stderr.write(
                "No job types to promote: pass --job-type, set "
                "RUNLEDGER['PROMOTE_JOB_TYPES'] or enable a job definition."
            )
        elif verbosity >= 2 and not as_json:
            self.stdout.write(f"Promoting job types: {', '.join(job_types)}")


def _describe(report: PromotionReport) -> str:
    if not (report.anything_happened or report.batch_was_full):
        return "nothing to promote"
    return (
        f"promoted {report.total_promoted} ({report.inserted_jobs} inserted, "
        f"{report.existing_jobs} existing), {report.conflicted} conflicted, "
        f"{report.retry_deferred} retry deferred, "
        f"{report.definition_became_unavailable} definition unavailable"
        + (", batch full" if report.batch_was_full else "")
    )


def _summary(sums: PromotionTotals) -> str:
    passes = "pass" if sums.passes == 1 else "passes"
    return (
        f"Promoted {sums.total_promoted} intents in {sums.passes} {passes} "
        f"({sums.inserted_jobs} inserted, {sums.existing_jobs} existing); "
        f"{sums.conflicted} conflicted, {sums.retry_deferred} retry deferred, "
        f"{sums.definition_became_unavailable} definition unavailable."
    )
