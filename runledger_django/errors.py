"""RunledgerError, the one exception callers catch, and the catalog of its stable codes."""

from __future__ import annotations

from enum import StrEnum


class ErrorCategory(StrEnum):
    VALIDATION = "validation"
    CONFLICT = "conflict"
    FORBIDDEN = "forbidden"
    INTERNAL = "internal"


class Code(StrEnum):
    """Stable error codes (reference 7.2 plus this project's validation codes)."""

    INVALID_JOB_TYPE = "job.invalid_job_type"
    INVALID_JOB_TYPE_LENGTH = "job.invalid_job_type_length"
    INTENT_INVALID_IDEMPOTENCY_KEY = "job.intent_invalid_idempotency_key"
    INVALID_IDEMPOTENCY_KEY = "job.invalid_idempotency_key"
    INVALID_IDEMPOTENCY_KEY_LENGTH = "job.invalid_idempotency_key_length"
    INTENT_INVALID_MAX_ATTEMPTS = "job.intent_invalid_max_attempts"
    INVALID_MAX_ATTEMPTS = "job.invalid_max_attempts"
    INTENT_INVALID_TIMEOUT = "job.intent_invalid_timeout"
    INVALID_TIMEOUT = "job.invalid_timeout"
    INVALID_EXECUTION_RESOURCE_KEY = "job.invalid_execution_resource_key"
    INVALID_PAYLOAD = "job.invalid_payload"
    INVALID_ORGANIZATION_ID = "job.invalid_organization_id"
    INVALID_NEXT_RUN_AT = "job.invalid_next_run_at"
    INVALID_PRIORITY = "job.invalid_priority"
    INVALID_STAGE = "job.invalid_stage"
    INVALID_STATUS = "job.invalid_status"
    INVALID_PAGINATION = "job.invalid_pagination"
    INVALID_ARGUMENT = "job.invalid_argument"
    INTENT_IDEMPOTENCY_UNSUPPORTED_ISOLATION = "job.intent_idempotency_unsupported_isolation"
    INTENT_IDEMPOTENCY_CONFLICT = "job.intent_idempotency_conflict"
    INTENT_IDEMPOTENCY_CONFLICT_MISSING_EXISTING = (
        "job.intent_idempotency_conflict_missing_existing"
    )
    INTENT_INVALID_PERSISTED_ROW = "job.intent_invalid_persisted_row"
    INTENT_SNAPSHOT_MISMATCH = "job.intent_snapshot_mismatch"
    INTENT_TRANSITION_FAILED = "job.intent_transition_failed"
    INTENT_RETENTION_BATCH_TOO_LARGE = "job.intent_retention_batch_too_large"
    INTENT_RETENTION_UNSUPPORTED_ISOLATION = "job.intent_retention_unsupported_isolation"
    INTENT_PROMOTION_REQUIRES_OWN_TRANSACTION = "job.intent_promotion_requires_own_transaction"
    INTENT_RETENTION_REQUIRES_TRANSACTION = "job.intent_retention_requires_transaction"
    INTENT_PROMOTION_BUDGET_EXHAUSTED = "job.intent_promotion_budget_exhausted"
    ENQUEUE_REQUEST_SNAPSHOT_FAILED = "job.enqueue_request_snapshot_failed"
    DEFINITION_NOT_FOUND_OR_DISABLED = "job.definition_not_found_or_disabled"
    IDEMPOTENCY_CONFLICT = "job.idempotency_conflict"
    LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING = "job.legacy_idempotency_snapshot_missing"
    IDEMPOTENCY_CONFLICT_MISSING_EXISTING = "job.idempotency_conflict_missing_existing"
    ENQUEUE_IDEMPOTENCY_UNSUPPORTED_ISOLATION = "job.enqueue_idempotency_unsupported_isolation"
    ALREADY_ENQUEUED = "job.already_enqueued"
    DEFINITION_NOT_FOUND = "job.definition_not_found"
    LEASE_OWNER_MISMATCH = "job.lease_owner_mismatch"
    INVALID_LEASE_DURATION = "job.invalid_lease_duration"
    INVALID_RETRY_DELAY = "job.invalid_retry_delay"
    INVALID_RETRY_TIMING = "job.invalid_retry_timing"
    INVALID_PROGRESS = "job.invalid_progress"
    INVALID_CHECKPOINT = "job.invalid_checkpoint"
    INVALID_OUTPUT = "job.invalid_output"
    INVALID_STATE_TRANSITION = "job.invalid_state_transition"
    NOT_FOUND = "job.not_found"
    CANCELLATION_NOT_QUIESCED = "job.cancellation_not_quiesced"
    HANDLER_NOT_REGISTERED = "job.handler_not_registered"
    HANDLER_FAILED = "job.handler_failed"
    HANDLER_PANIC = "job.handler_panic"
    RETRY_REQUESTED = "job.retry_requested"
    TERMINAL_FAILURE = "job.terminal_failure"
    TIMEOUT_EXCEEDED = "job.timeout_exceeded"
    LEASE_EXPIRED = "job.lease_expired"
    WORKER_REQUIRES_OWN_TRANSACTION = "job.worker_requires_own_transaction"
    HANDLER_LEFT_TRANSACTION_OPEN = "job.handler_left_transaction_open"
    TASK_NOT_FOUND = "job.task_not_found"
    TASK_INVALID = "job.task_invalid"
    TASK_BACKEND_UNAVAILABLE = "job.task_backend_unavailable"
    TASK_PAYLOAD_INVALID = "job.task_payload_invalid"
    INVALID_PERSISTED_JOB = "job.invalid_persisted_row"
    # --- periodic schedules ---
    SCHEDULE_INVALID_NAME = "job_schedule.invalid_name"
    SCHEDULE_INVALID_CRON = "job_schedule.invalid_cron"
    SCHEDULE_INVALID_INTERVAL = "job_schedule.invalid_interval"
    SCHEDULE_INVALID_TIMEZONE = "job_schedule.invalid_timezone"
    SCHEDULE_INVALID_JITTER = "job_schedule.invalid_jitter"
    SCHEDULE_INVALID_TARGET = "job_schedule.invalid_target"
    SCHEDULE_INVALID_PAYLOAD = "job_schedule.invalid_payload"
    SCHEDULE_INVALID_ORGANIZATION_ID = "job_schedule.invalid_organization_id"
    SCHEDULE_INVALID_PRIORITY = "job_schedule.invalid_priority"
    SCHEDULE_INVALID_CATCH_UP = "job_schedule.invalid_catch_up"
    SCHEDULE_INVALID_OVERLAP = "job_schedule.invalid_overlap"
    SCHEDULE_INVALID_ARGUMENT = "job_schedule.invalid_argument"
    SCHEDULE_NOT_FOUND = "job_schedule.not_found"
    SCHEDULE_DECLARED_IN_CODE = "job_schedule.declared_in_code"
    SCHEDULE_DEFINITION_NOT_FOUND_OR_DISABLED = "job_schedule.definition_not_found_or_disabled"
    SCHEDULE_REQUIRES_OWN_TRANSACTION = "job_schedule.requires_own_transaction"
    DEFINITION_ACTIVE_SCHEDULE_EXISTS = "job_definition.active_schedule_exists"
    # Queue control (issue 21).
    DEFINITION_INVALID_PAUSE_NOTE = "job_definition.invalid_pause_note"
    DEFINITION_INVALID_LIMIT = "job_definition.invalid_limit"
    DB_UNIQUE_VIOLATION = "db.unique_violation"
    DB_RELATED_RESOURCE_MISSING = "db.related_resource_missing"
    DB_RELATED_RESOURCE_STILL_REFERENCED = "db.related_resource_still_referenced"
    DB_BUSINESS_RULE_VIOLATION = "db.business_rule_violation"
    DB_REQUIRED_FIELD_MISSING = "db.required_field_missing"
    DB_PERMISSION_DENIED = "db.permission_denied"
    DB_QUERY_FAILED = "db.query_failed"
    DB_TRANSACTION_COMMIT_UNCONFIRMED = "db.transaction_commit_unconfirmed"
    # Exactly-once completion, continuation and replay (issue 20).
    ATOMIC_COMPLETION_UNSUPPORTED_ISOLATION = "job.atomic_completion_unsupported_isolation"
    ATOMIC_COMPLETION_WRONG_DATABASE = "job.atomic_completion_wrong_database"
    ATOMIC_COMPLETION_REQUIRES_OWN_TRANSACTION = "job.atomic_completion_requires_own_transaction"
    ALREADY_COMPLETED = "job.already_completed"
    INVALID_CONTINUATION_DELAY = "job.invalid_continuation_delay"
    REPLAY_REQUEST_KEY_BLANK = "job.replay_request_key_blank"
    REPLAY_REQUEST_KEY_TOO_LONG = "job.replay_request_key_too_long"
    REPLAY_REASON_BLANK = "job.replay_reason_blank"
    REPLAY_IDEMPOTENCY_CONFLICT = "job.replay_idempotency_conflict"
    REPLAY_EXPECTATION_MISMATCH = "job.replay_expectation_mismatch"
    COMPARE_AND_REPLAY_UNSUPPORTED_ISOLATION = "job.compare_and_replay_unsupported_isolation"
    # Bulk producers (issue 22).
    BATCH_TOO_LARGE = "job.batch_too_large"
    # Workflows (issue 19).
    WF_INVALID_DAG = "workflow.invalid_dag"
    WF_INVALID_DAG_EMPTY = "workflow.invalid_dag_empty"
    WF_INVALID_DAG_WORKFLOW_TYPE_BLANK = "workflow.invalid_dag_workflow_type_blank"
    WF_INVALID_DAG_STEP_KEY_BLANK = "workflow.invalid_dag_step_key_blank"
    WF_INVALID_DAG_JOB_TYPE_BLANK = "workflow.invalid_dag_job_type_blank"
    WF_INVALID_DAG_IDEMPOTENCY_KEY_BLANK = "workflow.invalid_dag_idempotency_key_blank"
    WF_INVALID_DAG_STEP_MAX_ATTEMPTS_NON_POSITIVE = (
        "workflow.invalid_dag_step_max_attempts_non_positive"
    )
    WF_INVALID_DAG_STEP_TIMEOUT_SECONDS_NON_POSITIVE = (
        "workflow.invalid_dag_step_timeout_seconds_non_positive"
    )
    WF_INVALID_DAG_STEP_PRIORITY = "workflow.invalid_dag_step_priority"
    WF_INVALID_DAG_STEP_RESOURCE_KEY = "workflow.invalid_dag_step_resource_key"
    WF_INVALID_DAG_STEP_PAYLOAD = "workflow.invalid_dag_step_payload"
    WF_INVALID_DAG_EXTERNAL_STEP_JOB_TYPE_NOT_ALLOWED = (
        "workflow.invalid_dag_external_step_job_type_not_allowed"
    )
    WF_INVALID_DAG_EXTERNAL_STEP_QUEUE_SETTINGS_NOT_ALLOWED = (
        "workflow.invalid_dag_external_step_queue_settings_not_allowed"
    )
    WF_INVALID_DAG_DEPENDENCY_STEP_KEY_BLANK = "workflow.invalid_dag_dependency_step_key_blank"
    WF_INVALID_DAG_DUPLICATE_STEP_KEY = "workflow.invalid_dag_duplicate_step_key"
    WF_INVALID_DAG_MISSING_DEPENDENCY = "workflow.invalid_dag_missing_dependency"
    WF_INVALID_DAG_SELF_DEPENDENCY = "workflow.invalid_dag_self_dependency"
    WF_INVALID_DAG_DUPLICATE_DEPENDENCY = "workflow.invalid_dag_duplicate_dependency"
    WF_INVALID_DAG_CYCLE = "workflow.invalid_dag_cycle"
    WF_INVALID_DAG_DEPENDENCY_COUNT_OVERFLOW = "workflow.invalid_dag_dependency_count_overflow"
    WF_INVALID_DAG_RELEASE_MODE = "workflow.invalid_dag_release_mode"
    WF_INVALID_ACTIVE_KEY = "workflow.invalid_active_key"
    WF_DEFINITION_NOT_FOUND_OR_DISABLED = "workflow.definition_not_found_or_disabled"
    WF_ENQUEUE_CONFLICTING_RETRY = "workflow.enqueue_conflicting_retry"
    WF_LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING = "workflow.legacy_idempotency_snapshot_missing"
    WF_ENQUEUE_IDEMPOTENCY_UNSUPPORTED_ISOLATION = (
        "workflow.enqueue_idempotency_unsupported_isolation"
    )
    WF_INTERNAL_STATE = "workflow.internal_state"
    WF_RELEASE_CONFLICT = "workflow.release_conflict"
    WF_RUN_NOT_FOUND = "workflow.run_not_found"
    WF_TERMINAL_COMPLETION_UNSUPPORTED_ISOLATION = (
        "workflow.terminal_completion_unsupported_isolation"
    )
    WF_CANCEL_UNSUPPORTED_ISOLATION = "workflow.cancel_unsupported_isolation"
    WF_EXTERNAL_COMPLETION_UNSUPPORTED_ISOLATION = (
        "workflow.external_completion_unsupported_isolation"
    )
    WF_EXTERNAL_STEP_NOT_FOUND = "workflow.external_step_not_found"
    WF_EXTERNAL_STEP_NOT_EXTERNAL = "workflow.external_step_not_external"
    WF_EXTERNAL_STEP_NOT_WAITING = "workflow.external_step_not_waiting"
    WF_EXTERNAL_STEP_INVALID_TERMINAL_STATUS = "workflow.external_step_invalid_terminal_status"
    WF_EXTERNAL_STEP_OUTPUT_INVALID_STATUS = "workflow.external_step_output_invalid_status"
    WF_EXTERNAL_STEP_CONFLICTING_COMPLETION_RETRY = (
        "workflow.external_step_conflicting_completion_retry"
    )
    WF_EXTERNAL_STEP_CONFLICTING_OUTPUT_RETRY = "workflow.external_step_conflicting_output_retry"
    WF_DEPENDENCY_UNSATISFIED = "workflow.dependency_unsatisfied"
    WF_RETRY_SOURCE_NOT_TERMINAL = "workflow.recovery_source_not_terminal"
    WF_RECOVERY_UNSUPPORTED_ISOLATION = "workflow.recovery_unsupported_isolation"
    WF_RECOVERY_ACTIVE_CONSTRAINT = "workflow.recovery_active_constraint"
    WF_INVALID_RECOVERY_REQUEST_KEY = "workflow.invalid_recovery_request_key"
    WF_RECOVERY_REQUEST_CONFLICT = "workflow.recovery_request_conflict"
    WF_RESULT_NOT_DECLARED = "workflow.result_not_declared"
    WF_RESULT_MISSING = "workflow.result_missing"
    WF_RESULT_UNSUCCESSFUL_TERMINAL = "workflow.result_unsuccessful_terminal"
    WF_RESULT_WAIT_TIMEOUT = "workflow.result_wait_timeout"
    WF_REQUEUE_NOT_SUPPORTED = "job.workflow_requeue_not_supported"
    WF_HANDLER_CONTINUATION_NOT_ENABLED = "job.workflow_handler_continuation_not_enabled"
    WF_APPEND_MUTATION_KEY_BLANK = "workflow.append_mutation_key_blank"
    WF_APPEND_CONFLICTING_RETRY = "workflow.append_conflicting_retry"
    WF_APPEND_WINDOW_MISSING = "workflow.append_window_missing"
    WF_APPEND_WINDOW_NOT_EXTERNAL = "workflow.append_window_not_external"
    WF_APPEND_WINDOW_NOT_OPEN = "workflow.append_window_not_open"
    WF_APPEND_TERMINAL_RUN = "workflow.append_terminal_run"
    WF_APPEND_UNSUPPORTED_ISOLATION = "workflow.append_unsupported_isolation"


_V = ErrorCategory.VALIDATION
_C = ErrorCategory.CONFLICT
_F = ErrorCategory.FORBIDDEN
_I = ErrorCategory.INTERNAL

CATALOG: dict[Code, tuple[ErrorCategory, str]] = {
    Code.INVALID_JOB_TYPE: (_V, "Job type must not be blank."),
    Code.INVALID_JOB_TYPE_LENGTH: (_V, "Job type must be at most 255 bytes."),
    Code.INTENT_INVALID_IDEMPOTENCY_KEY: (
        _V,
        "Job enqueue intent idempotency key must not be blank.",
    ),
    Code.INVALID_IDEMPOTENCY_KEY: (_V, "Job idempotency key must not be blank."),
    Code.INVALID_IDEMPOTENCY_KEY_LENGTH: (_V, "Idempotency key must be at most 1,024 bytes."),
    Code.INTENT_INVALID_MAX_ATTEMPTS: (_V, "Job enqueue intent max attempts must be positive."),
    Code.INVALID_MAX_ATTEMPTS: (_V, "Job max attempts must be a positive 32-bit integer."),
    Code.INTENT_INVALID_TIMEOUT: (_V, "Job enqueue intent timeout must be positive."),
    Code.INVALID_TIMEOUT: (_V, "Job timeout must be a positive 32-bit integer."),
    Code.INVALID_EXECUTION_RESOURCE_KEY: (
        _V,
        "Execution resource key must be non-blank and at most 512 bytes.",
    ),
    Code.INVALID_PAYLOAD: (_V, "Job payload must be JSON-native data that PostgreSQL can store."),
    Code.INVALID_ORGANIZATION_ID: (_V, "Organization id must be a UUID."),
    Code.INVALID_NEXT_RUN_AT: (_V, "Next run time must be a timezone-aware datetime."),
    Code.INVALID_PRIORITY: (_V, "Job priority must be a 32-bit integer."),
    Code.INVALID_STAGE: (_V, "Job stage must be one of queued, scheduled, running, completed."),
    Code.INVALID_STATUS: (_I, "Job status in persisted row is invalid."),
    Code.INVALID_PAGINATION: (_V, "Pagination limit and offset are invalid."),
    Code.INVALID_ARGUMENT: (_V, "Request argument is invalid."),
    Code.INTENT_IDEMPOTENCY_UNSUPPORTED_ISOLATION: (
        _V,
        "Job enqueue intent recording requires READ COMMITTED transaction isolation.",
    ),
    Code.INTENT_IDEMPOTENCY_CONFLICT: (
        _C,
        "Job enqueue intent retry conflicts with the existing idempotency key.",
    ),
    Code.INTENT_IDEMPOTENCY_CONFLICT_MISSING_EXISTING: (
        _I,
        "Job enqueue intent retry could not be resolved.",
    ),
    Code.INTENT_INVALID_PERSISTED_ROW: (_I, "Job enqueue intent contains invalid persisted state."),
    Code.INTENT_SNAPSHOT_MISMATCH: (_I, "Job enqueue intent request snapshot is inconsistent."),
    Code.INTENT_TRANSITION_FAILED: (_I, "Job enqueue intent could not be updated."),
    Code.INTENT_RETENTION_BATCH_TOO_LARGE: (
        _V,
        "Job enqueue intent retention batch must contain at most 1,000 job IDs.",
    ),
    Code.INTENT_RETENTION_UNSUPPORTED_ISOLATION: (
        _V,
        "Job enqueue intent retention requires READ COMMITTED transaction isolation.",
    ),
    Code.INTENT_PROMOTION_REQUIRES_OWN_TRANSACTION: (
        _V,
        "Job enqueue intent promotion must run outside any transaction.",
    ),
    Code.INTENT_RETENTION_REQUIRES_TRANSACTION: (
        _V,
        "Job enqueue intent retention must run inside the caller's transaction.",
    ),
    Code.INTENT_PROMOTION_BUDGET_EXHAUSTED: (_I, "Database operation failed."),
    Code.ENQUEUE_REQUEST_SNAPSHOT_FAILED: (_I, "Job enqueue request could not be recorded."),
    Code.DEFINITION_NOT_FOUND_OR_DISABLED: (_V, "Job type is not available."),
    Code.IDEMPOTENCY_CONFLICT: (
        _C,
        "Job enqueue retry conflicts with the existing idempotency key.",
    ),
    Code.LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING: (
        _C,
        "Job enqueue retry cannot be resolved because the existing idempotency key is missing "
        "its request snapshot.",
    ),
    Code.IDEMPOTENCY_CONFLICT_MISSING_EXISTING: (_I, "Job enqueue retry could not be resolved."),
    Code.ENQUEUE_IDEMPOTENCY_UNSUPPORTED_ISOLATION: (
        _V,
        "Job idempotent enqueue requires READ COMMITTED transaction isolation.",
    ),
    Code.ALREADY_ENQUEUED: (_C, "Job is already enqueued for this idempotency key."),
    Code.DEFINITION_NOT_FOUND: (_V, "Job definition does not exist."),
    Code.LEASE_OWNER_MISMATCH: (_F, "Job lease is not currently held by this worker."),
    Code.INVALID_LEASE_DURATION: (_V, "Job lease duration must be a positive number of seconds."),
    Code.INVALID_RETRY_DELAY: (_V, "Job retry delay must be a positive number of milliseconds."),
    Code.INVALID_RETRY_TIMING: (_V, "Job retry time is invalid."),
    Code.INVALID_PROGRESS: (
        _V,
        "Job progress must be non-negative whole numbers with done at most total.",
    ),
    Code.INVALID_CHECKPOINT: (_V, "Job checkpoint must be JSON-native data."),
    Code.INVALID_OUTPUT: (_V, "Job handler output must be JSON-native data."),
    Code.INVALID_STATE_TRANSITION: (_C, "Job is not in a state that allows this action."),
    Code.NOT_FOUND: (_V, "Job does not exist."),
    Code.CANCELLATION_NOT_QUIESCED: (
        _C,
        "Job was canceled while running; it can be requeued once its lease has expired.",
    ),
    Code.HANDLER_NOT_REGISTERED: (_I, "No handler is registered for this job type."),
    Code.HANDLER_FAILED: (_I, "Job handler raised an exception."),
    Code.HANDLER_PANIC: (_I, "Job handler aborted."),
    Code.RETRY_REQUESTED: (_I, "Job handler asked to be retried."),
    Code.TERMINAL_FAILURE: (_I, "Job handler failed permanently."),
    Code.TIMEOUT_EXCEEDED: (_I, "Job exceeded the configured timeout."),
    Code.LEASE_EXPIRED: (_I, "Job lease expired before completion."),
    Code.WORKER_REQUIRES_OWN_TRANSACTION: (
        _V,
        "Jobs must be run outside any transaction.",
    ),
    Code.INVALID_PERSISTED_JOB: (_I, "Job contains invalid persisted state."),
    Code.TASK_NOT_FOUND: (_I, "The task's function could not be imported on the worker."),
    Code.TASK_INVALID: (_I, "The task is not a valid Django task for its backend."),
    Code.TASK_BACKEND_UNAVAILABLE: (_I, "The task's backend is not configured on the worker."),
    Code.TASK_PAYLOAD_INVALID: (_I, "The job does not carry a task's payload."),
    Code.HANDLER_LEFT_TRANSACTION_OPEN: (
        _I,
        "Job handler returned with a database transaction still open; its work was rolled back.",
    ),
    # --- periodic schedules ---
    Code.SCHEDULE_INVALID_NAME: (
        _V,
        "Schedule name must be non-blank text of at most 255 bytes without surrounding whitespace.",
    ),
    Code.SCHEDULE_INVALID_CRON: (
        _V,
        "Schedule cron must be a 5-field (or seconds-first 6-field) cron expression or a "
        "nickname such as @hourly, with a match in the next 50 years.",
    ),
    Code.SCHEDULE_INVALID_INTERVAL: (
        _V,
        "Schedule interval must be a whole number of seconds, at least one, given instead of "
        "a cron expression.",
    ),
    Code.SCHEDULE_INVALID_TIMEZONE: (_V, "Schedule time zone must be a valid IANA zone name."),
    Code.SCHEDULE_INVALID_JITTER: (
        _V,
        "Schedule jitter must be a whole number of seconds from 0 to 86,400.",
    ),
    Code.SCHEDULE_INVALID_TARGET: (
        _V,
        "Schedule target must be a job type or a django.tasks Task of the runledger backend.",
    ),
    Code.SCHEDULE_INVALID_PAYLOAD: (
        _V,
        "Schedule payload and task arguments must be JSON-native data that PostgreSQL can store.",
    ),
    Code.SCHEDULE_INVALID_ORGANIZATION_ID: (_V, "Schedule organization id must be a UUID."),
    Code.SCHEDULE_INVALID_PRIORITY: (_V, "Schedule priority must be a 32-bit integer."),
    Code.SCHEDULE_INVALID_CATCH_UP: (
        _V,
        "Schedule catch-up must be latest, skip or all, with a positive grace and limit.",
    ),
    Code.SCHEDULE_INVALID_OVERLAP: (_V, "Schedule overlap must be allow, skip or serialize."),
    Code.SCHEDULE_INVALID_ARGUMENT: (_V, "Schedule request argument is invalid."),
    Code.SCHEDULE_NOT_FOUND: (_V, "Schedule does not exist."),
    Code.SCHEDULE_DECLARED_IN_CODE: (
        _C,
        "Schedule is declared in code; change it there (an operator may pause, resume or run it).",
    ),
    Code.SCHEDULE_DEFINITION_NOT_FOUND_OR_DISABLED: (
        _V,
        "An active schedule requires an enabled job definition for its job type.",
    ),
    Code.SCHEDULE_REQUIRES_OWN_TRANSACTION: (
        _V,
        "A scheduler pass must run outside any transaction.",
    ),
    Code.DEFINITION_ACTIVE_SCHEDULE_EXISTS: (
        _C,
        "Job definition cannot be disabled while an active schedule uses it.",
    ),
    Code.DEFINITION_INVALID_PAUSE_NOTE: (
        _V,
        "A pause reason or actor must be text of at most 500 characters.",
    ),
    Code.DEFINITION_INVALID_LIMIT: (
        _V,
        "A job type limit must be a positive integer (rate_limit: count and period_seconds).",
    ),
    Code.DB_UNIQUE_VIOLATION: (_C, "Resource already exists."),
    Code.DB_RELATED_RESOURCE_MISSING: (_V, "Related resource does not exist."),
    Code.DB_RELATED_RESOURCE_STILL_REFERENCED: (
        _V,
        "Related resource is still referenced and cannot be deleted.",
    ),
    Code.DB_BUSINESS_RULE_VIOLATION: (_V, "Request violates a business rule."),
    Code.DB_REQUIRED_FIELD_MISSING: (_V, "Required data is missing."),
    Code.DB_PERMISSION_DENIED: (_F, "Operation is not allowed."),
    Code.DB_QUERY_FAILED: (_I, "Database operation failed."),
    Code.DB_TRANSACTION_COMMIT_UNCONFIRMED: (_I, "Database transaction commit was not confirmed."),
    # Exactly-once completion, continuation and replay (issue 20).
    Code.ATOMIC_COMPLETION_UNSUPPORTED_ISOLATION: (
        _V,
        "Atomic job completion requires READ COMMITTED transaction isolation.",
    ),
    Code.ATOMIC_COMPLETION_WRONG_DATABASE: (
        _V,
        "Atomic job completion must run on the database of the job queue.",
    ),
    Code.ATOMIC_COMPLETION_REQUIRES_OWN_TRANSACTION: (
        _V,
        "Atomic job completion must own its transaction; it cannot run inside an atomic block.",
    ),
    Code.ALREADY_COMPLETED: (_C, "Job was already completed by this attempt."),
    Code.INVALID_CONTINUATION_DELAY: (_V, "Job continuation delay cannot be scheduled."),
    Code.REPLAY_REQUEST_KEY_BLANK: (_V, "Job replay request key must not be blank."),
    Code.REPLAY_REQUEST_KEY_TOO_LONG: (_V, "Job replay request key must be at most 512 bytes."),
    Code.REPLAY_REASON_BLANK: (_V, "Job replay reason must not be blank."),
    Code.REPLAY_IDEMPOTENCY_CONFLICT: (
        _C,
        "Job replay retry conflicts with the existing replay request key.",
    ),
    Code.REPLAY_EXPECTATION_MISMATCH: (_C, "Job run changed since it was observed."),
    Code.COMPARE_AND_REPLAY_UNSUPPORTED_ISOLATION: (
        _V,
        "Job replay requires READ COMMITTED transaction isolation.",
    ),
    Code.BATCH_TOO_LARGE: (_V, "A batch must hold at most 10,000 requests and 64 MiB of JSON."),
    Code.WF_INVALID_DAG: (_V, "Workflow graph is invalid."),
    Code.WF_INVALID_DAG_EMPTY: (_V, "Workflow must have at least one step."),
    Code.WF_INVALID_DAG_WORKFLOW_TYPE_BLANK: (
        _V,
        "Workflow type must be non-blank text of at most 255 bytes.",
    ),
    Code.WF_INVALID_DAG_STEP_KEY_BLANK: (
        _V,
        "Workflow step key must be non-blank text of at most 255 bytes.",
    ),
    Code.WF_INVALID_DAG_JOB_TYPE_BLANK: (
        _V,
        "Workflow job step needs a job type or a runledger Task.",
    ),
    Code.WF_INVALID_DAG_IDEMPOTENCY_KEY_BLANK: (
        _V,
        "Workflow idempotency key must be non-blank text of at most 1,024 bytes.",
    ),
    Code.WF_INVALID_DAG_STEP_MAX_ATTEMPTS_NON_POSITIVE: (
        _V,
        "Workflow step max attempts must be a positive 32-bit integer.",
    ),
    Code.WF_INVALID_DAG_STEP_TIMEOUT_SECONDS_NON_POSITIVE: (
        _V,
        "Workflow step timeout must be a positive 32-bit number of seconds.",
    ),
    Code.WF_INVALID_DAG_STEP_PRIORITY: (_V, "Workflow step priority must be a 32-bit integer."),
    Code.WF_INVALID_DAG_STEP_RESOURCE_KEY: (
        _V,
        "Workflow step execution resource key must be non-blank text of at most 512 bytes.",
    ),
    Code.WF_INVALID_DAG_STEP_PAYLOAD: (
        _V,
        "Workflow step payload must be JSON-native data that PostgreSQL can store.",
    ),
    Code.WF_INVALID_DAG_EXTERNAL_STEP_JOB_TYPE_NOT_ALLOWED: (
        _V,
        "External workflow step cannot have a job type.",
    ),
    Code.WF_INVALID_DAG_EXTERNAL_STEP_QUEUE_SETTINGS_NOT_ALLOWED: (
        _V,
        "External workflow step cannot have queue settings.",
    ),
    Code.WF_INVALID_DAG_DEPENDENCY_STEP_KEY_BLANK: (_V, "Workflow dependency must name a step."),
    Code.WF_INVALID_DAG_DUPLICATE_STEP_KEY: (_V, "Workflow step keys must be unique."),
    Code.WF_INVALID_DAG_MISSING_DEPENDENCY: (
        _V,
        "Workflow dependency names a step that does not exist.",
    ),
    Code.WF_INVALID_DAG_SELF_DEPENDENCY: (_V, "Workflow step cannot depend on itself."),
    Code.WF_INVALID_DAG_DUPLICATE_DEPENDENCY: (_V, "Workflow step lists a dependency twice."),
    Code.WF_INVALID_DAG_CYCLE: (_V, "Workflow graph must not contain a cycle."),
    Code.WF_INVALID_DAG_DEPENDENCY_COUNT_OVERFLOW: (_V, "Workflow graph is too large."),
    Code.WF_INVALID_DAG_RELEASE_MODE: (_V, "Workflow dependency mode must be success or terminal."),
    Code.WF_INVALID_ACTIVE_KEY: (
        _V,
        "Workflow active key must be non-blank text of at most 512 bytes.",
    ),
    Code.WF_DEFINITION_NOT_FOUND_OR_DISABLED: (
        _V,
        "Every job step of a workflow requires an enabled job definition.",
    ),
    Code.WF_ENQUEUE_CONFLICTING_RETRY: (
        _C,
        "Workflow idempotency key was already used with a different request.",
    ),
    Code.WF_LEGACY_IDEMPOTENCY_SNAPSHOT_MISSING: (
        _C,
        "Existing workflow run has no stored request to compare.",
    ),
    Code.WF_ENQUEUE_IDEMPOTENCY_UNSUPPORTED_ISOLATION: (
        _V,
        "Keyed workflow starts require READ COMMITTED isolation.",
    ),
    Code.WF_INTERNAL_STATE: (_I, "Workflow state is inconsistent."),
    Code.WF_RELEASE_CONFLICT: (_C, "Workflow run is being changed by another operation; retry."),
    Code.WF_RUN_NOT_FOUND: (_V, "Workflow run does not exist."),
    Code.WF_TERMINAL_COMPLETION_UNSUPPORTED_ISOLATION: (
        _V,
        "Workflow job completion requires READ COMMITTED isolation.",
    ),
    Code.WF_CANCEL_UNSUPPORTED_ISOLATION: (
        _V,
        "Workflow cancellation requires READ COMMITTED isolation.",
    ),
    Code.WF_EXTERNAL_COMPLETION_UNSUPPORTED_ISOLATION: (
        _V,
        "External step completion requires READ COMMITTED isolation.",
    ),
    Code.WF_EXTERNAL_STEP_NOT_FOUND: (_V, "Workflow step does not exist."),
    Code.WF_EXTERNAL_STEP_NOT_EXTERNAL: (_V, "Workflow step is not an external step."),
    Code.WF_EXTERNAL_STEP_NOT_WAITING: (
        _C,
        "External workflow step is not waiting for completion.",
    ),
    Code.WF_EXTERNAL_STEP_INVALID_TERMINAL_STATUS: (
        _V,
        "External step outcome must be SUCCEEDED, FAILED or CANCELED.",
    ),
    Code.WF_EXTERNAL_STEP_OUTPUT_INVALID_STATUS: (
        _V,
        "Only a SUCCEEDED external step can carry an output.",
    ),
    Code.WF_EXTERNAL_STEP_CONFLICTING_COMPLETION_RETRY: (
        _C,
        "External step was already completed with another outcome.",
    ),
    Code.WF_EXTERNAL_STEP_CONFLICTING_OUTPUT_RETRY: (
        _C,
        "External step was already completed with another output.",
    ),
    Code.WF_DEPENDENCY_UNSATISFIED: (
        _C,
        "Workflow step was canceled because a prerequisite did not succeed.",
    ),
    Code.WF_RETRY_SOURCE_NOT_TERMINAL: (_C, "Only a finished workflow run can be retried."),
    Code.WF_RECOVERY_UNSUPPORTED_ISOLATION: (
        _V,
        "Workflow retry requires READ COMMITTED isolation.",
    ),
    Code.WF_RECOVERY_ACTIVE_CONSTRAINT: (_C, "Workflow active key is held by another run."),
    Code.WF_INVALID_RECOVERY_REQUEST_KEY: (
        _V,
        "Workflow retry request key must be non-blank text of at most 512 bytes.",
    ),
    Code.WF_RECOVERY_REQUEST_CONFLICT: (
        _C,
        "Workflow retry request key was already used differently.",
    ),
    Code.WF_RESULT_NOT_DECLARED: (_V, "Workflow run declares no result step."),
    Code.WF_RESULT_MISSING: (_C, "Workflow run succeeded without a result."),
    Code.WF_RESULT_UNSUCCESSFUL_TERMINAL: (_C, "Workflow run finished without succeeding."),
    Code.WF_RESULT_WAIT_TIMEOUT: (_C, "Workflow run did not finish in time."),
    Code.WF_REQUEUE_NOT_SUPPORTED: (
        _C,
        "A workflow job is retried through its workflow, not requeued or replayed.",
    ),
    Code.WF_HANDLER_CONTINUATION_NOT_ENABLED: (
        _C,
        "This workflow step does not allow handler continuation.",
    ),
    Code.WF_APPEND_MUTATION_KEY_BLANK: (
        _V,
        "Workflow append mutation key must be non-blank text of at most 512 bytes.",
    ),
    Code.WF_APPEND_CONFLICTING_RETRY: (
        _C,
        "Workflow append mutation key was already used with different steps.",
    ),
    Code.WF_APPEND_WINDOW_MISSING: (_V, "Workflow append window step does not exist."),
    Code.WF_APPEND_WINDOW_NOT_EXTERNAL: (_V, "Workflow append window must be an external step."),
    Code.WF_APPEND_WINDOW_NOT_OPEN: (_C, "Workflow append window is not open."),
    Code.WF_APPEND_TERMINAL_RUN: (_C, "Steps cannot be appended to a finished workflow run."),
    Code.WF_APPEND_UNSUPPORTED_ISOLATION: (
        _V,
        "Workflow appends require READ COMMITTED isolation.",
    ),
}

# A persisted row that fails to decode is the server's fault, not the caller's: the same codes
# then carry the internal category and a message about the stored row (reference 7.2).
PERSISTED_ROW_CATALOG: dict[Code, tuple[ErrorCategory, str]] = {
    Code.INVALID_JOB_TYPE: (_I, "Job type in persisted row is invalid."),
    Code.INVALID_STAGE: (_I, "Job stage in persisted row is invalid."),
}


class RunledgerError(Exception):
    """The one error type of runledger_django.

    ``str()`` is the client message, safe to show an end user. ``internal_message`` may name job
    types, ids or database detail; it stays out of ``repr()`` and logs.
    """

    def __init__(
        self,
        *,
        category: ErrorCategory,
        code: str,
        client_message: str,
        internal_message: str,
        sqlstate: str | None = None,
        constraint: str | None = None,
        request_index: int | None = None,
    ) -> None:
        super().__init__(client_message)
        self.category = category
        self.code = code
        self.client_message = client_message
        self.internal_message = internal_message
        self.sqlstate = sqlstate
        self.constraint = constraint
        self.request_index = request_index
        """In a bulk call, the position of the request that refused the batch."""

    def at_request(self, index: int) -> RunledgerError:
        """This error, naming the bulk request at ``index`` that refused its batch."""
        error = type(self)(
            category=self.category,
            code=self.code,
            client_message=self.client_message,
            internal_message=f"request {index}: {self.internal_message}",
            sqlstate=self.sqlstate,
            constraint=self.constraint,
            request_index=index,
        )
        error.__cause__ = self.__cause__
        return error

    @classmethod
    def for_code(
        cls,
        code: Code,
        internal_message: str,
        *,
        persisted_row: bool = False,
        sqlstate: str | None = None,
        constraint: str | None = None,
    ) -> RunledgerError:
        """Build the error for ``code`` from the catalog."""
        category, client_message = (
            PERSISTED_ROW_CATALOG.get(code) if persisted_row else None
        ) or CATALOG[code]
        return cls(
            category=category,
            code=str(code),
            client_message=client_message,
            internal_message=internal_message,
            sqlstate=sqlstate,
            constraint=constraint,
        )

    def __str__(self) -> str:
        return self.client_message

    def __repr__(self) -> str:
        return (
            f"RunledgerError(category={self.category.value!r}, code={self.code!r}, "
            f"client_message={self.client_message!r}, sqlstate={self.sqlstate!r}, "
            f"constraint={self.constraint!r}, has_cause={self.__cause__ is not None})"
        )

    def log_fields(self) -> dict[str, str]:
        """The sanitized diagnostics that may be logged: code, SQLSTATE and constraint only."""
        return {
            "error_code": self.code,
            "error_sqlstate": self.sqlstate or "none",
            "error_constraint": self.constraint or "none",
        }

    def __reduce__(self) -> tuple[object, tuple[dict[str, object]]]:
        # Keyword-only __init__ defeats Exception's default pickling (used across processes).
        return (_restore_error, (dict(self.__dict__),))


def _restore_error(state: dict[str, object]) -> RunledgerError:
    error = RunledgerError.__new__(RunledgerError)
    Exception.__init__(error, state.get("client_message"))
    error.__dict__.update(state)
    return error
