-- pyqueue-sql revision 0002 (mysql), down: drops what 0002 added (only what exists),
-- in reverse order; 0002_extensions.down_routines.sql then restores 0001's routines.

-- ---- history, dead letters, limits, workers, schedules ----

-- history, dead letters, replace-on-push
DROP PROCEDURE IF EXISTS queue_push_replace;
DROP PROCEDURE IF EXISTS queue_redrive;
DROP PROCEDURE IF EXISTS queue_replay;
DROP PROCEDURE IF EXISTS queue_purge_history;
DROP PROCEDURE IF EXISTS pyqueue__unarchive;
DROP PROCEDURE IF EXISTS pyqueue__archive;
DROP VIEW IF EXISTS pyqueue_dead_letters;
DROP TABLE IF EXISTS pyqueue_history;

-- limits, workers, schedules
DROP PROCEDURE IF EXISTS queue_schedules;
DROP PROCEDURE IF EXISTS queue_unschedule;
DROP PROCEDURE IF EXISTS queue_schedule_cron;
DROP PROCEDURE IF EXISTS queue_schedule_every;
DROP PROCEDURE IF EXISTS pyqueue__schedule;
DROP PROCEDURE IF EXISTS pyqueue__schedule_next;
DROP PROCEDURE IF EXISTS pyqueue__schedule_after;
DROP PROCEDURE IF EXISTS pyqueue__cron_next;
DROP PROCEDURE IF EXISTS pyqueue__cron_field;
DROP PROCEDURE IF EXISTS queue_workers;
DROP PROCEDURE IF EXISTS queue_release_dead_workers;
DROP PROCEDURE IF EXISTS queue_worker_deregister;
DROP PROCEDURE IF EXISTS queue_worker_heartbeat;
DROP PROCEDURE IF EXISTS queue_worker_register;
DROP PROCEDURE IF EXISTS queue_limits;
DROP PROCEDURE IF EXISTS queue_set_limit;
DROP PROCEDURE IF EXISTS pyqueue__limit_claim;
DROP PROCEDURE IF EXISTS pyqueue__limit_take;
DROP TABLE IF EXISTS pyqueue_schedule;
DROP TABLE IF EXISTS pyqueue_worker;
DROP TABLE IF EXISTS pyqueue_limit_slot;
DROP TABLE IF EXISTS pyqueue_limit;
-- ---- end of history, dead letters, limits, workers, schedules ----


-- ---- queue_ingest ----
DROP PROCEDURE IF EXISTS queue_ingest_flush;
DROP TABLE IF EXISTS pyqueue_ingest_reject;
DROP TABLE IF EXISTS queue_ingest;

-- ---- end of queue_ingest ----


-- ---- fast paths ----

DROP PROCEDURE IF EXISTS queue_commit_reserve;
DROP PROCEDURE IF EXISTS queue_commit_batch;

-- ---- end of fast paths ----


-- ---- wakeups ----
DROP PROCEDURE IF EXISTS queue_wait;
DROP PROCEDURE IF EXISTS queue_next_scheduled_at;
DROP PROCEDURE IF EXISTS queue_set_notify_window;
DROP PROCEDURE IF EXISTS queue_channel;
DROP PROCEDURE IF EXISTS pyqueue__next_at;
DROP PROCEDURE IF EXISTS pyqueue__kinds;
DROP TABLE IF EXISTS pyqueue_notify;

-- ---- end of wakeups ----


