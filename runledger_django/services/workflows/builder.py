"""The workflow builder: ``Workflow`` with ``step``, ``external``, ``after=``/``when=`` and the
``chain``/``group``/``chord`` helpers. It only records what was asked; ``validation`` checks
the whole graph (before any SQL) when the workflow is started."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...domain import WorkflowStepKind
from ...errors import Code, RunledgerError


@dataclass(frozen=True, slots=True)
class StepHandle:
    """A step of one ``Workflow``: pass it (or its key) to ``after=``."""

    key: Any
    workflow: Workflow = field(repr=False, compare=False)


@dataclass(slots=True)
class StepDeclaration:
    """One step as declared: raw values, checked by ``validation.prepare_workflow``."""

    key: Any
    kind: WorkflowStepKind
    target: Any = None
    payload: Any = None
    after: list[tuple[Any, Any]] = field(default_factory=list)
    """(handle or key, when) pairs, in declaration order."""
    priority: Any = None
    max_attempts: Any = None
    timeout_seconds: Any = None
    execution_resource_key: Any = None
    settings_given: bool = False
    """An external step was given queue settings (refused at validation)."""


class Workflow:
    """A graph of steps to start with ``start_workflow``.

    A step runs once every step it comes ``after`` has finished: with ``when="success"`` (the
    default) only if they all succeeded, else it is canceled; with ``when="terminal"`` whatever
    their outcome. Build the graph outside the transaction or inside it: nothing touches the
    database until ``start_workflow``.
    """

    def __init__(
        self,
        workflow_type: Any,
        *,
        fail_fast: Any = False,
        metadata: Any = None,
        result_step: Any = None,
    ) -> None:
        self.workflow_type = workflow_type
        self.fail_fast = fail_fast
        self.metadata = metadata
        self.result_step = result_step
        """The step (handle or key) whose output becomes the run's result when it succeeds."""
        self.steps: list[StepDeclaration] = []
        self._by_key: dict[Any, StepDeclaration] = {}

    def __repr__(self) -> str:
        return f"Workflow({self.workflow_type!r}, steps={len(self.steps)})"

    def step(
        self,
        key: Any,
        target: Any,
        payload: Any = None,
        *,
        after: Iterable[Any] = (),
        when: Any = "success",
        priority: Any = None,
        max_attempts: Any = None,
        timeout_seconds: Any = None,
        execution_resource_key: Any = None,
    ) -> StepHandle:
        """Add a job step: ``target`` is a job type or a ``django.tasks`` Task of the runledger
        backend (then ``payload`` is the task's keyword arguments). Unset settings take the
        job definition's defaults when the run starts."""
        declaration = StepDeclaration(
            key=key,
            kind=WorkflowStepKind.JOB,
            target=target,
            payload=payload,
            priority=priority,
            max_attempts=max_attempts,
            timeout_seconds=timeout_seconds,
            execution_resource_key=execution_resource_key,
        )
        return self._add(declaration, after, when)

    def external(self, key: Any, *, after: Iterable[Any] = (), when: Any = "success") -> StepHandle:
        """Add an external gate, finished by ``complete_external_step`` once it is waiting."""
        return self._add(StepDeclaration(key=key, kind=WorkflowStepKind.EXTERNAL), after, when)

    def chain(self, *handles: Any, when: Any = "success") -> list[StepHandle]:
        """Make each step run after the one before it; returns the handles."""
        checked = [self._own(handle) for handle in handles]
        for previous, current in itertools.pairwise(checked):
            self._declaration(current).after.append((previous, when))
        return checked

    def group(self, *handles: Any) -> list[StepHandle]:
        """Steps that run side by side (no edges between them); returns the handles, ready to
        be a chord's header or an ``after=`` list."""
        return [self._own(handle) for handle in handles]

    def chord(self, header: Sequence[Any], body: Any, *, when: Any = "terminal") -> StepHandle:
        """Make ``body`` run once every step of ``header`` finished (whatever happened, by
        default: a chord body that reports on its header must run after failures too)."""
        target = self._own(body)
        for handle in header:
            self._declaration(target).after.append((self._own(handle), when))
        return target

    def _add(self, declaration: StepDeclaration, after: Iterable[Any], when: Any) -> StepHandle:
        if isinstance(after, str | StepHandle):
            after = [after]
        declaration.after = [(item, when) for item in after]
        self.steps.append(declaration)
        try:
            self._by_key.setdefault(declaration.key, declaration)
        except TypeError:  # an unhashable key: validation reports it
            pass
        return StepHandle(declaration.key, self)

    def _own(self, handle: Any) -> StepHandle:
        if isinstance(handle, StepHandle) and handle.workflow is self:
            return handle
        return StepHandle(handle.key if isinstance(handle, StepHandle) else handle, self)

    def _declaration(self, handle: StepHandle) -> StepDeclaration:
        try:
            return self._by_key[handle.key]
        except (KeyError, TypeError):
            raise RunledgerError.for_code(
                Code.WF_INVALID_DAG_MISSING_DEPENDENCY, "a helper names a step not in the workflow"
            ) from None
