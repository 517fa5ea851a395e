-- pyqueue-sql revision 0005_browse_and_throughput (mysql): the routines this revision added or
-- changed (and DROPs of those it removed), frozen from sql/mysql/routines.sql by
-- `make release-routines`. Released: never edit it. The routines at a revision are the
-- union of the routine files up to it, later ones overriding earlier ones
-- (pyqueue_sql.routine_sets); a downgrade re-creates the previous ones from them.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';
SET @pyqueue_saved_character_set_client = @@SESSION.character_set_client;
SET @pyqueue_saved_character_set_results = @@SESSION.character_set_results;
SET @pyqueue_saved_collation_connection = @@SESSION.collation_connection;
SET NAMES utf8mb4;

DELIMITER //

-- queue_messages: a page of in_queue's live messages in key order (p_key,
-- then p_kind), for browsing a queue without SQL: in_state 'ready',
-- 'delayed' or 'reserved' (as queue_stats counts them; NULL = all),
-- in_key_prefix (NULL = any key) keeps the keys that start with it (compared
-- character for character: a trailing space in it counts), and
-- (in_after_key, in_after_kind) is the paging cursor: the last row of the
-- previous page (both NULL for the first page). in_n rows at most (NULL =
-- 100, at most 1000). Rows: p_key, p_kind, state, priority, attempts,
-- scheduled_at, created_at, reserved_by, last_error, dead_from (in a
-- dead-letter queue: the queue it came from; no payload:
-- queue_message shows one message whole). Plain read of the unique key
-- (queue_name, p_key, p_kind) from the cursor on, no locks; a state or
-- prefix that few rows match costs a walk over the queue's rows after the
-- cursor until the page is full.
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
    DECLARE v_queue      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state      VARCHAR(16)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_prefix     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_prefix_len INT;
    DECLARE v_after_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_after_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_n          INT;
    DECLARE v_vis        DECIMAL(20,6);
    DECLARE v_max        INT;
    DECLARE v_dlq        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused     BOOLEAN;
    DECLARE v_now        DATETIME(6);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    IF in_state IS NOT NULL AND (in_state NOT IN ('ready', 'delayed', 'reserved') OR in_state LIKE '% ') THEN
        CALL pyqueue__raise('invalid_argument', 'state must be ready, delayed, reserved or NULL (every state)');
    END IF;
    IF in_key_prefix IS NOT NULL AND (CHAR_LENGTH(in_key_prefix) = 0 OR CHAR_LENGTH(in_key_prefix) > 255) THEN
        CALL pyqueue__raise('invalid_argument', 'key_prefix must be 1 to 255 characters (NULL = any key)');
    END IF;
    IF in_key_prefix IS NOT NULL THEN
        CALL pyqueue__check_utf8('invalid_argument', 'key_prefix', in_key_prefix);
    END IF;
    IF (in_after_key IS NULL) <> (in_after_kind IS NULL) THEN
        CALL pyqueue__raise('invalid_argument', 'after_key and after_kind go together (both NULL for the first page)');
    END IF;
    IF in_after_key IS NOT NULL THEN
        CALL pyqueue__check_name('after_key', in_after_key, 255);
        CALL pyqueue__check_name('after_kind', in_after_kind, 128);
    END IF;
    IF in_n IS NOT NULL THEN
        CALL pyqueue__check_int('n', in_n, 1, 1000);
    END IF;
    SET v_queue = in_queue, v_state = in_state, v_prefix = in_key_prefix,
        v_prefix_len = CHAR_LENGTH(in_key_prefix), v_after_key = in_after_key,
        v_after_kind = in_after_kind, v_n = COALESCE(in_n, 100), v_now = UTC_TIMESTAMP(6);
    SELECT m.p_key, m.p_kind,
           CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                WHEN m.reserve_token IS NULL THEN 'delayed'
                ELSE 'reserved' END AS state,
           m.priority, m.attempts, m.scheduled_at, m.created_at, m.reserved_by, m.last_error, m.dead_from
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

-- queue_throughput: how many messages left in_queue (every queue when NULL)
-- per minute since in_since (UTC; NULL = an hour ago; at most a day ago, not
-- in the future), by outcome: rows (queue, minute, committed,
-- dead_lettered, moved, popped), minutes without any left out, by queue and
-- minute. Counted from pyqueue_history, so only a queue with a
-- history_retention has any (queue_settings says which do): nothing is
-- counted on the commit path. Plain read, no locks: for one queue its
-- (queue_name, processed_at) index range since in_since; for every queue
-- (NULL) the server reads each queue's whole history (poll queue by queue).
DROP PROCEDURE IF EXISTS queue_throughput //
CREATE PROCEDURE queue_throughput(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_since DATETIME(6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now    DATETIME(6);
    DECLARE v_since  DATETIME(6);
    IF in_queue IS NOT NULL THEN
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    IF in_since IS NOT NULL AND (in_since + INTERVAL 0 SECOND IS NULL OR in_since < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'since must be a valid time');
    END IF;
    IF in_since > v_now THEN
        CALL pyqueue__raise('invalid_argument', 'since must not be in the future');
    END IF;
    IF in_since < v_now - INTERVAL 1 DAY THEN
        CALL pyqueue__raise('invalid_argument', 'since must be within the last day');
    END IF;
    SET v_queue = in_queue, v_since = COALESCE(in_since, v_now - INTERVAL 1 HOUR);
    SELECT q.queue_name AS `queue`,
           CAST(DATE_FORMAT(h.processed_at, '%Y-%m-%d %H:%i:00') AS DATETIME(6)) AS `minute`,
           COUNT(CASE WHEN h.outcome = 'committed' THEN 1 END) AS committed,
           COUNT(CASE WHEN h.outcome = 'dead_lettered' THEN 1 END) AS dead_lettered,
           COUNT(CASE WHEN h.outcome = 'moved' THEN 1 END) AS moved,
           COUNT(CASE WHEN h.outcome = 'popped' THEN 1 END) AS popped
      FROM pyqueue_queue q
      JOIN pyqueue_history h ON h.queue_name = q.queue_name AND h.processed_at >= v_since
     WHERE v_queue IS NULL OR q.queue_name = v_queue
     GROUP BY q.queue_name, `minute`
     ORDER BY q.queue_name, `minute`;
END //

DELIMITER ;

SET SESSION character_set_client = @pyqueue_saved_character_set_client;

SET SESSION character_set_results = @pyqueue_saved_character_set_results;

SET SESSION collation_connection = @pyqueue_saved_collation_connection;

SET SESSION sql_mode = @pyqueue_saved_sql_mode;
