-- ==== dependencies ====
-- A message that waits for others: pushed with its parents, ready once every parent has succeeded, in the
-- transaction of the commit that ends the last; cancelled when a parent fails or is cancelled.

DELIMITER //

-- pyqueue__deps_cancel: cancels the waiting child (in_queue, in_key, in_kind) of message id in_msg as queue_cancel
-- would, its last_error in_error (removed, history outcome and, where its queue keeps results, result 'cancelled');
-- o_gone 1 if it was cancelled, 0 if it was not waiting (ready, held or gone). Its message row locked first (an
-- UPDATE). Called by pyqueue__deps_left only, which then walks the child's own children.
DROP PROCEDURE IF EXISTS pyqueue__deps_cancel //
CREATE PROCEDURE pyqueue__deps_cancel(
    IN  in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_msg   BIGINT,
    IN  in_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT o_gone   INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_attempts INT DEFAULT 0;
    DECLARE v_hist BIGINT DEFAULT NULL;
    DECLARE v_results BOOLEAN;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    SET o_gone = 0;
    UPDATE pyqueue_message FORCE INDEX (PRIMARY) SET last_error = in_error
     WHERE id = in_msg AND queue_name = in_queue AND scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999';
    IF ROW_COUNT() = 1 THEN
        SELECT m.attempts, m.progress INTO v_attempts, v_progress
          FROM pyqueue_message m FORCE INDEX (PRIMARY) WHERE m.id = in_msg;
        CALL pyqueue__archive(in_queue, in_msg, NULL, 'cancelled', NULL, v_now, v_hist);
        DELETE FROM pyqueue_message WHERE id = in_msg AND reserve_token IS NULL;
        SET o_gone = ROW_COUNT();
        CALL pyqueue__unarchive(v_hist, o_gone);
        SELECT q.result_retention IS NOT NULL INTO v_results FROM pyqueue_queue q WHERE q.queue_name = in_queue;
        IF o_gone = 1 AND v_results THEN
            -- its outcome, as pyqueue__result_put records it (not called here: it calls pyqueue__deps_left, and
            -- MySQL refuses recursion)
            INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts, progress,
                                        finished_at)
            VALUES (in_queue, in_key, in_kind, 'cancelled', NULL, in_error, v_attempts, v_progress, v_now)
            ON DUPLICATE KEY UPDATE state = 'cancelled', result = NULL, last_error = in_error,
                                    attempts = v_attempts, progress = v_progress, finished_at = v_now;
        END IF;
    END IF;
END //

-- pyqueue__deps_ready: the waiting child of message id in_msg of in_queue is due now, or at its run_at (its count row
-- 'w' gone).
DROP PROCEDURE IF EXISTS pyqueue__deps_ready //
CREATE PROCEDURE pyqueue__deps_ready(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_msg   BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DELETE w FROM pyqueue_dependency w FORCE INDEX (pyqueue_dependency_message_idx)
     WHERE w.queue_name = in_queue AND w.p_key = in_key AND w.p_kind = in_kind AND w.role = 'w';
    -- due now, or at its run_at (kept in scheduled_at_initially while it waited)
    UPDATE pyqueue_message FORCE INDEX (PRIMARY)
       SET scheduled_at = GREATEST(v_now, scheduled_at_initially),
           ready_at = scheduled_at,
           scheduled_at_initially = GREATEST(v_now, scheduled_at_initially)
     WHERE id = in_msg AND queue_name = in_queue AND scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999';
END //

-- pyqueue__deps_succeeded: pyqueue__deps_left's step for a message (in_queue, in_key, in_kind) that succeeded: each
-- waiting child's count goes down; at 0 a 'success' or 'always' child is ready (pyqueue__deps_ready) and a failure
-- callback cancelled (pyqueue__deps_cancel), out_cbs the JSON array of those cancelled, [queue, p_key, p_kind], whose
-- own children the caller walks (NULL: none). Locks: as pyqueue__deps_left, each child's message row, then its count
-- row, in (queue, key, kind) order.
DROP PROCEDURE IF EXISTS pyqueue__deps_succeeded //
CREATE PROCEDURE pyqueue__deps_succeeded(
    IN  in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_cbs  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_cq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_ck VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_ct VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_msg BIGINT;
    DECLARE v_left, v_gone INT;
    DECLARE v_on VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE c_children CURSOR FOR
        SELECT d.other_queue, d.other_key, d.other_kind, d.msg_id
          FROM pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
         WHERE d.queue_name = in_queue AND d.p_key = in_key AND d.p_kind = in_kind AND d.role = 'c'
         ORDER BY d.other_queue, d.other_key, d.other_kind
           FOR UPDATE;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    SET out_cbs = NULL;
    OPEN c_children;
    children: LOOP
        FETCH c_children INTO v_cq, v_ck, v_ct, v_msg;
        IF v_done = 1 THEN LEAVE children; END IF;
        -- the child's message row first (an aggregate: a gone child sets no NOT FOUND)
        SELECT COUNT(*) INTO v_left FROM pyqueue_message m FORCE INDEX (PRIMARY)
         WHERE m.id = v_msg
           FOR UPDATE;
        UPDATE pyqueue_dependency FORCE INDEX (pyqueue_dependency_message_idx) SET n = n - 1
         WHERE queue_name = v_cq AND p_key = v_ck AND p_kind = v_ct AND role = 'w' AND msg_id = v_msg;
        IF ROW_COUNT() = 1 THEN
            -- every kind counts a parent that succeeded; at 0 a failure callback has nothing to call back
            SET v_left = NULL, v_on = NULL;
            SELECT MIN(w.n), MIN(COALESCE(w.other_kind, 'success')) INTO v_left, v_on
              FROM pyqueue_dependency w FORCE INDEX (pyqueue_dependency_message_idx)
             WHERE w.queue_name = v_cq AND w.p_key = v_ck AND w.p_kind = v_ct AND w.role = 'w'
               AND w.msg_id = v_msg;
            IF v_left <= 0 AND v_on = 'failure' THEN
                DELETE w FROM pyqueue_dependency w FORCE INDEX (pyqueue_dependency_message_idx)
                 WHERE w.queue_name = v_cq AND w.p_key = v_ck AND w.p_kind = v_ct AND w.role = 'w';
                CALL pyqueue__deps_cancel(v_cq, v_ck, v_ct, v_msg,
                                          LEFT(CONCAT('parent (queue ', in_queue, ', p_key ', in_key, ', p_kind ',
                                                      in_kind, ') succeeded, as every other: no failure to call back'),
                                               2000), v_gone);
                IF v_gone = 1 THEN  -- its own children: the first level of the walk below
                    SET out_cbs = JSON_ARRAY_APPEND(COALESCE(out_cbs, JSON_ARRAY()), '$',
                                                  JSON_ARRAY(v_cq, v_ck, v_ct));
                END IF;
            ELSEIF v_left <= 0 THEN
                CALL pyqueue__deps_ready(v_cq, v_ck, v_ct, v_msg);
            END IF;
        END IF;
        SET v_done = 0;
    END LOOP;
    CLOSE c_children;
END //

-- pyqueue__deps_level: one level of pyqueue__deps_left's walk: for each child of each message of in_level (a JSON
-- array of [queue, p_key, p_kind], in its order; each one's children in (queue, key, kind) order) that ended without
-- success (last_error 'parent (...) <in_why>'): a failure callback is ready, an 'always' child counts it, any other is
-- cancelled (pyqueue__deps_cancel) and marked on its parent's 'c' row (n = -1) for the next level; out_cancelled: how
-- many. Locks: as pyqueue__deps_left, each child's message row, then its count row.
DROP PROCEDURE IF EXISTS pyqueue__deps_level //
CREATE PROCEDURE pyqueue__deps_level(
    IN  in_level      LONGTEXT CHARACTER SET utf8mb4,
    IN  in_why        VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_cancelled INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_done, v_gone, v_left INT DEFAULT 0;
    DECLARE v_on VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_q, v_cq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_k, v_ck VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_t, v_ct VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_did, v_msg BIGINT;
    -- every child of every message of the level, its parents in the level's order, each one's children
    -- in (queue, key, kind) order
    DECLARE c_children CURSOR FOR
        SELECT j.q, j.k, j.t, d.id, d.other_queue, d.other_key, d.other_kind, d.msg_id
          FROM JSON_TABLE(in_level, '$[*]' COLUMNS (
                   ord FOR ORDINALITY,
                   q VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                   k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                   t VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) AS j
          STRAIGHT_JOIN pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
            ON d.queue_name = j.q AND d.p_key = j.k AND d.p_kind = j.t AND d.role = 'c'
         ORDER BY j.ord, d.other_queue, d.other_key, d.other_kind
           FOR UPDATE;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    SET out_cancelled = 0;
    OPEN c_children;
    children: LOOP
        FETCH c_children INTO v_q, v_k, v_t, v_did, v_cq, v_ck, v_ct, v_msg;
        IF v_done = 1 THEN LEAVE children; END IF;
        SET v_gone = 0, v_on = NULL, v_left = NULL;
        -- the child's message row first, then its count row (as the success path), its kind on it
        SELECT COUNT(*) INTO v_left FROM pyqueue_message m FORCE INDEX (PRIMARY)
         WHERE m.id = v_msg
           FOR UPDATE;
        SET v_left = NULL;
        SELECT MIN(w.n), MIN(COALESCE(w.other_kind, 'success')) INTO v_left, v_on
          FROM pyqueue_dependency w FORCE INDEX (pyqueue_dependency_message_idx)
         WHERE w.queue_name = v_cq AND w.p_key = v_ck AND w.p_kind = v_ct AND w.role = 'w'
           AND w.msg_id = v_msg
           FOR UPDATE;
        IF v_on = 'failure' THEN
            CALL pyqueue__deps_ready(v_cq, v_ck, v_ct, v_msg);  -- a parent failed: it runs, once
        ELSEIF v_on = 'always' THEN
            UPDATE pyqueue_dependency FORCE INDEX (pyqueue_dependency_message_idx) SET n = n - 1
             WHERE queue_name = v_cq AND p_key = v_ck AND p_kind = v_ct AND role = 'w' AND msg_id = v_msg;
            IF v_left <= 1 THEN
                CALL pyqueue__deps_ready(v_cq, v_ck, v_ct, v_msg);
            END IF;
        ELSE
            CALL pyqueue__deps_cancel(v_cq, v_ck, v_ct, v_msg,
                                      LEFT(CONCAT('parent (queue ', v_q, ', p_key ', v_k, ', p_kind ', v_t,
                                                  ') ', in_why), 2000), v_gone);
            IF v_gone = 1 THEN
                UPDATE pyqueue_dependency SET n = -1 WHERE id = v_did;  -- its children: the next level
                SET out_cancelled = out_cancelled + 1;
            END IF;
        END IF;
        SET v_done = 0;
    END LOOP;
    CLOSE c_children;
END //

-- pyqueue__deps_left: what a message's leaving its queue does to the messages that wait for it. (in_queue, in_key,
-- in_kind) has just been deleted by the caller, in its transaction. With in_ok (it succeeded: committed, popped, moved
-- on) each waiting child's count of parents left goes down, and a child whose count reaches 0 is ready now, in this
-- transaction. Otherwise (failed: dead-lettered or dropped; cancelled; removed; moved to a queue that keeps no
-- results) each waiting child is cancelled as queue_cancel would (removed, history outcome and result 'cancelled',
-- last_error 'parent (queue q, p_key k, p_kind t) <in_why>'), and the children waiting for it after it, transitively,
-- level by level (no recursion, which MySQL refuses by default, and no temporary table): a level is one JSON array of
-- [queue, p_key, p_kind], parsed once (JSON_TABLE) by the one cursor that walks its children; a child cancelled is
-- marked on its parent's 'c' row (n = -1, the row goes with its parent's rows), and the next level is those marked
-- rows, read in one statement (GROUP_CONCAT). Each message is read and written a fixed number of times: the cost is
-- linear in the children cancelled (it re-parsed a growing JSON work list per child: 4,000 children took 22 s). The
-- message's own rows as a child go too. A child's kind (its count row's other_kind, queue_push_after_on) changes this:
-- a failure callback ('failure') counts a parent that succeeded and is cancelled when its count reaches 0 ('parent
-- (...) succeeded, as every other: no failure to call back', its children walked as above, from the first level),
-- and is ready, once, when a parent fails or is cancelled (its count row goes: a later parent's end does nothing to
-- it); an 'always' child counts either end and is ready at 0. Reads with locking reads (the latest committed rows, whatever the caller's
-- snapshot). Every statement on pyqueue_dependency goes by its index (forced: planned freely on a small table,
-- MariaDB 10.11 scanned the whole table, locking every row at REPEATABLE READ, and two parents' commits deadlocked on
-- each other's rows). Locks: the rows it reads, deletes and updates in pyqueue_dependency; for each child its message
-- row first, then its count row (the parents of one child that end at once take turns on the message row, so
-- exactly one of them sees 0; a waiter on the count row itself would deadlock the holder, whose new count goes into
-- that index just before it), as the child's own leaving (removed, cancelled) locks them; until the transaction
-- ends; children in (queue, key, kind) order, level by level, each parent's in turn.
DROP PROCEDURE IF EXISTS pyqueue__deps_left //
CREATE PROCEDURE pyqueue__deps_left(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_ok    BOOLEAN,
    IN in_why   VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_level, v_next, v_cbs LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_why VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_cancelled INT;
    DECLARE v_gcl BIGINT DEFAULT @@SESSION.group_concat_max_len;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SET SESSION group_concat_max_len = v_gcl; RESIGNAL; END;
    IF in_ok THEN
        CALL pyqueue__deps_succeeded(in_queue, in_key, in_kind, v_cbs);
        DELETE d FROM pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
         WHERE d.queue_name = in_queue AND d.p_key = in_key AND d.p_kind = in_kind;
        SET v_level = v_cbs, v_why = 'was cancelled';  -- the failure callbacks cancelled, if any
    ELSE
        SET v_level = JSON_ARRAY(JSON_ARRAY(in_queue, in_key, in_kind)), v_why = COALESCE(in_why, '');
    END IF;
    BEGIN
        WHILE v_level IS NOT NULL DO
            CALL pyqueue__deps_level(v_level, v_why, v_cancelled);
            SET v_next = NULL;
            IF v_cancelled > 0 THEN
                -- the next level: the children cancelled now, marked on their parents' rows, in the order met
                SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
                SELECT CONCAT('[', GROUP_CONCAT(JSON_ARRAY(d.other_queue, d.other_key, d.other_kind)
                                                ORDER BY j.ord, d.other_queue, d.other_key, d.other_kind
                                                SEPARATOR ','), ']')
                  INTO v_next
                  FROM JSON_TABLE(v_level, '$[*]' COLUMNS (
                           ord FOR ORDINALITY,
                           q VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           t VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) AS j
                  STRAIGHT_JOIN pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
                    ON d.queue_name = j.q AND d.p_key = j.k AND d.p_kind = j.t AND d.role = 'c' AND d.n = -1;
                SET SESSION group_concat_max_len = v_gcl;
            END IF;
            -- the rows of the level's messages go (as children: theirs; as parents: their children's marks)
            DELETE d FROM JSON_TABLE(v_level, '$[*]' COLUMNS (
                           ord FOR ORDINALITY,
                           q VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           t VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) AS j
              STRAIGHT_JOIN pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
                ON d.queue_name = j.q AND d.p_key = j.k AND d.p_kind = j.t;
            SET v_level = v_next, v_why = 'was cancelled';
        END WHILE;
    END;
END //

-- pyqueue__deps_left_many: pyqueue__deps_left (in_ok, in_why) for each [p_key, p_kind] of in_pairs (a JSON array;
-- NULL: none), messages of in_queue, in the array's order; the array parsed once (a cursor over JSON_TABLE). Locks: as
-- pyqueue__deps_left.
DROP PROCEDURE IF EXISTS pyqueue__deps_left_many //
CREATE PROCEDURE pyqueue__deps_left_many(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_pairs LONGTEXT     CHARACTER SET utf8mb4,
    IN in_ok    BOOLEAN,
    IN in_why   VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_t VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE c_pairs CURSOR FOR
        SELECT j.k, j.t
          FROM JSON_TABLE(COALESCE(in_pairs, '[]'), '$[*]' COLUMNS (
                   ord FOR ORDINALITY,
                   k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                   t VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS j
         ORDER BY j.ord;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    OPEN c_pairs;
    pairs: LOOP
        FETCH c_pairs INTO v_k, v_t;
        IF v_done = 1 THEN LEAVE pairs; END IF;
        CALL pyqueue__deps_left(in_queue, v_k, v_t, in_ok, in_why);
        SET v_done = 0;
    END LOOP;
    CLOSE c_pairs;
END //

-- pyqueue__deps_popped: the messages queue_pop took (in_rows, its JSON array of {"id", "k", "kd", ...}) and removed
-- from in_queue (a queue that keeps results) succeeded, for the messages that wait for them (pyqueue__deps_left_many;
-- one locking probe of pyqueue_dependency per message, which finds nothing for a message without parents or children;
-- a grouped one's went with it). Locks: as pyqueue__deps_left.
DROP PROCEDURE IF EXISTS pyqueue__deps_popped //
CREATE PROCEDURE pyqueue__deps_popped(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_rows  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_deps LONGTEXT CHARACTER SET utf8mb4;
    SELECT CONCAT('[', GROUP_CONCAT(DISTINCT JSON_ARRAY(d.p_key, d.p_kind) SEPARATOR ','), ']') INTO v_deps
      FROM JSON_TABLE(COALESCE(in_rows, '[]'), '$[*]' COLUMNS (
               c_id BIGINT PATH '$.id',
               c_k  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.k',
               c_kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.kd')) AS j
      STRAIGHT_JOIN pyqueue_dependency d ON d.queue_name = in_queue AND d.p_key = j.c_k AND d.p_kind = j.c_kd
     WHERE NOT EXISTS (SELECT 1 FROM pyqueue_message m WHERE m.id = j.c_id)
      LOCK IN SHARE MODE;
    CALL pyqueue__deps_left_many(in_queue, v_deps, TRUE, NULL);
END //

-- pyqueue__deps_moved: what a message's move to another queue does to its dependency rows. (in_from, in_key,
-- in_kind) has just become a live message of in_to (queue_redrive: a dead letter given another chance is the same
-- parent). When in_to keeps results, its rows follow it: those of the message (its children, its parents) move to
-- in_to, and the rows that name it (each child's list of parents, each parent's list of children) name in_to; rows
-- an earlier message of the key left in in_to go first. Its waiting children keep waiting, for it in its new queue.
-- When in_to keeps no results (dependencies live in queues that keep them), its children are cancelled as by its
-- removal (pyqueue__deps_left, 'was moved to a queue that keeps no results'). Locks: in_to's queue row (shared, as
-- the move's own foreign key), the rows it updates and deletes in pyqueue_dependency.
DROP PROCEDURE IF EXISTS pyqueue__deps_moved //
CREATE PROCEDURE pyqueue__deps_moved(
    IN in_from VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_to   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_results INT DEFAULT 0;
    SELECT COUNT(*) INTO v_results FROM pyqueue_queue q
     WHERE q.queue_name = in_to AND q.result_retention IS NOT NULL
      LOCK IN SHARE MODE;
    IF v_results = 0 THEN
        CALL pyqueue__deps_left(in_from, in_key, in_kind, FALSE, 'was moved to a queue that keeps no results');
    ELSE
        DELETE d FROM pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
         WHERE d.queue_name = in_to AND d.p_key = in_key AND d.p_kind = in_kind;
        UPDATE pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
          STRAIGHT_JOIN pyqueue_dependency o FORCE INDEX (pyqueue_dependency_message_idx)
            ON o.queue_name = d.other_queue AND o.p_key = d.other_key AND o.p_kind = d.other_kind
           AND o.role = IF(d.role = 'c', 'p', 'c')
           SET o.other_queue = in_to
         WHERE d.queue_name = in_from AND d.p_key = in_key AND d.p_kind = in_kind AND d.role IN ('c', 'p')
           AND o.other_queue = in_from AND o.other_key = in_key AND o.other_kind = in_kind;
        UPDATE pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx) SET d.queue_name = in_to
         WHERE d.queue_name = in_from AND d.p_key = in_key AND d.p_kind = in_kind;
    END IF;
END //

-- pyqueue__deps_moved_many: pyqueue__deps_moved for each message whose id is the first element of an element of
-- in_ids (a JSON array of arrays, [[id, ...], ...]; NULL: none) and that has moved from in_from to in_to and has rows
-- in pyqueue_dependency there (one probe each, which finds nothing for most). Locks: as pyqueue__deps_moved.
DROP PROCEDURE IF EXISTS pyqueue__deps_moved_many //
CREATE PROCEDURE pyqueue__deps_moved_many(
    IN in_from VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_to   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_ids  LONGTEXT     CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_t VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE c_moved CURSOR FOR
        SELECT m.p_key, m.p_kind
          FROM JSON_TABLE(COALESCE(in_ids, '[]'), '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
         WHERE m.queue_name = in_to
           AND EXISTS (SELECT 1 FROM pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
                        WHERE d.queue_name = in_from AND d.p_key = m.p_key AND d.p_kind = m.p_kind)
         ORDER BY m.p_key, m.p_kind;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    OPEN c_moved;
    moved: LOOP
        FETCH c_moved INTO v_k, v_t;
        IF v_done = 1 THEN LEAVE moved; END IF;
        CALL pyqueue__deps_moved(in_from, in_to, v_k, v_t);
        SET v_done = 0;
    END LOOP;
    CLOSE c_moved;
END //

-- pyqueue__push_after_check: pyqueue__push_after's checks of in_parents (see there) for the message (in_queue, in_key,
-- in_kind), before anything is read or written: a JSON array of 1 to 1000 objects of three plainly valid names, none
-- the message itself or a schedule's occurrence; the first bad element named. Reads no table.
DROP PROCEDURE IF EXISTS pyqueue__push_after_check //
CREATE PROCEDURE pyqueue__push_after_check(
    IN in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_parents LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_p, v_name LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_n, v_bad INT DEFAULT 0;
    IF in_parents IS NULL OR NOT JSON_VALID(in_parents) OR JSON_TYPE(in_parents) <> 'ARRAY' THEN
        CALL pyqueue__raise('invalid_argument', 'parents must be a JSON array of {"queue", "p_key", "p_kind"} objects');
    END IF;
    SET v_n = JSON_LENGTH(in_parents);
    IF v_n < 1 OR v_n > 1000 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT('parents must name 1 to 1000 messages, not ', v_n));
    END IF;
    -- Every element checked before anything is read or written, the array parsed once (JSON_TABLE): the first
    -- element that is not an object of three plainly valid names (then checked alone, for its exact error), the
    -- message itself, or a schedule's occurrence.
    SELECT MIN(j.ord) INTO v_bad
      FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (ord FOR ORDINALITY, obj JSON PATH '$')) AS j
     WHERE (   JSON_TYPE(j.obj) = 'OBJECT'
           AND JSON_TYPE(JSON_EXTRACT(j.obj, '$.queue')) = 'STRING'
           AND JSON_TYPE(JSON_EXTRACT(j.obj, '$.p_key')) = 'STRING'
           AND JSON_TYPE(JSON_EXTRACT(j.obj, '$.p_kind')) = 'STRING'
           AND CHAR_LENGTH(JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.queue'))) BETWEEN 1 AND 128
           AND CHAR_LENGTH(JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_key'))) BETWEEN 1 AND 255
           AND CHAR_LENGTH(JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_kind'))) BETWEEN 1 AND 128
           AND NOT (JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.queue')) LIKE '% ')
           AND NOT (JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_key')) LIKE '% ')
           AND NOT (JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_kind')) LIKE '% ')
           AND LOCATE(X'ED', CAST(j.obj AS BINARY)) = 0
           AND NOT (JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.queue')) = in_queue
                    AND JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_key')) = in_key
                    AND JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_kind')) = in_kind)
           AND NOT (JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_key')) LIKE '%@____-__-__T__:__:__Z')) IS NOT TRUE;
    IF v_bad IS NOT NULL THEN
        SET v_p = JSON_EXTRACT(in_parents, CONCAT('$[', v_bad - 1, ']'));
        IF JSON_TYPE(v_p) <> 'OBJECT'
           OR COALESCE(JSON_TYPE(JSON_EXTRACT(v_p, '$.queue')), '') <> 'STRING'
           OR COALESCE(JSON_TYPE(JSON_EXTRACT(v_p, '$.p_key')), '') <> 'STRING'
           OR COALESCE(JSON_TYPE(JSON_EXTRACT(v_p, '$.p_kind')), '') <> 'STRING' THEN
            CALL pyqueue__raise('invalid_argument',
                                CONCAT('parents[', v_bad, '] must be an object with the strings queue, p_key and p_kind'));
        END IF;
        SET v_name = JSON_UNQUOTE(JSON_EXTRACT(v_p, '$.queue'));
        CALL pyqueue__check_name(CONCAT('parents[', v_bad, '].queue'), v_name, 128);
        SET v_name = JSON_UNQUOTE(JSON_EXTRACT(v_p, '$.p_key'));
        CALL pyqueue__check_name(CONCAT('parents[', v_bad, '].p_key'), v_name, 255);
        IF v_name LIKE '%@____-__-__T__:__:__Z' THEN
            CALL pyqueue__raise('invalid_argument', CONCAT('parents[', v_bad, '] is a schedule''s occurrence'));
        END IF;
        SET v_name = JSON_UNQUOTE(JSON_EXTRACT(v_p, '$.p_kind'));
        CALL pyqueue__check_name(CONCAT('parents[', v_bad, '].p_kind'), v_name, 128);
        CALL pyqueue__raise('invalid_argument', CONCAT('parents[', v_bad, '] is the message itself'));
    END IF;
END //

-- pyqueue__push_after_parents: pyqueue__push_after's reads of the parents, in its transaction (see there): in its
-- own transaction (in_own = 1) the parents' queue rows share-locked; each parent's queue exists and keeps results; the
-- live parents share-locked and counted (out_left); every other one succeeded (or, for in_on 'failure' and 'always',
-- failed or was cancelled: counted in out_failed), else refused naming it; a failure callback with nothing left to
-- fail refused. Locks: as pyqueue__push_after says.
DROP PROCEDURE IF EXISTS pyqueue__push_after_parents //
CREATE PROCEDURE pyqueue__push_after_parents(
    IN  in_parents LONGTEXT CHARACTER SET utf8mb4,
    IN  in_own     INT,
    IN  in_on      VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_left   INT,
    OUT out_failed INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_max INT;
    DECLARE v_bad INT DEFAULT NULL;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    SET out_left = 0, out_failed = 0;
    IF in_own = 1 THEN
        -- in a transaction of its own (ended below, within this call) the parents' queue rows are
        -- share-locked too: a queue_set_result_retention(NULL) of one waits these few statements. Never
        -- in the caller's transaction, which could hold them for as long as it likes, and a reserve or a
        -- settle that dead-letters (dead_count), a pause or a setting of those queues would wait for it.
        SELECT COUNT(*) INTO v_max
          FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
                   pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue')) AS j
          STRAIGHT_JOIN pyqueue_queue q ON q.queue_name = j.pq
          LOCK IN SHARE MODE;
    END IF;
    -- each exists and keeps results
    SELECT MIN(j.ord) INTO v_bad
      FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
               ord FOR ORDINALITY,
               pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue')) AS j
      LEFT JOIN pyqueue_queue q ON q.queue_name = j.pq
     WHERE q.queue_name IS NULL OR q.result_retention IS NULL;
    IF v_bad IS NOT NULL THEN
        SELECT COUNT(*) INTO v_max FROM pyqueue_queue q
         WHERE q.queue_name = JSON_UNQUOTE(JSON_EXTRACT(in_parents, CONCAT('$[', v_bad - 1, '].queue')));
        IF v_max = 0 THEN
            CALL pyqueue__raise('unknown_queue',
                                CONCAT('queue "', JSON_UNQUOTE(JSON_EXTRACT(in_parents, CONCAT('$[', v_bad - 1, '].queue'))),
                                       '" does not exist'));
        END IF;
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('parents[', v_bad, ']: its queue keeps no results, so it cannot be a parent'));
    END IF;
    -- the live parents, share-locked until the transaction ends (their commits wait for it); one named again
    -- is the same parent (parents are a set), counted once
    SELECT COUNT(DISTINCT m.id) INTO out_left
      FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
               pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue',
               pk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
               pt VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind')) AS j
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
        ON m.queue_name = j.pq AND m.p_key = j.pk AND m.p_kind = j.pt
      LOCK IN SHARE MODE;
    -- the others: each must have succeeded (latest outcome, a locking read)
    SET v_bad = NULL, v_state = NULL;
    SELECT j.ord, r.state INTO v_bad, v_state
      FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
               ord FOR ORDINALITY,
               pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue',
               pk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
               pt VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind')) AS j
      LEFT JOIN pyqueue_message m ON m.queue_name = j.pq AND m.p_key = j.pk AND m.p_kind = j.pt
      LEFT JOIN pyqueue_result r ON r.queue_name = j.pq AND r.p_key = j.pk AND r.p_kind = j.pt
     WHERE m.id IS NULL AND (r.state IS NULL OR r.state <> 'succeeded')
       AND NOT (in_on <> 'success' AND r.state IN ('failed', 'cancelled'))
     ORDER BY j.ord
     LIMIT 1
      LOCK IN SHARE MODE;
    IF v_bad IS NOT NULL AND v_state IS NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('parents[', v_bad, '] is unknown: neither live nor a result there'));
    ELSEIF v_bad IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('parents[', v_bad, '] has ', v_state, ': the message could never run'));
    END IF;
    IF in_on <> 'success' THEN
        -- the parents that ended already without success: a failure callback runs at once, 'always'
        -- counts them done
        SELECT COUNT(*) INTO out_failed
          FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
                   pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue',
                   pk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
                   pt VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind')) AS j
          LEFT JOIN pyqueue_message m ON m.queue_name = j.pq AND m.p_key = j.pk AND m.p_kind = j.pt
          JOIN pyqueue_result r ON r.queue_name = j.pq AND r.p_key = j.pk AND r.p_kind = j.pt
         WHERE m.id IS NULL AND r.state IN ('failed', 'cancelled')
          LOCK IN SHARE MODE;
    END IF;
    IF in_on = 'failure' AND out_left = 0 AND out_failed = 0 THEN
        CALL pyqueue__raise('invalid_argument',
                            'every parent has succeeded: a failure callback could never run');
    END IF;
END //

-- pyqueue__push_after_rows: pyqueue__push_after's rows in pyqueue_dependency for its new message in_id (in_queue,
-- in_key, in_kind): those an earlier message of the key left go, then a 'c' row on each live parent, a 'p' row for
-- each parent (a parent named more than once: one row of each, at its first place; parents are a set, so its commit
-- walks one edge per child) and, while it waits (in_wait), its count row 'w' (in_left parents left, its kind in_on); in the
-- caller's transaction (in_own 0) the parents' queues read again, the push undone and refused when one keeps no
-- results any more. Locks: the rows it writes.
DROP PROCEDURE IF EXISTS pyqueue__push_after_rows //
CREATE PROCEDURE pyqueue__push_after_rows(
    IN in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_parents LONGTEXT CHARACTER SET utf8mb4,
    IN in_id      BIGINT,
    IN in_own     INT,
    IN in_wait    INT,
    IN in_left    INT,
    IN in_on      VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_bad INT;
    -- rows an earlier message of this key left behind (one removed by a path that keeps none)
    DELETE d FROM pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
     WHERE d.queue_name = in_queue AND d.p_key = in_key AND d.p_kind = in_kind;
    INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, other_queue, other_key, other_kind,
                                    msg_id)
    SELECT j.pq, j.pk, j.pt, 'c', MIN(j.ord), in_queue, in_key, in_kind, in_id
      FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
               ord FOR ORDINALITY,
               pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue',
               pk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
               pt VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind')) AS j
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
        ON m.queue_name = j.pq AND m.p_key = j.pk AND m.p_kind = j.pt
     GROUP BY j.pq, j.pk, j.pt;
    INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, other_queue, other_key, other_kind)
    SELECT in_queue, in_key, in_kind, 'p', MIN(j.ord), j.pq, j.pk, j.pt
      FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
               ord FOR ORDINALITY,
               pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue',
               pk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
               pt VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind')) AS j
     GROUP BY j.pq, j.pk, j.pt;
    IF in_wait THEN
        -- its kind on its count row: other_kind NULL for 'success' (as queue_push_after wrote it)
        INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, msg_id, other_kind)
        VALUES (in_queue, in_key, in_kind, 'w', in_left, in_id, NULLIF(in_on, 'success'));
    END IF;
    IF in_own = 0 THEN
        -- In the caller's transaction, the parents' queues read again after the rows went in: a
        -- queue_set_result_retention(NULL) of one either waited for those rows (and refuses) or
        -- committed before them, and a read that sees it (READ COMMITTED; a REPEATABLE READ snapshot
        -- taken before it cannot) undoes this push and refuses it.
        SET v_bad = NULL;
        SELECT MIN(j.ord) INTO v_bad
          FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
                   ord FOR ORDINALITY,
                   pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue')) AS j
          LEFT JOIN pyqueue_queue q ON q.queue_name = j.pq
         WHERE q.queue_name IS NULL OR q.result_retention IS NULL;
        IF v_bad IS NOT NULL THEN
            DELETE c FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
                              pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue',
                              pk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
                              pt VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind')) AS j
              STRAIGHT_JOIN pyqueue_dependency c FORCE INDEX (pyqueue_dependency_message_idx)
                ON c.queue_name = j.pq AND c.p_key = j.pk AND c.p_kind = j.pt AND c.role = 'c'
             WHERE c.msg_id = in_id;
            DELETE d FROM pyqueue_dependency d FORCE INDEX (pyqueue_dependency_message_idx)
             WHERE d.queue_name = in_queue AND d.p_key = in_key AND d.p_kind = in_kind;
            DELETE FROM pyqueue_message WHERE id = in_id;
            CALL pyqueue__raise('invalid_argument',
                                CONCAT('parents[', v_bad, ']: its queue keeps no results, so it cannot be a parent'));
        END IF;
    END IF;
END //

-- pyqueue__push_after: queue_push of a message that waits for its parents, in_parents the JSON text of an array of 1 to
-- 1000 objects {"queue", "p_key", "p_kind"} (parents may be in other queues; none may be the message itself or a
-- schedule's occurrence; a parent named more than once counts once, at its first place). Result: one row, inserted = 1, or 0 when a live message has the key and kind (dedup:
-- nothing changes; checked before the parents are read, whatever they are). A parent is known when its queue keeps results (queue_set_result_retention) and it is live there
-- (it is waited for) or its result there is 'succeeded' (it counts as done); a parent whose result is 'failed' or
-- 'cancelled', or with neither a live message nor a result, is refused (invalid_argument naming it), before anything
-- is written. The message is 'waiting' (queue_result) while a parent has not succeeded: blocked as a FIFO group's
-- waiting member is (scheduled_at the BLOCKED time: no reserve visits it), with no group. The commit (queue_commit,
-- queue_commit_batch, queue_commit_result, its batch, queue_commit_reserve, queue_pop, queue_move) that ends the last
-- parent makes it ready, in that transaction (pyqueue__deps_left); a parent dead-lettered, dropped, cancelled or
-- removed cancels it, transitively. Ready at once when every parent had already succeeded. Priority 0.
-- in_run_on says when it runs (a dependency of its own kind, kept on its count row 'w' in other_kind): 'success'
-- (queue_push_after) as above; 'failure', a failure callback: ready, once, in the transaction that ends a parent
-- without success (dead-lettered, dropped, cancelled, removed, transitively), cancelled when every parent has
-- succeeded (last_error 'parent (...) succeeded, as every other: no failure to call back'); ready at once when a
-- parent had already failed or been cancelled, refused when every parent had already succeeded; 'always': ready once
-- every parent has ended, whichever way (a parent already failed or cancelled counts as ended). Its consumer reads the
-- parents' outcomes with queue_parent_results.
-- Steps: every check, the array parsed once (JSON_TABLE) for all its elements (pyqueue__push_after_check); then, in a
-- transaction of its own in autocommit mode (a deadlock victim runs again), set-based: the parents' queues, the live
-- parents read with a locking read (share-locked until the transaction ends, so a parent's commit either waits for
-- this push or is seen by it as finished), the others' outcomes (a locking read: the latest)
-- (pyqueue__push_after_parents), the INSERT IGNORE of the message, then its rows in pyqueue_dependency (one INSERT
-- ... SELECT per role; pyqueue__push_after_rows); in the caller's transaction, the parents' queues read again (see
-- there).
-- Locks: its queue's row (shared, as the foreign key of any push), the live parents' message rows (shared), the new
-- message row, its pyqueue_dependency rows and the parents' ones, until the transaction ends; in a transaction of
-- its own also the parents' queue rows (shared, for the length of the call). In the caller's transaction no parent's
-- queue row: nothing that a reserve, a settle or an admin call of the parents' queues waits for.
-- The body of queue_push_after_on_with_headers, queue_push_after_on and queue_push_after_batch (out_inserted: the
-- answer; the routines' own result sets are the wrappers'), with queue_push_with_headers' options: in_run_at (NULL:
-- none; a message is due at the later of its run_at and the moment its parents let it run, its run_at kept in
-- scheduled_at_initially while it waits, where pyqueue__deps_ready reads it), in_priority (NULL = 0) and in_headers
-- (NULL or JSON null: none; pyqueue__check_headers, a pyqueue.expires_at among them).
DROP PROCEDURE IF EXISTS pyqueue__push_after //
CREATE PROCEDURE pyqueue__push_after(
    IN  in_queue     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_key       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_payload   LONGTEXT CHARACTER SET utf8mb4,
    IN  in_parents   LONGTEXT CHARACTER SET utf8mb4,
    IN  in_run_on    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_run_at    DATETIME(6),
    IN  in_priority  DECIMAL(65,30),
    IN  in_headers   LONGTEXT CHARACTER SET utf8mb4,
    OUT out_inserted INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_left, v_inserted, v_retry INT DEFAULT 0;
    DECLARE v_own, v_tries, v_txn, v_failed, v_wait INT DEFAULT 0;
    DECLARE v_on VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_max_payload, v_id BIGINT;
    DECLARE v_now DATETIME(6);
    DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_message(in_key, in_kind, in_payload, in_run_at, in_priority);
    IF in_headers IS NOT NULL THEN CALL pyqueue__check_headers(in_headers, v_headers); END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SELECT MAX(q.max_payload) INTO v_max_payload FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
    IF in_run_on IS NULL OR in_run_on NOT IN ('success', 'failure', 'always') THEN
        CALL pyqueue__raise('invalid_argument', CONCAT('run_on must be ''success'', ''failure'' or ''always'', not ',
                                                       COALESCE(QUOTE(LEFT(in_run_on, 64)), 'NULL')));
    END IF;
    SET v_on = in_run_on;
    CALL pyqueue__push_after_check(v_queue, v_key, v_kind, in_parents);
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_left = 0, v_inserted = 0, v_failed = 0;
        attempt: BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF; RESIGNAL; END;
            IF v_own = 1 THEN
                START TRANSACTION;
                SET v_txn = 1;
            END IF;
            -- its queue and the parents' queues keep results, their rows share-locked until the transaction ends
            -- (a queue_set_result_retention(NULL) waits for this push, then sees its rows and refuses)
            SELECT COUNT(*) INTO v_max FROM pyqueue_queue q
             WHERE q.queue_name = v_queue AND q.result_retention IS NOT NULL
              LOCK IN SHARE MODE;
            IF v_max = 0 THEN
                CALL pyqueue__raise('invalid_argument',
                                    'the queue keeps no results: a message with parents needs them (queue_set_result_retention)');
            END IF;
            -- a live message has the key: false (dedup, as every push), before anything of the parents is read
            IF EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
                        WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind) THEN
                IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
                LEAVE attempt;
            END IF;
            CALL pyqueue__push_after_parents(in_parents, v_own, v_on, v_left, v_failed);
            SET v_wait = v_left > 0 AND NOT (v_on = 'failure' AND v_failed > 0);
            SET v_now = UTC_TIMESTAMP(6);
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at, scheduled_at_initially,
                    created_at, attempts, headers)
            VALUES (v_queue, v_key, v_kind, in_payload, COALESCE(in_priority, 0),
                    IF(v_wait, TIMESTAMP '9999-12-31 23:59:59.999999', GREATEST(v_now, COALESCE(in_run_at, v_now))),
                    IF(v_wait, TIMESTAMP '9999-12-31 23:59:59.999999', GREATEST(v_now, COALESCE(in_run_at, v_now))),
                    IF(v_wait, COALESCE(in_run_at, v_now), GREATEST(v_now, COALESCE(in_run_at, v_now))), v_now, 0,
                    v_headers);
            SET v_inserted = ROW_COUNT();
            IF v_inserted = 1 THEN
                SET v_id = LAST_INSERT_ID();
                CALL pyqueue__push_after_rows(v_queue, v_key, v_kind, in_parents, v_id, v_own, v_wait, v_left, v_on);
            END IF;
            IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    SET out_inserted = v_inserted;
END //

-- queue_push_after_on: queue_push_after_on_with_headers without run_at, priority or headers (priority 0, due once its
-- parents let it run). Result and locks: as queue_push_after_on_with_headers.
DROP PROCEDURE IF EXISTS queue_push_after_on //
CREATE PROCEDURE queue_push_after_on(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_parents LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_on  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__check_clock();
    CALL queue_push_after_on_with_headers(in_queue, in_key, in_kind, in_payload, in_parents, in_run_on, NULL, NULL,
                                          NULL);
END //

-- queue_push_after_on_with_headers: pyqueue__push_after, its answer as one row (inserted 1/0). Locks: as
-- pyqueue__push_after.
DROP PROCEDURE IF EXISTS queue_push_after_on_with_headers //
CREATE PROCEDURE queue_push_after_on_with_headers(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_parents  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_on   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_inserted INT;
    CALL pyqueue__check_clock();
    CALL pyqueue__push_after(in_queue, in_key, in_kind, in_payload, in_parents, in_run_on, in_run_at, in_priority,
                             in_headers, v_inserted);
    SELECT v_inserted AS inserted;
END //

-- queue_push_after: queue_push_after_on with run_on 'success' (the message runs once every parent has succeeded;
-- cancelled when one fails or is cancelled). Result and locks: as queue_push_after_on.
DROP PROCEDURE IF EXISTS queue_push_after //
CREATE PROCEDURE queue_push_after(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_parents LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__check_clock();
    CALL queue_push_after_on(in_queue, in_key, in_kind, in_payload, in_parents, 'success');
END //

-- queue_push_after_batch: many messages that wait for their parents, in one call and one transaction (a chord's
-- 1,000 parts in one round trip): in_messages the JSON text of an array of 1 to 5000 objects, each with the strings
-- p_key and p_kind, payload, parents (as queue_push_after's), and optionally run_on (a string, default 'success'),
-- run_at (UTC, 'YYYY-MM-DD HH:MM:SS[.ffffff]'), priority (an integer) and headers; any other member is refused. Each
-- element is pushed as queue_push_after_on_with_headers pushes it (pyqueue__push_after, in order: an element may name
-- an earlier one as a parent); a refused element refuses the batch, nothing written, the error naming it ('element N
-- of the batch: ...'). Result: one row, inserted (how many; a live key is skipped: dedup). The array is read once
-- (a cursor over JSON_TABLE). In autocommit mode the batch is a transaction of its own, run again whole on a
-- deadlock (up to 10 times). Locks: as pyqueue__push_after, for each element, until the transaction ends.
DROP PROCEDURE IF EXISTS queue_push_after_batch //
CREATE PROCEDURE queue_push_after_batch(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_n, v_i, v_one, v_count, v_retry INT DEFAULT 0;
    DECLARE v_own, v_txn, v_tries INT DEFAULT 0;
    DECLARE v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused, v_end BOOLEAN DEFAULT FALSE;
    DECLARE v_m LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_text VARCHAR(512) CHARACTER SET utf8mb4;
    CALL pyqueue__check_clock();
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    IF in_messages IS NULL OR NOT JSON_VALID(in_messages) OR JSON_TYPE(in_messages) <> 'ARRAY' THEN
        CALL pyqueue__raise('invalid_argument', 'messages must be a JSON array of objects');
    END IF;
    SET v_n = JSON_LENGTH(in_messages);
    IF v_n < 1 OR v_n > 5000 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT('messages must hold 1 to 5000 messages, not ', v_n));
    END IF;
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_i = 0, v_count = 0, v_end = FALSE;
        BEGIN
            -- (declared in the attempt: leaving it closes the cursor, and the next attempt opens it again)
            DECLARE c_messages CURSOR FOR
                SELECT j.m FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (ord FOR ORDINALITY, m JSON PATH '$')) AS j
                 ORDER BY j.ord;
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_end = TRUE;
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN
                -- the element named: 'pyqueue:<code>: element N of the batch: <detail>'
                GET DIAGNOSTICS CONDITION 1 v_text = MESSAGE_TEXT;
                IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF;
                IF v_text LIKE 'pyqueue:%' THEN
                    SET v_text = LEFT(CONCAT(SUBSTRING_INDEX(v_text, ': ', 1), ': element ', v_i, ' of the batch: ',
                                             SUBSTRING(v_text, CHAR_LENGTH(SUBSTRING_INDEX(v_text, ': ', 1)) + 3)), 128);
                ELSE
                    SET v_text = LEFT(CONCAT('pyqueue:invalid_argument: element ', v_i, ' of the batch: ', v_text), 128);
                END IF;
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_text;
            END;
            IF v_own = 1 THEN
                START TRANSACTION;
                SET v_txn = 1;
            END IF;
            OPEN c_messages;
            messages: LOOP
                FETCH c_messages INTO v_m;
                IF v_end THEN LEAVE messages; END IF;
                SET v_i = v_i + 1;
                IF JSON_TYPE(v_m) <> 'OBJECT'
                   OR COALESCE(JSON_TYPE(JSON_EXTRACT(v_m, '$.p_key')), '') <> 'STRING'
                   OR COALESCE(JSON_TYPE(JSON_EXTRACT(v_m, '$.p_kind')), '') <> 'STRING'
                   OR COALESCE(JSON_TYPE(JSON_EXTRACT(v_m, '$.run_on')), 'NULL') NOT IN ('STRING', 'NULL')
                   OR COALESCE(JSON_TYPE(JSON_EXTRACT(v_m, '$.run_at')), 'NULL') NOT IN ('STRING', 'NULL')
                   OR COALESCE(JSON_TYPE(JSON_EXTRACT(v_m, '$.priority')), 'NULL') NOT IN ('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL', 'NULL') THEN
                    CALL pyqueue__raise('invalid_argument', 'must be an object with the strings p_key and p_kind, payload, parents and optionally run_on, run_at, priority and headers');
                END IF;
                IF JSON_LENGTH(JSON_REMOVE(v_m, '$.p_key', '$.p_kind', '$.payload', '$.parents', '$.run_on', '$.run_at',
                                           '$.priority', '$.headers')) > 0 THEN
                    CALL pyqueue__raise('invalid_argument',
                                        CONCAT('unknown member ', QUOTE(JSON_UNQUOTE(JSON_EXTRACT(JSON_KEYS(JSON_REMOVE(
                                            v_m, '$.p_key', '$.p_kind', '$.payload', '$.parents', '$.run_on', '$.run_at',
                                            '$.priority', '$.headers')), '$[0]')))));
                END IF;
                CALL pyqueue__push_after(in_queue, JSON_UNQUOTE(JSON_EXTRACT(v_m, '$.p_key')),
                                         JSON_UNQUOTE(JSON_EXTRACT(v_m, '$.p_kind')), JSON_EXTRACT(v_m, '$.payload'),
                                         JSON_EXTRACT(v_m, '$.parents'),
                                         COALESCE(NULLIF(JSON_UNQUOTE(JSON_EXTRACT(v_m, '$.run_on')), 'null'), 'success'),
                                         CAST(NULLIF(JSON_UNQUOTE(JSON_EXTRACT(v_m, '$.run_at')), 'null') AS DATETIME(6)),
                                         NULLIF(JSON_UNQUOTE(JSON_EXTRACT(v_m, '$.priority')), 'null'),
                                         NULLIF(JSON_EXTRACT(v_m, '$.headers'), 'null'), v_one);
                SET v_count = v_count + v_one;
            END LOOP;
            CLOSE c_messages;
            IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_count AS inserted;
END //

-- queue_parent_results: the parents of the live message (in_key, in_kind) of in_queue (pushed with queue_push_after:
-- waiting, ready or held), one row each in the order they were given: ordinal (1, 2, ...), the parent's queue, p_key
-- and p_kind, its state as queue_result reads it ('succeeded' with its stored result, 'failed', 'cancelled', or while
-- live 'ready', 'delayed', 'reserved', 'waiting', 'blocked'; 'unknown' when neither, e.g. a parent moved on, whose
-- queue records no result for the move, or whose result was purged) and result: its stored result for 'succeeded',
-- its last_error (a JSON string, or null) for 'failed' and 'cancelled' (what a failure callback reports), NULL
-- otherwise. No rows for a message without parents or not live. For the consumer that holds the child (a fan-in reads its inputs).
-- Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_parent_results //
CREATE PROCEDURE queue_parent_results(
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
    SELECT d.n AS ordinal, d.other_queue AS queue, d.other_key AS p_key, d.other_kind AS p_kind,
           CASE WHEN m.id IS NOT NULL THEN
                     CASE WHEN m.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999' AND m.group_key IS NULL
                          THEN 'waiting'
                          WHEN m.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999' THEN 'blocked'
                          WHEN m.scheduled_at <= v_now THEN 'ready'
                          WHEN m.reserve_token IS NULL THEN 'delayed'
                          ELSE 'reserved' END
                WHEN r.state IS NOT NULL THEN r.state
                ELSE 'unknown' END AS state,
           CASE WHEN m.id IS NOT NULL THEN NULL
                WHEN r.state IN ('failed', 'cancelled') THEN JSON_QUOTE(r.last_error)
                ELSE r.result END AS result
      FROM pyqueue_dependency d
      LEFT JOIN pyqueue_message m
        ON m.queue_name = d.other_queue AND m.p_key = d.other_key AND m.p_kind = d.other_kind
      LEFT JOIN pyqueue_result r
        ON r.queue_name = d.other_queue AND r.p_key = d.other_key AND r.p_kind = d.other_kind
     WHERE d.queue_name = v_queue AND d.p_key = v_key AND d.p_kind = v_kind AND d.role = 'p'
       AND EXISTS (SELECT 1 FROM pyqueue_message c
                    WHERE c.queue_name = v_queue AND c.p_key = v_key AND c.p_kind = v_kind)
     ORDER BY d.n;
END //

DELIMITER ;
