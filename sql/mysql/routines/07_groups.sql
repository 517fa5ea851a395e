-- ==== groups ====
-- FIFO groups: a grouped message is its group's head (a real scheduled_at; reserved, popped, rolled back, extended as
-- any message) or blocked behind it with scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999' (the BLOCKED time,
-- written out where used), past every ready range, so reserve, pop and wait know nothing of groups. pyqueue_group
-- records each non-empty group's head; when the head leaves the queue, the blocked message first in
-- (scheduled_at_initially, id) order takes its place (pyqueue__group_next). Lock order: the group row BEFORE the
-- group's message rows, everywhere (a promotion holding the group row must never wait for a pusher waiting for it);
-- routines that already hold a claimed message (a reserve dead-lettering, a pop) take the group row with SKIP LOCKED
-- and leave the message when it is busy; several group rows in group_key order. In autocommit mode no routine locks a
-- queue row while it holds a group row (a grouped push holds the queue row's shared lock while it waits for group
-- rows); inside a caller's transaction that can deadlock, and the victim is the caller's to retry. The steps under a
-- group row run in a transaction of their own in autocommit mode (pyqueue__own_transaction(TRUE, ...)), run again on
-- a deadlock. Under the group row's lock the group row (head, extra) and the group's messages are read by locking
-- reads only: inside a caller's REPEATABLE READ transaction a plain read sees the snapshot of its first read, which
-- may predate the group row's last change (a message started beside the head, uncounted, gave k + 1 live).

DELIMITER //

-- pyqueue__group_lock: locks group in_group's row (FOR UPDATE; with in_nowait SKIP LOCKED, a busy row counting as
-- missing) and returns its head; out_found = 0 when missing. Locks: that row, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__group_lock //
CREATE PROCEDURE pyqueue__group_lock(
    IN  in_queue      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_group      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_nowait     BOOLEAN,
    OUT out_found     INT,
    OUT out_head_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_head_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    IF in_nowait THEN
        SELECT COUNT(*), MAX(g.head_key), MAX(g.head_kind) INTO out_found, out_head_key, out_head_kind
          FROM pyqueue_group g
         WHERE g.queue_name = in_queue AND g.group_key = in_group
           FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT COUNT(*), MAX(g.head_key), MAX(g.head_kind) INTO out_found, out_head_key, out_head_kind
          FROM pyqueue_group g
         WHERE g.queue_name = in_queue AND g.group_key = in_group
           FOR UPDATE;
    END IF;
END //

-- pyqueue__group_next: with in_group's row locked, after its head left: the blocked message first in
-- (scheduled_at_initially, id) order becomes head, due at its run time or in_now, whichever is later (round robin
-- behind the heads already ready); pyqueue_group records it. With live messages besides the head (pyqueue_group.extra,
-- a group limit above 1) the first of them in that order is the head from now on instead, and blocked ones start as
-- far as the limit in effect now allows (pyqueue__group_fill: a lowered or removed limit starts none until fewer are
-- live). With none left the group row goes.
-- Locks: the next message (a locking read of the group's range), the group row (held already).
DROP PROCEDURE IF EXISTS pyqueue__group_next //
CREATE PROCEDURE pyqueue__group_next(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_now   DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_found INT DEFAULT 1;
    DECLARE v_id BIGINT;
    DECLARE v_extra INT;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    SELECT COALESCE(MAX(g.extra), 0) INTO v_extra
      FROM pyqueue_group g WHERE g.queue_name = in_queue AND g.group_key = in_group
       FOR UPDATE;  -- the row as it is now (held already), not a caller's older snapshot
    IF v_extra > 0 THEN
        SET v_found = 0;  -- a live one takes the head's place, below
    ELSE
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
        SELECT m.id, m.p_key, m.p_kind INTO v_id, v_key, v_kind
          FROM pyqueue_message m FORCE INDEX (pyqueue_message_group_idx)
         WHERE m.queue_name = in_queue AND m.group_key = in_group
           AND m.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999'
         ORDER BY m.scheduled_at_initially, m.id
         LIMIT 1
           FOR UPDATE;
    END;
    END IF;
    IF v_found = 1 THEN
        UPDATE pyqueue_message SET scheduled_at = GREATEST(scheduled_at_initially, in_now), ready_at = scheduled_at WHERE id = v_id;
        UPDATE pyqueue_group SET head_key = v_key, head_kind = v_kind
         WHERE queue_name = in_queue AND group_key = in_group;
    ELSE
        SET v_found = IF(v_extra > 0, 1, 0);
        IF v_found = 1 THEN
        BEGIN
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
            -- a locking read: the live messages as they are now (one started since a caller's snapshot included)
            SELECT m.p_key, m.p_kind INTO v_key, v_kind
              FROM pyqueue_message m FORCE INDEX (pyqueue_message_group_idx)
             WHERE m.queue_name = in_queue AND m.group_key = in_group
               AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
             ORDER BY m.scheduled_at_initially, m.id
             LIMIT 1
               FOR UPDATE;
        END;
        END IF;
        IF v_found = 1 THEN
            UPDATE pyqueue_group SET head_key = v_key, head_kind = v_kind, extra = extra - 1
             WHERE queue_name = in_queue AND group_key = in_group;
            CALL pyqueue__group_fill(in_queue, in_group, in_now);
        ELSE
            DELETE FROM pyqueue_group WHERE queue_name = in_queue AND group_key = in_group;
        END IF;
    END IF;
END //

-- pyqueue__group_fill: with in_group's row locked: while fewer than the group's limit k (its own, else the queue's
-- default, else 1) are live (the head and pyqueue_group.extra), the blocked message first in
-- (scheduled_at_initially, id) order starts, due at its run time or in_now, whichever is later (behind the heads
-- already ready: round robin). k = 1 or no head: nothing (one probe of pyqueue_group_limit).
-- Locks: the started messages (locking reads of the group's range), the group row (held already).
DROP PROCEDURE IF EXISTS pyqueue__group_fill //
CREATE PROCEDURE pyqueue__group_fill(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_now   DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_k, v_extra, v_start INT;
    DECLARE v_found INT DEFAULT 1;
    DECLARE v_id BIGINT;
    DECLARE v_head VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    SELECT COALESCE(MAX(IF(l.group_key = in_group, l.k, NULL)), MAX(IF(l.group_key = '', l.k, NULL)), 1) INTO v_k
      FROM pyqueue_group_limit l
     WHERE l.queue_name = in_queue AND l.group_key IN (in_group, '');
    IF v_k > 1 THEN
        SELECT MAX(g.extra), MAX(g.head_key) INTO v_extra, v_head
          FROM pyqueue_group g WHERE g.queue_name = in_queue AND g.group_key = in_group
           FOR UPDATE;  -- the row as it is now (held already), not a caller's older snapshot
        SET v_start = 0;
        fill: WHILE v_head IS NOT NULL AND 1 + v_extra + v_start < v_k DO
            BEGIN
                DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
                SELECT m.id INTO v_id
                  FROM pyqueue_message m FORCE INDEX (pyqueue_message_group_idx)
                 WHERE m.queue_name = in_queue AND m.group_key = in_group
                   AND m.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999'
                 ORDER BY m.scheduled_at_initially, m.id
                 LIMIT 1
                   FOR UPDATE;
            END;
            IF v_found = 0 THEN LEAVE fill; END IF;
            UPDATE pyqueue_message SET scheduled_at = GREATEST(scheduled_at_initially, in_now), ready_at = scheduled_at WHERE id = v_id;
            SET v_start = v_start + 1;
        END WHILE;
        IF v_start > 0 THEN
            UPDATE pyqueue_group SET extra = extra + v_start WHERE queue_name = in_queue AND group_key = in_group;
        END IF;
    END IF;
END //

-- pyqueue__group_fill_batch: pyqueue__group_fill for every group named in a batch grouped push's messages (the
-- JSON array in_messages, each element's "group"), in group order, after the batch's heads are settled: groups
-- whose limit k > 1 has room start more of their messages. A queue without group limits: one probe. Locks: as
-- pyqueue__group_fill, each group in turn (the push holds their rows already).
DROP PROCEDURE IF EXISTS pyqueue__group_fill_batch //
CREATE PROCEDURE pyqueue__group_fill_batch(
    IN in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages LONGTEXT CHARACTER SET utf8mb4,
    IN in_now      DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE c_fill CURSOR FOR
        SELECT DISTINCT b.g
          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                   g VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.group')) AS b
         WHERE b.g IS NOT NULL
         ORDER BY b.g;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    IF EXISTS (SELECT 1 FROM pyqueue_group_limit l WHERE l.queue_name = in_queue) THEN
        OPEN c_fill;
        fills: LOOP
            FETCH c_fill INTO v_group;
            IF v_done = 1 THEN LEAVE fills; END IF;
            CALL pyqueue__group_fill(in_queue, v_group, in_now);
        END LOOP;
        CLOSE c_fill;
    END IF;
END //

-- pyqueue__group_place: with in_group's row locked, after message in_id (run time in_at) was pushed blocked into it:
-- with a limit k > 1, it starts if there is room (pyqueue__group_fill); in a full group it takes the place of the
-- latest live message besides the head that was never delivered and runs later (blocked again, SKIP LOCKED), so heads
-- start in the group's order. k = 1: nothing (the push itself weighs the head). Locks: as pyqueue__group_fill, and
-- that message.
DROP PROCEDURE IF EXISTS pyqueue__group_place //
CREATE PROCEDURE pyqueue__group_place(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_id    BIGINT,
    IN in_at    DATETIME(6),
    IN in_now   DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_k, v_blocked INT;
    DECLARE v_old BIGINT;
    DECLARE v_hk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_hkd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    SELECT COALESCE(MAX(IF(l.group_key = in_group, l.k, NULL)), MAX(IF(l.group_key = '', l.k, NULL)), 1) INTO v_k
      FROM pyqueue_group_limit l
     WHERE l.queue_name = in_queue AND l.group_key IN (in_group, '');
    IF v_k > 1 THEN
        CALL pyqueue__group_fill(in_queue, in_group, in_now);
        SELECT COUNT(*) INTO v_blocked FROM pyqueue_message m FORCE INDEX (PRIMARY)
         WHERE m.id = in_id AND m.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999';
        IF v_blocked = 1 THEN
            SELECT MAX(g.head_key), MAX(g.head_kind) INTO v_hk, v_hkd
              FROM pyqueue_group g WHERE g.queue_name = in_queue AND g.group_key = in_group
               FOR UPDATE;  -- as it is now (held already)
            SELECT MAX(x.id) INTO v_old
              FROM (SELECT m.id FROM pyqueue_message m FORCE INDEX (pyqueue_message_group_idx)
                     WHERE m.queue_name = in_queue AND m.group_key = in_group
                       AND m.scheduled_at_initially > in_at
                       AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                       AND m.attempts = 0 AND m.reserve_token IS NULL
                       AND NOT (m.p_key <=> v_hk AND m.p_kind <=> v_hkd)
                     ORDER BY m.scheduled_at_initially DESC, m.id DESC
                     LIMIT 1
                       FOR UPDATE SKIP LOCKED) AS x;
            IF v_old IS NOT NULL THEN
                UPDATE pyqueue_message SET scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999', ready_at = scheduled_at WHERE id = v_old;
                UPDATE pyqueue_message SET scheduled_at = GREATEST(scheduled_at_initially, in_now), ready_at = scheduled_at WHERE id = in_id;
            END IF;
        END IF;
    END IF;
END //

-- pyqueue__group_extra_left: with in_group's row locked, after a live message of the group other than its head left:
-- one live fewer (pyqueue_group.extra), then pyqueue__group_fill. Locks: as pyqueue__group_fill.
DROP PROCEDURE IF EXISTS pyqueue__group_extra_left //
CREATE PROCEDURE pyqueue__group_extra_left(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_now   DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    UPDATE pyqueue_group SET extra = GREATEST(extra - 1, 0)
     WHERE queue_name = in_queue AND group_key = in_group AND extra > 0;
    CALL pyqueue__group_fill(in_queue, in_group, in_now);
END //

-- pyqueue__group_leave: message in_id of group in_group leaves in_queue, its group row locked first; a head is
-- replaced by the next message (pyqueue__group_next). in_how: 'commit' (history, schedule, DELETE by id and token, as
-- queue_commit); 'pop' (under the mark in_token; the group row with SKIP LOCKED: busy, the message stays and out_done
-- = -1); 'commit_result' and 'pop_result': the same on a queue that keeps results, its outcome 'succeeded' recorded
-- (result: in_payload); 'cancel_held' (as 'commit', history and outcome 'cancelled'); 'cancel' (queue_cancel: by id
-- while its token is still in_token as read, NULL included, and it is no live reservation; history and outcome
-- 'cancelled'); 'remove' (by id); 'move' (to in_to_queue without its group, as queue_move, payload in_payload NULL =
-- unchanged; deleted on a duplicate); 'redrive' (as 'move' if still ready and held by in_token as read, nothing
-- deleted on a duplicate). out_done = 1 when it left, 0 when gone or the token no longer held. in_own = 1: in
-- a transaction of its own, run again on a deadlock.
-- Locks: the group row, the message, the group's next message, the result row, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__group_leave //
CREATE PROCEDURE pyqueue__group_leave(
    IN  in_how      VARCHAR(16)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_group    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id       BIGINT,
    IN  in_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_token    CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_to_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_payload  LONGTEXT     CHARACTER SET utf8mb4,
    IN  in_now      DATETIME(6),
    IN  in_own      INT,
    OUT out_done    INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_found, v_duplicate, v_retry, v_attempts, v_live, v_deps INT;
    DECLARE v_head_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_head_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_hist BIGINT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE v_own INT DEFAULT in_own;  -- (the deadlock-retry handler's name for it)
    DECLARE v_pop BOOLEAN DEFAULT in_how IN ('pop', 'pop_result');
    DECLARE v_cancel BOOLEAN DEFAULT in_how IN ('cancel', 'cancel_held');
    DECLARE v_results BOOLEAN DEFAULT in_how IN ('commit_result', 'pop_result');
    IF v_cancel THEN
        SELECT MAX(q.result_retention) IS NOT NULL INTO v_results FROM pyqueue_queue q WHERE q.queue_name = in_queue;
    END IF;
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, out_done = 0, v_hist = NULL, v_duplicate = 0, v_attempts = NULL;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF in_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            IF in_own = 1 THEN START TRANSACTION; END IF;
            CALL pyqueue__group_lock(in_queue, in_group, v_pop, v_found, v_head_key, v_head_kind);
            SET v_live = 0;
            IF v_found = 1 AND NOT (v_head_key <=> in_key AND v_head_kind <=> in_kind) THEN
                -- not the head: live besides it (a group limit above 1) or blocked (read under its lock)
                SELECT COUNT(*) INTO v_live
                  FROM pyqueue_message m FORCE INDEX (PRIMARY)
                 WHERE m.id = in_id AND m.queue_name = in_queue
                   AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                   FOR UPDATE;
            END IF;
            IF v_pop AND v_found = 0 THEN
                SET out_done = -1;
            ELSEIF in_how = 'remove' THEN
                DELETE m FROM pyqueue_message m FORCE INDEX (PRIMARY) WHERE m.id = in_id AND m.queue_name = in_queue;
                SET out_done = ROW_COUNT();
            ELSEIF in_how IN ('commit', 'pop', 'commit_result', 'pop_result', 'cancel_held', 'cancel') THEN
                IF v_results THEN  -- what the result row copies, read under the message's lock
                    SELECT m.attempts, m.last_error, m.progress INTO v_attempts, v_error, v_progress
                      FROM pyqueue_message m FORCE INDEX (PRIMARY)
                     WHERE m.id = in_id AND m.queue_name = in_queue AND m.reserve_token <=> in_token
                       FOR UPDATE;
                END IF;
                CALL pyqueue__archive(in_queue, in_id, in_token,
                                      IF(v_pop, 'popped', IF(v_cancel, 'cancelled', 'committed')), NULL, in_now, v_hist);
                IF NOT v_pop AND in_key LIKE '%@____-__-__T__:__:__Z' THEN  -- a recurring message's occurrence
                    CALL pyqueue__schedule_next(in_queue, in_key, in_kind);
                END IF;
                IF in_how = 'cancel' THEN  -- still as read, and no live reservation
                    DELETE m FROM pyqueue_message m FORCE INDEX (PRIMARY)
                     WHERE m.id = in_id AND m.queue_name = in_queue AND m.reserve_token <=> in_token
                       AND (m.reserve_token IS NULL OR m.scheduled_at <= in_now);
                ELSE
                    DELETE FROM pyqueue_message WHERE id = in_id AND reserve_token = in_token;
                END IF;
                SET out_done = ROW_COUNT();
                CALL pyqueue__unarchive(v_hist, out_done);
                IF out_done = 1 AND v_results THEN
                    CALL pyqueue__result_put(in_queue, in_key, in_kind, IF(v_cancel, 'cancelled', 'succeeded'),
                                             IF(v_cancel, NULL, in_payload), v_error, v_attempts, v_progress, in_now,
                                             NULL, NULL);  -- (the messages that wait for it: below)
                END IF;
            ELSE  -- move, redrive
                CALL pyqueue__archive(in_queue, in_id, in_token, 'moved', in_to_queue, in_now, v_hist);
                BEGIN
                    DECLARE CONTINUE HANDLER FOR 1062 SET v_duplicate = 1;
                    UPDATE pyqueue_message FORCE INDEX (PRIMARY)
                       SET attempts = 0, dead_from = NULL, dead_attempts = NULL, group_key = NULL,
                           progress = NULL, cancel_requested_at = NULL,
                           queue_name = in_to_queue,
                           payload = COALESCE(in_payload, payload),
                           scheduled_at = in_now, ready_at = in_now, scheduled_at_initially = in_now, created_at = in_now,
                           reserved_by = NULL, reserve_token = NULL
                     WHERE id = in_id AND queue_name = in_queue AND reserve_token <=> in_token
                       AND (in_how = 'move' OR scheduled_at <= in_now);
                    SET out_done = ROW_COUNT();  -- replaced below when the handler fired
                END;
                IF v_duplicate = 1 THEN
                    SET out_done = 0;
                    IF in_how = 'move' THEN
                        DELETE FROM pyqueue_message WHERE id = in_id AND reserve_token = in_token;
                        SET out_done = ROW_COUNT();
                    END IF;
                END IF;
                CALL pyqueue__unarchive(v_hist, out_done);
            END IF;
            IF out_done = 1 AND v_found = 1 AND v_head_key = in_key AND v_head_kind = in_kind THEN
                CALL pyqueue__group_next(in_queue, in_group, in_now);
            ELSEIF out_done = 1 AND v_live = 1 THEN
                CALL pyqueue__group_extra_left(in_queue, in_group, in_now);
            END IF;
            IF out_done = 1 AND (v_results OR in_how IN ('remove', 'move')) THEN  -- the messages that wait for it
                SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
                 WHERE d.queue_name = in_queue AND d.p_key = in_key AND d.p_kind = in_kind
                  LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
                IF v_deps > 0 THEN CALL pyqueue__deps_left(in_queue, in_key, in_kind, NOT (in_how IN ('remove', 'cancel', 'cancel_held')), IF(in_how = 'remove', 'was removed', 'was cancelled')); END IF;
            END IF;
            IF in_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
END //

-- pyqueue__groups_commit: pyqueue__groups_leave's 'commit' and 'commit_result' for a batch, set-based: the rows of
-- in_rows ([id, p_key, p_kind, token, group_key, result], the result given on a queue that keeps results only) that
-- their token still holds leave together, as each would through pyqueue__group_leave, in one transaction (in_own = 1:
-- of its own, run again on a deadlock). Steps: the batch's group rows locked in group_key order (one statement, the
-- groups sorted first in it); the messages still held locked, each read with its group row (head, extra); their outcomes
-- 'succeeded' recorded (in_results), archived (the queue keeps history), the occurrences of a schedule advanced (as
-- queue_commit), the rows deleted by id re-checking each token; then each group settled once for all its messages
-- that left (pyqueue__groups_commit_settle), and the messages that wait for them told. out_done: how many left.
-- Locks: the group rows in group_key order, the messages, the group's started messages, the result rows, until the
-- transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__groups_commit //
CREATE PROCEDURE pyqueue__groups_commit(
    IN  in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_rows    LONGTEXT     CHARACTER SET utf8mb4,
    IN  in_results BOOLEAN,
    IN  in_now     DATETIME(6),
    IN  in_own     INT,
    OUT out_done   INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_held, v_deps LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_history BOOLEAN;
    DECLARE v_i, v_n, v_occs, v_retry INT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE v_own INT DEFAULT in_own;  -- (the deadlock-retry handler's name for it)
    DECLARE v_gcl BIGINT DEFAULT @@SESSION.group_concat_max_len;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SET SESSION group_concat_max_len = v_gcl; RESIGNAL; END;
    SELECT MAX(q.history_retention) IS NOT NULL INTO v_history FROM pyqueue_queue q WHERE q.queue_name = in_queue;
    SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, out_done = 0;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF in_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            IF in_own = 1 THEN START TRANSACTION; END IF;
            -- the batch's group rows, locked in group_key order: the groups sorted in a derived table read first (no
            -- JSON list of them: a GROUP_CONCAT of JSON_QUOTE keeps its arguments in a table on disk)
            SELECT COUNT(*) INTO v_n
              FROM (SELECT DISTINCT r.g
                      FROM JSON_TABLE(in_rows, '$[*]' COLUMNS (
                               g VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]')) AS r
                     WHERE r.g IS NOT NULL
                     ORDER BY r.g
                     LIMIT 18446744073709551615) AS u
              STRAIGHT_JOIN pyqueue_group g FORCE INDEX (PRIMARY) ON g.queue_name = in_queue AND g.group_key = u.g
               FOR UPDATE;
            -- the messages still held, locked, each with its group row as it is now (a locking read, whatever the
            -- snapshot): [id, group_key, is its head, extra, p_key, p_kind, a schedule's occurrence]
            -- (a reservation named twice: once, its id and token made distinct first, not the JSON rows: a DISTINCT
            -- of those keeps a hash of each in a table on disk)
            SELECT CONCAT('[', GROUP_CONCAT(JSON_ARRAY(m.id, m.group_key,
                                                       COALESCE(g.head_key = m.p_key AND g.head_kind = m.p_kind, 0),
                                                       g.extra, m.p_key, m.p_kind,
                                                       m.p_key LIKE '%@____-__-__T__:__:__Z')
                                            SEPARATOR ','), ']'),
                   COUNT(*), COALESCE(SUM(m.p_key LIKE '%@____-__-__T__:__:__Z'), 0)
              INTO v_held, v_n, v_occs
              FROM (SELECT DISTINCT j.c_id, j.c_token
                      FROM JSON_TABLE(in_rows, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                     LIMIT 18446744073709551615) AS c
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
              LEFT JOIN pyqueue_group g FORCE INDEX (PRIMARY)
                ON g.queue_name = m.queue_name AND g.group_key = m.group_key
             WHERE m.queue_name = in_queue AND m.reserve_token = c.c_token AND m.group_key IS NOT NULL
               FOR UPDATE;
            IF v_n > 0 THEN
                IF in_results THEN  -- their outcomes (a result given: element 5 of its row)
                    INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                                progress, finished_at)
                    SELECT m.queue_name, m.p_key, m.p_kind, 'succeeded',
                           IF(c.c_result IS NULL OR JSON_TYPE(c.c_result) = 'NULL', NULL, c.c_result),
                           NULL, m.attempts, m.progress, in_now
                      FROM JSON_TABLE(in_rows, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
                               c_result JSON PATH '$[5]')) AS c
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
                     WHERE m.queue_name = in_queue AND m.reserve_token = c.c_token AND m.group_key IS NOT NULL
                    ON DUPLICATE KEY UPDATE state = VALUES(state), result = VALUES(result),
                                            last_error = VALUES(last_error), attempts = VALUES(attempts),
                                            progress = VALUES(progress), finished_at = VALUES(finished_at);
                END IF;
                IF v_history THEN
                    INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                                 created_at, processed_at, outcome, to_queue, reserved_by, last_error,
                                                 headers)
                    SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                           m.created_at, in_now, 'committed', NULL, m.reserved_by, m.last_error, m.headers
                      FROM (SELECT DISTINCT j.c_id, j.c_token  -- (a reservation named twice: archived once)
                              FROM JSON_TABLE(in_rows, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                                       c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                             LIMIT 18446744073709551615) AS c
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
                     WHERE m.queue_name = in_queue AND m.reserve_token = c.c_token AND m.group_key IS NOT NULL;
                END IF;
                SET v_i = 0;
                WHILE v_occs > 0 AND v_i < v_n DO  -- a schedule's occurrences (held, locked above): as queue_commit
                    IF JSON_EXTRACT(v_held, CONCAT('$[', v_i, '][6]')) = 1 THEN
                        CALL pyqueue__schedule_next(in_queue,
                            JSON_UNQUOTE(JSON_EXTRACT(v_held, CONCAT('$[', v_i, '][4]'))),
                            JSON_UNQUOTE(JSON_EXTRACT(v_held, CONCAT('$[', v_i, '][5]'))));
                        SET v_occs = v_occs - 1;
                    END IF;
                    SET v_i = v_i + 1;
                END WHILE;
                DELETE m
                  FROM JSON_TABLE(in_rows, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                           c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS c
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
                 WHERE m.queue_name = in_queue AND m.reserve_token = c.c_token AND m.group_key IS NOT NULL;
                SET out_done = ROW_COUNT();
                CALL pyqueue__groups_commit_settle(in_queue, v_held, in_now);
                IF in_results THEN
                    -- the messages that wait for the ones that left: one locking probe of pyqueue_dependency each
                    SET v_deps = NULL;
                    SELECT CONCAT('[', GROUP_CONCAT(DISTINCT JSON_ARRAY(d.p_key, d.p_kind) SEPARATOR ','), ']')
                      INTO v_deps
                      FROM JSON_TABLE(v_held, '$[*]' COLUMNS (
                               c_k  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
                               c_kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[5]')) AS c
                      STRAIGHT_JOIN pyqueue_dependency d
                        ON d.queue_name = in_queue AND d.p_key = c.c_k AND d.p_kind = c.c_kd
                      LOCK IN SHARE MODE;
                    CALL pyqueue__deps_left_many(in_queue, v_deps, TRUE, NULL);
                END IF;
            END IF;
            IF in_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    SET SESSION group_concat_max_len = v_gcl;
END //

-- pyqueue__groups_commit_settle: with their group rows locked, after the messages of in_held (as
-- pyqueue__groups_commit's) left: each group settled once for all of its that left, in group_key order, as
-- pyqueue__group_next and pyqueue__group_extra_left would one by one: live before = 1 + extra (the head and the
-- others), after = that less the ones that left; the blocked messages first in (scheduled_at_initially, id) order
-- start while fewer than its limit k (its own, else the queue's default, else 1) are live, due at their run time or
-- in_now, whichever is later (one UPDATE ... ORDER BY ... LIMIT), or one when none is left live, whatever k; a group
-- whose head left names its first live message in that order as head; extra = live - 1; a group with none live goes.
-- A group without a row (none left) is skipped. Locks: the started messages (and the group's messages the ordered
-- update steps over), the group rows (held already).
DROP PROCEDURE IF EXISTS pyqueue__groups_commit_settle //
CREATE PROCEDURE pyqueue__groups_commit_settle(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_held  LONGTEXT     CHARACTER SET utf8mb4,
    IN in_now   DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_left, v_head_left, v_extra, v_k, v_live, v_need, v_started INT;
    DECLARE v_end INT DEFAULT 0;
    DECLARE c_groups CURSOR FOR
        SELECT a.g, a.n, a.hl, a.extra,
               COALESCE((SELECT l.k FROM pyqueue_group_limit l WHERE l.queue_name = in_queue AND l.group_key = a.g),
                        (SELECT l.k FROM pyqueue_group_limit l WHERE l.queue_name = in_queue AND l.group_key = ''), 1)
          FROM (SELECT h.g, COUNT(*) AS n, MAX(h.hl) AS hl, MAX(h.extra) AS extra
                  FROM JSON_TABLE(in_held, '$[*]' COLUMNS (
                           g     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           hl    INT PATH '$[2]',
                           extra INT PATH '$[3]')) AS h
                 WHERE h.extra IS NOT NULL  -- (a group row found)
                 GROUP BY h.g) AS a
         ORDER BY a.g;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_end = 1;
    OPEN c_groups;
    each_group: LOOP
        FETCH c_groups INTO v_group, v_left, v_head_left, v_extra, v_k;
        IF v_end = 1 THEN LEAVE each_group; END IF;
        SET v_live = GREATEST(1 + v_extra - v_left, 1 - v_head_left), v_started = 0;
        SET v_need = GREATEST(v_k - v_live, 0);
        IF v_need > 0 THEN
            UPDATE pyqueue_message FORCE INDEX (pyqueue_message_group_idx)
               SET scheduled_at = GREATEST(scheduled_at_initially, in_now), ready_at = scheduled_at
             WHERE queue_name = in_queue AND group_key = v_group
               AND scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999'
             ORDER BY scheduled_at_initially, id
             LIMIT v_need;
            SET v_started = ROW_COUNT();
        END IF;
        IF v_live + v_started = 0 THEN
            DELETE FROM pyqueue_group WHERE queue_name = in_queue AND group_key = v_group;
        ELSEIF v_head_left = 1 OR v_live = 0 THEN
            SET v_key = NULL;
            BEGIN
                DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_key = NULL;
                -- the first live one in the group's order (a locking read: as it is now)
                SELECT m.p_key, m.p_kind INTO v_key, v_kind
                  FROM pyqueue_message m FORCE INDEX (pyqueue_message_group_idx)
                 WHERE m.queue_name = in_queue AND m.group_key = v_group
                   AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                 ORDER BY m.scheduled_at_initially, m.id
                 LIMIT 1
                   FOR UPDATE;
            END;
            IF v_key IS NULL THEN
                DELETE FROM pyqueue_group WHERE queue_name = in_queue AND group_key = v_group;
            ELSE
                UPDATE pyqueue_group SET head_key = v_key, head_kind = v_kind, extra = v_live + v_started - 1
                 WHERE queue_name = in_queue AND group_key = v_group;
            END IF;
        ELSEIF v_live + v_started - 1 <> v_extra THEN
            UPDATE pyqueue_group SET extra = v_live + v_started - 1
             WHERE queue_name = in_queue AND group_key = v_group;
        END IF;
    END LOOP;
    CLOSE c_groups;
END //

-- pyqueue__groups_leave: pyqueue__group_leave for each [id, p_key, p_kind, token, group_key, result] of in_rows (the
-- result, given to 'commit_result' only, may be left out), in group_key order (two calls lock their groups in one order); out_done: how many left; out_busy: JSON array of the ids a pop
-- left alone (group row busy), NULL when none. 'commit' and 'commit_result' (a batch commit) go set-based instead:
-- pyqueue__groups_commit, the whole batch in one transaction.
DROP PROCEDURE IF EXISTS pyqueue__groups_leave //
CREATE PROCEDURE pyqueue__groups_leave(
    IN  in_how   VARCHAR(16)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_to_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_rows  LONGTEXT     CHARACTER SET utf8mb4,
    IN  in_now   DATETIME(6),
    IN  in_own   INT,
    OUT out_done INT,
    OUT out_busy LONGTEXT     CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
body: BEGIN
    DECLARE v_id BIGINT;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_result LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_done INT;
    DECLARE v_end INT DEFAULT 0;
    DECLARE c_rows CURSOR FOR
        SELECT r.c_id, r.c_key, r.c_kind, r.c_token, r.c_group, r.c_result
          FROM JSON_TABLE(in_rows, '$[*]' COLUMNS (
                   c_id     BIGINT       PATH '$[0]',
                   c_key    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                   c_kind   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
                   c_token  CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
                   c_group  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
                   c_result JSON         PATH '$[5]')) AS r
         ORDER BY r.c_group, r.c_id;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_end = 1;
    SET out_done = 0, out_busy = NULL;
    IF in_how IN ('commit', 'commit_result') THEN  -- a batch commit: set-based
        CALL pyqueue__groups_commit(in_queue, in_rows, in_how = 'commit_result', in_now, in_own, out_done);
        LEAVE body;
    END IF;
    OPEN c_rows;
    rows_loop: LOOP
        FETCH c_rows INTO v_id, v_key, v_kind, v_token, v_group, v_result;
        IF v_end = 1 THEN LEAVE rows_loop; END IF;
        CALL pyqueue__group_leave(in_how, in_queue, v_group, v_id, v_key, v_kind, v_token, in_to_queue,
                                  IF(in_how = 'commit_result', v_result, NULL), in_now, in_own, v_done);
        IF v_done = 1 THEN
            SET out_done = out_done + 1;
        ELSEIF v_done = -1 THEN
            SET out_busy = JSON_ARRAY_APPEND(COALESCE(out_busy, '[]'), '$', v_id);
        END IF;
    END LOOP;
    CLOSE c_rows;
END //

-- pyqueue__unclaim: a reserve's dead-letter claim of in_id (in_token) that it left alone (group row busy) goes back:
-- scheduled_at and token as they were (in_at, in_old_token). Locks: that row, for one statement.
DROP PROCEDURE IF EXISTS pyqueue__unclaim //
CREATE PROCEDURE pyqueue__unclaim(
    IN in_id        BIGINT,
    IN in_token     CHAR(36)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_at        DATETIME(6),
    IN in_old_token CHAR(36)    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    UPDATE pyqueue_message SET scheduled_at = in_at, reserve_token = in_old_token
     WHERE id = in_id AND reserve_token = in_token;
END //

-- queue_set_group_limit: up to in_k messages of FIFO group in_group (NULL: the queue's default for its groups) live at
-- once (reserved, ready or delayed), started in the group's order; a named group's limit overrides the default;
-- in_k NULL removes it (back to the default, then 1; no error when there is none); k from 1 to 10000. Raising it
-- starts heads at once (due now, behind the heads already ready); lowering it revokes nothing (none starts until
-- fewer are live). No result set. Locks: the queue row (shared: a queue_drop under way answers unknown_queue), the
-- limit row, then the group rows it affects in group_key order (each with the messages it starts); in autocommit
-- mode in a transaction of its own, run again on a deadlock.
DROP PROCEDURE IF EXISTS queue_set_group_limit //
CREATE PROCEDURE queue_set_group_limit(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_k     DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_group, v_each VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_own, v_retry, v_k, v_locked INT;
    DECLARE v_now DATETIME(6);
    DECLARE v_hk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_hkd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found INT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    IF in_group IS NOT NULL THEN CALL pyqueue__check_name('group', in_group, 255); END IF;
    CALL pyqueue__check_int('k', in_k, 1, 10000);
    SET v_queue = in_queue, v_group = COALESCE(in_group, ''), v_k = in_k;
    CALL pyqueue__own_transaction(NULL, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_now = UTC_TIMESTAMP(6);
        BEGIN
            DECLARE v_done INT DEFAULT 0;
            DECLARE c_groups CURSOR FOR
                SELECT g.group_key FROM pyqueue_group g
                 WHERE g.queue_name = v_queue AND (v_group = '' OR g.group_key = v_group)
                 ORDER BY g.group_key;
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            IF v_own = 1 THEN START TRANSACTION; END IF;
            -- the queue row, shared, before any row referencing it: a queue_drop under way finishes first, and the
            -- call answers unknown_queue, not the foreign key's error (1452)
            SELECT COUNT(*) INTO v_found FROM pyqueue_queue q WHERE q.queue_name = v_queue LOCK IN SHARE MODE;
            IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
            IF v_k IS NULL THEN
                DELETE FROM pyqueue_group_limit WHERE queue_name = v_queue AND group_key = v_group;
            ELSE
                INSERT INTO pyqueue_group_limit (queue_name, group_key, k) VALUES (v_queue, v_group, v_k)
                ON DUPLICATE KEY UPDATE k = VALUES(k);
            END IF;
            -- the groups it applies to: room made starts heads now
            OPEN c_groups;
            each_group: LOOP
                FETCH c_groups INTO v_each;
                IF v_done = 1 THEN LEAVE each_group; END IF;
                CALL pyqueue__group_lock(v_queue, v_each, FALSE, v_locked, v_hk, v_hkd);
                IF v_locked = 1 THEN CALL pyqueue__group_fill(v_queue, v_each, v_now); END IF;
            END LOOP;
            CLOSE c_groups;
            IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
END //

DELIMITER ;
