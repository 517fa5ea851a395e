-- pyqueue-sql revision 0002 (postgresql), down: drops what 0002 added (only what exists),
-- in reverse order; 0002_extensions.down_routines.sql then restores 0001's routines.

-- ---- issue 4 ----

-- ---- end of issue 4 ----


-- ---- issue 5 ----

-- ---- end of issue 5 ----


-- ---- issue 6 ----
ALTER TABLE pyqueue_message RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
                                  autovacuum_vacuum_cost_delay, autovacuum_analyze_scale_factor);

DROP FUNCTION IF EXISTS queue_commit_reserve(text, text, text, uuid, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS queue_commit_batch(text, text[], text[], uuid[]);

-- ---- end of issue 6 ----


-- ---- issue 3 ----

-- ---- end of issue 3 ----


