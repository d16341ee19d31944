"""OpenTelemetry spans with the SDK's in-memory exporter (reference observability 3 and its
checklist items 19 to 22): the PRODUCER spans of ``record_intent`` and ``enqueue_job``, the
trace context stored beside the row and carried through promotion, and the CONSUMER span of
each run, linked to (or, by setting, a child of) the span that enqueued the job.

``transaction=True`` throughout: promotion and ``run_jobs`` own their transactions.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pytest
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode, TraceState
from pytest_django import Settings as SettingsWrapper

from runledger_django import (
    RunledgerError,
    TerminalJobError,
    enqueue_job,
    promote_intents,
    record_intent,
    run_jobs,
)
from runledger_django.domain import ClaimedJob, JobLease
from runledger_django.models import Job, JobAttempt, JobEnqueueIntent
from runledger_django.services import tracing
from runledger_django.worker.context import JobContext
from tests.conftest import TEST_JOB_TYPE, MakeDefinition
from tests.tracing.fixtures import Register, Spans

pytestmark = pytest.mark.django_db(transaction=True)

TYPE = TEST_JOB_TYPE
REQUEST = "GET /checkout"


@pytest.fixture(autouse=True)
def definition(make_definition: MakeDefinition) -> None:
    make_definition()


@pytest.fixture
def handled(register: Register) -> list[dict[str, Any]]:
    """A handler of the test type whose payload says what to do; it reports what it saw of
    the current trace while it ran."""
    seen: list[dict[str, Any]] = []

    def handler(job: JobContext) -> Any:
        current = trace.get_current_span().get_span_context()
        with trace.get_tracer("tests.tracing.handler").start_as_current_span("inside") as inner:
            inner_parent = inner.parent  # type: ignore[attr-defined]
        seen.append(
            {
                "span_id": current.span_id,
                "inner_parent": None if inner_parent is None else inner_parent.span_id,
                "baggage": dict(baggage.get_all()),
            }
        )
        action = job.payload.get("do")
        if action == "fail":
            raise ValueError("boom")
        if action == "terminal":
            raise TerminalJobError("declined", code="billing.card_declined")
        return None

    register(TYPE, handler, max_attempts=3)
    return seen


def traceparent(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def record(key: str = "k", payload: Any = None) -> uuid.UUID:
    return record_intent(
        TYPE, {"n": 1} if payload is None else payload, idempotency_key=key
    ).intent_id


def run_all() -> None:
    promote_intents([TYPE])
    run_jobs([TYPE])


def job_of(intent_id: uuid.UUID) -> Job:
    job_id = JobEnqueueIntent.objects.get(id=intent_id).promoted_job_id
    assert job_id is not None, "the intent was not promoted"
    return Job.objects.get(id=job_id)


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


# --- producers -------------------------------------------------------------------------------


def test_record_intent__in_a_request__create_span_under_it_and_its_context_stored(
    spans: Spans, tracer: trace.Tracer
) -> None:
    with tracer.start_as_current_span(REQUEST, kind=SpanKind.SERVER):
        intent_id = record()

    request, create = spans.one(REQUEST), spans.one(f"create {TYPE}")
    intent = JobEnqueueIntent.objects.get(id=intent_id)
    assert create.kind == SpanKind.PRODUCER
    assert create.parent is not None and create.parent.span_id == request.context.span_id
    assert attributes(create) == {
        "messaging.system": "runledger",
        "messaging.operation.name": "create",
        "messaging.operation.type": "create",
        "messaging.destination.name": TYPE,
        "messaging.message.id": str(intent_id),
        "runledger.api": "record_intent",
        "runledger.intent.status": "PENDING",
        "runledger.disposition": "inserted",
    }
    assert intent.trace_context == {"traceparent": traceparent(create)}
    assert "traceparent" not in json.dumps(intent.enqueue_request)


def test_enqueue_job__send_span_and_its_context_on_the_job(spans: Spans) -> None:
    outcome = enqueue_job(TYPE, {"n": 2})

    send = spans.one(f"send {TYPE}")
    assert send.kind == SpanKind.PRODUCER
    assert attributes(send)["messaging.operation.type"] == "send"
    assert attributes(send)["messaging.message.id"] == str(outcome.job_id)
    assert attributes(send)["runledger.api"] == "enqueue_job"
    assert Job.objects.get(id=outcome.job_id).trace_context == {"traceparent": traceparent(send)}


def test_enqueue_job__no_definition__span_error_type_is_the_product_code(spans: Spans) -> None:
    with pytest.raises(RunledgerError) as info:
        enqueue_job("jobs.tracing.undefined", {})

    send = spans.one("send jobs.tracing.undefined")
    assert info.value.code == "job.definition_not_found_or_disabled"
    assert attributes(send)["error.type"] == info.value.code
    assert send.status.status_code == StatusCode.ERROR


def test_record_intent__promoted__the_job_carries_the_intents_context(spans: Spans) -> None:
    intent_id = record()
    promote_intents([TYPE])

    intent = JobEnqueueIntent.objects.get(id=intent_id)
    job = job_of(intent_id)
    assert (
        job.trace_context
        == intent.trace_context
        == {"traceparent": traceparent(spans.one(f"create {TYPE}"))}
    )


def test_promote__a_pass_that_promoted__one_client_send_span_with_the_batch_count(
    spans: Spans,
) -> None:
    for key in ("a", "b", "c"):
        record(key)
    record("a")  # an identical retry: still three intents

    promote_intents([TYPE])
    promote_intents([TYPE])  # idle: no span

    send = spans.one("send")
    assert send.kind == SpanKind.CLIENT
    assert attributes(send) == {
        "messaging.system": "runledger",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "runledger.api": "promote_intents",
        "messaging.batch.message_count": 3,
        "runledger.promotion.inserted_jobs": 3,
        "runledger.promotion.existing_jobs": 0,
        "runledger.promotion.conflicted": 0,
        "runledger.promotion.definition_became_unavailable": 0,
        "runledger.promotion.retry_deferred": 0,
    }
    assert send.start_time is not None and send.end_time is not None
    assert send.start_time < send.end_time


# --- item 19: the run's span and the enqueuing span --------------------------------------------


def test_run__promoted_from_a_traced_request__process_span_links_to_the_create_span(
    spans: Spans, tracer: trace.Tracer, handled: list[dict[str, Any]]
) -> None:
    with tracer.start_as_current_span(REQUEST, kind=SpanKind.SERVER):
        intent_id = record()
    run_all()

    create, process = spans.one(f"create {TYPE}"), spans.one(f"process {TYPE}")
    job = job_of(intent_id)
    attempt = JobAttempt.objects.get(job_id=job.id)
    assert process.kind == SpanKind.CONSUMER
    assert process.parent is None  # a trace of its own: the job may run hours later
    assert [link.context.span_id for link in process.links] == [create.context.span_id]
    assert [link.context.trace_id for link in process.links] == [create.context.trace_id]
    assert process.context.trace_id != create.context.trace_id
    assert attributes(process) == {
        "messaging.system": "runledger",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": TYPE,
        "messaging.message.id": str(job.id),
        "messaging.client.id": attempt.worker_id,
        "runledger.job.attempt": 1,
        "runledger.job.run_number": 1,
        "runledger.job.outcome": "succeeded",
    }
    # The span is current while the handler runs: the handler's own spans nest inside it.
    assert handled == [
        {"span_id": process.context.span_id, "inner_parent": process.context.span_id, "baggage": {}}
    ]


def test_run__child_setting__process_span_is_a_child_of_the_create_span(
    spans: Spans,
    tracer: trace.Tracer,
    handled: list[dict[str, Any]],
    settings: SettingsWrapper,
) -> None:
    settings.RUNLEDGER = {"TRACING_RUN_PARENT": "child"}
    with tracer.start_as_current_span(REQUEST, kind=SpanKind.SERVER):
        record()
    run_all()

    create, process = spans.one(f"create {TYPE}"), spans.one(f"process {TYPE}")
    assert process.parent is not None and process.parent.is_remote
    assert process.parent.span_id == create.context.span_id
    assert process.context.trace_id == create.context.trace_id
    assert list(process.links) == []


def test_run__none_setting__process_span_neither_linked_nor_parented(
    spans: Spans, tracer: trace.Tracer, handled: list[dict[str, Any]], settings: SettingsWrapper
) -> None:
    settings.RUNLEDGER = {"TRACING_RUN_PARENT": "none"}
    with tracer.start_as_current_span(REQUEST):
        record()
    run_all()

    process = spans.one(f"process {TYPE}")
    assert (process.parent, list(process.links)) == (None, [])


def test_run__job_enqueued_without_a_trace__root_process_span_without_links(
    spans: Spans, handled: list[dict[str, Any]], settings: SettingsWrapper
) -> None:
    settings.RUNLEDGER = {"TRACING_ENABLED": False}
    job_id = enqueue_job(TYPE, {}).job_id  # recorded while tracing was off: no context
    settings.RUNLEDGER = {}
    run_all()

    process = spans.one(f"process {TYPE}")
    assert Job.objects.get(id=job_id).trace_context is None
    assert (process.parent, list(process.links)) == (None, [])
    assert spans.named(f"send {TYPE}") == []


def test_run__worker_thread_inside_another_span__run_is_not_its_child(
    spans: Spans, tracer: trace.Tracer, handled: list[dict[str, Any]]
) -> None:
    record()
    with tracer.start_as_current_span("the caller of run_jobs"):
        run_all()

    assert spans.one(f"process {TYPE}").parent is None


# --- item 20: identical retries from another trace ---------------------------------------------


def test_record_intent__same_key_and_payload_from_another_trace__existing_keeps_first_context(
    spans: Spans, tracer: trace.Tracer
) -> None:
    with tracer.start_as_current_span("first request"):
        first = record_intent(TYPE, {"n": 1}, idempotency_key="order-7")
    with tracer.start_as_current_span("retried request"):
        retry = record_intent(TYPE, {"n": 1}, idempotency_key="order-7")
    promote_intents([TYPE])

    first_create, retry_create = spans.named(f"create {TYPE}")
    assert first_create.context.trace_id != retry_create.context.trace_id
    assert (retry.intent_id, retry.disposition) == (first.intent_id, "existing")
    assert attributes(retry_create)["runledger.disposition"] == "existing"
    assert "error.type" not in attributes(retry_create)
    intent = JobEnqueueIntent.objects.get(id=first.intent_id)
    stored = {"traceparent": traceparent(first_create)}
    assert intent.trace_context == stored
    assert job_of(first.intent_id).trace_context == stored


def test_enqueue_job__same_key_from_another_trace__existing_job_keeps_first_context(
    spans: Spans, tracer: trace.Tracer
) -> None:
    with tracer.start_as_current_span("first request"):
        first = enqueue_job(TYPE, {"n": 1}, idempotency_key="order-8")
    with tracer.start_as_current_span("retried request"):
        retry = enqueue_job(TYPE, {"n": 1}, idempotency_key="order-8")

    first_send = spans.named(f"send {TYPE}")[0]
    assert (retry.job_id, retry.disposition) == (first.job_id, "existing")
    assert Job.objects.get(id=first.job_id).trace_context == {
        "traceparent": traceparent(first_send)
    }


# --- item 21: baggage and oversized fields ------------------------------------------------------


def test_record_intent__baggage_in_context__not_stored_by_default(
    spans: Spans, tracer: trace.Tracer, handled: list[dict[str, Any]]
) -> None:
    token = context.attach(baggage.set_baggage("user.email", "someone@example.com"))
    try:
        with tracer.start_as_current_span(REQUEST):
            intent_id = record()
    finally:
        context.detach(token)
    run_all()

    stored = JobEnqueueIntent.objects.get(id=intent_id).trace_context
    assert stored is not None and set(stored) == {"traceparent"}
    assert handled[0]["baggage"] == {}


def test_record_intent__baggage_enabled__stored_and_current_while_the_handler_runs(
    spans: Spans,
    tracer: trace.Tracer,
    handled: list[dict[str, Any]],
    settings: SettingsWrapper,
) -> None:
    settings.RUNLEDGER = {"TRACING_BAGGAGE": True}
    token = context.attach(baggage.set_baggage("tenant.tier", "gold"))
    try:
        with tracer.start_as_current_span(REQUEST):
            intent_id = record()
    finally:
        context.detach(token)
    run_all()

    stored = JobEnqueueIntent.objects.get(id=intent_id).trace_context
    assert stored is not None and stored["baggage"] == "tenant.tier=gold"
    assert handled[0]["baggage"] == {"tenant.tier": "gold"}


def test_record_intent__oversized_tracestate__dropped_and_the_intent_recorded(
    spans: Spans, tracer: trace.Tracer
) -> None:
    big = TraceState([(f"vendor{i}", "v" * 200) for i in range(8)])  # about 1.7 kB
    small = TraceState([("vendor", "ok")])
    for key, state in (("big", big), ("small", small)):
        remote = trace.NonRecordingSpan(
            trace.SpanContext(
                trace_id=0x1234,
                span_id=0x5678,
                is_remote=True,
                trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                trace_state=state,
            )
        )
        with trace.use_span(remote), tracer.start_as_current_span(f"request {key}"):
            record(key)

    stored = {
        intent.idempotency_key: intent.trace_context for intent in JobEnqueueIntent.objects.all()
    }
    assert stored["big"] is not None and set(stored["big"]) == {"traceparent"}
    assert stored["small"] is not None and stored["small"]["tracestate"] == "vendor=ok"


def test_encode_carrier__each_field_against_its_limit() -> None:
    parent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    carrier = {
        "traceparent": parent,
        "tracestate": "a=" + "x" * 510,  # 512: kept
        "baggage": "k=" + "v" * 8190,  # 8192: kept when enabled
        "b3": "x" * 513,  # another propagator's field past its limit: dropped
    }

    with_baggage = json.loads(tracing.encode_carrier(carrier, baggage=True) or "{}")
    without = json.loads(tracing.encode_carrier(carrier, baggage=False) or "{}")

    assert set(with_baggage) == {"traceparent", "tracestate", "baggage"}
    assert set(without) == {"traceparent", "tracestate"}
    assert tracing.encode_carrier({"tracestate": "a=" + "x" * 511}, baggage=True) is None


# --- item 22: failures --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "outcome"),
    [("fail", "retried"), ("terminal", "dead_lettered")],
)
def test_run__handler_fails__error_status_and_error_type_is_the_product_code(
    spans: Spans, handled: list[dict[str, Any]], action: str, outcome: str
) -> None:
    job_id = enqueue_job(TYPE, {"do": action}).job_id
    run_jobs([TYPE])

    process = spans.one(f"process {TYPE}")
    code = JobAttempt.objects.get(job_id=job_id).error_code
    assert code is not None and code.startswith(("job.", "billing."))
    assert attributes(process)["error.type"] == code
    assert attributes(process)["runledger.job.outcome"] == outcome
    assert process.status.status_code == StatusCode.ERROR
    if action == "terminal":
        assert code == "billing.card_declined"


def test_run__handler_succeeds__no_error_type_and_status_unset(
    spans: Spans, handled: list[dict[str, Any]]
) -> None:
    enqueue_job(TYPE, {"do": "nothing"})
    run_jobs([TYPE])

    process = spans.one(f"process {TYPE}")
    assert "error.type" not in attributes(process)
    assert process.status.status_code == StatusCode.UNSET


def test_process__the_run_itself_raises__error_type_is_the_class_and_it_propagates(
    spans: Spans,
) -> None:
    """``execute`` never raises for a handler; if the worker's own code does, the span still
    ends, with the exception's class as ``error.type``."""
    now = dt.datetime.now(dt.UTC)
    claimed = ClaimedJob(
        lease=JobLease(job_id=uuid.uuid4(), run_number=1, attempt=1, worker_id="w"),
        job_type=TYPE,
        organization_id=None,
        payload={},
        max_attempts=3,
        timeout_seconds=60,
        checkpoint=None,
        claimed_at=now,
        lease_expires_at=now,
        trace_context="not json",  # a hand-edited row: ignored, never fatal
    )

    def explode() -> Any:
        raise KeyError("worker bug")

    with pytest.raises(KeyError):
        tracing.process(claimed, explode)

    process = spans.one(f"process {TYPE}")
    assert attributes(process)["error.type"] == "builtins.KeyError"
    assert process.status.status_code == StatusCode.ERROR
    assert [event.name for event in process.events] == ["exception"]
    assert (process.parent, list(process.links)) == (None, [])
