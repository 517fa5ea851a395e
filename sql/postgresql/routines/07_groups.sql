-- ==== groups ====
-- FIFO groups: the helpers that keep a group's messages one (or k) at a time in
-- order, called by the push, reserve and settle routines, and
-- queue_set_group_limit.

-- pyqueue__blocked_at: the scheduled_at of a message blocked behind its
-- group's head: past the end of every ready range, so that no reserve, pop
-- or wait ever visits it. Finite, and the largest time every client
-- library can read (Python's datetime.max), because queue_message and
-- queue_messages show it. Inlined by the planner as a constant.
CREATE OR REPLACE FUNCTION pyqueue__blocked_at()
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT timestamptz '9999-12-31 23:59:59.999999+00' $$;

-- pyqueue__group_first_blocked: the blocked message of in_group of in_queue
-- that comes first in (scheduled_at_initially, id) order, run time then
-- push order: its key, kind, run time and id (all NULL when none is
-- blocked), its row locked. The next head of pyqueue__group_settle and
-- pyqueue__group_settle_k.
CREATE OR REPLACE FUNCTION pyqueue__group_first_blocked(in_queue text, in_group text, OUT out_key text,
                                                        OUT out_kind text, OUT out_at timestamptz, OUT out_id bigint)
LANGUAGE plpgsql
AS $$
BEGIN
    LOOP
        SELECT m.p_key, m.p_kind, m.scheduled_at_initially, m.id INTO out_key, out_kind, out_at, out_id
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
           AND m.scheduled_at = pyqueue__blocked_at()
         ORDER BY m.scheduled_at_initially, m.id
         LIMIT 1
           FOR UPDATE;
        -- Nothing found can also mean that the row this read waited for was
        -- deleted meanwhile (READ COMMITTED): look again with a new snapshot.
        EXIT WHEN FOUND OR NOT EXISTS (
            SELECT 1 FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
               AND m.scheduled_at = pyqueue__blocked_at());
    END LOOP;
END;
$$;

-- pyqueue__group_head: makes the blocked message (in_key, in_kind) of
-- in_queue, whose run time is in_at, a head of its group: due at its run
-- time or now, whichever is later, after a head left (or the limit was
-- raised), so that it queues behind the heads that are ready already (round
-- robin); at its run time, which may lie in the past (push_replace moves a
-- blocked message's), when its own push makes it one: that lowers the
-- queue's bound, whose lowering by that write was folded in while the message
-- was blocked. The one step of pyqueue__group_settle and
-- pyqueue__group_settle_k that adds a head; the caller holds the group's row.
CREATE OR REPLACE FUNCTION pyqueue__group_head(in_queue text, in_key text, in_kind text, in_at timestamptz,
                                               in_now timestamptz, in_head_left boolean)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF NOT in_head_left THEN
        PERFORM pyqueue__ready_from_lower(in_queue, in_at, in_now);
    END IF;
    UPDATE pyqueue_message m
       SET scheduled_at = CASE WHEN in_head_left THEN greatest(in_at, in_now) ELSE in_at END
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind;
END;
$$;

-- pyqueue__group_settle: gives in_group of in_queue its head after a change.
-- With in_head_left the head has just left the queue (committed, popped,
-- dead-lettered, moved away, removed): the blocked message first in
-- (scheduled_at_initially, id) order, run time then push order, takes its
-- place; with none left the group's row goes. Otherwise messages have just
-- been pushed into the group, blocked: the group's row is created when
-- missing, and the first of them becomes head when the group has none, or
-- when the head was never delivered, runs later than it and can be locked
-- at once (one a reserve is taking now is not displaced); the displaced
-- head is blocked again. A message that becomes head by its own push is
-- scheduled as a message without a group: at its run time, past or future
-- (now when it had none). One that takes the place of a head that left is
-- due at its run time or now, whichever is later: it queues behind the
-- heads that are ready already, so a group with a long backlog takes its
-- turn after the others (round robin) instead of starving them. A wakeup
-- when it is ready now.
-- Locks: the group's row (created when missing), then the messages it
-- changes; a caller that deleted or inserted a message of the group holds
-- that row's lock already (messages before the group row, in every
-- routine: a reserve never takes a group row, and this function waits for
-- no head's lock). Several groups: the caller settles them in group_key
-- order.
-- A group with a group limit (pyqueue_group_limit: its own row, else the
-- queue's default) goes through pyqueue__group_settle_k instead: one probe
-- of that table, which finds nothing on a queue without group limits.
CREATE OR REPLACE FUNCTION pyqueue__group_settle(in_queue text, in_group text, in_now timestamptz,
                                                 in_head_left boolean)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_head_key  text;
    v_head_kind text;
    v_next      record;
    v_k         integer;
BEGIN
    SELECT l.k INTO v_k
      FROM pyqueue_group_limit l
     WHERE l.queue_name::text = in_queue AND (l.group_key::text = in_group OR l.group_key::text = ''::text)
     ORDER BY l.group_key::text = ''::text
     LIMIT 1;
    IF FOUND THEN
        PERFORM pyqueue__group_settle_k(in_queue, in_group, in_now, in_head_left, v_k);
        RETURN;
    END IF;
    IF in_head_left THEN
        PERFORM 1 FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group
           FOR UPDATE;
    ELSE
        INSERT INTO pyqueue_group AS g (queue_name, group_key) VALUES (in_queue, in_group)
        ON CONFLICT (queue_name, group_key) DO UPDATE SET head_key = g.head_key
        RETURNING g.head_key, g.head_kind INTO v_head_key, v_head_kind;
        IF v_head_key IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM pyqueue_message m
                WHERE m.queue_name::text = in_queue AND m.p_key::text = v_head_key
                  AND m.p_kind::text = v_head_kind AND m.attempts = 0 AND m.reserve_token IS NULL) THEN
            RETURN;  -- the head has been delivered: it keeps its place
        END IF;
    END IF;
    v_next := pyqueue__group_first_blocked(in_queue, in_group);
    IF v_next.out_key IS NULL THEN
        IF v_head_key IS NULL THEN
            DELETE FROM pyqueue_group g WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group;
        END IF;
        RETURN;
    END IF;
    IF v_head_key IS NOT NULL THEN
        PERFORM 1 FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.p_key::text = v_head_key AND m.p_kind::text = v_head_kind
           AND m.attempts = 0 AND m.reserve_token IS NULL AND m.scheduled_at_initially > v_next.out_at
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        UPDATE pyqueue_message m SET scheduled_at = pyqueue__blocked_at()
         WHERE m.queue_name::text = in_queue AND m.p_key::text = v_head_key AND m.p_kind::text = v_head_kind;
    END IF;
    PERFORM pyqueue__group_head(in_queue, v_next.out_key, v_next.out_kind, v_next.out_at, in_now, in_head_left);
    UPDATE pyqueue_group g SET head_key = v_next.out_key, head_kind = v_next.out_kind
     WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group;
    -- wakeup: the new head is ready now, or due later and maybe the earliest (waiters re-time to it)
    PERFORM pyqueue__notify(in_queue);
END;
$$;

-- pyqueue__group_settle_k: pyqueue__group_settle for a group whose limit is
-- in_k (up to in_k heads live at once: ready, delayed or reserved; the
-- others blocked). Under the group's row lock (created when missing, on a
-- push) it counts the group's live messages (pyqueue_message_group_live_idx:
-- a probe of at most a few entries) and, while fewer than in_k are live,
-- makes the first blocked one, in (scheduled_at_initially, id) order, a
-- head: due at its run time or now, whichever is later, after a head left
-- (or the limit was raised), so that it queues behind the heads that are
-- ready already (round robin); at its run time when its own push makes it
-- one. A push into a full group puts its message before the latest head
-- that runs later and was never delivered (and can be locked at once), as
-- with one head. With no head left and nothing blocked the group's row goes;
-- else it names the first head. A wakeup when a new head is ready now.
-- Exact under concurrency: every change of a group's heads happens under
-- its row lock; a head that another transaction is taking out (commit,
-- move, dead letter, ...) and has not committed is still counted, so the
-- count is never too low, and that transaction settles the group after us.
-- Lowering the limit revokes nothing: no head is added until fewer than
-- in_k are live. Locks: the group's row, then the messages it changes.
CREATE OR REPLACE FUNCTION pyqueue__group_settle_k(in_queue text, in_group text, in_now timestamptz,
                                                   in_head_left boolean, in_k integer)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_live      integer;
    v_next      record;
    v_last      record;
    v_displaced boolean := false;
    v_notify    boolean := false;
BEGIN
    IF in_head_left THEN
        PERFORM 1 FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group
           FOR UPDATE;
    ELSE
        INSERT INTO pyqueue_group AS g (queue_name, group_key) VALUES (in_queue, in_group)
        ON CONFLICT (queue_name, group_key) DO UPDATE SET head_key = g.head_key;
    END IF;
    SELECT pg_catalog.count(*)::integer INTO v_live
      FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
       AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00';
    LOOP
        EXIT WHEN in_head_left AND v_live >= in_k;
        v_next := pyqueue__group_first_blocked(in_queue, in_group);
        EXIT WHEN v_next.out_key IS NULL;
        IF v_live >= in_k THEN  -- a push into a full group
            EXIT WHEN v_displaced;
            SELECT m.p_key, m.p_kind INTO v_last
              FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
               AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00'
               AND m.attempts = 0 AND m.reserve_token IS NULL AND m.scheduled_at_initially > v_next.out_at
             ORDER BY m.scheduled_at_initially DESC, m.id DESC
             LIMIT 1
               FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            UPDATE pyqueue_message m SET scheduled_at = pyqueue__blocked_at()
             WHERE m.queue_name::text = in_queue AND m.p_key::text = v_last.p_key::text
               AND m.p_kind::text = v_last.p_kind::text;
            v_live := v_live - 1;
            v_displaced := true;
        END IF;
        PERFORM pyqueue__group_head(in_queue, v_next.out_key, v_next.out_kind, v_next.out_at, in_now, in_head_left);
        v_live := v_live + 1;
        v_notify := true;  -- a new head: ready now, or due later (waiters re-time to it)
    END LOOP;
    IF v_live = 0 THEN
        DELETE FROM pyqueue_group g WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group;
    ELSE
        UPDATE pyqueue_group g
           SET (head_key, head_kind) = (SELECT m.p_key, m.p_kind
                                          FROM pyqueue_message m
                                         WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
                                           AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00'
                                         ORDER BY m.scheduled_at_initially, m.id
                                         LIMIT 1)
         WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group;
    END IF;
    IF v_notify THEN
        PERFORM pyqueue__notify(in_queue);  -- wakeup: a new head is ready now or due later
    END IF;
END;
$$;

-- pyqueue__groups_settle: pyqueue__group_settle(in_head_left) for every
-- group of in_groups (NULL elements and repeats ignored), in group_key
-- order. For the routines that remove many messages at once (a pop, a
-- batch commit). The groups that have a group limit (their own, else the
-- queue's default) settle together, each step one statement for all of
-- them instead of a call each (pyqueue__group_settle_k's steps): their
-- rows locked in group order, their live messages counted (and the first
-- of them read), the first blocked ones each still has room for locked (in
-- (scheduled_at_initially, id) order) and made heads (due at their run time
-- or now, whichever is later), then each group row names its first head:
-- the first of its live messages and of its new heads, both read already,
-- written only where it changes; a group with no live message and no new
-- head goes; one wakeup when a head was added. Under the group rows' locks
-- no other transaction changes the live messages read (a head another one
-- is taking out and has not committed is counted, as in the count, and that
-- transaction settles the group after us), so what the count read is what
-- a read after the promotion would find, less the new heads. A group for
-- which fewer blocked messages were locked than it has room for (one
-- deleted while the lock waited for it) settles again alone
-- (pyqueue__group_settle_k reads anew). Groups without a limit settle one
-- by one, as before. Locks: the group rows in group order, then the
-- messages made heads.
CREATE OR REPLACE FUNCTION pyqueue__groups_settle(in_queue text, in_groups text[], in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_group  text;
    v_each   text[];  -- the distinct groups, in group order
    v_ks     integer[];  -- each one's limit (NULL: none)
    v_k      integer;
    v_limted text[];
    v_lks    integer[];
    v_firsts text[];  -- each one's first head: key, kind (NULL: none)
    v_fkinds text[];
    v_tids   tid[];
    v_gtids  tid[];  -- each one's row (NULL: none)
    v_gone   tid[];
    v_short  text[];
    v_one    record;
BEGIN
    SELECT pg_catalog.array_agg(d.g ORDER BY d.g) INTO v_each
      FROM (SELECT DISTINCT u.g FROM pg_catalog.unnest(in_groups) AS u (g) WHERE u.g IS NOT NULL) d;
    IF v_each IS NULL THEN
        RETURN;
    END IF;
    -- each group's limit: its own row, else the queue's default (''); with no row of a named group
    -- (the common case), the default for all, one probe
    SELECT l.k INTO v_k
      FROM pyqueue_group_limit l
     WHERE l.queue_name::text = in_queue
     ORDER BY l.group_key::text <> ''::text
     LIMIT 1;
    IF FOUND AND NOT EXISTS (SELECT 1 FROM pyqueue_group_limit l
                              WHERE l.queue_name::text = in_queue AND l.group_key::text <> ''::text) THEN
        v_limted := v_each;
        v_lks := pg_catalog.array_fill(v_k, ARRAY[pg_catalog.cardinality(v_each)]);
    ELSIF FOUND THEN
        SELECT pg_catalog.array_agg(
                   (SELECT l.k FROM pyqueue_group_limit l
                     WHERE l.queue_name::text = in_queue AND (l.group_key::text = u.g OR l.group_key::text = ''::text)
                     ORDER BY l.group_key::text = ''::text
                     LIMIT 1) ORDER BY u.o)
          INTO v_ks
          FROM pg_catalog.unnest(v_each) WITH ORDINALITY AS u (g, o);
        SELECT pg_catalog.array_agg(u.g ORDER BY u.o), pg_catalog.array_agg(u.k ORDER BY u.o) INTO v_limted, v_lks
          FROM ROWS FROM (pg_catalog.unnest(v_each), pg_catalog.unnest(v_ks)) WITH ORDINALITY AS u (g, k, o)
         WHERE u.k IS NOT NULL;
    END IF;
    IF v_limted IS NOT NULL THEN
        -- the rows of the groups with a limit, in group order, each found by its key (their ctids:
        -- the later writes find them by those, a TID scan, not a read of every group of the queue)
        SELECT pg_catalog.array_agg(l.tid ORDER BY u.o) INTO v_gtids
          FROM pg_catalog.unnest(v_limted) WITH ORDINALITY AS u (g, o)
          LEFT JOIN LATERAL (SELECT g.ctid AS tid FROM pyqueue_group g
                              WHERE g.queue_name::text = in_queue AND g.group_key::text = u.g
                                FOR UPDATE) l ON true;
        -- Under those locks, for each: the room it has, its limit less its live messages (a head
        -- another transaction is taking out and has not committed is still counted: never too low),
        -- read with the first of them; then its first blocked messages, as many as its room, locked
        -- (in (scheduled_at_initially, id) order: the first row is the first new head); its first head
        -- is its first live message or its first new head, whichever comes first (none: the group
        -- goes). A group that got fewer than its room (one deleted while the lock waited) is short.
        SELECT pg_catalog.array_agg(f.tid) FILTER (WHERE f.tid IS NOT NULL),
               pg_catalog.array_agg(u.g) FILTER (WHERE f.rn = 1 AND f.cnt < u.k - coalesce(c.n, 0)),
               pg_catalog.array_agg(CASE WHEN f.rn IS NULL OR (c.fat, c.fid) < (f.at, f.id) THEN c.fk ELSE f.k END
                                    ORDER BY u.o) FILTER (WHERE f.rn IS NULL OR f.rn = 1),
               pg_catalog.array_agg(CASE WHEN f.rn IS NULL OR (c.fat, c.fid) < (f.at, f.id) THEN c.fkd ELSE f.kd END
                                    ORDER BY u.o) FILTER (WHERE f.rn IS NULL OR f.rn = 1)
          INTO v_tids, v_short, v_firsts, v_fkinds
          FROM ROWS FROM (pg_catalog.unnest(v_limted), pg_catalog.unnest(v_lks)) WITH ORDINALITY AS u (g, k, o)
          LEFT JOIN LATERAL (SELECT pg_catalog.count(*) OVER ()::integer AS n, m.p_key::text AS fk,
                                    m.p_kind::text AS fkd, m.scheduled_at_initially AS fat, m.id AS fid
                               FROM pyqueue_message m
                              WHERE m.queue_name::text = in_queue AND m.group_key::text = u.g
                                AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00'
                              ORDER BY m.scheduled_at_initially, m.id
                              LIMIT 1) c ON true
          LEFT JOIN LATERAL (SELECT b.tid, b.k, b.kd, b.at, b.id,
                                    pg_catalog.row_number() OVER () AS rn, pg_catalog.count(*) OVER () AS cnt
                               FROM (SELECT m.ctid AS tid, m.p_key::text AS k, m.p_kind::text AS kd,
                                            m.scheduled_at_initially AS at, m.id
                                       FROM pyqueue_message m
                                      WHERE m.queue_name::text = in_queue AND m.group_key::text = u.g
                                        AND m.scheduled_at = pyqueue__blocked_at()
                                      ORDER BY m.scheduled_at_initially, m.id
                                      LIMIT GREATEST(u.k - coalesce(c.n, 0), 0)
                                        FOR UPDATE) b) f ON true;
        IF v_tids IS NOT NULL THEN
            UPDATE pyqueue_message m
               SET scheduled_at = GREATEST(m.scheduled_at_initially, in_now)
             WHERE m.ctid = ANY (v_tids) AND m.scheduled_at = pyqueue__blocked_at();
        END IF;
        -- each group row names its first head, where that changed; a group with none goes
        UPDATE pyqueue_group g
           SET head_key = u.fk, head_kind = u.fkd
          FROM ROWS FROM (pg_catalog.unnest(v_gtids), pg_catalog.unnest(v_firsts), pg_catalog.unnest(v_fkinds))
               AS u (tid, fk, fkd)
         WHERE g.ctid = ANY (v_gtids) AND g.ctid = u.tid AND u.fk IS NOT NULL
           AND (g.head_key::text IS DISTINCT FROM u.fk OR g.head_kind::text IS DISTINCT FROM u.fkd);
        SELECT pg_catalog.array_agg(u.tid) INTO v_gone
          FROM ROWS FROM (pg_catalog.unnest(v_gtids), pg_catalog.unnest(v_firsts)) AS u (tid, fk)
         WHERE u.fk IS NULL AND u.tid IS NOT NULL;
        IF v_gone IS NOT NULL THEN
            DELETE FROM pyqueue_group g WHERE g.ctid = ANY (v_gone);
        END IF;
        IF v_tids IS NOT NULL THEN
            PERFORM pyqueue__notify(in_queue);  -- wakeup: a new head is ready now or due later
        END IF;
        -- a group whose blocked messages were fewer than its room when locked: settled again, alone
        FOR v_one IN SELECT u.g, u.k
                       FROM ROWS FROM (pg_catalog.unnest(v_limted), pg_catalog.unnest(v_lks)) AS u (g, k)
                      WHERE u.g = ANY (coalesce(v_short, '{}'))
                      ORDER BY u.g LOOP
            IF EXISTS (SELECT 1 FROM pyqueue_message m
                        WHERE m.queue_name::text = in_queue AND m.group_key::text = v_one.g
                          AND m.scheduled_at = pyqueue__blocked_at()) THEN
                PERFORM pyqueue__group_settle_k(in_queue, v_one.g, in_now, true, v_one.k);
            END IF;
        END LOOP;
    END IF;
    IF v_limted IS NULL OR pg_catalog.cardinality(v_limted) < pg_catalog.cardinality(v_each) THEN
        FOR v_group IN SELECT u.g FROM pg_catalog.unnest(v_each) AS u (g)
                        WHERE u.g <> ALL (coalesce(v_limted, '{}')) ORDER BY u.g LOOP
            PERFORM pyqueue__group_settle(in_queue, v_group, in_now, true);
        END LOOP;
    END IF;
END;
$$;

-- queue_set_group_limit: up to in_k messages of a FIFO group live at once
-- (its heads: ready, delayed or reserved), started in the group's order,
-- instead of one. in_group NULL sets the queue's default for every group; a
-- named group's limit overrides it. in_k 1..10000; NULL removes the limit
-- (back to the default, or to 1). Raising it lets each group concerned take
-- its new heads at once (due now or at their run time, whichever is later:
-- behind the heads already ready); lowering it revokes nothing (no head is
-- added until fewer than k are live). Removing the last limit that applies
-- to a group whose heads are more than one leaves them live and gives the
-- group a limit of 1 of its own (shown by queue_groups as before: 1), so
-- that no head is added until they end. Locks: the limit row, then each
-- group concerned (in group order) as pyqueue__group_settle does.
CREATE OR REPLACE FUNCTION queue_set_group_limit(in_queue text, in_group text, in_k integer)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_group text := coalesce(in_group, '');  -- '' = the queue's default
    v_now   timestamptz;
    v_each  text;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    IF in_group IS NOT NULL THEN
        PERFORM pyqueue__check_name('group', in_group, 255);
    END IF;
    IF in_k IS NULL THEN
        DELETE FROM pyqueue_group_limit WHERE queue_name::text = in_queue AND group_key::text = v_group;
        -- A group left without any limit settles as with one head, blind to more: one that has
        -- several heads keeps a limit of 1 of its own, which counts them until fewer are live.
        -- Under the groups' row locks (in group order): no settle changes their heads meanwhile.
        PERFORM 1 FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND (in_group IS NULL OR g.group_key::text = in_group)
         ORDER BY g.group_key::text
           FOR UPDATE;
        INSERT INTO pyqueue_group_limit (queue_name, group_key, k)
        SELECT in_queue, g.group_key, 1
          FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND (in_group IS NULL OR g.group_key::text = in_group)
           AND NOT EXISTS (SELECT 1 FROM pyqueue_group_limit l
                            WHERE l.queue_name::text = in_queue
                              AND (l.group_key::text = g.group_key::text OR l.group_key::text = ''::text))
           AND (SELECT pg_catalog.count(*) FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue AND m.group_key::text = g.group_key::text
                   AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00') > 1::bigint
        ON CONFLICT (queue_name, group_key) DO NOTHING;
        RETURN;
    END IF;
    IF in_k < 1 OR in_k > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: k must be from 1 to 10000 (NULL removes the group limit)'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now := pg_catalog.clock_timestamp();
    INSERT INTO pyqueue_group_limit AS l (queue_name, group_key, k)
    VALUES (in_queue, v_group, in_k)
    ON CONFLICT (queue_name, group_key) DO UPDATE SET k = EXCLUDED.k;
    FOR v_each IN
        SELECT g.group_key::text FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND (in_group IS NULL OR g.group_key::text = in_group)
         ORDER BY g.group_key::text
    LOOP
        PERFORM pyqueue__group_settle(in_queue, v_each, v_now, true);
    END LOOP;
END;
$$;
