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

-- issue 4b

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
-- ---- end of issue 4 ----


SET SESSION sql_mode = @pyqueue_saved_sql_mode;
