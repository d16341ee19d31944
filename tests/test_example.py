"""The example project: its checkout view and the run_example story the README starts with.

transaction=True where a test runs promotion (it refuses to run inside an atomic block) or
checks from another session what the view really committed.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from example_project.shop.models import Order
from example_project.shop.retention import purge_finished_jobs
from example_project.shop.views import RECEIPT_JOB_TYPE
from runledger_django import IntentStatus, enqueue_job, promote_intents, record_intent
from runledger_django.models import Job, JobDefinition, JobEnqueueIntent, JobEvent

pytestmark = pytest.mark.django_db

CHECKOUT = {"reference": "order-77", "email": "ada@example.com", "total_cents": 4200}


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


# -- the checkout view ------------------------------------------------------------------------


def test_checkout__new_order__records_its_receipt_intent(client: Client) -> None:
    status, body = post_checkout(client, CHECKOUT)

    order = Order.objects.get(reference="order-77")
    assert status == 201
    assert body["order_id"] == order.pk and body["created"] is True
    assert body["intent"]["status"] == "PENDING" and body["intent"]["disposition"] == "inserted"
    assert receipt_intents("order-77") == [
        {
            "id": JobEnqueueIntent.objects.get().id,
            "status": IntentStatus.PENDING,
            "payload": {"order_id": order.pk, "total_cents": 4200},
            "promoted_job_id": None,
        }
    ]
    assert str(JobEnqueueIntent.objects.get().id) == body["intent"]["intent_id"]


def test_checkout__identical_retry__same_order_same_intent(client: Client) -> None:
    _, first = post_checkout(client, CHECKOUT)
    status, retry = post_checkout(client, CHECKOUT)

    assert status == 200
    assert retry["created"] is False and retry["order_id"] == first["order_id"]
    assert retry["intent"]["intent_id"] == first["intent"]["intent_id"]
    assert retry["intent"]["disposition"] == "existing"
    assert (Order.objects.count(), JobEnqueueIntent.objects.count()) == (1, 1)


def test_checkout__changed_retry__conflict_and_nothing_written(client: Client) -> None:
    """Same reference, another total: record_intent refuses, so the checkout writes nothing."""
    post_checkout(client, CHECKOUT)
    status, body = post_checkout(client, {**CHECKOUT, "total_cents": 1})

    assert status == 409
    assert body["code"] == "job.intent_idempotency_conflict"
    assert Order.objects.get().total_cents == 4200
    assert JobEnqueueIntent.objects.count() == 1


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
    row = observer.execute(
        "SELECT o.id, i.status FROM shop_orders o JOIN runledger_job_enqueue_intents i "
        "ON i.idempotency_key = 'receipt:' || o.reference WHERE o.reference = 'order-77'"
    ).fetchall()
    assert row == [(body["order_id"], "PENDING")]


@pytest.mark.django_db(transaction=True)
def test_checkout__failure_after_recording__rollback_removes_order_and_intent(
    client: Client, observer: psycopg.Connection[Any]
) -> None:
    """The intent was recorded, then the view failed: neither row ever became visible."""
    status, body = post_checkout(client, {**CHECKOUT, "fail_after_recording": True})

    assert status == 409 and body == {"error": "checkout failed; nothing was saved"}
    counts = observer.execute(
        "SELECT (SELECT count(*) FROM shop_orders), "
        "(SELECT count(*) FROM runledger_job_enqueue_intents)"
    ).fetchone()
    assert counts == (0, 0)


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


# -- run_example --------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_run_example__fresh_database__tells_the_whole_story() -> None:
    output = run_example()

    order = Order.objects.get()
    assert order.reference == "demo-1001"
    [intent] = receipt_intents("demo-1001")
    assert intent["status"] == IntentStatus.PROMOTED
    assert intent["payload"] == {"order_id": order.pk, "total_cents": 4200}
    job = Job.objects.values("id", "job_type_id", "status", "max_attempts").get()
    assert job == {
        "id": intent["promoted_job_id"],
        "job_type_id": RECEIPT_JOB_TYPE,
        "status": "PENDING",
        "max_attempts": 5,
    }
    # The failing checkout left nothing behind.
    assert receipt_intents("demo-1002") == []
    assert not Order.objects.filter(reference="demo-1002").exists()
    assert JobDefinition.objects.get(job_type=RECEIPT_JOB_TYPE).is_enabled
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password(printed_password(output))
    for text in (
        "the rollback removed both: 0 orders and 0 intents for demo-1002",
        f"intent {intent['id']} is now PROMOTED",
        "no worker runtime yet",
        "manage.py runserver",
        "http://127.0.0.1:8000/admin/",
    ):
        assert text in output


@pytest.mark.django_db(transaction=True)
def test_run_example__second_run__changes_nothing() -> None:
    first_output = run_example()
    password = printed_password(first_output)
    before = (
        list(Order.objects.values_list("id", "reference")),
        list(JobEnqueueIntent.objects.values_list("id", "status", "promoted_job_id")),
        list(Job.objects.values_list("id", "status")),
    )

    output = run_example()

    after = (
        list(Order.objects.values_list("id", "reference")),
        list(JobEnqueueIntent.objects.values_list("id", "status", "promoted_job_id")),
        list(Job.objects.values_list("id", "status")),
    )
    assert after == before
    assert "already existed" in output and "already defined" in output
    assert "password:" not in output
    assert User.objects.get(username="admin").check_password(password)


@pytest.mark.django_db(transaction=True)
def test_run_example__operator_disabled_the_type__stays_disabled_and_pending() -> None:
    """get_or_create keeps an operator's change; promotion then leaves the receipt pending."""
    JobDefinition.objects.create(job_type=RECEIPT_JOB_TYPE, is_enabled=False)

    output = run_example()

    assert "DISABLED" in output
    assert not JobDefinition.objects.get(job_type=RECEIPT_JOB_TYPE).is_enabled
    assert receipt_intents("demo-1001")[0]["status"] == IntentStatus.PENDING
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_run_example__reset_admin_password__prints_a_working_new_one() -> None:
    old = printed_password(run_example())

    new = printed_password(run_example("--reset-admin-password"))

    admin = User.objects.get(username="admin")
    assert new != old
    assert admin.check_password(new) and not admin.check_password(old)


# -- the queue-retention recipe (docs/operations.md) --------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_purge_finished_jobs__old_finished_jobs__go_with_their_promoted_intents() -> None:
    JobDefinition.objects.create(job_type=RECEIPT_JOB_TYPE)
    old = record_intent(RECEIPT_JOB_TYPE, {"order_id": 1}, idempotency_key="receipt:old")
    fresh = record_intent(RECEIPT_JOB_TYPE, {"order_id": 2}, idempotency_key="receipt:fresh")
    direct = enqueue_job(RECEIPT_JOB_TYPE, {"order_id": 3})
    assert promote_intents([RECEIPT_JOB_TYPE]).inserted_jobs == 2
    old_job = JobEnqueueIntent.objects.get(id=old.intent_id).promoted_job_id
    fresh_job = JobEnqueueIntent.objects.get(id=fresh.intent_id).promoted_job_id
    assert old_job is not None and fresh_job is not None
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=40)
    Job.objects.filter(id__in=[old_job, direct.job_id]).update(
        status="SUCCEEDED", finished_at=long_ago
    )
    Job.objects.filter(id=fresh_job).update(status="SUCCEEDED", finished_at=dt.datetime.now(dt.UTC))

    deleted = purge_finished_jobs(dt.timedelta(days=30), batch_size=1)

    assert deleted == 2
    assert list(Job.objects.values_list("id", flat=True)) == [fresh_job]
    assert list(JobEnqueueIntent.objects.values_list("id", flat=True)) == [fresh.intent_id]
    assert set(JobEvent.objects.values_list("job_id", flat=True)) == {fresh_job}
