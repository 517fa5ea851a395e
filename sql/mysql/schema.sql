-- pyqueue-sql: MySQL 8.0+ / MariaDB 10.6+ schema, the current state.
--
-- Installs into the current database of the application. Tables are
-- prefixed pyqueue_; routines carry the contract names queue_* (procedures,
-- CALL queue_reserve(...), every argument passed, NULL meaning the default).
-- Written in the common subset of MySQL 8.0 and MariaDB 10.6; verified on
-- MariaDB 10.11 only (no MySQL 8 server was available), see "MySQL notes".
--
-- File format: plain statements end with ';' at the end of a line; routines
-- sit between 'DELIMITER //' and 'DELIMITER ;' and end with 'END //'. The
-- mysql / mariadb CLI can source it, the Python loader splits it the same way.
--
-- Layout: one section per topic, in the order of ../README.md's list of
-- topics (uninstall.sql: the reverse). A section starts with the line
-- '-- ==== <topic> ====' (a file leaves out the topics it has nothing for).
--
-- Naming inside routines: parameters in_*, locals v_*, cursors c_*; columns
-- as they are (p_key / p_kind are columns, never parameters or locals).
--
-- Name and JSON parameters are LONGTEXT so that any value reaches the
-- routine's own validation (a VARCHAR(n) parameter would be cut or refused by
-- the server first, with a server error). After validation the routines copy
-- names into VARCHAR(n) / CHAR(36) locals and use only those in statements:
-- compared with a LONGTEXT value, MariaDB 10.11 at times skipped the index
-- shortcut for MAX(priority) and read the whole queue.
--
-- Errors: every refusal is SIGNAL SQLSTATE '45000' with MESSAGE_TEXT
--   'pyqueue:<code>: <detail>'          (at most 128 characters)
-- where <code> is one of unknown_queue, invalid_argument, invalid_payload.
-- The routines validate every value they receive, whatever the sql_mode.
-- But the server converts each argument to its parameter's type before the
-- routine runs, under the CALLER's sql_mode (measured on MariaDB 10.11):
-- in strict mode (the default of both servers) a value that does not
-- convert ('abc' for a number, 2024-02-30) is the server's own error; in a
-- non-strict session it arrives converted, with a warning: out-of-range
-- numbers arrive clamped and zero dates arrive as such, and both are
-- refused here, but 'abc' arrives as 0 (accepted where 0 is valid: priority,
-- delay, history_retention), '3x' as 3, and a malformed time as NULL or
-- truncated. Integer arguments are DECIMAL(65,30) so that 2.5 is refused
-- instead of rounded.
--
-- sql_mode: a routine runs its body with the sql_mode in force when it was
-- created. The bodies rely on strict mode and on the absence of ANSI_QUOTES
-- / PIPES_AS_CONCAT / NO_BACKSLASH_ESCAPES / ORACLE, so this file sets the
-- session sql_mode first and restores the caller's at the end.
--
-- Names compare exactly: queue_name, p_key, p_kind, dead_letter_queue,
-- group_key, topic patterns and reserve_token use utf8mb4_bin ('A' <> 'a').
-- utf8mb4_bin is a PAD SPACE collation on both servers ('a' = 'a '), and
-- there is no NO PAD binary
-- collation common to both (MySQL: utf8mb4_0900_bin, MariaDB:
-- utf8mb4_nopad_bin), so names ending with a space are refused instead of
-- being silently merged with their unpadded twin.
--
-- Transactions: no routine starts, commits or rolls back a transaction (that
-- would commit the caller's). Called in autocommit mode, every statement of
-- a routine is its own transaction and no lock outlives it; called inside
-- the caller's transaction, its changes commit or roll back with it. Every
-- state change is therefore a single conditional statement that re-checks,
-- under its row lock, what an earlier read saw, and multi-step changes are
-- ordered so that an interruption between two steps can only cause a
-- redelivery or a duplicate that dedup absorbs, never a loss (see each
-- routine). Every UPDATE / DELETE of a message addresses it by id.
-- The exceptions need several statements under one lock: a dead-lettering
-- rollback, a concurrency limit's change, a flush, and every change of a
-- FIFO group's head (a grouped push, a group's head leaving the queue). In
-- autocommit mode on a server that can tell (MariaDB: @@in_transaction) they
-- run in a transaction of their own, run again when a deadlock picks it; on
-- MySQL 8.0, which cannot tell, they run statement by statement (see
-- routines/07_groups.sql).
--
-- MySQL notes (not verifiable here): CHECK constraints are enforced from
-- MySQL 8.0.16 (parsed and ignored before); locking reads into variables
-- are written 'SELECT ... INTO var FROM ... FOR UPDATE' (INTO before FROM:
-- accepted by both; MySQL 8.0.20+ deprecates only INTO between FROM and the
-- locking clause); JSON_TABLE needs MySQL 8.0.4+. Payloads come back as
-- JSON columns on MySQL and as LONGTEXT on MariaDB (queue_pop: LONGTEXT on
-- both, its rows travel through a JSON variable).

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';


-- ==== queues ====
-- The queues and their live messages: the two tables every topic reads and
-- writes, with the index the reserve walks; and the heads of the messages'
-- FIFO groups.

-- One row per queue with its settings; dead_count counts messages that
-- exhausted max_attempts here. Durations are seconds (microsecond precision).
-- CHECK constraints only on columns outside foreign keys (MySQL refuses
-- CHECKs on columns used in foreign-key referential actions; not verifiable
-- here, so none is risked); the routines validate the rest: name not empty,
-- dead_letter_queue <> queue_name.
CREATE TABLE pyqueue_queue (
    queue_name         VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    visibility_timeout DECIMAL(20,6) NOT NULL DEFAULT 30,
    max_attempts       INT           NOT NULL DEFAULT 10,
    dead_letter_queue  VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    history_retention  DECIMAL(20,6) NULL,
    paused             BOOLEAN       NOT NULL DEFAULT FALSE,
    dead_count         BIGINT        NOT NULL DEFAULT 0,
    created_at         DATETIME(6)   NOT NULL,
    -- the longest reservation a caller may ask for (reserve paths, queue_extend), at least visibility_timeout
    max_reservation    DECIMAL(20,6) NOT NULL DEFAULT 43200,
    -- the largest payload (bytes, LENGTH of the JSON text) a producer may write into the queue
    max_payload        INT           NOT NULL DEFAULT 1048576,
    -- how long the outcome of a finished message stays in pyqueue_result (seconds); NULL = no results kept
    result_retention   DECIMAL(20,6) NULL,
    PRIMARY KEY (queue_name),
    CONSTRAINT pyqueue_queue_dlq_fk FOREIGN KEY (dead_letter_queue)
        REFERENCES pyqueue_queue (queue_name),
    CONSTRAINT pyqueue_queue_visibility_positive CHECK (visibility_timeout > 0),
    CONSTRAINT pyqueue_queue_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT pyqueue_queue_retention_not_negative CHECK (history_retention >= 0),
    CONSTRAINT pyqueue_queue_max_reservation_range CHECK (max_reservation > 0 AND max_reservation >= visibility_timeout),
    CONSTRAINT pyqueue_queue_max_payload_range CHECK (max_payload BETWEEN 1 AND 268435456),
    CONSTRAINT pyqueue_queue_result_retention_range CHECK (result_retention > 0 AND result_retention <= 315360000)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: one row per queue with its settings';

-- Live messages. scheduled_at is both the schedule and the reservation lock:
-- a row is eligible when scheduled_at <= now (UTC); reserving pushes
-- scheduled_at to now + visibility timeout and stamps reserve_token.
--
-- Primary key: id (AUTO_INCREMENT), with the dedup key (queue_name, p_key,
-- p_kind) as a UNIQUE KEY. Why not the dedup key as clustered key, as in PG:
--  * every InnoDB secondary index carries the primary key; with id it adds
--    8 bytes to the hot ready index instead of up to 1.5 KB of key and kind,
--  * every UPDATE / DELETE of a message addresses it by id: an equality
--    lookup on the clustered key locks just that record, never a gap (one
--    on a secondary index may lock gaps under REPEATABLE READ), and leaves
--    the optimizer no index to choose wrongly (see queue_commit),
--  * inserts append to the end of the clustered index instead of landing at
--    random places (dedup keys are often random).
-- The ready index names id explicitly: FIFO tie-break within equal
-- scheduled_at (InnoDB does not store it twice).
CREATE TABLE pyqueue_message (
    queue_name             VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_key                  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind                 VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    payload                JSON         NOT NULL,
    priority               INT          NOT NULL DEFAULT 0,
    scheduled_at           DATETIME(6)  NOT NULL,
    scheduled_at_initially DATETIME(6)  NOT NULL,
    created_at             DATETIME(6)  NOT NULL,
    attempts               INT          NOT NULL DEFAULT 0,
    reserved_by            VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    reserve_token          CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    id                     BIGINT       NOT NULL AUTO_INCREMENT,
    -- the last error a consumer reported (queue_fail), cut to 2000 characters
    last_error             VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    -- set on a dead-letter copy: the queue it came from and the deliveries it
    -- had there (cleared by queue_redrive)
    dead_from              VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    dead_attempts          INT          NULL,
    -- the message's FIFO group (NULL = none): it is either its group's head
    -- (a real scheduled_at: ready, delayed or reserved as any message) or
    -- blocked behind it with scheduled_at = '9999-12-31 23:59:59.999999',
    -- past the end of every ready range, so that no reserve or pop ever
    -- visits it, until the head leaves the queue and the next one in
    -- (scheduled_at_initially, id) order takes its place
    group_key              VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    -- what the holder of a reservation last reported (queue_set_progress); kept across retries, copied
    -- into the message's result row
    progress               JSON         NULL,
    -- when queue_cancel asked the holder of the live reservation to stop (queue_renew tells it)
    cancel_requested_at    DATETIME(6)  NULL,
    -- the message's headers (a JSON object of at most 8192 bytes, NULL = none): written by the
    -- *_with_headers pushes, kept through retries, moves, dead letters, history, replay and redrive
    headers                JSON         NULL,
    PRIMARY KEY (id),
    UNIQUE KEY pyqueue_message_key_uk (queue_name, p_key, p_kind),
    -- The reserve walks the top priorities one at a time (highest first) and
    -- reads the range scheduled_at <= now of each in FIFO order; delayed and
    -- reserved rows lie past the end of each range.
    KEY pyqueue_message_ready_idx (queue_name, priority, scheduled_at, id),
    -- The due index: after a few priorities the reserve reads every lower
    -- one at once as the range scheduled_at <= now of this index (ready
    -- rows only, then sorted), so delayed and reserved rows of many
    -- distinct priorities cost nothing; the next due time is its first
    -- entry; a reserve finds its own claims again by (queue_name,
    -- scheduled_at = the claims' end).
    KEY pyqueue_message_due_idx (queue_name, scheduled_at, id),
    -- A group's messages in delivery order (run time, then push order): the
    -- next one to take the place of a head that left, in one probe. (InnoDB
    -- has no partial index: messages without a group share one entry range
    -- per queue, group_key NULL, that no routine reads.)
    KEY pyqueue_message_group_idx (queue_name, group_key, scheduled_at_initially, id),
    CONSTRAINT pyqueue_message_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    CONSTRAINT pyqueue_message_key_not_empty CHECK (p_key <> ''),
    CONSTRAINT pyqueue_message_kind_not_empty CHECK (p_kind <> '')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: live messages keyed by (queue_name, p_key, p_kind)';

-- One row per FIFO group that has messages: its head, the one message of the
-- group that may be delivered (head_key / head_kind NULL only inside a push
-- that is placing it). The lock every change of a group's head takes: a push
-- into the group, and the step that hands the place of a head that left the
-- queue to the next message. Taken BEFORE the group's message rows (see
-- routines/07_groups.sql); reserves never read it.
-- extra: with a group limit k > 1 (pyqueue_group_limit), how many messages
-- besides the head are live (not blocked): at most k - 1 new ones start;
-- changed only under this row's lock.
CREATE TABLE pyqueue_group (
    queue_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    group_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    head_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    head_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    extra      INT          NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_name, group_key),
    CONSTRAINT pyqueue_group_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: one row per FIFO group with messages: its head';

-- Group limits: up to k messages of a group live at once (queue_set_group_limit);
-- group_key '' is the queue's default for its groups (group names are never
-- empty); no row: 1.
CREATE TABLE pyqueue_group_limit (
    queue_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    group_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    k          INT          NOT NULL,
    PRIMARY KEY (queue_name, group_key),
    CONSTRAINT pyqueue_group_limit_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    CONSTRAINT pyqueue_group_limit_k_range CHECK (k BETWEEN 1 AND 10000)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: how many messages of a FIFO group may be live at once';


-- ==== wakeups ====
-- The per-queue wakeup window (kept for parity: MySQL sends no wakeups).

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


-- ==== topics ====
-- Bindings of topic patterns to queues: queue_publish pushes a message into
-- every queue bound to a pattern its topic matches.

-- pattern: dot-separated words, '*' standing for one word and '#' for any
-- number (AMQP topic exchanges); pattern_regex: the same as a regular
-- expression over CONCAT('.', topic), built once by queue_bind. The index on
-- queue_name serves the cascade of queue_drop and queue_bindings.
CREATE TABLE pyqueue_binding (
    pattern       VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    queue_name    VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    pattern_regex VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    created_at    DATETIME(6)   NOT NULL,
    PRIMARY KEY (pattern, queue_name),
    KEY pyqueue_binding_queue_idx (queue_name),
    CONSTRAINT pyqueue_binding_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: topic patterns bound to queues (queue_bind)';


-- ==== history and dead letters ====
-- Messages that left a queue with a history_retention, and the view of the
-- messages sitting in dead-letter queues.

-- Messages that left a queue created with a history_retention: committed,
-- popped, dead-lettered, moved or cancelled, with processed_at (UTC) and outcome.
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
    last_error   VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    headers      JSON         NULL,
    PRIMARY KEY (id),
    KEY pyqueue_history_queue_time_idx (queue_name, processed_at),
    CONSTRAINT pyqueue_history_outcome_known
        CHECK (outcome IN ('committed', 'popped', 'dead_lettered', 'moved', 'cancelled'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: messages that left a queue with history_retention';


-- Messages sitting in dead-letter queues (queues that some queue names as
-- its dead_letter_queue). from_queue: the queue a message was dead-lettered
-- from, attempts: the deliveries it had there (both NULL for a message that
-- was pushed there directly), headers: the message's (kept by the copy). Times are UTC.
CREATE SQL SECURITY INVOKER VIEW pyqueue_dead_letters AS
SELECT m.queue_name             AS dead_letter_queue,
       m.dead_from              AS from_queue,
       m.p_key                  AS p_key,
       m.p_kind                 AS p_kind,
       m.payload                AS payload,
       m.priority               AS priority,
       m.dead_attempts          AS attempts,
       m.created_at             AS created_at,
       m.scheduled_at_initially AS dead_lettered_at,
       (m.reserve_token IS NOT NULL AND m.scheduled_at > UTC_TIMESTAMP(6)) AS reserved,
       m.last_error             AS last_error,
       m.headers                AS headers
  FROM pyqueue_message m
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);


-- ==== results ====
-- The outcomes of finished messages, for producers that wait for them.

-- The outcome of each finished message of a queue with a result_retention, one row per (queue_name, p_key,
-- p_kind): the latest finish replaces an earlier one. state 'succeeded' (committed or popped; result: what
-- queue_commit_result stored, else NULL), 'failed' (dead-lettered or dropped after its last attempt, with
-- last_error) or 'cancelled' (queue_cancel, queue_cancel_held); attempts: its deliveries; progress: its last
-- progress. Written by the routine that removes the message, in the same transaction; read by queue_result
-- (a live message with the same key wins). Purged by queue_purge_history on the (queue_name, finished_at)
-- index. No foreign key: the results of a dropped queue stay until the next purge.
CREATE TABLE pyqueue_result (
    queue_name  VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_key       VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind      VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    state       VARCHAR(16)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    result      JSON          NULL,
    last_error  VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    attempts    INT           NOT NULL,
    progress    JSON          NULL,
    finished_at DATETIME(6)   NOT NULL,
    PRIMARY KEY (queue_name, p_key, p_kind),
    KEY pyqueue_result_queue_time_idx (queue_name, finished_at),
    CONSTRAINT pyqueue_result_state_known CHECK (state IN ('succeeded', 'failed', 'cancelled'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: the outcome of finished messages of queues with result_retention';


-- ==== dependencies ====
-- Messages that wait for other messages (queue_push_after).

-- The edges between a waiting message and its parents, looked up by one message (queue_name, p_key, p_kind) and a
-- role: 'c': that message is a parent of the child (other_*) whose message id is msg_id (a later message of the
-- child's key is another child), n the parent's number in that child's list; 'p': that message is a child, its parent
-- number n (1, 2, ..., in the order queue_push_after was given) is (other_*); 'w': that message (message id msg_id) is
-- a child still waiting, n = its parents that have not succeeded yet (other_* NULL). Written by queue_push_after; the
-- 'c' rows of a parent and the 'w' row of a child go when the parent leaves its queue (succeeded: the child's count
-- goes down, at 0 the child is ready; failed or cancelled: the child is cancelled); a child's own rows go when it
-- leaves its queue. Every routine that removes a message probes this table once by the message's key (the one index):
-- nothing is found for a message without parents or children. No foreign key, as pyqueue_result.
CREATE TABLE pyqueue_dependency (
    id          BIGINT       NOT NULL AUTO_INCREMENT,
    queue_name  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_key       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    role        CHAR(1)      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    n           INT          NOT NULL,
    other_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    other_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    other_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    msg_id      BIGINT       NULL,
    PRIMARY KEY (id),
    KEY pyqueue_dependency_message_idx (queue_name, p_key, p_kind, role, n),
    CONSTRAINT pyqueue_dependency_role_known CHECK (role IN ('c', 'p', 'w'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: the parents of messages pushed with queue_push_after';


-- ==== limits ====
-- Concurrency limits per (queue, kind) and their slots.

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

-- Rate limits: at most n reservations of (queue, kind) in any window of
-- length per_us (microseconds); p_kind '' is the queue-wide rate (every kind
-- together; kind names are never empty). One slot row per unit, holding the
-- time of the last reservation that used it (NULL: never): a reservation at
-- time t takes a slot whose used_at is NULL or <= t - per and sets it to t,
-- so the times on one slot are spaced per apart and n + 1 reservations never
-- fall within a window shorter than per. used_at is indexed: the reserve takes
-- the least recently used free slot in one index probe.
CREATE TABLE pyqueue_rate (
    queue_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    n          INT          NOT NULL,
    per_us     BIGINT       NOT NULL,
    PRIMARY KEY (queue_name, p_kind),
    CONSTRAINT pyqueue_rate_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    CONSTRAINT pyqueue_rate_n_range CHECK (n BETWEEN 1 AND 10000),
    CONSTRAINT pyqueue_rate_per_range CHECK (per_us BETWEEN 1 AND 86400000000)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: rate limits per (queue, kind); kind empty = the whole queue';

CREATE TABLE pyqueue_rate_slot (
    queue_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    p_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    slot_no    INT          NOT NULL,
    used_at    DATETIME(6)  NULL,
    PRIMARY KEY (queue_name, p_kind, slot_no),
    KEY pyqueue_rate_slot_used_idx (queue_name, p_kind, used_at),
    CONSTRAINT pyqueue_rate_slot_rate_fk FOREIGN KEY (queue_name, p_kind)
        REFERENCES pyqueue_rate (queue_name, p_kind) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: one row per unit of a rate, holding the time it was last used';


-- ==== workers ====
-- The worker registry.

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
    -- a random token handed out by queue_worker_register only: heartbeat and
    -- deregister need it, so a worker can touch only its own registration
    secret       CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (worker_id),
    KEY pyqueue_worker_heartbeat_idx (heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: registered workers and their heartbeats';


-- ==== schedules ====
-- Recurring messages.

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


-- ==== ingest ====
-- The bulk-ingest table that queue_ingest_flush (routines/18_ingest.sql) empties, the
-- rows it refused, and the lock rows that serialise flushes.

-- The bulk-ingest surface for plain JDBC writers (Spark's df.write.jdbc):
-- INSERT rows (queue_name, p_key, p_kind, payload, run_at, priority), then
-- CALL queue_ingest_flush(NULL, ...) (routines/18_ingest.sql) moves them into
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

-- The lock rows of queue_ingest_flush: a flush of one queue holds the row
-- of its queue name exclusively and the row '' shared, a flush of every
-- queue holds the row '' exclusively, each until the flush's transaction
-- ends. Row locks, so only accounts that may write our tables (the
-- routines' definer) can take them, and they serialise flushes of this
-- database only. Rows are added on first use.
CREATE TABLE pyqueue_ingest_lock (
    scope VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    PRIMARY KEY (scope)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: lock rows of queue_ingest_flush (one per queue, and one for all)';


SET SESSION sql_mode = @pyqueue_saved_sql_mode;
