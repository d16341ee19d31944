"""Fixtures shared by the concurrency tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import OpenSession, run_sql

PARK_KEY = (4242, 1)
"""Advisory key a test session holds to park promotions inside their PROMOTED update."""


@pytest.fixture
def park_promoted_update(
    open_session: OpenSession,
) -> Iterator[psycopg.Connection[Any]]:
    """Make the PENDING -> PROMOTED update wait until the returned session unlocks PARK_KEY."""
    holder = open_session()
    holder.execute("SELECT pg_advisory_lock(%s, %s)", PARK_KEY)
    run_sql(
        "CREATE FUNCTION runledger_test_park() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.status = 'PROMOTED' THEN"
        f" PERFORM pg_advisory_xact_lock_shared({PARK_KEY[0]}, {PARK_KEY[1]}); END IF;"
        " RETURN NEW; END $$"
    )
    run_sql(
        "CREATE TRIGGER runledger_test_park BEFORE UPDATE ON runledger_job_enqueue_intents"
        " FOR EACH ROW EXECUTE FUNCTION runledger_test_park()"
    )
    yield holder
    holder.execute("SELECT pg_advisory_unlock_all()")
    run_sql("DROP TRIGGER runledger_test_park ON runledger_job_enqueue_intents")
    run_sql("DROP FUNCTION runledger_test_park()")


def release_park(holder: psycopg.Connection[Any]) -> bool:
    """Let parked promotions go on; True when the holder really held the park."""
    row = holder.execute("SELECT pg_advisory_unlock(%s, %s)", PARK_KEY).fetchone()
    return bool(row and row[0])
