"""A schedule whose target is a ``django.tasks`` Task of RunledgerTaskBackend: its job type and
payload come from the task (the JobTarget adapter), the declared sync creates the task's
definition, each fire runs the task with its arguments, and the task's context names the fire.

``transaction=True``: the pass and the worker refuse to run inside an atomic block.
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; on 5.2 targets are job types"
)

import datetime as dt

from runledger_django.domain import TargetSpec
from runledger_django.errors import RunledgerError
from runledger_django.models import Job, JobDefinition
from runledger_django.services.schedules import run_schedule_pass, save_schedule
from runledger_django.services.schedules.spec import build_spec
from runledger_django.worker.registry import registry
from runledger_django.worker.run import run_jobs
from runledger_django.worker.scheduler import Declarations, sync_declarations
from tests.tasks import app_tasks
from tests.tasks.task_settings import TASKS

pytestmark = pytest.mark.django_db(transaction=True)

REPORT_TYPE = "task:default:tests.tasks.app_tasks.report_schedule"


def test_job_target__the_task_job_type_payload_and_priority() -> None:
    spec = app_tasks.send_receipt.job_target([7], {"email": "x@example.com"})  # type: ignore[attr-defined]
    assert spec == TargetSpec(
        job_type="task:emails:tests.tasks.app_tasks.send_receipt",
        payload={
            "backend": "default",
            "keyed": False,
            "args": [7],
            "kwargs": {"email": "x@example.com"},
        },
        priority=10,
    )


def test_build_spec__task_target__job_type_and_priority_of_the_task() -> None:
    spec = build_spec("receipts", app_tasks.send_receipt, cron="0 * * * *", args=[7])
    assert (spec.job_type, spec.priority) == ("task:emails:tests.tasks.app_tasks.send_receipt", 10)


def test_build_spec__task_argument_json_cannot_keep__invalid_payload() -> None:
    with pytest.raises(RunledgerError) as info:
        build_spec("bad", app_tasks.add, cron="* * * * *", args=[{1, 2}])
    assert info.value.code == "job_schedule.invalid_payload"


class NotATarget:
    """Has a ``job_target`` that answers nonsense: refused, not trusted."""

    def job_target(self, args: object, kwargs: object) -> object:
        return {"job_type": "x"}


def test_build_spec__target_answers_no_target_spec__invalid_target() -> None:
    with pytest.raises(RunledgerError) as info:
        build_spec("odd", NotATarget(), cron="* * * * *")
    assert info.value.code == "job_schedule.invalid_target"


def test_task_schedule__synced_fired_and_run__context_names_the_fire() -> None:
    declared = Declarations()
    declared.add(
        build_spec(
            "task-report",
            app_tasks.report_schedule,
            cron="* * * * *",
            kwargs={"note": "hi"},
            run_on_create=True,
        )
    )
    report = sync_declarations(declared=declared)
    assert report.created == ("task-report",)
    assert JobDefinition.objects.filter(job_type=REPORT_TYPE, is_enabled=True).exists()
    assert run_schedule_pass().fired == 1
    ran = run_jobs([REPORT_TYPE])
    assert ran.succeeded == 1
    job = Job.objects.get(job_type=REPORT_TYPE)
    assert job.output is not None
    assert job.output["note"] == "hi"
    assert job.output["schedule_name"] == "task-report"
    scheduled = job.payload["_schedule"]["scheduled_for"]
    assert dt.datetime.fromisoformat(job.output["scheduled_for"]) == dt.datetime.fromisoformat(
        scheduled.replace("Z", "+00:00")
    )


def test_save_schedule__task_target__runtime_schedule() -> None:
    JobDefinition.objects.create(job_type="task:default:tests.tasks.app_tasks.add")
    row = save_schedule("adder", app_tasks.add, every=60, args=[1, 2])
    assert row.job_type_id == "task:default:tests.tasks.app_tasks.add"
    assert row.payload_template == {
        "backend": "default",
        "keyed": False,
        "args": [1, 2],
        "kwargs": {},
    }
    assert TASKS  # the tests' TASKS name RunledgerTaskBackend
    assert registry is not None
