"""(k) What migration 0007 costs ``record_intent``: its key-prefix index and its value-range
CHECK on the intents table, against the same table without them, in the same run.

The schemas cannot coexist in one table, so the run alternates blocks of ``record_intent``
calls (one per transaction, as in shape a) between the table as migrated, the table with the
index and the CHECK dropped, and each of the two alone, rotating which goes first, and compares
the medians. The
objects are put back between blocks (the CHECK NOT VALID, as the migration adds it first, then
validated at the end). Target: at most 2% slower with them.
"""

from __future__ import annotations

import functools
import importlib
import statistics
from typing import Any

from runledger_django import record_intent

from .common import JOB_TYPE, Context, Row, define_job_types, progress, reset_runledger, sql, timed

TARGET_SLOWDOWN = 1.02
WITH = "record_intent, with migration 0007's index and CHECK"
WITHOUT = "record_intent, without them"

_migration: Any = importlib.import_module("runledger_django.migrations.0007_poison_rows")
INTENTS = _migration.INTENTS
INDEX = "idx_job_enqueue_intents_idempotency_key_prefix"


ONLY_INDEX = "record_intent, with the index only"
ONLY_CHECK = "record_intent, with the CHECK only"


def _index(present: bool) -> None:
    if present:
        sql(_migration.INTENT_KEY_INDEX.replace(" CONCURRENTLY", ""))
    else:
        sql(f"DROP INDEX IF EXISTS {INDEX}")


def _check(present: bool) -> None:
    sql(_migration.add_check(INTENTS) if present else _migration.drop_check(INTENTS))


def with_objects() -> None:
    _check(True)
    _index(True)


def without_objects() -> None:
    _check(False)
    _index(False)


def only_index() -> None:
    _check(False)
    _index(True)


def only_check() -> None:
    _check(True)
    _index(False)


def _record(i: int) -> object:
    return record_intent(JOB_TYPE, {"order_id": i}, idempotency_key=f"k:{i}")


def run(ctx: Context) -> None:
    rounds = ctx.size(20, 4)
    block = ctx.size(200, 50)
    reset_runledger()
    define_job_types([JOB_TYPE])
    states = {
        WITH: with_objects,
        WITHOUT: without_objects,
        ONLY_INDEX: only_index,
        ONLY_CHECK: only_check,
    }
    samples: dict[str, list[float]] = {name: [] for name in states}
    counter = 0
    progress(f"(k) {rounds} rounds of {block} record_intent calls per schema")
    try:
        for round_number in range(rounds):
            names = list(states)
            shift = round_number % len(names)
            names = names[shift:] + names[:shift]
            for name in names:
                states[name]()
                for _ in range(block):
                    counter += 1
                    samples[name].append(timed(functools.partial(_record, counter)))
    finally:
        with_objects()
        sql(_migration.validate(INTENTS))
    medians = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    for name, value in medians.items():
        ctx.add(Row("k", f"{name}, median", value, "ms"))
    slowdown = medians[WITH] / medians[WITHOUT]
    progress(f"(k) with / without: {slowdown:.3f}x")
    ctx.add(
        Row(
            "k",
            "record_intent with / without migration 0007's objects",
            slowdown,
            "x",
            target=f"<= {TARGET_SLOWDOWN:.2f}x",
            ok=slowdown <= TARGET_SLOWDOWN,
        )
    )
