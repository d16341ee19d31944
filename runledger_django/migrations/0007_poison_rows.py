"""Rows Python cannot read are refused at insert, and the admin's search by idempotency key is
index-backed on every supported server.

Timestamps must lie a day inside Python's datetime range (so every time zone's local time of
them is a datetime too): 'infinity', '-infinity', years past 9999 and BC dates are refused.
Counters that the state machine increments (an intent's promotion attempts, a job's attempt and
run number) stay below 2**31 - 1, so an increment can never overflow. One CHECK per table calls
an IMMUTABLE PL/pgSQL function, as migration 0005 does for the lifecycle rule: an inline
expression of this size is deserialised and planned by every INSERT and UPDATE statement, a
function call costs one expression node and its body is compiled once per session.

Not atomic, so a live table is never locked for long: each CHECK is added NOT VALID (a brief
lock; new rows are checked from then on) and validated under a lock that lets readers and
writers go on. A row written before this migration that breaks a CHECK is brought to the
nearest value Python can read (a timestamp to the bound it passed, a counter to 2**31 - 2)
before the constraint is validated again: "never" stays never, "long ago" stays due, and the
paths that read the row can then decide it (a snapshot that no longer matches is conflicted, a
job that cannot be claimed is dead-lettered). The indexes are built CONCURRENTLY (a failed
build leaves an INVALID index: drop it and migrate again). Every statement can run twice, so a
migration that stopped half way is simply run again. Frozen history: never import application
code here.
"""

from typing import NamedTuple

from django.db import migrations

TIMESTAMP_MIN = "'0001-01-02 00:00:00+00'"
TIMESTAMP_MAX = "'9999-12-31 00:00:00+00'"
"""Exclusive."""
TIMESTAMP_LAST = "'9999-12-30 23:59:59.999999+00'"
COUNTER_LAST = 2147483646


class Table(NamedTuple):
    """One table's CHECK: its name, the constraint, the function and the columns it checks."""

    name: str
    constraint: str
    function: str
    timestamps: tuple[str, ...]
    counters: tuple[str, ...]

    @property
    def columns(self) -> str:
        return ", ".join((*self.timestamps, *self.counters))

    @property
    def arguments(self) -> str:
        return ", ".join(
            [f"{column} timestamptz" for column in self.timestamps]
            + [f"{column} integer" for column in self.counters]
        )


def rule(table: Table) -> str:
    parts = [
        f"({column} IS NULL OR ({column} >= {TIMESTAMP_MIN} AND {column} < {TIMESTAMP_MAX}))"
        for column in table.timestamps
    ]
    parts += [f"{column} <= {COUNTER_LAST}" for column in table.counters]
    return "\n        AND ".join(parts)


def create_function(table: Table) -> str:
    # Not STRICT: NULL is an ordinary value of the nullable columns. The bounds carry their
    # offset, so the result never depends on the session's TimeZone: IMMUTABLE holds.
    return f"""
CREATE OR REPLACE FUNCTION {table.function}({table.arguments}) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN {rule(table)};
END
$$;
"""


def drop_function(table: Table) -> str:
    return f"DROP FUNCTION IF EXISTS {table.function}({table.arguments});"


def add_check(table: Table) -> str:
    return f"""
ALTER TABLE {table.name}
    DROP CONSTRAINT IF EXISTS {table.constraint},
    ADD CONSTRAINT {table.constraint} CHECK ({table.function}({table.columns})) NOT VALID;
"""


def drop_check(table: Table) -> str:
    return f"ALTER TABLE {table.name} DROP CONSTRAINT IF EXISTS {table.constraint};"


def validate(table: Table) -> str:
    """VALIDATE; only if an old row breaks the CHECK, repair such rows and validate again."""
    repairs = [
        f"{column} = CASE WHEN {column} < {TIMESTAMP_MIN} THEN {TIMESTAMP_MIN}::timestamptz"
        f" WHEN {column} >= {TIMESTAMP_MAX} THEN {TIMESTAMP_LAST}::timestamptz ELSE {column} END"
        for column in table.timestamps
    ]
    repairs += [f"{column} = LEAST({column}, {COUNTER_LAST})" for column in table.counters]
    assignments = ",\n            ".join(repairs)
    return f"""
DO $$
BEGIN
    ALTER TABLE {table.name} VALIDATE CONSTRAINT {table.constraint};
EXCEPTION WHEN check_violation THEN
    UPDATE {table.name} SET
            {assignments}
    WHERE NOT {table.function}({table.columns});
    ALTER TABLE {table.name} VALIDATE CONSTRAINT {table.constraint};
END
$$;
"""  # noqa: S608 (the module's own constant names, no values)


INTENTS = Table(
    name="runledger_job_enqueue_intents",
    constraint="chk_job_enqueue_intents_values_in_range",
    function="runledger_intent_values_in_range",
    timestamps=(
        "next_run_at",
        "next_promotion_at",
        "last_attempted_at",
        "promoted_at",
        "conflicted_at",
        "created_at",
        "updated_at",
    ),
    counters=("promotion_attempts",),
)
JOBS = Table(
    name="runledger_job_queue",
    constraint="chk_job_queue_values_in_range",
    function="runledger_job_values_in_range",
    timestamps=(
        "next_run_at",
        "lease_expires_at",
        "last_heartbeat_at",
        "started_at",
        "finished_at",
        "created_at",
        "updated_at",
    ),
    counters=("attempt", "run_number"),
)

# The admin's search by an exact idempotency key, whatever the job type and tenant: the unique
# indexes lead with the job type (and the tenant), which only PostgreSQL 18 can skip. The index
# holds the key's first 64 characters, not the key: no other statement names that expression,
# so the recording and promotion lookups keep planning on their unique indexes (a plain index
# on the key would be one more candidate for them, and a poor one when a key repeats across
# tenants), and its entries stay short whatever the key's length. Unkeyed jobs are left out.
INTENT_KEY_INDEX = """
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_job_enqueue_intents_idempotency_key_prefix
    ON runledger_job_enqueue_intents (left(idempotency_key, 64))
"""
JOB_KEY_INDEX = """
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_job_queue_idempotency_key_prefix
    ON runledger_job_queue (left(idempotency_key, 64)) WHERE idempotency_key IS NOT NULL
"""


def drop_index(name: str) -> str:
    return f"DROP INDEX CONCURRENTLY IF EXISTS {name}"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("runledger", "0006_job_operations")]

    operations = [
        migrations.RunSQL(create_function(INTENTS), drop_function(INTENTS)),
        migrations.RunSQL(create_function(JOBS), drop_function(JOBS)),
        migrations.RunSQL(add_check(INTENTS), drop_check(INTENTS)),
        migrations.RunSQL(add_check(JOBS), drop_check(JOBS)),
        migrations.RunSQL(validate(INTENTS), migrations.RunSQL.noop),
        migrations.RunSQL(validate(JOBS), migrations.RunSQL.noop),
        migrations.RunSQL(
            INTENT_KEY_INDEX, drop_index("idx_job_enqueue_intents_idempotency_key_prefix")
        ),
        migrations.RunSQL(JOB_KEY_INDEX, drop_index("idx_job_queue_idempotency_key_prefix")),
    ]
