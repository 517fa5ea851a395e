-- pyqueue-sql revision 0002 (postgresql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

-- ---- wakeups (NOTIFY throttle) ----

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


-- ---- end of wakeups ----


-- ---- fast paths ----

-- every reserve moves a message's entry in the ready index (a
-- non-HOT update) and every commit deletes it, so each message leaves two
-- dead index entries, and the dead ones with past scheduled_at sit at the
-- head of the ready range that every reserve walks. Only VACUUM removes them:
-- vacuum this table once 1,000 rows are dead, whatever its size, unthrottled.
ALTER TABLE pyqueue_message SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.05);

-- ---- end of fast paths ----


-- ---- queue_ingest ----

-- The bulk-ingest surface for plain JDBC writers (Spark's df.write.jdbc): an
-- INSERT of rows (queue_name, p_key, p_kind, payload, run_at, priority) makes
-- every row a live message, with dedup, in the same statement. A statement-
-- level trigger (routines.sql, pyqueue__ingest) validates the statement's rows,
-- moves them into pyqueue_message with one INSERT ... ON CONFLICT DO NOTHING
-- and deletes them here: the table is empty whenever no INSERT is running.
-- Columns are loosely typed (text, numeric) so that every bad value reaches
-- the trigger's checks and gets a pyqueue:<code> error instead of a cast
-- error, and so that a writer's varchar parameters need no stringtype option.
-- UNLOGGED: rows live for one statement; a crash can lose only rows whose
-- transaction never committed. ingest_id orders the rows (FIFO) and lets the
-- trigger delete exactly its own rows through the index.
CREATE UNLOGGED TABLE queue_ingest (
    queue_name text        NULL,
    p_key      text        NULL,
    p_kind     text        NULL,
    payload    text        NULL,
    run_at     timestamptz NULL,
    priority   numeric     NULL,
    ingest_id  bigint      GENERATED ALWAYS AS IDENTITY
);

COMMENT ON TABLE queue_ingest IS
    'pyqueue-sql: INSERT rows (queue_name, p_key, p_kind, payload, run_at, priority) to enqueue them with dedup; always empty after the INSERT.';

CREATE INDEX queue_ingest_id_idx ON queue_ingest (ingest_id);

-- ---- end of queue_ingest ----


-- ---- history, dead letters, limits, workers, schedules ----

-- history and dead letters

-- Messages that left a queue created with a history_retention: committed,
-- popped, dead-lettered or moved. Written by the routine that removes the
-- message, in the same transaction; the live table stays small. Purged by
-- queue_purge_history (plain batched DELETE on the (queue_name, processed_at)
-- index; see CONTRACT.md for why not time partitions). No foreign key: the
-- history of a dropped queue stays readable.
CREATE TABLE pyqueue_history (
    id           bigint       GENERATED ALWAYS AS IDENTITY,
    queue_name   varchar(128) NOT NULL,
    p_key        varchar(255) NOT NULL,
    p_kind       varchar(128) NOT NULL,
    payload      jsonb        NOT NULL,
    priority     integer      NOT NULL,
    attempts     integer      NOT NULL,
    created_at   timestamptz  NOT NULL,
    processed_at timestamptz  NOT NULL,
    outcome      varchar(16)  NOT NULL,
    to_queue     varchar(128) NULL,
    reserved_by  varchar(255) NULL,
    CONSTRAINT pyqueue_history_pkey PRIMARY KEY (id),
    CONSTRAINT pyqueue_history_outcome_known
        CHECK (outcome IN ('committed', 'popped', 'dead_lettered', 'moved'))
);

COMMENT ON TABLE pyqueue_history IS
    'pyqueue-sql: messages that left a queue with history_retention (outcome committed, popped, dead_lettered, moved).';

-- Purge and replay read one queue's time range.
CREATE INDEX pyqueue_history_queue_time_idx ON pyqueue_history (queue_name, processed_at);

-- Messages sitting in dead-letter queues (queues that some queue names as
-- its dead_letter_queue). from_queue: the queue they came from when only one
-- queue uses this dead-letter queue, else NULL (see pyqueue_history, outcome
-- dead_lettered, to_queue, for the exact origin of each message).
CREATE VIEW pyqueue_dead_letters AS
SELECT m.queue_name                    AS dead_letter_queue,
       (SELECT CASE WHEN count(*) = 1 THEN min(s.queue_name) END
          FROM pyqueue_queue s
         WHERE s.dead_letter_queue = m.queue_name)::varchar(128) AS from_queue,
       m.p_key,
       m.p_kind,
       m.payload,
       m.priority,
       m.attempts,
       m.created_at,
       m.scheduled_at_initially        AS dead_lettered_at,
       (m.reserve_token IS NOT NULL AND m.scheduled_at > clock_timestamp()) AS reserved
  FROM pyqueue_message m
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);

COMMENT ON VIEW pyqueue_dead_letters IS
    'pyqueue-sql: messages in dead-letter queues, with the queue they came from when it is unambiguous.';

-- limits, workers, schedules

-- Concurrency limits: at most capacity messages of (queue, kind) reserved at
-- once. One slot row per unit of capacity; a reservation of a limited kind
-- first takes a free slot (msg_id, msg_attempts = the reservation it holds;
-- msg_key finds the message by its primary key).
-- A slot is free when empty or when its holder no longer is that live
-- reservation (committed, rolled back, moved, dead-lettered, expired, or
-- reserved again, which bumps attempts).
CREATE TABLE pyqueue_limit (
    queue_name varchar(128) NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    p_kind     varchar(128) NOT NULL,
    capacity   integer      NOT NULL,
    CONSTRAINT pyqueue_limit_pkey PRIMARY KEY (queue_name, p_kind),
    CONSTRAINT pyqueue_limit_capacity_range CHECK (capacity BETWEEN 0 AND 10000)
);

CREATE TABLE pyqueue_limit_slot (
    queue_name   varchar(128) NOT NULL,
    p_kind       varchar(128) NOT NULL,
    slot_no      integer      NOT NULL,
    msg_id       bigint       NULL,
    msg_key      varchar(255) NULL,
    msg_attempts integer      NULL,
    CONSTRAINT pyqueue_limit_slot_pkey PRIMARY KEY (queue_name, p_kind, slot_no),
    CONSTRAINT pyqueue_limit_slot_limit_fk FOREIGN KEY (queue_name, p_kind)
        REFERENCES pyqueue_limit (queue_name, p_kind) ON DELETE CASCADE
);

-- Worker registry. A registered worker reserves as worker_name || '#' ||
-- worker_id (its reserve_as), which is how queue_release_dead_workers finds
-- its reservations.
CREATE TABLE pyqueue_worker (
    worker_id    bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker_name  varchar(200) NOT NULL,
    host         varchar(255) NULL,
    pid          integer      NULL,
    queues       text[]       NULL,
    started_at   timestamptz  NOT NULL,
    heartbeat_at timestamptz  NOT NULL
);

CREATE INDEX pyqueue_worker_heartbeat_idx ON pyqueue_worker (heartbeat_at);

-- Recurring messages: one row per (queue, p_key, p_kind). Each occurrence is
-- a message keyed p_key || '@YYYY-MM-DDTHH:MI:SSZ' (its time, UTC); next_at
-- is the time of the pending occurrence. Exactly one of every_s / cron is set.
CREATE TABLE pyqueue_schedule (
    queue_name varchar(128) NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    p_key      varchar(234) NOT NULL,
    p_kind     varchar(128) NOT NULL,
    payload    jsonb        NOT NULL,
    every_s    bigint       NULL,
    cron       varchar(255) NULL,
    next_at    timestamptz  NOT NULL,
    created_at timestamptz  NOT NULL,
    CONSTRAINT pyqueue_schedule_pkey PRIMARY KEY (queue_name, p_key, p_kind),
    CONSTRAINT pyqueue_schedule_one_rule CHECK ((every_s IS NULL) <> (cron IS NULL))
);
-- ---- end of history, dead letters, limits, workers, schedules ----


