-- ==== fast paths ====
-- Two steps of the consume cycle in one call: commit the previous reservation and reserve the next, or commit many
-- reservations at once. The semantics of the routines they stand for, in fewer round trips.

DELIMITER //

-- pyqueue__commit_held: queue_commit's general way for the message in_id that in_token holds, outside any group: its
-- history row (in_history), a recurring occurrence's next one, the DELETE, and on a queue that keeps results
-- (in_state not NULL) its outcome in_state with in_result; out_done = 1, or 0 when the token no longer held it (then no
-- history or result row stays); with the outcome (pyqueue__result_put), the messages that wait for it
-- (pyqueue__deps_left: in_ok, it succeeded; else it was cancelled). in_state 'cancelled' (queue_cancel_held) archives as 'cancelled'. For
-- queue_commit_reserve, queue_commit_result and queue_cancel_held. A recurring occurrence's next one is pushed only
-- while a locking read finds in_token holding it (a stale call pushes nothing). Locks: the message row (an
-- occurrence's or, with in_state, any, read first), the schedule row of a recurring occurrence, the result row.
DROP PROCEDURE IF EXISTS pyqueue__commit_held //
CREATE PROCEDURE pyqueue__commit_held(
    IN  in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id      BIGINT,
    IN  in_key     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_token   CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_history BOOLEAN,
    IN  in_state   VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_result  LONGTEXT CHARACTER SET utf8mb4,
    IN  in_ok      BOOLEAN,
    OUT out_done   INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_hist BIGINT;
    DECLARE v_attempts INT;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    IF in_state IS NOT NULL THEN  -- what the result row copies, read under the message's lock
        SELECT m.attempts, m.last_error, m.progress INTO v_attempts, v_error, v_progress
          FROM pyqueue_message m FORCE INDEX (PRIMARY)
         WHERE m.id = in_id AND m.reserve_token = in_token
           FOR UPDATE;
    ELSEIF in_key LIKE '%@____-__-__T__:__:__Z' THEN  -- a recurring occurrence: whether the token holds it, locked
        SELECT m.attempts INTO v_attempts FROM pyqueue_message m FORCE INDEX (PRIMARY)
         WHERE m.id = in_id AND m.reserve_token = in_token FOR UPDATE;
    END IF;
    IF in_history THEN
        CALL pyqueue__archive(in_queue, in_id, in_token, IF(in_state = 'cancelled', 'cancelled', 'committed'), NULL,
                              UTC_TIMESTAMP(6), v_hist);
    END IF;
    -- a recurring occurrence's next one only while the token holds it, as read under the message's lock above (a
    -- reserver that took an expired reservation over since the caller's read made this call stale: it pushes nothing)
    IF v_attempts IS NOT NULL AND in_key LIKE '%@____-__-__T__:__:__Z' THEN
        CALL pyqueue__schedule_next(in_queue, in_key, in_kind);
    END IF;
    DELETE FROM pyqueue_message WHERE id = in_id AND reserve_token = in_token;
    SET out_done = ROW_COUNT();
    IF v_hist IS NOT NULL THEN CALL pyqueue__unarchive(v_hist, out_done); END IF;  -- (a nested CALL costs)
    IF out_done = 1 AND in_state IS NOT NULL THEN  -- and the messages that wait for it (in_ok: it succeeded; else it
                                                  -- was cancelled)
        CALL pyqueue__result_put(in_queue, in_key, in_kind, in_state, in_result, v_error, v_attempts, v_progress,
                                 UTC_TIMESTAMP(6), in_ok, 'was cancelled');
    END IF;
END //

-- pyqueue__commit_batch_results_args: pyqueue__commit_batch_args's checks of in_results (given): a JSON array of in_n
-- elements, in_queue keeps results, valid UTF-8, no element longer than in_max_payload bytes. Locks nothing.
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_results_args //
CREATE PROCEDURE pyqueue__commit_batch_results_args(
    IN in_queue       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_results     LONGTEXT CHARACTER SET utf8mb4,
    IN in_n           INT,
    IN in_max_payload BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_bytes BIGINT;
    IF NOT JSON_VALID(in_results) OR JSON_TYPE(in_results) <> 'ARRAY' THEN
        CALL pyqueue__raise('invalid_argument', 'results must be a JSON array');
    END IF;
    IF JSON_LENGTH(in_results) <> in_n THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds, tokens and results must have the same length');
    END IF;
    CALL pyqueue__check_result(in_queue, NULL);  -- the queue keeps results
    IF LOCATE(X'ED', CAST(in_results AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'results', in_results); END IF;
    IF LENGTH(in_results) > in_max_payload THEN  -- (else no element can be longer)
        SELECT MAX(LENGTH(r.elem)) INTO v_bytes
          FROM JSON_TABLE(in_results, '$[*]' COLUMNS (elem JSON PATH '$')) AS r;
        CALL pyqueue__check_result_size(v_bytes, in_max_payload);
    END IF;
END //

-- pyqueue__commit_batch_bad: pyqueue__commit_batch_args's element-by-element check of the keys (unless
-- in_plain_keys) and the tokens (unless in_plain_tokens), arrays of in_n: io_bad becomes the least of itself and the
-- first bad element's position (in_n + 1: none). Reads no table.
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_bad //
CREATE PROCEDURE pyqueue__commit_batch_bad(
    IN    in_keys         LONGTEXT CHARACTER SET utf8mb4,
    IN    in_tokens       LONGTEXT CHARACTER SET utf8mb4,
    IN    in_plain_keys   BOOLEAN,
    IN    in_plain_tokens BOOLEAN,
    IN    in_n            INT,
    INOUT io_bad          BIGINT)
SQL SECURITY INVOKER
BEGIN
    IF in_plain_keys IS NOT TRUE THEN
        SELECT LEAST(io_bad, COALESCE(MIN(k.ord), in_n + 1)) INTO io_bad
          FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS k
         WHERE (    JSON_TYPE(k.elem) = 'STRING'
                AND CHAR_LENGTH(JSON_UNQUOTE(k.elem)) BETWEEN 1 AND 255
                AND NOT (JSON_UNQUOTE(k.elem) LIKE '% ')) IS NOT TRUE;
    END IF;
    IF in_plain_tokens IS NOT TRUE THEN
        SELECT LEAST(io_bad, COALESCE(MIN(t.ord), in_n + 1)) INTO io_bad
          FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS t
         WHERE (    JSON_TYPE(t.elem) = 'STRING'
                AND JSON_UNQUOTE(t.elem)
                    REGEXP '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\\z'
               ) IS NOT TRUE;
    END IF;
END //

-- pyqueue__commit_batch_args: pyqueue__commit_batch's checks (see there), which lock nothing: out_queue and its
-- settings (out_history: it keeps history; out_results: results are kept, in_results given or not), out_n the batch's
-- length; out_one_kind: every element of in_kinds is out_kind; out_occs: how many keys may be a schedule's
-- occurrence (0: none; else a count that may be high).
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_args //
CREATE PROCEDURE pyqueue__commit_batch_args(
    IN  in_queue     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_keys      LONGTEXT CHARACTER SET utf8mb4,
    IN  in_kinds     LONGTEXT CHARACTER SET utf8mb4,
    IN  in_tokens    LONGTEXT CHARACTER SET utf8mb4,
    IN  in_results   LONGTEXT CHARACTER SET utf8mb4,
    OUT out_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_n        INT,
    OUT out_history  BOOLEAN,
    OUT out_results  BOOLEAN,
    OUT out_one_kind BOOLEAN,
    OUT out_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_occs     INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_n INT;
    DECLARE v_history, v_results BOOLEAN;
    DECLARE v_max_payload BIGINT;
    DECLARE v_bad BIGINT;
    DECLARE v_occs INT DEFAULT 0;
    DECLARE v_one_kind, v_plain_keys, v_plain_tokens BOOLEAN;
    DECLARE v_kind LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;  -- (any length: read before the check)
    DECLARE v_quoted LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_queue_found INT DEFAULT 0;
    -- a plainly valid queue name: its settings in one read (pyqueue__queue checks the name and raises for an
    -- unknown queue: the same read, one nested CALL and one statement more)
    IF (CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
        AND LOCATE(X'ED', CAST(in_queue AS BINARY)) = 0) IS TRUE THEN
        SET v_queue = in_queue;
        SELECT COUNT(*), MAX(q.history_retention) IS NOT NULL, MAX(q.result_retention) IS NOT NULL, MAX(q.max_payload)
          INTO v_queue_found, v_history, v_results, v_max_payload
          FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    END IF;
    IF v_queue_found = 0 THEN
        CALL pyqueue__check_queue(in_queue);
        SET v_queue = in_queue;
        SELECT q.history_retention IS NOT NULL, q.result_retention IS NOT NULL, q.max_payload
          INTO v_history, v_results, v_max_payload
          FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    END IF;
    IF in_keys IS NULL OR in_kinds IS NULL OR in_tokens IS NULL THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds and tokens must not be NULL');
    END IF;
    IF NOT (JSON_VALID(in_keys) AND JSON_VALID(in_kinds) AND JSON_VALID(in_tokens))  -- (OR stops at the first true)
       OR JSON_TYPE(in_keys) <> 'ARRAY' OR JSON_TYPE(in_kinds) <> 'ARRAY' OR JSON_TYPE(in_tokens) <> 'ARRAY' THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds and tokens must be JSON arrays of strings');
    END IF;
    SET v_n = JSON_LENGTH(in_keys);
    IF JSON_LENGTH(in_kinds) <> v_n OR JSON_LENGTH(in_tokens) <> v_n THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds and tokens must have the same length');
    END IF;
    IF v_n > 10000 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT('a batch takes at most 10000 messages, this one has ', v_n,
                                                       ' (split it)'));
    END IF;
    IF in_results IS NOT NULL THEN
        CALL pyqueue__commit_batch_results_args(v_queue, in_results, v_n, v_max_payload);
        SET v_results = TRUE;
    END IF;
    IF v_n > 0 THEN
        -- Each array checked on its own (no join needed): the first bad element of any of the three. The keys
        -- and the tokens are first matched whole, by one regular expression each: JSON strings of the shape
        -- allowed, written plainly (no escape). Only an array that does not match so is read element by element
        -- (a regular expression per token was most of this check), to find the bad one, or none (a key with an
        -- escape, say). The kinds are read once: the check, and whether the batch has one kind only (its DELETE
        -- below then joins one array less). The common batch, one kind written plainly, is told without reading
        -- the array element by element: the array is, byte for byte, its first element quoted v_n times (as a
        -- client's encoder writes it, with or without a space after each comma).
        SET v_one_kind = FALSE;
        IF JSON_TYPE(JSON_EXTRACT(in_kinds, '$[0]')) = 'STRING' THEN
            SET v_kind = JSON_UNQUOTE(JSON_EXTRACT(in_kinds, '$[0]'));
            IF (CHAR_LENGTH(v_kind) BETWEEN 1 AND 128 AND NOT (v_kind LIKE '% ')) IS TRUE THEN
                SET v_quoted = JSON_QUOTE(v_kind);
                IF LENGTH(in_kinds) = 1 + v_n * (LENGTH(v_quoted) + 1) THEN  -- (the length first: no long string built)
                    SET v_one_kind = CAST(in_kinds AS BINARY)
                                     = CAST(CONCAT('[', REPEAT(CONCAT(v_quoted, ','), v_n - 1), v_quoted, ']') AS BINARY);
                ELSEIF LENGTH(in_kinds) = v_n * (LENGTH(v_quoted) + 2) THEN
                    SET v_one_kind = CAST(in_kinds AS BINARY)
                                     = CAST(CONCAT('[', REPEAT(CONCAT(v_quoted, ', '), v_n - 1), v_quoted, ']') AS BINARY);
                END IF;
            END IF;
        END IF;
        IF v_one_kind THEN
            SET v_bad = v_n + 1;
        ELSE
            SELECT COALESCE(MIN(IF((    JSON_TYPE(d.elem) = 'STRING'
                                    AND CHAR_LENGTH(JSON_UNQUOTE(d.elem)) BETWEEN 1 AND 128
                                    AND NOT (JSON_UNQUOTE(d.elem) LIKE '% ')) IS NOT TRUE, d.ord, NULL)), v_n + 1),
                   -- (the kinds as text only through JSON_UNQUOTE: a typed column would meet a bad element first)
                   MIN(JSON_UNQUOTE(d.elem) COLLATE utf8mb4_bin) = MAX(JSON_UNQUOTE(d.elem) COLLATE utf8mb4_bin),
                   MIN(JSON_UNQUOTE(d.elem) COLLATE utf8mb4_bin)
              INTO v_bad, v_one_kind, v_kind
              FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS d;
        END IF;
        -- (up to 1000 elements: MySQL 8.0's ICU engine stops a match at regexp_time_limit with an error, where
        -- MariaDB's PCRE has no such limit; a longer batch is checked element by element on both)
        SET v_plain_keys = FALSE, v_plain_tokens = FALSE;
        IF v_n <= 1000 THEN  -- (an IF, not an AND, whose operands may all be evaluated)
            SET v_plain_keys = in_keys REGEXP
                    '^\\[[[:space:]]*"[^"\\\\]{0,254}[^"\\\\ ]"(?:[[:space:]]*,[[:space:]]*"[^"\\\\]{0,254}[^"\\\\ ]")*+[[:space:]]*\\]\\z',
                v_plain_tokens = in_tokens REGEXP CONCAT(
                    '^\\[[[:space:]]*"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"',
                    '(?:[[:space:]]*,[[:space:]]*"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")*+',
                    '[[:space:]]*\\]\\z');
        END IF;
        IF v_plain_keys IS NOT TRUE OR v_plain_tokens IS NOT TRUE THEN  -- (element by element: a long or unusual batch)
            CALL pyqueue__commit_batch_bad(in_keys, in_tokens, v_plain_keys, v_plain_tokens, v_n, v_bad);
        END IF;
        IF v_bad <= v_n THEN
            CALL pyqueue__raise('invalid_argument',
                                CONCAT('element ', v_bad, ' of the batch: bad p_key/p_kind or malformed token'));
        END IF;
        -- Occurrences of a schedule: keys written plainly hold none unless the document has that shape somewhere
        -- (a key's characters cannot hold a quote there; the match ignores case, as in_keys's collation does: it
        -- may only send more batches to the count)
        SET v_occs = 1;  -- (not known yet)
        IF v_plain_keys THEN
            IF NOT (in_keys REGEXP '@[^"]{4}-[^"]{2}-[^"]{2}T[^"]{2}:[^"]{2}:[^"]{2}Z"') THEN SET v_occs = 0; END IF;
        END IF;
        IF v_occs <> 0 THEN
            SELECT COUNT(*) INTO v_occs FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (
                       k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
             WHERE k.k LIKE '%@____-__-__T__:__:__Z';
        END IF;
    END IF;
    SET out_queue = v_queue, out_n = v_n, out_history = v_history, out_results = v_results,
        out_one_kind = v_one_kind, out_kind = v_kind, out_occs = v_occs;
END //

-- pyqueue__commit_batch_plain: pyqueue__commit_batch's step on a queue without history or results, for a batch without
-- a schedule's occurrences: the rows not in a FIFO group that the arrays name and whose tokens still hold are deleted
-- (out_done: how many), in one statement, the arrays joined (one array less when in_one_kind: all of kind in_kind).
-- Locks: the deleted rows, for one statement.
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_plain //
CREATE PROCEDURE pyqueue__commit_batch_plain(
    IN  in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_keys     LONGTEXT CHARACTER SET utf8mb4,
    IN  in_kinds    LONGTEXT CHARACTER SET utf8mb4,
    IN  in_tokens   LONGTEXT CHARACTER SET utf8mb4,
    IN  in_one_kind BOOLEAN,
    IN  in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_done    INT)
SQL SECURITY INVOKER
BEGIN
    -- No history, no results, no schedule: one DELETE joined to the arrays, re-checking each token under its lock
    IF in_one_kind THEN
        DELETE m
          FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (
                   ord FOR ORDINALITY, k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
          STRAIGHT_JOIN (SELECT j.ord, LOWER(j.t) AS t FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (
                    ord FOR ORDINALITY, t CHAR(36) CHARACTER SET ascii PATH '$')) AS j
                 LIMIT 18446744073709551615) AS t ON t.ord = k.ord
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
            ON m.queue_name = in_queue AND m.p_key = k.k COLLATE utf8mb4_bin AND m.p_kind = in_kind
           AND m.reserve_token = CONVERT(t.t USING utf8mb4) COLLATE utf8mb4_bin
           AND m.group_key IS NULL;
        SET out_done = ROW_COUNT();
    ELSE
        DELETE m
          FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (
                   ord FOR ORDINALITY, k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
          STRAIGHT_JOIN (SELECT j.ord, UNHEX(MD5(j.kd)) AS h FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (
                    ord FOR ORDINALITY, kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS j
                 LIMIT 18446744073709551615) AS d ON d.ord = k.ord
          STRAIGHT_JOIN (SELECT j.ord, LOWER(j.t) AS t FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (
                    ord FOR ORDINALITY, t CHAR(36) CHARACTER SET ascii PATH '$')) AS j
                 LIMIT 18446744073709551615) AS t ON t.ord = k.ord
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
            ON m.queue_name = in_queue AND m.p_key = k.k COLLATE utf8mb4_bin
           AND UNHEX(MD5(m.p_kind)) = d.h
           AND m.reserve_token = CONVERT(t.t USING utf8mb4) COLLATE utf8mb4_bin
           AND m.group_key IS NULL;
        SET out_done = ROW_COUNT();
    END IF;
END //

-- pyqueue__commit_batch_locate: the rows the arrays name whose tokens still hold, read in one statement: out_ids, those
-- not in a FIFO group (out_found of them, out_occs of which a schedule's occurrence) as [id, token, is an occurrence
-- (1 or 0), element number]; out_grouped (NULL: none), the others, as [id, p_key, p_kind, token, group_key, result]
-- (result: element i of in_results, or NULL), read again by id and token as found only when there are any. in_gcl:
-- the session's group_concat_max_len, put back. Locks nothing.
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_locate //
CREATE PROCEDURE pyqueue__commit_batch_locate(
    IN  in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_keys     LONGTEXT CHARACTER SET utf8mb4,
    IN  in_kinds    LONGTEXT CHARACTER SET utf8mb4,
    IN  in_tokens   LONGTEXT CHARACTER SET utf8mb4,
    IN  in_results  LONGTEXT CHARACTER SET utf8mb4,
    IN  in_gcl      BIGINT,
    OUT out_found   INT,
    OUT out_ids     LONGTEXT CHARACTER SET utf8mb4,
    OUT out_occs    INT,
    OUT out_grouped LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_all INT;
    DECLARE v_grouped LONGTEXT CHARACTER SET utf8mb4;
    SET SESSION group_concat_max_len = GREATEST(in_gcl, @@max_allowed_packet), out_grouped = NULL;
    -- [id, token, is a schedule's occurrence, element number], written by CONCAT (a token holds hex digits and dashes
    -- only), and the grouped ones' [id, token, element number]: GROUP_CONCAT keeps its arguments in a temporary table,
    -- which for a JSON_ARRAY (a LONGTEXT) is a table on disk, a file created and removed each call. Kinds and tokens
    -- joined on ord through narrow materialised derived tables (a kind as its MD5).
    SELECT COALESCE(SUM(m.group_key IS NULL), 0), COUNT(*),
           CONCAT('[', GROUP_CONCAT(IF(m.group_key IS NULL,
                                       CONCAT('[', m.id, ',"', m.reserve_token, '",',
                                              IF(m.p_key LIKE '%@____-__-__T__:__:__Z', 1, 0), ',', k.ord, ']'),
                                       NULL)
                                    SEPARATOR ','), ']'),
           SUM(m.group_key IS NULL AND m.p_key LIKE '%@____-__-__T__:__:__Z'),
           CONCAT('[', GROUP_CONCAT(IF(m.group_key IS NULL, NULL, CONCAT('[', m.id, ',"', m.reserve_token, '",', k.ord, ']'))
                                    SEPARATOR ','), ']')
      INTO out_found, v_all, out_ids, out_occs, v_grouped
      FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (
               ord FOR ORDINALITY, k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
      STRAIGHT_JOIN (SELECT j.ord, UNHEX(MD5(j.kd)) AS h FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (
                ord FOR ORDINALITY, kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS j
             LIMIT 18446744073709551615) AS d ON d.ord = k.ord
      STRAIGHT_JOIN (SELECT j.ord, LOWER(j.t) AS t FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (
                ord FOR ORDINALITY, t CHAR(36) CHARACTER SET ascii PATH '$')) AS j
             LIMIT 18446744073709551615) AS t ON t.ord = k.ord
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
        ON m.queue_name = in_queue AND m.p_key = k.k COLLATE utf8mb4_bin
       AND UNHEX(MD5(m.p_kind)) = d.h
       AND m.reserve_token = CONVERT(t.t USING utf8mb4) COLLATE utf8mb4_bin;
    IF v_all > out_found THEN  -- messages of FIFO groups, by id and token as found: [id, p_key, p_kind, token, group_key, result]
        SELECT CONCAT('[', GROUP_CONCAT(JSON_ARRAY(m.id, m.p_key, m.p_kind, m.reserve_token, m.group_key,
                                                   IF(in_results IS NULL, NULL,
                                                      JSON_EXTRACT(in_results, CONCAT('$[', g.ord - 1, ']'))))
                                        SEPARATOR ','), ']')
          INTO out_grouped
          FROM JSON_TABLE(v_grouped, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                   c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]', ord BIGINT PATH '$[2]')) AS g
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = g.c_id
         WHERE m.reserve_token = g.c_token;
    END IF;
    SET SESSION group_concat_max_len = in_gcl;
END //

-- pyqueue__commit_batch_held: pyqueue__commit_batch's step on a queue with history or results, or for a batch with a
-- schedule's occurrences: of the in_found rows in_ids (as pyqueue__commit_batch_locate's out_ids; in_occs of them
-- occurrences) the ones still held are locked (with history or results), their outcomes 'succeeded' recorded
-- (in_keep_results; in_results: element i the result of reservation i), archived (in_history), the occurrences
-- scheduled (as queue_commit: each while a locking read finds its token holding it), the rows deleted by id re-checking each token (out_done: how many) and, with results,
-- the messages that wait for them told. The caller owns the transaction and runs it again on a deadlock. in_gcl: the
-- session's group_concat_max_len, put back. Locks: as pyqueue__commit_batch.
DROP PROCEDURE IF EXISTS pyqueue__commit_batch_held //
CREATE PROCEDURE pyqueue__commit_batch_held(
    IN  in_queue        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_ids          LONGTEXT CHARACTER SET utf8mb4,
    IN  in_found        INT,
    IN  in_occs         INT,
    IN  in_results      LONGTEXT CHARACTER SET utf8mb4,
    IN  in_history      BOOLEAN,
    IN  in_keep_results BOOLEAN,
    IN  in_now          DATETIME(6),
    IN  in_gcl          BIGINT,
    OUT out_done        INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_i, v_held INT DEFAULT 0;
    DECLARE v_nocc INT DEFAULT in_occs;
    DECLARE v_deps LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    IF in_history OR in_keep_results THEN
        -- the rows still held, locked before they are archived: no other call removes one in between
        SELECT COUNT(*) INTO v_i
          FROM JSON_TABLE(in_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                   c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
         WHERE m.reserve_token = c.c_token
           FOR UPDATE;
        SET v_i = 0;
    END IF;
    IF in_keep_results AND REPLACE(REPLACE(REPLACE(COALESCE(in_results, '[]'), 'null', ''), ',', ''), ' ', '') = '[]' THEN
        -- their outcomes, every result null (a valid array of nothing else: handlers that return nothing): no join
        INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                    progress, finished_at)
        SELECT m.queue_name, m.p_key, m.p_kind, 'succeeded', NULL, NULL, m.attempts, m.progress, in_now
          FROM JSON_TABLE(in_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                   c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
         WHERE m.queue_name = in_queue AND m.reserve_token = c.c_token
        ON DUPLICATE KEY UPDATE state = VALUES(state), result = VALUES(result),
                                last_error = VALUES(last_error), attempts = VALUES(attempts),
                                progress = VALUES(progress), finished_at = VALUES(finished_at);
    ELSEIF in_keep_results THEN
        -- their outcomes; each result joined by element number through a materialised derived table (its JSON
        -- column makes it a table on disk: a file created and removed each call)
        INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                    progress, finished_at)
        SELECT m.queue_name, m.p_key, m.p_kind, 'succeeded',
               IF(r.elem IS NULL OR JSON_TYPE(r.elem) = 'NULL', NULL, r.elem),
               NULL, m.attempts, m.progress, in_now
          FROM JSON_TABLE(in_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                   c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                   c_ord BIGINT PATH '$[3]')) AS c
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
          LEFT JOIN (SELECT j.ord, j.elem FROM JSON_TABLE(COALESCE(in_results, '[]'), '$[*]' COLUMNS (
                         ord FOR ORDINALITY, elem JSON PATH '$')) AS j
                     LIMIT 18446744073709551615) AS r ON r.ord = c.c_ord
         WHERE m.queue_name = in_queue AND m.reserve_token = c.c_token
        ON DUPLICATE KEY UPDATE state = VALUES(state), result = VALUES(result),
                                last_error = VALUES(last_error), attempts = VALUES(attempts),
                                progress = VALUES(progress), finished_at = VALUES(finished_at);
    END IF;
    IF in_history THEN
        INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                     created_at, processed_at, outcome, to_queue, reserved_by, last_error, headers)
        SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
               m.created_at, in_now, 'committed', NULL, m.reserved_by, m.last_error, m.headers
          FROM JSON_TABLE(in_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                   c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
         WHERE m.queue_name = in_queue AND m.reserve_token = c.c_token;
        SET v_i = 0;
    END IF;
    -- occurrences of a schedule (one per schedule at most): as queue_commit
    WHILE v_nocc > 0 AND v_i < in_found DO
        IF JSON_EXTRACT(in_ids, CONCAT('$[', v_i, '][2]')) = 1 THEN
            -- the next one only while the token holds it, read under the message's lock (the read that found it
            -- took none: a reserver that took an expired reservation over since made it stale; it pushes nothing)
            SELECT COUNT(*), MAX(m.p_key), MAX(m.p_kind) INTO v_held, v_key, v_kind FROM pyqueue_message m FORCE INDEX (PRIMARY)
             WHERE m.id = JSON_EXTRACT(in_ids, CONCAT('$[', v_i, '][0]'))
               AND m.reserve_token = JSON_UNQUOTE(JSON_EXTRACT(in_ids, CONCAT('$[', v_i, '][1]')))
               FOR UPDATE;
            IF v_held = 1 THEN CALL pyqueue__schedule_next(in_queue, v_key, v_kind); END IF;
            SET v_nocc = v_nocc - 1;
        END IF;
        SET v_i = v_i + 1;
    END WHILE;
    IF in_keep_results THEN
        -- the messages deleted below that others wait for (a parent's queue keeps results): one locking probe of
        -- pyqueue_dependency per message, counted; the list (a JSON GROUP_CONCAT, its buffer a table on disk) only
        -- when one has parents or children. The rows are locked: the DELETE removes each one read here.
        SELECT COUNT(*) INTO v_held
          FROM JSON_TABLE(in_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                   c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
          STRAIGHT_JOIN pyqueue_dependency d ON d.queue_name = in_queue AND d.p_key = m.p_key AND d.p_kind = m.p_kind
         WHERE m.reserve_token = c.c_token
          LOCK IN SHARE MODE;
        IF v_held > 0 THEN
            SET SESSION group_concat_max_len = GREATEST(in_gcl, @@max_allowed_packet);
            SELECT CONCAT('[', GROUP_CONCAT(DISTINCT JSON_ARRAY(d.p_key, d.p_kind) SEPARATOR ','), ']')
              INTO v_deps
              FROM JSON_TABLE(in_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                       c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
              STRAIGHT_JOIN pyqueue_dependency d ON d.queue_name = in_queue AND d.p_key = m.p_key AND d.p_kind = m.p_kind
             WHERE m.reserve_token = c.c_token
              LOCK IN SHARE MODE;
            SET SESSION group_concat_max_len = in_gcl;
        END IF;
    END IF;
    DELETE m
      FROM JSON_TABLE(in_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
     WHERE m.reserve_token = c.c_token;
    SET out_done = ROW_COUNT();
    IF v_deps IS NOT NULL THEN CALL pyqueue__deps_left_many(in_queue, v_deps, TRUE, NULL); END IF;
END //

-- pyqueue__commit_batch: queue_commit_batch and queue_commit_result_batch: commits many reservations; in_keys, in_kinds,
-- in_tokens: JSON arrays of strings of one length (element i of each names one); in_results NULL, or a JSON array of
-- the same length (element i: the result of reservation i, any JSON; null: none). out_done = how many were deleted (a
-- token that no longer holds is skipped). Refuses, changing nothing, arrays that are NULL, not of strings, of
-- different lengths, or hold a bad key or kind or a malformed token (naming the first bad element); with in_results,
-- a queue that keeps no results and a result longer than the queue's max_payload. Set-based: each array parsed once
-- by JSON_TABLE; one read locates the rows; schedule occurrences one by one; one DELETE by id re-checks each token.
-- With history or results, the rows still held are locked first, then archived in one INSERT, their outcomes
-- 'succeeded' recorded in one INSERT, and deleted, in a transaction of its own in autocommit mode (run again on a
-- deadlock): a row another call removes meanwhile is never archived nor recorded. FIFO group messages go last, set-based
-- in one transaction, each group settled once (pyqueue__groups_leave, pyqueue__groups_commit).
-- Locks: the deleted rows, for one statement each step (with history or results: until the end of the transaction);
-- schedule rows of occurrences; group rows; result rows.
-- Steps: pyqueue__commit_batch_args (the checks), then pyqueue__commit_batch_plain or pyqueue__commit_batch_locate and
-- pyqueue__commit_batch_held (in the retried transaction), then pyqueue__groups_leave.
DROP PROCEDURE IF EXISTS pyqueue__commit_batch //
CREATE PROCEDURE pyqueue__commit_batch(
    IN  in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_keys    LONGTEXT CHARACTER SET utf8mb4,
    IN  in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN  in_tokens  LONGTEXT CHARACTER SET utf8mb4,
    IN  in_results LONGTEXT CHARACTER SET utf8mb4,
    OUT out_done   INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_n, v_gdone, v_retry, v_occs INT;
    DECLARE v_history, v_results, v_one_kind BOOLEAN;
    DECLARE v_gcl BIGINT;
    DECLARE v_ids, v_grouped, v_busy LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_found, v_done, v_own, v_tries INT DEFAULT 0;
    DECLARE v_now DATETIME(6);
    DECLARE v_kind LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SET SESSION group_concat_max_len = v_gcl; RESIGNAL; END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    CALL pyqueue__commit_batch_args(in_queue, in_keys, in_kinds, in_tokens, in_results,
                                    v_queue, v_n, v_history, v_results, v_one_kind, v_kind, v_occs);
    IF v_n > 0 THEN
        -- a queue with FIFO groups (a group row for each that has live messages, committed before any of them was
        -- reserved): its messages are located first, unlocked, so that their group rows are locked before them (the
        -- plain DELETE locks each row it reads, a grouped one too, before it finds it grouped)
        IF NOT v_history AND NOT v_results AND v_occs = 0
           AND NOT EXISTS (SELECT 1 FROM pyqueue_group g WHERE g.queue_name = v_queue) THEN
            CALL pyqueue__commit_batch_plain(v_queue, in_keys, in_kinds, in_tokens, v_one_kind, v_kind, v_done);
            IF v_done < v_n THEN
                -- the rest: messages of FIFO groups (or tokens that no longer hold)
                CALL pyqueue__commit_batch_locate(v_queue, in_keys, in_kinds, in_tokens, NULL, v_gcl,
                                                  v_found, v_ids, v_occs, v_grouped);
                SET v_found = 0;  -- (none outside a group: deleted just now)
            END IF;
        ELSE
            CALL pyqueue__commit_batch_locate(v_queue, in_keys, in_kinds, in_tokens, in_results, v_gcl,
                                              v_found, v_ids, v_occs, v_grouped);
        END IF;
    END IF;
    IF v_found > 0 THEN
        SET v_now = UTC_TIMESTAMP(6);
        IF v_history OR v_results THEN CALL pyqueue__own_transaction(TRUE, v_own); END IF;
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
                IF v_own = 1 THEN START TRANSACTION; END IF;
                CALL pyqueue__commit_batch_held(v_queue, v_ids, v_found, v_occs, in_results, v_history, v_results, v_now,
                                                v_gcl, v_done);
                IF v_own = 1 THEN COMMIT; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
    END IF;
    IF v_grouped IS NOT NULL THEN
        CALL pyqueue__own_transaction(TRUE, v_own);
        CALL pyqueue__groups_leave(IF(v_results, 'commit_result', 'commit'), v_queue, NULL, v_grouped,
                                   UTC_TIMESTAMP(6), v_own, v_gdone, v_busy);
        SET v_done = v_done + v_gdone;
    END IF;
    SET out_done = v_done;
END //

-- queue_commit_reserve: commits the previous reservation (in_key, in_kind, in_token; all NULL = none) and reserves up
-- to in_n more as queue_reserve, in one call. Result: the reserved rows (as queue_reserve's), then one row committed
-- = 1, 0 (token no longer held) or NULL (nothing given). Checks and the lookup first, then the reserve, then the
-- commit: a refused call changes nothing. The commit comes first for a grouped message (as queue_commit, so that the
-- next message of its group can be reserved by this call), for an expired reservation (the reserve would take it
-- again) and on the short way below (see there). One plain read finds the queue and the message to commit.
-- In autocommit mode (MariaDB: MySQL 8.0 cannot tell, and its callers open the transaction) the call is one
-- transaction of its own, so a client needs none around it: a deadlock fails it whole, with nothing done, and on a
-- queue with limits the call then runs again itself (up to 10 times, at READ COMMITTED, see below); one message of
-- priority 0 is claimed as queue_reserve's short way takes it (SKIP LOCKED, at READ COMMITTED).
-- Locks: as queue_reserve, and the committed row (before the reserve's when the commit comes first), until the
-- call's transaction ends.
DROP PROCEDURE IF EXISTS queue_commit_reserve //
CREATE PROCEDURE queue_commit_reserve(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6),
    IN in_n       DECIMAL(65,30),
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_maxres DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused, v_limited, v_history, v_results BOOLEAN;
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_id BIGINT;
    DECLARE v_done INT DEFAULT NULL;
    DECLARE v_own, v_mine, v_found, v_txn, v_claims, v_tries INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_commit   BOOLEAN DEFAULT NOT (in_key IS NULL AND in_kind IS NULL AND in_token IS NULL);
    DECLARE v_checked, v_above BOOLEAN;
    DECLARE v_short BOOLEAN DEFAULT FALSE;
    DECLARE v_expired, v_first BOOLEAN;
    DECLARE v_next BIGINT;
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_rated LONGTEXT CHARACTER SET utf8mb4;  -- (pyqueue__reserve_limited's pop claims: unused here)
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    CALL pyqueue__check_clock();
    IF (CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
        AND (NOT v_commit OR (CHAR_LENGTH(in_key) BETWEEN 1 AND 255 AND NOT (in_key LIKE '% ')
             AND CHAR_LENGTH(in_kind) BETWEEN 1 AND 128 AND NOT (in_kind LIKE '% ')
             AND in_token REGEXP '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\\z'))
        AND LOCATE(X'ED', CAST(CONCAT_WS('', in_queue, in_key, in_kind, in_worker) AS BINARY)) = 0
        AND in_kinds IS NULL AND COALESCE(in_n = TRUNCATE(in_n, 0) AND in_n BETWEEN 1 AND 2147483647, TRUE)
        AND COALESCE(in_timeout > 0 AND in_timeout <= 3155760000, TRUE) AND COALESCE(CHAR_LENGTH(in_worker), 0) <= 255
       ) IS NOT TRUE THEN  -- (plainly valid: nothing to check; the queue is looked up below)
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
        IF v_commit THEN CALL pyqueue__check_reservation(in_key, in_kind, in_token); END IF;
        CALL pyqueue__reserve_args(in_worker, in_timeout, in_n, in_kinds, v_kinds);
        SET v_checked = TRUE;
    END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token), v_done = IF(v_commit, 0, NULL);
    -- settings, limits, history, whether any message lies above priority 0 (as queue_reserve) and the message to
    -- commit: ONE plain read
    SELECT COUNT(*), MAX(q.visibility_timeout), MAX(q.max_attempts), MAX(q.dead_letter_queue), MAX(q.paused),
           EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue)
           OR EXISTS (SELECT 1 FROM pyqueue_rate r WHERE r.queue_name = v_queue), MAX(q.history_retention) IS NOT NULL,
           COALESCE(MAX(m.id), 0), MAX(m.group_key), MAX(m.scheduled_at) <= UTC_TIMESTAMP(6),
           EXISTS (SELECT 1 FROM pyqueue_message p FORCE INDEX (pyqueue_message_order_idx)
                    WHERE p.queue_name = v_queue AND p.priority > 0),
           MAX(q.max_reservation), MAX(q.result_retention) IS NOT NULL
      INTO v_found, v_vis, v_max, v_dlq, v_paused, v_limited, v_history, v_id, v_group, v_expired, v_above, v_maxres,
           v_results
      FROM pyqueue_queue q LEFT JOIN pyqueue_message m ON v_commit AND m.queue_name = q.queue_name AND m.p_key = v_key
                                                     AND m.p_kind = v_kind AND m.reserve_token = v_held
     WHERE q.queue_name = v_queue;
    IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    IF in_timeout > v_maxres THEN CALL pyqueue__check_reservation_cap(in_timeout, v_maxres); END IF;
    -- In autocommit mode (MariaDB; on MySQL 8.0 the client opens it) the call is one transaction of its own: the
    -- commit's archiving and removal and the reserve's claims stand or fall together. When one message of priority 0
    -- can go the short way below, at READ COMMITTED: its SKIP LOCKED read then locks only the row it returns (at
    -- REPEATABLE READ, racing calls that skipped every ready row locked the entry past them, where claims insert, and
    -- deadlocked each other).
    /*M!100300 IF @@SESSION.in_transaction = 0 AND @@SESSION.autocommit = 1 THEN
        SET v_short = v_checked IS NULL AND COALESCE(in_n, 1) = 1 AND NOT v_paused AND NOT v_limited AND NOT v_above
                      AND v_group IS NULL;
        SET v_txn = 1;
    END IF; */
    -- The commit comes before the reserve (then it holds the committed row's lock before any lock of the reserve)
    -- when the reserve goes the short way in the call's own transaction: the SKIP LOCKED read that finds every
    -- ready row taken locks the first entry past them, the row of a message another call is about to commit, and
    -- racing calls that committed after it deadlocked; the order is invisible there, as the transaction stands or
    -- falls whole. Also when the reservation has expired: the reserve would take that message again (it is ready),
    -- and the commit then find its token gone. And on a queue with limits in the call's own transaction, which then
    -- runs at READ COMMITTED and takes the reserve's slots as queue_reserve's own transaction does (the limit rows
    -- shared, then each kind's slot rows in one statement, kinds waited for only in ascending order, so two calls
    -- never wait for each other's slot rows in opposite orders): at REPEATABLE READ the slot-taking UPDATE of a racing call read the holders'
    -- message rows with shared locks while holding slot rows, so the committed row (a slot's holder) deadlocked it
    -- in either order; at READ COMMITTED those reads take no lock. A deadlock left (with a call outside this path)
    -- rolls the call back whole and runs it again (up to 10 times), as queue_reserve's own transaction does; its
    -- rows are sent only at its end, once nothing of it can fail any more. Otherwise (inside
    -- the caller's transaction) after the reserve.
    SET v_first = COALESCE(v_commit AND v_id > 0 AND v_group IS NULL
                           AND (v_short OR v_expired OR (v_txn = 1 AND v_limited)), FALSE);
    -- the call runs again on a deadlock only in its own transaction on a queue with limits (its rows are sent at its
    -- end); elsewhere it may have sent rows (the short way), and a deadlock fails it whole (rolled back by the handler
    -- for SQLEXCEPTION)
    SET v_own = v_txn = 1 AND v_limited AND NOT v_paused;
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_claims = 0, v_done = IF(v_commit, 0, NULL);
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            IF v_txn = 1 THEN
                IF v_short OR v_limited THEN SET TRANSACTION ISOLATION LEVEL READ COMMITTED; END IF;
                START TRANSACTION;
            END IF;
            IF v_group IS NOT NULL THEN
                -- as queue_commit, BEFORE the reserve, so its group's next message can be reserved
                CALL pyqueue__own_transaction(TRUE, v_mine);
                CALL pyqueue__group_leave(IF(v_results, 'commit_result', 'commit'), v_queue, v_group, v_id, v_key,
                                          v_kind, v_held, NULL, NULL, UTC_TIMESTAMP(6), v_mine, v_done);
            ELSEIF v_first THEN
                CALL pyqueue__commit_held(v_queue, v_id, v_key, v_kind, v_held, v_history,
                                          IF(v_results, 'succeeded', NULL), NULL, TRUE, v_done);
            END IF;
            IF v_short THEN
                -- one message of priority 0 as queue_reserve's short way takes it, inside this call's transaction:
                -- the oldest ready one that no other call holds (SKIP LOCKED), claimed by id; anything else goes the
                -- general way
                CALL pyqueue__claim_short(v_queue, in_worker, in_timeout, v_vis, v_max, v_next, v_token);
                IF v_next IS NOT NULL THEN
                    SET v_claims = 1;
                    SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
                           m.attempts, m.created_at, m.scheduled_at_initially, m.headers
                      FROM pyqueue_message m FORCE INDEX (PRIMARY)
                     WHERE m.id = v_next AND m.reserve_token = v_token;
                END IF;
            END IF;
            IF v_claims = 0 THEN  -- (not handed out above)
                IF NOT v_paused AND v_limited THEN
                    CALL pyqueue__reserve_limited(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis,
                                                  v_max, v_dlq, v_txn = 1, NULL, v_rated, v_claims);
                ELSE
                    CALL pyqueue__reserve(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max,
                                          v_dlq, v_paused);
                END IF;
            END IF;
            IF v_commit AND v_group IS NULL AND v_id > 0 AND NOT v_first THEN
                CALL pyqueue__commit_held(v_queue, v_id, v_key, v_kind, v_held, v_history,
                                          IF(v_results, 'succeeded', NULL), NULL, TRUE, v_done);
            END IF;
            IF v_txn = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_done AS committed;
END //

-- queue_commit_batch: commits many reservations; in_keys, in_kinds, in_tokens: JSON arrays of strings of one length
-- (element i of each names one). Result: one row, committed = how many were deleted (a token that no longer holds is
-- skipped). Refuses, changing nothing, arrays that are NULL, not of strings, of different lengths, or hold a bad key
-- or kind or a malformed token (naming the first bad element). On a queue that keeps results, each outcome is
-- 'succeeded' (no result). Steps and locks: pyqueue__commit_batch.
DROP PROCEDURE IF EXISTS queue_commit_batch //
CREATE PROCEDURE queue_commit_batch(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_keys   LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds  LONGTEXT CHARACTER SET utf8mb4,
    IN in_tokens LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_done INT;
    CALL pyqueue__check_clock();
    CALL pyqueue__commit_batch(in_queue, in_keys, in_kinds, in_tokens, NULL, v_done);
    SELECT v_done AS committed;
END //

DELIMITER ;
