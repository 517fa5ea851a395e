-- ==== ingest ====
-- Bulk enqueue with plain INSERTs into the table queue_ingest (Spark's df.write.jdbc), then queue_ingest_flush moves
-- the rows into the queues (no trigger: a row trigger costs MariaDB about 25 us per row).

DELIMITER //

-- pyqueue__ingest_reject: queue_ingest_flush's first step: the rows of queue_ingest up to in_max (of in_queue, NULL =
-- every queue) that fail queue_push's checks go to pyqueue_ingest_reject (rejected_at in_now) with their reason
-- 'pyqueue:<code>: ...', in ingest_id order, and leave queue_ingest; out_rejected: how many. Locks: those rows
-- (shared while read, then deleted), shared locks on the queue rows.
DROP PROCEDURE IF EXISTS pyqueue__ingest_reject //
CREATE PROCEDURE pyqueue__ingest_reject(
    IN  in_queue     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_max       BIGINT,
    IN  in_now       DATETIME(6),
    OUT out_rejected BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_mark BIGINT;
    DECLARE v_bad_text, v_bad_payload LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    SELECT COALESCE(MAX(r.id), 0) INTO v_mark FROM pyqueue_ingest_reject r;
    -- rows holding a UTF-16 surrogate (pyqueue__check_utf8), found by a plain read: inside the INSERT the
    -- round trip's warning (1977) would be an error; only rows holding the byte ED are converted
    /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(IF(CAST(CONVERT(CONVERT(CONCAT_WS('', i.queue_name, i.p_key, i.p_kind) USING utf16)
                                         USING utf8mb4) AS BINARY)
                            <> CAST(CONCAT_WS('', i.queue_name, i.p_key, i.p_kind) AS BINARY), i.ingest_id, NULL)),
           JSON_ARRAYAGG(IF(CAST(CONVERT(CONVERT(i.payload USING utf16) USING utf8mb4) AS BINARY)
                            <> CAST(i.payload AS BINARY), i.ingest_id, NULL))
      INTO v_bad_text, v_bad_payload
      FROM queue_ingest i
     WHERE i.ingest_id <= in_max AND (in_queue IS NULL OR i.queue_name = in_queue)
       AND (LOCATE(X'ED', CAST(CONCAT_WS('', i.queue_name, i.p_key, i.p_kind) AS BINARY)) > 0
            OR LOCATE(X'ED', CAST(i.payload AS BINARY)) > 0);
    INSERT INTO pyqueue_ingest_reject
           (ingest_id, queue_name, p_key, p_kind, payload, run_at, priority, reason, rejected_at)
    -- a zero date (inserted without NO_ZERO_DATE) cannot be copied in strict mode: NULL, and the reason says
    -- it
    SELECT i.ingest_id, i.queue_name, i.p_key, i.p_kind, i.payload,
           IF(CAST(i.run_at AS CHAR) LIKE '0000-%' OR CAST(i.run_at AS CHAR) LIKE '%-00%', NULL, i.run_at),
           i.priority,
           CASE WHEN i.queue_name IS NULL OR CHAR_LENGTH(i.queue_name) = 0
                 THEN 'pyqueue:invalid_argument: queue_name must not be NULL or empty'
            WHEN CHAR_LENGTH(i.queue_name) > 128
                 THEN 'pyqueue:invalid_argument: queue_name is longer than 128 characters'
            WHEN i.queue_name LIKE '% ' THEN 'pyqueue:invalid_argument: queue_name must not end with a space'
            WHEN i.p_key IS NULL OR CHAR_LENGTH(i.p_key) = 0
                 THEN 'pyqueue:invalid_argument: p_key must not be NULL or empty'
            WHEN CHAR_LENGTH(i.p_key) > 255 THEN 'pyqueue:invalid_argument: p_key is longer than 255 characters'
            WHEN i.p_key LIKE '% ' THEN 'pyqueue:invalid_argument: p_key must not end with a space'
            WHEN i.p_key LIKE '%@____-__-__T__:__:__Z'
                 THEN 'pyqueue:invalid_argument: p_key ending in @<UTC time> is reserved for schedules'
            WHEN i.p_kind IS NULL OR CHAR_LENGTH(i.p_kind) = 0
                 THEN 'pyqueue:invalid_argument: p_kind must not be NULL or empty'
            WHEN CHAR_LENGTH(i.p_kind) > 128 THEN 'pyqueue:invalid_argument: p_kind is longer than 128 characters'
            WHEN i.p_kind LIKE '% ' THEN 'pyqueue:invalid_argument: p_kind must not end with a space'
            WHEN JSON_CONTAINS(COALESCE(v_bad_text, '[]'), CAST(i.ingest_id AS CHAR))
                 THEN 'pyqueue:invalid_argument: queue_name, p_key or p_kind is not valid UTF-8 (a UTF-16 surrogate)'
            WHEN q.queue_name IS NULL
                 THEN CONCAT('pyqueue:unknown_queue: queue "', i.queue_name, '" does not exist')
            WHEN i.payload IS NULL
                 THEN 'pyqueue:invalid_payload: payload must not be NULL (use the JSON value null)'
            WHEN NOT JSON_VALID(i.payload) THEN 'pyqueue:invalid_payload: payload is not valid JSON'
            WHEN JSON_CONTAINS(COALESCE(v_bad_payload, '[]'), CAST(i.ingest_id AS CHAR))
                 THEN 'pyqueue:invalid_payload: payload is not valid UTF-8 (it holds a UTF-16 surrogate)'
            WHEN LENGTH(i.payload) > q.max_payload
                 THEN CONCAT('pyqueue:invalid_payload: payload is ', LENGTH(i.payload),
                             ' bytes, more than the queue''s max_payload of ', q.max_payload, ' bytes')
            WHEN CAST(i.run_at AS CHAR) < '1000-01-01' OR CAST(i.run_at AS CHAR) LIKE '%-00%'
                 THEN CONCAT('pyqueue:invalid_argument: run_at is not a valid time (', CAST(i.run_at AS CHAR), ')')
            WHEN i.run_at IS NOT NULL AND (i.run_at + INTERVAL 0 SECOND IS NULL OR i.run_at < '1000-01-01')
                 THEN 'pyqueue:invalid_argument: run_at is not a valid time'
            WHEN i.priority <> TRUNCATE(i.priority, 0) OR i.priority < -2147483648 OR i.priority > 2147483647
                 THEN 'pyqueue:invalid_argument: priority must be a whole number from -2147483648 to 2147483647'
       END AS rejected_for, in_now
      FROM queue_ingest i
      LEFT JOIN pyqueue_queue q ON q.queue_name = i.queue_name
     WHERE i.ingest_id <= in_max AND (in_queue IS NULL OR i.queue_name = in_queue)
    HAVING rejected_for IS NOT NULL  -- the reason above, computed once (HAVING: of the rows read)
     ORDER BY i.ingest_id
       LOCK IN SHARE MODE;
    SET out_rejected = ROW_COUNT();
    IF out_rejected > 0 THEN
        DELETE FROM queue_ingest
         WHERE ingest_id IN (SELECT r.ingest_id FROM pyqueue_ingest_reject r WHERE r.id > v_mark);
    END IF;
END //

-- pyqueue__ingest_dups: queue_ingest_flush's second step: the rows of queue_ingest up to in_max (of in_queue, NULL =
-- every queue) whose key a live message has go, found by a plain read and deleted by id a page at a time (see
-- there); out_dups: how many. Locks: the deleted rows.
DROP PROCEDURE IF EXISTS pyqueue__ingest_dups //
CREATE PROCEDURE pyqueue__ingest_dups(
    IN  in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_max   BIGINT,
    OUT out_dups BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_from, v_to BIGINT;
    DECLARE v_page, v_live INT;
    DECLARE v_ids LONGTEXT CHARACTER SET utf8mb4;
    SET out_dups = 0;
    -- duplicates of live messages go first (INSERT IGNORE meeting them is 5x slower), found by a plain read
    -- and deleted by id, a page at a time: a DELETE joined to pyqueue_message would hold shared locks on the
    -- key index's gaps where each absent key would go, so a push inserting there, holding the AUTO-INC lock
    -- this flush's INSERT below needs, deadlocked with it. A message the read misses (pushed since) is
    -- still skipped by INSERT IGNORE; one it still sees was live when this flush began. A page holds what
    -- JSON_ARRAYAGG can (MariaDB caps it at group_concat_max_len; under 44 bytes, one id at a time).
    -- (none to look for while the queue, or with in_queue NULL the table, holds no live message: the read
    -- below probes the key index once for every pending row, finding nothing; a message pushed since is
    -- skipped by INSERT IGNORE as above)
    SET v_from = 0,
        v_page = LEAST(20000, GREATEST(1, (@@SESSION.group_concat_max_len - 2) DIV 21));
    -- (plain SELECTs: a subquery of IF would be a locking read, deadlocking with a queue_drop)
    IF in_queue IS NOT NULL THEN
        SELECT COUNT(*) INTO v_live FROM (SELECT 1 FROM pyqueue_message m WHERE m.queue_name = in_queue LIMIT 1) AS x;
    ELSE
        SELECT COUNT(*) INTO v_live FROM (SELECT 1 FROM pyqueue_message m LIMIT 1) AS x;
    END IF;
    IF v_live = 0 THEN SET v_from = in_max; END IF;
    dups: LOOP
        SELECT MAX(d.ingest_id), IF(v_page = 1, NULL, JSON_ARRAYAGG(d.ingest_id)) INTO v_to, v_ids
          FROM (SELECT i.ingest_id
                  FROM queue_ingest i
                  JOIN pyqueue_message m
                    ON m.queue_name = i.queue_name AND m.p_key = i.p_key AND m.p_kind = i.p_kind
                 WHERE i.ingest_id > v_from AND i.ingest_id <= in_max
                   AND (in_queue IS NULL OR i.queue_name = in_queue)
                 ORDER BY i.ingest_id
                 LIMIT v_page) d;
        IF v_to IS NULL THEN LEAVE dups; END IF;
        IF v_ids IS NULL THEN
            DELETE FROM queue_ingest WHERE ingest_id = v_to;
        ELSE
            DELETE i FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS d
              JOIN queue_ingest i ON i.ingest_id = d.id;
        END IF;
        SET out_dups = out_dups + ROW_COUNT(), v_from = v_to;
    END LOOP;
END //

-- queue_ingest_flush: enqueues the rows plain INSERTs put into queue_ingest (Spark's df.write.jdbc) of in_queue (NULL =
-- every queue): each becomes a live message (dedup, the first wins; FIFO in insertion order); a bad row (queue_push's
-- checks) goes to pyqueue_ingest_reject with its reason 'pyqueue:<code>: ...'. Every row leaves queue_ingest. Result:
-- one row (enqueued, duplicates, rejected). Steps: reject bad rows (pyqueue__ingest_reject), delete duplicates of live
-- messages (pyqueue__ingest_dups; found by a plain read: no lock on pyqueue_message), one INSERT IGNORE ... SELECT of
-- the rest, delete them. Concurrency: appends
-- never wait. The flush takes the rows up to the highest ingest_id it sees, after a locking read that waits for appends
-- in flight below it; its INSERT ... SELECT reads them with locks, so it enqueues exactly the rows it deletes. Flushes
-- are serialised by rows of pyqueue_ingest_lock (a queue's row, and '' shared; '' alone for every queue). In autocommit
-- mode it runs in a transaction of its own; inside yours it is part of it. Where the server cannot tell (MySQL 8.0)
-- each step is its own statement, serialised also by the named lock 'pyqueue-sql ingest flush <database>' (up to
-- 300 s); an interruption there leaves rows to flush again.
-- Locks: the pyqueue_ingest_lock rows, the flushed rows, shared locks on queue rows, the new messages.
DROP PROCEDURE IF EXISTS queue_ingest_flush //
CREATE PROCEDURE queue_ingest_flush(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max_att, v_locked, v_own INT;
    DECLARE v_dlq, v_scope VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_max BIGINT;
    DECLARE v_pending, v_enqueued, v_rejected, v_deleted, v_dups BIGINT DEFAULT 0;
    DECLARE v_tries, v_retry INT DEFAULT 0;
    DECLARE v_lockname VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_lockname IS NOT NULL THEN DO RELEASE_LOCK(v_lockname); END IF; RESIGNAL; END;
    CALL pyqueue__check_clock();
    IF in_queue IS NOT NULL THEN
        CALL pyqueue__queue(in_queue, v_vis, v_max_att, v_dlq, v_paused);
        SET v_queue = in_queue;
    END IF;
    CALL pyqueue__own_transaction(NULL, v_own);
    IF v_own IS NULL THEN
        SET v_lockname = LEFT(CONCAT('pyqueue-sql ingest flush ', DATABASE()), 64);
        SET v_locked = GET_LOCK(v_lockname, 300);
        IF v_locked IS NULL OR v_locked <> 1 THEN
            SET v_lockname = NULL;
            CALL pyqueue__raise('invalid_argument', 'another queue_ingest_flush held the flush lock for 300 s');
        END IF;
    END IF;
    -- looked up first: INSERT IGNORE of an existing row takes a shared lock two flushes would both raise
    IF NOT EXISTS (SELECT 1 FROM pyqueue_ingest_lock l WHERE l.scope = '') THEN
        INSERT IGNORE INTO pyqueue_ingest_lock (scope) VALUES ('');
    END IF;
    IF v_queue IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pyqueue_ingest_lock l WHERE l.scope = v_queue) THEN
        INSERT IGNORE INTO pyqueue_ingest_lock (scope) VALUES (v_queue);
    END IF;
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1,
            v_pending = 0, v_enqueued = 0, v_rejected = 0, v_deleted = 0, v_dups = 0;
        BEGIN
        DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
        IF v_own = 1 THEN START TRANSACTION; END IF;
        IF v_queue IS NULL THEN
            SELECT l.scope INTO v_scope FROM pyqueue_ingest_lock l WHERE l.scope = '' FOR UPDATE;
        ELSE
            SELECT l.scope INTO v_scope FROM pyqueue_ingest_lock l WHERE l.scope = '' LOCK IN SHARE MODE;
            SELECT l.scope INTO v_scope FROM pyqueue_ingest_lock l WHERE l.scope = v_queue FOR UPDATE;
        END IF;
        SELECT MAX(i.ingest_id) INTO v_max FROM queue_ingest i;
        SELECT COUNT(*) INTO v_pending
          FROM queue_ingest i
         WHERE i.ingest_id <= v_max AND (v_queue IS NULL OR i.queue_name = v_queue)
           FOR UPDATE;
        SET v_now = UTC_TIMESTAMP(6);
        IF v_pending > 0 THEN
            CALL pyqueue__ingest_reject(v_queue, v_max, v_now, v_rejected);
            CALL pyqueue__ingest_dups(v_queue, v_max, v_dups);
            -- what is left passed every check: IGNORE skips only repeats and rows that went live meanwhile
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, ready_at,
                    scheduled_at_initially, created_at, attempts)
            SELECT i.queue_name, i.p_key, i.p_kind, i.payload, COALESCE(i.priority, 0),
                   COALESCE(i.run_at, v_now), COALESCE(i.run_at, v_now), COALESCE(i.run_at, v_now), v_now, 0
              FROM queue_ingest i
             WHERE i.ingest_id <= v_max AND (v_queue IS NULL OR i.queue_name = v_queue)
             ORDER BY i.ingest_id
               LOCK IN SHARE MODE;
            SET v_enqueued = ROW_COUNT();
            DELETE FROM queue_ingest WHERE ingest_id <= v_max AND (v_queue IS NULL OR queue_name = v_queue);
            SET v_deleted = ROW_COUNT() + v_rejected + v_dups;
        END IF;
        IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_lockname IS NOT NULL THEN DO RELEASE_LOCK(v_lockname); END IF;
    SELECT v_enqueued AS enqueued, GREATEST(v_deleted - v_enqueued - v_rejected, 0) AS duplicates,
           v_rejected AS rejected;
END //

DELIMITER ;
