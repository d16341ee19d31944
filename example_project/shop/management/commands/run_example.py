"""The example project's main job: the whole runledger story, told step by step.

``python3 dev.py example`` runs it. Every step is safe to repeat: a second run finds the
schema, the job types, the order, its intents, its jobs and the admin user already there, and
says so.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from example_project.shop.fulfilment import FULFIL_JOB_TYPES, fulfilment_key
from example_project.shop.models import Order
from example_project.shop.views import PAYMENT_JOB_TYPE, RECEIPT_JOB_TYPE, WAREHOUSE_JOB_TYPE
from runledger_django import ReadScope, enqueue_job, get_intent, replay_job
from runledger_django.models import (
    Job,
    JobDefinition,
    JobEnqueueIntent,
    ScheduleFire,
    WorkflowRun,
    WorkflowStep,
)
from runledger_django.worker.registry import autodiscover, registry

ADMIN_USERNAME = "admin"
GOOD_CHECKOUT = {"reference": "demo-1001", "email": "ada@example.com", "total_cents": 4200}
FAILING_CHECKOUT = {
    "reference": "demo-1002",
    "email": "grace@example.com",
    "total_cents": 1999,
    "fail_after_recording": True,
}
SHOP_JOB_TYPES = (RECEIPT_JOB_TYPE, WAREHOUSE_JOB_TYPE)
WORKER_ARGS = (
    "--promote",
    "--burst",
    *(arg for job_type in SHOP_JOB_TYPES for arg in ("--job-type", job_type)),
)
RETRY_WAIT_LIMIT = 5.0
"""Seconds the story waits for a retry to come due before it runs the worker again."""
MAX_BURSTS = 6
"""Worker runs the story makes at most; the warehouse job needs three."""
PRUNE_WINDOW = "1s"
"""The retention window of the story's dry run: short, so the demo's jobs already count."""


class Command(BaseCommand):
    help = (
        "Run the example story: migrate, define job types, check out through the view, run "
        "the worker (a receipt succeeds, a warehouse call is dead-lettered), print metrics, "
        "show what retention would remove and prepare the admin."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset-admin-password",
            action="store_true",
            help="Give the existing 'admin' user a new random password and print it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.step = 0
        self.say(
            "runledger_django example: a shop records each order and the requests for its "
            "background work in one transaction, and a worker runs them."
        )
        self.say(f"Database: {self.describe_database()}")
        self.migrate()
        self.define_job_types(PAYMENT_JOB_TYPE, *FULFIL_JOB_TYPES)
        client = Client()
        intent_id = self.checkout(client)
        self.retry_checkout(client, intent_id)
        self.failing_checkout(client)
        self.run_worker(intent_id)
        self.show_jobs()
        self.metrics()
        self.retention()
        self.django_task()  # Django's Tasks API through runledger's backend (docs/tasks.md)
        self.exactly_once()  # atomic=True and replay (docs/running-jobs.md)
        self.periodic_schedule()  # schedule(...) in shop/jobs.py (docs/schedules.md)
        self.fulfilment()  # the checkout's workflow, shop/fulfilment.py (docs/workflows.md)
        self.prepare_admin(reset_password=options["reset_admin_password"])

    # -- output -------------------------------------------------------------------------------

    def say(self, text: str = "") -> None:
        self.stdout.write(text)

    def heading(self, text: str) -> None:
        self.step += 1
        self.say()
        self.stdout.write(self.style.MIGRATE_HEADING(f"{self.step}. {text}"))

    def detail(self, text: str) -> None:
        for line in text.rstrip("\n").splitlines() or [""]:
            self.say(f"   {line}")

    def run_command(self, name: str, *args: str) -> None:
        """Run one of runledger's management commands and show its output indented. The
        library's warnings (a dead letter) stay off the terminal: the output tells them."""
        out = io.StringIO()
        with _quiet_log("runledger_django"):
            call_command(name, *args, stdout=out, stderr=out)
        self.detail(f"$ python manage.py {' '.join([name, *args])}")
        self.detail(out.getvalue() or "(no output)")

    # -- the story ----------------------------------------------------------------------------

    def describe_database(self) -> str:
        connection = connections[DEFAULT_DB_ALIAS]
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            row = cursor.fetchone()
        version = str(row[0]).split()[0] if row else "?"
        if os.environ.get("DATABASE_URL"):
            return f"PostgreSQL {version} from DATABASE_URL"
        return f"PostgreSQL {version}, the embedded server (set DATABASE_URL to use another)"

    def migrate(self) -> None:
        self.heading("Migrate the database")
        connection = connections[DEFAULT_DB_ALIAS]
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
        call_command("migrate", verbosity=0, interactive=False)
        if not plan:
            self.detail("already up to date")
        elif len(plan) == 1:
            migration = plan[0][0]
            self.detail(f"applied 1 migration: {migration.app_label}.{migration.name}")
        else:
            apps = sorted({migration.app_label for migration, _ in plan})
            self.detail(f"applied {len(plan)} migrations of {', '.join(apps)}")

    def define_job_types(self, *extra: str) -> None:
        self.heading("Define the job types, from the handlers in shop/jobs.py")
        autodiscover()
        for job_type in (*SHOP_JOB_TYPES, *extra):
            handler = registry.get(job_type)
            if handler is None:
                raise RuntimeError(f"no handler registered for {job_type}")
            defaults = {
                "max_attempts": handler.max_attempts,
                "default_timeout_seconds": handler.timeout_seconds,
            }
            # get_or_create, not update_or_create: an operator's later changes (such as
            # disabling the type in the admin) survive a second run. A worker would create a
            # missing definition the same way; doing it here lets this step show them.
            definition, created = JobDefinition.objects.get_or_create(
                job_type=job_type, defaults={k: v for k, v in defaults.items() if v}
            )
            verb = "created" if created else "already defined"
            state = "enabled" if definition.is_enabled else "DISABLED (promotion will skip it)"
            self.detail(
                f"{definition.job_type}: {verb}, {state}; defaults: {definition.max_attempts} "
                f"attempts, {definition.default_timeout_seconds} s timeout, "
                f"priority {definition.default_priority}"
            )

    def post_checkout(self, client: Client, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        response = client.post(
            reverse("checkout"), data=json.dumps(body), content_type="application/json"
        )
        return response.status_code, json.loads(response.content)

    def checkout(self, client: Client) -> str:
        reference = GOOD_CHECKOUT["reference"]
        self.heading(f"Check out order {reference} through the view (POST /checkout/)")
        self.detail(
            "The view creates the order and records two intents in the same atomic block: "
            "send the receipt, and ask the warehouse to reserve the goods. It also starts the "
            "order's fulfilment workflow (charge, reserve, ship, notify) in that block."
        )
        status, body = self.post_checkout(client, GOOD_CHECKOUT)
        if status not in (200, 201):
            raise RuntimeError(f"checkout failed with HTTP {status}: {body}")
        intent = body["intent"]
        if body["created"]:
            self.detail(f"HTTP {status}: order {reference} created (id {body['order_id']})")
        else:
            self.detail(f"HTTP {status}: order {reference} already existed (an earlier run)")
        for name, shown in (("receipt", intent), ("warehouse", body["warehouse_intent"])):
            self.detail(
                f"{name} intent {shown['intent_id']}: {shown['disposition']}, "
                f"status {shown['status']}"
            )
        run = body["fulfilment"]
        self.detail(f"fulfilment workflow run {run['run_id']}: {run['disposition']}")
        return str(intent["intent_id"])

    def retry_checkout(self, client: Client, intent_id: str) -> None:
        self.heading("Retry the identical checkout, as a client whose response was lost would")
        status, body = self.post_checkout(client, GOOD_CHECKOUT)
        intent = body["intent"]
        same = "the same" if intent["intent_id"] == intent_id else "a DIFFERENT"
        self.detail(
            f"HTTP {status}: {same} order and {same} receipt intent ({intent['disposition']}, "
            f"status {intent['status']}); strict idempotency: one order, one intent per job"
        )

    def failing_checkout(self, client: Client) -> None:
        reference = FAILING_CHECKOUT["reference"]
        self.heading(f"Check out order {reference}, failing after the intent was recorded")
        with _quiet_log("django.request"):  # the 409 is the point here, not a warning
            status, body = self.post_checkout(client, FAILING_CHECKOUT)
        orders = Order.objects.filter(reference=reference).count()
        intents = JobEnqueueIntent.objects.filter(
            idempotency_key__in=[f"receipt:{reference}", f"warehouse:{reference}"]
        ).count()
        self.detail(f"HTTP {status}: {body.get('error')}")
        self.detail(
            f"the rollback removed both: {orders} orders and {intents} intents for {reference}"
        )

    def run_worker(self, intent_id: str) -> None:
        self.heading("Run the jobs: runledger_worker --promote --burst")
        self.detail(
            "The worker promotes the pending intents into jobs, runs what is due with the "
            "handlers of shop/jobs.py, and (--burst) exits when nothing is due. The warehouse "
            "does not answer in this demo, so its job asks to be retried shortly."
        )
        self.run_command("runledger_worker", *WORKER_ARGS)
        intent = get_intent(intent_id, scope=ReadScope.ADMIN)
        if intent is None:
            raise RuntimeError(f"intent {intent_id} disappeared")
        self.detail(f"receipt intent {intent.id} is now {intent.status}")
        for _ in range(MAX_BURSTS - 1):
            waiting = self.next_retry()
            if waiting is None:
                return
            job, seconds = waiting
            if seconds > RETRY_WAIT_LIMIT:
                self.detail(
                    f"{job.job_type_id} job {job.id} retries at {job.next_run_at:%H:%M:%S}; "
                    "run the worker again then"
                )
                return
            self.detail(
                f"{job.job_type_id} job {job.id}: attempt {job.attempt} of "
                f"{job.max_attempts} failed, retry due in {seconds:.1f} s; run the worker again"
            )
            time.sleep(seconds)  # the retry's own schedule: not due before then
            self.run_command("runledger_worker", *WORKER_ARGS)

    def demo_jobs(self) -> list[Job]:
        keys = [f"{name}:{GOOD_CHECKOUT['reference']}" for name in ("receipt", "warehouse")]
        return list(
            Job.objects.filter(job_type__in=SHOP_JOB_TYPES, idempotency_key__in=keys)
            .order_by("job_type", "created_at")
            .prefetch_related("attempts")
        )

    def next_retry(self) -> tuple[Job, float] | None:
        """The demo's next job waiting for a retry, and the seconds until it is due."""
        waiting = [job for job in self.demo_jobs() if job.status == "PENDING" and job.attempt]
        if not waiting:
            return None
        job = min(waiting, key=lambda job: job.next_run_at)
        return job, max(0.0, (job.next_run_at - _database_now()).total_seconds())

    def show_jobs(self) -> None:
        self.heading("What happened to each job")
        for job in self.demo_jobs():
            self.detail(
                f"job {job.id}: {job.job_type_id}, {job.status}, run {job.run_number}, "
                f"{job.attempt} of {job.max_attempts} attempts"
            )
            for attempt in job.attempts.all():
                error = f" ({attempt.error_code}: {attempt.error_message})"
                self.detail(
                    f"  run {attempt.run_number} attempt {attempt.attempt}: "
                    f"{attempt.outcome or 'running'}{error if attempt.error_code else ''}"
                )
            if job.output is not None:
                self.detail(f"  output: {json.dumps(job.output, sort_keys=True)}")

    def metrics(self) -> None:
        self.heading("Intent and job metrics per job type")
        self.run_command("intent_metrics")
        self.run_command("job_metrics")

    def retention(self) -> None:
        self.heading("Queue retention: what prune_jobs would remove")
        self.detail(
            "In production, run prune_jobs --older-than 30d daily; finished jobs go with their "
            "attempts, events and promoted intents. With a one-second window the demo's jobs "
            "already count; --dry-run only counts."
        )
        newest = max((job.finished_at for job in self.demo_jobs() if job.finished_at), default=None)
        if newest is not None:
            # Both demo jobs must have finished more than the window ago to be counted.
            time.sleep(max(0.0, 1.05 - (_database_now() - newest).total_seconds()))
        self.run_command("prune_jobs", "--older-than", PRUNE_WINDOW, "--dry-run")

    # -- Django's Tasks API (Django 6+): one @task through RunledgerTaskBackend ---------------

    def django_task(self) -> None:
        """Enqueue shop/tasks.py's task for the demo order in a transaction, run it with the
        worker, and read its result back, when TASKS names runledger's backend."""
        self.heading("Enqueue a Django task (@task in shop/tasks.py) and run it")
        tasks_setting = getattr(settings, "TASKS", {}).get("default", {})
        if django.VERSION < (6, 0):
            self.detail("skipped: Django's Tasks framework arrived in Django 6.0")
            return
        if tasks_setting.get("BACKEND") != "runledger_django.tasks.RunledgerTaskBackend":
            self.detail(
                "skipped: TASKS does not name runledger_django.tasks.RunledgerTaskBackend; "
                "see docs/tasks.md"
            )
            return
        from django.db import transaction

        from example_project.shop.tasks import send_order_confirmation
        from runledger_django.tasks import with_idempotency_key

        order = Order.objects.get(reference=GOOD_CHECKOUT["reference"])
        confirm = with_idempotency_key(send_order_confirmation, f"confirm:{order.reference}")
        with transaction.atomic():  # as in a view: the task commits with the business change
            result = confirm.enqueue(order.pk)
        self.detail(f"task result {result.id}: {result.status} (a rerun finds the same one)")
        job_type = f"task:{confirm.queue_name}:{confirm.module_path}"
        self.run_command("runledger_worker", "--promote", "--burst", "--job-type", job_type)
        result.refresh()
        successful = result.status == "SUCCESSFUL"
        value = json.dumps(result.return_value, sort_keys=True) if successful else "-"
        self.detail(
            f"task result {result.id}: {result.status} after {result.attempts} attempt(s), "
            f"return value {value}"
        )

    # -- exactly-once effects and replay ------------------------------------------------------

    def exactly_once(self) -> None:
        """Run shop/jobs.py's atomic handler for the demo order, then replay its job."""
        self.heading("Exactly once: an atomic=True handler, then a replay of its job")
        self.detail(
            "shop.mark_paid runs inside the transaction that records its success: the order's "
            "paid_at and the job's SUCCEEDED commit together or not at all, so a worker killed "
            "at any moment can never leave the order paid twice or not at all."
        )
        order = Order.objects.get(reference=GOOD_CHECKOUT["reference"])
        job = enqueue_job(
            PAYMENT_JOB_TYPE, {"order_id": order.pk}, idempotency_key=f"paid:{order.reference}"
        )
        self.run_command("runledger_worker", "--burst", "--job-type", PAYMENT_JOB_TYPE)
        order.refresh_from_db()
        paid = Job.objects.get(pk=job.job_id)
        self.detail(f"job {paid.id}: {paid.status}; order paid at {order.paid_at:%H:%M:%S}")
        replay = replay_job(
            paid.id,
            scope=ReadScope.ADMIN,
            reason="demo: the payment provider asked for a re-confirmation",
            request_key=f"demo-replay:{order.reference}",
        )
        self.detail(
            f"replay_job made job {replay.job_id} ({replay.disposition}; a rerun of the demo "
            "finds the same one), a new run-1 job with the same payload"
        )
        self.run_command("runledger_worker", "--burst", "--job-type", PAYMENT_JOB_TYPE)
        replayed = Job.objects.get(pk=replay.job_id)
        self.detail(f"replay job {replayed.id}: {replayed.status}, output {replayed.output}")

    # -- a periodic schedule, declared in shop/jobs.py -------------------------------------------

    def periodic_schedule(self) -> None:
        """Show the declared daily schedule with its next fires, run it now as an operator
        would from the admin, and let the worker run its job."""
        from example_project.shop.jobs import DAILY_SALES_JOB_TYPE, DAILY_SALES_SCHEDULE
        from runledger_django import trigger_schedule
        from runledger_django.worker.scheduler import sync_declarations

        self.heading("A periodic schedule: schedule(...) in shop/jobs.py")
        self.detail(
            "Workers sync the declared schedules when they start (the code owns the cron, "
            "the zone and the payload; an operator's pause survives deploys) and fire them: "
            "exactly one job per fire, however many workers run."
        )
        sync_declarations()
        self.run_command("schedules", "--next", "3")
        earlier = (
            ScheduleFire.objects.filter(schedule__name=DAILY_SALES_SCHEDULE, kind="manual")
            .exclude(job=None)
            .first()
        )
        if earlier is not None and earlier.job_id is not None:
            job_id = earlier.job_id
            self.detail(f"run now (the admin's action) already made job {job_id}")
        else:
            job_id = trigger_schedule(DAILY_SALES_SCHEDULE)
            self.detail(f"run now (the admin's action): job {job_id}")
        self.run_command("runledger_worker", "--burst", "--job-type", DAILY_SALES_JOB_TYPE)
        job = Job.objects.get(pk=job_id)
        self.detail(f"job {job.id}: {job.status}, output {json.dumps(job.output, sort_keys=True)}")

    # -- the fulfilment workflow the checkout started --------------------------------------------

    def fulfilment(self) -> None:
        """Run the fulfilment workflow of the demo order to its end and show each step."""
        self.heading("The order's fulfilment workflow: charge, reserve, ship, notify")
        self.detail(
            "The checkout started it with the order: charge and reserve ran first (the only "
            "steps with jobs at the start), ship was released in the transaction that recorded "
            "the second of them succeeding, and notify after ship, whatever happened to it."
        )
        run = WorkflowRun.objects.get(
            workflow_type="shop.fulfil",
            idempotency_key=fulfilment_key(str(GOOD_CHECKOUT["reference"])),
        )
        worker = ("runledger_worker", "--burst", *_job_type_args(FULFIL_JOB_TYPES))
        for _ in range(MAX_BURSTS):
            run.refresh_from_db()
            if run.status not in ("RUNNING", "WAITING_FOR_EXTERNAL"):
                break
            self.run_command(*worker)
        run.refresh_from_db()
        self.detail(f"workflow run {run.id}: {run.status}")
        steps = WorkflowStep.objects.filter(workflow_run_id=run.id).order_by("id")
        for step in steps.values("step_key", "status", "output"):
            output = json.dumps(step["output"], sort_keys=True) if step["output"] else "-"
            self.detail(f"  {step['step_key']}: {step['status']}, output {output}")
        self.detail(
            f"its graph: http://127.0.0.1:8000/admin/runledger/workflowrun/{run.id}/change/"
        )

    def prepare_admin(self, *, reset_password: bool) -> None:
        self.heading("Browse it all in the Django admin")
        user_model = get_user_model()
        user = user_model.objects.filter(username=ADMIN_USERNAME).first()
        password: str | None = None
        if user is None:
            password = secrets.token_urlsafe(12)
            user_model.objects.create_superuser(ADMIN_USERNAME, "admin@example.com", password)
            self.detail(f"created superuser {ADMIN_USERNAME!r} for this local demo only")
        elif reset_password:
            password = secrets.token_urlsafe(12)
            user.set_password(password)
            user.save(update_fields=["password"])
            self.detail(f"gave superuser {ADMIN_USERNAME!r} a new password")
        else:
            self.detail(
                f"superuser {ADMIN_USERNAME!r} already exists; its password is unchanged "
                "(python3 dev.py example --reset-admin-password gives it a new one)"
            )
        if password is not None:
            self.detail(f"username: {ADMIN_USERNAME}   password: {password}")
        self.detail(f"start the server:  {_python()} manage.py runserver")
        self.detail("then open:         http://127.0.0.1:8000/admin/")
        self.detail(
            "there, open Dead letters, tick the shop.notify_warehouse job and run the action "
            '"Requeue the selected jobs"'
        )
        self.detail(
            f"then run it again:  {_python()} manage.py runledger_worker --burst "
            "(run 2: the warehouse answers)"
        )
        self.say()


def _job_type_args(job_types: tuple[str, ...]) -> list[str]:
    return [arg for job_type in job_types for arg in ("--job-type", job_type)]


def _database_now() -> dt.datetime:
    """The database clock: job schedules are written on it."""
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the database did not tell its time")
    value: dt.datetime = row[0]
    return value


@contextmanager
def _quiet_log(name: str) -> Iterator[None]:
    """Only errors from logger ``name`` while the block runs."""
    logger = logging.getLogger(name)
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _python() -> str:
    """How to call this interpreter from the project root (the venv dev.py made, usually)."""
    root = Path(settings.BASE_DIR)
    link = root / ".venv" / "bin" / "python"
    executable = Path(sys.executable)
    if link.exists() and link.resolve() == executable.resolve():
        return ".venv/bin/python"
    try:
        return str(executable.relative_to(root))
    except ValueError:
        return str(executable)
