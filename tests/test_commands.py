"""The management commands: options, output, exit codes and their effects on the database.

Tests that promote use ``django_db(transaction=True)``: a promotion pass owns its transaction
and refuses to run inside the test's atomic block, and the subprocess promoter must see
committed rows. The rest roll back as usual.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from pytest_django import Settings as SettingsWrapper

from runledger_django import (
    IntentMetrics,
    PromotionReport,
    RunledgerError,
    Workflow,
    enqueue_job,
    record_intent,
    record_workflow_intent,
)
from runledger_django.management import cli
from runledger_django.models import Job, JobEnqueueIntent, WorkflowIntent, WorkflowRun
from runledger_django.services import operations
from tests.conftest import TEST_JOB_TYPE, MakeDefinition, wait_for_lock_wait

pytestmark = pytest.mark.django_db

REPORT_KEYS = {f.name for f in fields(PromotionReport)}
METRICS_KEYS = {f.name for f in fields(IntentMetrics)}
OTHER_JOB_TYPE = "jobs.test.other"
BASE_DIR = Path(__file__).resolve().parent.parent


def run(*args: str, stdout: io.StringIO | None = None) -> str:
    out = stdout if stdout is not None else io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def record(count: int, *, job_type: str = TEST_JOB_TYPE, **kwargs: Any) -> list[uuid.UUID]:
    return [
        record_intent(job_type, {"n": n}, idempotency_key=f"{job_type}:{n}", **kwargs).intent_id
        for n in range(count)
    ]


def statuses(job_type: str = TEST_JOB_TYPE) -> list[str]:
    return sorted(
        JobEnqueueIntent.objects.filter(job_type=job_type).values_list("status", flat=True)
    )


class TerminalOutput(io.StringIO):
    def isatty(self) -> bool:
        return True


# --- promote_intents ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_promote_intents__drain_with_full_batches__repeats_passes(
    make_definition: MakeDefinition,
) -> None:
    """60 intents with --limit 24: two full passes, then one that is not full ends the drain."""
    make_definition()
    record(60)
    assert Job.objects.count() == 0

    output = run("promote_intents", "--limit", "24", "--json")

    passes = [json.loads(line) for line in output.splitlines()]
    assert [set(p) for p in passes] == [REPORT_KEYS] * 3
    assert [(p["inserted_jobs"], p["batch_was_full"]) for p in passes] == [
        (24, True),
        (24, True),
        (12, False),
    ]
    assert statuses() == ["PROMOTED"] * 60
    assert Job.objects.count() == 60


@pytest.mark.django_db(transaction=True)
def test_promote_intents__workflow_intents_pending__each_pass_starts_their_runs(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    flow = Workflow("commands.flow")
    flow.step("only", TEST_JOB_TYPE, {"n": 1})
    record_workflow_intent(flow, idempotency_key="flow:1")

    run("promote_intents", "--json")

    assert WorkflowIntent.objects.get().status == "PROMOTED"
    assert WorkflowRun.objects.get().idempotency_key == "flow:1"
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_promote_intents__nothing_pending__one_empty_pass(make_definition: MakeDefinition) -> None:
    make_definition()

    output = run("promote_intents", "--json")

    assert [json.loads(line) for line in output.splitlines()] == [PromotionReport().to_dict()]


@pytest.mark.django_db(transaction=True)
def test_promote_intents__not_a_terminal__one_line_per_pass_and_summary(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    record(5)

    lines = run("promote_intents", "--limit", "2").splitlines()

    assert lines == [
        "pass 1: promoted 2 (2 inserted, 0 existing), 0 conflicted, 0 retry deferred, "
        "0 definition unavailable, batch full",
        "pass 2: promoted 2 (2 inserted, 0 existing), 0 conflicted, 0 retry deferred, "
        "0 definition unavailable, batch full",
        "pass 3: promoted 1 (1 inserted, 0 existing), 0 conflicted, 0 retry deferred, "
        "0 definition unavailable",
        "Promoted 5 intents in 3 passes (5 inserted, 0 existing); 0 conflicted, "
        "0 retry deferred, 0 definition unavailable.",
    ]


@pytest.mark.django_db(transaction=True)
def test_promote_intents__terminal__live_counter(make_definition: MakeDefinition) -> None:
    make_definition()
    record(3)
    out = TerminalOutput()

    run("promote_intents", "--limit", "1", stdout=out)

    text = out.getvalue()
    assert text.startswith("\rpromoted 1 intents in 1 passes")
    assert "\rpromoted 3 intents in 3 passes" in text
    assert text.endswith(
        "\nPromoted 3 intents in 4 passes (3 inserted, 0 existing); "
        "0 conflicted, 0 retry deferred, 0 definition unavailable.\n"
    )


@pytest.mark.django_db(transaction=True)
def test_promote_intents__verbosity_zero__prints_nothing(make_definition: MakeDefinition) -> None:
    make_definition()
    record(2)

    assert run("promote_intents", "--verbosity", "0") == ""
    assert statuses() == ["PROMOTED", "PROMOTED"]


@pytest.mark.django_db(transaction=True)
def test_promote_intents__job_type_option__promotes_only_those(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    make_definition(OTHER_JOB_TYPE)
    record(2)
    record(2, job_type=OTHER_JOB_TYPE)

    run("promote_intents", "--job-type", OTHER_JOB_TYPE)

    assert statuses() == ["PENDING", "PENDING"]
    assert statuses(OTHER_JOB_TYPE) == ["PROMOTED", "PROMOTED"]


@pytest.mark.django_db(transaction=True)
def test_promote_intents__settings_job_types__used_without_option(
    make_definition: MakeDefinition, settings: SettingsWrapper
) -> None:
    make_definition()
    make_definition(OTHER_JOB_TYPE)
    record(1)
    record(1, job_type=OTHER_JOB_TYPE)
    settings.RUNLEDGER = {"PROMOTE_JOB_TYPES": [TEST_JOB_TYPE]}

    run("promote_intents")

    assert statuses() == ["PROMOTED"]
    assert statuses(OTHER_JOB_TYPE) == ["PENDING"]


@pytest.mark.django_db(transaction=True)
def test_promote_intents__no_types_given__every_enabled_definition(
    make_definition: MakeDefinition,
) -> None:
    make_definition()
    make_definition(OTHER_JOB_TYPE, is_enabled=False)
    record(1)
    record(1, job_type=OTHER_JOB_TYPE)

    run("promote_intents")

    assert statuses() == ["PROMOTED"]
    assert statuses(OTHER_JOB_TYPE) == ["PENDING"]


@pytest.mark.django_db(transaction=True)
def test_promote_intents__no_job_types_at_all__warns_and_exits_cleanly() -> None:
    err = io.StringIO()
    call_command("promote_intents", stdout=io.StringIO(), stderr=err)

    assert "No job types to promote" in err.getvalue()


@pytest.mark.django_db(transaction=True)
def test_promote_intents__settings_batch_size__is_the_default_limit(
    make_definition: MakeDefinition, settings: SettingsWrapper
) -> None:
    make_definition()
    record(3)
    settings.RUNLEDGER = {"PROMOTION_BATCH_SIZE": 2}

    passes = run("promote_intents", "--json").splitlines()

    assert [json.loads(p)["total_promoted"] for p in passes] == [2, 1]


def test_promote_intents__inside_atomic_block__command_error(
    make_definition: MakeDefinition,
) -> None:
    """The test's own transaction is open: a pass refuses to join it, and nothing changes."""
    make_definition()
    record(1)

    with pytest.raises(CommandError) as raised:
        run("promote_intents")

    assert str(raised.value).startswith("job.intent_promotion_requires_own_transaction: ")
    assert statuses() == ["PENDING"]


@pytest.mark.parametrize(
    "args",
    [
        ["--limit", "0"],
        ["--limit", "1001"],
        ["--limit", "ten"],
        ["--interval", "0"],
        ["--interval", "-1"],
        ["--interval", "nan"],
        ["--job-type", " "],
        ["--job-type", "a\x00b"],
        ["--unknown"],
    ],
)
def test_promote_intents__bad_arguments__command_error(args: list[str]) -> None:
    with pytest.raises(CommandError, match=r"^Error: "):
        run("promote_intents", *args)


def _promoted_by_then(params: dict[str, Any], stop_signal: int, deadline: float) -> None:
    """Wait until the loop has promoted everything (or the deadline passed), then signal."""
    probe = psycopg.connect(**params, autocommit=True)
    try:
        while time.monotonic() < deadline:
            row = probe.execute(
                "SELECT count(*) FROM runledger_job_enqueue_intents WHERE status = 'PENDING'"
            ).fetchone()
            if row is not None and row[0] == 0:
                break
            time.sleep(0.01)
    finally:
        probe.close()
        os.kill(os.getpid(), stop_signal)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_promote_intents__loop_then_signal__stops_and_restores_handlers(
    make_definition: MakeDefinition, stop_signal: signal.Signals
) -> None:
    """In-process: the loop installs its handlers, a signal ends it (SIGINT raises no
    KeyboardInterrupt), and the previous handlers come back."""
    make_definition()
    record(3)
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    killer = threading.Thread(
        target=_promoted_by_then,
        args=(_connection_kwargs(), stop_signal, time.monotonic() + 10),
    )
    killer.start()
    try:
        output = run("promote_intents", "--loop", "--interval", "0.05")
    finally:
        killer.join()

    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == previous
    assert output.splitlines()[-1].endswith("(stopped by signal)")
    assert output.splitlines()[0].startswith("pass 1: promoted 3 ")
    assert statuses() == ["PROMOTED"] * 3


def _connection_kwargs() -> dict[str, Any]:
    settings = connection.settings_dict
    kwargs = {
        "dbname": settings["NAME"],
        "user": settings["USER"] or None,
        "password": settings["PASSWORD"] or None,
        "host": settings["HOST"] or settings["OPTIONS"].get("host"),
        "port": settings["PORT"] or settings["OPTIONS"].get("port"),
    }
    return {key: value for key, value in kwargs.items() if value}


def _database_url() -> str:
    """A DATABASE_URL for the test database that tests/settings.py (django-environ) parses;
    a socket directory goes into the query string."""
    params = _connection_kwargs()
    user = quote(str(params.get("user", "")), safe="")
    password = params.get("password")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else f"{user}@"
    host = str(params.get("host", ""))
    port = params.get("port")
    if host.startswith("/"):
        query = f"?host={quote(host, safe='/')}" + (f"&port={port}" if port else "")
        return f"postgres://{auth}/{params['dbname']}{query}"
    return f"postgres://{auth}{host}{f':{port}' if port else ''}/{params['dbname']}"


@pytest.mark.django_db(transaction=True)
def test_promote_intents__loop_sigterm_during_pass__pass_commits_then_exit_0(
    make_definition: MakeDefinition,
    open_session: Callable[..., psycopg.Connection[Any]],
) -> None:
    """A real promoter process, sent SIGTERM while its pass waits on the retention fence, lets
    the pass finish and commit, then exits with status 0."""
    make_definition()
    [intent_id] = record(1)
    fence_holder = open_session(autocommit=False)
    fence_holder.execute("SELECT pg_advisory_xact_lock(1920298604, 1768846437)")
    observer = open_session()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": _database_url(),
    }
    process = subprocess.Popen(  # noqa: S603  (fixed arguments)
        [
            sys.executable,
            "-m",
            "django",
            "promote_intents",
            "--loop",
            "--interval",
            "0.2",
            "--json",
            "--job-type",
            TEST_JOB_TYPE,
        ],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_lock_wait(observer, "lock_job_enqueue_intent_promotion", timeout=20)
        process.send_signal(signal.SIGTERM)
        fence_holder.commit()
        stdout, stderr = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert process.returncode == 0, stderr
    reports = [json.loads(line) for line in stdout.splitlines()]
    assert [r["inserted_jobs"] for r in reports] == [1]
    intent = JobEnqueueIntent.objects.get(id=intent_id)
    assert intent.status == "PROMOTED"
    assert intent.promoted_job_id is not None
    assert Job.objects.filter(id=intent.promoted_job_id).exists()


# --- the operations service behind the commands ------------------------------------------------


def test_promotion_job_types__precedence__option_then_settings_then_enabled_definitions(
    make_definition: MakeDefinition, settings: SettingsWrapper
) -> None:
    make_definition()
    make_definition(OTHER_JOB_TYPE, is_enabled=False)

    assert operations.promotion_job_types() == [TEST_JOB_TYPE]
    settings.RUNLEDGER = {"PROMOTE_JOB_TYPES": ["jobs.from.settings"]}
    assert operations.promotion_job_types() == ["jobs.from.settings"]
    assert operations.promotion_job_types(["a", "b", "a"]) == ["a", "b"]
    settings.RUNLEDGER = {"PROMOTE_JOB_TYPES": []}
    assert operations.promotion_job_types() == []


def test_run_promotion__inside_atomic_block__refuses_and_keeps_the_connection() -> None:
    """Refused before anything could close the caller's connection mid-transaction."""
    [intent_id] = record(1)

    with pytest.raises(RunledgerError) as raised:
        operations.run_promotion([TEST_JOB_TYPE])

    assert (raised.value.code, raised.value.category) == (
        "job.intent_promotion_requires_own_transaction",
        "validation",
    )
    assert JobEnqueueIntent.objects.filter(id=intent_id).exists()  # same transaction, usable


def test_run_promotion__blank_job_type__validation_error_before_any_pass() -> None:
    with pytest.raises(RunledgerError) as raised:
        operations.run_promotion([" "], loop=True)

    assert (raised.value.code, raised.value.category) == ("job.invalid_job_type", "validation")


def test_prune_promoted_intents__batch_size_out_of_range__validation_error() -> None:
    with pytest.raises(RunledgerError) as raised:
        operations.prune_promoted_intents(dt.timedelta(days=1), batch_size=1001)

    assert (raised.value.code, raised.value.category) == ("job.invalid_pagination", "validation")


# --- prune_intents ----------------------------------------------------------------------------


def _promote_and_age(make_definition: MakeDefinition, *, old: int, recent: int) -> None:
    """Promote ``old + recent`` intents, then move ``old`` of them 10 days into the past."""
    make_definition()
    ids = record(old + recent)
    run("promote_intents")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runledger_job_enqueue_intents SET promoted_at = now() - interval '10 days'"
            " WHERE id = ANY(%s)",
            [ids[:old]],
        )


@pytest.mark.django_db(transaction=True)
def test_prune_intents__dry_run__counts_without_deleting(make_definition: MakeDefinition) -> None:
    _promote_and_age(make_definition, old=3, recent=2)
    record(1, job_type=OTHER_JOB_TYPE)  # pending: never pruned

    output = run("prune_intents", "--older-than", "7d", "--dry-run")

    assert output.startswith("Would delete 3 promoted intents promoted before ")
    assert output.rstrip().endswith("(older than 7d).")
    assert JobEnqueueIntent.objects.count() == 6


@pytest.mark.django_db(transaction=True)
def test_prune_intents__batches_until_one_is_short__deletes_only_old_promoted(
    make_definition: MakeDefinition,
) -> None:
    _promote_and_age(make_definition, old=5, recent=2)
    record(1, job_type=OTHER_JOB_TYPE)

    lines = run("prune_intents", "--older-than", "1d12h", "--batch-size", "2").splitlines()

    assert lines[:3] == [
        "batch: deleted 2 (2 so far)",
        "batch: deleted 2 (4 so far)",
        "batch: deleted 1 (5 so far)",
    ]
    assert lines[3].startswith("Deleted 5 promoted intents promoted before ")
    assert lines[3].endswith("(older than 1d12h) in 3 batches.")
    assert statuses() == ["PROMOTED", "PROMOTED"]
    assert statuses(OTHER_JOB_TYPE) == ["PENDING"]
    assert Job.objects.count() == 7


@pytest.mark.django_db(transaction=True)
def test_prune_intents__exact_multiple_of_batch__ends_with_an_empty_batch(
    make_definition: MakeDefinition, settings: SettingsWrapper
) -> None:
    settings.RUNLEDGER = {"PRUNE_BATCH_SIZE": 2}
    _promote_and_age(make_definition, old=4, recent=0)
    out = TerminalOutput()

    run("prune_intents", "--older-than", "7d", stdout=out)

    text = out.getvalue()
    assert "\rdeleted 4 promoted intents" in text
    assert text.splitlines()[-1].endswith("in 3 batches.")
    assert JobEnqueueIntent.objects.count() == 0


def test_prune_intents__nothing_old__deletes_nothing() -> None:
    record(2)

    lines = run("prune_intents", "--older-than", "30m").splitlines()

    assert lines[0] == "batch: deleted 0 (0 so far)"
    assert lines[1].startswith("Deleted 0 promoted intents")
    assert lines[1].endswith("in 1 batch.")
    assert JobEnqueueIntent.objects.count() == 2


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--older-than", "7"],
        ["--older-than", "d"],
        ["--older-than", "0s"],
        ["--older-than", "-1d"],
        ["--older-than", "7x"],
        ["--older-than", "7d", "--batch-size", "0"],
        ["--older-than", "7d", "--batch-size", "1001"],
    ],
)
def test_prune_intents__bad_arguments__command_error(args: list[str]) -> None:
    with pytest.raises(CommandError, match=r"^Error: "):
        run("prune_intents", *args)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", dt.timedelta(days=7)),
        ("12h", dt.timedelta(hours=12)),
        ("30m", dt.timedelta(minutes=30)),
        ("45s", dt.timedelta(seconds=45)),
        ("2w", dt.timedelta(weeks=2)),
        ("1d12h", dt.timedelta(days=1, hours=12)),
        (" 7D ", dt.timedelta(days=7)),
    ],
)
def test_duration__valid__parses(text: str, expected: dt.timedelta) -> None:
    assert cli.duration(text) == expected


# --- intent_metrics ---------------------------------------------------------------------------

ORG = uuid.UUID("0190d3f0-0000-7000-8000-000000000001")


@pytest.fixture
def metrics_rows() -> None:
    """Two global pending intents of one type, one organization intent of another."""
    record(2)
    record(1, job_type=OTHER_JOB_TYPE, organization_id=ORG)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], {TEST_JOB_TYPE: 2, OTHER_JOB_TYPE: 1}),
        (["--global"], {TEST_JOB_TYPE: 2}),
        (["--organization", str(ORG)], {OTHER_JOB_TYPE: 1}),
        (["--job-type", OTHER_JOB_TYPE], {OTHER_JOB_TYPE: 1}),
        (["--limit", "1", "--offset", "1"], {OTHER_JOB_TYPE: 1}),
    ],
    ids=["admin", "global", "organization", "job-type", "page"],
)
def test_intent_metrics__json__one_list_with_field_names(
    metrics_rows: None, args: list[str], expected: dict[str, int]
) -> None:
    rows = json.loads(run("intent_metrics", "--json", *args))

    assert [set(row) for row in rows] == [METRICS_KEYS] * len(expected)
    assert {row["job_type"]: row["pending_count"] for row in rows} == expected
    for row in rows:
        parsed = dt.datetime.fromisoformat(row["oldest_pending_at"])
        assert row["oldest_pending_at"].endswith("Z")
        assert parsed.utcoffset() == dt.timedelta(0)
        assert (row["retrying_count"], row["conflicted_24h"], row["promoted_24h"]) == (0, 0, 0)


@pytest.mark.parametrize(
    ("args", "types"),
    [
        ([], [TEST_JOB_TYPE, OTHER_JOB_TYPE]),
        (["--global"], [TEST_JOB_TYPE]),
        (["--organization", str(ORG)], [OTHER_JOB_TYPE]),
    ],
    ids=["admin", "global", "organization"],
)
def test_intent_metrics__table__header_and_one_line_per_type(
    metrics_rows: None, args: list[str], types: list[str]
) -> None:
    lines = run("intent_metrics", *args).splitlines()

    assert lines[0].split() == [
        "job_type",
        "pending_count",
        "retrying_count",
        "max_promotion_attempts",
        "conflicted_24h",
        "promoted_24h",
        "oldest_pending_at",
    ]
    assert [line.split()[0] for line in lines[1:]] == types
    pending = {TEST_JOB_TYPE: "2", OTHER_JOB_TYPE: "1"}
    for line in lines[1:]:
        cells = line.split()
        assert cells[1:6] == [pending[cells[0]], "0", "0", "0", "0"]
        assert cells[6].endswith("Z")


def test_intent_metrics__empty_scope__says_so() -> None:
    assert run("intent_metrics").strip() == "No intent metrics in this scope."
    assert run("intent_metrics", "--json").strip() == "[]"


@pytest.mark.parametrize(
    "args",
    [
        ["--global", "--organization", str(ORG)],
        ["--organization", "not-a-uuid"],
        ["--limit", "0"],
        ["--offset", "-1"],
        ["--job-type", ""],
    ],
)
def test_intent_metrics__bad_arguments__command_error(args: list[str]) -> None:
    with pytest.raises(CommandError, match=r"^Error: "):
        run("intent_metrics", *args)


# --- job_metrics ------------------------------------------------------------------------------

JOB_METRICS_KEYS = [
    "job_type",
    "due_count",
    "scheduled_count",
    "leased_count",
    "expired_lease_count",
    "succeeded_24h",
    "retried_24h",
    "dead_lettered_24h",
    "oldest_due_at",
    "paused",
]


@pytest.fixture
def job_rows(make_definition: MakeDefinition) -> None:
    """Two due global jobs of one type, one organization job of another, due in an hour."""
    make_definition()
    make_definition(OTHER_JOB_TYPE)
    for n in range(2):
        enqueue_job(TEST_JOB_TYPE, {"n": n})
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    enqueue_job(OTHER_JOB_TYPE, {}, organization_id=ORG, next_run_at=later)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], {TEST_JOB_TYPE: (2, 0), OTHER_JOB_TYPE: (0, 1)}),
        (["--global"], {TEST_JOB_TYPE: (2, 0)}),
        (["--organization", str(ORG)], {OTHER_JOB_TYPE: (0, 1)}),
        (["--job-type", OTHER_JOB_TYPE], {OTHER_JOB_TYPE: (0, 1)}),
        (["--limit", "1", "--offset", "1"], {OTHER_JOB_TYPE: (0, 1)}),
    ],
    ids=["admin", "global", "organization", "job-type", "page"],
)
def test_job_metrics__json__one_list_with_field_names(
    job_rows: None, args: list[str], expected: dict[str, tuple[int, int]]
) -> None:
    rows = json.loads(run("job_metrics", "--json", *args))

    assert [list(row) for row in rows] == [JOB_METRICS_KEYS] * len(expected)
    assert {row["job_type"]: (row["due_count"], row["scheduled_count"]) for row in rows} == (
        expected
    )
    for row in rows:
        due = row["due_count"] > 0
        assert (row["oldest_due_at"] is not None) is due
        if due:
            assert row["oldest_due_at"].endswith("Z")


def test_job_metrics__table__header_and_one_line_per_type(job_rows: None) -> None:
    lines = run("job_metrics").splitlines()

    # The table keeps its timestamp last: the pause comes just before it.
    assert lines[0].split() == [*JOB_METRICS_KEYS[:-2], "paused", "oldest_due_at"]
    assert [line.split() for line in lines[1:]][1] == [
        OTHER_JOB_TYPE,
        "0",
        "1",
        "0",
        "0",
        "0",
        "0",
        "0",
        "False",
        "-",
    ]
    first = lines[1].split()
    assert first[:9] == [TEST_JOB_TYPE, "2", "0", "0", "0", "0", "0", "0", "False"]
    assert first[9].endswith("Z")


def test_job_metrics__empty_scope__says_so() -> None:
    assert run("job_metrics").strip() == "No job metrics in this scope."
    assert run("job_metrics", "--json").strip() == "[]"


@pytest.mark.parametrize(
    "args",
    [
        ["--global", "--organization", str(ORG)],
        ["--organization", "not-a-uuid"],
        ["--limit", "0"],
        ["--limit", "1001"],
        ["--offset", "-1"],
        ["--job-type", ""],
    ],
)
def test_job_metrics__bad_arguments__command_error(args: list[str]) -> None:
    with pytest.raises(CommandError, match=r"^Error: "):
        run("job_metrics", *args)


# --- prune_jobs -------------------------------------------------------------------------------


def _finished_jobs(make_definition: MakeDefinition, **statuses_and_ages: tuple[str, int]) -> None:
    """Jobs promoted from intents, then moved straight to a final status ``days`` days ago
    (the transitions themselves are the worker's tests; here only retention's view counts)."""
    make_definition()
    for key, (status, days) in statuses_and_ages.items():
        intent_id = record_intent(TEST_JOB_TYPE, {"key": key}, idempotency_key=key).intent_id
        run("promote_intents")
        job_id = JobEnqueueIntent.objects.get(id=intent_id).promoted_job_id
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE runledger_job_queue SET status = %s, "
                "finished_at = now() - make_interval(days => %s), "
                "created_at = now() - make_interval(days => %s) - interval '1 minute' "
                "WHERE id = %s",
                [status, days, days, job_id],
            )


@pytest.mark.django_db(transaction=True)
def test_prune_jobs__dry_run__says_what_would_go_and_deletes_nothing(
    make_definition: MakeDefinition,
) -> None:
    _finished_jobs(
        make_definition,
        a=("SUCCEEDED", 40),
        b=("DEAD_LETTERED", 35),
        c=("SUCCEEDED", 3),
    )

    output = run("prune_jobs", "--older-than", "30d", "--dry-run").strip()

    assert output.startswith(
        "Would delete 2 jobs (1 succeeded, 1 dead-lettered, 0 canceled) finished before "
    )
    assert output.endswith(
        "(older than 30d), with their 2 promoted intents, 0 attempts and 2 events."
    )
    assert (Job.objects.count(), JobEnqueueIntent.objects.count()) == (3, 3)


@pytest.mark.django_db(transaction=True)
def test_prune_jobs__batches__one_line_each_and_a_summary(
    make_definition: MakeDefinition,
) -> None:
    _finished_jobs(
        make_definition,
        a=("SUCCEEDED", 40),
        b=("CANCELED", 41),
        c=("DEAD_LETTERED", 42),
        d=("SUCCEEDED", 1),
    )

    lines = run("prune_jobs", "--older-than", "4w", "--batch-size", "2").splitlines()

    assert lines[:2] == [
        "batch: deleted 2 jobs and 2 promoted intents (2 jobs so far)",
        "batch: deleted 1 jobs and 1 promoted intents (3 jobs so far)",
    ]
    assert lines[2].startswith(
        "Deleted 3 jobs (1 succeeded, 1 dead-lettered, 1 canceled) finished before "
    )
    assert lines[2].endswith("(older than 28d), with their 3 promoted intents, in 2 batches.")
    assert list(JobEnqueueIntent.objects.values_list("idempotency_key", flat=True)) == ["d"]
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_prune_jobs__status_option__repeatable_or_comma_separated(
    make_definition: MakeDefinition,
) -> None:
    _finished_jobs(
        make_definition,
        a=("SUCCEEDED", 40),
        b=("CANCELED", 40),
        c=("DEAD_LETTERED", 40),
    )

    run("prune_jobs", "--older-than", "30d", "--status", "dead_lettered")
    assert sorted(Job.objects.values_list("status", flat=True)) == ["CANCELED", "SUCCEEDED"]
    run("prune_jobs", "--older-than", "30d", "--status", "SUCCEEDED,CANCELED", "-v", "0")
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_prune_jobs__terminal__live_counter(make_definition: MakeDefinition) -> None:
    _finished_jobs(make_definition, a=("SUCCEEDED", 40))
    out = TerminalOutput()

    run("prune_jobs", "--older-than", "30d", stdout=out)

    assert "\rdeleted 1 jobs" in out.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--older-than", "0s"],
        ["--older-than", "7x"],
        ["--older-than", "7d", "--status", "PENDING"],
        ["--older-than", "7d", "--status", ","],
        ["--older-than", "7d", "--batch-size", "0"],
        ["--older-than", "7d", "--batch-size", "1001"],
    ],
)
def test_prune_jobs__bad_arguments__command_error(args: list[str]) -> None:
    with pytest.raises(CommandError, match=r"^Error: "):
        run("prune_jobs", *args)


def test_prune_jobs__inside_atomic_block__command_error() -> None:
    """The test's own transaction is an atomic block: retention refuses to join it."""
    with pytest.raises(CommandError, match=r"^job\.invalid_argument: "):
        run("prune_jobs", "--older-than", "30d")
