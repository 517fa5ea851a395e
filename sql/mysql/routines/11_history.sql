-- ==== history and dead letters ====
-- What became of messages that left a queue (pyqueue_history: purge, replay), the messages in dead-letter queues
-- (list, redrive), and one message's state and history, for roles that may not read the tables.

DELIMITER //

-- pyqueue__archive: when in_queue keeps history, copies message in_id, if still held by in_token (NULL: not
-- reserved), into pyqueue_history with in_outcome and in_to_queue; out_history_id = the copy or NULL. Called just
-- BEFORE the statement that removes the message; pyqueue__unarchive then deletes the copy if that removed nothing
-- (interrupted in between: a history row for a live message, never a lost message).
-- Locks: a shared lock on the message row, for one statement.
DROP PROCEDURE IF EXISTS pyqueue__archive //
CREATE PROCEDURE pyqueue__archive(
    IN  in_queue       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id          BIGINT,
    IN  in_token       CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_outcome     VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_to_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_now         DATETIME(6),
    OUT out_history_id BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_retention DECIMAL(20,6);
    SET out_history_id = NULL;
    SELECT MAX(q.history_retention) INTO v_retention FROM pyqueue_queue q WHERE q.queue_name = in_queue;
    IF v_retention IS NOT NULL THEN
        INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                     created_at, processed_at, outcome, to_queue, reserved_by,
                                     last_error, headers)
        SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
               m.created_at, in_now, in_outcome, in_to_queue, m.reserved_by, m.last_error, m.headers
          FROM pyqueue_message m
         WHERE m.id = in_id AND m.queue_name = in_queue AND m.reserve_token <=> in_token;
        IF ROW_COUNT() = 1 THEN SET out_history_id = LAST_INSERT_ID(); END IF;
    END IF;
END //

-- pyqueue__unarchive: deletes the history row in_history_id that pyqueue__archive wrote when the removal it preceded
-- did nothing (in_done = 0). Locks: that history row, for one statement.
DROP PROCEDURE IF EXISTS pyqueue__unarchive //
CREATE PROCEDURE pyqueue__unarchive(IN in_history_id BIGINT, IN in_done INT)
SQL SECURITY INVOKER
BEGIN
    IF in_history_id IS NOT NULL AND in_done = 0 THEN DELETE FROM pyqueue_history WHERE id = in_history_id; END IF;
END //

-- queue_purge_history: deletes up to in_n (NULL = 10000) rows, oldest first, of in_queue (NULL = every queue): first
-- history rows past their queue's history_retention, then, from what is left of in_n, result rows (pyqueue_result)
-- past their queue's result_retention, and every result row of a queue that keeps no results (any more) or no longer
-- exists. Result: one row, purged: history and result rows together; call again until it is below in_n. Locks: the
-- deleted rows, one DELETE ... LIMIT per queue.
DROP PROCEDURE IF EXISTS queue_purge_history //
CREATE PROCEDURE queue_purge_history(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n     DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_q VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_ret DECIMAL(20,6);
    DECLARE v_left INT;
    DECLARE v_now DATETIME(6);
    DECLARE v_done INT DEFAULT 0;
    DECLARE c_queues CURSOR FOR
        SELECT q.queue_name, q.history_retention
          FROM pyqueue_queue q
         WHERE q.history_retention IS NOT NULL AND (v_queue IS NULL OR q.queue_name = v_queue)
         ORDER BY q.queue_name;
    -- every queue that has result rows, with its result_retention (NULL: keeps none, or is gone)
    DECLARE c_results CURSOR FOR
        SELECT r.queue_name, q.result_retention
          FROM (SELECT DISTINCT p.queue_name FROM pyqueue_result p
                 WHERE v_queue IS NULL OR p.queue_name = v_queue) AS r
          LEFT JOIN pyqueue_queue q ON q.queue_name = r.queue_name
         ORDER BY r.queue_name;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    CALL pyqueue__check_clock();
    IF in_queue IS NOT NULL THEN
        CALL pyqueue__check_queue(in_queue);
        SET v_queue = in_queue;
    END IF;
    IF in_n < 1 THEN CALL pyqueue__raise('invalid_argument', 'n must be at least 1'); END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 10000), 1, 2147483647);
    SET v_left = COALESCE(in_n, 10000), v_now = UTC_TIMESTAMP(6);
    OPEN c_queues;
    queues: LOOP
        FETCH c_queues INTO v_q, v_ret;
        IF v_done = 1 OR v_left <= 0 THEN LEAVE queues; END IF;
        DELETE FROM pyqueue_history
         WHERE queue_name = v_q
           AND processed_at < v_now - INTERVAL CAST(v_ret * 1000000 AS SIGNED) MICROSECOND
         ORDER BY processed_at
         LIMIT v_left;
        SET v_left = v_left - ROW_COUNT();
    END LOOP;
    CLOSE c_queues;
    IF v_left > 0 THEN
        SET v_done = 0;
        OPEN c_results;
        results: LOOP
            FETCH c_results INTO v_q, v_ret;
            IF v_done = 1 OR v_left <= 0 THEN LEAVE results; END IF;
            DELETE FROM pyqueue_result
             WHERE queue_name = v_q
               AND (v_ret IS NULL OR finished_at < v_now - INTERVAL CAST(v_ret * 1000000 AS SIGNED) MICROSECOND)
             ORDER BY finished_at
             LIMIT v_left;
            SET v_left = v_left - ROW_COUNT();
        END LOOP;
        CLOSE c_results;
    END IF;
    SELECT CAST(COALESCE(in_n, 10000) - v_left AS SIGNED) AS purged;
END //

-- queue_replay: pushes again in_queue's history of [in_from, in_to) (UTC; NULL = unbounded), the latest version of
-- each key and kind, ready now with attempts 0, through dedup. Result: one row, replayed. Reads history without
-- locks; locks like queue_push_batch.
DROP PROCEDURE IF EXISTS queue_replay //
CREATE PROCEDURE queue_replay(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_from  DATETIME(6),
    IN in_to    DATETIME(6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_inserted INT;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    IF (in_from IS NOT NULL AND (in_from + INTERVAL 0 SECOND IS NULL OR in_from < '1000-01-01'))
       OR (in_to IS NOT NULL AND (in_to + INTERVAL 0 SECOND IS NULL OR in_to < '1000-01-01')) THEN
        CALL pyqueue__raise('invalid_argument', 'from and to must be valid times');
    END IF;
    IF in_from > in_to THEN CALL pyqueue__raise('invalid_argument', 'from must not be later than to'); END IF;
    SET v_now = UTC_TIMESTAMP(6);
    INSERT IGNORE INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
            scheduled_at_initially, created_at, attempts, headers)
    SELECT v_queue, h.p_key, h.p_kind, h.payload, h.priority, v_now, v_now, v_now, v_now, 0, h.headers
      FROM (SELECT x.p_key, x.p_kind, x.payload, x.priority, x.headers,
                   ROW_NUMBER() OVER (PARTITION BY x.p_key, x.p_kind
                                      ORDER BY x.processed_at DESC, x.id DESC) AS rn
              FROM pyqueue_history x
             WHERE x.queue_name = v_queue AND x.outcome IN ('committed', 'popped')
               AND (in_from IS NULL OR x.processed_at >= in_from)
               AND (in_to IS NULL OR x.processed_at < in_to)) AS h
     WHERE h.rn = 1
     ORDER BY h.p_key, h.p_kind;
    SET v_inserted = ROW_COUNT();
    IF v_inserted = 0 AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS replayed;
END //

-- queue_redrive: moves up to in_n (NULL = 1) ready messages of in_dead_queue to in_to_queue, highest priority first,
-- FIFO within one: key, kind, payload, priority and last_error kept, attempts 0, ready now, no dead-letter origin.
-- Reserved messages stay; so does one whose key and kind are live in in_to_queue (dedup, not counted). Result: one
-- row, redriven. History archives each move as 'moved'. Per page of 5000: a plain read of candidates, ONE UPDATE
-- IGNORE of queue_name joined to a SKIP LOCKED read by id (atomic as queue_move); a group's head moves alone after it
-- (pyqueue__groups_leave). With history, the candidates are locked (SKIP LOCKED), archived, moved and the copies of
-- those that stayed deleted, in a transaction of its own in autocommit mode (run again on a deadlock). On a dead queue
-- that keeps results, a moved message that is a parent then takes its waiting children along, each page's in the
-- statements that follow its move (pyqueue__deps_moved: its dependency rows follow it to in_to_queue, so its commit
-- there readies them and its failure there cancels them; into a queue that keeps no results they are cancelled, 'was
-- moved to a queue that keeps no results').
-- Locks: the candidate rows and a shared lock on in_to_queue's row, for one statement per page (with history: until
-- the end of the page's transaction); a grouped head's group row before its message row; then the moved parents'
-- dependency rows and the rows that name them.
DROP PROCEDURE IF EXISTS queue_redrive //
CREATE PROCEDURE queue_redrive(
    IN in_dead_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_to_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n          DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_dead, v_to, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_left, v_k, v_top, v_pr, v_got, v_maxatt, v_nexp, v_moved, v_gdone, v_retry INT;
    DECLARE v_paused, v_history, v_results BOOLEAN;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_id, v_gcl BIGINT;
    DECLARE v_cand, v_grouped, v_busy, v_mine LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_count, v_own, v_tries INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SET SESSION group_concat_max_len = v_gcl; RESIGNAL; END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_name('dead_queue', in_dead_queue, 128);
    CALL pyqueue__check_name('to_queue', in_to_queue, 128);
    CALL pyqueue__queue(in_dead_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__queue(in_to_queue, v_vis, v_max, v_dlq, v_paused);
    IF in_n < 1 THEN CALL pyqueue__raise('invalid_argument', 'n must be at least 1'); END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);
    IF in_dead_queue = in_to_queue THEN CALL pyqueue__raise('invalid_argument', 'dead_queue and to_queue must differ'); END IF;
    SET v_dead = in_dead_queue, v_to = in_to_queue, v_left = COALESCE(in_n, 1);
    SELECT q.history_retention IS NOT NULL, q.result_retention IS NOT NULL INTO v_history, v_results
      FROM pyqueue_queue q WHERE q.queue_name = v_dead;
    IF v_history THEN CALL pyqueue__own_transaction(TRUE, v_own); END IF;
    SELECT MAX(m.priority) INTO v_top FROM pyqueue_message m WHERE m.queue_name = v_dead;
    SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
    pages: WHILE v_top IS NOT NULL AND v_left > 0 DO
        SET v_k = LEAST(v_left, 5000), v_now = UTC_TIMESTAMP(6), v_tries = 0;
        CALL pyqueue__candidates(v_dead, NULL, v_now, v_top, TRUE, v_k, FALSE,
                                 v_pr, v_at, v_id, v_cand, v_got, v_maxatt, v_nexp);
        IF v_got = 0 THEN LEAVE pages; END IF;
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1, v_mine = NULL, v_grouped = NULL, v_gdone = 0;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
                IF v_own = 1 THEN START TRANSACTION; END IF;
                IF v_history THEN
                    -- the candidates still there, locked before they are archived (another call's skipped), and only
                    -- they are moved; the copies of those that stay (a duplicate in in_to_queue) are deleted again
                    SELECT CONCAT('[', GROUP_CONCAT(JSON_ARRAY(m.id, 0, 0, j.c_token)), ']') INTO v_mine
                      FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                     WHERE m.queue_name = v_dead AND m.scheduled_at <= v_now AND m.reserve_token <=> j.c_token
                       AND m.group_key IS NULL
                       FOR UPDATE SKIP LOCKED;
                    INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                                 created_at, processed_at, outcome, to_queue, reserved_by, last_error, headers)
                    SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                           m.created_at, v_now, 'moved', v_to, m.reserved_by, m.last_error, m.headers
                      FROM JSON_TABLE(COALESCE(v_mine, '[]'), '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id;
                END IF;
                UPDATE IGNORE (SELECT x.id
                                 FROM JSON_TABLE(IF(v_history, COALESCE(v_mine, '[]'), v_cand), '$[*]' COLUMNS (
                                          c_id    BIGINT   PATH '$[0]',
                                          c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                                 STRAIGHT_JOIN pyqueue_message x FORCE INDEX (PRIMARY) ON x.id = j.c_id
                                WHERE x.queue_name = v_dead AND x.scheduled_at <= v_now
                                  AND x.reserve_token <=> j.c_token AND x.group_key IS NULL
                                  LIMIT 18446744073709551615  -- materialised (never merged into the UPDATE), on MySQL too
                                  FOR UPDATE SKIP LOCKED) AS c
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.id
                   SET m.queue_name = v_to,
                       m.scheduled_at = v_now, m.ready_at = v_now, m.scheduled_at_initially = v_now, m.created_at = v_now,
                       m.attempts = 0, m.reserved_by = NULL, m.reserve_token = NULL,
                       m.dead_from = NULL, m.dead_attempts = NULL;
                SET v_moved = ROW_COUNT();
                IF v_mine IS NOT NULL THEN
                    SELECT COUNT(*) INTO v_moved FROM JSON_TABLE(v_mine, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id WHERE m.queue_name = v_to;
                    DELETE h
                      FROM JSON_TABLE(v_mine, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                      STRAIGHT_JOIN pyqueue_history h
                        ON h.queue_name = v_dead AND h.processed_at = v_now AND h.outcome = 'moved'
                       AND h.p_key = m.p_key AND h.p_kind = m.p_kind
                     WHERE m.queue_name = v_dead;
                END IF;
                IF v_own = 1 THEN COMMIT; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
        IF v_moved < v_got THEN
            -- candidates left: heads of FIFO groups (or rows lost to a race)
            SELECT CONCAT('[', GROUP_CONCAT(JSON_ARRAY(m.id, m.p_key, m.p_kind, j.c_token, m.group_key)
                                            SEPARATOR ','), ']')
              INTO v_grouped
              FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (
                       c_id    BIGINT   PATH '$[0]',
                       c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.queue_name = v_dead AND m.group_key IS NOT NULL AND m.scheduled_at <= v_now
               AND m.reserve_token <=> j.c_token;
            IF v_grouped IS NOT NULL THEN
                CALL pyqueue__own_transaction(TRUE, v_own);
                CALL pyqueue__groups_leave('redrive', v_dead, v_to, v_grouped, v_now, v_own, v_gdone, v_busy);
            END IF;
        END IF;
        IF v_results THEN
            -- a moved parent takes its waiting children along (dependencies live in queues that keep results)
            CALL pyqueue__deps_moved_many(v_dead, v_to, v_cand);
        END IF;
        -- counted by reading (ROW_COUNT() counts the rows IGNORE left under CLIENT_FOUND_ROWS, JDBC's default);
        -- with history, the locked rows that moved (read above) and the group heads
        IF v_history THEN
            SET v_moved = v_moved + v_gdone;
        ELSE
            SELECT COUNT(*) INTO v_moved
              FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.queue_name = v_to AND m.created_at = v_now AND m.reserve_token IS NULL;
        END IF;
        SET v_count = v_count + v_moved, v_left = v_left - v_moved;
        IF v_got < v_k THEN LEAVE pages; END IF;
    END WHILE;
    SET SESSION group_concat_max_len = v_gcl;
    SELECT v_count AS redriven;
END //

-- queue_dead_letters: the rows of the view pyqueue_dead_letters for dead_letter_queue = in_queue, oldest first, for
-- accounts without SELECT on the view. An unknown queue is refused. Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_dead_letters //
CREATE PROCEDURE queue_dead_letters(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    SELECT d.dead_letter_queue, d.from_queue, d.p_key, d.p_kind, d.payload, d.priority,
           d.attempts, d.created_at, d.dead_lettered_at, d.reserved, d.last_error, d.headers
      FROM pyqueue_dead_letters d
     WHERE d.dead_letter_queue = v_queue
     ORDER BY d.dead_lettered_at, d.p_key, d.p_kind;
END //

-- queue_message: the live message (in_key, in_kind) of in_queue: 0 or 1 row (p_key, p_kind, state, payload, priority,
-- attempts, scheduled_at, created_at, reserved_by, last_error, dead_from, progress, cancel_requested (0/1), headers); state
-- 'ready' (an expired reservation too), 'delayed' or 'reserved'. Plain read of the unique key, no locks.
DROP PROCEDURE IF EXISTS queue_message //
CREATE PROCEDURE queue_message(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__check_clock();
    CALL pyqueue__check_message_key(in_queue, in_key, in_kind, TRUE);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    SELECT m.p_key, m.p_kind,
           CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                WHEN m.reserve_token IS NULL THEN 'delayed'
                ELSE 'reserved' END AS state,
           m.payload, m.priority, m.attempts, m.scheduled_at, m.created_at,
           m.reserved_by,
           m.last_error, m.dead_from, m.progress, (m.cancel_requested_at IS NOT NULL) AS cancel_requested,
           m.headers
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind;
END //

-- queue_message_history: the history rows of (in_queue, in_key, in_kind), newest first, at most 100: processed_at,
-- outcome, to_queue, attempts, reserved_by, last_error. No unknown_queue check (the history of a dropped queue stays
-- readable). Plain read on the (queue_name, processed_at) index.
DROP PROCEDURE IF EXISTS queue_message_history //
CREATE PROCEDURE queue_message_history(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_message_key(in_queue, in_key, in_kind, FALSE);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SELECT h.processed_at, h.outcome, h.to_queue, h.attempts, h.reserved_by, h.last_error
      FROM pyqueue_history h
     WHERE h.queue_name = v_queue AND h.p_key = v_key AND h.p_kind = v_kind
     ORDER BY h.processed_at DESC, h.id DESC
     LIMIT 100;
END //

DELIMITER ;
