-- ==== produce ====
-- Put messages in: one, many in one statement, or one that replaces a waiting message with the same key (debounce);
-- one or many into FIFO groups, each group's messages delivered one at a time. Each wakes the queue's listeners when
-- it makes a message ready now. Each push but queue_push_replace has a sibling *_with_headers that also writes the
-- message's headers; both are thin wrappers over one pyqueue__* body, but for queue_push (see
-- queue_push_with_headers).

DELIMITER //

-- queue_push: inserts one message. Result: one row, inserted = 1, or 0 when a live message with the same (queue,
-- p_key, p_kind) exists (dedup: it stays untouched). run_at NULL = now (UTC), priority NULL = 0. Every argument is
-- checked before the INSERT IGNORE (which would downgrade bad values to warnings); the foreign key it can still
-- swallow (a queue dropped meanwhile) is checked after.
-- Locks: a shared lock on the queue row, then the new row (or a shared lock on the duplicate), for one statement; in
-- autocommit mode a deadlock victim runs again.
DROP PROCEDURE IF EXISTS queue_push //
CREATE PROCEDURE queue_push(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_inserted, v_retry INT;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_own, v_tries INT DEFAULT 0;
    DECLARE v_max_payload BIGINT;
    CALL pyqueue__check_clock();
    -- The common case (every argument plainly valid) in one expression; anything else through the full checks
    IF (    CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
            AND CHAR_LENGTH(in_key) BETWEEN 1 AND 255 AND NOT (in_key LIKE '% ')
            AND NOT (in_key LIKE '%@____-__-__T__:__:__Z')
            AND CHAR_LENGTH(in_kind) BETWEEN 1 AND 128 AND NOT (in_kind LIKE '% ')
            AND LOCATE(X'ED', CAST(CONCAT(in_queue, in_key, in_kind, in_payload) AS BINARY)) = 0
            AND JSON_VALID(in_payload)
            AND (in_run_at IS NULL OR (in_run_at + INTERVAL 0 SECOND IS NOT NULL AND in_run_at >= '1000-01-01'))
            AND (in_priority IS NULL
                 OR (in_priority = TRUNCATE(in_priority, 0) AND in_priority BETWEEN -2147483648 AND 2147483647))
       ) IS NOT TRUE THEN
        CALL pyqueue__check_queue(in_queue);
        CALL pyqueue__check_message(in_key, in_kind, in_payload, in_run_at, in_priority);
    END IF;
    SET v_queue = in_queue, v_now = UTC_TIMESTAMP(6), v_at = COALESCE(in_run_at, v_now);
    -- the queue's max_payload, one primary-key read; NULL: no such queue (refused here, not left to the foreign key,
    -- which a session with foreign_key_checks = 0 would not check)
    SELECT MAX(q.max_payload) INTO v_max_payload FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF v_max_payload IS NULL THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
    /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
    IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                    scheduled_at_initially, created_at, attempts)
            VALUES (v_queue, in_key, in_kind, in_payload, COALESCE(in_priority, 0), v_at, v_at,
                    v_at, v_now, 0);
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_inserted = 0 AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- queue_push_with_headers: queue_push with headers in_headers (pyqueue__check_headers: a JSON object of at most
-- 8192 bytes; NULL or the JSON null = none), checked before anything is written. Dedup as queue_push: a duplicate
-- changes nothing, its headers included. Written out beside queue_push, not a wrapper over one shared body as the
-- other pushes: on MariaDB 10.11 the nested CALL cost a single push 12-20 % more server CPU
-- (bench/latest/NOTES-decisions.md, decision 43); tests/unit/test_sql_twins.py fails when the two differ on more than
-- the headers lines.
-- Locks: as queue_push.
DROP PROCEDURE IF EXISTS queue_push_with_headers //
CREATE PROCEDURE queue_push_with_headers(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_inserted, v_retry INT;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_own, v_tries INT DEFAULT 0;
    DECLARE v_max_payload BIGINT;
    CALL pyqueue__check_clock();
    -- The common case (every argument plainly valid) in one expression; anything else through the full checks
    IF (    CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
            AND CHAR_LENGTH(in_key) BETWEEN 1 AND 255 AND NOT (in_key LIKE '% ')
            AND NOT (in_key LIKE '%@____-__-__T__:__:__Z')
            AND CHAR_LENGTH(in_kind) BETWEEN 1 AND 128 AND NOT (in_kind LIKE '% ')
            AND LOCATE(X'ED', CAST(CONCAT(in_queue, in_key, in_kind, in_payload) AS BINARY)) = 0
            AND JSON_VALID(in_payload)
            AND (in_run_at IS NULL OR (in_run_at + INTERVAL 0 SECOND IS NOT NULL AND in_run_at >= '1000-01-01'))
            AND (in_priority IS NULL
                 OR (in_priority = TRUNCATE(in_priority, 0) AND in_priority BETWEEN -2147483648 AND 2147483647))
       ) IS NOT TRUE THEN
        CALL pyqueue__check_queue(in_queue);
        CALL pyqueue__check_message(in_key, in_kind, in_payload, in_run_at, in_priority);
    END IF;
    CALL pyqueue__check_headers(in_headers, v_headers);
    SET v_queue = in_queue, v_now = UTC_TIMESTAMP(6), v_at = COALESCE(in_run_at, v_now);
    -- the queue's max_payload, one primary-key read; NULL: no such queue (refused here, not left to the foreign key,
    -- which a session with foreign_key_checks = 0 would not check)
    SELECT MAX(q.max_payload) INTO v_max_payload FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF v_max_payload IS NULL THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
    /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
    IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                    scheduled_at_initially, created_at, attempts, headers)
            VALUES (v_queue, in_key, in_kind, in_payload, COALESCE(in_priority, 0), v_at, v_at,
                    v_at, v_now, 0, v_headers);
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_inserted = 0 AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- pyqueue__raise_batch_shape: refuses (invalid_argument) a batch call given as in PostgreSQL, one array per column:
-- MySQL takes ONE JSON array of messages as argument in_position ('1st', '2nd'), the other in_others arguments NULL
-- (in_with_headers: one more, in_headers). Called by the batch pushes and publishes only when one of those is not
-- NULL.
DROP PROCEDURE IF EXISTS pyqueue__raise_batch_shape //
CREATE PROCEDURE pyqueue__raise_batch_shape(
    IN in_with_headers BOOLEAN,
    IN in_position     VARCHAR(8) CHARACTER SET utf8mb4,
    IN in_others       INT)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__raise('invalid_argument', IF(in_with_headers,
        CONCAT('MySQL: one JSON array of messages (headers a member of each) as ', in_position,
               ' argument, the other ', in_others + 1, ' NULL'),
        CONCAT('MySQL takes one JSON array of messages as ', in_position, ' argument; the other ', in_others,
               ' must be NULL')));
END //

-- pyqueue__push_batch: the body of queue_push_batch and queue_push_batch_with_headers, each a thin SECURITY DEFINER
-- wrapper over it (in_with_headers FALSE: the members "headers" are not read).
DROP PROCEDURE IF EXISTS pyqueue__push_batch //
CREATE PROCEDURE pyqueue__push_batch(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4,
    IN in_headers    LONGTEXT CHARACTER SET utf8mb4,
    IN in_with_headers BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_retry INT;
    DECLARE v_now DATETIME(6);
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    DECLARE v_max BIGINT;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    IF in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL OR in_headers IS NOT NULL THEN
        CALL pyqueue__raise_batch_shape(in_with_headers, '2nd', 4);
    END IF;
    -- pyqueue__check_messages's checks of the whole text here, those of each element in the INSERT below, as it
    -- reads the element: each nested CALL copies in_messages, and a pass of its own read every field once more
    -- (the two were a third of the call); the full checks only where these find a fault, or a byte ED (a UTF-16
    -- surrogate written as UTF-8 or a character U+D000-U+D7FF: pyqueue__check_utf8 tells)
    IF in_messages IS NULL OR NOT JSON_VALID(in_messages)
       OR (LEFT(in_messages, 1) <> '[' AND JSON_TYPE(in_messages) <> 'ARRAY')
       OR JSON_LENGTH(in_messages) > 10000 OR LOCATE(X'ED', CAST(in_messages AS BINARY)) > 0 THEN
        CALL pyqueue__check_messages(in_messages, NULL);
    END IF;
    IF in_with_headers THEN CALL pyqueue__check_batch_headers(in_messages); END IF;
    -- (pyqueue__check_batch_size's test: a batch text not longer than max_payload cannot hold a longer payload)
    SELECT MAX(q.max_payload) INTO v_max FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF LENGTH(in_messages) > v_max THEN CALL pyqueue__check_batch_size(v_queue, in_messages); END IF;
    SET v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                    scheduled_at_initially, created_at, attempts, headers)
            SELECT in_queue, b.k, b.kd, b.payload, COALESCE(b.priority, 0),
                   COALESCE(b.run_at, v_now), COALESCE(b.run_at, v_now), COALESCE(b.run_at, v_now), v_now, 0,
                   CASE WHEN in_with_headers AND JSON_TYPE(b.h) = 'OBJECT' THEN JSON_EXTRACT(b.h, '$') END
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       kj       JSON PATH '$.p_key',
                       k        VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
                       kdj      JSON PATH '$.p_kind',
                       kd       VARCHAR(129) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind',
                       payload  JSON PATH '$.payload',  -- stored as written, as queue_push stores it
                       raj      JSON PATH '$.run_at',
                       run_at   DATETIME(6) PATH '$.run_at',  -- JSON null: NULL
                       prj      JSON PATH '$.priority',
                       priority INT PATH '$.priority',
                       h        JSON PATH '$.headers')) AS b
             -- pyqueue__check_messages's checks of an element (in_member NULL); the first bad one refuses the
             -- batch, and the statement's rows are undone
             WHERE (    LEFT(b.kj, 1) = '"' AND CHAR_LENGTH(b.k) BETWEEN 1 AND 255 AND NOT (b.k LIKE '% ')
                    AND NOT (b.k LIKE '%@____-__-__T__:__:__Z')
                    AND LEFT(b.kdj, 1) = '"' AND CHAR_LENGTH(b.kd) BETWEEN 1 AND 128 AND NOT (b.kd LIKE '% ')
                    AND b.payload IS NOT NULL
                    AND (   b.raj IS NULL OR b.raj = 'null'
                         OR (    JSON_TYPE(b.raj) = 'STRING'
                             AND JSON_UNQUOTE(b.raj)
                                 REGEXP '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?\\z'
                             AND CAST(JSON_UNQUOTE(b.raj) AS DATETIME(6)) + INTERVAL 0 SECOND >= '1000-01-01'
                             AND DATE_FORMAT(CAST(JSON_UNQUOTE(b.raj) AS DATETIME(6)), '%Y-%m-%d %H:%i:%s')
                                 = LEFT(JSON_UNQUOTE(b.raj), 19)))
                    AND (   b.prj IS NULL OR b.prj = 'null'
                         OR (    JSON_TYPE(b.prj) IN ('INTEGER', 'UNSIGNED INTEGER')
                             AND CAST(b.prj AS CHAR) REGEXP '^-?[0-9]{1,10}\\z'
                             AND CAST(CAST(b.prj AS CHAR) AS DECIMAL(65,0)) BETWEEN -2147483648 AND 2147483647)))
                OR pyqueue__refuse_element(b.ord, b.k, NULL);
            -- (every field typed by JSON_TABLE, unquoted and converted once: each JSON_UNQUOTE, JSON_TYPE
            -- or JSON_EXTRACT of a field parsed it again, and re-writing each payload's JSON text was a
            -- tenth of the call)
            -- (no ORDER BY: JSON_TABLE yields the elements in array order, which gives the ids in batch
            -- order and keeps the first of a repeated key; sorting the rows, payloads included, wrote a
            -- temporary table to disk on every call, a sixth of its time)
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_inserted = 0 AND JSON_LENGTH(in_messages) > 0
       AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- queue_push_batch: inserts many messages in one statement. MySQL: ONE JSON array of objects {"p_key", "p_kind",
-- "payload", "run_at", "priority"} as second argument, the other four NULL; members as queue_push takes them (run_at
-- 'YYYY-MM-DD HH:MM:SS[.ffffff]' UTC, missing or null = now; priority missing or null = 0). An invalid element
-- refuses the batch, nothing written (its INSERT's rows undone with it). Result: one row, inserted = how many were new
-- (duplicates, also within the batch, skipped; the first wins).
-- Locks: the new rows (shared locks on duplicates), a shared lock on the queue row, for one statement (with
-- innodb_autoinc_lock_mode = 1, MariaDB's default, the AUTO-INC lock too); a deadlock victim runs again in autocommit
-- mode. A refused batch in the caller's transaction keeps the shared locks on the live keys of the elements before
-- the bad one until that transaction ends.
DROP PROCEDURE IF EXISTS queue_push_batch //
CREATE PROCEDURE queue_push_batch(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__push_batch(in_queue, in_messages, in_kinds, in_payloads, in_run_ats, in_priorities, NULL,
                             FALSE);
END //

-- queue_push_batch_with_headers: queue_push_batch whose elements may carry a member "headers" (missing or null =
-- none, else a JSON object of at most 8192 bytes: pyqueue__check_batch_headers). MySQL: the headers are members of
-- the messages, so in_headers (PostgreSQL's headers array) must be NULL too. Result and locks: as queue_push_batch.
DROP PROCEDURE IF EXISTS queue_push_batch_with_headers //
CREATE PROCEDURE queue_push_batch_with_headers(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4,
    IN in_headers    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__push_batch(in_queue, in_messages, in_kinds, in_payloads, in_run_ats, in_priorities,
                             in_headers, TRUE);
END //

-- queue_push_replace: queue_push that replaces instead of skipping (debounce). Result: one row, outcome =
-- 'inserted' (no live message had the key: pushed), 'replaced' (a waiting one, ready, delayed or expired, got
-- the new payload, run_at and priority, attempts 0, no reservation; created_at, id and its FIFO group and place kept)
-- or 'reserved' (held by a live reservation: left alone, nothing pushed). Each step one statement reading current
-- data: INSERT IGNORE; else UPDATE by the key unless reserved; else a locking read (held ->
-- 'reserved', gone -> again from the insert, same values -> 'replaced'). Row counts are only compared with 0,
-- so CLIENT_FOUND_ROWS (JDBC's default) gives the same answers. A dead letter (a message a dead-lettering put in its
-- queue: dead_from set) is never replaced: the UPDATE passes it by and the locking read refuses the call
-- (invalid_argument), the letter left as it was (as queue_cancel: only an admin's queue_remove or queue_redrive ends
-- one).
-- Locks: the message row and a shared lock on the queue row, each for one statement.
DROP PROCEDURE IF EXISTS queue_push_replace //
CREATE PROCEDURE queue_push_replace(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_priority, v_live, v_held, v_dead INT;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_outcome VARCHAR(16) CHARACTER SET utf8mb4;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_message(in_key, in_kind, in_payload, in_run_at, in_priority);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__check_size(v_queue, LENGTH(in_payload));
    SET v_at = COALESCE(in_run_at, v_now), v_priority = COALESCE(in_priority, 0);
    attempt: LOOP
        INSERT IGNORE INTO pyqueue_message
               (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                scheduled_at_initially, created_at, attempts)
        VALUES (v_queue, v_key, v_kind, in_payload, v_priority, v_at, v_at, v_at, v_now, 0);
        IF ROW_COUNT() > 0 THEN
            SET v_outcome = 'inserted';
            LEAVE attempt;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
            CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
        END IF;
        UPDATE pyqueue_message FORCE INDEX (pyqueue_message_key_uk)
           SET payload = in_payload, priority = v_priority,
               -- a blocked one stays blocked (its place moves to v_at); read before it changes
               ready_at = IF(scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999', ready_at, v_at),
               scheduled_at = IF(scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999', scheduled_at, v_at),
               scheduled_at_initially = v_at,
               attempts = 0, reserved_by = NULL, reserve_token = NULL
         WHERE queue_name = v_queue AND p_key = v_key AND p_kind = v_kind
           AND (reserve_token IS NULL OR scheduled_at <= v_now) AND dead_from IS NULL;
        IF ROW_COUNT() > 0 THEN
            SET v_outcome = 'replaced';
            LEAVE attempt;
        END IF;
        SELECT COUNT(*), COALESCE(SUM(m.reserve_token IS NOT NULL AND m.scheduled_at > v_now), 0),
               COALESCE(SUM(m.dead_from IS NOT NULL), 0)
          INTO v_live, v_held, v_dead
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
          LOCK IN SHARE MODE;
        IF v_dead > 0 THEN
            CALL pyqueue__raise('invalid_argument', 'a dead letter is not replaced; an admin removes it with queue_remove');
        END IF;
        IF v_live > 0 THEN
            SET v_outcome = IF(v_held > 0, 'reserved', 'replaced');
            LEAVE attempt;
        END IF;
    END LOOP;
    SELECT v_outcome AS outcome;
END //

-- pyqueue__push_grouped: the body of queue_push_grouped and queue_push_grouped_with_headers, each a thin SECURITY
-- DEFINER wrapper over it (in_headers NULL: no headers).
DROP PROCEDURE IF EXISTS pyqueue__push_grouped //
CREATE PROCEDURE pyqueue__push_grouped(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_queue, v_kind, v_head_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_group, v_key, v_head_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found, v_retry, v_gone INT;
    DECLARE v_is_head BOOLEAN;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_head_id BIGINT;
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_name('group', in_group, 255);
    CALL pyqueue__check_message(in_key, in_kind, in_payload, in_run_at, in_priority);
    IF in_headers IS NOT NULL THEN CALL pyqueue__check_headers(in_headers, v_headers); END IF;
    SET v_queue = in_queue, v_group = in_group, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__check_size(v_queue, LENGTH(in_payload));
    SET v_at = COALESCE(in_run_at, v_now);
    -- autocommit with no transaction open: the steps in a transaction of their own
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_inserted = 0, v_gone = 0, v_head_id = NULL;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            -- the queue was dropped meanwhile (the group row's foreign key)
            DECLARE EXIT HANDLER FOR 1452 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; SET v_gone = 1; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            IF v_own = 1 THEN START TRANSACTION; END IF;
            INSERT INTO pyqueue_group (queue_name, group_key) VALUES (v_queue, v_group)
            ON DUPLICATE KEY UPDATE head_key = head_key;
            CALL pyqueue__group_lock(v_queue, v_group, FALSE, v_found, v_head_key, v_head_kind);
            SET v_is_head = v_head_key IS NULL;
            IF NOT v_is_head THEN
                -- the head, if the new message may take its place
                SELECT COUNT(*), MAX(m.id) INTO v_found, v_head_id
                  FROM pyqueue_message m
                 WHERE m.queue_name = v_queue AND m.p_key = v_head_key AND m.p_kind = v_head_kind
                   AND m.attempts = 0 AND m.reserve_token IS NULL AND m.scheduled_at_initially > v_at
                   AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                   FOR UPDATE SKIP LOCKED;
                SET v_is_head = v_found > 0;
            END IF;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                    scheduled_at_initially, created_at, attempts, group_key, headers)
            VALUES (v_queue, v_key, v_kind, in_payload, COALESCE(in_priority, 0),
                    IF(v_is_head, v_at, TIMESTAMP '9999-12-31 23:59:59.999999'),
                    IF(v_is_head, v_at, TIMESTAMP '9999-12-31 23:59:59.999999'), v_at, v_now, 0, v_group, v_headers);
            SET v_inserted = ROW_COUNT();
            IF v_inserted = 1 AND v_is_head THEN
                IF v_head_id IS NOT NULL THEN  -- the displaced head: blocked again
                    UPDATE pyqueue_message SET scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999',
                                               ready_at = TIMESTAMP '9999-12-31 23:59:59.999999'
                     WHERE id = v_head_id;
                END IF;
                UPDATE pyqueue_group SET head_key = v_key, head_kind = v_kind
                 WHERE queue_name = v_queue AND group_key = v_group;
            ELSEIF v_head_key IS NULL THEN
                -- a duplicate into a group without a head: its row goes again (or gets a head)
                CALL pyqueue__group_next(v_queue, v_group, v_now);
            ELSEIF v_inserted = 1 THEN
                -- blocked behind the head: with a group limit k > 1 it starts now if there is room, or takes the
                -- place of a later live message never delivered
                CALL pyqueue__group_place(v_queue, v_group, LAST_INSERT_ID(), v_at, v_now);
            END IF;
            IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_gone = 1 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    SELECT v_inserted AS pushed;
END //

-- queue_push_grouped: queue_push for a message of FIFO group in_group (a name as p_key): a group's messages are
-- delivered one at a time in run_at then push order, each blocked (state 'delayed', scheduled_at '9999-12-31
-- 23:59:59.999999') until the one before it left the queue. Result: one row, pushed = 1 or 0 (dedup as queue_push).
-- The message becomes head of a group without one; it displaces a head never delivered that runs later and can be
-- locked at once (that head is blocked again); otherwise it is blocked. Steps: create or lock the group row, the
-- head's row with SKIP LOCKED when it might be displaced, the INSERT IGNORE, the head's change; in autocommit mode in
-- a transaction of its own, run again on a deadlock.
-- Locks: the group row, the head's row, the new row and a shared lock on the queue row, until the transaction ends.
DROP PROCEDURE IF EXISTS queue_push_grouped //
CREATE PROCEDURE queue_push_grouped(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__push_grouped(in_queue, in_group, in_key, in_kind, in_payload, in_run_at, in_priority, NULL);
END //

-- queue_push_grouped_with_headers: queue_push_grouped with headers in_headers (as queue_push_with_headers).
-- Result and locks: as queue_push_grouped.
DROP PROCEDURE IF EXISTS queue_push_grouped_with_headers //
CREATE PROCEDURE queue_push_grouped_with_headers(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__push_grouped(in_queue, in_group, in_key, in_kind, in_payload, in_run_at, in_priority,
                               in_headers);
END //

-- pyqueue__push_batch_heads: pyqueue__push_batch_grouped's steps 3 to 5, in its transaction, after the group rows
-- (locked) and the messages went in: each group's head and its first blocked message read with locks; a new head due
-- at its run_at, a head never delivered that runs later than that message gives it its place (unless busy: SKIP
-- LOCKED); new groups whose messages were all duplicates go; groups whose limit has room start more
-- (pyqueue__group_fill_batch). in_messages: the batch (its "group" members). Locks: the group rows, their heads and
-- first blocked messages, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__push_batch_heads //
CREATE PROCEDURE pyqueue__push_batch_heads(
    IN in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages LONGTEXT CHARACTER SET utf8mb4,
    IN in_now      DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_heads, v_next, v_swaps LONGTEXT CHARACTER SET utf8mb4;
    -- 3. each group's head (locking read: rows held since step 1) ...
    /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(g.group_key, g.head_key, g.head_kind)) INTO v_heads
      FROM (SELECT DISTINCT b.g
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       g VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.group')) AS b
             WHERE b.g IS NOT NULL
             LIMIT 18446744073709551615) AS d
      STRAIGHT_JOIN pyqueue_group g ON g.queue_name = in_queue AND g.group_key = d.g
       FOR UPDATE;
    -- ... and its first blocked message, by a locking read (a plain read sees an older snapshot)
    /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(h.g, h.hk, h.hkd, n.id, n.p_key, n.p_kind,
                                    DATE_FORMAT(n.scheduled_at_initially, '%Y-%m-%d %H:%i:%s.%f')))
      INTO v_next
      FROM JSON_TABLE(v_heads, '$[*]' COLUMNS (
               g   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
               hk  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
               hkd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) AS h
      LEFT JOIN pyqueue_message n
        ON n.id = (SELECT x.id FROM pyqueue_message x FORCE INDEX (pyqueue_message_group_idx)
                    WHERE x.queue_name = in_queue AND x.group_key = h.g
                      AND x.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999'
                    ORDER BY x.scheduled_at_initially, x.id
                    LIMIT 1
                      FOR UPDATE)
       FOR UPDATE;
    -- the heads that give their place (never delivered, running later), unless busy
    /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(j.g, o.id)) INTO v_swaps
      FROM JSON_TABLE(v_next, '$[*]' COLUMNS (
               g     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
               hk    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
               hkd   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
               n_at  DATETIME(6)  PATH '$[6]')) AS j
      STRAIGHT_JOIN pyqueue_message o FORCE INDEX (pyqueue_message_key_uk)
        ON o.queue_name = in_queue AND o.p_key = j.hk AND o.p_kind = j.hkd
     WHERE o.attempts = 0 AND o.reserve_token IS NULL
       AND o.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
       AND o.scheduled_at_initially > j.n_at
       FOR UPDATE SKIP LOCKED;
    -- 4. new heads due at their run_at, displaced heads blocked
    UPDATE JSON_TABLE(v_next, '$[*]' COLUMNS (
               g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
               hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
               n_id BIGINT       PATH '$[3]')) AS j
      LEFT JOIN JSON_TABLE(COALESCE(v_swaps, '[]'), '$[*]' COLUMNS (
               g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
               o_id BIGINT       PATH '$[1]')) AS s ON s.g = j.g
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id IN (j.n_id, s.o_id)
       SET m.scheduled_at = IF(m.id = s.o_id, TIMESTAMP '9999-12-31 23:59:59.999999',
                               m.scheduled_at_initially),
           m.ready_at = IF(m.id = s.o_id, TIMESTAMP '9999-12-31 23:59:59.999999', m.scheduled_at_initially)
     WHERE j.n_id IS NOT NULL AND (j.hk IS NULL OR s.o_id IS NOT NULL);
    UPDATE JSON_TABLE(v_next, '$[*]' COLUMNS (
               g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
               hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
               n_id BIGINT       PATH '$[3]',
               nk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
               nkd  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[5]')) AS j
      LEFT JOIN JSON_TABLE(COALESCE(v_swaps, '[]'), '$[*]' COLUMNS (
               g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
               o_id BIGINT       PATH '$[1]')) AS s ON s.g = j.g
      STRAIGHT_JOIN pyqueue_group g ON g.queue_name = in_queue AND g.group_key = j.g
       SET g.head_key = j.nk, g.head_kind = j.nkd
     WHERE j.n_id IS NOT NULL AND (j.hk IS NULL OR s.o_id IS NOT NULL);
    -- new groups whose messages were all duplicates
    DELETE g
      FROM JSON_TABLE(v_next, '$[*]' COLUMNS (
               g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
               hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
               n_id BIGINT       PATH '$[3]')) AS j
      STRAIGHT_JOIN pyqueue_group g ON g.queue_name = in_queue AND g.group_key = j.g
     WHERE j.hk IS NULL AND j.n_id IS NULL AND g.head_key IS NULL;
    -- 5. groups whose limit k > 1 has room: more of them start
    CALL pyqueue__group_fill_batch(in_queue, in_messages, in_now);
END //

-- pyqueue__push_batch_grouped: the body of queue_push_batch_grouped and queue_push_batch_grouped_with_headers, each a
-- thin SECURITY DEFINER wrapper over it (in_with_headers FALSE: the members "headers" are not read).
DROP PROCEDURE IF EXISTS pyqueue__push_batch_grouped //
CREATE PROCEDURE pyqueue__push_batch_grouped(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4,
    IN in_headers    LONGTEXT CHARACTER SET utf8mb4,
    IN in_with_headers BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_groups, v_retry, v_gone INT;
    DECLARE v_now DATETIME(6);
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    IF in_keys IS NOT NULL OR in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL OR in_headers IS NOT NULL THEN
        CALL pyqueue__raise_batch_shape(in_with_headers, '2nd', 5);
    END IF;
    CALL pyqueue__check_messages(in_messages, 'group');
    IF in_with_headers THEN CALL pyqueue__check_batch_headers(in_messages); END IF;
    CALL pyqueue__check_batch_size(v_queue, in_messages);
    SET v_now = UTC_TIMESTAMP(6);
    SELECT COUNT(*) INTO v_groups
      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (g JSON PATH '$.group')) AS b
     WHERE JSON_TYPE(b.g) = 'STRING';
    -- autocommit with no transaction open: the steps in a transaction of their own
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_inserted = 0, v_gone = 0;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            -- the queue was dropped meanwhile (the group rows' foreign key)
            DECLARE EXIT HANDLER FOR 1452 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; SET v_gone = 1; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            IF v_own = 1 AND v_groups > 0 THEN START TRANSACTION; END IF;
            IF v_groups > 0 THEN  -- 1. the group rows, in group_key order
                INSERT INTO pyqueue_group (queue_name, group_key)
                SELECT DISTINCT v_queue, b.g
                  FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                           g VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.group')) AS b
                 WHERE b.g IS NOT NULL
                 ORDER BY b.g
                ON DUPLICATE KEY UPDATE head_key = pyqueue_group.head_key;
            END IF;
            -- 2. the messages, those with a group blocked
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                    scheduled_at_initially, created_at, attempts, group_key, headers)
            SELECT in_queue,
                   JSON_UNQUOTE(b.k),
                   JSON_UNQUOTE(b.kd),
                   JSON_EXTRACT(b.payload, '$'),  -- normalised as JSON_EXTRACT of the element would
                   CASE WHEN JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        THEN CAST(CAST(b.priority AS CHAR) AS SIGNED) ELSE 0 END,
                   CASE WHEN JSON_TYPE(b.g) = 'STRING' THEN TIMESTAMP '9999-12-31 23:59:59.999999'
                        WHEN JSON_TYPE(b.run_at) = 'STRING' THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6))
                        ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.g) = 'STRING' THEN TIMESTAMP '9999-12-31 23:59:59.999999'
                        WHEN JSON_TYPE(b.run_at) = 'STRING' THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6))
                        ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   v_now,
                   0,
                   CASE WHEN JSON_TYPE(b.g) = 'STRING' THEN JSON_UNQUOTE(b.g) END,
                   CASE WHEN in_with_headers AND JSON_TYPE(b.h) = 'OBJECT' THEN JSON_EXTRACT(b.h, '$') END
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       g        JSON PATH '$.group',
                       k        JSON PATH '$.p_key',
                       kd       JSON PATH '$.p_kind',
                       payload  JSON PATH '$.payload',
                       run_at   JSON PATH '$.run_at',
                       priority JSON PATH '$.priority',
                       h        JSON PATH '$.headers')) AS b
             ORDER BY b.ord;
            SET v_inserted = ROW_COUNT();
            IF v_groups > 0 THEN
                CALL pyqueue__push_batch_heads(v_queue, in_messages, v_now);  -- 3. to 5.: heads, places, fills
            END IF;
            IF v_own = 1 AND v_groups > 0 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_gone = 1 OR (v_inserted = 0 AND JSON_LENGTH(in_messages) > 0
                      AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue)) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS pushed;
END //

-- queue_push_batch_grouped: queue_push_batch for messages of FIFO groups. MySQL: ONE JSON array of objects {"group",
-- "p_key", "p_kind", "payload", "run_at", "priority"} in in_groups' place, the other five NULL; group as
-- queue_push_grouped's, null or missing for none. An invalid element refuses the batch. Result: one row, pushed = how
-- many were new. As if pushed one by one with queue_push_grouped, in a fixed number of statements: the group rows
-- created or locked in group_key order; one INSERT IGNORE ... SELECT (grouped ones blocked); a locking read of the
-- heads and of each group's first blocked message, and a SKIP LOCKED read of the heads that may be displaced; one
-- UPDATE sets the new heads (blocking displaced ones), one records them, one deletes new group rows that got nothing.
-- In autocommit mode in a transaction of its own, run again on a deadlock.
-- Locks: the group rows (group_key order), the new rows, shared locks on duplicates and the queue row, the heads'
-- rows, until the transaction ends (and the AUTO-INC lock, as queue_push_batch).
DROP PROCEDURE IF EXISTS queue_push_batch_grouped //
CREATE PROCEDURE queue_push_batch_grouped(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__push_batch_grouped(in_queue, in_messages, in_keys, in_kinds, in_payloads, in_run_ats,
                                     in_priorities, NULL, FALSE);
END //

-- queue_push_batch_grouped_with_headers: queue_push_batch_grouped whose elements may carry a member "headers" (as
-- queue_push_batch_with_headers; in_headers must be NULL). Result and locks: as queue_push_batch_grouped.
DROP PROCEDURE IF EXISTS queue_push_batch_grouped_with_headers //
CREATE PROCEDURE queue_push_batch_grouped_with_headers(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4,
    IN in_headers    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__push_batch_grouped(in_queue, in_messages, in_keys, in_kinds, in_payloads, in_run_ats,
                                     in_priorities, in_headers, TRUE);
END //

DELIMITER ;
