-- pyqueue-sql revision 0003 (postgresql), down: undoes what 0003 added (only what exists);
-- 0003_hardening.down_routines.sql then restores 0002's routines.

-- Least privilege: 0003 made the routines SECURITY DEFINER with a pinned
-- search_path and revoked EXECUTE from PUBLIC. CREATE OR REPLACE would keep
-- the revoked ACL, so the routines are dropped (the trigger first: it depends
-- on pyqueue__ingest) and 0002's are created afresh, with PostgreSQL's
-- default ACL, exactly as 0002 installed them. Grants given to application
-- roles go with them (0002 has no least-privilege set-up). No CASCADE: an
-- object of yours that depends on a routine stops the downgrade with an error.
DROP TRIGGER IF EXISTS queue_ingest_enqueue ON queue_ingest;
DROP FUNCTION IF EXISTS
    queue_create, queue_drop, queue_push, queue_push_batch, queue_pop, queue_reserve,
    queue_commit, queue_rollback, queue_extend, queue_move, queue_remove, queue_pause,
    queue_resume, queue_stats, queue_channel, queue_set_notify_window, queue_next_scheduled_at,
    queue_wait, queue_commit_reserve, queue_commit_batch, queue_ingest_flush,
    queue_purge_history, queue_replay, queue_redrive, queue_push_replace, queue_set_limit,
    queue_limits, queue_worker_register, queue_worker_heartbeat, queue_worker_deregister,
    queue_release_dead_workers, queue_workers, queue_schedule_every, queue_schedule_cron,
    queue_unschedule, queue_schedules, queue_dead_letters,
    pyqueue__check_name, pyqueue__check_reservation, pyqueue__queue, pyqueue__check_duration,
    pyqueue__dead_letter, pyqueue__lock_ready, pyqueue__channel, pyqueue__notify, pyqueue__ingest,
    pyqueue__archive, pyqueue__check_batch_size, pyqueue__limit_claim, pyqueue__lock_ready_limited,
    pyqueue__limit_renew, pyqueue__cron_field, pyqueue__cron_next, pyqueue__schedule_key,
    pyqueue__schedule_after, pyqueue__schedule_next, pyqueue__schedule;
