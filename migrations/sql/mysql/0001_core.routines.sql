-- pyqueue-sql revision 0001 (mysql): the routines of the core contract, as released
-- (0001_core.up.sql creates the tables first). Released: never edit it. Every routine is
-- replayable, so a downgrade can re-create it from here (pyqueue_sql.routine_sets).

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';

DELIMITER //

-- ===========================================================================
-- Internal helpers (not part of the contract)
-- ===========================================================================

-- pyqueue__raise: signals 'pyqueue:<in_code>: <in_detail>' (cut to the 128
-- characters MESSAGE_TEXT allows). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__raise //
CREATE PROCEDURE pyqueue__raise(
    IN in_code   VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_detail TEXT        CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_text VARCHAR(128) CHARACTER SET utf8mb4;
    SET v_text = LEFT(CONCAT('pyqueue:', in_code, ': ', COALESCE(in_detail, '')), 128);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_text;
END //

-- pyqueue__check_name: refuses a name that is NULL, empty, longer than
-- in_max characters or ends with a space (see "Names compare exactly").
-- Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_name //
CREATE PROCEDURE pyqueue__check_name(
    IN in_what  VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value LONGTEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_max   INT)
SQL SECURITY INVOKER
BEGIN
    IF in_value IS NULL OR CHAR_LENGTH(in_value) = 0 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not be NULL or empty'));
    END IF;
    IF CHAR_LENGTH(in_value) > in_max THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' is longer than ', in_max, ' characters'));
    END IF;
    IF in_value LIKE '% ' THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not end with a space'));
    END IF;
END //

-- pyqueue__check_duration: refuses a negative duration (or, with
-- in_positive, one that is not above zero) and one over 100 years.
-- NULL passes (it means "the default"). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_duration //
CREATE PROCEDURE pyqueue__check_duration(
    IN in_what     VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value    DECIMAL(20,6),
    IN in_positive BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    IF in_value < 0 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not be negative'));
    END IF;
    IF in_positive AND in_value = 0 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must be greater than zero'));
    END IF;
    IF in_value > 3155760000 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not exceed 100 years'));
    END IF;
END //

-- pyqueue__check_int: refuses a number that is not a whole number within
-- [in_min, in_max] (integer arguments are DECIMAL(65,30), so 2.5 reaches
-- this check instead of being rounded to 3 on the way in). NULL passes.
-- Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_int //
CREATE PROCEDURE pyqueue__check_int(
    IN in_what  VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value DECIMAL(65,30),
    IN in_min   BIGINT,
    IN in_max   BIGINT)
SQL SECURITY INVOKER
BEGIN
    IF in_value <> TRUNCATE(in_value, 0) OR in_value < in_min OR in_value > in_max THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT(in_what, ' must be a whole number from ', in_min, ' to ', in_max));
    END IF;
END //

-- pyqueue__check_token: refuses a NULL token or one that is not shaped like
-- the tokens queue_reserve hands out. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_token //
CREATE PROCEDURE pyqueue__check_token(
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    IF in_token IS NULL THEN
        CALL pyqueue__raise('invalid_argument', 'token must not be NULL');
    END IF;
    IF NOT (in_token REGEXP '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$') THEN
        CALL pyqueue__raise('invalid_argument', 'token is malformed');
    END IF;
END //

-- pyqueue__check_reservation: refuses a key, kind or token that cannot name
-- a reservation (commit, rollback, extend, move). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_reservation //
CREATE PROCEDURE pyqueue__check_reservation(
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_token(in_token);
END //

-- pyqueue__check_payload: refuses a NULL payload (the JSON value null is
-- the text 'null') and text that is not JSON. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_payload //
CREATE PROCEDURE pyqueue__check_payload(
    IN in_payload LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    IF in_payload IS NULL THEN
        CALL pyqueue__raise('invalid_payload', 'payload must not be NULL (use the JSON value null)');
    END IF;
    IF NOT JSON_VALID(in_payload) THEN
        CALL pyqueue__raise('invalid_payload', 'payload is not valid JSON');
    END IF;
END //

-- pyqueue__queue: validates the queue name, raises unless the queue exists
-- and returns its settings. Plain (non-locking) read.
DROP PROCEDURE IF EXISTS pyqueue__queue //
CREATE PROCEDURE pyqueue__queue(
    IN  in_queue               LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_visibility_timeout DECIMAL(20,6),
    OUT out_max_attempts       INT,
    OUT out_dead_letter_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_paused             BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found INT;
    CALL pyqueue__check_name('queue', in_queue, 128);
    SET v_queue = in_queue;
    SELECT COUNT(*), MAX(q.visibility_timeout), MAX(q.max_attempts),
           MAX(q.dead_letter_queue), MAX(q.paused)
      INTO v_found, out_visibility_timeout, out_max_attempts,
           out_dead_letter_queue, out_paused
      FROM pyqueue_queue q
     WHERE q.queue_name = v_queue;
    IF v_found = 0 THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
END //

-- pyqueue__dead_letter: the message in_id of queue in_queue, which the
-- caller has just claimed with in_token, goes to in_dead_letter_queue (or
-- nowhere when NULL) and counts in dead_count. out_done = 1 when it left.
-- Steps, each a single statement:
--   1. read the message by id and token;
--   2. upsert it into the dead-letter queue (a newer dead letter of the same
--      key and kind replaces the older one: payload, priority, created_at,
--      and it is ready again with attempts 0 and no reservation, so that a
--      consumer holding the older one can no longer commit the newer away);
--   3. delete it by id and token;
--   4. if that deleted it, dead_count + 1.
-- Interrupted after 1 or 2, the message stays claimed under a token nobody
-- holds; when the claim expires the next reserve dead-letters it again and
-- the upsert absorbs the duplicate. Interrupted after 3, dead_count misses
-- one (a statistic, never a message).
-- Locks: the message row, the dead-letter message row, the queue row, each
-- for one statement (or until the caller's transaction ends).
DROP PROCEDURE IF EXISTS pyqueue__dead_letter //
CREATE PROCEDURE pyqueue__dead_letter(
    IN  in_queue             VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_dead_letter_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id                BIGINT,
    IN  in_token             CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_now               DATETIME(6),
    OUT out_done             INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_found    INT DEFAULT 1;
    DECLARE v_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_payload  LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_priority INT;
    DECLARE v_created  DATETIME(6);
    SET out_done = 0;
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SELECT m.p_key, m.p_kind, m.payload, m.priority, m.created_at
          INTO v_key, v_kind, v_payload, v_priority, v_created
          FROM pyqueue_message m
         WHERE m.id = in_id AND m.reserve_token = in_token;
    END;
    IF v_found = 1 THEN
        IF in_dead_letter_queue IS NOT NULL THEN
            INSERT INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts)
            VALUES (in_dead_letter_queue, v_key, v_kind, v_payload, v_priority,
                    in_now, in_now, v_created, 0)
            ON DUPLICATE KEY UPDATE
                   payload = v_payload, priority = v_priority, created_at = v_created,
                   scheduled_at = in_now, scheduled_at_initially = in_now, attempts = 0,
                   reserved_by = NULL, reserve_token = NULL;
        END IF;
        DELETE FROM pyqueue_message WHERE id = in_id AND reserve_token = in_token;
        IF ROW_COUNT() = 1 THEN
            UPDATE pyqueue_queue SET dead_count = dead_count + 1 WHERE queue_name = in_queue;
            SET out_done = 1;
        END IF;
    END IF;
END //

-- ===========================================================================
-- Contract routines
-- ===========================================================================

-- queue_create: creates the queue or replaces all its settings (NULL = the
-- default: 30 s, 10 attempts, no dead-letter queue, no history). The
-- dead-letter queue must exist and differ from the queue. paused, dead_count
-- and created_at of an existing queue are kept. No result set.
-- Locks: the queue row (and a shared lock on the dead-letter queue's row
-- through the foreign key check), for one statement.
DROP PROCEDURE IF EXISTS queue_create //
CREATE PROCEDURE queue_create(
    IN in_queue              LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_visibility_timeout DECIMAL(20,6),
    IN in_max_attempts       DECIMAL(65,30),
    IN in_dead_letter_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_history_retention  DECIMAL(20,6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__check_name('queue', in_queue, 128);
    CALL pyqueue__check_duration('visibility_timeout', in_visibility_timeout, TRUE);
    CALL pyqueue__check_duration('history_retention', in_history_retention, FALSE);
    IF in_max_attempts < 1 THEN
        CALL pyqueue__raise('invalid_argument', 'max_attempts must be at least 1');
    END IF;
    CALL pyqueue__check_int('max_attempts', in_max_attempts, 1, 2147483647);
    IF in_dead_letter_queue IS NOT NULL THEN
        CALL pyqueue__check_name('dead_letter_queue', in_dead_letter_queue, 128);
        IF in_dead_letter_queue = in_queue THEN
            CALL pyqueue__raise('invalid_argument', 'a queue cannot be its own dead_letter_queue');
        END IF;
        CALL pyqueue__queue(in_dead_letter_queue, v_vis, v_max, v_dlq, v_paused);
    END IF;
    SET v_vis = COALESCE(in_visibility_timeout, 30);
    SET v_max = COALESCE(in_max_attempts, 10);
    INSERT INTO pyqueue_queue
           (queue_name, visibility_timeout, max_attempts, dead_letter_queue,
            history_retention, paused, dead_count, created_at)
    VALUES (in_queue, v_vis, v_max, in_dead_letter_queue, in_history_retention,
            FALSE, 0, UTC_TIMESTAMP(6))
    ON DUPLICATE KEY UPDATE
           visibility_timeout = v_vis,
           max_attempts       = v_max,
           dead_letter_queue  = in_dead_letter_queue,
           history_retention  = in_history_retention;
END //

-- queue_drop: deletes the queue and all its messages (ON DELETE CASCADE).
-- Refuses while another queue names it as dead_letter_queue. No result set.
-- Locks: the queue row and all its message rows, in one statement.
DROP PROCEDURE IF EXISTS queue_drop //
CREATE PROCEDURE queue_drop(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_users  INT;
    DECLARE v_user   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    SELECT COUNT(*), MIN(q.queue_name) INTO v_users, v_user
      FROM pyqueue_queue q
     WHERE q.dead_letter_queue = v_queue;
    IF v_users > 0 THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('queue is the dead_letter_queue of ', v_user));
    END IF;
    DELETE FROM pyqueue_queue WHERE queue_name = v_queue;
END //

-- queue_push: inserts one message. Result: one row, column inserted = 1, or
-- 0 when a live message with the same (queue, p_key, p_kind) exists (dedup:
-- the existing one is untouched). run_at NULL = now (UTC), priority NULL = 0.
-- INSERT IGNORE would also downgrade bad values to warnings, so every
-- argument is validated before it; the one error it can still swallow, the
-- foreign key when the queue is dropped concurrently, is re-checked after.
-- Locks: the new row (or a shared lock on the duplicate) and a shared lock
-- on the queue row (foreign key), for one statement.
DROP PROCEDURE IF EXISTS queue_push //
CREATE PROCEDURE queue_push(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_now      DATETIME(6);
    DECLARE v_at       DATETIME(6);
    DECLARE v_inserted INT;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
    END IF;
    CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    SET v_now = UTC_TIMESTAMP(6);
    SET v_at = COALESCE(in_run_at, v_now);
    INSERT IGNORE INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, attempts)
    VALUES (in_queue, in_key, in_kind, in_payload, COALESCE(in_priority, 0), v_at,
            v_at, v_now, 0);
    SET v_inserted = ROW_COUNT();
    IF v_inserted = 0 AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- queue_push_batch: inserts many messages in one statement. MySQL takes ONE
-- JSON array of objects {"p_key", "p_kind", "payload", "run_at", "priority"}
-- as second argument; the other four arguments must be NULL. p_key, p_kind
-- and payload are required: p_key / p_kind JSON strings as in queue_push
-- (not empty, at most 255 / 128 characters, no trailing space), payload any
-- JSON value including null; run_at is a
-- string 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC, missing or null = now;
-- priority a whole number, missing or null = 0. Any invalid element refuses
-- the whole batch before anything is written. Result: one row, column
-- inserted = how many were new (duplicates, also within the batch, are
-- skipped; the first occurrence wins).
-- Locks: the new rows (shared locks on duplicates) and a shared lock on the
-- queue row, for one statement. On MariaDB's default
-- innodb_autoinc_lock_mode = 1 an INSERT ... SELECT also holds the table's
-- AUTO-INC lock for the statement, so other pushes wait for the batch.
DROP PROCEDURE IF EXISTS queue_push_batch //
CREATE PROCEDURE queue_push_batch(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_now      DATETIME(6);
    DECLARE v_bad      BIGINT;
    DECLARE v_inserted INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            'MySQL takes one JSON array of messages as 2nd argument; the other 4 must be NULL');
    END IF;
    IF in_messages IS NULL THEN
        CALL pyqueue__raise('invalid_argument', 'messages must not be NULL');
    END IF;
    IF NOT JSON_VALID(in_messages) THEN
        CALL pyqueue__raise('invalid_argument', 'messages must be a JSON array of objects');
    END IF;
    IF JSON_TYPE(in_messages) <> 'ARRAY' THEN
        CALL pyqueue__raise('invalid_argument', 'messages must be a JSON array of objects');
    END IF;
    -- First invalid element (1-based), judged by the same expressions the
    -- insert below uses; "IS NOT TRUE" so that a NULL verdict counts as bad.
    SELECT MIN(b.ord) INTO v_bad
      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS b
     WHERE (    JSON_TYPE(b.elem) = 'OBJECT'
            AND JSON_TYPE(JSON_EXTRACT(b.elem, '$.p_key')) = 'STRING'
            AND CHAR_LENGTH(JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.p_key'))) BETWEEN 1 AND 255
            AND NOT (JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.p_key')) LIKE '% ')
            AND JSON_TYPE(JSON_EXTRACT(b.elem, '$.p_kind')) = 'STRING'
            AND CHAR_LENGTH(JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.p_kind'))) BETWEEN 1 AND 128
            AND NOT (JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.p_kind')) LIKE '% ')
            AND JSON_CONTAINS_PATH(b.elem, 'one', '$.payload')
            AND (   COALESCE(JSON_TYPE(JSON_EXTRACT(b.elem, '$.run_at')), 'NULL') = 'NULL'
                 OR (    JSON_TYPE(JSON_EXTRACT(b.elem, '$.run_at')) = 'STRING'
                     AND JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.run_at'))
                         REGEXP '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?$'
                     AND CAST(JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.run_at')) AS DATETIME(6))
                         + INTERVAL 0 SECOND >= '1000-01-01'
                     AND DATE_FORMAT(CAST(JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.run_at')) AS DATETIME(6)),
                                     '%Y-%m-%d %H:%i:%s')
                         = LEFT(JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.run_at')), 19)))
            AND (   COALESCE(JSON_TYPE(JSON_EXTRACT(b.elem, '$.priority')), 'NULL') = 'NULL'
                 OR (    JSON_TYPE(JSON_EXTRACT(b.elem, '$.priority')) IN ('INTEGER', 'UNSIGNED INTEGER')
                     AND CAST(JSON_EXTRACT(b.elem, '$.priority') AS CHAR) REGEXP '^-?[0-9]{1,10}$'
                     AND CAST(CAST(JSON_EXTRACT(b.elem, '$.priority') AS CHAR) AS DECIMAL(65,0))
                         BETWEEN -2147483648 AND 2147483647))
           ) IS NOT TRUE;
    IF v_bad IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('element ', v_bad, ' of the batch: bad p_key/p_kind, missing payload or bad run_at/priority'));
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    INSERT IGNORE INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, attempts)
    SELECT in_queue,
           JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.p_key')),
           JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.p_kind')),
           JSON_EXTRACT(b.elem, '$.payload'),
           CASE WHEN JSON_TYPE(JSON_EXTRACT(b.elem, '$.priority')) IN ('INTEGER', 'UNSIGNED INTEGER')
                THEN CAST(CAST(JSON_EXTRACT(b.elem, '$.priority') AS CHAR) AS SIGNED) ELSE 0 END,
           CASE WHEN JSON_TYPE(JSON_EXTRACT(b.elem, '$.run_at')) = 'STRING'
                THEN CAST(JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.run_at')) AS DATETIME(6)) ELSE v_now END,
           CASE WHEN JSON_TYPE(JSON_EXTRACT(b.elem, '$.run_at')) = 'STRING'
                THEN CAST(JSON_UNQUOTE(JSON_EXTRACT(b.elem, '$.run_at')) AS DATETIME(6)) ELSE v_now END,
           v_now,
           0
      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS b
     ORDER BY b.ord;
    SET v_inserted = ROW_COUNT();
    IF v_inserted = 0 AND JSON_LENGTH(in_messages) > 0
       AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- queue_pop: removes and returns up to in_n ready messages, highest
-- priority first, FIFO within one (at-most-once). Result: one result set
-- (p_key, p_kind, payload, priority, attempts, created_at), empty when
-- nothing is ready or the queue is paused.
-- How (per priority, as queue_reserve): a plain read of the next ready ids
-- in the ready index range, then per candidate
--   1. SELECT ... FOR UPDATE SKIP LOCKED by id, re-checking it is ready:
--      captures the row, skips it when another session holds it;
--   2. DELETE by id, re-checking what step 1 saw (still ready, same
--      attempts, token, priority, created_at; the last two catch a
--      dead-letter upsert that replaced the payload in between);
--   3. only if step 2 deleted it, the captured row joins the result.
-- The rows travel to the final SELECT in a JSON variable, which the server
-- caps at max_allowed_packet: a pop stops early (fewer rows) rather than
-- delete a row it could not return.
-- The result set is sent after the last delete, so a message is handed out
-- only once it is gone; an interruption before that loses nothing (rows not
-- yet deleted stay, rows deleted in autocommit mode were never returned:
-- at most once). Locks: each candidate row, for one statement.
DROP PROCEDURE IF EXISTS queue_pop //
CREATE PROCEDURE queue_pop(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n     DECIMAL(65,30))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_now      DATETIME(6);
    DECLARE v_left     INT;
    DECLARE v_page     INT;
    DECLARE v_got      INT;
    DECLARE v_priority INT;
    DECLARE v_after_at DATETIME(6);
    DECLARE v_after_id BIGINT;
    DECLARE v_id       BIGINT;
    DECLARE v_at       DATETIME(6);
    DECLARE v_done     INT DEFAULT 0;
    DECLARE v_found    INT;
    DECLARE v_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_payload  LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_prio     INT;
    DECLARE v_attempts INT;
    DECLARE v_created  DATETIME(6);
    DECLARE v_token    CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_rows     LONGTEXT CHARACTER SET utf8mb4 DEFAULT '[]';
    DECLARE v_next     LONGTEXT CHARACTER SET utf8mb4;
    DECLARE c_ready CURSOR FOR
        SELECT m.id, m.scheduled_at
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue
           AND m.priority = v_priority
           AND m.scheduled_at <= v_now
           AND (v_after_id IS NULL
                OR m.scheduled_at > v_after_at
                OR (m.scheduled_at = v_after_at AND m.id > v_after_id))
         ORDER BY m.scheduled_at, m.id
         LIMIT v_page;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;

    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_n < 1 THEN
        CALL pyqueue__raise('invalid_argument', 'n must be at least 1');
    END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);

    IF NOT v_paused THEN
        SET v_now = UTC_TIMESTAMP(6);
        SET v_left = COALESCE(in_n, 1);
        SELECT MAX(m.priority) INTO v_priority FROM pyqueue_message m WHERE m.queue_name = v_queue;
        priorities: WHILE v_priority IS NOT NULL AND v_left > 0 DO
            SET v_after_at = NULL, v_after_id = NULL;
            pages: LOOP
                SET v_page = LEAST(v_left, 1000) + 16, v_got = 0;
                OPEN c_ready;
                candidates: LOOP
                    SET v_done = 0;
                    FETCH c_ready INTO v_id, v_at;
                    IF v_done = 1 THEN
                        LEAVE candidates;
                    END IF;
                    SET v_got = v_got + 1, v_after_at = v_at, v_after_id = v_id;
                    BEGIN
                        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
                        SET v_found = 1;
                        SELECT m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                               m.created_at, m.reserve_token
                          INTO v_key, v_kind, v_payload, v_prio, v_attempts, v_created, v_token
                          FROM pyqueue_message m
                         WHERE m.id = v_id AND m.scheduled_at <= v_now
                           FOR UPDATE SKIP LOCKED;
                    END;
                    -- The result travels in a JSON variable, which the server
                    -- caps at max_allowed_packet: stop before it would overflow.
                    IF v_found = 1
                       AND LENGTH(v_rows) + 2 * LENGTH(v_payload) + 2048 > @@max_allowed_packet
                       AND v_rows <> '[]' THEN
                        SET v_left = 0;
                        LEAVE candidates;
                    END IF;
                    IF v_found = 1 THEN
                        -- Pack first: if the row cannot be packed (too large),
                        -- the call fails before anything is deleted.
                        SET v_next = JSON_ARRAY_APPEND(v_rows, '$',
                            JSON_OBJECT('k', v_key, 'kd', v_kind, 'pl', v_payload,
                                        'pr', v_prio, 'at', v_attempts,
                                        'ca', DATE_FORMAT(v_created, '%Y-%m-%d %H:%i:%s.%f')));
                        DELETE FROM pyqueue_message
                         WHERE id = v_id AND scheduled_at <= v_now AND attempts = v_attempts
                           AND reserve_token <=> v_token AND priority = v_prio
                           AND created_at = v_created;
                        IF ROW_COUNT() = 1 THEN
                            SET v_rows = v_next;
                            SET v_left = v_left - 1;
                            IF v_left = 0 THEN
                                LEAVE candidates;
                            END IF;
                        END IF;
                    END IF;
                END LOOP;
                CLOSE c_ready;
                IF v_left = 0 OR v_got < v_page THEN
                    LEAVE pages;
                END IF;
            END LOOP;
            SELECT MAX(m.priority) INTO v_priority
              FROM pyqueue_message m
             WHERE m.queue_name = v_queue AND m.priority < v_priority;
        END WHILE;
    END IF;

    SELECT r.p_key, r.p_kind, r.payload, r.priority, r.attempts, r.created_at
      FROM JSON_TABLE(v_rows, '$[*]' COLUMNS (
               ord        FOR ORDINALITY,
               p_key      VARCHAR(255) PATH '$.k',
               p_kind     VARCHAR(128) PATH '$.kd',
               payload    LONGTEXT     PATH '$.pl',
               priority   INT          PATH '$.pr',
               attempts   INT          PATH '$.at',
               created_at DATETIME(6)  PATH '$.ca')) AS r
     ORDER BY r.ord;
END //

-- queue_reserve: hands out up to in_n ready messages, highest priority
-- first, FIFO within one; each becomes invisible to others until in_timeout
-- (NULL = the queue's visibility_timeout) passes and carries a fresh token.
-- in_worker is recorded (NULL allowed); in_kinds NULL = any kind, else a
-- non-empty JSON array of strings. attempts counts deliveries including this
-- one. A message whose expired reservation was its last allowed delivery
-- (attempts >= max_attempts) is dead-lettered instead of delivered. Result:
-- one result set (p_key, p_kind, payload, token, priority, attempts,
-- created_at, scheduled_at_initially), empty when nothing is ready or the
-- queue is paused.
-- How: priorities are walked one by one (MAX(priority), then the next lower
-- one); per priority a plain (non-locking) read of the range
-- "queue_name = q AND priority = p AND scheduled_at <= now" of the ready
-- index, in pages of ids in FIFO order, so delayed and reserved rows (later
-- scheduled_at) are never read. Per candidate:
--   1. SELECT ... FOR UPDATE SKIP LOCKED by id, re-checking it is ready:
--      skips a row that another session holds, without waiting;
--   2. UPDATE by id, re-checking what step 1 saw (still ready, same attempts,
--      same token): stamps a fresh token, scheduled_at = now + timeout,
--      attempts + 1. Only one of two racing reservers can match, so a
--      message is never handed out twice, even in autocommit mode where the
--      lock of step 1 is gone by step 2;
--   3. the result set is read at the end by (id, token) of the claims; a
--      claim that expired and was taken over meanwhile (a timeout shorter
--      than the call) is left out: its token would already be stale.
-- A candidate with attempts >= max_attempts is claimed the same way (new
-- token, attempts unchanged) and handed to pyqueue__dead_letter instead; it
-- does not count towards in_n.
-- The ready range is read without locks on purpose: on InnoDB a locking
-- range scan under REPEATABLE READ also locks the first row past the range
-- (a delayed or reserved message, so its commit or extend would wait), gap
-- locks that block pushes, and index entries of rows it skips, which blocks
-- other sessions' claims of those rows until the scanning transaction ends.
-- Interrupted between claims, the rows claimed so far stay reserved under
-- tokens nobody got and come back when their timeout passes (a redelivery,
-- never a loss). Locks: each candidate row, for one statement, or, inside
-- the caller's transaction, the claimed rows until it ends. Called in a
-- REPEATABLE READ transaction that already read pyqueue_message, the range
-- read sees that transaction's snapshot: messages pushed since then wait
-- for the next transaction (autocommit or a fresh transaction avoids this).
DROP PROCEDURE IF EXISTS queue_reserve //
CREATE PROCEDURE queue_reserve(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6),
    IN in_n       DECIMAL(65,30),
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis        DECIMAL(20,6);
    DECLARE v_max        INT;
    DECLARE v_dlq        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused     BOOLEAN;
    DECLARE v_now        DATETIME(6);
    DECLARE v_until      DATETIME(6);
    DECLARE v_left       INT;
    DECLARE v_page       INT;
    DECLARE v_got        INT;
    DECLARE v_priority   INT;
    DECLARE v_after_at   DATETIME(6);
    DECLARE v_after_id   BIGINT;
    DECLARE v_id         BIGINT;
    DECLARE v_at         DATETIME(6);
    DECLARE v_done       INT DEFAULT 0;
    DECLARE v_found      INT;
    DECLARE v_dead       INT;
    DECLARE v_bad        INT;
    DECLARE v_attempts   INT;
    DECLARE v_seen_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_token      CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed    LONGTEXT CHARACTER SET utf8mb4 DEFAULT '[]';
    DECLARE v_kinds      LONGTEXT CHARACTER SET utf8mb4;
    DECLARE c_ready CURSOR FOR
        SELECT m.id, m.scheduled_at
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue
           AND m.priority = v_priority
           AND m.scheduled_at <= v_now
           AND (v_after_id IS NULL
                OR m.scheduled_at > v_after_at
                OR (m.scheduled_at = v_after_at AND m.id > v_after_id))
           AND (v_kinds IS NULL OR JSON_CONTAINS(v_kinds, JSON_QUOTE(m.p_kind)))
         ORDER BY m.scheduled_at, m.id
         LIMIT v_page;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;

    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_n < 1 THEN
        CALL pyqueue__raise('invalid_argument', 'n must be at least 1');
    END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);
    CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
    IF CHAR_LENGTH(in_worker) > 255 THEN
        CALL pyqueue__raise('invalid_argument', 'worker is longer than 255 characters');
    END IF;
    IF in_kinds IS NOT NULL THEN
        IF NOT JSON_VALID(in_kinds) THEN
            CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a JSON array of strings');
        END IF;
        IF JSON_TYPE(in_kinds) <> 'ARRAY' OR JSON_LENGTH(in_kinds) = 0 THEN
            CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a non-empty JSON array of strings');
        END IF;
        SELECT COUNT(*) INTO v_bad
          FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (elem JSON PATH '$')) AS k
         WHERE (JSON_TYPE(k.elem) = 'STRING') IS NOT TRUE;
        IF v_bad > 0 THEN
            CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a non-empty JSON array of strings');
        END IF;
        -- Re-serialise the decoded strings: MariaDB's JSON_CONTAINS compares
        -- string text as written, so '["a\/b"]' or '["\u0432"]' would match
        -- nothing; JSON_QUOTE(p_kind) and this array now spell strings alike.
        SELECT JSON_ARRAYAGG(k.kind) INTO v_kinds
          FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (kind VARCHAR(128) PATH '$')) AS k;
    END IF;

    IF NOT v_paused THEN
        SET v_now = UTC_TIMESTAMP(6);
        SET v_until = v_now + INTERVAL CAST(COALESCE(in_timeout, v_vis) * 1000000 AS SIGNED) MICROSECOND;
        SET v_left = COALESCE(in_n, 1);
        SELECT MAX(m.priority) INTO v_priority FROM pyqueue_message m WHERE m.queue_name = v_queue;
        priorities: WHILE v_priority IS NOT NULL AND v_left > 0 DO
            SET v_after_at = NULL, v_after_id = NULL;
            pages: LOOP
                SET v_page = LEAST(v_left, 1000) + 16, v_got = 0;
                OPEN c_ready;
                candidates: LOOP
                    SET v_done = 0;
                    FETCH c_ready INTO v_id, v_at;
                    IF v_done = 1 THEN
                        LEAVE candidates;
                    END IF;
                    SET v_got = v_got + 1, v_after_at = v_at, v_after_id = v_id;
                    BEGIN
                        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
                        SET v_found = 1;
                        SELECT m.attempts, m.reserve_token INTO v_attempts, v_seen_token
                          FROM pyqueue_message m
                         WHERE m.id = v_id AND m.scheduled_at <= v_now
                           FOR UPDATE SKIP LOCKED;
                    END;
                    IF v_found = 1 THEN
                        SET v_token = UUID();
                        IF v_attempts >= v_max THEN
                            -- Its last allowed reservation expired: claim it
                            -- for the dead-letter step (attempts unchanged).
                            UPDATE pyqueue_message
                               SET scheduled_at = v_until, reserve_token = v_token
                             WHERE id = v_id AND scheduled_at <= v_now
                               AND attempts = v_attempts AND reserve_token <=> v_seen_token;
                            IF ROW_COUNT() = 1 THEN
                                CALL pyqueue__dead_letter(in_queue, v_dlq, v_id, v_token, v_now, v_dead);
                            END IF;
                        ELSE
                            UPDATE pyqueue_message
                               SET scheduled_at = v_until,
                                   attempts = attempts + 1,
                                   reserved_by = in_worker,
                                   reserve_token = v_token
                             WHERE id = v_id AND scheduled_at <= v_now
                               AND attempts = v_attempts AND reserve_token <=> v_seen_token;
                            IF ROW_COUNT() = 1 THEN
                                SET v_claimed = JSON_ARRAY_APPEND(v_claimed, '$', JSON_ARRAY(v_id, v_token));
                                SET v_left = v_left - 1;
                                IF v_left = 0 THEN
                                    LEAVE candidates;
                                END IF;
                            END IF;
                        END IF;
                    END IF;
                END LOOP;
                CLOSE c_ready;
                IF v_left = 0 OR v_got < v_page THEN
                    LEAVE pages;
                END IF;
            END LOOP;
            SELECT MAX(m.priority) INTO v_priority
              FROM pyqueue_message m
             WHERE m.queue_name = v_queue AND m.priority < v_priority;
        END WHILE;
    END IF;

    SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
           m.attempts, m.created_at, m.scheduled_at_initially
      FROM JSON_TABLE(v_claimed, '$[*]' COLUMNS (
               ord      FOR ORDINALITY,
               c_id     BIGINT   PATH '$[0]',
               c_token  CHAR(36) PATH '$[1]')) AS c
      JOIN pyqueue_message m ON m.id = c.c_id
     WHERE m.reserve_token = c.c_token COLLATE utf8mb4_bin
     ORDER BY c.ord;
END //

-- Routines that act on one message by (queue, p_key, p_kind) first locate
-- it with a plain (non-locking) SELECT on the unique key, then change it by
-- id, re-checking the token in that same statement under its row lock: the
-- token check, not the lookup, decides. The lookup does not lock because a
-- locking read takes the unique-index entry before the row, the opposite
-- order of an UPDATE / DELETE by id, and the two deadlocked when a commit
-- raced a consumer taking over the expired reservation (measured). The
-- price: inside a REPEATABLE READ transaction whose snapshot is older than
-- the reservation, the lookup may not see it and the routine answers 0
-- ("token no longer holds"); the message then comes back after its timeout,
-- never lost. A single-table UPDATE / DELETE by the key columns is not used
-- either: with stale table statistics MariaDB 10.11 planned it as a range
-- scan of the ready index, locking a whole priority of the queue.

-- queue_commit: deletes the message if in_token still holds its
-- reservation. Result: one row, committed = 1, or 0 when the token no longer
-- holds (expired and re-reserved, committed already, or removed).
-- Locks: the message row, for one statement (or until the caller's
-- transaction ends).
DROP PROCEDURE IF EXISTS queue_commit //
CREATE PROCEDURE queue_commit(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held   CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id     BIGINT;
    DECLARE v_done   INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    SELECT COALESCE(MAX(m.id), 0) INTO v_id
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
       AND m.reserve_token = v_held;
    IF v_id > 0 THEN
        DELETE FROM pyqueue_message WHERE id = v_id AND reserve_token = v_held;
        SET v_done = ROW_COUNT();
    END IF;
    SELECT v_done AS committed;
END //

-- queue_rollback: gives the message back, eligible again after in_delay
-- (NULL = 0). Result: one row, rolled_back = 1, or 0 when the token no
-- longer holds. A message that has had max_attempts deliveries goes to the
-- dead-letter queue instead (dropped when the queue has none; dead_count
-- + 1). Steps:
--   1. locate the message by key and token (plain read); 0 if absent;
--   2a. attempts < max_attempts: UPDATE by id and token clears the
--       reservation (scheduled_at = now + delay). Done;
--   2b. otherwise UPDATE by id and token swaps the caller's token for a new
--       one (claim for dead-lettering, visible again only after the queue's
--       visibility_timeout), then pyqueue__dead_letter: upsert into the
--       dead-letter queue, delete by the new token, dead_count + 1.
-- Interrupted after the claim of 2b, the message comes back after the
-- visibility timeout and the next reserve dead-letters it (no loss, no
-- double count). Locks: the message row (and the dead-letter message row
-- and the queue row when dead-lettering), each for one statement.
DROP PROCEDURE IF EXISTS queue_rollback //
CREATE PROCEDURE queue_rollback(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_delay DECIMAL(20,6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held     CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_now      DATETIME(6);
    DECLARE v_token    CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found    INT DEFAULT 1;
    DECLARE v_id       BIGINT;
    DECLARE v_attempts INT;
    DECLARE v_dead     INT;
    DECLARE v_done     INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    CALL pyqueue__check_duration('delay', in_delay, FALSE);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    SET v_now = UTC_TIMESTAMP(6);
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SELECT m.id, m.attempts INTO v_id, v_attempts
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
           AND m.reserve_token = v_held;
    END;
    IF v_found = 1 AND v_attempts < v_max THEN
        UPDATE pyqueue_message
           SET scheduled_at = v_now + INTERVAL CAST(COALESCE(in_delay, 0) * 1000000 AS SIGNED) MICROSECOND,
               reserve_token = NULL,
               reserved_by = NULL
         WHERE id = v_id AND reserve_token = v_held;
        SET v_done = ROW_COUNT();
    ELSEIF v_found = 1 THEN
        SET v_token = UUID();
        UPDATE pyqueue_message
           SET scheduled_at = v_now + INTERVAL CAST(v_vis * 1000000 AS SIGNED) MICROSECOND,
               reserve_token = v_token
         WHERE id = v_id AND reserve_token = v_held;
        SET v_done = ROW_COUNT();
        IF v_done = 1 THEN
            CALL pyqueue__dead_letter(v_queue, v_dlq, v_id, v_token, v_now, v_dead);
        END IF;
    END IF;
    SELECT v_done AS rolled_back;
END //

-- queue_extend: pushes the reservation's end to now + in_timeout (NULL =
-- the queue's visibility_timeout) and replaces the token (the old one stops
-- working). Result: one row, token = the new token, or NULL when in_token no
-- longer holds. Locks: the message row, for one statement.
DROP PROCEDURE IF EXISTS queue_extend //
CREATE PROCEDURE queue_extend(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held   CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id     BIGINT;
    DECLARE v_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    SELECT COALESCE(MAX(m.id), 0) INTO v_id
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
       AND m.reserve_token = v_held;
    IF v_id > 0 THEN
        SET v_token = UUID();
        UPDATE pyqueue_message
           SET scheduled_at = UTC_TIMESTAMP(6)
                              + INTERVAL CAST(COALESCE(in_timeout, v_vis) * 1000000 AS SIGNED) MICROSECOND,
               reserve_token = v_token
         WHERE id = v_id AND reserve_token = v_held;
        IF ROW_COUNT() <> 1 THEN
            SET v_token = NULL;
        END IF;
    END IF;
    SELECT v_token AS token;
END //

-- queue_move: commits the reservation here and pushes the message to
-- in_to_queue (payload NULL = unchanged; priority kept; attempts, schedule
-- and created_at start afresh). If in_to_queue already holds a live message
-- with the same key and kind, that one stays (dedup, as queue_push). Result:
-- one row, moved = 1, or 0 when the token no longer holds (nothing changes).
-- Atomic without a transaction: every queue's messages live in one table, so
-- the move is ONE UPDATE of the row's queue_name (and payload, schedule,
-- reservation) by id and token. Only when in_to_queue already holds the key
-- (the UPDATE fails with a duplicate key, error 1062) is the original
-- deleted instead, again one statement by id and token.
-- Locks: the message row and a shared lock on the target queue row (the
-- foreign key), for one statement.
DROP PROCEDURE IF EXISTS queue_move //
CREATE PROCEDURE queue_move(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_to_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held     CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_to_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_to_vis    DECIMAL(20,6);
    DECLARE v_to_max    INT;
    DECLARE v_to_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_to_paused BOOLEAN;
    DECLARE v_now      DATETIME(6);
    DECLARE v_found    INT DEFAULT 1;
    DECLARE v_id       BIGINT;
    DECLARE v_duplicate INT DEFAULT 0;
    DECLARE v_done     INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    CALL pyqueue__check_name('to_queue', in_to_queue, 128);
    CALL pyqueue__queue(in_to_queue, v_to_vis, v_to_max, v_to_dlq, v_to_paused);
    IF in_payload IS NOT NULL THEN
        CALL pyqueue__check_payload(in_payload);
    END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token),
        v_to_queue = in_to_queue;
    SET v_now = UTC_TIMESTAMP(6);
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SELECT m.id INTO v_id
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
           AND m.reserve_token = v_held;
    END;
    IF v_found = 1 THEN
        BEGIN
            DECLARE CONTINUE HANDLER FOR 1062 SET v_duplicate = 1;
            UPDATE pyqueue_message
               SET queue_name = v_to_queue,
                   payload = COALESCE(in_payload, payload),
                   scheduled_at = v_now, scheduled_at_initially = v_now, created_at = v_now,
                   attempts = 0, reserved_by = NULL, reserve_token = NULL
             WHERE id = v_id AND reserve_token = v_held;
            SET v_done = ROW_COUNT();  -- replaced below when the handler fired
        END;
        IF v_duplicate = 1 THEN
            DELETE FROM pyqueue_message WHERE id = v_id AND reserve_token = v_held;
            SET v_done = ROW_COUNT();
        END IF;
    END IF;
    SELECT v_done AS moved;
END //

-- queue_remove: deletes a message whatever its state. Result: one row,
-- removed = 1, or 0 when absent. Locks: the message row, for one statement.
DROP PROCEDURE IF EXISTS queue_remove //
CREATE PROCEDURE queue_remove(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id     BIGINT;
    DECLARE v_done   INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SELECT COALESCE(MAX(m.id), 0) INTO v_id
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind;
    IF v_id > 0 THEN
        DELETE FROM pyqueue_message WHERE id = v_id;
        SET v_done = ROW_COUNT();
    END IF;
    SELECT v_done AS removed;
END //

-- queue_pause: pop and reserve hand out nothing (an empty result set) until
-- queue_resume. Pushes, commits, rollbacks, extends and moves still work.
-- No result set. Locks: the queue row, for one statement.
DROP PROCEDURE IF EXISTS queue_pause //
CREATE PROCEDURE queue_pause(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    UPDATE pyqueue_queue SET paused = TRUE WHERE queue_name = v_queue;
END //

-- queue_resume: undoes queue_pause. No result set. Locks: the queue row,
-- for one statement.
DROP PROCEDURE IF EXISTS queue_resume //
CREATE PROCEDURE queue_resume(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    UPDATE pyqueue_queue SET paused = FALSE WHERE queue_name = v_queue;
END //

-- queue_stats: one row per queue (all queues, ordered by name, when
-- in_queue is NULL): queue, ready (eligible now), `delayed` (scheduled later,
-- not reserved), reserved (held by a reservation that has not expired),
-- dead (messages that exhausted max_attempts here so far),
-- oldest_ready_age_s (DOUBLE: seconds the oldest ready message has been
-- eligible, NULL when none), paused. Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_stats //
CREATE PROCEDURE queue_stats(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now    DATETIME(6);
    IF in_queue IS NOT NULL THEN
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    SET v_queue = in_queue;
    SELECT q.queue_name AS `queue`,
           COUNT(CASE WHEN m.scheduled_at <= v_now THEN 1 END) AS ready,
           COUNT(CASE WHEN m.scheduled_at > v_now AND m.reserve_token IS NULL THEN 1 END) AS `delayed`,
           COUNT(CASE WHEN m.scheduled_at > v_now AND m.reserve_token IS NOT NULL THEN 1 END) AS reserved,
           q.dead_count AS dead,
           TIMESTAMPDIFF(MICROSECOND,
                         MIN(CASE WHEN m.scheduled_at <= v_now THEN m.scheduled_at END),
                         v_now) / 1e6 AS oldest_ready_age_s,
           q.paused AS paused
      FROM pyqueue_queue q
      LEFT JOIN pyqueue_message m ON m.queue_name = q.queue_name
     WHERE v_queue IS NULL OR q.queue_name = v_queue
     GROUP BY q.queue_name, q.dead_count, q.paused
     ORDER BY q.queue_name;
END //

DELIMITER ;

SET SESSION sql_mode = @pyqueue_saved_sql_mode;
