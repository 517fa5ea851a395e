-- pyqueue-sql: MySQL 8.0+ / MariaDB 10.6+ procedures, the current state.
--
-- Runs after schema.sql and can be run again at any time: every procedure is dropped and created again. Procedures keep
-- the sql_mode and character set they were created under, so this file sets strict mode and utf8mb4 first and restores
-- the caller's after; every text parameter, variable and JSON_TABLE column declares utf8mb4 (names utf8mb4_bin),
-- whatever the database default (an undeclared one fails with 1253 against utf8mb4_bin or turns characters into '?').
--
-- Layout: one section per topic ('-- ==== <topic> ===='), in the order of schema.sql, queries.sql and
-- docs/contract.md (uninstall.sql: the reverse).
--
-- Least privilege: contract procedures (queue_*) are SQL SECURITY DEFINER (they run as the account that ran this
-- file), so an application needs EXECUTE on those of its capability and nothing on the tables (pyqueue-sql grant);
-- helpers (pyqueue__*) are SQL SECURITY INVOKER. DROP PROCEDURE drops the EXECUTE grants on it: after re-running this
-- file, run `pyqueue-sql grant ... --apply` again.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';
SET @pyqueue_saved_character_set_client = @@SESSION.character_set_client;
SET @pyqueue_saved_character_set_results = @@SESSION.character_set_results;
SET @pyqueue_saved_collation_connection = @@SESSION.collation_connection;
SET NAMES utf8mb4;

DELIMITER //

-- ==== helpers ====
-- Internal helpers (pyqueue__*), not part of the contract: SQL SECURITY INVOKER, called by the procedures of the
-- topics below (and so running as their definer). Grouped by the topic that uses them, in the order of the topics.

-- ---- checks and lookups used by every topic ----

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
            SET out_headers = in_headers;
        END IF;
    END IF;
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
-- Takes no locks. Deadlock retry, the one idiom: REPEAT (SET v_retry = 0, v_tries = v_tries + 1) the statement (or a
-- transaction of its own) UNTIL v_retry = 0 END REPEAT, with the handler
--   DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
-- (ROLLBACK first when it opened one; 1467 too where it waits for the AUTO-INC lock): in autocommit mode a victim
-- runs again up to 10 times; in the caller's transaction it is the caller's to retry. A claim that is a victim is a
-- claim not made: BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END.
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

-- pyqueue__set_paused: queue_pause (in_paused TRUE) and queue_resume (FALSE) of the existing queue in_queue.
-- Locks: the queue row, for one statement; in autocommit mode a deadlock victim runs again.
DROP PROCEDURE IF EXISTS pyqueue__set_paused //
CREATE PROCEDURE pyqueue__set_paused(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_paused BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            UPDATE pyqueue_queue SET paused = in_paused WHERE queue_name = v_queue;
        END;
    UNTIL v_retry = 0 END REPEAT;
END //

-- ---- for consume ----

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
-- (pyqueue__result_put, with its last_error, attempts and progress), in the same transaction when there is one.
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
    DECLARE v_locked, v_txn, v_busy, v_tries, v_deleted, v_own, v_deps INT DEFAULT 0;
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
    attempt: WHILE v_found = 1 DO
        SET v_retry = 0, v_tries = v_tries + 1, v_deleted = 0, v_hist = NULL;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN
                IF v_txn = 1 THEN
                    ROLLBACK;
                    SET v_txn = 0;
                END IF;
                IF v_group IS NOT NULL AND v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF;
            END;
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
                           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                            scheduled_at_initially, created_at, attempts, last_error, dead_from, dead_attempts,
                            headers)
                    VALUES (in_dead_letter_queue, v_key, v_kind, v_payload, v_priority,
                            in_now, in_now, v_created, 0, v_error, in_queue, v_attempts, v_headers)
                    ON DUPLICATE KEY UPDATE
                           payload = v_payload, priority = v_priority, created_at = v_created,
                           -- (read before it changes: assignments run left to right)
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
                IF v_deleted = 1 AND v_results THEN
                    CALL pyqueue__result_put(in_queue, v_key, v_kind, 'failed', NULL, v_error, v_attempts, v_progress,
                                             in_now);
                END IF;
                IF v_deleted = 1 AND v_results THEN  -- the messages that wait for it are cancelled
                    SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
                     WHERE d.queue_name = in_queue AND d.p_key = v_key AND d.p_kind = v_kind
                      LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
                    IF v_deps > 0 THEN CALL pyqueue__deps_left(in_queue, v_key, v_kind, FALSE, 'failed'); END IF;
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
                DECLARE CONTINUE HANDLER FOR 1213 BEGIN END;
                UPDATE pyqueue_queue SET dead_count = dead_count + 1 WHERE queue_name = in_queue;
            END;
        END IF;
        SET out_done = 1;
    END IF;
END //

-- pyqueue__give_back: queue_rollback, queue_fail and queue_give_up. The message is eligible again after in_delay (NULL
-- = 0); with in_set_error its last_error becomes in_error (first 2000 characters). out_outcome: 'retry', or after
-- max_attempts deliveries (with in_give_up: at once, whatever its attempts) 'dead_lettered' / 'dropped' (no
-- dead-letter queue); NULL when the token no longer holds. Steps: locate by
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
                DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                UPDATE pyqueue_message
                   SET scheduled_at = v_now + INTERVAL CAST(COALESCE(in_delay, 0) * 1000000 AS SIGNED) MICROSECOND,
                       reserve_token = NULL,
                       reserved_by = NULL,
                       last_error = IF(in_set_error, v_error, last_error)
                 WHERE id = v_id AND reserve_token = v_held;
                IF ROW_COUNT() = 1 THEN SET out_outcome = 'retry'; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
    ELSEIF v_found = 1 AND v_group IS NOT NULL THEN
        -- A grouped message: the claim, then pyqueue__dead_letter (group row first; never the queue row under it)
        CALL pyqueue__own_transaction(TRUE, v_own);
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1, out_outcome = NULL;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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
                DECLARE EXIT HANDLER FOR 1213, 1467
                BEGIN
                    IF v_own = 1 THEN ROLLBACK; END IF;
                    IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF;
                END;
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

-- pyqueue__reserve_args: the checks queue_reserve and queue_commit_reserve share: n >= 1 (NULL = 1), timeout NULL or
-- positive, worker at most 255 characters, kinds as pyqueue__kinds (out_kinds: normalised). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__reserve_args //
CREATE PROCEDURE pyqueue__reserve_args(
    IN  in_worker  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_timeout DECIMAL(20,6),
    IN  in_n       DECIMAL(65,30),
    IN  in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    OUT out_kinds  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    IF in_n < 1 THEN CALL pyqueue__raise('invalid_argument', 'n must be at least 1'); END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);
    CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
    IF CHAR_LENGTH(in_worker) > 255 THEN CALL pyqueue__raise('invalid_argument', 'worker is longer than 255 characters'); END IF;
    IF LOCATE(X'ED', CAST(in_worker AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'worker', in_worker); END IF;
    CALL pyqueue__kinds(in_kinds, out_kinds);
END //

-- pyqueue__candidates: one page of the ready messages of in_queue in the reserve's order (priority DESC,
-- scheduled_at, id), read WITHOUT locks: at most in_k rows after the keyset position io_* (NULL = from the start;
-- moved to the last row), of priority in_priority only (in_rest FALSE: the ready index) or of every priority up to it
-- (in_rest TRUE: the due index). out_cand: JSON array of [id, attempts, scheduled_at, token, reserved_by, cum,
-- priority], cum a running total of result sizes (queue_pop's packet budget; 0 unless in_sizes); out_got its length;
-- out_max_attempts its highest attempts. Needs a large group_concat_max_len (the callers raise it).
DROP PROCEDURE IF EXISTS pyqueue__candidates //
CREATE PROCEDURE pyqueue__candidates(
    IN    in_queue         VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_kinds         LONGTEXT CHARACTER SET utf8mb4,
    IN    in_now           DATETIME(6),
    IN    in_priority      INT,
    IN    in_rest          BOOLEAN,
    IN    in_k             INT,
    IN    in_sizes         BOOLEAN,
    INOUT io_pr            INT,
    INOUT io_at            DATETIME(6),
    INOUT io_id            BIGINT,
    OUT   out_cand         LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_got          INT,
    OUT   out_max_attempts INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_last LONGTEXT CHARACTER SET utf8mb4;
    -- one branch runs (in_rest is constant; the other WHERE is impossible)
    SELECT COUNT(*), MAX(d.attempts),
           CONCAT('[', GROUP_CONCAT(JSON_ARRAY(d.id, d.attempts, DATE_FORMAT(d.scheduled_at, '%Y-%m-%d %H:%i:%s.%f'),
                                               d.reserve_token, d.reserved_by, d.cum, d.priority)
                                    ORDER BY d.priority DESC, d.scheduled_at, d.id SEPARATOR ','), ']')
      INTO out_got, out_max_attempts, out_cand
      FROM (SELECT r.*, SUM(r.size) OVER (ORDER BY r.priority DESC, r.scheduled_at, r.id) AS cum
              FROM ((SELECT m.id, m.attempts, m.scheduled_at, m.reserve_token, m.reserved_by, m.priority,
                            IF(in_sizes, 2 * (LENGTH(m.payload) + LENGTH(m.p_key) + LENGTH(m.p_kind) + COALESCE(LENGTH(m.headers), 0)) + 256, 0) AS size
                       FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
                      WHERE NOT in_rest
                        AND m.queue_name = in_queue AND m.priority = in_priority AND m.scheduled_at <= in_now
                        AND (io_id IS NULL
                             OR m.scheduled_at > io_at OR (m.scheduled_at = io_at AND m.id > io_id))
                        AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                      ORDER BY m.scheduled_at, m.id
                      LIMIT in_k)
                    UNION ALL
                    (SELECT m.id, m.attempts, m.scheduled_at, m.reserve_token, m.reserved_by, m.priority,
                            IF(in_sizes, 2 * (LENGTH(m.payload) + LENGTH(m.p_key) + LENGTH(m.p_kind) + COALESCE(LENGTH(m.headers), 0)) + 256, 0) AS size
                       FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                      WHERE in_rest
                        AND m.queue_name = in_queue AND m.scheduled_at <= in_now AND m.priority <= in_priority
                        AND (io_id IS NULL
                             OR m.priority < io_pr
                             OR (m.priority = io_pr
                                 AND (m.scheduled_at > io_at OR (m.scheduled_at = io_at AND m.id > io_id))))
                        AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                      ORDER BY m.priority DESC, m.scheduled_at, m.id
                      LIMIT in_k)) AS r) AS d;
    IF out_got > 0 THEN
        SET v_last = JSON_EXTRACT(out_cand, CONCAT('$[', out_got - 1, ']'));
        SET io_id = JSON_EXTRACT(v_last, '$[0]'),
            io_at = CAST(JSON_UNQUOTE(JSON_EXTRACT(v_last, '$[2]')) AS DATETIME(6)),
            io_pr = JSON_EXTRACT(v_last, '$[6]');
    END IF;
END //

-- pyqueue__claim: claims up to in_n ready messages of in_queue (of in_kinds, NULL = any) in the reserve's order, a
-- page of candidates (pyqueue__candidates, 5000) at a time, each page with ONE UPDATE joined to a FOR UPDATE SKIP
-- LOCKED read by id (never a gap, never the ready range) of the candidates still as read. A claimed row gets
-- scheduled_at = in_until and the token derived from in_secret and its id, so a call finds its claims again by id
-- (io_claimed, in order) and token. Reserve (in_pop FALSE): attempts + 1, reserved_by = in_worker; a candidate at
-- attempts >= in_max is claimed under another secret and dead-lettered instead (one left alone by
-- pyqueue__dead_letter gets its claim back, pyqueue__unclaim). Pop: attempts and worker stay, and the claims stop
-- before the result would pass max_allowed_packet (at least one). At most 4 priorities are walked on the ready index,
-- then one due-index read covers the rest: the cost follows the ready rows. io_claimed: the candidates of the claimed
-- pages appended as JSON array elements without brackets (start with ''); out_count: rows claimed.
-- Locks: the claimed rows, for one statement each page (or until the caller's transaction ends); rows another session
-- holds are skipped.
DROP PROCEDURE IF EXISTS pyqueue__claim //
CREATE PROCEDURE pyqueue__claim(
    IN    in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN    in_n       INT,
    IN    in_now     DATETIME(6),
    IN    in_until   DATETIME(6),
    IN    in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_pop     BOOLEAN,
    IN    in_max     INT,
    IN    in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_own     INT,
    IN    in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    INOUT io_claimed LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_priority, v_left, v_k, v_got, v_maxatt, v_pr, v_claims, v_ndead, v_i, v_done INT;
    DECLARE v_steps INT DEFAULT 0;
    DECLARE v_rest BOOLEAN;
    DECLARE v_cand, v_dead LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_at DATETIME(6);
    DECLARE v_id, v_budget BIGINT;
    DECLARE v_dsecret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        -- a failing procedure returns no INOUT parameter: the claims go back here
        CALL pyqueue__give_back_claims(in_secret, io_claimed, in_pop);
        RESIGNAL;
    END;
    SET v_left = in_n, out_count = 0, v_budget = @@max_allowed_packet - 4096;
    CALL pyqueue__random_token(v_dsecret);  -- dead-letter claims: never read back or given back
    -- the top priority to start from: MAX(priority) reads the end of the queue's range in the ready index, where
    -- claims insert and commits leave deleted entries until purge, so a queue with nothing above priority 0 starts at
    -- 0 after one probe clear of it (nothing at 0: the walk goes on down, and ends when nothing lies below)
    SELECT IF(EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
                       WHERE m.queue_name = in_queue AND m.priority > 0),
              (SELECT MAX(m.priority) FROM pyqueue_message m WHERE m.queue_name = in_queue), 0)
      INTO v_priority;
    walk: WHILE v_priority IS NOT NULL AND v_left > 0 DO
        SET v_rest = v_steps >= 4, v_pr = NULL, v_at = NULL, v_id = NULL;
        pages: LOOP
            -- pages of at most 5000 keep the UPDATE's buffer of changed rows in memory
            SET v_k = LEAST(v_left, 5000);
            CALL pyqueue__candidates(in_queue, in_kinds, in_now, v_priority, v_rest, v_k, in_pop,
                                     v_pr, v_at, v_id, v_cand, v_got, v_maxatt);
            IF v_got = 0 THEN LEAVE pages; END IF;
            SET v_claims = 0;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
                UPDATE (SELECT x.id, (in_max IS NOT NULL AND x.attempts >= in_max) AS dead
                          FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (
                                   ord     FOR ORDINALITY,
                                   c_id    BIGINT      PATH '$[0]',
                                   c_att   INT         PATH '$[1]',
                                   c_at    DATETIME(6) PATH '$[2]',
                                   c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
                                   c_cum   BIGINT      PATH '$[5]')) AS j
                          STRAIGHT_JOIN pyqueue_message x FORCE INDEX (PRIMARY) ON x.id = j.c_id
                         WHERE x.queue_name = in_queue AND x.scheduled_at <= in_now AND x.scheduled_at = j.c_at
                           AND x.attempts = j.c_att AND x.reserve_token <=> j.c_token
                           AND (NOT in_pop OR j.c_cum <= v_budget OR (j.ord = 1 AND out_count = 0))
                           LIMIT 18446744073709551615  -- materialised (never merged into the UPDATE), on MySQL too
                           FOR UPDATE SKIP LOCKED) AS c
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.id
                   SET m.scheduled_at = in_until,
                       m.attempts = m.attempts + IF(in_pop OR c.dead, 0, 1),
                       m.reserved_by = IF(in_pop OR c.dead, m.reserved_by, in_worker),
                       -- why a dead-letter claim goes, unless a consumer said why
                       m.last_error = IF(c.dead, COALESCE(m.last_error, 'reservation expired on its last allowed delivery'),
                                         m.last_error),
                       m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(IF(c.dead, v_dsecret, in_secret), m.id), 256), 32), 13, 1, '4'),
                           17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(IF(c.dead, v_dsecret, in_secret), m.id), 256), 17, 1), 16, 10) + 1, 1)),
                           9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
                SET v_claims = ROW_COUNT();
            END;
            IF v_claims > 0 THEN
                -- appended as text (a JSON merge would parse all of it again each page)
                SET io_claimed = CONCAT(io_claimed, IF(io_claimed = '', '', ','),
                                        SUBSTRING(v_cand, 2, CHAR_LENGTH(v_cand) - 2));
            END IF;
            IF in_max IS NOT NULL AND v_maxatt >= in_max AND v_claims > 0 THEN
                -- the candidates claimed for dead-lettering: [id, token, old scheduled_at, old token]
                SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY(m.id, m.reserve_token, j.c_at, j.c_token)) INTO v_ndead, v_dead
                  FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (
                           ord     FOR ORDINALITY,
                           c_id    BIGINT   PATH '$[0]',
                           c_at    VARCHAR(26) CHARACTER SET utf8mb4 PATH '$[2]',
                           c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                 WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_dsecret, m.id), 256), 32), 13, 1, '4'),
                     17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_dsecret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
                     9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
                SET v_claims = v_claims - v_ndead, v_i = 0;
                WHILE v_i < v_ndead DO
                    BEGIN
                        DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
                        CALL pyqueue__dead_letter(in_queue, in_dlq,
                                                  JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][0]')),
                                                  JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][1]'))),
                                                  in_now, TRUE, v_done);
                        IF v_done = -1 THEN  -- its group row was busy: left as it was
                            CALL pyqueue__unclaim(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][0]')),
                                                  JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][1]'))),
                                                  JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][2]'))),
                                                  IF(JSON_TYPE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][3]'))) = 'NULL', NULL,
                                                     JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][3]')))));
                        END IF;
                    END;
                    SET v_i = v_i + 1;
                END WHILE;
            END IF;
            SET v_left = v_left - v_claims, out_count = out_count + v_claims;
            IF in_pop AND JSON_EXTRACT(v_cand, CONCAT('$[', v_got - 1, '][5]')) > v_budget THEN
                SET v_left = 0;  -- the result is full
            ELSEIF in_pop THEN
                SET v_budget = v_budget - JSON_EXTRACT(v_cand, CONCAT('$[', v_got - 1, '][5]'));
            END IF;
            IF v_left <= 0 OR v_got < v_k THEN LEAVE pages; END IF;
        END LOOP;
        IF v_rest OR v_left <= 0 THEN LEAVE walk; END IF;
        SET v_steps = v_steps + 1;
        SELECT MAX(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name = in_queue AND m.priority < v_priority;
    END WHILE;
END //

-- pyqueue__claim_one: pyqueue__claim for a reserve of one message, without JSON pages: the same walk over priorities,
-- one candidate at a time, the same claiming statement, tokens and dead-lettering (a few primary-key and range
-- statements instead of building and parsing JSON). io_claimed and out_count as pyqueue__claim. Locks: the claimed
-- row, for one statement (or until the caller's transaction ends).
DROP PROCEDURE IF EXISTS pyqueue__claim_one //
CREATE PROCEDURE pyqueue__claim_one(
    IN    in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN    in_now     DATETIME(6),
    IN    in_until   DATETIME(6),
    IN    in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_max     INT,
    IN    in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_own     INT,
    IN    in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    INOUT io_claimed LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_claims, v_priority, v_found, v_att, v_pr, v_last_pr, v_done INT;
    DECLARE v_steps INT DEFAULT 0;
    DECLARE v_id, v_last_id BIGINT;
    DECLARE v_at, v_last_at DATETIME(6);
    DECLARE v_tok, v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_by VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_dead BOOLEAN;
    DECLARE v_dsecret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
    SET out_count = 0;
    -- the top priority to start from: MAX(priority) reads the end of the queue's range in the ready index, where
    -- claims insert and commits leave deleted entries until purge, so a queue with nothing above priority 0 starts at
    -- 0 after one probe clear of it (nothing at 0: the walk goes on down, and ends when nothing lies below)
    SELECT IF(EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
                       WHERE m.queue_name = in_queue AND m.priority > 0),
              (SELECT MAX(m.priority) FROM pyqueue_message m WHERE m.queue_name = in_queue), 0)
      INTO v_priority;
    walk: WHILE v_priority IS NOT NULL DO
        SET v_last_id = NULL, v_last_at = NULL, v_last_pr = NULL;
        candidates: LOOP
            -- the next candidate after the keyset position (no derived table to materialise; no row: v_found = 0)
            IF v_steps < 4 THEN
                SELECT 1, m.id, m.attempts, m.scheduled_at, m.reserve_token, m.reserved_by, m.priority
                  INTO v_found, v_id, v_att, v_at, v_tok, v_by, v_pr
                  FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
                 WHERE m.queue_name = in_queue AND m.priority = v_priority AND m.scheduled_at <= in_now
                   AND (v_last_id IS NULL
                        OR m.scheduled_at > v_last_at OR (m.scheduled_at = v_last_at AND m.id > v_last_id))
                   AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                 ORDER BY m.scheduled_at, m.id
                 LIMIT 1;
            ELSE
                SELECT 1, m.id, m.attempts, m.scheduled_at, m.reserve_token, m.reserved_by, m.priority
                  INTO v_found, v_id, v_att, v_at, v_tok, v_by, v_pr
                  FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                 WHERE m.queue_name = in_queue AND m.scheduled_at <= in_now AND m.priority <= v_priority
                   AND (v_last_id IS NULL
                        OR m.priority < v_last_pr
                        OR (m.priority = v_last_pr
                            AND (m.scheduled_at > v_last_at OR (m.scheduled_at = v_last_at AND m.id > v_last_id))))
                   AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                 ORDER BY m.priority DESC, m.scheduled_at, m.id
                 LIMIT 1;
            END IF;
            IF v_found = 0 THEN LEAVE candidates; END IF;
            SET v_last_id = v_id, v_last_at = v_at, v_last_pr = v_pr,
                v_dead = (in_max IS NOT NULL AND v_att >= in_max);
            IF v_dead AND v_dsecret IS NULL THEN CALL pyqueue__random_token(v_dsecret); END IF;
            SET v_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(IF(v_dead, v_dsecret, in_secret), v_id), 256), 32), 13, 1, '4'),
                  17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(IF(v_dead, v_dsecret, in_secret), v_id), 256), 17, 1), 16, 10) + 1, 1)),
                  9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
            SET v_claims = 0;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
                UPDATE (SELECT x.id
                          FROM pyqueue_message x FORCE INDEX (PRIMARY)
                         WHERE x.id = v_id AND x.queue_name = in_queue AND x.scheduled_at <= in_now
                           AND x.scheduled_at = v_at AND x.attempts = v_att AND x.reserve_token <=> v_tok
                         LIMIT 18446744073709551615  -- materialised (never merged into the UPDATE), on MySQL too
                         FOR UPDATE SKIP LOCKED) AS c
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.id
                   SET m.scheduled_at = in_until,
                       m.attempts = m.attempts + IF(v_dead, 0, 1),
                       m.reserved_by = IF(v_dead, m.reserved_by, in_worker),
                       -- why a dead-letter claim goes, unless a consumer said why
                       m.last_error = IF(v_dead, COALESCE(m.last_error, 'reservation expired on its last allowed delivery'),
                                         m.last_error),
                       m.reserve_token = v_token;
                SET v_claims = ROW_COUNT();
            END;
            IF v_claims > 0 THEN
                IF NOT v_dead THEN
                    -- (the casts: MariaDB's JSON_ARRAY quotes integer variables)
                    SET io_claimed = JSON_ARRAY(CAST(v_id AS SIGNED), CAST(v_att AS SIGNED),
                                                DATE_FORMAT(v_at, '%Y-%m-%d %H:%i:%s.%f'),
                                                v_tok, v_by, 0, CAST(v_pr AS SIGNED)),
                        out_count = 1;
                    LEAVE walk;
                END IF;
                BEGIN
                    DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
                    CALL pyqueue__dead_letter(in_queue, in_dlq, v_id, v_token, in_now, TRUE, v_done);
                    IF v_done = -1 THEN  -- its group row was busy: left as it was
                        CALL pyqueue__unclaim(v_id, v_token, v_at, v_tok);
                    END IF;
                END;
            END IF;
        END LOOP;
        IF v_steps >= 4 THEN LEAVE walk; END IF;
        SET v_steps = v_steps + 1;
        SELECT MAX(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name = in_queue AND m.priority < v_priority;
    END WHILE;
END //

-- pyqueue__give_back_claims: undoes the claims of one call (the tokens derived from in_secret) of the rows in
-- in_claimed: scheduled_at, token and worker as they were, attempts - 1 unless in_pop; for the error handlers of
-- pyqueue__claim, pyqueue__reserve and queue_pop, so a failing call consumes nothing. Locks: those rows, for one
-- statement.
DROP PROCEDURE IF EXISTS pyqueue__give_back_claims //
CREATE PROCEDURE pyqueue__give_back_claims(
    IN in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_claimed LONGTEXT CHARACTER SET utf8mb4,
    IN in_pop     BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    IF in_secret IS NOT NULL AND in_claimed IS NOT NULL THEN
        UPDATE JSON_TABLE(CONCAT('[', in_claimed, ']'), '$[*]' COLUMNS (
                   c_id    BIGINT      PATH '$[0]',
                   c_at    DATETIME(6) PATH '$[2]',
                   c_token CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
                   c_by    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]')) AS j
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
           SET m.scheduled_at = j.c_at, m.attempts = m.attempts - IF(in_pop, 0, 1),
               m.reserve_token = j.c_token, m.reserved_by = j.c_by
         WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(in_secret, m.id), 256), 32), 13, 1, '4'),
               17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(in_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
               9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
    END IF;
END //

-- ---- for wakeups ----

-- pyqueue__kinds: validates a kinds filter (NULL, or a non-empty JSON array of strings) and returns it re-serialised
-- for JSON_CONTAINS(out, JSON_QUOTE(p_kind)), as queue_reserve does. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__kinds //
CREATE PROCEDURE pyqueue__kinds(
    IN  in_kinds  LONGTEXT CHARACTER SET utf8mb4,
    OUT out_kinds LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_bad INT;
    SET out_kinds = NULL;
    IF in_kinds IS NOT NULL THEN
        IF NOT JSON_VALID(in_kinds) THEN CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a JSON array of strings'); END IF;
        IF JSON_TYPE(in_kinds) <> 'ARRAY' OR JSON_LENGTH(in_kinds) = 0 THEN
            CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a non-empty JSON array of strings');
        END IF;
        SELECT COUNT(*) INTO v_bad
          FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (elem JSON PATH '$')) AS k
         WHERE (JSON_TYPE(k.elem) = 'STRING') IS NOT TRUE;
        IF v_bad > 0 THEN CALL pyqueue__raise('invalid_argument', 'kinds must be NULL or a non-empty JSON array of strings'); END IF;
        -- a longer string would be cut to 128 below and match another kind
        SELECT COUNT(*) INTO v_bad
          FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (elem JSON PATH '$')) AS k
         WHERE CHAR_LENGTH(JSON_UNQUOTE(k.elem)) > 128;
        IF v_bad > 0 THEN CALL pyqueue__raise('invalid_argument', 'kinds must not hold a kind longer than 128 characters'); END IF;
        /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(k.kind) INTO out_kinds
          FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k;
    END IF;
END //

-- pyqueue__next_at: the earliest scheduled_at of the queue's messages (of in_kinds, NULL = any; blocked ones are
-- none), NULL when none: one ordered read of the due index up to the first wanted kind. On a queue with rates (one
-- probe of pyqueue_rate tells), a message of a kind whose rate has no free unit at in_now counts from when the next
-- unit frees (the first such message of each held kind: one more ordered read per held kind), and a used-up
-- queue-wide rate puts the answer no earlier than its next free unit: an idle worker neither polls a held-back queue
-- nor oversleeps a reservable message. Plain reads: SELECT ... INTO (InnoDB runs a subquery in SET, IF, WHILE or a
-- CALL argument as a locking read, which would wait for the row locks of a transaction that is pushing).
DROP PROCEDURE IF EXISTS pyqueue__next_at //
CREATE PROCEDURE pyqueue__next_at(
    IN  in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kinds LONGTEXT CHARACTER SET utf8mb4,
    IN  in_now   DATETIME(6),
    OUT out_next DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_rated INT;
    DECLARE v_held LONGTEXT CHARACTER SET utf8mb4;   -- [[kind, when its next unit frees], ...] of the held kinds
    DECLARE v_hkinds LONGTEXT CHARACTER SET utf8mb4; -- [kind, ...] of the held kinds
    DECLARE v_queue_free, v_kind_next DATETIME(6);
    SELECT EXISTS (SELECT 1 FROM pyqueue_rate r WHERE r.queue_name = in_queue) INTO v_rated;
    IF v_rated THEN
        SELECT JSON_ARRAYAGG(JSON_ARRAY(h.p_kind, DATE_FORMAT(h.free_at, '%Y-%m-%d %H:%i:%s.%f'))),
               JSON_ARRAYAGG(h.p_kind)
          INTO v_held, v_hkinds
          FROM (SELECT r.p_kind, MIN(s.used_at) + INTERVAL r.per_us MICROSECOND AS free_at
                  FROM pyqueue_rate r
                  JOIN pyqueue_rate_slot s ON s.queue_name = r.queue_name AND s.p_kind = r.p_kind
                 WHERE r.queue_name = in_queue AND r.p_kind <> ''
                 GROUP BY r.p_kind, r.per_us
                HAVING SUM(s.used_at IS NULL OR s.used_at <= in_now - INTERVAL r.per_us MICROSECOND) = 0) AS h;
        CALL pyqueue__rate_free_at(in_queue, '', in_now, v_queue_free);
    END IF;
    SELECT MIN(x.scheduled_at) INTO out_next
      FROM (SELECT m.scheduled_at FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
             WHERE m.queue_name = in_queue
               AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'  -- not blocked in a group
               AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
               AND (v_hkinds IS NULL OR NOT JSON_CONTAINS(v_hkinds, JSON_QUOTE(m.p_kind)))
             ORDER BY m.scheduled_at
             LIMIT 1) AS x;
    IF v_held IS NOT NULL THEN
        -- each held kind's first message, from when its next unit frees
        SELECT MIN(GREATEST(h.free_at,
                            (SELECT m.scheduled_at FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                              WHERE m.queue_name = in_queue AND m.p_kind = h.p_kind
                                AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                              ORDER BY m.scheduled_at
                              LIMIT 1)))
          INTO v_kind_next
          FROM JSON_TABLE(v_held, '$[*]' COLUMNS (
                   p_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                   free_at DATETIME(6) PATH '$[1]')) AS h
         WHERE in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(h.p_kind));
        IF v_kind_next IS NOT NULL AND (out_next IS NULL OR v_kind_next < out_next) THEN
            SET out_next = v_kind_next;
        END IF;
    END IF;
    IF v_queue_free IS NOT NULL AND out_next < v_queue_free THEN
        SET out_next = v_queue_free;
    END IF;
END //

-- ---- for history and dead letters ----

-- pyqueue__archive: when in_queue keeps history, copies message in_id, if still held by in_token (NULL: not
-- reserved), into pyqueue_history with in_outcome and in_to_queue; out_history_id = the copy or NULL. Called just
-- BEFORE the statement that removes the message; pyqueue__unarchive then deletes the copy if that removed nothing
-- (interrupted in between: a history row for a live message, never a lost message).
-- Locks: a shared lock on the message row, for one statement.
DROP PROCEDURE IF EXISTS pyqueue__archive //
CREATE PROCEDURE pyqueue__archive(
    IN  in_queue       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id          BIGINT,
    IN  in_token       CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_outcome     VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_to_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_now         DATETIME(6),
    OUT out_history_id BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_retention DECIMAL(20,6);
    SET out_history_id = NULL;
    SELECT MAX(q.history_retention) INTO v_retention FROM pyqueue_queue q WHERE q.queue_name = in_queue;
    IF v_retention IS NOT NULL THEN
        INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                     created_at, processed_at, outcome, to_queue, reserved_by,
                                     last_error, headers)
        SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
               m.created_at, in_now, in_outcome, in_to_queue, m.reserved_by, m.last_error, m.headers
          FROM pyqueue_message m
         WHERE m.id = in_id AND m.queue_name = in_queue AND m.reserve_token <=> in_token;
        IF ROW_COUNT() = 1 THEN SET out_history_id = LAST_INSERT_ID(); END IF;
    END IF;
END //

-- pyqueue__unarchive: deletes the history row in_history_id that pyqueue__archive wrote when the removal it preceded
-- did nothing (in_done = 0). Locks: that history row, for one statement.
DROP PROCEDURE IF EXISTS pyqueue__unarchive //
CREATE PROCEDURE pyqueue__unarchive(IN in_history_id BIGINT, IN in_done INT)
SQL SECURITY INVOKER
BEGIN
    IF in_history_id IS NOT NULL AND in_done = 0 THEN DELETE FROM pyqueue_history WHERE id = in_history_id; END IF;
END //

-- ---- for results ----

-- ---- for dependencies ----

-- pyqueue__deps_left: what a message's leaving its queue does to the messages that wait for it. (in_queue, in_key,
-- in_kind) has just been deleted by the caller, in its transaction. With in_ok (it succeeded: committed, popped, moved
-- on) each waiting child's count of parents left goes down, and a child whose count reaches 0 is ready now, in this
-- transaction. Otherwise (failed: dead-lettered or dropped; cancelled; removed) each waiting child is cancelled as
-- queue_cancel would (removed, history outcome and result 'cancelled', last_error 'parent (queue q, p_key k, p_kind t)
-- <in_why>'), and the children waiting for it after it, transitively (a work list in a JSON array: no recursion,
-- which MySQL refuses by default, and no temporary table). The message's own rows as a child go too. Reads with
-- locking reads (the latest committed rows, whatever the caller's snapshot). Locks: the rows it reads, deletes and
-- updates in pyqueue_dependency, each child's count row (the parents of one child that end at once take turns on it,
-- so exactly one of them sees 0), the child's message row, until the transaction ends; children in (queue, key, kind)
-- order.
DROP PROCEDURE IF EXISTS pyqueue__deps_left //
CREATE PROCEDURE pyqueue__deps_left(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_ok    BOOLEAN,
    IN in_why   VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_todo LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_i INT DEFAULT 0;
    DECLARE v_q VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_t VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_why VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    SET v_todo = JSON_ARRAY(JSON_ARRAY(in_queue, in_key, in_kind, COALESCE(in_why, '')));
    WHILE v_i < JSON_LENGTH(v_todo) DO
        SET v_q = JSON_UNQUOTE(JSON_EXTRACT(v_todo, CONCAT('$[', v_i, '][0]'))),
            v_k = JSON_UNQUOTE(JSON_EXTRACT(v_todo, CONCAT('$[', v_i, '][1]'))),
            v_t = JSON_UNQUOTE(JSON_EXTRACT(v_todo, CONCAT('$[', v_i, '][2]'))),
            v_why = JSON_UNQUOTE(JSON_EXTRACT(v_todo, CONCAT('$[', v_i, '][3]')));
        BEGIN
            DECLARE v_done, v_any INT DEFAULT 0;
            DECLARE v_cq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
            DECLARE v_ck VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
            DECLARE v_ct VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
            DECLARE v_msg, v_hist BIGINT;
            DECLARE v_left, v_gone, v_attempts INT;
            DECLARE v_results BOOLEAN;
            DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
            DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
            DECLARE v_now DATETIME(6);
            DECLARE c_children CURSOR FOR
                SELECT d.other_queue, d.other_key, d.other_kind, d.msg_id
                  FROM pyqueue_dependency d
                 WHERE d.queue_name = v_q AND d.p_key = v_k AND d.p_kind = v_t AND d.role = 'c'
                 ORDER BY d.other_queue, d.other_key, d.other_kind
                   FOR UPDATE;
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
            OPEN c_children;
            children: LOOP
                FETCH c_children INTO v_cq, v_ck, v_ct, v_msg;
                IF v_done = 1 THEN LEAVE children; END IF;
                IF v_i = 0 AND in_ok THEN
                    UPDATE pyqueue_dependency SET n = n - 1
                     WHERE queue_name = v_cq AND p_key = v_ck AND p_kind = v_ct AND role = 'w' AND msg_id = v_msg;
                    IF ROW_COUNT() = 1 THEN
                        SET v_left = NULL;
                        SELECT MIN(w.n) INTO v_left FROM pyqueue_dependency w
                         WHERE w.queue_name = v_cq AND w.p_key = v_ck AND w.p_kind = v_ct AND w.role = 'w'
                           AND w.msg_id = v_msg;
                        IF v_left <= 0 THEN
                            DELETE FROM pyqueue_dependency
                             WHERE queue_name = v_cq AND p_key = v_ck AND p_kind = v_ct AND role = 'w';
                            SET v_now = UTC_TIMESTAMP(6);
                            UPDATE pyqueue_message FORCE INDEX (PRIMARY)
                               SET scheduled_at = v_now, scheduled_at_initially = v_now
                             WHERE id = v_msg AND queue_name = v_cq
                               AND scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999';
                        END IF;
                    END IF;
                    SET v_done = 0;
                ELSE
                    SET v_now = UTC_TIMESTAMP(6), v_gone = 0, v_hist = NULL;
                    SET v_error = LEFT(CONCAT('parent (queue ', v_q, ', p_key ', v_k, ', p_kind ', v_t, ') ', v_why), 2000);
                    UPDATE pyqueue_message FORCE INDEX (PRIMARY) SET last_error = v_error
                     WHERE id = v_msg AND queue_name = v_cq AND scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999';
                    IF ROW_COUNT() = 1 THEN
                        SELECT m.attempts, m.progress INTO v_attempts, v_progress
                          FROM pyqueue_message m FORCE INDEX (PRIMARY) WHERE m.id = v_msg;
                        CALL pyqueue__archive(v_cq, v_msg, NULL, 'cancelled', NULL, v_now, v_hist);
                        DELETE FROM pyqueue_message WHERE id = v_msg AND reserve_token IS NULL;
                        SET v_gone = ROW_COUNT();
                        CALL pyqueue__unarchive(v_hist, v_gone);
                        SELECT q.result_retention IS NOT NULL INTO v_results FROM pyqueue_queue q
                         WHERE q.queue_name = v_cq;
                        IF v_gone = 1 AND v_results THEN
                            CALL pyqueue__result_put(v_cq, v_ck, v_ct, 'cancelled', NULL, v_error, v_attempts,
                                                     v_progress, v_now);
                        END IF;
                        IF v_gone = 1 THEN
                            SET v_todo = JSON_ARRAY_APPEND(v_todo, '$', JSON_ARRAY(v_cq, v_ck, v_ct, 'was cancelled'));
                        END IF;
                    END IF;
                    SET v_done = 0;
                END IF;
            END LOOP;
            CLOSE c_children;
            DELETE FROM pyqueue_dependency WHERE queue_name = v_q AND p_key = v_k AND p_kind = v_t;
        END;
        SET v_i = v_i + 1;
    END WHILE;
END //

-- pyqueue__deps_left_many: pyqueue__deps_left (in_ok, in_why) for each [p_key, p_kind] of in_pairs (a JSON array;
-- NULL: none), messages of in_queue, in the array's order. Locks: as pyqueue__deps_left.
DROP PROCEDURE IF EXISTS pyqueue__deps_left_many //
CREATE PROCEDURE pyqueue__deps_left_many(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_pairs LONGTEXT     CHARACTER SET utf8mb4,
    IN in_ok    BOOLEAN,
    IN in_why   VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_i INT DEFAULT 0;
    WHILE in_pairs IS NOT NULL AND v_i < JSON_LENGTH(in_pairs) DO
        CALL pyqueue__deps_left(in_queue, JSON_UNQUOTE(JSON_EXTRACT(in_pairs, CONCAT('$[', v_i, '][0]'))),
                                JSON_UNQUOTE(JSON_EXTRACT(in_pairs, CONCAT('$[', v_i, '][1]'))), in_ok, in_why);
        SET v_i = v_i + 1;
    END WHILE;
END //

-- pyqueue__result_put: records in pyqueue_result the outcome in_state ('succeeded', 'failed' or 'cancelled') of the
-- message (in_queue, in_key, in_kind) that the caller has just removed: in_result (JSON text; NULL and the JSON value
-- null are stored as SQL NULL), in_error (its last_error), in_attempts (its deliveries), in_progress, finished at
-- in_now; it replaces the row an earlier message of the key left. Called only for a queue that keeps results, after
-- the removal, in its transaction. Locks: the result row (a new one: the gap where it goes), for one statement (or
-- until the transaction ends).
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
    IN in_now      DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_result LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    IF in_result IS NOT NULL AND JSON_TYPE(in_result) <> 'NULL' THEN SET v_result = in_result; END IF;
    INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts, progress, finished_at)
    VALUES (in_queue, in_key, in_kind, in_state, v_result, in_error, in_attempts, in_progress, in_now)
    ON DUPLICATE KEY UPDATE state = in_state, result = v_result, last_error = in_error, attempts = in_attempts,
                            progress = in_progress, finished_at = in_now;
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

-- pyqueue__result: what queue_result answers for (in_queue, in_key, in_kind), read by ONE statement (one consistent
-- view: a message that finished meanwhile is seen either live or with its result, never neither): the live message
-- (state 'ready', an expired reservation too, 'delayed', 'reserved' or 'blocked' behind its FIFO group's head; no
-- result, no finished_at), else its stored outcome, else 'unknown' (all NULL). out_found = 0 when the queue does not
-- exist. Plain read, no locks.
DROP PROCEDURE IF EXISTS pyqueue__result //
CREATE PROCEDURE pyqueue__result(
    IN  in_queue      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_key        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_found     INT,
    OUT out_state     VARCHAR(16)   CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_result    LONGTEXT      CHARACTER SET utf8mb4,
    OUT out_error     VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_attempts  INT,
    OUT out_progress  LONGTEXT      CHARACTER SET utf8mb4,
    OUT out_finished  DATETIME(6),
    OUT out_requested INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET out_found = 0;
    SET v_now = UTC_TIMESTAMP(6), out_found = 1;
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
      INTO out_state, out_result, out_error, out_attempts, out_progress, out_finished, out_requested
      FROM pyqueue_queue q
      LEFT JOIN pyqueue_message m ON m.queue_name = q.queue_name AND m.p_key = in_key AND m.p_kind = in_kind
      LEFT JOIN pyqueue_result r ON r.queue_name = q.queue_name AND r.p_key = in_key AND r.p_kind = in_kind
     WHERE q.queue_name = in_queue;
END //

-- ---- for limits ----

-- pyqueue__limit_take: gives a free slot (1..capacity) of (in_queue, in_kind) to the reservation (in_id, in_attempts,
-- until in_until); out_ok = 1 when it got one. A slot is busy while its holder is that live reservation or its claim is
-- in progress (msg_attempts - 1, before msg_until). Holders left beyond a lowered capacity are first moved into free
-- slots within it (copy, then delete: interrupted, a holder briefly holds two; fewer hand-outs, never more). The taking
-- UPDATE locks and reads the slot rows as they are now, and takes nothing if the capacity changed. At READ COMMITTED
-- its reads of the holders are consistent reads as of the statement's start (an extend committed while it waited for a
-- slot lock is unseen), so a holder is live while its message's or its slot's end (msg_until, which an extend sets
-- first) is ahead. Locks, per statement: slot rows in slot_no order, then shared locks on the holders' message rows and
-- the limit row; in autocommit mode a deadlock victim runs again.
DROP PROCEDURE IF EXISTS pyqueue__limit_take //
CREATE PROCEDURE pyqueue__limit_take(
    IN  in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_id       BIGINT,
    IN  in_attempts INT,
    IN  in_until    DATETIME(6),
    IN  in_now      DATETIME(6),
    OUT out_ok      INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_cap, v_slot, v_h_att, v_found, v_retry INT;
    DECLARE v_holder BIGINT;
    DECLARE v_h_until DATETIME(6);
    DECLARE v_moves, v_own, v_tries INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
    SET out_ok = 0;
    CALL pyqueue__own_transaction(FALSE, v_own);
    slots: LOOP
      SET v_retry = 0, v_tries = v_tries + 1;
      BEGIN
        DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
        SELECT MAX(l.capacity) INTO v_cap
          FROM pyqueue_limit l WHERE l.queue_name = in_queue AND l.p_kind = in_kind;
        IF v_cap IS NULL THEN
            LEAVE slots;  -- the limit was removed meanwhile: take nothing this time
        END IF;
        -- a live holder beyond the capacity (plain read: such slots are never taken, only moved and deleted)
        SET v_found = 1;
        SELECT s.slot_no, s.msg_id, s.msg_attempts, s.msg_until
          INTO v_slot, v_holder, v_h_att, v_h_until
          FROM pyqueue_limit_slot s
         WHERE s.queue_name = in_queue AND s.p_kind = in_kind AND s.slot_no > v_cap
           AND s.msg_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM pyqueue_message m
                        WHERE m.id = s.msg_id AND m.queue_name = s.queue_name
                          AND ((m.attempts = s.msg_attempts
                                AND m.reserve_token IS NOT NULL AND GREATEST(m.scheduled_at, s.msg_until) > in_now)
                               OR (m.attempts = s.msg_attempts - 1 AND s.msg_until > in_now)))
         ORDER BY s.slot_no
         LIMIT 1;
        IF v_found = 0 OR v_moves >= 10000 THEN
            UPDATE pyqueue_limit_slot s
               SET s.msg_id = in_id, s.msg_attempts = in_attempts, s.msg_until = in_until
             WHERE s.queue_name = in_queue AND s.p_kind = in_kind
               AND s.slot_no <= v_cap
               AND EXISTS (SELECT 1 FROM pyqueue_limit l
                            WHERE l.queue_name = in_queue AND l.p_kind = in_kind AND l.capacity = v_cap)
               AND (s.msg_id IS NULL
                    OR NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                    WHERE m.id = s.msg_id AND m.queue_name = s.queue_name
                                      AND ((m.attempts = s.msg_attempts
                                            AND m.reserve_token IS NOT NULL AND GREATEST(m.scheduled_at, s.msg_until) > in_now)
                                           OR (m.attempts = s.msg_attempts - 1 AND s.msg_until > in_now))))
             ORDER BY s.slot_no
             LIMIT 1;
            SET out_ok = ROW_COUNT();
            LEAVE slots;
        END IF;
        -- move that holder into a free slot within the capacity; none free: the kind is full
        UPDATE pyqueue_limit_slot s
           SET s.msg_id = v_holder, s.msg_attempts = v_h_att, s.msg_until = v_h_until
         WHERE s.queue_name = in_queue AND s.p_kind = in_kind
           AND s.slot_no <= v_cap
           AND EXISTS (SELECT 1 FROM pyqueue_limit l
                        WHERE l.queue_name = in_queue AND l.p_kind = in_kind AND l.capacity = v_cap)
           AND (s.msg_id IS NULL
                OR NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                WHERE m.id = s.msg_id AND m.queue_name = s.queue_name
                                  AND ((m.attempts = s.msg_attempts
                                        AND m.reserve_token IS NOT NULL AND GREATEST(m.scheduled_at, s.msg_until) > in_now)
                                       OR (m.attempts = s.msg_attempts - 1 AND s.msg_until > in_now))))
         ORDER BY s.slot_no
         LIMIT 1;
        IF ROW_COUNT() = 0 THEN LEAVE slots; END IF;
        DELETE FROM pyqueue_limit_slot
         WHERE queue_name = in_queue AND p_kind = in_kind AND slot_no = v_slot
           AND msg_id = v_holder AND msg_attempts = v_h_att;
        SET v_moves = v_moves + 1;
      END;
      IF v_retry = 0 AND v_tries > 10000 THEN LEAVE slots; END IF;
    END LOOP;
END //

-- pyqueue__limit_claim: for a candidate (in_id, seen with in_attempts) of a queue with limits: out_ok = 1 when its
-- kind has no limit or a slot was taken for the delivery, 0 when the kind is full (io_full: the kinds found full in
-- this call). The slot is taken BEFORE the claim; interrupted in between or losing the race, it stays busy until its
-- timeout: too few hand-outs, never too many. Locks: as pyqueue__limit_take.
DROP PROCEDURE IF EXISTS pyqueue__limit_claim //
CREATE PROCEDURE pyqueue__limit_claim(
    IN    in_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_id       BIGINT,
    IN    in_attempts INT,
    IN    in_until    DATETIME(6),
    IN    in_now      DATETIME(6),
    INOUT io_full     LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_ok      INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    SELECT MAX(m.p_kind) INTO v_kind FROM pyqueue_message m WHERE m.id = in_id;
    SET out_ok = 1;
    IF JSON_CONTAINS(COALESCE(io_full, '[]'), JSON_QUOTE(v_kind)) THEN
        SET out_ok = 0;
    ELSEIF EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = in_queue AND l.p_kind = v_kind) THEN
        CALL pyqueue__limit_take(in_queue, v_kind, in_id, in_attempts + 1, in_until, in_now, out_ok);
        IF out_ok = 0 THEN SET io_full = JSON_ARRAY_APPEND(COALESCE(io_full, '[]'), '$', v_kind); END IF;
    END IF;
END //

-- pyqueue__rate_pick: a free unit of the rate of (in_queue, in_kind; '' = the queue-wide rate) for a reservation at
-- in_t: the least recently used slot whose time is NULL or <= in_t - in_per_us, locked FOR UPDATE SKIP LOCKED (never
-- waits: a unit another call holds counts as used) and NOT written: the caller writes in_t into it once the message is
-- claimed (one write per admitted message; a claim that fails leaves the unit as it was). out_slot: its number, NULL
-- when none is free. Locks: that slot row, until the transaction ends (one index probe of the used_at index).
DROP PROCEDURE IF EXISTS pyqueue__rate_pick //
CREATE PROCEDURE pyqueue__rate_pick(
    IN  in_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_per_us BIGINT,
    IN  in_t      DATETIME(6),
    OUT out_slot  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET out_slot = NULL;
    SET out_slot = NULL;
    SELECT s.slot_no INTO out_slot
      FROM pyqueue_rate_slot s FORCE INDEX (pyqueue_rate_slot_used_idx)
     WHERE s.queue_name = in_queue AND s.p_kind = in_kind
       AND (s.used_at IS NULL OR s.used_at <= in_t - INTERVAL in_per_us MICROSECOND)
     ORDER BY s.used_at
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
END //

-- pyqueue__rate_free_at: when the rate of (in_queue, in_kind; '' = queue-wide) next has a free unit, as seen at in_now:
-- NULL when a unit is free at in_now (or there is no such rate), else the earliest slot time + per. Plain read.
DROP PROCEDURE IF EXISTS pyqueue__rate_free_at //
CREATE PROCEDURE pyqueue__rate_free_at(
    IN  in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_now   DATETIME(6),
    OUT out_at   DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    SELECT IF(SUM(s.used_at IS NULL OR s.used_at <= in_now - INTERVAL r.per_us MICROSECOND) > 0, NULL,
              MIN(s.used_at) + INTERVAL MAX(r.per_us) MICROSECOND)
      INTO out_at
      FROM pyqueue_rate r
      JOIN pyqueue_rate_slot s ON s.queue_name = r.queue_name AND s.p_kind = r.p_kind
     WHERE r.queue_name = in_queue AND r.p_kind = in_kind;
END //

-- ---- for schedules ----

-- pyqueue__cron_field: the bit mask (bit v set = value v matches) of one cron field: '*', 'a', 'a-b', with '/step'
-- after '*', 'a' or 'a-b', and comma lists of those. Raises invalid_argument naming the field. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__cron_field //
CREATE PROCEDURE pyqueue__cron_field(
    IN  in_field LONGTEXT    CHARACTER SET utf8mb4,
    IN  in_name  VARCHAR(16) CHARACTER SET utf8mb4,
    IN  in_min   INT,
    IN  in_max   INT,
    OUT out_mask BIGINT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_rest, v_part, v_range LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_lo, v_hi, v_step INT;
    SET out_mask = 0, v_rest = in_field;
    parts: LOOP
        SET v_part = SUBSTRING_INDEX(v_rest, ',', 1);
        IF NOT (v_part REGEXP '^([*]|[0-9]{1,2}(-[0-9]{1,2})?)(/[0-9]{1,2})?\\z') THEN
            CALL pyqueue__raise('invalid_argument',
                CONCAT('cron ', in_name, ' field "', LEFT(in_field, 30), '" is not *, n, a-b, */s, a/s or a-b/s'));
        END IF;
        SET v_range = SUBSTRING_INDEX(v_part, '/', 1);
        SET v_step = IF(LOCATE('/', v_part) > 0, CAST(SUBSTRING_INDEX(v_part, '/', -1) AS UNSIGNED), 1);
        IF v_range = '*' THEN
            SET v_lo = in_min, v_hi = in_max;
        ELSE
            SET v_lo = CAST(SUBSTRING_INDEX(v_range, '-', 1) AS UNSIGNED);
            SET v_hi = IF(LOCATE('-', v_range) > 0, CAST(SUBSTRING_INDEX(v_range, '-', -1) AS UNSIGNED),
                          IF(LOCATE('/', v_part) > 0, in_max, v_lo));
        END IF;
        IF v_lo < in_min OR v_hi > in_max OR v_lo > v_hi OR v_step < 1 THEN
            CALL pyqueue__raise('invalid_argument',
                CONCAT('cron ', in_name, ' field "', LEFT(in_field, 30), '" is out of range ', in_min, '-', in_max));
        END IF;
        WHILE v_lo <= v_hi DO
            SET out_mask = out_mask | (1 << v_lo);
            SET v_lo = v_lo + v_step;
        END WHILE;
        IF LOCATE(',', v_rest) = 0 THEN LEAVE parts; END IF;
        SET v_rest = SUBSTRING(v_rest, LOCATE(',', v_rest) + 1);
    END LOOP;
END //

-- pyqueue__cron_next: the first minute after in_after (UTC) matching the 5-field cron expression (day-of-week 0-7, 0
-- and 7 Sunday; two restricted day fields match either, as Vixie cron), found with set operations: the first matching
-- day of the next 8 years, then its first matching minute. invalid_argument for a malformed expression or one that
-- never matches. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__cron_next //
CREATE PROCEDURE pyqueue__cron_next(
    IN  in_cron  LONGTEXT CHARACTER SET utf8mb4,
    IN  in_after DATETIME(6),
    OUT out_next DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    DECLARE v_cron LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_min, v_hour, v_dom, v_mon, v_dow BIGINT;
    DECLARE v_or, v_mod, v_first INT;
    DECLARE v_t DATETIME;
    DECLARE v_today, v_day DATE;
    IF in_cron IS NULL THEN CALL pyqueue__raise('invalid_argument', 'cron must not be NULL'); END IF;
    SET v_cron = REGEXP_REPLACE(TRIM(in_cron), ' +', ' ');
    IF CHAR_LENGTH(v_cron) - CHAR_LENGTH(REPLACE(v_cron, ' ', '')) <> 4 THEN
        CALL pyqueue__raise('invalid_argument',
            'cron must have 5 fields (minute hour day-of-month month day-of-week)');
    END IF;
    CALL pyqueue__cron_field(SUBSTRING_INDEX(v_cron, ' ', 1), 'minute', 0, 59, v_min);
    CALL pyqueue__cron_field(SUBSTRING_INDEX(SUBSTRING_INDEX(v_cron, ' ', 2), ' ', -1), 'hour', 0, 23, v_hour);
    CALL pyqueue__cron_field(SUBSTRING_INDEX(SUBSTRING_INDEX(v_cron, ' ', 3), ' ', -1), 'day-of-month', 1, 31, v_dom);
    CALL pyqueue__cron_field(SUBSTRING_INDEX(SUBSTRING_INDEX(v_cron, ' ', 4), ' ', -1), 'month', 1, 12, v_mon);
    CALL pyqueue__cron_field(SUBSTRING_INDEX(v_cron, ' ', -1), 'day-of-week', 0, 7, v_dow);
    IF v_dow & 128 <> 0 THEN SET v_dow = (v_dow | 1) & 127; END IF;
    SET v_or = LEFT(SUBSTRING_INDEX(SUBSTRING_INDEX(v_cron, ' ', 3), ' ', -1), 1) <> '*'
               AND LEFT(SUBSTRING_INDEX(v_cron, ' ', -1), 1) <> '*';
    SET v_t = CAST(DATE_FORMAT(in_after, '%Y-%m-%d %H:%i:00') AS DATETIME) + INTERVAL 1 MINUTE;
    SET v_today = DATE(v_t), v_mod = HOUR(v_t) * 60 + MINUTE(v_t);
    SELECT MIN(days.d) INTO v_day
      FROM (SELECT v_today + INTERVAL (a.n + 10 * b.n + 100 * c.n + 1000 * e.n) DAY AS d
              FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                    UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) a,
                   (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                    UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) b,
                   (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                    UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) c,
                   (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2) e
             WHERE a.n + 10 * b.n + 100 * c.n + 1000 * e.n <= 366 * 8) AS days
     WHERE (v_mon >> MONTH(days.d)) & 1 = 1
       AND IF(v_or,
              (v_dom >> DAYOFMONTH(days.d)) & 1 = 1 OR (v_dow >> (DAYOFWEEK(days.d) - 1)) & 1 = 1,
              (v_dom >> DAYOFMONTH(days.d)) & 1 = 1 AND (v_dow >> (DAYOFWEEK(days.d) - 1)) & 1 = 1)
       AND (days.d > v_today
            OR EXISTS (SELECT 1
                         FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
                               UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
                               UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
                               UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15
                               UNION ALL SELECT 16 UNION ALL SELECT 17 UNION ALL SELECT 18 UNION ALL SELECT 19
                               UNION ALL SELECT 20 UNION ALL SELECT 21 UNION ALL SELECT 22 UNION ALL SELECT 23) h,
                              (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                               UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) m1,
                              (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
                               UNION ALL SELECT 5) m10
                        WHERE (v_hour >> h.n) & 1 = 1 AND (v_min >> (m1.n + 10 * m10.n)) & 1 = 1
                          AND h.n * 60 + m1.n + 10 * m10.n >= v_mod));
    IF v_day IS NULL THEN
        CALL pyqueue__raise('invalid_argument', CONCAT('cron "', LEFT(in_cron, 40), '" matches no day in the next 8 years'));
    END IF;
    SELECT MIN(h.n * 60 + m1.n + 10 * m10.n) INTO v_first
      FROM (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3
            UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7
            UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11
            UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15
            UNION ALL SELECT 16 UNION ALL SELECT 17 UNION ALL SELECT 18 UNION ALL SELECT 19
            UNION ALL SELECT 20 UNION ALL SELECT 21 UNION ALL SELECT 22 UNION ALL SELECT 23) h,
           (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
            UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9) m1,
           (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
            UNION ALL SELECT 5) m10
     WHERE (v_hour >> h.n) & 1 = 1 AND (v_min >> (m1.n + 10 * m10.n)) & 1 = 1
       AND (v_day > v_today OR h.n * 60 + m1.n + 10 * m10.n >= v_mod);
    SET out_next = CAST(v_day AS DATETIME(6)) + INTERVAL v_first MINUTE;
END //

-- pyqueue__schedule_after: the next occurrence of a schedule after in_after: every_s: the next multiple of every_s
-- seconds since 1970-01-01 UTC (integer division, DIV: a '/' would round to the caller's div_precision_increment);
-- cron: pyqueue__cron_next. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__schedule_after //
CREATE PROCEDURE pyqueue__schedule_after(
    IN  in_every_s BIGINT,
    IN  in_cron    LONGTEXT CHARACTER SET utf8mb4,
    IN  in_after   DATETIME(6),
    OUT out_next   DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    IF in_every_s IS NOT NULL THEN
        SET out_next = CAST('1970-01-01 00:00:00' AS DATETIME(6))
            + INTERVAL ((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', in_after) DIV (in_every_s * 1000000) + 1)
                        * in_every_s) SECOND;
    ELSE
        CALL pyqueue__cron_next(in_cron, in_after, out_next);
    END IF;
END //

-- pyqueue__schedule_next: called by queue_commit before its DELETE. When the message is the pending occurrence of a
-- schedule (key = p_key @ next_at), one conditional UPDATE advances next_at (one of two racing calls wins) and the
-- winner pushes the next occurrence (dedup absorbs a repeat). If the DELETE then fails or never runs, the old
-- occurrence comes back and its later commit pushes nothing: no stall, no duplicate.
-- Locks: the schedule row, then the new occurrence, each for one statement.
DROP PROCEDURE IF EXISTS pyqueue__schedule_next //
CREATE PROCEDURE pyqueue__schedule_next(
    IN in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_base VARCHAR(234) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_at, v_next, v_now DATETIME(6);
    DECLARE v_every BIGINT;
    DECLARE v_cron VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_payload LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_found INT DEFAULT 1;
    IF CHAR_LENGTH(in_key) >= 22
       AND RIGHT(in_key, 21) REGEXP '^@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\\z' THEN
        SET v_base = LEFT(in_key, CHAR_LENGTH(in_key) - 21);
        SET v_at = STR_TO_DATE(SUBSTRING(RIGHT(in_key, 21), 2, 19), '%Y-%m-%dT%H:%i:%s');
        BEGIN
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
            SELECT s.every_s, s.cron, s.payload INTO v_every, v_cron, v_payload
              FROM pyqueue_schedule s
             WHERE s.queue_name = in_queue AND s.p_key = v_base AND s.p_kind = in_kind
               AND s.next_at = v_at;
        END;
        IF v_found = 1 THEN
            SET v_now = UTC_TIMESTAMP(6);
            CALL pyqueue__schedule_after(v_every, v_cron, GREATEST(v_at, v_now), v_next);
            UPDATE pyqueue_schedule SET next_at = v_next
             WHERE queue_name = in_queue AND p_key = v_base AND p_kind = in_kind AND next_at = v_at;
            IF ROW_COUNT() = 1 THEN
                INSERT IGNORE INTO pyqueue_message
                       (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                        scheduled_at_initially, created_at, attempts)
                VALUES (in_queue, CONCAT(v_base, '@', DATE_FORMAT(v_next, '%Y-%m-%dT%H:%i:%sZ')), in_kind,
                        v_payload, 0, v_next, v_next, v_now, 0);
            END IF;
        END IF;
    END IF;
END //

-- pyqueue__schedule: creates or replaces a schedule and pushes its first occurrence (the next after now); the
-- replaced schedule's pending occurrence goes unless reserved. Result: one row, next_at. Interrupted, the schedule
-- may lack a pending occurrence until called again.
-- Locks: the schedule row, the old and new occurrence, a shared lock on the queue row, each for one statement.
DROP PROCEDURE IF EXISTS pyqueue__schedule //
CREATE PROCEDURE pyqueue__schedule(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_every_s BIGINT,
    IN in_cron    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(234) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now, v_next, v_old DATETIME(6);
    DECLARE v_oldkey VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_oldid BIGINT;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_key', in_key, 234);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__schedule_after(in_every_s, in_cron, v_now, v_next);
    SELECT MAX(s.next_at) INTO v_old FROM pyqueue_schedule s
     WHERE s.queue_name = v_queue AND s.p_key = v_key AND s.p_kind = v_kind;
    INSERT INTO pyqueue_schedule (queue_name, p_key, p_kind, payload, every_s, cron, next_at, created_at)
    VALUES (v_queue, v_key, v_kind, in_payload, in_every_s, in_cron, v_next, v_now)
    ON DUPLICATE KEY UPDATE payload = in_payload, every_s = in_every_s, cron = in_cron, next_at = v_next;
    IF v_old IS NOT NULL THEN
        SET v_oldkey = CONCAT(v_key, '@', DATE_FORMAT(v_old, '%Y-%m-%dT%H:%i:%sZ'));
        SELECT COALESCE(MAX(m.id), 0) INTO v_oldid FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_oldkey AND m.p_kind = v_kind;
        DELETE FROM pyqueue_message WHERE id = v_oldid AND reserve_token IS NULL;
    END IF;
    INSERT IGNORE INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, attempts)
    VALUES (v_queue, CONCAT(v_key, '@', DATE_FORMAT(v_next, '%Y-%m-%dT%H:%i:%sZ')), v_kind,
            in_payload, 0, v_next, v_next, v_now, 0);
    SELECT v_next AS next_at;
END //

-- ---- for groups ----
--
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
        UPDATE pyqueue_message SET scheduled_at = GREATEST(scheduled_at_initially, in_now) WHERE id = v_id;
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
            UPDATE pyqueue_message SET scheduled_at = GREATEST(scheduled_at_initially, in_now) WHERE id = v_id;
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
                UPDATE pyqueue_message SET scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999' WHERE id = v_old;
                UPDATE pyqueue_message SET scheduled_at = GREATEST(scheduled_at_initially, in_now) WHERE id = in_id;
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
    DECLARE v_pop BOOLEAN DEFAULT in_how IN ('pop', 'pop_result');
    DECLARE v_cancel BOOLEAN DEFAULT in_how IN ('cancel', 'cancel_held');
    DECLARE v_results BOOLEAN DEFAULT in_how IN ('commit_result', 'pop_result');
    IF v_cancel THEN
        SELECT MAX(q.result_retention) IS NOT NULL INTO v_results FROM pyqueue_queue q WHERE q.queue_name = in_queue;
    END IF;
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, out_done = 0, v_hist = NULL, v_duplicate = 0, v_attempts = NULL;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN IF in_own = 1 THEN ROLLBACK; END IF; IF in_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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
                                             IF(v_cancel, NULL, in_payload), v_error, v_attempts, v_progress, in_now);
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
                           scheduled_at = in_now, scheduled_at_initially = in_now, created_at = in_now,
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

-- pyqueue__groups_leave: pyqueue__group_leave for each [id, p_key, p_kind, token, group_key, result] of in_rows (the
-- result, given to 'commit_result' only, may be left out), in group_key order (two calls lock their groups in one order); out_done: how many left; out_busy: JSON array of the ids a pop
-- left alone (group row busy), NULL when none.
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
BEGIN
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

-- ---- for topics ----

-- pyqueue__raise_undecided: signals that the regular expression engine could not decide whether topic in_topic (NULL:
-- one of a batch) matches a bound pattern (warning 1139, a match limit): an error, never a silent miss.
DROP PROCEDURE IF EXISTS pyqueue__raise_undecided //
CREATE PROCEDURE pyqueue__raise_undecided(IN in_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__raise('invalid_argument',
        CONCAT('the server could not decide whether topic ', COALESCE(CONCAT('"', LEFT(in_topic, 30), '"'), 'of the batch'),
               ' matches a bound pattern'));
END //

-- pyqueue__check_topic: refuses in_value (named in_what) unless a topic (in_pattern FALSE) or a pattern: 1 to 255
-- characters, no space at either end, dot-separated non-empty words; '*' and '#' only as whole words of a pattern.
-- Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_topic //
CREATE PROCEDURE pyqueue__check_topic(
    IN in_what    VARCHAR(32) CHARACTER SET utf8mb4,
    IN in_value   LONGTEXT    CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_pattern BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    CALL pyqueue__check_name(in_what, in_value, 255);
    IF in_value LIKE ' %' THEN CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not start with a space')); END IF;
    IF in_value LIKE '.%' OR in_value LIKE '%.' OR LOCATE('..', in_value) > 0 THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must be dot-separated words, none of them empty'));
    END IF;
    IF NOT in_pattern AND (LOCATE('*', in_value) > 0 OR LOCATE('#', in_value) > 0) THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' must not hold * or # (only a pattern does)'));
    END IF;
    -- a word holding * or # next to another character of the same word
    IF in_pattern AND in_value REGEXP '[^.][*#]|[*#][^.]' THEN
        CALL pyqueue__raise('invalid_argument', CONCAT(in_what, ' may hold * or # only as a whole word'));
    END IF;
END //

-- pyqueue__topic_regex: the regular expression of the (checked) topic pattern in_pattern, matched against CONCAT('.',
-- topic) with REGEXP (ICU and PCRE alike), built so that no match backtracks more than linearly: each word is '\.'
-- plus the word with ^$|()[]{}+?\ escaped, '*' one word ('\.[^.]++', possessive); the words before the first '#' are
-- anchored at '^'; the words between two '#' (a segment of fixed length) are found at their leftmost place and kept
-- there, '(?>(?:\.[^.]++)*?<segment>(?![^.]))' (atomic: the leftmost place leaves the most room for the rest, so
-- nothing is lost by never trying another); after the last '#', any words then the last segment, anchored at '\z'
-- (not '$', which also matches before a final newline). Adjacent '#' are one. 'a.#' matches 'a', 'a.b', 'a.b.c'.
-- Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__topic_regex //
CREATE PROCEDURE pyqueue__topic_regex(
    IN  in_pattern VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_regex  VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_rest, v_word VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_seg VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT '';
    DECLARE v_dot INT;
    DECLARE v_hash BOOLEAN DEFAULT FALSE;  -- a '#' came before the segment being read
    SET out_regex = '^', v_rest = in_pattern;
    WHILE v_rest IS NOT NULL DO
        SET v_dot = LOCATE('.', v_rest);
        IF v_dot = 0 THEN
            SET v_word = v_rest, v_rest = NULL;
        ELSE
            SET v_word = LEFT(v_rest, v_dot - 1), v_rest = SUBSTRING(v_rest, v_dot + 1);
        END IF;
        -- compared as bytes: utf8mb4_bin pads with spaces
        IF CAST(v_word AS BINARY) = '#' THEN
            IF NOT v_hash THEN
                SET out_regex = CONCAT(out_regex, v_seg);
            ELSEIF v_seg <> '' THEN
                SET out_regex = CONCAT(out_regex, '(?>(?:\\.[^.]++)*?', v_seg, '(?![^.]))');
            END IF;
            SET v_hash = TRUE, v_seg = '';
        ELSE
            SET v_seg = CONCAT(v_seg,
                IF(CAST(v_word AS BINARY) = '*', '\\.[^.]++',
                   CONCAT('\\.',
                          REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(
                              v_word, '\\', '\\\\'), '^', '\\^'), '$', '\\$'), '|', '\\|'), '(', '\\('), ')', '\\)'),
                              '[', '\\['), ']', '\\]'), '{', '\\{'), '}', '\\}'), '+', '\\+'), '?', '\\?'))));
        END IF;
    END WHILE;
    SET out_regex = CONCAT(out_regex, IF(v_hash, '(?:\\.[^.]++)*', ''), v_seg, '\\z');
END //

-- ==== queues ====
-- Create a queue or change its settings, read them back, drop it, pause and resume it, count its messages.

-- queue_create: creates the queue (NULL = the default: 30 s, 10 attempts, no dead-letter queue, no history) or
-- changes an existing one's settings (NULL leaves one as it is; queue_reset_setting restores a default; paused,
-- dead_count, created_at kept). The dead-letter queue must exist and differ. No result set.
-- Locks: the queue row (a shared lock on the dead-letter queue's row), for one statement.
DROP PROCEDURE IF EXISTS queue_create //
CREATE PROCEDURE queue_create(
    IN in_queue              LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_visibility_timeout DECIMAL(20,6),
    IN in_max_attempts       DECIMAL(65,30),
    IN in_dead_letter_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_history_retention  DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_vis, v_maxres DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__check_name('queue', in_queue, 128);
    CALL pyqueue__check_duration('visibility_timeout', in_visibility_timeout, TRUE);
    CALL pyqueue__check_duration('history_retention', in_history_retention, FALSE);
    IF in_max_attempts < 1 THEN CALL pyqueue__raise('invalid_argument', 'max_attempts must be at least 1'); END IF;
    CALL pyqueue__check_int('max_attempts', in_max_attempts, 1, 2147483647);
    IF in_dead_letter_queue IS NOT NULL THEN
        CALL pyqueue__check_name('dead_letter_queue', in_dead_letter_queue, 128);
        IF in_dead_letter_queue = in_queue THEN CALL pyqueue__raise('invalid_argument', 'a queue cannot be its own dead_letter_queue'); END IF;
        CALL pyqueue__queue(in_dead_letter_queue, v_vis, v_max, v_dlq, v_paused);
    END IF;
    SET v_vis = COALESCE(in_visibility_timeout, 30);
    SET v_max = COALESCE(in_max_attempts, 10);
    -- a visibility_timeout above the queue's max_reservation (a new queue: the default, 12 hours) is refused
    SELECT COALESCE(MAX(q.max_reservation), 43200) INTO v_maxres FROM pyqueue_queue q WHERE q.queue_name = in_queue;
    IF in_visibility_timeout > v_maxres THEN
        CALL pyqueue__raise('invalid_argument',
            CONCAT('visibility_timeout is longer than the queue''s max_reservation (',
                   TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM CAST(v_maxres AS CHAR))), ' s)'));
    END IF;
    -- (max_reservation: the existing row's, for the CHECK that runs on the proposed row before the duplicate is found)
    INSERT INTO pyqueue_queue
           (queue_name, visibility_timeout, max_attempts, dead_letter_queue,
            history_retention, paused, dead_count, created_at, max_reservation)
    VALUES (in_queue, v_vis, v_max, in_dead_letter_queue, in_history_retention,
            FALSE, 0, UTC_TIMESTAMP(6), v_maxres)
    ON DUPLICATE KEY UPDATE
           visibility_timeout = COALESCE(in_visibility_timeout, visibility_timeout),
           max_attempts       = COALESCE(in_max_attempts, max_attempts),
           dead_letter_queue  = COALESCE(in_dead_letter_queue, dead_letter_queue),
           history_retention  = COALESCE(in_history_retention, history_retention);
END //

-- queue_reset_setting: puts one setting back to its default: 'visibility_timeout' (30 s), 'max_attempts' (10),
-- 'dead_letter_queue', 'history_retention' or 'result_retention' (none), 'max_reservation' (12 hours), 'max_payload'
-- (1 MiB). Refused
-- (invalid_argument) when the default visibility_timeout would be above the max_reservation, or the default
-- max_reservation below the visibility_timeout. No result set. Locks: the queue row, one statement.
DROP PROCEDURE IF EXISTS queue_reset_setting //
CREATE PROCEDURE queue_reset_setting(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_setting LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_setting VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    -- Compared as bytes: utf8mb4_bin pads with spaces, and 'max_attempts ' is no setting name.
    IF in_setting IS NULL OR CAST(in_setting AS BINARY) NOT IN ('visibility_timeout', 'max_attempts',
                                                              'dead_letter_queue', 'history_retention',
                                                              'max_reservation', 'max_payload',
                                                              'result_retention') THEN
        CALL pyqueue__raise('invalid_argument',
            'setting must be one of visibility_timeout, max_attempts, dead_letter_queue, history_retention, max_reservation, max_payload, result_retention');
    END IF;
    SET v_queue = in_queue, v_setting = in_setting;
    UPDATE pyqueue_queue
       SET visibility_timeout = IF(v_setting = 'visibility_timeout', 30, visibility_timeout),
           max_attempts       = IF(v_setting = 'max_attempts', 10, max_attempts),
           dead_letter_queue  = IF(v_setting = 'dead_letter_queue', NULL, dead_letter_queue),
           history_retention  = IF(v_setting = 'history_retention', NULL, history_retention),
           max_reservation    = IF(v_setting = 'max_reservation', 43200, max_reservation),
           max_payload        = IF(v_setting = 'max_payload', 1048576, max_payload),
           result_retention   = IF(v_setting = 'result_retention', NULL, result_retention)
     WHERE queue_name = v_queue
       AND NOT (v_setting = 'visibility_timeout' AND max_reservation < 30)
       AND NOT (v_setting = 'max_reservation' AND visibility_timeout > 43200)
       -- (kept while messages of the queue have parents or children: see queue_set_result_retention)
       AND NOT (v_setting = 'result_retention'
                AND EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name = v_queue));
    IF ROW_COUNT() = 0 AND v_setting IN ('visibility_timeout', 'max_reservation')
       AND EXISTS (SELECT 1 FROM pyqueue_queue q
                    WHERE q.queue_name = v_queue
                      AND ((v_setting = 'visibility_timeout' AND q.max_reservation < 30)
                           OR (v_setting = 'max_reservation' AND q.visibility_timeout > 43200))) THEN
        CALL pyqueue__raise('invalid_argument',
            IF(v_setting = 'visibility_timeout',
               'the default visibility_timeout (30 s) is longer than the queue''s max_reservation',
               'the default max_reservation (43200 s) is shorter than the queue''s visibility_timeout'));
    END IF;
    IF v_setting = 'result_retention'
       AND EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue AND q.result_retention IS NOT NULL)
       AND EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name = v_queue) THEN
        CALL pyqueue__raise('invalid_argument',
                            'messages of the queue have parents or children: it keeps results until they are gone');
    END IF;
END //

-- queue_settings: the settings of a queue (every queue when NULL), ordered by name: queue, visibility_timeout (s),
-- max_attempts, dead_letter_queue, history_retention (s), paused, notify_window (s), max_reservation (s),
-- max_payload (bytes), result_retention (s). Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_settings //
CREATE PROCEDURE queue_settings(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    IF in_queue IS NOT NULL THEN CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused); END IF;
    SET v_queue = in_queue;
    SELECT q.queue_name AS `queue`, q.visibility_timeout, q.max_attempts, q.dead_letter_queue,
           q.history_retention, q.paused, COALESCE(n.notify_window, 0.05) AS notify_window,
           q.max_reservation, q.max_payload, q.result_retention
      FROM pyqueue_queue q
      LEFT JOIN pyqueue_notify n ON n.queue_name = q.queue_name
     WHERE v_queue IS NULL OR q.queue_name = v_queue
     ORDER BY q.queue_name;
END //

-- queue_set_max_reservation: the longest reservation timeout a caller may ask for on the queue (reserve paths,
-- queue_extend), in seconds; NULL = the default, 12 hours (43200). Above zero, at most 100 years, and not below the
-- queue's visibility_timeout (invalid_argument). No result set. Locks: the queue row, for one statement.
DROP PROCEDURE IF EXISTS queue_set_max_reservation //
CREATE PROCEDURE queue_set_max_reservation(
    IN in_queue           LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_max_reservation DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_new DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_duration('max_reservation', in_max_reservation, TRUE);
    SET v_queue = in_queue, v_new = COALESCE(in_max_reservation, 43200);
    -- the visibility_timeout re-checked under the row lock, in the statement that sets it
    UPDATE pyqueue_queue SET max_reservation = v_new WHERE queue_name = v_queue AND visibility_timeout <= v_new;
    IF ROW_COUNT() = 0
       AND EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue AND q.visibility_timeout > v_new) THEN
        CALL pyqueue__raise('invalid_argument', 'max_reservation must not be below the queue''s visibility_timeout');
    END IF;
END //

-- queue_set_max_payload: the largest payload (bytes of its JSON text) a producer may write into the queue; NULL = the
-- default, 1048576 (1 MiB); 1 to 268435456 (256 MiB). No result set. Locks: the queue row, for one statement.
DROP PROCEDURE IF EXISTS queue_set_max_payload //
CREATE PROCEDURE queue_set_max_payload(
    IN in_queue       LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_max_payload DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_int('max_payload', in_max_payload, 1, 268435456);
    SET v_queue = in_queue;
    UPDATE pyqueue_queue SET max_payload = COALESCE(in_max_payload, 1048576) WHERE queue_name = v_queue;
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
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    IF in_retention > 315360000 THEN CALL pyqueue__raise('invalid_argument', 'result_retention must not exceed 3650 days'); END IF;
    CALL pyqueue__check_duration('result_retention', in_retention, TRUE);
    SET v_queue = in_queue;
    -- Keeping no results is refused while messages of the queue have parents or children (dependencies live in
    -- queues that keep results): one statement, whose read of pyqueue_dependency locks (a queue_push_after holds
    -- the queue row shared until it ends, so this waits for it and sees its rows).
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

-- queue_drop: deletes the queue, its messages, limits, schedules and wakeup row (ON DELETE CASCADE) in one statement;
-- refused while another queue names it as dead_letter_queue. No result set. Pushes lock the queue row before a
-- message row, as this does; a transaction that changed a message and then locks the queue row takes them the other
-- way and one of the two is a deadlock victim (1213): in autocommit mode the drop runs again (up to 10 times), inside
-- your transaction it is yours to retry.
-- Locks: the queue row, then its messages and other rows, for one statement (or until your transaction ends).
DROP PROCEDURE IF EXISTS queue_drop //
CREATE PROCEDURE queue_drop(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq, v_user VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_users, v_own, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE v_deps LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_gcl BIGINT;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    SELECT COUNT(*), MIN(q.queue_name) INTO v_users, v_user
      FROM pyqueue_queue q
     WHERE q.dead_letter_queue = v_queue;
    IF v_users > 0 THEN CALL pyqueue__raise('invalid_argument', CONCAT('queue is the dead_letter_queue of ', v_user)); END IF;
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DELETE FROM pyqueue_queue WHERE queue_name = v_queue;
        END;
    UNTIL v_retry = 0 END REPEAT;
    -- its messages' children elsewhere are cancelled, their rows as children go
    SET v_gcl = @@SESSION.group_concat_max_len, SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
    SELECT CONCAT('[', GROUP_CONCAT(DISTINCT JSON_ARRAY(d.p_key, d.p_kind) SEPARATOR ','), ']') INTO v_deps
      FROM pyqueue_dependency d WHERE d.queue_name = v_queue;
    SET SESSION group_concat_max_len = v_gcl;
    CALL pyqueue__deps_left_many(v_queue, v_deps, FALSE, 'was dropped with its queue');
END //

-- queue_pause: pop and reserve hand out nothing (an empty result set) until queue_resume; pushes, commits, rollbacks,
-- extends and moves still work. No result set. Locks: as pyqueue__set_paused.
DROP PROCEDURE IF EXISTS queue_pause //
CREATE PROCEDURE queue_pause(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__set_paused(in_queue, TRUE);
END //

-- queue_resume: undoes queue_pause. No result set. Locks: as pyqueue__set_paused.
DROP PROCEDURE IF EXISTS queue_resume //
CREATE PROCEDURE queue_resume(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    CALL pyqueue__set_paused(in_queue, FALSE);
END //

-- queue_stats: one row per queue (every queue by name when in_queue is NULL): ready, `delayed`, reserved (unexpired),
-- dead (dead-lettered from here so far), oldest_ready_age_s (DOUBLE, NULL when none), paused. Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_stats //
CREATE PROCEDURE queue_stats(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    IF in_queue IS NOT NULL THEN CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused); END IF;
    SET v_now = UTC_TIMESTAMP(6), v_queue = in_queue;
    SELECT q.queue_name AS `queue`,
           COUNT(CASE WHEN m.scheduled_at <= v_now THEN 1 END) AS ready,
           COUNT(CASE WHEN m.scheduled_at > v_now AND m.reserve_token IS NULL THEN 1 END) AS `delayed`,
           COUNT(CASE WHEN m.scheduled_at > v_now AND m.reserve_token IS NOT NULL THEN 1 END) AS reserved,
           q.dead_count AS dead,
           TIMESTAMPDIFF(MICROSECOND,
                         MIN(CASE WHEN m.scheduled_at <= v_now THEN m.scheduled_at END),
                         v_now) / 1e6 AS oldest_ready_age_s,
           q.paused AS paused
      FROM pyqueue_queue q
      LEFT JOIN pyqueue_message m ON m.queue_name = q.queue_name
     WHERE v_queue IS NULL OR q.queue_name = v_queue
     GROUP BY q.queue_name, q.dead_count, q.paused
     ORDER BY q.queue_name;
END //

-- ==== produce ====
-- Put messages in: one, many in one statement, or one that replaces a waiting message with the same key (debounce);
-- one or many into FIFO groups, each group's messages delivered one at a time. Each wakes the queue's listeners when
-- it makes a message ready now. Each push but queue_push_replace has a sibling *_with_headers that also writes the
-- message's headers (the plain routine never reads them, so a push without headers costs what it did).

-- queue_push: inserts one message. Result: one row, inserted = 1, or 0 when a live message with the same (queue,
-- p_key, p_kind) exists (dedup: it stays untouched). run_at NULL = now (UTC), priority NULL = 0. Every argument is
-- checked before the INSERT IGNORE (which would downgrade bad values to warnings); the foreign key it can still
-- swallow (a queue dropped meanwhile) is checked after.
-- Locks: a shared lock on the queue row, then the new row (or a shared lock on the duplicate), for one statement; in
-- autocommit mode a deadlock victim runs again.
DROP PROCEDURE IF EXISTS queue_push //
CREATE PROCEDURE queue_push(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_inserted, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_own, v_tries INT DEFAULT 0;
    DECLARE v_max_payload BIGINT;
    -- The common case (every argument plainly valid) in one expression; anything else through the full checks
    IF (    CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
            AND CHAR_LENGTH(in_key) BETWEEN 1 AND 255 AND NOT (in_key LIKE '% ')
            AND NOT (in_key LIKE '%@____-__-__T__:__:__Z')
            AND CHAR_LENGTH(in_kind) BETWEEN 1 AND 128 AND NOT (in_kind LIKE '% ')
            AND LOCATE(X'ED', CAST(CONCAT(in_queue, in_key, in_kind, in_payload) AS BINARY)) = 0
            AND JSON_VALID(in_payload)
            AND (in_run_at IS NULL OR (in_run_at + INTERVAL 0 SECOND IS NOT NULL AND in_run_at >= '1000-01-01'))
            AND (in_priority IS NULL
                 OR (in_priority = TRUNCATE(in_priority, 0) AND in_priority BETWEEN -2147483648 AND 2147483647))
       ) IS NOT TRUE THEN
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
        CALL pyqueue__check_key(in_key);
        CALL pyqueue__check_name('p_kind', in_kind, 128);
        CALL pyqueue__check_payload(in_payload);
        IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
            CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
        END IF;
        CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    END IF;
    SET v_queue = in_queue, v_now = UTC_TIMESTAMP(6), v_at = COALESCE(in_run_at, v_now);
    -- the queue's max_payload, one primary-key read; NULL: no such queue (refused here, not left to the foreign key,
    -- which a session with foreign_key_checks = 0 would not check)
    SELECT MAX(q.max_payload) INTO v_max_payload FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF v_max_payload IS NULL THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
    /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
    IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts)
            VALUES (v_queue, in_key, in_kind, in_payload, COALESCE(in_priority, 0), v_at,
                    v_at, v_now, 0);
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_inserted = 0 AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- queue_push_with_headers: queue_push with headers in_headers (pyqueue__check_headers: a JSON object of at most
-- 8192 bytes; NULL or the JSON null = none), checked before anything is written. Dedup as queue_push: a duplicate
-- changes nothing, its headers included. queue_push itself never reads headers (its cost is unchanged).
-- Locks: as queue_push.
DROP PROCEDURE IF EXISTS queue_push_with_headers //
CREATE PROCEDURE queue_push_with_headers(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_inserted, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_own, v_tries INT DEFAULT 0;
    DECLARE v_max_payload BIGINT;
    -- The common case (every argument plainly valid) in one expression; anything else through the full checks
    IF (    CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
            AND CHAR_LENGTH(in_key) BETWEEN 1 AND 255 AND NOT (in_key LIKE '% ')
            AND NOT (in_key LIKE '%@____-__-__T__:__:__Z')
            AND CHAR_LENGTH(in_kind) BETWEEN 1 AND 128 AND NOT (in_kind LIKE '% ')
            AND LOCATE(X'ED', CAST(CONCAT(in_queue, in_key, in_kind, in_payload) AS BINARY)) = 0
            AND JSON_VALID(in_payload)
            AND (in_run_at IS NULL OR (in_run_at + INTERVAL 0 SECOND IS NOT NULL AND in_run_at >= '1000-01-01'))
            AND (in_priority IS NULL
                 OR (in_priority = TRUNCATE(in_priority, 0) AND in_priority BETWEEN -2147483648 AND 2147483647))
       ) IS NOT TRUE THEN
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
        CALL pyqueue__check_key(in_key);
        CALL pyqueue__check_name('p_kind', in_kind, 128);
        CALL pyqueue__check_payload(in_payload);
        IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
            CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
        END IF;
        CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    END IF;
    CALL pyqueue__check_headers(in_headers, v_headers);
    SET v_queue = in_queue, v_now = UTC_TIMESTAMP(6), v_at = COALESCE(in_run_at, v_now);
    -- the queue's max_payload, one primary-key read; NULL: no such queue (refused here, not left to the foreign key,
    -- which a session with foreign_key_checks = 0 would not check)
    SELECT MAX(q.max_payload) INTO v_max_payload FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF v_max_payload IS NULL THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
    /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
    IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts, headers)
            VALUES (v_queue, in_key, in_kind, in_payload, COALESCE(in_priority, 0), v_at,
                    v_at, v_now, 0, v_headers);
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_inserted = 0 AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- pyqueue__check_messages: the checks of the batch pushes on their JSON array: every element an object with p_key and
-- p_kind strings as queue_push takes them, a payload (any JSON, null too), run_at missing, null or 'YYYY-MM-DD
-- HH:MM:SS[.ffffff]', priority missing, null or a whole number in INT's range, and per in_member a "group" ('group',
-- as queue_push_grouped) or a "topic" ('topic', pyqueue__check_topic) missing, null or valid. invalid_argument names
-- the first bad element (1-based). Takes no locks. JSON_TABLE reads each field once; the checks are the expressions
-- the inserts use ("IS NOT TRUE": a NULL verdict is bad).
DROP PROCEDURE IF EXISTS pyqueue__check_messages //
CREATE PROCEDURE pyqueue__check_messages(
    IN in_messages LONGTEXT CHARACTER SET utf8mb4,
    IN in_member   VARCHAR(5) CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_bad BIGINT;
    IF in_messages IS NULL THEN CALL pyqueue__raise('invalid_argument', 'messages must not be NULL'); END IF;
    IF NOT JSON_VALID(in_messages) THEN CALL pyqueue__raise('invalid_argument', 'messages must be a JSON array of objects'); END IF;
    IF JSON_TYPE(in_messages) <> 'ARRAY' THEN CALL pyqueue__raise('invalid_argument', 'messages must be a JSON array of objects'); END IF;
    IF LOCATE(X'ED', CAST(in_messages AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'messages', in_messages); END IF;
    SELECT MIN(b.ord) INTO v_bad
      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
               ord         FOR ORDINALITY,
               g           JSON PATH '$.group',
               t           JSON PATH '$.topic',
               k           JSON PATH '$.p_key',
               kd          JSON PATH '$.p_kind',
               has_payload INT EXISTS PATH '$.payload',
               run_at      JSON PATH '$.run_at',
               priority    JSON PATH '$.priority')) AS b
     WHERE (    -- (an element that is not an object has no '$.p_key' string: refused below, as is;
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
            AND JSON_TYPE(b.k) = 'STRING'
            AND CHAR_LENGTH(JSON_UNQUOTE(b.k)) BETWEEN 1 AND 255
            AND NOT (JSON_UNQUOTE(b.k) LIKE '% ')
            AND NOT (JSON_UNQUOTE(b.k) LIKE '%@____-__-__T__:__:__Z')  -- a schedule's occurrence
            AND JSON_TYPE(b.kd) = 'STRING'
            AND CHAR_LENGTH(JSON_UNQUOTE(b.kd)) BETWEEN 1 AND 128
            AND NOT (JSON_UNQUOTE(b.kd) LIKE '% ')
            AND b.has_payload = 1
            AND (   COALESCE(JSON_TYPE(b.run_at), 'NULL') = 'NULL'
                 OR (    JSON_TYPE(b.run_at) = 'STRING'
                     AND JSON_UNQUOTE(b.run_at)
                         REGEXP '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?\\z'
                     AND CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) + INTERVAL 0 SECOND >= '1000-01-01'
                     AND DATE_FORMAT(CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)), '%Y-%m-%d %H:%i:%s')
                         = LEFT(JSON_UNQUOTE(b.run_at), 19)))
            AND (   COALESCE(JSON_TYPE(b.priority), 'NULL') = 'NULL'
                 OR (    JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                     AND CAST(b.priority AS CHAR) REGEXP '^-?[0-9]{1,10}\\z'
                     AND CAST(CAST(b.priority AS CHAR) AS DECIMAL(65,0)) BETWEEN -2147483648 AND 2147483647))
           ) IS NOT TRUE;
    IF v_bad IS NOT NULL
       AND JSON_UNQUOTE(JSON_EXTRACT(in_messages, CONCAT('$[', v_bad - 1, '].p_key'))) LIKE '%@____-__-__T__:__:__Z' THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('element ', v_bad, ' of the batch: p_key ending in @<UTC time> is reserved for schedules'));
    END IF;
    IF v_bad IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('element ', v_bad, ' of the batch: bad ', COALESCE(CONCAT(in_member, '/'), ''),
                                   'p_key/p_kind, missing payload or bad run_at/priority'));
    END IF;
END //

-- pyqueue__check_batch_size: refuses a batch (in_messages, checked by pyqueue__check_messages) holding a payload longer
-- than the max_payload of in_queue (NULL: of the queue each element's topic reaches, in_topics TRUE). A batch whose
-- whole text is not longer than the smallest max_payload concerned cannot hold one, and costs one comparison after
-- one read; otherwise each payload is measured as stored (LENGTH of JSON_EXTRACT(payload, '$')). Plain reads.
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

-- pyqueue__check_batch_headers: the checks of the batch *_with_headers pushes on the member "headers" of each element
-- of in_messages (checked by pyqueue__check_messages): missing or null (none) or a JSON object of at most 8192 bytes as
-- stored (LENGTH of JSON_EXTRACT(headers, '$')); invalid_argument names the first bad element (1-based). A batch whose
-- text holds no "headers" costs one LOCATE. Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__check_batch_headers //
CREATE PROCEDURE pyqueue__check_batch_headers(IN in_messages LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_bad, v_bytes BIGINT;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_bad = NULL;
    IF LOCATE('"headers"', in_messages) > 0 THEN
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
    END IF;
END //

-- queue_push_batch: inserts many messages in one statement. MySQL: ONE JSON array of objects {"p_key", "p_kind",
-- "payload", "run_at", "priority"} as second argument, the other four NULL; members as queue_push takes them (run_at
-- 'YYYY-MM-DD HH:MM:SS[.ffffff]' UTC, missing or null = now; priority missing or null = 0). An invalid element
-- refuses the batch before anything is written. Result: one row, inserted = how many were new (duplicates, also
-- within the batch, skipped; the first wins).
-- Locks: the new rows (shared locks on duplicates), a shared lock on the queue row, for one statement (with
-- innodb_autoinc_lock_mode = 1, MariaDB's default, the AUTO-INC lock too); a deadlock victim runs again in autocommit
-- mode.
DROP PROCEDURE IF EXISTS queue_push_batch //
CREATE PROCEDURE queue_push_batch(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            'MySQL takes one JSON array of messages as 2nd argument; the other 4 must be NULL');
    END IF;
    CALL pyqueue__check_messages(in_messages, NULL);
    CALL pyqueue__check_batch_size(v_queue, in_messages);
    SET v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts)
            SELECT in_queue,
                   JSON_UNQUOTE(b.k),
                   JSON_UNQUOTE(b.kd),
                   JSON_EXTRACT(b.payload, '$'),  -- normalised as JSON_EXTRACT of the element would
                   CASE WHEN JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        THEN CAST(CAST(b.priority AS CHAR) AS SIGNED) ELSE 0 END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   v_now,
                   0
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       k        JSON PATH '$.p_key',
                       kd       JSON PATH '$.p_kind',
                       payload  JSON PATH '$.payload',
                       run_at   JSON PATH '$.run_at',
                       priority JSON PATH '$.priority')) AS b;
            -- (no ORDER BY: JSON_TABLE yields the elements in array order, which gives the ids in batch
            -- order and keeps the first of a repeated key; sorting the rows, payloads included, wrote a
            -- temporary table to disk on every call, a sixth of its time)
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_inserted = 0 AND JSON_LENGTH(in_messages) > 0
       AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- queue_push_batch_with_headers: queue_push_batch whose elements may carry a member "headers" (missing or null =
-- none, else a JSON object of at most 8192 bytes: pyqueue__check_batch_headers). MySQL: the headers are members of
-- the messages, so in_headers (PostgreSQL's headers array) must be NULL too. Result and locks: as queue_push_batch.
DROP PROCEDURE IF EXISTS queue_push_batch_with_headers //
CREATE PROCEDURE queue_push_batch_with_headers(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4,
    IN in_headers    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL OR in_headers IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            'MySQL: one JSON array of messages (headers a member of each) as 2nd argument, the other 5 NULL');
    END IF;
    CALL pyqueue__check_messages(in_messages, NULL);
    CALL pyqueue__check_batch_headers(in_messages);
    CALL pyqueue__check_batch_size(v_queue, in_messages);
    SET v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts, headers)
            SELECT in_queue,
                   JSON_UNQUOTE(b.k),
                   JSON_UNQUOTE(b.kd),
                   JSON_EXTRACT(b.payload, '$'),  -- normalised as JSON_EXTRACT of the element would
                   CASE WHEN JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        THEN CAST(CAST(b.priority AS CHAR) AS SIGNED) ELSE 0 END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   v_now,
                   0,
                   CASE WHEN JSON_TYPE(b.h) = 'OBJECT' THEN JSON_EXTRACT(b.h, '$') END
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       k        JSON PATH '$.p_key',
                       kd       JSON PATH '$.p_kind',
                       payload  JSON PATH '$.payload',
                       run_at   JSON PATH '$.run_at',
                       priority JSON PATH '$.priority',
                       h        JSON PATH '$.headers')) AS b;
            -- (no ORDER BY: JSON_TABLE yields the elements in array order, which gives the ids in batch
            -- order and keeps the first of a repeated key; sorting the rows, payloads included, wrote a
            -- temporary table to disk on every call, a sixth of its time)
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_inserted = 0 AND JSON_LENGTH(in_messages) > 0
       AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- queue_push_replace: queue_push that replaces instead of skipping (debounce). Result: one row, outcome =
-- 'inserted' (no live message had the key: pushed), 'replaced' (a waiting one, ready, delayed or expired, got
-- the new payload, run_at and priority, attempts 0, no reservation; created_at, id and its FIFO group and place kept)
-- or 'reserved' (held by a live reservation: left alone, nothing pushed). Each step one statement reading current
-- data: INSERT IGNORE; else UPDATE by the key unless reserved; else a locking read (held ->
-- 'reserved', gone -> again from the insert, same values -> 'replaced'). Row counts are only compared with 0,
-- so CLIENT_FOUND_ROWS (JDBC's default) gives the same answers. A dead letter (a message a dead-lettering put in its
-- queue: dead_from set) is never replaced: the UPDATE passes it by and the locking read refuses the call
-- (invalid_argument), the letter left as it was (as queue_cancel: only an admin's queue_remove or queue_redrive ends
-- one).
-- Locks: the message row and a shared lock on the queue row, each for one statement.
DROP PROCEDURE IF EXISTS queue_push_replace //
CREATE PROCEDURE queue_push_replace(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_priority, v_live, v_held, v_dead INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_outcome VARCHAR(16) CHARACTER SET utf8mb4;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_key(in_key);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
    END IF;
    CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__check_size(v_queue, LENGTH(in_payload));
    SET v_at = COALESCE(in_run_at, v_now), v_priority = COALESCE(in_priority, 0);
    attempt: LOOP
        INSERT IGNORE INTO pyqueue_message
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, attempts)
        VALUES (v_queue, v_key, v_kind, in_payload, v_priority, v_at, v_at, v_now, 0);
        IF ROW_COUNT() > 0 THEN
            SET v_outcome = 'inserted';
            LEAVE attempt;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
            CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
        END IF;
        UPDATE pyqueue_message FORCE INDEX (pyqueue_message_key_uk)
           SET payload = in_payload, priority = v_priority,
               -- a blocked one stays blocked (its place moves to v_at); read before it changes
               scheduled_at = IF(scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999', scheduled_at, v_at),
               scheduled_at_initially = v_at,
               attempts = 0, reserved_by = NULL, reserve_token = NULL
         WHERE queue_name = v_queue AND p_key = v_key AND p_kind = v_kind
           AND (reserve_token IS NULL OR scheduled_at <= v_now) AND dead_from IS NULL;
        IF ROW_COUNT() > 0 THEN
            SET v_outcome = 'replaced';
            LEAVE attempt;
        END IF;
        SELECT COUNT(*), COALESCE(SUM(m.reserve_token IS NOT NULL AND m.scheduled_at > v_now), 0),
               COALESCE(SUM(m.dead_from IS NOT NULL), 0)
          INTO v_live, v_held, v_dead
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
          LOCK IN SHARE MODE;
        IF v_dead > 0 THEN
            CALL pyqueue__raise('invalid_argument', 'a dead letter is not replaced; an admin removes it with queue_remove');
        END IF;
        IF v_live > 0 THEN
            SET v_outcome = IF(v_held > 0, 'reserved', 'replaced');
            LEAVE attempt;
        END IF;
    END LOOP;
    SELECT v_outcome AS outcome;
END //

-- queue_push_grouped: queue_push for a message of FIFO group in_group (a name as p_key): a group's messages are
-- delivered one at a time in run_at then push order, each blocked (state 'delayed', scheduled_at '9999-12-31
-- 23:59:59.999999') until the one before it left the queue. Result: one row, pushed = 1 or 0 (dedup as queue_push).
-- The message becomes head of a group without one; it displaces a head never delivered that runs later and can be
-- locked at once (that head is blocked again); otherwise it is blocked. Steps: create or lock the group row, the
-- head's row with SKIP LOCKED when it might be displaced, the INSERT IGNORE, the head's change; in autocommit mode in
-- a transaction of its own, run again on a deadlock.
-- Locks: the group row, the head's row, the new row and a shared lock on the queue row, until the transaction ends.
DROP PROCEDURE IF EXISTS queue_push_grouped //
CREATE PROCEDURE queue_push_grouped(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq, v_head_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_group, v_key, v_head_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_found, v_retry, v_gone INT;
    DECLARE v_paused, v_is_head BOOLEAN;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_head_id BIGINT;
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('group', in_group, 255);
    CALL pyqueue__check_key(in_key);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
    END IF;
    CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    SET v_queue = in_queue, v_group = in_group, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__check_size(v_queue, LENGTH(in_payload));
    SET v_at = COALESCE(in_run_at, v_now);
    -- autocommit with no transaction open: the steps in a transaction of their own
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_inserted = 0, v_gone = 0, v_head_id = NULL;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            -- the queue was dropped meanwhile (the group row's foreign key)
            DECLARE EXIT HANDLER FOR 1452 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; SET v_gone = 1; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            IF v_own = 1 THEN START TRANSACTION; END IF;
            INSERT INTO pyqueue_group (queue_name, group_key) VALUES (v_queue, v_group)
            ON DUPLICATE KEY UPDATE head_key = head_key;
            CALL pyqueue__group_lock(v_queue, v_group, FALSE, v_found, v_head_key, v_head_kind);
            SET v_is_head = v_head_key IS NULL;
            IF NOT v_is_head THEN
                -- the head, if the new message may take its place
                SELECT COUNT(*), MAX(m.id) INTO v_found, v_head_id
                  FROM pyqueue_message m
                 WHERE m.queue_name = v_queue AND m.p_key = v_head_key AND m.p_kind = v_head_kind
                   AND m.attempts = 0 AND m.reserve_token IS NULL AND m.scheduled_at_initially > v_at
                   AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                   FOR UPDATE SKIP LOCKED;
                SET v_is_head = v_found > 0;
            END IF;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts, group_key)
            VALUES (v_queue, v_key, v_kind, in_payload, COALESCE(in_priority, 0),
                    IF(v_is_head, v_at, TIMESTAMP '9999-12-31 23:59:59.999999'), v_at, v_now, 0, v_group);
            SET v_inserted = ROW_COUNT();
            IF v_inserted = 1 AND v_is_head THEN
                IF v_head_id IS NOT NULL THEN  -- the displaced head: blocked again
                    UPDATE pyqueue_message SET scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999'
                     WHERE id = v_head_id;
                END IF;
                UPDATE pyqueue_group SET head_key = v_key, head_kind = v_kind
                 WHERE queue_name = v_queue AND group_key = v_group;
            ELSEIF v_head_key IS NULL THEN
                -- a duplicate into a group without a head: its row goes again (or gets a head)
                CALL pyqueue__group_next(v_queue, v_group, v_now);
            ELSEIF v_inserted = 1 THEN
                -- blocked behind the head: with a group limit k > 1 it starts now if there is room, or takes the
                -- place of a later live message never delivered
                CALL pyqueue__group_place(v_queue, v_group, LAST_INSERT_ID(), v_at, v_now);
            END IF;
            IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_gone = 1 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    SELECT v_inserted AS pushed;
END //

-- queue_push_grouped_with_headers: queue_push_grouped with headers in_headers (as queue_push_with_headers).
-- Result and locks: as queue_push_grouped.
DROP PROCEDURE IF EXISTS queue_push_grouped_with_headers //
CREATE PROCEDURE queue_push_grouped_with_headers(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_group    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_queue, v_kind, v_dlq, v_head_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_group, v_key, v_head_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_found, v_retry, v_gone INT;
    DECLARE v_paused, v_is_head BOOLEAN;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_head_id BIGINT;
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('group', in_group, 255);
    CALL pyqueue__check_key(in_key);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
    END IF;
    CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    CALL pyqueue__check_headers(in_headers, v_headers);
    SET v_queue = in_queue, v_group = in_group, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__check_size(v_queue, LENGTH(in_payload));
    SET v_at = COALESCE(in_run_at, v_now);
    -- autocommit with no transaction open: the steps in a transaction of their own
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_inserted = 0, v_gone = 0, v_head_id = NULL;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            -- the queue was dropped meanwhile (the group row's foreign key)
            DECLARE EXIT HANDLER FOR 1452 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; SET v_gone = 1; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            IF v_own = 1 THEN START TRANSACTION; END IF;
            INSERT INTO pyqueue_group (queue_name, group_key) VALUES (v_queue, v_group)
            ON DUPLICATE KEY UPDATE head_key = head_key;
            CALL pyqueue__group_lock(v_queue, v_group, FALSE, v_found, v_head_key, v_head_kind);
            SET v_is_head = v_head_key IS NULL;
            IF NOT v_is_head THEN
                -- the head, if the new message may take its place
                SELECT COUNT(*), MAX(m.id) INTO v_found, v_head_id
                  FROM pyqueue_message m
                 WHERE m.queue_name = v_queue AND m.p_key = v_head_key AND m.p_kind = v_head_kind
                   AND m.attempts = 0 AND m.reserve_token IS NULL AND m.scheduled_at_initially > v_at
                   AND m.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                   FOR UPDATE SKIP LOCKED;
                SET v_is_head = v_found > 0;
            END IF;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts, group_key, headers)
            VALUES (v_queue, v_key, v_kind, in_payload, COALESCE(in_priority, 0),
                    IF(v_is_head, v_at, TIMESTAMP '9999-12-31 23:59:59.999999'), v_at, v_now, 0, v_group, v_headers);
            SET v_inserted = ROW_COUNT();
            IF v_inserted = 1 AND v_is_head THEN
                IF v_head_id IS NOT NULL THEN  -- the displaced head: blocked again
                    UPDATE pyqueue_message SET scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999'
                     WHERE id = v_head_id;
                END IF;
                UPDATE pyqueue_group SET head_key = v_key, head_kind = v_kind
                 WHERE queue_name = v_queue AND group_key = v_group;
            ELSEIF v_head_key IS NULL THEN
                -- a duplicate into a group without a head: its row goes again (or gets a head)
                CALL pyqueue__group_next(v_queue, v_group, v_now);
            ELSEIF v_inserted = 1 THEN
                -- blocked behind the head: with a group limit k > 1 it starts now if there is room, or takes the
                -- place of a later live message never delivered
                CALL pyqueue__group_place(v_queue, v_group, LAST_INSERT_ID(), v_at, v_now);
            END IF;
            IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_gone = 1 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    SELECT v_inserted AS pushed;
END //

-- queue_push_batch_grouped: queue_push_batch for messages of FIFO groups. MySQL: ONE JSON array of objects {"group",
-- "p_key", "p_kind", "payload", "run_at", "priority"} in in_groups' place, the other five NULL; group as
-- queue_push_grouped's, null or missing for none. An invalid element refuses the batch. Result: one row, pushed = how
-- many were new. As if pushed one by one with queue_push_grouped, in a fixed number of statements: the group rows
-- created or locked in group_key order; one INSERT IGNORE ... SELECT (grouped ones blocked); a locking read of the
-- heads and of each group's first blocked message, and a SKIP LOCKED read of the heads that may be displaced; one
-- UPDATE sets the new heads (blocking displaced ones), one records them, one deletes new group rows that got nothing.
-- In autocommit mode in a transaction of its own, run again on a deadlock.
-- Locks: the group rows (group_key order), the new rows, shared locks on duplicates and the queue row, the heads'
-- rows, until the transaction ends (and the AUTO-INC lock, as queue_push_batch).
DROP PROCEDURE IF EXISTS queue_push_batch_grouped //
CREATE PROCEDURE queue_push_batch_grouped(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_groups, v_retry, v_gone INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_heads, v_next, v_swaps LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_keys IS NOT NULL OR in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            'MySQL takes one JSON array of messages as 2nd argument; the other 5 must be NULL');
    END IF;
    CALL pyqueue__check_messages(in_messages, 'group');
    CALL pyqueue__check_batch_size(v_queue, in_messages);
    SET v_now = UTC_TIMESTAMP(6);
    SELECT COUNT(*) INTO v_groups
      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (g JSON PATH '$.group')) AS b
     WHERE JSON_TYPE(b.g) = 'STRING';
    -- autocommit with no transaction open: the steps in a transaction of their own
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_inserted = 0, v_gone = 0;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            -- the queue was dropped meanwhile (the group rows' foreign key)
            DECLARE EXIT HANDLER FOR 1452 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; SET v_gone = 1; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            IF v_own = 1 AND v_groups > 0 THEN START TRANSACTION; END IF;
            IF v_groups > 0 THEN  -- 1. the group rows, in group_key order
                INSERT INTO pyqueue_group (queue_name, group_key)
                SELECT DISTINCT v_queue, b.g
                  FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                           g VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.group')) AS b
                 WHERE b.g IS NOT NULL
                 ORDER BY b.g
                ON DUPLICATE KEY UPDATE head_key = pyqueue_group.head_key;
            END IF;
            -- 2. the messages, those with a group blocked
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts, group_key)
            SELECT in_queue,
                   JSON_UNQUOTE(b.k),
                   JSON_UNQUOTE(b.kd),
                   JSON_EXTRACT(b.payload, '$'),  -- normalised as JSON_EXTRACT of the element would
                   CASE WHEN JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        THEN CAST(CAST(b.priority AS CHAR) AS SIGNED) ELSE 0 END,
                   CASE WHEN JSON_TYPE(b.g) = 'STRING' THEN TIMESTAMP '9999-12-31 23:59:59.999999'
                        WHEN JSON_TYPE(b.run_at) = 'STRING' THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6))
                        ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   v_now,
                   0,
                   CASE WHEN JSON_TYPE(b.g) = 'STRING' THEN JSON_UNQUOTE(b.g) END
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       g        JSON PATH '$.group',
                       k        JSON PATH '$.p_key',
                       kd       JSON PATH '$.p_kind',
                       payload  JSON PATH '$.payload',
                       run_at   JSON PATH '$.run_at',
                       priority JSON PATH '$.priority')) AS b
             ORDER BY b.ord;
            SET v_inserted = ROW_COUNT();
            IF v_groups > 0 THEN
                -- 3. each group's head (locking read: rows held since step 1) ...
                /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(g.group_key, g.head_key, g.head_kind)) INTO v_heads
                  FROM (SELECT DISTINCT b.g
                          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                                   g VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.group')) AS b
                         WHERE b.g IS NOT NULL
                         LIMIT 18446744073709551615) AS d
                  STRAIGHT_JOIN pyqueue_group g ON g.queue_name = v_queue AND g.group_key = d.g
                   FOR UPDATE;
                -- ... and its first blocked message, by a locking read (a plain read sees an older snapshot)
                /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(h.g, h.hk, h.hkd, n.id, n.p_key, n.p_kind,
                                                DATE_FORMAT(n.scheduled_at_initially, '%Y-%m-%d %H:%i:%s.%f')))
                  INTO v_next
                  FROM JSON_TABLE(v_heads, '$[*]' COLUMNS (
                           g   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           hkd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) AS h
                  LEFT JOIN pyqueue_message n
                    ON n.id = (SELECT x.id FROM pyqueue_message x FORCE INDEX (pyqueue_message_group_idx)
                                WHERE x.queue_name = v_queue AND x.group_key = h.g
                                  AND x.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999'
                                ORDER BY x.scheduled_at_initially, x.id
                                LIMIT 1
                                  FOR UPDATE)
                   FOR UPDATE;
                -- the heads that give their place (never delivered, running later), unless busy
                /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(j.g, o.id)) INTO v_swaps
                  FROM JSON_TABLE(v_next, '$[*]' COLUMNS (
                           g     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           hkd   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
                           n_at  DATETIME(6)  PATH '$[6]')) AS j
                  STRAIGHT_JOIN pyqueue_message o FORCE INDEX (pyqueue_message_key_uk)
                    ON o.queue_name = v_queue AND o.p_key = j.hk AND o.p_kind = j.hkd
                 WHERE o.attempts = 0 AND o.reserve_token IS NULL
                   AND o.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                   AND o.scheduled_at_initially > j.n_at
                   FOR UPDATE SKIP LOCKED;
                -- 4. new heads due at their run_at, displaced heads blocked
                UPDATE JSON_TABLE(v_next, '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           n_id BIGINT       PATH '$[3]')) AS j
                  LEFT JOIN JSON_TABLE(COALESCE(v_swaps, '[]'), '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           o_id BIGINT       PATH '$[1]')) AS s ON s.g = j.g
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id IN (j.n_id, s.o_id)
                   SET m.scheduled_at = IF(m.id = s.o_id, TIMESTAMP '9999-12-31 23:59:59.999999',
                                           m.scheduled_at_initially)
                 WHERE j.n_id IS NOT NULL AND (j.hk IS NULL OR s.o_id IS NOT NULL);
                UPDATE JSON_TABLE(v_next, '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           n_id BIGINT       PATH '$[3]',
                           nk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
                           nkd  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[5]')) AS j
                  LEFT JOIN JSON_TABLE(COALESCE(v_swaps, '[]'), '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           o_id BIGINT       PATH '$[1]')) AS s ON s.g = j.g
                  STRAIGHT_JOIN pyqueue_group g ON g.queue_name = v_queue AND g.group_key = j.g
                   SET g.head_key = j.nk, g.head_kind = j.nkd
                 WHERE j.n_id IS NOT NULL AND (j.hk IS NULL OR s.o_id IS NOT NULL);
                -- new groups whose messages were all duplicates
                DELETE g
                  FROM JSON_TABLE(v_next, '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           n_id BIGINT       PATH '$[3]')) AS j
                  STRAIGHT_JOIN pyqueue_group g ON g.queue_name = v_queue AND g.group_key = j.g
                 WHERE j.hk IS NULL AND j.n_id IS NULL AND g.head_key IS NULL;
                -- 5. groups whose limit k > 1 has room: more of them start
                CALL pyqueue__group_fill_batch(v_queue, in_messages, v_now);
            END IF;
            IF v_own = 1 AND v_groups > 0 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_gone = 1 OR (v_inserted = 0 AND JSON_LENGTH(in_messages) > 0
                      AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue)) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS pushed;
END //

-- queue_push_batch_grouped_with_headers: queue_push_batch_grouped whose elements may carry a member "headers" (as
-- queue_push_batch_with_headers; in_headers must be NULL). Result and locks: as queue_push_batch_grouped.
DROP PROCEDURE IF EXISTS queue_push_batch_grouped_with_headers //
CREATE PROCEDURE queue_push_batch_grouped_with_headers(
    IN in_queue      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4,
    IN in_headers    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_groups, v_retry, v_gone INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_heads, v_next, v_swaps LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_keys IS NOT NULL OR in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL OR in_headers IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            'MySQL: one JSON array of messages (headers a member of each) as 2nd argument, the other 6 NULL');
    END IF;
    CALL pyqueue__check_messages(in_messages, 'group');
    CALL pyqueue__check_batch_headers(in_messages);
    CALL pyqueue__check_batch_size(v_queue, in_messages);
    SET v_now = UTC_TIMESTAMP(6);
    SELECT COUNT(*) INTO v_groups
      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (g JSON PATH '$.group')) AS b
     WHERE JSON_TYPE(b.g) = 'STRING';
    -- autocommit with no transaction open: the steps in a transaction of their own
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_inserted = 0, v_gone = 0;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            -- the queue was dropped meanwhile (the group rows' foreign key)
            DECLARE EXIT HANDLER FOR 1452 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; SET v_gone = 1; END;
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
            IF v_own = 1 AND v_groups > 0 THEN START TRANSACTION; END IF;
            IF v_groups > 0 THEN  -- 1. the group rows, in group_key order
                INSERT INTO pyqueue_group (queue_name, group_key)
                SELECT DISTINCT v_queue, b.g
                  FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                           g VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.group')) AS b
                 WHERE b.g IS NOT NULL
                 ORDER BY b.g
                ON DUPLICATE KEY UPDATE head_key = pyqueue_group.head_key;
            END IF;
            -- 2. the messages, those with a group blocked
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts, group_key, headers)
            SELECT in_queue,
                   JSON_UNQUOTE(b.k),
                   JSON_UNQUOTE(b.kd),
                   JSON_EXTRACT(b.payload, '$'),  -- normalised as JSON_EXTRACT of the element would
                   CASE WHEN JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        THEN CAST(CAST(b.priority AS CHAR) AS SIGNED) ELSE 0 END,
                   CASE WHEN JSON_TYPE(b.g) = 'STRING' THEN TIMESTAMP '9999-12-31 23:59:59.999999'
                        WHEN JSON_TYPE(b.run_at) = 'STRING' THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6))
                        ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   v_now,
                   0,
                   CASE WHEN JSON_TYPE(b.g) = 'STRING' THEN JSON_UNQUOTE(b.g) END,
                   CASE WHEN JSON_TYPE(b.h) = 'OBJECT' THEN JSON_EXTRACT(b.h, '$') END
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       g        JSON PATH '$.group',
                       k        JSON PATH '$.p_key',
                       kd       JSON PATH '$.p_kind',
                       payload  JSON PATH '$.payload',
                       run_at   JSON PATH '$.run_at',
                       priority JSON PATH '$.priority',
                       h        JSON PATH '$.headers')) AS b
             ORDER BY b.ord;
            SET v_inserted = ROW_COUNT();
            IF v_groups > 0 THEN
                -- 3. each group's head (locking read: rows held since step 1) ...
                /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(g.group_key, g.head_key, g.head_kind)) INTO v_heads
                  FROM (SELECT DISTINCT b.g
                          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                                   g VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.group')) AS b
                         WHERE b.g IS NOT NULL
                         LIMIT 18446744073709551615) AS d
                  STRAIGHT_JOIN pyqueue_group g ON g.queue_name = v_queue AND g.group_key = d.g
                   FOR UPDATE;
                -- ... and its first blocked message, by a locking read (a plain read sees an older snapshot)
                /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(h.g, h.hk, h.hkd, n.id, n.p_key, n.p_kind,
                                                DATE_FORMAT(n.scheduled_at_initially, '%Y-%m-%d %H:%i:%s.%f')))
                  INTO v_next
                  FROM JSON_TABLE(v_heads, '$[*]' COLUMNS (
                           g   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           hkd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]')) AS h
                  LEFT JOIN pyqueue_message n
                    ON n.id = (SELECT x.id FROM pyqueue_message x FORCE INDEX (pyqueue_message_group_idx)
                                WHERE x.queue_name = v_queue AND x.group_key = h.g
                                  AND x.scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999'
                                ORDER BY x.scheduled_at_initially, x.id
                                LIMIT 1
                                  FOR UPDATE)
                   FOR UPDATE;
                -- the heads that give their place (never delivered, running later), unless busy
                /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(JSON_ARRAY(j.g, o.id)) INTO v_swaps
                  FROM JSON_TABLE(v_next, '$[*]' COLUMNS (
                           g     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           hkd   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[2]',
                           n_at  DATETIME(6)  PATH '$[6]')) AS j
                  STRAIGHT_JOIN pyqueue_message o FORCE INDEX (pyqueue_message_key_uk)
                    ON o.queue_name = v_queue AND o.p_key = j.hk AND o.p_kind = j.hkd
                 WHERE o.attempts = 0 AND o.reserve_token IS NULL
                   AND o.scheduled_at < TIMESTAMP '9999-12-31 23:59:59.999999'
                   AND o.scheduled_at_initially > j.n_at
                   FOR UPDATE SKIP LOCKED;
                -- 4. new heads due at their run_at, displaced heads blocked
                UPDATE JSON_TABLE(v_next, '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           n_id BIGINT       PATH '$[3]')) AS j
                  LEFT JOIN JSON_TABLE(COALESCE(v_swaps, '[]'), '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           o_id BIGINT       PATH '$[1]')) AS s ON s.g = j.g
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id IN (j.n_id, s.o_id)
                   SET m.scheduled_at = IF(m.id = s.o_id, TIMESTAMP '9999-12-31 23:59:59.999999',
                                           m.scheduled_at_initially)
                 WHERE j.n_id IS NOT NULL AND (j.hk IS NULL OR s.o_id IS NOT NULL);
                UPDATE JSON_TABLE(v_next, '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           n_id BIGINT       PATH '$[3]',
                           nk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]',
                           nkd  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[5]')) AS j
                  LEFT JOIN JSON_TABLE(COALESCE(v_swaps, '[]'), '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           o_id BIGINT       PATH '$[1]')) AS s ON s.g = j.g
                  STRAIGHT_JOIN pyqueue_group g ON g.queue_name = v_queue AND g.group_key = j.g
                   SET g.head_key = j.nk, g.head_kind = j.nkd
                 WHERE j.n_id IS NOT NULL AND (j.hk IS NULL OR s.o_id IS NOT NULL);
                -- new groups whose messages were all duplicates
                DELETE g
                  FROM JSON_TABLE(v_next, '$[*]' COLUMNS (
                           g    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                           hk   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                           n_id BIGINT       PATH '$[3]')) AS j
                  STRAIGHT_JOIN pyqueue_group g ON g.queue_name = v_queue AND g.group_key = j.g
                 WHERE j.hk IS NULL AND j.n_id IS NULL AND g.head_key IS NULL;
                -- 5. groups whose limit k > 1 has room: more of them start
                CALL pyqueue__group_fill_batch(v_queue, in_messages, v_now);
            END IF;
            IF v_own = 1 AND v_groups > 0 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_gone = 1 OR (v_inserted = 0 AND JSON_LENGTH(in_messages) > 0
                      AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue)) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS pushed;
END //

-- ==== consume ====
-- Take messages out: reserve (or pop, at-most-once), then commit, roll back, fail, extend or move the reservation,
-- showing its token; remove deletes a message whatever its state. Routines acting on one message by (queue, p_key,
-- p_kind) locate it with a plain read of the unique key, then change it by id, re-checking the token in that
-- statement under its row lock (a locking lookup takes the index entry before the row and deadlocked with a consumer
-- taking over the expired reservation). The price: in a REPEATABLE READ transaction older than the reservation the
-- lookup may miss it and answer 0; the message comes back after its timeout. (A single-table UPDATE by the key
-- columns is avoided too: with stale statistics MariaDB 10.11 planned it as a range scan locking a whole priority.)

-- queue_pop: removes and returns up to in_n ready messages, highest priority first, FIFO within one (at-most-once).
-- Result: (p_key, p_kind, payload, priority, attempts, created_at, headers), empty when nothing is ready or the queue is
-- paused. Set-based, each step one statement (per page of 5000): pyqueue__claim marks the rows still ready with this
-- call's tokens (one of two racing pops wins a row); one read by id and token captures them (capped at
-- max_allowed_packet, at least one row); history, then one DELETE by id and token; the result is sent after the
-- delete. An error before the delete gives the marks back; an interruption leaves marked rows that come back after
-- the visibility timeout (never lost, never twice). A FIFO group's head leaves alone first (pyqueue__groups_leave),
-- its group row with SKIP LOCKED: busy, its mark goes back. On a queue that keeps results each popped message's
-- outcome is 'succeeded', recorded with the history (one INSERT) before the DELETE.
-- Locks: the marked rows, for one statement each step (or until the caller's transaction ends); rows another session
-- holds are skipped.
DROP PROCEDURE IF EXISTS queue_pop //
CREATE PROCEDURE queue_pop(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN in_n DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_retention DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused, v_results BOOLEAN;
    DECLARE v_now, v_until DATETIME(6);
    DECLARE v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_count, v_taken, v_deleted, v_ngrouped, v_own, v_rated INT DEFAULT 0;
    DECLARE v_rows, v_grouped, v_busy, v_deps LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_gcl BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET SESSION group_concat_max_len = v_gcl;
        IF v_deleted = 0 THEN  -- nothing removed yet: the marks go back
            CALL pyqueue__give_back_claims(v_secret, v_claimed, TRUE);
        END IF;
        RESIGNAL;
    END;
    SET v_gcl = @@SESSION.group_concat_max_len;

    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_n < 1 THEN CALL pyqueue__raise('invalid_argument', 'n must be at least 1'); END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);

    IF NOT v_paused THEN
        SET v_now = UTC_TIMESTAMP(6), v_until = v_now + INTERVAL CAST(v_vis * 1000000 AS SIGNED) MICROSECOND;
        CALL pyqueue__random_token(v_secret);
        SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
        SELECT EXISTS (SELECT 1 FROM pyqueue_rate r WHERE r.queue_name = v_queue) INTO v_rated;
        IF v_rated THEN
            -- a rate counts every message popped: one at a time, each with its units (pyqueue__reserve_limited)
            CALL pyqueue__reserve_limited(v_queue, NULL, NULL, COALESCE(in_n, 1), NULL, v_vis, v_max, v_dlq, FALSE,
                                          v_secret, v_claimed, v_count);
        ELSE
            CALL pyqueue__claim(v_queue, NULL, COALESCE(in_n, 1), v_now, v_until, NULL, TRUE, NULL, NULL, 0,
                                v_secret, v_claimed, v_count);
        END IF;
        IF v_count > 0 THEN
            SELECT COUNT(*),
                   CONCAT('[', GROUP_CONCAT(JSON_OBJECT('id', m.id, 't', m.reserve_token, 'k', m.p_key, 'kd', m.p_kind,
                                                        'pl', CAST(m.payload AS CHAR CHARACTER SET utf8mb4),
                                                        'pr', m.priority, 'at', m.attempts,
                                                        'ca', DATE_FORMAT(m.created_at, '%Y-%m-%d %H:%i:%s.%f'),
                                                        'hd', CAST(m.headers AS CHAR CHARACTER SET utf8mb4))
                                            ORDER BY j.ord SEPARATOR ','), ']'),
                   SUM(m.group_key IS NOT NULL),
                   CONCAT('[', GROUP_CONCAT(IF(m.group_key IS NULL, NULL,
                                               JSON_ARRAY(m.id, m.p_key, m.p_kind, m.reserve_token, m.group_key))
                                            SEPARATOR ','), ']')
              INTO v_taken, v_rows, v_ngrouped, v_grouped
              FROM JSON_TABLE(CONCAT('[', v_claimed, ']'), '$[*]' COLUMNS (
                       ord  FOR ORDINALITY,
                       c_id BIGINT PATH '$[0]')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_secret, m.id), 256), 32), 13, 1, '4'),
             17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
             9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
            IF v_rows IS NULL OR NOT JSON_VALID(v_rows) THEN
                -- a row too large to pack (NULL or cut, with a warning): give everything back, return nothing
                CALL pyqueue__give_back_claims(v_secret, v_claimed, TRUE);
                SET v_rows = NULL, v_taken = 0, v_ngrouped = 0;
            END IF;
            SELECT q.history_retention, q.result_retention IS NOT NULL INTO v_retention, v_results
              FROM pyqueue_queue q WHERE q.queue_name = v_queue;
            IF v_ngrouped > 0 THEN
                -- heads of FIFO groups: one by one, their group rows first
                CALL pyqueue__own_transaction(TRUE, v_own);
                CALL pyqueue__groups_leave(IF(v_results, 'pop_result', 'pop'), v_queue, NULL, v_grouped, v_now, v_own,
                                           v_deleted, v_busy);
                IF v_busy IS NOT NULL THEN
                    -- their group rows were busy: their marks go back
                    UPDATE JSON_TABLE(CONCAT('[', v_claimed, ']'), '$[*]' COLUMNS (
                               c_id    BIGINT      PATH '$[0]',
                               c_at    DATETIME(6) PATH '$[2]',
                               c_token CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                      STRAIGHT_JOIN JSON_TABLE(v_busy, '$[*]' COLUMNS (b_id BIGINT PATH '$')) AS b ON b.b_id = j.c_id
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                       SET m.scheduled_at = j.c_at, m.reserve_token = j.c_token
                     WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_secret, m.id), 256), 32), 13, 1, '4'),
                         17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
                         9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
                END IF;
            END IF;
            IF v_retention IS NOT NULL AND v_taken > 0 THEN
                INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                             created_at, processed_at, outcome, to_queue, reserved_by,
                                             last_error, headers)
                SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                       m.created_at, v_now, 'popped', NULL, m.reserved_by, m.last_error, m.headers
                  FROM JSON_TABLE(v_rows, '$[*]' COLUMNS (
                           c_id    BIGINT   PATH '$.id',
                           c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t')) AS j
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                 WHERE m.reserve_token = j.c_token;
            END IF;
            IF v_results AND v_taken > 0 THEN
                INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts, progress,
                                            finished_at)
                SELECT m.queue_name, m.p_key, m.p_kind, 'succeeded', NULL, m.last_error, m.attempts, m.progress, v_now
                  FROM JSON_TABLE(v_rows, '$[*]' COLUMNS (
                           c_id    BIGINT   PATH '$.id',
                           c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t')) AS j
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                 WHERE m.reserve_token = j.c_token
                ON DUPLICATE KEY UPDATE state = VALUES(state), result = VALUES(result), last_error = VALUES(last_error),
                                        attempts = VALUES(attempts), progress = VALUES(progress),
                                        finished_at = VALUES(finished_at);
            END IF;
            DELETE m
              FROM JSON_TABLE(COALESCE(v_rows, '[]'), '$[*]' COLUMNS (
                       c_id    BIGINT   PATH '$.id',
                       c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.reserve_token = j.c_token;
            SET v_deleted = v_deleted + ROW_COUNT();
            -- popped: succeeded, for the messages that wait for them (one locking probe of pyqueue_dependency per
            -- message, which finds nothing for a message without parents or children; a grouped one's went with it)
            SET v_deps = NULL;
            IF v_results THEN
            SELECT CONCAT('[', GROUP_CONCAT(DISTINCT JSON_ARRAY(d.p_key, d.p_kind) SEPARATOR ','), ']') INTO v_deps
              FROM JSON_TABLE(COALESCE(v_rows, '[]'), '$[*]' COLUMNS (
                       c_id BIGINT PATH '$.id',
                       c_k  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.k',
                       c_kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.kd')) AS j
              STRAIGHT_JOIN pyqueue_dependency d ON d.queue_name = v_queue AND d.p_key = j.c_k AND d.p_kind = j.c_kd
             WHERE NOT EXISTS (SELECT 1 FROM pyqueue_message m WHERE m.id = j.c_id)
              LOCK IN SHARE MODE;
            CALL pyqueue__deps_left_many(v_queue, v_deps, TRUE, NULL);
            END IF;
        END IF;
        SET SESSION group_concat_max_len = v_gcl;
    END IF;

    -- (headers: SQL NULL for none; a JSON null read into a text column is NULL on MariaDB, 'null' on some MySQL
    -- versions, never a stored value: those are objects)
    SELECT r.p_key, r.p_kind, r.payload, r.priority, r.attempts, r.created_at, NULLIF(r.headers, 'null') AS headers
      FROM JSON_TABLE(COALESCE(v_rows, '[]'), '$[*]' COLUMNS (
               ord        FOR ORDINALITY,
               c_id       BIGINT       PATH '$.id',
               p_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.k',
               p_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.kd',
               payload    LONGTEXT     CHARACTER SET utf8mb4 PATH '$.pl',
               priority   INT          PATH '$.pr',
               attempts   INT          PATH '$.at',
               created_at DATETIME(6)  PATH '$.ca',
               headers    LONGTEXT     CHARACTER SET utf8mb4 PATH '$.hd')) AS r
     WHERE v_deleted = v_taken
        OR NOT EXISTS (SELECT 1 FROM pyqueue_message m WHERE m.id = r.c_id)
     ORDER BY r.ord;
END //

-- pyqueue__reserve: queue_reserve on a queue without limits, after its checks: pyqueue__claim (or
-- pyqueue__claim_one), then ONE read of the claims by id and token, in claim order (a claim taken over meanwhile is
-- left out). An error gives the claims back (pyqueue__give_back_claims). Emits the result set. In autocommit mode the
-- claims of a batch (several statements) are one transaction of its own at READ COMMITTED (each read still sees what
-- is committed now), run again whole on a deadlock: MariaDB runs no handler for a deadlock found while a statement
-- waits for a gap lock (a new index entry), so without it such a call failed keeping the claims its earlier
-- statements had committed, under tokens nobody got; now the call fails with nothing claimed.
DROP PROCEDURE IF EXISTS pyqueue__reserve //
CREATE PROCEDURE pyqueue__reserve(
    IN in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6),
    IN in_n       INT,
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN in_vis     DECIMAL(20,6),
    IN in_max     INT,
    IN in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_paused  BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_now, v_until DATETIME(6);
    DECLARE v_own INT DEFAULT 0;
    DECLARE v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_count, v_retry INT;
    DECLARE v_txn, v_tries INT DEFAULT 0;
    DECLARE v_gcl BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET SESSION group_concat_max_len = v_gcl;
        IF v_txn = 1 THEN ROLLBACK; ELSE CALL pyqueue__give_back_claims(v_secret, v_claimed, FALSE); END IF;
        RESIGNAL;
    END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    IF NOT in_paused THEN
        /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
        IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
        SET v_now = UTC_TIMESTAMP(6);
        SET v_until = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND;
        CALL pyqueue__random_token(v_secret);
        IF in_n = 1 THEN
            CALL pyqueue__claim_one(in_queue, in_kinds, v_now, v_until, in_worker, in_max, in_dlq, v_own,
                                    v_secret, v_claimed, v_count);
        ELSE
            SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
            IF v_own = 1 THEN  -- (see above; in_own 0: inside it a deadlock fails the claims whole)
                REPEAT
                    SET v_retry = 0, v_tries = v_tries + 1, v_claimed = '';
                    BEGIN
                        DECLARE EXIT HANDLER FOR 1213, 1467  -- 1467: a deadlock on the AUTO-INC lock (the dead-letter insert)
                        BEGIN ROLLBACK; SET v_txn = 0; IF v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
                        START TRANSACTION;
                        SET v_txn = 1;
                        CALL pyqueue__claim(in_queue, in_kinds, in_n, v_now, v_until, in_worker, FALSE, in_max, in_dlq,
                                            0, v_secret, v_claimed, v_count);
                        COMMIT;
                        SET v_txn = 0;
                    END;
                UNTIL v_retry = 0 END REPEAT;
            ELSE
                CALL pyqueue__claim(in_queue, in_kinds, in_n, v_now, v_until, in_worker, FALSE, in_max, in_dlq, v_own,
                                    v_secret, v_claimed, v_count);
            END IF;
            SET SESSION group_concat_max_len = v_gcl;
        END IF;
    END IF;
    SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
           m.attempts, m.created_at, m.scheduled_at_initially, m.headers
      FROM JSON_TABLE(CONCAT('[', v_claimed, ']'), '$[*]' COLUMNS (
               ord  FOR ORDINALITY,
               c_id BIGINT PATH '$[0]')) AS j
      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
     WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_secret, m.id), 256), 32), 13, 1, '4'),
       17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
       9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-')
     ORDER BY j.ord;
END //

-- pyqueue__claim_short: the single-message short way of queue_reserve and queue_commit_reserve, inside the caller's
-- transaction: the oldest ready message of priority 0 of in_queue that no other transaction holds (FOR UPDATE SKIP
-- LOCKED: concurrent reserves take different messages instead of racing for the oldest), claimed by id with a random
-- token of its own: scheduled_at = now + (in_timeout, else in_vis), attempts + 1, reserved_by = in_worker. out_id and
-- out_token: the claim; NULL when nothing is ready at priority 0 or the message is due for dead-lettering (the general
-- way takes both). Locks: the claimed row, until the caller's transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__claim_short //
CREATE PROCEDURE pyqueue__claim_short(
    IN  in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_timeout DECIMAL(20,6),
    IN  in_vis     DECIMAL(20,6),
    IN  in_max     INT,
    OUT out_id     BIGINT,
    OUT out_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DECLARE v_att INT;
    BEGIN
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET out_id = NULL;
        SELECT m.id, m.attempts INTO out_id, v_att
          FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
         WHERE m.queue_name = in_queue AND m.priority = 0 AND m.scheduled_at <= v_now
         ORDER BY m.scheduled_at, m.id
         LIMIT 1
           FOR UPDATE SKIP LOCKED;
    END;
    SET out_token = NULL;
    IF out_id IS NOT NULL AND (in_max IS NULL OR v_att < in_max) THEN
        CALL pyqueue__random_token(out_token);
        UPDATE pyqueue_message
           SET scheduled_at = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND,
               attempts = attempts + 1, reserved_by = in_worker, reserve_token = out_token
         WHERE id = out_id;
    ELSE
        SET out_id = NULL;
    END IF;
END //

-- pyqueue__claim_short_batch: the short way of queue_reserve for a batch (in_n from 2 to 5000), inside the caller's
-- transaction at READ COMMITTED (no gap locks: a push never waits for it): the oldest in_n ready messages of priority 0
-- of in_queue that no other transaction holds, claimed by ONE UPDATE by id: scheduled_at = now + (in_timeout, else
-- in_vis), attempts + 1, reserved_by = in_worker, and the token pyqueue__claim derives from in_secret and the id
-- (unguessable, distinct per row; the caller reads the claims back by id and token). The candidates: a plain read of
-- ids on the ready index (covering: no row is visited), with a probe for any message below priority 0; then ONE
-- locking read of them by primary key, FOR UPDATE SKIP LOCKED (concurrent reserves take different messages), which
-- re-checks each on its newest version (one claimed meanwhile is no longer ready). While some were skipped, the next
-- candidates after the last one go the same way, until in_n are held or none is left. (Not one locking read on the
-- ready index: it checks for locks every entry it passes, the delete-marked ones that claims and commits leave there
-- until purge too, and measured slower than the general way.) Against pyqueue__claim it builds no JSON list of
-- candidates and parses only ids. out_ids: a JSON array of the claimed ids in FIFO order (scheduled_at, id);
-- out_count: how many (0: nothing ready at priority 0, the whole answer when nothing lies below it); NULL, with nothing
-- claimed, when the short way does not cover the call: a message below priority 0 (the walk over priorities is the
-- general way's) or a candidate due for dead-lettering (the caller rolls back; the general way takes both). Needs a
-- group_concat_max_len of 20 * in_n + 2 (the caller raises it). Locks: the claimed rows, until the caller's
-- transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__claim_short_batch //
CREATE PROCEDURE pyqueue__claim_short_batch(
    IN  in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_n       INT,
    IN  in_timeout DECIMAL(20,6),
    IN  in_vis     DECIMAL(20,6),
    IN  in_max     INT,
    IN  in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_ids    LONGTEXT CHARACTER SET utf8mb4,
    OUT out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_now DATETIME(6) DEFAULT UTC_TIMESTAMP(6);
    DECLARE v_at DATETIME(6) DEFAULT NULL;
    DECLARE v_id BIGINT DEFAULT NULL;
    DECLARE v_k, v_got, v_held, v_att, v_max_att INT;
    DECLARE v_below BOOLEAN;
    DECLARE v_cand, v_ids LONGTEXT CHARACTER SET utf8mb4;
    SET out_ids = '', out_count = 0, v_max_att = 0;
    pages: LOOP
        SET v_k = in_n - out_count;
        -- (the probe: the start of the queue's range in the ready index)
        SELECT COUNT(*), GROUP_CONCAT(d.id ORDER BY d.scheduled_at, d.id SEPARATOR ','), MAX(d.scheduled_at),
               EXISTS (SELECT 1 FROM pyqueue_message b FORCE INDEX (pyqueue_message_ready_idx)
                        WHERE b.queue_name = in_queue AND b.priority < 0)
          INTO v_got, v_cand, v_at, v_below
          FROM (SELECT m.id, m.scheduled_at
                  FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
                 WHERE m.queue_name = in_queue AND m.priority = 0 AND m.scheduled_at <= v_now
                   AND (v_id IS NULL OR m.scheduled_at > v_at OR (m.scheduled_at = v_at AND m.id > v_id))
                 ORDER BY m.scheduled_at, m.id
                 LIMIT v_k) AS d;
        IF v_below THEN LEAVE pages; END IF;
        IF v_got = 0 THEN LEAVE pages; END IF;
        SET v_id = SUBSTRING_INDEX(v_cand, ',', -1);  -- the last candidate (v_at: its scheduled_at)
        SELECT COUNT(*), MAX(c.attempts), GROUP_CONCAT(c.id ORDER BY c.ord SEPARATOR ',')
          INTO v_held, v_att, v_ids
          FROM (SELECT j.ord, x.id, x.attempts
                  FROM JSON_TABLE(CONCAT('[', v_cand, ']'), '$[*]' COLUMNS (
                           ord  FOR ORDINALITY,
                           c_id BIGINT PATH '$')) AS j
                  STRAIGHT_JOIN pyqueue_message x FORCE INDEX (PRIMARY) ON x.id = j.c_id
                 WHERE x.queue_name = in_queue AND x.priority = 0 AND x.scheduled_at <= v_now
                 LIMIT 18446744073709551615  -- materialised (its rows locked as read), on MySQL too
                   FOR UPDATE SKIP LOCKED) AS c;
        IF v_held > 0 THEN
            SET out_ids = CONCAT(out_ids, IF(out_ids = '', '', ','), v_ids),
                out_count = out_count + v_held, v_max_att = GREATEST(v_max_att, v_att);
        END IF;
        IF out_count >= in_n OR v_got < v_k THEN LEAVE pages; END IF;
    END LOOP;
    SET out_ids = CONCAT('[', out_ids, ']');
    IF v_below OR (in_max IS NOT NULL AND v_max_att >= in_max) THEN
        SET out_ids = NULL, out_count = NULL;
    ELSEIF out_count > 0 THEN
        UPDATE JSON_TABLE(out_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$')) AS j
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
           SET m.scheduled_at = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND,
               m.attempts = m.attempts + 1,
               m.reserved_by = in_worker,
               m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(in_secret, m.id), 256), 32), 13, 1, '4'),
                   17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(in_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
                   9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
        IF ROW_COUNT() <> out_count THEN SET out_ids = NULL, out_count = NULL; END IF;  -- (never: the rows are locked)
    END IF;
END //

-- queue_reserve: hands out up to in_n ready messages, highest priority first, FIFO within one; each is invisible to
-- others until in_timeout (NULL = the queue's visibility_timeout) and carries a fresh random token. in_worker is
-- recorded; in_kinds NULL = any, else a non-empty JSON array of strings. attempts counts this delivery. A message whose
-- expired reservation was its last allowed delivery is dead-lettered instead (a group head whose group row is busy is
-- left for a later reserve: a reserve never waits). Result: (p_key, p_kind, payload, token, priority, attempts,
-- created_at, scheduled_at_initially, headers), empty when nothing is ready or the queue is paused. Set-based (pyqueue__reserve):
-- candidates read without locks (a locking range scan would lock the next row, gaps and skipped rows), each page
-- claimed by one UPDATE joined to a SKIP LOCKED read by id: a message is never handed out twice, in autocommit mode
-- too; the cost follows in_n and the ready rows. In autocommit mode one message of a queue without limits whose
-- messages have priority 0 (or less) is claimed here, in a few statements (see below); so is a batch of up to 5000
-- from such a queue whose messages all have priority 0 (pyqueue__claim_short_batch: ids read plainly, then locked
-- and claimed by id, in a transaction of its own at READ COMMITTED). A queue with limits goes one candidate at a time
-- (pyqueue__reserve_limited). In autocommit mode the claims of a batch are one transaction of their own (see
-- pyqueue__reserve); interrupted, nothing of it stays. Locks: the claimed rows, for one statement (a batch in autocommit:
-- until the call ends; or until the caller's transaction ends). In a REPEATABLE READ
-- transaction that already read pyqueue_message, messages pushed since then wait for the next transaction.
DROP PROCEDURE IF EXISTS queue_reserve //
CREATE PROCEDURE queue_reserve(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6),
    IN in_n       DECIMAL(65,30),
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_maxres DECIMAL(20,6);
    DECLARE v_max, v_found, v_claims INT;
    DECLARE v_paused, v_limited, v_checked, v_above BOOLEAN;
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_id BIGINT;
    DECLARE v_token, v_secret CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_ids LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_gcl BIGINT;
    DECLARE v_own, v_txn INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    IF (CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
        AND LOCATE(X'ED', CAST(CONCAT(in_queue, COALESCE(in_worker, '')) AS BINARY)) = 0
        AND in_kinds IS NULL AND COALESCE(in_n = TRUNCATE(in_n, 0) AND in_n BETWEEN 1 AND 2147483647, TRUE)
        AND COALESCE(in_timeout > 0 AND in_timeout <= 3155760000, TRUE) AND COALESCE(CHAR_LENGTH(in_worker), 0) <= 255
       ) IS NOT TRUE THEN  -- (plainly valid: nothing to check; the queue is looked up below)
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
        CALL pyqueue__reserve_args(in_worker, in_timeout, in_n, in_kinds, v_kinds);
        SET v_checked = TRUE;
    END IF;
    SET v_queue = in_queue;
    -- settings, limits and whether any message has a priority above 0: ONE plain read (a subquery of IF would be a
    -- locking read, waiting for a limit being set). (Not MAX(priority): the end of a queue's range in the ready index
    -- is where claims insert and commits leave deleted entries until purge; whether any entry lies above priority 0
    -- is one probe past that range.)
    SELECT COUNT(*), MAX(q.visibility_timeout), MAX(q.max_attempts), MAX(q.dead_letter_queue), MAX(q.paused),
           EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue)
           OR EXISTS (SELECT 1 FROM pyqueue_rate r WHERE r.queue_name = v_queue),
           EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
                    WHERE m.queue_name = v_queue AND m.priority > 0),
           MAX(q.max_reservation)
      INTO v_found, v_vis, v_max, v_dlq, v_paused, v_limited, v_above, v_maxres
      FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    IF in_timeout > v_maxres THEN CALL pyqueue__check_reservation_cap(in_timeout, v_maxres); END IF;
    /*M!100300 SET v_own = 1 - @@SESSION.in_transaction; */  -- as pyqueue__own_transaction(FALSE), inline
    IF @@SESSION.autocommit = 0 THEN SET v_own = 0; END IF;
    -- In a SERIALIZABLE session the reads below are locking reads, which can deadlock between two claims: in
    -- autocommit mode (MariaDB; on MySQL 8.0 the client opens it) the call is then one transaction of its own, and
    -- a failure keeps none of its claims.
    /*M!100300 IF v_own = 1 AND @@SESSION.tx_isolation = 'SERIALIZABLE' THEN
        START TRANSACTION;
        SET v_txn = 1, v_own = 0;
    END IF; */
    IF v_own = 1 AND v_checked IS NULL AND COALESCE(in_n, 1) = 1 AND NOT v_paused AND NOT v_limited
       AND NOT v_above THEN
        -- One message in autocommit mode from a queue whose messages have priority 0 (or less), the common case, in
        -- as few statements as it takes (each statement of a procedure costs MariaDB about as much as a small query),
        -- in a transaction of its own: the oldest ready message of priority 0 that no other call holds (SKIP LOCKED:
        -- concurrent reserves take different messages instead of racing for the oldest), claimed with a random
        -- token of its own, then read back. Anything else (nothing ready at priority 0, a message due for
        -- dead-lettering, a deadlock) goes the general way below, which walks every priority.
        BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; SET v_claims = 0; END;
            SET v_claims = 0;
            START TRANSACTION;
            CALL pyqueue__claim_short(v_queue, in_worker, in_timeout, v_vis, v_max, v_id, v_token);
            SET v_claims = v_id IS NOT NULL;
            COMMIT;
        END;
        IF v_claims = 1 THEN
            SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
                   m.attempts, m.created_at, m.scheduled_at_initially, m.headers
              FROM pyqueue_message m FORCE INDEX (PRIMARY)
             WHERE m.id = v_id AND m.reserve_token = v_token;
        END IF;
    END IF;
    IF v_own = 1 AND v_checked IS NULL AND in_n BETWEEN 2 AND 5000 AND NOT v_paused AND NOT v_limited
       AND NOT v_above THEN
        -- A batch in autocommit mode from a queue whose messages have priority 0, the same way in a few statements
        -- (pyqueue__claim_short_batch: a plain read of the oldest ready ids, a locking read of them by id, one UPDATE
        -- by id; the general way reads the candidates with all it re-checks as JSON, claims them by one UPDATE joined
        -- to a SKIP LOCKED read of them, and parses them all again to read back), in a transaction of its own at
        -- READ COMMITTED (no gap locks: pushes never wait for it), then read back by id and token in FIFO order.
        -- Fewer than in_n is the whole answer (a candidate another call holds is replaced by the next ones; nothing
        -- lies below priority 0). Anything else (a message below priority 0, one due for dead-lettering, a deadlock,
        -- any error) rolls back and goes the general way below. At most 5000: the general way's page, which keeps
        -- the UPDATE's buffer of changed rows in memory.
        BEGIN
            DECLARE EXIT HANDLER FOR SQLEXCEPTION
            BEGIN
                ROLLBACK;
                IF v_gcl IS NOT NULL THEN SET SESSION group_concat_max_len = v_gcl; END IF;
                SET v_claims = NULL;
            END;
            SET v_claims = NULL;
            IF @@SESSION.group_concat_max_len < 20 * in_n + 2 THEN  -- the ids, at most 19 digits and a comma each
                SET v_gcl = @@SESSION.group_concat_max_len;
                SET SESSION group_concat_max_len = CAST(20 * in_n + 2 AS UNSIGNED);  -- (in_n is a DECIMAL: refused as it is)
            END IF;
            CALL pyqueue__random_token(v_secret);
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
            START TRANSACTION;
            CALL pyqueue__claim_short_batch(v_queue, in_worker, in_n, in_timeout, v_vis, v_max, v_secret, v_ids,
                                            v_claims);
            IF v_claims IS NULL THEN ROLLBACK; ELSE COMMIT; END IF;
            IF v_gcl IS NOT NULL THEN SET SESSION group_concat_max_len = v_gcl; END IF;
        END;
        IF v_claims IS NOT NULL THEN  -- (none found: the empty result)
            SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
                   m.attempts, m.created_at, m.scheduled_at_initially, m.headers
              FROM JSON_TABLE(COALESCE(v_ids, '[]'), '$[*]' COLUMNS (
                       ord  FOR ORDINALITY,
                       c_id BIGINT PATH '$')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(v_secret, m.id), 256), 32), 13, 1, '4'),
               17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(v_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
               9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-')
             ORDER BY j.ord;
            SET v_claims = 1;
        END IF;
    END IF;
    IF COALESCE(v_claims, 0) = 0 THEN  -- (not handed out above)
        IF NOT v_paused AND v_limited THEN
            CALL pyqueue__reserve_limited(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max,
                                          v_dlq, FALSE, NULL, v_ids, v_claims);
        ELSE
            CALL pyqueue__reserve(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max, v_dlq,
                                  v_paused);
        END IF;
    END IF;
    IF v_txn = 1 THEN COMMIT; END IF;
END //

-- pyqueue__reserve_limited: queue_reserve on a queue with limits, one candidate at a time: per priority, a plain read
-- of ready ids in FIFO pages, then per candidate a SELECT ... FOR UPDATE SKIP LOCKED by id, a slot for a limited kind
-- (pyqueue__limit_claim), and an UPDATE by id re-checking what was seen (a fresh token, scheduled_at = now + timeout,
-- attempts + 1); a candidate at max_attempts is claimed and dead-lettered instead. The result is read by (id, token)
-- of the claims. A failing call gives its claims and slots back. In autocommit mode (MariaDB) the whole call is one
-- transaction of its own at READ COMMITTED, run again whole on a deadlock (1213, 1467; up to 10 times): MariaDB runs
-- no handler for a deadlock found while a statement waits for a gap lock, so statement by statement such a call
-- failed keeping the slots and claims taken before it until their timeout; now it fails with nothing taken. At READ
-- COMMITTED the slot-taking UPDATE's reads of the holders are consistent reads and its scan of the slots is
-- semi-consistent; with nothing more, takes racing in such transactions handed out more than the capacity (5 live
-- on a limit of 3). So the own transaction first locks the queue's limit rows (shared; queue_drop and
-- queue_set_limit lock them before message and slot rows), then, at its first candidate of a limited kind, the slot
-- rows of all the queue's kinds (FOR UPDATE, the rows the UPDATE scans and at REPEATABLE READ keeps locked): no other
-- take is in progress while it picks a slot, and every holder that took its slot before has committed its claim. All
-- kinds at once, in one statement in primary key order: locked kind by kind at each kind's first candidate, two
-- calls whose FIFO pages met two kinds in opposite orders deadlocked, so often under load (24 autocommit
-- queue_commit_reserve loops) that 10 runs of a call in a row did.
-- Rates (a queue with rows in pyqueue_rate; read once per run, with the limit rows): a candidate first needs a free
-- unit of its kind's rate, then one of the queue-wide rate (pyqueue__rate_pick: locked, SKIP LOCKED, not yet
-- written), then its limit slot; the units are written with the reservation's time, v_now (its lease start:
-- scheduled_at - timeout), only once the message is claimed, so a candidate that a rate, its limit or a lost race
-- holds back uses up nothing. A kind without a free unit joins the full kinds (its messages stay ready, in their
-- places; other kinds are still served); a used-up queue-wide rate ends the call. A candidate due for
-- dead-lettering needs no unit. Pop (in_secret not NULL, for queue_pop on a queue with rates): the same walk with
-- rates only (no limits, no dead-lettering), claims with pyqueue__claim's tokens derived from in_secret, attempts
-- and worker unchanged, at most @@max_allowed_packet of result (at least one); the claims are appended to io_claimed
-- in pyqueue__claim's format (out_count of them) and no result set is emitted.
-- Locks: in autocommit mode the limit and rate rows (shared), each candidate row, all the queue's slot rows and the
-- rate units taken, until the call ends; otherwise each candidate row for one statement (or until the caller's
-- transaction ends), the slot rows as pyqueue__limit_take and the rate units until the transaction ends. Emits the
-- result set (a reserve).
DROP PROCEDURE IF EXISTS pyqueue__reserve_limited //
CREATE PROCEDURE pyqueue__reserve_limited(
    IN    in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_timeout DECIMAL(20,6),
    IN    in_n       INT,
    IN    in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN    in_vis     DECIMAL(20,6),
    IN    in_max     INT,
    IN    in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_serial  BOOLEAN,
    IN    in_secret  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    INOUT io_claimed LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_left, v_page, v_got, v_priority, v_found, v_dead, v_attempts, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now, v_until, v_after_at, v_at, v_seen_at DATETIME(6);
    DECLARE v_after_id, v_id BIGINT;
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_seen_token, v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_seen_by VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed LONGTEXT CHARACTER SET utf8mb4 DEFAULT '[]';
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_limits     INT;  -- limits (never for a pop)
    DECLARE v_locked BOOLEAN;  -- the own transaction locked the queue's slot rows
    DECLARE v_ok INT DEFAULT 1;
    DECLARE v_full LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_own, v_txn, v_tries INT DEFAULT 0;
    DECLARE v_slots INT;
    DECLARE v_pop BOOLEAN DEFAULT in_secret IS NOT NULL;
    DECLARE v_rates LONGTEXT CHARACTER SET utf8mb4;  -- [[kind, per_us], ...] of the kind rates
    DECLARE v_qper, v_kper, v_budget, v_size BIGINT; -- the queue-wide rate's per; the candidate kind's; pop's budget
    DECLARE v_nrates INT DEFAULT 0;
    DECLARE v_kslot, v_qslot INT;
    DECLARE v_popped LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    -- An error after claims: give them back as they were (in the call's own transaction: roll it back), then fail.
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        DECLARE v_i INT DEFAULT 0;
        DECLARE v_c LONGTEXT CHARACTER SET utf8mb4;
        IF v_txn = 1 THEN ROLLBACK; SET v_claimed = '[]'; END IF;
        WHILE v_i < JSON_LENGTH(v_claimed) DO
            SET v_c = JSON_EXTRACT(v_claimed, CONCAT('$[', v_i, ']'));
            UPDATE pyqueue_message
               SET scheduled_at = CAST(JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[2]')) AS DATETIME(6)),
                   attempts = attempts - IF(v_pop, 0, 1),
                   reserve_token = IF(JSON_TYPE(JSON_EXTRACT(v_c, '$[3]')) = 'NULL', NULL,
                                      JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[3]'))),
                   reserved_by = IF(JSON_TYPE(JSON_EXTRACT(v_c, '$[4]')) = 'NULL', NULL,
                                    JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[4]')))
             WHERE id = JSON_EXTRACT(v_c, '$[0]') AND reserve_token = JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[1]'));
            IF v_limits THEN
                UPDATE pyqueue_limit_slot
                   SET msg_id = NULL, msg_attempts = NULL, msg_until = NULL
                 WHERE queue_name = v_queue AND msg_id = JSON_EXTRACT(v_c, '$[0]')
                   AND msg_attempts = JSON_EXTRACT(v_c, '$[5]');
            END IF;
            SET v_i = v_i + 1;
        END WHILE;
        RESIGNAL;
    END;

    SET v_queue = in_queue, v_vis = in_vis, v_max = in_max, v_dlq = in_dlq, v_paused = FALSE,
        v_kinds = in_kinds, out_count = 0;

    IF NOT v_paused THEN
        CALL pyqueue__own_transaction(FALSE, v_own);
        SET v_now = UTC_TIMESTAMP(6);
        SET v_until = v_now + INTERVAL CAST(COALESCE(in_timeout, v_vis) * 1000000 AS SIGNED) MICROSECOND;
        SELECT EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue) AND NOT v_pop INTO v_limits;
        REPEAT
          SET v_retry = 0, v_tries = v_tries + 1, v_claimed = '[]', v_full = NULL, v_locked = FALSE,
              v_left = COALESCE(in_n, 1), v_popped = '', out_count = 0,
              v_budget = @@max_allowed_packet - 4096;
          BEGIN
            DECLARE c_ready CURSOR FOR
                SELECT m.id, m.scheduled_at, m.p_kind
                  FROM pyqueue_message m
                 WHERE m.queue_name = v_queue
                   AND m.priority = v_priority
                   AND m.scheduled_at <= v_now
                   AND (v_after_id IS NULL
                        OR m.scheduled_at > v_after_at
                        OR (m.scheduled_at = v_after_at AND m.id > v_after_id))
                   AND (v_kinds IS NULL OR JSON_CONTAINS(v_kinds, JSON_QUOTE(m.p_kind)))
                   AND (v_full IS NULL OR NOT JSON_CONTAINS(v_full, JSON_QUOTE(m.p_kind)))  -- full kinds
                 ORDER BY m.scheduled_at, m.id
                 LIMIT v_page;
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
            -- in the call's own transaction: rolled back whole (by the server already, on a deadlock) and run again
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN
                IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0, v_claimed = '[]'; END IF;
                IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF;
            END;
            IF v_own = 1 THEN
                SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
                START TRANSACTION;
                SET v_txn = 1;
            END IF;
            IF v_txn = 1 OR in_serial THEN
                -- the limit rows first (shared), before any message row: queue_drop and queue_set_limit lock them
                SELECT COUNT(*) > 0 AND NOT v_pop INTO v_limits
                  FROM pyqueue_limit l WHERE l.queue_name = v_queue LOCK IN SHARE MODE;
                SELECT COUNT(*), MAX(IF(r.p_kind = '', r.per_us, NULL)),
                       JSON_ARRAYAGG(IF(r.p_kind = '', NULL, JSON_ARRAY(r.p_kind, r.per_us)))
                  INTO v_nrates, v_qper, v_rates
                  FROM pyqueue_rate r WHERE r.queue_name = v_queue LOCK IN SHARE MODE;
            ELSE
                SELECT COUNT(*), MAX(IF(r.p_kind = '', r.per_us, NULL)),
                       JSON_ARRAYAGG(IF(r.p_kind = '', NULL, JSON_ARRAY(r.p_kind, r.per_us)))
                  INTO v_nrates, v_qper, v_rates
                  FROM pyqueue_rate r WHERE r.queue_name = v_queue;
            END IF;
            -- the top priority to start from: MAX(priority) reads the end of the queue's range in the ready index,
            -- where claims insert and commits leave deleted entries until purge, so a queue with nothing above
            -- priority 0 starts at 0 after one probe clear of it (nothing at 0: the walk goes on down, and ends when
            -- nothing lies below)
            SELECT IF(EXISTS (SELECT 1 FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
                               WHERE m.queue_name = v_queue AND m.priority > 0),
                      (SELECT MAX(m.priority) FROM pyqueue_message m WHERE m.queue_name = v_queue), 0)
              INTO v_priority;
            priorities: WHILE v_priority IS NOT NULL AND v_left > 0 DO
                SET v_after_at = NULL, v_after_id = NULL;
                REPEAT
                    SET v_page = LEAST(v_left, 1000) + 16, v_got = 0;
                    OPEN c_ready;
                    candidates: LOOP
                        SET v_done = 0;
                        FETCH c_ready INTO v_id, v_at, v_kind;
                        IF v_done = 1 THEN LEAVE candidates; END IF;
                        SET v_got = v_got + 1, v_after_at = v_at, v_after_id = v_id;
                        BEGIN
                            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
                            SET v_found = 1;
                            -- queue_name again: queue_move may have moved the row meanwhile
                            SELECT m.attempts, m.reserve_token, m.scheduled_at, m.reserved_by,
                                   IF(v_pop, 2 * (LENGTH(m.payload) + LENGTH(m.p_key) + LENGTH(m.p_kind)
                                                  + COALESCE(LENGTH(m.headers), 0)) + 256, 0)
                              INTO v_attempts, v_seen_token, v_seen_at, v_seen_by, v_size
                              FROM pyqueue_message m
                             WHERE m.id = v_id AND m.queue_name = v_queue AND m.scheduled_at <= v_now
                               FOR UPDATE SKIP LOCKED;
                        END;
                        IF v_found = 1 AND v_pop AND out_count > 0 AND v_size > v_budget THEN
                            SET v_found = 0, v_left = 0;  -- the result is full
                        END IF;
                        IF v_found = 1 THEN
                            IF v_pop THEN
                                SET v_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(in_secret, v_id), 256), 32), 13, 1, '4'),
                                    17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(in_secret, v_id), 256), 17, 1), 16, 10) + 1, 1)),
                                    9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
                            ELSE
                                CALL pyqueue__random_token(v_token);
                            END IF;
                            IF v_attempts >= v_max AND NOT v_pop THEN
                                -- its last allowed reservation expired: claim it to dead-letter (attempts unchanged)
                                UPDATE pyqueue_message FORCE INDEX (PRIMARY)
                                   SET scheduled_at = v_until, reserve_token = v_token,
                                       last_error = COALESCE(last_error,
                                                             'reservation expired on its last allowed delivery')
                                 WHERE id = v_id AND queue_name = v_queue AND scheduled_at <= v_now
                                   AND attempts = v_attempts AND reserve_token <=> v_seen_token;
                                IF ROW_COUNT() = 1 THEN
                                    CALL pyqueue__dead_letter(in_queue, v_dlq, v_id, v_token, v_now, TRUE, v_dead);
                                    IF v_dead = -1 THEN  -- its group row was busy: left as it was
                                        CALL pyqueue__unclaim(v_id, v_token, v_seen_at, v_seen_token);
                                    END IF;
                                END IF;
                            ELSE
                                SET v_ok = 1, v_kslot = NULL, v_qslot = NULL;
                                IF v_nrates > 0 THEN  -- a free unit of the kind's rate, then of the queue-wide one
                                    IF JSON_CONTAINS(COALESCE(v_full, '[]'), JSON_QUOTE(v_kind)) THEN
                                        SET v_ok = 0;
                                    ELSE
                                        SELECT MAX(x.per_us) INTO v_kper
                                          FROM JSON_TABLE(COALESCE(v_rates, '[]'), '$[*]' COLUMNS (
                                                   k      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
                                                   per_us BIGINT PATH '$[1]')) AS x
                                         WHERE x.k = v_kind;
                                        IF v_kper IS NOT NULL THEN
                                            CALL pyqueue__rate_pick(v_queue, v_kind, v_kper, v_now, v_kslot);
                                            IF v_kslot IS NULL THEN
                                                SET v_ok = 0, v_full = JSON_ARRAY_APPEND(COALESCE(v_full, '[]'), '$', v_kind);
                                            END IF;
                                        END IF;
                                        IF v_ok = 1 AND v_qper IS NOT NULL THEN
                                            CALL pyqueue__rate_pick(v_queue, '', v_qper, v_now, v_qslot);
                                            IF v_qslot IS NULL THEN
                                                SET v_ok = 0, v_left = 0;  -- the queue-wide rate is used up: the end
                                            END IF;
                                        END IF;
                                    END IF;
                                END IF;
                                IF v_limits AND v_ok = 1 THEN  -- a slot first, for a kind with a limit
                                    IF (v_txn = 1 OR in_serial) AND NOT v_locked THEN
                                        -- the slot rows of ALL the queue's kinds, in one statement in primary key
                                        -- order, until the commit (see above)
                                        SELECT COUNT(*) INTO v_slots
                                          FROM pyqueue_limit_slot s FORCE INDEX (PRIMARY)
                                         WHERE s.queue_name = v_queue
                                           FOR UPDATE;
                                        SET v_locked = TRUE;
                                    END IF;
                                    CALL pyqueue__limit_claim(v_queue, v_id, v_attempts, v_until, v_now, v_full, v_ok);
                                END IF;
                                UPDATE pyqueue_message FORCE INDEX (PRIMARY)
                                   SET scheduled_at = v_until,
                                       attempts = attempts + IF(v_pop, 0, 1),
                                       reserved_by = IF(v_pop, reserved_by, in_worker),
                                       reserve_token = v_token
                                 WHERE id = v_id AND queue_name = v_queue AND scheduled_at <= v_now
                                   AND attempts = v_attempts AND reserve_token <=> v_seen_token
                                   AND v_ok = 1;
                                IF ROW_COUNT() = 1 THEN
                                    -- the rate units taken, written once, with the reservation's time
                                    IF v_kslot IS NOT NULL THEN
                                        UPDATE pyqueue_rate_slot SET used_at = v_now
                                         WHERE queue_name = v_queue AND p_kind = v_kind AND slot_no = v_kslot;
                                    END IF;
                                    IF v_qslot IS NOT NULL THEN
                                        UPDATE pyqueue_rate_slot SET used_at = v_now
                                         WHERE queue_name = v_queue AND p_kind = '' AND slot_no = v_qslot;
                                    END IF;
                                    IF v_pop THEN  -- as pyqueue__claim's candidates: [id, attempts, at, token, by, 0, priority]
                                        SET v_popped = CONCAT(v_popped, IF(v_popped = '', '', ','),
                                                              JSON_ARRAY(v_id, v_attempts,
                                                                         DATE_FORMAT(v_seen_at, '%Y-%m-%d %H:%i:%s.%f'),
                                                                         v_seen_token, v_seen_by, 0, v_priority)),
                                            v_budget = v_budget - v_size, out_count = out_count + 1;
                                    END IF;
                                    -- id, token, then what the claim changed (to give it back)
                                    SET v_claimed = JSON_ARRAY_APPEND(v_claimed, '$',
                                        JSON_ARRAY(v_id, v_token,
                                                   DATE_FORMAT(v_seen_at, '%Y-%m-%d %H:%i:%s.%f'),
                                                   v_seen_token, v_seen_by, v_attempts + 1));
                                    SET v_left = v_left - 1;
                                END IF;
                            END IF;
                        END IF;
                        IF v_left <= 0 THEN LEAVE candidates; END IF;
                    END LOOP;
                    CLOSE c_ready;
                UNTIL v_left <= 0 OR v_got < v_page END REPEAT;
                SELECT MAX(m.priority) INTO v_priority
                  FROM pyqueue_message m
                 WHERE m.queue_name = v_queue AND m.priority < v_priority;
            END WHILE;
            IF v_txn = 1 THEN
                COMMIT;
                SET v_txn = 0;
            END IF;
          END;
        UNTIL v_retry = 0 END REPEAT;
    END IF;

    IF v_pop THEN
        SET io_claimed = CONCAT(COALESCE(io_claimed, ''), IF(COALESCE(io_claimed, '') = '' OR v_popped = '', '', ','),
                                v_popped);
    ELSE
    SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
           m.attempts, m.created_at, m.scheduled_at_initially, m.headers
      FROM JSON_TABLE(v_claimed, '$[*]' COLUMNS (
               ord      FOR ORDINALITY,
               c_id     BIGINT   PATH '$[0]',
               c_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
      JOIN pyqueue_message m ON m.id = c.c_id
     WHERE m.reserve_token = c.c_token COLLATE utf8mb4_bin
     ORDER BY c.ord;
    END IF;
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
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id, v_hist BIGINT;
    DECLARE v_history, v_results BOOLEAN;
    DECLARE v_done, v_own, v_tries, v_txn INT DEFAULT 0;
    DECLARE v_found, v_attempts, v_deps INT;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    IF (    CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
            AND CHAR_LENGTH(in_key) BETWEEN 1 AND 255 AND NOT (in_key LIKE '% ')
            AND CHAR_LENGTH(in_kind) BETWEEN 1 AND 128 AND NOT (in_kind LIKE '% ')
            AND LOCATE(X'ED', CAST(CONCAT(in_queue, in_key, in_kind) AS BINARY)) = 0
            AND in_token REGEXP '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\\z'
       ) IS NOT TRUE THEN
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
                DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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
    IF v_id = 0 THEN CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused); END IF;  -- unknown queue?
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
                DECLARE EXIT HANDLER FOR 1213, 1467
                BEGIN
                    IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF;
                    IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF;
                END;
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
                IF v_key LIKE '%@____-__-__T__:__:__Z' THEN  -- a recurring message's occurrence
                    CALL pyqueue__schedule_next(v_queue, v_key, v_kind);
                END IF;
                DELETE FROM pyqueue_message WHERE id = v_id AND reserve_token = v_held;
                SET v_done = ROW_COUNT();
                IF v_hist IS NOT NULL AND v_done = 0 THEN DELETE FROM pyqueue_history WHERE id = v_hist; END IF;  -- unarchive
                IF v_done = 1 AND v_results THEN
                    CALL pyqueue__result_put(v_queue, v_key, v_kind, 'succeeded', NULL, v_error, v_attempts, v_progress,
                                             UTC_TIMESTAMP(6));
                END IF;
                IF v_done = 1 AND v_results THEN  -- the messages that wait for it (dependencies live in queues that keep results)
                    SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
                     WHERE d.queue_name = v_queue AND d.p_key = v_key AND d.p_kind = v_kind
                      LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
                    IF v_deps > 0 THEN CALL pyqueue__deps_left(v_queue, v_key, v_kind, TRUE, NULL); END IF;
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
    CALL pyqueue__give_back(in_queue, in_key, in_kind, in_token, in_delay, TRUE, in_error, FALSE, v_outcome);
    SELECT v_outcome AS outcome;
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
    CALL pyqueue__give_back(in_queue, in_key, in_kind, in_token, NULL, TRUE, in_error, TRUE, v_outcome);
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
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_att, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id BIGINT;
    DECLARE v_now DATETIME(6);
    DECLARE v_done, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
                DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                UPDATE pyqueue_message
                   SET scheduled_at = v_now + INTERVAL CAST(COALESCE(in_delay, 0) * 1000000 AS SIGNED) MICROSECOND,
                       reserve_token = NULL, reserved_by = NULL, attempts = GREATEST(attempts - 1, 0)
                 WHERE id = v_id AND reserve_token = v_held;
                SET v_done = ROW_COUNT();
            END;
        UNTIL v_retry = 0 END REPEAT;
        IF v_done = 1 AND EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue AND l.p_kind = v_kind) THEN
            SET v_tries = 0;
            REPEAT
                SET v_retry = 0, v_tries = v_tries + 1;
                BEGIN
                    DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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
                DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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
    CALL pyqueue__extend(in_queue, in_key, in_kind, in_token, in_timeout, v_token, v_id);
    SELECT v_token AS token;
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
    CALL pyqueue__extend(in_queue, in_key, in_kind, in_token, in_timeout, v_token, v_id);
    IF v_token IS NOT NULL THEN
        SELECT COUNT(*) INTO v_requested
          FROM pyqueue_message m FORCE INDEX (PRIMARY)
         WHERE m.id = v_id AND m.reserve_token = v_token AND m.cancel_requested_at IS NOT NULL;
    END IF;
    SELECT v_token AS token, v_requested AS cancel_requested;
END //

-- queue_move: commits the reservation here and pushes the message to in_to_queue (payload NULL = unchanged; priority
-- kept; schedule, created_at and attempts start afresh, except into its own queue, which keeps the attempts; progress
-- and a cancel request are kept into its own queue only). A move records no result. A live
-- message with the same key and kind there stays (dedup). Result: one row, moved = 1, or 0 when the token no longer
-- holds. ONE UPDATE of queue_name (payload, schedule, reservation) by id and token; on a duplicate key (1062) one
-- DELETE by id and token instead. A grouped message keeps its group into its own queue; moved away it leaves its
-- group (pyqueue__group_leave). A schedule's pending occurrence moved (anywhere, its own queue included) makes way for
-- the next occurrence as a commit does (pyqueue__schedule_next before the UPDATE, as queue_commit before its DELETE):
-- the schedule goes on.
-- Locks: the message row and a shared lock on the target queue row, for one statement; for a grouped message moved
-- away, the group row first, until the transaction ends; the schedule row of an occurrence, for one statement.
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
    DECLARE v_queue, v_kind, v_to_queue, v_dlq, v_to_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_to_vis DECIMAL(20,6);
    DECLARE v_max, v_to_max INT;
    DECLARE v_paused, v_to_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_found INT DEFAULT 1;
    DECLARE v_id, v_hist BIGINT;
    DECLARE v_duplicate, v_done, v_own, v_deps INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
        CALL pyqueue__archive(v_queue, v_id, v_held, 'moved', v_to_queue, v_now, v_hist);
        IF v_key LIKE '%@____-__-__T__:__:__Z' THEN CALL pyqueue__schedule_next(v_queue, v_key, v_kind); END IF;
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
                   scheduled_at = v_now, scheduled_at_initially = v_now, created_at = v_now,
                   reserved_by = NULL, reserve_token = NULL
             WHERE id = v_id AND reserve_token = v_held;
            SET v_done = ROW_COUNT();  -- replaced below when the handler fired
        END;
        IF v_duplicate = 1 THEN
            DELETE FROM pyqueue_message WHERE id = v_id AND reserve_token = v_held;
            SET v_done = ROW_COUNT();
        END IF;
        CALL pyqueue__unarchive(v_hist, v_done);
        IF v_done = 1 AND v_to_queue <> v_queue THEN  -- moved on: it succeeded here, for the messages that wait for it
            SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
             WHERE d.queue_name = v_queue AND d.p_key = v_key AND d.p_kind = v_kind
              LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
            IF v_deps > 0 THEN CALL pyqueue__deps_left(v_queue, v_key, v_kind, TRUE, NULL); END IF;
        END IF;
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
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id BIGINT;
    DECLARE v_done, v_own, v_tries, v_deps INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
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
                DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                -- queue_name again: a concurrent queue_move may have moved the row out
                DELETE m FROM pyqueue_message m FORCE INDEX (PRIMARY) WHERE m.id = v_id AND m.queue_name = v_queue;
                SET v_done = ROW_COUNT();
            END;
        UNTIL v_retry = 0 END REPEAT;
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
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_worker VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
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
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
           SET scheduled_at = v_now, reserve_token = NULL, reserved_by = NULL
         WHERE id = v_id AND reserve_token = v_token AND scheduled_at > v_now;
        SET v_count = v_count + ROW_COUNT();
    END LOOP;
    CLOSE c_held;
    SELECT v_count AS released;
END //

-- ---- results, cancellation and progress of a reservation ----

-- pyqueue__finish_held: the end of the reservation in_token holds on (in_key, in_kind) of in_queue, as queue_commit
-- does it, on a queue that keeps results with its outcome in_state recorded in the same transaction: 'succeeded' with
-- in_result (queue_commit_result), or 'cancelled' (queue_cancel_held: history outcome 'cancelled', result NULL; on a
-- queue without results just the removal). out_done = 1, or 0 when the token no longer holds (nothing written).
-- A grouped message goes through pyqueue__group_leave; otherwise pyqueue__commit_held. In autocommit mode the steps
-- are one transaction of the call's own, run again on a deadlock. Locks: the message row (a grouped one: its group row
-- first), the history, schedule and result rows, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__finish_held //
CREATE PROCEDURE pyqueue__finish_held(
    IN  in_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_key    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_token  CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_state  VARCHAR(16)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_result LONGTEXT     CHARACTER SET utf8mb4,
    OUT out_done  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_id BIGINT;
    DECLARE v_history, v_results BOOLEAN;
    DECLARE v_retry INT;
    DECLARE v_own, v_tries, v_txn INT DEFAULT 0;
    SET out_done = 0;
    SELECT COALESCE(MAX(m.id), 0), MAX(m.group_key),
           (SELECT q.history_retention IS NOT NULL FROM pyqueue_queue q WHERE q.queue_name = in_queue),
           (SELECT q.result_retention IS NOT NULL FROM pyqueue_queue q WHERE q.queue_name = in_queue)
      INTO v_id, v_group, v_history, v_results
      FROM pyqueue_message m
     WHERE m.queue_name = in_queue AND m.p_key = in_key AND m.p_kind = in_kind AND m.reserve_token = in_token;
    IF v_id > 0 THEN CALL pyqueue__own_transaction(TRUE, v_own); END IF;
    IF v_group IS NOT NULL THEN
        CALL pyqueue__group_leave(IF(in_state = 'cancelled', 'cancel_held', 'commit_result'), in_queue, v_group, v_id,
                                  in_key, in_kind, in_token, NULL, in_result, UTC_TIMESTAMP(6), v_own, out_done);
    ELSEIF v_id > 0 THEN
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467
                BEGIN
                    IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF;
                    IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF;
                END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF; RESIGNAL; END;
                IF v_own = 1 THEN
                    START TRANSACTION;
                    SET v_txn = 1;
                END IF;
                CALL pyqueue__commit_held(in_queue, v_id, in_key, in_kind, in_token, v_history,
                                          IF(v_results, in_state, NULL), in_result, in_state <> 'cancelled', out_done);
                IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
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
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_done INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    CALL pyqueue__check_result(v_queue, in_result);
    CALL pyqueue__finish_held(v_queue, v_key, v_kind, v_held, 'succeeded', in_result, v_done);
    SELECT v_done AS committed;
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
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_done INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    CALL pyqueue__finish_held(v_queue, v_key, v_kind, v_held, 'cancelled', NULL, v_done);
    SELECT v_done AS cancelled;
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
-- evidence of failures: an admin removes one with queue_remove or hands it back with queue_redrive).
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
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key, v_group VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_outcome VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_attempts, v_retry, v_found, v_done, v_deps INT;
    DECLARE v_paused, v_history, v_results BOOLEAN;
    DECLARE v_id, v_hist BIGINT;
    DECLARE v_at, v_now DATETIME(6);
    DECLARE v_own, v_tries, v_txn, v_rounds INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
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
                    DECLARE EXIT HANDLER FOR 1213, 1467
                    BEGIN
                        IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF;
                        IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF;
                    END;
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
                        IF v_done = 1 AND v_results THEN
                            CALL pyqueue__result_put(v_queue, v_key, v_kind, 'cancelled', NULL, v_error, v_attempts,
                                                     v_progress, v_now);
                        END IF;
                        IF v_done = 1 AND v_results THEN  -- the messages that wait for it are cancelled
                            SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
                             WHERE d.queue_name = v_queue AND d.p_key = v_key AND d.p_kind = v_kind
                              LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
                            IF v_deps > 0 THEN CALL pyqueue__deps_left(v_queue, v_key, v_kind, FALSE, 'was cancelled'); END IF;
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

-- queue_set_progress: stores in_progress (JSON text of at most 65536 bytes; NULL or the JSON value null clears it, as
-- SQL NULL) on the reservation in_token holds, without changing its token or its lease. Result: one row, updated = 1,
-- or 0 when the token no longer holds (nothing written). The progress stays across rollback, fail, snooze and extend
-- (it goes only with the message), and is copied into the message's result row. Steps: locate by key and token
-- (plain read), one UPDATE by id and token. Locks: the message row, for one statement.
DROP PROCEDURE IF EXISTS queue_set_progress //
CREATE PROCEDURE queue_set_progress(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_progress LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id BIGINT;
    DECLARE v_done INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
        IF v_done = 0 THEN  -- the same progress again changes no row: still held?
            SELECT COUNT(*) INTO v_done FROM pyqueue_message m FORCE INDEX (PRIMARY)
             WHERE m.id = v_id AND m.reserve_token = v_held;
        END IF;
    END IF;
    SELECT v_done AS updated;
END //


-- ==== wakeups ====
-- Waiting for work without polling hard. MySQL has no NOTIFY: the channel and its window are kept for parity with
-- PostgreSQL; a waiter sleeps until the next message falls due, or long-polls inside the server (queue_wait).

-- queue_channel: the queue's PostgreSQL NOTIFY channel, 'pyqueue_' + MD5 of its name (for parity: MySQL has no
-- NOTIFY). One row: channel. Raises unknown_queue. Plain read.
DROP PROCEDURE IF EXISTS queue_channel //
CREATE PROCEDURE queue_channel(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    SELECT CONCAT('pyqueue_', MD5(v_queue)) AS channel;
END //

-- queue_set_notify_window: the queue's wakeup throttle window in seconds (NULL = 0.05, 0 = none, at most 3600);
-- effective on PostgreSQL only (MySQL workers poll), accepted here for parity. Locks: the queue's pyqueue_notify row,
-- for one statement.
DROP PROCEDURE IF EXISTS queue_set_notify_window //
CREATE PROCEDURE queue_set_notify_window(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_window DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    CALL pyqueue__check_duration('window', in_window, FALSE);
    IF in_window > 3600 THEN CALL pyqueue__raise('invalid_argument', 'window must not exceed 1 hour'); END IF;
    INSERT INTO pyqueue_notify (queue_name, notify_window)
    VALUES (v_queue, COALESCE(in_window, 0.05))
    ON DUPLICATE KEY UPDATE notify_window = VALUES(notify_window);
END //

-- queue_next_scheduled_at: when the next message (of in_kinds, a JSON array; NULL = any) becomes eligible, counting
-- delays and reservation expiries. One row: next_scheduled_at (UTC), wait_s (0 when one is ready); both NULL when
-- none or paused. Plain reads.
DROP PROCEDURE IF EXISTS queue_next_scheduled_at //
CREATE PROCEDURE queue_next_scheduled_at(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kinds LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_now, v_next DATETIME(6);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    CALL pyqueue__kinds(in_kinds, v_kinds);
    SET v_now = UTC_TIMESTAMP(6);
    IF NOT v_paused THEN CALL pyqueue__next_at(v_queue, v_kinds, v_now, v_next); END IF;
    SELECT v_next AS next_scheduled_at,
           GREATEST(TIMESTAMPDIFF(MICROSECOND, v_now, v_next), 0) / 1e6 AS wait_s;
END //

-- queue_wait: blocks until a message (of in_kinds, NULL = any) is eligible, or in_timeout seconds pass (NULL = 1, at
-- most 3600). One row: ready = 1, or 0 at the timeout. Checks every in_poll seconds (NULL = 0.05, at least 0.001) and
-- right when a delay or reservation falls due: one round trip per wait. Call it in autocommit mode or READ COMMITTED
-- (a REPEATABLE READ snapshot never sees new messages). Takes no locks.
DROP PROCEDURE IF EXISTS queue_wait //
CREATE PROCEDURE queue_wait(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN in_timeout DECIMAL(20,6),
    IN in_poll    DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_poll, v_left DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_kinds LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_now, v_next, v_deadline DATETIME(6);
    DECLARE v_ready INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    CALL pyqueue__kinds(in_kinds, v_kinds);
    CALL pyqueue__check_duration('timeout', in_timeout, FALSE);
    CALL pyqueue__check_duration('poll', in_poll, TRUE);
    IF in_poll < 0.001 THEN CALL pyqueue__raise('invalid_argument', 'poll must be at least 1 millisecond'); END IF;
    IF in_timeout > 3600 THEN CALL pyqueue__raise('invalid_argument', 'timeout must not exceed 1 hour'); END IF;
    SET v_poll = COALESCE(in_poll, 0.05);
    SET v_deadline = UTC_TIMESTAMP(6)
                     + INTERVAL CAST(COALESCE(in_timeout, 1) * 1000000 AS SIGNED) MICROSECOND;
    waiting: LOOP
        SET v_now = UTC_TIMESTAMP(6), v_next = NULL;
        SELECT q.paused INTO v_paused FROM pyqueue_queue q WHERE q.queue_name = v_queue;
        IF NOT v_paused THEN CALL pyqueue__next_at(v_queue, v_kinds, v_now, v_next); END IF;
        IF v_next <= v_now THEN
            SET v_ready = 1;
            LEAVE waiting;
        END IF;
        SET v_left = TIMESTAMPDIFF(MICROSECOND, v_now, v_deadline) / 1e6;
        IF v_left <= 0 THEN LEAVE waiting; END IF;
        DO SLEEP(LEAST(v_poll, v_left,
                       COALESCE(TIMESTAMPDIFF(MICROSECOND, v_now, v_next) / 1e6, v_poll)));
    END LOOP;
    SELECT v_ready AS ready;
END //

-- ==== fast paths ====
-- Two steps of the consume cycle in one call: commit the previous reservation and reserve the next, or commit many
-- reservations at once. The semantics of the routines they stand for, in fewer round trips.

-- pyqueue__commit_held: queue_commit's general way for the message in_id that in_token holds, outside any group: its
-- history row (in_history), a recurring occurrence's next one, the DELETE, and on a queue that keeps results
-- (in_state not NULL) its outcome in_state with in_result; out_done = 1, or 0 when the token no longer held it (then no
-- history or result row stays); then, with one locking probe of pyqueue_dependency, the messages that wait for it
-- (pyqueue__deps_left: in_ok, it succeeded; else it was cancelled). in_state 'cancelled' (queue_cancel_held) archives as 'cancelled'. For
-- queue_commit_reserve, queue_commit_result and queue_cancel_held. Locks: the message row, the schedule row of a
-- recurring occurrence, the result row.
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
    DECLARE v_attempts, v_deps INT;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_progress LONGTEXT CHARACTER SET utf8mb4;
    IF in_state IS NOT NULL THEN  -- what the result row copies, read under the message's lock
        SELECT m.attempts, m.last_error, m.progress INTO v_attempts, v_error, v_progress
          FROM pyqueue_message m FORCE INDEX (PRIMARY)
         WHERE m.id = in_id AND m.reserve_token = in_token
           FOR UPDATE;
    END IF;
    IF in_history THEN
        CALL pyqueue__archive(in_queue, in_id, in_token, IF(in_state = 'cancelled', 'cancelled', 'committed'), NULL,
                              UTC_TIMESTAMP(6), v_hist);
    END IF;
    IF in_key LIKE '%@____-__-__T__:__:__Z' THEN CALL pyqueue__schedule_next(in_queue, in_key, in_kind); END IF;
    DELETE FROM pyqueue_message WHERE id = in_id AND reserve_token = in_token;
    SET out_done = ROW_COUNT();
    IF v_hist IS NOT NULL THEN CALL pyqueue__unarchive(v_hist, out_done); END IF;  -- (a nested CALL costs)
    IF out_done = 1 AND in_state IS NOT NULL THEN
        CALL pyqueue__result_put(in_queue, in_key, in_kind, in_state, in_result, v_error, v_attempts, v_progress,
                                 UTC_TIMESTAMP(6));
    END IF;
    IF out_done = 1 AND in_state IS NOT NULL THEN  -- the messages that wait for it (in_ok: it succeeded; else it was
                                                  -- cancelled); dependencies live in queues that keep results
        SELECT COUNT(*) INTO v_deps FROM pyqueue_dependency d
         WHERE d.queue_name = in_queue AND d.p_key = in_key AND d.p_kind = in_kind
          LOCK IN SHARE MODE;  -- the latest rows, whatever the snapshot; finds nothing for a message without parents or children
        IF v_deps > 0 THEN CALL pyqueue__deps_left(in_queue, in_key, in_kind, in_ok, 'was cancelled'); END IF;
    END IF;
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
    DECLARE v_own, v_found, v_txn, v_claims, v_tries INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_commit   BOOLEAN DEFAULT NOT (in_key IS NULL AND in_kind IS NULL AND in_token IS NULL);
    DECLARE v_checked, v_above BOOLEAN;
    DECLARE v_short BOOLEAN DEFAULT FALSE;
    DECLARE v_expired, v_first BOOLEAN;
    DECLARE v_next BIGINT;
    DECLARE v_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_rated LONGTEXT CHARACTER SET utf8mb4;  -- (pyqueue__reserve_limited's pop claims: unused here)
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_txn = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
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
           EXISTS (SELECT 1 FROM pyqueue_message p FORCE INDEX (pyqueue_message_ready_idx)
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
    -- shared, then the slot rows of all the queue's kinds in one statement, so two calls never wait for each other's
    -- slot rows in opposite orders): at REPEATABLE READ the slot-taking UPDATE of a racing call read the holders'
    -- message rows with shared locks while holding slot rows, so the committed row (a slot's holder) deadlocked it
    -- in either order; at READ COMMITTED those reads take no lock. A deadlock left (with a call outside this path)
    -- rolls the call back whole and runs it again (up to 10 times), as queue_reserve's own transaction does; its
    -- rows are sent only at its end, once nothing of it can fail any more. Otherwise (inside
    -- the caller's transaction) after the reserve.
    SET v_first = COALESCE(v_commit AND v_id > 0 AND v_group IS NULL
                           AND (v_short OR v_expired OR (v_txn = 1 AND v_limited)), FALSE);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_claims = 0, v_done = IF(v_commit, 0, NULL);
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN
                IF v_txn = 1 THEN ROLLBACK; END IF;
                IF v_txn = 1 AND v_limited AND NOT v_paused AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF;
            END;
            IF v_txn = 1 THEN
                IF v_short OR v_limited THEN SET TRANSACTION ISOLATION LEVEL READ COMMITTED; END IF;
                START TRANSACTION;
            END IF;
            IF v_group IS NOT NULL THEN
                -- as queue_commit, BEFORE the reserve, so its group's next message can be reserved
                CALL pyqueue__own_transaction(TRUE, v_own);
                CALL pyqueue__group_leave(IF(v_results, 'commit_result', 'commit'), v_queue, v_group, v_id, v_key,
                                          v_kind, v_held, NULL, NULL, UTC_TIMESTAMP(6), v_own, v_done);
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

-- pyqueue__commit_batch: queue_commit_batch and queue_commit_result_batch: commits many reservations; in_keys, in_kinds,
-- in_tokens: JSON arrays of strings of one length (element i of each names one); in_results NULL, or a JSON array of
-- the same length (element i: the result of reservation i, any JSON; null: none). out_done = how many were deleted (a
-- token that no longer holds is skipped). Refuses, changing nothing, arrays that are NULL, not of strings, of
-- different lengths, or hold a bad key or kind or a malformed token (naming the first bad element); with in_results,
-- a queue that keeps no results and a result longer than the queue's max_payload. Set-based: each array parsed once
-- by JSON_TABLE; one read locates the rows; schedule occurrences one by one; one DELETE by id re-checks each token.
-- With history or results, the rows still held are locked first, then archived in one INSERT, their outcomes
-- 'succeeded' recorded in one INSERT, and deleted, in a transaction of its own in autocommit mode (run again on a
-- deadlock): a row another call removes meanwhile is never archived nor recorded. FIFO group messages go last, one by
-- one in group_key order (pyqueue__groups_leave).
-- Locks: the deleted rows, for one statement each step (with history or results: until the end of the transaction);
-- schedule rows of occurrences; group rows; result rows.
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
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_n, v_gdone, v_retry, v_nocc INT;
    DECLARE v_paused, v_history, v_results BOOLEAN;
    DECLARE v_bytes, v_max_payload BIGINT;
    DECLARE v_bad, v_gcl BIGINT;
    DECLARE v_ids, v_grouped, v_busy, v_deps LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_found, v_done, v_occs, v_i, v_own, v_tries INT DEFAULT 0;
    DECLARE v_now DATETIME(6);
    DECLARE v_one_kind, v_plain_keys, v_plain_tokens BOOLEAN;
    DECLARE v_kind LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;  -- (any length: read before the check)
    DECLARE v_quoted LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_queue_found INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SET SESSION group_concat_max_len = v_gcl; RESIGNAL; END;
    SET v_gcl = @@SESSION.group_concat_max_len;
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
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
    IF in_results IS NOT NULL THEN
        IF NOT JSON_VALID(in_results) OR JSON_TYPE(in_results) <> 'ARRAY' THEN
            CALL pyqueue__raise('invalid_argument', 'results must be a JSON array');
        END IF;
        IF JSON_LENGTH(in_results) <> v_n THEN
            CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds, tokens and results must have the same length');
        END IF;
        CALL pyqueue__check_result(v_queue, NULL);  -- the queue keeps results
        IF LOCATE(X'ED', CAST(in_results AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'results', in_results); END IF;
        IF LENGTH(in_results) > v_max_payload THEN  -- (else no element can be longer)
            SELECT MAX(LENGTH(r.elem)) INTO v_bytes
              FROM JSON_TABLE(in_results, '$[*]' COLUMNS (elem JSON PATH '$')) AS r;
            CALL pyqueue__check_result_size(v_bytes, v_max_payload);
        END IF;
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
        IF v_plain_keys IS NOT TRUE THEN
            SELECT LEAST(v_bad, COALESCE(MIN(k.ord), v_n + 1)) INTO v_bad
              FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS k
             WHERE (    JSON_TYPE(k.elem) = 'STRING'
                    AND CHAR_LENGTH(JSON_UNQUOTE(k.elem)) BETWEEN 1 AND 255
                    AND NOT (JSON_UNQUOTE(k.elem) LIKE '% ')) IS NOT TRUE;
        END IF;
        IF v_plain_tokens IS NOT TRUE THEN
            SELECT LEAST(v_bad, COALESCE(MIN(t.ord), v_n + 1)) INTO v_bad
              FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS t
             WHERE (    JSON_TYPE(t.elem) = 'STRING'
                    AND JSON_UNQUOTE(t.elem)
                        REGEXP '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\\z'
                   ) IS NOT TRUE;
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
        IF NOT v_history AND NOT v_results AND v_occs = 0 THEN
            -- No history, no results, no schedule: one DELETE joined to the arrays, re-checking each token under its lock
            IF v_one_kind THEN
                DELETE m
                  FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (
                           ord FOR ORDINALITY, k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
                  STRAIGHT_JOIN (SELECT j.ord, LOWER(j.t) AS t FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (
                            ord FOR ORDINALITY, t CHAR(36) CHARACTER SET ascii PATH '$')) AS j
                         LIMIT 18446744073709551615) AS t ON t.ord = k.ord
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
                    ON m.queue_name = v_queue AND m.p_key = k.k COLLATE utf8mb4_bin AND m.p_kind = v_kind
                   AND m.reserve_token = CONVERT(t.t USING utf8mb4) COLLATE utf8mb4_bin
                   AND m.group_key IS NULL;
                SET v_done = ROW_COUNT();
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
                    ON m.queue_name = v_queue AND m.p_key = k.k COLLATE utf8mb4_bin
                   AND UNHEX(MD5(m.p_kind)) = d.h
                   AND m.reserve_token = CONVERT(t.t USING utf8mb4) COLLATE utf8mb4_bin
                   AND m.group_key IS NULL;
                SET v_done = ROW_COUNT();
            END IF;
            IF v_done < v_n THEN
                -- the rest: messages of FIFO groups (or tokens that no longer hold)
                SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
                SELECT CONCAT('[', GROUP_CONCAT(JSON_ARRAY(m.id, m.p_key, m.p_kind, m.reserve_token, m.group_key)
                                                SEPARATOR ','), ']')
                  INTO v_grouped
                  FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (
                           ord FOR ORDINALITY, k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
                  STRAIGHT_JOIN (SELECT j.ord, UNHEX(MD5(j.kd)) AS h FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (
                            ord FOR ORDINALITY, kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS j
                         LIMIT 18446744073709551615) AS d ON d.ord = k.ord
                  STRAIGHT_JOIN (SELECT j.ord, LOWER(j.t) AS t FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (
                            ord FOR ORDINALITY, t CHAR(36) CHARACTER SET ascii PATH '$')) AS j
                         LIMIT 18446744073709551615) AS t ON t.ord = k.ord
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
                    ON m.queue_name = v_queue AND m.p_key = k.k COLLATE utf8mb4_bin
                   AND UNHEX(MD5(m.p_kind)) = d.h
                   AND m.reserve_token = CONVERT(t.t USING utf8mb4) COLLATE utf8mb4_bin
                   AND m.group_key IS NOT NULL;
                SET SESSION group_concat_max_len = v_gcl;
            END IF;
        ELSE
            SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
            -- [id, token, is a schedule's occurrence, p_key, p_kind, element number]; kinds and tokens joined on ord
            -- through narrow materialised derived tables (a kind as its MD5); grouped ones apart: [id, p_key, p_kind,
            -- token, group_key, result]
            SELECT COALESCE(SUM(m.group_key IS NULL), 0),
                   CONCAT('[', GROUP_CONCAT(IF(m.group_key IS NULL,
                                               JSON_ARRAY(m.id, m.reserve_token, m.p_key LIKE '%@____-__-__T__:__:__Z',
                                                          m.p_key, m.p_kind, k.ord),
                                               NULL)
                                            SEPARATOR ','), ']'),
                   SUM(m.group_key IS NULL AND m.p_key LIKE '%@____-__-__T__:__:__Z'),
                   CONCAT('[', GROUP_CONCAT(IF(m.group_key IS NULL, NULL,
                                               JSON_ARRAY(m.id, m.p_key, m.p_kind, m.reserve_token, m.group_key,
                                                          IF(in_results IS NULL, NULL,
                                                             JSON_EXTRACT(in_results, CONCAT('$[', k.ord - 1, ']')))))
                                            SEPARATOR ','), ']')
              INTO v_found, v_ids, v_occs, v_grouped
              FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (
                       ord FOR ORDINALITY, k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
              STRAIGHT_JOIN (SELECT j.ord, UNHEX(MD5(j.kd)) AS h FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (
                        ord FOR ORDINALITY, kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS j
                     LIMIT 18446744073709551615) AS d ON d.ord = k.ord
              STRAIGHT_JOIN (SELECT j.ord, LOWER(j.t) AS t FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (
                        ord FOR ORDINALITY, t CHAR(36) CHARACTER SET ascii PATH '$')) AS j
                     LIMIT 18446744073709551615) AS t ON t.ord = k.ord
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
                ON m.queue_name = v_queue AND m.p_key = k.k COLLATE utf8mb4_bin
               AND UNHEX(MD5(m.p_kind)) = d.h
               AND m.reserve_token = CONVERT(t.t USING utf8mb4) COLLATE utf8mb4_bin;
            SET SESSION group_concat_max_len = v_gcl;
        END IF;
    END IF;
    IF v_found > 0 THEN
        SET v_now = UTC_TIMESTAMP(6);
        IF v_history OR v_results THEN CALL pyqueue__own_transaction(TRUE, v_own); END IF;
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1, v_i = 0, v_nocc = v_occs;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467
                BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
                IF v_own = 1 THEN START TRANSACTION; END IF;
                IF v_history OR v_results THEN
                    -- the rows still held, locked before they are archived: no other call removes one in between
                    SELECT COUNT(*) INTO v_i
                      FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
                     WHERE m.reserve_token = c.c_token
                       FOR UPDATE;
                    SET v_i = 0;
                END IF;
                IF v_results THEN
                    -- their outcomes; each result joined by element number through a materialised derived table
                    INSERT INTO pyqueue_result (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                                progress, finished_at)
                    SELECT m.queue_name, m.p_key, m.p_kind, 'succeeded',
                           IF(r.elem IS NULL OR JSON_TYPE(r.elem) = 'NULL', NULL, r.elem),
                           m.last_error, m.attempts, m.progress, v_now
                      FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
                               c_ord BIGINT PATH '$[5]')) AS c
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
                      LEFT JOIN (SELECT j.ord, j.elem FROM JSON_TABLE(COALESCE(in_results, '[]'), '$[*]' COLUMNS (
                                     ord FOR ORDINALITY, elem JSON PATH '$')) AS j
                                 LIMIT 18446744073709551615) AS r ON r.ord = c.c_ord
                     WHERE m.queue_name = v_queue AND m.reserve_token = c.c_token
                    ON DUPLICATE KEY UPDATE state = VALUES(state), result = VALUES(result),
                                            last_error = VALUES(last_error), attempts = VALUES(attempts),
                                            progress = VALUES(progress), finished_at = VALUES(finished_at);
                END IF;
                IF v_history THEN
                    INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                                 created_at, processed_at, outcome, to_queue, reserved_by, last_error, headers)
                    SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                           m.created_at, v_now, 'committed', NULL, m.reserved_by, m.last_error, m.headers
                      FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
                     WHERE m.queue_name = v_queue AND m.reserve_token = c.c_token;
                    SET v_i = 0;
                END IF;
                -- occurrences of a schedule (one per schedule at most): as queue_commit
                WHILE v_nocc > 0 AND v_i < v_found DO
                    IF JSON_EXTRACT(v_ids, CONCAT('$[', v_i, '][2]')) = 1 THEN
                        CALL pyqueue__schedule_next(v_queue,
                            JSON_UNQUOTE(JSON_EXTRACT(v_ids, CONCAT('$[', v_i, '][3]'))),
                            JSON_UNQUOTE(JSON_EXTRACT(v_ids, CONCAT('$[', v_i, '][4]'))));
                        SET v_nocc = v_nocc - 1;
                    END IF;
                    SET v_i = v_i + 1;
                END WHILE;
                DELETE m
                  FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                           c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
                 WHERE m.reserve_token = c.c_token;
                SET v_done = ROW_COUNT();
                IF v_results THEN
                    -- the messages that wait for the ones deleted (a parent's queue keeps results): one locking probe
                    -- of pyqueue_dependency per message, which finds nothing for a message without parents or children
                    SET v_deps = NULL, SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
                    SELECT CONCAT('[', GROUP_CONCAT(DISTINCT JSON_ARRAY(d.p_key, d.p_kind) SEPARATOR ','), ']')
                      INTO v_deps
                      FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                               c_k  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
                               c_kd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]')) AS c
                      STRAIGHT_JOIN pyqueue_dependency d
                        ON d.queue_name = v_queue AND d.p_key = c.c_k AND d.p_kind = c.c_kd
                     WHERE NOT EXISTS (SELECT 1 FROM pyqueue_message m WHERE m.id = c.c_id)
                      LOCK IN SHARE MODE;
                    SET SESSION group_concat_max_len = v_gcl;
                    CALL pyqueue__deps_left_many(v_queue, v_deps, TRUE, NULL);
                END IF;
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
    CALL pyqueue__commit_batch(in_queue, in_keys, in_kinds, in_tokens, NULL, v_done);
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
    IF in_results IS NULL THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds, tokens and results must not be NULL');
    END IF;
    CALL pyqueue__commit_batch(in_queue, in_keys, in_kinds, in_tokens, in_results, v_done);
    SELECT v_done AS committed;
END //

-- ==== topics ====
-- Publish a message to every queue bound to a matching topic pattern: bind, unbind and list the bindings, publish one
-- message or many.

-- queue_bind: binds topic pattern in_pattern ('*' one word, '#' any number; pyqueue__check_topic) to in_queue, its
-- regular expression built once (pyqueue__topic_regex). Result: one row, bound = 1 when new, else 0.
-- Locks: the new row and a shared lock on the queue row, for one statement; a deadlock victim runs again.
DROP PROCEDURE IF EXISTS queue_bind //
CREATE PROCEDURE queue_bind(
    IN in_pattern LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_pattern VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_regex VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_bound, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_gone, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__check_topic('pattern', in_pattern, TRUE);
    -- bounded matching cost: at most 3 '#' words ('#' stands only as a whole word here)
    IF CHAR_LENGTH(in_pattern) - CHAR_LENGTH(REPLACE(in_pattern, '#', '')) > 3 THEN
        CALL pyqueue__raise('invalid_argument', 'pattern has more than 3 # wildcards');
    END IF;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue, v_pattern = in_pattern;
    CALL pyqueue__topic_regex(v_pattern, v_regex);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_bound = 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DECLARE CONTINUE HANDLER FOR 1062 SET v_bound = 0;  -- bound already
            DECLARE CONTINUE HANDLER FOR 1452 SET v_gone = 1;   -- the queue was dropped meanwhile
            INSERT INTO pyqueue_binding (pattern, queue_name, pattern_regex, created_at)
            VALUES (v_pattern, v_queue, v_regex, UTC_TIMESTAMP(6));
        END;
    UNTIL v_retry = 0 END REPEAT;
    IF v_gone = 1 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    SELECT v_bound AS bound;
END //

-- queue_unbind: removes the binding of in_pattern to in_queue. Result: one row, unbound = 1 when it was removed, 0
-- when there was none. The pattern and the queue are checked as queue_bind checks them. Locks: the binding row, for
-- one statement (in autocommit mode, run again when chosen as a deadlock victim).
DROP PROCEDURE IF EXISTS queue_unbind //
CREATE PROCEDURE queue_unbind(
    IN in_pattern LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_pattern VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_retry INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_unbound, v_own, v_tries INT DEFAULT 0;
    CALL pyqueue__check_topic('pattern', in_pattern, TRUE);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue, v_pattern = in_pattern;
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            DELETE FROM pyqueue_binding WHERE pattern = v_pattern AND queue_name = v_queue;
            SET v_unbound = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_unbound AS unbound;
END //

-- queue_bindings: the bindings of in_queue (every queue's when NULL): rows (pattern, queue, created_at), ordered by
-- queue, then pattern. Raises unknown_queue for a queue that does not exist. Plain read.
DROP PROCEDURE IF EXISTS queue_bindings //
CREATE PROCEDURE queue_bindings(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    IF in_queue IS NOT NULL THEN CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused); END IF;
    SET v_queue = in_queue;
    SELECT b.pattern, b.queue_name AS `queue`, b.created_at
      FROM pyqueue_binding b
     WHERE v_queue IS NULL OR b.queue_name = v_queue
     ORDER BY b.queue_name, b.pattern;
END //

-- queue_publish: pushes the message (as queue_push) into every queue bound to a pattern in_topic matches, one copy
-- per queue. Result: one row, queues = how many got a new message (dedup as queue_push); 0 when nothing matches. ONE
-- INSERT IGNORE ... SELECT over the matching bindings, in queue-name order.
-- Locks: shared locks on the bindings read, then per queue (name order) a shared lock on its row and the new row, for
-- one statement; a deadlock victim runs again in autocommit mode.
DROP PROCEDURE IF EXISTS queue_publish //
CREATE PROCEDURE queue_publish(
    IN in_topic    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_topic VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_queues, v_own, v_tries INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_max_payload BIGINT;
    CALL pyqueue__check_topic('topic', in_topic, FALSE);
    CALL pyqueue__check_key(in_key);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
    END IF;
    CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    SET v_topic = CONCAT('.', in_topic), v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    -- the queues the topic reaches, matched once before anything is written: a match the regular expression engine
    -- cannot decide (1139) is an error, never a miss; and the smallest max_payload among them
    BEGIN
        DECLARE EXIT HANDLER FOR 1139 CALL pyqueue__raise_undecided(in_topic);
        SELECT MIN(q.max_payload) INTO v_max_payload
          FROM pyqueue_binding b JOIN pyqueue_queue q ON q.queue_name = b.queue_name
         WHERE v_topic REGEXP b.pattern_regex;
    END;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
    SET v_at = COALESCE(in_run_at, v_now);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts)
            SELECT q.queue_name, v_key, v_kind, in_payload, COALESCE(in_priority, 0), v_at, v_at, v_now, 0
              FROM (SELECT DISTINCT b.queue_name
                      FROM pyqueue_binding b
                     WHERE v_topic REGEXP b.pattern_regex
                     LIMIT 18446744073709551615) AS q
             ORDER BY q.queue_name;
            SET v_queues = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_queues AS queues;
END //

-- queue_publish_with_headers: queue_publish with headers in_headers (as queue_push_with_headers), the same in every
-- copy. Result and locks: as queue_publish.
DROP PROCEDURE IF EXISTS queue_publish_with_headers //
CREATE PROCEDURE queue_publish_with_headers(
    IN in_topic    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key      LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload  LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_at   DATETIME(6),
    IN in_priority DECIMAL(65,30),
    IN in_headers  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_topic VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_queues, v_own, v_tries INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_max_payload BIGINT;
    CALL pyqueue__check_topic('topic', in_topic, FALSE);
    CALL pyqueue__check_key(in_key);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
        CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
    END IF;
    CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    CALL pyqueue__check_headers(in_headers, v_headers);
    SET v_topic = CONCAT('.', in_topic), v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    -- the queues the topic reaches, matched once before anything is written: a match the regular expression engine
    -- cannot decide (1139) is an error, never a miss; and the smallest max_payload among them
    BEGIN
        DECLARE EXIT HANDLER FOR 1139 CALL pyqueue__raise_undecided(in_topic);
        SELECT MIN(q.max_payload) INTO v_max_payload
          FROM pyqueue_binding b JOIN pyqueue_queue q ON q.queue_name = b.queue_name
         WHERE v_topic REGEXP b.pattern_regex;
    END;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
    SET v_at = COALESCE(in_run_at, v_now);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts, headers)
            SELECT q.queue_name, v_key, v_kind, in_payload, COALESCE(in_priority, 0), v_at, v_at, v_now, 0, v_headers
              FROM (SELECT DISTINCT b.queue_name
                      FROM pyqueue_binding b
                     WHERE v_topic REGEXP b.pattern_regex
                     LIMIT 18446744073709551615) AS q
             ORDER BY q.queue_name;
            SET v_queues = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_queues AS queues;
END //

-- queue_publish_batch: queue_publish for many messages. MySQL: ONE JSON array of objects {"topic", "p_key", "p_kind",
-- "payload", "run_at", "priority"} in in_topics' place, the other five NULL; members as queue_push_batch's. An
-- invalid element refuses the batch. Result: one row, pushed = new messages in all queues (duplicates skipped, the
-- first wins). ONE INSERT IGNORE ... SELECT, queue-name then element order.
-- Locks: as queue_publish, for every queue reached.
DROP PROCEDURE IF EXISTS queue_publish_batch //
CREATE PROCEDURE queue_publish_batch(
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_matches BIGINT;
    IF in_keys IS NOT NULL OR in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            'MySQL takes one JSON array of messages as 1st argument; the other 5 must be NULL');
    END IF;
    CALL pyqueue__check_messages(in_messages, 'topic');
    -- every topic matched once before anything is written: a match the engine cannot decide (1139) is an error
    BEGIN
        DECLARE EXIT HANDLER FOR 1139 CALL pyqueue__raise_undecided(NULL);
        SELECT COUNT(*) INTO v_matches
          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                   t VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.topic')) AS b
          JOIN pyqueue_binding m ON CONCAT('.', b.t) REGEXP m.pattern_regex;
    END;
    CALL pyqueue__check_batch_size(NULL, in_messages);
    SET v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts)
            SELECT q.queue_name,
                   JSON_UNQUOTE(b.k),
                   JSON_UNQUOTE(b.kd),
                   JSON_EXTRACT(b.payload, '$'),  -- normalised as JSON_EXTRACT of the element would
                   CASE WHEN JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        THEN CAST(CAST(b.priority AS CHAR) AS SIGNED) ELSE 0 END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   v_now,
                   0
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       t        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.topic',
                       k        JSON PATH '$.p_key',
                       kd       JSON PATH '$.p_kind',
                       payload  JSON PATH '$.payload',
                       run_at   JSON PATH '$.run_at',
                       priority JSON PATH '$.priority')) AS b
              STRAIGHT_JOIN (SELECT DISTINCT x.queue_name FROM pyqueue_binding x
                              LIMIT 18446744073709551615) AS q
             WHERE EXISTS (SELECT 1 FROM pyqueue_binding m
                            WHERE m.queue_name = q.queue_name
                              AND CONCAT('.', b.t) REGEXP m.pattern_regex)
             ORDER BY q.queue_name, b.ord;
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_inserted AS pushed;
END //

-- queue_publish_batch_with_headers: queue_publish_batch whose elements may carry a member "headers" (as
-- queue_push_batch_with_headers; in_headers must be NULL). Result and locks: as queue_publish_batch.
DROP PROCEDURE IF EXISTS queue_publish_batch_with_headers //
CREATE PROCEDURE queue_publish_batch_with_headers(
    IN in_messages   LONGTEXT CHARACTER SET utf8mb4,
    IN in_keys       LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds      LONGTEXT CHARACTER SET utf8mb4,
    IN in_payloads   LONGTEXT CHARACTER SET utf8mb4,
    IN in_run_ats    LONGTEXT CHARACTER SET utf8mb4,
    IN in_priorities LONGTEXT CHARACTER SET utf8mb4,
    IN in_headers    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_now DATETIME(6);
    DECLARE v_inserted, v_own, v_tries INT DEFAULT 0;
    DECLARE v_retry INT;
    DECLARE v_matches BIGINT;
    IF in_keys IS NOT NULL OR in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL OR in_headers IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            'MySQL: one JSON array of messages (headers a member of each) as 1st argument, the other 6 NULL');
    END IF;
    CALL pyqueue__check_messages(in_messages, 'topic');
    CALL pyqueue__check_batch_headers(in_messages);
    -- every topic matched once before anything is written: a match the engine cannot decide (1139) is an error
    BEGIN
        DECLARE EXIT HANDLER FOR 1139 CALL pyqueue__raise_undecided(NULL);
        SELECT COUNT(*) INTO v_matches
          FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                   t VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.topic')) AS b
          JOIN pyqueue_binding m ON CONCAT('.', b.t) REGEXP m.pattern_regex;
    END;
    CALL pyqueue__check_batch_size(NULL, in_messages);
    SET v_now = UTC_TIMESTAMP(6);
    CALL pyqueue__own_transaction(FALSE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts, headers)
            SELECT q.queue_name,
                   JSON_UNQUOTE(b.k),
                   JSON_UNQUOTE(b.kd),
                   JSON_EXTRACT(b.payload, '$'),  -- normalised as JSON_EXTRACT of the element would
                   CASE WHEN JSON_TYPE(b.priority) IN ('INTEGER', 'UNSIGNED INTEGER')
                        THEN CAST(CAST(b.priority AS CHAR) AS SIGNED) ELSE 0 END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   CASE WHEN JSON_TYPE(b.run_at) = 'STRING'
                        THEN CAST(JSON_UNQUOTE(b.run_at) AS DATETIME(6)) ELSE v_now END,
                   v_now,
                   0,
                   CASE WHEN JSON_TYPE(b.h) = 'OBJECT' THEN JSON_EXTRACT(b.h, '$') END
              FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
                       ord      FOR ORDINALITY,
                       t        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.topic',
                       k        JSON PATH '$.p_key',
                       kd       JSON PATH '$.p_kind',
                       payload  JSON PATH '$.payload',
                       run_at   JSON PATH '$.run_at',
                       priority JSON PATH '$.priority',
                       h        JSON PATH '$.headers')) AS b
              STRAIGHT_JOIN (SELECT DISTINCT x.queue_name FROM pyqueue_binding x
                              LIMIT 18446744073709551615) AS q
             WHERE EXISTS (SELECT 1 FROM pyqueue_binding m
                            WHERE m.queue_name = q.queue_name
                              AND CONCAT('.', b.t) REGEXP m.pattern_regex)
             ORDER BY q.queue_name, b.ord;
            SET v_inserted = ROW_COUNT();
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_inserted AS pushed;
END //

-- ==== history and dead letters ====
-- What became of messages that left a queue (pyqueue_history: purge, replay), the messages in dead-letter queues
-- (list, redrive), and one message's state and history, for roles that may not read the tables.

-- queue_purge_history: deletes up to in_n (NULL = 10000) rows, oldest first, of in_queue (NULL = every queue): first
-- history rows past their queue's history_retention, then, from what is left of in_n, result rows (pyqueue_result)
-- past their queue's result_retention, and every result row of a queue that keeps no results (any more) or no longer
-- exists. Result: one row, purged: history and result rows together; call again until it is below in_n. Locks: the
-- deleted rows, one DELETE ... LIMIT per queue.
DROP PROCEDURE IF EXISTS queue_purge_history //
CREATE PROCEDURE queue_purge_history(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n     DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq, v_q VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis, v_ret DECIMAL(20,6);
    DECLARE v_max, v_left INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_done INT DEFAULT 0;
    DECLARE c_queues CURSOR FOR
        SELECT q.queue_name, q.history_retention
          FROM pyqueue_queue q
         WHERE q.history_retention IS NOT NULL AND (v_queue IS NULL OR q.queue_name = v_queue)
         ORDER BY q.queue_name;
    -- every queue that has result rows, with its result_retention (NULL: keeps none, or is gone)
    DECLARE c_results CURSOR FOR
        SELECT r.queue_name, q.result_retention
          FROM (SELECT DISTINCT p.queue_name FROM pyqueue_result p
                 WHERE v_queue IS NULL OR p.queue_name = v_queue) AS r
          LEFT JOIN pyqueue_queue q ON q.queue_name = r.queue_name
         ORDER BY r.queue_name;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
    IF in_queue IS NOT NULL THEN
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
        SET v_queue = in_queue;
    END IF;
    IF in_n < 1 THEN CALL pyqueue__raise('invalid_argument', 'n must be at least 1'); END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 10000), 1, 2147483647);
    SET v_left = COALESCE(in_n, 10000), v_now = UTC_TIMESTAMP(6);
    OPEN c_queues;
    queues: LOOP
        FETCH c_queues INTO v_q, v_ret;
        IF v_done = 1 OR v_left <= 0 THEN LEAVE queues; END IF;
        DELETE FROM pyqueue_history
         WHERE queue_name = v_q
           AND processed_at < v_now - INTERVAL CAST(v_ret * 1000000 AS SIGNED) MICROSECOND
         ORDER BY processed_at
         LIMIT v_left;
        SET v_left = v_left - ROW_COUNT();
    END LOOP;
    CLOSE c_queues;
    IF v_left > 0 THEN
        SET v_done = 0;
        OPEN c_results;
        results: LOOP
            FETCH c_results INTO v_q, v_ret;
            IF v_done = 1 OR v_left <= 0 THEN LEAVE results; END IF;
            DELETE FROM pyqueue_result
             WHERE queue_name = v_q
               AND (v_ret IS NULL OR finished_at < v_now - INTERVAL CAST(v_ret * 1000000 AS SIGNED) MICROSECOND)
             ORDER BY finished_at
             LIMIT v_left;
            SET v_left = v_left - ROW_COUNT();
        END LOOP;
        CLOSE c_results;
    END IF;
    SELECT CAST(COALESCE(in_n, 10000) - v_left AS SIGNED) AS purged;
END //

-- queue_replay: pushes again in_queue's history of [in_from, in_to) (UTC; NULL = unbounded), the latest version of
-- each key and kind, ready now with attempts 0, through dedup. Result: one row, replayed. Reads history without
-- locks; locks like queue_push_batch.
DROP PROCEDURE IF EXISTS queue_replay //
CREATE PROCEDURE queue_replay(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_from  DATETIME(6),
    IN in_to    DATETIME(6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_inserted INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF (in_from IS NOT NULL AND (in_from + INTERVAL 0 SECOND IS NULL OR in_from < '1000-01-01'))
       OR (in_to IS NOT NULL AND (in_to + INTERVAL 0 SECOND IS NULL OR in_to < '1000-01-01')) THEN
        CALL pyqueue__raise('invalid_argument', 'from and to must be valid times');
    END IF;
    IF in_from > in_to THEN CALL pyqueue__raise('invalid_argument', 'from must not be later than to'); END IF;
    SET v_now = UTC_TIMESTAMP(6);
    INSERT IGNORE INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, attempts, headers)
    SELECT v_queue, h.p_key, h.p_kind, h.payload, h.priority, v_now, v_now, v_now, 0, h.headers
      FROM (SELECT x.p_key, x.p_kind, x.payload, x.priority, x.headers,
                   ROW_NUMBER() OVER (PARTITION BY x.p_key, x.p_kind
                                      ORDER BY x.processed_at DESC, x.id DESC) AS rn
              FROM pyqueue_history x
             WHERE x.queue_name = v_queue AND x.outcome IN ('committed', 'popped')
               AND (in_from IS NULL OR x.processed_at >= in_from)
               AND (in_to IS NULL OR x.processed_at < in_to)) AS h
     WHERE h.rn = 1
     ORDER BY h.p_key, h.p_kind;
    SET v_inserted = ROW_COUNT();
    IF v_inserted = 0 AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS replayed;
END //

-- queue_redrive: moves up to in_n (NULL = 1) ready messages of in_dead_queue to in_to_queue, highest priority first,
-- FIFO within one: key, kind, payload, priority and last_error kept, attempts 0, ready now, no dead-letter origin.
-- Reserved messages stay; so does one whose key and kind are live in in_to_queue (dedup, not counted). Result: one
-- row, redriven. History archives each move as 'moved'. Per page of 5000: a plain read of candidates, ONE UPDATE
-- IGNORE of queue_name joined to a SKIP LOCKED read by id (atomic as queue_move); a group's head moves alone after it
-- (pyqueue__groups_leave). With history, the candidates are locked (SKIP LOCKED), archived, moved and the copies of
-- those that stayed deleted, in a transaction of its own in autocommit mode (run again on a deadlock).
-- Locks: the candidate rows and a shared lock on in_to_queue's row, for one statement per page (with history: until
-- the end of the page's transaction); a grouped head's group row before its message row.
DROP PROCEDURE IF EXISTS queue_redrive //
CREATE PROCEDURE queue_redrive(
    IN in_dead_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_to_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n          DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_dead, v_to, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_left, v_k, v_top, v_pr, v_got, v_maxatt, v_moved, v_gdone, v_retry INT;
    DECLARE v_paused, v_history BOOLEAN;
    DECLARE v_now, v_at DATETIME(6);
    DECLARE v_id, v_gcl BIGINT;
    DECLARE v_cand, v_grouped, v_busy, v_mine LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_count, v_own, v_tries INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN SET SESSION group_concat_max_len = v_gcl; RESIGNAL; END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    CALL pyqueue__check_name('dead_queue', in_dead_queue, 128);
    CALL pyqueue__check_name('to_queue', in_to_queue, 128);
    CALL pyqueue__queue(in_dead_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__queue(in_to_queue, v_vis, v_max, v_dlq, v_paused);
    IF in_n < 1 THEN CALL pyqueue__raise('invalid_argument', 'n must be at least 1'); END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);
    IF in_dead_queue = in_to_queue THEN CALL pyqueue__raise('invalid_argument', 'dead_queue and to_queue must differ'); END IF;
    SET v_dead = in_dead_queue, v_to = in_to_queue, v_left = COALESCE(in_n, 1);
    SELECT q.history_retention IS NOT NULL INTO v_history FROM pyqueue_queue q WHERE q.queue_name = v_dead;
    IF v_history THEN CALL pyqueue__own_transaction(TRUE, v_own); END IF;
    SELECT MAX(m.priority) INTO v_top FROM pyqueue_message m WHERE m.queue_name = v_dead;
    SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
    pages: WHILE v_top IS NOT NULL AND v_left > 0 DO
        SET v_k = LEAST(v_left, 5000), v_now = UTC_TIMESTAMP(6), v_tries = 0;
        CALL pyqueue__candidates(v_dead, NULL, v_now, v_top, TRUE, v_k, FALSE,
                                 v_pr, v_at, v_id, v_cand, v_got, v_maxatt);
        IF v_got = 0 THEN LEAVE pages; END IF;
        REPEAT
            SET v_retry = 0, v_tries = v_tries + 1, v_mine = NULL, v_grouped = NULL, v_gdone = 0;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213, 1467
                BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
                DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
                IF v_own = 1 THEN START TRANSACTION; END IF;
                IF v_history THEN
                    -- the candidates still there, locked before they are archived (another call's skipped), and only
                    -- they are moved; the copies of those that stay (a duplicate in in_to_queue) are deleted again
                    SELECT CONCAT('[', GROUP_CONCAT(JSON_ARRAY(m.id, 0, 0, j.c_token)), ']') INTO v_mine
                      FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]',
                               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                     WHERE m.queue_name = v_dead AND m.scheduled_at <= v_now AND m.reserve_token <=> j.c_token
                       AND m.group_key IS NULL
                       FOR UPDATE SKIP LOCKED;
                    INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                                 created_at, processed_at, outcome, to_queue, reserved_by, last_error, headers)
                    SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                           m.created_at, v_now, 'moved', v_to, m.reserved_by, m.last_error, m.headers
                      FROM JSON_TABLE(COALESCE(v_mine, '[]'), '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id;
                END IF;
                UPDATE IGNORE (SELECT x.id
                                 FROM JSON_TABLE(IF(v_history, COALESCE(v_mine, '[]'), v_cand), '$[*]' COLUMNS (
                                          c_id    BIGINT   PATH '$[0]',
                                          c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                                 STRAIGHT_JOIN pyqueue_message x FORCE INDEX (PRIMARY) ON x.id = j.c_id
                                WHERE x.queue_name = v_dead AND x.scheduled_at <= v_now
                                  AND x.reserve_token <=> j.c_token AND x.group_key IS NULL
                                  LIMIT 18446744073709551615  -- materialised (never merged into the UPDATE), on MySQL too
                                  FOR UPDATE SKIP LOCKED) AS c
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.id
                   SET m.queue_name = v_to,
                       m.scheduled_at = v_now, m.scheduled_at_initially = v_now, m.created_at = v_now,
                       m.attempts = 0, m.reserved_by = NULL, m.reserve_token = NULL,
                       m.dead_from = NULL, m.dead_attempts = NULL;
                SET v_moved = ROW_COUNT();
                IF v_mine IS NOT NULL THEN
                    SELECT COUNT(*) INTO v_moved FROM JSON_TABLE(v_mine, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id WHERE m.queue_name = v_to;
                    DELETE h
                      FROM JSON_TABLE(v_mine, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                      STRAIGHT_JOIN pyqueue_history h
                        ON h.queue_name = v_dead AND h.processed_at = v_now AND h.outcome = 'moved'
                       AND h.p_key = m.p_key AND h.p_kind = m.p_kind
                     WHERE m.queue_name = v_dead;
                END IF;
                IF v_own = 1 THEN COMMIT; END IF;
            END;
        UNTIL v_retry = 0 END REPEAT;
        IF v_moved < v_got THEN
            -- candidates left: heads of FIFO groups (or rows lost to a race)
            SELECT CONCAT('[', GROUP_CONCAT(JSON_ARRAY(m.id, m.p_key, m.p_kind, j.c_token, m.group_key)
                                            SEPARATOR ','), ']')
              INTO v_grouped
              FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (
                       c_id    BIGINT   PATH '$[0]',
                       c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.queue_name = v_dead AND m.group_key IS NOT NULL AND m.scheduled_at <= v_now
               AND m.reserve_token <=> j.c_token;
            IF v_grouped IS NOT NULL THEN
                CALL pyqueue__own_transaction(TRUE, v_own);
                CALL pyqueue__groups_leave('redrive', v_dead, v_to, v_grouped, v_now, v_own, v_gdone, v_busy);
            END IF;
        END IF;
        -- counted by reading (ROW_COUNT() counts the rows IGNORE left under CLIENT_FOUND_ROWS, JDBC's default);
        -- with history, the locked rows that moved (read above) and the group heads
        IF v_history THEN
            SET v_moved = v_moved + v_gdone;
        ELSE
            SELECT COUNT(*) INTO v_moved
              FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.queue_name = v_to AND m.created_at = v_now AND m.reserve_token IS NULL;
        END IF;
        SET v_count = v_count + v_moved, v_left = v_left - v_moved;
        IF v_got < v_k THEN LEAVE pages; END IF;
    END WHILE;
    SET SESSION group_concat_max_len = v_gcl;
    SELECT v_count AS redriven;
END //

-- queue_dead_letters: the rows of the view pyqueue_dead_letters for dead_letter_queue = in_queue, oldest first, for
-- accounts without SELECT on the view. An unknown queue is refused. Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_dead_letters //
CREATE PROCEDURE queue_dead_letters(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    SELECT d.dead_letter_queue, d.from_queue, d.p_key, d.p_kind, d.payload, d.priority,
           d.attempts, d.created_at, d.dead_lettered_at, d.reserved, d.last_error, d.headers
      FROM pyqueue_dead_letters d
     WHERE d.dead_letter_queue = v_queue
     ORDER BY d.dead_lettered_at, d.p_key, d.p_kind;
END //

-- queue_message: the live message (in_key, in_kind) of in_queue: 0 or 1 row (p_key, p_kind, state, payload, priority,
-- attempts, scheduled_at, created_at, reserved_by, last_error, dead_from, progress, cancel_requested (0/1), headers); state
-- 'ready' (an expired reservation too), 'delayed' or 'reserved'. Plain read of the unique key, no locks.
DROP PROCEDURE IF EXISTS queue_message //
CREATE PROCEDURE queue_message(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_now = UTC_TIMESTAMP(6);
    SELECT m.p_key, m.p_kind,
           CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                WHEN m.reserve_token IS NULL THEN 'delayed'
                ELSE 'reserved' END AS state,
           m.payload, m.priority, m.attempts, m.scheduled_at, m.created_at,
           m.reserved_by,
           m.last_error, m.dead_from, m.progress, (m.cancel_requested_at IS NOT NULL) AS cancel_requested,
           m.headers
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind;
END //

-- queue_message_history: the history rows of (in_queue, in_key, in_kind), newest first, at most 100: processed_at,
-- outcome, to_queue, attempts, reserved_by, last_error. No unknown_queue check (the history of a dropped queue stays
-- readable). Plain read on the (queue_name, processed_at) index.
DROP PROCEDURE IF EXISTS queue_message_history //
CREATE PROCEDURE queue_message_history(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    CALL pyqueue__check_name('queue', in_queue, 128);
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SELECT h.processed_at, h.outcome, h.to_queue, h.attempts, h.reserved_by, h.last_error
      FROM pyqueue_history h
     WHERE h.queue_name = v_queue AND h.p_key = v_key AND h.p_kind = v_kind
     ORDER BY h.processed_at DESC, h.id DESC
     LIMIT 100;
END //

-- ---- reads for browsing a queue and its throughput: queue_messages, queue_groups, queue_throughput ----

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
    DECLARE v_queue, v_after_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_prefix, v_after_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_prefix_len, v_n, v_max INT;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_n INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_group, v_each VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_own, v_retry, v_k, v_locked INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    DECLARE v_hk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_hkd VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found INT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
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
            DECLARE EXIT HANDLER FOR 1213
            BEGIN IF v_own = 1 AND v_tries < 10 THEN ROLLBACK; SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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

-- queue_throughput: messages that left in_queue (NULL = every queue) per minute since in_since (UTC; NULL = an hour
-- ago; at most a day), by outcome: rows (queue, minute, committed, dead_lettered, moved, popped), from
-- pyqueue_history (queues with a history_retention only). Plain read of the history index, no locks.
DROP PROCEDURE IF EXISTS queue_throughput //
CREATE PROCEDURE queue_throughput(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_since DATETIME(6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now, v_since DATETIME(6);
    IF in_queue IS NOT NULL THEN CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused); END IF;
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
     WHERE v_queue IS NULL OR q.queue_name = v_queue
     GROUP BY q.queue_name, `minute`
     ORDER BY q.queue_name, `minute`;
END //

-- ==== results ====
-- What became of one message, for a producer or a monitor: read it now (queue_result), wait until it is final
-- (queue_result_wait, a long poll: MySQL has no NOTIFY), and the channel name PostgreSQL would announce it on.

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
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_result, v_progress LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found, v_attempts, v_requested INT;
    DECLARE v_finished DATETIME(6);
    CALL pyqueue__check_name('queue', in_queue, 128);
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    CALL pyqueue__result(v_queue, v_key, v_kind, v_found, v_state, v_result, v_error, v_attempts, v_progress,
                         v_finished, v_requested);
    IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
    SELECT v_state AS state, v_result AS result, v_error AS last_error, v_attempts AS attempts,
           v_progress AS progress, v_finished AS finished_at, v_requested AS cancel_requested;
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
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_result, v_progress LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_error VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_found, v_attempts, v_requested INT;
    DECLARE v_finished, v_deadline DATETIME(6);
    DECLARE v_left DECIMAL(20,6);
    CALL pyqueue__check_name('queue', in_queue, 128);
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
    IF in_timeout > 3600 THEN CALL pyqueue__raise('invalid_argument', 'timeout must not exceed 1 hour'); END IF;
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SET v_deadline = UTC_TIMESTAMP(6) + INTERVAL CAST(COALESCE(in_timeout, 1) * 1000000 AS SIGNED) MICROSECOND;
    waiting: LOOP
        CALL pyqueue__result(v_queue, v_key, v_kind, v_found, v_state, v_result, v_error, v_attempts, v_progress,
                             v_finished, v_requested);
        IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
        IF v_state IN ('succeeded', 'failed', 'cancelled', 'unknown') THEN LEAVE waiting; END IF;
        SET v_left = TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), v_deadline) / 1e6;
        IF v_left <= 0 THEN LEAVE waiting; END IF;
        DO SLEEP(LEAST(0.05, v_left));
    END LOOP;
    SELECT v_state AS state, v_result AS result, v_error AS last_error, v_attempts AS attempts,
           v_progress AS progress, v_finished AS finished_at, v_requested AS cancel_requested;
END //

-- queue_result_channel: the name of the queue's result channel on PostgreSQL, 'pyqueue_result_' + MD5 of its name,
-- returned here for symmetry (MySQL has no NOTIFY: nothing is ever sent on it; wait with queue_result_wait). One row:
-- channel. Raises unknown_queue. Plain read.
DROP PROCEDURE IF EXISTS queue_result_channel //
CREATE PROCEDURE queue_result_channel(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    SELECT CONCAT('pyqueue_result_', MD5(v_queue)) AS channel;
END //

-- ==== dependencies ====
-- A message that waits for others: pushed with its parents, ready once every parent has succeeded, in the
-- transaction of the commit that ends the last; cancelled when a parent fails or is cancelled.

-- queue_push_after: queue_push of a message that waits for its parents, in_parents the JSON text of an array of 1 to
-- 1000 objects {"queue", "p_key", "p_kind"} (parents may be in other queues; none may be the message itself or a
-- schedule's occurrence). Result: one row, inserted = 1, or 0 when a live message has the key and kind (dedup:
-- nothing changes). A parent is known when its queue keeps results (queue_set_result_retention) and it is live there
-- (it is waited for) or its result there is 'succeeded' (it counts as done); a parent whose result is 'failed' or
-- 'cancelled', or with neither a live message nor a result, is refused (invalid_argument naming it), before anything
-- is written. The message is 'waiting' (queue_result) while a parent has not succeeded: blocked as a FIFO group's
-- waiting member is (scheduled_at the BLOCKED time: no reserve visits it), with no group. The commit (queue_commit,
-- queue_commit_batch, queue_commit_result, its batch, queue_commit_reserve, queue_pop, queue_move) that ends the last
-- parent makes it ready, in that transaction (pyqueue__deps_left); a parent dead-lettered, dropped, cancelled or
-- removed cancels it, transitively. Ready at once when every parent had already succeeded. Priority 0.
-- Steps: every check, the array parsed once (JSON_TABLE) for all its elements; then, in a transaction of its own in
-- autocommit mode (a deadlock victim runs again), set-based: the parents' queues, the live parents read with a
-- locking read (share-locked until the transaction ends, so a parent's commit either waits for this push or is seen
-- by it as finished), the others' outcomes (a locking read: the latest), the INSERT IGNORE of the message, then its
-- rows in pyqueue_dependency (one INSERT ... SELECT per role).
-- Locks: the parents' rows (shared), the new message row, its pyqueue_dependency rows and the parents' ones.
DROP PROCEDURE IF EXISTS queue_push_after //
CREATE PROCEDURE queue_push_after(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_parents LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_state VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_p, v_name LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_n, v_left, v_inserted, v_retry, v_bad INT DEFAULT 0;
    DECLARE v_own, v_tries, v_txn INT DEFAULT 0;
    DECLARE v_max_payload, v_id BIGINT;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_key(in_key);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_payload(in_payload);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SELECT MAX(q.max_payload) INTO v_max_payload FROM pyqueue_queue q WHERE q.queue_name = v_queue;
    IF LENGTH(in_payload) > v_max_payload THEN CALL pyqueue__raise_size(LENGTH(in_payload), v_max_payload); END IF;
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
           AND NOT (JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.queue')) = v_queue
                    AND JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_key')) = v_key
                    AND JSON_UNQUOTE(JSON_EXTRACT(j.obj, '$.p_kind')) = v_kind)
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
    CALL pyqueue__own_transaction(TRUE, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_left = 0, v_inserted = 0, v_bad = NULL, v_state = NULL;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN
                IF v_txn = 1 THEN ROLLBACK; SET v_txn = 0; END IF;
                IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF;
            END;
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
            SELECT COUNT(*) INTO v_max
              FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
                       pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue')) AS j
              STRAIGHT_JOIN pyqueue_queue q ON q.queue_name = j.pq
              LOCK IN SHARE MODE;
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
            -- the live parents, share-locked until the transaction ends (their commits wait for it)
            SELECT COUNT(*) INTO v_left
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
            SET v_now = UTC_TIMESTAMP(6);
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at, scheduled_at_initially, created_at,
                    attempts)
            VALUES (v_queue, v_key, v_kind, in_payload, 0,
                    IF(v_left > 0, TIMESTAMP '9999-12-31 23:59:59.999999', v_now), v_now, v_now, 0);
            SET v_inserted = ROW_COUNT();
            IF v_inserted = 1 THEN
                SET v_id = LAST_INSERT_ID();
                -- rows an earlier message of this key left behind (one removed by a path that keeps none)
                DELETE FROM pyqueue_dependency WHERE queue_name = v_queue AND p_key = v_key AND p_kind = v_kind;
                INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, other_queue, other_key, other_kind,
                                                msg_id)
                SELECT j.pq, j.pk, j.pt, 'c', j.ord, v_queue, v_key, v_kind, v_id
                  FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
                           ord FOR ORDINALITY,
                           pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue',
                           pk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
                           pt VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind')) AS j
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (pyqueue_message_key_uk)
                    ON m.queue_name = j.pq AND m.p_key = j.pk AND m.p_kind = j.pt;
                INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, other_queue, other_key, other_kind)
                SELECT v_queue, v_key, v_kind, 'p', j.ord, j.pq, j.pk, j.pt
                  FROM JSON_TABLE(in_parents, '$[*]' COLUMNS (
                           ord FOR ORDINALITY,
                           pq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.queue',
                           pk VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_key',
                           pt VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.p_kind')) AS j;
                IF v_left > 0 THEN
                    INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, msg_id)
                    VALUES (v_queue, v_key, v_kind, 'w', v_left, v_id);
                END IF;
            END IF;
            IF v_txn = 1 THEN COMMIT; SET v_txn = 0; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
    SELECT v_inserted AS inserted;
END //

-- queue_parent_results: the parents of the live message (in_key, in_kind) of in_queue (pushed with queue_push_after:
-- waiting, ready or held), one row each in the order they were given: ordinal (1, 2, ...), the parent's queue, p_key
-- and p_kind, its state as queue_result reads it ('succeeded' with its stored result, 'failed', 'cancelled', or while
-- live 'ready', 'delayed', 'reserved', 'waiting', 'blocked'; 'unknown' when neither, e.g. a parent moved on, whose
-- queue records no result for the move, or whose result was purged) and result (NULL but for 'succeeded'). No rows
-- for a message without parents or not live. For the consumer that holds the child (a fan-in reads its inputs).
-- Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_parent_results //
CREATE PROCEDURE queue_parent_results(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_key', in_key, 255);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
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
           IF(m.id IS NULL, r.result, NULL) AS result
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


-- ==== limits ====
-- Concurrency limits: at most capacity messages of a kind reserved at once in a queue. The reserve and extend paths
-- take and keep the slots through the limit helpers above.

-- queue_set_limit: at most in_capacity messages of in_kind reserved at once in in_queue (0 holds it back; NULL
-- removes the limit). Live reservations without a slot take free ones as far as the capacity goes; lowering it
-- revokes nothing (nothing more is handed out until fewer are live). No result set.
-- Locks: the queue row (shared: a queue_drop under way answers unknown_queue), the limit row and its slot rows; in
-- autocommit mode in a transaction of its own, run again on a deadlock.
DROP PROCEDURE IF EXISTS queue_set_limit //
CREATE PROCEDURE queue_set_limit(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_capacity DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_i, v_attempts, v_ok, v_own, v_deadlock INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now, v_until DATETIME(6);
    DECLARE v_id BIGINT;
    DECLARE v_found INT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_int('capacity', in_capacity, 0, 10000);
    SET v_queue = in_queue, v_kind = in_kind;
    CALL pyqueue__own_transaction(NULL, v_own);
    REPEAT
        SET v_deadlock = 0, v_tries = v_tries + 1, v_i = 1, v_now = UTC_TIMESTAMP(6);
        BEGIN
            DECLARE v_done INT DEFAULT 0;
            DECLARE c_live CURSOR FOR
                SELECT m.id, m.attempts, m.scheduled_at
                  FROM pyqueue_message m
                 WHERE m.queue_name = v_queue AND m.p_kind = v_kind
                   AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now
                   AND NOT EXISTS (SELECT 1 FROM pyqueue_limit_slot s
                                    WHERE s.queue_name = v_queue AND s.p_kind = v_kind
                                      AND s.msg_id = m.id AND s.msg_attempts = m.attempts)
                 ORDER BY m.id;
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
            DECLARE EXIT HANDLER FOR 1213
            BEGIN IF v_own = 1 AND v_tries < 10 THEN ROLLBACK; SET v_deadlock = 1; ELSE RESIGNAL; END IF; END;
            IF v_own = 1 THEN START TRANSACTION; END IF;
            -- the queue row, shared, before any row referencing it: a queue_drop under way finishes first, and the
            -- call answers unknown_queue, not the foreign key's error (1452)
            SELECT COUNT(*) INTO v_found FROM pyqueue_queue q WHERE q.queue_name = v_queue LOCK IN SHARE MODE;
            IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
            IF in_capacity IS NULL THEN
                DELETE FROM pyqueue_limit WHERE queue_name = v_queue AND p_kind = v_kind;
            ELSE
                INSERT INTO pyqueue_limit (queue_name, p_kind, capacity)
                VALUES (v_queue, v_kind, in_capacity)
                ON DUPLICATE KEY UPDATE capacity = in_capacity;
                -- beyond a lowered capacity only free slots go (pyqueue__limit_take moves live holders)
                DELETE FROM pyqueue_limit_slot
                 WHERE queue_name = v_queue AND p_kind = v_kind AND slot_no > in_capacity
                   AND (msg_id IS NULL
                        OR NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                        WHERE m.id = pyqueue_limit_slot.msg_id
                                          AND m.queue_name = pyqueue_limit_slot.queue_name
                                          AND ((m.attempts = pyqueue_limit_slot.msg_attempts
                                                AND m.reserve_token IS NOT NULL
                                                AND GREATEST(m.scheduled_at, pyqueue_limit_slot.msg_until) > v_now)
                                               OR (m.attempts = pyqueue_limit_slot.msg_attempts - 1
                                                   AND pyqueue_limit_slot.msg_until > v_now))));
                WHILE v_i <= in_capacity DO
                    INSERT IGNORE INTO pyqueue_limit_slot (queue_name, p_kind, slot_no)
                    VALUES (v_queue, v_kind, v_i);
                    SET v_i = v_i + 1;
                END WHILE;
                OPEN c_live;
                live: LOOP
                    FETCH c_live INTO v_id, v_attempts, v_until;
                    IF v_done = 1 THEN LEAVE live; END IF;
                    CALL pyqueue__limit_take(v_queue, v_kind, v_id, v_attempts, v_until, v_now, v_ok);
                    IF v_ok = 0 THEN LEAVE live; END IF;
                END LOOP;
                CLOSE c_live;
            END IF;
            IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_deadlock = 0 END REPEAT;
END //

-- queue_limits: the limits of a queue (all queues when NULL), by queue and kind: queue, p_kind, capacity, in_use
-- (live reservations holding a slot, also one beyond a lowered capacity; each counted once). Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_limits //
CREATE PROCEDURE queue_limits(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    IF in_queue IS NOT NULL THEN CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused); END IF;
    SET v_queue = in_queue, v_now = UTC_TIMESTAMP(6);
    SELECT l.queue_name AS `queue`, l.p_kind, l.capacity,
           (SELECT COUNT(DISTINCT m.id) FROM pyqueue_limit_slot s
              JOIN pyqueue_message m ON m.id = s.msg_id AND m.attempts = s.msg_attempts
                                    AND m.queue_name = s.queue_name
             WHERE s.queue_name = l.queue_name AND s.p_kind = l.p_kind
               AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now) AS in_use
      FROM pyqueue_limit l
     WHERE v_queue IS NULL OR l.queue_name = v_queue
     ORDER BY l.queue_name, l.p_kind;
END //

-- queue_set_rate: at most in_n reservations of in_kind (NULL: of every kind of the queue together) in any window of
-- in_per_s seconds (> 0, at most one day); in_n NULL removes the rate (no error when there is none). n from 1 to
-- 10000, one slot row per unit holding the time it was last used: lowering n keeps the n most recent times, raising
-- it adds units never used, a new per keeps the times. A kind rate and the queue-wide rate may both be set: a
-- reservation then needs a unit of each. No result set. Locks: the queue row (shared: a queue_drop under way answers
-- unknown_queue), the rate row, then its slot rows (waiting for reserves that hold one); in autocommit mode in a
-- transaction of its own, run again on a deadlock.
DROP PROCEDURE IF EXISTS queue_set_rate //
CREATE PROCEDURE queue_set_rate(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n     DECIMAL(65,30),
    IN in_per_s DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max, v_own, v_retry, v_have, v_top, v_n INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_per BIGINT;
    DECLARE v_found INT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    IF in_kind IS NOT NULL THEN CALL pyqueue__check_name('p_kind', in_kind, 128); END IF;
    CALL pyqueue__check_int('n', in_n, 1, 10000);
    IF in_n IS NOT NULL AND (in_per_s IS NULL OR ROUND(in_per_s * 1000000) < 1 OR in_per_s > 86400) THEN
        CALL pyqueue__raise('invalid_argument', 'per must be more than 0 seconds and at most 1 day (86400)');
    END IF;
    SET v_queue = in_queue, v_kind = COALESCE(in_kind, ''), v_n = in_n,
        v_per = CAST(ROUND(in_per_s * 1000000) AS SIGNED);
    CALL pyqueue__own_transaction(NULL, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            DECLARE EXIT HANDLER FOR 1213
            BEGIN IF v_own = 1 AND v_tries < 10 THEN ROLLBACK; SET v_retry = 1; ELSE RESIGNAL; END IF; END;
            IF v_own = 1 THEN START TRANSACTION; END IF;
            -- the queue row, shared, before any row referencing it: a queue_drop under way finishes first, and the
            -- call answers unknown_queue, not the foreign key's error (1452)
            SELECT COUNT(*) INTO v_found FROM pyqueue_queue q WHERE q.queue_name = v_queue LOCK IN SHARE MODE;
            IF v_found = 0 THEN CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist')); END IF;
            IF v_n IS NULL THEN
                DELETE FROM pyqueue_rate WHERE queue_name = v_queue AND p_kind = v_kind;  -- its slots cascade
            ELSE
                INSERT INTO pyqueue_rate (queue_name, p_kind, n, per_us) VALUES (v_queue, v_kind, v_n, v_per)
                ON DUPLICATE KEY UPDATE n = VALUES(n), per_us = VALUES(per_us);
                SELECT COUNT(*), COALESCE(MAX(s.slot_no), 0) INTO v_have, v_top
                  FROM pyqueue_rate_slot s
                 WHERE s.queue_name = v_queue AND s.p_kind = v_kind
                   FOR UPDATE;
                IF v_have > v_n THEN
                    -- the least recent times go (never used first): the n most recent stay
                    SET v_have = v_have - v_n;
                    DELETE FROM pyqueue_rate_slot
                     WHERE queue_name = v_queue AND p_kind = v_kind
                     ORDER BY used_at IS NOT NULL, used_at, slot_no
                     LIMIT v_have;
                ELSEIF v_have < v_n THEN
                    INSERT INTO pyqueue_rate_slot (queue_name, p_kind, slot_no)
                    SELECT v_queue, v_kind, v_top + 1 + d0.d + 10 * d1.d + 100 * d2.d + 1000 * d3.d
                      FROM JSON_TABLE('[0,1,2,3,4,5,6,7,8,9]', '$[*]' COLUMNS (d INT PATH '$')) AS d0
                     CROSS JOIN JSON_TABLE('[0,1,2,3,4,5,6,7,8,9]', '$[*]' COLUMNS (d INT PATH '$')) AS d1
                     CROSS JOIN JSON_TABLE('[0,1,2,3,4,5,6,7,8,9]', '$[*]' COLUMNS (d INT PATH '$')) AS d2
                     CROSS JOIN JSON_TABLE('[0,1,2,3,4,5,6,7,8,9]', '$[*]' COLUMNS (d INT PATH '$')) AS d3
                     WHERE d0.d + 10 * d1.d + 100 * d2.d + 1000 * d3.d < v_n - v_have;
                END IF;
            END IF;
            IF v_own = 1 THEN COMMIT; END IF;
        END;
    UNTIL v_retry = 0 END REPEAT;
END //

-- queue_rates: the rate limits of a queue (all queues when NULL), by queue and kind (the queue-wide rate, p_kind NULL,
-- first): queue, p_kind, n, per (seconds), next_free_at (UTC: the earliest slot time + per, when the next unit is or
-- was free; NULL while some unit was never used), in_window (units used within the last per: n when used up).
-- Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_rates //
CREATE PROCEDURE queue_rates(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_now DATETIME(6);
    IF in_queue IS NOT NULL THEN CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused); END IF;
    SET v_queue = in_queue, v_now = UTC_TIMESTAMP(6);
    SELECT r.queue_name AS `queue`, NULLIF(r.p_kind, '') AS p_kind, r.n,
           CAST(r.per_us / 1000000 AS DECIMAL(20,6)) AS per,
           IF(SUM(s.used_at IS NULL) > 0, NULL, MIN(s.used_at) + INTERVAL r.per_us MICROSECOND) AS next_free_at,
           CAST(COALESCE(SUM(s.used_at > v_now - INTERVAL r.per_us MICROSECOND), 0) AS SIGNED) AS in_window
      FROM pyqueue_rate r
      LEFT JOIN pyqueue_rate_slot s ON s.queue_name = r.queue_name AND s.p_kind = r.p_kind
     WHERE v_queue IS NULL OR r.queue_name = v_queue
     GROUP BY r.queue_name, r.p_kind, r.n, r.per_us
     ORDER BY r.queue_name, r.p_kind;
END //

-- ==== workers ====
-- The worker registry: register, heartbeat, deregister, list, and hand back the reservations of workers that stopped
-- heartbeating.

-- queue_worker_register: records a worker. Result: one row (worker_id, secret): secret, a random token
-- (pyqueue__random_token) that heartbeat and deregister need. The worker reserves as CONCAT(in_name, '#', worker_id).
-- in_queues: NULL or a JSON array of queue names. Locks: the new row.
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
    CALL pyqueue__check_name('name', in_name, 200);
    IF CHAR_LENGTH(in_host) > 255 THEN CALL pyqueue__raise('invalid_argument', 'host is longer than 255 characters'); END IF;
    IF LOCATE(X'ED', CAST(in_host AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'host', in_host); END IF;
    IF LOCATE(X'ED', CAST(in_queues AS BINARY)) > 0 THEN CALL pyqueue__check_utf8('invalid_argument', 'queues', in_queues); END IF;
    CALL pyqueue__check_int('pid', in_pid, 0, 2147483647);
    IF in_queues IS NOT NULL AND (NOT JSON_VALID(in_queues) OR JSON_TYPE(in_queues) <> 'ARRAY') THEN
        CALL pyqueue__raise('invalid_argument', 'queues must be NULL or a JSON array of names');
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
    IF in_worker_id IS NULL THEN CALL pyqueue__raise('invalid_argument', 'worker_id must not be NULL'); END IF;
    CALL pyqueue__check_int('worker_id', in_worker_id, 1, 9223372036854775807);
    IF in_secret IS NULL THEN CALL pyqueue__raise('invalid_argument', 'secret must not be NULL'); END IF;
    -- only a 36-character value can match (a longer one would be cut to 36 by the CHAR(36) below)
    SET v_secret = IF(CHAR_LENGTH(in_secret) = 36, in_secret, NULL);
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
    IF in_worker_id IS NULL THEN CALL pyqueue__raise('invalid_argument', 'worker_id must not be NULL'); END IF;
    CALL pyqueue__check_int('worker_id', in_worker_id, 1, 9223372036854775807);
    IF in_secret IS NULL THEN CALL pyqueue__raise('invalid_argument', 'secret must not be NULL'); END IF;
    SET v_secret = IF(CHAR_LENGTH(in_secret) = 36, in_secret, NULL);
    DELETE FROM pyqueue_worker WHERE worker_id = in_worker_id AND secret = v_secret;
    SELECT ROW_COUNT() AS deregistered;
END //

-- queue_release_dead_workers: workers whose heartbeat is older than in_older_than_s are removed and their live
-- reservations become ready now (token cleared, attempts kept, as after an expiry). Result: one row, released. Per
-- stale worker: its messages one by one (a plain read, then an UPDATE by id re-checking the token), then its row if
-- still stale; interrupted, the next call finds the rest. Reads every reserved message: a maintenance call.
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
    IF in_older_than_s IS NULL THEN CALL pyqueue__raise('invalid_argument', 'older_than must not be NULL'); END IF;
    CALL pyqueue__check_duration('older_than', in_older_than_s, TRUE);
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
               SET scheduled_at = v_now, reserve_token = NULL, reserved_by = NULL
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
    SET v_now = UTC_TIMESTAMP(6);
    SELECT w.worker_id, w.worker_name, w.host, w.pid, w.queues, w.started_at, w.heartbeat_at,
           TIMESTAMPDIFF(MICROSECOND, w.heartbeat_at, v_now) / 1e6 AS heartbeat_age_s,
           CONCAT(w.worker_name, '#', w.worker_id) AS reserve_as
      FROM pyqueue_worker w
     ORDER BY w.worker_id;
END //

-- ==== schedules ====
-- Recurring messages, every n seconds or on a cron expression (UTC): each occurrence is an ordinary message, and
-- committing it pushes the next.

-- queue_schedule_every: a message (in_key @ time, in_kind, in_payload) every in_every_s seconds (whole, 1 s to 100
-- years), at its multiples since 1970-01-01 UTC. Result: one row, next_at. Locks as pyqueue__schedule.
DROP PROCEDURE IF EXISTS queue_schedule_every //
CREATE PROCEDURE queue_schedule_every(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_every_s DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    IF in_every_s IS NULL THEN CALL pyqueue__raise('invalid_argument', 'every must not be NULL'); END IF;
    CALL pyqueue__check_duration('every', in_every_s, TRUE);
    IF in_every_s < 1 OR in_every_s <> TRUNCATE(in_every_s, 0) THEN
        CALL pyqueue__raise('invalid_argument', 'every must be a whole number of seconds, at least 1');
    END IF;
    CALL pyqueue__schedule(in_queue, in_key, in_kind, in_payload, CAST(in_every_s AS SIGNED), NULL);
END //

-- queue_schedule_cron: a message (in_key @ time, in_kind, in_payload) at every minute matching the 5-field cron
-- expression in_cron (UTC). Result: one row, next_at = the time of the first occurrence.
-- Locks as pyqueue__schedule.
DROP PROCEDURE IF EXISTS queue_schedule_cron //
CREATE PROCEDURE queue_schedule_cron(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_payload LONGTEXT CHARACTER SET utf8mb4,
    IN in_cron    LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    IF in_cron IS NULL OR CHAR_LENGTH(in_cron) > 255 THEN
        CALL pyqueue__raise('invalid_argument', 'cron must not be NULL or longer than 255 characters');
    END IF;
    CALL pyqueue__schedule(in_queue, in_key, in_kind, in_payload, NULL, in_cron);
END //

-- queue_unschedule: removes the schedule and its pending occurrence unless reserved. Result: one row, unscheduled =
-- 1, or 0 when absent. Locks: the schedule row and the occurrence, each for one statement.
DROP PROCEDURE IF EXISTS queue_unschedule //
CREATE PROCEDURE queue_unschedule(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_kind, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key VARCHAR(234) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    DECLARE v_old DATETIME(6);
    DECLARE v_oldkey VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_oldid BIGINT;
    DECLARE v_done INT DEFAULT 0;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_key', in_key, 234);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind;
    SELECT MAX(s.next_at) INTO v_old FROM pyqueue_schedule s
     WHERE s.queue_name = v_queue AND s.p_key = v_key AND s.p_kind = v_kind;
    IF v_old IS NOT NULL THEN
        DELETE FROM pyqueue_schedule WHERE queue_name = v_queue AND p_key = v_key AND p_kind = v_kind;
        SET v_done = ROW_COUNT();
        SET v_oldkey = CONCAT(v_key, '@', DATE_FORMAT(v_old, '%Y-%m-%dT%H:%i:%sZ'));
        SELECT COALESCE(MAX(m.id), 0) INTO v_oldid FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_oldkey AND m.p_kind = v_kind;
        DELETE FROM pyqueue_message WHERE id = v_oldid AND reserve_token IS NULL;
    END IF;
    SELECT v_done AS unscheduled;
END //

-- queue_schedules: the schedules of a queue (all when NULL), by queue, key, kind: queue, p_key, p_kind, payload,
-- every_s, cron, next_at. Plain read.
DROP PROCEDURE IF EXISTS queue_schedules //
CREATE PROCEDURE queue_schedules(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue, v_dlq VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis DECIMAL(20,6);
    DECLARE v_max INT;
    DECLARE v_paused BOOLEAN;
    IF in_queue IS NOT NULL THEN CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused); END IF;
    SET v_queue = in_queue;
    SELECT s.queue_name AS `queue`, s.p_key, s.p_kind, s.payload, s.every_s, s.cron, s.next_at
      FROM pyqueue_schedule s
     WHERE v_queue IS NULL OR s.queue_name = v_queue
     ORDER BY s.queue_name, s.p_key, s.p_kind;
END //

-- ==== ingest ====
-- Bulk enqueue with plain INSERTs into the table queue_ingest (Spark's df.write.jdbc), then queue_ingest_flush moves
-- the rows into the queues (no trigger: a row trigger costs MariaDB about 25 us per row).

-- queue_ingest_flush: enqueues the rows plain INSERTs put into queue_ingest (Spark's df.write.jdbc) of in_queue (NULL =
-- every queue): each becomes a live message (dedup, the first wins; FIFO in insertion order); a bad row (queue_push's
-- checks) goes to pyqueue_ingest_reject with its reason 'pyqueue:<code>: ...'. Every row leaves queue_ingest. Result:
-- one row (enqueued, duplicates, rejected). Steps: reject bad rows, delete duplicates of live messages (found by a
-- plain read: no lock on pyqueue_message), one INSERT IGNORE ... SELECT of the rest, delete them. Concurrency: appends
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
    DECLARE v_max, v_mark, v_from, v_to BIGINT;
    DECLARE v_page, v_live INT;
    DECLARE v_ids LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_pending, v_enqueued, v_rejected, v_deleted, v_dups BIGINT DEFAULT 0;
    DECLARE v_tries, v_deadlock INT DEFAULT 0;
    DECLARE v_lockname VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_bad_text, v_bad_payload LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_lockname IS NOT NULL THEN DO RELEASE_LOCK(v_lockname); END IF; RESIGNAL; END;
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
    attempt: LOOP
        SET v_deadlock = 0, v_tries = v_tries + 1,
            v_pending = 0, v_enqueued = 0, v_rejected = 0, v_deleted = 0, v_dups = 0,
            v_bad_text = NULL, v_bad_payload = NULL;
        BEGIN
        DECLARE EXIT HANDLER FOR 1213, 1467
        BEGIN IF v_own = 1 THEN ROLLBACK; SET v_deadlock = 1; ELSE RESIGNAL; END IF; END;
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
        SELECT COALESCE(MAX(r.id), 0) INTO v_mark FROM pyqueue_ingest_reject r;
        IF v_pending > 0 THEN
            -- rows holding a UTF-16 surrogate (pyqueue__check_utf8), found by a plain read: inside the INSERT the
            -- round trip's warning (1977) would be an error; only rows holding the byte ED are converted
            /*M!100300 SET STATEMENT group_concat_max_len = 1073741824 FOR */ SELECT /*+ SET_VAR(group_concat_max_len = 1073741824) */ JSON_ARRAYAGG(IF(CAST(CONVERT(CONVERT(CONCAT_WS('', i.queue_name, i.p_key, i.p_kind) USING utf16)
                                                 USING utf8mb4) AS BINARY)
                                    <> CAST(CONCAT_WS('', i.queue_name, i.p_key, i.p_kind) AS BINARY), i.ingest_id, NULL)),
                   JSON_ARRAYAGG(IF(CAST(CONVERT(CONVERT(i.payload USING utf16) USING utf8mb4) AS BINARY)
                                    <> CAST(i.payload AS BINARY), i.ingest_id, NULL))
              INTO v_bad_text, v_bad_payload
              FROM queue_ingest i
             WHERE i.ingest_id <= v_max AND (v_queue IS NULL OR i.queue_name = v_queue)
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
               END, v_now
              FROM queue_ingest i
              LEFT JOIN pyqueue_queue q ON q.queue_name = i.queue_name
             WHERE i.ingest_id <= v_max AND (v_queue IS NULL OR i.queue_name = v_queue)
               AND (CASE WHEN i.queue_name IS NULL OR CHAR_LENGTH(i.queue_name) = 0
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
               END) IS NOT NULL
             ORDER BY i.ingest_id
               LOCK IN SHARE MODE;
            SET v_rejected = ROW_COUNT();
            IF v_rejected > 0 THEN
                DELETE FROM queue_ingest
                 WHERE ingest_id IN (SELECT r.ingest_id FROM pyqueue_ingest_reject r WHERE r.id > v_mark);
            END IF;
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
            IF v_queue IS NOT NULL THEN
                SELECT COUNT(*) INTO v_live FROM (SELECT 1 FROM pyqueue_message m WHERE m.queue_name = v_queue LIMIT 1) AS x;
            ELSE
                SELECT COUNT(*) INTO v_live FROM (SELECT 1 FROM pyqueue_message m LIMIT 1) AS x;
            END IF;
            IF v_live = 0 THEN SET v_from = v_max; END IF;
            dups: LOOP
                SELECT MAX(d.ingest_id), IF(v_page = 1, NULL, JSON_ARRAYAGG(d.ingest_id)) INTO v_to, v_ids
                  FROM (SELECT i.ingest_id
                          FROM queue_ingest i
                          JOIN pyqueue_message m
                            ON m.queue_name = i.queue_name AND m.p_key = i.p_key AND m.p_kind = i.p_kind
                         WHERE i.ingest_id > v_from AND i.ingest_id <= v_max
                           AND (v_queue IS NULL OR i.queue_name = v_queue)
                         ORDER BY i.ingest_id
                         LIMIT v_page) d;
                IF v_to IS NULL THEN LEAVE dups; END IF;
                IF v_ids IS NULL THEN
                    DELETE FROM queue_ingest WHERE ingest_id = v_to;
                ELSE
                    DELETE i FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (id BIGINT PATH '$')) AS d
                      JOIN queue_ingest i ON i.ingest_id = d.id;
                END IF;
                SET v_dups = v_dups + ROW_COUNT(), v_from = v_to;
            END LOOP;
            -- what is left passed every check: IGNORE skips only repeats and rows that went live meanwhile
            INSERT IGNORE INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, attempts)
            SELECT i.queue_name, i.p_key, i.p_kind, i.payload, COALESCE(i.priority, 0),
                   COALESCE(i.run_at, v_now), COALESCE(i.run_at, v_now), v_now, 0
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
        IF v_deadlock = 0 THEN LEAVE attempt; END IF;
        IF v_tries >= 10 THEN
            SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213,
                MESSAGE_TEXT = 'Deadlock found when trying to get lock; try restarting transaction';
        END IF;
    END LOOP;
    IF v_lockname IS NOT NULL THEN DO RELEASE_LOCK(v_lockname); END IF;
    SELECT v_enqueued AS enqueued, GREATEST(v_deleted - v_enqueued - v_rejected, 0) AS duplicates,
           v_rejected AS rejected;
END //

-- ==== privileges ====
-- Nothing to revoke: MySQL has no PUBLIC grant on a new procedure and this file grants nothing (only
-- automatic_sp_privileges, to the account that runs it). Applications get EXECUTE from pyqueue-sql grant.

DELIMITER ;

SET SESSION character_set_client = @pyqueue_saved_character_set_client;
SET SESSION character_set_results = @pyqueue_saved_character_set_results;
SET SESSION collation_connection = @pyqueue_saved_collation_connection;
SET SESSION sql_mode = @pyqueue_saved_sql_mode;
