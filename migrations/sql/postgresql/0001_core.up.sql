-- pyqueue-sql: PostgreSQL 15+ schema, the current state.
--
-- Installs into the current schema (search_path) of the application's database.
-- Tables are prefixed pyqueue_; routines carry the contract names queue_*.
-- Naming inside routines: parameters in_*, locals v_*, columns as they are
-- (p_key/p_kind are columns, never parameters).
--
-- Errors: every refusal is RAISE EXCEPTION with the message
--   'pyqueue:<code>: <detail>'
-- where <code> is one of unknown_queue, invalid_argument, invalid_payload;
-- SQLSTATE is 22023 (invalid_parameter_value) for argument errors and
-- P0002 (no_data_found) for an unknown queue.

-- ===========================================================================
-- Tables
-- ===========================================================================

CREATE TABLE pyqueue_queue (
    queue_name         varchar(128) PRIMARY KEY,
    visibility_timeout interval     NOT NULL DEFAULT interval '30 seconds',
    max_attempts       integer      NOT NULL DEFAULT 10,
    dead_letter_queue  varchar(128) NULL REFERENCES pyqueue_queue (queue_name),
    history_retention  interval     NULL,
    paused             boolean      NOT NULL DEFAULT false,
    dead_count         bigint       NOT NULL DEFAULT 0,
    created_at         timestamptz  NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT pyqueue_queue_name_not_empty CHECK (queue_name <> ''),
    CONSTRAINT pyqueue_queue_visibility_positive CHECK (visibility_timeout > interval '0'),
    CONSTRAINT pyqueue_queue_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT pyqueue_queue_retention_not_negative CHECK (history_retention >= interval '0'),
    CONSTRAINT pyqueue_queue_dlq_not_self CHECK (dead_letter_queue <> queue_name)
);

COMMENT ON TABLE pyqueue_queue IS
    'pyqueue-sql: one row per queue with its settings; dead_count counts messages that exhausted max_attempts here.';

-- Live messages. scheduled_at is both the schedule and the reservation lock:
-- a row is eligible when scheduled_at <= now; reserving pushes scheduled_at to
-- now + visibility timeout and stamps reserve_token.
CREATE TABLE pyqueue_message (
    queue_name             varchar(128) NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
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
    CONSTRAINT pyqueue_message_pkey PRIMARY KEY (queue_name, p_key, p_kind),
    CONSTRAINT pyqueue_message_key_not_empty CHECK (p_key <> ''),
    CONSTRAINT pyqueue_message_kind_not_empty CHECK (p_kind <> '')
) WITH (fillfactor = 80);

COMMENT ON TABLE pyqueue_message IS
    'pyqueue-sql: live messages keyed by (queue_name, p_key, p_kind); scheduled_at is the reservation lock.';

-- ===========================================================================
-- Indices
-- ===========================================================================

-- The reserve walks one priority at a time (highest first) and reads the
-- range scheduled_at <= now of that priority in FIFO order; delayed and
-- reserved rows lie past the end of each range and are never visited.
CREATE INDEX pyqueue_message_ready_idx
    ON pyqueue_message (queue_name, priority, scheduled_at, id);
