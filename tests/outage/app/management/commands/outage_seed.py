"""``outage_seed``: what the outage tests need in the throwaway database, written through the
public API (so they run against the same code a project uses)."""

from __future__ import annotations

import uuid
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from runledger_django import enqueue_job, record_intent
from runledger_django.models import JobDefinition

from ...jobs import JOB_TYPE


class Command(BaseCommand):
    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--intents", type=int, default=0)
        parser.add_argument("--jobs", type=int, default=0)

    def handle(self, *args: Any, **options: Any) -> None:
        JobDefinition.objects.get_or_create(job_type=JOB_TYPE)
        for n in range(options["intents"]):
            record_intent(JOB_TYPE, {"n": n}, idempotency_key=f"intent-{uuid.uuid4()}")
        for n in range(options["jobs"]):
            enqueue_job(JOB_TYPE, {"n": n})
