"""OpenTelemetry spans of the bulk producers: one PRODUCER span per batch (``create`` for
``record_intents``, ``send`` for ``enqueue_jobs``) with ``messaging.batch.message_count``, and
its context stored beside every row the batch inserted, never beside a row it found.

``transaction=True``: promotion owns its transaction.
"""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from runledger_django import (
    IntentRequest,
    JobRequest,
    RunledgerError,
    enqueue_jobs,
    promote_intents,
    record_intent,
    record_intents,
)
from runledger_django.models import Job, JobEnqueueIntent
from tests.conftest import TEST_JOB_TYPE, MakeDefinition
from tests.tracing.fixtures import Spans
from tests.tracing.test_spans import attributes, traceparent

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = TEST_JOB_TYPE
OTHER = "jobs.tracing.other"


@pytest.fixture(autouse=True)
def definitions(make_definition: MakeDefinition) -> None:
    make_definition()
    make_definition(OTHER)


def test_record_intents__one_job_type__one_create_span_its_context_on_each_new_row(
    spans: Spans,
) -> None:
    found = record_intent(TYPE, {"n": 0}, idempotency_key="before").intent_id
    first_context = {"traceparent": traceparent(spans.one(f"create {TYPE}"))}
    spans.exporter.clear()

    outcomes = record_intents(
        [IntentRequest(TYPE, {"n": n}, idempotency_key=f"k{n}") for n in range(3)]
        + [IntentRequest(TYPE, {"n": 0}, idempotency_key="before")]
    )

    create = spans.one(f"create {TYPE}")
    assert create.kind == SpanKind.PRODUCER
    assert attributes(create) == {
        "messaging.system": "runledger",
        "messaging.operation.name": "create",
        "messaging.operation.type": "create",
        "messaging.batch.message_count": 4,
        "messaging.destination.name": TYPE,
        "runledger.api": "record_intents",
    }
    contexts = {
        row.id: row.trace_context
        for row in JobEnqueueIntent.objects.filter(id__in=[o.intent_id for o in outcomes])
    }
    assert [contexts[o.intent_id] for o in outcomes[:3]] == [
        {"traceparent": traceparent(create)}
    ] * 3
    # The row the batch found keeps the context it was recorded with.
    assert outcomes[3].intent_id == found
    assert contexts[found] == first_context


def test_record_intents__promoted__each_job_carries_its_intents_context(spans: Spans) -> None:
    record_intents([IntentRequest(TYPE, {"n": n}, idempotency_key=f"k{n}") for n in range(2)])
    create = spans.one(f"create {TYPE}")

    assert promote_intents([TYPE]).inserted_jobs == 2

    assert [job.trace_context for job in Job.objects.all()] == [
        {"traceparent": traceparent(create)}
    ] * 2


def test_enqueue_jobs__two_job_types__one_send_span_without_a_destination(spans: Spans) -> None:
    outcomes = enqueue_jobs([JobRequest(TYPE, {}), JobRequest(OTHER, {}, idempotency_key="k")])

    send = spans.one("send")
    assert send.kind == SpanKind.PRODUCER
    assert attributes(send)["messaging.batch.message_count"] == 2
    assert attributes(send)["runledger.api"] == "enqueue_jobs"
    assert "messaging.destination.name" not in attributes(send)
    assert [Job.objects.get(id=o.job_id).trace_context for o in outcomes] == [
        {"traceparent": traceparent(send)}
    ] * 2


def test_enqueue_jobs__refused__span_error_type_is_the_product_code(spans: Spans) -> None:
    with pytest.raises(RunledgerError) as info:
        enqueue_jobs([JobRequest(TYPE, {}), JobRequest("jobs.tracing.undefined", {})])

    send = spans.one("send")
    assert info.value.code == "job.definition_not_found_or_disabled"
    assert attributes(send)["error.type"] == info.value.code
    assert send.status.status_code == StatusCode.ERROR
