-- ==== reserve ====
-- Take messages out: reserve them (at-least-once: each reservation shows a token that every later step must show) or
-- pop them (at-most-once), and the walk over the ready rows behind both.

DELIMITER //

-- pyqueue__reserve_args: the checks queue_reserve and queue_commit_reserve share: n >= 1 (NULL = 1), timeout NULL or
-- positive, worker at most 255 characters, kinds as pyqueue__kinds (out_kinds: normalised). No locks.
DROP PROCEDURE IF EXISTS pyqueue__reserve_args //
CREATE PROCEDURE pyqueue__reserve_args(
    IN  in_worker  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_timeout DECIMAL(20,6),
    IN  in_n       DECIMAL(65,30),
    IN  in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    OUT out_kinds  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    IF in_n < 1 THEN CALL pyqueue__raise('invalid_argument', 'n must be at least 1'); END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);
    CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
    IF CHAR_LENGTH(in_worker) > 255 THEN CALL pyqueue__raise('invalid_argument', 'worker is longer than 255 characters'); END IF;
    IF LOCATE(X'ED', CAST(in_worker AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'worker', in_worker); END IF;
    CALL pyqueue__kinds(in_kinds, out_kinds);
END //

-- pyqueue__candidates: one page of the ready messages of in_queue in the reserve's order (priority DESC, ready_at, id),
-- read WITHOUT locks: at most in_k rows after the keyset position io_* (NULL = from the start; moved to the last row),
-- of priority in_priority only (in_rest FALSE: the ready index) or of every priority up to it (in_rest TRUE: the due
-- index). out_cand: JSON array of [id, attempts, scheduled_at, token, reserved_by, cum, priority, ready_at], cum a
-- running total of result sizes (queue_pop's packet budget; 0 unless in_sizes); out_got its length; out_max_attempts
-- its highest attempts; out_expired how many are past their pyqueue.expires_at header. Needs a large group_concat_max_len.
DROP PROCEDURE IF EXISTS pyqueue__candidates //
CREATE PROCEDURE pyqueue__candidates(
    IN    in_queue         VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_kinds         LONGTEXT CHARACTER SET utf8mb4,
    IN    in_now           DATETIME(6),
    IN    in_priority      INT,
    IN    in_rest          BOOLEAN,
    IN    in_k             INT,
    IN    in_sizes         BOOLEAN,
    INOUT io_pr            INT,
    INOUT io_at            DATETIME(6),
    INOUT io_id            BIGINT,
    OUT   out_cand         LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_got          INT,
    OUT   out_max_attempts INT,
    OUT   out_expired      INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_last LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_clock VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
        DEFAULT DATE_FORMAT(in_now, '%Y-%m-%dT%H:%i:%s.%fZ');
    -- one branch runs (in_rest is constant; the other WHERE is impossible)
    SELECT COUNT(*), MAX(d.attempts), COALESCE(SUM(d.expired), 0),
           CONCAT('[', GROUP_CONCAT(JSON_ARRAY(d.id, d.attempts, DATE_FORMAT(d.scheduled_at, '%Y-%m-%d %H:%i:%s.%f'),
                                               d.reserve_token, d.reserved_by, d.cum, d.priority,
                                               DATE_FORMAT(d.ready_at, '%Y-%m-%d %H:%i:%s.%f'))
                                    ORDER BY d.priority DESC, d.ready_at, d.id SEPARATOR ','), ']')
      INTO out_got, out_max_attempts, out_expired, out_cand
      FROM (SELECT r.*, SUM(r.size) OVER (ORDER BY r.priority DESC, r.ready_at, r.id) AS cum
              FROM ((SELECT m.id, m.attempts, m.scheduled_at, m.ready_at, m.reserve_token, m.reserved_by, m.priority,
                            IF(in_sizes, 2 * (LENGTH(m.payload) + LENGTH(m.p_key) + LENGTH(m.p_kind) + COALESCE(LENGTH(m.headers), 0)) + 256, 0) AS size,
                            COALESCE(m.headers IS NOT NULL AND m.dead_from IS NULL
                                    AND JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE) AS expired
                       FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                      WHERE NOT in_rest
                        AND m.queue_name = in_queue AND m.priority = in_priority AND m.ready_at <= in_now
                        AND m.scheduled_at <= in_now
                        AND (io_id IS NULL OR m.ready_at > io_at OR (m.ready_at = io_at AND m.id > io_id))
                        AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                      ORDER BY m.ready_at, m.id
                      LIMIT in_k)
                    UNION ALL
                    (SELECT m.id, m.attempts, m.scheduled_at, m.ready_at, m.reserve_token, m.reserved_by, m.priority,
                            IF(in_sizes, 2 * (LENGTH(m.payload) + LENGTH(m.p_key) + LENGTH(m.p_kind) + COALESCE(LENGTH(m.headers), 0)) + 256, 0) AS size,
                            COALESCE(m.headers IS NOT NULL AND m.dead_from IS NULL
                                    AND JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE) AS expired
                       FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                      WHERE in_rest
                        AND m.queue_name = in_queue AND m.scheduled_at <= in_now AND m.priority <= in_priority
                        AND (io_id IS NULL
                             OR m.priority < io_pr
                             OR (m.priority = io_pr
                                 AND (m.ready_at > io_at OR (m.ready_at = io_at AND m.id > io_id))))
                        AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                      ORDER BY m.priority DESC, m.ready_at, m.id
                      LIMIT in_k)) AS r) AS d;
    IF out_got > 0 THEN
        SET v_last = JSON_EXTRACT(out_cand, CONCAT('$[', out_got - 1, ']'));
        SET io_id = JSON_EXTRACT(v_last, '$[0]'),
            io_at = CAST(JSON_UNQUOTE(JSON_EXTRACT(v_last, '$[7]')) AS DATETIME(6)),
            io_pr = JSON_EXTRACT(v_last, '$[6]');
    END IF;
END //

-- pyqueue__expire: ends message in_id, claimed by a reserve or pop under in_token because its header pyqueue.expires_at
-- has passed (pyqueue__end_claim), as queue_cancel ends a message nobody holds: last_error 'expired at <expires_at>',
-- history outcome 'cancelled', deleted by id and token, a schedule's pending occurrence making way for the next
-- (pyqueue__schedule_next, first), with results the outcome 'cancelled' and its waiting messages cancelled
-- (pyqueue__result_put). A grouped message: its group row locked first (in_nowait: SKIP LOCKED; busy, nothing happens,
-- out_done = -1, the caller gives the claim back), the group's next message takes its place. In autocommit mode one
-- transaction of its own. out_done = 1 when it ended, 0 when the claim no longer held. The caller's session hears of
-- it (JSON appended to @pyqueue_expired, default_week_format set to itself: docs/contract/05_reserve.md). Locks: the
-- message, group, history, schedule and result rows, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__expire //
CREATE PROCEDURE pyqueue__expire(
    IN  in_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id     BIGINT,
    IN  in_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_now    DATETIME(6),
    IN  in_nowait BOOLEAN,
    OUT out_done  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_found INT DEFAULT 1;
    DECLARE v_key, v_group, v_head_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind, v_head_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_attempts INT;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_results BOOLEAN;
    DECLARE v_locked, v_txn, v_own, v_deleted INT DEFAULT 0;
    DECLARE v_busy BOOLEAN DEFAULT FALSE;
    DECLARE v_hist BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    SET out_done = 0;
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SELECT m.p_key, m.p_kind, m.attempts, m.group_key, m.progress,
               LEFT(CONCAT('expired at ', JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"'))), 2000),
               (SELECT q.result_retention IS NOT NULL FROM pyqueue_queue q WHERE q.queue_name = in_queue)
          INTO v_key, v_kind, v_attempts, v_group, v_progress, v_error, v_results
          FROM pyqueue_message m
         WHERE m.id = in_id AND m.reserve_token = in_token;
    END;
    IF v_found = 1 THEN
        CALL pyqueue__own_transaction(TRUE, v_own);
        IF v_own = 1 THEN
            START TRANSACTION;
            SET v_txn = 1;
        END IF;
        IF v_group IS NOT NULL THEN
            CALL pyqueue__group_lock(in_queue, v_group, in_nowait, v_locked, v_head_key, v_head_kind);
            SET v_busy = (in_nowait AND v_locked = 0);
        END IF;
        IF NOT v_busy THEN
            IF v_key LIKE '%@____-__-__T__:__:__Z' THEN
                -- a schedule's occurrence: the schedule goes on (before the DELETE, as queue_commit)
                CALL pyqueue__schedule_next(in_queue, v_key, v_kind);
            END IF;
            UPDATE pyqueue_message SET last_error = v_error WHERE id = in_id AND reserve_token = in_token;
            CALL pyqueue__archive(in_queue, in_id, in_token, 'cancelled', NULL, in_now, v_hist);
            DELETE FROM pyqueue_message WHERE id = in_id AND reserve_token = in_token;
            SET v_deleted = ROW_COUNT();
            CALL pyqueue__unarchive(v_hist, v_deleted);
            IF v_deleted = 1 AND v_results THEN  -- and the messages that wait for it are cancelled
                CALL pyqueue__result_put(in_queue, v_key, v_kind, 'cancelled', NULL, v_error, v_attempts, v_progress,
                                         in_now, FALSE, 'was cancelled');
            END IF;
            IF v_deleted = 1 AND v_locked = 1 AND v_head_key = v_key AND v_head_kind = v_kind THEN
                CALL pyqueue__group_next(in_queue, v_group, in_now);
            ELSEIF v_deleted = 1 AND v_locked = 1 THEN  -- a live message besides the head (a claimed one is live)
                CALL pyqueue__group_extra_left(in_queue, v_group, in_now);
            END IF;
        END IF;
        IF v_txn = 1 THEN
            COMMIT;
            SET v_txn = 0;
        END IF;
        SET out_done = IF(v_busy, -1, v_deleted);
        IF v_deleted = 1 THEN
            SET @pyqueue_expired = JSON_ARRAY_APPEND(IF(JSON_LENGTH(@pyqueue_expired) < 1000, @pyqueue_expired, '[]'), '$',
                    JSON_OBJECT('queue', in_queue, 'key', v_key, 'kind', v_kind, 'expires_at', SUBSTRING(v_error, 12),
                                'at', DATE_FORMAT(in_now, '%Y-%m-%dT%H:%i:%s.%fZ'))), SESSION default_week_format = @@session.default_week_format;
        END IF;
    END IF;
END //

-- pyqueue__end_claim: what a reserve or pop does with a message it claimed (under in_token) to end instead of handing
-- out: one past its pyqueue.expires_at is ended as cancelled (pyqueue__expire), whatever its attempts; else it had
-- max_attempts deliveries and is dead-lettered (pyqueue__dead_letter). out_done as theirs. Locks: as theirs.
DROP PROCEDURE IF EXISTS pyqueue__end_claim //
CREATE PROCEDURE pyqueue__end_claim(
    IN  in_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id     BIGINT,
    IN  in_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_now    DATETIME(6),
    IN  in_nowait BOOLEAN,
    OUT out_done  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_clock VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
        DEFAULT DATE_FORMAT(in_now, '%Y-%m-%dT%H:%i:%s.%fZ');
    IF EXISTS (SELECT 1 FROM pyqueue_message x FORCE INDEX (PRIMARY)
                WHERE x.id = in_id AND x.reserve_token = in_token AND COALESCE(x.headers IS NOT NULL AND x.dead_from IS NULL
                                    AND JSON_UNQUOTE(JSON_EXTRACT(x.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE)) THEN
        CALL pyqueue__expire(in_queue, in_id, in_token, in_now, in_nowait, out_done);
    ELSE
        CALL pyqueue__dead_letter(in_queue, in_dlq, in_id, in_token, in_now, in_nowait, out_done);
    END IF;
END //

-- pyqueue__claim: claims up to in_n ready messages of in_queue (of in_kinds, NULL = any) in the reserve's order, a page
-- of candidates (pyqueue__candidates, 5000) at a time, each page with ONE UPDATE joined to a FOR UPDATE SKIP LOCKED
-- read by id (never a gap, never the ready range) of the candidates still as read. A claimed row gets scheduled_at =
-- in_until and the token derived from in_secret and its id (found again by id, io_claimed in order, and token).
-- Reserve (in_pop FALSE): attempts + 1, reserved_by = in_worker; a candidate past its pyqueue.expires_at header (a
-- pop's too) or at attempts >= in_max is claimed under another secret and ended as cancelled or dead-lettered instead
-- (pyqueue__end_claim; one pyqueue__dead_letter leaves alone gets its claim back, pyqueue__unclaim). Pop: attempts and
-- worker stay, and the claims stop before the result would pass max_allowed_packet (at least one). At most 4
-- priorities are walked on the ready index, then one due-index read covers the rest: the cost follows the ready rows.
-- io_claimed: the claimed pages' candidates as JSON array elements without brackets (start with ''); out_count: rows
-- claimed. Locks: the claimed rows, for one statement each page (or until the caller's transaction ends).
DROP PROCEDURE IF EXISTS pyqueue__claim //
CREATE PROCEDURE pyqueue__claim(
    IN    in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN    in_n       INT,
    IN    in_now     DATETIME(6),
    IN    in_until   DATETIME(6),
    IN    in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_pop     BOOLEAN,
    IN    in_max     INT,
    IN    in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_own     INT,
    IN    in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    INOUT io_claimed LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_priority, v_left, v_k, v_got, v_maxatt, v_pr, v_claims, v_ndead, v_i, v_done INT;
    DECLARE v_steps INT DEFAULT 0;
    DECLARE v_rest BOOLEAN;
    DECLARE v_cand, v_dead LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_at DATETIME(6);
    DECLARE v_id, v_budget BIGINT;
    DECLARE v_dsecret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_nexp INT;
    DECLARE v_clock VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
        DEFAULT DATE_FORMAT(in_now, '%Y-%m-%dT%H:%i:%s.%fZ');
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        -- a failing procedure returns no INOUT parameter: the claims go back here
        CALL pyqueue__give_back_claims(in_secret, io_claimed, in_pop);
        RESIGNAL;
    END;
    SET v_left = in_n, out_count = 0, v_budget = @@max_allowed_packet - 4096;
    CALL pyqueue__random_token(v_dsecret);  -- dead-letter claims: never read back or given back
    -- the top priority to start from: MAX(priority) reads the end of the queue's range in the ready index, where
    -- claims insert and commits leave deleted entries until purge, so a queue with nothing above priority 0 starts at
    -- 0 after one probe clear of it (nothing at 0: the walk goes on down, and ends when nothing lies below)
    SELECT IF(EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                       WHERE m.queue_name = in_queue AND m.priority > 0),
              (SELECT MAX(m.priority) FROM pyqueue_message m WHERE m.queue_name = in_queue), 0)
      INTO v_priority;
    walk: WHILE v_priority IS NOT NULL AND v_left > 0 DO
        SET v_rest = v_steps >= 4, v_pr = NULL, v_at = NULL, v_id = NULL;
        pages: LOOP
            -- pages of at most 5000 keep the UPDATE's buffer of changed rows in memory
            SET v_k = LEAST(v_left, 5000);
            CALL pyqueue__candidates(in_queue, in_kinds, in_now, v_priority, v_rest, v_k, in_pop,
                                     v_pr, v_at, v_id, v_cand, v_got, v_maxatt, v_nexp);
            IF v_got = 0 THEN LEAVE pages; END IF;
            SET v_claims = 0;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
                UPDATE (SELECT x.id, (in_max IS NOT NULL AND x.attempts >= in_max) OR COALESCE(x.headers IS NOT NULL AND x.dead_from IS NULL
                                    AND JSON_UNQUOTE(JSON_EXTRACT(x.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE) AS dead
                          FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (
                                   ord     FOR ORDINALITY,
                                   c_id    BIGINT      PATH '$[0]',
                                   c_att   INT         PATH '$[1]',
                                   c_at    DATETIME(6) PATH '$[2]',
                                   c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
                                   c_cum   BIGINT      PATH '$[5]')) AS j
                          STRAIGHT_JOIN pyqueue_message x FORCE INDEX (PRIMARY) ON x.id = j.c_id
                         WHERE x.queue_name = in_queue AND x.scheduled_at <= in_now AND x.scheduled_at = j.c_at
                           AND x.attempts = j.c_att AND x.reserve_token <=> j.c_token
                           AND (NOT in_pop OR j.c_cum <= v_budget OR (j.ord = 1 AND out_count = 0))
                           LIMIT 18446744073709551615  -- materialised (never merged into the UPDATE), on MySQL too
                           FOR UPDATE SKIP LOCKED) AS c
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.id
                   SET m.scheduled_at = in_until,
                       m.attempts = m.attempts + IF(in_pop OR c.dead, 0, 1),
                       m.reserved_by = IF(in_pop OR c.dead, m.reserved_by, in_worker),
                       -- why a dead-letter claim goes, unless a consumer said why
                       m.last_error = IF(c.dead, COALESCE(m.last_error, 'reservation expired on its last allowed delivery'),
                                         m.last_error),
                       m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(IF(c.dead, v_dsecret, in_secret), m.id), 256), 32), 13, 1, '4'),
                           17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(IF(c.dead, v_dsecret, in_secret), m.id), 256), 17, 1), 16, 10) + 1, 1)),
                           9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
                SET v_claims = ROW_COUNT();
            END;
            IF v_claims > 0 THEN
                -- appended as text (a JSON merge would parse all of it again each page)
                SET io_claimed = CONCAT(io_claimed, IF(io_claimed = '', '', ','),
                                        SUBSTRING(v_cand, 2, CHAR_LENGTH(v_cand) - 2));
            END IF;
            IF ((in_max IS NOT NULL AND v_maxatt >= in_max) OR v_nexp > 0) AND v_claims > 0 THEN
                -- the candidates claimed for dead-lettering or expiring: [id, token, old scheduled_at, old token]
                SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY(m.id, m.reserve_token, j.c_at, j.c_token)) INTO v_ndead, v_dead
                  FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (
                           ord     FOR ORDINALITY,
                           c_id    BIGINT   PATH '$[0]',
                           c_at    VARCHAR(26) CHARACTER SET utf8mb4 PATH '$[2]',
                           c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                 WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_dsecret, m.id), 256), 32), 13, 1, '4'),
                     17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_dsecret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
                     9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
                SET v_claims = v_claims - v_ndead, v_i = 0;
                WHILE v_i < v_ndead DO
                    BEGIN
                        DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
                        CALL pyqueue__end_claim(in_queue, in_dlq,
                                                JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][0]')),
                                                JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][1]'))),
                                                in_now, TRUE, v_done);
                        IF v_done = -1 THEN  -- its group row was busy: left as it was
                            CALL pyqueue__unclaim(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][0]')),
                                                  JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][1]'))),
                                                  JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][2]'))),
                                                  IF(JSON_TYPE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][3]'))) = 'NULL', NULL,
                                                     JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][3]')))));
                        END IF;
                    END;
                    SET v_i = v_i + 1;
                END WHILE;
            END IF;
            SET v_left = v_left - v_claims, out_count = out_count + v_claims;
            IF in_pop AND JSON_EXTRACT(v_cand, CONCAT('$[', v_got - 1, '][5]')) > v_budget THEN
                SET v_left = 0;  -- the result is full
            ELSEIF in_pop THEN
                SET v_budget = v_budget - JSON_EXTRACT(v_cand, CONCAT('$[', v_got - 1, '][5]'));
            END IF;
            IF v_left <= 0 OR v_got < v_k THEN LEAVE pages; END IF;
        END LOOP;
        IF v_rest OR v_left <= 0 THEN LEAVE walk; END IF;
        SET v_steps = v_steps + 1;
        SELECT MAX(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name = in_queue AND m.priority < v_priority;
    END WHILE;
END //

-- pyqueue__claim_one: pyqueue__claim for a reserve of one message, without JSON pages: the same walk over priorities,
-- one candidate at a time, the same claiming statement, tokens and dead-lettering. io_claimed and out_count as
-- pyqueue__claim. Locks: the claimed row, for one statement (or until the caller's transaction ends).
DROP PROCEDURE IF EXISTS pyqueue__claim_one //
CREATE PROCEDURE pyqueue__claim_one(
    IN    in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN    in_now     DATETIME(6),
    IN    in_until   DATETIME(6),
    IN    in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_max     INT,
    IN    in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_own     INT,
    IN    in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    INOUT io_claimed LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_claims, v_priority, v_found, v_att, v_pr, v_last_pr, v_done INT;
    DECLARE v_steps INT DEFAULT 0;
    DECLARE v_id, v_last_id BIGINT;
    DECLARE v_at, v_rat, v_last_at DATETIME(6);
    DECLARE v_tok, v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_by VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_dead BOOLEAN;
    DECLARE v_dsecret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE v_exp BOOLEAN;
    DECLARE v_clock VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
        DEFAULT DATE_FORMAT(in_now, '%Y-%m-%dT%H:%i:%s.%fZ');
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
    SET out_count = 0;
    -- the top priority to start from: MAX(priority) reads the end of the queue's range in the ready index, where
    -- claims insert and commits leave deleted entries until purge, so a queue with nothing above priority 0 starts at
    -- 0 after one probe clear of it (nothing at 0: the walk goes on down, and ends when nothing lies below)
    SELECT IF(EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                       WHERE m.queue_name = in_queue AND m.priority > 0),
              (SELECT MAX(m.priority) FROM pyqueue_message m WHERE m.queue_name = in_queue), 0)
      INTO v_priority;
    walk: WHILE v_priority IS NOT NULL DO
        SET v_last_id = NULL, v_last_at = NULL, v_last_pr = NULL;
        candidates: LOOP
            -- the next candidate after the keyset position (no derived table to materialise; no row: v_found = 0)
            IF v_steps < 4 THEN
                SELECT 1, m.id, m.attempts, m.scheduled_at, m.ready_at, m.reserve_token, m.reserved_by, m.priority,
                       COALESCE(m.headers IS NOT NULL AND m.dead_from IS NULL
                                    AND JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE)
                  INTO v_found, v_id, v_att, v_at, v_rat, v_tok, v_by, v_pr, v_exp
                  FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                 WHERE m.queue_name = in_queue AND m.priority = v_priority AND m.ready_at <= in_now AND m.scheduled_at <= in_now
                   AND (v_last_id IS NULL OR m.ready_at > v_last_at OR (m.ready_at = v_last_at AND m.id > v_last_id))
                   AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                 ORDER BY m.ready_at, m.id
                 LIMIT 1;
            ELSE
                SELECT 1, m.id, m.attempts, m.scheduled_at, m.ready_at, m.reserve_token, m.reserved_by, m.priority,
                       COALESCE(m.headers IS NOT NULL AND m.dead_from IS NULL
                                    AND JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE)
                  INTO v_found, v_id, v_att, v_at, v_rat, v_tok, v_by, v_pr, v_exp
                  FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                 WHERE m.queue_name = in_queue AND m.scheduled_at <= in_now AND m.priority <= v_priority
                   AND (v_last_id IS NULL
                        OR m.priority < v_last_pr
                        OR (m.priority = v_last_pr
                            AND (m.ready_at > v_last_at OR (m.ready_at = v_last_at AND m.id > v_last_id))))
                   AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                 ORDER BY m.priority DESC, m.ready_at, m.id
                 LIMIT 1;
            END IF;
            IF v_found = 0 THEN LEAVE candidates; END IF;
            SET v_last_id = v_id, v_last_at = v_rat, v_last_pr = v_pr,
                v_dead = (in_max IS NOT NULL AND v_att >= in_max) OR v_exp;
            IF v_dead AND v_dsecret IS NULL THEN CALL pyqueue__random_token(v_dsecret); END IF;
            SET v_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(IF(v_dead, v_dsecret, in_secret), v_id), 256), 32), 13, 1, '4'),
                  17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(IF(v_dead, v_dsecret, in_secret), v_id), 256), 17, 1), 16, 10) + 1, 1)),
                  9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
            SET v_claims = 0;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
                UPDATE (SELECT x.id
                          FROM pyqueue_message x FORCE INDEX (PRIMARY)
                         WHERE x.id = v_id AND x.queue_name = in_queue AND x.scheduled_at <= in_now
                           AND x.scheduled_at = v_at AND x.attempts = v_att AND x.reserve_token <=> v_tok
                         LIMIT 18446744073709551615  -- materialised (never merged into the UPDATE), on MySQL too
                         FOR UPDATE SKIP LOCKED) AS c
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.id
                   SET m.scheduled_at = in_until,
                       m.attempts = m.attempts + IF(v_dead, 0, 1),
                       m.reserved_by = IF(v_dead, m.reserved_by, in_worker),
                       -- why a dead-letter claim goes, unless a consumer said why
                       m.last_error = IF(v_dead, COALESCE(m.last_error, 'reservation expired on its last allowed delivery'),
                                         m.last_error),
                       m.reserve_token = v_token;
                SET v_claims = ROW_COUNT();
            END;
            IF v_claims > 0 THEN
                IF NOT v_dead THEN
                    -- (the casts: MariaDB's JSON_ARRAY quotes integer variables)
                    SET io_claimed = JSON_ARRAY(CAST(v_id AS SIGNED), CAST(v_att AS SIGNED),
                                                DATE_FORMAT(v_at, '%Y-%m-%d %H:%i:%s.%f'),
                                                v_tok, v_by, 0, CAST(v_pr AS SIGNED)),
                        out_count = 1;
                    LEAVE walk;
                END IF;
                BEGIN
                    DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
                    CALL pyqueue__end_claim(in_queue, in_dlq, v_id, v_token, in_now, TRUE, v_done);
                    IF v_done = -1 THEN  -- its group row was busy: left as it was
                        CALL pyqueue__unclaim(v_id, v_token, v_at, v_tok);
                    END IF;
                END;
            END IF;
        END LOOP;
        IF v_steps >= 4 THEN LEAVE walk; END IF;
        SET v_steps = v_steps + 1;
        SELECT MAX(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name = in_queue AND m.priority < v_priority;
    END WHILE;
END //

-- pyqueue__give_back_claims: undoes the claims of one call (the tokens derived from in_secret) of the rows in in_claimed:
-- scheduled_at, token and worker as they were, attempts - 1 unless in_pop; for the error handlers of pyqueue__claim,
-- pyqueue__reserve and queue_pop, so a failing call consumes nothing. Locks: those rows, for one statement.
DROP PROCEDURE IF EXISTS pyqueue__give_back_claims //
CREATE PROCEDURE pyqueue__give_back_claims(
    IN in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_claimed LONGTEXT CHARACTER SET utf8mb4,
    IN in_pop     BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    IF in_secret IS NOT NULL AND in_claimed IS NOT NULL THEN
        UPDATE JSON_TABLE(CONCAT('[', in_claimed, ']'), '$[*]' COLUMNS (
                   c_id    BIGINT      PATH '$[0]',
                   c_at    DATETIME(6) PATH '$[2]',
                   c_token CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
                   c_by    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]')) AS j
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
           SET m.scheduled_at = j.c_at, m.attempts = m.attempts - IF(in_pop, 0, 1),
               m.reserve_token = j.c_token, m.reserved_by = j.c_by
         WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(in_secret, m.id), 256), 32), 13, 1, '4'),
               17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(in_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
               9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
    END IF;
END //

-- pyqueue__reserve: queue_reserve on a queue without limits, after its checks: pyqueue__claim (or pyqueue__claim_one),
-- then ONE read of the claims by id and token, in claim order (a claim taken over meanwhile is left out). An error
-- gives the claims back (pyqueue__give_back_claims). Emits the result set. In autocommit mode the claims of a batch are
-- one transaction of its own at READ COMMITTED, run again whole on a deadlock (MariaDB runs no handler for a deadlock
-- found while a statement waits for a gap lock: the call failed keeping the claims its earlier statements had made).
DROP PROCEDURE IF EXISTS pyqueue__reserve //
CREATE PROCEDURE pyqueue__reserve(
    IN in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6),
    IN in_n       INT,
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN in_vis     DECIMAL(20,6),
    IN in_max     INT,
    IN in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_paused  BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_now, v_until DATETIME(6);
    DECLARE v_own INT DEFAULT 0;
    DECLARE v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_count, v_retry INT;
    DECLARE v_txn, v_tries INT DEFAULT 0;
    DECLARE v_gcl BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET SESSION group_concat_max_len = v_gcl;
        IF v_txn = 1 THEN ROLLBACK; ELSE CALL pyqueue__give_back_claims(v_secret, v_claimed, FALSE); END IF;
        RESIGNAL;
    END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    IF NOT in_paused THEN
        /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
        IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
        SET v_now = UTC_TIMESTAMP(6);
        SET v_until = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND;
        CALL pyqueue__random_token(v_secret);
        IF in_n = 1 THEN
            CALL pyqueue__claim_one(in_queue, in_kinds, v_now, v_until, in_worker, in_max, in_dlq, v_own,
                                    v_secret, v_claimed, v_count);
        ELSE
            SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
            IF v_own = 1 THEN  -- (see above; in_own 0: inside it a deadlock fails the claims whole)
                REPEAT
                    SET v_retry = 0, v_tries = v_tries + 1, v_claimed = '';
                    BEGIN
                        DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
                        START TRANSACTION;
                        SET v_txn = 1;
                        CALL pyqueue__claim(in_queue, in_kinds, in_n, v_now, v_until, in_worker, FALSE, in_max, in_dlq,
                                            0, v_secret, v_claimed, v_count);
                        COMMIT;
                        SET v_txn = 0;
                    END;
                UNTIL v_retry = 0 END REPEAT;
            ELSE
                CALL pyqueue__claim(in_queue, in_kinds, in_n, v_now, v_until, in_worker, FALSE, in_max, in_dlq, v_own,
                                    v_secret, v_claimed, v_count);
            END IF;
            SET SESSION group_concat_max_len = v_gcl;
        END IF;
    END IF;
    SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
           m.attempts, m.created_at, m.scheduled_at_initially, m.headers
      FROM (SELECT j.ord, j.c_id FROM JSON_TABLE(CONCAT('[', v_claimed, ']'), '$[*]' COLUMNS (
                ord  FOR ORDINALITY,
                c_id BIGINT PATH '$[0]')) AS j
             LIMIT 18446744073709551615) AS j  -- materialised: see queue_reserve's read-back
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
     WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_secret, m.id), 256), 32), 13, 1, '4'),
       17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
       9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-')
     ORDER BY j.ord;
END //

-- pyqueue__claim_short: the single-message short way of queue_reserve and queue_commit_reserve, inside the caller's
-- transaction: the oldest ready message of priority 0 of in_queue that no other transaction holds (FOR UPDATE SKIP
-- LOCKED: concurrent reserves take different messages instead of racing for the oldest), claimed by id with a random
-- token of its own: scheduled_at = now + (in_timeout, else in_vis), attempts + 1, reserved_by = in_worker. out_id and
-- out_token: the claim; NULL when nothing is ready at priority 0 or the message is due for dead-lettering or past its
-- pyqueue.expires_at header (the general way takes them). Locks: the claimed row, until the caller's transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__claim_short //
CREATE PROCEDURE pyqueue__claim_short(
    IN  in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_timeout DECIMAL(20,6),
    IN  in_vis     DECIMAL(20,6),
    IN  in_max     INT,
    OUT out_id     BIGINT,
    OUT out_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DECLARE v_att INT;
    DECLARE v_exp BOOLEAN;
    DECLARE v_clock VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
        DEFAULT DATE_FORMAT(v_now, '%Y-%m-%dT%H:%i:%s.%fZ');
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET out_id = NULL;
        SELECT m.id, m.attempts, COALESCE(m.headers IS NOT NULL AND m.dead_from IS NULL
                                    AND JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE) INTO out_id, v_att, v_exp
          FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
         WHERE m.queue_name = in_queue AND m.priority = 0 AND m.ready_at <= v_now AND m.scheduled_at <= v_now
         ORDER BY m.ready_at, m.id
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
    END;
    SET out_token = NULL;
    IF out_id IS NOT NULL AND (in_max IS NULL OR v_att < in_max) AND NOT v_exp THEN
        CALL pyqueue__random_token(out_token);
        UPDATE pyqueue_message
           SET scheduled_at = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND,
               attempts = attempts + 1, reserved_by = in_worker, reserve_token = out_token
         WHERE id = out_id;
    ELSE
        SET out_id = NULL;
    END IF;
END //

-- pyqueue__claim_short_batch: the short way of queue_reserve for a batch (in_n from 2 to 5000), inside the caller's
-- transaction at READ COMMITTED (no gap locks: a push never waits for it): the first in_n ready messages (priority
-- DESC, ready_at, id; in_above: any lies above priority 0) of in_queue that no other transaction holds, claimed by ONE
-- UPDATE by id: scheduled_at = now + (in_timeout, else in_vis), attempts + 1, reserved_by = in_worker, and the token
-- pyqueue__claim derives from in_secret and the id (the caller reads the claims back by id and token). A priority at
-- a time from the top one: a plain read of ids on the ready index (covering: no row is visited), with a probe for any
-- message below priority 0; then ONE locking read of them by primary key, FOR UPDATE SKIP LOCKED, which re-checks each
-- on its newest version; while some were skipped, the next ones after the last; read to its end, the next priority
-- down (one probe of the index) from its start, down to 0; after 4 priorities that gave nothing (delayed or held
-- messages), the general way, whose walk reads the due index past 4 steps. (Not one locking read on the index: it checks for
-- locks every entry it passes, the delete-marked ones too, and measured slower than the general way.) No JSON list
-- of candidates is built, only ids parsed. out_ids: a JSON array of the claimed ids in order; out_count: how many (0:
-- nothing ready); NULL, with nothing claimed, when the short way does not cover the call: a message below priority 0
-- or a candidate due for dead-lettering or past its pyqueue.expires_at header (the caller rolls back; the general way
-- takes them). Needs a group_concat_max_len of 20 * in_n + 2. Locks: the claimed rows, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__claim_short_batch //
CREATE PROCEDURE pyqueue__claim_short_batch(
    IN  in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_n       INT,
    IN  in_timeout DECIMAL(20,6),
    IN  in_vis     DECIMAL(20,6),
    IN  in_max     INT,
    IN  in_above   BOOLEAN,
    IN  in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_ids    LONGTEXT CHARACTER SET utf8mb4,
    OUT out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DECLARE v_at DATETIME(6) DEFAULT NULL;
    DECLARE v_id BIGINT DEFAULT NULL;
    DECLARE v_k, v_got, v_held, v_att, v_max_att INT;
    DECLARE v_pr, v_taken, v_empty INT DEFAULT 0;
    DECLARE v_step, v_marked BOOLEAN DEFAULT FALSE;
    DECLARE v_below BOOLEAN;
    DECLARE v_exp, v_any_exp BOOLEAN DEFAULT FALSE;
    DECLARE v_clock VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
        DEFAULT DATE_FORMAT(v_now, '%Y-%m-%dT%H:%i:%s.%fZ');
    DECLARE v_cand, v_ids LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_first_at, v_t0 DATETIME(6);
    DECLARE v_from BOOLEAN DEFAULT FALSE;
    SET out_ids = '', out_count = 0, v_max_att = 0;
    -- Where the candidates' read starts. From a priority's start, it steps over every delete-marked entry there that
    -- purge has not removed yet (all since the oldest open read view: a snapshot held for minutes leaves hundreds of
    -- thousands). So the session keeps the first candidate it last found (@pyqueue__ready_queue: database and queue,
    -- _priority: the first priority with a ready message, _at, _id) and reads from there while nothing is locked yet;
    -- from the start again when that finds fewer than wanted, or once @pyqueue__ready_full has passed: 20 times what
    -- the last read from the start took, at most 60 s, after it (so those reads take at most a twenty-first of a busy
    -- session's time). A message that lands before the mark (a run_at in the past, a push committed late) waits for
    -- that read from the start. A time further than 60 s ahead was not set here: not live.
    IF in_above THEN
        SELECT MAX(m.priority) INTO v_pr FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
         WHERE m.queue_name = in_queue;
    END IF;
    pages: LOOP
        IF v_id IS NULL AND NOT v_step AND out_count = 0 AND COALESCE(@pyqueue__ready_priority, 0) = v_pr
           AND @pyqueue__ready_queue = CONCAT(DATABASE(), '.', in_queue)
           AND @pyqueue__ready_full BETWEEN v_now AND v_now + INTERVAL 60 SECOND THEN
            SET v_from = TRUE, v_at = @pyqueue__ready_at, v_id = @pyqueue__ready_id - 1;
        END IF;
        SET v_k = in_n - out_count, v_t0 = UTC_TIMESTAMP(6), v_step = TRUE;
        -- (the probe reads the ready index down from the start of priority 0: one entry. Read up, it stepped over every
        -- delete-marked entry of priority 0 an open read view keeps from purge. A scalar subquery, not EXISTS: inside
        -- EXISTS the optimizer drops ORDER BY ... LIMIT and reads up.)
        SELECT COUNT(*), GROUP_CONCAT(d.id ORDER BY d.ready_at, d.id SEPARATOR ','), MAX(d.ready_at), MIN(d.ready_at),
               (SELECT b.priority FROM pyqueue_message b FORCE INDEX (pyqueue_message_order_idx)
                 WHERE b.queue_name = in_queue AND b.priority < 0 ORDER BY b.priority DESC LIMIT 1) IS NOT NULL
          INTO v_got, v_cand, v_at, v_first_at, v_below
          FROM (SELECT m.id, m.ready_at
                  FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                 WHERE m.queue_name >= in_queue AND m.queue_name <= in_queue AND m.priority >= v_pr AND m.priority <= v_pr
                   AND m.ready_at <= v_now AND m.scheduled_at <= v_now  -- (a leased row: in the range, its lease's end not)
                   AND (v_id IS NULL OR m.ready_at > v_at OR (m.ready_at = v_at AND m.id > v_id))
                 ORDER BY m.queue_name, m.priority, m.ready_at, m.id
                 LIMIT v_k) AS d;
        IF v_below THEN LEAVE pages; END IF;
        IF v_from AND v_got < v_k THEN  -- fewer than wanted from the mark: from the start (nothing locked yet)
            SET v_from = FALSE, v_at = NULL, v_id = NULL;
            ITERATE pages;
        END IF;
        IF v_id IS NULL AND v_got > 0 THEN  -- read from the start: the mark, and when to read from the start again
            SET @pyqueue__ready_full = UTC_TIMESTAMP(6) + INTERVAL LEAST(60000000,
                    20 * TIMESTAMPDIFF(MICROSECOND, v_t0, UTC_TIMESTAMP(6))) MICROSECOND;
        END IF;
        IF (v_id IS NULL OR v_from) AND v_got > 0 AND NOT v_marked THEN  -- the first candidate: the mark
            SET @pyqueue__ready_queue = CONCAT(DATABASE(), '.', in_queue), @pyqueue__ready_at = v_first_at,
                @pyqueue__ready_id = CAST(SUBSTRING_INDEX(v_cand, ',', 1) AS SIGNED), @pyqueue__ready_priority = v_pr,
                v_marked = TRUE;
        END IF;
        SET v_from = FALSE;
        IF v_got > 0 THEN
            SET v_id = SUBSTRING_INDEX(v_cand, ',', -1);  -- the last candidate (v_at: its ready_at)
            SELECT COUNT(*), MAX(c.attempts), GROUP_CONCAT(c.id ORDER BY c.ord SEPARATOR ','), COALESCE(MAX(c.expired), 0)
              INTO v_held, v_att, v_ids, v_exp
              FROM (SELECT j.ord, x.id, x.attempts, COALESCE(x.headers IS NOT NULL AND x.dead_from IS NULL
                                        AND JSON_UNQUOTE(JSON_EXTRACT(x.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE) AS expired
                      FROM JSON_TABLE(CONCAT('[', v_cand, ']'), '$[*]' COLUMNS (
                               ord  FOR ORDINALITY,
                               c_id BIGINT PATH '$')) AS j
                      STRAIGHT_JOIN pyqueue_message x FORCE INDEX (PRIMARY) ON x.id = j.c_id
                     WHERE x.queue_name = in_queue AND x.priority = v_pr AND x.scheduled_at <= v_now
                     LIMIT 18446744073709551615  -- materialised (its rows locked as read), on MySQL too
                       FOR UPDATE SKIP LOCKED) AS c;
            IF v_held > 0 THEN
                SET out_ids = CONCAT(out_ids, IF(out_ids = '', '', ','), v_ids),
                    out_count = out_count + v_held, v_max_att = GREATEST(v_max_att, v_att), v_any_exp = v_any_exp OR v_exp;
            END IF;
        END IF;
        IF out_count >= in_n THEN LEAVE pages; END IF;
        IF v_got < v_k THEN  -- this priority read to its end: the next one down, from its start (not below 0)
            SET v_empty = v_empty + (out_count = v_taken), v_taken = out_count;
            IF v_pr <= 0 THEN LEAVE pages; END IF;
            IF v_empty >= 4 THEN SET v_below = TRUE; LEAVE pages; END IF;  -- 4 gave nothing: the general way's walk
            SET v_pr = (SELECT b.priority FROM pyqueue_message b FORCE INDEX (pyqueue_message_order_idx)
                         WHERE b.queue_name = in_queue AND b.priority < v_pr AND b.priority >= 0
                         ORDER BY b.priority DESC LIMIT 1);
            IF v_pr IS NULL THEN LEAVE pages; END IF;
            SET v_at = NULL, v_id = NULL, v_step = FALSE;
        END IF;
    END LOOP;
    SET out_ids = CONCAT('[', out_ids, ']');
    IF v_below OR (in_max IS NOT NULL AND v_max_att >= in_max) OR v_any_exp THEN
        SET out_ids = NULL, out_count = NULL;
    ELSEIF out_count > 0 THEN
        UPDATE JSON_TABLE(out_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$')) AS j
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
           SET m.scheduled_at = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND,
               m.attempts = m.attempts + 1,
               m.reserved_by = in_worker,
               m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(in_secret, m.id), 256), 32), 13, 1, '4'),
                   17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(in_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
                   9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
        IF ROW_COUNT() <> out_count THEN SET out_ids = NULL, out_count = NULL; END IF;  -- (never: the rows are locked)
    END IF;
END //

-- pyqueue__limited_admit: may pyqueue__reserve_limited claim candidate in_id (of kind in_kind, seen with in_attempts)?
-- out_ok = 1 when it may. Rates (in_nrates > 0; in_rates [[kind, per_us], ...], in_qper the queue-wide per): a free
-- unit of its kind's rate, then of the queue-wide one (pyqueue__rate_pick; out_kslot, out_qslot: the units, NOT
-- written); a kind without a free unit joins io_full, a used-up queue-wide rate sets io_left = 0 (the end). Limits
-- (in_limits): in the call's own transaction (in_txn = 1) or a serial call, at the first candidate of a kind with a
-- limit (not in io_locked), a plain read of that kind's slots: none free, the kind joins io_full without waiting for
-- a lock; else that kind's slot rows, FOR UPDATE in one statement in slot order, and the kind joins io_locked (a JSON
-- array, its last kind the greatest). Kinds are waited for in ascending order only (the primary key's, utf8mb4_bin):
-- a kind below the greatest locked one is locked SKIP LOCKED, and when another call holds some of its slot rows it
-- joins io_full for this call (too few hand-outs, never too many), so two calls never wait for each other's kinds.
-- Then a slot for the delivery (pyqueue__limit_claim). A kind without a limit takes no slot and waits for no take:
-- pyqueue__limited_candidate calls this step for it only on a queue with rates.
-- Locks: the rate units (SKIP LOCKED) and the slot rows of the limited kinds met, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__limited_admit //
CREATE PROCEDURE pyqueue__limited_admit(
    IN    in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_id       BIGINT,
    IN    in_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_attempts INT,
    IN    in_now      DATETIME(6),
    IN    in_until    DATETIME(6),
    IN    in_txn      INT,
    IN    in_serial   BOOLEAN,
    IN    in_limits   INT,
    IN    in_nrates   INT,
    IN    in_rates    LONGTEXT CHARACTER SET utf8mb4,
    IN    in_qper     BIGINT,
    INOUT io_full     LONGTEXT CHARACTER SET utf8mb4,
    INOUT io_locked   LONGTEXT CHARACTER SET utf8mb4,
    INOUT io_left     INT,
    OUT   out_ok      INT,
    OUT   out_kslot   INT,
    OUT   out_qslot   INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_kper BIGINT;
    DECLARE v_slots, v_free, v_all INT;
    DECLARE v_top VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    SET out_ok = 1, out_kslot = NULL, out_qslot = NULL;
    IF in_nrates > 0 THEN  -- a free unit of the kind's rate, then of the queue-wide one
        IF JSON_CONTAINS(COALESCE(io_full, '[]'), JSON_QUOTE(in_kind)) THEN
            SET out_ok = 0;
        ELSE
            SELECT MAX(x.per_us) INTO v_kper
              FROM JSON_TABLE(COALESCE(in_rates, '[]'), '$[*]' COLUMNS (
                       k      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                       per_us BIGINT PATH '$[1]')) AS x
             WHERE x.k = in_kind;
            IF v_kper IS NOT NULL THEN
                CALL pyqueue__rate_pick(in_queue, in_kind, v_kper, in_now, out_kslot);
                IF out_kslot IS NULL THEN
                    SET out_ok = 0, io_full = JSON_ARRAY_APPEND(COALESCE(io_full, '[]'), '$', in_kind);
                END IF;
            END IF;
            IF out_ok = 1 AND in_qper IS NOT NULL THEN
                CALL pyqueue__rate_pick(in_queue, '', in_qper, in_now, out_qslot);
                IF out_qslot IS NULL THEN
                    SET out_ok = 0, io_left = 0;  -- the queue-wide rate is used up: the end
                END IF;
            END IF;
        END IF;
    END IF;
    IF in_limits AND out_ok = 1 THEN  -- a slot first, for a kind with a limit
        IF (in_txn = 1 OR in_serial)
           AND NOT JSON_CONTAINS(COALESCE(io_locked, '[]'), JSON_QUOTE(in_kind))
           AND NOT JSON_CONTAINS(COALESCE(io_full, '[]'), JSON_QUOTE(in_kind))
           AND EXISTS (SELECT 1 FROM pyqueue_limit l
                        WHERE l.queue_name = in_queue AND l.p_kind = in_kind) THEN
            SET v_free = 1;
            IF in_txn = 1 THEN  -- (a SELECT: a consistent read; in an IF, a locking one)
                SELECT COUNT(*) INTO v_free
                  FROM (SELECT 1 FROM pyqueue_limit_slot s
                          JOIN pyqueue_limit l ON l.queue_name = s.queue_name AND l.p_kind = s.p_kind
                         WHERE s.queue_name = in_queue AND s.p_kind = in_kind
                           AND s.slot_no <= l.capacity
                           AND (s.msg_id IS NULL
                                OR NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                                WHERE m.id = s.msg_id AND m.queue_name = s.queue_name
                                                  AND ((m.attempts = s.msg_attempts AND m.reserve_token IS NOT NULL
                                                        AND GREATEST(m.scheduled_at, s.msg_until) > in_now)
                                                       OR (m.attempts = s.msg_attempts - 1
                                                           AND s.msg_until > in_now))))
                         LIMIT 1) f;
            END IF;
            IF v_free = 0 THEN
                -- every slot busy as last committed (pyqueue__limit_take's test, a plain read): the kind is full for
                -- this call, without waiting for the slot locks (a slot freed meanwhile is missed: too few
                -- hand-outs, never too many)
                SET out_ok = 0, io_full = JSON_ARRAY_APPEND(COALESCE(io_full, '[]'), '$', in_kind);
            ELSE
                -- this kind's slot rows, in one statement in slot order, until the commit (see
                -- pyqueue__reserve_limited), at its first candidate: reserves of other kinds wait for none of them
                SET v_top = JSON_UNQUOTE(JSON_EXTRACT(io_locked, '$[last]'));
                IF v_top IS NULL OR in_kind > v_top THEN  -- ascending: may wait
                    SELECT COUNT(*) INTO v_slots
                      FROM pyqueue_limit_slot s FORCE INDEX (PRIMARY)
                     WHERE s.queue_name = in_queue AND s.p_kind = in_kind
                       FOR UPDATE;
                    SET io_locked = JSON_ARRAY_APPEND(COALESCE(io_locked, '[]'), '$', in_kind);
                ELSE  -- below a kind locked: never waits; some row held elsewhere, the kind is busy for this call
                    SELECT COUNT(*) INTO v_slots
                      FROM pyqueue_limit_slot s FORCE INDEX (PRIMARY)
                     WHERE s.queue_name = in_queue AND s.p_kind = in_kind
                       FOR UPDATE SKIP LOCKED;
                    SELECT COUNT(*) INTO v_all
                      FROM pyqueue_limit_slot s WHERE s.queue_name = in_queue AND s.p_kind = in_kind;
                    IF v_slots < v_all THEN
                        SET out_ok = 0, io_full = JSON_ARRAY_APPEND(COALESCE(io_full, '[]'), '$', in_kind);
                    ELSE
                        SET io_locked = JSON_ARRAY_INSERT(io_locked, '$[0]', in_kind);
                    END IF;
                END IF;
            END IF;
        END IF;
        IF out_ok = 1 THEN
            CALL pyqueue__limit_claim(in_queue, in_id, in_attempts, in_until, in_now, io_full, out_ok);
        END IF;
    END IF;
END //

-- pyqueue__limited_candidate: one candidate (in_id, of kind in_kind) of pyqueue__reserve_limited's walk: its row read
-- FOR UPDATE SKIP LOCKED (gone, moved, no longer ready or locked: skipped); past its expiry or at max_attempts (not
-- a pop), claimed and ended or dead-lettered (pyqueue__end_claim); else admitted (pyqueue__limited_admit, on a queue
-- with rates or limits) and claimed by one UPDATE by id re-checking what was seen (a fresh token, scheduled_at =
-- in_until, attempts + 1; a pop: pyqueue__claim's token derived from in_secret, attempts and worker unchanged, and at
-- most io_budget bytes of result, at least one row), its rate units then written with in_now. A claim is appended to
-- io_claimed ([id, token, then what the claim changed]; a pop's to io_popped too, in pyqueue__claim's format) and
-- counted down in io_left (and up in io_count for a pop). Locks: the candidate row, the rate units and slot rows.
DROP PROCEDURE IF EXISTS pyqueue__limited_candidate //
CREATE PROCEDURE pyqueue__limited_candidate(
    IN    in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_worker   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_secret   CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_id       BIGINT,
    IN    in_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_priority INT,
    IN    in_max      INT,
    IN    in_now      DATETIME(6),
    IN    in_until    DATETIME(6),
    IN    in_clock    VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_txn      INT,
    IN    in_serial   BOOLEAN,
    IN    in_limits   INT,
    IN    in_nrates   INT,
    IN    in_rates    LONGTEXT CHARACTER SET utf8mb4,
    IN    in_qper     BIGINT,
    INOUT io_full     LONGTEXT CHARACTER SET utf8mb4,
    INOUT io_locked   LONGTEXT CHARACTER SET utf8mb4,
    INOUT io_left     INT,
    INOUT io_budget   BIGINT,
    INOUT io_count    INT,
    INOUT io_claimed  LONGTEXT CHARACTER SET utf8mb4,
    INOUT io_popped   LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_found, v_attempts, v_dead INT;
    DECLARE v_ok INT DEFAULT 1;
    DECLARE v_kslot, v_qslot INT;
    DECLARE v_seen_at DATETIME(6);
    DECLARE v_seen_token, v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_seen_by VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_size BIGINT;
    DECLARE v_exp BOOLEAN;
    DECLARE v_pop BOOLEAN DEFAULT in_secret IS NOT NULL;
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SET v_found = 1;
        -- queue_name again: queue_move may have moved the row meanwhile
        SELECT m.attempts, m.reserve_token, m.scheduled_at, m.reserved_by,
               IF(v_pop, 2 * (LENGTH(m.payload) + LENGTH(m.p_key) + LENGTH(m.p_kind)
                              + COALESCE(LENGTH(m.headers), 0)) + 256, 0),
               COALESCE(m.headers IS NOT NULL AND m.dead_from IS NULL
                AND JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"')) <= in_clock, FALSE)
          INTO v_attempts, v_seen_token, v_seen_at, v_seen_by, v_size, v_exp
          FROM pyqueue_message m
         WHERE m.id = in_id AND m.queue_name = in_queue AND m.scheduled_at <= in_now
           FOR UPDATE SKIP LOCKED;
    END;
    IF v_found = 1 AND v_pop AND io_count > 0 AND v_size > io_budget THEN
        SET v_found = 0, io_left = 0;  -- the result is full
    END IF;
    IF v_found = 1 THEN
        IF v_pop THEN
            SET v_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(in_secret, in_id), 256), 32), 13, 1, '4'),
                17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(in_secret, in_id), 256), 17, 1), 16, 10) + 1, 1)),
                9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
        ELSE
            CALL pyqueue__random_token(v_token);
        END IF;
        IF v_exp OR (v_attempts >= in_max AND NOT v_pop) THEN
            -- past its expiry, or its last allowed reservation expired: claim it to end or dead-letter (attempts
            -- unchanged; a pop's claim under a token of its own)
            IF v_pop THEN CALL pyqueue__random_token(v_token); END IF;
            UPDATE pyqueue_message FORCE INDEX (PRIMARY)
               SET scheduled_at = in_until, reserve_token = v_token,
                   last_error = COALESCE(last_error, 'reservation expired on its last allowed delivery')
             WHERE id = in_id AND queue_name = in_queue AND scheduled_at <= in_now
               AND attempts = v_attempts AND reserve_token <=> v_seen_token;
            IF ROW_COUNT() = 1 THEN
                CALL pyqueue__end_claim(in_queue, in_dlq, in_id, v_token, in_now, TRUE, v_dead);
                IF v_dead = -1 THEN  -- its group row was busy: left as it was
                    CALL pyqueue__unclaim(in_id, v_token, v_seen_at, v_seen_token);
                END IF;
            END IF;
        ELSE
            IF in_nrates > 0
               OR (in_limits AND EXISTS (SELECT 1 FROM pyqueue_limit l
                                          WHERE l.queue_name = in_queue AND l.p_kind = in_kind)) THEN
                CALL pyqueue__limited_admit(in_queue, in_id, in_kind, v_attempts, in_now, in_until, in_txn, in_serial,
                                            in_limits, in_nrates, in_rates, in_qper, io_full, io_locked, io_left,
                                            v_ok, v_kslot, v_qslot);
            END IF;
            UPDATE pyqueue_message FORCE INDEX (PRIMARY)
               SET scheduled_at = in_until,
                   attempts = attempts + IF(v_pop, 0, 1),
                   reserved_by = IF(v_pop, reserved_by, in_worker),
                   reserve_token = v_token
             WHERE id = in_id AND queue_name = in_queue AND scheduled_at <= in_now
               AND attempts = v_attempts AND reserve_token <=> v_seen_token
               AND v_ok = 1;
            IF ROW_COUNT() = 1 THEN
                -- the rate units taken, written once, with the reservation's time
                IF v_kslot IS NOT NULL THEN
                    UPDATE pyqueue_rate_slot SET used_at = in_now
                     WHERE queue_name = in_queue AND p_kind = in_kind AND slot_no = v_kslot;
                END IF;
                IF v_qslot IS NOT NULL THEN
                    UPDATE pyqueue_rate_slot SET used_at = in_now
                     WHERE queue_name = in_queue AND p_kind = '' AND slot_no = v_qslot;
                END IF;
                IF v_pop THEN  -- as pyqueue__claim's candidates: [id, attempts, at, token, by, 0, priority]
                    SET io_popped = CONCAT(io_popped, IF(io_popped = '', '', ','),
                                           JSON_ARRAY(in_id, v_attempts, DATE_FORMAT(v_seen_at, '%Y-%m-%d %H:%i:%s.%f'),
                                                      v_seen_token, v_seen_by, 0, in_priority)),
                        io_budget = io_budget - v_size, io_count = io_count + 1;
                END IF;
                -- id, token, then what the claim changed (to give it back)
                SET io_claimed = JSON_ARRAY_APPEND(io_claimed, '$',
                    JSON_ARRAY(in_id, v_token, DATE_FORMAT(v_seen_at, '%Y-%m-%d %H:%i:%s.%f'),
                               v_seen_token, v_seen_by, v_attempts + 1));
                SET io_left = io_left - 1;
            END IF;
        END IF;
    END IF;
END //

-- pyqueue__reserve_limited: queue_reserve on a queue with limits, one candidate at a time: per priority, a plain read
-- of ready ids in FIFO pages, then per candidate a SELECT ... FOR UPDATE SKIP LOCKED by id, a slot for a limited kind
-- (pyqueue__limit_claim), and an UPDATE by id re-checking what was seen (a fresh token, scheduled_at = now + timeout,
-- attempts + 1); a candidate at max_attempts is claimed and dead-lettered instead. The result is read by (id, token)
-- of the claims. A failing call gives its claims and slots back. In autocommit mode (MariaDB) the whole call is one
-- transaction of its own at READ COMMITTED, run again whole on a deadlock (1213, 1467; up to 10 times): MariaDB runs
-- no handler for a deadlock found while a statement waits for a gap lock, so statement by statement such a call
-- failed keeping the slots and claims taken before it until their timeout; now it fails with nothing taken. At READ
-- COMMITTED the slot-taking UPDATE's reads of the holders are consistent reads and its scan of the slots is
-- semi-consistent; with nothing more, takes racing in such transactions handed out more than the capacity (5 live
-- on a limit of 3). So the own transaction first locks the queue's limit rows (shared; queue_drop and
-- queue_set_limit lock them before message and slot rows), then, at its first candidate of each limited kind, that
-- kind's slot rows (FOR UPDATE, the rows the UPDATE scans and at REPEATABLE READ keeps locked): no other take of the
-- kind is in progress while it picks a slot, and every holder that took one before has committed its claim; unless
-- a plain read of that kind's slots (pyqueue__limit_take's test) finds none free: the kind is then full for the
-- call, which waits for no lock (a slot freed meanwhile is missed: too few hand-outs, never too many), so that while
-- a limited kind is full, or a call meets no candidate of one, reserves do not wait for each other. Reserves of
-- different kinds never wait for each other's slots. Kinds are waited for in ascending order only: a kind below one
-- the call holds is locked SKIP LOCKED and, some of its rows held elsewhere, full for the call
-- (pyqueue__limited_admit). Two calls whose FIFO pages met two kinds in opposite orders, each waiting for the kind
-- the other had locked, deadlocked so often under load (24 autocommit queue_commit_reserve loops) that 10 runs of a
-- call in a row did.
-- Rates (a queue with rows in pyqueue_rate; read once per run, with the limit rows): a candidate first needs a free
-- unit of its kind's rate, then one of the queue-wide rate (pyqueue__rate_pick: locked, SKIP LOCKED, not yet
-- written), then its limit slot; the units are written with the reservation's time, v_now (its lease start:
-- scheduled_at - timeout), only once the message is claimed, so a candidate that a rate, its limit or a lost race
-- holds back uses up nothing. A kind without a free unit joins the full kinds (its messages stay ready, in their
-- places; other kinds are still served); a used-up queue-wide rate ends the call. A candidate due for
-- dead-lettering needs no unit. Pop (in_secret not NULL, for queue_pop on a queue with rates): the same walk with
-- rates only (no limits, no dead-lettering), claims with pyqueue__claim's tokens derived from in_secret, attempts
-- and worker unchanged, at most @@max_allowed_packet of result (at least one); the claims are appended to io_claimed
-- in pyqueue__claim's format (out_count of them) and no result set is emitted.
-- Locks: in autocommit mode the limit and rate rows (shared), each candidate row, the slot rows of the limited kinds
-- it met and the rate units taken, until the call ends; otherwise each candidate row for one statement (or until the
-- caller's transaction ends), the slot rows as pyqueue__limit_take and the rate units until the transaction ends.
-- Emits the result set (a reserve).
-- Steps: this walk and its transaction; each candidate pyqueue__limited_candidate (its rates and limit slot:
-- pyqueue__limited_admit); a failure's give-back pyqueue__limited_give_back.
DROP PROCEDURE IF EXISTS pyqueue__reserve_limited //
CREATE PROCEDURE pyqueue__reserve_limited(
    IN    in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_timeout DECIMAL(20,6),
    IN    in_n       INT,
    IN    in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN    in_vis     DECIMAL(20,6),
    IN    in_max     INT,
    IN    in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_serial  BOOLEAN,
    IN    in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    INOUT io_claimed LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_left, v_page, v_got, v_priority, v_retry INT;
    DECLARE v_now, v_until, v_after_at, v_at DATETIME(6);
    DECLARE v_after_id, v_id BIGINT;
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed LONGTEXT CHARACTER SET utf8mb4 DEFAULT '[]';
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_limits INT;      -- limits (never for a pop)
    DECLARE v_locked LONGTEXT CHARACTER SET utf8mb4;  -- the kinds whose slot rows the own transaction locked
    DECLARE v_full LONGTEXT CHARACTER SET utf8mb4;  -- the kinds full (or out of rate units) for this call
    DECLARE v_own, v_txn, v_tries INT DEFAULT 0;
    DECLARE v_pop BOOLEAN DEFAULT in_secret IS NOT NULL;
    DECLARE v_rates LONGTEXT CHARACTER SET utf8mb4;  -- [[kind, per_us], ...] of the kind rates
    DECLARE v_qper, v_budget BIGINT;                 -- the queue-wide rate's per; pop's budget
    DECLARE v_nrates INT DEFAULT 0;
    DECLARE v_popped LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_clock VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    -- An error after claims: give them back as they were (in the call's own transaction: roll it back), then fail.
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        IF v_txn = 1 THEN ROLLBACK; SET v_claimed = '[]'; END IF;
        CALL pyqueue__limited_give_back(v_queue, v_claimed, v_pop, v_limits);
        RESIGNAL;
    END;

    SET v_queue = in_queue, v_kinds = in_kinds, out_count = 0;
    CALL pyqueue__own_transaction(FALSE, v_own);
    SET v_now = UTC_TIMESTAMP(6);
    SET v_clock = DATE_FORMAT(v_now, '%Y-%m-%dT%H:%i:%s.%fZ');
    SET v_until = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND;
    SELECT EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue) AND NOT v_pop INTO v_limits;
    REPEAT
      SET v_retry = 0, v_tries = v_tries + 1, v_claimed = '[]', v_full = NULL, v_locked = NULL,
          v_left = COALESCE(in_n, 1), v_popped = '', out_count = 0,
          v_budget = @@max_allowed_packet - 4096;
      BEGIN
        DECLARE c_ready CURSOR FOR
            SELECT m.id, m.ready_at, m.p_kind
              FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
             WHERE m.queue_name = v_queue
               AND m.priority = v_priority
               AND m.ready_at <= v_now AND m.scheduled_at <= v_now
               AND (v_after_id IS NULL
                    OR m.ready_at > v_after_at
                    OR (m.ready_at = v_after_at AND m.id > v_after_id))
               AND (v_kinds IS NULL OR JSON_CONTAINS(v_kinds, JSON_QUOTE(m.p_kind)))
               AND (v_full IS NULL OR NOT JSON_CONTAINS(v_full, JSON_QUOTE(m.p_kind)))  -- full kinds
             ORDER BY m.ready_at, m.id
             LIMIT v_page;
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
        -- in the call's own transaction: rolled back whole (by the server already, on a deadlock) and run again
        DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
        IF v_own = 1 THEN
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
            START TRANSACTION;
            SET v_txn = 1;
        END IF;
        IF v_txn = 1 OR in_serial THEN
            -- the limit rows first (shared), before any message row: queue_drop and queue_set_limit lock them
            SELECT COUNT(*) > 0 AND NOT v_pop INTO v_limits
              FROM pyqueue_limit l WHERE l.queue_name = v_queue LOCK IN SHARE MODE;
            SELECT COUNT(*), MAX(IF(r.p_kind = '', r.per_us, NULL)),
                   JSON_ARRAYAGG(IF(r.p_kind = '', NULL, JSON_ARRAY(r.p_kind, r.per_us)))
              INTO v_nrates, v_qper, v_rates
              FROM pyqueue_rate r WHERE r.queue_name = v_queue LOCK IN SHARE MODE;
        ELSE
            SELECT COUNT(*), MAX(IF(r.p_kind = '', r.per_us, NULL)),
                   JSON_ARRAYAGG(IF(r.p_kind = '', NULL, JSON_ARRAY(r.p_kind, r.per_us)))
              INTO v_nrates, v_qper, v_rates
              FROM pyqueue_rate r WHERE r.queue_name = v_queue;
        END IF;
        -- the top priority to start from: MAX(priority) reads the end of the queue's range in the ready index,
        -- where claims insert and commits leave deleted entries until purge, so a queue with nothing above
        -- priority 0 starts at 0 after one probe clear of it (nothing at 0: the walk goes on down, and ends when
        -- nothing lies below)
        SELECT IF(EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                           WHERE m.queue_name = v_queue AND m.priority > 0),
                  (SELECT MAX(m.priority) FROM pyqueue_message m WHERE m.queue_name = v_queue), 0)
          INTO v_priority;
        priorities: WHILE v_priority IS NOT NULL AND v_left > 0 DO
            SET v_after_at = NULL, v_after_id = NULL;
            REPEAT
                SET v_page = LEAST(v_left, 1000) + 16, v_got = 0;
                OPEN c_ready;
                candidates: LOOP
                    SET v_done = 0;
                    FETCH c_ready INTO v_id, v_at, v_kind;
                    IF v_done = 1 THEN LEAVE candidates; END IF;
                    SET v_got = v_got + 1, v_after_at = v_at, v_after_id = v_id;
                    CALL pyqueue__limited_candidate(v_queue, in_dlq, in_worker, in_secret, v_id, v_kind, v_priority,
                                                    in_max, v_now, v_until, v_clock, v_txn, in_serial, v_limits,
                                                    v_nrates, v_rates, v_qper, v_full, v_locked, v_left, v_budget,
                                                    out_count, v_claimed, v_popped);
                    IF v_left <= 0 THEN LEAVE candidates; END IF;
                END LOOP;
                CLOSE c_ready;
            UNTIL v_left <= 0 OR v_got < v_page END REPEAT;
            IF v_left > 0 THEN  -- (else done: no probe for a priority below)
                SELECT MAX(m.priority) INTO v_priority
                  FROM pyqueue_message m
                 WHERE m.queue_name = v_queue AND m.priority < v_priority;
            END IF;
        END WHILE;
        IF v_txn = 1 THEN
            COMMIT;
            SET v_txn = 0;
        END IF;
      END;
    UNTIL v_retry = 0 END REPEAT;

    IF v_pop THEN
        SET io_claimed = CONCAT(COALESCE(io_claimed, ''), IF(COALESCE(io_claimed, '') = '' OR v_popped = '', '', ','),
                                v_popped);
    ELSE
        SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
               m.attempts, m.created_at, m.scheduled_at_initially, m.headers
          FROM JSON_TABLE(v_claimed, '$[*]' COLUMNS (
                   ord      FOR ORDINALITY,
                   c_id     BIGINT   PATH '$[0]',
                   c_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
          JOIN pyqueue_message m ON m.id = c.c_id
         WHERE m.reserve_token = c.c_token COLLATE utf8mb4_bin
         ORDER BY c.ord;
    END IF;
END //

-- pyqueue__pop_unclaim_busy: queue_pop's claims (in_claimed, made with in_secret) of the group heads whose group rows
-- were busy (in_busy, a JSON array of ids) go back as they were. Locks: those rows, for the statement (or transaction).
DROP PROCEDURE IF EXISTS pyqueue__pop_unclaim_busy //
CREATE PROCEDURE pyqueue__pop_unclaim_busy(
    IN in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_claimed LONGTEXT CHARACTER SET utf8mb4,
    IN in_busy    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    UPDATE JSON_TABLE(CONCAT('[', in_claimed, ']'), '$[*]' COLUMNS (
               c_id    BIGINT      PATH '$[0]',
               c_at    DATETIME(6) PATH '$[2]',
               c_token CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
      STRAIGHT_JOIN JSON_TABLE(in_busy, '$[*]' COLUMNS (b_id BIGINT PATH '$')) AS b ON b.b_id = j.c_id
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
       SET m.scheduled_at = j.c_at, m.reserve_token = j.c_token
     WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(in_secret, m.id), 256), 32), 13, 1, '4'),
         17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(in_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
         9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
END //

-- queue_pop: removes and returns up to in_n ready messages, highest priority first, FIFO within one (at-most-once).
-- Result: (p_key, p_kind, payload, priority, attempts, created_at, headers), empty when nothing is ready or the queue is
-- paused. Set-based, each step one statement (per page of 5000): pyqueue__claim marks the rows still ready with this
-- call's tokens (one of two racing pops wins a row); one read by id and token captures them (capped at
-- max_allowed_packet, at least one row); history, then one DELETE by id and token; the result is sent after the
-- delete. An error before the delete gives the marks back; an interruption leaves marked rows that come back after
-- the visibility timeout (never lost, never twice). A FIFO group's head leaves alone first (pyqueue__groups_leave),
-- its group row with SKIP LOCKED: busy, its mark goes back. On a queue that keeps results each popped message's
-- outcome is 'succeeded', recorded with the history (one INSERT, pyqueue__pop_results) before the DELETE. A popped occurrence of a schedule
-- pushes the next one after the DELETE (pyqueue__schedule_next).
-- Locks: the marked rows, for one statement each step (or until the caller's transaction ends); rows another session
-- holds are skipped.
DROP PROCEDURE IF EXISTS queue_pop //
CREATE PROCEDURE queue_pop(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN in_n DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_retention DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused, v_results BOOLEAN;
    DECLARE v_now, v_until DATETIME(6);
    DECLARE v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_count, v_taken, v_deleted, v_ngrouped, v_own, v_rated INT DEFAULT 0;
    DECLARE v_rows, v_grouped, v_busy, v_occ LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_i INT;
    DECLARE v_gcl BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET SESSION group_concat_max_len = v_gcl;
        IF v_deleted = 0 THEN  -- nothing removed yet: the marks go back
            CALL pyqueue__give_back_claims(v_secret, v_claimed, TRUE);
        END IF;
        RESIGNAL;
    END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    CALL pyqueue__check_clock();

    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_n < 1 THEN CALL pyqueue__raise('invalid_argument', 'n must be at least 1'); END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);

    IF NOT v_paused THEN
        SET v_now = UTC_TIMESTAMP(6), v_until = v_now + INTERVAL CAST(v_vis * 1000000 AS SIGNED) MICROSECOND;
        CALL pyqueue__random_token(v_secret);
        SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
        SELECT EXISTS (SELECT 1 FROM pyqueue_rate r WHERE r.queue_name = v_queue) INTO v_rated;
        IF v_rated THEN
            -- a rate counts every message popped: one at a time, each with its units (pyqueue__reserve_limited)
            CALL pyqueue__reserve_limited(v_queue, NULL, NULL, COALESCE(in_n, 1), NULL, v_vis, v_max, v_dlq, FALSE,
                                          v_secret, v_claimed, v_count);
        ELSE
            CALL pyqueue__claim(v_queue, NULL, COALESCE(in_n, 1), v_now, v_until, NULL, TRUE, NULL, NULL, 0,
                                v_secret, v_claimed, v_count);
        END IF;
        IF v_count > 0 THEN
            SELECT COUNT(*),
                   CONCAT('[', GROUP_CONCAT(JSON_OBJECT('id', m.id, 't', m.reserve_token, 'k', m.p_key, 'kd', m.p_kind,
                                                        'pl', CAST(m.payload AS CHAR CHARACTER SET utf8mb4),
                                                        'pr', m.priority, 'at', m.attempts,
                                                        'ca', DATE_FORMAT(m.created_at, '%Y-%m-%d %H:%i:%s.%f'),
                                                        'hd', CAST(m.headers AS CHAR CHARACTER SET utf8mb4))
                                            ORDER BY j.ord SEPARATOR ','), ']'),
                   SUM(m.group_key IS NOT NULL),
                   CONCAT('[', GROUP_CONCAT(IF(m.group_key IS NULL, NULL,
                                               JSON_ARRAY(m.id, m.p_key, m.p_kind, m.reserve_token, m.group_key))
                                            SEPARATOR ','), ']')
              INTO v_taken, v_rows, v_ngrouped, v_grouped
              FROM JSON_TABLE(CONCAT('[', v_claimed, ']'), '$[*]' COLUMNS (
                       ord  FOR ORDINALITY,
                       c_id BIGINT PATH '$[0]')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_secret, m.id), 256), 32), 13, 1, '4'),
             17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
             9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
            IF v_rows IS NULL OR NOT JSON_VALID(v_rows) THEN
                -- a row too large to pack (NULL or cut, with a warning): give everything back, return nothing
                CALL pyqueue__give_back_claims(v_secret, v_claimed, TRUE);
                SET v_rows = NULL, v_taken = 0, v_ngrouped = 0;
            END IF;
            SELECT q.history_retention, q.result_retention IS NOT NULL INTO v_retention, v_results
              FROM pyqueue_queue q WHERE q.queue_name = v_queue;
            IF v_ngrouped > 0 THEN
                -- heads of FIFO groups: one by one, their group rows first
                CALL pyqueue__own_transaction(TRUE, v_own);
                CALL pyqueue__groups_leave(IF(v_results, 'pop_result', 'pop'), v_queue, NULL, v_grouped, v_now, v_own,
                                           v_deleted, v_busy);
                IF v_busy IS NOT NULL THEN
                    -- their group rows were busy: their marks go back
                    CALL pyqueue__pop_unclaim_busy(v_secret, v_claimed, v_busy);
                END IF;
            END IF;
            IF v_retention IS NOT NULL AND v_taken > 0 THEN
                INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                             created_at, processed_at, outcome, to_queue, reserved_by,
                                             last_error, headers)
                SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                       m.created_at, v_now, 'popped', NULL, m.reserved_by, m.last_error, m.headers
                  FROM JSON_TABLE(v_rows, '$[*]' COLUMNS (
                           c_id    BIGINT   PATH '$.id',
                           c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t')) AS j
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                 WHERE m.reserve_token = j.c_token;
            END IF;
            IF v_results AND v_taken > 0 THEN CALL pyqueue__pop_results(v_rows, v_now); END IF;
            DELETE m
              FROM JSON_TABLE(COALESCE(v_rows, '[]'), '$[*]' COLUMNS (
                       c_id    BIGINT   PATH '$.id',
                       c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.reserve_token = j.c_token;
            SET v_deleted = v_deleted + ROW_COUNT();
            -- the popped occurrences of schedules: each pushes its schedule's next, as a commit does
            SELECT JSON_ARRAYAGG(JSON_ARRAY(j.c_k, j.c_kd)) INTO v_occ
              FROM JSON_TABLE(COALESCE(v_rows, '[]'), '$[*]' COLUMNS (
                       c_id BIGINT PATH '$.id',
                       c_k  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.k',
                       c_kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.kd')) AS j
             WHERE j.c_k LIKE '%@____-__-__T__:__:__Z' AND NOT EXISTS (SELECT 1 FROM pyqueue_message m WHERE m.id = j.c_id);
            SET v_i = 0;
            WHILE v_i < COALESCE(JSON_LENGTH(v_occ), 0) DO
                CALL pyqueue__schedule_next(v_queue, JSON_UNQUOTE(JSON_EXTRACT(v_occ, CONCAT('$[', v_i, '][0]'))),
                                            JSON_UNQUOTE(JSON_EXTRACT(v_occ, CONCAT('$[', v_i, '][1]'))));
                SET v_i = v_i + 1;
            END WHILE;
            -- popped: succeeded, for the messages that wait for them
            IF v_results THEN CALL pyqueue__deps_popped(v_queue, v_rows); END IF;
        END IF;
        SET SESSION group_concat_max_len = v_gcl;
    END IF;

    -- (headers: SQL NULL for none; a JSON null read into a text column is NULL on MariaDB, 'null' on some MySQL
    -- versions, never a stored value: those are objects)
    SELECT r.p_key, r.p_kind, r.payload, r.priority, r.attempts, r.created_at, NULLIF(r.headers, 'null') AS headers
      FROM JSON_TABLE(COALESCE(v_rows, '[]'), '$[*]' COLUMNS (
               ord        FOR ORDINALITY,
               c_id       BIGINT       PATH '$.id',
               p_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.k',
               p_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.kd',
               payload    LONGTEXT     CHARACTER SET utf8mb4 PATH '$.pl',
               priority   INT          PATH '$.pr',
               attempts   INT          PATH '$.at',
               created_at DATETIME(6)  PATH '$.ca',
               headers    LONGTEXT     CHARACTER SET utf8mb4 PATH '$.hd')) AS r
     WHERE v_deleted = v_taken
        OR NOT EXISTS (SELECT 1 FROM pyqueue_message m WHERE m.id = r.c_id)
     ORDER BY r.ord;
END //

-- queue_reserve: hands out up to in_n ready messages, highest priority first, FIFO within one; each is invisible to
-- others until in_timeout (NULL = the queue's visibility_timeout) and carries a fresh random token. in_worker is
-- recorded; in_kinds NULL = any, else a non-empty JSON array of strings. attempts counts this delivery. A message whose
-- expired reservation was its last allowed delivery is dead-lettered instead (a busy group head is left for a later
-- reserve: a reserve never waits). Result: (p_key, p_kind, payload, token, priority, attempts, created_at,
-- scheduled_at_initially, headers), empty when nothing is ready or the queue is paused. Ways (docs/contract/05_reserve.md):
-- one message of a plain queue in a few statements (below); a batch of up to 5000 by id (pyqueue__claim_short_batch),
-- with one limit or a queue-wide rate set-based (pyqueue__claim_limited_batch), with other limits a candidate at a
-- time (pyqueue__reserve_limited), else pages read without locks, each claimed by one UPDATE joined to a SKIP LOCKED
-- read by id (pyqueue__reserve): never handed out twice. In autocommit mode a batch's claims are one transaction of
-- their own. Locks: the claimed rows until the call (or the caller's transaction) ends; a REPEATABLE READ transaction
-- that already read pyqueue_message sees messages pushed since in its next transaction.
DROP PROCEDURE IF EXISTS queue_reserve //
CREATE PROCEDURE queue_reserve(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6),
    IN in_n       DECIMAL(65,30),
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_maxres DECIMAL(20,6);
    DECLARE v_max, v_found, v_claims INT;
    DECLARE v_paused, v_limited, v_checked, v_above BOOLEAN;
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_id BIGINT;
    DECLARE v_token, v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_ids LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_gcl BIGINT;
    DECLARE v_own, v_txn INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    CALL pyqueue__check_clock();
    IF (CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
        AND LOCATE(X'ED', CAST(CONCAT(in_queue, COALESCE(in_worker, '')) AS BINARY)) = 0
        AND in_kinds IS NULL AND COALESCE(in_n = TRUNCATE(in_n, 0) AND in_n BETWEEN 1 AND 2147483647, TRUE)
        AND COALESCE(in_timeout > 0 AND in_timeout <= 3155760000, TRUE) AND COALESCE(CHAR_LENGTH(in_worker), 0) <= 255
       ) IS NOT TRUE THEN  -- (plainly valid: nothing to check; the queue is looked up below)
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
        CALL pyqueue__reserve_args(in_worker, in_timeout, in_n, in_kinds, v_kinds);
        SET v_checked = TRUE;
    END IF;
    SET v_queue = in_queue;
    -- settings, limits and whether any message has a priority above 0 (one probe, not MAX): ONE plain read (a
    -- subquery of IF would be a locking read, waiting for a limit being set). Limits and rates of kinds the call does
    -- not take do not count: a reserve of other kinds goes the general way, as on a queue without limits.
    SELECT COUNT(*), MAX(q.visibility_timeout), MAX(q.max_attempts), MAX(q.dead_letter_queue), MAX(q.paused),
           EXISTS (SELECT 1 FROM pyqueue_limit l
                    WHERE l.queue_name = v_queue AND (v_kinds IS NULL OR JSON_CONTAINS(v_kinds, JSON_QUOTE(l.p_kind))))
           OR EXISTS (SELECT 1 FROM pyqueue_rate r
                       WHERE r.queue_name = v_queue
                         AND (v_kinds IS NULL OR r.p_kind = '' OR JSON_CONTAINS(v_kinds, JSON_QUOTE(r.p_kind)))),
           EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                    WHERE m.queue_name = v_queue AND m.priority > 0),
           MAX(q.max_reservation)
      INTO v_found, v_vis, v_max, v_dlq, v_paused, v_limited, v_above, v_maxres
      FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    IF in_timeout > v_maxres THEN CALL pyqueue__check_reservation_cap(in_timeout, v_maxres); END IF;
    /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
    IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
    -- In a SERIALIZABLE session the reads below are locking reads, which can deadlock between two claims: in autocommit
    -- mode (MariaDB; on MySQL 8.0 the client opens it) the call is one transaction of its own, a failure keeps none.
    /*M!100300 IF v_own = 1 AND @@SESSION.tx_isolation = 'SERIALIZABLE' THEN
        START TRANSACTION;
        SET v_txn = 1, v_own = 0;
    END IF; */
    IF v_own = 1 AND v_checked IS NULL AND COALESCE(in_n, 1) = 1 AND NOT v_paused AND NOT v_limited
       AND NOT v_above THEN
        -- One message in autocommit mode, nothing above priority 0, in as few statements as it takes (each costs about
        -- a small query), in a transaction of its own: the oldest ready message of priority 0 that no other call holds
        -- (SKIP LOCKED), claimed with a random token, read back. Anything else (nothing ready at priority 0, a message
        -- due for dead-lettering, a deadlock) goes the general way below, which walks every priority.
        BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET v_claims = 0; END;
            SET v_claims = 0;
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED;  -- a leased row it reads past is not kept locked
            START TRANSACTION;
            CALL pyqueue__claim_short(v_queue, in_worker, in_timeout, v_vis, v_max, v_id, v_token);
            SET v_claims = v_id IS NOT NULL;
            COMMIT;
        END;
        IF v_claims = 1 THEN
            SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
                   m.attempts, m.created_at, m.scheduled_at_initially, m.headers
              FROM pyqueue_message m FORCE INDEX (PRIMARY)
             WHERE m.id = v_id AND m.reserve_token = v_token;
        END IF;
    END IF;
    IF v_own = 1 AND v_checked IS NULL AND COALESCE(in_n, 1) BETWEEN 2 - v_limited AND 5000 AND NOT v_paused
       AND NOT (v_above AND v_limited) THEN  -- (with limits or rates, from 1 and priority 0: pyqueue__claim_limited_batch)
        -- A batch in autocommit mode, nothing below priority 0 (pyqueue__claim_short_batch: plain reads of the ready ids
        -- a priority at a time from the top, a locking read of them by id, one UPDATE by id; the general way reads the
        -- candidates as JSON, claims them by one UPDATE joined to a SKIP LOCKED read, parses them again to read back),
        -- in a transaction of its own at READ COMMITTED (no gap locks), read back by id and token in its order. Fewer
        -- than in_n is the whole answer. Anything else (a message below priority 0, one due for dead-lettering, any
        -- error) rolls back and goes the general way below. At most 5000: the general way's page.
        BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN
                ROLLBACK;
                IF v_gcl IS NOT NULL THEN SET SESSION group_concat_max_len = v_gcl; END IF;
                SET v_claims = NULL;
            END;
            SET v_claims = NULL;
            IF @@SESSION.group_concat_max_len < 20 * in_n + 2 THEN  -- the ids, at most 19 digits and a comma each
                SET v_gcl = @@SESSION.group_concat_max_len;
                SET SESSION group_concat_max_len = CAST(20 * in_n + 2 AS UNSIGNED);  -- (in_n is a DECIMAL: refused as it is)
            END IF;
            CALL pyqueue__random_token(v_secret);
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
            START TRANSACTION;
            IF v_limited THEN
                CALL pyqueue__claim_limited_batch(v_queue, in_worker, COALESCE(in_n, 1), in_timeout, v_vis, v_max,
                                                  v_secret, v_ids, v_claims);
            ELSE CALL pyqueue__claim_short_batch(v_queue, in_worker, in_n, in_timeout, v_vis, v_max, v_above, v_secret,
                                                 v_ids, v_claims);
            END IF;
            IF v_claims IS NULL THEN ROLLBACK; ELSE COMMIT; END IF;
            IF v_gcl IS NOT NULL THEN SET SESSION group_concat_max_len = v_gcl; END IF;
        END;
        IF v_claims IS NOT NULL THEN  -- (none found: the empty result)
            SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
                   m.attempts, m.created_at, m.scheduled_at_initially, m.headers
              -- (JSON_TABLE materialised first: sorted as a table function, its rows went through a merge file
              -- on disk from about 20 up, a merge pass and two temporary files created and removed a call;
              -- sorted as a derived table, in memory)
              FROM (SELECT j.ord, j.c_id FROM JSON_TABLE(COALESCE(v_ids, '[]'), '$[*]' COLUMNS (
                        ord  FOR ORDINALITY,
                        c_id BIGINT PATH '$')) AS j
                     LIMIT 18446744073709551615) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_secret, m.id), 256), 32), 13, 1, '4'),
               17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
               9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-')
             ORDER BY j.ord;
            SET v_claims = 1;
        END IF;
    END IF;
    IF COALESCE(v_claims, 0) = 0 THEN  -- (not handed out above)
        IF NOT v_paused AND v_limited THEN
            CALL pyqueue__reserve_limited(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max,
                                          v_dlq, FALSE, NULL, v_ids, v_claims);
        ELSE
            CALL pyqueue__reserve(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max, v_dlq,
                                  v_paused);
        END IF;
    END IF;
    IF v_txn = 1 THEN COMMIT; END IF;
END //

DELIMITER ;
