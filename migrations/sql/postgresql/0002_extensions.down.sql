-- pyqueue-sql revision 0002 (postgresql), down: drops what 0002 added (only what exists),
-- in reverse order; 0002_extensions.down_routines.sql then restores 0001's routines.

-- ---- issue 4 ----

-- ---- end of issue 4 ----


-- ---- issue 5 ----

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


