-- pyqueue-sql revision 0008_single_pass_batches (mysql): the routines this revision added or
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

-- pyqueue__claim: claims up to in_n ready messages of in_queue (of one of
-- in_kinds, NULL = any) in the reserve's order, a page of candidates
-- (pyqueue__candidates, 5000 rows) at a time, each page with ONE statement: an UPDATE
-- joined to a locking read by id (FOR UPDATE SKIP LOCKED, primary-key
-- lookups only: never a gap, never the ready range) of the candidates that
-- are still exactly as the plain read saw them. A claimed row gets
-- scheduled_at = in_until and the token in_prefix + its position in the
-- call as 12 hex digits, so the claims of one call are found again by
-- (queue_name, scheduled_at = in_until, token prefix) on the due index, in
-- order of the token. For queue_reserve (in_pop FALSE) attempts + 1 and
-- reserved_by = in_worker; a candidate with attempts >= in_max (its last
-- allowed reservation expired) is claimed under another prefix instead and
-- dead-lettered (pyqueue__dead_letter, one by one: such rows are few), and
-- does not count. For queue_pop (in_pop TRUE) attempts and worker stay, and
-- the rows claimed stop where their size in the result would pass
-- max_allowed_packet (at least one row).
-- Priorities are walked from the top, one range of the ready index per
-- priority, for at most 4 priorities; then one read of the due index covers
-- every lower priority, so the cost is bounded by the rows ready, not by
-- the number of distinct priorities among delayed and reserved rows.
-- io_claimed: the claimed pages' candidates are appended to it as the
-- elements of a JSON array without its brackets (start with ''; what
-- pyqueue__give_back_claims restores). out_count: rows claimed.
-- Locks: the claimed rows, for one statement each page (or until the
-- caller's transaction ends); rows another session holds are skipped.
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
    IN    in_prefix  CHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    INOUT io_claimed LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_priority INT;
    DECLARE v_steps    INT DEFAULT 0;
    DECLARE v_rest     BOOLEAN;
    DECLARE v_left     INT;
    DECLARE v_k        INT;
    DECLARE v_got      INT;
    DECLARE v_maxatt   INT;
    DECLARE v_cand     LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_pr       INT;
    DECLARE v_at       DATETIME(6);
    DECLARE v_id       BIGINT;
    DECLARE v_base     BIGINT DEFAULT 0;
    DECLARE v_claims   INT;
    DECLARE v_budget   BIGINT;
    DECLARE v_dead     LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_ndead    INT;
    DECLARE v_dprefix  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_i        INT;
    DECLARE v_done     INT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        -- A failing procedure hands no INOUT parameter back to its caller
        -- (io_claimed would reach it as it was when called), so the claims
        -- of this call are given back here, before the error goes on.
        CALL pyqueue__give_back_claims(in_prefix, io_claimed, in_pop);
        RESIGNAL;
    END;
    SET v_left = in_n, out_count = 0, v_budget = @@max_allowed_packet - 4096;
    CALL pyqueue__random_token(v_dprefix);
    SET v_dprefix = LEFT(v_dprefix, 24);
    SELECT MAX(m.priority) INTO v_priority FROM pyqueue_message m WHERE m.queue_name = in_queue;
    walk: WHILE v_priority IS NOT NULL AND v_left > 0 DO
        SET v_rest = v_steps >= 4, v_pr = NULL, v_at = NULL, v_id = NULL;
        pages: LOOP
            -- pages of at most 5000: the UPDATE's own buffer of changed rows
            -- (about 1.2 KB each) stays an in-memory table
            SET v_k = LEAST(v_left, 5000);
            CALL pyqueue__candidates(in_queue, in_kinds, in_now, v_priority, v_rest, v_k, in_pop,
                                     v_pr, v_at, v_id, v_cand, v_got, v_maxatt);
            IF v_got = 0 THEN
                LEAVE pages;
            END IF;
            SET v_claims = 0;
            BEGIN
                -- in autocommit mode a claim chosen as a deadlock victim was
                -- this one statement: none of the page's claims was made, as
                -- if each had lost a race (a later reserve takes them)
                DECLARE EXIT HANDLER FOR 1213
                BEGIN
                    IF in_own <> 1 THEN
                        RESIGNAL;
                    END IF;
                END;
                UPDATE (SELECT x.id, j.ord, (in_max IS NOT NULL AND x.attempts >= in_max) AS dead
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
                       m.reserve_token = CONCAT(IF(c.dead, v_dprefix, in_prefix), LOWER(LPAD(HEX(v_base + c.ord), 12, '0')));
                SET v_claims = ROW_COUNT();
            END;
            IF v_claims > 0 THEN
                -- appended as text (a JSON merge would parse all of it again each page)
                SET io_claimed = CONCAT(io_claimed, IF(io_claimed = '', '', ','),
                                        SUBSTRING(v_cand, 2, CHAR_LENGTH(v_cand) - 2));
            END IF;
            IF in_max IS NOT NULL AND v_maxatt >= in_max AND v_claims > 0 THEN
                -- the candidates claimed for dead-lettering: [id, token]
                SELECT COUNT(*), JSON_ARRAYAGG(JSON_ARRAY(m.id, m.reserve_token)) INTO v_ndead, v_dead
                  FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (ord FOR ORDINALITY, c_id BIGINT PATH '$[0]')) AS j
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                 WHERE m.reserve_token = CONCAT(v_dprefix, LOWER(LPAD(HEX(v_base + j.ord), 12, '0')));
                SET v_claims = v_claims - v_ndead, v_i = 0;
                IF v_ndead > 0 THEN  -- why it goes, unless a consumer said why
                    UPDATE JSON_TABLE(v_dead, '$[*]' COLUMNS (
                               c_id    BIGINT   PATH '$[0]',
                               c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS j
                      STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                       SET m.last_error = 'reservation expired on its last allowed delivery'
                     WHERE m.reserve_token = j.c_token AND m.last_error IS NULL;
                END IF;
                WHILE v_i < v_ndead DO
                    BEGIN
                        -- in autocommit mode a step chosen as a deadlock
                        -- victim leaves the message claimed: it comes back
                        -- when the claim expires and is dead-lettered then
                        DECLARE EXIT HANDLER FOR 1213, 1467
                        BEGIN
                            IF in_own <> 1 THEN
                                RESIGNAL;
                            END IF;
                        END;
                        CALL pyqueue__dead_letter(in_queue, in_dlq,
                                                  JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][0]')),
                                                  JSON_UNQUOTE(JSON_EXTRACT(v_dead, CONCAT('$[', v_i, '][1]'))),
                                                  in_now, v_done);
                    END;
                    SET v_i = v_i + 1;
                END WHILE;
            END IF;
            SET v_base = v_base + v_got, v_left = v_left - v_claims, out_count = out_count + v_claims;
            IF in_pop AND JSON_EXTRACT(v_cand, CONCAT('$[', v_got - 1, '][5]')) > v_budget THEN
                SET v_left = 0;  -- the result is full
            ELSEIF in_pop THEN
                SET v_budget = v_budget - JSON_EXTRACT(v_cand, CONCAT('$[', v_got - 1, '][5]'));
            END IF;
            IF v_left <= 0 OR v_got < v_k THEN
                LEAVE pages;
            END IF;
        END LOOP;
        IF v_rest OR v_left <= 0 THEN
            LEAVE walk;
        END IF;
        SET v_steps = v_steps + 1;
        SELECT MAX(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name = in_queue AND m.priority < v_priority;
    END WHILE;
END //

-- pyqueue__claim_one: pyqueue__claim for a reserve of one message (not a
-- pop), without its JSON pages: the same walk over priorities (a range of
-- the ready index for each of the first 4, then the due index for every
-- lower one), one candidate at a time read without locks, claimed by the
-- same single statement (an UPDATE joined to a SKIP LOCKED re-read by id
-- of the row as the plain read saw it), with the same token (in_prefix +
-- 000000000001) and the same dead-lettering of a candidate at in_max. So a
-- reserve of one costs a few primary-key and index-range statements rather
-- than the building and parsing of JSON arrays that pays off for batches.
-- io_claimed and out_count as pyqueue__claim. Locks: the claimed row, for
-- one statement (or until the caller's transaction ends); rows another
-- session holds are skipped.
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
    IN    in_prefix  CHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    INOUT io_claimed LONGTEXT CHARACTER SET utf8mb4,
    OUT   out_count  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_claims   INT;
    DECLARE v_priority INT;
    DECLARE v_steps    INT DEFAULT 0;
    DECLARE v_found    INT;
    DECLARE v_id       BIGINT;
    DECLARE v_att      INT;
    DECLARE v_at       DATETIME(6);
    DECLARE v_tok      CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_by       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_pr       INT;
    DECLARE v_last_id  BIGINT;
    DECLARE v_last_at  DATETIME(6);
    DECLARE v_last_pr  INT;
    DECLARE v_dead     BOOLEAN;
    DECLARE v_dtoken   CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_dprefix  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL;
    DECLARE v_seq      BIGINT DEFAULT 0;
    DECLARE v_done     INT;
    SET out_count = 0;
    SELECT MAX(m.priority) INTO v_priority FROM pyqueue_message m WHERE m.queue_name = in_queue;
    walk: WHILE v_priority IS NOT NULL DO
        SET v_last_id = NULL, v_last_at = NULL, v_last_pr = NULL;
        candidates: LOOP
            -- the next candidate after the keyset position; an aggregate over
            -- at most one row, so that no row is not a "no data" condition
            IF v_steps < 4 THEN
                SELECT COUNT(*), MAX(d.id), MAX(d.attempts), MAX(d.scheduled_at), MAX(d.reserve_token),
                       MAX(d.reserved_by), MAX(d.priority)
                  INTO v_found, v_id, v_att, v_at, v_tok, v_by, v_pr
                  FROM (SELECT m.id, m.attempts, m.scheduled_at, m.reserve_token, m.reserved_by, m.priority
                          FROM pyqueue_message m FORCE INDEX (pyqueue_message_ready_idx)
                         WHERE m.queue_name = in_queue AND m.priority = v_priority AND m.scheduled_at <= in_now
                           AND (v_last_id IS NULL
                                OR m.scheduled_at > v_last_at OR (m.scheduled_at = v_last_at AND m.id > v_last_id))
                           AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                         ORDER BY m.scheduled_at, m.id
                         LIMIT 1) AS d;
            ELSE
                SELECT COUNT(*), MAX(d.id), MAX(d.attempts), MAX(d.scheduled_at), MAX(d.reserve_token),
                       MAX(d.reserved_by), MAX(d.priority)
                  INTO v_found, v_id, v_att, v_at, v_tok, v_by, v_pr
                  FROM (SELECT m.id, m.attempts, m.scheduled_at, m.reserve_token, m.reserved_by, m.priority
                          FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                         WHERE m.queue_name = in_queue AND m.scheduled_at <= in_now AND m.priority <= v_priority
                           AND (v_last_id IS NULL
                                OR m.priority < v_last_pr
                                OR (m.priority = v_last_pr
                                    AND (m.scheduled_at > v_last_at
                                         OR (m.scheduled_at = v_last_at AND m.id > v_last_id))))
                           AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                         ORDER BY m.priority DESC, m.scheduled_at, m.id
                         LIMIT 1) AS d;
            END IF;
            IF v_found = 0 THEN
                LEAVE candidates;
            END IF;
            SET v_last_id = v_id, v_last_at = v_at, v_last_pr = v_pr, v_seq = v_seq + 1,
                v_dead = (in_max IS NOT NULL AND v_att >= in_max);
            IF v_dead AND v_dprefix IS NULL THEN
                CALL pyqueue__random_token(v_dprefix);
                SET v_dprefix = LEFT(v_dprefix, 24);
            END IF;
            SET v_dtoken = IF(v_dead, CONCAT(v_dprefix, LOWER(LPAD(HEX(v_seq), 12, '0'))), NULL);
            SET v_claims = 0;
            BEGIN
                -- in autocommit mode a claim chosen as a deadlock victim was
                -- this one statement: not made, like one that lost a race
                DECLARE EXIT HANDLER FOR 1213
                BEGIN
                    IF in_own <> 1 THEN
                        RESIGNAL;
                    END IF;
                END;
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
                       m.reserve_token = IF(v_dead, v_dtoken, CONCAT(in_prefix, '000000000001'));
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
                -- why it goes, unless a consumer said why
                UPDATE pyqueue_message m
                   SET m.last_error = 'reservation expired on its last allowed delivery'
                 WHERE m.id = v_id AND m.reserve_token = v_dtoken AND m.last_error IS NULL;
                BEGIN
                    -- in autocommit mode a step chosen as a deadlock victim
                    -- leaves the message claimed: it comes back when the
                    -- claim expires and is dead-lettered then
                    DECLARE EXIT HANDLER FOR 1213, 1467
                    BEGIN
                        IF in_own <> 1 THEN
                            RESIGNAL;
                        END IF;
                    END;
                    CALL pyqueue__dead_letter(in_queue, in_dlq, v_id, v_dtoken, in_now, v_done);
                END;
            END IF;
        END LOOP;
        IF v_steps >= 4 THEN
            LEAVE walk;
        END IF;
        SET v_steps = v_steps + 1;
        SELECT MAX(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name = in_queue AND m.priority < v_priority;
    END WHILE;
END //

-- queue_push_batch: inserts many messages in one statement. MySQL takes ONE
-- JSON array of objects {"p_key", "p_kind", "payload", "run_at", "priority"}
-- as second argument; the other four arguments must be NULL. p_key, p_kind
-- and payload are required: p_key / p_kind JSON strings as in queue_push
-- (not empty, at most 255 / 128 characters, no trailing space), payload any
-- JSON value including null; run_at is a
-- string 'YYYY-MM-DD HH:MM:SS[.ffffff]' in UTC, missing or null = now;
-- priority a whole number, missing or null = 0. Any invalid element refuses
-- the whole batch before anything is written. Result: one row, column
-- inserted = how many were new (duplicates, also within the batch, are
-- skipped; the first occurrence wins).
-- Locks: the new rows (shared locks on duplicates) and a shared lock on the
-- queue row, for one statement. On MariaDB's default
-- innodb_autoinc_lock_mode = 1 an INSERT ... SELECT also holds the table's
-- AUTO-INC lock for the statement, so other pushes wait for the batch. In
-- autocommit mode a deadlock (a queue_drop or another bulk insert racing
-- it) runs the statement again instead of failing.
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
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_now      DATETIME(6);
    DECLARE v_bad      BIGINT;
    DECLARE v_inserted INT DEFAULT 0;
    DECLARE v_own      INT DEFAULT 0;
    DECLARE v_tries    INT DEFAULT 0;
    DECLARE v_retry    INT;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_kinds IS NOT NULL OR in_payloads IS NOT NULL OR in_run_ats IS NOT NULL
       OR in_priorities IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            'MySQL takes one JSON array of messages as 2nd argument; the other 4 must be NULL');
    END IF;
    IF in_messages IS NULL THEN
        CALL pyqueue__raise('invalid_argument', 'messages must not be NULL');
    END IF;
    IF NOT JSON_VALID(in_messages) THEN
        CALL pyqueue__raise('invalid_argument', 'messages must be a JSON array of objects');
    END IF;
    IF JSON_TYPE(in_messages) <> 'ARRAY' THEN
        CALL pyqueue__raise('invalid_argument', 'messages must be a JSON array of objects');
    END IF;
    IF LOCATE(X'ED', CAST(in_messages AS BINARY)) > 0 THEN  -- the check's cheap pre-test, saving a CALL
        CALL pyqueue__check_utf8('invalid_argument', 'messages', in_messages);
    END IF;
    -- First invalid element (1-based), judged by the same expressions the
    -- insert below uses; "IS NOT TRUE" so that a NULL verdict counts as bad.
    -- JSON_TABLE reads each field of an element once, as the JSON value it
    -- is (SQL NULL when the member is missing); the checks then look at
    -- those small values, never at the whole element again.
    SELECT MIN(b.ord) INTO v_bad
      FROM JSON_TABLE(in_messages, '$[*]' COLUMNS (
               ord         FOR ORDINALITY,
               elem        JSON PATH '$',
               k           JSON PATH '$.p_key',
               kd          JSON PATH '$.p_kind',
               has_payload INT EXISTS PATH '$.payload',
               run_at      JSON PATH '$.run_at',
               priority    JSON PATH '$.priority')) AS b
     WHERE (    JSON_TYPE(b.elem) = 'OBJECT'
            AND JSON_TYPE(b.k) = 'STRING'
            AND CHAR_LENGTH(JSON_UNQUOTE(b.k)) BETWEEN 1 AND 255
            AND NOT (JSON_UNQUOTE(b.k) LIKE '% ')
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
    IF v_bad IS NOT NULL THEN
        CALL pyqueue__raise('invalid_argument',
                            CONCAT('element ', v_bad, ' of the batch: bad p_key/p_kind, missing payload or bad run_at/priority'));
    END IF;
    SET v_now = UTC_TIMESTAMP(6);
    -- autocommit with no transaction open (MariaDB can tell; see pyqueue__own_transaction)
    /*M!100300 SET v_own = IF(@@SESSION.autocommit = 1, 1 - @@SESSION.in_transaction, 0); */
    attempt: LOOP
        SET v_retry = 0, v_tries = v_tries + 1;
        BEGIN
            -- a deadlock victim (1213; 1467 while waiting for the AUTO-INC lock)
            -- in autocommit mode was this one statement: run it again
            DECLARE EXIT HANDLER FOR 1213, 1467
            BEGIN
                IF v_own = 1 AND v_tries < 10 THEN
                    SET v_retry = 1;
                ELSE
                    RESIGNAL;
                END IF;
            END;
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
                       priority JSON PATH '$.priority')) AS b
             ORDER BY b.ord;
            SET v_inserted = ROW_COUNT();
        END;
        IF v_retry = 0 THEN
            LEAVE attempt;
        END IF;
    END LOOP;
    IF v_inserted = 0 AND JSON_LENGTH(in_messages) > 0
       AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- pyqueue__reserve_limited: queue_reserve's work on a queue with
-- concurrency limits, after its checks (in_kinds as pyqueue__reserve_args
-- returns it), one candidate at a time because each delivery of a limited
-- kind first takes a slot (pyqueue__limit_claim). Priorities are walked one
-- by one; per priority a plain read of the ready range in pages of ids in
-- FIFO order, then per candidate:
--   1. SELECT ... FOR UPDATE SKIP LOCKED by id, re-checking it is ready;
--   2. a slot for a limited kind, then an UPDATE by id re-checking what
--      step 1 saw (still ready, same attempts, same token): a fresh token,
--      scheduled_at = now + timeout, attempts + 1;
--   3. the result set is read at the end by (id, token) of the claims.
-- A candidate with attempts >= max_attempts is claimed the same way (new
-- token, attempts unchanged) and handed to pyqueue__dead_letter instead.
-- A call that fails after claiming gives its claims back as they were
-- (their slots freed). Locks: each candidate row for one statement, or,
-- inside the caller's transaction, the claimed rows until it ends; the
-- slot rows as pyqueue__limit_take. Emits the result set.
DROP PROCEDURE IF EXISTS pyqueue__reserve_limited //
CREATE PROCEDURE pyqueue__reserve_limited(
    IN in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6),
    IN in_n       INT,
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    IN in_vis     DECIMAL(20,6),
    IN in_max     INT,
    IN in_dlq     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis        DECIMAL(20,6);
    DECLARE v_max        INT;
    DECLARE v_dlq        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused     BOOLEAN;
    DECLARE v_now        DATETIME(6);
    DECLARE v_until      DATETIME(6);
    DECLARE v_left       INT;
    DECLARE v_page       INT;
    DECLARE v_got        INT;
    DECLARE v_priority   INT;
    DECLARE v_after_at   DATETIME(6);
    DECLARE v_after_id   BIGINT;
    DECLARE v_id         BIGINT;
    DECLARE v_at         DATETIME(6);
    DECLARE v_done       INT DEFAULT 0;
    DECLARE v_found      INT;
    DECLARE v_dead       INT;
    DECLARE v_attempts   INT;
    DECLARE v_seen_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_seen_at    DATETIME(6);
    DECLARE v_seen_by    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_token      CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed    LONGTEXT CHARACTER SET utf8mb4 DEFAULT '[]';
    DECLARE v_kinds      LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_limits     INT;  -- limits
    DECLARE v_ok         INT DEFAULT 1;
    DECLARE v_full       LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_own        INT DEFAULT 0;
    DECLARE v_claims     INT;
    DECLARE c_ready CURSOR FOR
        SELECT m.id, m.scheduled_at
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
    -- An error after claims: give them back as they were, then fail.
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        DECLARE v_i INT DEFAULT 0;
        DECLARE v_c LONGTEXT CHARACTER SET utf8mb4;
        WHILE v_i < JSON_LENGTH(v_claimed) DO
            SET v_c = JSON_EXTRACT(v_claimed, CONCAT('$[', v_i, ']'));
            UPDATE pyqueue_message
               SET scheduled_at = CAST(JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[2]')) AS DATETIME(6)),
                   attempts = attempts - 1,
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
        v_kinds = in_kinds;

    IF NOT v_paused THEN
        -- autocommit with no transaction open (MariaDB can tell; see pyqueue__own_transaction)
        /*M!100300 SET v_own = IF(@@SESSION.autocommit = 1, 1 - @@SESSION.in_transaction, 0); */
        SET v_now = UTC_TIMESTAMP(6);
        SET v_until = v_now + INTERVAL CAST(COALESCE(in_timeout, v_vis) * 1000000 AS SIGNED) MICROSECOND;
        SET v_left = COALESCE(in_n, 1);
        SELECT EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue) INTO v_limits;
        SELECT MAX(m.priority) INTO v_priority FROM pyqueue_message m WHERE m.queue_name = v_queue;
        priorities: WHILE v_priority IS NOT NULL AND v_left > 0 DO
            SET v_after_at = NULL, v_after_id = NULL;
            pages: LOOP
                SET v_page = LEAST(v_left, 1000) + 16, v_got = 0;
                OPEN c_ready;
                candidates: LOOP
                    SET v_done = 0;
                    FETCH c_ready INTO v_id, v_at;
                    IF v_done = 1 THEN
                        LEAVE candidates;
                    END IF;
                    SET v_got = v_got + 1, v_after_at = v_at, v_after_id = v_id;
                    BEGIN
                        DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
                        SET v_found = 1;
                        -- queue_name again: queue_move changes a row's queue in
                        -- place, so a row listed above may be in another queue now.
                        SELECT m.attempts, m.reserve_token, m.scheduled_at, m.reserved_by
                          INTO v_attempts, v_seen_token, v_seen_at, v_seen_by
                          FROM pyqueue_message m
                         WHERE m.id = v_id AND m.queue_name = v_queue AND m.scheduled_at <= v_now
                           FOR UPDATE SKIP LOCKED;
                    END;
                    IF v_found = 1 THEN
                        SET v_token = UUID();
                        IF v_attempts >= v_max THEN
                            -- Its last allowed reservation expired: claim it
                            -- for the dead-letter step (attempts unchanged).
                            SET v_claims = 0;
                            BEGIN
                                -- in autocommit mode a claim chosen as a deadlock
                                -- victim was this one statement: not made, like
                                -- one that lost a race (a later reserve takes it)
                                DECLARE EXIT HANDLER FOR 1213
                                BEGIN
                                    IF v_own <> 1 THEN
                                        RESIGNAL;
                                    END IF;
                                END;
                                UPDATE pyqueue_message
                                   SET scheduled_at = v_until, reserve_token = v_token,
                                       last_error = COALESCE(last_error,
                                                             'reservation expired on its last allowed delivery')
                                 WHERE id = v_id AND queue_name = v_queue AND scheduled_at <= v_now
                                   AND attempts = v_attempts AND reserve_token <=> v_seen_token;
                                SET v_claims = ROW_COUNT();
                            END;
                            IF v_claims = 1 THEN
                                BEGIN
                                    -- in autocommit mode a step chosen as a deadlock
                                    -- victim leaves the message claimed: it comes back
                                    -- when the claim expires and is dead-lettered then
                                    DECLARE EXIT HANDLER FOR 1213, 1467
                                    BEGIN
                                        IF v_own <> 1 THEN
                                            RESIGNAL;
                                        END IF;
                                    END;
                                    CALL pyqueue__dead_letter(in_queue, v_dlq, v_id, v_token, v_now, v_dead);
                                END;
                            END IF;
                        ELSE
                            IF v_limits THEN  -- a slot first, for a kind with a limit
                                CALL pyqueue__limit_claim(v_queue, v_id, v_attempts, v_until, v_now, v_full, v_ok);
                            END IF;
                            SET v_claims = 0;
                            BEGIN
                                -- in autocommit mode a claim chosen as a deadlock
                                -- victim (a queue_drop cascading over the queue's
                                -- rows) was this one statement: a claim not made,
                                -- like one that lost a race
                                DECLARE EXIT HANDLER FOR 1213
                                BEGIN
                                    IF v_own <> 1 THEN
                                        RESIGNAL;
                                    END IF;
                                END;
                                UPDATE pyqueue_message
                                   SET scheduled_at = v_until,
                                       attempts = attempts + 1,
                                       reserved_by = in_worker,
                                       reserve_token = v_token
                                 WHERE id = v_id AND queue_name = v_queue AND scheduled_at <= v_now
                                   AND attempts = v_attempts AND reserve_token <=> v_seen_token
                                   AND v_ok = 1;
                                SET v_claims = ROW_COUNT();
                            END;
                            IF v_claims = 1 THEN
                                -- id, token, then what the claim changed (to give it back)
                                SET v_claimed = JSON_ARRAY_APPEND(v_claimed, '$',
                                    JSON_ARRAY(v_id, v_token,
                                               DATE_FORMAT(v_seen_at, '%Y-%m-%d %H:%i:%s.%f'),
                                               v_seen_token, v_seen_by, v_attempts + 1));
                                SET v_left = v_left - 1;
                                IF v_left = 0 THEN
                                    LEAVE candidates;
                                END IF;
                            END IF;
                        END IF;
                    END IF;
                END LOOP;
                CLOSE c_ready;
                IF v_left = 0 OR v_got < v_page THEN
                    LEAVE pages;
                END IF;
            END LOOP;
            SELECT MAX(m.priority) INTO v_priority
              FROM pyqueue_message m
             WHERE m.queue_name = v_queue AND m.priority < v_priority;
        END WHILE;
    END IF;

    SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
           m.attempts, m.created_at, m.scheduled_at_initially
      FROM JSON_TABLE(v_claimed, '$[*]' COLUMNS (
               ord      FOR ORDINALITY,
               c_id     BIGINT   PATH '$[0]',
               c_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
      JOIN pyqueue_message m ON m.id = c.c_id
     WHERE m.reserve_token = c.c_token COLLATE utf8mb4_bin
     ORDER BY c.ord;
END //

-- queue_extend: pushes the reservation's end to now + in_timeout (NULL =
-- the queue's visibility_timeout) and replaces the token (the old one stops
-- working). Result: one row, token = the new token, or NULL when in_token no
-- longer holds. A kind with a concurrency limit extends only while its slot
-- still belongs to this reservation (also after it expired, if no reserver
-- took the slot meanwhile), in three statements that each lock one kind of
-- row, in the order queue_reserve takes them (slot rows, then the message):
--   1. the slot, if still this reservation's, is marked as a claim in
--      progress ending at the new end (busy until then, whatever the
--      message shows); nobody can take it over from now on;
--   2. the message gets the new end and token (by id, token and attempts);
--   3. the slot holds this reservation again.
-- Interrupted after 1 or 2, the slot stays busy until the new end at most.
-- Locks: the kind's slot rows, then the message row, each for one statement.
-- In autocommit mode a step chosen as a deadlock victim (a queue_drop or a
-- reserve racing it) is run again instead of failing.
DROP PROCEDURE IF EXISTS queue_extend //
CREATE PROCEDURE queue_extend(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_key     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_token   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held   CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_id     BIGINT;
    DECLARE v_att    INT;
    DECLARE v_until  DATETIME(6);
    DECLARE v_slots  INT DEFAULT 0;
    DECLARE v_token  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_step   INT;
    DECLARE v_own    INT DEFAULT 0;
    DECLARE v_tries  INT DEFAULT 0;
    DECLARE v_retry  INT;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
    -- autocommit with no transaction open (MariaDB can tell; see pyqueue__own_transaction)
    /*M!100300 SET v_own = IF(@@SESSION.autocommit = 1, 1 - @@SESSION.in_transaction, 0); */
    SET v_queue = in_queue, v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token);
    SELECT COALESCE(MAX(m.id), 0), MAX(m.attempts) INTO v_id, v_att
      FROM pyqueue_message m
     WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
       AND m.reserve_token = v_held;
    IF v_id > 0 THEN
        SET v_token = UUID();
        SET v_until = UTC_TIMESTAMP(6)
                      + INTERVAL CAST(COALESCE(in_timeout, v_vis) * 1000000 AS SIGNED) MICROSECOND;
        -- the three steps above (1 and 3 only for a kind with a limit), each
        -- one statement; in autocommit mode a step chosen as a deadlock
        -- victim (a queue_drop or a reserve racing it) was that statement
        -- alone, and runs again
        SET v_step = IF(EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue AND l.p_kind = v_kind),
                        1, 2);
        steps: WHILE v_step <= 3 DO
            SET v_retry = 0, v_tries = v_tries + 1;
            BEGIN
                DECLARE EXIT HANDLER FOR 1213
                BEGIN
                    IF v_own = 1 AND v_tries < 10 THEN
                        SET v_retry = 1;
                    ELSE
                        RESIGNAL;
                    END IF;
                END;
                IF v_step = 1 THEN
                    UPDATE pyqueue_limit_slot
                       SET msg_attempts = v_att + 1, msg_until = v_until
                     WHERE queue_name = v_queue AND p_kind = v_kind AND msg_id = v_id AND msg_attempts = v_att;
                    SET v_slots = ROW_COUNT();
                    IF v_slots = 0
                       AND EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue AND l.p_kind = v_kind) THEN
                        SET v_token = NULL;  -- its slot went to another reservation
                    END IF;
                ELSEIF v_step = 2 AND v_token IS NOT NULL THEN
                    UPDATE pyqueue_message
                       SET scheduled_at = v_until, reserve_token = v_token
                     WHERE id = v_id AND reserve_token = v_held AND attempts = v_att;
                    IF ROW_COUNT() <> 1 THEN
                        SET v_token = NULL;
                    END IF;
                ELSEIF v_step = 3 AND v_slots > 0 THEN
                    UPDATE pyqueue_limit_slot
                       SET msg_attempts = v_att
                     WHERE queue_name = v_queue AND p_kind = v_kind AND msg_id = v_id AND msg_attempts = v_att + 1;
                END IF;
            END;
            IF v_retry = 0 THEN
                SET v_step = v_step + 1;
            END IF;
        END WHILE;
    END IF;
    SELECT v_token AS token;
END //

-- queue_commit_batch: commits many reservations at once; in_keys, in_kinds
-- and in_tokens are JSON arrays of strings of the same length (element i of
-- each names one reservation). Result: one row, committed = how many were
-- deleted; a reservation whose token no longer holds is skipped. Refuses,
-- changing nothing, arrays that are NULL, not arrays of strings, of
-- different lengths, or hold an empty/too long/space-ended key or kind or a
-- malformed token (the error names the first bad element).
-- Set-based, linear in the batch: each array is parsed once by JSON_TABLE
-- into a materialised derived table, and the three are joined on their
-- ordinals through the derived tables' automatic keys. As queue_commit: one
-- plain read locates the rows by key and token; then, for a queue that keeps
-- history, one INSERT copies them into pyqueue_history; occurrences of a
-- schedule (few) advance their schedule one by one (pyqueue__schedule_next);
-- then one DELETE by id re-checks each token under its row lock; history
-- copies of rows it did not delete (token lost meanwhile) are removed again.
-- Locks: the deleted rows (shared locks on them for the history copy), for
-- one statement each step; the schedule rows of occurrences.
DROP PROCEDURE IF EXISTS queue_commit_batch //
CREATE PROCEDURE queue_commit_batch(
    IN in_queue  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_keys   LONGTEXT CHARACTER SET utf8mb4,
    IN in_kinds  LONGTEXT CHARACTER SET utf8mb4,
    IN in_tokens LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_n        INT;
    DECLARE v_bad      BIGINT;
    DECLARE v_ids      LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_found    INT DEFAULT 0;
    DECLARE v_done     INT DEFAULT 0;
    DECLARE v_archived INT DEFAULT 0;
    DECLARE v_now      DATETIME(6);
    DECLARE v_occ      LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_nocc     INT DEFAULT 0;
    DECLARE v_i        INT DEFAULT 0;
    DECLARE v_gcl      BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET SESSION group_concat_max_len = v_gcl;
        RESIGNAL;
    END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_keys IS NULL OR in_kinds IS NULL OR in_tokens IS NULL THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds and tokens must not be NULL');
    END IF;
    IF NOT (JSON_VALID(in_keys) AND JSON_VALID(in_kinds) AND JSON_VALID(in_tokens)) THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds and tokens must be JSON arrays of strings');
    END IF;
    IF JSON_TYPE(in_keys) <> 'ARRAY' OR JSON_TYPE(in_kinds) <> 'ARRAY' OR JSON_TYPE(in_tokens) <> 'ARRAY' THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds and tokens must be JSON arrays of strings');
    END IF;
    SET v_n = JSON_LENGTH(in_keys);
    IF JSON_LENGTH(in_kinds) <> v_n OR JSON_LENGTH(in_tokens) <> v_n THEN
        CALL pyqueue__raise('invalid_argument', 'p_keys, p_kinds and tokens must have the same length');
    END IF;
    IF v_n > 0 THEN
        -- Each array checked on its own (no join needed): the first bad
        -- element of any of the three.
        SELECT LEAST(
                 COALESCE((SELECT MIN(k.ord) FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS k
                            WHERE (    JSON_TYPE(k.elem) = 'STRING'
                                   AND CHAR_LENGTH(JSON_UNQUOTE(k.elem)) BETWEEN 1 AND 255
                                   AND NOT (JSON_UNQUOTE(k.elem) LIKE '% ')) IS NOT TRUE), v_n + 1),
                 COALESCE((SELECT MIN(d.ord) FROM JSON_TABLE(in_kinds, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS d
                            WHERE (    JSON_TYPE(d.elem) = 'STRING'
                                   AND CHAR_LENGTH(JSON_UNQUOTE(d.elem)) BETWEEN 1 AND 128
                                   AND NOT (JSON_UNQUOTE(d.elem) LIKE '% ')) IS NOT TRUE), v_n + 1),
                 COALESCE((SELECT MIN(t.ord) FROM JSON_TABLE(in_tokens, '$[*]' COLUMNS (ord FOR ORDINALITY, elem JSON PATH '$')) AS t
                            WHERE (    JSON_TYPE(t.elem) = 'STRING'
                                   AND JSON_UNQUOTE(t.elem)
                                       REGEXP '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\\z'
                                  ) IS NOT TRUE), v_n + 1))
          INTO v_bad;
        IF v_bad <= v_n THEN
            CALL pyqueue__raise('invalid_argument',
                                CONCAT('element ', v_bad, ' of the batch: bad p_key/p_kind or malformed token'));
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue AND q.history_retention IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM JSON_TABLE(in_keys, '$[*]' COLUMNS (
                                k VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS k
                            WHERE k.k LIKE '%@____-__-__T__:__:__Z') THEN
            -- No history row to write and no schedule to advance: one DELETE
            -- joined to the three arrays (as the read below) finds each row
            -- by its key and deletes it if the token still holds, checked
            -- under the row's lock.
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
               AND m.reserve_token = CONVERT(t.t USING utf8mb4) COLLATE utf8mb4_bin;
            SET v_done = ROW_COUNT();
        ELSE
            SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
            -- [id, token, is a schedule's occurrence]. The keys stream from their
            -- JSON_TABLE; kinds and tokens are joined to them on ord through
            -- materialised derived tables (the LIMITs keep them materialised, with
            -- automatic keys on ord), kept narrow so that a large batch stays in
            -- memory: a kind as its MD5 (the token identifies the reservation; the
            -- kind is a consistency check), a token as 36 ASCII characters.
            SELECT COUNT(*),
                   CONCAT('[', GROUP_CONCAT(JSON_ARRAY(m.id, m.reserve_token, m.p_key LIKE '%@____-__-__T__:__:__Z')
                                            SEPARATOR ','), ']'),
                   SUM(m.p_key LIKE '%@____-__-__T__:__:__Z')
              INTO v_found, v_ids, v_nocc
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
        IF EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue AND q.history_retention IS NOT NULL) THEN
            INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                         created_at, processed_at, outcome, to_queue, reserved_by, last_error)
            SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                   m.created_at, v_now, 'committed', NULL, m.reserved_by, m.last_error
              FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (
                       c_id BIGINT PATH '$[0]', c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
             WHERE m.queue_name = v_queue AND m.reserve_token = c.c_token;
            SET v_archived = ROW_COUNT();
        END IF;
        -- occurrences of a schedule (one per schedule at most): as queue_commit
        SET v_occ = v_ids;
        WHILE v_nocc > 0 AND v_i < v_found DO
            IF JSON_EXTRACT(v_occ, CONCAT('$[', v_i, '][2]')) = 1 THEN
                CALL pyqueue__schedule_next(v_queue,
                    (SELECT m.p_key FROM pyqueue_message m WHERE m.id = JSON_EXTRACT(v_occ, CONCAT('$[', v_i, '][0]'))),
                    (SELECT m.p_kind FROM pyqueue_message m WHERE m.id = JSON_EXTRACT(v_occ, CONCAT('$[', v_i, '][0]'))));
                SET v_nocc = v_nocc - 1;
            END IF;
            SET v_i = v_i + 1;
        END WHILE;
        DELETE m
          FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (
                   c_id BIGINT PATH '$[0]', c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
         WHERE m.reserve_token = c.c_token;
        SET v_done = ROW_COUNT();
        IF v_archived > v_done THEN
            -- history copies of messages whose token was lost before the DELETE
            DELETE h
              FROM JSON_TABLE(v_ids, '$[*]' COLUMNS (
                       c_id BIGINT PATH '$[0]', c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS c
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.c_id
              STRAIGHT_JOIN pyqueue_history h
                ON h.queue_name = v_queue AND h.processed_at = v_now AND h.outcome = 'committed'
               AND h.p_key = m.p_key AND h.p_kind = m.p_kind
             WHERE m.queue_name = v_queue;
        END IF;
    END IF;
    SELECT v_done AS committed;
END //

-- queue_set_limit: at most in_capacity messages of in_kind reserved at once
-- in in_queue (0 holds the kind back); NULL removes the limit. Live
-- reservations of the kind without a slot (made before the first call) take
-- free slots, as far as the capacity goes. Lowering the capacity revokes
-- nothing: the holders of slots beyond it keep them until they end, and
-- nothing more is handed out until fewer than the new capacity are live.
-- No result set.
-- Locks: the limit row and its slot rows, each for one statement, or, in
-- autocommit mode with no transaction open, all of them in a transaction of
-- its own, run again whole (up to 10 times) when a deadlock picks it.
DROP PROCEDURE IF EXISTS queue_set_limit //
CREATE PROCEDURE queue_set_limit(
    IN in_queue    LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_kind     LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_capacity DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_now      DATETIME(6);
    DECLARE v_i        INT;
    DECLARE v_id       BIGINT;
    DECLARE v_attempts INT;
    DECLARE v_until    DATETIME(6);
    DECLARE v_ok       INT;
    DECLARE v_own      INT;
    DECLARE v_tries    INT DEFAULT 0;
    DECLARE v_deadlock INT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        IF v_own = 1 THEN
            ROLLBACK;
        END IF;
        RESIGNAL;
    END;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_int('capacity', in_capacity, 0, 10000);
    SET v_queue = in_queue, v_kind = in_kind;
    -- In autocommit mode with no transaction open, the steps run in a
    -- transaction of their own, run again whole when it is chosen as a
    -- deadlock victim (a reserve or a queue_drop racing it); inside the
    -- caller's transaction a deadlock is the caller's.
    CALL pyqueue__own_transaction(v_own);
    attempt: LOOP
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
            BEGIN
                IF v_own = 1 AND v_tries < 10 THEN
                    ROLLBACK;
                    SET v_deadlock = 1;
                ELSE
                    RESIGNAL;
                END IF;
            END;
            IF v_own = 1 THEN
                START TRANSACTION;
            END IF;
            IF in_capacity IS NULL THEN
                DELETE FROM pyqueue_limit WHERE queue_name = v_queue AND p_kind = v_kind;
            ELSE
                INSERT INTO pyqueue_limit (queue_name, p_kind, capacity)
                VALUES (v_queue, v_kind, in_capacity)
                ON DUPLICATE KEY UPDATE capacity = in_capacity;
                -- beyond a lowered capacity only free slots go; live holders keep
                -- theirs until they end (pyqueue__limit_take moves them into slots
                -- within the capacity as those free up)
                DELETE FROM pyqueue_limit_slot
                 WHERE queue_name = v_queue AND p_kind = v_kind AND slot_no > in_capacity
                   AND (msg_id IS NULL
                        OR NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                        WHERE m.id = pyqueue_limit_slot.msg_id
                                          AND m.queue_name = pyqueue_limit_slot.queue_name
                                          AND ((m.attempts = pyqueue_limit_slot.msg_attempts
                                                AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now)
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
                    IF v_done = 1 THEN
                        LEAVE live;
                    END IF;
                    CALL pyqueue__limit_take(v_queue, v_kind, v_id, v_attempts, v_until, v_now, v_ok);
                    IF v_ok = 0 THEN
                        LEAVE live;
                    END IF;
                END LOOP;
                CLOSE c_live;
            END IF;
            IF v_own = 1 THEN
                COMMIT;
            END IF;
        END;
        IF v_deadlock = 0 THEN
            LEAVE attempt;
        END IF;
    END LOOP;
END //

DELIMITER ;

SET SESSION character_set_client = @pyqueue_saved_character_set_client;

SET SESSION character_set_results = @pyqueue_saved_character_set_results;

SET SESSION collation_connection = @pyqueue_saved_collation_connection;

SET SESSION sql_mode = @pyqueue_saved_sql_mode;
