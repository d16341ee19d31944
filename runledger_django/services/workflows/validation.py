"""Checking a whole workflow graph before any SQL (reference 3.1 step 1): every bad shape has
its ``workflow.invalid_dag_*`` code, and nothing is written when one is found.

The result, ``PreparedWorkflow``, is everything the start writes: the steps in a topological
order with their ids, payload JSON and overrides, the edges, and the canonical request a
keyed retry is compared with.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...domain import (
    JobStage,
    TargetSpec,
    WorkflowReleaseMode,
    WorkflowStepKind,
    coerce_uuid,
)
from ...errors import Code, RunledgerError
from ...uuid7 import uuid7
from ...validation import (
    EXECUTION_RESOURCE_KEY_MAX_BYTES,
    IDEMPOTENCY_KEY_MAX_BYTES,
    INT32_MAX,
    JOB_TYPE_MAX_BYTES,
    encode_payload,
    is_blank,
    storable_text,
    utf8_length,
    validate_job_type,
)
from .builder import StepDeclaration, StepHandle, Workflow

ACTIVE_KEY_MAX_BYTES = 512
STEP_KEY_MAX_BYTES = 255
GRAPH_MAX_STEPS = 100_000
GRAPH_MAX_EDGES = 100_000
"""Far beyond any graph one transaction should start, and below the 32-bit counters."""

_NO_ID = uuid.UUID(int=0)
_MODES = {"success": WorkflowReleaseMode.ON_SUCCESS, "terminal": WorkflowReleaseMode.ON_TERMINAL}


@dataclass(slots=True)
class PreparedStep:
    id: uuid.UUID
    """Set once the order is known (``prepare_workflow``)."""
    key: str
    kind: WorkflowStepKind
    job_type: str | None
    payload: str
    """JSON text (``null`` for a None payload: it survives as JSON null)."""
    priority: int | None
    """The step's own priority (or its Task's); None takes the definition's default."""
    max_attempts: int | None
    timeout_seconds: int | None
    execution_resource_key: str | None
    after: tuple[tuple[str, WorkflowReleaseMode], ...]
    value: Any = None
    """The payload as given (JSON-native), for the canonical request."""


@dataclass(frozen=True, slots=True)
class PreparedWorkflow:
    workflow_type: str
    organization_id: uuid.UUID | None
    idempotency_key: str | None
    active_key: str | None
    fail_fast: bool
    metadata: str
    result_step_key: str | None
    steps: tuple[PreparedStep, ...]
    """Topological order: every step after its prerequisites."""
    request: str
    """The canonical request (JSON text) a keyed retry must match."""

    @property
    def job_types(self) -> list[str]:
        return sorted({step.job_type for step in self.steps if step.job_type is not None})


def _fail(code: Code, detail: str) -> RunledgerError:
    return RunledgerError.for_code(code, detail)


def _key_text(value: object, code: Code, field: str, max_bytes: int) -> str:
    if (
        not isinstance(value, str)
        or is_blank(value)
        or not storable_text(value)
        or utf8_length(value) > max_bytes
    ):
        raise _fail(code, f"{field} must be 1 to {max_bytes} bytes of non-blank text")
    return str(value)


def _positive(value: object, code: Code, field: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not 0 < value <= INT32_MAX:
        raise _fail(code, f"{field} must be a positive 32-bit int")
    return value


def _priority(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or not -(2**31) <= value <= INT32_MAX:
        raise _fail(Code.WF_INVALID_DAG_STEP_PRIORITY, "priority must be a 32-bit int")
    return value


def _payload(value: object) -> str:
    try:
        return encode_payload(value)
    except RunledgerError as error:
        raise _fail(Code.WF_INVALID_DAG_STEP_PAYLOAD, error.internal_message) from None


def _target(declaration: StepDeclaration) -> tuple[str, str, int | None, Any]:
    """(job type, payload JSON, the target's own priority, the payload) of a job step."""
    target = declaration.target
    if isinstance(target, str):
        try:
            job_type = validate_job_type(target)
        except RunledgerError as error:
            raise _fail(Code.WF_INVALID_DAG_JOB_TYPE_BLANK, error.internal_message) from None
        return job_type, _payload(declaration.payload), None, declaration.payload
    maker = getattr(target, "job_target", None)
    if not callable(maker):
        raise _fail(
            Code.WF_INVALID_DAG_JOB_TYPE_BLANK,
            f"target is a {type(target).__name__}, not a job type or a runledger Task",
        )
    kwargs = declaration.payload
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise _fail(Code.WF_INVALID_DAG_STEP_PAYLOAD, "a Task step's payload is its kwargs dict")
    try:
        spec = maker([], dict(kwargs or {}))
    except RunledgerError as error:
        raise _fail(Code.WF_INVALID_DAG_STEP_PAYLOAD, error.internal_message) from None
    except (TypeError, ValueError) as exc:
        raise _fail(Code.WF_INVALID_DAG_STEP_PAYLOAD, type(exc).__name__) from None
    except Exception as exc:  # InvalidTask and the like: the task is not usable here
        raise _fail(Code.WF_INVALID_DAG_JOB_TYPE_BLANK, type(exc).__name__) from None
    if not isinstance(spec, TargetSpec):
        raise _fail(Code.WF_INVALID_DAG_JOB_TYPE_BLANK, "job_target() did not return a TargetSpec")
    try:
        job_type = validate_job_type(spec.job_type)
    except RunledgerError as error:
        raise _fail(Code.WF_INVALID_DAG_JOB_TYPE_BLANK, error.internal_message) from None
    return job_type, _payload(spec.payload), _priority(spec.priority), spec.payload


def _dependency_key(item: object, flow: Workflow) -> str:
    if isinstance(item, StepHandle):
        if item.workflow is not flow:
            raise _fail(
                Code.WF_INVALID_DAG_MISSING_DEPENDENCY, "a handle of another workflow in after="
            )
        item = item.key
    if not isinstance(item, str) or is_blank(item):
        raise _fail(
            Code.WF_INVALID_DAG_DEPENDENCY_STEP_KEY_BLANK,
            "after= takes step handles or non-blank step keys",
        )
    return item


def _step(declaration: StepDeclaration, flow: Workflow) -> PreparedStep:
    key = _key_text(
        declaration.key, Code.WF_INVALID_DAG_STEP_KEY_BLANK, "step key", STEP_KEY_MAX_BYTES
    )
    after: list[tuple[str, WorkflowReleaseMode]] = []
    seen: set[str] = set()
    for item, when in declaration.after:
        dependency = _dependency_key(item, flow)
        if dependency == key:
            raise _fail(Code.WF_INVALID_DAG_SELF_DEPENDENCY, f"step {key!r} depends on itself")
        if dependency in seen:
            raise _fail(Code.WF_INVALID_DAG_DUPLICATE_DEPENDENCY, f"step {key!r} lists one twice")
        mode = _MODES.get(when) if isinstance(when, str) else None
        if mode is None:
            raise _fail(Code.WF_INVALID_DAG_RELEASE_MODE, 'when must be "success" or "terminal"')
        seen.add(dependency)
        after.append((dependency, mode))
    if declaration.kind == WorkflowStepKind.EXTERNAL:
        return PreparedStep(
            id=_NO_ID,
            key=key,
            kind=WorkflowStepKind.EXTERNAL,
            job_type=None,
            payload="null",
            priority=None,
            max_attempts=None,
            timeout_seconds=None,
            execution_resource_key=None,
            after=tuple(after),
        )
    job_type, payload, target_priority, value = _target(declaration)
    priority = _priority(declaration.priority)
    resource = declaration.execution_resource_key
    if resource is not None:
        resource = _key_text(
            resource,
            Code.WF_INVALID_DAG_STEP_RESOURCE_KEY,
            "execution_resource_key",
            EXECUTION_RESOURCE_KEY_MAX_BYTES,
        )
    return PreparedStep(
        id=_NO_ID,
        key=key,
        kind=WorkflowStepKind.JOB,
        job_type=job_type,
        payload=payload,
        priority=priority if priority is not None else target_priority,
        max_attempts=_positive(
            declaration.max_attempts,
            Code.WF_INVALID_DAG_STEP_MAX_ATTEMPTS_NON_POSITIVE,
            "max_attempts",
        ),
        timeout_seconds=_positive(
            declaration.timeout_seconds,
            Code.WF_INVALID_DAG_STEP_TIMEOUT_SECONDS_NON_POSITIVE,
            "timeout_seconds",
        ),
        execution_resource_key=resource,
        after=tuple(after),
        value=value,
    )


def _topological(steps: Sequence[PreparedStep]) -> tuple[PreparedStep, ...]:
    """Kahn's algorithm, stable in declaration order; a leftover step is on a cycle."""
    by_key = {step.key: step for step in steps}
    pending = {step.key: len(step.after) for step in steps}
    dependents: dict[str, list[str]] = {step.key: [] for step in steps}
    for step in steps:
        for dependency, _ in step.after:
            if dependency not in by_key:
                raise _fail(
                    Code.WF_INVALID_DAG_MISSING_DEPENDENCY,
                    f"step {step.key!r} depends on unknown step {dependency!r}",
                )
            dependents[dependency].append(step.key)
    ready = [step.key for step in steps if pending[step.key] == 0]
    order: list[PreparedStep] = []
    while ready:
        next_ready: list[str] = []
        for key in ready:
            order.append(by_key[key])
            for dependent in dependents[key]:
                pending[dependent] -= 1
                if pending[dependent] == 0:
                    next_ready.append(dependent)
        ready = next_ready
    if len(order) != len(steps):
        raise _fail(Code.WF_INVALID_DAG_CYCLE, "the dependencies form a cycle")
    return tuple(order)


def _canonical(graph: dict[str, Any]) -> str:
    return json.dumps(graph, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def prepare_workflow(
    flow: object,
    *,
    idempotency_key: object = None,
    organization_id: object = None,
    active_key: object = None,
) -> PreparedWorkflow:
    """Check ``flow`` and the start's arguments; no SQL.

    Raises:
        RunledgerError: a ``workflow.invalid_dag_*`` code, ``workflow.invalid_active_key``
            or ``job.invalid_organization_id``.
    """
    if not isinstance(flow, Workflow):
        raise _fail(Code.WF_INVALID_DAG, f"expected a Workflow, got {type(flow).__name__}")
    workflow_type = _key_text(
        flow.workflow_type,
        Code.WF_INVALID_DAG_WORKFLOW_TYPE_BLANK,
        "workflow type",
        JOB_TYPE_MAX_BYTES,
    )
    if not flow.steps:
        raise _fail(Code.WF_INVALID_DAG_EMPTY, "a workflow needs at least one step")
    if len(flow.steps) > GRAPH_MAX_STEPS:
        raise _fail(Code.WF_INVALID_DAG_DEPENDENCY_COUNT_OVERFLOW, "too many steps")
    if not isinstance(flow.fail_fast, bool):
        raise _fail(Code.WF_INVALID_DAG, "fail_fast must be a bool")
    metadata = flow.metadata if flow.metadata is not None else {}
    if not isinstance(metadata, Mapping):
        raise _fail(Code.WF_INVALID_DAG, "metadata must be a dict")
    try:
        metadata_text = encode_payload(metadata)
    except RunledgerError as error:
        raise _fail(Code.WF_INVALID_DAG, f"metadata: {error.internal_message}") from None
    key = None
    if idempotency_key is not None:
        key = _key_text(
            idempotency_key,
            Code.WF_INVALID_DAG_IDEMPOTENCY_KEY_BLANK,
            "idempotency key",
            IDEMPOTENCY_KEY_MAX_BYTES,
        )
    active = None
    if active_key is not None:
        active = _key_text(
            active_key, Code.WF_INVALID_ACTIVE_KEY, "active key", ACTIVE_KEY_MAX_BYTES
        )
    organization = (
        None
        if organization_id is None
        else coerce_uuid(organization_id, Code.INVALID_ORGANIZATION_ID)
    )
    steps = [_step(declaration, flow) for declaration in flow.steps]
    keys: set[str] = set()
    edges = 0
    for step in steps:
        if step.key in keys:
            raise _fail(Code.WF_INVALID_DAG_DUPLICATE_STEP_KEY, f"step {step.key!r} twice")
        keys.add(step.key)
        edges += len(step.after)
    if edges > GRAPH_MAX_EDGES:
        raise _fail(Code.WF_INVALID_DAG_DEPENDENCY_COUNT_OVERFLOW, "too many edges")
    # Ids in topological order: a prerequisite's id sorts before its dependents' (UUIDv7).
    ordered = _topological(steps)
    for step in ordered:
        step.id = uuid7()
    result_key = flow.result_step
    if isinstance(result_key, StepHandle):
        result_key = result_key.key
    if result_key is not None and result_key not in keys:
        raise _fail(Code.WF_INVALID_DAG_MISSING_DEPENDENCY, "result_step names no step")
    request = {
        "v": 1,
        "workflow_type": workflow_type,
        "organization_id": None if organization is None else str(organization),
        "active_key": active,
        "fail_fast": flow.fail_fast,
        "metadata": json.loads(metadata_text),
        "result_step_key": result_key,
        "steps": [
            {
                "key": step.key,
                "kind": step.kind.value,
                "job_type": step.job_type,
                "payload": step.value,
                "priority": step.priority,
                "max_attempts": step.max_attempts,
                "timeout_seconds": step.timeout_seconds,
                "stage": None if step.kind == WorkflowStepKind.EXTERNAL else JobStage.QUEUED.value,
                "execution_resource_key": step.execution_resource_key,
                "after": sorted((dependency, mode.value) for dependency, mode in step.after),
            }
            for step in sorted(steps, key=lambda item: item.key)
        ],
    }
    return PreparedWorkflow(
        workflow_type=workflow_type,
        organization_id=organization,
        idempotency_key=key,
        active_key=active,
        fail_fast=flow.fail_fast,
        metadata=metadata_text,
        result_step_key=result_key,
        steps=ordered,
        request=_canonical(request),
    )
