"""The example story's Django Tasks step: shop/tasks.py's ``@task`` enqueued for the demo order
in a transaction, run by ``runledger_worker``, its result read back; a rerun finds the same
result. ``transaction=True``: the step runs the worker, which commits."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; test_import.py covers Django 5.2"
)

import io
import re
from typing import Any

from example_project.shop.management.commands.run_example import GOOD_CHECKOUT, Command
from example_project.shop.models import Order
from runledger_django.models import JobAttempt

pytestmark = pytest.mark.django_db(transaction=True)


def run_step() -> str:
    out = io.StringIO()
    command = Command(stdout=out)
    command.step = 0
    command.django_task()
    return out.getvalue()


def test_example__django_task_step__enqueues_runs_and_reads_back() -> None:
    order = Order.objects.create(
        reference=str(GOOD_CHECKOUT["reference"]),
        customer_email=str(GOOD_CHECKOUT["email"]),
        total_cents=4200,
    )

    first = run_step()
    again = run_step()

    ids = re.findall(r"task result (\S+): ", first + again)
    assert len(set(ids)) == 1, first + again
    assert "READY (a rerun finds the same one)" in first
    assert f'"reference": "{order.reference}"' in first and "SUCCESSFUL after 1 attempt" in first
    assert "SUCCESSFUL (a rerun finds the same one)" in again
    assert JobAttempt.objects.count() == 1


def test_example__django_task_step__other_backend__skipped(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}

    assert "skipped: TASKS does not name" in run_step()
