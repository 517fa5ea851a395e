-- pyqueue-sql revision 0009_plans_without_statistics (mysql): the routines this revision added or
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
                       -- why a dead-letter claim goes, unless a consumer said why
                       m.last_error = IF(c.dead, COALESCE(m.last_error, 'reservation expired on its last allowed delivery'),
                                         m.last_error),
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
                       -- why a dead-letter claim goes, unless a consumer said why
                       m.last_error = IF(v_dead, COALESCE(m.last_error, 'reservation expired on its last allowed delivery'),
                                         m.last_error),
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
--   3. the slot marked in 1 (by its number: a reserver that took the
--      expired message again meanwhile holds another slot naming it with
--      the same attempt count) holds this reservation again.
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
    DECLARE v_slot   INT;
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
                    -- the slot by its number: step 3 must give back this one
                    -- only (a reserver that took the message again after it
                    -- expired holds another slot with the same message and
                    -- attempts as the mark below)
                    SELECT MIN(s.slot_no) INTO v_slot
                      FROM pyqueue_limit_slot s
                     WHERE s.queue_name = v_queue AND s.p_kind = v_kind AND s.msg_id = v_id AND s.msg_attempts = v_att;
                    UPDATE pyqueue_limit_slot
                       SET msg_attempts = v_att + 1, msg_until = v_until
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
                    IF ROW_COUNT() <> 1 THEN
                        SET v_token = NULL;
                    END IF;
                ELSEIF v_step = 3 AND v_slots > 0 THEN
                    UPDATE pyqueue_limit_slot
                       SET msg_attempts = v_att
                     WHERE queue_name = v_queue AND p_kind = v_kind AND slot_no = v_slot
                       AND msg_id = v_id AND msg_attempts = v_att + 1;
                END IF;
            END;
            IF v_retry = 0 THEN
                SET v_step = v_step + 1;
            END IF;
        END WHILE;
    END IF;
    SELECT v_token AS token;
END //

DELIMITER ;

SET SESSION character_set_client = @pyqueue_saved_character_set_client;

SET SESSION character_set_results = @pyqueue_saved_character_set_results;

SET SESSION collation_connection = @pyqueue_saved_collation_connection;

SET SESSION sql_mode = @pyqueue_saved_sql_mode;
