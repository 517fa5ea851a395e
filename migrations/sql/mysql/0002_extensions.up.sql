-- pyqueue-sql revision 0002 (mysql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

-- ---- issue 3: wakeups (NOTIFY throttle) ----

-- ---- end of issue 3 ----


-- ---- issue 6: fast paths ----

-- ---- end of issue 6 ----


-- ---- issue 5: queue_ingest ----

-- ---- end of issue 5 ----


-- ---- issue 4: history, dead letters, limits, workers, schedules ----

-- issue 4a: history and dead letters

-- Messages that left a queue created with a history_retention: committed,
-- popped, dead-lettered or moved, with processed_at (UTC) and outcome.
-- Written by the routine that removes the message; the live table stays
-- small. Purged by queue_purge_history (batched DELETE on the
-- (queue_name, processed_at) index). No foreign key: the history of a
-- dropped queue stays readable.
CREATE TABLE pyqueue_history (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    queue_name   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_key        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    payload      JSON         NOT NULL,
    priority     INT          NOT NULL,
    attempts     INT          NOT NULL,
    created_at   DATETIME(6)  NOT NULL,
    processed_at DATETIME(6)  NOT NULL,
    outcome      VARCHAR(16)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    to_queue     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    reserved_by  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (id),
    KEY pyqueue_history_queue_time_idx (queue_name, processed_at),
    CONSTRAINT pyqueue_history_outcome_known
        CHECK (outcome IN ('committed', 'popped', 'dead_lettered', 'moved'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: messages that left a queue with history_retention';

-- Messages sitting in dead-letter queues (queues that some queue names as
-- its dead_letter_queue). from_queue: the queue they came from when only one
-- queue uses this dead-letter queue, else NULL. Times are UTC.
CREATE SQL SECURITY INVOKER VIEW pyqueue_dead_letters AS
SELECT m.queue_name             AS dead_letter_queue,
       (SELECT CASE WHEN COUNT(*) = 1 THEN MIN(s.queue_name) END
          FROM pyqueue_queue s
         WHERE s.dead_letter_queue = m.queue_name) AS from_queue,
       m.p_key                  AS p_key,
       m.p_kind                 AS p_kind,
       m.payload                AS payload,
       m.priority               AS priority,
       m.attempts               AS attempts,
       m.created_at             AS created_at,
       m.scheduled_at_initially AS dead_lettered_at,
       (m.reserve_token IS NOT NULL AND m.scheduled_at > UTC_TIMESTAMP(6)) AS reserved
  FROM pyqueue_message m
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);

-- ---- end of issue 4 ----


SET SESSION sql_mode = @pyqueue_saved_sql_mode;
