"""The intent lifecycle CHECK evaluated by a PL/pgSQL function: same constraint name, same rule.

PostgreSQL deserialises and plans every CHECK expression of a table once per INSERT or UPDATE
statement. The lifecycle rule is by far the largest expression on the intent table, so every
record_intent paid to rebuild it; a call to an IMMUTABLE PL/pgSQL function is a one-node
expression, and the function's own expression is compiled once per session. The body is the
expression of migration 0002, unchanged.

Not atomic: the constraint is replaced NOT VALID (a brief lock), then validated under a lock
that lets recorders and promoters go on. Frozen history: never import application code here.
"""

from django.db import migrations

ARGUMENTS = (
    "status text, promotion_attempts integer, last_attempted_at timestamptz, "
    "promoted_job_id uuid, promoted_at timestamptz, conflicted_at timestamptz, "
    "last_error_code text, last_error_message text"
)

# The rule of reference 2.1, exactly as migration 0002 wrote it.
LIFECYCLE_RULE = """
    (status = 'PENDING' AND promoted_job_id IS NULL AND promoted_at IS NULL
        AND conflicted_at IS NULL AND (
            (promotion_attempts = 0 AND last_attempted_at IS NULL AND last_error_code IS NULL
                AND last_error_message IS NULL)
            OR (promotion_attempts > 0 AND last_attempted_at IS NOT NULL
                AND last_error_code IS NOT NULL AND length(trim(last_error_code)) > 0
                AND last_error_message IS NOT NULL AND length(trim(last_error_message)) > 0)))
    OR (status = 'PROMOTED' AND promotion_attempts > 0 AND last_attempted_at IS NOT NULL
        AND promoted_job_id IS NOT NULL AND promoted_at IS NOT NULL AND conflicted_at IS NULL
        AND last_error_code IS NULL AND last_error_message IS NULL)
    OR (status = 'CONFLICTED' AND promotion_attempts > 0 AND last_attempted_at IS NOT NULL
        AND promoted_job_id IS NULL AND promoted_at IS NULL AND conflicted_at IS NOT NULL
        AND last_error_code IS NOT NULL AND length(trim(last_error_code)) > 0
        AND last_error_message IS NOT NULL AND length(trim(last_error_message)) > 0)
"""

COLUMNS = (
    "status, promotion_attempts, last_attempted_at, promoted_job_id, promoted_at, "
    "conflicted_at, last_error_code, last_error_message"
)

# Not STRICT: NULL arguments are ordinary inputs of the rule. The body is one RETURN, which
# PL/pgSQL evaluates as a cached simple expression. OR REPLACE: a non-atomic migration that
# stopped half way is simply run again.
FUNCTION = f"""
CREATE OR REPLACE FUNCTION runledger_intent_lifecycle_is_valid({ARGUMENTS}) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN {LIFECYCLE_RULE};
END
$$;
"""

FUNCTION_REVERSE = f"DROP FUNCTION runledger_intent_lifecycle_is_valid({ARGUMENTS});"

REPLACE_CHECK = f"""
ALTER TABLE runledger_job_enqueue_intents
    DROP CONSTRAINT chk_job_enqueue_intents_state_fields,
    ADD CONSTRAINT chk_job_enqueue_intents_state_fields
        CHECK (runledger_intent_lifecycle_is_valid({COLUMNS})) NOT VALID;
"""

RESTORE_CHECK = f"""
ALTER TABLE runledger_job_enqueue_intents
    DROP CONSTRAINT chk_job_enqueue_intents_state_fields,
    ADD CONSTRAINT chk_job_enqueue_intents_state_fields CHECK ({LIFECYCLE_RULE});
"""

VALIDATE_CHECK = """
ALTER TABLE runledger_job_enqueue_intents VALIDATE CONSTRAINT chk_job_enqueue_intents_state_fields;
"""


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("runledger", "0004_worker_runtime")]

    operations = [
        migrations.RunSQL(FUNCTION, FUNCTION_REVERSE),
        migrations.RunSQL(REPLACE_CHECK, RESTORE_CHECK),
        migrations.RunSQL(VALIDATE_CHECK, migrations.RunSQL.noop),
    ]
