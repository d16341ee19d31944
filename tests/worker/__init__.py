"""Tests of the worker runtime (issue 9), against real PostgreSQL.

Modules:

- ``test_state_machine``: one test per row of reference section 2 as we implement it (row 5,
  continuation, does not exist in SPEC; row 8 is our hand-back).
- ``test_claim``, ``test_lease_fence``, ``test_reaper``, ``test_retry_timing``,
  ``test_execution_resources``, ``test_job_control``: the service layer, one upstream
  persistence test file each.
- ``test_execution``: one attempt (``execute``, ``JobContext``) and ``run_jobs``.
- ``test_worker_loop``: ``Worker`` threads in-process (capacity, deadlines, cancels, stops).
- ``test_worker_process``: ``manage.py runledger_worker`` subprocesses (several workers,
  SIGKILL, a stuck handler and exit 70, SIGTERM, a lost connection, --burst, --promote,
  --json). Their handlers are in ``tests/worker_app``; their settings in
  ``tests/worker_settings.py``.
- ``test_wakeup``: LISTEN/NOTIFY and the polling fallback.
- ``tests/unit/test_worker_{backoff,outcomes,registry}.py``: what needs no database.

The upstream tests of reference section 15 and where each one went. "N/A" names the SPEC
difference that removes it: no workflows, no observers or dead-letter hooks, no handler
continuation, no prestart claim separate from the running mark (our claim is the running
mark), no per-type retry-delay overrides.

============================================================  ==========================================================================
upstream test                                                 here
============================================================  ==========================================================================
**completion_and_retry.rs**
process_claimed_job_observer_reports_success_after_commit     test_worker_loop: on_run__called_after_the_outcome_committed
handler_continuation_reuses_the_job_with_a_fresh_attempt...   N/A: no continuation
continuation_lease_mismatch_reports_lease_loss_instead_of...  N/A: no continuation
success_and_failure_lease_mismatches_report_lease_loss        test_execution: lease_expired_and_reaped_mid_run__success_refused...,
                                                              failure_after_lease_taken_over__reported_as_lease_loss
opted_in_workflow_managed_handler_continuation_runs_again...  N/A: no workflows, no continuation
process_claimed_job_success_observer_reports_committed_...    test_state_machine: complete_job_success__output__... (stored progress kept)
process_claimed_job_does_not_block_handler_or_heartbeats_...  N/A: no observers
process_claimed_job_dead_letter_hook_is_not_delayed_by_...    N/A: no dead-letter hooks
process_claimed_job_observer_reports_retryable_failure_...    test_execution: raises_exception__retried_with_backoff_and_error_details
process_claimed_job_observer_reports_absolute_retry_time_...  test_execution: retry_job_at__next_run_exactly_then
process_claimed_job_observer_reports_dead_letter_failure_...  test_execution: failure_at_max_attempts_of_the_row__dead_lettered
process_claimed_job_observer_reports_timeout_failure_...      test_execution: result_at_the_deadline__timeout_retry
process_claimed_job_uses_registered_retry_delay_override      N/A: no retry-delay overrides (also the next five)
process_claimed_job_handler_retry_after_cannot_shorten_...    N/A: no overrides
process_claimed_job_handler_not_before_sets_effective_...     N/A: no overrides (RetryJob times: test_retry_timing, test_state_machine)
process_claimed_job_zero_handler_retry_bound_falls_back_...   N/A: no overrides (zero hint: test_retry_timing zero_relative_hint)
process_claimed_job_does_not_apply_override_to_other_...      N/A: no overrides
process_claimed_job_ignores_retry_delay_override_for_...      N/A: no overrides
completion_persist_error_diagnostic_omits_internal_query_...  test_execution: run_jobs__outcome_cannot_be_recorded__raises_sanitized...
**lease_fencing.rs**
expired_lease_rejects_worker_lifecycle_updates                test_lease_fence: worker_writes__expired_lease__every_write_refused...
heartbeat_rejects_lease_that_expires_while_waiting_for_...    test_lease_fence: heartbeat_leases__row_locked_elsewhere__busy_then_lost...
                                                              (our heartbeat skips a locked row and reports it busy)
successful_completion_persists_completion_update              test_state_machine: row 4
standalone_success_completion_allows_non_read_committed_...   test_lease_fence: complete_job_success__session_default_repeatable_read
process_claimed_job_terminally_fails_invalid_continuation...  N/A: no continuation
process_claimed_job_terminally_fails_invalid_success_...      test_execution: output_not_json_native__terminal_invalid_output (our
                                                              success carries an output, not progress)
process_claimed_job_terminally_fails_stale_partial_success..  N/A: a success carries no progress to merge
stale_partial_continuation_progress_reports_the_...           N/A: no continuation
process_claimed_job_aborts_before_handler_when_lease_...      N/A: no pre-run step; the claim is the running mark (row 1); a
                                                              lease lost mid-run: test_execution cancelled_mid_run
**heartbeat_progress.rs**
pending_heartbeat_keeps_polling_handler_that_owns_the_job...  test_lease_fence: heartbeater__handler_holds_its_job_row__keeps_polling...
heartbeat_lock_timeout_aborts_handler_and_leaves_attempt_...  test_lease_fence: heartbeater__row_locked_past_the_budget__lease_lost...
**prestart_recovery.rs** (all five)                           N/A: no prestart claim; a stopping worker's hand-back instead:
                                                              test_state_machine row 8, test_worker_process sigterm tests
**terminal_hooks.rs**
..._survives_terminal_failure_hook_panic / _timeout           N/A: no dead-letter hooks
..._cancels_inflight_dead_letter_hook_when_parent_is_aborted  N/A: no dead-letter hooks
..._reports_attempt_exhaustion_to_dead_letter_hook            N/A (exhaustion itself: test_state_machine row 7)
worker_dead_letter_hook_receives_latest_committed_checkpoint  N/A: no dead-letter hooks
..._reports_non_retryable_failure_to_dead_letter_hook         N/A (terminal failures: test_execution terminal_error__dead_lettered...)
process_claimed_job_persists_handler_failure_with_reserved... test_execution: terminal_error_with_reserved_code__recorded_not_taken...
process_claimed_job_catches_main_handler_panic                test_execution: handler_raises_base_exception__panicked_dead_letter
run_worker_loop_continues_processing_after_handler_panic      test_worker_loop: handler_raises_or_panics__worker_goes_on
**capacity.rs**
join_set_occupancy_is_worker_capacity                         test_worker_loop: occupancy__never_more_handlers_than_its_concurrency
crashed_job_task_is_drained_and_restores_capacity             test_worker_loop: executor_thread_crashes__capacity_restored...,
                                                              error_around_a_handler__lease_given_up_capacity_kept
shutdown_drain_waits_for_join_set_tasks                       test_worker_process: sigterm_with_a_running_handler__finishes_within_grace
**execution_services.rs**
awaited_progress_commits_before_return_and_continuation_...   test_execution: job_context__progress__committed_before_the_call_returns
                                                              (continuation part N/A)
runtime_deadline_cancels_handler_and_dead_letter_gets_...     test_worker_loop: handler_past_its_deadline__attempt_failed_without_waiting
                                                              (a Python thread cannot be cancelled; its late result is fenced; no hook)
progress_detects_expired_and_replaced_leases_and_aborts_...   test_execution: job_context__cancelled_mid_run__write_refused_result_discarded
failed_progress_transaction_does_not_acknowledge_or_...       test_execution: job_context__write_refused__checkpoint_not_acknowledged,
                                                              checkpoint_inside_handlers_atomic_block__rolls_back_with_it
handler_deadline_bounds_a_progress_write_waiting_for_a_...    differs: a write's row-lock wait is bounded by the 5 s lifecycle cap (or a
                                                              stricter caller lock_timeout), not by the deadline: test_lease_fence caps
**worker/execution.rs** (unit)
heartbeat_budget_preserves_one_third_for_short_and_...        test_lease_fence: heartbeater__interval_is_a_third_of_the_lease
success_and_continuation_must_be_observed_strictly_before...  test_execution: result_at_the_deadline__timeout_retry
**registry.rs, config.rs, dead_letter_hook.rs** (unit)        tests/unit/test_worker_registry.py (duplicate, options, sorted types; no
                                                              override API); config: settings checks; hooks N/A
**worker_loop.rs**
worker_shutdown_interrupts_poll_wait_when_no_permits_...      test_worker_loop: stop_with_a_handler_past_the_grace__handed_back_exit_ok
worker_shutdown_delivers_terminal_success_when_running_...    test_worker_process: sigterm_with_a_running_handler (observers N/A)
worker_claims_next_batch_without_poll_delay_when_batch_...    test_worker_loop: batch_full__claims_the_next_batch_without_waiting...
worker_does_not_starve_other_jobs_when_running_progress_...   N/A: no running-progress write (the claim is the mark); an outcome that
                                                              cannot be recorded: test_worker_loop error_around_a_handler
**reaper_loop.rs, supervisor_loop.rs, config_validation.rs**  N/A: observers and hooks; the reaper pass itself: test_reaper
**queue_lease_validation.rs**
claim_entrypoints_reject_non_positive_lease_duration_...      test_claim: invalid_lease_duration__rejected_without_touching_pending_jobs
claim_rolls_back_all_phase_writes_when_event_recording_...    test_claim: event_insert_fails__every_phase_rolled_back (and own_transaction)
heartbeat_rejects_non_positive_lease_duration_without_...     test_lease_fence: heartbeat_leases__invalid_lease_duration__rejected...
**queue_lease_expiry_metadata.rs**
lease_expiry_metadata_stays_in_parity_across_queue_...        test_reaper: metadata_in_parity_across_queue_attempt_and_events (retry and
                                                              terminal reaps; prestart-release reaps N/A)
**queue_reaper_errors.rs**
expired_lease_reaper_reports_deferred_row_error_and_...       test_reaper: poison_row__deferred_rest_of_batch_reaped
**queue_retry_delay_validation.rs**
retryable_failure_rejects_invalid_retry_timing_without_...    test_retry_timing: retryable_with_invalid_timing__rejected_lease_untouched
terminal_panicked_and_exhausted_failures_ignore_invalid_...   test_retry_timing: dead_letter_with_invalid_timing__timing_ignored
shorter_handler_retry_hint_is_audited_while_policy_...        differs (SPEC: the hint wins): test_retry_timing hint_earlier_than_policy
absolute_retry_timing_preserves_provider_reset_time_...       test_execution: retry_job_far_beyond_int32_ms__provider_time_preserved
past_handler_not_before_cannot_shorten_policy_backoff         differs (SPEC): test_retry_timing hint_earlier_than_policy, test_state_machine
expired_lease_reapers_reject_invalid_retry_delay_without_...  test_reaper: invalid_retry_delay__rejected_without_touching_leases
**queue_running_progress.rs**
running_transition_commits_checkpoint_progress_marker_...     test_state_machine: claim_jobs__pending_job__leased_running... (row 1)
running_transition_rolls_back_as_one_crash_safe_unit_...      test_claim: event_insert_fails__every_phase_rolled_back
ordinary_progress_is_stage_free_and_does_not_mark_...         test_state_machine: update_job_progress__partial_values__merged...
stage_bearing_progress_compatibility_path_preserves_...       test_state_machine: update_job_progress__stage_only__stage_changed_event
**progress_validation.rs**
competing_partial_progress_updates_validate_against_the_...   test_lease_fence: competing_partial_updates__validated_against_the_locked_row
progress_cannot_write_after_its_lease_expires_while_...       test_lease_fence: lease_expires_while_waiting_for_the_row__refused
**queue_completion_progress_validation.rs**                   N/A: a success carries no progress (stored progress kept: row 4)
**queue_lifecycle_timeouts.rs**
completion_row_lock_waits_preserve_stricter_database_...      test_lease_fence: stricter_caller_lock_timeout__kept_for_the_row_wait
completion_restores_caller_timeouts_after_job_row_...         test_lease_fence: inside_caller_atomic_block__caller_timeouts_restored
owned_lifecycle_transactions_cap_and_preserve_database_...    test_lease_fence: transition__autocommit__caps..., __inside_caller_atomic...
**job_continuation.rs**                                       N/A: no continuation
**job_execution_resources.rs**
whitespace-key rejection                                      test_execution_resources: blank_or_long_resource_key__rejected
database_rejects_a_resource_lease_without_its_durable_claim   test_execution_resources: lease__keyed_job_without_its_durable_claim...
one_of_one_hundred_concurrent_claimers_owns_the_resource      test_execution_resources: concurrent_claimers__exactly_one_owns_the_resource
duplicate_resource_keys_do_not_underfill_a_mixed_claim_batch  test_execution_resources: duplicate_keys__do_not_underfill_a_mixed_batch
a_claimed_dense_key_does_not_starve_an_unrelated_resource     test_execution_resources: claimed_dense_key__does_not_starve...
filtered_claimers_acquire_resource_keys_in_one_deadlock_...   test_execution_resources: filtered_claimers__one_deadlock_free_key_order
keyed_enqueue_rejects_a_changed_execution_resource            tests/integration/test_enqueue.py: same_key_other_request (resource key)
identical_resource_keys_coordinate_globally_across_...        test_execution_resources: identical_key_in_two_organizations...
an_expired_lease_cannot_leave_its_execution_resource_blocked  test_execution_resources: expired_lease__keeps_the_key_until_reaped...
bounded_reaper_does_not_release_a_resource_before_its_...     test_execution_resources: reap_expired_leases__bounded_batch__keeps...
every_non_cancellation_lease_exit_releases_the_exact_...      test_execution_resources: lease_exit__every_non_cancellation_exit...
live_cancellation_holds_resource_until_the_lease_is_...       test_execution_resources: cancel_job__live_lease__holds_the_resource...
**job_cancellation_scope.rs, cancellation_failures.rs**
cancellation_scope_distinguishes_exact_tenants_from_admin     test_job_control: cancel_job__scopes__exact_tenant_global_and_admin
cancellation_owns_read_committed_despite_session_default      test_job_control: cancel_and_requeue__session_default_repeatable_read
begin/commit/terminated-mutation failure tests                test_job_control: cancel_job__database_refuses__error_keeps_its_cause...
                                                              (one statement: no separate begin or commit to fail)
**compare_and_requeue.rs**                                    test_state_machine: row 12 tests
**claim_plan_parity.rs**                                      N/A: a manual plan/latency gate; speed is measured by benchmarks
**migrations.rs**                                             tests/test_migrations.py
**lifecycle/failure.rs** (unit)
failure_outcome_uses_core_retry_eligibility                   tests/unit/test_worker_outcomes.py: failure_kind__retry_eligibility
retry_delay_rounds_up_to_positive_milliseconds                tests/unit/test_worker_outcomes.py: retry_job__after__whole_milliseconds...
policy_backoff_wins_over_past_or_equal_handler_not_before     differs (SPEC: the handler's time wins): test_retry_timing
zero_relative_retry_hint_falls_back_to_policy                 test_retry_timing: zero_relative_hint__policy_decides
**lifecycle/continuation.rs** (unit)                          N/A: no continuation
**queue/claim.rs** (unit)
resource_head_window_scales_with_claim_size_within_fixed_...  test_claim: resource_head_window__scales_with_claim_size_within_fixed_bounds
**core status.rs**
job_failure_kind_retry_eligibility_is_exhaustive              tests/unit/test_worker_outcomes.py: failure_kind__retry_eligibility
**typed_execution.rs, observer_tasks.rs**                     N/A: no typed handlers, no observers
============================================================  ==========================================================================
"""
