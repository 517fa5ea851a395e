-- pyqueue-sql: PostgreSQL 15+ schema, the current state.
--
-- Installs into the current schema (search_path) of the application's database.
-- Tables are prefixed pyqueue_; routines carry the contract names queue_*.
-- Naming inside routines: parameters in_*, locals v_*, columns as they are
-- (p_key/p_kind are columns, never parameters).
--
-- Layout: one section per topic, in the order of ../README.md's list of
-- topics (uninstall.sql: the reverse). A section starts with the line
-- '-- ==== <topic> ====' (a file leaves out the topics it has nothing for).
-- The two checks before the first section refuse an
-- insecure install schema; the last statement undoes their effect.
--
-- Errors: every refusal is RAISE EXCEPTION with the message
--   'pyqueue:<code>: <detail>'
-- where <code> is one of unknown_queue, invalid_argument, invalid_payload,
-- insecure_schema (the install is refused, see below);
-- SQLSTATE is 22023 (invalid_parameter_value) for argument errors and
-- P0002 (no_data_found) for an unknown queue.

-- Refuses to install (pyqueue:insecure_schema) when a role other than the
-- installing one can CREATE in the install schema: see routines/01_preamble.sql, which
-- checks the same again. Creates nothing.
DO $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_roles  text;
BEGIN
    IF v_schema IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: no schema to install into (the search_path names no existing schema)';
    END IF;
    IF pg_catalog.has_schema_privilege('public', v_schema, 'CREATE') THEN
        v_roles := 'PUBLIC';
    ELSE
        SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rolname::text), ', ' ORDER BY r.rolname::text)
          INTO v_roles
          FROM pg_catalog.pg_roles r
         WHERE NOT r.rolsuper
           AND r.rolname::text OPERATOR(pg_catalog.<>) CURRENT_USER::text
           AND r.rolname::text OPERATOR(pg_catalog.<>) 'pg_database_owner'::text  -- its member is checked instead
           AND pg_catalog.has_schema_privilege(r.oid, v_schema, 'CREATE')
           AND NOT pg_catalog.pg_has_role(r.oid, CURRENT_USER, 'MEMBER');
    END IF;
    PERFORM pg_catalog.set_config('pyqueue.search_path_before', pg_catalog.current_setting('search_path'), false);
    IF v_roles IS NULL THEN
        PERFORM pg_catalog.set_config('pyqueue.install_refused', '', false);
    ELSE
        -- Refused. The next statement raises; until the end of the script the
        -- search_path names no schema, so that nothing can be created even by a
        -- client that goes on after an error (psql without ON_ERROR_STOP).
        PERFORM pg_catalog.set_config('pyqueue.install_refused', pg_catalog.format(
            'pyqueue:insecure_schema: roles other than the installing role %I can CREATE in schema %I: %s. '
            'Such a role could create a look-alike function or operator there and have it run with the '
            'rights of %I by the routines. Fix: REVOKE CREATE ON SCHEMA %I FROM %s; (when a role owns the '
            'schema or the database: ALTER SCHEMA %I OWNER TO %I, or install into a schema only %I can '
            'write), then install again',
            CURRENT_USER, v_schema, v_roles, CURRENT_USER, v_schema, v_roles, v_schema, CURRENT_USER,
            CURRENT_USER), false);
        PERFORM pg_catalog.set_config('search_path', '', false);
    END IF;
END
$$;

DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.install_refused', true) OPERATOR(pg_catalog.<>) '' THEN
        RAISE EXCEPTION '%', pg_catalog.current_setting('pyqueue.install_refused') USING ERRCODE = '42501';
    END IF;
END
$$;


-- ==== queues ====
-- The queues and their live messages: the two tables every topic reads and
-- writes, and the index the reserve walks.

CREATE TABLE pyqueue_queue (
    queue_name         varchar(128) PRIMARY KEY,
    visibility_timeout interval     NOT NULL DEFAULT interval '30 seconds',
    max_attempts       integer      NOT NULL DEFAULT 10,
    dead_letter_queue  varchar(128) NULL REFERENCES pyqueue_queue (queue_name),
    history_retention  interval     NULL,
    paused             boolean      NOT NULL DEFAULT false,
    dead_count         bigint       NOT NULL DEFAULT 0,
    created_at         timestamptz  NOT NULL DEFAULT clock_timestamp(),
    max_reservation    interval     NOT NULL DEFAULT interval '12 hours',
    max_payload        integer      NOT NULL DEFAULT 1048576,
    result_retention   interval     NULL,
    CONSTRAINT pyqueue_queue_name_not_empty CHECK (queue_name <> ''),
    CONSTRAINT pyqueue_queue_visibility_positive CHECK (visibility_timeout > interval '0'),
    CONSTRAINT pyqueue_queue_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT pyqueue_queue_retention_not_negative CHECK (history_retention >= interval '0'),
    CONSTRAINT pyqueue_queue_dlq_not_self CHECK (dead_letter_queue <> queue_name),
    CONSTRAINT pyqueue_queue_visibility_within_max_reservation CHECK (visibility_timeout <= max_reservation),
    CONSTRAINT pyqueue_queue_max_payload_range CHECK (max_payload BETWEEN 1 AND 268435456),
    CONSTRAINT pyqueue_queue_result_retention_positive CHECK (result_retention > interval '0')
);

COMMENT ON TABLE pyqueue_queue IS
    'pyqueue-sql: one row per queue with its settings; dead_count counts messages that exhausted max_attempts here; '
    'max_reservation caps the reservation timeout a caller may ask for, max_payload the bytes of a payload written into it; '
    'result_retention (NULL: none) how long the outcome of a finished message is kept in pyqueue_result.';

-- Live messages. scheduled_at is both the schedule and the reservation lock:
-- a row is eligible when scheduled_at <= now; reserving pushes scheduled_at to
-- now + visibility timeout and stamps reserve_token.
-- No foreign key to pyqueue_queue: its per-row check cost 40% of a batch
-- insert, and every routine that writes a message already locks the queue row
-- first (FOR KEY SHARE, the lock the check took), which queue_drop waits for
-- before it deletes the queue's messages itself (see queue_drop).
CREATE TABLE pyqueue_message (
    queue_name             varchar(128) NOT NULL,
    p_key                  varchar(255) NOT NULL,
    p_kind                 varchar(128) NOT NULL,
    payload                jsonb        NOT NULL,
    priority               integer      NOT NULL DEFAULT 0,
    scheduled_at           timestamptz  NOT NULL,
    scheduled_at_initially timestamptz  NOT NULL,
    created_at             timestamptz  NOT NULL,
    attempts               integer      NOT NULL DEFAULT 0,
    reserved_by            varchar(255) NULL,
    reserve_token          uuid         NULL,
    id                     bigint       GENERATED ALWAYS AS IDENTITY,
    last_error             varchar(2000) NULL,
    dead_from              varchar(128) NULL,
    dead_attempts          integer      NULL,
    group_key              varchar(255) NULL,
    progress               jsonb        NULL,
    cancel_requested_at    timestamptz  NULL,
    headers                jsonb        NULL,
    CONSTRAINT pyqueue_message_pkey PRIMARY KEY (queue_name, p_key, p_kind),
    CONSTRAINT pyqueue_message_key_not_empty CHECK (p_key <> ''),
    CONSTRAINT pyqueue_message_kind_not_empty CHECK (p_kind <> '')
) WITH (fillfactor = 80);

COMMENT ON TABLE pyqueue_message IS
    'pyqueue-sql: live messages keyed by (queue_name, p_key, p_kind); scheduled_at is the reservation lock.';

-- group_key: the message's FIFO group (NULL = none). A grouped message is
-- its group's head (a real scheduled_at: ready, delayed or reserved as any
-- message) or blocked behind it: scheduled_at = '9999-12-31
-- 23:59:59.999999+00' (pyqueue__blocked_at), past the end of every ready
-- range, so that no reserve ever visits it, until the head leaves the queue
-- and the next one in (scheduled_at_initially, id) order takes its place.
-- last_error: the error text of the message's last failed delivery
-- (queue_fail; at most 2000 characters, longer text is cut). dead_from and
-- dead_attempts: set on a dead-letter copy only, the queue it came from and
-- the deliveries it had there (cleared when the message moves on).
-- progress: what its holder last reported (queue_set_progress), kept across
-- retries. cancel_requested_at: when queue_cancel asked the holder of its
-- reservation to stop (queue_renew tells the holder). Both NULL on a push.
-- headers: a JSON object its producer gave beside the payload (the
-- *_with_headers pushes: trace context, correlation ids, a tenant; at most
-- 8192 bytes of JSON text), NULL = none. Kept through retries, moves and
-- dead letters, archived with the row, restored by replay and redrive.

-- The two indexes by time below are partial, each on a condition every row
-- meets (scheduled_at is always finite: run_at must be), and a different
-- one: only a query that states an index's condition can read it, so each
-- statement names the index it reads, whatever the statistics say
-- (m.scheduled_at > '-infinity': the ready index; m.scheduled_at <
-- 'infinity': the due index; neither: the primary key). With none (a table
-- never analyzed, the server's autovacuum off or not yet round), the
-- planner costed a read of the queue's whole range through either of these
-- as equal to a key's probe and took it (every commit read the queue once:
-- 0.3 ms at 3,000 messages, growing with the queue), and read a priority
-- probe through the due index and a sort.
-- The reserve walks one priority at a time (highest first) and reads the
-- range scheduled_at <= now of that priority in FIFO order; delayed and
-- reserved rows lie past the end of each range and are never visited.
CREATE INDEX pyqueue_message_ready_idx
    ON pyqueue_message (queue_name, priority, scheduled_at, id)
    WHERE scheduled_at > '-infinity';

-- The queue's messages by time, whatever their priority: the earliest
-- scheduled_at in one probe (queue_next_scheduled_at, queue_wait), the
-- first live message by (scheduled_at, id) past the queue's bound
-- (pyqueue__ready_from_advance), and the
-- ready rows (scheduled_at <= now) read directly when the reserve's walk of
-- the priorities meets too many that hold only waiting messages (see
-- pyqueue__ready_tids in routines/05_reserve.sql). One more index entry per push and
-- per reserve.
CREATE INDEX pyqueue_message_due_idx
    ON pyqueue_message (queue_name, scheduled_at, id)
    WHERE scheduled_at < 'infinity';

-- A group's messages in delivery order (run time, then push order): the
-- next one to take the place of a head that left, in one probe. Partial:
-- messages without a group (the common case) add no entry.
CREATE INDEX pyqueue_message_group_idx
    ON pyqueue_message (queue_name, group_key, scheduled_at_initially, id)
    WHERE group_key IS NOT NULL;

-- One row per group that has messages: its head (the one message of the
-- group that may be delivered; NULL only inside a push that is placing it).
-- The lock every change of a group's head takes: a push into the group, and
-- the step that hands the place of a head that left to the next message.
-- Reserves never read it.
CREATE TABLE pyqueue_group (
    queue_name varchar(128) NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    group_key  varchar(255) NOT NULL,
    head_key   varchar(255) NULL,
    head_kind  varchar(128) NULL,
    CONSTRAINT pyqueue_group_pkey PRIMARY KEY (queue_name, group_key)
);

COMMENT ON TABLE pyqueue_group IS
    'pyqueue-sql: one row per FIFO group with messages: its head, the one message of the group that may be delivered.';

-- Group limits: up to k messages of a group live at once (heads: ready,
-- delayed or reserved; the others blocked), instead of one. group_key '' is
-- the queue's default for every group (group names are never empty); a
-- named group's row overrides it; without a row k is 1. Read by the step
-- that settles a group's heads (pyqueue__group_settle), under the group's
-- row lock.
CREATE TABLE pyqueue_group_limit (
    queue_name varchar(128) NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    group_key  varchar(255) NOT NULL,
    k          integer      NOT NULL,
    CONSTRAINT pyqueue_group_limit_pkey PRIMARY KEY (queue_name, group_key),
    CONSTRAINT pyqueue_group_limit_k_range CHECK (k BETWEEN 1 AND 10000)
);

-- A group's live messages (its heads: every grouped message not blocked),
-- so that a group with k > 1 counts them in a probe of its few entries,
-- whatever its backlog of blocked messages (which have none).
CREATE INDEX pyqueue_message_group_live_idx
    ON pyqueue_message (queue_name, group_key, scheduled_at_initially, id)
    WHERE group_key IS NOT NULL AND scheduled_at < '9999-12-31 23:59:59.999999+00';

-- Where the ready range of a queue starts: every live message of the queue
-- has (scheduled_at, id) >= (ready_from, ready_from_id) (ready_from_id NULL:
-- any id), or scheduled_at >= a lowered_to of pyqueue_ready_lower, so the
-- reserve reads its index ranges from there instead of from the start. The
-- id matters when many messages share one scheduled_at (a batch pushed in
-- one call, a bulk load): the bound then lies inside their run, past the
-- ones consumed already. While a transaction holds the xmin horizon, the index entries of
-- every message reserved or committed since can be neither removed nor
-- marked dead, and they pile up at the head of the ready range; without
-- this bound every reserve walks all of them. Reserves move it up
-- (pyqueue__ready_from_advance, at most once a second per queue) in two
-- steps: one proposes next_from (its clock minus a second, read before its
-- transaction took an id) with next_xid, that id; a later one makes it the
-- bound once every transaction whose id is not above next_xid has ended
-- (after reading what those wrote below next_from: the first live message
-- by (scheduled_at, id) is the new bound, else next_from). A transaction
-- with a higher id took it after that clock, and every routine that writes
-- a message takes its id before it reads its clock: it writes nothing below
-- next_from unless it records a lowering (pyqueue_ready_lower), whatever id
-- its message has.
-- top_priority: the highest priority of the queue's messages when the bound
-- last moved (where the reserve's walk of the priorities starts, unless a
-- higher one is there). One row per queue,
-- made (or reset) by queue_create. No foreign key: queue_drop leaves the
-- row (deleting it could fail a drop inside a REPEATABLE READ transaction
-- whose snapshot predates the last move, with 40001).
CREATE TABLE pyqueue_ready_from (
    queue_name varchar(128) PRIMARY KEY,
    ready_from timestamptz  NOT NULL DEFAULT '-infinity',
    ready_from_id bigint    NULL,
    next_from  timestamptz  NULL,
    next_xid   xid8         NULL,
    moved_at   timestamptz  NOT NULL DEFAULT '-infinity',
    top_priority integer    NULL
);

COMMENT ON TABLE pyqueue_ready_from IS
    'pyqueue-sql: per queue, a lower bound of the (scheduled_at, id) of its live messages, where the reserve starts reading.';

-- A message written more than half a second in the past (an explicit
-- run_at) records its time here, in its own transaction, so that it is
-- never below the bound (pyqueue__ready_from_lower); a later advance folds
-- the rows it sees into ready_from. Empty most of the time. Without a
-- foreign key, as pyqueue_ready_from: queue_create clears a queue's rows.
CREATE TABLE pyqueue_ready_lower (
    queue_name varchar(128) NOT NULL,
    lowered_to timestamptz  NOT NULL
);

CREATE INDEX pyqueue_ready_lower_idx ON pyqueue_ready_lower (queue_name, lowered_to);

-- Every reserve moves a message's entry in the ready index (a
-- non-HOT update) and every commit deletes it, so each message leaves two
-- dead index entries, and the dead ones with past scheduled_at sit at the
-- head of the ready range that every reserve walks. Only VACUUM removes them:
-- vacuum this table once 1,000 rows are dead, whatever its size, unthrottled.
ALTER TABLE pyqueue_message SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0.05);


-- ==== wakeups ====
-- The per-queue NOTIFY throttle.

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


-- ==== topics ====
-- Bindings of topic patterns to queues: queue_publish pushes a message into
-- every queue bound to a pattern its topic matches.

-- pattern: dot-separated words, '*' standing for one word and '#' for any
-- number (AMQP topic exchanges); pattern_regex: the same as a regular
-- expression over '.' || topic, built once by queue_bind.
CREATE TABLE pyqueue_binding (
    pattern       varchar(255)  NOT NULL,
    queue_name    varchar(128)  NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    pattern_regex varchar(2000) NOT NULL,
    created_at    timestamptz   NOT NULL,
    CONSTRAINT pyqueue_binding_pkey PRIMARY KEY (pattern, queue_name)
);

CREATE INDEX pyqueue_binding_queue_idx ON pyqueue_binding (queue_name);

COMMENT ON TABLE pyqueue_binding IS
    'pyqueue-sql: topic patterns bound to queues (queue_bind); queue_publish pushes into every queue bound to a matching pattern.';


-- ==== history and dead letters ====
-- Messages that left a queue with a history_retention, and the view of the
-- messages sitting in dead-letter queues.

-- Messages that left a queue created with a history_retention: committed,
-- popped, dead-lettered or moved. Written by the routine that removes the
-- message, in the same transaction; the live table stays small. Purged by
-- queue_purge_history (plain batched DELETE on the (queue_name, processed_at)
-- index; see docs/contract.md for why not time partitions). No foreign key: the
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
    last_error   varchar(2000) NULL,
    headers      jsonb        NULL,
    CONSTRAINT pyqueue_history_pkey PRIMARY KEY (id),
    CONSTRAINT pyqueue_history_outcome_known
        CHECK (outcome IN ('committed', 'popped', 'dead_lettered', 'moved', 'cancelled'))
);

COMMENT ON TABLE pyqueue_history IS
    'pyqueue-sql: messages that left a queue with history_retention (outcome committed, popped, dead_lettered, moved, cancelled).';

-- Purge and replay read one queue's time range.
CREATE INDEX pyqueue_history_queue_time_idx ON pyqueue_history (queue_name, processed_at);

-- Messages sitting in dead-letter queues (queues that some queue names as
-- its dead_letter_queue). from_queue and attempts: the queue each one came
-- from and the deliveries it had there (recorded on the dead-letter copy);
-- headers: the message's own (kept by the dead-letter copy).
CREATE VIEW pyqueue_dead_letters AS
SELECT m.queue_name                    AS dead_letter_queue,
       m.dead_from                     AS from_queue,
       m.p_key,
       m.p_kind,
       m.payload,
       m.priority,
       m.dead_attempts                 AS attempts,
       m.created_at,
       m.scheduled_at_initially        AS dead_lettered_at,
       (m.reserve_token IS NOT NULL AND m.scheduled_at > clock_timestamp()) AS reserved,
       m.last_error,
       m.headers
  FROM pyqueue_message m
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);

COMMENT ON VIEW pyqueue_dead_letters IS
    'pyqueue-sql: messages in dead-letter queues, with the queue each came from, its deliveries there, its last error and its headers.';


-- ==== results ====
-- The outcomes of finished messages, for producers that wait for them.

-- The outcome of each finished message of a queue with a result_retention,
-- one row per (queue, key, kind): the last time a message of that key
-- finished ('succeeded': committed or popped, with the result the consumer
-- gave queue_commit_result; 'failed': dead-lettered or dropped after its
-- last attempt or queue_give_up; 'cancelled': queue_cancel, queue_cancel_held),
-- its last_error, deliveries (attempts) and progress then. Written (an
-- upsert on the key) by the routine that removes the message, in the same
-- transaction, so a reader sees either the live message or its outcome.
-- Purged by queue_purge_history. No foreign key, as pyqueue_history.
CREATE TABLE pyqueue_result (
    queue_name  varchar(128)  NOT NULL,
    p_key       varchar(255)  NOT NULL,
    p_kind      varchar(128)  NOT NULL,
    state       varchar(16)   NOT NULL,
    result      jsonb         NULL,
    last_error  varchar(2000) NULL,
    attempts    integer       NOT NULL,
    progress    jsonb         NULL,
    finished_at timestamptz   NOT NULL,
    CONSTRAINT pyqueue_result_pkey PRIMARY KEY (queue_name, p_key, p_kind),
    CONSTRAINT pyqueue_result_state_known CHECK (state IN ('succeeded', 'failed', 'cancelled'))
);

COMMENT ON TABLE pyqueue_result IS
    'pyqueue-sql: the outcome (succeeded, failed, cancelled) and result of finished messages of queues with a result_retention.';

-- The purge reads one queue's time range.
CREATE INDEX pyqueue_result_queue_time_idx ON pyqueue_result (queue_name, finished_at);


-- ==== dependencies ====
-- Messages that wait for other messages (queue_push_after).

-- The edges between a waiting message and its parents, looked up by one
-- message (queue_name, p_key, p_kind) and a role:
--   'c': that message is a parent of the child (other_*) whose message id
--        is msg_id (a later message of the child's key is another child);
--        n: the parent's number in that child's list;
--   'p': that message is a child; its parent number n (1, 2, ...,
--        in the order queue_push_after was given) is (other_*);
--   'w': that message (message id msg_id) is a child still waiting:
--        n = its parents that have not succeeded yet (other_* NULL).
-- Written by queue_push_after; the 'c' rows of a parent and the 'w' row of a
-- child go when the parent leaves its queue (succeeded: the child's count
-- goes down, at 0 the child is ready; failed or cancelled: the child is
-- cancelled); a child's own rows go when it leaves its queue. Every routine
-- that removes a message probes this table once by the message's key (the
-- one index): nothing is found for a message without parents or children.
-- No foreign key, as pyqueue_result.
CREATE TABLE pyqueue_dependency (
    queue_name  varchar(128) NOT NULL,
    p_key       varchar(255) NOT NULL,
    p_kind      varchar(128) NOT NULL,
    role        char(1)      NOT NULL,
    n           integer      NOT NULL,
    other_queue varchar(128) NULL,
    other_key   varchar(255) NULL,
    other_kind  varchar(128) NULL,
    msg_id      bigint       NULL,
    CONSTRAINT pyqueue_dependency_role_known CHECK (role IN ('c', 'p', 'w'))
);

COMMENT ON TABLE pyqueue_dependency IS
    'pyqueue-sql: the parents of messages pushed with queue_push_after (c: a child of the message, p: a parent of it, w: its parents not succeeded yet).';

-- The one lookup: every row of a message, by role.
CREATE INDEX pyqueue_dependency_message_idx ON pyqueue_dependency (queue_name, p_key, p_kind, role, n);


-- ==== limits ====
-- Concurrency limits per (queue, kind) and their slots.

-- Concurrency limits: at most capacity messages of (queue, kind) reserved at
-- once. One slot row per unit of capacity; a reservation of a limited kind
-- first takes a free slot (msg_id, msg_attempts = the reservation it holds;
-- msg_key finds the message by its primary key).
-- A slot is free when empty or when its holder no longer is that live
-- reservation (committed, rolled back, moved, dead-lettered, expired, or
-- reserved again, which bumps attempts).
-- Slots numbered above the capacity exist only after the limit was lowered
-- while more were held: they keep those live reservations counted until
-- they end (a freed slot within the capacity takes them over first).
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

-- Rate limits: at most n reservations of (queue, kind) in any window of
-- length per; p_kind '' is the queue-wide rate (every kind together: kind
-- names are never empty). One slot row per unit; used_at is the time of the
-- last reservation that used the slot (NULL = never). A reservation needs a
-- slot whose used_at is NULL or <= its time - per and sets used_at to its
-- time, so the times on one slot are at least per apart and no window
-- shorter than per can hold n + 1 of them.
CREATE TABLE pyqueue_rate (
    queue_name varchar(128) NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    p_kind     varchar(128) NOT NULL,
    n          integer      NOT NULL,
    per        interval     NOT NULL,
    CONSTRAINT pyqueue_rate_pkey PRIMARY KEY (queue_name, p_kind),
    CONSTRAINT pyqueue_rate_n_range CHECK (n BETWEEN 1 AND 10000),
    CONSTRAINT pyqueue_rate_per_range CHECK (per > interval '0' AND per <= interval '1 day')
);

CREATE TABLE pyqueue_rate_slot (
    queue_name varchar(128) NOT NULL,
    p_kind     varchar(128) NOT NULL,
    slot_no    integer      NOT NULL,
    used_at    timestamptz  NULL,
    CONSTRAINT pyqueue_rate_slot_pkey PRIMARY KEY (queue_name, p_kind, slot_no),
    CONSTRAINT pyqueue_rate_slot_rate_fk FOREIGN KEY (queue_name, p_kind)
        REFERENCES pyqueue_rate (queue_name, p_kind) ON DELETE CASCADE
);


-- ==== workers ====
-- The worker registry.

-- Worker registry. A registered worker reserves as worker_name || '#' ||
-- worker_id (its reserve_as), which is how queue_release_dead_workers finds
-- its reservations. secret: handed to the worker at registration; heartbeat
-- and deregister require it (never shown by queue_workers).
CREATE TABLE pyqueue_worker (
    worker_id    bigint       GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker_name  varchar(200) NOT NULL,
    host         varchar(255) NULL,
    pid          integer      NULL,
    queues       text[]       NULL,
    started_at   timestamptz  NOT NULL,
    heartbeat_at timestamptz  NOT NULL,
    secret       uuid         NOT NULL DEFAULT gen_random_uuid()
);

CREATE INDEX pyqueue_worker_heartbeat_idx ON pyqueue_worker (heartbeat_at);


-- ==== schedules ====
-- Recurring messages.

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


-- ==== ingest ====
-- The bulk-ingest table (its trigger is in routines/18_ingest.sql) and the tallies of
-- tagged INSERTs.

-- The bulk-ingest surface for plain JDBC writers (Spark's df.write.jdbc): an
-- INSERT of rows (queue_name, p_key, p_kind, payload, run_at, priority) makes
-- every row a live message, with dedup, in the same statement. A statement-
-- level trigger (routines/18_ingest.sql, pyqueue__ingest) validates the statement's rows,
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

-- pyqueue_ingest_tally: what the queue_ingest trigger did, per ingest tag (the
-- setting pyqueue.ingest_tag of the inserting session, e.g. set by pgJDBC's
-- options=-c pyqueue.ingest_tag=...; an INSERT without one leaves nothing here).
-- One row per INSERT statement, never updated, so parallel writers with one tag
-- never wait for each other; the rows of a transaction that rolls back vanish
-- with it. queue_ingest_flush, called by a session with the same tag, returns
-- the sums and deletes them (and rows older than a day, of any tag).
CREATE TABLE pyqueue_ingest_tally (
    tag        text        NOT NULL,
    enqueued   bigint      NOT NULL,
    duplicates bigint      NOT NULL,
    tallied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX pyqueue_ingest_tally_tag_idx ON pyqueue_ingest_tally (tag);


-- The caller's search_path again, when the check at the top refused.
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.install_refused', true) OPERATOR(pg_catalog.<>) '' THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('pyqueue.search_path_before'), false);
    END IF;
END
$$;
