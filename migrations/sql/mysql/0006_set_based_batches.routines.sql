-- pyqueue-sql revision 0006_set_based_batches (mysql): the routines this revision added or
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

-- pyqueue__reserve_args: the argument checks queue_reserve and
-- queue_commit_reserve share: n at least 1 (NULL = 1), timeout NULL or
-- positive, worker at most 255 characters of valid UTF-8, kinds as
-- pyqueue__kinds (out_kinds: the normalised filter). Takes no locks.
DROP PROCEDURE IF EXISTS pyqueue__reserve_args //
CREATE PROCEDURE pyqueue__reserve_args(
    IN  in_worker  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_timeout DECIMAL(20,6),
    IN  in_n       DECIMAL(65,30),
    IN  in_kinds   LONGTEXT CHARACTER SET utf8mb4,
    OUT out_kinds  LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    IF in_n < 1 THEN
        CALL pyqueue__raise('invalid_argument', 'n must be at least 1');
    END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);
    CALL pyqueue__check_duration('timeout', in_timeout, TRUE);
    IF CHAR_LENGTH(in_worker) > 255 THEN
        CALL pyqueue__raise('invalid_argument', 'worker is longer than 255 characters');
    END IF;
    IF LOCATE(X'ED', CAST(in_worker AS BINARY)) > 0 THEN  -- the check's cheap pre-test, saving a CALL
        CALL pyqueue__check_utf8('invalid_argument', 'worker', in_worker);
    END IF;
    CALL pyqueue__kinds(in_kinds, out_kinds);
END //

-- pyqueue__candidates: one page of the ready messages of in_queue, in the
-- reserve's order (priority DESC, scheduled_at, id), read WITHOUT locks
-- (a plain SELECT, the read view of the caller's transaction): at most in_k
-- rows after the keyset position (io_pr, io_at, io_id; NULL = from the
-- start), of priority in_priority only (in_rest FALSE: a range of the
-- ready index) or of every priority up to in_priority (in_rest TRUE: the
-- due index (queue_name, scheduled_at, id), ready rows only, sorted; used
-- once the walk over single priorities has taken a few steps, so that
-- delayed and reserved rows of many distinct priorities cost nothing).
-- out_cand: JSON array, in order, of [id, attempts, scheduled_at, token,
-- reserved_by, cum, priority], where cum is a running total of the rows'
-- size in a result (for queue_pop's packet budget; 0 unless in_sizes);
-- out_got: its length; out_max_attempts: the highest attempts in it.
-- io_*: moved to the last row. Needs group_concat_max_len large enough
-- (the callers raise it).
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
    -- One of the two branches runs (in_rest is a constant of the statement:
    -- the other is an impossible WHERE, never read).
    SELECT COUNT(*), MAX(d.attempts),
           CONCAT('[', GROUP_CONCAT(JSON_ARRAY(d.id, d.attempts, DATE_FORMAT(d.scheduled_at, '%Y-%m-%d %H:%i:%s.%f'),
                                               d.reserve_token, d.reserved_by, d.cum, d.priority)
                                    ORDER BY d.priority DESC, d.scheduled_at, d.id SEPARATOR ','), ']')
      INTO out_got, out_max_attempts, out_cand
      FROM (SELECT r.*, SUM(r.size) OVER (ORDER BY r.priority DESC, r.scheduled_at, r.id) AS cum
              FROM ((SELECT m.id, m.attempts, m.scheduled_at, m.reserve_token, m.reserved_by, m.priority,
                            IF(in_sizes, 2 * (LENGTH(m.payload) + LENGTH(m.p_key) + LENGTH(m.p_kind)) + 256, 0) AS size
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
                            IF(in_sizes, 2 * (LENGTH(m.payload) + LENGTH(m.p_key) + LENGTH(m.p_kind)) + 256, 0) AS size
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
            IF ROW_COUNT() > 0 THEN
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

-- pyqueue__give_back_claims: undoes the claims of one call (token prefix
-- in_prefix) of the rows in in_claimed (pyqueue__claim's io_claimed): scheduled_at,
-- token and worker as they were, attempts - 1 unless in_pop. Called by the
-- error handlers of pyqueue__claim (for the claims of a call that fails
-- inside it) and of pyqueue__reserve / queue_pop (for a failure after the
-- claim returned), so that a call that fails after claiming consumes
-- nothing; a second call finds nothing left under the prefix. Locks: those
-- rows, for one statement.
DROP PROCEDURE IF EXISTS pyqueue__give_back_claims //
CREATE PROCEDURE pyqueue__give_back_claims(
    IN in_prefix  CHAR(24) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_claimed LONGTEXT CHARACTER SET utf8mb4,
    IN in_pop     BOOLEAN)
SQL SECURITY INVOKER
BEGIN
    IF in_prefix IS NOT NULL AND in_claimed IS NOT NULL THEN
        UPDATE JSON_TABLE(CONCAT('[', in_claimed, ']'), '$[*]' COLUMNS (
                   c_id    BIGINT      PATH '$[0]',
                   c_at    DATETIME(6) PATH '$[2]',
                   c_token CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]',
                   c_by    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[4]')) AS j
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
           SET m.scheduled_at = j.c_at, m.attempts = m.attempts - IF(in_pop, 0, 1),
               m.reserve_token = j.c_token, m.reserved_by = j.c_by
         WHERE m.reserve_token LIKE CONCAT(in_prefix, '%');
    END IF;
END //

-- pyqueue__next_at: the earliest scheduled_at of the queue's messages (of
-- one of in_kinds, NULL = any), NULL when none. One read of the due index
-- (queue_name, scheduled_at, id) in order, stopping at the first row of a
-- wanted kind: without a filter one index entry, whatever the number of
-- distinct priorities. in_now is unused (kept for the callers). Plain read.
DROP PROCEDURE IF EXISTS pyqueue__next_at //
CREATE PROCEDURE pyqueue__next_at(
    IN  in_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kinds LONGTEXT CHARACTER SET utf8mb4,
    IN  in_now   DATETIME(6),
    OUT out_next DATETIME(6))
SQL SECURITY INVOKER
BEGIN
    SET out_next = (SELECT m.scheduled_at
                      FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
                     WHERE m.queue_name = in_queue
                       AND (in_kinds IS NULL OR JSON_CONTAINS(in_kinds, JSON_QUOTE(m.p_kind)))
                     ORDER BY m.scheduled_at
                     LIMIT 1);
END //

-- queue_push: inserts one message. Result: one row, column inserted = 1, or
-- 0 when a live message with the same (queue, p_key, p_kind) exists (dedup:
-- the existing one is untouched). run_at NULL = now (UTC), priority NULL = 0.
-- INSERT IGNORE would also downgrade bad values to warnings, so every
-- argument is validated before it; the one error it can still swallow, the
-- foreign key when the queue is dropped concurrently, is re-checked after.
-- Locks: a shared lock on the queue row (foreign key), then the new row (or
-- a shared lock on the duplicate), for one statement. In autocommit mode a
-- deadlock (a queue_drop or a bulk insert racing it) runs the statement
-- again instead of failing.
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
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_now      DATETIME(6);
    DECLARE v_at       DATETIME(6);
    DECLARE v_inserted INT;
    DECLARE v_own      INT DEFAULT 0;
    DECLARE v_tries    INT DEFAULT 0;
    DECLARE v_retry    INT;
    -- The common case (every argument plainly valid) is recognised by one
    -- expression, without a CALL or a read of the queue row: the INSERT's
    -- foreign key and the check after it report a missing queue. Anything
    -- it does not pass (an error, or a value that only looks suspicious,
    -- such as text holding the byte ED) goes through the full checks, in
    -- their order, which raise the precise error.
    IF (    CHAR_LENGTH(in_queue) BETWEEN 1 AND 128 AND NOT (in_queue LIKE '% ')
            AND CHAR_LENGTH(in_key) BETWEEN 1 AND 255 AND NOT (in_key LIKE '% ')
            AND CHAR_LENGTH(in_kind) BETWEEN 1 AND 128 AND NOT (in_kind LIKE '% ')
            AND LOCATE(X'ED', CAST(CONCAT(in_queue, in_key, in_kind, in_payload) AS BINARY)) = 0
            AND JSON_VALID(in_payload)
            AND (in_run_at IS NULL OR (in_run_at + INTERVAL 0 SECOND IS NOT NULL AND in_run_at >= '1000-01-01'))
            AND (in_priority IS NULL
                 OR (in_priority = TRUNCATE(in_priority, 0) AND in_priority BETWEEN -2147483648 AND 2147483647))
       ) IS NOT TRUE THEN
        CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
        CALL pyqueue__check_name('p_key', in_key, 255);
        CALL pyqueue__check_name('p_kind', in_kind, 128);
        CALL pyqueue__check_payload(in_payload);
        IF in_run_at IS NOT NULL AND (in_run_at + INTERVAL 0 SECOND IS NULL OR in_run_at < '1000-01-01') THEN
            CALL pyqueue__raise('invalid_argument', 'run_at is not a valid time');
        END IF;
        CALL pyqueue__check_int('priority', in_priority, -2147483648, 2147483647);
    END IF;
    SET v_queue = in_queue;
    SET v_now = UTC_TIMESTAMP(6);
    SET v_at = COALESCE(in_run_at, v_now);
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
            VALUES (v_queue, in_key, in_kind, in_payload, COALESCE(in_priority, 0), v_at,
                    v_at, v_now, 0);
            SET v_inserted = ROW_COUNT();
        END;
        IF v_retry = 0 THEN
            LEAVE attempt;
        END IF;
    END LOOP;
    IF v_inserted = 0 AND NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = v_queue) THEN
        CALL pyqueue__raise('unknown_queue', CONCAT('queue "', in_queue, '" does not exist'));
    END IF;
    SELECT v_inserted AS inserted;
END //

-- queue_pop: removes and returns up to in_n ready messages, highest
-- priority first, FIFO within one (at-most-once). Result: one result set
-- (p_key, p_kind, payload, priority, attempts, created_at), empty when
-- nothing is ready or the queue is paused.
-- How, set-based whatever in_n (each step one statement for the whole
-- batch, or one per page of 5000 candidates):
--   1. pyqueue__claim in pop mode: a plain read of the next ready ids, then
--      one UPDATE joined to a SKIP LOCKED read by id marks the rows that are
--      still ready with this call's token prefix (scheduled_at = now + the
--      queue's visibility_timeout; attempts and worker unchanged). Only one
--      of two racing pops can mark a row;
--   2. one plain read captures the marked rows into a JSON variable (the
--      server caps it at max_allowed_packet: step 1 claims no more than
--      fits, at least one row);
--   3. history (a queue with history_retention), then one DELETE by id and
--      token;
--   4. the result set, from the captured rows, sent after the delete: a
--      message is handed out only once it is gone.
-- An error before the delete gives the marks back (nothing lost, no
-- attempt used); an interruption between 1 and 3 in autocommit mode leaves
-- marked rows that come back after the visibility timeout (a later
-- delivery, never a loss, never twice: nothing was returned). Should a
-- mark expire and be taken over before the delete (a pop slower than the
-- visibility timeout), the rows it no longer deleted are not returned.
-- Locks: the marked rows, for one statement each step (or until the
-- caller's transaction ends); rows another session holds are skipped.
DROP PROCEDURE IF EXISTS queue_pop //
CREATE PROCEDURE queue_pop(
    IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n     DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis       DECIMAL(20,6);
    DECLARE v_max       INT;
    DECLARE v_dlq       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused    BOOLEAN;
    DECLARE v_now       DATETIME(6);
    DECLARE v_until     DATETIME(6);
    DECLARE v_prefix    CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed   LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_count     INT DEFAULT 0;
    DECLARE v_rows      LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_taken     INT DEFAULT 0;
    DECLARE v_deleted   INT DEFAULT 0;
    DECLARE v_retention DECIMAL(20,6);
    DECLARE v_gcl       BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET SESSION group_concat_max_len = v_gcl;
        IF v_deleted = 0 THEN  -- nothing removed yet: the marks go back
            CALL pyqueue__give_back_claims(v_prefix, v_claimed, TRUE);
        END IF;
        RESIGNAL;
    END;
    SET v_gcl = @@SESSION.group_concat_max_len;

    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF in_n < 1 THEN
        CALL pyqueue__raise('invalid_argument', 'n must be at least 1');
    END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);

    IF NOT v_paused THEN
        SET v_now = UTC_TIMESTAMP(6);
        SET v_until = v_now + INTERVAL CAST(v_vis * 1000000 AS SIGNED) MICROSECOND;
        CALL pyqueue__random_token(v_prefix);
        SET v_prefix = LEFT(v_prefix, 24);
        SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
        CALL pyqueue__claim(v_queue, NULL, COALESCE(in_n, 1), v_now, v_until, NULL, TRUE, NULL, NULL, 0,
                            v_prefix, v_claimed, v_count);
        IF v_count > 0 THEN
            SELECT COUNT(*),
                   CONCAT('[', GROUP_CONCAT(JSON_OBJECT('id', m.id, 't', m.reserve_token, 'k', m.p_key, 'kd', m.p_kind,
                                                        'pl', CAST(m.payload AS CHAR CHARACTER SET utf8mb4),
                                                        'pr', m.priority, 'at', m.attempts,
                                                        'ca', DATE_FORMAT(m.created_at, '%Y-%m-%d %H:%i:%s.%f'))
                                            ORDER BY m.reserve_token SEPARATOR ','), ']')
              INTO v_taken, v_rows
              FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
             WHERE m.queue_name = v_queue AND m.scheduled_at = v_until
               AND m.reserve_token LIKE CONCAT(v_prefix, '%');
            IF v_rows IS NULL OR NOT JSON_VALID(v_rows) THEN
                -- a row too large to pack (NULL or cut, with a warning):
                -- give everything back, return nothing
                CALL pyqueue__give_back_claims(v_prefix, v_claimed, TRUE);
                SET v_rows = NULL, v_taken = 0;
            END IF;
            SELECT q.history_retention INTO v_retention FROM pyqueue_queue q WHERE q.queue_name = v_queue;
            IF v_retention IS NOT NULL AND v_taken > 0 THEN
                INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                             created_at, processed_at, outcome, to_queue, reserved_by,
                                             last_error)
                SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                       m.created_at, v_now, 'popped', NULL, m.reserved_by, m.last_error
                  FROM JSON_TABLE(v_rows, '$[*]' COLUMNS (
                           c_id    BIGINT   PATH '$.id',
                           c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t')) AS j
                  STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
                 WHERE m.reserve_token = j.c_token;
            END IF;
            DELETE m
              FROM JSON_TABLE(COALESCE(v_rows, '[]'), '$[*]' COLUMNS (
                       c_id    BIGINT   PATH '$.id',
                       c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.t')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.reserve_token = j.c_token;
            SET v_deleted = ROW_COUNT();
        END IF;
        SET SESSION group_concat_max_len = v_gcl;
    END IF;

    SELECT r.p_key, r.p_kind, r.payload, r.priority, r.attempts, r.created_at
      FROM JSON_TABLE(COALESCE(v_rows, '[]'), '$[*]' COLUMNS (
               ord        FOR ORDINALITY,
               c_id       BIGINT       PATH '$.id',
               p_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.k',
               p_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$.kd',
               payload    LONGTEXT     CHARACTER SET utf8mb4 PATH '$.pl',
               priority   INT          PATH '$.pr',
               attempts   INT          PATH '$.at',
               created_at DATETIME(6)  PATH '$.ca')) AS r
     WHERE v_deleted = v_taken
        OR NOT EXISTS (SELECT 1 FROM pyqueue_message m WHERE m.id = r.c_id)
     ORDER BY r.ord;
END //

-- pyqueue__reserve: queue_reserve's work on a queue without concurrency
-- limits, after its checks (in_n and in_kinds as pyqueue__reserve_args
-- returns them). pyqueue__claim claims up to in_n rows (dead-lettering the
-- ones due for it), then ONE plain read returns them by (queue_name,
-- scheduled_at, token prefix) on the due index, in the reserve's order; a
-- claim that expired and was taken over meanwhile (a timeout shorter than
-- the call) is left out, its token would already be stale. An error after
-- claims gives them back as they were (pyqueue__give_back_claims), so a
-- failing reserve consumes no attempts. Emits the result set.
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
    DECLARE v_now     DATETIME(6);
    DECLARE v_until   DATETIME(6);
    DECLARE v_own     INT DEFAULT 0;
    DECLARE v_prefix  CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_claimed LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_count   INT;
    DECLARE v_gcl     BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET SESSION group_concat_max_len = v_gcl;
        CALL pyqueue__give_back_claims(v_prefix, v_claimed, FALSE);
        RESIGNAL;
    END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    IF NOT in_paused THEN
        -- autocommit with no transaction open (MariaDB can tell; see pyqueue__own_transaction)
        /*M!100300 SET v_own = IF(@@SESSION.autocommit = 1, 1 - @@SESSION.in_transaction, 0); */
        SET v_now = UTC_TIMESTAMP(6);
        SET v_until = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND;
        CALL pyqueue__random_token(v_prefix);
        SET v_prefix = LEFT(v_prefix, 24);
        IF in_n = 1 THEN
            CALL pyqueue__claim_one(in_queue, in_kinds, v_now, v_until, in_worker, in_max, in_dlq, v_own,
                                    v_prefix, v_claimed, v_count);
        ELSE
            SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
            CALL pyqueue__claim(in_queue, in_kinds, in_n, v_now, v_until, in_worker, FALSE, in_max, in_dlq, v_own,
                                v_prefix, v_claimed, v_count);
            SET SESSION group_concat_max_len = v_gcl;
        END IF;
    END IF;
    SELECT m.p_key, m.p_kind, m.payload, m.reserve_token AS token, m.priority,
           m.attempts, m.created_at, m.scheduled_at_initially
      FROM pyqueue_message m FORCE INDEX (pyqueue_message_due_idx)
     WHERE m.queue_name = in_queue AND m.scheduled_at = v_until
       AND m.reserve_token LIKE CONCAT(v_prefix, '%')
     ORDER BY m.reserve_token;
END //

-- queue_reserve: hands out up to in_n ready messages, highest priority
-- first, FIFO within one; each becomes invisible to others until in_timeout
-- (NULL = the queue's visibility_timeout) passes and carries a fresh token.
-- in_worker is recorded (NULL allowed); in_kinds NULL = any kind, else a
-- non-empty JSON array of strings. attempts counts deliveries including this
-- one. A message whose expired reservation was its last allowed delivery
-- (attempts >= max_attempts) is dead-lettered instead of delivered. Result:
-- one result set (p_key, p_kind, payload, token, priority, attempts,
-- created_at, scheduled_at_initially), empty when nothing is ready or the
-- queue is paused.
-- How: set-based (pyqueue__reserve, pyqueue__claim): pages of candidates
-- read without locks, each page claimed by one UPDATE joined to a SKIP
-- LOCKED read by id that re-checks each row is still as read, then one
-- read of the result. Only one of two racing reservers can claim a row, so
-- a message is never handed out twice, in autocommit mode too. The cost is
-- linear in in_n and bounded by the ready rows, whatever the number of
-- distinct priorities among delayed or reserved rows. A queue with
-- concurrency limits takes a slot per message first (pyqueue__reserve_limited,
-- one candidate at a time).
-- The ready range is read without locks on purpose: on InnoDB a locking
-- range scan under REPEATABLE READ also locks the first row past the range
-- (a delayed or reserved message, so its commit or extend would wait), gap
-- locks that block pushes, and index entries of rows it skips. Interrupted
-- between pages in autocommit mode, the rows claimed so far stay reserved
-- under tokens nobody got and come back when their timeout passes (a
-- redelivery, never a loss). Locks: the claimed rows, for one statement,
-- or, inside the caller's transaction, until it ends. Called in a
-- REPEATABLE READ transaction that already read pyqueue_message, the
-- candidates come from that transaction's snapshot: messages pushed since
-- then wait for the next transaction (autocommit or a fresh transaction
-- avoids this).
DROP PROCEDURE IF EXISTS queue_reserve //
CREATE PROCEDURE queue_reserve(
    IN in_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_worker  LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_timeout DECIMAL(20,6),
    IN in_n       DECIMAL(65,30),
    IN in_kinds   LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis    DECIMAL(20,6);
    DECLARE v_max    INT;
    DECLARE v_dlq    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused BOOLEAN;
    DECLARE v_kinds  LONGTEXT CHARACTER SET utf8mb4;
    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    CALL pyqueue__reserve_args(in_worker, in_timeout, in_n, in_kinds, v_kinds);
    IF NOT v_paused AND EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue) THEN
        CALL pyqueue__reserve_limited(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max, v_dlq);
    ELSE
        CALL pyqueue__reserve(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max, v_dlq, v_paused);
    END IF;
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
                            UPDATE pyqueue_message
                               SET scheduled_at = v_until, reserve_token = v_token,
                                   last_error = COALESCE(last_error,
                                                         'reservation expired on its last allowed delivery')
                             WHERE id = v_id AND queue_name = v_queue AND scheduled_at <= v_now
                               AND attempts = v_attempts AND reserve_token <=> v_seen_token;
                            IF ROW_COUNT() = 1 THEN
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

-- queue_commit_reserve: commits the previous reservation (in_key, in_kind,
-- in_token; all three NULL = nothing to commit) and reserves the next up to
-- in_n messages with queue_reserve's semantics, in one call (one round trip
-- per message for a consumer working one at a time, instead of two).
-- Result: the reserved rows (columns as queue_reserve's; one result set),
-- then a last result set of one row, committed = 1, 0 when the token no
-- longer held, NULL when nothing was given.
-- Every argument is checked first, then the reserve runs (queue_reserve's
-- own steps, set-based), then the commit: a refused call changes nothing,
-- in autocommit mode too; the message being committed is still reserved by
-- the caller while the reserve runs.
-- Locks: as queue_reserve; then the committed row.
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
    DECLARE v_queue    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_key      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_kind     VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_held     CHAR(36)     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis      DECIMAL(20,6);
    DECLARE v_max      INT;
    DECLARE v_dlq      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused   BOOLEAN;
    DECLARE v_kinds    LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_id       BIGINT;
    DECLARE v_done     INT DEFAULT NULL;
    DECLARE v_commit   BOOLEAN DEFAULT NOT (in_key IS NULL AND in_kind IS NULL AND in_token IS NULL);
    DECLARE v_hist     BIGINT;

    CALL pyqueue__queue(in_queue, v_vis, v_max, v_dlq, v_paused);
    SET v_queue = in_queue;
    IF v_commit THEN
        CALL pyqueue__check_reservation(in_key, in_kind, in_token);
    END IF;
    CALL pyqueue__reserve_args(in_worker, in_timeout, in_n, in_kinds, v_kinds);
    IF NOT v_paused AND EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name = v_queue) THEN
        CALL pyqueue__reserve_limited(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max, v_dlq);
    ELSE
        CALL pyqueue__reserve(v_queue, in_worker, in_timeout, COALESCE(in_n, 1), v_kinds, v_vis, v_max, v_dlq, v_paused);
    END IF;
    IF v_commit THEN
        SET v_key = in_key, v_kind = in_kind, v_held = LOWER(in_token), v_done = 0;
        SELECT COALESCE(MAX(m.id), 0) INTO v_id
          FROM pyqueue_message m
         WHERE m.queue_name = v_queue AND m.p_key = v_key AND m.p_kind = v_kind
           AND m.reserve_token = v_held;
        IF v_id > 0 THEN  -- as queue_commit: history row, a schedule's next occurrence
            CALL pyqueue__archive(v_queue, v_id, v_held, 'committed', NULL, UTC_TIMESTAMP(6), v_hist);
            IF v_key LIKE '%@____-__-__T__:__:__Z' THEN
                CALL pyqueue__schedule_next(v_queue, v_key, v_kind);
            END IF;
            DELETE FROM pyqueue_message WHERE id = v_id AND reserve_token = v_held;
            SET v_done = ROW_COUNT();
            CALL pyqueue__unarchive(v_hist, v_done);
        END IF;
    END IF;
    SELECT v_done AS committed;
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

-- queue_redrive: moves up to in_n (NULL = 1) ready messages of
-- in_dead_queue (usually a dead-letter queue) to in_to_queue, highest
-- priority first, FIFO within one: same key, kind, payload, priority and
-- last_error, attempts 0, ready now, no dead-letter origin any more. A message held by a live reservation is not
-- taken. A message whose key and kind are already live in in_to_queue stays
-- where it is (dedup; skipped, not counted). Result: one row, redriven =
-- how many moved. With a history_retention on in_dead_queue each move is
-- archived as 'moved'.
-- How, set-based, a page of up to 5000 candidates at a time: a plain read
-- of the candidates (pyqueue__candidates over every priority), then ONE
-- UPDATE IGNORE of their queue_name joined to a SKIP LOCKED read by id that
-- re-checks each is still ready and unchanged (atomic in autocommit mode,
-- as queue_move); IGNORE leaves a row whose key and kind are live in
-- in_to_queue (a duplicate key) where it is. With history, one INSERT
-- archives the page first and the copies of rows that did not move are
-- removed again after the UPDATE.
-- Locks: the candidate rows and a shared lock on in_to_queue's row, for one
-- statement per page (or until the caller's transaction ends).
DROP PROCEDURE IF EXISTS queue_redrive //
CREATE PROCEDURE queue_redrive(
    IN in_dead_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_to_queue   LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_n          DECIMAL(65,30))
SQL SECURITY DEFINER
BEGIN
    DECLARE v_dead      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_to        VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_vis       DECIMAL(20,6);
    DECLARE v_max       INT;
    DECLARE v_dlq       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_paused    BOOLEAN;
    DECLARE v_history   BOOLEAN;
    DECLARE v_now       DATETIME(6);
    DECLARE v_left      INT;
    DECLARE v_k         INT;
    DECLARE v_top       INT;
    DECLARE v_pr        INT;
    DECLARE v_at        DATETIME(6);
    DECLARE v_id        BIGINT;
    DECLARE v_cand      LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_got       INT;
    DECLARE v_maxatt    INT;
    DECLARE v_archived  INT;
    DECLARE v_moved     INT;
    DECLARE v_count     INT DEFAULT 0;
    DECLARE v_gcl       BIGINT;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION
    BEGIN
        SET SESSION group_concat_max_len = v_gcl;
        RESIGNAL;
    END;
    SET v_gcl = @@SESSION.group_concat_max_len;
    CALL pyqueue__check_name('dead_queue', in_dead_queue, 128);
    CALL pyqueue__check_name('to_queue', in_to_queue, 128);
    CALL pyqueue__queue(in_dead_queue, v_vis, v_max, v_dlq, v_paused);
    CALL pyqueue__queue(in_to_queue, v_vis, v_max, v_dlq, v_paused);
    IF in_n < 1 THEN
        CALL pyqueue__raise('invalid_argument', 'n must be at least 1');
    END IF;
    CALL pyqueue__check_int('n', COALESCE(in_n, 1), 1, 2147483647);
    IF in_dead_queue = in_to_queue THEN
        CALL pyqueue__raise('invalid_argument', 'dead_queue and to_queue must differ');
    END IF;
    SET v_dead = in_dead_queue, v_to = in_to_queue, v_now = UTC_TIMESTAMP(6);
    SET v_left = COALESCE(in_n, 1);
    SELECT q.history_retention IS NOT NULL INTO v_history FROM pyqueue_queue q WHERE q.queue_name = v_dead;
    SELECT MAX(m.priority) INTO v_top FROM pyqueue_message m WHERE m.queue_name = v_dead;
    SET SESSION group_concat_max_len = GREATEST(v_gcl, @@max_allowed_packet);
    pages: WHILE v_top IS NOT NULL AND v_left > 0 DO
        SET v_k = LEAST(v_left, 5000);
        CALL pyqueue__candidates(v_dead, NULL, v_now, v_top, TRUE, v_k, FALSE,
                                 v_pr, v_at, v_id, v_cand, v_got, v_maxatt);
        IF v_got = 0 THEN
            LEAVE pages;
        END IF;
        SET v_archived = 0;
        IF v_history THEN
            INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                         created_at, processed_at, outcome, to_queue, reserved_by, last_error)
            SELECT m.queue_name, m.p_key, m.p_kind, m.payload, m.priority, m.attempts,
                   m.created_at, v_now, 'moved', v_to, m.reserved_by, m.last_error
              FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (
                       c_id    BIGINT   PATH '$[0]',
                       c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
             WHERE m.queue_name = v_dead AND m.scheduled_at <= v_now AND m.reserve_token <=> j.c_token
               AND NOT EXISTS (SELECT 1 FROM pyqueue_message t
                                WHERE t.queue_name = v_to AND t.p_key = m.p_key AND t.p_kind = m.p_kind);
            SET v_archived = ROW_COUNT();
        END IF;
        UPDATE IGNORE (SELECT x.id
                         FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (
                                  c_id    BIGINT   PATH '$[0]',
                                  c_token CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[3]')) AS j
                         STRAIGHT_JOIN pyqueue_message x FORCE INDEX (PRIMARY) ON x.id = j.c_id
                        WHERE x.queue_name = v_dead AND x.scheduled_at <= v_now AND x.reserve_token <=> j.c_token
                          LIMIT 18446744073709551615  -- materialised (never merged into the UPDATE), on MySQL too
                          FOR UPDATE SKIP LOCKED) AS c
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = c.id
           SET m.queue_name = v_to,
               m.scheduled_at = v_now, m.scheduled_at_initially = v_now, m.created_at = v_now,
               m.attempts = 0, m.reserved_by = NULL, m.reserve_token = NULL,
               m.dead_from = NULL, m.dead_attempts = NULL;
        -- counted by reading (ROW_COUNT() counts the rows IGNORE left under
        -- CLIENT_FOUND_ROWS, JDBC's default)
        SELECT COUNT(*) INTO v_moved
          FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
         WHERE m.queue_name = v_to AND m.created_at = v_now AND m.reserve_token IS NULL;
        IF v_archived > v_moved THEN
            -- the copies of candidates that stayed (a duplicate, a lost race)
            DELETE h
              FROM JSON_TABLE(v_cand, '$[*]' COLUMNS (c_id BIGINT PATH '$[0]')) AS j
              STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
              STRAIGHT_JOIN pyqueue_history h
                ON h.queue_name = v_dead AND h.processed_at = v_now AND h.outcome = 'moved'
               AND h.p_key = m.p_key AND h.p_kind = m.p_kind
             WHERE m.queue_name = v_dead;
        END IF;
        SET v_count = v_count + v_moved, v_left = v_left - v_moved;
        IF v_got < v_k THEN
            LEAVE pages;
        END IF;
    END WHILE;
    SET SESSION group_concat_max_len = v_gcl;
    SELECT v_count AS redriven;
END //

DELIMITER ;

SET SESSION character_set_client = @pyqueue_saved_character_set_client;

SET SESSION character_set_results = @pyqueue_saved_character_set_results;

SET SESSION collation_connection = @pyqueue_saved_collation_connection;

SET SESSION sql_mode = @pyqueue_saved_sql_mode;
