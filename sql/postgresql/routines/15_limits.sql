-- ==== limits ====
-- Concurrency limits: at most capacity messages of a kind reserved at once in
-- a queue. The reserve and extend paths take and keep the slots through the
-- limit helpers above.

-- pyqueue__slot_held: true when a slot's holder (message in_id with key
-- in_key, delivery in_attempts) is still that live reservation at in_now.
-- Reads without locks (the caller holds the slot's lock).
CREATE OR REPLACE FUNCTION pyqueue__slot_held(in_queue text, in_kind text, in_key text, in_id bigint,
                                              in_attempts integer, in_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN in_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM pyqueue_message m
                    WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key
                      AND m.p_kind::text = in_kind AND m.id = in_id AND m.attempts = in_attempts
                      AND m.reserve_token IS NOT NULL AND m.scheduled_at > in_now);
END;
$$;

-- pyqueue__limit_claim: takes a free slot of (in_queue, in_kind) for the
-- message in_id about to be reserved for the (in_attempts + 1)-th time; false
-- when every slot is busy. in_taken: messages admitted earlier in the same
-- lock pass (their reservation is not written yet, so their slots look free).
-- Slots are locked FOR UPDATE SKIP LOCKED (a slot another reserver is taking
-- counts as busy) and the holder is checked by a statement that starts after
-- the lock is held: under READ COMMITTED it sees the latest committed state;
-- under REPEATABLE READ a slot changed since the snapshot raises 40001.
-- Slots numbered above the capacity hold reservations made before the limit
-- was lowered: a free slot goes to such a live holder first (the dead ones
-- are deleted), and while one of them is locked by another transaction the
-- free slot counts as busy, so never more than the capacity are held.
-- Never waits for a lock.
CREATE OR REPLACE FUNCTION pyqueue__limit_claim(in_queue text, in_kind text, in_id bigint, in_key text,
                                                in_attempts integer, in_now timestamptz, in_taken bigint[])
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_capacity integer;
    v_slot     record;
    v_extra    record;
    v_free     boolean;
BEGIN
    SELECT l.capacity INTO v_capacity
      FROM pyqueue_limit l
     WHERE l.queue_name::text = in_queue AND l.p_kind::text = in_kind;
    FOR v_slot IN
        SELECT s.slot_no, s.msg_id, s.msg_key, s.msg_attempts
          FROM pyqueue_limit_slot s
         WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no <= v_capacity
         ORDER BY s.slot_no
           FOR UPDATE SKIP LOCKED
    LOOP
        v_free := v_slot.msg_id IS NULL
                  OR (v_slot.msg_id <> ALL (in_taken)
                      AND NOT pyqueue__slot_held(in_queue, in_kind, v_slot.msg_key::text, v_slot.msg_id,
                                                 v_slot.msg_attempts, in_now));
        IF v_free THEN
            FOR v_extra IN
                SELECT s.slot_no, s.msg_id, s.msg_key, s.msg_attempts
                  FROM pyqueue_limit_slot s
                 WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no > v_capacity
                 ORDER BY s.slot_no
                   FOR UPDATE SKIP LOCKED
            LOOP
                DELETE FROM pyqueue_limit_slot
                 WHERE queue_name::text = in_queue AND p_kind::text = in_kind AND slot_no = v_extra.slot_no;
                IF pyqueue__slot_held(in_queue, in_kind, v_extra.msg_key::text, v_extra.msg_id,
                                      v_extra.msg_attempts, in_now) THEN
                    UPDATE pyqueue_limit_slot
                       SET msg_id = v_extra.msg_id, msg_key = v_extra.msg_key,
                           msg_attempts = v_extra.msg_attempts
                     WHERE queue_name::text = in_queue AND p_kind::text = in_kind AND slot_no = v_slot.slot_no;
                    v_free := false;
                    EXIT;
                END IF;
            END LOOP;
            IF v_free AND EXISTS (SELECT 1 FROM pyqueue_limit_slot s
                                   WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
                                     AND s.slot_no > v_capacity) THEN
                v_free := false;  -- another transaction holds one of them: count it as a holder
            END IF;
        END IF;
        IF v_free THEN
            UPDATE pyqueue_limit_slot
               SET msg_id = in_id, msg_key = in_key, msg_attempts = in_attempts + 1
             WHERE queue_name::text = in_queue AND p_kind::text = in_kind AND slot_no = v_slot.slot_no;
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END;
$$;

-- pyqueue__rate_slot(text, text, interval, timestamptz), which found a free
-- unit of a rate one candidate at a time, is gone: pyqueue__limited_tids
-- finds a rate's free units once a pass. An install of an earlier version
-- has it (an internal helper, granted to nobody): dropped here when the
-- catalog names it (nothing is dropped, nor any notice printed, otherwise).
DO $$
DECLARE
    v_old regprocedure := pg_catalog.to_regprocedure('pyqueue__rate_slot(text, text, interval, timestamptz)');
BEGIN
    IF v_old IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_old);
    END IF;
END
$$;

-- pyqueue__limit_free_slots: for pyqueue__limited_tids, the slots of the
-- limited kind (in_queue, in_kind) free at in_now, up to in_n of them, in
-- slot order, locked: o_slots, their rows' ctids (valid while the caller
-- holds the locks). One statement: the first slots within the capacity that
-- look free (no holder, or one that no longer holds the reservation, as
-- pyqueue__slot_held says, checked in the statement) are locked FOR UPDATE
-- SKIP LOCKED (a busy or locked slot is left to its holder), each only as
-- the statement read it. Under READ COMMITTED a slot row that another
-- transaction changed and committed after the statement began is locked in
-- its latest version and checked again against the statement's conditions,
-- but the holder check in them still sees the messages as they were when it
-- began: a new holder reserved meanwhile would look free. So a further
-- condition keeps only a row version the statement's snapshot sees (a probe
-- of the slot table by the locked row's ctid): a version written after the
-- statement began is not there, and that slot counts as busy (it is left
-- locked until the caller's transaction ends). A version the snapshot sees
-- has the holder its check saw: a holder comes back to life only by a new
-- reservation (which takes a slot row and writes it) or by an extend (which
-- writes its slot row first, pyqueue__limit_renew), and a slot row is
-- written only with its lock held. Under REPEATABLE READ a slot changed
-- since the snapshot raises 40001. o_slow: the kind has slots above its
-- capacity (a lowered limit whose holders still hold them): the caller
-- claims its slots one candidate at a time (pyqueue__limit_claim); o_slots
-- is then NULL. The capacity is read in the same statement, so as the same
-- snapshot sees the slots: a capacity read before it could predate a
-- lowering that committed in between, and miss the slots it left above the
-- new capacity. Never waits for a lock.
-- The holder check is a probe of pyqueue_message's key for each slot: its
-- OFFSET 0 keeps the planner from turning the NOT EXISTS (under an OR) into
-- a hashed subplan, which reads every message of the kind (20,000 of a
-- backlog: 13 ms a reserve) to check 64 slots. The version's probe keeps its
-- OFFSET 0 too: pulled up into a join, its row would be carried over as it
-- was into the re-check of a changed row, and pass.
CREATE OR REPLACE FUNCTION pyqueue__limit_free_slots(in_queue text, in_kind text, in_now timestamptz, in_n integer,
                                                     OUT o_slots tid[], OUT o_slow boolean)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    -- the capacity, the slots and the slots above the capacity, all as one snapshot sees them; the
    -- slots in slot order by the aggregate's own sort (this runs under pyqueue__ready_tids's
    -- enable_sort = off)
    SELECT coalesce(pg_catalog.array_agg(x.tid ORDER BY x.slot_no), '{}'),
           EXISTS (SELECT 1 FROM pyqueue_limit_slot s
                    WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
                      AND s.slot_no > (SELECT l.capacity FROM pyqueue_limit l
                                        WHERE l.queue_name::text = in_queue AND l.p_kind::text = in_kind))
      INTO o_slots, o_slow
      FROM (SELECT f.slot_no, f.ctid AS tid FROM pyqueue_limit_slot f
             WHERE f.queue_name::text = in_queue AND f.p_kind::text = in_kind
               AND f.slot_no <= (SELECT l.capacity FROM pyqueue_limit l
                                  WHERE l.queue_name::text = in_queue AND l.p_kind::text = in_kind)
               AND (f.msg_id IS NULL
                    OR NOT EXISTS (SELECT 1 FROM pyqueue_message h
                                    WHERE h.queue_name::text = in_queue AND h.p_key::text = f.msg_key::text
                                      AND h.p_kind::text = in_kind AND h.id = f.msg_id AND h.attempts = f.msg_attempts
                                      AND h.reserve_token IS NOT NULL AND h.scheduled_at > in_now
                                    OFFSET 0))  -- a probe a slot (see above)
               AND EXISTS (SELECT 1 FROM pyqueue_limit_slot v WHERE v.ctid = f.ctid OFFSET 0)  -- the version read
             ORDER BY f.slot_no
             LIMIT in_n
               FOR UPDATE SKIP LOCKED) x;
    IF o_slow THEN
        o_slots := NULL;
    END IF;
END;
$$;

-- pyqueue__limited_tids: pyqueue__ready_tids for a queue that has
-- concurrency limits or rate limits. Same order, locking and result (the
-- ctids of the locked rows); a candidate of a limited kind is admitted
-- only with a slot, and a kind found full is skipped for the rest of the
-- pass, except for candidates that have had max_attempts deliveries: they
-- are admitted without a slot (the reserve dead-letters them, it delivers
-- nothing), so that a full kind cannot hold an exhausted message back.
-- Rates: a candidate of a kind with a rate needs a free unit of it (and of
-- the queue-wide rate, when the queue has one: with none free the pass
-- ends). The pass's reservation time o_at is the clock read at its first
-- rate unit (after the first row lock gave the transaction its id); each
-- unit taken gets used_at = o_at, one write per rate per admitted message,
-- and only once every unit and slot the message needs was found: a rate
-- unit found for a candidate that another rate or its concurrency limit
-- then holds back is not written (it stays free for the next candidate).
-- A held-back candidate stays as it is (ready, its attempts and place kept).
-- Unlike pyqueue__ready_tids it visits every priority down to the last one
-- it takes rows from (limits keep their slot bookkeeping per candidate).
-- pyqueue__ready_tids read where it starts: the queue's top priority
-- (in_top) and its bound, (in_from, in_from_id), where each priority's
-- range starts.
-- Cost: slots are found once a pass, not once a candidate. The first
-- candidate that needs a rate's unit locks (FOR UPDATE SKIP LOCKED, in slot
-- order) every free unit of that rate the pass can use, up to what it still
-- wants, in one read; later candidates take the next one of that list. The
-- first candidate of a limited kind locks the kind's free slots within its
-- capacity in one statement (pyqueue__limit_free_slots); later candidates
-- take the next of those. A kind with slots above its
-- capacity (a lowered limit whose holders still hold them) goes through
-- pyqueue__limit_claim, one candidate at a time. So a pass reads each slot
-- it uses once, not every busy slot before it for each candidate (a
-- reserve of 64 under a limit of 64 checked about 2,000 slots). On a queue
-- without rates a step reads its candidates at once and, when no limit binds
-- (each limited kind among them has a free slot for each of its
-- candidates), takes them together, with no statement a candidate; the
-- slots' holders and the units' times are written at the pass's end, one
-- statement a table, by ctid (the rows are locked).
CREATE OR REPLACE FUNCTION pyqueue__limited_tids(in_queue text, in_now timestamptz, in_n integer,
                                                 in_kinds text[], in_from timestamptz, in_from_id bigint,
                                                 in_top integer, OUT o_tids tid[], OUT o_at timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_limited  text[];
    v_rated    text[];     -- the kinds with a rate ('' = the queue-wide one) ...
    v_pers     interval[]; -- ... and their per
    v_wide     interval;   -- per of the queue-wide rate (NULL: none)
    v_i        integer;
    v_kslot    tid;
    v_wslot    tid;
    v_stop     boolean := false;
    v_full     text[] := '{}';
    v_seen     bigint[] := '{}';
    v_taken    bigint[] := '{}';
    v_max      integer;
    v_priority integer;
    v_left     integer := in_n;
    v_skipped  boolean;
    v_fkind    text[] := '{}';     -- free slots found this pass: the kind (NULL once taken) ...
    v_fslot    tid[] := '{}';      -- ... and the slot's row
    v_lkinds   text[] := '{}';     -- limited kinds whose slots were found (v_fkind)
    v_slow     text[] := '{}';     -- limited kinds with slots above the capacity: pyqueue__limit_claim
    v_ukind    text[] := '{}';     -- free rate units found this pass: the rate's kind (NULL once taken) ...
    v_uslot    tid[] := '{}';      -- ... and the unit's row
    v_rkinds   text[] := '{}';     -- rates whose free units were found (v_ukind)
    v_j        integer;
    v_k        integer;
    v_f        integer;
    v_locked   tid[];
    v_isslow   boolean;
    v_hslot    tid[] := '{}';      -- the slots taken this pass, written at its end: the row, its holder
    v_hid      bigint[] := '{}';
    v_hkey     text[] := '{}';
    v_hatt     integer[] := '{}';      -- (the holder's attempts before this delivery)
    v_tslot    tid[] := '{}';      -- the rate units taken this pass (rows), written at its end
    v_norates  boolean;
    v_ok       boolean;
    v_kind     text;
    c_tid      tid[];   -- the set-based step's candidates: rows, ids, keys, kinds, attempts
    c_id       bigint[];
    c_key      text[];
    c_kind     text[];
    c_att      integer[];
    c_maxatt   integer;  -- ... and their highest attempts
    c_lkind    text[];   -- the limited kinds among them ...
    c_lneed    integer[];  -- ... and how many of their candidates need a slot
    v_l        integer;
    r          record;
BEGIN
    -- the queue's limited kinds, its rates and its max_attempts: one read
    SELECT coalesce((SELECT pg_catalog.array_agg(l.p_kind::text) FROM pyqueue_limit l WHERE l.queue_name::text = in_queue),
                    '{}'),
           coalesce(t.kinds, '{}'), coalesce(t.pers, '{}'),
           (SELECT q.max_attempts FROM pyqueue_queue q WHERE q.queue_name::text = in_queue)
      INTO v_limited, v_rated, v_pers, v_max
      FROM (SELECT pg_catalog.array_agg(t.p_kind::text ORDER BY t.p_kind::text) AS kinds,
                   pg_catalog.array_agg(t.per ORDER BY t.p_kind::text) AS pers
              FROM pyqueue_rate t WHERE t.queue_name::text = in_queue) t;
    v_i := pg_catalog.array_position(v_rated, ''::text);
    IF v_i IS NOT NULL THEN
        v_wide := v_pers[v_i];
    END IF;
    v_norates := pg_catalog.cardinality(v_rated) = 0;
    v_priority := in_top;
    WHILE v_priority IS NOT NULL AND v_left > 0 AND NOT v_stop LOOP
        LOOP
            v_skipped := false;
            -- The set-based step (a queue without rates): the step's candidates read at once; when
            -- each limited kind among them has a free slot for each of its candidates (the limits do
            -- not bind), all are taken together, each such candidate the next free slot of its kind
            -- in order. Otherwise (a limit binds, or a kind has slots above its capacity) the step
            -- below takes the same candidates (locked now) one at a time.
            IF v_norates THEN
                SELECT pg_catalog.array_agg(x.ctid), pg_catalog.array_agg(x.id), pg_catalog.array_agg(x.p_key::text),
                       pg_catalog.array_agg(x.p_kind::text), pg_catalog.array_agg(x.attempts), pg_catalog.max(x.attempts)
                  INTO c_tid, c_id, c_key, c_kind, c_att, c_maxatt
                  FROM (SELECT m.ctid, m.id, m.p_key, m.p_kind, m.attempts
                          FROM pyqueue_message m
                         WHERE m.queue_name::text = in_queue
                           AND m.priority = v_priority
                           AND m.scheduled_at > '-infinity' AND (m.scheduled_at, m.id) >= (in_from, in_from_id)
                           AND (m.scheduled_at, m.id) <= (in_now, 9223372036854775807)
                           AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                           AND (m.p_kind::text <> ALL (v_full) OR m.attempts >= v_max)
                           AND m.id <> ALL (v_seen)
                         ORDER BY m.scheduled_at, m.id
                         LIMIT v_left
                           FOR UPDATE SKIP LOCKED) x;
                EXIT WHEN c_tid IS NULL;  -- no candidate at this priority
                -- the limited kinds among them, each with how many of its candidates need a slot (all
                -- but those to be dead-lettered)
                SELECT coalesce(pg_catalog.array_agg(u.kd), '{}'), coalesce(pg_catalog.array_agg(u.n), '{}')
                  INTO c_lkind, c_lneed
                  FROM (SELECT k.kd, pg_catalog.count(*)::integer AS n
                          FROM ROWS FROM (pg_catalog.unnest(c_kind), pg_catalog.unnest(c_att)) AS k (kd, a)
                         WHERE k.kd = ANY (v_limited) AND k.a < v_max
                         GROUP BY k.kd) u;
                v_ok := true;
                FOR v_l IN 1 .. pg_catalog.cardinality(c_lkind) LOOP
                    v_kind := c_lkind[v_l];
                    IF v_kind <> ALL (v_lkinds) AND v_kind <> ALL (v_slow) THEN
                        SELECT ls.o_slots, ls.o_slow INTO v_locked, v_isslow
                          FROM pyqueue__limit_free_slots(in_queue, v_kind, in_now, v_left) ls;
                        IF v_isslow THEN
                            v_slow := pg_catalog.array_append(v_slow, v_kind);
                        ELSE
                            v_fkind := pg_catalog.array_cat(v_fkind, pg_catalog.array_fill(v_kind, ARRAY[pg_catalog.cardinality(v_locked)]));
                            v_fslot := pg_catalog.array_cat(v_fslot, v_locked);
                            v_lkinds := pg_catalog.array_append(v_lkinds, v_kind);
                        END IF;
                    END IF;
                    IF v_kind = ANY (v_slow)
                       OR pg_catalog.cardinality(pg_catalog.array_positions(v_fkind, v_kind)) < c_lneed[v_l] THEN
                        v_ok := false;
                        EXIT;
                    END IF;
                END LOOP;
                IF v_ok THEN
                    -- each kind's candidates, in order, take its free slots, in order
                    FOR v_l IN 1 .. pg_catalog.cardinality(c_lkind) LOOP
                        v_kind := c_lkind[v_l];
                        FOREACH v_f IN ARRAY (pg_catalog.array_positions(v_fkind, v_kind))[1:c_lneed[v_l]] LOOP
                            v_hslot := pg_catalog.array_append(v_hslot, v_fslot[v_f]);
                            v_fkind[v_f] := NULL;  -- taken
                        END LOOP;
                        IF c_lneed[v_l] = pg_catalog.cardinality(c_id) THEN  -- every candidate: all of them
                            v_hid := pg_catalog.array_cat(v_hid, c_id);
                            v_hkey := pg_catalog.array_cat(v_hkey, c_key);
                            v_hatt := pg_catalog.array_cat(v_hatt, c_att);
                        ELSE  -- (aggregates' own ordering: this runs under pyqueue__ready_tids's enable_sort = off)
                            SELECT pg_catalog.array_cat(v_hid, pg_catalog.array_agg(u.id ORDER BY u.o)),
                                   pg_catalog.array_cat(v_hkey, pg_catalog.array_agg(u.k ORDER BY u.o)),
                                   pg_catalog.array_cat(v_hatt, pg_catalog.array_agg(u.a ORDER BY u.o))
                              INTO v_hid, v_hkey, v_hatt
                              FROM ROWS FROM (pg_catalog.unnest(c_id), pg_catalog.unnest(c_key), pg_catalog.unnest(c_kind),
                                              pg_catalog.unnest(c_att)) WITH ORDINALITY AS u (id, k, kd, a, o)
                             WHERE u.kd = v_kind AND u.a < v_max;
                        END IF;
                    END LOOP;
                    IF c_maxatt < v_max THEN  -- none to be dead-lettered: all of them
                        v_taken := pg_catalog.array_cat(v_taken, c_id);
                    ELSE
                        v_taken := pg_catalog.array_cat(v_taken, ARRAY(SELECT u.id FROM ROWS FROM (pg_catalog.unnest(c_id), pg_catalog.unnest(c_att)) AS u (id, a)
                                                                         WHERE u.a < v_max));
                    END IF;
                    v_seen := pg_catalog.array_cat(v_seen, c_id);
                    o_tids := pg_catalog.array_cat(o_tids, c_tid);
                    v_left := v_left - pg_catalog.cardinality(c_tid);
                    EXIT;  -- nothing held back: the next priority
                END IF;
            END IF;
            FOR r IN
                SELECT m.ctid, m.id, m.p_key, m.p_kind, m.attempts
                  FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue
                   AND m.priority = v_priority
                   AND m.scheduled_at > '-infinity' AND (m.scheduled_at, m.id) >= (in_from, in_from_id)
                   AND (m.scheduled_at, m.id) <= (in_now, 9223372036854775807)
                   AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                   AND (m.p_kind::text <> ALL (v_full) OR m.attempts >= v_max)
                   AND m.id <> ALL (v_seen)
                 ORDER BY m.scheduled_at, m.id
                 LIMIT v_left
                   FOR UPDATE SKIP LOCKED
            LOOP
                v_seen := pg_catalog.array_append(v_seen, r.id);
                IF r.attempts >= v_max THEN
                    NULL;  -- to be dead-lettered: needs no slot
                ELSIF r.p_kind::text = ANY (v_full) THEN
                    v_skipped := true;
                    CONTINUE;
                ELSE
                    v_i := pg_catalog.array_position(v_rated, r.p_kind::text);
                    IF (v_i IS NOT NULL OR v_wide IS NOT NULL) AND o_at IS NULL THEN
                        o_at := pg_catalog.clock_timestamp();  -- after this row's lock: the id is taken
                    END IF;
                    v_kslot := NULL;
                    v_wslot := NULL;
                    -- the rates' free units, found once a pass (see "Cost" above)
                    IF v_i IS NOT NULL AND r.p_kind::text <> ALL (v_rkinds) THEN
                        SELECT v_ukind || pg_catalog.array_fill(r.p_kind::text, ARRAY[pg_catalog.count(*)::integer]),
                               pg_catalog.array_cat(v_uslot, coalesce(pg_catalog.array_agg(u.tid ORDER BY u.slot_no), '{}'))
                          INTO v_ukind, v_uslot
                          FROM (SELECT s.slot_no, s.ctid AS tid FROM pyqueue_rate_slot s
                                 WHERE s.queue_name::text = in_queue AND s.p_kind::text = r.p_kind::text
                                   AND (s.used_at IS NULL OR s.used_at <= o_at - v_pers[v_i])
                                 ORDER BY s.slot_no LIMIT v_left
                                   FOR UPDATE SKIP LOCKED) u;
                        v_rkinds := pg_catalog.array_append(v_rkinds, r.p_kind::text);
                    END IF;
                    IF v_wide IS NOT NULL AND ''::text <> ALL (v_rkinds) THEN
                        SELECT v_ukind || pg_catalog.array_fill(''::text, ARRAY[pg_catalog.count(*)::integer]),
                               pg_catalog.array_cat(v_uslot, coalesce(pg_catalog.array_agg(u.tid ORDER BY u.slot_no), '{}'))
                          INTO v_ukind, v_uslot
                          FROM (SELECT s.slot_no, s.ctid AS tid FROM pyqueue_rate_slot s
                                 WHERE s.queue_name::text = in_queue AND s.p_kind::text = ''::text
                                   AND (s.used_at IS NULL OR s.used_at <= o_at - v_wide)
                                 ORDER BY s.slot_no LIMIT v_left
                                   FOR UPDATE SKIP LOCKED) u;
                        v_rkinds := pg_catalog.array_append(v_rkinds, ''::text);
                    END IF;
                    IF v_i IS NOT NULL THEN
                        v_j := pg_catalog.array_position(v_ukind, r.p_kind::text);
                        IF v_j IS NULL THEN  -- the kind's rate is used up: the kind is full
                            v_full := pg_catalog.array_append(v_full, r.p_kind::text);
                            v_skipped := true;
                            CONTINUE;
                        END IF;
                        v_kslot := v_uslot[v_j];
                    END IF;
                    IF v_wide IS NOT NULL THEN
                        v_k := pg_catalog.array_position(v_ukind, ''::text);
                        IF v_k IS NULL THEN  -- the queue's rate is used up: the pass ends
                            v_stop := true;
                            EXIT;
                        END IF;
                        v_wslot := v_uslot[v_k];
                    END IF;
                    IF r.p_kind::text = ANY (v_limited) THEN
                        IF r.p_kind::text <> ALL (v_lkinds) AND r.p_kind::text <> ALL (v_slow) THEN
                            -- the kind's slots, found once a pass (see "Cost" above)
                            SELECT ls.o_slots, ls.o_slow INTO v_locked, v_isslow
                              FROM pyqueue__limit_free_slots(in_queue, r.p_kind::text, in_now, v_left) ls;
                            IF v_isslow THEN
                                v_slow := pg_catalog.array_append(v_slow, r.p_kind::text);
                            ELSE
                                v_fkind := pg_catalog.array_cat(v_fkind, pg_catalog.array_fill(r.p_kind::text, ARRAY[pg_catalog.cardinality(v_locked)]));
                                v_fslot := pg_catalog.array_cat(v_fslot, v_locked);
                                v_lkinds := pg_catalog.array_append(v_lkinds, r.p_kind::text);
                            END IF;
                        END IF;
                        IF r.p_kind::text = ANY (v_slow) THEN
                            IF NOT pyqueue__limit_claim(in_queue, r.p_kind::text, r.id, r.p_key::text, r.attempts,
                                                        in_now, v_taken) THEN
                                v_full := pg_catalog.array_append(v_full, r.p_kind::text);
                                v_skipped := true;
                                CONTINUE;
                            END IF;
                        ELSE
                            v_f := pg_catalog.array_position(v_fkind, r.p_kind::text);
                            IF v_f IS NULL THEN  -- every slot of the kind is busy
                                v_full := pg_catalog.array_append(v_full, r.p_kind::text);
                                v_skipped := true;
                                CONTINUE;
                            END IF;
                            v_fkind[v_f] := NULL;
                            -- its holder written at the pass's end, with the others (one UPDATE)
                            v_hslot := pg_catalog.array_append(v_hslot, v_fslot[v_f]);
                            v_hid := pg_catalog.array_append(v_hid, r.id);
                            v_hkey := pg_catalog.array_append(v_hkey, r.p_key::text);
                            v_hatt := pg_catalog.array_append(v_hatt, r.attempts);
                        END IF;
                    END IF;
                    -- the units taken: used_at written at the pass's end, with the others (one UPDATE)
                    IF v_kslot IS NOT NULL THEN
                        v_ukind[v_j] := NULL;
                        v_tslot := pg_catalog.array_append(v_tslot, v_kslot);
                    END IF;
                    IF v_wslot IS NOT NULL THEN
                        v_ukind[v_k] := NULL;
                        v_tslot := pg_catalog.array_append(v_tslot, v_wslot);
                    END IF;
                    v_taken := pg_catalog.array_append(v_taken, r.id);
                END IF;
                o_tids := pg_catalog.array_append(o_tids, r.ctid);
                v_left := v_left - 1;
            END LOOP;
            EXIT WHEN NOT v_skipped OR v_left <= 0 OR v_stop;
        END LOOP;
        EXIT WHEN v_stop OR v_left <= 0;
        SELECT pg_catalog.max(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.priority < v_priority AND m.scheduled_at > '-infinity';
    END LOOP;
    -- the pass's writes, one statement a table: the slots taken get their holders, the units
    -- taken their time. Their rows are locked (by the reads above, which gave their ctids), so
    -- each is found by its ctid (a TID scan, whatever the plan's estimates)
    IF pg_catalog.cardinality(v_hslot) > 0 THEN
        -- (each row joined to its holder: an array_position a row searched the whole list, three
        -- times, 15 ms for 256 slots)
        UPDATE pyqueue_limit_slot s
           SET msg_id = h.id, msg_key = h.k, msg_attempts = h.a + 1  -- the delivery being made
          FROM ROWS FROM (pg_catalog.unnest(v_hslot), pg_catalog.unnest(v_hid), pg_catalog.unnest(v_hkey),
                          pg_catalog.unnest(v_hatt)) AS h (tid, id, k, a)
         WHERE s.ctid = ANY (v_hslot) AND s.ctid = h.tid;
    END IF;
    IF pg_catalog.cardinality(v_tslot) > 0 THEN
        UPDATE pyqueue_rate_slot s SET used_at = o_at WHERE s.ctid = ANY (v_tslot);
    END IF;
END;
$$;

-- pyqueue__limit_renew: called by queue_extend before it extends; true when
-- the kind has no limit or the reservation still holds its slot (the slot
-- row is then locked and touched, so a reserver cannot take it over until
-- this transaction ends, and a REPEATABLE READ reserver that saw the old
-- version gets 40001). False when the slot went to another reservation after
-- this one expired: the extend then fails.
CREATE OR REPLACE FUNCTION pyqueue__limit_renew(in_queue text, in_key text, in_kind text, in_token uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_id       bigint;
    v_attempts integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name::text = in_queue AND l.p_kind::text = in_kind) THEN
        RETURN true;
    END IF;
    SELECT m.id, m.attempts INTO v_id, v_attempts
      FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind AND m.reserve_token = in_token;
    IF NOT FOUND THEN
        RETURN true;  -- the extend itself finds nothing and answers NULL
    END IF;
    UPDATE pyqueue_limit_slot
       SET msg_attempts = msg_attempts
     WHERE queue_name::text = in_queue AND p_kind::text = in_kind AND msg_id = v_id AND msg_attempts = v_attempts;
    RETURN FOUND;
END;
$$;

-- queue_set_limit: at most in_capacity messages of in_kind reserved at once
-- in in_queue (0 holds the kind back); NULL removes the limit. Live
-- reservations of the kind made before the first call are counted (as far as
-- the capacity goes). Lowering the capacity revokes no live reservation:
-- those beyond the new capacity keep their slot rows (numbered above it, so
-- queue_limits counts them) and nothing more of the kind is handed out
-- until fewer than the new capacity are held. Locks the limit row and all
-- its slots (in slot order).
-- Every step is one statement over the kind's slots, or over its live
-- reservations, with no join between the two whose plan could depend on
-- their statistics: the free slots and the holders to place are gathered
-- into arrays, and the slots are filled through an array indexed by slot
-- number; pyqueue__slot_held runs only for slots that have a holder. A call
-- thus costs a few scans, whatever the capacity and the plans.
CREATE OR REPLACE FUNCTION queue_set_limit(in_queue text, in_kind text, in_capacity integer)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now      timestamptz := pg_catalog.clock_timestamp();
    v_free     integer[];  -- the empty slots within the capacity, in slot order
    v_ids      bigint[];   -- the holders to place, in the order they take v_free
    v_keys     text[];
    v_attempts integer[];
    v_more     record;
    v_moved    integer;    -- the highest slot above the capacity whose holder moves
    v_pos      integer[];  -- by slot number: the index in v_ids of its new holder
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF in_capacity IS NULL THEN
        DELETE FROM pyqueue_limit WHERE queue_name::text = in_queue AND p_kind::text = in_kind;
        RETURN;
    END IF;
    IF in_capacity < 0 OR in_capacity > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: capacity must be from 0 to 10000 (NULL removes the limit)'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pyqueue_limit AS l (queue_name, p_kind, capacity)
    VALUES (in_queue, in_kind, in_capacity)
    ON CONFLICT (queue_name, p_kind) DO UPDATE SET capacity = EXCLUDED.capacity;
    PERFORM 1 FROM pyqueue_limit_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
     ORDER BY s.slot_no
       FOR UPDATE;
    INSERT INTO pyqueue_limit_slot (queue_name, p_kind, slot_no)
    SELECT in_queue, in_kind, g FROM pg_catalog.generate_series(1, in_capacity) g
    ON CONFLICT DO NOTHING;
    -- Slots above the capacity: a dead holder's slot goes, a live holder
    -- moves into a free slot within the capacity when there is one (in slot
    -- order), else keeps its slot until its reservation ends.
    DELETE FROM pyqueue_limit_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no > in_capacity
       AND (s.msg_id IS NULL
            OR NOT pyqueue__slot_held(in_queue, in_kind, s.msg_key::text, s.msg_id, s.msg_attempts, v_now));
    SELECT coalesce(pg_catalog.array_agg(s.slot_no ORDER BY s.slot_no), '{}') INTO v_free
      FROM pyqueue_limit_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no <= in_capacity
       AND (s.msg_id IS NULL
            OR NOT pyqueue__slot_held(in_queue, in_kind, s.msg_key::text, s.msg_id, s.msg_attempts, v_now));
    IF pg_catalog.cardinality(v_free) = 0 THEN
        RETURN;
    END IF;
    SELECT coalesce(pg_catalog.array_agg(h.msg_id ORDER BY h.slot_no), '{}'),
           coalesce(pg_catalog.array_agg(h.msg_key::text ORDER BY h.slot_no), '{}'),
           coalesce(pg_catalog.array_agg(h.msg_attempts ORDER BY h.slot_no), '{}'),
           pg_catalog.max(h.slot_no)
      INTO v_ids, v_keys, v_attempts, v_moved
      FROM (SELECT s.slot_no, s.msg_id, s.msg_key, s.msg_attempts
              FROM pyqueue_limit_slot s
             WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no > in_capacity
             ORDER BY s.slot_no
             LIMIT pg_catalog.cardinality(v_free)) h;
    -- Then live reservations that hold no slot yet (made before the limit),
    -- oldest first: a set difference, so no plan pairs each reservation
    -- with each slot.
    SELECT coalesce(pg_catalog.array_agg(u.id ORDER BY u.id), '{}') AS ids,
           coalesce(pg_catalog.array_agg(u.p_key ORDER BY u.id), '{}') AS keys,
           coalesce(pg_catalog.array_agg(u.attempts ORDER BY u.id), '{}') AS attempts
      INTO v_more
      FROM (SELECT d.id, d.p_key, d.attempts
              FROM (SELECT m.id, m.p_key::text AS p_key, m.attempts
                      FROM pyqueue_message m
                     WHERE m.queue_name::text = in_queue AND m.p_kind::text = in_kind
                       AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now
                    EXCEPT
                    SELECT s.msg_id, s.msg_key::text, s.msg_attempts
                      FROM pyqueue_limit_slot s
                     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
                       AND s.msg_id IS NOT NULL) d
             ORDER BY d.id
             LIMIT pg_catalog.cardinality(v_free) - pg_catalog.cardinality(v_ids)) u;
    v_ids := v_ids || v_more.ids;
    v_keys := v_keys || v_more.keys;
    v_attempts := v_attempts || v_more.attempts;
    IF pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    v_pos := pg_catalog.array_fill(NULL::integer, ARRAY[in_capacity]);
    FOR i IN 1 .. pg_catalog.cardinality(v_ids) LOOP
        v_pos[v_free[i]] := i;
    END LOOP;
    UPDATE pyqueue_limit_slot s
       SET msg_id = v_ids[v_pos[s.slot_no]], msg_key = v_keys[v_pos[s.slot_no]],
           msg_attempts = v_attempts[v_pos[s.slot_no]]
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
       AND s.slot_no <= v_free[pg_catalog.cardinality(v_ids)] AND v_pos[s.slot_no] IS NOT NULL;
    DELETE FROM pyqueue_limit_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
       AND s.slot_no > in_capacity AND s.slot_no <= v_moved;
END;
$$;

-- queue_limits: the limits of a queue (all queues when NULL) with in_use,
-- the live reservations holding a slot now. Reads without locks.
CREATE OR REPLACE FUNCTION queue_limits(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, p_kind text, capacity integer, in_use bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT l.queue_name::text, l.p_kind::text, l.capacity,
               (SELECT pg_catalog.count(*) FROM pyqueue_limit_slot s JOIN pyqueue_message m
                    ON m.queue_name::text = s.queue_name::text AND m.p_key::text = s.msg_key::text AND m.p_kind::text = s.p_kind::text
                   AND m.id = s.msg_id AND m.attempts = s.msg_attempts
                 WHERE s.queue_name::text = l.queue_name::text AND s.p_kind::text = l.p_kind::text
                   AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now)
          FROM pyqueue_limit l
         WHERE in_queue IS NULL OR l.queue_name::text = in_queue
         ORDER BY l.queue_name, l.p_kind;
END;
$$;

-- queue_set_rate: at most in_n reservations of in_kind (NULL: of every kind
-- of the queue together) in any window of length in_per, counted on every
-- path that hands a message out (queue_reserve, queue_commit_reserve,
-- queue_pop). in_n NULL removes the rate (nothing to remove is no error);
-- in_n 1..10000, in_per above zero and at most a day (kept as seconds: a
-- day is 24 hours whatever the time zone). A kind rate and the queue-wide
-- rate both apply to a message of that kind. Slots: lowering n keeps the n
-- most recent times, raising it adds never-used slots, a new per keeps the
-- times. A reservation counts at its lease start (the reserved message's
-- scheduled_at minus its timeout: the slot gets exactly that time), a pop at
-- the clock the call read after its first row lock; so no window shorter
-- than per holds more than n lease starts. Locks the queue (as a write into
-- it), the rate row and all its slot rows (in slot order; reservers skip
-- them while it runs: nothing of the rate is handed out until it commits).
CREATE OR REPLACE FUNCTION queue_set_rate(in_queue text, in_kind text, in_n integer, in_per interval)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind  text := coalesce(in_kind, '');  -- '' = the queue-wide rate
    v_per   interval;
    v_times timestamptz[];
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    IF in_kind IS NOT NULL THEN
        PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    END IF;
    IF in_n IS NULL THEN
        DELETE FROM pyqueue_rate WHERE queue_name::text = in_queue AND p_kind::text = v_kind;
        RETURN;
    END IF;
    IF in_n < 1 OR in_n > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be from 1 to 10000 (NULL removes the rate)'
            USING ERRCODE = '22023';
    END IF;
    IF in_per IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: per must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_duration('per', in_per, true);
    IF extract(epoch FROM in_per) > 86400::numeric THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: per must not exceed 1 day' USING ERRCODE = '22023';
    END IF;
    v_per := pg_catalog.make_interval(secs => extract(epoch FROM in_per)::double precision);
    INSERT INTO pyqueue_rate AS t (queue_name, p_kind, n, per)
    VALUES (in_queue, v_kind, in_n, v_per)
    ON CONFLICT (queue_name, p_kind) DO UPDATE SET n = EXCLUDED.n, per = EXCLUDED.per;
    PERFORM 1 FROM pyqueue_rate_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = v_kind
     ORDER BY s.slot_no
       FOR UPDATE;
    -- the in_n most recent times, then never-used slots
    SELECT coalesce(pg_catalog.array_agg(u.used_at ORDER BY u.used_at DESC), '{}') INTO v_times
      FROM (SELECT s.used_at FROM pyqueue_rate_slot s
             WHERE s.queue_name::text = in_queue AND s.p_kind::text = v_kind AND s.used_at IS NOT NULL
             ORDER BY s.used_at DESC
             LIMIT in_n) u;
    DELETE FROM pyqueue_rate_slot s WHERE s.queue_name::text = in_queue AND s.p_kind::text = v_kind;
    INSERT INTO pyqueue_rate_slot (queue_name, p_kind, slot_no, used_at)
    SELECT in_queue, v_kind, g, v_times[g] FROM pg_catalog.generate_series(1, in_n) g;
END;
$$;

-- queue_rates: the rates of a queue (all queues when NULL), p_kind NULL for
-- a queue-wide rate (listed first): next_free_at, when the next unit is (or
-- was) free, min(slot time + per), NULL while some slot was never used;
-- in_window, the slots used within the last per (the rate is used up when
-- it equals n). Reads without locks.
CREATE OR REPLACE FUNCTION queue_rates(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, p_kind text, n integer, per interval, next_free_at timestamptz, in_window integer)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT t.queue_name::text, NULLIF(t.p_kind::text, ''::text), t.n, t.per,
               (SELECT CASE WHEN pg_catalog.bool_or(s.used_at IS NULL) THEN NULL
                            ELSE pg_catalog.min(s.used_at) + t.per END
                  FROM pyqueue_rate_slot s
                 WHERE s.queue_name::text = t.queue_name::text AND s.p_kind::text = t.p_kind::text),
               (SELECT pg_catalog.count(*)::integer
                  FROM pyqueue_rate_slot s
                 WHERE s.queue_name::text = t.queue_name::text AND s.p_kind::text = t.p_kind::text
                   AND s.used_at > v_now - t.per)
          FROM pyqueue_rate t
         WHERE in_queue IS NULL OR t.queue_name::text = in_queue
         ORDER BY t.queue_name::text, t.p_kind::text;
END;
$$;
