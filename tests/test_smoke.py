"""A first end-to-end check that the schema migrates and the public API round-trips."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from runledger_django import ReadScope, promote_intents, record_intent
from runledger_django.models import Job, JobEnqueueIntent

pytestmark = pytest.mark.django_db(transaction=True)


def test_record_then_promote__creates_one_job(make_definition: Callable[..., object]) -> None:
    make_definition()
    outcome = record_intent("jobs.test.enqueue_intent", {"n": 1}, idempotency_key="smoke")
    report = promote_intents(["jobs.test.enqueue_intent"])
    intent = JobEnqueueIntent.objects.get(id=outcome.intent_id)
    assert report.inserted_jobs == 1
    assert intent.state.status == "PROMOTED"
    assert intent.promoted_job_id is not None
    assert Job.objects.filter(id=intent.promoted_job_id).exists()
    assert ReadScope.GLOBAL.kind == "global"
