"""What the bulk producers' tests share (tests/integration/test_record_intents_bulk.py and
test_enqueue_jobs_bulk.py): building requests, naming the statements a batch sent, counting
what another session sees committed, and racing two batches of the same keys."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from django.db import transaction
from django.test.utils import CaptureQueriesContext

from runledger_django import IntentRequest, JobRequest
from tests.conftest import TEST_JOB_TYPE, InThread

R = TypeVar("R", IntentRequest, JobRequest)
O = TypeVar("O")  # noqa: E741

TRANSACTION_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})


def bulk_request(kind: type[R], key: str | None, payload: Any = None, **kwargs: Any) -> R:
    """One request of ``kind`` under ``key``; its payload names the key unless given."""
    return kind(
        kwargs.pop("job_type", TEST_JOB_TYPE),
        {"key": key} if payload is None else payload,
        # A JobRequest key may be None; an IntentRequest one never is here.
        idempotency_key=key,  # type: ignore[arg-type]
        **kwargs,
    )


def bulk_requests(kind: type[R], count: int, prefix: str = "k") -> list[R]:
    """``count`` requests under the keys ``<prefix>-00000`` and on."""
    return [bulk_request(kind, f"{prefix}-{n:05d}") for n in range(count)]


def statement_tags(queries: CaptureQueriesContext) -> list[str]:
    """Each statement's ``/* runledger:... */`` tag, else its first word, without transaction
    control (logged by Django 6 only)."""
    words = [
        q["sql"].split("*/")[0].split(":")[1].strip()
        if q["sql"].startswith("/*")
        else q["sql"].split()[0].upper()
        for q in queries.captured_queries
    ]
    return [w for w in words if w not in TRANSACTION_CONTROL]


def committed_rows(observer: psycopg.Connection[Any], table: str) -> int:
    """The rows of ``table`` another session sees."""
    row = observer.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row else -1


def race_reversed(
    in_thread: InThread, produce: Callable[[list[R]], list[O]], batch: Sequence[R]
) -> tuple[list[O], list[O]]:
    """``batch`` and the same batch reversed, each produced in a transaction of its own in two
    sessions released together; both outcome lists in ``batch``'s order."""
    start = threading.Barrier(2)

    def run(requests: list[R]) -> list[O]:
        start.wait(timeout=10)
        with transaction.atomic():
            return produce(requests)

    forward = in_thread(run, list(batch))
    backward = in_thread(run, list(batch)[::-1])
    return forward.result(timeout=60), backward.result(timeout=60)[::-1]
