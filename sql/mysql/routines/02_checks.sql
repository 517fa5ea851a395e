-- ==== checks ====
-- Internal helpers (pyqueue__*) are not part of the contract; each sits in the file of the topic that calls it. Here:
-- the checks and lookups that several topics call.

DELIMITER //

-- pyqueue__raise: signals 'pyqueue:<in_code>: <in_detail>' (cut to the 128 characters MESSAGE_TEXT allows). Takes no
-- locks.
DROP PROCEDURE IF EXISTS pyqueue__raise //
CREATE PROCEDURE pyqueue__raise(IN in_code VARCHAR(32) CHARACTER SET utf8mb4, IN in_detail TEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_text VARCHAR(128) CHARACTER SET utf8mb4;
    SET v_text = LEFT(CONCAT('pyqueue:', in_code, ': ', COALESCE(in_detail, '')), 128);
    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = v_text;
END //

-- pyqueue__check_clock: the first step of every contract procedure that reads the clock (UTC_TIMESTAMP(6), directly
-- or through a helper; of a push or publish and its *_with_headers sibling, of the body they share): refuses a session
-- whose clock is not the server's, then runs the call on the server's clock.
-- SET timestamp = <t>, which any account may run, moves NOW() and UTC_TIMESTAMP() in its session, inside SQL SECURITY
-- DEFINER procedures too, and with them every due time, lease, rate window and expiry they compute. SYSDATE(6) is the
-- server's clock, which no session setting moves; NOW(6) is the start of this statement (each statement of a
-- procedure reads the clock anew), microseconds before, unless the session set its timestamp: more than a second
-- apart is refused in one line (a second: a thread the scheduler holds back is not refused), and the SET that
-- follows puts the session back on the server's clock, so that a timestamp set within that second moves nothing
-- either (a caller's SET timestamp lasts until its next such call). (A server started with --sysdate-is-now makes
-- SYSDATE() NOW(): nothing is refused there, and the SET still holds.) Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_clock //
CREATE PROCEDURE pyqueue__check_clock()
SQL SECURITY INVOKER
BEGIN
    IF ABS(TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) > 1000000 THEN
        CALL pyqueue__raise('invalid_argument',
                            'the session clock is not the server clock (SET timestamp): run SET timestamp = DEFAULT');
    END IF;
    SET timestamp = DEFAULT;
END //

-- pyqueue__check_name: refuses a name that is NULL, empty, longer than in_max characters or ends with a space (see
-- "Names compare exactly"). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_name //
CREATE PROCEDURE pyqueue__check_name(
    IN in_what  VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value LONGTEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_max   INT)
SQL SECURITY INVOKER
BEGIN
    IF in_value IS NULL OR CHAR_LENGTH(in_value) = 0 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not be NULL or empty'));
    END IF;
    IF CHAR_LENGTH(in_value) > in_max THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' is longer than ', in_max, ' characters'));
    END IF;
    IF in_value LIKE '% ' THEN CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not end with a space')); END IF;
    IF LOCATE(X'ED', CAST(in_value AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', in_what, in_value); END IF;
END //

-- pyqueue__check_utf8: refuses text holding a UTF-16 surrogate (bytes ED A0-BF ..), which MariaDB's utf8mb4 accepts
-- but no strict UTF-8 reader does (other invalid bytes the server refuses itself, 1366). in_code: the pyqueue code to
-- raise. NULL passes. Takes no locks. How: a lone surrogate does not survive a round trip through utf16, any other
-- text does byte for byte (no REGEXP on bytes: MySQL 8.0.22+ refuses it, 3995); run only on text holding the byte ED.
DROP PROCEDURE IF EXISTS pyqueue__check_utf8 //
CREATE PROCEDURE pyqueue__check_utf8(
    IN in_code  VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_what  VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value LONGTEXT    CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    IF LOCATE(X'ED', CAST(in_value AS BINARY)) > 0
       AND CAST(CONVERT(CONVERT(in_value USING utf16) USING utf8mb4) AS BINARY) <> CAST(in_value AS BINARY) THEN
        CALL pyqueue__raise(in_code, CONCAT(in_what, ' is not valid UTF-8 (it holds a UTF-16 surrogate)'));
    END IF;
END //

-- pyqueue__check_reservation: refuses a key, kind or token that cannot name a reservation (commit, rollback, extend,
-- move). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_reservation //
CREATE PROCEDURE pyqueue__check_reservation(
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_token(in_token);
END //

-- pyqueue__check_int: refuses a number that is not whole or not within [in_min, in_max] (integer arguments are
-- DECIMAL(65,30), so 2.5 is refused instead of rounded). NULL passes. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_int //
CREATE PROCEDURE pyqueue__check_int(
    IN in_what  VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value DECIMAL(65,30),
    IN in_min   BIGINT,
    IN in_max   BIGINT)
SQL SECURITY INVOKER
BEGIN
    IF in_value <> TRUNCATE(in_value, 0) OR in_value < in_min OR in_value > in_max THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT(in_what, ' must be a whole number from ', in_min, ' to ', in_max));
    END IF;
END //

-- pyqueue__check_token: refuses a NULL token or one not shaped like a token ('token is malformed'). Takes no locks.
-- (Every REGEXP here ends with \\z, not $, which PCRE also matches before a final newline.)
DROP PROCEDURE IF EXISTS pyqueue__check_token //
CREATE PROCEDURE pyqueue__check_token(IN in_token LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    IF in_token IS NULL THEN CALL pyqueue__raise('invalid_argument', 'token must not be NULL'); END IF;
    IF NOT (in_token REGEXP '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\\z') THEN
        CALL pyqueue__raise('invalid_argument', 'token is malformed');
    END IF;
END //

-- pyqueue__queue: validates the queue name, raises unless the queue exists and returns its settings. Plain
-- (non-locking) read.
DROP PROCEDURE IF EXISTS pyqueue__queue //
CREATE PROCEDURE pyqueue__queue(
    IN  in_queue               LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_visibility_timeout DECIMAL(20,6),
    OUT out_max_attempts       INT,
    OUT out_dead_letter_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_paused             BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found INT;
    CALL pyqueue__check_name('queue', in_queue, 128);
    SET v_queue = in_queue;
    SELECT COUNT(*), MAX(q.visibility_timeout), MAX(q.max_attempts),
           MAX(q.dead_letter_queue), MAX(q.paused)
      INTO v_found, out_visibility_timeout, out_max_attempts,
           out_dead_letter_queue, out_paused
      FROM pyqueue_queue q
     WHERE q.queue_name = v_queue;
    IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
END //

-- pyqueue__check_payload: refuses a NULL payload (the JSON value null is the text 'null') and text that is not JSON.
-- Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_payload //
CREATE PROCEDURE pyqueue__check_payload(IN in_payload LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    IF in_payload IS NULL THEN CALL pyqueue__raise('invalid_payload', 'payload must not be NULL (use the JSON value null)'); END IF;
    IF NOT JSON_VALID(in_payload) THEN
        CALL pyqueue__raise('invalid_payload',
                            'payload is not valid JSON (MariaDB also refuses JSON nested 32 levels deep)');
    END IF;
    IF LOCATE(X'ED', CAST(in_payload AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_payload', 'payload', in_payload); END IF;
END //

-- pyqueue__check_duration: refuses a negative duration (or, with in_positive, one that is not above zero) and one
-- over 100 years. NULL passes (it means "the default"). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_duration //
CREATE PROCEDURE pyqueue__check_duration(
    IN in_what     VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value    DECIMAL(20,6),
    IN in_positive BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    IF in_value < 0 THEN CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not be negative')); END IF;
    IF in_positive AND in_value = 0 THEN CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must be greater than zero')); END IF;
    IF in_value > 3155760000 THEN CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not exceed 100 years')); END IF;
END //

-- pyqueue__check_key: refuses a p_key a producer may not write: as pyqueue__check_name, and a key of a schedule's
-- occurrence ('<anything>@YYYY-MM-DDTHH:MM:SSZ'): only the schedule routines create those, so no producer can create,
-- replace or preempt an occurrence. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_key //
CREATE PROCEDURE pyqueue__check_key(IN in_key LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__check_name('p_key', in_key, 255);
    IF in_key LIKE '%@____-__-__T__:__:__Z' THEN
        CALL pyqueue__raise('invalid_argument', 'p_key ending in @<UTC time> is reserved for schedules');
    END IF;
END //

-- pyqueue__check_size: refuses a payload of in_bytes bytes (LENGTH of its JSON text) longer than the max_payload of
-- queue in_queue (a queue that does not exist passes: the caller reports it). Plain read of the queue row.
DROP PROCEDURE IF EXISTS pyqueue__check_size //
CREATE PROCEDURE pyqueue__check_size(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_bytes BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_max BIGINT;
    SELECT MAX(q.max_payload) INTO v_max FROM pyqueue_queue q WHERE q.queue_name = in_queue;
    IF in_bytes > v_max THEN CALL pyqueue__raise_size(in_bytes, v_max); END IF;
END //

-- pyqueue__raise_size: signals invalid_payload for a payload of in_bytes bytes over a max_payload of in_max.
DROP PROCEDURE IF EXISTS pyqueue__raise_size //
CREATE PROCEDURE pyqueue__raise_size(IN in_bytes BIGINT, IN in_max BIGINT)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__raise('invalid_payload',
                        CONCAT('payload is ', in_bytes, ' bytes, more than the queue''s max_payload of ', in_max, ' bytes'));
END //

-- pyqueue__check_queue: pyqueue__queue for a caller that needs none of the queue's settings: validates the name and
-- raises unless the queue exists. Plain (non-locking) read.
DROP PROCEDURE IF EXISTS pyqueue__check_queue //
CREATE PROCEDURE pyqueue__check_queue(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_name('queue', in_queue, 128);
    SET v_queue = in_queue;
    IF NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
END //

-- pyqueue__check_message_key: the checks of a routine that names one message (in_key, in_kind) of in_queue: the
-- queue's name, and that it exists when in_exists (pyqueue__check_queue), then the p_key and p_kind names.
-- Plain read of the queue row when in_exists.
DROP PROCEDURE IF EXISTS pyqueue__check_message_key //
CREATE PROCEDURE pyqueue__check_message_key(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_exists BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    IF in_exists THEN CALL pyqueue__check_queue(in_queue); ELSE CALL pyqueue__check_name('queue', in_queue, 128); END IF;
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
END //

-- pyqueue__check_reservation_cap: refuses a reservation timeout in_timeout (seconds) above the queue's max_reservation
-- in_max. NULL passes (the visibility_timeout, never above it). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_reservation_cap //
CREATE PROCEDURE pyqueue__check_reservation_cap(IN in_timeout DECIMAL(20,6), IN in_max DECIMAL(20,6))
SQL SECURITY INVOKER
BEGIN
    IF in_timeout > in_max THEN
        CALL pyqueue__raise('invalid_argument',
            CONCAT('timeout is longer than the queue''s max_reservation (',
                   TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST(in_max AS CHAR))), ' s)'));
    END IF;
END //

-- pyqueue__own_transaction: the one test of "am I in autocommit". out_own = 1 in autocommit mode with no transaction
-- open (the routine may run its steps in a transaction of its own and retry a deadlock victim), 0 in the caller's
-- transaction or with autocommit off. MariaDB tells (@@in_transaction, read in a MariaDB-only comment). MySQL 8.0
-- cannot; there in_probe TRUE probes with a savepoint (ROLLBACK TO one fails with 1305 outside a transaction), FALSE
-- answers 0 (a single statement is not retried), NULL answers NULL (for a caller that serialises itself otherwise).
-- Takes no locks. The deadlock retry built on it: 01_preamble.sql.
DROP PROCEDURE IF EXISTS pyqueue__own_transaction //
CREATE PROCEDURE pyqueue__own_transaction(IN in_probe BOOLEAN, OUT out_own INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_in INT DEFAULT NULL;
    /*M!100300 SET v_in = @@SESSION.in_transaction; */
    IF @@SESSION.autocommit = 0 THEN
        SET out_own = 0;
    ELSEIF v_in IS NOT NULL THEN
        SET out_own = 1 - v_in;
    ELSEIF in_probe IS NULL OR NOT in_probe THEN
        SET out_own = IF(in_probe IS NULL, NULL, 0);
    ELSE
        SET out_own = 0;
        BEGIN
            DECLARE CONTINUE HANDLER FOR 1305 SET out_own = 1;
            SAVEPOINT pyqueue__own_probe;
            ROLLBACK TO SAVEPOINT pyqueue__own_probe;
        END;
        IF out_own = 0 THEN RELEASE SAVEPOINT pyqueue__own_probe; END IF;
    END IF;
END //

-- pyqueue__begin_read_committed: the start of a locking read that inserts the row when it finds none (queue_create's
-- queue row, pyqueue__schedule's schedule row). In a transaction of its own (in_own = 1) it starts that transaction at
-- READ COMMITTED: no gap locks, so creators of new rows never deadlock on the gap the missing rows share; in the
-- caller's transaction it does nothing. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__begin_read_committed //
CREATE PROCEDURE pyqueue__begin_read_committed(IN in_own INT)
SQL SECURITY INVOKER
BEGIN
    IF in_own = 1 THEN
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        START TRANSACTION;
    END IF;
END //

-- pyqueue__random_token: a random version 4 UUID (CHAR(36), lower case): the token of an extend, of a limited reserve
-- and of a dead-letter claim, and the per-call secret from which a reserve or pop derives the token of each row it
-- claims, token(secret, id) = the version 4 layout of SHA2(CONCAT(secret, id), 256): unguessable without the secret,
-- distinct per row, and computable again by the call (to read back or give back its claims). The bytes come from
-- RANDOM_BYTES(16), the server's cryptographic generator (MySQL 8.0, MariaDB 10.10+). MariaDB 10.6 to 10.9 have none
-- callable from SQL: RANDOM_BYTES fails there (1305) and the bytes are a SHA-256 of UUID(), RAND(), the clock and the
-- connection id, only as unpredictable as those (use MariaDB 10.10+ where a token must resist a determined guesser).
-- Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__random_token //
CREATE PROCEDURE pyqueue__random_token(OUT out_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_hex CHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    BEGIN
        DECLARE CONTINUE HANDLER FOR SQLEXCEPTION SET v_hex = NULL;
        SET v_hex = LOWER(HEX(RANDOM_BYTES(16)));
    END;
    IF v_hex IS NULL THEN SET v_hex = LEFT(SHA2(CONCAT(UUID(), RAND(), SYSDATE(6), CONNECTION_ID(), UUID_SHORT()), 256), 32); END IF;
    SET v_hex = INSERT(INSERT(v_hex, 13, 1, '4'),
                       17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(v_hex, 17, 1), 16, 10) + 1, 1));
    SET out_token = INSERT(INSERT(INSERT(INSERT(v_hex, 9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
END //

-- pyqueue__check_batch_size: refuses a batch (in_messages, checked by pyqueue__check_messages) holding a payload longer
-- than the max_payload of in_queue (NULL: of the queue each element's topic reaches, in_topics TRUE). A batch whose
-- whole text is not longer than the smallest max_payload concerned cannot hold one, and costs one comparison after
-- one read; otherwise each payload is measured as LENGTH of JSON_EXTRACT(payload, '$') (which writes a space after
-- each , and :, so that queue_push_batch, which stores the text as given, never stores a compact payload longer). Plain
-- reads.
DROP PROCEDURE IF EXISTS pyqueue__check_batch_size //
CREATE PROCEDURE pyqueue__check_batch_size(
    IN in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_min, v_bytes, v_max BIGINT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_bytes = NULL;
    SELECT MIN(q.max_payload) INTO v_min FROM pyqueue_queue q WHERE in_queue IS NULL OR q.queue_name = in_queue;
    IF LENGTH(in_messages) > v_min THEN
        IF in_queue IS NOT NULL THEN
            SELECT MAX(LENGTH(JSON_EXTRACT(b.payload, '$'))) INTO v_bytes
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (payload JSON PATH '$.payload')) AS b;
            IF v_bytes > v_min THEN CALL pyqueue__raise_size(v_bytes, v_min); END IF;
        ELSE
            -- the first payload over the max_payload of a queue its topic reaches
            SELECT x.bytes, x.max_payload INTO v_bytes, v_max
              FROM (SELECT LENGTH(JSON_EXTRACT(b.payload, '$')) AS bytes, q.max_payload, b.ord
                      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                               ord     FOR ORDINALITY,
                               t       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.topic',
                               payload JSON PATH '$.payload')) AS b
                      JOIN pyqueue_binding m ON CONCAT('.', b.t) REGEXP m.pattern_regex
                      JOIN pyqueue_queue q ON q.queue_name = m.queue_name
                     WHERE LENGTH(JSON_EXTRACT(b.payload, '$')) > q.max_payload
                     ORDER BY b.ord
                     LIMIT 1) AS x;
            IF v_bytes IS NOT NULL THEN CALL pyqueue__raise_size(v_bytes, v_max); END IF;
        END IF;
    END IF;
END //

-- pyqueue__check_messages: the checks of the batch pushes on their JSON array: every element an object with p_key and
-- p_kind strings as queue_push takes them, a payload (any JSON, null too), run_at missing, null or 'YYYY-MM-DD
-- HH:MM:SS[.ffffff]', priority missing, null or a whole number in INT's range, and per in_member a "group" ('group',
-- as queue_push_grouped) or a "topic" ('topic', pyqueue__check_topic) missing, null or valid; at most 10000 elements.
-- invalid_argument names the first bad element (1-based). Takes no locks. JSON_TABLE reads each field once, only
-- those an expression asks for ("IS NOT TRUE": a NULL verdict is bad). p_key and p_kind are read twice: as written (a
-- string's text starts with a double quote) and unquoted into a VARCHAR one character longer than allowed (a longer
-- one, cut to it, is still too long); a JSON null or a missing member is tested on the text, with no JSON function:
-- each JSON_TYPE or JSON_UNQUOTE of a field parses it again (the per-element checks were a third of a batch push).
DROP PROCEDURE IF EXISTS pyqueue__check_messages //
CREATE PROCEDURE pyqueue__check_messages(
    IN in_messages LONGTEXT CHARACTER SET utf8mb4,
    IN in_member   VARCHAR(5) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_bad, v_n BIGINT;
    IF in_messages IS NULL THEN CALL pyqueue__raise('invalid_argument', 'messages must not be NULL'); END IF;
    -- (valid JSON text that starts with [ is an array: JSON_TYPE, another parse of the whole text, only otherwise)
    IF NOT JSON_VALID(in_messages) OR (LEFT(in_messages, 1) <> '[' AND JSON_TYPE(in_messages) <> 'ARRAY') THEN
        CALL pyqueue__raise('invalid_argument', 'messages must be a JSON array of objects');
    END IF;
    IF LOCATE(X'ED', CAST(in_messages AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'messages', in_messages); END IF;
    -- the first bad element and the batch's length (its last ordinal) in one pass
    SELECT MIN(IF((     -- (an element that is not an object has no '$.p_key' string: refused below, as is;
                        --  a column of the whole element copied each payload once more)
                   (   in_member IS NULL
                    OR (    in_member = 'group'
                        AND (   COALESCE(JSON_TYPE(b.g), 'NULL') = 'NULL'
                             OR (    JSON_TYPE(b.g) = 'STRING'
                                 AND CHAR_LENGTH(JSON_UNQUOTE(b.g)) BETWEEN 1 AND 255
                                 AND NOT (JSON_UNQUOTE(b.g) LIKE '% '))))
                    OR (    in_member = 'topic'
                        AND JSON_TYPE(b.t) = 'STRING'
                        AND CHAR_LENGTH(JSON_UNQUOTE(b.t)) BETWEEN 1 AND 255
                        AND NOT (JSON_UNQUOTE(b.t) LIKE '% ' OR JSON_UNQUOTE(b.t) LIKE ' %'
                                 OR JSON_UNQUOTE(b.t) LIKE '.%' OR JSON_UNQUOTE(b.t) LIKE '%.'
                                 OR LOCATE('..', JSON_UNQUOTE(b.t)) > 0
                                 OR LOCATE('*', JSON_UNQUOTE(b.t)) > 0 OR LOCATE('#', JSON_UNQUOTE(b.t)) > 0)))
               AND LEFT(b.kj, 1) = '"' AND CHAR_LENGTH(b.k) BETWEEN 1 AND 255 AND NOT (b.k LIKE '% ')
               AND NOT (b.k LIKE '%@____-__-__T__:__:__Z')  -- a schedule's occurrence
               AND LEFT(b.kdj, 1) = '"' AND CHAR_LENGTH(b.kd) BETWEEN 1 AND 128 AND NOT (b.kd LIKE '% ')
               AND b.has_payload = 1
               AND (   b.run_at IS NULL OR b.run_at = 'null'
                    OR (    JSON_TYPE(b.run_at) = 'STRING'
                        AND JSON_UNQUOTE(b.run_at)
                            REGEXP '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?\\z'
                        AND CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) + INTERVAL 0 SECOND >= '1000-01-01'
                        AND DATE_FORMAT(CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)), '%Y-%m-%d %H:%i:%s')
                            = LEFT(JSON_UNQUOTE(b.run_at), 19)))
               AND (   b.priority IS NULL OR b.priority = 'null'
                    OR (    JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        AND CAST(b.priority AS CHAR) REGEXP '^-?[0-9]{1,10}\\z'
                        AND CAST(CAST(b.priority AS CHAR) AS DECIMAL(65,0)) BETWEEN -2147483648 AND 2147483647))
              ) IS NOT TRUE, b.ord, NULL)), MAX(b.ord)
      INTO v_bad, v_n
      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
               ord         FOR ORDINALITY,
               g           JSON PATH '$.group',
               t           JSON PATH '$.topic',
               kj          JSON PATH '$.p_key',
               k           VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
               kdj         JSON PATH '$.p_kind',
               kd          VARCHAR(129) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind',
               has_payload INT EXISTS PATH '$.payload',
               run_at      JSON PATH '$.run_at',
               priority    JSON PATH '$.priority')) AS b;
    IF v_n > 10000 THEN  -- the rows one call takes (docs/contract.md, "Batch size")
        CALL pyqueue__raise('invalid_argument', CONCAT('a batch takes at most 10000 messages, this one has ',
                                                       v_n, ' (split it)'));
    END IF;
    IF v_bad IS NOT NULL THEN
        SET v_n = pyqueue__refuse_element(v_bad, JSON_UNQUOTE(JSON_EXTRACT(in_messages, CONCAT('$[', v_bad - 1, '].p_key'))),
                                          in_member);  -- (not DO, which turns the error into a warning)
    END IF;
END //

-- pyqueue__refuse_element: raises invalid_argument for element in_ord of a batch found bad by the checks of
-- pyqueue__check_messages (in_key: its p_key, as far as it was read; in_member as there): a schedule's occurrence key
-- by its own message, any other fault by one message naming them all. A function, so that a batch push's INSERT can
-- refuse its first bad element as it reads it (queue_push_batch). Never returns.
DROP FUNCTION IF EXISTS pyqueue__refuse_element //
CREATE FUNCTION pyqueue__refuse_element(
    in_ord    BIGINT,
    in_key    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    in_member VARCHAR(5) CHARACTER SET utf8mb4)
RETURNS BOOLEAN
DETERMINISTIC
SQL SECURITY INVOKER
BEGIN
    IF in_key LIKE '%@____-__-__T__:__:__Z' THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('element ', in_ord, ' of the batch: p_key ending in @<UTC time> is reserved for schedules'));
    END IF;
    CALL pyqueue__raise('invalid_argument',
                        CONCAT('element ', in_ord, ' of the batch: bad ', COALESCE(CONCAT(in_member, '/'), ''),
                               'p_key/p_kind, missing payload or bad run_at/priority'));
    RETURN FALSE;
END //

-- pyqueue__check_message: the checks of one message a producer writes, in this order: p_key (pyqueue__check_key),
-- p_kind, payload, run_at (NULL = now) and priority (NULL = 0, else a whole number in INT's range). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_message //
CREATE PROCEDURE pyqueue__check_message(
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__check_key(in_key);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
    END IF;
    CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
END //

-- pyqueue__check_expires: the header pyqueue.expires_at (the time after which a reserve or pop no longer hands the
-- message out, but ends it as cancelled) of headers that carry it, checked: absent or JSON null (no expiry), else a
-- JSON string holding a UTC time written exactly YYYY-MM-DDTHH:MM:SS.ffffffZ (27 characters: the reserves write their
-- clock the same way, so a binary comparison of the texts orders them as times, with no conversion on the reserve's
-- path), on a date and time that exist; anything else raises invalid_argument, prefixed with in_where ('' or
-- 'element N of the batch: '). A member name written with \u escapes is one name to a client that decodes the headers
-- (and to JSON_TABLE), but another to JSON_EXTRACT's path, which the reserves and the test clock read: headers whose
-- decoded names hold pyqueue.expires_at other than as one member written plainly are refused too. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_expires //
CREATE PROCEDURE pyqueue__check_expires(
    IN in_headers LONGTEXT CHARACTER SET utf8mb4,
    IN in_where   VARCHAR(64) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_value LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_at LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;  -- (binary: the pattern's T and Z exactly)
    SET v_value = JSON_EXTRACT(in_headers, '$."pyqueue.expires_at"');
    IF LOCATE('\\u', in_headers) > 0
       AND (SELECT COUNT(*)  -- (binary: a name with a trailing space is another; one cut to 19 characters too)
              FROM JSON_TABLE(JSON_KEYS(in_headers), '$[*]' COLUMNS (
                       k VARCHAR(19) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS n
             WHERE CAST(n.k AS BINARY) = 'pyqueue.expires_at') <> (v_value IS NOT NULL) THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT(in_where, 'pyqueue.expires_at must be one member, its name written without escapes'));
    END IF;
    IF v_value IS NOT NULL AND JSON_TYPE(v_value) <> 'NULL' THEN
        IF JSON_TYPE(v_value) = 'STRING' THEN SET v_at = JSON_UNQUOTE(v_value); END IF;
        IF v_at IS NULL
           OR NOT v_at REGEXP '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{6}Z$'
           -- a date and time that exist (not 2026-02-30, nor 24:00 or a leap second): written back the same
           -- (+ 0 seconds: MariaDB's STR_TO_DATE keeps 2026-02-30, date arithmetic gives NULL for it)
           OR COALESCE(DATE_FORMAT(STR_TO_DATE(LEFT(v_at, 26), '%Y-%m-%dT%H:%i:%s.%f') + INTERVAL 0 SECOND,
                                   '%Y-%m-%dT%H:%i:%s.%f'), '')
              <> LEFT(v_at, 26) THEN
            CALL pyqueue__raise('invalid_argument',
                                CONCAT(in_where, 'pyqueue.expires_at must be a UTC time YYYY-MM-DDTHH:MM:SS.ffffffZ, not ',
                                       LEFT(v_value, 64)));
        END IF;
    END IF;
END //

-- pyqueue__check_headers: refuses headers (the *_with_headers pushes) that are not a JSON object ('headers must be a
-- JSON object': an array, string, number, or text that is not JSON) or longer than 8192 bytes of JSON text (as given);
-- out_headers: what is stored, NULL for none (SQL NULL or the JSON value null). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_headers //
CREATE PROCEDURE pyqueue__check_headers(
    IN  in_headers  LONGTEXT CHARACTER SET utf8mb4,
    OUT out_headers LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    SET out_headers = NULL;
    IF in_headers IS NOT NULL THEN
        IF NOT JSON_VALID(in_headers) THEN CALL pyqueue__raise('invalid_argument', 'headers must be a JSON object'); END IF;
        IF JSON_TYPE(in_headers) <> 'NULL' THEN
            IF JSON_TYPE(in_headers) <> 'OBJECT' THEN CALL pyqueue__raise('invalid_argument', 'headers must be a JSON object'); END IF;
            IF LENGTH(in_headers) > 8192 THEN
                CALL pyqueue__raise('invalid_argument', CONCAT('headers are ', LENGTH(in_headers), ' bytes, more than 8192 bytes'));
            END IF;
            IF LOCATE(X'ED', CAST(in_headers AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'headers', in_headers); END IF;
            -- (a name written with \u escapes may spell it: pyqueue__check_expires)
            IF LOCATE('pyqueue.expires_at', in_headers) > 0 OR LOCATE('\\u', in_headers) > 0 THEN
                CALL pyqueue__check_expires(in_headers, '');
            END IF;
            SET out_headers = in_headers;
        END IF;
    END IF;
END //

-- pyqueue__check_batch_headers: the checks of the batch *_with_headers pushes on the member "headers" of each element
-- of in_messages (checked by pyqueue__check_messages): missing or null (none) or a JSON object of at most 8192 bytes as
-- stored (LENGTH of JSON_EXTRACT(headers, '$')); invalid_argument names the first bad element (1-based). JSON_TABLE
-- reads a member by its decoded name, as the push that stores it does ("header\u0073" is "headers"): a batch whose
-- text holds neither "headers" nor a \u escape (which any spelling of it but the plain one needs) has none, and costs
-- two LOCATEs; so with pyqueue.expires_at. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_batch_headers //
CREATE PROCEDURE pyqueue__check_batch_headers(IN in_messages LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_bad, v_bytes BIGINT;
    DECLARE v_h LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_end BOOLEAN DEFAULT FALSE;
    -- the elements whose headers carry an expiry or may spell it with escapes, in order (a cursor: one pass over the
    -- batch)
    DECLARE c_expiring CURSOR FOR
        SELECT b.ord, b.h
          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (ord FOR ORDINALITY, h JSON PATH '$.headers')) AS b
         WHERE JSON_TYPE(b.h) = 'OBJECT'
           AND (JSON_CONTAINS_PATH(b.h, 'one', '$."pyqueue.expires_at"') OR LOCATE('\\u', b.h) > 0)
         ORDER BY b.ord;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_bad = NULL, v_end = TRUE;
    IF LOCATE('"headers"', in_messages) > 0 OR LOCATE('\\u', in_messages) > 0 THEN
        SELECT MIN(b.ord) INTO v_bad
          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (ord FOR ORDINALITY, h JSON PATH '$.headers')) AS b
         WHERE JSON_TYPE(b.h) NOT IN ('OBJECT', 'NULL');
        IF v_bad IS NOT NULL THEN
            CALL pyqueue__raise('invalid_argument', CONCAT('element ', v_bad, ' of the batch: headers must be a JSON object'));
        END IF;
        SELECT b.ord, LENGTH(JSON_EXTRACT(b.h, '$')) INTO v_bad, v_bytes
          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (ord FOR ORDINALITY, h JSON PATH '$.headers')) AS b
         WHERE JSON_TYPE(b.h) = 'OBJECT' AND LENGTH(JSON_EXTRACT(b.h, '$')) > 8192
         ORDER BY b.ord
         LIMIT 1;
        IF v_bad IS NOT NULL THEN
            CALL pyqueue__raise('invalid_argument', CONCAT('element ', v_bad, ' of the batch: headers are ', v_bytes,
                                                           ' bytes, more than 8192 bytes'));
        END IF;
        IF LOCATE('pyqueue.expires_at', in_messages) > 0 OR LOCATE('\\u', in_messages) > 0 THEN
            SET v_end = FALSE;
            OPEN c_expiring;
            expiring: LOOP
                FETCH c_expiring INTO v_bad, v_h;
                IF v_end THEN LEAVE expiring; END IF;
                CALL pyqueue__check_expires(v_h, CONCAT('element ', v_bad, ' of the batch: '));
            END LOOP;
            CLOSE c_expiring;
        END IF;
    END IF;
END //

DELIMITER ;
