-- pyqueue-sql revision 0002 (postgresql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

-- ---- issue 3: wakeups (NOTIFY throttle) ----

-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


