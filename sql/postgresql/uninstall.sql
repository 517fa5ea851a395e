-- pyqueue-sql: removes everything schema.sql installs (PostgreSQL).
-- Added after the core (newest first; views and triggers before what they use).

-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 6: fast paths ----

DROP FUNCTION IF EXISTS queue_commit_reserve(text, text, text, uuid, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS queue_commit_batch(text, text[], text[], uuid[]);

-- ---- end of issue 6 ----


-- ---- issue 3: wakeups ----

-- ---- end of issue 3 ----


-- ---- the core ----
DROP FUNCTION IF EXISTS queue_stats(text);
DROP FUNCTION IF EXISTS queue_resume(text);
DROP FUNCTION IF EXISTS queue_pause(text);
DROP FUNCTION IF EXISTS queue_remove(text, text, text);
DROP FUNCTION IF EXISTS queue_move(text, text, text, uuid, text, jsonb);
DROP FUNCTION IF EXISTS queue_extend(text, text, text, uuid, interval);
DROP FUNCTION IF EXISTS queue_rollback(text, text, text, uuid, interval);
DROP FUNCTION IF EXISTS queue_commit(text, text, text, uuid);
DROP FUNCTION IF EXISTS queue_reserve(text, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS queue_pop(text, integer);
DROP FUNCTION IF EXISTS queue_push_batch(text, text[], text[], jsonb[], timestamptz[], integer[]);
DROP FUNCTION IF EXISTS queue_push(text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS queue_drop(text);
DROP FUNCTION IF EXISTS queue_create(text, interval, integer, text, interval);
DROP FUNCTION IF EXISTS pyqueue__lock_ready(text, timestamptz, integer, text[]);
DROP FUNCTION IF EXISTS pyqueue__dead_letter(pyqueue_queue, text, text, timestamptz);
DROP FUNCTION IF EXISTS pyqueue__check_duration(text, interval, boolean);
DROP FUNCTION IF EXISTS pyqueue__check_reservation(text, text, uuid);
DROP FUNCTION IF EXISTS pyqueue__check_name(text, text, integer);
DROP FUNCTION IF EXISTS pyqueue__queue(text, boolean);
DROP TABLE IF EXISTS pyqueue_message;
DROP TABLE IF EXISTS pyqueue_queue;
