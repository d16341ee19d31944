"""Poison rows: values written by hand that Python cannot read, or that the state machine cannot
move, never wedge a path (issue 13, item 3). The job paths of the worker are in
tests/worker/test_poison_jobs.py.

Each shape is written with raw SQL. Tests that run a promotion pass use ``transaction=True``:
a pass owns its transaction and refuses to run inside the test's. Where a CHECK refuses it at insert, the test asserts the
refusal and the constraint's name. Where nothing can, the row is decided on its first pass (an
intent conflicted, a job dead-lettered) with a clear code, and the healthy rows written before
and after it go through in that same pass.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.test import Client
from django.urls import reverse

from runledger_django import (
    ReadScope,
    RunledgerError,
    delete_promoted_intents_before,
    enqueue_job,
    get_intent,
    intent_metrics,
    job_metrics,
    list_intents,
    promote_intents,
    record_intent,
)
from runledger_django.errors import Code
from runledger_django.models import Job, JobEnqueueIntent
from runledger_django.validation import STORED_TIME_MAX, STORED_TIME_MIN
from tests.conftest import TEST_JOB_TYPE, MakeDefinition, insert_raw_intent, run_sql

pytestmark = pytest.mark.django_db

TYPE = TEST_JOB_TYPE
INTENT_CHECK = "chk_job_enqueue_intents_values_in_range"
JOB_CHECK = "chk_job_queue_values_in_range"
COUNTER_MAX = 2**31 - 2
"""The largest counter a row may hold: one increment more still fits in an integer."""

UNREADABLE_TIMES = {
    "infinity": "infinity",
    "minus-infinity": "-infinity",
    "year-10000": "10000-01-01 00:00:00+00",
    "bc": "0044-03-15 12:00:00+00 BC",
    # Python reads it in UTC, but not as local time anywhere west of Greenwich.
    "first-day": "0001-01-01 12:00:00+00",
    "last-day": "9999-12-31 06:00:00+00",
}
RETRYING = {
    "promotion_attempts": 1,
    "last_attempted_at": "now",
    "last_error_code": "db.query_failed",
    "last_error_message": "Database operation failed.",
}
CONFLICTED = {
    **RETRYING,
    "status": "CONFLICTED",
    "conflicted_at": "now",
    "last_error_code": "job.idempotency_conflict",
}

# Enough 9s that Python's int() refuses the number (its int-to-str limit is 4300 digits).
HUGE_NUMBER = "repeat('9', 5000)::numeric"


def refusal(sql: str, params: Any = None) -> tuple[str | None, str | None]:
    """Run a statement that a constraint must refuse; return (sqlstate, constraint name)."""
    with pytest.raises(IntegrityError) as raised, transaction.atomic():
        run_sql(sql, params)
    cause = raised.value.__cause__
    return getattr(cause, "sqlstate", None), getattr(cause, "diag", None) and (
        cause.diag.constraint_name  # type: ignore[union-attr]
    )


def raw_intent_refused(**columns: Any) -> tuple[str | None, str | None]:
    with pytest.raises(IntegrityError) as raised, transaction.atomic():
        insert_raw_intent(**columns)
    cause: Any = raised.value.__cause__
    return cause.sqlstate, cause.diag.constraint_name


def insert_raw_job(**columns: Any) -> uuid.UUID:
    """A job row written with raw SQL (a PENDING job of the test type unless told otherwise)."""
    values: dict[str, Any] = {"job_type": TYPE, "max_attempts": 3, **columns}
    names = list(values)
    rows = run_sql(
        f"INSERT INTO runledger_job_queue ({', '.join(names)}) "
        f"VALUES ({', '.join(f'%({name})s' for name in names)}) RETURNING id",
        values,
    )
    return uuid.UUID(str(rows[0][0]))


def raw_job_refused(**columns: Any) -> tuple[str | None, str | None]:
    with pytest.raises(IntegrityError) as raised, transaction.atomic():
        insert_raw_job(**columns)
    cause: Any = raised.value.__cause__
    return cause.sqlstate, cause.diag.constraint_name


def record(key: str, **kwargs: Any) -> uuid.UUID:
    return record_intent(TYPE, {"key": key}, idempotency_key=key, **kwargs).intent_id


def intent(intent_id: uuid.UUID) -> dict[str, Any]:
    return dict(
        JobEnqueueIntent.objects.values(
            "status", "promotion_attempts", "last_error_code", "last_error_message"
        ).get(id=intent_id)
    )


def make_huge_payload(intent_id: uuid.UUID) -> None:
    """Give an intent a payload jsonb keeps and Python cannot parse, its snapshot in step."""
    run_sql(
        f"UPDATE runledger_job_enqueue_intents SET payload = jsonb_build_object('n', {HUGE_NUMBER}),"
        f" enqueue_request = jsonb_set(enqueue_request, '{{payload}}',"
        f" jsonb_build_object('n', {HUGE_NUMBER})) WHERE id = %s",
        [intent_id],
    )


# --- intents: refused at insert ------------------------------------------------------------


def promoted_columns() -> dict[str, Any]:
    job_id = enqueue_job(TYPE, {}).job_id
    return {
        **RETRYING,
        "status": "PROMOTED",
        "promoted_job_id": job_id,
        "promoted_at": "now",
        "last_error_code": None,
        "last_error_message": None,
    }


# column -> the lifecycle columns that make a row with it set valid in every other way.
INTENT_TIMESTAMPS: dict[str, Callable[[], dict[str, Any]]] = {
    "next_run_at": dict,
    "next_promotion_at": dict,
    "last_attempted_at": lambda: dict(RETRYING),
    "promoted_at": promoted_columns,
    "conflicted_at": lambda: dict(CONFLICTED),
    "created_at": dict,
    "updated_at": dict,
}


@pytest.mark.parametrize("value", list(UNREADABLE_TIMES.values()), ids=list(UNREADABLE_TIMES))
@pytest.mark.parametrize("column", list(INTENT_TIMESTAMPS))
def test_intent_insert__timestamp_python_cannot_read__refused_by_check(
    make_definition: MakeDefinition, column: str, value: str
) -> None:
    make_definition()
    columns = INTENT_TIMESTAMPS[column]()

    assert raw_intent_refused(**{**columns, column: value}) == ("23514", INTENT_CHECK)
    # The shape itself is fine: at the edge of the readable range it goes in.
    insert_raw_intent(**{**columns, column: STORED_TIME_MIN})


def test_intent_update__timestamp_python_cannot_read__refused_by_check() -> None:
    intent_id = insert_raw_intent()

    assert refusal(
        "UPDATE runledger_job_enqueue_intents SET next_promotion_at = 'infinity' WHERE id = %s",
        [intent_id],
    ) == ("23514", INTENT_CHECK)


def test_intent_insert__promotion_attempts_at_integer_max__refused_by_check() -> None:
    assert raw_intent_refused(**{**RETRYING, "promotion_attempts": 2**31 - 1}) == (
        "23514",
        INTENT_CHECK,
    )


def test_intent_insert__snapshot_of_another_version__refused_by_check() -> None:
    assert raw_intent_refused(enqueue_request_version=2) == (
        "23514",
        "chk_job_enqueue_intents_enqueue_request_version",
    )


def test_intent_insert__no_snapshot__refused_by_not_null() -> None:
    sqlstate, _ = refusal(
        "INSERT INTO runledger_job_enqueue_intents "
        "(job_type, payload, idempotency_key, enqueue_request) VALUES (%s, '{}', 'k', NULL)",
        [TYPE],
    )

    assert sqlstate == "23502"


@pytest.mark.parametrize(
    "when",
    [
        dt.datetime(9999, 12, 31, 12, tzinfo=dt.UTC),
        dt.datetime.max.replace(tzinfo=dt.UTC),
        dt.datetime(1, 1, 1, 12, tzinfo=dt.UTC),
        dt.datetime(1, 1, 2, 11, tzinfo=dt.timezone(dt.timedelta(hours=14))),
    ],
    ids=["last-day", "max", "first-day", "first-day-east"],
)
@pytest.mark.parametrize("enqueue", [record_intent, enqueue_job], ids=["record", "enqueue"])
def test_enqueue__next_run_at_the_tables_cannot_store__refused_before_any_sql(
    make_definition: MakeDefinition,
    django_assert_num_queries: Any,
    enqueue: Callable[..., Any],
    when: dt.datetime,
) -> None:
    """Refused by validation, not by the CHECK, so the caller's transaction stays usable."""
    make_definition()
    with django_assert_num_queries(0), pytest.raises(RunledgerError) as raised:
        enqueue(TYPE, {}, idempotency_key="k", next_run_at=when)

    assert raised.value.code == "job.invalid_next_run_at"
    enqueue(TYPE, {}, idempotency_key="edge", next_run_at=STORED_TIME_MIN)


# --- intents: decided on the first pass ----------------------------------------------------


def canonical(payload: Any) -> dict[str, Any]:
    return {
        "payload": payload,
        "priority": None,
        "max_attempts": None,
        "timeout_seconds": None,
        "next_run_at": None,
        "stage": "queued",
    }


BROKEN_SNAPSHOTS: dict[str, Any] = {
    "columns-differ": canonical({"n": 2}),
    "array": [],
    "string": "a request",
    "number": 42,
    "json-null": None,
    "another-version": {**canonical({"n": 1}), "version": 2},
}


def insert_broken_snapshot(snapshot: Any) -> uuid.UUID:
    intent_id = insert_raw_intent(idempotency_key="poison", payload={"n": 1})
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET enqueue_request = %s::jsonb WHERE id = %s",
        [json.dumps(snapshot), intent_id],
    )
    return intent_id


PATHS = ["set-based", "converge", "per-row"]
BURST = 30
"""Rows with an existing job, more than the per-row path takes: the pass settles them in one
converging statement."""


@pytest.fixture
def refuse_jobs_keyed() -> Iterator[Callable[[str], None]]:
    """Make every job insert under a given key fail (a trigger), dropped at teardown."""
    installed: list[str] = []

    def install(key: str) -> None:
        name = f"runledger_test_refuse_{len(installed)}"
        run_sql(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF NEW.idempotency_key = '{key}' THEN RAISE EXCEPTION 'refused'; END IF;"
            " RETURN NEW; END $$"
        )
        run_sql(
            f"CREATE TRIGGER {name} BEFORE INSERT ON runledger_job_queue "
            f"FOR EACH ROW EXECUTE FUNCTION {name}()"
        )
        installed.append(name)

    yield install
    for name in installed:
        run_sql(f"DROP TRIGGER IF EXISTS {name} ON runledger_job_queue")
        run_sql(f"DROP FUNCTION IF EXISTS {name}()")


def prepare_path(path: str, refuse_jobs_keyed: Callable[[str], None]) -> list[uuid.UUID]:
    """The rows that make a pass take ``path``; they must all be promoted by it."""
    if path == "converge":
        for n in range(BURST):
            enqueue_job(TYPE, {"key": f"direct-{n}"}, idempotency_key=f"direct-{n}")
        return [record(f"direct-{n}") for n in range(BURST)]
    if path == "per-row":
        # One job insert fails: the set-based statement is undone, every row goes per row.
        refuse_jobs_keyed("refused")
        return []
    return []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("snapshot", list(BROKEN_SNAPSHOTS.values()), ids=list(BROKEN_SNAPSHOTS))
@pytest.mark.django_db(transaction=True)
def test_promote_intents__snapshot_that_cannot_match__conflicted_first_pass_neighbours_promoted(
    make_definition: MakeDefinition,
    refuse_jobs_keyed: Callable[[str], None],
    snapshot: Any,
    path: str,
) -> None:
    """Deferred forever before (reference 4.4 retries drift): now CONFLICTED at once."""
    make_definition()
    others = prepare_path(path, refuse_jobs_keyed)
    before = record("before")
    poison = insert_broken_snapshot(snapshot)
    after = record("after")
    refused = record("refused") if path == "per-row" else None

    report = promote_intents([TYPE], limit=1000)

    assert (report.conflicted, report.total_promoted) == (1, 2 + len(others))
    assert intent(poison) == {
        "status": "CONFLICTED",
        "promotion_attempts": 1,
        "last_error_code": "job.intent_snapshot_mismatch",
        "last_error_message": "Job enqueue intent request snapshot is inconsistent.",
    }
    assert {intent(i)["status"] for i in (before, after, *others)} == {"PROMOTED"}
    if refused is not None:
        assert report.retry_deferred == 1
        assert intent(refused)["last_error_code"] == "db.query_failed"
    assert not Job.objects.filter(idempotency_key="poison").exists()


@pytest.mark.django_db(transaction=True)
def test_promote_intents__promotion_attempts_at_the_bound__every_outcome_without_overflow(
    make_definition: MakeDefinition, refuse_jobs_keyed: Callable[[str], None]
) -> None:
    """A row written with the largest count a CHECK allows is promoted, conflicted or deferred
    like any other; its count stays at the bound instead of overflowing on every pass."""
    make_definition()
    at_bound = {**RETRYING, "promotion_attempts": COUNTER_MAX}
    before = record("before")
    promoted = insert_raw_intent(idempotency_key="bound-promoted", **at_bound)
    conflicted = insert_raw_intent(
        idempotency_key="bound-conflicted", enqueue_request=canonical({"other": 1}), **at_bound
    )
    deferred = insert_raw_intent(idempotency_key="bound-deferred", **at_bound)
    after = record("after")
    refuse_jobs_keyed("bound-deferred")

    report = promote_intents([TYPE])

    assert (report.total_promoted, report.conflicted, report.retry_deferred) == (3, 1, 1)
    assert [
        (intent(i)["status"], intent(i)["promotion_attempts"])
        for i in (promoted, conflicted, deferred)
    ] == [("PROMOTED", COUNTER_MAX), ("CONFLICTED", COUNTER_MAX), ("PENDING", COUNTER_MAX)]
    assert {intent(i)["status"] for i in (before, after)} == {"PROMOTED"}


@pytest.mark.django_db(transaction=True)
def test_intent__payload_python_cannot_parse__promoted_and_reads_refuse_it_with_a_code(
    make_definition: MakeDefinition,
) -> None:
    """jsonb keeps an integer Python's int() refuses. Promotion never parses a payload, so
    the intent is promoted with its neighbours; the scoped reads name the row as corrupt
    instead of raising a bare ValueError."""
    make_definition()
    before = record("before")
    poison = record("poison")
    make_huge_payload(poison)
    after = record("after")

    report = promote_intents([TYPE])

    assert report.inserted_jobs == 3
    assert (
        JobEnqueueIntent.objects.filter(id__in=[before, poison, after])
        .values_list("status", flat=True)
        .distinct()
        .get()
        == "PROMOTED"
    )
    for read in (
        lambda: get_intent(poison, scope=ReadScope.ADMIN),
        lambda: list_intents(scope=ReadScope.ADMIN),
    ):
        with pytest.raises(RunledgerError) as raised:
            read()
        assert raised.value.code == Code.INTENT_INVALID_PERSISTED_ROW
    assert get_intent(before, scope=ReadScope.ADMIN) is not None


# --- jobs: refused at insert ---------------------------------------------------------------

JOB_TIMESTAMPS = (
    "next_run_at",
    "lease_expires_at",
    "last_heartbeat_at",
    "started_at",
    "finished_at",
    "created_at",
    "updated_at",
)


@pytest.mark.parametrize("value", list(UNREADABLE_TIMES.values()), ids=list(UNREADABLE_TIMES))
@pytest.mark.parametrize("column", JOB_TIMESTAMPS)
def test_job_insert__timestamp_python_cannot_read__refused_by_check(
    make_definition: MakeDefinition, column: str, value: str
) -> None:
    make_definition()

    assert raw_job_refused(**{column: value}) == ("23514", JOB_CHECK)
    insert_raw_job(**{column: STORED_TIME_MAX - dt.timedelta(microseconds=1)})


@pytest.mark.parametrize("column", ["attempt", "run_number"])
def test_job_insert__counter_at_integer_max__refused_by_check(
    make_definition: MakeDefinition, column: str
) -> None:
    """At 2**31 - 1 the claim's attempt + 1 (or a requeue's run number + 1) would overflow."""
    make_definition()

    assert raw_job_refused(**{column: 2**31 - 1}) == ("23514", JOB_CHECK)
    insert_raw_job(**{column: COUNTER_MAX})


def test_job_update__timestamp_python_cannot_read__refused_by_check(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    job_id = enqueue_job(TYPE, {}).job_id

    assert refusal(
        "UPDATE runledger_job_queue SET next_run_at = '-infinity' WHERE id = %s", [job_id]
    ) == ("23514", JOB_CHECK)


# --- values at the edge of the range are readable everywhere -----------------------------------

EDGES = {"first": STORED_TIME_MIN, "last": STORED_TIME_MAX - dt.timedelta(microseconds=1)}


@pytest.fixture
def edge_rows(make_definition: MakeDefinition) -> dict[str, tuple[uuid.UUID, uuid.UUID]]:
    """An intent and a PENDING job at each edge of the storable range, in every column a
    changelist or a metric shows."""
    make_definition()
    rows = {}
    for name, edge in EDGES.items():
        intent_id = insert_raw_intent(
            idempotency_key=f"edge-{name}",
            next_run_at=edge,
            next_promotion_at=edge,
            created_at=edge,
            enqueue_request=canonical({}) | {"next_run_at": edge.strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
        )
        job_id = insert_raw_job(
            idempotency_key=f"edge-{name}",
            enqueue_request=json.dumps(canonical({})),
            next_run_at=edge,
            created_at=edge,
        )
        rows[name] = (intent_id, job_id)
    return rows


@pytest.mark.parametrize("time_zone", ["UTC", "Pacific/Kiritimati", "Etc/GMT+12"])
def test_admin_changelists__times_at_the_range_edges__render_in_any_time_zone(
    admin_client: Client,
    settings: Any,
    edge_rows: dict[str, tuple[uuid.UUID, uuid.UUID]],
    time_zone: str,
) -> None:
    """The range stops a day inside Python's, so local time +14 h or -12 h still exists."""
    settings.TIME_ZONE = time_zone
    for url in (
        reverse("admin:runledger_jobenqueueintent_changelist"),
        reverse("admin:runledger_job_changelist"),
        *(
            reverse("admin:runledger_jobenqueueintent_change", args=(i,))
            for i, _ in edge_rows.values()
        ),
        *(reverse("admin:runledger_job_change", args=(j,)) for _, j in edge_rows.values()),
    ):
        assert admin_client.get(url).status_code == 200, url


def test_metrics_and_reads__times_at_the_range_edges__decoded(
    edge_rows: dict[str, tuple[uuid.UUID, uuid.UUID]],
) -> None:
    [intents] = intent_metrics(scope=ReadScope.GLOBAL)
    [jobs] = job_metrics(scope=ReadScope.GLOBAL)

    assert intents.oldest_pending_at == EDGES["first"]
    assert jobs.oldest_due_at == EDGES["first"]
    assert {row.next_run_at for row in list_intents(scope=ReadScope.GLOBAL)} == set(EDGES.values())


# --- the admin shows what Python cannot parse ------------------------------------------------


def test_admin__json_python_cannot_parse__changelists_and_pages_render_it_as_stored(
    admin_client: Client, make_definition: MakeDefinition
) -> None:
    """One such value used to fail the whole change page (Django parses every JSON column
    of the object); a changelist never parses them."""
    make_definition()
    healthy = record("healthy")
    poison = record("poison")
    make_huge_payload(poison)
    job_id = enqueue_job(TYPE, {"n": 1}).job_id
    run_sql(
        f"UPDATE runledger_job_queue SET payload = jsonb_build_object('n', {HUGE_NUMBER}),"
        f" output = to_jsonb({HUGE_NUMBER}), checkpoint = jsonb_build_array({HUGE_NUMBER})"
        " WHERE id = %s",
        [job_id],
    )

    intents = admin_client.get(reverse("admin:runledger_jobenqueueintent_changelist"))
    jobs = admin_client.get(reverse("admin:runledger_job_changelist"))
    intent_page = admin_client.get(
        reverse("admin:runledger_jobenqueueintent_change", args=(poison,))
    )
    job_page = admin_client.get(reverse("admin:runledger_job_change", args=(job_id,)))

    assert [r.status_code for r in (intents, jobs, intent_page, job_page)] == [200] * 4
    assert str(poison) in intents.content.decode() and str(healthy) in intents.content.decode()
    assert str(job_id) in jobs.content.decode()
    for page, count in ((intent_page, 1), (job_page, 3)):
        content = page.content.decode()
        assert content.count('class="runledger-undecodable"') == count
        assert "9" * 5000 in content
    assert '<pre class="runledger-canonical-request">{\n  &quot;max_attempts&quot;' in (
        admin_client.get(
            reverse("admin:runledger_jobenqueueintent_change", args=(healthy,))
        ).content.decode()
    )


# --- retention never parses what it deletes --------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_prune_promoted_intents__payload_python_cannot_parse__deleted_with_the_others(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    ids = [record(f"old-{n}") for n in range(3)]
    make_huge_payload(ids[1])
    promote_intents([TYPE])

    deleted = delete_promoted_intents_before(
        dt.datetime.now(dt.UTC) + dt.timedelta(days=1), limit=10
    )

    assert deleted == 3
    assert not JobEnqueueIntent.objects.filter(id__in=ids).exists()


# --- rows written before migration 0007 --------------------------------------------------------


def row_as_of_0006(table: str, row_id: uuid.UUID) -> dict[str, Any]:
    """A row as JSON, read with raw SQL (its columns are whatever the schema has now)."""
    rows = run_sql(f"SELECT to_jsonb(t)::text FROM {table} t WHERE id = %s", [row_id])
    value: dict[str, Any] = json.loads(rows[0][0])
    return value


@pytest.fixture
def remigrate_at_end() -> Iterator[None]:
    """Whatever happens, leave the full schema for the tests that run later."""
    try:
        yield
    finally:
        call_command("migrate", verbosity=0)


@pytest.mark.django_db(transaction=True)
def test_migration_0007__rows_written_before__brought_into_range_and_checks_validated(
    make_definition: MakeDefinition, remigrate_at_end: None
) -> None:
    """An upgrade never fails on such rows: they are brought to the nearest readable value
    ("never" stays never, "long ago" stays due) before the CHECKs are validated."""
    call_command("migrate", "runledger", "0006", verbosity=0)
    # Raw SQL from here to the migration: the models carry columns later migrations add.
    run_sql(
        "INSERT INTO runledger_job_definitions (job_type, max_attempts, default_timeout_seconds, "
        "default_priority, is_enabled) VALUES (%s, 3, 60, 100, true)",
        [TYPE],
    )
    poison_intent = insert_raw_intent(
        **RETRYING,
        next_promotion_at="-infinity",
        next_run_at="infinity",
    )
    run_sql(
        "UPDATE runledger_job_enqueue_intents SET promotion_attempts = 2147483647 WHERE id = %s",
        [poison_intent],
    )
    healthy_intent = insert_raw_intent(idempotency_key="healthy")
    poison_job = insert_raw_job(next_run_at="infinity", attempt=2**31 - 1, run_number=2**31 - 1)
    healthy_job = insert_raw_job(attempt=2)
    untouched = {
        "intent": row_as_of_0006("runledger_job_enqueue_intents", healthy_intent),
        "job": row_as_of_0006("runledger_job_queue", healthy_job),
    }

    call_command("migrate", "runledger", verbosity=0)

    assert run_sql(
        "SELECT conname, convalidated FROM pg_constraint WHERE conname IN (%s, %s) "
        "ORDER BY conname",
        [INTENT_CHECK, JOB_CHECK],
    ) == [(INTENT_CHECK, True), (JOB_CHECK, True)]
    assert JobEnqueueIntent.objects.values_list(
        "next_promotion_at", "next_run_at", "promotion_attempts"
    ).get(id=poison_intent) == (STORED_TIME_MIN, EDGES["last"], COUNTER_MAX)
    assert Job.objects.values_list("next_run_at", "attempt", "run_number").get(id=poison_job) == (
        EDGES["last"],
        COUNTER_MAX,
        COUNTER_MAX,
    )
    for table, row_id, before in (
        ("runledger_job_enqueue_intents", healthy_intent, untouched["intent"]),
        ("runledger_job_queue", healthy_job, untouched["job"]),
    ):
        after = row_as_of_0006(table, row_id)
        assert {name: after[name] for name in before} == before
