-- ==== results ====
-- What became of one message, for a producer or a monitor: read it now (queue_result), wait until it is final
-- (queue_result_wait, a long poll: MySQL has no NOTIFY), and the channel name PostgreSQL would announce it on.

DELIMITER //

-- pyqueue__result_put: records in pyqueue_result the outcome in_state ('succeeded', 'failed' or 'cancelled') of the
-- message (in_queue, in_key, in_kind) that the caller has just removed: in_result (JSON text; NULL and the JSON value
-- null are stored as SQL NULL), in_error (its last_error), in_attempts (its deliveries), in_progress, finished at
-- in_now; it replaces the row an earlier message of the key left. Called only for a queue that keeps results, after
-- the removal, in its transaction. Then, unless in_ok is NULL, what its leaving does to the messages that wait for
-- it (dependencies live in queues that keep results): one locking probe of pyqueue_dependency, and when it finds rows
-- pyqueue__deps_left(in_ok, in_why); in_ok NULL: the caller sees to them (pyqueue__group_leave, after the group's
-- next message). pyqueue__deps_left, called from here, writes the result rows of the children it cancels itself.
-- Locks: the result row (a new one: the gap where it goes), then as pyqueue__deps_left, for one statement (or until
-- the transaction ends).
DROP PROCEDURE IF EXISTS pyqueue__result_put //
CREATE PROCEDURE pyqueue__result_put(
    IN in_queue    VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_state    VARCHAR(16)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_result   LONGTEXT      CHARACTER SET utf8mb4,
    IN in_error    VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_attempts INT,
    IN in_progress LONGTEXT      CHARACTER SET utf8mb4,
    IN in_now      DATETIME(6),
    IN in_ok       BOOLEAN,
    IN in_why      VARCHAR(64)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_result LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_deps INT;
    -- a success clears the error of an earlier attempt
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT IF(in_state = 'succeeded', NULL, in_error);
    IF in_result IS NOT NULL AND JSON_TYPE(in_result) <> 'NULL' THEN SET v_result = in_result; END IF;
    INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts, progress, finished_at)
    VALUES (in_queue, in_key, in_kind, in_state, v_result, v_error, in_attempts, in_progress, in_now)
    ON DUPLICATE KEY UPDATE state = in_state, result = v_result, last_error = v_error, attempts = in_attempts,
                            progress = in_progress, finished_at = in_now;
    IF in_ok IS NOT NULL THEN
        SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
         WHERE d.queue_name = in_queue AND d.p_key = in_key AND d.p_kind = in_kind
          LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
        IF v_deps > 0 THEN CALL pyqueue__deps_left(in_queue, in_key, in_kind, in_ok, in_why); END IF;
    END IF;
END //

-- pyqueue__check_result: refuses (invalid_argument) a result given to in_queue (an existing queue) when the queue keeps
-- no results, and a result in_result that is not JSON or is longer (bytes of its JSON text) than the queue's
-- max_payload; NULL (no result) passes the last two. Plain read of the queue row.
DROP PROCEDURE IF EXISTS pyqueue__check_result //
CREATE PROCEDURE pyqueue__check_result(
    IN in_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_result LONGTEXT     CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_keeps INT;
    DECLARE v_max BIGINT;
    SELECT MAX(q.result_retention IS NOT NULL), MAX(q.max_payload) INTO v_keeps, v_max
      FROM pyqueue_queue q WHERE q.queue_name = in_queue;
    IF NOT v_keeps THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('queue "', in_queue, '" keeps no results (queue_set_result_retention)'));
    END IF;
    IF in_result IS NOT NULL THEN
        IF NOT JSON_VALID(in_result) THEN
            CALL pyqueue__raise('invalid_argument',
                                'result is not valid JSON (MariaDB also refuses JSON nested 32 levels deep)');
        END IF;
        IF LOCATE(X'ED', CAST(in_result AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'result', in_result); END IF;
        CALL pyqueue__check_result_size(LENGTH(in_result), v_max);
    END IF;
END //

-- pyqueue__check_result_size: refuses (invalid_argument) a result of in_bytes bytes over a max_payload of in_max.
DROP PROCEDURE IF EXISTS pyqueue__check_result_size //
CREATE PROCEDURE pyqueue__check_result_size(IN in_bytes BIGINT, IN in_max BIGINT)
SQL SECURITY INVOKER
BEGIN
    IF in_bytes > in_max THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('result is ', in_bytes, ' bytes, more than the queue''s max_payload of ', in_max, ' bytes'));
    END IF;
END //

-- pyqueue__result: the body of queue_result (in_wait FALSE) and queue_result_wait (in_wait TRUE, in_timeout seconds:
-- NULL = 1, above zero, at most 3600), each a thin SECURITY DEFINER wrapper over it. Checks the key, then reads what
-- is known of (in_queue, in_key, in_kind) by ONE statement (one consistent view: a message that finished meanwhile is
-- seen either live or with its result, never neither): the live message (state 'ready', an expired reservation too,
-- 'delayed', 'reserved' or 'blocked' behind its FIFO group's head; no result, no finished_at), else its stored
-- outcome, else 'unknown' (all NULL); waiting, again every 50 ms until the state is final or 'unknown' or the time is
-- up. Raises unknown_queue when the queue does not exist (also when it is dropped during a wait). Emits the row.
-- Plain reads, no locks.
DROP PROCEDURE IF EXISTS pyqueue__result //
CREATE PROCEDURE pyqueue__result(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_wait    BOOLEAN,
    IN in_timeout DECIMAL(20,6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_result, v_progress LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found, v_attempts, v_requested INT;
    DECLARE v_now, v_finished, v_deadline DATETIME(6);
    DECLARE v_left DECIMAL(20,6);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
    CALL pyqueue__check_message_key(in_queue, in_key, in_kind, FALSE);
    IF in_wait THEN
        CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
        IF in_timeout > 3600 THEN CALL pyqueue__raise('invalid_argument', 'timeout must not exceed 1 hour'); END IF;
    END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SET v_deadline = UTC_TIMESTAMP(6) + INTERVAL CAST(COALESCE(in_timeout, 1) * 1000000 AS SIGNED) MICROSECOND;
    waiting: LOOP
        SET v_now = UTC_TIMESTAMP(6), v_found = 1;
        -- (at most one row: the queue by its key, the message and the result by theirs)
        SELECT CASE WHEN m.id IS NOT NULL THEN
                         CASE WHEN m.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999' AND m.group_key IS NULL
                              THEN 'waiting'
                              WHEN m.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999' THEN 'blocked'
                              WHEN m.scheduled_at <= v_now THEN 'ready'
                              WHEN m.reserve_token IS NULL THEN 'delayed'
                              ELSE 'reserved' END
                    WHEN r.state IS NOT NULL THEN r.state
                    ELSE 'unknown' END,
               IF(m.id IS NULL, r.result, NULL),
               IF(m.id IS NULL, r.last_error, m.last_error),
               IF(m.id IS NULL, r.attempts, m.attempts),
               IF(m.id IS NULL, r.progress, m.progress),
               IF(m.id IS NULL, r.finished_at, NULL),
               COALESCE(m.cancel_requested_at IS NOT NULL, 0)
          INTO v_state, v_result, v_error, v_attempts, v_progress, v_finished, v_requested
          FROM pyqueue_queue q
          LEFT JOIN pyqueue_message m ON m.queue_name = q.queue_name AND m.p_key = v_key AND m.p_kind = v_kind
          LEFT JOIN pyqueue_result r ON r.queue_name = q.queue_name AND r.p_key = v_key AND r.p_kind = v_kind
         WHERE q.queue_name = v_queue;
        IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
        IF NOT in_wait OR v_state IN ('succeeded', 'failed', 'cancelled', 'unknown') THEN LEAVE waiting; END IF;
        SET v_left = TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_deadline) / 1e6;
        IF v_left <= 0 THEN LEAVE waiting; END IF;
        DO SLEEP(LEAST(0.05, v_left));
    END LOOP;
    SELECT v_state AS state, v_result AS result, v_error AS last_error, v_attempts AS attempts,
           v_progress AS progress, v_finished AS finished_at, v_requested AS cancel_requested;
END //

-- pyqueue__finish_held: the end of the reservation in_token holds on (in_key, in_kind) of in_queue, as queue_commit
-- does it, on a queue that keeps results with its outcome in_state recorded in the same transaction: 'succeeded' with
-- in_result (queue_commit_result), or 'cancelled' (queue_cancel_held: history outcome 'cancelled', result NULL; on a
-- queue without results just the removal). The body of both, each a thin SECURITY DEFINER wrapper over it: the queue,
-- key, kind and token checked first, and for 'succeeded' the result (pyqueue__check_result). out_done = 1, or 0 when
-- the token no longer holds (nothing written). A grouped message goes through pyqueue__group_leave; otherwise
-- pyqueue__commit_held. In autocommit mode the steps are one transaction of the call's own, run again on a deadlock.
-- Locks: the message row (a grouped one: its group row first), the history, schedule and result rows, until the
-- transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__finish_held //
CREATE PROCEDURE pyqueue__finish_held(
    IN  in_queue  LONGTEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_key    LONGTEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind   LONGTEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_token  LONGTEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_state  VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_result LONGTEXT    CHARACTER SET utf8mb4,
    OUT out_done  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_id BIGINT;
    DECLARE v_history, v_results BOOLEAN;
    DECLARE v_retry INT;
    DECLARE v_own, v_tries, v_txn INT DEFAULT 0;
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    IF in_state = 'succeeded' THEN CALL pyqueue__check_result(v_queue, in_result); END IF;
    SET out_done = 0;
    SELECT COALESCE(MAX(m.id), 0), MAX(m.group_key),
           (SELECT q.history_retention IS NOT NULL FROM pyqueue_queue q WHERE q.queue_name = v_queue),
           (SELECT q.result_retention IS NOT NULL FROM pyqueue_queue q WHERE q.queue_name = v_queue)
      INTO v_id, v_group, v_history, v_results
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind AND m.reserve_token = v_held;
    IF v_id > 0 THEN CALL pyqueue__own_transaction(TRUE, v_own); END IF;
    IF v_group IS NOT NULL THEN
        CALL pyqueue__group_leave(IF(in_state = 'cancelled', 'cancel_held', 'commit_result'), v_queue, v_group, v_id,
                                  v_key, v_kind, v_held, NULL, in_result, UTC_TIMESTAMP(6), v_own, out_done);
    ELSEIF v_id > 0 THEN
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF; RESIGNAL; END;
                IF v_own = 1 THEN
                    START TRANSACTION;
                    SET v_txn = 1;
                END IF;
                CALL pyqueue__commit_held(v_queue, v_id, v_key, v_kind, v_held, v_history,
                                          IF(v_results, in_state, NULL), in_result, in_state <> 'cancelled', out_done);
                IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
    END IF;
END //

-- queue_set_result_retention: how long the outcome of each finished message of the queue is kept for queue_result, in
-- seconds: above zero, at most 3650 days (315360000). NULL turns recording off (the rows already kept go at the next
-- queue_purge_history); so does queue_reset_setting(queue, 'result_retention'). No result set. Locks: the queue row,
-- for one statement.
DROP PROCEDURE IF EXISTS queue_set_result_retention //
CREATE PROCEDURE queue_set_result_retention(
    IN in_queue     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_retention DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_queue(in_queue);
    IF in_retention > 315360000 THEN CALL pyqueue__raise('invalid_argument', 'result_retention must not exceed 3650 days'); END IF;
    CALL pyqueue__check_duration('result_retention', in_retention, TRUE);
    SET v_queue = in_queue;
    -- Keeping no results is refused while messages of the queue have parents or children (dependencies live in
    -- queues that keep results): one statement, whose read of pyqueue_dependency locks (the rows a queue_push_after
    -- in flight wrote there: this waits for it and sees them; and the gap, so a push after that read waits for this
    -- statement, then reads the setting again and refuses).
    UPDATE pyqueue_queue SET result_retention = in_retention
     WHERE queue_name = v_queue
       AND (in_retention IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name = v_queue));
    IF in_retention IS NULL
       AND EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue AND q.result_retention IS NOT NULL)
       AND EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name = v_queue) THEN
        CALL pyqueue__raise('invalid_argument',
                            'messages of the queue have parents or children: it keeps results until they are gone');
    END IF;
END //

-- queue_commit_result: queue_commit, and the message's outcome 'succeeded' with in_result (JSON text; NULL or the JSON
-- value null: no result, stored as SQL NULL) recorded in the same transaction, for queue_result. Refused, changing
-- nothing (invalid_argument): a queue that keeps no results (queue_set_result_retention), a result that is not JSON or
-- longer than the queue's max_payload. Result: one row, committed = 1, or 0 when the token no longer holds (nothing
-- written). Steps and locks: pyqueue__finish_held.
DROP PROCEDURE IF EXISTS queue_commit_result //
CREATE PROCEDURE queue_commit_result(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_result LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_done INT;
    CALL pyqueue__check_clock();
    CALL pyqueue__finish_held(in_queue, in_key, in_kind, in_token, 'succeeded', in_result, v_done);
    SELECT v_done AS committed;
END //

-- queue_commit_result_batch: queue_commit_batch with a result for each reservation: in_results, a JSON array of the
-- same length as the other three (element i: the result of reservation i, any JSON; null: no result), each recorded
-- with its commit ('succeeded'). Result: one row, committed = how many were deleted. Refused, changing nothing, as
-- queue_commit_batch, and: results NULL, not an array or of another length, a queue that keeps no results
-- (queue_set_result_retention), a result longer than the queue's max_payload. Steps and locks: pyqueue__commit_batch.
DROP PROCEDURE IF EXISTS queue_commit_result_batch //
CREATE PROCEDURE queue_commit_result_batch(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_keys    LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN in_tokens  LONGTEXT CHARACTER SET utf8mb4,
    IN in_results LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_done INT;
    CALL pyqueue__check_clock();
    IF in_results IS NULL THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds, tokens and results must not be NULL');
    END IF;
    CALL pyqueue__commit_batch(in_queue, in_keys, in_kinds, in_tokens, in_results, v_done);
    SELECT v_done AS committed;
END //

-- queue_result: the state of the message (in_key, in_kind) of in_queue, always exactly one row: state, result,
-- last_error, attempts, progress, finished_at (UTC), cancel_requested (0/1). A live message wins: state 'ready' (an
-- expired reservation too), 'delayed', 'reserved' or 'blocked' (behind its FIFO group's head), result and finished_at
-- NULL, the live message's last_error, attempts and progress, cancel_requested = whether queue_cancel asked its holder
-- to stop. Else the outcome kept for a queue with a result_retention: 'succeeded', 'failed' or 'cancelled'
-- (cancel_requested 0). Else 'unknown' (every other column NULL, cancel_requested 0). Raises unknown_queue. One
-- plain read (pyqueue__result), no locks.
DROP PROCEDURE IF EXISTS queue_result //
CREATE PROCEDURE queue_result(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__check_clock();
    CALL pyqueue__result(in_queue, in_key, in_kind, FALSE, NULL);
END //

-- queue_result_wait: queue_result once the message's state is final ('succeeded', 'failed', 'cancelled') or
-- 'unknown', or when in_timeout seconds have passed (NULL = 1, above zero, at most 3600), with its state at that
-- moment. A long poll inside the server, as queue_wait: it reads the state every 50 ms, one round trip per wait. Call
-- it in autocommit mode or READ COMMITTED (a REPEATABLE READ snapshot never sees the message finish). Raises
-- unknown_queue (also when the queue is dropped while it waits). Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_result_wait //
CREATE PROCEDURE queue_result_wait(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__check_clock();
    CALL pyqueue__result(in_queue, in_key, in_kind, TRUE, in_timeout);
END //

-- queue_result_channel: the name of the queue's result channel on PostgreSQL, 'pyqueue_result_' + MD5 of its name,
-- returned here for symmetry (MySQL has no NOTIFY: nothing is ever sent on it; wait with queue_result_wait). One row:
-- channel. Raises unknown_queue. Plain read.
DROP PROCEDURE IF EXISTS queue_result_channel //
CREATE PROCEDURE queue_result_channel(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_queue(in_queue);
    SET v_queue = in_queue;
    SELECT CONCAT('pyqueue_result_', MD5(v_queue)) AS channel;
END //

-- queue_cancel: cancels the message (in_key, in_kind) of in_queue. Result: one row, outcome:
--   'cancelled': it was ready, delayed, blocked behind its FIFO group's head, or reserved with an expired lease: it is
--     removed (its group's next message moves up as after a commit; a limit slot it held is free again, as its holder
--     is gone; a schedule's occurrence advances its schedule), with history outcome 'cancelled' and, on a queue that
--     keeps results, the outcome 'cancelled' (its last_error, attempts and progress);
--   'requested': it is reserved: cancel_requested_at is set (the first request's time stays: idempotent) and the
--     message stays; its holder learns it from queue_renew and ends it (queue_cancel_held) or not;
--   'unknown': no live message.
-- A message of a dead-letter queue (a queue that some queue names as its dead_letter_queue) is never cancelled nor
-- flagged: the call is refused (invalid_argument) and the dead letter stays, whoever calls (dead letters are the
-- evidence of failures: an admin removes one with queue_remove or hands it back with queue_redrive). A schedule's
-- occurrence (a p_key ending in @<UTC time>) is refused too, whoever calls: its end advances the schedule, and a
-- producer (who holds this routine) must not move a chain; an admin removes an occurrence with queue_remove.
-- Steps: a plain read of the unique key, then by id either the request (one UPDATE re-checking that the same
-- reservation is still live) or the removal (re-checking, under the message's lock, that its token is still the one
-- read and it is no live reservation; with the history and result rows, in a transaction of its own in autocommit
-- mode); a step that finds the message changed reads it again, by id with a locking read (a reserve that took it
-- meanwhile: 'requested'; gone: 'unknown').
-- Locks: the message row (a grouped one's removal: its group row first), the history, schedule and result rows, for
-- one statement or the call's own transaction (or until the caller's transaction ends); in autocommit mode a deadlock
-- victim runs again.
DROP PROCEDURE IF EXISTS queue_cancel //
CREATE PROCEDURE queue_cancel(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_outcome VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE v_attempts, v_retry, v_found, v_done INT;
    DECLARE v_history, v_results BOOLEAN;
    DECLARE v_id, v_hist BIGINT;
    DECLARE v_at, v_now DATETIME(6);
    DECLARE v_own, v_tries, v_txn, v_rounds INT DEFAULT 0;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_message_key(in_queue, in_key, in_kind, TRUE);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    IF v_key LIKE '%@____-__-__T__:__:__Z' THEN
        CALL pyqueue__raise('invalid_argument', 'p_key ending in @<UTC time> is a schedule''s occurrence: it is not cancelled; an admin removes it with queue_remove');
    END IF;
    IF EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.dead_letter_queue = v_queue) THEN
        CALL pyqueue__raise('invalid_argument',
                            'a message of a dead-letter queue is not cancelled; an admin removes it with queue_remove');
    END IF;
    SELECT q.history_retention IS NOT NULL, q.result_retention IS NOT NULL INTO v_history, v_results
      FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    CALL pyqueue__own_transaction(TRUE, v_own);
    rounds: WHILE v_outcome IS NULL DO
        SET v_rounds = v_rounds + 1, v_found = 1, v_done = 0, v_now = UTC_TIMESTAMP(6);
        IF v_rounds > 100 THEN  -- (never seen: each round follows a change another call made)
            CALL pyqueue__raise('invalid_argument', 'the message changed 100 times while it was being cancelled');
        END IF;
        BEGIN
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
            IF v_rounds = 1 THEN
                SELECT m.id, m.group_key, m.reserve_token, m.scheduled_at INTO v_id, v_group, v_token, v_at
                  FROM pyqueue_message m
                 WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind;
            ELSE
                -- it changed under the last step: read as it is now (a locking read sees the latest version, also in
                -- a REPEATABLE READ transaction whose snapshot is older than the change)
                SELECT m.group_key, m.reserve_token, m.scheduled_at INTO v_group, v_token, v_at
                  FROM pyqueue_message m FORCE INDEX (PRIMARY)
                 WHERE m.id = v_id AND m.queue_name = v_queue
                   FOR UPDATE;
            END IF;
        END;
        IF v_found = 0 THEN
            SET v_outcome = 'unknown';
        ELSEIF v_token IS NOT NULL AND v_at > v_now THEN
            -- a live reservation: the request, on the same reservation only
            UPDATE pyqueue_message FORCE INDEX (PRIMARY) SET cancel_requested_at = v_now
             WHERE id = v_id AND reserve_token = v_token AND scheduled_at > v_now AND cancel_requested_at IS NULL;
            IF ROW_COUNT() = 1
               OR EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (PRIMARY)
                           WHERE m.id = v_id AND m.reserve_token = v_token AND m.scheduled_at > v_now
                             AND m.cancel_requested_at IS NOT NULL) THEN
                SET v_outcome = 'requested';
            END IF;
        ELSEIF v_group IS NOT NULL THEN
            CALL pyqueue__group_leave('cancel', v_queue, v_group, v_id, v_key, v_kind, v_token, NULL, NULL, v_now,
                                      v_own, v_done);
            IF v_done = 1 THEN SET v_outcome = 'cancelled'; END IF;
        ELSE
            SET v_tries = 0;
            REPEAT
                SET v_retry = 0, v_tries = v_tries + 1, v_hist = NULL, v_done = 0, v_found = 1;
                BEGIN
                    DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF; RESIGNAL; END;
                    IF v_own = 1 AND (v_history OR v_results OR v_key LIKE '%@____-__-__T__:__:__Z') THEN
                        START TRANSACTION;
                        SET v_txn = 1;
                    END IF;
                    IF v_results THEN  -- what the result row copies, read under the message's lock
                        BEGIN
                            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
                            SELECT m.attempts, m.last_error, m.progress INTO v_attempts, v_error, v_progress
                              FROM pyqueue_message m FORCE INDEX (PRIMARY)
                             WHERE m.id = v_id AND m.reserve_token <=> v_token
                               AND (m.reserve_token IS NULL OR m.scheduled_at <= v_now)
                               FOR UPDATE;
                        END;
                    END IF;
                    IF v_found = 1 THEN
                        IF v_history THEN
                            CALL pyqueue__archive(v_queue, v_id, v_token, 'cancelled', NULL, v_now, v_hist);
                        END IF;
                        DELETE m FROM pyqueue_message m FORCE INDEX (PRIMARY)
                         WHERE m.id = v_id AND m.queue_name = v_queue AND m.reserve_token <=> v_token
                           AND (m.reserve_token IS NULL OR m.scheduled_at <= v_now);
                        SET v_done = ROW_COUNT();
                        CALL pyqueue__unarchive(v_hist, v_done);
                        IF v_done = 1 AND v_key LIKE '%@____-__-__T__:__:__Z' THEN
                            -- a schedule's occurrence: the next one, as after a commit
                            CALL pyqueue__schedule_next(v_queue, v_key, v_kind);
                        END IF;
                        IF v_done = 1 AND v_results THEN  -- and the messages that wait for it are cancelled
                            CALL pyqueue__result_put(v_queue, v_key, v_kind, 'cancelled', NULL, v_error, v_attempts,
                                                     v_progress, v_now, FALSE, 'was cancelled');
                        END IF;
                    END IF;
                    IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
                END;
            UNTIL v_retry = 0 END REPEAT;
            IF v_done = 1 THEN SET v_outcome = 'cancelled'; END IF;
        END IF;
    END WHILE;
    SELECT v_outcome AS outcome;
END //

-- queue_renew: queue_extend (the same checks, the same renewal of a limit slot), and whether a cancel was requested
-- for the message (queue_cancel). Result: one row, token (NULL when in_token no longer holds) and cancel_requested
-- (0 or 1; 0 when the token no longer holds). Steps and locks: pyqueue__extend, then a plain read of the message by id
-- and its new token.
DROP PROCEDURE IF EXISTS queue_renew //
CREATE PROCEDURE queue_renew(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_id BIGINT;
    DECLARE v_requested INT DEFAULT 0;
    CALL pyqueue__check_clock();
    CALL pyqueue__extend(in_queue, in_key, in_kind, in_token, in_timeout, v_token, v_id);
    IF v_token IS NOT NULL THEN
        SELECT COUNT(*) INTO v_requested
          FROM pyqueue_message m FORCE INDEX (PRIMARY)
         WHERE m.id = v_id AND m.reserve_token = v_token AND m.cancel_requested_at IS NOT NULL;
    END IF;
    SELECT v_token AS token, v_requested AS cancel_requested;
END //

-- queue_cancel_held: the holder ends its reservation as cancelled, whether or not a cancel was requested (a handler
-- may cancel itself): the message is removed as by queue_commit (its group's next message moves up, a schedule's
-- occurrence advances its schedule), history outcome 'cancelled', and on a queue that keeps results the outcome
-- 'cancelled' with its last_error, attempts and progress. Result: one row, cancelled = 1, or 0 when the token no
-- longer holds (nothing written). Steps and locks: pyqueue__finish_held.
DROP PROCEDURE IF EXISTS queue_cancel_held //
CREATE PROCEDURE queue_cancel_held(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_done INT;
    CALL pyqueue__check_clock();
    CALL pyqueue__finish_held(in_queue, in_key, in_kind, in_token, 'cancelled', NULL, v_done);
    SELECT v_done AS cancelled;
END //

-- queue_set_progress: stores in_progress (JSON text of at most 65536 bytes; NULL or the JSON value null clears it, as
-- SQL NULL) on the reservation in_token holds, without changing its token or its lease. Result: one row, updated = 1,
-- or 0 when the token no longer holds (nothing written). The progress stays across rollback, fail, snooze and extend
-- (it goes only with the message), and is copied into the message's result row. Steps: locate by key and token
-- (plain read), one UPDATE by id and token (when it changed no row, a locking read of the token). Locks: the message
-- row, for one statement (or until the caller's transaction ends).
DROP PROCEDURE IF EXISTS queue_set_progress //
CREATE PROCEDURE queue_set_progress(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_progress LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_id BIGINT;
    DECLARE v_done INT DEFAULT 0;
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    IF in_progress IS NOT NULL THEN
        IF NOT JSON_VALID(in_progress) THEN
            CALL pyqueue__raise('invalid_argument',
                                'progress is not valid JSON (MariaDB also refuses JSON nested 32 levels deep)');
        END IF;
        IF LOCATE(X'ED', CAST(in_progress AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'progress', in_progress); END IF;
        IF LENGTH(in_progress) > 65536 THEN
            CALL pyqueue__raise('invalid_argument', CONCAT('progress is ', LENGTH(in_progress), ' bytes, more than 65536 bytes'));
        END IF;
        IF JSON_TYPE(in_progress) <> 'NULL' THEN SET v_progress = in_progress; END IF;
    END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    SELECT COALESCE(MAX(m.id), 0) INTO v_id
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind AND m.reserve_token = v_held;
    IF v_id > 0 THEN
        UPDATE pyqueue_message FORCE INDEX (PRIMARY) SET progress = v_progress WHERE id = v_id AND reserve_token = v_held;
        SET v_done = ROW_COUNT();
        IF v_done = 0 THEN  -- the same progress again changes no row: still held? (a locking read: the row as
                            -- it is now, not a caller's snapshot older than a takeover, which still shows the token)
            SELECT COUNT(*) INTO v_done FROM pyqueue_message m FORCE INDEX (PRIMARY)
             WHERE m.id = v_id AND m.reserve_token = v_held
              LOCK IN SHARE MODE;
        END IF;
    END IF;
    SELECT v_done AS updated;
END //

-- pyqueue__check_results_filter: queue_results' and queue_purge_results' checks of their filter, in this order:
-- in_state NULL or 'succeeded', 'failed' or 'cancelled'; in_n NULL or 1 to in_max. Raises invalid_argument. Reads no
-- table.
DROP PROCEDURE IF EXISTS pyqueue__check_results_filter //
CREATE PROCEDURE pyqueue__check_results_filter(
    IN in_state LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n     BIGINT,
    IN in_max   BIGINT)
SQL SECURITY INVOKER
BEGIN
    IF in_state IS NOT NULL AND in_state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('state must be succeeded, failed or cancelled (NULL: any), not ', LEFT(in_state, 40)));
    END IF;
    IF in_n < 1 OR in_n > in_max THEN
        CALL pyqueue__raise('invalid_argument', CONCAT('n must be 1 to ', in_max, ', not ', in_n));
    END IF;
END //

-- queue_results: the stored outcomes of in_queue's finished messages, newest first (finished_at descending, then
-- p_key, p_kind), a page of in_n (NULL = 100, 1 to 1000) rows: p_key, p_kind, state, result, last_error, attempts,
-- progress, finished_at. in_kind (NULL: every kind) and in_state ('succeeded', 'failed' or 'cancelled'; NULL: every
-- state) filter; in_before (NULL: now) keeps the outcomes that finished strictly before it. The next page: in_before =
-- the last row's finished_at. So that a page never cuts through outcomes of one instant (a batch commit writes them
-- all with one finished_at), the rows that finished at the same moment as the n-th come with it (a page may then hold
-- more than in_n). Live messages are not listed (queue_result reads one). Raises unknown_queue, invalid_argument.
-- Reads the (queue_name, finished_at) index without locks, two plain reads (the n-th row's time, then the page).
DROP PROCEDURE IF EXISTS queue_results //
CREATE PROCEDURE queue_results(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_state  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n      BIGINT,
    IN in_before DATETIME(6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_skip BIGINT;
    DECLARE v_cut DATETIME(6);
    CALL pyqueue__check_queue(in_queue);
    IF in_kind IS NOT NULL THEN CALL pyqueue__check_name('p_kind', in_kind, 128); END IF;
    CALL pyqueue__check_results_filter(in_state, in_n, 1000);
    SET v_queue = in_queue, v_kind = in_kind, v_state = in_state, v_skip = COALESCE(in_n, 100) - 1;
    -- the n-th row's time: the page is every row from there up (NULL: fewer rows than n, all of them)
    SELECT r.finished_at INTO v_cut
      FROM pyqueue_result r FORCE INDEX (pyqueue_result_queue_time_idx)
     WHERE r.queue_name = v_queue
       AND (v_kind IS NULL OR r.p_kind = v_kind)
       AND (v_state IS NULL OR r.state = v_state)
       AND (in_before IS NULL OR r.finished_at < in_before)
     ORDER BY r.finished_at DESC
     LIMIT v_skip, 1;
    SELECT r.p_key, r.p_kind, r.state, r.result, r.last_error, r.attempts, r.progress, r.finished_at
      FROM pyqueue_result r FORCE INDEX (pyqueue_result_queue_time_idx)
     WHERE r.queue_name = v_queue
       AND (v_kind IS NULL OR r.p_kind = v_kind)
       AND (v_state IS NULL OR r.state = v_state)
       AND (in_before IS NULL OR r.finished_at < in_before)
       AND (v_cut IS NULL OR r.finished_at >= v_cut)
     ORDER BY r.finished_at DESC, r.p_key, r.p_kind;
END //

-- queue_purge_results: deletes up to in_n (NULL = 10000; 1 to 100000) of in_queue's stored outcomes that finished
-- strictly before in_before (NULL: now), of one state when in_state is given ('succeeded', 'failed' or 'cancelled';
-- NULL: any), oldest first, whatever the queue's result retention. One row: deleted, how many: fewer than in_n when no
-- more are left (call it again until then). Live messages are untouched. Raises unknown_queue, invalid_argument.
-- Locks: the rows it deletes (and the index gaps it reads, as any DELETE), for its one statement.
DROP PROCEDURE IF EXISTS queue_purge_results //
CREATE PROCEDURE queue_purge_results(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_state  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_before DATETIME(6),
    IN in_n      BIGINT)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_before DATETIME(6);
    DECLARE v_n BIGINT DEFAULT COALESCE(in_n, 10000);
    CALL pyqueue__check_clock();
    SET v_before = COALESCE(in_before, UTC_TIMESTAMP(6));
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_results_filter(in_state, in_n, 100000);
    SET v_queue = in_queue, v_state = in_state;
    DELETE FROM pyqueue_result
     WHERE queue_name = v_queue
       AND (v_state IS NULL OR state = v_state)
       AND finished_at < v_before
     ORDER BY finished_at
     LIMIT v_n;
    SELECT ROW_COUNT() AS deleted;
END //

-- pyqueue__pop_results: queue_pop's outcomes of the messages it took (in_rows, its JSON array of {"id", "t", ...}),
-- before they go, on a queue that keeps results: 'succeeded' each. Locks: the result rows it writes.
DROP PROCEDURE IF EXISTS pyqueue__pop_results //
CREATE PROCEDURE pyqueue__pop_results(
    IN in_rows LONGTEXT CHARACTER SET utf8mb4,
    IN in_now  DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts, progress,
                                finished_at)
    SELECT m.queue_name, m.p_key, m.p_kind, 'succeeded', NULL, NULL, m.attempts, m.progress, in_now
      FROM JSON_TABLE(in_rows, '$[*]' COLUMNS (
               c_id    BIGINT   PATH '$.id',
               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t')) AS j
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
     WHERE m.reserve_token = j.c_token
    ON DUPLICATE KEY UPDATE state = VALUES(state), result = VALUES(result), last_error = VALUES(last_error),
                            attempts = VALUES(attempts), progress = VALUES(progress),
                            finished_at = VALUES(finished_at);
END //

DELIMITER ;
