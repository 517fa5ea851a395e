-- pyqueue-sql revision 0002 (postgresql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

-- ---- issue 3: wakeups (NOTIFY throttle) ----

-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- Issue 6: every reserve moves a message's entry in the ready index (a
-- non-HOT update) and every commit deletes it, so each message leaves two
-- dead index entries, and the dead ones with past scheduled_at sit at the
-- head of the ready range that every reserve walks. Only VACUUM removes them:
-- vacuum this table once 1,000 rows are dead, whatever its size, unthrottled.
ALTER TABLE pyqueue_message SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.05);

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


