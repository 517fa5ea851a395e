-- pyqueue-sql revision 0002 (mysql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

-- ---- issue 3: wakeups (NOTIFY throttle) ----

-- Per-queue wakeup window in seconds (set by queue_set_notify_window). MySQL
-- sends no wakeups, so it is only kept for parity with PostgreSQL.
CREATE TABLE pyqueue_notify (
    queue_name       VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    notify_window    DECIMAL(20,6) NOT NULL DEFAULT 0.05,
    last_notified_at DATETIME(6)   NULL,
    PRIMARY KEY (queue_name),
    CONSTRAINT pyqueue_notify_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: per-queue wakeup window';


-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


SET SESSION sql_mode = @pyqueue_saved_sql_mode;
