-- pyqueue-sql revision 0002 (postgresql), down: drops what 0002 added (only what exists),
-- in reverse order; 0002_extensions.down_routines.sql then restores 0001's routines.

-- ---- history, dead letters, limits, workers, schedules ----

-- history, dead letters, replace-on-push
DROP FUNCTION IF EXISTS queue_push_replace(text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS queue_redrive(text, text, integer);
DROP FUNCTION IF EXISTS queue_replay(text, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS queue_purge_history(text, integer);
DROP FUNCTION IF EXISTS pyqueue__check_batch_size(integer);
DROP FUNCTION IF EXISTS pyqueue__archive(pyqueue_queue, pyqueue_message, text, text, timestamptz);
DROP VIEW IF EXISTS pyqueue_dead_letters;
DROP TABLE IF EXISTS pyqueue_history;

-- limits, workers, schedules
DROP FUNCTION IF EXISTS queue_schedules(text);
DROP FUNCTION IF EXISTS queue_unschedule(text, text, text);
DROP FUNCTION IF EXISTS queue_schedule_cron(text, text, text, jsonb, text);
DROP FUNCTION IF EXISTS queue_schedule_every(text, text, text, jsonb, interval);
DROP FUNCTION IF EXISTS pyqueue__schedule(text, text, text, jsonb, bigint, text);
DROP FUNCTION IF EXISTS pyqueue__schedule_next(text, text, text);
DROP FUNCTION IF EXISTS pyqueue__schedule_after(bigint, text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__schedule_key(text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__cron_next(text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__cron_field(text, text, integer, integer);
DROP FUNCTION IF EXISTS queue_workers();
DROP FUNCTION IF EXISTS queue_release_dead_workers(interval);
DROP FUNCTION IF EXISTS queue_worker_deregister(bigint);
DROP FUNCTION IF EXISTS queue_worker_heartbeat(bigint);
DROP FUNCTION IF EXISTS queue_worker_register(text, text, integer, text[]);
DROP FUNCTION IF EXISTS queue_limits(text);
DROP FUNCTION IF EXISTS queue_set_limit(text, text, integer);
DROP FUNCTION IF EXISTS pyqueue__limit_renew(text, text, text, uuid);
DROP FUNCTION IF EXISTS pyqueue__lock_ready_limited(text, timestamptz, integer, text[]);
DROP FUNCTION IF EXISTS pyqueue__limit_claim(text, text, bigint, text, integer, timestamptz, bigint[]);
DROP TABLE IF EXISTS pyqueue_schedule;
DROP TABLE IF EXISTS pyqueue_worker;
DROP TABLE IF EXISTS pyqueue_limit_slot;
DROP TABLE IF EXISTS pyqueue_limit;
-- ---- end of history, dead letters, limits, workers, schedules ----


-- ---- queue_ingest ----
DROP TABLE IF EXISTS queue_ingest;
DROP FUNCTION IF EXISTS pyqueue__ingest();
DROP FUNCTION IF EXISTS queue_ingest_flush(text);

-- ---- end of queue_ingest ----


-- ---- fast paths ----
ALTER TABLE pyqueue_message RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
                                  autovacuum_vacuum_cost_delay, autovacuum_analyze_scale_factor);

DROP FUNCTION IF EXISTS queue_commit_reserve(text, text, text, uuid, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS queue_commit_batch(text, text[], text[], uuid[]);

-- ---- end of fast paths ----


-- ---- wakeups ----
DROP FUNCTION IF EXISTS queue_wait(text, text[], interval, interval);
DROP FUNCTION IF EXISTS queue_next_scheduled_at(text, text[]);
DROP FUNCTION IF EXISTS queue_set_notify_window(text, interval);
DROP FUNCTION IF EXISTS queue_channel(text);
DROP FUNCTION IF EXISTS pyqueue__notify(text);
DROP FUNCTION IF EXISTS pyqueue__channel(text);
DROP TABLE IF EXISTS pyqueue_notify;

-- ---- end of wakeups ----


