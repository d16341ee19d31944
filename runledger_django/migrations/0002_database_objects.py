"""Schema objects the ORM cannot express: UUIDv7 defaults, triggers, immediate foreign keys with
database-level actions, Unicode-aware blank CHECKs, the lifecycle CHECK, the generated progress
column and the contract-named indexes. Frozen history: never import application code here."""

from django.db import migrations

# "Contains at least one non-blank character" (reference 2.1). The reference writes the class
# with POSIX [:space:], whose members depend on the database's ctype (ICU locales add
# U+001C..U+001F); spelling out the Unicode White_Space set keeps the CHECK equal to the
# Python validation on every locale, so no input passes validation and then fails here.
NOT_BLANK = r"U&'[^\0009-\000D\0020\0085\00A0\1680\2000-\200A\2028\2029\202F\205F\3000]'"

UUIDV7 = """
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 180000 THEN
        EXECUTE $f$
            CREATE FUNCTION runledger_uuidv7() RETURNS uuid
            LANGUAGE sql VOLATILE PARALLEL SAFE AS 'SELECT uuidv7()'
        $f$;
    ELSE
        -- 48-bit Unix milliseconds, version 7, then random bits taken from a v4 UUID whose
        -- 17th hex digit already carries the RFC 9562 variant.
        EXECUTE $f$
            CREATE FUNCTION runledger_uuidv7() RETURNS uuid
            LANGUAGE sql VOLATILE PARALLEL SAFE AS $body$
                SELECT (lpad(to_hex(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint),
                             12, '0')
                        || '7' || substr(r.h, 1, 3) || substr(r.h, 17, 16))::uuid
                FROM (SELECT replace(gen_random_uuid()::text, '-', '') AS h) AS r
            $body$
        $f$;
    END IF;
END
$$;
ALTER TABLE runledger_job_queue ALTER COLUMN id SET DEFAULT runledger_uuidv7();
ALTER TABLE runledger_job_enqueue_intents ALTER COLUMN id SET DEFAULT runledger_uuidv7();
"""

UUIDV7_REVERSE = """
ALTER TABLE runledger_job_enqueue_intents ALTER COLUMN id DROP DEFAULT;
ALTER TABLE runledger_job_queue ALTER COLUMN id DROP DEFAULT;
DROP FUNCTION runledger_uuidv7();
"""

TRIGGERS = """
CREATE FUNCTION runledger_set_updated_at_timestamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at = now();
    RETURN NEW;
END
$$;
CREATE TRIGGER trg_job_definitions_set_updated_at BEFORE UPDATE ON runledger_job_definitions
    FOR EACH ROW EXECUTE FUNCTION runledger_set_updated_at_timestamp();
CREATE TRIGGER trg_job_queue_set_updated_at BEFORE UPDATE ON runledger_job_queue
    FOR EACH ROW EXECUTE FUNCTION runledger_set_updated_at_timestamp();
CREATE TRIGGER trg_job_enqueue_intents_set_updated_at BEFORE UPDATE ON runledger_job_enqueue_intents
    FOR EACH ROW EXECUTE FUNCTION runledger_set_updated_at_timestamp();
"""

TRIGGERS_REVERSE = """
DROP TRIGGER trg_job_enqueue_intents_set_updated_at ON runledger_job_enqueue_intents;
DROP TRIGGER trg_job_queue_set_updated_at ON runledger_job_queue;
DROP TRIGGER trg_job_definitions_set_updated_at ON runledger_job_definitions;
DROP FUNCTION runledger_set_updated_at_timestamp();
"""

# Immediate (not deferrable) foreign keys with database-level actions: Django's own FKs are
# DEFERRABLE INITIALLY DEFERRED and enforce RESTRICT only in Python, which raw deletes bypass.
FOREIGN_KEYS = """
ALTER TABLE runledger_job_queue ADD CONSTRAINT fk_job_queue_job_type
    FOREIGN KEY (job_type) REFERENCES runledger_job_definitions (job_type) ON DELETE RESTRICT;
ALTER TABLE runledger_job_events ADD CONSTRAINT fk_job_events_job
    FOREIGN KEY (job_id) REFERENCES runledger_job_queue (id) ON DELETE CASCADE;
ALTER TABLE runledger_job_enqueue_intents ADD CONSTRAINT fk_job_enqueue_intents_promoted_job
    FOREIGN KEY (promoted_job_id) REFERENCES runledger_job_queue (id) ON DELETE RESTRICT;
"""

FOREIGN_KEYS_REVERSE = """
ALTER TABLE runledger_job_enqueue_intents DROP CONSTRAINT fk_job_enqueue_intents_promoted_job;
ALTER TABLE runledger_job_events DROP CONSTRAINT fk_job_events_job;
ALTER TABLE runledger_job_queue DROP CONSTRAINT fk_job_queue_job_type;
"""

CHECKS = f"""
ALTER TABLE runledger_job_definitions ADD CONSTRAINT chk_job_definitions_type_not_blank
    CHECK (job_type ~ {NOT_BLANK});
ALTER TABLE runledger_job_queue ADD CONSTRAINT chk_job_queue_job_type_not_blank
    CHECK (job_type ~ {NOT_BLANK});
ALTER TABLE runledger_job_queue ADD CONSTRAINT chk_job_queue_stage_not_blank
    CHECK (stage ~ {NOT_BLANK});
ALTER TABLE runledger_job_queue ADD CONSTRAINT chk_job_queue_worker_id_not_blank
    CHECK (worker_id IS NULL OR worker_id ~ {NOT_BLANK});
ALTER TABLE runledger_job_queue ADD CONSTRAINT chk_job_queue_idempotency_key_not_blank
    CHECK (idempotency_key IS NULL OR idempotency_key ~ {NOT_BLANK});
ALTER TABLE runledger_job_queue ADD CONSTRAINT chk_job_queue_execution_resource_key
    CHECK (execution_resource_key IS NULL OR (execution_resource_key ~ {NOT_BLANK}
           AND octet_length(execution_resource_key) <= 512));
ALTER TABLE runledger_job_events ADD CONSTRAINT chk_job_events_stage_not_blank
    CHECK (stage IS NULL OR stage ~ {NOT_BLANK});
ALTER TABLE runledger_job_enqueue_intents ADD CONSTRAINT chk_job_enqueue_intents_job_type_not_blank
    CHECK (job_type ~ {NOT_BLANK});
ALTER TABLE runledger_job_enqueue_intents
    ADD CONSTRAINT chk_job_enqueue_intents_idempotency_key_not_blank
    CHECK (idempotency_key ~ {NOT_BLANK});
ALTER TABLE runledger_job_enqueue_intents ADD CONSTRAINT chk_job_enqueue_intents_stage_not_blank
    CHECK (stage ~ {NOT_BLANK});
ALTER TABLE runledger_job_enqueue_intents
    ADD CONSTRAINT chk_job_enqueue_intents_execution_resource_key
    CHECK (execution_resource_key IS NULL OR (execution_resource_key ~ {NOT_BLANK}
           AND octet_length(execution_resource_key) <= 512));
ALTER TABLE runledger_job_enqueue_intents ADD CONSTRAINT chk_job_enqueue_intents_state_fields CHECK (
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
);
"""

CHECKS_REVERSE = """
ALTER TABLE runledger_job_enqueue_intents DROP CONSTRAINT chk_job_enqueue_intents_state_fields;
ALTER TABLE runledger_job_enqueue_intents
    DROP CONSTRAINT chk_job_enqueue_intents_execution_resource_key;
ALTER TABLE runledger_job_enqueue_intents DROP CONSTRAINT chk_job_enqueue_intents_stage_not_blank;
ALTER TABLE runledger_job_enqueue_intents
    DROP CONSTRAINT chk_job_enqueue_intents_idempotency_key_not_blank;
ALTER TABLE runledger_job_enqueue_intents
    DROP CONSTRAINT chk_job_enqueue_intents_job_type_not_blank;
ALTER TABLE runledger_job_events DROP CONSTRAINT chk_job_events_stage_not_blank;
ALTER TABLE runledger_job_queue DROP CONSTRAINT chk_job_queue_execution_resource_key;
ALTER TABLE runledger_job_queue DROP CONSTRAINT chk_job_queue_idempotency_key_not_blank;
ALTER TABLE runledger_job_queue DROP CONSTRAINT chk_job_queue_worker_id_not_blank;
ALTER TABLE runledger_job_queue DROP CONSTRAINT chk_job_queue_stage_not_blank;
ALTER TABLE runledger_job_queue DROP CONSTRAINT chk_job_queue_job_type_not_blank;
ALTER TABLE runledger_job_definitions DROP CONSTRAINT chk_job_definitions_type_not_blank;
"""

PROGRESS_PCT = """
ALTER TABLE runledger_job_queue ADD COLUMN progress_pct numeric GENERATED ALWAYS AS (
    CASE WHEN progress_done IS NULL OR progress_total IS NULL OR progress_total <= 0 THEN NULL
         ELSE round((progress_done::numeric * 100.0) / progress_total::numeric, 2) END
) STORED;
"""

PROGRESS_PCT_REVERSE = "ALTER TABLE runledger_job_queue DROP COLUMN progress_pct;"

INDEXES = """
CREATE INDEX idx_job_queue_claim ON runledger_job_queue
    (status, priority DESC, next_run_at, created_at) WHERE status = 'PENDING';
CREATE INDEX idx_job_queue_execution_resource_claim_order ON runledger_job_queue
    (priority DESC, next_run_at, created_at, id) INCLUDE (execution_resource_key, job_type)
    WHERE status = 'PENDING' AND execution_resource_key IS NOT NULL;
CREATE INDEX idx_job_queue_leased_expiry ON runledger_job_queue (lease_expires_at)
    WHERE status = 'LEASED';
CREATE INDEX idx_job_queue_org_status_created ON runledger_job_queue
    (organization_id, status, created_at DESC);
CREATE INDEX idx_job_queue_type_status_created ON runledger_job_queue
    (job_type, status, created_at DESC);
CREATE INDEX idx_job_queue_missing_enqueue_request_snapshot ON runledger_job_queue (id)
    WHERE idempotency_key IS NOT NULL AND enqueue_request IS NULL;
CREATE INDEX idx_job_queue_scope_created_id ON runledger_job_queue
    (organization_id, created_at DESC, id DESC);
CREATE INDEX idx_job_queue_created_id ON runledger_job_queue (created_at DESC, id DESC);

CREATE INDEX idx_job_enqueue_intents_pending ON runledger_job_enqueue_intents
    (next_promotion_at, created_at, id) WHERE status = 'PENDING';
CREATE INDEX idx_job_enqueue_intents_pending_type ON runledger_job_enqueue_intents
    (job_type, next_promotion_at, created_at, id) WHERE status = 'PENDING';
CREATE INDEX idx_job_enqueue_intents_pending_metrics ON runledger_job_enqueue_intents
    (job_type, created_at) INCLUDE (promotion_attempts) WHERE status = 'PENDING';
CREATE INDEX idx_job_enqueue_intents_global_pending_metrics ON runledger_job_enqueue_intents
    (job_type, created_at) INCLUDE (promotion_attempts)
    WHERE status = 'PENDING' AND organization_id IS NULL;
CREATE INDEX idx_job_enqueue_intents_org_pending_metrics ON runledger_job_enqueue_intents
    (organization_id, job_type, created_at) INCLUDE (promotion_attempts)
    WHERE status = 'PENDING' AND organization_id IS NOT NULL;
CREATE INDEX idx_job_enqueue_intents_conflicted_metrics ON runledger_job_enqueue_intents
    (conflicted_at, job_type) WHERE status = 'CONFLICTED';
CREATE INDEX idx_job_enqueue_intents_org_conflicted_metrics ON runledger_job_enqueue_intents
    (organization_id, conflicted_at, job_type)
    WHERE status = 'CONFLICTED' AND organization_id IS NOT NULL;
CREATE INDEX idx_job_enqueue_intents_org_promoted_metrics ON runledger_job_enqueue_intents
    (organization_id, promoted_at, job_type)
    WHERE status = 'PROMOTED' AND organization_id IS NOT NULL;
CREATE INDEX idx_job_enqueue_intents_promoted_cleanup ON runledger_job_enqueue_intents
    (promoted_at, id) INCLUDE (job_type, organization_id) WHERE status = 'PROMOTED';
CREATE INDEX idx_job_enqueue_intents_created ON runledger_job_enqueue_intents
    (created_at DESC, id DESC);
CREATE INDEX idx_job_enqueue_intents_org_created ON runledger_job_enqueue_intents
    (organization_id, created_at DESC, id DESC);
CREATE INDEX idx_job_enqueue_intents_promoted_job ON runledger_job_enqueue_intents
    (promoted_job_id) WHERE promoted_job_id IS NOT NULL;
"""

INDEX_NAMES = [
    "idx_job_queue_claim",
    "idx_job_queue_execution_resource_claim_order",
    "idx_job_queue_leased_expiry",
    "idx_job_queue_org_status_created",
    "idx_job_queue_type_status_created",
    "idx_job_queue_missing_enqueue_request_snapshot",
    "idx_job_queue_scope_created_id",
    "idx_job_queue_created_id",
    "idx_job_enqueue_intents_pending",
    "idx_job_enqueue_intents_pending_type",
    "idx_job_enqueue_intents_pending_metrics",
    "idx_job_enqueue_intents_global_pending_metrics",
    "idx_job_enqueue_intents_org_pending_metrics",
    "idx_job_enqueue_intents_conflicted_metrics",
    "idx_job_enqueue_intents_org_conflicted_metrics",
    "idx_job_enqueue_intents_org_promoted_metrics",
    "idx_job_enqueue_intents_promoted_cleanup",
    "idx_job_enqueue_intents_created",
    "idx_job_enqueue_intents_org_created",
    "idx_job_enqueue_intents_promoted_job",
]

INDEXES_REVERSE = "".join(f"DROP INDEX {name};\n" for name in INDEX_NAMES)


class Migration(migrations.Migration):
    dependencies = [("runledger", "0001_initial")]

    operations = [
        migrations.RunSQL(UUIDV7, UUIDV7_REVERSE),
        migrations.RunSQL(TRIGGERS, TRIGGERS_REVERSE),
        migrations.RunSQL(FOREIGN_KEYS, FOREIGN_KEYS_REVERSE),
        migrations.RunSQL(CHECKS, CHECKS_REVERSE),
        migrations.RunSQL(PROGRESS_PCT, PROGRESS_PCT_REVERSE),
        migrations.RunSQL(INDEXES, INDEXES_REVERSE),
    ]
