"""get_result over a task whose rows hold JSON Python cannot parse (issue 13, item 3): the
backend names the row as corrupt instead of failing with a bare ValueError."""

from __future__ import annotations

import pytest

pytest.importorskip(
    "django.tasks", reason="django.tasks arrived in Django 6.0; test_import.py covers Django 5.2"
)

from django.tasks import TaskResultStatus, default_task_backend

from runledger_django import RunledgerError
from tests.conftest import run_sql
from tests.tasks.app_tasks import add

pytestmark = pytest.mark.django_db

# Enough 9s that Python's int() refuses the number (its int-to-str limit is 4300 digits).
HUGE_NUMBER = "repeat('9', 5000)::numeric"


def test_get_result__arguments_python_cannot_parse__invalid_persisted_row_others_read() -> None:
    poison = add.enqueue(1, 2)
    healthy = add.enqueue(3, 4)
    run_sql(
        "UPDATE runledger_job_enqueue_intents"
        f" SET payload = jsonb_set(payload, '{{args,0}}', to_jsonb({HUGE_NUMBER})) WHERE id = %s",
        [poison.id],
    )

    with pytest.raises(RunledgerError) as raised:
        default_task_backend.get_result(poison.id)

    assert raised.value.code == "job.intent_invalid_persisted_row"
    assert default_task_backend.get_result(healthy.id).status == TaskResultStatus.READY
