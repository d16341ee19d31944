"""The example project: its checkout view, its job handlers and the run_example story the
README starts with.

transaction=True where a test runs promotion or the worker (they refuse to run inside an atomic
block) or checks from another session what the view really committed.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from example_project.shop.fulfilment import FULFIL_JOB_TYPES
from example_project.shop.models import Order
from example_project.shop.views import RECEIPT_JOB_TYPE, WAREHOUSE_JOB_TYPE
from runledger_django import IntentStatus, enqueue_job, promote_intents, run_jobs
from runledger_django.models import (
    Job,
    JobAttempt,
    JobDefinition,
    JobEnqueueIntent,
    WorkflowRun,
    WorkflowStep,
)
from runledger_django.worker.registry import autodiscover

pytestmark = pytest.mark.django_db

CHECKOUT = {"reference": "order-77", "email": "ada@example.com", "total_cents": 4200}


@pytest.fixture(autouse=True)
def fulfilment_job_types(request: pytest.FixtureRequest) -> None:
    """The checkout starts the fulfilment workflow, whose job types must exist (the story
    defines them itself, as a worker would)."""
    if request.node.name.startswith("test_run_example"):
        return
    request.getfixturevalue("db")
    for job_type in FULFIL_JOB_TYPES:
        JobDefinition.objects.get_or_create(job_type=job_type)


def post_checkout(client: Client, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = client.post("/checkout/", data=json.dumps(body), content_type="application/json")
    return response.status_code, json.loads(response.content)


def run_example(*args: str) -> str:
    out = io.StringIO()
    call_command("run_example", *args, stdout=out)
    return out.getvalue()


def printed_password(output: str) -> str:
    match = re.search(r"password: (\S+)", output)
    assert match is not None, output
    return match.group(1)


def receipt_intents(reference: str) -> list[dict[str, Any]]:
    rows = JobEnqueueIntent.objects.filter(
        job_type=RECEIPT_JOB_TYPE, idempotency_key=f"receipt:{reference}"
    ).values("id", "status", "payload", "promoted_job_id")
    return [dict(row) for row in rows]


def demo_job(job_type: str) -> dict[str, Any]:
    name = "receipt" if job_type == RECEIPT_JOB_TYPE else "warehouse"
    row = Job.objects.values("id", "status", "run_number", "attempt", "output").get(
        job_type=job_type, idempotency_key=f"{name}:demo-1001"
    )
    return dict(row)


def attempt_outcomes(job_id: Any) -> list[tuple[int, int, str | None]]:
    return list(
        JobAttempt.objects.filter(job_id=job_id)
        .order_by("run_number", "attempt")
        .values_list("run_number", "attempt", "outcome")
    )


# -- the checkout view ------------------------------------------------------------------------


def test_checkout__new_order__records_its_receipt_intent(client: Client) -> None:
    status, body = post_checkout(client, CHECKOUT)

    order = Order.objects.get(reference="order-77")
    assert status == 201
    assert body["order_id"] == order.pk and body["created"] is True
    assert body["intent"]["status"] == "PENDING" and body["intent"]["disposition"] == "inserted"
    receipt = JobEnqueueIntent.objects.get(job_type=RECEIPT_JOB_TYPE)
    assert receipt_intents("order-77") == [
        {
            "id": receipt.id,
            "status": IntentStatus.PENDING,
            "payload": {"order_id": order.pk, "total_cents": 4200},
            "promoted_job_id": None,
        }
    ]
    assert str(receipt.id) == body["intent"]["intent_id"]
    warehouse = JobEnqueueIntent.objects.get(job_type=WAREHOUSE_JOB_TYPE)
    assert (warehouse.idempotency_key, warehouse.payload) == (
        "warehouse:order-77",
        {"order_id": order.pk},
    )
    assert str(warehouse.id) == body["warehouse_intent"]["intent_id"]


def test_checkout__identical_retry__same_order_same_intent(client: Client) -> None:
    _, first = post_checkout(client, CHECKOUT)
    status, retry = post_checkout(client, CHECKOUT)

    assert status == 200
    assert retry["created"] is False and retry["order_id"] == first["order_id"]
    assert retry["intent"]["intent_id"] == first["intent"]["intent_id"]
    assert retry["intent"]["disposition"] == "existing"
    assert retry["warehouse_intent"]["intent_id"] == first["warehouse_intent"]["intent_id"]
    assert (Order.objects.count(), JobEnqueueIntent.objects.count()) == (1, 2)


def test_checkout__changed_retry__conflict_and_nothing_written(client: Client) -> None:
    """Same reference, another total: record_intent refuses, so the checkout writes nothing."""
    post_checkout(client, CHECKOUT)
    status, body = post_checkout(client, {**CHECKOUT, "total_cents": 1})

    assert status == 409
    assert body["code"] == "job.intent_idempotency_conflict"
    assert Order.objects.get().total_cents == 4200
    assert JobEnqueueIntent.objects.count() == 2


def test_checkout__malformed_request__400_and_nothing_written(client: Client) -> None:
    for body in ({"email": "x@example.com"}, {**CHECKOUT, "total_cents": "12"}, ["x"]):
        response = client.post("/checkout/", data=json.dumps(body), content_type="application/json")
        assert response.status_code == 400
    assert (Order.objects.count(), JobEnqueueIntent.objects.count()) == (0, 0)


@pytest.mark.django_db(transaction=True)
def test_checkout__success__order_and_intent_commit_together(
    client: Client, observer: psycopg.Connection[Any]
) -> None:
    status, body = post_checkout(client, CHECKOUT)

    assert status == 201
    run = observer.execute(
        "SELECT r.status, r.idempotency_key, count(j.id) FROM runledger_workflow_runs r "
        "JOIN runledger_workflow_steps s ON s.workflow_run_id = r.id "
        "LEFT JOIN runledger_job_queue j ON j.id = s.job_id "
        "WHERE r.id = %s GROUP BY r.id",
        (body["fulfilment"]["run_id"],),
    ).fetchone()
    assert run == ("RUNNING", "fulfil:order-77", 2)  # charge and reserve have jobs
    rows = observer.execute(
        "SELECT o.id, i.job_type, i.status FROM shop_orders o "
        "JOIN runledger_job_enqueue_intents i ON i.payload->>'order_id' = o.id::text "
        "WHERE o.reference = 'order-77' ORDER BY i.job_type"
    ).fetchall()
    assert rows == [
        (body["order_id"], WAREHOUSE_JOB_TYPE, "PENDING"),
        (body["order_id"], RECEIPT_JOB_TYPE, "PENDING"),
    ]


@pytest.mark.django_db(transaction=True)
def test_checkout__failure_after_recording__rollback_removes_order_and_intent(
    client: Client, observer: psycopg.Connection[Any]
) -> None:
    """The intent was recorded, then the view failed: neither row ever became visible."""
    status, body = post_checkout(client, {**CHECKOUT, "fail_after_recording": True})

    assert status == 409 and body == {"error": "checkout failed; nothing was saved"}
    counts = observer.execute(
        "SELECT (SELECT count(*) FROM shop_orders), "
        "(SELECT count(*) FROM runledger_job_enqueue_intents), "
        "(SELECT count(*) FROM runledger_workflow_runs), "
        "(SELECT count(*) FROM runledger_job_queue)"
    ).fetchone()
    assert counts == (0, 0, 0, 0)


@pytest.mark.django_db(transaction=True)
def test_checkout__retry_of_conflicted_receipt__409(client: Client) -> None:
    """A direct job already holds the receipt key with another payload: promotion conflicts the
    intent, and the view refuses to commit around a conflicted receipt."""
    JobDefinition.objects.create(job_type=RECEIPT_JOB_TYPE)
    enqueue_job(RECEIPT_JOB_TYPE, {"other": True}, idempotency_key="receipt:order-77")
    post_checkout(client, CHECKOUT)
    assert promote_intents([RECEIPT_JOB_TYPE]).conflicted == 1

    status, body = post_checkout(client, CHECKOUT)

    assert status == 409 and "conflicted" in body["error"]
    assert receipt_intents("order-77")[0]["status"] == IntentStatus.CONFLICTED


# -- the handlers -------------------------------------------------------------------------------


def define_shop_job_types() -> None:
    """Register the shop's handlers and their definitions, as a worker start would."""
    autodiscover()
    for job_type, attempts in ((RECEIPT_JOB_TYPE, 5), (WAREHOUSE_JOB_TYPE, 3)):
        JobDefinition.objects.create(job_type=job_type, max_attempts=attempts)


@pytest.mark.django_db(transaction=True)
def test_send_receipt__run_twice_for_one_order__sends_once() -> None:
    """At least once: a second job for the same order finds the receipt already sent."""
    define_shop_job_types()
    order = Order.objects.create(reference="r-1", customer_email="ada@example.com", total_cents=1)
    first = enqueue_job(RECEIPT_JOB_TYPE, {"order_id": order.pk}).job_id
    second = enqueue_job(RECEIPT_JOB_TYPE, {"order_id": order.pk, "again": True}).job_id

    report = run_jobs([RECEIPT_JOB_TYPE])

    assert (report.claimed, report.succeeded) == (2, 2)
    outputs: dict[Any, Any] = dict(
        Job.objects.filter(id__in=[first, second]).values_list("id", "output")
    )
    assert outputs[first] == {
        "sent_to": "ada@example.com",
        "reference": "r-1",
        "already_sent": False,
    }
    assert outputs[second]["already_sent"] is True
    order.refresh_from_db()
    assert order.receipt_sent_at is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("job_type", [RECEIPT_JOB_TYPE, WAREHOUSE_JOB_TYPE])
def test_handlers__order_gone__dead_lettered_at_once(job_type: str) -> None:
    define_shop_job_types()
    job_id = enqueue_job(job_type, {"order_id": 404}).job_id

    report = run_jobs([job_type])

    assert report.dead_lettered == 1
    assert attempt_outcomes(job_id) == [(1, 1, "DEAD_LETTERED")]
    assert Job.objects.values_list("last_error_code", flat=True).get(id=job_id) == (
        "job.terminal_failure"
    )


# -- run_example --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_run_example__fresh_database__tells_the_whole_story() -> None:
    output = run_example()

    order = Order.objects.get()
    assert order.reference == "demo-1001"
    assert order.receipt_sent_at is not None
    [intent] = receipt_intents("demo-1001")
    assert intent["status"] == IntentStatus.PROMOTED
    assert intent["payload"] == {"order_id": order.pk, "total_cents": 4200}
    receipt = demo_job(RECEIPT_JOB_TYPE)
    assert receipt == {
        "id": intent["promoted_job_id"],
        "status": "SUCCEEDED",
        "run_number": 1,
        "attempt": 1,
        "output": {"sent_to": "ada@example.com", "reference": "demo-1001", "already_sent": False},
    }
    warehouse = demo_job(WAREHOUSE_JOB_TYPE)
    assert (warehouse["status"], warehouse["attempt"]) == ("DEAD_LETTERED", 3)
    assert attempt_outcomes(warehouse["id"]) == [
        (1, 1, "RETRY_SCHEDULED"),
        (1, 2, "RETRY_SCHEDULED"),
        (1, 3, "DEAD_LETTERED"),
    ]
    # The declared daily schedule was synced, run now once, and its job ran.
    daily = Job.objects.get(job_type="shop.daily_sales")
    assert daily.status == "SUCCEEDED"
    assert daily.output is not None and daily.output["schedule"] == "shop.daily-sales"
    assert "A periodic schedule" in output
    # The checkout's fulfilment workflow ran to its end, each step after its prerequisites.
    run = WorkflowRun.objects.get(workflow_type="shop.fulfil", idempotency_key="fulfil:demo-1001")
    assert run.status == "SUCCEEDED"
    steps = {step.step_key: step for step in WorkflowStep.objects.filter(workflow_run_id=run.id)}
    assert {key: step.status for key, step in steps.items()} == dict.fromkeys(
        ("charge", "reserve", "ship", "notify"), "SUCCEEDED"
    )
    assert steps["ship"].output == {
        "tracking": "trk_demo-1001",
        "charge_id": "ch_demo-1001",
        "reservation": "res_demo-1001",
    }
    assert steps["notify"].output == {
        "to": "ada@example.com",
        "message": "Order demo-1001: shipped, tracking trk_demo-1001",
    }
    assert f"workflow run {run.id}: SUCCEEDED" in output
    # The failing checkout left nothing behind.
    assert receipt_intents("demo-1002") == []
    assert not Order.objects.filter(reference="demo-1002").exists()
    assert JobDefinition.objects.get(job_type=RECEIPT_JOB_TYPE).is_enabled
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(printed_password(output))
    for text in (
        "the rollback removed both: 0 orders and 0 intents for demo-1002",
        f"receipt intent {intent['id']} is now PROMOTED",
        "$ python manage.py runledger_worker --promote --burst",
        f"shop.send_receipt {receipt['id']} attempt 1: succeeded",
        f"shop.notify_warehouse {warehouse['id']} attempt 3: dead lettered",
        "retry due in",
        "$ python manage.py job_metrics",
        "Would delete 2 jobs (1 succeeded, 1 dead-lettered, 0 canceled)",
        "with their 2 promoted intents, 4 attempts and ",
        "manage.py runserver",
        "http://127.0.0.1:8000/admin/",
        "open Dead letters",
    ):
        assert text in output, text


@pytest.mark.django_db(transaction=True)
def test_run_example__second_run__changes_nothing() -> None:
    first_output = run_example()
    password = printed_password(first_output)
    before = (
        list(Order.objects.values_list("id", "reference", "receipt_sent_at")),
        list(JobEnqueueIntent.objects.values_list("id", "status", "promoted_job_id")),
        list(Job.objects.values_list("id", "status", "attempt")),
        JobAttempt.objects.count(),
    )

    output = run_example()

    after = (
        list(Order.objects.values_list("id", "reference", "receipt_sent_at")),
        list(JobEnqueueIntent.objects.values_list("id", "status", "promoted_job_id")),
        list(Job.objects.values_list("id", "status", "attempt")),
        JobAttempt.objects.count(),
    )
    assert after == before
    assert "already existed" in output and "already defined" in output
    assert "Claimed 0 jobs" in output
    assert "password:" not in output
    assert User.objects.get(username="admin").check_password(password)


@pytest.mark.django_db(transaction=True)
def test_run_example__newcomer_requeues_the_dead_letter__run_two_succeeds(
    client: Client,
) -> None:
    """What the story's last step tells a newcomer to do: requeue in the admin, run again."""
    password = printed_password(run_example())
    warehouse = demo_job(WAREHOUSE_JOB_TYPE)
    assert client.login(username="admin", password=password)

    response = client.post(f"/admin/runledger/job/{warehouse['id']}/requeue/", follow=True)
    assert [str(m) for m in response.context["messages"]] == ["Requeued 1 job."]
    out = io.StringIO()
    call_command("runledger_worker", "--burst", "--job-type", WAREHOUSE_JOB_TYPE, stdout=out)

    after = demo_job(WAREHOUSE_JOB_TYPE)
    assert (after["status"], after["run_number"], after["attempt"]) == ("SUCCEEDED", 2, 1)
    assert after["output"] == {"reserved_for": "demo-1001", "attempt": 1, "run": 2}
    assert attempt_outcomes(warehouse["id"])[-1] == (2, 1, "SUCCEEDED")


@pytest.mark.django_db(transaction=True)
def test_run_example__operator_disabled_the_type__stays_disabled_and_pending() -> None:
    """get_or_create keeps an operator's change; promotion then leaves the receipt pending."""
    JobDefinition.objects.create(job_type=RECEIPT_JOB_TYPE, is_enabled=False)

    output = run_example()

    assert "DISABLED" in output
    assert not JobDefinition.objects.get(job_type=RECEIPT_JOB_TYPE).is_enabled
    assert receipt_intents("demo-1001")[0]["status"] == IntentStatus.PENDING
    assert not Job.objects.filter(job_type=RECEIPT_JOB_TYPE).exists()
    assert demo_job(WAREHOUSE_JOB_TYPE)["status"] == "DEAD_LETTERED"


@pytest.mark.django_db(transaction=True)
def test_run_example__reset_admin_password__prints_a_working_new_one() -> None:
    old = printed_password(run_example())

    new = printed_password(run_example("--reset-admin-password"))

    admin = User.objects.get(username="admin")
    assert new != old
    assert admin.check_password(new) and not admin.check_password(old)
