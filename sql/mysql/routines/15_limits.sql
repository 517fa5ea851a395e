-- ==== limits ====
-- Concurrency limits: at most capacity messages of a kind reserved at once in a queue. The reserve and extend paths
-- take and keep the slots through the limit helpers above.

DELIMITER //

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
    DECLARE v_cap, v_slot, v_h_att, v_found, v_retry, v_rows INT;
    DECLARE v_take BOOLEAN;
    DECLARE v_holder BIGINT;
    DECLARE v_h_until DATETIME(6);
    DECLARE v_moves, v_own, v_tries INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;
    SET out_ok = 0;
    CALL pyqueue__own_transaction(FALSE, v_own);
    slots: LOOP
      SET v_retry = 0, v_tries = v_tries + 1;
      BEGIN
        DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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
        -- no holder beyond the capacity (or enough moved): in_id takes a free slot within the capacity; else
        -- that holder moves into one; none free: the kind is full
        SET v_take = (v_found = 0 OR v_moves >= 10000);
        IF v_take THEN
            SET v_holder = in_id, v_h_att = in_attempts, v_h_until = in_until;
        END IF;
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
        SET v_rows = ROW_COUNT();
        IF v_take THEN
            SET out_ok = v_rows;
            LEAVE slots;
        END IF;
        IF v_rows = 0 THEN LEAVE slots; END IF;
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
-- in_t: a slot whose time is NULL or <= in_t - in_per_us, locked FOR UPDATE SKIP LOCKED (never waits: a unit another
-- call holds counts as used) and NOT written: the caller writes in_t into it once the message is claimed (one write
-- per admitted message; a claim that fails leaves the unit as it was). out_slot: its number, NULL when none is free.
-- Cost: each unit written moves its entry in the used_at index, and the entry it leaves stays (delete-marked) until
-- purge, behind the transaction; a walk of that index from its start for each unit read every entry the units taken
-- before had left (a reserve of 256 under a rate: 32,000 entries). So the session keeps a list of the least recently
-- used units, read plainly in one walk of the used_at index (up to 256; one list for the queue-wide rate and one for
-- a kind's rate: @pyqueue__rate_wide_key / _units, @pyqueue__rate_kind_key / _units, the key being database, queue
-- and kind), and takes each by its primary key, FOR UPDATE SKIP LOCKED, checking there that it is free now: a unit
-- of the list that is not (taken meanwhile, or a list from another transaction or another database) is dropped, and
-- an empty list is read again. Locks: that slot row, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__rate_pick //
CREATE PROCEDURE pyqueue__rate_pick(
    IN  in_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_kind   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_per_us BIGINT,
    IN  in_t      DATETIME(6),
    OUT out_slot  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_key LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_units LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_slot INT;
    DECLARE v_read INT DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET out_slot = NULL;
    SET out_slot = NULL;
    SET v_key = CONCAT_WS(CHAR(31), DATABASE(), in_queue, in_kind);
    SET v_units = IF(in_kind = '', IF(@pyqueue__rate_wide_key = v_key, @pyqueue__rate_wide_units, NULL),
                     IF(@pyqueue__rate_kind_key = v_key, @pyqueue__rate_kind_units, NULL));
    picks: LOOP
        IF COALESCE(JSON_LENGTH(v_units), 0) = 0 THEN
            IF v_read = 1 THEN LEAVE picks; END IF;  -- read once this call: none free
            SET v_read = 1;
            SELECT JSON_ARRAYAGG(u.slot_no) INTO v_units
              FROM (SELECT s.slot_no
                      FROM pyqueue_rate_slot s FORCE INDEX (pyqueue_rate_slot_used_idx)
                     WHERE s.queue_name = in_queue AND s.p_kind = in_kind
                       AND (s.used_at IS NULL OR s.used_at <= in_t - INTERVAL in_per_us MICROSECOND)
                     ORDER BY s.used_at
                     LIMIT 256) u;
            IF COALESCE(JSON_LENGTH(v_units), 0) = 0 THEN LEAVE picks; END IF;
        END IF;
        SET v_slot = JSON_EXTRACT(v_units, '$[0]'), v_units = JSON_REMOVE(v_units, '$[0]');
        SELECT s.slot_no INTO out_slot
          FROM pyqueue_rate_slot s FORCE INDEX (PRIMARY)
         WHERE s.queue_name = in_queue AND s.p_kind = in_kind AND s.slot_no = v_slot
           AND (s.used_at IS NULL OR s.used_at <= in_t - INTERVAL in_per_us MICROSECOND)
           FOR UPDATE SKIP LOCKED;
        IF out_slot IS NOT NULL THEN LEAVE picks; END IF;
    END LOOP;
    IF in_kind = '' THEN
        SET @pyqueue__rate_wide_key = v_key, @pyqueue__rate_wide_units = v_units;
    ELSE
        SET @pyqueue__rate_kind_key = v_key, @pyqueue__rate_kind_units = v_units;
    END IF;
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

-- pyqueue__limited_allowance: what a batch reserve of in_n on a queue with limits or rates may take, for
-- pyqueue__claim_limited_batch, inside its transaction at READ COMMITTED: the queue's limit rows (shared) and rate
-- rows (shared) first, as pyqueue__reserve_limited; out_ok = 0 (nothing locked beyond them) when the short way does
-- not cover the queue: more than one limited kind, a kind's rate, or a live holder beyond a lowered capacity (the
-- general way moves those). The limited kind (out_kind): a plain read for a free slot first (none: out_free '[]',
-- no slot lock waited for, as pyqueue__limited_admit), else its slot rows FOR UPDATE in one statement, in slot order
-- (which counts those beyond the capacity: only when there are any are their holders read), then a read of its free
-- slots (pyqueue__limit_take's test: no take of the kind is in progress elsewhere, every holder that took one has
-- committed): out_free, up to in_n slot numbers in order. The queue-wide rate: up to in_n free units, read
-- by the primary key from the one after the session took last (@pyqueue__rate_next_key: database and queue;
-- @pyqueue__rate_next), then from the first, FOR UPDATE SKIP LOCKED (a unit another call holds counts as used;
-- which free unit a reservation takes does not matter): out_units. out_free / out_units NULL: no limit / no queue-wide rate. Locks: those rows, until the transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__limited_allowance //
CREATE PROCEDURE pyqueue__limited_allowance(
    IN  in_queue  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN  in_n      INT,
    IN  in_now    DATETIME(6),
    OUT out_ok    INT,
    OUT out_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    OUT out_free  LONGTEXT CHARACTER SET utf8mb4,
    OUT out_units LONGTEXT CHARACTER SET utf8mb4)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_nlim, v_cap, v_nkr, v_free, v_beyond, v_got, v_next, v_last, v_over INT DEFAULT 0;
    DECLARE v_per BIGINT;
    DECLARE v_key LONGTEXT CHARACTER SET utf8mb4;
    SET out_ok = 0, out_kind = NULL, out_free = NULL, out_units = NULL;
    SELECT COUNT(*), MAX(l.p_kind), MAX(l.capacity) INTO v_nlim, out_kind, v_cap
      FROM pyqueue_limit l WHERE l.queue_name = in_queue LOCK IN SHARE MODE;
    SELECT COALESCE(SUM(r.p_kind <> ''), 0), MAX(IF(r.p_kind = '', r.per_us, NULL)) INTO v_nkr, v_per
      FROM pyqueue_rate r WHERE r.queue_name = in_queue LOCK IN SHARE MODE;
    IF v_nlim > 1 OR v_nkr > 0 THEN
        SET out_kind = NULL;
    ELSE
        SET out_ok = 1;
    END IF;
    IF out_ok = 1 AND v_nlim = 1 THEN
        SET out_free = '[]';
        SELECT COUNT(*) INTO v_free  -- (a SELECT: a consistent read, no lock waited for)
          FROM (SELECT 1 FROM pyqueue_limit_slot s
                 WHERE s.queue_name = in_queue AND s.p_kind = out_kind AND s.slot_no <= v_cap
                   AND (s.msg_id IS NULL
                        OR NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                        WHERE m.id = s.msg_id AND m.queue_name = s.queue_name
                                          AND ((m.attempts = s.msg_attempts AND m.reserve_token IS NOT NULL
                                                AND GREATEST(m.scheduled_at, s.msg_until) > in_now)
                                               OR (m.attempts = s.msg_attempts - 1 AND s.msg_until > in_now))))
                 LIMIT 1) f;
        IF v_free > 0 THEN
            SELECT COUNT(*), COALESCE(SUM(s.slot_no > v_cap), 0) INTO v_free, v_over  -- (not MAX: read from the end)
              FROM pyqueue_limit_slot s FORCE INDEX (PRIMARY)
             WHERE s.queue_name = in_queue AND s.p_kind = out_kind
               FOR UPDATE;
            IF v_over > 0 THEN  -- (slot rows beyond the capacity, locked above: is any holder there live?)
                SELECT EXISTS (SELECT 1 FROM pyqueue_limit_slot b
                                WHERE b.queue_name = in_queue AND b.p_kind = out_kind AND b.slot_no > v_cap
                                  AND EXISTS (SELECT 1 FROM pyqueue_message m
                                               WHERE m.id = b.msg_id AND m.queue_name = b.queue_name
                                                 AND ((m.attempts = b.msg_attempts AND m.reserve_token IS NOT NULL
                                                       AND GREATEST(m.scheduled_at, b.msg_until) > in_now)
                                                      OR (m.attempts = b.msg_attempts - 1 AND b.msg_until > in_now))))
                  INTO v_beyond;
            END IF;
            SELECT COALESCE(JSON_ARRAYAGG(f.slot_no ORDER BY f.slot_no), '[]')
              INTO out_free
              FROM (SELECT s.slot_no
                      FROM pyqueue_limit_slot s
                     WHERE s.queue_name = in_queue AND s.p_kind = out_kind AND s.slot_no <= v_cap
                       AND (s.msg_id IS NULL
                            OR NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                            WHERE m.id = s.msg_id AND m.queue_name = s.queue_name
                                              AND ((m.attempts = s.msg_attempts AND m.reserve_token IS NOT NULL
                                                    AND GREATEST(m.scheduled_at, s.msg_until) > in_now)
                                                   OR (m.attempts = s.msg_attempts - 1 AND s.msg_until > in_now))))
                     ORDER BY s.slot_no
                     LIMIT in_n) f;
            IF v_beyond THEN SET out_ok = 0; END IF;  -- a live holder beyond the capacity: the general way
        END IF;
    END IF;
    IF out_ok = 1 AND v_per IS NOT NULL THEN
        -- the units after the one the session took last, then from the first, by the primary key: a unit's time is
        -- written in place there (a walk of the used_at index steps over the entries every write left until purge)
        SET v_key = CONCAT_WS(CHAR(31), DATABASE(), in_queue, '');
        SET v_next = IF(@pyqueue__rate_next_key = v_key, COALESCE(@pyqueue__rate_next, 0), 0), v_got = in_n;
        SELECT COALESCE(JSON_ARRAYAGG(u.slot_no ORDER BY u.slot_no), '[]'), MAX(u.slot_no) INTO out_units, v_last
          FROM (SELECT s.slot_no FROM pyqueue_rate_slot s FORCE INDEX (PRIMARY)
                 WHERE s.queue_name = in_queue AND s.p_kind = '' AND s.slot_no > v_next
                   AND (s.used_at IS NULL OR s.used_at <= in_now - INTERVAL v_per MICROSECOND)
                 ORDER BY s.slot_no
                 LIMIT v_got
                   FOR UPDATE SKIP LOCKED) AS u;
        SET v_got = in_n - JSON_LENGTH(out_units);
        IF v_got > 0 AND v_next > 0 THEN
            SELECT JSON_MERGE_PRESERVE(out_units, COALESCE(JSON_ARRAYAGG(u.slot_no ORDER BY u.slot_no), '[]')),
                   COALESCE(MAX(u.slot_no), v_last)
              INTO out_units, v_last
              FROM (SELECT s.slot_no FROM pyqueue_rate_slot s FORCE INDEX (PRIMARY)
                     WHERE s.queue_name = in_queue AND s.p_kind = '' AND s.slot_no <= v_next
                       AND (s.used_at IS NULL OR s.used_at <= in_now - INTERVAL v_per MICROSECOND)
                     ORDER BY s.slot_no
                     LIMIT v_got
                       FOR UPDATE SKIP LOCKED) AS u;
        END IF;
        SET @pyqueue__rate_next_key = v_key, @pyqueue__rate_next = COALESCE(v_last, 0);
    END IF;
END //

-- pyqueue__claim_limited_batch: pyqueue__claim_short_batch for a queue with a limit or a queue-wide rate (in_n from 1
-- to 5000), inside the caller's transaction at READ COMMITTED, set-based instead of one candidate at a time: what the
-- call may take first (pyqueue__limited_allowance: the free slots of the limited kind, the free units of the rate,
-- locked), then pages of ready ids of priority 0 read plainly in FIFO order, at most as many as units are left and
-- of the limited kind at most as many as slots are left (one past them is left ready for a later call: too few
-- hand-outs, never too many; a page that cannot meet more of the limited kind than its slots left is read without
-- numbering them), each page locked by id FOR UPDATE SKIP LOCKED re-checking each on its newest version;
-- then ONE UPDATE claims them (pyqueue__claim_short_batch's tokens from in_secret), ONE gives the claims of the
-- limited kind their slots (msg_attempts as claimed, msg_until the lease's end) and ONE writes the units used with
-- the reservation's time (those locked and not used stay as they were). out_ids and
-- out_count as pyqueue__claim_short_batch's; NULL, with nothing claimed, when the short way does not cover the call
-- (pyqueue__limited_allowance's cases; a message below priority 0; a candidate due for dead-lettering or past its
-- pyqueue.expires_at header): the caller rolls back and goes the general way (pyqueue__reserve_limited). Once the
-- limited kind's slots are used, the rest of the walk reads every ready row for another kind's (no index has the
-- kind): a read to the end that found none left the session a mark (@pyqueue__full_key: database, queue and kind;
-- _at: the time read up to), and such walks start from it, from the start again once @pyqueue__full_until has
-- passed (20 times what that read from the start took, at most 60 s): a message of another kind that lands before
-- the mark (a run_at in the past, a push committed late, a claim given back) or passes its expiry there waits for
-- that read, as with @pyqueue__ready_queue. While the mark is live, a page read before the kind is full also probes
-- the ready index for a message of priority 0 ready after the mark (one entry): none, and the read from the mark,
-- which would find none, is skipped (the mark moves to now); a worker draining the limited kind saves a statement. Needs a group_concat_max_len of 20 * in_n + 2. Locks: the limit and rate rows (shared), the slot rows of the limited kind
-- and the units taken, the claimed rows, until the caller's transaction ends.
DROP PROCEDURE IF EXISTS pyqueue__claim_limited_batch //
CREATE PROCEDURE pyqueue__claim_limited_batch(
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
    DECLARE v_until DATETIME(6);
    DECLARE v_at DATETIME(6) DEFAULT NULL;
    DECLARE v_id BIGINT DEFAULT NULL;
    DECLARE v_ok, v_k, v_got, v_held, v_lheld, v_att, v_slots, v_units INT;
    DECLARE v_lused, v_max_att INT DEFAULT 0;
    DECLARE v_below BOOLEAN;
    DECLARE v_exp, v_any_exp BOOLEAN DEFAULT FALSE;
    DECLARE v_clock VARCHAR(27) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
        DEFAULT DATE_FORMAT(v_now, '%Y-%m-%dT%H:%i:%s.%fZ');
    DECLARE v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_free, v_unit_list, v_cand, v_ids, v_lids, v_latts LONGTEXT CHARACTER SET utf8mb4;
    DECLARE v_lim_ids, v_lim_atts LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
    DECLARE v_full, v_marked, v_mixed BOOLEAN DEFAULT FALSE;
    DECLARE v_after INT;
    DECLARE v_t0 DATETIME(6);
    DECLARE v_mkey LONGTEXT CHARACTER SET utf8mb4;
    SET out_ids = '', out_count = 0;
    SET v_until = v_now + INTERVAL CAST(COALESCE(in_timeout, in_vis) * 1000000 AS SIGNED) MICROSECOND;
    CALL pyqueue__limited_allowance(in_queue, in_n, v_now, v_ok, v_kind, v_free, v_unit_list);
    SET v_mkey = CONCAT_WS(CHAR(31), DATABASE(), in_queue, v_kind);
    IF v_ok = 0 THEN
        SET out_ids = NULL, out_count = NULL;
    END IF;
    SET v_slots = COALESCE(JSON_LENGTH(v_free), in_n), v_units = COALESCE(JSON_LENGTH(v_unit_list), in_n);
    pages: WHILE v_ok = 1 DO
        -- (the kind not yet full and no other kind met: a page of at most its slots left, every row of it claimable)
        SET v_full = v_kind IS NOT NULL AND v_lused >= v_slots, v_t0 = UTC_TIMESTAMP(6),
            v_k = LEAST(in_n, v_units, IF(v_full OR v_mixed, in_n, v_slots - v_lused + out_count)) - out_count;
        IF v_k <= 0 THEN LEAVE pages; END IF;
        IF v_full AND @pyqueue__full_key = v_mkey AND @pyqueue__full_until BETWEEN v_now AND v_now + INTERVAL 60 SECOND
           AND (v_at IS NULL OR v_at < @pyqueue__full_at) THEN
            IF v_after = 0 THEN  -- nothing ready after the mark (the page before probed it): the read from it finds none
                SET @pyqueue__full_at = v_now;
                LEAVE pages;
            END IF;
            SET v_at = @pyqueue__full_at, v_id = 9223372036854775807, v_marked = TRUE;  -- from the mark (see above)
        END IF;
        IF v_kind IS NULL OR NOT (v_full OR v_mixed) THEN
            -- a queue-wide rate alone, or the limited kind not full and no other kind met yet (a page of at most its
            -- slots left): every row of the page claimable, in its order (no numbering); as below otherwise
            SELECT COUNT(*), MAX(d.ready_at), SUBSTRING_INDEX(GROUP_CONCAT(d.id ORDER BY d.ready_at, d.id SEPARATOR ','), ',', -1),
                   GROUP_CONCAT(d.id ORDER BY d.ready_at, d.id SEPARATOR ','),
                   (SELECT b.priority FROM pyqueue_message b FORCE INDEX (pyqueue_message_order_idx)
                     WHERE b.queue_name = in_queue AND b.priority < 0 ORDER BY b.priority DESC LIMIT 1) IS NOT NULL
                   OR COALESCE(MAX(d.due), FALSE), v_mixed OR COALESCE(MIN(d.lim), 1) = 0,
                   -- (as below; EXISTS, not a count of a derived table: no temporary table made for the rate's pages)
                   IF(v_kind IS NULL OR NOT (@pyqueue__full_key = v_mkey)
                      OR NOT (@pyqueue__full_until BETWEEN v_now AND v_now + INTERVAL 60 SECOND), NULL,
                      EXISTS (SELECT 1 FROM pyqueue_message a FORCE INDEX (pyqueue_message_order_idx)
                               WHERE a.queue_name = in_queue AND a.priority = 0
                                 AND a.ready_at > @pyqueue__full_at AND a.ready_at <= v_now AND a.scheduled_at <= v_now))
              INTO v_got, v_at, v_id, v_cand, v_below, v_mixed, v_after
              FROM (SELECT m.id, m.ready_at, m.p_kind <=> v_kind AS lim,
                           (in_max IS NOT NULL AND m.attempts >= in_max)
                           OR COALESCE(m.headers IS NOT NULL AND m.dead_from IS NULL
                              AND JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE) AS due
                      FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                     WHERE m.queue_name = in_queue AND m.priority = 0 AND m.ready_at <= v_now AND m.scheduled_at <= v_now
                       AND (v_at IS NULL OR m.ready_at > v_at OR (m.ready_at = v_at AND m.id > v_id))
                     ORDER BY m.priority, m.ready_at, m.id
                     LIMIT v_k) AS d;
        ELSE
            -- a page in FIFO order (the limited kind left out once its slots are used), its ids as allowed: the limited
            -- kind's past the slots left dropped
            SELECT COUNT(*), MAX(w.ready_at),
                   SUBSTRING_INDEX(GROUP_CONCAT(w.id ORDER BY w.ready_at, w.id SEPARATOR ','), ',', -1),
                   GROUP_CONCAT(IF(w.lim AND w.rn > v_slots - v_lused, NULL, w.id) ORDER BY w.ready_at, w.id SEPARATOR ','),
                   (SELECT b.priority FROM pyqueue_message b FORCE INDEX (pyqueue_message_order_idx)
                     WHERE b.queue_name = in_queue AND b.priority < 0 ORDER BY b.priority DESC LIMIT 1) IS NOT NULL
                   OR COALESCE(MAX(w.due), FALSE), v_mixed OR COALESCE(MIN(w.lim), 1) = 0,
                   -- (the kind not full yet and a live mark: is any message ready after it? One entry of the index)
                   IF(v_full OR v_kind IS NULL OR NOT (@pyqueue__full_key = v_mkey)
                      OR NOT (@pyqueue__full_until BETWEEN v_now AND v_now + INTERVAL 60 SECOND), NULL,
                      (SELECT COUNT(*) FROM (SELECT 1 FROM pyqueue_message a FORCE INDEX (pyqueue_message_order_idx)
                                              WHERE a.queue_name = in_queue AND a.priority = 0
                                                AND a.ready_at > @pyqueue__full_at AND a.ready_at <= v_now
                                                AND a.scheduled_at <= v_now
                                              LIMIT 1) AS a))
              INTO v_got, v_at, v_id, v_cand, v_below, v_mixed, v_after
              FROM (SELECT d.id, d.ready_at, d.lim, d.due,
                           ROW_NUMBER() OVER (PARTITION BY d.lim ORDER BY d.ready_at, d.id) AS rn
                      FROM (SELECT m.id, m.ready_at, m.p_kind <=> v_kind AS lim,
                                   (in_max IS NOT NULL AND m.attempts >= in_max)
                                   OR COALESCE(m.headers IS NOT NULL AND m.dead_from IS NULL
                                      AND JSON_UNQUOTE(JSON_EXTRACT(m.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE) AS due
                              FROM pyqueue_message m FORCE INDEX (pyqueue_message_order_idx)
                             WHERE m.queue_name = in_queue AND m.priority = 0 AND m.ready_at <= v_now AND m.scheduled_at <= v_now
                               AND (v_at IS NULL OR m.ready_at > v_at OR (m.ready_at = v_at AND m.id > v_id))
                            HAVING v_lused < v_slots OR NOT lim OR due  -- (a full kind's, only one due: the general way)
                             ORDER BY m.priority, m.ready_at, m.id
                             LIMIT v_k) AS d) AS w;
        END IF;
        IF v_full AND NOT v_below AND v_got < v_k THEN  -- read to the end: up to v_now none but the full kind's left
            IF NOT v_marked THEN  -- (read from the start)
                SET @pyqueue__full_until = UTC_TIMESTAMP(6) + INTERVAL LEAST(60000000,
                        20 * TIMESTAMPDIFF(MICROSECOND, v_t0, UTC_TIMESTAMP(6))) MICROSECOND;
            END IF;
            SET @pyqueue__full_key = v_mkey, @pyqueue__full_at = v_now;
        END IF;
        IF v_below OR v_got = 0 THEN LEAVE pages; END IF;  -- (v_below: also a candidate due for ending, below)
        IF v_cand IS NOT NULL THEN
            SELECT COUNT(*), COALESCE(SUM(c.lim), 0), MAX(c.attempts), GROUP_CONCAT(c.id ORDER BY c.ord SEPARATOR ','),
                   GROUP_CONCAT(IF(c.lim, c.id, NULL) ORDER BY c.ord SEPARATOR ','),
                   GROUP_CONCAT(IF(c.lim, c.attempts, NULL) ORDER BY c.ord SEPARATOR ','), COALESCE(MAX(c.expired), 0)
              INTO v_held, v_lheld, v_att, v_ids, v_lids, v_latts, v_exp
              FROM (SELECT j.ord, x.id, x.attempts, x.p_kind <=> v_kind AS lim,
                           COALESCE(x.headers IS NOT NULL AND x.dead_from IS NULL
                                    AND JSON_UNQUOTE(JSON_EXTRACT(x.headers, '$."pyqueue.expires_at"')) <= v_clock, FALSE) AS expired
                      FROM JSON_TABLE(CONCAT('[', v_cand, ']'), '$[*]' COLUMNS (ord FOR ORDINALITY, c_id BIGINT PATH '$')) AS j
                      STRAIGHT_JOIN pyqueue_message x FORCE INDEX (PRIMARY) ON x.id = j.c_id
                     WHERE x.queue_name = in_queue AND x.priority = 0 AND x.scheduled_at <= v_now
                     LIMIT 18446744073709551615  -- materialised (its rows locked as read)
                       FOR UPDATE SKIP LOCKED) AS c;
            IF v_held > 0 THEN
                SET out_ids = CONCAT(out_ids, IF(out_ids = '', '', ','), v_ids), out_count = out_count + v_held,
                    v_lim_ids = CONCAT(v_lim_ids, IF(v_lim_ids = '' OR v_lids IS NULL, '', ','), COALESCE(v_lids, '')),
                    v_lim_atts = CONCAT(v_lim_atts, IF(v_lim_atts = '' OR v_latts IS NULL, '', ','), COALESCE(v_latts, '')),
                    v_lused = v_lused + v_lheld, v_max_att = GREATEST(v_max_att, v_att), v_any_exp = v_any_exp OR v_exp;
            END IF;
        END IF;
        IF v_got < v_k THEN LEAVE pages; END IF;
    END WHILE;
    IF v_ok = 1 AND (v_below OR (in_max IS NOT NULL AND v_max_att >= in_max) OR v_any_exp) THEN
        SET out_ids = NULL, out_count = NULL;
    ELSEIF v_ok = 1 THEN
        CALL pyqueue__claim_limited_write(in_queue, in_worker, in_secret, v_now, v_until, v_kind, v_free, v_unit_list,
                                          v_lim_ids, v_lim_atts, v_lused, out_ids, out_count);
    END IF;
END //


-- pyqueue__claim_limited_write: pyqueue__claim_limited_batch's writes, once its walk locked the messages io_ids
-- (comma-separated, io_count of them; in_lim_ids / in_lim_atts: those of the limited kind in_kind and their
-- attempts as locked, in_lused of them): ONE UPDATE claims them (tokens from in_secret, the lease to in_until),
-- ONE gives the claims of the limited kind the free slots in_free (a JSON array, in order), ONE writes the rate's
-- units used (in_unit_list, in order) with the reservation's time in_now. io_ids becomes the JSON array of the
-- claimed ids; NULL, with io_count, should a write not find what the walk locked (never: the rows are locked).
DROP PROCEDURE IF EXISTS pyqueue__claim_limited_write //
CREATE PROCEDURE pyqueue__claim_limited_write(
    IN    in_queue      VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_worker     VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_secret     CHAR(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_now        DATETIME(6),
    IN    in_until      DATETIME(6),
    IN    in_kind       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN    in_free       LONGTEXT CHARACTER SET utf8mb4,
    IN    in_unit_list  LONGTEXT CHARACTER SET utf8mb4,
    IN    in_lim_ids    LONGTEXT CHARACTER SET utf8mb4,
    IN    in_lim_atts   LONGTEXT CHARACTER SET utf8mb4,
    IN    in_lused      INT,
    INOUT io_ids        LONGTEXT CHARACTER SET utf8mb4,
    INOUT io_count      INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_first, v_hi, v_lo2, v_hi2 INT;
    DECLARE v_whole BOOLEAN DEFAULT FALSE;
    DECLARE v_free, v_ucsv LONGTEXT CHARACTER SET utf8mb4;
    IF io_count IS NOT NULL THEN
        SET io_ids = CONCAT('[', io_ids, ']'), v_free = REPLACE(REPLACE(REPLACE(in_free, '[', ''), ']', ''), ' ', '');
        UPDATE JSON_TABLE(io_ids, '$[*]' COLUMNS (c_id BIGINT PATH '$')) AS j
          STRAIGHT_JOIN pyqueue_message m FORCE INDEX (PRIMARY) ON m.id = j.c_id
           SET m.scheduled_at = in_until, m.attempts = m.attempts + 1, m.reserved_by = in_worker,
               m.reserve_token = INSERT(INSERT(INSERT(INSERT(INSERT(INSERT(LEFT(SHA2(CONCAT(in_secret, m.id), 256), 32), 13, 1, '4'),
                   17, 1, SUBSTR('89ab89ab89ab89ab', CONV(SUBSTR(SHA2(CONCAT(in_secret, m.id), 256), 17, 1), 16, 10) + 1, 1)),
                   9, 0, '-'), 14, 0, '-'), 19, 0, '-'), 24, 0, '-');
        IF ROW_COUNT() <> io_count THEN SET io_ids = NULL, io_count = NULL; END IF;  -- (never: the rows are locked)
        IF io_count > 0 AND in_lused > 0 THEN  -- the limited kind's claims take the free slots, in order
            -- (the i-th claim, its attempts as locked + 1, the i-th free slot, v_free now a list of them: one table
            -- updated, no join, whose buffer of rows to update, keyed by the slot's long primary key, went to disk)
            UPDATE pyqueue_limit_slot s FORCE INDEX (PRIMARY)
               SET s.msg_id = CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(in_lim_ids, ',', FIND_IN_SET(s.slot_no, v_free)), ',', -1) AS SIGNED),
                   s.msg_attempts = CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(in_lim_atts, ',', FIND_IN_SET(s.slot_no, v_free)), ',', -1) AS SIGNED) + 1,
                   s.msg_until = in_until
             WHERE s.queue_name = in_queue AND s.p_kind = in_kind AND FIND_IN_SET(s.slot_no, v_free) BETWEEN 1 AND in_lused;
            IF ROW_COUNT() <> in_lused THEN SET io_ids = NULL, io_count = NULL; END IF;  -- (never: slots locked)
        END IF;
        IF io_count > 0 AND in_unit_list IS NOT NULL THEN  -- the units used, written with the reservation's time
            -- (by ranges of the primary key, the list a filter: joined to the list, the rows to update went to a temporary
            -- table keyed by the long primary key, on disk. The list ascends from the unit the session took last, then from
            -- the first: two ranges; a unit in one but not in the list is left as it is, at READ COMMITTED not waited for.)
            SET v_ucsv = REPLACE(REPLACE(REPLACE(in_unit_list, '[', ''), ']', ''), ' ', ''), v_first = JSON_EXTRACT(in_unit_list, '$[0]');
            -- (v_whole: the ranges hold the units used and no other, as when none was skipped: no list to look up)
            SELECT MAX(IF(j.u >= v_first, j.u, NULL)), MIN(IF(j.u < v_first, j.u, NULL)), MAX(IF(j.u < v_first, j.u, NULL)),
                   COUNT(*) = MAX(IF(j.u >= v_first, j.u, NULL)) - v_first + 1
                              + COALESCE(MAX(IF(j.u < v_first, j.u, NULL)) - MIN(IF(j.u < v_first, j.u, NULL)) + 1, 0)
              INTO v_hi, v_lo2, v_hi2, v_whole FROM JSON_TABLE(in_unit_list, '$[*]' COLUMNS (o FOR ORDINALITY, u INT PATH '$')) AS j
             WHERE j.o <= io_count;
            UPDATE pyqueue_rate_slot s FORCE INDEX (PRIMARY)
               SET s.used_at = in_now
             WHERE s.queue_name = in_queue AND s.p_kind = ''
               AND (s.slot_no BETWEEN v_first AND v_hi OR s.slot_no BETWEEN v_lo2 AND v_hi2)
               AND (v_whole OR FIND_IN_SET(s.slot_no, v_ucsv) BETWEEN 1 AND io_count);
        END IF;
    END IF;
END //

-- pyqueue__limited_give_back: pyqueue__reserve_limited's claims in_claimed (JSON array of [id, token, scheduled_at,
-- old token, old reserved_by, attempts as claimed]) go back as they were (a pop's attempts unchanged), with their
-- limit slots when in_limits. For a failing call outside a transaction of its own. Locks: those rows, for one
-- statement each.
DROP PROCEDURE IF EXISTS pyqueue__limited_give_back //
CREATE PROCEDURE pyqueue__limited_give_back(
    IN in_queue   VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN in_claimed LONGTEXT CHARACTER SET utf8mb4,
    IN in_pop     BOOLEAN,
    IN in_limits  INT)
SQL SECURITY INVOKER
BEGIN
    DECLARE v_i INT DEFAULT 0;
    DECLARE v_c LONGTEXT CHARACTER SET utf8mb4;
    WHILE v_i < JSON_LENGTH(in_claimed) DO
        SET v_c = JSON_EXTRACT(in_claimed, CONCAT('$[', v_i, ']'));
        UPDATE pyqueue_message
           SET scheduled_at = CAST(JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[2]')) AS DATETIME(6)),
               attempts = attempts - IF(in_pop, 0, 1),
               reserve_token = IF(JSON_TYPE(JSON_EXTRACT(v_c, '$[3]')) = 'NULL', NULL,
                                  JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[3]'))),
               reserved_by = IF(JSON_TYPE(JSON_EXTRACT(v_c, '$[4]')) = 'NULL', NULL,
                                JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[4]')))
         WHERE id = JSON_EXTRACT(v_c, '$[0]') AND reserve_token = JSON_UNQUOTE(JSON_EXTRACT(v_c, '$[1]'));
        IF in_limits THEN
            UPDATE pyqueue_limit_slot
               SET msg_id = NULL, msg_attempts = NULL, msg_until = NULL
             WHERE queue_name = in_queue AND msg_id = JSON_EXTRACT(v_c, '$[0]')
               AND msg_attempts = JSON_EXTRACT(v_c, '$[5]');
        END IF;
        SET v_i = v_i + 1;
    END WHILE;
END //

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
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_i, v_attempts, v_ok, v_own, v_retry INT;
    DECLARE v_now, v_until DATETIME(6);
    DECLARE v_id BIGINT;
    DECLARE v_found INT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    CALL pyqueue__check_clock();
    CALL pyqueue__check_queue(in_queue);
    CALL pyqueue__check_name('p_kind', in_kind, 128);
    CALL pyqueue__check_int('capacity', in_capacity, 0, 10000);
    SET v_queue = in_queue, v_kind = in_kind;
    CALL pyqueue__own_transaction(NULL, v_own);
    REPEAT
        SET v_retry = 0, v_tries = v_tries + 1, v_i = 1, v_now = UTC_TIMESTAMP(6);
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
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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
    UNTIL v_retry = 0 END REPEAT;
END //

-- queue_limits: the limits of a queue (all queues when NULL), by queue and kind: queue, p_kind, capacity, in_use
-- (live reservations holding a slot, also one beyond a lowered capacity; each counted once). Plain reads, no locks.
DROP PROCEDURE IF EXISTS queue_limits //
CREATE PROCEDURE queue_limits(IN in_queue LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin)
SQL SECURITY DEFINER
BEGIN
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__check_clock();
    IF in_queue IS NOT NULL THEN CALL pyqueue__check_queue(in_queue); END IF;
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
    DECLARE v_queue, v_kind VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_own, v_retry, v_have, v_top, v_n INT;
    DECLARE v_per BIGINT;
    DECLARE v_found INT;
    DECLARE v_tries INT DEFAULT 0;
    DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN IF v_own = 1 THEN ROLLBACK; END IF; RESIGNAL; END;
    CALL pyqueue__check_queue(in_queue);
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
            DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
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
    DECLARE v_queue VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
    DECLARE v_now DATETIME(6);
    CALL pyqueue__check_clock();
    IF in_queue IS NOT NULL THEN CALL pyqueue__check_queue(in_queue); END IF;
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

DELIMITER ;
