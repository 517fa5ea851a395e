-- ==== topics ====
-- Publish a message to every queue bound to a matching topic pattern: bind, unbind and list the bindings, publish one
-- message or many.

DELIMITER //

-- pyqueue__raise_undecided: signals that the regular expression engine could not decide whether topic in_topic (NULL:
-- one of a batch) matches a bound pattern (warning 1139, a match limit): an error, never a silent miss.
DROP PROCEDURE IF EXISTS pyqueue__raise_undecided //
CREATE PROCEDURE pyqueue__raise_undecided(IN in_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__raise('invalid_argument',
        CONCAT('the server could not decide whether topic ', COALESCE(CONCAT('"', LEFT(in_topic, 30), '"'), 'of the batch'),
               ' matches a bound pattern'));
END //

-- pyqueue__check_topic: refuses in_value (named in_what) unless a topic (in_pattern FALSE) or a pattern: 1 to 255
-- characters, no space at either end, dot-separated non-empty words; '*' and '#' only as whole words of a pattern.
-- Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_topic //
CREATE PROCEDURE pyqueue__check_topic(
    IN in_what    VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value   LONGTEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_pattern BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__check_name(in_what, in_value, 255);
    IF in_value LIKE ' %' THEN CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not start with a space')); END IF;
    IF in_value LIKE '.%' OR in_value LIKE '%.' OR LOCATE('..', in_value) > 0 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must be dot-separated words, none of them empty'));
    END IF;
    IF NOT in_pattern AND (LOCATE('*', in_value) > 0 OR LOCATE('#', in_value) > 0) THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not hold * or # (only a pattern does)'));
    END IF;
    -- a word holding * or # next to another character of the same word
    IF in_pattern AND in_value REGEXP '[^.][*#]|[*#][^.]' THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' may hold * or # only as a whole word'));
    END IF;
END //

-- pyqueue__topic_regex: the regular expression of the (checked) topic pattern in_pattern, matched against CONCAT('.',
-- topic) with REGEXP (ICU and PCRE alike), built so that no match backtracks more than linearly: each word is '\.'
-- plus the word with ^$|()[]{}+?\ escaped, '*' one word ('\.[^.]++', possessive); the words before the first '#' are
-- anchored at '^'; the words between two '#' (a segment of fixed length) are found at their leftmost place and kept
-- there, '(?>(?:\.[^.]++)*?<segment>(?![^.]))' (atomic: the leftmost place leaves the most room for the rest, so
-- nothing is lost by never trying another); after the last '#', any words then the last segment, anchored at '\z'
-- (not '$', which also matches before a final newline). Adjacent '#' are one. 'a.#' matches 'a', 'a.b', 'a.b.c'.
-- Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__topic_regex //
CREATE PROCEDURE pyqueue__topic_regex(
    IN  in_pattern VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_regex  VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_rest, v_word VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_seg VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT '';
    DECLARE v_dot INT;
    DECLARE v_hash BOOLEAN DEFAULT FALSE;  -- a '#' came before the segment being read
    SET out_regex = '^', v_rest = in_pattern;
    WHILE v_rest IS NOT NULL DO
        SET v_dot = LOCATE('.', v_rest);
        IF v_dot = 0 THEN
            SET v_word = v_rest, v_rest = NULL;
        ELSE
            SET v_word = LEFT(v_rest, v_dot - 1), v_rest = SUBSTRING(v_rest, v_dot + 1);
        END IF;
        -- compared as bytes: utf8mb4_bin pads with spaces
        IF CAST(v_word AS BINARY) = '#' THEN
            IF NOT v_hash THEN
                SET out_regex = CONCAT(out_regex, v_seg);
            ELSEIF v_seg <> '' THEN
                SET out_regex = CONCAT(out_regex, '(?>(?:\\.[^.]++)*?', v_seg, '(?![^.]))');
            END IF;
            SET v_hash = TRUE, v_seg = '';
        ELSE
            SET v_seg = CONCAT(v_seg,
                IF(CAST(v_word AS BINARY) = '*', '\\.[^.]++',
                   CONCAT('\\.',
                          REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(
                              v_word, '\\', '\\\\'), '^', '\\^'), '$', '\\$'), '|', '\\|'), '(', '\\('), ')', '\\)'),
                              '[', '\\['), ']', '\\]'), '{', '\\{'), '}', '\\}'), '+', '\\+'), '?', '\\?'))));
        END IF;
    END WHILE;
    SET out_regex = CONCAT(out_regex, IF(v_hash, '(?:\\.[^.]++)*', ''), v_seg, '\\z');
END //

-- pyqueue__bind: the body of queue_bind (in_bind TRUE) and queue_unbind (in_bind FALSE), each a thin SECURITY DEFINER
-- wrapper over it. The pattern (pyqueue__check_topic; to bind, at most 3 '#') and the queue are checked, then ONE
-- statement: binding inserts the row, its regular expression built once (pyqueue__topic_regex), out_changed = 1 when
-- new, else 0 (unknown_queue when the queue was dropped meanwhile); unbinding deletes it, out_changed = 1 when it was
-- removed, 0 when there was none. Locks: the binding row (binding: and a shared lock on the queue row), for one
-- statement; in autocommit mode a deadlock victim runs again.
DROP PROCEDURE IF EXISTS pyqueue__bind //
CREATE PROCEDURE pyqueue__bind(
    IN  in_pattern  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_bind     BOOLEAN,
    OUT out_changed INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_pattern VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_regex VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_retry INT;
    DECLARE v_gone, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__check_topic('pattern', in_pattern, TRUE);
    -- bounded matching cost: at most 3 '#' words ('#' stands only as a whole word here)
    IF in_bind AND CHAR_LENGTH(in_pattern) - CHAR_LENGTH(REPLACE(in_pattern, '#', '')) > 3 THEN
        CALL pyqueue__raise('invalid_argument', 'pattern has more than 3 # wildcards');
    END IF;
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue, v_pattern = in_pattern;
    IF in_bind THEN CALL pyqueue__topic_regex(v_pattern, v_regex); END IF;
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, out_changed = 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE CONTINUE HANDLER FOR 1062 SET out_changed = 0;  -- bound already
            DECLARE CONTINUE HANDLER FOR 1452 SET v_gone = 1;       -- the queue was dropped meanwhile
            IF in_bind THEN
                INSERT INTO pyqueue_binding (pattern, queue_name, pattern_regex, created_at)
                VALUES (v_pattern, v_queue, v_regex, UTC_TIMESTAMP(6));
            ELSE
                DELETE FROM pyqueue_binding WHERE pattern = v_pattern AND queue_name = v_queue;
                SET out_changed = ROW_COUNT();
            END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_gone = 1 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
END //

-- queue_bind: binds topic pattern in_pattern ('*' one word, '#' any number; pyqueue__check_topic) to in_queue, its
-- regular expression built once (pyqueue__topic_regex). Result: one row, bound = 1 when new, else 0.
-- Locks: the new row and a shared lock on the queue row, for one statement; a deadlock victim runs again.
DROP PROCEDURE IF EXISTS queue_bind //
CREATE PROCEDURE queue_bind(
    IN in_pattern LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_bound INT;
    CALL pyqueue__check_clock();
    CALL pyqueue__bind(in_pattern, in_queue, TRUE, v_bound);
    SELECT v_bound AS bound;
END //

-- queue_unbind: removes the binding of in_pattern to in_queue. Result: one row, unbound = 1 when it was removed, 0
-- when there was none. The pattern and the queue are checked as queue_bind checks them. Locks: the binding row, for
-- one statement (in autocommit mode, run again when chosen as a deadlock victim).
DROP PROCEDURE IF EXISTS queue_unbind //
CREATE PROCEDURE queue_unbind(
    IN in_pattern LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_unbound INT;
    CALL pyqueue__check_clock();
    CALL pyqueue__bind(in_pattern, in_queue, FALSE, v_unbound);
    SELECT v_unbound AS unbound;
END //

-- queue_bindings: the bindings of in_queue (every queue's when NULL): rows (pattern, queue, created_at), ordered by
-- queue, then pattern. Raises unknown_queue for a queue that does not exist. Plain read.
DROP PROCEDURE IF EXISTS queue_bindings //
CREATE PROCEDURE queue_bindings(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    IF in_queue IS NOT NULL THEN CALL pyqueue__check_queue(in_queue); END IF;
    SET v_queue = in_queue;
    SELECT b.pattern, b.queue_name AS `queue`, b.created_at
      FROM pyqueue_binding b
     WHERE v_queue IS NULL OR b.queue_name = v_queue
     ORDER BY b.queue_name, b.pattern;
END //

-- pyqueue__publish: the body of queue_publish and queue_publish_with_headers, each a thin SECURITY DEFINER wrapper
-- over it (in_headers NULL: no headers).
DROP PROCEDURE IF EXISTS pyqueue__publish //
CREATE PROCEDURE pyqueue__publish(
    IN in_topic    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_topic VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_queues, v_own, v_tries INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_max_payload BIGINT;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_topic('topic', in_topic, FALSE);
    CALL pyqueue__check_message(in_key, in_kind, in_payload, in_run_at, in_priority);
    IF in_headers IS NOT NULL THEN CALL pyqueue__check_headers(in_headers, v_headers); END IF;
    SET v_topic = CONCAT('.', in_topic), v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    -- the queues the topic reaches, matched once before anything is written: a match the regular expression engine
    -- cannot decide (1139) is an error, never a miss; and the smallest max_payload among them
    BEGIN
        DECLARE EXIT HANDLER FOR 1139 CALL pyqueue__raise_undecided(in_topic);
        SELECT MIN(q.max_payload) INTO v_max_payload
          FROM pyqueue_binding b JOIN pyqueue_queue q ON q.queue_name = b.queue_name
         WHERE v_topic REGEXP b.pattern_regex;
    END;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
    SET v_at = COALESCE(in_run_at, v_now);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                    scheduled_at_initially, created_at, attempts, headers)
            SELECT q.queue_name, v_key, v_kind, in_payload, COALESCE(in_priority, 0), v_at, v_at, v_at, v_now, 0, v_headers
              FROM (SELECT DISTINCT b.queue_name
                      FROM pyqueue_binding b
                     WHERE v_topic REGEXP b.pattern_regex
                     LIMIT 18446744073709551615) AS q
             ORDER BY q.queue_name;
            SET v_queues = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_queues AS queues;
END //

-- queue_publish: pushes the message (as queue_push) into every queue bound to a pattern in_topic matches, one copy
-- per queue. Result: one row, queues = how many got a new message (dedup as queue_push); 0 when nothing matches. ONE
-- INSERT IGNORE ... SELECT over the matching bindings, in queue-name order.
-- Locks: shared locks on the bindings read, then per queue (name order) a shared lock on its row and the new row, for
-- one statement; a deadlock victim runs again in autocommit mode.
DROP PROCEDURE IF EXISTS queue_publish //
CREATE PROCEDURE queue_publish(
    IN in_topic    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__publish(in_topic, in_key, in_kind, in_payload, in_run_at, in_priority, NULL);
END //

-- queue_publish_with_headers: queue_publish with headers in_headers (as queue_push_with_headers), the same in every
-- copy. Result and locks: as queue_publish.
DROP PROCEDURE IF EXISTS queue_publish_with_headers //
CREATE PROCEDURE queue_publish_with_headers(
    IN in_topic    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__publish(in_topic, in_key, in_kind, in_payload, in_run_at, in_priority, in_headers);
END //

-- pyqueue__publish_batch: the body of queue_publish_batch and queue_publish_batch_with_headers, each a thin SECURITY
-- DEFINER wrapper over it (in_with_headers FALSE: the members "headers" are not read).
DROP PROCEDURE IF EXISTS pyqueue__publish_batch //
CREATE PROCEDURE pyqueue__publish_batch(
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
    DECLARE v_now DATETIME(6);
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_matches BIGINT;
    CALL pyqueue__check_clock();
    IF in_keys IS NOT NULL OR in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL OR in_headers IS NOT NULL THEN
        CALL pyqueue__raise_batch_shape(in_with_headers, '1st', 5);
    END IF;
    CALL pyqueue__check_messages(in_messages, 'topic');
    IF in_with_headers THEN CALL pyqueue__check_batch_headers(in_messages); END IF;
    -- every topic matched once before anything is written: a match the engine cannot decide (1139) is an error
    BEGIN
        DECLARE EXIT HANDLER FOR 1139 CALL pyqueue__raise_undecided(NULL);
        SELECT COUNT(*) INTO v_matches
          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                   t VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.topic')) AS b
          JOIN pyqueue_binding m ON CONCAT('.', b.t) REGEXP m.pattern_regex;
    END;
    CALL pyqueue__check_batch_size(NULL, in_messages);
    SET v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                    scheduled_at_initially, created_at, attempts, headers)
            SELECT q.queue_name,
                   JSON_UNQUOTE(b.k),
                   JSON_UNQUOTE(b.kd),
                   JSON_EXTRACT(b.payload, '$'),  -- normalised as JSON_EXTRACT of the element would
                   CASE WHEN JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        THEN CAST(CAST(b.priority AS CHAR) AS SIGNED) ELSE 0 END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   v_now,
                   0,
                   CASE WHEN in_with_headers AND JSON_TYPE(b.h) = 'OBJECT' THEN JSON_EXTRACT(b.h, '$') END
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       t        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.topic',
                       k        JSON PATH '$.p_key',
                       kd       JSON PATH '$.p_kind',
                       payload  JSON PATH '$.payload',
                       run_at   JSON PATH '$.run_at',
                       priority JSON PATH '$.priority',
                       h        JSON PATH '$.headers')) AS b
              STRAIGHT_JOIN (SELECT DISTINCT x.queue_name FROM pyqueue_binding x
                              LIMIT 18446744073709551615) AS q
             WHERE EXISTS (SELECT 1 FROM pyqueue_binding m
                            WHERE m.queue_name = q.queue_name
                              AND CONCAT('.', b.t) REGEXP m.pattern_regex)
             ORDER BY q.queue_name, b.ord;
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_inserted AS pushed;
END //

-- queue_publish_batch: queue_publish for many messages. MySQL: ONE JSON array of objects {"topic", "p_key", "p_kind",
-- "payload", "run_at", "priority"} in in_topics' place, the other five NULL; members as queue_push_batch's. An
-- invalid element refuses the batch. Result: one row, pushed = new messages in all queues (duplicates skipped, the
-- first wins). ONE INSERT IGNORE ... SELECT, queue-name then element order.
-- Locks: as queue_publish, for every queue reached.
DROP PROCEDURE IF EXISTS queue_publish_batch //
CREATE PROCEDURE queue_publish_batch(
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__publish_batch(in_messages, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities, NULL,
                                FALSE);
END //

-- queue_publish_batch_with_headers: queue_publish_batch whose elements may carry a member "headers" (as
-- queue_push_batch_with_headers; in_headers must be NULL). Result and locks: as queue_publish_batch.
DROP PROCEDURE IF EXISTS queue_publish_batch_with_headers //
CREATE PROCEDURE queue_publish_batch_with_headers(
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4,
    IN in_headers    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__publish_batch(in_messages, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities,
                                in_headers, TRUE);
END //

DELIMITER ;
