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
-- Names compare exactly: queue_name, p_key, p_kind, dead_letter_queue and
-- reserve_token use utf8mb4_bin ('A' <> 'a'). utf8mb4_bin is a PAD SPACE
-- collation on both servers ('a' = 'a '), and there is no NO PAD binary
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

-- ===========================================================================
-- Tables
-- ===========================================================================

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
    PRIMARY KEY (queue_name),
    CONSTRAINT pyqueue_queue_dlq_fk FOREIGN KEY (dead_letter_queue)
        REFERENCES pyqueue_queue (queue_name),
    CONSTRAINT pyqueue_queue_visibility_positive CHECK (visibility_timeout > 0),
    CONSTRAINT pyqueue_queue_max_attempts_positive CHECK (max_attempts >= 1),
    CONSTRAINT pyqueue_queue_retention_not_negative CHECK (history_retention >= 0)
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
    PRIMARY KEY (id),
    UNIQUE KEY pyqueue_message_key_uk (queue_name, p_key, p_kind),
    -- The reserve walks one priority at a time (highest first) and reads the
    -- range scheduled_at <= now of that priority in FIFO order; delayed and
    -- reserved rows lie past the end of each range.
    KEY pyqueue_message_ready_idx (queue_name, priority, scheduled_at, id),
    CONSTRAINT pyqueue_message_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    CONSTRAINT pyqueue_message_key_not_empty CHECK (p_key <> ''),
    CONSTRAINT pyqueue_message_kind_not_empty CHECK (p_kind <> '')
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: live messages keyed by (queue_name, p_key, p_kind)';

SET SESSION sql_mode = @pyqueue_saved_sql_mode;
