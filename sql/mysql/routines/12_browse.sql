-- ==== browse ====
-- Reads for browsing a queue and its throughput: queue_messages, queue_groups, queue_throughput; what holds back
-- cleanup: queue_horizon.

DELIMITER //

-- queue_messages: a page of in_queue's live messages in key order: in_state 'ready', 'delayed', 'reserved' (NULL =
-- all), in_key_prefix (NULL = any; character for character), after the cursor (in_after_key, in_after_kind; NULL for
-- the first page), at most in_n (NULL = 100, at most 1000). Rows: p_key, p_kind, state, priority, attempts,
-- scheduled_at, created_at, reserved_by, last_error, dead_from, headers (no payload). Plain read of the unique key from the
-- cursor, no locks.
DROP PROCEDURE IF EXISTS queue_messages //
CREATE PROCEDURE queue_messages(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_state      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key_prefix LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_after_key  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_after_kind LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n          DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_after_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_prefix, v_after_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_prefix_len, v_n INT;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    IF in_state IS NOT NULL AND (in_state NOT IN ('ready', 'delayed', 'reserved') OR in_state LIKE '% ') THEN
        CALL pyqueue__raise('invalid_argument', 'state must be ready, delayed, reserved or NULL (every state)');
    END IF;
    IF in_key_prefix IS NOT NULL AND (CHAR_LENGTH(in_key_prefix) = 0 OR CHAR_LENGTH(in_key_prefix) > 255) THEN
        CALL pyqueue__raise('invalid_argument', 'key_prefix must be 1 to 255 characters (NULL = any key)');
    END IF;
    IF in_key_prefix IS NOT NULL THEN CALL pyqueue__check_utf8('invalid_argument', 'key_prefix', in_key_prefix); END IF;
    IF (in_after_key IS NULL) <> (in_after_kind IS NULL) THEN
        CALL pyqueue__raise('invalid_argument', 'after_key and after_kind go together (both NULL for the first page)');
    END IF;
    IF in_after_key IS NOT NULL THEN
        CALL pyqueue__check_name('after_key', in_after_key, 255);
        CALL pyqueue__check_name('after_kind', in_after_kind, 128);
    END IF;
    IF in_n IS NOT NULL THEN CALL pyqueue__check_int('n', in_n, 1, 1000); END IF;
    SET v_queue = in_queue, v_state = in_state, v_prefix = in_key_prefix,
        v_prefix_len = CHAR_LENGTH(in_key_prefix), v_after_key = in_after_key,
        v_after_kind = in_after_kind, v_n = COALESCE(in_n, 100), v_now = UTC_TIMESTAMP(6);
    SELECT m.p_key, m.p_kind,
           CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                WHEN m.reserve_token IS NULL THEN 'delayed'
                ELSE 'reserved' END AS state,
           m.priority, m.attempts, m.scheduled_at, m.created_at, m.reserved_by, m.last_error, m.dead_from,
           m.headers
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue
       AND (v_after_key IS NULL OR m.p_key > v_after_key
            OR (m.p_key = v_after_key AND m.p_kind > v_after_kind))
       -- equal lengths: PAD SPACE cannot make 'ab' match the prefix 'ab '
       AND (v_prefix IS NULL
            OR (CHAR_LENGTH(m.p_key) >= v_prefix_len AND LEFT(m.p_key, v_prefix_len) = v_prefix))
       AND (v_state IS NULL
            OR v_state = CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                              WHEN m.reserve_token IS NULL THEN 'delayed'
                              ELSE 'reserved' END)
     ORDER BY m.p_key, m.p_kind
     LIMIT v_n;
END //

-- queue_groups: in_queue's non-empty FIFO groups by group_key, at most in_n (NULL = 100, 1 to 1000): rows (group_key,
-- head_key, head_kind, head_state, messages, group_limit, in_flight): group_limit, the k in effect (the group's own,
-- else the queue's default, else 1); in_flight, the group's messages not blocked (its heads: reserved, ready or
-- delayed). Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_groups //
CREATE PROCEDURE queue_groups(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN in_n DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_n INT;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    IF in_n IS NOT NULL THEN CALL pyqueue__check_int('n', in_n, 1, 1000); END IF;
    SET v_queue = in_queue, v_n = COALESCE(in_n, 100), v_now = UTC_TIMESTAMP(6);
    SELECT g.group_key, g.head_key, g.head_kind,
           CASE WHEN h.id IS NULL THEN NULL
                WHEN h.scheduled_at <= v_now THEN 'ready'
                WHEN h.reserve_token IS NULL THEN 'delayed'
                ELSE 'reserved' END AS head_state,
           (SELECT COUNT(*) FROM pyqueue_message x FORCE INDEX (pyqueue_message_group_idx)
             WHERE x.queue_name = g.queue_name AND x.group_key = g.group_key) AS messages,
           CAST(COALESCE((SELECT l.k FROM pyqueue_group_limit l
                           WHERE l.queue_name = g.queue_name AND l.group_key = g.group_key),
                         (SELECT l.k FROM pyqueue_group_limit l
                           WHERE l.queue_name = g.queue_name AND l.group_key = ''), 1) AS SIGNED) AS group_limit,
           (SELECT COUNT(*) FROM pyqueue_message x FORCE INDEX (pyqueue_message_group_idx)
             WHERE x.queue_name = g.queue_name AND x.group_key = g.group_key
               AND x.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999') AS in_flight
      FROM pyqueue_group g
      LEFT JOIN pyqueue_message h FORCE INDEX (pyqueue_message_key_uk)
        ON h.queue_name = g.queue_name AND h.p_key = g.head_key AND h.p_kind = g.head_kind
     WHERE g.queue_name = v_queue
     ORDER BY g.group_key
     LIMIT v_n;
END //

-- queue_throughput: messages that left in_queue (NULL = every queue) per minute since in_since (UTC; NULL = an hour
-- ago; at most a day), by outcome: rows (queue, minute, committed, dead_lettered, moved, popped), from
-- pyqueue_history for a queue with a history_retention; for one without that keeps results (a result_retention), from
-- pyqueue_result (committed: succeeded, dead_lettered: failed, moved and popped 0). Plain reads of those indexes, no locks.
DROP PROCEDURE IF EXISTS queue_throughput //
CREATE PROCEDURE queue_throughput(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_since DATETIME(6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now, v_since DATETIME(6);
    CALL pyqueue__check_clock();
    IF in_queue IS NOT NULL THEN CALL pyqueue__check_queue(in_queue); END IF;
    SET v_now = UTC_TIMESTAMP(6);
    IF in_since IS NOT NULL AND (in_since + INTERVAL 0 SECOND IS NULL OR in_since < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'since must be a valid time');
    END IF;
    IF in_since > v_now THEN CALL pyqueue__raise('invalid_argument', 'since must not be in the future'); END IF;
    IF in_since < v_now - INTERVAL 1 DAY THEN CALL pyqueue__raise('invalid_argument', 'since must be within the last day'); END IF;
    SET v_queue = in_queue, v_since = COALESCE(in_since, v_now - INTERVAL 1 HOUR);
    SELECT q.queue_name AS `queue`,
           CAST(DATE_FORMAT(h.processed_at, '%Y-%m-%d %H:%i:00') AS DATETIME(6)) AS `minute`,
           COUNT(CASE WHEN h.outcome = 'committed' THEN 1 END) AS committed,
           COUNT(CASE WHEN h.outcome = 'dead_lettered' THEN 1 END) AS dead_lettered,
           COUNT(CASE WHEN h.outcome = 'moved' THEN 1 END) AS moved,
           COUNT(CASE WHEN h.outcome = 'popped' THEN 1 END) AS popped
      FROM pyqueue_queue q
      JOIN pyqueue_history h ON h.queue_name = q.queue_name AND h.processed_at >= v_since
     WHERE (v_queue IS NULL OR q.queue_name = v_queue) AND NOT (q.history_retention IS NULL AND q.result_retention IS NOT NULL)
     GROUP BY q.queue_name, `minute`
    UNION ALL
    SELECT q.queue_name, CAST(DATE_FORMAT(r.finished_at, '%Y-%m-%d %H:%i:00') AS DATETIME(6)),
           COUNT(CASE WHEN r.state = 'succeeded' THEN 1 END), COUNT(CASE WHEN r.state = 'failed' THEN 1 END), 0, 0
      FROM pyqueue_queue q
      JOIN pyqueue_result r ON r.queue_name = q.queue_name AND r.finished_at >= v_since
     WHERE (v_queue IS NULL OR q.queue_name = v_queue) AND q.history_retention IS NULL AND q.result_retention IS NOT NULL
     GROUP BY q.queue_name, 2
    HAVING COUNT(CASE WHEN r.state IN ('succeeded', 'failed') THEN 1 END) > 0
     ORDER BY 1, 2;
END //

-- queue_horizon: what holds back InnoDB's purge on this server (no undo record, a consumed message's delete-marked
-- row included, can be purged while a transaction's read view might still need it), as one row: oldest_age_s (how
-- long the oldest open transaction has run, in seconds), backlog (the history list length: committed transactions'
-- undo logs not purged yet), and that transaction's holder 'transaction', pid (its connection id, what KILL takes),
-- user_name, state (the connection's command: Sleep is idle in its transaction), xact_start and query_start (UTC;
-- query_start NULL unless a statement runs). The caller's own connection is left out. No open transaction: NULLs
-- but backlog. SQL SECURITY DEFINER: reading INNODB_TRX and INNODB_METRICS needs the definer's PROCESS privilege.
-- Reads information_schema, no locks; no statement text is returned.
DROP PROCEDURE IF EXISTS queue_horizon //
CREATE PROCEDURE queue_horizon()
SQL SECURITY DEFINER
BEGIN
    DECLARE v_history BIGINT;
    CALL pyqueue__check_clock();
    SELECT MAX(m.`COUNT`) INTO v_history FROM information_schema.INNODB_METRICS m WHERE m.NAME = 'trx_rseg_history_len';
    SELECT TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)) / 1000000 AS oldest_age_s,
           v_history AS backlog,
           IF(t.trx_started IS NULL, NULL, 'transaction') AS holder,
           t.trx_mysql_thread_id AS pid,
           p.USER AS user_name,
           p.COMMAND AS state,
           UTC_TIMESTAMP(6) - INTERVAL TIMESTAMPDIFF(MICROSECOND, t.trx_started, NOW(6)) MICROSECOND AS xact_start,
           IF(p.COMMAND = 'Query', UTC_TIMESTAMP(6) - INTERVAL p.TIME SECOND, NULL) AS query_start
      FROM (SELECT 1 AS one) AS one
      LEFT JOIN (SELECT x.trx_started, x.trx_mysql_thread_id
                   FROM information_schema.INNODB_TRX x
                  WHERE x.trx_mysql_thread_id <> CONNECTION_ID()
                  ORDER BY x.trx_started, x.trx_mysql_thread_id
                  LIMIT 1) AS t ON TRUE
      LEFT JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id;
END //

DELIMITER ;
