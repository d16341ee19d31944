"""The example project's main job: the whole runledger story, told step by step.

``python3 dev.py example`` runs it. Every step is safe to repeat: a second run finds the
schema, the job type, the order, its intent and the admin user already there, and says so.
"""

from __future__ import annotations

import io
import json
import logging
import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from example_project.shop.models import Order
from example_project.shop.views import RECEIPT_JOB_TYPE
from runledger_django import ReadScope, get_intent
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent

ADMIN_USERNAME = "admin"
GOOD_CHECKOUT = {"reference": "demo-1001", "email": "ada@example.com", "total_cents": 4200}
FAILING_CHECKOUT = {
    "reference": "demo-1002",
    "email": "grace@example.com",
    "total_cents": 1999,
    "fail_after_recording": True,
}
RECEIPT_DEFINITION = {"max_attempts": 5, "default_timeout_seconds": 60, "default_priority": 100}


class Command(BaseCommand):
    help = (
        "Run the example story: migrate, define job types, check out through the view, "
        "promote the intents, print intent metrics and prepare the admin."
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
            "runledger_django example: a shop records each order and the request for its "
            "receipt in one transaction."
        )
        self.say(f"Database: {self.describe_database()}")
        self.migrate()
        self.define_job_types()
        client = Client()
        intent_id = self.checkout(client)
        self.retry_checkout(client, intent_id)
        self.failing_checkout(client)
        self.promote(intent_id)
        self.metrics()
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
        """Run one of runledger's management commands and show its output indented."""
        out = io.StringIO()
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

    def define_job_types(self) -> None:
        self.heading("Define the job types promotion may enqueue")
        definition, created = JobDefinition.objects.get_or_create(
            job_type=RECEIPT_JOB_TYPE, defaults=RECEIPT_DEFINITION
        )
        # get_or_create, not update_or_create: an operator's later changes (such as disabling
        # the type in the admin) survive a second run.
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
            "The view creates the order and calls record_intent() in the same atomic block."
        )
        status, body = self.post_checkout(client, GOOD_CHECKOUT)
        if status not in (200, 201):
            raise RuntimeError(f"checkout failed with HTTP {status}: {body}")
        intent = body["intent"]
        if body["created"]:
            self.detail(f"HTTP {status}: order {reference} created (id {body['order_id']})")
        else:
            self.detail(f"HTTP {status}: order {reference} already existed (an earlier run)")
        self.detail(
            f"intent {intent['intent_id']}: {intent['disposition']}, status {intent['status']}"
        )
        return str(intent["intent_id"])

    def retry_checkout(self, client: Client, intent_id: str) -> None:
        self.heading("Retry the identical checkout, as a client whose response was lost would")
        status, body = self.post_checkout(client, GOOD_CHECKOUT)
        intent = body["intent"]
        same = "the same" if intent["intent_id"] == intent_id else "a DIFFERENT"
        self.detail(
            f"HTTP {status}: {same} order and {same} intent ({intent['disposition']}, "
            f"status {intent['status']}); strict idempotency: one order, one intent"
        )

    def failing_checkout(self, client: Client) -> None:
        reference = FAILING_CHECKOUT["reference"]
        self.heading(f"Check out order {reference}, failing after the intent was recorded")
        with _quiet_request_log():  # the 409 is the point here, not a warning
            status, body = self.post_checkout(client, FAILING_CHECKOUT)
        orders = Order.objects.filter(reference=reference).count()
        intents = JobEnqueueIntent.objects.filter(
            job_type=RECEIPT_JOB_TYPE, idempotency_key=f"receipt:{reference}"
        ).count()
        self.detail(f"HTTP {status}: {body.get('error')}")
        self.detail(
            f"the rollback removed both: {orders} orders and {intents} intents for {reference}"
        )

    def promote(self, intent_id: str) -> None:
        self.heading("Promote pending intents into the job queue")
        self.run_command("promote_intents")
        intent = get_intent(intent_id, scope=ReadScope.ADMIN)
        if intent is None:
            raise RuntimeError(f"intent {intent_id} disappeared")
        self.detail(f"intent {intent.id} is now {intent.status}")
        if intent.promoted_job_id is not None:
            job = Job.objects.get(id=intent.promoted_job_id)
            self.detail(
                f"job {job.id}: {job.job_type_id}, status {job.status}, "
                f"{job.max_attempts} attempts, priority {job.priority}"
            )
        self.detail(
            "runledger_django has no worker runtime yet: the job waits in runledger_job_queue "
            "for a worker of your own."
        )

    def metrics(self) -> None:
        self.heading("Intent metrics per job type")
        self.run_command("intent_metrics")

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
        self.say()


@contextmanager
def _quiet_request_log() -> Iterator[None]:
    logger = logging.getLogger("django.request")
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
