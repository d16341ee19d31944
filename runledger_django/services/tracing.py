"""OpenTelemetry spans for enqueues and runs, on ``opentelemetry-api`` alone (optional).

The API is a no-op until the host installs and sets up an SDK, so this module asks first
whether spans can be recorded at all (the API importable, a tracer provider other than the
API's placeholder set, ``TRACING_ENABLED``) and otherwise steps aside: no span, nothing
stored, and the hot paths pay one check. Call sites hand it the work to wrap:

- ``produce``: ``record_intent`` and the Tasks backend's enqueue open a PRODUCER span
  ``create <job_type>``, ``enqueue_job`` one named ``send <job_type>``. The span's propagation
  fields, injected through the globally configured propagators (W3C trace context by default),
  are stored beside the row in ``trace_context``, never in the idempotency snapshot: a retry
  from another trace is still an identical request, and the first writer's context stays.
  Baggage is dropped unless ``TRACING_BAGGAGE``; an oversized field is dropped, never failing
  the enqueue. Promotion copies an intent's context to its job.
- ``process``: a run is a CONSUMER span ``process <job_type>``, current while the handler
  runs, so instrumentation of the handler's own calls nests inside it. It links to the
  enqueuing span (``TRACING_RUN_PARENT = "link"``), joins its trace (``"child"``) or neither
  (``"none"``). A failed attempt sets error status and ``error.type`` to the product error
  code.
- ``promotion``: a promotion pass that moved intents is a CLIENT span ``send`` with
  ``messaging.batch.message_count``; idle passes leave none.

Attribute names follow OpenTelemetry's messaging conventions (``messaging.*``); the rest are
``runledger.*``. Docs: docs/tracing.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Set
from dataclasses import replace
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeVar

from django.conf import settings as django_settings
from django.core.signals import setting_changed

from ..conf import DEFAULTS
from ..domain import (
    ClaimedJob,
    EnqueueOutcome,
    EnqueueRequest,
    IntentOutcome,
    PromotionReport,
)
from ..errors import RunledgerError

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

try:
    from opentelemetry import baggage as otel_baggage
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind, StatusCode
except ImportError:  # the opentelemetry extra is not installed: nothing is traced
    trace = None  # type: ignore[assignment]

T = TypeVar("T")
R = TypeVar("R", bound="RunLike")

TRACER_NAME = "runledger_django"
MESSAGING_SYSTEM = "runledger"
"""``messaging.system``: no well-known value applies, and the conventions allow a custom one."""

TRACESTATE_MAX_LENGTH = 512
"""Longest ``tracestate`` stored: W3C asks vendors to propagate at least 512 characters, and
anything longer is dropped whole (a truncated list would not parse)."""
BAGGAGE_MAX_LENGTH = 8192
"""Longest ``baggage`` stored (W3C baggage's own limit)."""
FIELD_MAX_LENGTH = 512
"""Longest value of any other propagation field (``traceparent`` is 55 characters)."""

FAILED_OUTCOMES = frozenset({"retried", "dead_lettered", "lease_lost", "persist_failed"})
"""Run outcomes whose span carries error status and ``error.type``."""


class RunLike(Protocol):
    """What ``process`` reads from a run's result (worker/execution.py ``JobRun``)."""

    @property
    def outcome(self) -> str: ...

    @property
    def error_code(self) -> str | None: ...


_tracer_of: tuple[object, Tracer] | None = None
"""The tracer, remembered for the provider it came from (SDK providers make a new tracer on
every ``get_tracer``)."""


class _Tracing(NamedTuple):
    """The tracer to record with and the settings of this call."""

    tracer: Tracer
    run_parent: str
    baggage: bool


_UNSET = object()
_settled: tuple[object, object, _Tracing | None] = (_UNSET, _UNSET, None)
"""The last answer of ``_tracing``, for the provider and the ``RUNLEDGER`` dict it was worked
out from: a run asks twice per job, and working it out again costs a few µs each time."""


def _tracing() -> _Tracing | None:
    """The tracer and the tracing settings, or None when nothing can be recorded.

    Worked out again only when the global tracer provider or the ``settings.RUNLEDGER`` object
    changes (``override_settings`` replaces it; a change in place is caught by the
    ``setting_changed`` signal), so the hot paths pay two identity checks.
    """
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    raw = getattr(django_settings, "RUNLEDGER", None)
    settled = _settled
    if settled[0] is provider and settled[1] is raw:
        return settled[2]
    return _settle(provider, raw)


def _settle(provider: object, raw: object) -> _Tracing | None:
    global _tracer_of, _settled
    tracing: _Tracing | None = None
    values = raw if isinstance(raw, dict) else {}
    if trace is not None and not isinstance(provider, trace.ProxyTracerProvider):
        # (The API's placeholder provider would only make invalid spans: none is made.)
        if values.get("TRACING_ENABLED", DEFAULTS["TRACING_ENABLED"]):
            remembered = _tracer_of
            if remembered is None or remembered[0] is not provider:
                remembered = (provider, provider.get_tracer(TRACER_NAME, _version()))  # type: ignore[attr-defined]
                _tracer_of = remembered
            tracing = _Tracing(
                tracer=remembered[1],
                run_parent=str(values.get("TRACING_RUN_PARENT", DEFAULTS["TRACING_RUN_PARENT"])),
                baggage=bool(values.get("TRACING_BAGGAGE", DEFAULTS["TRACING_BAGGAGE"])),
            )
    _settled = (provider, raw, tracing)
    return tracing


def _forget(*, setting: str = "", **kwargs: Any) -> None:
    """A changed ``RUNLEDGER`` setting: work the tracing settings out again."""
    global _settled
    if setting == "RUNLEDGER":
        _settled = (_UNSET, _UNSET, None)


setting_changed.connect(_forget, dispatch_uid="runledger_django.services.tracing")


def _version() -> str:
    """The instrumentation scope's version (the package's, as runledger_django reports it)."""
    try:
        return metadata.version("runledger-django")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def active() -> bool:
    """Whether spans are recorded now (the hooks' cheap guard)."""
    return _tracing() is not None


# --- enqueues -------------------------------------------------------------------------------


def produce(
    operation: Literal["create", "send"],
    api: str,
    request: EnqueueRequest,
    send: Callable[[EnqueueRequest], T],
) -> T:
    """Run ``send`` (the insert of ``request``) inside a PRODUCER span ``<operation>
    <job_type>`` whose context ``send`` receives in ``request.trace_context``.

    ``api`` names the caller (``runledger.api``: ``record_intent``, ``enqueue_job``,
    ``django.tasks``). Whatever ``send`` raises is raised unchanged, after the span records it.
    """
    tracing = _tracing()
    if tracing is None:
        return send(request)
    attributes: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
        "messaging.destination.name": request.job_type,
        "runledger.api": api,
    }
    with tracing.tracer.start_as_current_span(
        f"{operation} {request.job_type}",
        kind=SpanKind.PRODUCER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        carrier = current_carrier(baggage=tracing.baggage)
        try:
            outcome = send(request if carrier is None else replace(request, trace_context=carrier))
        except BaseException as exc:
            _failed(span, exc)
            raise
        if span.is_recording():
            _describe_enqueue(span, outcome)
        return outcome


def produce_batch(
    operation: Literal["create", "send"],
    api: str,
    job_types: Set[str],
    count: int,
    send: Callable[[str | None], T],
) -> T:
    """Run ``send`` (the insert of a batch) inside one PRODUCER span, ``<operation>
    <job_type>`` when the batch has one job type, else ``<operation>``, with
    ``messaging.batch.message_count``; ``send`` receives the span's context to store on every
    row (or None when nothing is traced)."""
    tracing = _tracing()
    if tracing is None:
        return send(None)
    attributes: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": operation,
        "messaging.batch.message_count": count,
        "runledger.api": api,
    }
    name: str = operation
    if len(job_types) == 1:
        (job_type,) = job_types
        attributes["messaging.destination.name"] = job_type
        name = f"{operation} {job_type}"
    with tracing.tracer.start_as_current_span(
        name,
        kind=SpanKind.PRODUCER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            return send(current_carrier(baggage=tracing.baggage))
        except BaseException as exc:
            _failed(span, exc)
            raise


def _describe_enqueue(span: Span, outcome: object) -> None:
    if isinstance(outcome, IntentOutcome):
        span.set_attribute("messaging.message.id", str(outcome.intent_id))
        span.set_attribute("runledger.intent.status", str(outcome.status))
    elif isinstance(outcome, EnqueueOutcome):
        span.set_attribute("messaging.message.id", str(outcome.job_id))
        span.set_attribute("runledger.job.status", str(outcome.status))
    disposition = getattr(outcome, "disposition", None)
    if disposition is not None:
        span.set_attribute("runledger.disposition", disposition)


def current_carrier(*, baggage: bool) -> str | None:
    """The current context's propagation fields, as the JSON text stored beside a row, or
    None when there is nothing to store (no valid span, or every field dropped)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return encode_carrier(carrier, baggage=baggage)


def encode_carrier(carrier: Mapping[str, str], *, baggage: bool) -> str | None:
    """``carrier`` as stored: baggage only when asked for, oversized fields left out."""
    kept: dict[str, str] = {}
    for name, value in carrier.items():
        if not isinstance(value, str):
            continue
        if name == "baggage":
            limit = BAGGAGE_MAX_LENGTH if baggage else -1
        elif name == "tracestate":
            limit = TRACESTATE_MAX_LENGTH
        else:
            limit = FIELD_MAX_LENGTH
        if len(value) <= limit:
            kept[name] = value
    if not kept:
        return None
    return json.dumps(kept, separators=(",", ":"), sort_keys=True)


def _decode_carrier(text: str | None) -> dict[str, str]:
    """A stored context, or nothing for one that is missing or does not decode (a row edited
    by hand must not fail its run)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


# --- promotion --------------------------------------------------------------------------------


def promotion(run: Callable[[], PromotionReport]) -> PromotionReport:
    """Run one promotion pass; a pass that moved intents (or failed) is a CLIENT span
    ``send`` with ``messaging.batch.message_count``. An idle pass leaves no span: a promoter
    polls, and a span per empty look would be noise, so the span is made once the pass is
    over, with the pass's start time. It links to no intent (their contexts stay on the rows;
    each job's run links to its own)."""
    tracing = _tracing()
    if tracing is None:
        return run()
    tracer = tracing.tracer
    started = time.time_ns()
    try:
        report = run()
    except BaseException as exc:
        span = tracer.start_span(
            "send", kind=SpanKind.CLIENT, start_time=started, attributes=_PROMOTION
        )
        _failed(span, exc)
        span.end()
        raise
    counts = {
        "runledger.promotion.inserted_jobs": report.inserted_jobs,
        "runledger.promotion.existing_jobs": report.existing_jobs,
        "runledger.promotion.conflicted": report.conflicted,
        "runledger.promotion.definition_became_unavailable": (report.definition_became_unavailable),
        "runledger.promotion.retry_deferred": report.retry_deferred,
    }
    if any(counts.values()):
        span = tracer.start_span(
            "send",
            kind=SpanKind.CLIENT,
            start_time=started,
            attributes={
                **_PROMOTION,
                "messaging.batch.message_count": report.total_promoted,
                **counts,
            },
        )
        span.end()
    return report


_PROMOTION: Mapping[str, Any] = {
    "messaging.system": MESSAGING_SYSTEM,
    "messaging.operation.name": "send",
    "messaging.operation.type": "send",
    "runledger.api": "promote_intents",
}


# --- runs -----------------------------------------------------------------------------------


def process(claimed: ClaimedJob, run: Callable[[], R]) -> R:
    """Run ``run`` (one attempt of ``claimed``) inside its CONSUMER span, current while the
    handler runs; the span's status and ``error.type`` come from the run's outcome."""
    tracing = _tracing()
    if tracing is None:
        return run()
    return process_traced(tracing, claimed, run)


def run_tracing() -> _Tracing | None:
    """What ``process_traced`` needs, or None when runs are not traced (the worker asks once
    per run, then either runs the job bare or hands this over)."""
    return _tracing()


CACHE_MAX = 256
"""Entries kept by each per-process cache below (cleared whole when full): job types' span
names and attributes, and stored contexts with what they decode to."""
_run_statics: dict[str, tuple[str, dict[str, Any]]] = {}
"""A job type's span name and the attributes every one of its runs shares, built once."""
_parents: dict[tuple[str | None, str, bool], tuple[Any, list[Any]]] = {}
"""A stored context's parent context and links, decoded once: the jobs of one request or one
bulk enqueue carry the same text, and contexts and links are immutable."""


def process_traced(tracing: _Tracing, claimed: ClaimedJob, run: Callable[[], R]) -> R:
    """``process`` once ``run_tracing`` said runs are traced."""
    job_type = claimed.job_type
    statics = _run_statics.get(job_type)
    if statics is None:
        statics = _remember(
            _run_statics,
            job_type,
            (
                f"process {job_type}",
                {
                    "messaging.system": MESSAGING_SYSTEM,
                    "messaging.operation.name": "process",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": job_type,
                },
            ),
        )
    lease = claimed.lease
    attributes = statics[1].copy()
    attributes["messaging.message.id"] = str(lease.job_id)
    attributes["messaging.client.id"] = lease.worker_id
    attributes["runledger.job.attempt"] = lease.attempt
    attributes["runledger.job.run_number"] = lease.run_number
    key = (claimed.trace_context, tracing.run_parent, tracing.baggage)
    found = _parents.get(key)
    if found is None:
        found = _remember(_parents, key, _run_parent(claimed.trace_context, tracing))
    parent, links = found
    span = tracing.tracer.start_span(
        statics[0],
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
    )
    # One attach: the span and, in "link" mode, the restored baggage become current together.
    # A span the sampler dropped is made current too: the handler's own spans follow its
    # decision.
    token = otel_context.attach(trace.set_span_in_context(span, parent))
    try:
        result = run()
    except BaseException as exc:
        _failed(span, exc)
        raise
    else:
        if span.is_recording():
            span.set_attribute("runledger.job.outcome", result.outcome)
            if result.outcome in FAILED_OUTCOMES:
                code = result.error_code or result.outcome
                span.set_attribute("error.type", code)
                span.set_status(StatusCode.ERROR, code)
        return result
    finally:
        otel_context.detach(token)
        span.end()


K = TypeVar("K")
V = TypeVar("V")


def _remember(cache: dict[K, V], key: K, value: V) -> V:
    if len(cache) >= CACHE_MAX:
        cache.clear()
    cache[key] = value
    return value


def _run_parent(stored: str | None, tracing: _Tracing) -> tuple[Any, list[Any]]:
    """The context a run's span starts in, and its links, from the job's stored context.

    Never the worker thread's current context: a run is not part of whatever the worker did
    before it.
    """
    carrier = _decode_carrier(stored)
    with_baggage = tracing.baggage
    if not with_baggage:
        carrier.pop("baggage", None)
    mode = tracing.run_parent
    if not carrier or mode == "none":
        return otel_context.Context(), []
    extracted = propagate.extract(carrier, context=otel_context.Context())
    if mode == "child":
        return extracted, []
    root = otel_context.Context()
    if with_baggage:
        for name, value in otel_baggage.get_all(extracted).items():
            root = otel_baggage.set_baggage(name, value, root)
    enqueued = trace.get_current_span(extracted).get_span_context()
    return root, [Link(enqueued)] if enqueued.is_valid else []


# --- spans ----------------------------------------------------------------------------------


def _failed(span: Span, exc: BaseException) -> None:
    """Error status and ``error.type``: the ``RunledgerError`` code (stable, few values), else
    the exception's class, whose exception event is recorded too."""
    if isinstance(exc, RunledgerError):
        error_type = exc.code
    else:
        error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
        span.record_exception(exc)
    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR, error_type)
