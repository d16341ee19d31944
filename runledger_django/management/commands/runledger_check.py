"""``manage.py runledger_check``: a smoke test and readiness check with one exit code per
failure class (see docs/probes.md)."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ...services.system_check import CHECKS, SystemCheckOptions, run_system_checks
from ...worker.registry import autodiscover, registry
from .. import cli


def _threshold_count(text: str) -> int:
    return cli.bounded_int(text, 0, 999_999, "count")


class Command(BaseCommand):
    help = (
        "Check the database, its server version, the migrations, the schema objects, the "
        "definitions of the registered handlers and the backlog. Exit 0 when all pass, else "
        "the code of the first failure: 3 database, 4 server version, 5 migrations, "
        "6 schema objects, 7 definitions, 8 backlog, 9 workers."
    )
    requires_system_checks: list[str] = []  # noqa: RUF012  (Django's own attribute)
    """The checks run here, reported with their own exit codes."""

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--max-oldest-due-age",
            type=cli.seconds,
            default=None,
            metavar="SECONDS",
            help="Fail (exit 8) when the oldest due job has waited longer than this.",
        )
        parser.add_argument(
            "--max-due-jobs",
            type=_threshold_count,
            default=None,
            metavar="COUNT",
            help="Fail (exit 8) when more jobs than this are due.",
        )
        parser.add_argument(
            "--require-workers",
            action="store_true",
            help="Fail (exit 9) when a job type has due jobs and no live worker serves it.",
        )
        parser.add_argument(
            "--skip",
            action="append",
            choices=sorted(CHECKS),
            default=[],
            metavar="CHECK",
            help=f"Skip a check (repeatable): {', '.join(CHECKS)}.",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object.")
        parser.add_argument("--database", default="default", help="The database alias.")

    def handle(self, *args: Any, **options: Any) -> None:
        autodiscover()
        check_options = SystemCheckOptions(
            handler_job_types=registry.job_types(),
            max_oldest_due_age=options["max_oldest_due_age"],
            max_due_jobs=options["max_due_jobs"],
            require_workers=options["require_workers"],
            skip=frozenset(options["skip"]),
        )
        with cli.runledger_errors():
            report = run_system_checks(check_options, using=options["database"])
        if options["json"]:
            self.stdout.write(json.dumps(report.to_dict()))
        elif options["verbosity"] >= 1:
            for outcome in report.outcomes:
                mark = {"ok": "ok", "failed": "FAILED", "skipped": "skipped"}[outcome.status]
                self.stdout.write(f"{outcome.name:<15} {mark:<8} {outcome.detail}")
                for key in ("missing", "unapplied", "unserved"):
                    items = outcome.facts.get(key)
                    if outcome.status == "failed" and items:
                        self.stdout.write(f"{'':<24}{key}: {', '.join(map(str, items))}")
        if report.exit_code:
            raise CommandError(
                f"runledger_check failed: {_first_failure(report.to_dict())}",
                returncode=report.exit_code,
            )


def _first_failure(report: dict[str, Any]) -> str:
    for name, outcome in report["checks"].items():
        if outcome["status"] == "failed":
            return f"{name}: {outcome['detail']}"
    return ""
