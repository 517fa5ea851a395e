-- pyqueue-sql revision 0002 (mysql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

-- ---- wakeups (NOTIFY throttle) ----

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


-- ---- end of wakeups ----


-- ---- fast paths ----

-- ---- end of fast paths ----


-- ---- queue_ingest ----

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

-- ---- end of queue_ingest ----


-- ---- history, dead letters, limits, workers, schedules ----

-- history and dead letters

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

-- limits, workers, schedules

-- Concurrency limits: at most capacity messages of (queue, kind) reserved at
-- once. One slot row per unit of capacity; a reservation of a limited kind
-- first takes a free slot (msg_id, msg_attempts = the reservation it holds).
-- A slot is free when empty or when its holder no longer is that live
-- reservation (committed, rolled back, moved, dead-lettered, expired, or
-- reserved again, which bumps attempts). MySQL takes the slot and the
-- message in two statements (autocommit): a slot whose message still shows
-- the attempts before the claim (msg_attempts - 1) is a claim in progress
-- and stays busy until msg_until, the end the reservation will have.
CREATE TABLE pyqueue_limit (
    queue_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    capacity   INT          NOT NULL,
    PRIMARY KEY (queue_name, p_kind),
    CONSTRAINT pyqueue_limit_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    CONSTRAINT pyqueue_limit_capacity_range CHECK (capacity BETWEEN 0 AND 10000)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: concurrency limits per (queue, kind)';

CREATE TABLE pyqueue_limit_slot (
    queue_name   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    slot_no      INT          NOT NULL,
    msg_id       BIGINT       NULL,
    msg_attempts INT          NULL,
    msg_until    DATETIME(6)  NULL,
    PRIMARY KEY (queue_name, p_kind, slot_no),
    CONSTRAINT pyqueue_limit_slot_limit_fk FOREIGN KEY (queue_name, p_kind)
        REFERENCES pyqueue_limit (queue_name, p_kind) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: one row per unit of a limit, holding a reservation or free';

-- Worker registry. A registered worker reserves as CONCAT(worker_name, '#',
-- worker_id) (its reserve_as), which is how queue_release_dead_workers finds
-- its reservations.
CREATE TABLE pyqueue_worker (
    worker_id    BIGINT       NOT NULL AUTO_INCREMENT,
    worker_name  VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    host         VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    pid          INT          NULL,
    queues       JSON         NULL,
    started_at   DATETIME(6)  NOT NULL,
    heartbeat_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (worker_id),
    KEY pyqueue_worker_heartbeat_idx (heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: registered workers and their heartbeats';

-- Recurring messages: one row per (queue, p_key, p_kind). Each occurrence is
-- a message keyed CONCAT(p_key, '@YYYY-MM-DDTHH:MI:SSZ') (its time, UTC);
-- next_at is the time of the pending occurrence. Exactly one of every_s /
-- cron is set.
CREATE TABLE pyqueue_schedule (
    queue_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_key      VARCHAR(234) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    payload    JSON         NOT NULL,
    every_s    BIGINT       NULL,
    cron       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    next_at    DATETIME(6)  NOT NULL,
    created_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (queue_name, p_key, p_kind),
    CONSTRAINT pyqueue_schedule_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    CONSTRAINT pyqueue_schedule_one_rule CHECK ((every_s IS NULL) <> (cron IS NULL))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: recurring messages';
-- ---- end of history, dead letters, limits, workers, schedules ----


SET SESSION sql_mode = @pyqueue_saved_sql_mode;
