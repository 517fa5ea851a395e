-- pyqueue-sql revision 0002 (postgresql): the DDL delta from 0001. Frozen once released.
-- The routines follow from 0002_extensions.routines.sql.

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
-- ---- end of issue 4 ----


