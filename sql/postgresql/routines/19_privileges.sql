-- ==== privileges ====

-- Least privilege: EXECUTE on every routine, contract and internal, is
-- revoked from PUBLIC, so that nobody but the owner may call anything until
-- granted.

-- No routine is callable by PUBLIC (PostgreSQL's default for a new function):
-- SECURITY DEFINER routines open to everyone would let any role push and
-- reserve. Applications get EXECUTE on the routines of their capability
-- (pyqueue-sql grant; README "Least privilege"). Internal helpers (pyqueue__*)
-- are granted to nobody: only the routines, running as their owner, call them.
-- The list is static (no SQL built from names); a routine added to this file
-- must be added here (tests/security/test_privileges.py fails otherwise), in
-- the order of the files, and in each the order of its routines.
REVOKE EXECUTE ON FUNCTION
    pyqueue__check_name, pyqueue__check_reservation, pyqueue__queue, pyqueue__negative_part,
    pyqueue__check_duration, pyqueue__check_batch_size, pyqueue__bad_name, pyqueue__check_batch,
    pyqueue__occurrence_key, pyqueue__refuse_occurrence_key, pyqueue__refuse_payload, pyqueue__check_message,
    pyqueue__check_run_at, pyqueue__check_expires, pyqueue__check_headers, pyqueue__check_batch_headers, pyqueue__json_value, queue_create,
    queue_reset_setting, queue_settings, queue_set_max_reservation, queue_set_max_payload, queue_drop, queue_pause,
    queue_resume, queue_stats, pyqueue__check_payloads, pyqueue__push, queue_push, queue_push_with_headers,
    pyqueue__begin_push_batch, pyqueue__batch_rows, pyqueue__push_batch, queue_push_batch, queue_push_batch_with_headers,
    queue_push_replace, pyqueue__push_grouped, queue_push_grouped, queue_push_grouped_with_headers,
    pyqueue__push_batch_grouped, queue_push_batch_grouped, queue_push_batch_grouped_with_headers,
    pyqueue__check_kinds, pyqueue__check_reserve, pyqueue__ready_from_lower, pyqueue__ready_from_held, pyqueue__ready_from_advance,
    pyqueue__ready_tids, pyqueue__due_tids, pyqueue__clock_text, pyqueue__expired, pyqueue__expire, pyqueue__reserve, queue_pop, queue_reserve, pyqueue__refuse_reservation,
    pyqueue__dead_letter, pyqueue__give_back, pyqueue__extend, queue_commit(text, text, text, text),
    queue_commit(text, text, text, uuid), queue_rollback(text, text, text, text, interval),
    queue_rollback(text, text, text, uuid, interval), queue_fail(text, text, text, text, interval, text),
    queue_fail(text, text, text, uuid, interval, text), queue_snooze(text, text, text, text, interval),
    queue_snooze(text, text, text, uuid, interval), queue_give_up(text, text, text, text, text),
    queue_give_up(text, text, text, uuid, text), queue_extend(text, text, text, text, interval),
    queue_extend(text, text, text, uuid, interval), queue_move(text, text, text, text, text, jsonb),
    queue_move(text, text, text, uuid, text, jsonb), queue_remove, queue_release, pyqueue__blocked_at,
    pyqueue__group_first_blocked, pyqueue__group_head, pyqueue__group_settle, pyqueue__group_settle_k,
    pyqueue__groups_settle,
    queue_set_group_limit, pyqueue__channel, pyqueue__notify_key, pyqueue__notify, queue_channel,
    queue_set_notify_window,
    queue_next_scheduled_at, queue_wait, pyqueue__delete_held, pyqueue__commit_held,
    queue_commit_reserve(text, text, text, text, text, interval, integer, text[]),
    queue_commit_reserve(text, text, text, uuid, text, interval, integer, text[]), queue_commit_batch,
    pyqueue__check_topic, pyqueue__topic_regex, queue_bind, queue_unbind, queue_bindings, pyqueue__publish,
    queue_publish, queue_publish_with_headers, pyqueue__publish_batch, queue_publish_batch,
    queue_publish_batch_with_headers, pyqueue__archive, queue_purge_history, queue_replay, queue_redrive,
    queue_dead_letters, queue_message, queue_message_history, queue_messages, queue_groups, queue_throughput, queue_horizon,
    pyqueue__result_channel, pyqueue__result_notify, pyqueue__record_result, pyqueue__finish, pyqueue__finish_held,
    pyqueue__check_results, pyqueue__refuse_result, pyqueue__check_results_filter,
    queue_set_result_retention,
    queue_commit_result(text, text, text, text, jsonb), queue_commit_result(text, text, text, uuid, jsonb),
    queue_commit_result_batch, queue_result, queue_result_wait, queue_result_channel, queue_cancel,
    queue_renew(text, text, text, text, interval), queue_renew(text, text, text, uuid, interval),
    queue_cancel_held(text, text, text, text), queue_cancel_held(text, text, text, uuid),
    queue_set_progress(text, text, text, text, jsonb), queue_set_progress(text, text, text, uuid, jsonb),
    pyqueue__deps_read_committed, pyqueue__results_lock, pyqueue__deps_moved, pyqueue__deps_left, pyqueue__push_after,
    queue_push_after, queue_push_after_on, queue_push_after_on_with_headers, queue_push_after_batch,
    queue_parent_results, pyqueue__slot_held, pyqueue__limit_claim,
    pyqueue__limit_free_slots, pyqueue__limited_tids, pyqueue__limit_renew, queue_set_limit, queue_limits, queue_set_rate,
    queue_rates, pyqueue__check_worker, queue_worker_register, queue_worker_heartbeat, queue_worker_deregister,
    queue_release_dead_workers, queue_workers, pyqueue__cron_field, pyqueue__cron_next, pyqueue__schedule_key,
    pyqueue__schedule_after, pyqueue__push_occurrence, pyqueue__schedule_next, pyqueue__schedule,
    queue_schedule_every, queue_schedule_cron, queue_unschedule, queue_schedules, pyqueue__ingest,
    queue_ingest_flush FROM PUBLIC;

-- Routines added since 0.1.0, one statement each (in the order of their files).
REVOKE EXECUTE ON FUNCTION queue_kind_stats FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION queue_results FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION queue_purge_results FROM PUBLIC;

-- The caller's search_path again (pinned at the top of this script).
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.search_path_before', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('pyqueue.search_path_before'), false);
    END IF;
END
$$;
