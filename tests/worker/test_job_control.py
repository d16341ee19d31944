"""Operator actions behind scopes: cancel_job and requeue_job (reference 11).

Upstream: job_cancellation_scope.rs, cancellation_failures.rs, compare_and_requeue.rs. The
transitions themselves are rows 11 and 12 in test_state_machine.py; here: a scope never
reveals another tenant's job, bad arguments are refused before any SQL, and both actions run
whatever the session's isolation default is.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError
from pytest_django import DjangoAssertNumQueries

from runledger_django import ReadScope, RunledgerError, cancel_job, requeue_job
from runledger_django.domain import JobStatus
from tests.conftest import run_sql
from tests.worker.conftest import Enqueue, attempt_rows, claim_one, event_types, job_row

pytestmark = pytest.mark.django_db

TENANT = uuid.UUID("0190a000-0000-7000-8000-00000000000a")
OTHER_TENANT = uuid.UUID("0190a000-0000-7000-8000-00000000000b")


def code_of(call: Any) -> str:
    with pytest.raises(RunledgerError) as raised:
        call()
    return raised.value.code


def test_cancel_job__scopes__exact_tenant_global_and_admin(enqueue: Enqueue) -> None:
    """cancellation_scope_distinguishes_exact_tenants_from_admin: a tenant's job is found by
    its own scope and by ADMIN only; a global job by GLOBAL and ADMIN only. Any other scope
    answers job.not_found, exactly as for a job that does not exist."""
    tenant_job = enqueue(organization_id=TENANT)
    global_job = enqueue()
    admin_job = enqueue(organization_id=OTHER_TENANT)

    for scope in (ReadScope.GLOBAL, ReadScope.organization(OTHER_TENANT)):
        assert code_of(lambda scope=scope: cancel_job(tenant_job, scope=scope)) == "job.not_found"
    assert code_of(lambda: cancel_job(global_job, scope=ReadScope.organization(TENANT))) == (
        "job.not_found"
    )
    assert job_row(tenant_job)["status"] == job_row(global_job)["status"] == "PENDING"

    assert cancel_job(tenant_job, scope=ReadScope.organization(TENANT)) == JobStatus.CANCELED
    assert cancel_job(global_job, scope=ReadScope.GLOBAL) == JobStatus.CANCELED
    assert cancel_job(str(admin_job), scope=ReadScope.ADMIN) == JobStatus.CANCELED
    # A finished job outside the scope is still "not found", never "wrong state".
    assert code_of(lambda: cancel_job(tenant_job, scope=ReadScope.GLOBAL)) == "job.not_found"
    assert code_of(lambda: cancel_job(tenant_job, scope=ReadScope.ADMIN)) == (
        "job.invalid_state_transition"
    )


def test_requeue_job__scopes__exact_tenant_global_and_admin(enqueue: Enqueue) -> None:
    tenant_job = enqueue(organization_id=TENANT)
    cancel_job(tenant_job, scope=ReadScope.ADMIN)

    assert code_of(lambda: requeue_job(tenant_job, scope=ReadScope.GLOBAL)) == "job.not_found"
    assert code_of(lambda: requeue_job(tenant_job, scope=ReadScope.organization(OTHER_TENANT))) == (
        "job.not_found"
    )
    assert requeue_job(tenant_job, scope=ReadScope.ADMIN) == JobStatus.PENDING


@pytest.mark.parametrize(
    ("job_id", "scope"),
    [
        ("not-a-uuid", ReadScope.ADMIN),
        (12, ReadScope.ADMIN),
        (uuid.uuid4(), "admin"),
        (uuid.uuid4(), None),
    ],
    ids=["bad-id", "int-id", "scope-string", "scope-none"],
)
def test_cancel_and_requeue__bad_arguments__rejected_before_sql(
    django_assert_num_queries: DjangoAssertNumQueries, job_id: Any, scope: Any
) -> None:
    with django_assert_num_queries(0):
        assert code_of(lambda: cancel_job(job_id, scope=scope)) == "job.invalid_argument"
        assert code_of(lambda: requeue_job(job_id, scope=scope)) == "job.invalid_argument"


@pytest.mark.django_db(transaction=True)
def test_cancel_and_requeue__session_default_repeatable_read__work(
    enqueue: Enqueue, session_repeatable_read: None
) -> None:
    """cancellation_owns_read_committed_despite_session_default: each action is one
    statement, so no stale snapshot can decide it."""
    job_id = enqueue()
    claim_one()

    assert cancel_job(job_id, scope=ReadScope.GLOBAL) == JobStatus.CANCELED
    assert code_of(lambda: requeue_job(job_id, scope=ReadScope.GLOBAL)) == (
        "job.cancellation_not_quiesced"
    )
    pending = enqueue()
    cancel_job(pending, scope=ReadScope.GLOBAL)
    assert requeue_job(pending, scope=ReadScope.GLOBAL) == JobStatus.PENDING


def test_cancel_job__database_refuses__error_keeps_its_cause_nothing_cancelled(
    enqueue: Enqueue,
) -> None:
    """Our counterpart of cancellation_failures.rs: a refused cancel is one statement rolled
    back whole (no CANCELED row, event or closed attempt), the error carries the driver's
    error as its cause, and the caller's transaction stays usable. The trigger is created in
    the per-test transaction and vanishes with it."""
    job_id = enqueue()
    claim_one()
    run_sql(
        "CREATE FUNCTION runledger_test_refuse_cancel() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF NEW.status = 'CANCELED' THEN RAISE EXCEPTION 'no cancels'; END IF;"
        " RETURN NEW; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_refuse_cancel BEFORE UPDATE ON runledger_job_queue "
        "FOR EACH ROW EXECUTE FUNCTION runledger_test_refuse_cancel()"
    )
    before = (job_row(job_id), attempt_rows(job_id), event_types(job_id))

    with pytest.raises(RunledgerError) as raised:
        cancel_job(job_id, scope=ReadScope.GLOBAL)

    assert (raised.value.code, raised.value.sqlstate) == ("db.query_failed", "P0001")
    assert isinstance(raised.value.__cause__, DatabaseError)
    assert isinstance(raised.value.__cause__.__cause__, psycopg.Error)
    assert (job_row(job_id), attempt_rows(job_id), event_types(job_id)) == before
