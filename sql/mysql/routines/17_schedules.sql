-- ==== schedules ====
-- Recurring messages, every n seconds or on a cron expression (UTC): each occurrence is an ordinary message, and
-- committing it pushes the next.

DELIMITER //

-- pyqueue__cron_field: the bit mask (bit v set = value v matches) of one cron field: '*', 'a', 'a-b', with '/step'
-- after '*', 'a' or 'a-b', and comma lists of those. Raises invalid_argument naming the field. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__cron_field //
CREATE PROCEDURE pyqueue__cron_field(
    IN  in_field LONGTEXT    CHARACTER SET utf8mb4,
    IN  in_name  VARCHAR(16) CHARACTER SET utf8mb4,
    IN  in_min   INT,
    IN  in_max   INT,
    OUT out_mask BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_rest, v_part, v_range LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_lo, v_hi, v_step INT;
    SET out_mask = 0, v_rest = in_field;
    parts: LOOP
        SET v_part = SUBSTRING_INDEX(v_rest, ',', 1);
        IF NOT (v_part REGEXP '^([*]|[0-9]{1,2}(-[0-9]{1,2})?)(/[0-9]{1,2})?\\z') THEN
            CALL pyqueue__raise('invalid_argument',
                CONCAT('cron ', in_name, ' field "', LEFT(in_field, 30), '" is not *, n, a-b, */s, a/s or a-b/s'));
        END IF;
        SET v_range = SUBSTRING_INDEX(v_part, '/', 1);
        SET v_step = IF(LOCATE('/', v_part) > 0, CAST(SUBSTRING_INDEX(v_part, '/', -1) AS UNSIGNED), 1);
        IF v_range = '*' THEN
            SET v_lo = in_min, v_hi = in_max;
        ELSE
            SET v_lo = CAST(SUBSTRING_INDEX(v_range, '-', 1) AS UNSIGNED);
            SET v_hi = IF(LOCATE('-', v_range) > 0, CAST(SUBSTRING_INDEX(v_range, '-', -1) AS UNSIGNED),
                          IF(LOCATE('/', v_part) > 0, in_max, v_lo));
        END IF;
        IF v_lo < in_min OR v_hi > in_max OR v_lo > v_hi OR v_step < 1 THEN
            CALL pyqueue__raise('invalid_argument',
                CONCAT('cron ', in_name, ' field "', LEFT(in_field, 30), '" is out of range ', in_min, '-', in_max));
        END IF;
        WHILE v_lo <= v_hi DO
            SET out_mask = out_mask | (1 << v_lo);
            SET v_lo = v_lo + v_step;
        END WHILE;
        IF LOCATE(',', v_rest) = 0 THEN LEAVE parts; END IF;
        SET v_rest = SUBSTRING(v_rest, LOCATE(',', v_rest) + 1);
    END LOOP;
END //

-- pyqueue__cron_next: the first minute after in_after (UTC) matching the 5-field cron expression (day-of-week 0-7, 0
-- and 7 Sunday; two restricted day fields match either, as Vixie cron), found with set operations: the first matching
-- day of the next 8 years, then its first matching minute. invalid_argument for a malformed expression or one that
-- never matches. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__cron_next //
CREATE PROCEDURE pyqueue__cron_next(
    IN  in_cron  LONGTEXT CHARACTER SET utf8mb4,
    IN  in_after DATETIME(6),
    OUT out_next DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_cron LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_min, v_hour, v_dom, v_mon, v_dow BIGINT;
    DECLARE v_or, v_mod, v_first, v_later INT;
    DECLARE v_t DATETIME;
    DECLARE v_today, v_day DATE;
    IF in_cron IS NULL THEN CALL pyqueue__raise('invalid_argument', 'cron must not be NULL'); END IF;
    SET v_cron = REGEXP_REPLACE(TRIM(in_cron), ' +', ' ');
    IF CHAR_LENGTH(v_cron) - CHAR_LENGTH(REPLACE(v_cron, ' ', '')) <> 4 THEN
        CALL pyqueue__raise('invalid_argument',
            'cron must have 5 fields (minute hour day-of-month month day-of-week)');
    END IF;
    CALL pyqueue__cron_field(SUBSTRING_INDEX(v_cron, ' ', 1), 'minute', 0, 59, v_min);
    CALL pyqueue__cron_field(SUBSTRING_INDEX(SUBSTRING_INDEX(v_cron, ' ', 2), ' ', -1), 'hour', 0, 23, v_hour);
    CALL pyqueue__cron_field(SUBSTRING_INDEX(SUBSTRING_INDEX(v_cron, ' ', 3), ' ', -1), 'day-of-month', 1, 31, v_dom);
    CALL pyqueue__cron_field(SUBSTRING_INDEX(SUBSTRING_INDEX(v_cron, ' ', 4), ' ', -1), 'month', 1, 12, v_mon);
    CALL pyqueue__cron_field(SUBSTRING_INDEX(v_cron, ' ', -1), 'day-of-week', 0, 7, v_dow);
    IF v_dow & 128 <> 0 THEN SET v_dow = (v_dow | 1) & 127; END IF;
    SET v_or = LEFT(SUBSTRING_INDEX(SUBSTRING_INDEX(v_cron, ' ', 3), ' ', -1), 1) <> '*'
               AND LEFT(SUBSTRING_INDEX(v_cron, ' ', -1), 1) <> '*';
    SET v_t = CAST(DATE_FORMAT(in_after, '%Y-%m-%d %H:%i:00') AS DATETIME) + INTERVAL 1 MINUTE;
    SET v_today = DATE(v_t), v_mod = HOUR(v_t) * 60 + MINUTE(v_t);
    -- the first minute of a day the hour and minute fields allow, and the first one from v_t on (NULL: none left
    -- today), found once for the day search and the time
    SELECT MIN(t.n), MIN(IF(t.n >= v_mod, t.n, NULL)) INTO v_first, v_later
      FROM (SELECT h.n * 60 + m1.n + 10 * m10.n AS n
              FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
                    UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
                    UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
                    UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15
                    UNION ALL SELECT 16 UNION ALL SELECT 17 UNION ALL SELECT 18 UNION ALL SELECT 19
                    UNION ALL SELECT 20 UNION ALL SELECT 21 UNION ALL SELECT 22 UNION ALL SELECT 23) h,
                   (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                    UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) m1,
                   (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                    UNION ALL SELECT 5) m10
             WHERE (v_hour >> h.n) & 1 = 1 AND (v_min >> (m1.n + 10 * m10.n)) & 1 = 1) AS t;
    SELECT MIN(days.d) INTO v_day
      FROM (SELECT v_today + INTERVAL (a.n + 10 * b.n + 100 * c.n + 1000 * e.n) DAY AS d
              FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                    UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a,
                   (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                    UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b,
                   (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                    UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c,
                   (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2) e
             WHERE a.n + 10 * b.n + 100 * c.n + 1000 * e.n <= 366 * 8) AS days
     WHERE (v_mon >> MONTH(days.d)) & 1 = 1
       AND IF(v_or,
              (v_dom >> DAYOFMONTH(days.d)) & 1 = 1 OR (v_dow >> (DAYOFWEEK(days.d) - 1)) & 1 = 1,
              (v_dom >> DAYOFMONTH(days.d)) & 1 = 1 AND (v_dow >> (DAYOFWEEK(days.d) - 1)) & 1 = 1)
       AND (days.d > v_today OR v_later IS NOT NULL);
    IF v_day IS NULL THEN
        CALL pyqueue__raise('invalid_argument', CONCAT('cron "', LEFT(in_cron, 40), '" matches no day in the next 8 years'));
    END IF;
    SET out_next = CAST(v_day AS DATETIME(6)) + INTERVAL IF(v_day > v_today, v_first, v_later) MINUTE;
END //

-- pyqueue__schedule_after: the next occurrence of a schedule after in_after: every_s: the next multiple of every_s
-- seconds since 1970-01-01 UTC (integer division, DIV: a '/' would round to the caller's div_precision_increment);
-- cron: pyqueue__cron_next. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__schedule_after //
CREATE PROCEDURE pyqueue__schedule_after(
    IN  in_every_s BIGINT,
    IN  in_cron    LONGTEXT CHARACTER SET utf8mb4,
    IN  in_after   DATETIME(6),
    OUT out_next   DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    IF in_every_s IS NOT NULL THEN
        SET out_next = CAST('1970-01-01 00:00:00' AS DATETIME(6))
            + INTERVAL ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', in_after) DIV (in_every_s * 1000000) + 1)
                        * in_every_s) SECOND;
    ELSE
        CALL pyqueue__cron_next(in_cron, in_after, out_next);
    END IF;
END //

-- pyqueue__schedule_next: called by queue_commit before its DELETE (and so by every routine that ends, moves or fails
-- a message: the other commits, pyqueue__dead_letter, queue_fail's retry, queue_move, queue_cancel, queue_remove; after
-- the DELETE works as well: the key and next_at decide). When the message is the pending occurrence of a
-- schedule (key = p_key @ next_at), one conditional UPDATE advances next_at (one of two racing calls wins) and the
-- winner pushes the next occurrence (dedup absorbs a repeat). If the DELETE then fails or never runs, the old
-- occurrence comes back and its later commit pushes nothing: no stall, no duplicate.
-- Locks: the schedule row, then the new occurrence, each for one statement.
DROP PROCEDURE IF EXISTS pyqueue__schedule_next //
CREATE PROCEDURE pyqueue__schedule_next(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_base VARCHAR(234) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_at, v_next, v_now DATETIME(6);
    DECLARE v_every BIGINT;
    DECLARE v_cron VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_payload LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_found INT DEFAULT 1;
    IF CHAR_LENGTH(in_key) >= 22
       AND RIGHT(in_key, 21) REGEXP '^@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\\z' THEN
        SET v_base = LEFT(in_key, CHAR_LENGTH(in_key) - 21);
        SET v_at = STR_TO_DATE(SUBSTRING(RIGHT(in_key, 21), 2, 19), '%Y-%m-%dT%H:%i:%s');
        BEGIN
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
            SELECT s.every_s, s.cron, s.payload INTO v_every, v_cron, v_payload
              FROM pyqueue_schedule s
             WHERE s.queue_name = in_queue AND s.p_key = v_base AND s.p_kind = in_kind
               AND s.next_at = v_at;
        END;
        IF v_found = 1 THEN
            SET v_now = UTC_TIMESTAMP(6);
            CALL pyqueue__schedule_after(v_every, v_cron, GREATEST(v_at, v_now), v_next);
            UPDATE pyqueue_schedule SET next_at = v_next
             WHERE queue_name = in_queue AND p_key = v_base AND p_kind = in_kind AND next_at = v_at;
            IF ROW_COUNT() = 1 THEN
                INSERT IGNORE INTO pyqueue_message
                       (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                        scheduled_at_initially, created_at, attempts)
                VALUES (in_queue, CONCAT(v_base, '@', DATE_FORMAT(v_next, '%Y-%m-%dT%H:%i:%sZ')), in_kind,
                        v_payload, 0, v_next, v_next, v_next, v_now, 0);
            END IF;
        END IF;
    END IF;
END //

-- pyqueue__schedule: creates or replaces a schedule and pushes its first occurrence (the next after now); the
-- replaced schedule's pending occurrence goes unless reserved. Called again with the same definition (payload, every
-- or cron) it changes nothing while the pending occurrence is live, even one ahead of the clock (a test clock moves
-- stored times, not the server's) (next_at: its time), and repairs a schedule whose pending occurrence is gone (the
-- next after now is pushed). The clock is read again once the schedule row is locked. Result: one row, next_at.
-- Locks: the schedule row first (read with a lock, as PostgreSQL's FOR UPDATE: a replacement waits for another under
-- way and then replaces what it wrote, its pending occurrence included), then the old and new occurrence and a shared
-- lock on the queue row; in autocommit mode in a transaction of its own at READ COMMITTED (no gap locks: creators of
-- new schedules never deadlock on the gap the missing rows share), run again on a deadlock.
DROP PROCEDURE IF EXISTS pyqueue__schedule //
CREATE PROCEDURE pyqueue__schedule(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_every_s BIGINT,
    IN in_cron    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(234) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now, v_next, v_old, v_result DATETIME(6);
    DECLARE v_oldkey VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_oldid BIGINT;
    DECLARE v_same, v_found, v_again, v_own, v_retry INT;
    DECLARE v_tries INT DEFAULT 0;
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_name('p_key', in_key, 234);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__schedule_after(in_every_s, in_cron, v_now, v_next);
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            CALL pyqueue__begin_read_committed(v_own);
            REPEAT
                SET v_again = 0;
                -- a locking read: the latest row, whatever the caller's snapshot
                SELECT COUNT(*), MAX(s.next_at),
                       MAX(CAST(JSON_EXTRACT(s.payload, '$') AS BINARY) = CAST(JSON_EXTRACT(in_payload, '$') AS BINARY)
                           AND s.every_s <=> in_every_s AND CAST(s.cron AS BINARY) <=> CAST(in_cron AS BINARY))
                  INTO v_found, v_old, v_same FROM pyqueue_schedule s
                 WHERE s.queue_name = v_queue AND s.p_key = v_key AND s.p_kind = v_kind
                   FOR UPDATE;
                SET v_now = UTC_TIMESTAMP(6);
                CALL pyqueue__schedule_after(in_every_s, in_cron, v_now, v_next);
                IF v_same = 1 AND EXISTS (SELECT 1 FROM pyqueue_message m
                                           WHERE m.queue_name = v_queue AND m.p_kind = v_kind
                                             AND m.p_key = CONCAT(v_key, '@', DATE_FORMAT(v_old, '%Y-%m-%dT%H:%i:%sZ'))) THEN
                    SET v_result = v_old;  -- the same schedule, its pending occurrence live: nothing to do
                ELSE
                    IF v_found = 0 THEN
                        BEGIN
                            -- created meanwhile by another transaction (it committed): read again, locked
                            DECLARE EXIT HANDLER FOR 1062 SET v_again = 1;
                            INSERT INTO pyqueue_schedule (queue_name, p_key, p_kind, payload, every_s, cron, next_at, created_at)
                            VALUES (v_queue, v_key, v_kind, in_payload, in_every_s, in_cron, v_next, v_now);
                        END;
                    ELSE
                        UPDATE pyqueue_schedule SET payload = in_payload, every_s = in_every_s, cron = in_cron, next_at = v_next
                         WHERE queue_name = v_queue AND p_key = v_key AND p_kind = v_kind;
                        SET v_oldkey = CONCAT(v_key, '@', DATE_FORMAT(v_old, '%Y-%m-%dT%H:%i:%sZ'));
                        SELECT COALESCE(MAX(m.id), 0) INTO v_oldid FROM pyqueue_message m
                         WHERE m.queue_name = v_queue AND m.p_key = v_oldkey AND m.p_kind = v_kind;
                        DELETE FROM pyqueue_message WHERE id = v_oldid AND reserve_token IS NULL;
                    END IF;
                    IF v_again = 0 THEN
                        INSERT IGNORE INTO pyqueue_message
                               (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                                scheduled_at_initially, created_at, attempts)
                        VALUES (v_queue, CONCAT(v_key, '@', DATE_FORMAT(v_next, '%Y-%m-%dT%H:%i:%sZ')), v_kind,
                                in_payload, 0, v_next, v_next, v_next, v_now, 0);
                        SET v_result = v_next;
                    END IF;
                END IF;
            UNTIL v_again = 0 END REPEAT;
            IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_result AS next_at;
END //

-- queue_schedule_every: a message (in_key @ time, in_kind, in_payload) every in_every_s seconds (whole, 1 s to 100
-- years), at its multiples since 1970-01-01 UTC. Result: one row, next_at. Locks as pyqueue__schedule.
DROP PROCEDURE IF EXISTS queue_schedule_every //
CREATE PROCEDURE queue_schedule_every(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_every_s DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__check_clock();
    IF in_every_s IS NULL THEN CALL pyqueue__raise('invalid_argument', 'every must not be NULL'); END IF;
    CALL pyqueue__check_duration('every', in_every_s, TRUE);
    IF in_every_s < 1 OR in_every_s <> TRUNCATE(in_every_s, 0) THEN
        CALL pyqueue__raise('invalid_argument', 'every must be a whole number of seconds, at least 1');
    END IF;
    CALL pyqueue__schedule(in_queue, in_key, in_kind, in_payload, CAST(in_every_s AS SIGNED), NULL);
END //

-- queue_schedule_cron: a message (in_key @ time, in_kind, in_payload) at every minute matching the 5-field cron
-- expression in_cron (UTC). Result: one row, next_at = the time of the first occurrence.
-- Locks as pyqueue__schedule.
DROP PROCEDURE IF EXISTS queue_schedule_cron //
CREATE PROCEDURE queue_schedule_cron(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_cron    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__check_clock();
    IF in_cron IS NULL OR CHAR_LENGTH(in_cron) > 255 THEN
        CALL pyqueue__raise('invalid_argument', 'cron must not be NULL or longer than 255 characters');
    END IF;
    CALL pyqueue__schedule(in_queue, in_key, in_kind, in_payload, NULL, in_cron);
END //

-- queue_unschedule: removes the schedule and its pending occurrence unless reserved. Result: one row, unscheduled =
-- 1, or 0 when absent. Locks: the schedule row and the occurrence, each for one statement.
DROP PROCEDURE IF EXISTS queue_unschedule //
CREATE PROCEDURE queue_unschedule(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(234) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_old DATETIME(6);
    DECLARE v_oldkey VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_oldid BIGINT;
    DECLARE v_done INT DEFAULT 0;
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_name('p_key', in_key, 234);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SELECT MAX(s.next_at) INTO v_old FROM pyqueue_schedule s
     WHERE s.queue_name = v_queue AND s.p_key = v_key AND s.p_kind = v_kind;
    IF v_old IS NOT NULL THEN
        DELETE FROM pyqueue_schedule WHERE queue_name = v_queue AND p_key = v_key AND p_kind = v_kind;
        SET v_done = ROW_COUNT();
        SET v_oldkey = CONCAT(v_key, '@', DATE_FORMAT(v_old, '%Y-%m-%dT%H:%i:%sZ'));
        SELECT COALESCE(MAX(m.id), 0) INTO v_oldid FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_oldkey AND m.p_kind = v_kind;
        DELETE FROM pyqueue_message WHERE id = v_oldid AND reserve_token IS NULL;
    END IF;
    SELECT v_done AS unscheduled;
END //

-- queue_schedules: the schedules of a queue (all when NULL), by queue, key, kind: queue, p_key, p_kind, payload,
-- every_s, cron, next_at. Plain read.
DROP PROCEDURE IF EXISTS queue_schedules //
CREATE PROCEDURE queue_schedules(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    IF in_queue IS NOT NULL THEN CALL pyqueue__check_queue(in_queue); END IF;
    SET v_queue = in_queue;
    SELECT s.queue_name AS `queue`, s.p_key, s.p_kind, s.payload, s.every_s, s.cron, s.next_at
      FROM pyqueue_schedule s
     WHERE v_queue IS NULL OR s.queue_name = v_queue
     ORDER BY s.queue_name, s.p_key, s.p_kind;
END //

DELIMITER ;
