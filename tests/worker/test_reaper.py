"""The reaper of expired leases (reference 10).

Upstream: queue_lease_expiry_metadata.rs, queue_reaper_errors.rs and the reaper half of
queue_retry_delay_validation.rs. The transitions themselves (rows 9 and 10) are in
test_state_machine.py; here: parity of the metadata written to the queue row, the attempt row
and the events, a poison row pushed aside while the rest of the batch is reaped, bounds and
validation. ``transaction=True`` tests run the reaper's own autocommit statements, as a
worker does.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pytest_django import DjangoAssertNumQueries

from runledger_django import RunledgerError
from runledger_django.services.lifecycle import heartbeat_leases
from runledger_django.services.reaper import REAPER_RETRY_DELAY_MS, reap_expired_leases
from tests.conftest import MakeDefinition, OpenSession, run_sql
from tests.worker.conftest import (
    TYPE,
    Enqueue,
    attempt_rows,
    claim_one,
    event_rows,
    expire_lease,
    job_row,
    stamp,
)

pytestmark = pytest.mark.django_db

OTHER_TYPE = "jobs.test.other"
MESSAGE = "Job lease expired before completion."


def parity(job_id: uuid.UUID) -> dict[str, Any]:
    """What the queue row, its last attempt row and its last two events say about the reap."""
    row = job_row(job_id)
    attempt = attempt_rows(job_id)[-1]
    failed, second = event_rows(job_id)[-2:]
    return {
        "queue": (row["status_reason"], row["last_error_code"], row["last_error_message"]),
        "attempt": (attempt["failure_kind"], attempt["error_code"], attempt["error_message"]),
        "failed": (
            failed["payload"]["kind"],
            failed["payload"]["error_code"],
            failed["payload"]["error_message"],
        ),
        "second_kind": second["payload"]["kind"],
        "renewal": (
            failed["payload"]["started_without_renewal_heartbeat"],
            second["payload"]["started_without_renewal_heartbeat"],
        ),
        "attempt_of_events": (failed["attempt"], second["attempt"], attempt["attempt"]),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("renewed", [False, True], ids=["never-renewed", "renewed"])
@pytest.mark.parametrize("max_attempts", [3, 1], ids=["retry", "dead-letter"])
def test_reap_expired_leases__metadata_in_parity_across_queue_attempt_and_events(
    enqueue: Enqueue, renewed: bool, max_attempts: int
) -> None:
    """lease_expiry_metadata_stays_in_parity_across_queue_attempt_and_audit_rows: the same
    kind, code, message and schedule on every row; a heartbeat after the claim (a later
    statement, so a later now()) clears started_without_renewal_heartbeat."""
    job_id = enqueue(max_attempts=max_attempts)
    lease = claim_one().lease
    if renewed:
        heartbeat_leases([lease], lease_seconds=60)
    expire_lease(job_id)

    report = reap_expired_leases([TYPE])

    expected: dict[str, Any] = {
        "queue": ("LEASE_EXPIRED", "job.lease_expired", MESSAGE),
        "attempt": ("LEASE_EXPIRED", "job.lease_expired", MESSAGE),
        "failed": ("LEASE_EXPIRED", "job.lease_expired", MESSAGE),
        "second_kind": "LEASE_EXPIRED",
        "renewal": (not renewed, not renewed),
        "attempt_of_events": (1, 1, 1),
    }
    assert parity(job_id) == expected
    row, attempt = job_row(job_id), attempt_rows(job_id)[-1]
    second = event_rows(job_id)[-1]
    if max_attempts == 1:
        assert (report.dead_lettered, row["status"], attempt["outcome"]) == (
            1,
            "DEAD_LETTERED",
            "DEAD_LETTERED",
        )
        assert (second["event_type"], second["payload"]["reason"]) == (
            "DEAD_LETTERED",
            "LEASE_EXPIRED",
        )
        assert attempt["effective_next_run_at"] is None
    else:
        assert (report.retried, row["status"], attempt["outcome"]) == (
            1,
            "PENDING",
            "RETRY_SCHEDULED",
        )
        assert report.next_run_ats == (row["next_run_at"],)
        assert attempt["effective_next_run_at"] == row["next_run_at"]
        assert second["payload"]["next_run_at"] == stamp(row["next_run_at"])
        assert attempt["retry_delay_ms"] == second["payload"]["retry_delay_ms"] == 30_000
        # The flat delay counts from the reaper's transaction start.
        reaped_at = attempt_rows(job_id)[-1]["finished_at"]
        assert row["next_run_at"] - reaped_at == dt.timedelta(milliseconds=REAPER_RETRY_DELAY_MS)


@pytest.mark.parametrize("delay", [0, -1, 2**31, 1.5, True, None], ids=repr)
def test_reap_expired_leases__invalid_retry_delay__rejected_without_touching_leases(
    enqueue: Enqueue, django_assert_num_queries: DjangoAssertNumQueries, delay: Any
) -> None:
    """expired_lease_reapers_reject_invalid_retry_delay_without_mutating_lease."""
    job_id = enqueue()
    claim_one()
    expire_lease(job_id)
    before = job_row(job_id)

    with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
        reap_expired_leases([TYPE], retry_delay_ms=delay)

    assert (raised.value.code, raised.value.category) == ("job.invalid_retry_delay", "validation")
    assert job_row(job_id) == before


def test_reap_expired_leases__custom_delay_and_limit__oldest_first_batch_full(
    enqueue: Enqueue,
) -> None:
    ids = [enqueue() for _ in range(3)]
    for _ in ids:
        claim_one()
    for offset, job_id in zip((3, 1, 2), ids, strict=True):
        run_sql(
            "UPDATE runledger_job_queue SET lease_expires_at = now() - %s * interval '1 minute' "
            "WHERE id = %s",
            [offset, job_id],
        )

    first = reap_expired_leases([TYPE], limit=2, retry_delay_ms=1)

    assert (first.retried, first.batch_was_full) == (2, True)
    assert [job_row(job_id)["status"] for job_id in ids] == ["PENDING", "LEASED", "PENDING"]
    assert attempt_rows(ids[0])[0]["retry_delay_ms"] == 1
    second = reap_expired_leases([TYPE], limit=2, retry_delay_ms=1)
    assert (second.retried, second.batch_was_full) == (1, False)


def test_reap_expired_leases__other_job_types__left_alone(
    enqueue: Enqueue, make_definition: MakeDefinition
) -> None:
    make_definition(OTHER_TYPE)
    mine = enqueue()
    theirs = enqueue(job_type=OTHER_TYPE)
    claim_one()
    claim_one(job_types=[OTHER_TYPE])
    expire_lease(mine)
    expire_lease(theirs)

    assert reap_expired_leases([TYPE]).retried == 1
    assert (job_row(mine)["status"], job_row(theirs)["status"]) == ("PENDING", "LEASED")
    assert reap_expired_leases([]).reaped == 0


@pytest.fixture
def poison_row() -> Iterator[list[uuid.UUID]]:
    """A trigger that refuses any move of the listed jobs out of LEASED (a broken row, as a
    failing workflow hook or a corrupt value would leave one); dropped at teardown."""
    poisoned: list[uuid.UUID] = []
    run_sql("CREATE TABLE runledger_test_poison (id uuid PRIMARY KEY)")
    run_sql(
        "CREATE FUNCTION runledger_test_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.status <> 'LEASED' AND EXISTS (SELECT 1 FROM runledger_test_poison"
        " WHERE id = NEW.id) THEN RAISE EXCEPTION 'secret internal detail'"
        " USING ERRCODE = 'check_violation', CONSTRAINT = 'test_poison'; END IF;"
        " RETURN NEW; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_poison BEFORE UPDATE ON runledger_job_queue "
        "FOR EACH ROW EXECUTE FUNCTION runledger_test_poison()"
    )
    yield poisoned
    run_sql("DROP TRIGGER runledger_test_poison ON runledger_job_queue")
    run_sql("DROP FUNCTION runledger_test_poison()")
    run_sql("DROP TABLE runledger_test_poison")


@pytest.mark.django_db(transaction=True)
def test_reap_expired_leases__poison_row__deferred_rest_of_batch_reaped(
    enqueue: Enqueue, poison_row: list[uuid.UUID], caplog: pytest.LogCaptureFixture
) -> None:
    """expired_lease_reaper_reports_deferred_row_error_and_continues_batch: the failing row
    keeps its lease, pushed a retry delay forward so it stops heading every batch; the others
    are reaped; the error is logged by code and constraint, never with the database's text."""
    ids = [enqueue() for _ in range(3)]
    for _ in ids:
        claim_one()
    for job_id in ids:
        expire_lease(job_id)
    poison = ids[1]
    run_sql("INSERT INTO runledger_test_poison VALUES (%s)", [poison])
    caplog.set_level(logging.WARNING, logger="runledger_django")

    report = reap_expired_leases([TYPE], retry_delay_ms=60_000)

    assert (report.retried, report.dead_lettered, report.deferred) == (2, 0, 1)
    assert [job_row(job_id)["status"] for job_id in ids] == ["PENDING", "LEASED", "PENDING"]
    pushed = run_sql(
        "SELECT lease_expires_at - now() > interval '50 seconds' FROM runledger_job_queue "
        "WHERE id = %s",
        [poison],
    )[0][0]
    assert pushed
    assert event_rows(poison)[-1]["event_type"] == "LEASED"
    assert attempt_rows(poison)[0]["outcome"] is None
    warning = [r for r in caplog.records if "could not reap" in r.getMessage()]
    assert len(warning) == 1
    assert str(poison) in warning[0].getMessage()
    assert "test_poison" in warning[0].getMessage()
    assert "secret internal detail" not in caplog.text
    # Until the pushed lease expires, later passes leave it alone.
    assert reap_expired_leases([TYPE]).reaped == 0


@pytest.mark.django_db(transaction=True)
def test_reap_expired_leases__row_locked_by_a_late_worker__skipped(
    enqueue: Enqueue, open_session: OpenSession
) -> None:
    """SKIP LOCKED: a row another session is writing is left for the next pass."""
    locked = enqueue()
    free = enqueue()
    claim_one()
    claim_one()
    expire_lease(locked)
    expire_lease(free)
    holder: psycopg.Connection[Any] = open_session(autocommit=False)
    holder.execute("SELECT 1 FROM runledger_job_queue WHERE id = %s FOR UPDATE", [locked])

    assert reap_expired_leases([TYPE]).retried == 1
    assert (job_row(locked)["status"], job_row(free)["status"]) == ("LEASED", "PENDING")

    holder.rollback()
    assert reap_expired_leases([TYPE]).retried == 1
