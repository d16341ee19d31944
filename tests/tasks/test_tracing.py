"""The Tasks backend's enqueue in OpenTelemetry: a PRODUCER span ``create <job_type>`` whose
context is stored beside the intent, and the task's run linked to it (tests/tracing has the
rest)."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; test_import.py covers Django 5.2"
)

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from runledger_django.models import JobEnqueueIntent
from runledger_django.tasks import with_idempotency_key
from runledger_django.tasks.naming import task_job_type
from tests.tasks.app_tasks import add
from tests.tasks.test_worker import drain
from tests.tracing.fixtures import Spans, spans, tracer

__all__ = ["spans", "tracer"]  # the fixtures this module uses

pytestmark = pytest.mark.django_db(transaction=True)

ADD_TYPE = task_job_type("default", add.module_path)


def test_enqueue__in_a_request__create_span_stored_and_the_run_links_to_it(
    spans: Spans, tracer: trace.Tracer
) -> None:
    with tracer.start_as_current_span("POST /orders", kind=SpanKind.SERVER):
        result = add.enqueue(2, 3)
    drain()

    create, process = spans.one(f"create {ADD_TYPE}"), spans.one(f"process {ADD_TYPE}")
    intent = JobEnqueueIntent.objects.get(id=result.id)
    assert create.kind == SpanKind.PRODUCER
    assert create.attributes is not None
    assert create.attributes["runledger.api"] == "django.tasks"
    assert create.attributes["messaging.message.id"] == result.id
    assert intent.trace_context is not None
    assert intent.trace_context["traceparent"].split("-")[2] == f"{create.context.span_id:016x}"
    assert [link.context.span_id for link in process.links] == [create.context.span_id]


def test_enqueue__keyed_retry_from_another_trace__same_result_first_context_kept(
    spans: Spans, tracer: trace.Tracer
) -> None:
    keyed = with_idempotency_key(add, "order-9")
    with tracer.start_as_current_span("first"):
        first = keyed.enqueue(1, 1)
    with tracer.start_as_current_span("retry"):
        retry = keyed.enqueue(1, 1)

    first_create = spans.named(f"create {ADD_TYPE}")[0]
    stored = JobEnqueueIntent.objects.get(id=first.id).trace_context
    assert retry.id == first.id
    assert stored is not None
    assert stored["traceparent"].split("-")[2] == f"{first_create.context.span_id:016x}"
