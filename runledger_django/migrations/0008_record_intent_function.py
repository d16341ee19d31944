"""record_intent's insert as a PL/pgSQL function: the same statement, planned once per session.

A statement sent as text is parsed and planned on every call; for the intent insert that was
about a fifth of its server time (the insert itself is one row). A PL/pgSQL function keeps the
plans of its statements for the session, so a recorder pays for them once. The body is the
insert record_intent sent until now, in its two scopes (each with the arbiter of its unique
key), and it answers what the statement's row count answered: whether a row was inserted. A
row is inserted only under READ COMMITTED (or READ UNCOMMITTED); the caller refuses a stricter
isolation level itself.

Frozen history: never import application code here.
"""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION runledger_record_intent(
    p_id uuid, p_job_type text, p_organization_id uuid, p_payload jsonb, p_priority integer,
    p_max_attempts integer, p_timeout_seconds integer, p_next_run_at timestamptz,
    p_idempotency_key text, p_stage text, p_enqueue_request jsonb,
    p_execution_resource_key text
) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    inserted integer;
BEGIN
    IF current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted')
    THEN
        RETURN false;
    END IF;
    IF p_organization_id IS NULL THEN
        INSERT INTO runledger_job_enqueue_intents (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            next_run_at, idempotency_key, stage, enqueue_request_version, enqueue_request,
            execution_resource_key)
        VALUES (
            p_id, p_job_type, NULL, p_payload, p_priority, p_max_attempts, p_timeout_seconds,
            p_next_run_at, p_idempotency_key, p_stage, 1, p_enqueue_request,
            p_execution_resource_key)
        ON CONFLICT (job_type, idempotency_key) WHERE organization_id IS NULL DO NOTHING;
    ELSE
        INSERT INTO runledger_job_enqueue_intents (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            next_run_at, idempotency_key, stage, enqueue_request_version, enqueue_request,
            execution_resource_key)
        VALUES (
            p_id, p_job_type, p_organization_id, p_payload, p_priority, p_max_attempts,
            p_timeout_seconds, p_next_run_at, p_idempotency_key, p_stage, 1,
            p_enqueue_request, p_execution_resource_key)
        ON CONFLICT (job_type, organization_id, idempotency_key)
            WHERE organization_id IS NOT NULL DO NOTHING;
    END IF;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    RETURN inserted = 1;
END
$$;
"""

FUNCTION_REVERSE = """
DROP FUNCTION IF EXISTS runledger_record_intent(
    uuid, text, uuid, jsonb, integer, integer, integer, timestamptz, text, text, jsonb, text);
"""


class Migration(migrations.Migration):
    dependencies = [("runledger", "0007_poison_rows")]

    operations = [migrations.RunSQL(FUNCTION, FUNCTION_REVERSE)]
