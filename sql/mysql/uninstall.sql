-- pyqueue-sql: removes everything schema.sql installs (MySQL 8.0+ / MariaDB 10.6+).
-- Routines first (contract, then helpers), then the message table (it
-- references the queue table), then the queue table. Messages are lost.

-- Added after the core (newest first; views and triggers before what they use).

-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 6: fast paths ----

DROP PROCEDURE IF EXISTS queue_commit_reserve;
DROP PROCEDURE IF EXISTS queue_commit_batch;

-- ---- end of issue 6 ----


-- ---- issue 3: wakeups ----

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
DROP PROCEDURE IF EXISTS pyqueue__check_name;
DROP PROCEDURE IF EXISTS pyqueue__raise;
DROP TABLE IF EXISTS pyqueue_message;
DROP TABLE IF EXISTS pyqueue_queue;
