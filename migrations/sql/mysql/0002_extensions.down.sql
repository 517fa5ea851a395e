-- pyqueue-sql revision 0002 (mysql), down: drops what 0002 added (only what exists),
-- in reverse order; 0002_extensions.down_routines.sql then restores 0001's routines.

-- ---- issue 4 ----

-- issue 4a: history, dead letters, replace-on-push
DROP PROCEDURE IF EXISTS queue_push_replace;
DROP PROCEDURE IF EXISTS queue_redrive;
DROP PROCEDURE IF EXISTS queue_replay;
DROP PROCEDURE IF EXISTS queue_purge_history;
DROP PROCEDURE IF EXISTS pyqueue__unarchive;
DROP PROCEDURE IF EXISTS pyqueue__archive;
DROP VIEW IF EXISTS pyqueue_dead_letters;
DROP TABLE IF EXISTS pyqueue_history;

-- ---- end of issue 4 ----


-- ---- issue 5 ----
DROP PROCEDURE IF EXISTS queue_ingest_flush;
DROP TABLE IF EXISTS pyqueue_ingest_reject;
DROP TABLE IF EXISTS queue_ingest;

-- ---- end of issue 5 ----


-- ---- issue 6 ----

-- ---- end of issue 6 ----


-- ---- issue 3 ----
DROP PROCEDURE IF EXISTS queue_wait;
DROP PROCEDURE IF EXISTS queue_next_scheduled_at;
DROP PROCEDURE IF EXISTS queue_set_notify_window;
DROP PROCEDURE IF EXISTS queue_channel;
DROP PROCEDURE IF EXISTS pyqueue__next_at;
DROP PROCEDURE IF EXISTS pyqueue__kinds;
DROP TABLE IF EXISTS pyqueue_notify;

-- ---- end of issue 3 ----


