"""The trace context beside intents and jobs, and record_intent's function, version 2.

``trace_context`` (nullable jsonb) holds the propagation fields of the span that recorded an
intent or enqueued a job (``traceparent``, ``tracestate``; ``baggage`` only when a setting asks
for it). It is a column of its own, never part of ``enqueue_request``: a retry from another
trace must stay an identical request. Adding a nullable column without a default rewrites
nothing.

``runledger_record_intent_v2`` is version 1 (migration 0008) plus two parameters: the trace
context to store, and whether to report that the job type has no definition (the Tasks
backend's enqueue asks, so a definition deleted by an operator or flushed away by a test suite
is made again; a plain index probe under MVCC, which waits for no row lock, and whose
ACCESS SHARE table lock conflicts with DDL on the definitions table only; a call that does not
ask never touches the table). It answers a
bitmask: 1 the row was inserted, 2 the definition is missing. Version 1 stays, so application
servers still running the previous release keep recording during a rolling deploy.

Frozen history: never import application code here.
"""

from django.db import migrations, models

FUNCTION = """
CREATE FUNCTION runledger_record_intent_v2(
    p_id uuid, p_job_type text, p_organization_id uuid, p_payload jsonb, p_priority integer,
    p_max_attempts integer, p_timeout_seconds integer, p_next_run_at timestamptz,
    p_idempotency_key text, p_stage text, p_enqueue_request jsonb,
    p_execution_resource_key text, p_trace_context jsonb, p_check_definition boolean
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    inserted integer;
    flags integer := 0;
BEGIN
    IF current_setting('transaction_isolation') NOT IN ('read committed', 'read uncommitted')
    THEN
        RETURN 0;
    END IF;
    IF p_organization_id IS NULL THEN
        INSERT INTO runledger_job_enqueue_intents (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            next_run_at, idempotency_key, stage, enqueue_request_version, enqueue_request,
            execution_resource_key, trace_context)
        VALUES (
            p_id, p_job_type, NULL, p_payload, p_priority, p_max_attempts, p_timeout_seconds,
            p_next_run_at, p_idempotency_key, p_stage, 1, p_enqueue_request,
            p_execution_resource_key, p_trace_context)
        ON CONFLICT (job_type, idempotency_key) WHERE organization_id IS NULL DO NOTHING;
    ELSE
        INSERT INTO runledger_job_enqueue_intents (
            id, job_type, organization_id, payload, priority, max_attempts, timeout_seconds,
            next_run_at, idempotency_key, stage, enqueue_request_version, enqueue_request,
            execution_resource_key, trace_context)
        VALUES (
            p_id, p_job_type, p_organization_id, p_payload, p_priority, p_max_attempts,
            p_timeout_seconds, p_next_run_at, p_idempotency_key, p_stage, 1,
            p_enqueue_request, p_execution_resource_key, p_trace_context)
        ON CONFLICT (job_type, organization_id, idempotency_key)
            WHERE organization_id IS NOT NULL DO NOTHING;
    END IF;
    GET DIAGNOSTICS inserted = ROW_COUNT;
    IF inserted = 1 THEN
        flags := 1;
    END IF;
    -- Nested, not one condition: PL/pgSQL plans an expression when it first evaluates it,
    -- so a call that does not ask never touches (or locks) the definitions table.
    IF p_check_definition THEN
        IF NOT EXISTS (SELECT 1 FROM runledger_job_definitions WHERE job_type = p_job_type)
        THEN
            flags := flags + 2;
        END IF;
    END IF;
    RETURN flags;
END
$$;
"""

FUNCTION_REVERSE = """
DROP FUNCTION IF EXISTS runledger_record_intent_v2(
    uuid, text, uuid, jsonb, integer, integer, integer, timestamptz, text, text, jsonb, text,
    jsonb, boolean);
"""


class Migration(migrations.Migration):
    dependencies = [("runledger", "0012_dashboard")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="jobenqueueintent",
            name="trace_context",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.RunSQL(FUNCTION, FUNCTION_REVERSE),
    ]
