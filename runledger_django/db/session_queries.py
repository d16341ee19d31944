"""The raw SQL of a session's settings: isolation, timeout caps and their exact restore, the
planner pins, and the advisory-lock fences. ``transaction.py`` runs the caps and the isolation
checks; promotion and retention pin the planner and take the fences themselves.

Each comment names the ORM gap the statement fills (set_config, SHOW and advisory locks have no
ORM form). Parameters are ``%(name)s``; values are never formatted into the text.
"""

from __future__ import annotations

from typing import Final, LiteralString

# --- transaction settings (set_config / SHOW have no ORM form) ------------------------------

# The isolation level the current transaction runs at.
SHOW_TRANSACTION_ISOLATION: Final[LiteralString] = "SHOW transaction_isolation"

SET_READ_COMMITTED: Final[LiteralString] = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"

# Cap a timeout GUC (lock_timeout / statement_timeout) for this transaction, keeping a stricter
# caller value; returns the previous text for an exact restore (reference 6.1). The MATERIALIZED
# CTE reads the old value before set_config changes it.
CAP_TIMEOUT: Final[LiteralString] = """
WITH previous AS MATERIALIZED (
    -- Timeout settings display with units ("5s", "250ms", "0"); as an interval they give the
    -- milliseconds without a pg_settings scan.
    SELECT current_setting(%(name)s) AS text_value,
           (extract(epoch FROM current_setting(%(name)s)::interval) * 1000)::bigint AS ms
)
SELECT previous.text_value,
       set_config(
           %(name)s,
           CASE WHEN previous.ms = 0 OR previous.ms > %(cap_ms)s
                THEN %(cap_text)s ELSE previous.text_value END,
           true
       )
FROM previous
"""

# Cap transaction_timeout (PostgreSQL 17+). Lowering the GUC does not shorten a deadline that
# is already armed, so a looser previous value is first disarmed (set to 0) and the cap then
# re-arms a fresh deadline from now. One statement: no cancellation point while disarmed.
CAP_TRANSACTION_TIMEOUT: Final[LiteralString] = """
WITH previous AS MATERIALIZED (
    SELECT current_setting('transaction_timeout') AS text_value,
           (extract(epoch FROM current_setting('transaction_timeout')::interval) * 1000)::bigint
               AS ms
),
disarmed AS MATERIALIZED (
    SELECT CASE WHEN previous.ms > %(cap_ms)s
                THEN set_config('transaction_timeout', '0', true) END AS ignored
    FROM previous
)
SELECT previous.text_value,
       set_config(
           'transaction_timeout',
           CASE WHEN previous.ms = 0 OR previous.ms > %(cap_ms)s
                THEN %(cap_text)s ELSE previous.text_value END,
           true
       )
FROM previous, disarmed
"""

# Put a GUC back to the exact text it had (transaction-local).
RESTORE_SETTING: Final[LiteralString] = "SELECT set_config(%(name)s, %(value)s, true)"

# Set statement_timeout for the rest of the transaction (client-side promotion budget).
SET_LOCAL_STATEMENT_TIMEOUT: Final[LiteralString] = (
    "SELECT set_config('statement_timeout', %(value)s, true)"
)

# The retention fence (reference 2.6): promotion takes the shared side, exact-ID retention the
# exclusive side. The comment tags let operators and tests find waiters in pg_stat_activity.
LOCK_PROMOTION_FENCE: Final[LiteralString] = (
    "SELECT /* runledger:lock_job_enqueue_intent_promotion */ "
    "pg_advisory_xact_lock_shared(1920298604, 1768846437)"
)
LOCK_RETENTION_FENCE: Final[LiteralString] = (
    "SELECT /* runledger:lock_job_enqueue_intent_retention */ "
    "pg_advisory_xact_lock(1920298604, 1768846437)"
)

# --- the planner pins ---------------------------------------------------------------------

# The planner settings of a promotion transaction (reverted at its end). jit stays off: an OLTP
# statement gains nothing from compiling, and PostgreSQL 15 and 16 price a disabled plan node
# so high that every statement would compile. The benchmarks' plain-SQL limit runs under them.
_PLANNER_PINS: Final[LiteralString] = """
       set_config('enable_sort', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_nestloop', 'off', true),
       set_config('enable_mergejoin', 'off', true),
       set_config('jit', 'off', true)
"""
PROMOTION_PLANNER_SETTINGS: Final[LiteralString] = "SELECT" + _PLANNER_PINS

# The same settings inside a transaction someone else owns (retention): the previous values
# are read first (a MATERIALIZED CTE) and returned, for RESTORE_PLANNER to put back exactly.
PIN_PLANNER: Final[LiteralString] = (
    """
WITH previous AS MATERIALIZED (
    SELECT current_setting('enable_sort') AS enable_sort,
           current_setting('enable_seqscan') AS enable_seqscan,
           current_setting('enable_bitmapscan') AS enable_bitmapscan,
           current_setting('enable_nestloop') AS enable_nestloop,
           current_setting('enable_mergejoin') AS enable_mergejoin,
           current_setting('jit') AS jit
)
SELECT previous.*,"""
    + _PLANNER_PINS
    + "FROM previous"
)

RESTORE_PLANNER: Final[LiteralString] = """
SELECT set_config('enable_sort', %(enable_sort)s, true),
       set_config('enable_seqscan', %(enable_seqscan)s, true),
       set_config('enable_bitmapscan', %(enable_bitmapscan)s, true),
       set_config('enable_nestloop', %(enable_nestloop)s, true),
       set_config('enable_mergejoin', %(enable_mergejoin)s, true),
       set_config('jit', %(jit)s, true)
"""

# --- the lifecycle caps (one statement in front of a job transition) -----------------------

# Cap lock_timeout and statement_timeout for the current (possibly implicit) transaction,
# keeping a stricter value already in force, and pin the planner away from whole-table reads;
# return the previous texts for an exact restore. Sent in front of a transition in the same
# simple-protocol query when the caller has no transaction, so this costs no extra round trip.
# The pins (no sort, no sequential or bitmap scan where an index can serve) keep every
# transition's plan index-driven whatever the statistics say: on a queue nobody has analysed
# yet, a claim otherwise read a type's whole backlog through another index and sorted it.
# jit is off too: before PostgreSQL 18 a pin works by a huge cost penalty, which carried every
# transition past the JIT thresholds (a claim spent 750 ms compiling itself on PostgreSQL 15).
CAP_LIFECYCLE_TIMEOUTS: Final[LiteralString] = """
WITH previous AS MATERIALIZED (
    SELECT current_setting('lock_timeout') AS lock_text,
           (extract(epoch FROM current_setting('lock_timeout')::interval) * 1000)::bigint
               AS lock_ms,
           current_setting('statement_timeout') AS statement_text,
           (extract(epoch FROM current_setting('statement_timeout')::interval) * 1000)::bigint
               AS statement_ms,
           current_setting('enable_sort') AS enable_sort,
           current_setting('enable_seqscan') AS enable_seqscan,
           current_setting('enable_bitmapscan') AS enable_bitmapscan,
           current_setting('jit') AS jit
)
SELECT previous.lock_text,
       previous.statement_text,
       previous.enable_sort,
       previous.enable_seqscan,
       previous.enable_bitmapscan,
       previous.jit,
       set_config('lock_timeout',
                  CASE WHEN previous.lock_ms = 0 OR previous.lock_ms > %(cap_lock_ms)s
                       THEN %(cap_lock_text)s ELSE previous.lock_text END,
                  true),
       set_config('statement_timeout',
                  CASE WHEN previous.statement_ms = 0
                            OR previous.statement_ms > %(cap_statement_ms)s
                       THEN %(cap_statement_text)s ELSE previous.statement_text END,
                  true),
       set_config('enable_sort', 'off', true),
       set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('jit', 'off', true)
FROM previous
"""

# The settings CAP_LIFECYCLE_TIMEOUTS returns the previous values of, in its column order.
CAPPED_SETTINGS: Final = (
    "lock_timeout",
    "statement_timeout",
    "enable_sort",
    "enable_seqscan",
    "enable_bitmapscan",
    "jit",
)
