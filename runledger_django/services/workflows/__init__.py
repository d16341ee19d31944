"""Workflows (issue 19): graphs of job steps and external gates, started in the caller's
transaction and released atomically with each prerequisite's terminal write.

Modules: ``builder`` (``Workflow``), ``validation`` (the graph check before any SQL),
``start`` (``start_workflow``), ``release`` (the terminal hook and propagation), ``cancel``,
``retry``, ``external`` and ``reads``. The job lifecycle calls ``release`` only for a job whose
row names a workflow step.
"""

from __future__ import annotations

from .append import append_from_running_step, append_workflow_steps
from .builder import StepHandle, Workflow
from .cancel import cancel_workflow
from .external import complete_external_step
from .intents import promote_workflow_intents, record_workflow_intent
from .reads import (
    WorkflowHandle,
    get_workflow_run,
    list_workflow_runs,
    list_workflow_steps,
    workflow_handle,
)
from .release import step_context
from .retry import retry_workflow
from .start import start_workflow

__all__ = [
    "StepHandle",
    "Workflow",
    "WorkflowHandle",
    "append_from_running_step",
    "append_workflow_steps",
    "cancel_workflow",
    "complete_external_step",
    "get_workflow_run",
    "list_workflow_runs",
    "list_workflow_steps",
    "promote_workflow_intents",
    "record_workflow_intent",
    "retry_workflow",
    "start_workflow",
    "step_context",
    "workflow_handle",
]
