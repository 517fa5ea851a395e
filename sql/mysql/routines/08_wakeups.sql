-- ==== wakeups ====
-- Waiting for work without polling hard. MySQL has no NOTIFY: the channel and its window are kept for parity with
-- PostgreSQL; a waiter sleeps until the next message falls due, or long-polls inside the server (queue_wait).

DELIMITER //

-- pyqueue__kinds: validates a kinds filter (NULL, or a non-empty JSON array of strings) and returns it re-serialised
-- for JSON_CONTAINS(out, JSON_QUOTE(p_kind)), as queue_reserve does. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__kinds //
CREATE PROCEDURE pyqueue__kinds(
    IN  in_kinds  LONGTEXT CHARACTER SET utf8mb4,
    OUT out_kinds LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_bad INT;
    SET out_kinds = NULL;
    IF in_kinds IS NOT NULL THEN
        IF NOT JSON_VALID(in_kinds) THEN CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a JSON array of strings'); END IF;
        IF JSON_TYPE(in_kinds) <> 'ARRAY' OR JSON_LENGTH(in_kinds) = 0 THEN
            CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a non-empty JSON array of strings');
        END IF;
        IF JSON_LENGTH(in_kinds) > 10000 THEN
            CALL pyqueue__raise('invalid_argument', CONCAT('kinds holds ', JSON_LENGTH(in_kinds),
                                                           ' kinds; a filter takes at most 10000'));
        END IF;
        SELECT COUNT(*) INTO v_bad
          FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (elem JSON PATH '$')) AS k
         WHERE (JSON_TYPE(k.elem) = 'STRING') IS NOT TRUE;
        IF v_bad > 0 THEN CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a non-empty JSON array of strings'); END IF;
        -- a longer string would be cut to 128 below and match another kind
        SELECT COUNT(*) INTO v_bad
          FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (elem JSON PATH '$')) AS k
         WHERE CHAR_LENGTH(JSON_UNQUOTE(k.elem)) > 128;
        IF v_bad > 0 THEN CALL pyqueue__raise('invalid_argument', 'kinds must not hold a kind longer than 128 characters'); END IF;
        /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(k.kind) INTO out_kinds
          FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k;
    END IF;
END //

-- pyqueue__next_at: the earliest scheduled_at of the queue's messages (of in_kinds, NULL = any; blocked ones are
-- none), NULL when none: one ordered read of the due index up to the first wanted kind. On a queue with rates (one
-- probe of pyqueue_rate tells), a message of a kind whose rate has no free unit at in_now counts from when the next
-- unit frees (the first such message of each held kind: one more ordered read per held kind), and a used-up
-- queue-wide rate puts the answer no earlier than its next free unit: an idle worker neither polls a held-back queue
-- nor oversleeps a reservable message. Plain reads: SELECT ... INTO (InnoDB runs a subquery in SET, IF, WHILE or a
-- CALL argument as a locking read, which would wait for the row locks of a transaction that is pushing).
DROP PROCEDURE IF EXISTS pyqueue__next_at //
CREATE PROCEDURE pyqueue__next_at(
    IN  in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kinds LONGTEXT CHARACTER SET utf8mb4,
    IN  in_now   DATETIME(6),
    OUT out_next DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_rated INT;
    DECLARE v_held LONGTEXT CHARACTER SET utf8mb4;   -- [[kind, when its next unit frees], ...] of the held kinds
    DECLARE v_hkinds LONGTEXT CHARACTER SET utf8mb4; -- [kind, ...] of the held kinds
    DECLARE v_queue_free, v_kind_next DATETIME(6);
    SELECT EXISTS (SELECT 1 FROM pyqueue_rate r WHERE r.queue_name = in_queue) INTO v_rated;
    IF v_rated THEN
        SELECT JSON_ARRAYAGG(JSON_ARRAY(h.p_kind, DATE_FORMAT(h.free_at, '%Y-%m-%d %H:%i:%s.%f'))),
               JSON_ARRAYAGG(h.p_kind)
          INTO v_held, v_hkinds
          FROM (SELECT r.p_kind, MIN(s.used_at) + INTERVAL r.per_us MICROSECOND AS free_at
                  FROM pyqueue_rate r
                  JOIN pyqueue_rate_slot s ON s.queue_name = r.queue_name AND s.p_kind = r.p_kind
                 WHERE r.queue_name = in_queue AND r.p_kind <> ''
                 GROUP BY r.p_kind, r.per_us
                HAVING SUM(s.used_at IS NULL OR s.used_at <= in_now - INTERVAL r.per_us MICROSECOND) = 0) AS h;
        CALL pyqueue__rate_free_at(in_queue, '', in_now, v_queue_free);
    END IF;
    SELECT MIN(x.scheduled_at) INTO out_next
      FROM (SELECT m.scheduled_at FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
             WHERE m.queue_name = in_queue
               AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'  -- not blocked in a group
               AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
               AND (v_hkinds IS NULL OR NOT JSON_CONTAINS(v_hkinds, JSON_QUOTE(m.p_kind)))
             ORDER BY m.scheduled_at
             LIMIT 1) AS x;
    IF v_held IS NOT NULL THEN
        -- each held kind's first message, from when its next unit frees
        SELECT MIN(GREATEST(h.free_at,
                            (SELECT m.scheduled_at FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                              WHERE m.queue_name = in_queue AND m.p_kind = h.p_kind
                                AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                              ORDER BY m.scheduled_at
                              LIMIT 1)))
          INTO v_kind_next
          FROM JSON_TABLE(v_held, '$[*]' COLUMNS (
                   p_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                   free_at DATETIME(6) PATH '$[1]')) AS h
         WHERE in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(h.p_kind));
        IF v_kind_next IS NOT NULL AND (out_next IS NULL OR v_kind_next < out_next) THEN
            SET out_next = v_kind_next;
        END IF;
    END IF;
    IF v_queue_free IS NOT NULL AND out_next < v_queue_free THEN
        SET out_next = v_queue_free;
    END IF;
END //

-- queue_channel: the queue's PostgreSQL NOTIFY channel, 'pyqueue_' + MD5 of its name (for parity: MySQL has no
-- NOTIFY). One row: channel. Raises unknown_queue. Plain read.
DROP PROCEDURE IF EXISTS queue_channel //
CREATE PROCEDURE queue_channel(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    SELECT CONCAT('pyqueue_', MD5(v_queue)) AS channel;
END //

-- queue_set_notify_window: the queue's wakeup throttle window in seconds (NULL = 0.05, 0 = none, at most 3600);
-- effective on PostgreSQL only (MySQL workers poll), accepted here for parity. Locks: the queue's pyqueue_notify row,
-- for one statement.
DROP PROCEDURE IF EXISTS queue_set_notify_window //
CREATE PROCEDURE queue_set_notify_window(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_window DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    CALL pyqueue__check_duration('window', in_window, FALSE);
    IF in_window > 3600 THEN CALL pyqueue__raise('invalid_argument', 'window must not exceed 1 hour'); END IF;
    INSERT INTO pyqueue_notify (queue_name, notify_window)
    VALUES (v_queue, COALESCE(in_window, 0.05))
    ON DUPLICATE KEY UPDATE notify_window = VALUES(notify_window);
END //

-- queue_next_scheduled_at: when the next message (of in_kinds, a JSON array; NULL = any) becomes eligible, counting
-- delays and reservation expiries. One row: next_scheduled_at (UTC), wait_s (0 when one is ready); both NULL when
-- none or paused. Plain reads.
DROP PROCEDURE IF EXISTS queue_next_scheduled_at //
CREATE PROCEDURE queue_next_scheduled_at(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kinds LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_now, v_next DATETIME(6);
    CALL pyqueue__check_clock();
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    CALL pyqueue__kinds(in_kinds, v_kinds);
    SET v_now = UTC_TIMESTAMP(6);
    IF NOT v_paused THEN CALL pyqueue__next_at(v_queue, v_kinds, v_now, v_next); END IF;
    SELECT v_next AS next_scheduled_at,
           GREATEST(TIMESTAMPDIFF(MICROSECOND, v_now, v_next), 0) / 1e6 AS wait_s;
END //

-- queue_wait: blocks until a message (of in_kinds, NULL = any) is eligible, or in_timeout seconds pass (NULL = 1, at
-- most 3600). One row: ready = 1, or 0 at the timeout. Checks every in_poll seconds (NULL = 0.05, at least 0.001) and
-- right when a delay or reservation falls due: one round trip per wait. Call it in autocommit mode or READ COMMITTED
-- (a REPEATABLE READ snapshot never sees new messages). Takes no locks.
DROP PROCEDURE IF EXISTS queue_wait //
CREATE PROCEDURE queue_wait(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN in_timeout DECIMAL(20,6),
    IN in_poll    DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_poll, v_left DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_now, v_next, v_deadline DATETIME(6);
    DECLARE v_ready INT DEFAULT 0;
    CALL pyqueue__check_clock();
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    CALL pyqueue__kinds(in_kinds, v_kinds);
    CALL pyqueue__check_duration('timeout', in_timeout, FALSE);
    CALL pyqueue__check_duration('poll', in_poll, TRUE);
    IF in_poll < 0.001 THEN CALL pyqueue__raise('invalid_argument', 'poll must be at least 1 millisecond'); END IF;
    IF in_timeout > 3600 THEN CALL pyqueue__raise('invalid_argument', 'timeout must not exceed 1 hour'); END IF;
    SET v_poll = COALESCE(in_poll, 0.05);
    SET v_deadline = UTC_TIMESTAMP(6)
                     + INTERVAL CAST(COALESCE(in_timeout, 1) * 1000000 AS SIGNED) MICROSECOND;
    waiting: LOOP
        SET v_now = UTC_TIMESTAMP(6), v_next = NULL;
        SELECT q.paused INTO v_paused FROM pyqueue_queue q WHERE q.queue_name = v_queue;
        IF NOT v_paused THEN CALL pyqueue__next_at(v_queue, v_kinds, v_now, v_next); END IF;
        IF v_next <= v_now THEN
            SET v_ready = 1;
            LEAVE waiting;
        END IF;
        SET v_left = TIMESTAMPDIFF(MICROSECOND, v_now, v_deadline) / 1e6;
        IF v_left <= 0 THEN LEAVE waiting; END IF;
        DO SLEEP(LEAST(v_poll, v_left,
                       COALESCE(TIMESTAMPDIFF(MICROSECOND, v_now, v_next) / 1e6, v_poll)));
    END LOOP;
    SELECT v_ready AS ready;
END //

DELIMITER ;
