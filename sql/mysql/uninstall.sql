-- pyqueue-sql: removes everything schema.sql installs (MySQL 8.0+ / MariaDB 10.6+).
-- Routines first (contract, then helpers), then the message table (it
-- references the queue table), then the queue table. Messages are lost.

-- Added after the core (newest first; views and triggers before what they use).

-- dashboard reads
DROP PROCEDURE IF EXISTS queue_throughput;
DROP PROCEDURE IF EXISTS queue_messages;

-- errors, settings, message inspection, locks
DROP PROCEDURE IF EXISTS queue_message_history;
DROP PROCEDURE IF EXISTS queue_message;
DROP PROCEDURE IF EXISTS queue_fail;
DROP PROCEDURE IF EXISTS queue_settings;
DROP PROCEDURE IF EXISTS queue_reset_setting;
DROP PROCEDURE IF EXISTS pyqueue__give_back;
DROP PROCEDURE IF EXISTS pyqueue__random_token;
DROP PROCEDURE IF EXISTS pyqueue__own_transaction;
DROP PROCEDURE IF EXISTS pyqueue__limit_compact;
DROP TABLE IF EXISTS pyqueue_ingest_lock;

-- ---- issue 7: least privilege ----
DROP PROCEDURE IF EXISTS queue_dead_letters;

-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- issue 4a: history, dead letters, replace-on-push
DROP PROCEDURE IF EXISTS queue_push_replace;
DROP PROCEDURE IF EXISTS queue_redrive;
DROP PROCEDURE IF EXISTS queue_replay;
DROP PROCEDURE IF EXISTS queue_purge_history;
DROP PROCEDURE IF EXISTS pyqueue__unarchive;
DROP PROCEDURE IF EXISTS pyqueue__archive;
DROP VIEW IF EXISTS pyqueue_dead_letters;
DROP TABLE IF EXISTS pyqueue_history;

-- issue 4b
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
-- ---- end of issue 4 ----


-- ---- issue 5: queue_ingest ----
DROP PROCEDURE IF EXISTS queue_ingest_flush;
DROP TABLE IF EXISTS pyqueue_ingest_reject;
DROP TABLE IF EXISTS queue_ingest;

-- ---- end of issue 5 ----


-- ---- issue 6: fast paths ----

DROP PROCEDURE IF EXISTS queue_commit_reserve;
DROP PROCEDURE IF EXISTS queue_commit_batch;

-- ---- end of issue 6 ----


-- ---- issue 3: wakeups ----
DROP PROCEDURE IF EXISTS queue_wait;
DROP PROCEDURE IF EXISTS queue_next_scheduled_at;
DROP PROCEDURE IF EXISTS queue_set_notify_window;
DROP PROCEDURE IF EXISTS queue_channel;
DROP PROCEDURE IF EXISTS pyqueue__next_at;
DROP PROCEDURE IF EXISTS pyqueue__kinds;
DROP TABLE IF EXISTS pyqueue_notify;

-- ---- end of issue 3 ----


-- ---- the core ----
DROP PROCEDURE IF EXISTS queue_stats;
DROP PROCEDURE IF EXISTS queue_resume;
DROP PROCEDURE IF EXISTS queue_pause;
DROP PROCEDURE IF EXISTS queue_remove;
DROP PROCEDURE IF EXISTS queue_move;
DROP PROCEDURE IF EXISTS queue_extend;
DROP PROCEDURE IF EXISTS queue_rollback;
DROP PROCEDURE IF EXISTS queue_commit;
DROP PROCEDURE IF EXISTS queue_reserve;
DROP PROCEDURE IF EXISTS queue_pop;
DROP PROCEDURE IF EXISTS queue_push_batch;
DROP PROCEDURE IF EXISTS queue_push;
DROP PROCEDURE IF EXISTS queue_drop;
DROP PROCEDURE IF EXISTS queue_create;
DROP PROCEDURE IF EXISTS pyqueue__dead_letter;
DROP PROCEDURE IF EXISTS pyqueue__queue;
DROP PROCEDURE IF EXISTS pyqueue__check_payload;
DROP PROCEDURE IF EXISTS pyqueue__check_reservation;
DROP PROCEDURE IF EXISTS pyqueue__check_token;
DROP PROCEDURE IF EXISTS pyqueue__check_int;
DROP PROCEDURE IF EXISTS pyqueue__check_duration;
DROP PROCEDURE IF EXISTS pyqueue__check_utf8;
DROP PROCEDURE IF EXISTS pyqueue__check_name;
DROP PROCEDURE IF EXISTS pyqueue__raise;
DROP TABLE IF EXISTS pyqueue_message;
DROP TABLE IF EXISTS pyqueue_queue;
