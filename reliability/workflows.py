"""The harness's workflows: fan-out/fan-in runs started by a starter process (in its own
transactions, some rolled back, some recorded as workflow intents for the promoters), run by
the same killed and restarted workers as every other job, then checked.

Imported only after ``django.setup()``. Every step is a job of the STABLE type whose payload
names its run (``_workflow``), so the job checks hold for step jobs as for any job (each
SUCCEEDED once as a committed outcome, attempts and handler runs agree) and the intent checks
leave them out (they have no job intent). What this module checks on top: every committed run
exists once and ended SUCCEEDED; a rolled-back one left nothing; every workflow intent became
its run; each step was released exactly once (one job, linked both ways) and only after its
prerequisites succeeded (its job's first handler run began after theirs finished); and the
counters of every step and run agree with the steps.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

from django.db import connection, transaction

from runledger_django import Workflow, record_workflow_intent, start_workflow

from .common import HANDLER_RUNS_TABLE, PAUSE_ENV, STABLE, RunPaths, read_journal
from .workers import Worker, close_connections, describe, is_transient

WORKFLOW_TYPE = "reliability.fan"
FAN_OUT = 6
STEPS = FAN_OUT + 2
STARTER_PAUSE_FACTOR = 15
"""The starter rests 15 recorder pauses between runs: each run is eight jobs."""
WEIGHTS = (("start", 60), ("intent", 25), ("rolled_back", 15))


def fan(key: str) -> Workflow:
    """root -> FAN_OUT leaves -> join: the shape whose fan-in counts down under concurrency."""
    flow = Workflow(WORKFLOW_TYPE, metadata={"key": key})
    root = flow.step("root", STABLE, {"_workflow": key, "step": "root"})
    leaves = [
        flow.step(f"leaf{index}", STABLE, {"_workflow": key, "step": f"leaf{index}"}, after=[root])
        for index in range(FAN_OUT)
    ]
    flow.step("join", STABLE, {"_workflow": key, "step": "join"}, after=leaves)
    return flow


class _RollbackError(Exception):
    """Undoes a start on purpose."""


class FlowStarter(Worker):
    """Starts fan-out/fan-in runs until the stop file; journals each committed key (fsync'ed)."""

    def run(self) -> None:
        pause = float(os.environ.get(PAUSE_ENV, "0")) * STARTER_PAUSE_FACTOR
        operations = [name for name, _ in WEIGHTS]
        weights = [weight for _, weight in WEIGHTS]
        sequence = 0
        while not self.stopping():
            if pause:
                time.sleep(self.rng.uniform(0, 2 * pause))
            sequence += 1
            key = f"{self.name}:{sequence}"
            operation = self.rng.choices(operations, weights)[0]
            try:
                getattr(self, f"op_{operation}")(key)
            except Exception as exc:
                self.journal.write("unexpected", op=f"workflow {operation}", error=describe(exc))
                close_connections()

    def op_start(self, key: str) -> None:
        def attempt() -> Any:
            with transaction.atomic():
                return start_workflow(fan(key), idempotency_key=key)

        settled = self.settle("workflow start", attempt)
        if settled is not None:
            self.journal.write("flow", key=key, via="start", run_id=str(settled[0].run_id))

    def op_intent(self, key: str) -> None:
        def attempt() -> Any:
            with transaction.atomic():
                return record_workflow_intent(fan(key), idempotency_key=key)

        settled = self.settle("workflow intent", attempt)
        if settled is not None:
            self.journal.write("flow", key=key, via="intent", intent_id=str(settled[0].intent_id))

    def op_rolled_back(self, key: str) -> None:
        try:
            with transaction.atomic():
                start_workflow(fan(key), idempotency_key=key)
                raise _RollbackError
        except _RollbackError:
            pass
        except Exception as exc:
            # Nothing commits on this path: a broken connection only rolls back sooner.
            if not is_transient(exc):
                raise
            close_connections()
        self.journal.write("flow_rolled_back", key=key)


def _journaled(paths: RunPaths) -> tuple[dict[str, str], set[str]]:
    committed: dict[str, str] = {}
    rolled_back: set[str] = set()
    for path in sorted(paths.journals.glob("*")):
        for record in read_journal(path):
            if record["k"] == "flow":
                committed[record["key"]] = record["via"]
            elif record["k"] == "flow_rolled_back":
                rolled_back.add(record["key"])
    return committed, rolled_back


def _rows(sql: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, {"workflow_type": WORKFLOW_TYPE})
        return list(cursor.fetchall())


_RUNS = """
SELECT run.idempotency_key, run.status, run.steps_total, run.steps_succeeded, run.steps_failed,
       run.steps_canceled, run.steps_waiting, run.finished_at IS NOT NULL,
       (SELECT count(*) FROM runledger_workflow_steps step
        WHERE step.workflow_run_id = run.id AND step.status = 'SUCCEEDED')
FROM runledger_workflow_runs run
WHERE run.workflow_type = %(workflow_type)s
"""

# Per step: its status and counters, its job link, the jobs that name it, and whether a
# prerequisite's job finished after the step's job first started (it ran too early).
_STEPS = f"""
SELECT run.idempotency_key, step.step_key, step.status, step.dependency_count_pending,
       step.dependency_count_unsatisfied, step.dependency_count_total,
       (SELECT count(*) FROM runledger_workflow_step_dependencies edge
        WHERE edge.dependent_step_id = step.id),
       step.job_id IS NOT NULL AND EXISTS (
           SELECT 1 FROM runledger_job_queue job
           WHERE job.id = step.job_id AND job.workflow_step_id = step.id
             AND job.status = 'SUCCEEDED'),
       (SELECT count(*) FROM runledger_job_queue job WHERE job.workflow_step_id = step.id),
       EXISTS (
           SELECT 1
           FROM runledger_workflow_step_dependencies edge
           JOIN runledger_workflow_steps before ON before.id = edge.prerequisite_step_id
           WHERE edge.dependent_step_id = step.id
             AND (SELECT max(done.recorded_at) FROM {HANDLER_RUNS_TABLE} done
                  WHERE done.job_id = before.job_id AND done.result = 'success')
               > (SELECT min(began.recorded_at) FROM {HANDLER_RUNS_TABLE} began
                  WHERE began.job_id = step.job_id AND began.phase = 'started'))
FROM runledger_workflow_steps step
JOIN runledger_workflow_runs run ON run.id = step.workflow_run_id
WHERE run.workflow_type = %(workflow_type)s
"""  # noqa: S608  (a constant table name)

_INTENTS = """
SELECT intent.idempotency_key, intent.status, run.idempotency_key
FROM runledger_workflow_intents intent
LEFT JOIN runledger_workflow_runs run ON run.id = intent.workflow_run_id
WHERE intent.workflow_type = %(workflow_type)s
"""


def check(paths: RunPaths, counts: dict[str, int]) -> list[str]:
    """The workflow invariants after the drain; adds the counts."""
    violations: list[str] = []
    committed, rolled_back = _journaled(paths)
    runs = {row[0]: row for row in _rows(_RUNS)}
    intents = {row[0]: row for row in _rows(_INTENTS)}
    for key, via in committed.items():
        if key not in runs:
            violations.append(f"workflow {key} ({via}) committed but has no run")
        if via == "intent" and key not in intents:
            violations.append(f"workflow intent {key} committed but is gone")
    for key in rolled_back:
        if key in runs or key in intents:
            violations.append(f"workflow {key} of a rolled-back transaction exists")
    for key, status, promoted_key in intents.values():
        if status != "PROMOTED" or promoted_key != key:
            violations.append(f"workflow intent {key} is {status}, run key {promoted_key}")
    for key, row in runs.items():
        status, total, succeeded, failed, canceled, waiting, finished, counted = row[1:]
        if status != "SUCCEEDED" or not finished:
            violations.append(f"workflow run {key} ended {status} (finished_at set: {finished})")
        if (total, succeeded, failed, canceled, waiting, counted) != (STEPS, STEPS, 0, 0, 0, STEPS):
            violations.append(
                f"workflow run {key} counters total={total} succeeded={succeeded} "
                f"failed={failed} canceled={canceled} waiting={waiting}, {counted} steps SUCCEEDED"
            )
    steps = _rows(_STEPS)
    per_run = Counter(row[0] for row in steps)
    for key, count in per_run.items():
        if count != STEPS:
            violations.append(f"workflow run {key} has {count} steps")
    for key, step_key, status, pending, unsatisfied, total, edges, linked, jobs, early in steps:
        where = f"workflow {key} step {step_key}"
        if status != "SUCCEEDED" or not linked:
            violations.append(f"{where} is {status} (its job SUCCEEDED and linked: {linked})")
        if jobs != 1:
            violations.append(f"{where} was released {jobs} times (jobs naming it)")
        if (pending, unsatisfied, total) != (0, 0, edges):
            violations.append(
                f"{where} counters pending={pending} unsatisfied={unsatisfied} "
                f"total={total} for {edges} edges"
            )
        if early:
            violations.append(f"{where} ran before a prerequisite's success")
    counts["workflow runs"] = len(runs)
    counts["workflow runs from intents"] = sum(via == "intent" for via in committed.values())
    counts["workflow runs rolled back"] = len(rolled_back)
    counts["workflow steps checked"] = len(steps)
    return violations


def plant() -> list[str]:
    """Corrupt two finished runs on purpose (``--plant-violations``): a fan-in step whose
    pending counter says a prerequisite is still running, and a run whose succeeded counter
    lost a step. Each must come back as a violation; returns what was planted."""
    keys = [row[0] for row in _rows(_PLANT_TARGETS)]
    if len(keys) < 2:
        return ["nothing planted in workflows: fewer than two succeeded runs"]
    with connection.cursor() as cursor:
        cursor.execute(_PLANT_PENDING, {"key": keys[0], "workflow_type": WORKFLOW_TYPE})
        cursor.execute(_PLANT_RUN_COUNTER, {"key": keys[1], "workflow_type": WORKFLOW_TYPE})
    return [
        f"the join step of workflow {keys[0]} still counts one pending prerequisite",
        f"workflow run {keys[1]} counts one step less as succeeded",
    ]


_PLANT_TARGETS = """
SELECT idempotency_key FROM runledger_workflow_runs
WHERE workflow_type = %(workflow_type)s AND status = 'SUCCEEDED'
ORDER BY idempotency_key LIMIT 2
"""
_PLANT_PENDING = """
UPDATE runledger_workflow_steps SET dependency_count_pending = 1
WHERE step_key = 'join' AND workflow_run_id = (
    SELECT id FROM runledger_workflow_runs
    WHERE workflow_type = %(workflow_type)s AND idempotency_key = %(key)s)
"""
_PLANT_RUN_COUNTER = """
UPDATE runledger_workflow_runs SET steps_succeeded = steps_succeeded - 1
WHERE workflow_type = %(workflow_type)s AND idempotency_key = %(key)s
"""
