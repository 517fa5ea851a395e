-- ==== settle ====
-- Take messages out: reserve (or pop, at-most-once), then commit, roll back, fail, extend or move the reservation,
-- showing its token; remove deletes a message whatever its state. Routines acting on one message by (queue, p_key,
-- p_kind) locate it with a plain read of the unique key, then change it by id, re-checking the token in that
-- statement under its row lock (a locking lookup takes the index entry before the row and deadlocked with a consumer
-- taking over the expired reservation). The price: in a REPEATABLE READ transaction older than the reservation the
-- lookup may miss it and answer 0; the message comes back after its timeout. (A single-table UPDATE by the key
-- columns is avoided too: with stale statistics MariaDB 10.11 planned it as a range scan locking a whole priority.)

DELIMITER //

-- pyqueue__dead_letter: message in_id of in_queue, just claimed by the caller with in_token, goes to
-- in_dead_letter_queue (nowhere when NULL) and counts in dead_count; out_done = 1 when it left. Steps, each one
-- statement: read it by id and token; upsert it into the dead-letter queue (a newer dead letter of the same key and
-- kind replaces the older one, ready with attempts 0, so a holder of the older one cannot commit the newer away; no
-- group; keeps last_error; dead_from, dead_attempts); delete it by id and token; if that deleted it, dead_count + 1.
-- Interrupted, it stays claimed and the next reserve dead-letters it again (the upsert absorbs the duplicate;
-- dead_count may miss one). A grouped message: its group row is locked first and the next one takes its place
-- (pyqueue__group_next), in a transaction of its own in autocommit mode, dead_count counted after it (never the queue
-- row while a group row is held); with in_nowait the group row is taken with SKIP LOCKED, and when busy nothing
-- happens, out_done = -1 (the caller gives the claim back). The dead-letter copy starts without progress or cancel
-- request, as a new push. On a queue that keeps results, the outcome 'failed' is recorded after the delete
-- (pyqueue__result_put, with its last_error, attempts and progress), in the same transaction when there is one. A
-- schedule's pending occurrence makes way for the next one first (pyqueue__schedule_next, as queue_commit).
-- Locks: the message row, the dead-letter message row, the queue row, each for one statement (or until the caller's
-- transaction ends); for a grouped message its group row first and the group's next message; the result row.
DROP PROCEDURE IF EXISTS pyqueue__dead_letter //
CREATE PROCEDURE pyqueue__dead_letter(
    IN  in_queue             VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_dead_letter_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id                BIGINT,
    IN  in_token             CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_now               DATETIME(6),
    IN  in_nowait            BOOLEAN,
    OUT out_done             INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_found INT DEFAULT 1;
    DECLARE v_key, v_group, v_head_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind, v_head_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_payload LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_priority, v_attempts, v_retry INT;
    DECLARE v_created DATETIME(6);
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_locked, v_txn, v_busy, v_tries, v_deleted, v_own INT DEFAULT 0;
    DECLARE v_hist BIGINT;
    DECLARE v_progress, v_headers LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_results BOOLEAN;
    SET out_done = 0;
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SELECT m.p_key, m.p_kind, m.payload, m.priority, m.created_at, m.attempts, m.last_error, m.group_key,
               m.progress, (SELECT q.result_retention IS NOT NULL FROM pyqueue_queue q WHERE q.queue_name = in_queue),
               m.headers
          INTO v_key, v_kind, v_payload, v_priority, v_created, v_attempts, v_error, v_group, v_progress, v_results,
               v_headers
          FROM pyqueue_message m
         WHERE m.id = in_id AND m.reserve_token = in_token;
    END;
    IF v_found = 1 AND v_group IS NOT NULL THEN CALL pyqueue__own_transaction(TRUE, v_own); END IF;
    IF v_found = 1 AND v_key LIKE '%@____-__-__T__:__:__Z' THEN
        -- a schedule's occurrence given up: the schedule goes on (before the DELETE, as queue_commit)
        CALL pyqueue__schedule_next(in_queue, v_key, v_kind);
    END IF;
    attempt: WHILE v_found = 1 DO
        SET v_retry = 0, v_tries = v_tries + 1, v_deleted = 0, v_hist = NULL;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF; RESIGNAL; END;
            IF v_group IS NOT NULL THEN
                IF v_own = 1 THEN
                    START TRANSACTION;
                    SET v_txn = 1;
                END IF;
                CALL pyqueue__group_lock(in_queue, v_group, in_nowait, v_locked, v_head_key, v_head_kind);
                SET v_busy = (in_nowait AND v_locked = 0);  -- busy: left alone for this call
            END IF;
            IF NOT v_busy THEN
                IF in_dead_letter_queue IS NOT NULL THEN
                    INSERT INTO pyqueue_message
                           (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                            scheduled_at_initially, created_at, attempts, last_error, dead_from, dead_attempts,
                            headers)
                    VALUES (in_dead_letter_queue, v_key, v_kind, v_payload, v_priority,
                            in_now, in_now, in_now, v_created, 0, v_error, in_queue, v_attempts, v_headers)
                    ON DUPLICATE KEY UPDATE
                           payload = v_payload, priority = v_priority, created_at = v_created,
                           -- (read before it changes: assignments run left to right)
                           ready_at = IF(scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999', ready_at, in_now),
                           scheduled_at = IF(scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999', scheduled_at, in_now),
                           scheduled_at_initially = in_now, attempts = 0,
                           reserved_by = NULL, reserve_token = NULL,
                           last_error = v_error, dead_from = in_queue, dead_attempts = v_attempts,
                           progress = NULL, cancel_requested_at = NULL, headers = v_headers;
                END IF;
                CALL pyqueue__archive(in_queue, in_id, in_token, 'dead_lettered', in_dead_letter_queue, in_now, v_hist);
                DELETE FROM pyqueue_message WHERE id = in_id AND reserve_token = in_token;
                SET v_deleted = ROW_COUNT();
                CALL pyqueue__unarchive(v_hist, v_deleted);
                IF v_deleted = 1 AND v_results THEN  -- and the messages that wait for it are cancelled
                    CALL pyqueue__result_put(in_queue, v_key, v_kind, 'failed', NULL, v_error, v_attempts, v_progress,
                                             in_now, FALSE, 'failed');
                END IF;
                IF v_deleted = 1 AND v_locked = 1 AND v_head_key = v_key AND v_head_kind = v_kind THEN
                    CALL pyqueue__group_next(in_queue, v_group, in_now);
                ELSEIF v_deleted = 1 AND v_locked = 1 THEN  -- a live message besides the head (a claimed one is live)
                    CALL pyqueue__group_extra_left(in_queue, v_group, in_now);
                END IF;
                IF v_deleted = 1 AND v_txn = 0 THEN UPDATE pyqueue_queue SET dead_count = dead_count + 1 WHERE queue_name = in_queue; END IF;
            END IF;
            IF v_txn = 1 THEN
                COMMIT;
                SET v_txn = 0;
            END IF;
        END;
        IF v_retry = 0 THEN LEAVE attempt; END IF;
    END WHILE;
    IF v_busy THEN
        SET out_done = -1;
    ELSEIF v_deleted = 1 THEN
        IF v_group IS NOT NULL AND v_own = 1 THEN
            -- after the group's transaction; a deadlock victim here misses one count, never a message
            BEGIN
                DECLARE CONTINUE HANDLER FOR 1213, 1467 BEGIN END;
                UPDATE pyqueue_queue SET dead_count = dead_count + 1 WHERE queue_name = in_queue;
            END;
        END IF;
        SET out_done = 1;
    END IF;
END //

-- pyqueue__give_back: queue_rollback, queue_fail and queue_give_up. The message is eligible again after in_delay (NULL
-- = 0); with in_set_error its last_error becomes in_error (first 2000 characters). out_outcome: 'retry', or after
-- max_attempts deliveries (with in_give_up: at once, whatever its attempts) 'dead_lettered' / 'dropped' (no
-- dead-letter queue); NULL when the token no longer holds. A schedule's pending occurrence that queue_fail retries
-- advances its schedule (pyqueue__schedule_next: the next occurrence is pushed at its time); a rollback hands the
-- same occurrence back and pushes nothing. Steps: locate by
-- key and token (plain read); below max_attempts one UPDATE by id and token clears the reservation; otherwise one
-- UPDATE swaps the token for a new one (a claim, visible again only after the visibility timeout) and
-- pyqueue__dead_letter follows, in autocommit mode in a transaction of its own (the queue row first; a grouped message
-- as pyqueue__dead_letter). Interrupted after the claim, the next reserve dead-letters it (no loss, no double count);
-- for queue_give_up below max_attempts, the next reserve after the claim's visibility timeout delivers it again.
-- Locks: the message row (dead-lettering: the queue row, the message row, the dead-letter row), each for one
-- statement (or until the caller's transaction ends).
DROP PROCEDURE IF EXISTS pyqueue__give_back //
CREATE PROCEDURE pyqueue__give_back(
    IN  in_queue     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_key       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_token     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_delay     DECIMAL(20,6),
    IN  in_set_error BOOLEAN,
    IN  in_error     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_give_up   BOOLEAN,
    OUT out_outcome  VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_kind, v_dlq, v_head_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group, v_head_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held, v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_attempts, v_dead, v_retry, v_locked INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_found INT DEFAULT 1;
    DECLARE v_id BIGINT;
    DECLARE v_own, v_tries INT DEFAULT 0;
    SET out_outcome = NULL;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    CALL pyqueue__check_duration('delay', in_delay, FALSE);
    IF LOCATE(X'ED', CAST(in_error AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'error', in_error); END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token),
        v_error = LEFT(in_error, 2000);
    CALL pyqueue__own_transaction(FALSE, v_own);
    SET v_now = UTC_TIMESTAMP(6);
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SELECT m.id, m.attempts, m.group_key INTO v_id, v_attempts, v_group
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
           AND m.reserve_token = v_held;
    END;
    IF v_found = 1 AND v_attempts < v_max AND NOT in_give_up THEN
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                UPDATE pyqueue_message
                   SET scheduled_at = v_now + INTERVAL CAST(COALESCE(in_delay, 0) * 1000000 AS SIGNED) MICROSECOND,
                       ready_at = scheduled_at,
                       reserve_token = NULL,
                       reserved_by = NULL,
                       last_error = IF(in_set_error, v_error, last_error)
                 WHERE id = v_id AND reserve_token = v_held;
                IF ROW_COUNT() = 1 THEN SET out_outcome = 'retry'; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
        IF out_outcome = 'retry' AND in_set_error AND v_key LIKE '%@____-__-__T__:__:__Z' THEN
            -- a schedule's occurrence that failed and will be retried holds back nothing: the next one is pushed
            -- now, at its own time and key, and the retried one is no longer the pending one
            CALL pyqueue__schedule_next(v_queue, v_key, v_kind);
        END IF;
    ELSEIF v_found = 1 AND v_group IS NOT NULL THEN
        -- A grouped message: the claim, then pyqueue__dead_letter (group row first; never the queue row under it)
        CALL pyqueue__own_transaction(TRUE, v_own);
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1, out_outcome = NULL;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                IF v_own <> 1 THEN CALL pyqueue__group_lock(v_queue, v_group, FALSE, v_locked, v_head_key, v_head_kind); END IF;
                CALL pyqueue__random_token(v_token);
                UPDATE pyqueue_message
                   SET scheduled_at = v_now + INTERVAL CAST(v_vis * 1000000 AS SIGNED) MICROSECOND,
                       reserve_token = v_token,
                       last_error = IF(in_set_error, v_error, last_error)
                 WHERE id = v_id AND reserve_token = v_held;
                IF ROW_COUNT() = 1 THEN
                    CALL pyqueue__dead_letter(v_queue, v_dlq, v_id, v_token, v_now, FALSE, v_dead);
                    SET out_outcome = IF(v_dlq IS NULL, 'dropped', 'dead_lettered');
                END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
    ELSEIF v_found = 1 THEN
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1, out_outcome = NULL;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
                IF v_own = 1 THEN START TRANSACTION; END IF;
                -- the queue row before the message row, as queue_drop and pushes lock them
                SELECT q.dead_count INTO v_dead FROM pyqueue_queue q WHERE q.queue_name = v_queue FOR UPDATE;
                CALL pyqueue__random_token(v_token);
                UPDATE pyqueue_message
                   SET scheduled_at = v_now + INTERVAL CAST(v_vis * 1000000 AS SIGNED) MICROSECOND,
                       reserve_token = v_token,
                       last_error = IF(in_set_error, v_error, last_error)
                 WHERE id = v_id AND reserve_token = v_held;
                IF ROW_COUNT() = 1 THEN
                    CALL pyqueue__dead_letter(v_queue, v_dlq, v_id, v_token, v_now, FALSE, v_dead);
                    SET out_outcome = IF(v_dlq IS NULL, 'dropped', 'dead_lettered');
                END IF;
                IF v_own = 1 THEN COMMIT; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
    END IF;
END //

-- pyqueue__extend: queue_extend and queue_renew: pushes the reservation's end to now + in_timeout (NULL = the queue's
-- visibility_timeout) and replaces the token with a new random one: out_token, NULL when in_token no longer holds;
-- out_id: the message's id. A kind with a limit
-- extends only while its slot is still this reservation's, in three statements in reserve's lock order: the slot
-- marked as a claim in progress until the later of the new end and the current one; the message's new end and token
-- (by id, token, attempts); the slot (by number) holding this reservation again, until the new end. Interrupted, the
-- slot stays busy until the later of the two ends at most.
-- Locks: the slot rows, then the message row, each for one statement; a deadlock victim runs again in autocommit mode.
DROP PROCEDURE IF EXISTS pyqueue__extend //
CREATE PROCEDURE pyqueue__extend(
    IN  in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_token   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_timeout DECIMAL(20,6),
    OUT out_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_id     BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held, v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_maxres DECIMAL(20,6);
    DECLARE v_max, v_att, v_slot, v_step, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id BIGINT;
    DECLARE v_until, v_held_until DATETIME(6);
    DECLARE v_slots, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
    CALL pyqueue__own_transaction(FALSE, v_own);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    IF in_timeout IS NOT NULL THEN  -- (NULL: the visibility_timeout, never above max_reservation)
        SELECT MAX(q.max_reservation) INTO v_maxres FROM pyqueue_queue q WHERE q.queue_name = v_queue;
        CALL pyqueue__check_reservation_cap(in_timeout, v_maxres);
    END IF;
    SELECT COALESCE(MAX(m.id), 0), MAX(m.attempts), MAX(m.scheduled_at) INTO v_id, v_att, v_held_until
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
       AND m.reserve_token = v_held;
    IF v_id > 0 THEN
        CALL pyqueue__random_token(v_token);
        SET v_until = UTC_TIMESTAMP(6)
                      + INTERVAL CAST(COALESCE(in_timeout, v_vis) * 1000000 AS SIGNED) MICROSECOND;
        -- the three steps above (1 and 3 only for a kind with a limit), each one statement
        SET v_step = IF(EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue AND l.p_kind = v_kind),
                        1, 2);
        steps: WHILE v_step <= 3 DO
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                IF v_step = 1 THEN
                    -- the slot by number: step 3 gives back this one only (a reserver may hold another for it)
                    SELECT MIN(s.slot_no) INTO v_slot
                      FROM pyqueue_limit_slot s
                     WHERE s.queue_name = v_queue AND s.p_kind = v_kind AND s.msg_id = v_id AND s.msg_attempts = v_att;
                    -- busy until the later of the new end and the current one: until step 2 lands, the
                    -- message still holds its current reservation (an extend that shortens it, delayed
                    -- between its steps, let a reserver take the slot while that reservation was live)
                    UPDATE pyqueue_limit_slot
                       SET msg_attempts = v_att + 1, msg_until = GREATEST(v_until, v_held_until)
                     WHERE queue_name = v_queue AND p_kind = v_kind AND slot_no = v_slot
                       AND msg_id = v_id AND msg_attempts = v_att;
                    SET v_slots = ROW_COUNT();
                    IF v_slots = 0
                       AND EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue AND l.p_kind = v_kind) THEN
                        SET v_token = NULL;  -- its slot went to another reservation
                    END IF;
                ELSEIF v_step = 2 AND v_token IS NOT NULL THEN
                    UPDATE pyqueue_message
                       SET scheduled_at = v_until, reserve_token = v_token
                     WHERE id = v_id AND reserve_token = v_held AND attempts = v_att;
                    IF ROW_COUNT() <> 1 THEN SET v_token = NULL; END IF;
                ELSEIF v_step = 3 AND v_slots > 0 THEN
                    UPDATE pyqueue_limit_slot
                       SET msg_attempts = v_att, msg_until = IF(v_token IS NULL, msg_until, v_until)
                     WHERE queue_name = v_queue AND p_kind = v_kind AND slot_no = v_slot
                       AND msg_id = v_id AND msg_attempts = v_att + 1;
                END IF;
            END;
            IF v_retry = 0 THEN SET v_step = v_step + 1; END IF;
        END WHILE;
    END IF;
    SET out_token = v_token, out_id = v_id;
END //

-- queue_commit: deletes the message if in_token still holds its reservation. Result: one row, committed = 1, or 0
-- when it no longer holds (expired and re-reserved, committed, removed). A grouped message goes through
-- pyqueue__group_leave (its group row first, the next message takes its place). Plainly valid arguments skip the
-- helpers' checks (nested CALLs cost MariaDB tens of microseconds each). In autocommit mode (MariaDB: MySQL 8.0 cannot
-- tell, and its callers open the transaction) a commit that archives or schedules the next occurrence is one
-- transaction of its own, so a client needs none around the call. On a queue that keeps results, the outcome
-- 'succeeded' (no result: queue_commit_result gives one) is recorded in the same transaction (the queue's settings are
-- read by the statement that reads them anyway: a queue without results pays nothing for them). Locks: the message
-- row (in autocommit mode, of a key that no longer exists: the gap where it would be), for one statement or the call's
-- own transaction (or until the caller's transaction ends), the result row; in autocommit mode a deadlock victim runs
-- again.
DROP PROCEDURE IF EXISTS queue_commit //
CREATE PROCEDURE queue_commit(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
body: BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_retry INT;
    DECLARE v_id, v_hist BIGINT;
    DECLARE v_history, v_results BOOLEAN;
    DECLARE v_done, v_own, v_tries, v_txn INT DEFAULT 0;
    DECLARE v_found, v_attempts INT;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    CALL pyqueue__check_clock();
    IF (    CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
            AND CHAR_LENGTH(in_key) BETWEEN 1 AND 255 AND NOT (in_key LIKE '% ')
            AND CHAR_LENGTH(in_kind) BETWEEN 1 AND 128 AND NOT (in_kind LIKE '% ')
            AND LOCATE(X'ED', CAST(CONCAT(in_queue, in_key, in_kind) AS BINARY)) = 0
            AND in_token REGEXP '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\\z'
       ) IS NOT TRUE THEN
        CALL pyqueue__check_queue(in_queue);
        CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
    IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
    -- The common case in autocommit mode, in two statements (each statement of a procedure costs MariaDB as much as a
    -- small query): on a queue without history, a message outside any group that is not a recurring occurrence goes
    -- by one DELETE of its key and token. Anything else (a token that no longer holds too) goes the general way below,
    -- and so does a call inside a transaction, where the DELETE's lock on a key that no longer exists (a gap lock)
    -- would last until that transaction ends.
    SELECT COUNT(*), MAX(q.history_retention) IS NOT NULL, MAX(q.result_retention) IS NOT NULL
      INTO v_found, v_history, v_results
      FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    IF v_own = 1 AND NOT v_history AND NOT v_results AND NOT (v_key LIKE '%@____-__-__T__:__:__Z') THEN
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                -- by the key index, forced: planned freely, MariaDB 10.11 took the group index for 'group_key IS
                -- NULL' in a queue with groups and few other messages, scanning (and, at REPEATABLE READ, locking)
                -- every message of the queue outside a group, which a racing reserve then skipped as taken
                DELETE m FROM pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
                 WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind AND m.reserve_token = v_held
                   AND m.group_key IS NULL;
                SET v_done = ROW_COUNT();
            END;
        UNTIL v_retry = 0 END REPEAT;
        IF v_done = 1 THEN SELECT v_done AS committed; LEAVE body; END IF;
        SET v_tries = 0;
    END IF;
    SELECT COALESCE(MAX(m.id), 0), MAX(m.group_key),
           (SELECT q.history_retention IS NOT NULL FROM pyqueue_queue q WHERE q.queue_name = v_queue)
      INTO v_id, v_group, v_history  -- (v_results: as read above)
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
       AND m.reserve_token = v_held;
    IF v_id = 0 THEN CALL pyqueue__check_queue(in_queue); END IF;  -- unknown queue?
    IF v_group IS NOT NULL THEN
        CALL pyqueue__own_transaction(TRUE, v_own);
        CALL pyqueue__group_leave(IF(v_results, 'commit_result', 'commit'), v_queue, v_group, v_id, v_key, v_kind,
                                  v_held, NULL, NULL, UTC_TIMESTAMP(6), v_own, v_done);
    ELSEIF v_id > 0 THEN
        -- in autocommit mode the archiving, the next occurrence and the removal are one transaction of the call's own
        -- (interrupted, nothing of it stays), run again whole when it deadlocks
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1, v_hist = NULL;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF; RESIGNAL; END;
                IF v_own = 1 AND (v_history OR v_results OR v_key LIKE '%@____-__-__T__:__:__Z') THEN
                    START TRANSACTION;
                    SET v_txn = 1;
                END IF;
                IF v_results THEN  -- what the result row copies, read under the message's lock
                    SELECT m.attempts, m.last_error, m.progress INTO v_attempts, v_error, v_progress
                      FROM pyqueue_message m FORCE INDEX (PRIMARY)
                     WHERE m.id = v_id AND m.reserve_token = v_held
                       FOR UPDATE;
                END IF;
                IF v_history THEN
                    CALL pyqueue__archive(v_queue, v_id, v_held, 'committed', NULL, UTC_TIMESTAMP(6), v_hist);
                END IF;
                IF v_key LIKE '%@____-__-__T__:__:__Z' THEN  -- a recurring message's occurrence: its next one
                    -- only while the token holds it, read under the message's lock (a reserver that took an expired
                    -- reservation over since the read above made this call stale: it pushes nothing)
                    SELECT COUNT(*) INTO v_found FROM pyqueue_message m FORCE INDEX (PRIMARY)
                     WHERE m.id = v_id AND m.reserve_token = v_held FOR UPDATE;
                    IF v_found = 1 THEN CALL pyqueue__schedule_next(v_queue, v_key, v_kind); END IF;
                END IF;
                DELETE FROM pyqueue_message WHERE id = v_id AND reserve_token = v_held;
                SET v_done = ROW_COUNT();
                IF v_hist IS NOT NULL AND v_done = 0 THEN DELETE FROM pyqueue_history WHERE id = v_hist; END IF;  -- unarchive
                IF v_done = 1 AND v_results THEN  -- and the messages that wait for it
                    CALL pyqueue__result_put(v_queue, v_key, v_kind, 'succeeded', NULL, v_error, v_attempts, v_progress,
                                             UTC_TIMESTAMP(6), TRUE, NULL);
                END IF;
                IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
    END IF;
    SELECT v_done AS committed;
END //

-- queue_rollback: gives the message back, eligible after in_delay (NULL = 0), attempts and last_error kept; after
-- max_attempts deliveries it is dead-lettered (or dropped) instead. Result: one row, rolled_back = 1, or 0 when the
-- token no longer holds. Steps and locks: pyqueue__give_back.
DROP PROCEDURE IF EXISTS queue_rollback //
CREATE PROCEDURE queue_rollback(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_delay DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_outcome VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_clock();
    CALL pyqueue__give_back(in_queue, in_key, in_kind, in_token, in_delay, FALSE, NULL, FALSE, v_outcome);
    SELECT (v_outcome IS NOT NULL) + 0 AS rolled_back;
END //

-- queue_fail: queue_rollback that records in_error (first 2000 characters; NULL = no text) as last_error.
-- Result: one row, outcome 'retry', 'dead_lettered', 'dropped', or NULL when the token no longer holds.
-- Steps and locks: pyqueue__give_back.
DROP PROCEDURE IF EXISTS queue_fail //
CREATE PROCEDURE queue_fail(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_delay DECIMAL(20,6),
    IN in_error LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_outcome VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_clock();
    CALL pyqueue__give_back(in_queue, in_key, in_kind, in_token, in_delay, TRUE, in_error, FALSE, v_outcome);
    SELECT v_outcome AS outcome;
END //

-- queue_snooze: gives the message back, eligible after in_delay (NULL = 0), WITHOUT using up an attempt: attempts - 1
-- (this delivery does not count), never dead-lettered by the snooze, last_error kept. A FIFO group's head keeps its
-- place, a limited kind's slot is free again (as after queue_rollback). Result: one row, snoozed = 1, or 0 when the
-- token no longer holds. Steps: locate by key and token (plain read); one UPDATE by id and token; for a kind with a
-- limit, its slot freed by number of the snoozed reservation, while the message still shows attempts - 1 (not reserved
-- again meanwhile). Interrupted in between, the slot stays busy until the old reservation's end: too few hand-outs,
-- never too many. Locks: the message row, then the slot row, each for one statement; a deadlock victim runs again in
-- autocommit mode.
DROP PROCEDURE IF EXISTS queue_snooze //
CREATE PROCEDURE queue_snooze(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_delay DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_att, v_retry INT;
    DECLARE v_id BIGINT;
    DECLARE v_now DATETIME(6);
    DECLARE v_done, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    CALL pyqueue__check_duration('delay', in_delay, FALSE);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    CALL pyqueue__own_transaction(FALSE, v_own);
    SELECT COALESCE(MAX(m.id), 0), MAX(m.attempts) INTO v_id, v_att
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind AND m.reserve_token = v_held;
    IF v_id > 0 THEN
        SET v_now = UTC_TIMESTAMP(6);
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                UPDATE pyqueue_message
                   SET scheduled_at = v_now + INTERVAL CAST(COALESCE(in_delay, 0) * 1000000 AS SIGNED) MICROSECOND,
                       ready_at = scheduled_at, reserve_token = NULL, reserved_by = NULL, attempts = GREATEST(attempts - 1, 0)
                 WHERE id = v_id AND reserve_token = v_held;
                SET v_done = ROW_COUNT();
            END;
        UNTIL v_retry = 0 END REPEAT;
        IF v_done = 1 AND EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue AND l.p_kind = v_kind) THEN
            SET v_tries = 0;
            REPEAT
                SET v_retry = 0, v_tries = v_tries + 1;
                BEGIN
                    DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                    UPDATE pyqueue_limit_slot s
                       SET s.msg_id = NULL, s.msg_attempts = NULL, s.msg_until = NULL
                     WHERE s.queue_name = v_queue AND s.p_kind = v_kind AND s.msg_id = v_id AND s.msg_attempts = v_att
                       AND EXISTS (SELECT 1 FROM pyqueue_message m
                                    WHERE m.id = v_id AND m.attempts = v_att - 1 AND m.reserve_token IS NULL);
                END;
            UNTIL v_retry = 0 END REPEAT;
        END IF;
    END IF;
    SELECT v_done AS snoozed;
END //

-- queue_give_up: ends the message now, whatever its attempts: records in_error (first 2000 characters; NULL = no text)
-- as last_error and dead-letters it as queue_fail does after max_attempts deliveries (the dead letter keeps the error,
-- dead_from, dead_attempts), or drops it when the queue has no dead-letter queue. Result: one row, outcome
-- 'dead_lettered', 'dropped', or NULL when the token no longer holds. Steps and locks: pyqueue__give_back.
DROP PROCEDURE IF EXISTS queue_give_up //
CREATE PROCEDURE queue_give_up(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_error LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_outcome VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_clock();
    CALL pyqueue__give_back(in_queue, in_key, in_kind, in_token, NULL, TRUE, in_error, TRUE, v_outcome);
    SELECT v_outcome AS outcome;
END //

-- queue_extend: pushes the reservation's end to now + in_timeout (NULL = the queue's visibility_timeout) and replaces
-- the token with a new random one (pyqueue__extend). Result: one row, token, NULL when in_token no longer holds.
-- Steps and locks: pyqueue__extend.
DROP PROCEDURE IF EXISTS queue_extend //
CREATE PROCEDURE queue_extend(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_id BIGINT;
    CALL pyqueue__check_clock();
    CALL pyqueue__extend(in_queue, in_key, in_kind, in_token, in_timeout, v_token, v_id);
    SELECT v_token AS token;
END //

-- queue_move: commits the reservation here and pushes the message to in_to_queue (payload NULL = unchanged; priority
-- kept; schedule, created_at and attempts start afresh, except into its own queue, which keeps the attempts; progress
-- and a cancel request are kept into its own queue only). A move records no result. A live
-- message with the same key and kind there stays (dedup). Result: one row, moved = 1, or 0 when the token no longer
-- holds. ONE UPDATE of queue_name (payload, schedule, reservation) by id and token; on a duplicate key (1062) one
-- DELETE by id and token instead. A grouped message keeps its group into its own queue; moved away it leaves its
-- group (pyqueue__group_leave). A schedule's pending occurrence moved (anywhere, its own queue included) makes way for
-- the next occurrence as a commit does (pyqueue__schedule_next before the UPDATE, as queue_commit before its DELETE,
-- while a locking read finds the token holding it; in autocommit mode in a transaction of the call's own): the
-- schedule goes on.
-- Locks: the message row and a shared lock on the target queue row, for one statement; for a grouped message moved
-- away, the group row first, until the transaction ends; for an occurrence, the message row, then the schedule row,
-- until the transaction ends.
DROP PROCEDURE IF EXISTS queue_move //
CREATE PROCEDURE queue_move(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_to_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_to_queue, v_to_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_to_vis DECIMAL(20,6);
    DECLARE v_to_max INT;
    DECLARE v_to_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_found INT DEFAULT 1;
    DECLARE v_id, v_hist BIGINT;
    DECLARE v_duplicate, v_done, v_own, v_deps, v_tries, v_txn INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_occ BOOLEAN;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    CALL pyqueue__check_name('to_queue', in_to_queue, 128);
    CALL pyqueue__queue(in_to_queue, v_to_vis, v_to_max, v_to_dlq, v_to_paused);
    IF in_payload IS NOT NULL THEN
        CALL pyqueue__check_payload(in_payload);
        CALL pyqueue__check_size(in_to_queue, LENGTH(in_payload));  -- the target's max_payload
    END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token),
        v_to_queue = in_to_queue;
    SET v_now = UTC_TIMESTAMP(6);
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SELECT m.id, m.group_key INTO v_id, v_group
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
           AND m.reserve_token = v_held;
    END;
    IF v_found = 1 AND v_group IS NOT NULL AND v_to_queue <> v_queue THEN
        CALL pyqueue__own_transaction(TRUE, v_own);
        CALL pyqueue__group_leave('move', v_queue, v_group, v_id, v_key, v_kind, v_held, v_to_queue, in_payload,
                                  v_now, v_own, v_done);
    ELSEIF v_found = 1 THEN
        -- a schedule's pending occurrence: in autocommit mode one transaction of the call's own (the archiving, the
        -- next occurrence and the move stand or fall together, run again whole when it deadlocks), and the next
        -- occurrence only while the token holds it, read under the message's lock (a reserver that took an expired
        -- reservation over since the read above made this call stale: it pushes nothing)
        SET v_occ = v_key LIKE '%@____-__-__T__:__:__Z';
        IF v_occ THEN CALL pyqueue__own_transaction(TRUE, v_own); END IF;
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1, v_duplicate = 0, v_hist = NULL;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF; RESIGNAL; END;
                IF v_own = 1 THEN START TRANSACTION; SET v_txn = 1; END IF;
                CALL pyqueue__archive(v_queue, v_id, v_held, 'moved', v_to_queue, v_now, v_hist);
                IF v_occ THEN
                    SELECT COUNT(*) INTO v_found FROM pyqueue_message m FORCE INDEX (PRIMARY)
                     WHERE m.id = v_id AND m.reserve_token = v_held FOR UPDATE;
                    IF v_found = 1 THEN CALL pyqueue__schedule_next(v_queue, v_key, v_kind); END IF;
                END IF;
                BEGIN
                    DECLARE CONTINUE HANDLER FOR 1062 SET v_duplicate = 1;
                    UPDATE pyqueue_message
                       SET attempts = IF(v_to_queue = v_queue, attempts, 0),
                           dead_from = IF(v_to_queue = v_queue, dead_from, NULL),
                           dead_attempts = IF(v_to_queue = v_queue, dead_attempts, NULL),
                           progress = IF(v_to_queue = v_queue, progress, NULL),
                           cancel_requested_at = IF(v_to_queue = v_queue, cancel_requested_at, NULL),
                           queue_name = v_to_queue,
                           payload = COALESCE(in_payload, payload),
                           scheduled_at = v_now, ready_at = v_now, scheduled_at_initially = v_now, created_at = v_now,
                           reserved_by = NULL, reserve_token = NULL
                     WHERE id = v_id AND reserve_token = v_held;
                    SET v_done = ROW_COUNT();  -- replaced below when the handler fired
                END;
                IF v_duplicate = 1 THEN
                    DELETE FROM pyqueue_message WHERE id = v_id AND reserve_token = v_held;
                    SET v_done = ROW_COUNT();
                END IF;
                CALL pyqueue__unarchive(v_hist, v_done);
                IF v_done = 1 AND v_to_queue <> v_queue THEN  -- moved on: it succeeded here, for the messages that wait
                    SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
                     WHERE d.queue_name = v_queue AND d.p_key = v_key AND d.p_kind = v_kind
                      LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
                    IF v_deps > 0 THEN CALL pyqueue__deps_left(v_queue, v_key, v_kind, TRUE, NULL); END IF;
                END IF;
                IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
    END IF;
    SELECT v_done AS moved;
END //

-- queue_remove: deletes a message whatever its state. Result: one row, removed = 1, or 0 when absent. A grouped
-- message goes through pyqueue__group_leave. Locks: the message row, for one statement (a grouped one: the group row
-- first, both until the transaction ends).
DROP PROCEDURE IF EXISTS queue_remove //
CREATE PROCEDURE queue_remove(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_retry INT;
    DECLARE v_id BIGINT;
    DECLARE v_done, v_own, v_tries, v_deps INT DEFAULT 0;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_message_key(in_queue, in_key, in_kind, TRUE);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    CALL pyqueue__own_transaction(FALSE, v_own);
    SELECT COALESCE(MAX(m.id), 0), MAX(m.group_key) INTO v_id, v_group
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind;
    IF v_group IS NOT NULL THEN
        CALL pyqueue__own_transaction(TRUE, v_own);
        CALL pyqueue__group_leave('remove', v_queue, v_group, v_id, v_key, v_kind, NULL, NULL, NULL,
                                  UTC_TIMESTAMP(6), v_own, v_done);
    ELSEIF v_id > 0 THEN
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                -- queue_name again: a concurrent queue_move may have moved the row out
                DELETE m FROM pyqueue_message m FORCE INDEX (PRIMARY) WHERE m.id = v_id AND m.queue_name = v_queue;
                SET v_done = ROW_COUNT();
            END;
        UNTIL v_retry = 0 END REPEAT;
        IF v_done = 1 AND v_key LIKE '%@____-__-__T__:__:__Z' THEN  -- a schedule's pending occurrence: it goes on
            CALL pyqueue__schedule_next(v_queue, v_key, v_kind);
        END IF;
        IF v_done = 1 THEN  -- the messages that wait for it are cancelled
            SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
             WHERE d.queue_name = v_queue AND d.p_key = v_key AND d.p_kind = v_kind
              LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
            IF v_deps > 0 THEN CALL pyqueue__deps_left(v_queue, v_key, v_kind, FALSE, 'was removed'); END IF;
        END IF;
    END IF;
    SELECT v_done AS removed;
END //

-- queue_release: hands back every message of the queue currently reserved (by in_worker, its reserved_by name, when not
-- NULL), deleting nothing: each becomes ready now and its token no longer holds (the old holder's commit, extend or
-- rollback answers 0 / NULL), attempts unchanged (as after a crash), its limit slot free (a slot's holder is a live
-- reservation), a FIFO group's head keeps its place. Result: one row, released. Steps: the reserved messages read
-- plainly (the due index, past now), then each by an UPDATE by id re-checking its token; interrupted, the next call
-- finds the rest. A maintenance call for an admin.
DROP PROCEDURE IF EXISTS queue_release //
CREATE PROCEDURE queue_release(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_worker VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now DATETIME(6);
    DECLARE v_id BIGINT;
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_count, v_done INT DEFAULT 0;
    DECLARE c_held CURSOR FOR
        SELECT m.id, m.reserve_token
          FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
         WHERE m.queue_name = v_queue AND m.scheduled_at > v_now
           AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'  -- (blocked in a group: never reserved)
           AND m.reserve_token IS NOT NULL
           AND (v_worker IS NULL OR m.reserved_by = v_worker)
         ORDER BY m.scheduled_at, m.id;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    IF in_worker IS NOT NULL THEN
        IF CHAR_LENGTH(in_worker) = 0 THEN CALL pyqueue__raise('invalid_argument', 'worker must not be empty'); END IF;
        IF CHAR_LENGTH(in_worker) > 255 THEN CALL pyqueue__raise('invalid_argument', 'worker is longer than 255 characters'); END IF;
        IF LOCATE(X'ED', CAST(in_worker AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'worker', in_worker); END IF;
    END IF;
    SET v_queue = in_queue, v_worker = in_worker, v_now = UTC_TIMESTAMP(6);
    OPEN c_held;
    held: LOOP
        FETCH c_held INTO v_id, v_token;
        IF v_done = 1 THEN LEAVE held; END IF;
        UPDATE pyqueue_message FORCE INDEX (PRIMARY)
           SET scheduled_at = v_now, ready_at = v_now, reserve_token = NULL, reserved_by = NULL
         WHERE id = v_id AND reserve_token = v_token AND scheduled_at > v_now;
        SET v_count = v_count + ROW_COUNT();
    END LOOP;
    CLOSE c_held;
    SELECT v_count AS released;
END //

DELIMITER ;
