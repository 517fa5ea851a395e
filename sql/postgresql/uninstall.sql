-- pyqueue-sql: removes everything schema.sql installs (PostgreSQL).
-- Added after the core (newest first; views and triggers before what they use).

-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- issue 4a: history, dead letters, replace-on-push
DROP FUNCTION IF EXISTS queue_push_replace(text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS queue_redrive(text, text, integer);
DROP FUNCTION IF EXISTS queue_replay(text, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS queue_purge_history(text, integer);
DROP FUNCTION IF EXISTS pyqueue__check_batch_size(integer);
DROP FUNCTION IF EXISTS pyqueue__archive(pyqueue_queue, pyqueue_message, text, text, timestamptz);
DROP VIEW IF EXISTS pyqueue_dead_letters;
DROP TABLE IF EXISTS pyqueue_history;

-- ---- end of issue 4 ----


-- ---- issue 5: queue_ingest ----
DROP TABLE IF EXISTS queue_ingest;
DROP FUNCTION IF EXISTS pyqueue__ingest();
DROP FUNCTION IF EXISTS queue_ingest_flush(text);

-- ---- end of issue 5 ----


-- ---- issue 6: fast paths ----

-- ---- end of issue 6 ----


-- ---- issue 3: wakeups ----
DROP FUNCTION IF EXISTS queue_wait(text, text[], interval, interval);
DROP FUNCTION IF EXISTS queue_next_scheduled_at(text, text[]);
DROP FUNCTION IF EXISTS queue_set_notify_window(text, interval);
DROP FUNCTION IF EXISTS queue_channel(text);
DROP FUNCTION IF EXISTS pyqueue__notify(text);
DROP FUNCTION IF EXISTS pyqueue__channel(text);
DROP TABLE IF EXISTS pyqueue_notify;

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
