-- pyqueue-sql revision 0002 (postgresql), down: drops what 0002 added (only what exists),
-- in reverse order; 0002_extensions.down_routines.sql then restores 0001's routines.

-- ---- issue 4 ----

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


-- ---- issue 5 ----
DROP TABLE IF EXISTS queue_ingest;
DROP FUNCTION IF EXISTS pyqueue__ingest();
DROP FUNCTION IF EXISTS queue_ingest_flush(text);

-- ---- end of issue 5 ----


-- ---- issue 6 ----

-- ---- end of issue 6 ----


-- ---- issue 3 ----
DROP FUNCTION IF EXISTS queue_wait(text, text[], interval, interval);
DROP FUNCTION IF EXISTS queue_next_scheduled_at(text, text[]);
DROP FUNCTION IF EXISTS queue_set_notify_window(text, interval);
DROP FUNCTION IF EXISTS queue_channel(text);
DROP FUNCTION IF EXISTS pyqueue__notify(text);
DROP FUNCTION IF EXISTS pyqueue__channel(text);
DROP TABLE IF EXISTS pyqueue_notify;

-- ---- end of issue 3 ----


