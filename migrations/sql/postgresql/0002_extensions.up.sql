-- pyqueue-sql revision 0002 (postgresql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

-- ---- issue 3: wakeups (NOTIFY throttle) ----

-- Wakeup throttle, one row per queue that has sent a wakeup or has its own
-- window: at most one NOTIFY per notify_window (0 = one per push statement).
-- Kept apart from pyqueue_queue so that the push path's periodic update
-- touches a tiny row nobody else reads.
CREATE TABLE pyqueue_notify (
    queue_name       varchar(128) PRIMARY KEY REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    notify_window    interval     NOT NULL DEFAULT interval '50 milliseconds',
    last_notified_at timestamptz  NOT NULL DEFAULT '-infinity',
    CONSTRAINT pyqueue_notify_window_range CHECK (notify_window >= interval '0' AND notify_window <= interval '1 hour')
);

COMMENT ON TABLE pyqueue_notify IS
    'pyqueue-sql: per-queue NOTIFY throttle (window and time of the last wakeup).';


-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


