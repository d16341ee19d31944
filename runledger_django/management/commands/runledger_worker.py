"""``manage.py runledger_worker``: run the jobs of registered handlers until stopped."""

from __future__ import annotations

import json
import threading
from argparse import ArgumentParser
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from ...conf import conf
from ...domain import WorkReport
from ...services.worker_registry import VERSION
from ...worker.execution import JobRun
from ...worker.health import Health, HealthServer, worker_health
from ...worker.metrics import MetricsServer, start_metrics_server
from ...worker.registry import autodiscover, load_task_backends, registry
from ...worker.run import handled_job_types
from ...worker.runtime import EXIT_OK, Worker, WorkerConfig
from .. import cli


class Command(BaseCommand):
    help = (
        "Run jobs with the handlers registered by @job_handler in the jobs.py modules of "
        "installed apps. SIGTERM or SIGINT: claim nothing more, let running handlers finish "
        "within --grace seconds, hand the rest back, exit 0 (a second signal: hand back now)."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--job-type",
            action="append",
            type=cli.job_type,
            default=None,
            metavar="JOB_TYPE",
            help="Run this job type (repeatable). Default: every registered job type.",
        )
        parser.add_argument(
            "--queue",
            action="append",
            type=cli.queue_name,
            default=None,
            metavar="QUEUE",
            help="Serve this queue (repeatable). Default: every queue. Handlers registered "
            "with @job_handler are on the 'default' queue; Django tasks on their own.",
        )
        parser.add_argument(
            "--concurrency",
            type=cli.concurrency,
            default=1,
            help="Handler threads, each with its own database connection (default 1).",
        )
        parser.add_argument(
            "--promote",
            action="store_true",
            help="Also promote pending enqueue intents of these job types (the whole pipeline "
            "in one process).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Run what is due now (promoting first with --promote), then exit.",
        )
        parser.add_argument(
            "--grace",
            type=cli.seconds,
            default=None,
            metavar="SECONDS",
            help="On SIGTERM, how long running handlers may take to finish before their jobs "
            "are handed back. Default: RUNLEDGER['WORKER_GRACE_SECONDS'].",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help="Print one JSON object per finished attempt (job_id, job_type, outcome, ...).",
        )
        parser.add_argument(
            "--health-port",
            type=cli.port,
            default=None,
            metavar="PORT",
            help="Serve /livez, /readyz and /startupz on this port (0: any free port), answered "
            "from memory without SQL.",
        )
        parser.add_argument(
            "--health-host",
            default="0.0.0.0",  # noqa: S104  (a kubelet probes the pod's address)
            metavar="HOST",
            help="The address the probes listen on (default 0.0.0.0).",
        )
        parser.add_argument(
            "--health-file",
            type=Path,
            default=None,
            metavar="PATH",
            help="Rewrite this file from the worker loop (at most once a second) and remove it "
            "on exit; check it with python -m runledger_django.healthcheck PATH.",
        )
        parser.add_argument(
            "--no-schedules",
            action="store_true",
            help="Do not run the scheduler (by default the worker syncs the declared schedules "
            "and fires the schedules of its job types).",
        )
        parser.add_argument(
            "--metrics-port",
            type=partial(cli.bounded_int, low=0, high=65535, what="port"),
            default=None,
            metavar="PORT",
            help="Serve Prometheus metrics on this port (needs the 'prometheus' extra).",
        )
        parser.add_argument(
            "--metrics-addr",
            default="0.0.0.0",  # noqa: S104  (Prometheus scrapes the pod from outside)
            metavar="ADDR",
            help="The address the metrics port listens on (default 0.0.0.0).",
        )
        parser.add_argument(
            "--no-queue-samples",
            action="store_true",
            help="Do not record the queue's depth for the admin dashboard (once a minute; "
            "any one worker or `manage.py sample_queue --loop` is enough).",
        )
        parser.add_argument(
            "--collect-queue-metrics",
            action="store_true",
            help="Also serve the queue gauges (read from the database at scrape time) on the "
            "metrics port; one exporter of them is enough (see docs/metrics.md).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        with ExitStack() as stack:
            health = _start_health(self, options, stack)
            self._run(health, options)

    def _run(self, health: Health, options: dict[str, Any]) -> None:
        verbosity: int = options["verbosity"]
        as_json: bool = options["json"]
        autodiscover()
        load_task_backends()
        explicit = options["job_type"]
        queues = options["queue"]
        with cli.runledger_errors():
            job_types = handled_job_types(explicit) if explicit else registry.job_types()
        if not job_types and not registry.sources():
            raise CommandError(
                "No job handlers are registered: decorate functions with @job_handler in a "
                "jobs.py module of an installed app."
            )
        if explicit is None and queues is not None and "default" not in queues:
            job_types = []  # the registered handlers are on the default queue
        config = WorkerConfig(
            job_types=job_types,
            fixed_job_types=explicit is not None,
            queues=queues,
            concurrency=options["concurrency"],
            promote=options["promote"],
            burst=options["burst"],
            lease_seconds=conf.LEASE_SECONDS,
            grace_seconds=conf.WORKER_GRACE_SECONDS
            if options["grace"] is None
            else options["grace"],
            poll_interval=conf.WORKER_POLL_INTERVAL,
            # Without notifications from the enqueuers, polling is how work is found.
            idle_poll_interval=conf.WORKER_IDLE_POLL_SECONDS if conf.WAKEUP_NOTIFY else None,
            reaper_interval=conf.REAPER_INTERVAL_SECONDS,
            sample_queue=not options["no_queue_samples"],
            outage_limit=conf.OUTAGE_LIMIT_SECONDS,
            listen=conf.WORKER_LISTEN,
            promotion_batch_size=conf.PROMOTION_BATCH_SIZE,
            schedules=not options["no_schedules"],
            schedule_poll_seconds=conf.SCHEDULE_POLL_SECONDS,
            schedule_batch_size=conf.SCHEDULE_BATCH_SIZE,
            heartbeat_seconds=conf.WORKER_HEARTBEAT_SECONDS,
            registry_retention_seconds=conf.WORKER_RETENTION_SECONDS,
        )
        progress = cli.Progress(self.stdout, verbosity=0 if as_json else verbosity)
        out_lock = threading.Lock()
        totals = {
            "succeeded": 0,
            "retried": 0,
            "dead_lettered": 0,
            "lease_lost": 0,
            "continued": 0,
        }

        def on_run(run: JobRun) -> None:
            with out_lock:
                if run.outcome in totals:
                    totals[run.outcome] += 1
                if as_json:
                    self.stdout.write(json.dumps(run.to_dict()))
                    self.stdout.flush()
                    return
                progress.update(
                    _live(totals),
                    f"{run.job_type} {run.job_id} attempt {run.attempt}: "
                    f"{run.outcome.replace('_', ' ')}"
                    + (f" ({run.error_code})" if run.error_code else ""),
                )

        server = _metrics_server(options)
        if verbosity >= 1:
            (self.stderr if as_json else self.stdout).write(
                f"runledger worker {config.worker_id}: "
                + (f"{len(job_types)} job types" if explicit else "every job type")
                + (f" on queues {', '.join(queues)}" if queues else "")
                + f", concurrency {config.concurrency}"
                + (", promoting intents" if config.promote else "")
                + (", scheduling" if config.schedules else "")
                + (", burst" if config.burst else "")
                + (f", metrics on port {server.port}" if server else "")
            )
        stop = cli.StopEvent()
        force = cli.StopEvent()
        worker = Worker(
            config,
            registry,
            stop=stop,
            force=force,
            on_run=on_run,
            metrics=server.metrics if server else None,
            health=health,
        )
        with cli.runledger_errors(), cli.log_level_from_verbosity(verbosity):
            with cli.stop_on_signals(stop, force):
                try:
                    result = worker.run()
                finally:
                    with out_lock:
                        progress.done()
                    if server is not None:
                        server.close()
        if verbosity >= 1 and not as_json:
            self.stdout.write(f"{_summary(result.report)}; {result.reason}.")
        if result.exit_code != EXIT_OK:
            raise CommandError(result.reason, returncode=result.exit_code)


def _metrics_server(options: dict[str, Any]) -> MetricsServer | None:
    if options["metrics_port"] is None:
        if options["collect_queue_metrics"]:
            raise CommandError("--collect-queue-metrics needs --metrics-port.")
        return None
    try:
        return start_metrics_server(
            options["metrics_port"],
            addr=options["metrics_addr"],
            queue_gauges=options["collect_queue_metrics"],
            include_default_registry=True,  # the handlers' own metrics, the process's
        )
    except (ImproperlyConfigured, OSError) as error:
        raise CommandError(f"--metrics-port: {error}") from error


def _start_health(command: BaseCommand, options: dict[str, Any], stack: ExitStack) -> Health:
    """The probes' state, and the server and file reading it, before handler discovery (so
    /startupz answers 503 while the app loads); both go when the command returns."""
    health = worker_health(
        poll_interval=conf.WORKER_POLL_INTERVAL,
        reaper_interval=conf.REAPER_INTERVAL_SECONDS,
        heartbeat_seconds=conf.WORKER_HEARTBEAT_SECONDS,
        liveness_max_age=conf.LIVENESS_MAX_AGE_SECONDS,
        readiness_db_max_age=conf.READINESS_DB_MAX_AGE_SECONDS,
        health_file=options["health_file"],
        version=VERSION,
    )
    if options["health_file"] is not None:
        health.open_file()
        stack.callback(health.remove_file)
    if options["health_port"] is not None:
        try:
            server = HealthServer(
                health, host=options["health_host"], port=options["health_port"]
            ).start()
        except OSError as error:
            raise CommandError(f"cannot serve the health probes: {error}") from error
        stack.callback(server.close)
        if options["verbosity"] >= 1:
            host, port = server.address
            out = command.stderr if options["json"] else command.stdout
            out.write(f"runledger worker health probes on http://{host}:{port}")
    return health


def _live(totals: dict[str, int]) -> str:
    return (
        f"succeeded {totals['succeeded']}, retried {totals['retried']}, dead-lettered "
        f"{totals['dead_lettered']}, lease lost {totals['lease_lost']}"
        + (f", continued {totals['continued']}" if totals["continued"] else "")
    )


def _summary(report: WorkReport) -> str:
    return (
        f"Claimed {report.claimed} jobs: {report.succeeded} succeeded, {report.retried} "
        f"retried, {report.dead_lettered} dead-lettered, {report.lease_lost} lease lost"
        + (f", {report.continued} continued" if report.continued else "")
    )
