-- ==== queues ====
-- Create a queue or change its settings, read them back, drop it, pause and resume it, count its messages.

DELIMITER //

-- pyqueue__set_paused: queue_pause (in_paused TRUE) and queue_resume (FALSE) of the existing queue in_queue.
-- Locks: the queue row, for one statement; in autocommit mode a deadlock victim runs again.
DROP PROCEDURE IF EXISTS pyqueue__set_paused //
CREATE PROCEDURE pyqueue__set_paused(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_paused BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_retry INT;
    DECLARE v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            UPDATE pyqueue_queue SET paused = in_paused WHERE queue_name = v_queue;
        END;
    UNTIL v_retry = 0 END REPEAT;
END //

-- queue_create: creates the queue (NULL = the default: 30 s, 10 attempts, no dead-letter queue, no history) or
-- changes an existing one's settings (NULL leaves one as it is; queue_reset_setting restores a default; paused,
-- dead_count, created_at kept). The dead-letter queue must exist and differ. No result set.
-- Locks: a shared lock on the dead-letter queue's row, then the queue row, read with a lock before it is changed: a
-- visibility_timeout is checked against the max_reservation the change keeps (one lowered meanwhile is waited for
-- and refused as invalid_argument, not by the table's CHECK). In autocommit mode in a transaction of its own at READ
-- COMMITTED, run again on a deadlock.
DROP PROCEDURE IF EXISTS queue_create //
CREATE PROCEDURE queue_create(
    IN in_queue              LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_visibility_timeout DECIMAL(20,6),
    IN in_max_attempts       DECIMAL(65,30),
    IN in_dead_letter_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_history_retention  DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_vis, v_maxres DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_own, v_retry, v_found, v_new INT;
    DECLARE v_tries INT DEFAULT 0;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_name('queue', in_queue, 128);
    CALL pyqueue__check_duration('visibility_timeout', in_visibility_timeout, TRUE);
    CALL pyqueue__check_duration('history_retention', in_history_retention, FALSE);
    IF in_max_attempts < 1 THEN CALL pyqueue__raise('invalid_argument', 'max_attempts must be at least 1'); END IF;
    CALL pyqueue__check_int('max_attempts', in_max_attempts, 1, 2147483647);
    IF in_dead_letter_queue IS NOT NULL THEN
        CALL pyqueue__check_name('dead_letter_queue', in_dead_letter_queue, 128);
        IF in_dead_letter_queue = in_queue THEN CALL pyqueue__raise('invalid_argument', 'a queue cannot be its own dead_letter_queue'); END IF;
        CALL pyqueue__queue(in_dead_letter_queue, v_vis, v_max, v_dlq, v_paused);
    END IF;
    SET v_vis = COALESCE(in_visibility_timeout, 30);
    SET v_max = COALESCE(in_max_attempts, 10);
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            CALL pyqueue__begin_read_committed(v_own);
            REPEAT
                SET v_new = 0;
                -- the queue row locked (a locking read: the latest row, whatever the caller's snapshot), so that the
                -- visibility_timeout is checked against the max_reservation the change keeps
                SELECT COUNT(*), COALESCE(MAX(q.max_reservation), 43200) INTO v_found, v_maxres
                  FROM pyqueue_queue q WHERE q.queue_name = in_queue FOR UPDATE;
                -- a visibility_timeout above the queue's max_reservation (a new queue: the default, 12 hours) is refused
                IF in_visibility_timeout > v_maxres THEN
                    CALL pyqueue__raise('invalid_argument',
                        CONCAT('visibility_timeout is longer than the queue''s max_reservation (',
                               TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST(v_maxres AS CHAR))), ' s)'));
                END IF;
                IF v_found = 0 THEN
                    BEGIN
                        -- created meanwhile by another transaction (it committed): read again, locked
                        DECLARE EXIT HANDLER FOR 1062 SET v_new = 1;
                        INSERT INTO pyqueue_queue
                               (queue_name, visibility_timeout, max_attempts, dead_letter_queue,
                                history_retention, paused, dead_count, created_at, max_reservation)
                        VALUES (in_queue, v_vis, v_max, in_dead_letter_queue, in_history_retention,
                                FALSE, 0, UTC_TIMESTAMP(6), v_maxres);
                    END;
                ELSE
                    UPDATE pyqueue_queue
                       SET visibility_timeout = COALESCE(in_visibility_timeout, visibility_timeout),
                           max_attempts       = COALESCE(in_max_attempts, max_attempts),
                           dead_letter_queue  = COALESCE(in_dead_letter_queue, dead_letter_queue),
                           history_retention  = COALESCE(in_history_retention, history_retention)
                     WHERE queue_name = in_queue;
                END IF;
            UNTIL v_new = 0 END REPEAT;
            IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
END //

-- queue_reset_setting: puts one setting back to its default: 'visibility_timeout' (30 s), 'max_attempts' (10),
-- 'dead_letter_queue', 'history_retention' or 'result_retention' (none), 'max_reservation' (12 hours), 'max_payload'
-- (1 MiB). Refused
-- (invalid_argument) when the default visibility_timeout would be above the max_reservation, or the default
-- max_reservation below the visibility_timeout. No result set. Locks: the queue row, one statement.
DROP PROCEDURE IF EXISTS queue_reset_setting //
CREATE PROCEDURE queue_reset_setting(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_setting LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_setting VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_queue(in_queue);
    -- Compared as bytes: utf8mb4_bin pads with spaces, and 'max_attempts ' is no setting name.
    IF in_setting IS NULL OR CAST(in_setting AS BINARY) NOT IN ('visibility_timeout', 'max_attempts',
                                                              'dead_letter_queue', 'history_retention',
                                                              'max_reservation', 'max_payload',
                                                              'result_retention') THEN
        CALL pyqueue__raise('invalid_argument',
            'setting must be one of visibility_timeout, max_attempts, dead_letter_queue, history_retention, max_reservation, max_payload, result_retention');
    END IF;
    SET v_queue = in_queue, v_setting = in_setting;
    UPDATE pyqueue_queue
       SET visibility_timeout = IF(v_setting = 'visibility_timeout', 30, visibility_timeout),
           max_attempts       = IF(v_setting = 'max_attempts', 10, max_attempts),
           dead_letter_queue  = IF(v_setting = 'dead_letter_queue', NULL, dead_letter_queue),
           history_retention  = IF(v_setting = 'history_retention', NULL, history_retention),
           max_reservation    = IF(v_setting = 'max_reservation', 43200, max_reservation),
           max_payload        = IF(v_setting = 'max_payload', 1048576, max_payload),
           result_retention   = IF(v_setting = 'result_retention', NULL, result_retention)
     WHERE queue_name = v_queue
       AND NOT (v_setting = 'visibility_timeout' AND max_reservation < 30)
       AND NOT (v_setting = 'max_reservation' AND visibility_timeout > 43200)
       -- (kept while messages of the queue have parents or children: see queue_set_result_retention)
       AND NOT (v_setting = 'result_retention'
                AND EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name = v_queue));
    IF ROW_COUNT() = 0 AND v_setting IN ('visibility_timeout', 'max_reservation')
       AND EXISTS (SELECT 1 FROM pyqueue_queue q
                    WHERE q.queue_name = v_queue
                      AND ((v_setting = 'visibility_timeout' AND q.max_reservation < 30)
                           OR (v_setting = 'max_reservation' AND q.visibility_timeout > 43200))) THEN
        CALL pyqueue__raise('invalid_argument',
            IF(v_setting = 'visibility_timeout',
               'the default visibility_timeout (30 s) is longer than the queue''s max_reservation',
               'the default max_reservation (43200 s) is shorter than the queue''s visibility_timeout'));
    END IF;
    IF v_setting = 'result_retention'
       AND EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue AND q.result_retention IS NOT NULL)
       AND EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name = v_queue) THEN
        CALL pyqueue__raise('invalid_argument',
                            'messages of the queue have parents or children: it keeps results until they are gone');
    END IF;
END //

-- queue_settings: the settings of a queue (every queue when NULL), ordered by name: queue, visibility_timeout (s),
-- max_attempts, dead_letter_queue, history_retention (s), paused, notify_window (s), max_reservation (s),
-- max_payload (bytes), result_retention (s). Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_settings //
CREATE PROCEDURE queue_settings(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    IF in_queue IS NOT NULL THEN CALL pyqueue__check_queue(in_queue); END IF;
    SET v_queue = in_queue;
    SELECT q.queue_name AS `queue`, q.visibility_timeout, q.max_attempts, q.dead_letter_queue,
           q.history_retention, q.paused, COALESCE(n.notify_window, 0.05) AS notify_window,
           q.max_reservation, q.max_payload, q.result_retention
      FROM pyqueue_queue q
      LEFT JOIN pyqueue_notify n ON n.queue_name = q.queue_name
     WHERE v_queue IS NULL OR q.queue_name = v_queue
     ORDER BY q.queue_name;
END //

-- queue_set_max_reservation: the longest reservation timeout a caller may ask for on the queue (reserve paths,
-- queue_extend), in seconds; NULL = the default, 12 hours (43200). Above zero, at most 100 years, and not below the
-- queue's visibility_timeout (invalid_argument). No result set. Locks: the queue row, for one statement.
DROP PROCEDURE IF EXISTS queue_set_max_reservation //
CREATE PROCEDURE queue_set_max_reservation(
    IN in_queue           LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_max_reservation DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_new DECIMAL(20,6);
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_duration('max_reservation', in_max_reservation, TRUE);
    SET v_queue = in_queue, v_new = COALESCE(in_max_reservation, 43200);
    -- the visibility_timeout re-checked under the row lock, in the statement that sets it
    UPDATE pyqueue_queue SET max_reservation = v_new WHERE queue_name = v_queue AND visibility_timeout <= v_new;
    IF ROW_COUNT() = 0
       AND EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue AND q.visibility_timeout > v_new) THEN
        CALL pyqueue__raise('invalid_argument', 'max_reservation must not be below the queue''s visibility_timeout');
    END IF;
END //

-- queue_set_max_payload: the largest payload (bytes of its JSON text) a producer may write into the queue; NULL = the
-- default, 1048576 (1 MiB); 1 to 268435456 (256 MiB). No result set. Locks: the queue row, for one statement.
DROP PROCEDURE IF EXISTS queue_set_max_payload //
CREATE PROCEDURE queue_set_max_payload(
    IN in_queue       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_max_payload DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_int('max_payload', in_max_payload, 1, 268435456);
    SET v_queue = in_queue;
    UPDATE pyqueue_queue SET max_payload = COALESCE(in_max_payload, 1048576) WHERE queue_name = v_queue;
END //

-- queue_drop: deletes the queue, its messages, limits, schedules and wakeup row (ON DELETE CASCADE) in one statement;
-- refused while another queue names it as dead_letter_queue. No result set. Pushes lock the queue row before a
-- message row, as this does; a transaction that changed a message and then locks the queue row takes them the other
-- way and one of the two is a deadlock victim (1213): in autocommit mode the drop runs again (up to 10 times), inside
-- your transaction it is yours to retry.
-- Locks: the queue row, then its messages and other rows, for one statement (or until your transaction ends).
DROP PROCEDURE IF EXISTS queue_drop //
CREATE PROCEDURE queue_drop(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_user VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_users, v_own, v_retry INT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE v_deps LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_gcl BIGINT;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    SELECT COUNT(*), MIN(q.queue_name) INTO v_users, v_user
      FROM pyqueue_queue q
     WHERE q.dead_letter_queue = v_queue;
    IF v_users > 0 THEN CALL pyqueue__raise('invalid_argument', CONCAT('queue is the dead_letter_queue of ', v_user)); END IF;
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DELETE FROM pyqueue_queue WHERE queue_name = v_queue;
        END;
    UNTIL v_retry = 0 END REPEAT;
    -- its messages' children elsewhere are cancelled, their rows as children go
    SET v_gcl = @@SESSION.group_concat_max_len, SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
    SELECT CONCAT('[', GROUP_CONCAT(DISTINCT JSON_ARRAY(d.p_key, d.p_kind) SEPARATOR ','), ']') INTO v_deps
      FROM pyqueue_dependency d WHERE d.queue_name = v_queue;
    SET SESSION group_concat_max_len = v_gcl;
    CALL pyqueue__deps_left_many(v_queue, v_deps, FALSE, 'was dropped with its queue');
END //

-- queue_pause: pop and reserve hand out nothing (an empty result set) until queue_resume; pushes, commits, rollbacks,
-- extends and moves still work. No result set. Locks: as pyqueue__set_paused.
DROP PROCEDURE IF EXISTS queue_pause //
CREATE PROCEDURE queue_pause(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__set_paused(in_queue, TRUE);
END //

-- queue_resume: undoes queue_pause. No result set. Locks: as pyqueue__set_paused.
DROP PROCEDURE IF EXISTS queue_resume //
CREATE PROCEDURE queue_resume(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__set_paused(in_queue, FALSE);
END //

-- pyqueue__stats_range: queue_stats's bounded counts of in_queue's messages: in_later FALSE, those at or before in_now
-- (ready); TRUE, those after it (delayed and reserved) times 16384 plus the reserved ones among them (both at most
-- 10,001: one read for the two). Reads the due index in time order, at most 10,001 rows, so a count above 10,000
-- says only "more than 10,000" (queue_stats estimates it). Plain reads.
DROP FUNCTION IF EXISTS pyqueue__stats_range //
CREATE FUNCTION pyqueue__stats_range(
    in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    in_now   DATETIME(6),
    in_later BOOLEAN)
RETURNS BIGINT
READS SQL DATA
SQL SECURITY INVOKER
BEGIN
    DECLARE v_n BIGINT;
    IF NOT in_later THEN
        SELECT COUNT(*) INTO v_n
          FROM (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                 WHERE m.queue_name = in_queue AND m.scheduled_at <= in_now
                 ORDER BY m.scheduled_at LIMIT 10001) r;
    ELSE
        SELECT COUNT(*) * 16384 + COUNT(l.reserve_token) INTO v_n
          FROM (SELECT m.reserve_token FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                 WHERE m.queue_name = in_queue AND m.scheduled_at > in_now
                 ORDER BY m.scheduled_at LIMIT 10001) l;
    END IF;
    RETURN v_n;
END //

-- queue_stats: one row per queue (every queue by name when in_queue is NULL): ready, `delayed`, reserved (unexpired),
-- dead (dead-lettered from here so far), oldest_ready_age_s (DOUBLE, NULL when none), paused. Plain reads, no locks.
-- Bounded: the queue's ready messages, and its later ones (delayed and reserved), are each read through the due index
-- in time order, at most 10,001 of each (pyqueue__stats_range), plus one probe for the oldest. A range of at most
-- 10,000 is counted exactly; a larger one is estimated, never below 10,001: InnoDB's estimate of the table's rows
-- (information_schema.TABLES.TABLE_ROWS) shared evenly among the queues that hold messages, less the queue's other
-- range; reserved, when the later range is larger, counts those among its 10,001 that come due first. Counting
-- every message read the whole queue (186 ms at best at 100,000 live messages, 68 ms bounded, on a loaded machine:
-- bench/latest/stats-bounded.md).
DROP PROCEDURE IF EXISTS queue_stats //
CREATE PROCEDURE queue_stats(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now DATETIME(6);
    DECLARE v_each DOUBLE;
    CALL pyqueue__check_clock();
    IF in_queue IS NOT NULL THEN CALL pyqueue__check_queue(in_queue); END IF;
    SET v_now = UTC_TIMESTAMP(6), v_queue = in_queue;
    SELECT COALESCE(MAX(t.TABLE_ROWS), 0)
           / GREATEST((SELECT COUNT(*) FROM pyqueue_queue q
                        WHERE EXISTS (SELECT 1 FROM pyqueue_message m WHERE m.queue_name = q.queue_name)), 1)
      INTO v_each
      FROM information_schema.TABLES t
     WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_NAME = 'pyqueue_message';
    SELECT s.queue_name AS `queue`,
           CASE WHEN s.r <= 10000 THEN s.r
                WHEN s.l DIV 16384 <= 10000 THEN GREATEST(10001, ROUND(v_each) - s.l DIV 16384)
                ELSE GREATEST(10001, ROUND(v_each / 2)) END AS ready,
           CASE WHEN s.l DIV 16384 <= 10000 THEN s.l DIV 16384
                WHEN s.r <= 10000 THEN GREATEST(10001, ROUND(v_each) - s.r)
                ELSE GREATEST(10001, ROUND(v_each / 2)) END - s.l MOD 16384 AS `delayed`,
           s.l MOD 16384 AS reserved,
           s.dead_count AS dead,
           TIMESTAMPDIFF(MICROSECOND, s.oldest, v_now) / 1e6 AS oldest_ready_age_s,
           s.paused AS paused
      FROM (SELECT q.queue_name, q.dead_count, q.paused,  -- GROUP BY: made once, each function called once a queue
                   pyqueue__stats_range(q.queue_name, v_now, FALSE) AS r,
                   pyqueue__stats_range(q.queue_name, v_now, TRUE) AS l,
                   (SELECT MIN(m.scheduled_at) FROM pyqueue_message m
                     WHERE m.queue_name = q.queue_name AND m.scheduled_at <= v_now) AS oldest
              FROM pyqueue_queue q
             WHERE v_queue IS NULL OR q.queue_name = v_queue
             GROUP BY q.queue_name, q.dead_count, q.paused) s
     ORDER BY s.queue_name;
END //

-- queue_kind_stats: the messages of in_queue (every queue when NULL) by kind: one row per queue and kind that has
-- messages (queue, kind, ready, `delayed`, reserved, counted as queue_stats counts them), by queue and kind. Reads every
-- message of the queue, as queue_stats does, so it is a separate read that an operator asks for (`pyqueue-sql stats
-- --kinds`), never part of queue_stats. Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_kind_stats //
CREATE PROCEDURE queue_kind_stats(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__check_clock();
    IF in_queue IS NOT NULL THEN CALL pyqueue__check_queue(in_queue); END IF;
    SET v_now = UTC_TIMESTAMP(6), v_queue = in_queue;
    SELECT m.queue_name AS `queue`, m.p_kind AS kind,
           COUNT(CASE WHEN m.scheduled_at <= v_now THEN 1 END) AS ready,
           COUNT(CASE WHEN m.scheduled_at > v_now AND m.reserve_token IS NULL THEN 1 END) AS `delayed`,
           COUNT(CASE WHEN m.scheduled_at > v_now AND m.reserve_token IS NOT NULL THEN 1 END) AS reserved
      FROM pyqueue_message m
     WHERE v_queue IS NULL OR m.queue_name = v_queue
     GROUP BY m.queue_name, m.p_kind
     ORDER BY m.queue_name, m.p_kind;
END //

DELIMITER ;
