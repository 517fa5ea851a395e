-- ==== workers ====
-- The worker registry: register, heartbeat, deregister, list, and hand back the reservations of workers that stopped
-- heartbeating.

DELIMITER //

-- queue_worker_register: records a worker. Result: one row (worker_id, secret): secret, a random token
-- (pyqueue__random_token) that heartbeat and deregister need. The worker reserves as CONCAT(in_name, '#', worker_id).
-- in_queues: NULL or a JSON array of at most 1000 queue names. Locks: the new row.
DROP PROCEDURE IF EXISTS queue_worker_register //
CREATE PROCEDURE queue_worker_register(
    IN in_name   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_host   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_pid    DECIMAL(65,30),
    IN in_queues LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_name('name', in_name, 200);
    IF CHAR_LENGTH(in_host) > 255 THEN CALL pyqueue__raise('invalid_argument', 'host is longer than 255 characters'); END IF;
    IF LOCATE(X'ED', CAST(in_host AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'host', in_host); END IF;
    IF LOCATE(X'ED', CAST(in_queues AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'queues', in_queues); END IF;
    CALL pyqueue__check_int('pid', in_pid, 0, 2147483647);
    IF in_queues IS NOT NULL AND (NOT JSON_VALID(in_queues) OR JSON_TYPE(in_queues) <> 'ARRAY') THEN
        CALL pyqueue__raise('invalid_argument', 'queues must be NULL or a JSON array of names');
    END IF;
    IF JSON_LENGTH(in_queues) > 1000 THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('queues names ', JSON_LENGTH(in_queues), ' queues; a worker registers at most 1000'));
    END IF;
    -- every element a queue name: a string, not empty, no trailing space, at most 128
    IF in_queues IS NOT NULL AND EXISTS (
           SELECT 1 FROM JSON_TABLE(in_queues, '$[*]' COLUMNS (elem JSON PATH '$')) AS q
            WHERE (JSON_TYPE(q.elem) = 'STRING') IS NOT TRUE
               OR JSON_UNQUOTE(q.elem) = '' OR JSON_UNQUOTE(q.elem) LIKE '% '
               OR CHAR_LENGTH(JSON_UNQUOTE(q.elem)) > 128) THEN
        CALL pyqueue__raise('invalid_argument', 'queues must be NULL or a JSON array of names');
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__random_token(v_secret);
    INSERT INTO pyqueue_worker (worker_name, host, pid, queues, started_at, heartbeat_at, secret)
    VALUES (in_name, in_host, in_pid, in_queues, v_now, v_now, v_secret);
    SELECT LAST_INSERT_ID() AS worker_id, v_secret AS secret;
END //

-- pyqueue__worker_secret: the checks of a worker's id and secret (queue_worker_heartbeat, queue_worker_deregister):
-- both given, the id a whole number from 1; out_secret the secret to compare, NULL unless 36 characters long (only a
-- 36-character value can match; a longer one would be cut to 36 by the CHAR(36)). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__worker_secret //
CREATE PROCEDURE pyqueue__worker_secret(
    IN  in_worker_id DECIMAL(65,30),
    IN  in_secret    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_secret   CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    IF in_worker_id IS NULL THEN CALL pyqueue__raise('invalid_argument', 'worker_id must not be NULL'); END IF;
    CALL pyqueue__check_int('worker_id', in_worker_id, 1, 9223372036854775807);
    IF in_secret IS NULL THEN CALL pyqueue__raise('invalid_argument', 'secret must not be NULL'); END IF;
    SET out_secret = IF(CHAR_LENGTH(in_secret) = 36, in_secret, NULL);
END //

-- queue_worker_heartbeat: heartbeat_at = now, when in_secret is the registration's secret. Result: one row, alive =
-- 1, or 0 when the worker is not registered (deregistered, or released as dead: it should register again) or the
-- secret does not match. Locks: the worker row, for one statement.
DROP PROCEDURE IF EXISTS queue_worker_heartbeat //
CREATE PROCEDURE queue_worker_heartbeat(
    IN in_worker_id DECIMAL(65,30),
    IN in_secret    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_clock();
    CALL pyqueue__worker_secret(in_worker_id, in_secret, v_secret);
    UPDATE pyqueue_worker SET heartbeat_at = UTC_TIMESTAMP(6)
     WHERE worker_id = in_worker_id AND secret = v_secret;
    -- look the row up: a second heartbeat in the same microsecond changes no row
    SELECT COUNT(*) AS alive FROM pyqueue_worker WHERE worker_id = in_worker_id AND secret = v_secret;
END //

-- queue_worker_deregister: removes the worker (its reservations stay as they are), when in_secret is the
-- registration's secret. Result: one row, deregistered = 1, or 0 when it was not registered or the secret does not
-- match. Locks: the worker row, for one statement.
DROP PROCEDURE IF EXISTS queue_worker_deregister //
CREATE PROCEDURE queue_worker_deregister(
    IN in_worker_id DECIMAL(65,30),
    IN in_secret    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__worker_secret(in_worker_id, in_secret, v_secret);
    DELETE FROM pyqueue_worker WHERE worker_id = in_worker_id AND secret = v_secret;
    SELECT ROW_COUNT() AS deregistered;
END //

-- queue_release_dead_workers: workers whose heartbeat is older than in_older_than_s are removed and their live
-- reservations become ready now (token cleared, attempts kept, as after an expiry). Result: one row, released. Per
-- stale worker: its messages one by one (a plain read, then an UPDATE by id re-checking the token), then its row if
-- still stale; interrupted, the next call finds the rest. Reads every reserved message: a maintenance call.
-- in_older_than_s is at least 30 (refused below it): a worker heartbeats every 10 s (lease/3 at the default lease of
-- 30 s), so a shorter silence is no sign that it is dead, and a caller (a consumer holds this routine) could take a
-- live worker's messages between two heartbeats.
DROP PROCEDURE IF EXISTS queue_release_dead_workers //
CREATE PROCEDURE queue_release_dead_workers(IN in_older_than_s DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_now, v_before DATETIME(6);
    DECLARE v_tags, v_ids LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_id BIGINT;
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_count, v_done INT DEFAULT 0;
    DECLARE c_held CURSOR FOR
        SELECT m.id, m.reserve_token
          FROM pyqueue_message m
         WHERE m.reserve_token IS NOT NULL AND m.scheduled_at > v_now
           AND JSON_CONTAINS(v_tags, JSON_QUOTE(m.reserved_by));
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    CALL pyqueue__check_clock();
    IF in_older_than_s IS NULL THEN CALL pyqueue__raise('invalid_argument', 'older_than must not be NULL'); END IF;
    CALL pyqueue__check_duration('older_than', in_older_than_s, TRUE);
    IF in_older_than_s < 30 THEN
        CALL pyqueue__raise('invalid_argument', 'older_than must be at least 30 seconds: a worker heartbeats every 10 s (lease/3 at the default lease), so a shorter silence does not make it dead');
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    SET v_before = v_now - INTERVAL CAST(in_older_than_s * 1000000 AS SIGNED) MICROSECOND;
    /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(CONCAT(w.worker_name, '#', w.worker_id)), JSON_ARRAYAGG(w.worker_id)
      INTO v_tags, v_ids
      FROM pyqueue_worker w
     WHERE w.heartbeat_at < v_before;
    IF v_tags IS NOT NULL THEN
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
        DELETE FROM pyqueue_worker
         WHERE heartbeat_at < v_before
           AND worker_id IN (SELECT j.id FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j);
    END IF;
    SELECT v_count AS released;
END //

-- queue_workers: the registered workers, oldest first: worker_id, worker_name, host, pid, queues (JSON), started_at,
-- heartbeat_at, heartbeat_age_s, reserve_as. Plain read.
DROP PROCEDURE IF EXISTS queue_workers //
CREATE PROCEDURE queue_workers()
SQL SECURITY DEFINER
BEGIN
    DECLARE v_now DATETIME(6);
    CALL pyqueue__check_clock();
    SET v_now = UTC_TIMESTAMP(6);
    SELECT w.worker_id, w.worker_name, w.host, w.pid, w.queues, w.started_at, w.heartbeat_at,
           TIMESTAMPDIFF(MICROSECOND, w.heartbeat_at, v_now) / 1e6 AS heartbeat_age_s,
           CONCAT(w.worker_name, '#', w.worker_id) AS reserve_as
      FROM pyqueue_worker w
     ORDER BY w.worker_id;
END //

DELIMITER ;
