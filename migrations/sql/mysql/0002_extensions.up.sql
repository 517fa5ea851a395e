-- pyqueue-sql revision 0002 (mysql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

-- ---- issue 3: wakeups (NOTIFY throttle) ----

-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- The bulk-ingest surface for plain JDBC writers (Spark's df.write.jdbc):
-- INSERT rows (queue_name, p_key, p_kind, payload, run_at, priority), then
-- CALL queue_ingest_flush(NULL, ...) (routines.sql) moves them into
-- pyqueue_message with dedup and the bad ones into pyqueue_ingest_reject.
-- No trigger: a row trigger costs MariaDB ~25 us per row (measured), while
-- the flush is set-based. Columns are loosely typed (LONGTEXT, DECIMAL) so
-- that any value reaches the flush's checks; run_at is UTC.
-- ingest_id orders the rows (FIFO) and bounds what one flush takes.
CREATE TABLE queue_ingest (
    queue_name LONGTEXT       CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    p_key      LONGTEXT       CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    p_kind     LONGTEXT       CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    payload    LONGTEXT       CHARACTER SET utf8mb4 NULL,
    run_at     DATETIME(6)    NULL,
    priority   DECIMAL(65,30) NULL,
    ingest_id  BIGINT         NOT NULL AUTO_INCREMENT,
    PRIMARY KEY (ingest_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: INSERT rows here, then CALL queue_ingest_flush() to enqueue them with dedup';

-- Rows queue_ingest_flush refused, with the reason ('pyqueue:<code>: ...'):
-- nothing is dropped silently. Inspect, fix and INSERT them into
-- queue_ingest again, or delete them.
CREATE TABLE pyqueue_ingest_reject (
    id          BIGINT         NOT NULL AUTO_INCREMENT,
    ingest_id   BIGINT         NOT NULL,
    queue_name  LONGTEXT       CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    p_key       LONGTEXT       CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    p_kind      LONGTEXT       CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    payload     LONGTEXT       CHARACTER SET utf8mb4 NULL,
    run_at      DATETIME(6)    NULL,
    priority    DECIMAL(65,30) NULL,
    reason      VARCHAR(255)   CHARACTER SET utf8mb4 NOT NULL,
    rejected_at DATETIME(6)    NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: queue_ingest rows that queue_ingest_flush refused, with the reason';

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- ---- end of issue 4 ----


SET SESSION sql_mode = @pyqueue_saved_sql_mode;
