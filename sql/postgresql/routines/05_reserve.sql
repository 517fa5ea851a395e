-- ==== reserve ====
-- Take messages out: reserve them (at-least-once: each reservation shows a
-- token that every later step must show) or pop them (at-most-once), and the
-- walk over the ready rows behind both.

-- pyqueue__check_kinds: raises unless a kinds filter is NULL (any kind) or
-- a non-empty array of at most 10000 kinds of at most 128 characters
-- without NULLs.
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_kinds(in_kinds text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_kinds IS NOT NULL AND (pg_catalog.cardinality(in_kinds) = 0 OR pg_catalog.array_position(in_kinds, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: kinds must be NULL or a non-empty array without NULLs'
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.cardinality(in_kinds) > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: kinds holds % kinds; a filter takes at most 10000',
            pg_catalog.cardinality(in_kinds) USING ERRCODE = '22023';
    END IF;
    IF in_kinds IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(in_kinds) k(kind) WHERE pg_catalog.length(k.kind) > 128) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: kinds must not hold a kind longer than 128 characters'
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- pyqueue__check_reserve: the argument checks of queue_reserve and
-- queue_commit_reserve (n, timeout, worker, kinds). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_reserve(in_worker text, in_timeout interval, in_n integer, in_kinds text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM pyqueue__check_batch_size(in_n);
    PERFORM pyqueue__check_duration('timeout', in_timeout, true);
    IF in_worker IS NOT NULL AND pg_catalog.length(in_worker) > 255 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: worker is longer than 255 characters' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_kinds(in_kinds);
END;
$$;

-- pyqueue__ready_from_lower: keeps the queue's ready_from a lower bound after
-- a write of a message at in_at (in_now: the writer's clock, read after its
-- transaction took its id). A proposed bound (pyqueue__ready_from_advance)
-- is the proposer's clock minus a second and becomes the bound only once
-- every transaction whose id is not above the proposer's has ended; a
-- transaction with a higher id took it after that clock was read, so a
-- message it writes at in_now, or up to half a second before, is above
-- every bound that could miss it: nothing to do. An earlier in_at is
-- recorded in pyqueue_ready_lower, visible with the message when the writer
-- commits, until an advance that sees both folds it in. Locks nothing but
-- the new row: never waits.
CREATE OR REPLACE FUNCTION pyqueue__ready_from_lower(in_queue text, in_at timestamptz, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF in_at IS NOT NULL AND in_at < in_now - interval '0.5 seconds' THEN
        INSERT INTO pyqueue_ready_lower (queue_name, lowered_to) VALUES (in_queue, in_at);
    END IF;
END;
$$;

-- pyqueue__ready_from_held: whether a transaction of this database whose id
-- is not above in_xid may still be open (a session's, or a prepared one).
-- Ids are cluster-wide, so the snapshot's xmin alone (what the caller tests
-- first) waits for transactions of every database: only one of this
-- database writes its messages. The sessions' ids as pg_stat_activity shows
-- them (a 32-bit xid, compared by age to in_xid's: an older id is older by
-- more), read only when that xmin is at or below in_xid. A backend shows
-- its id from the moment it is assigned until its transaction has ended,
-- so none above in_xid but open before is missed. No locks.
CREATE OR REPLACE FUNCTION pyqueue__ready_from_held(in_xid xid8)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                    WHERE a.datname = pg_catalog.current_database() AND a.backend_xid IS NOT NULL
                      AND pg_catalog.age(a.backend_xid) >= pg_catalog.age(in_xid::xid))
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_xacts p
                    WHERE p.database = pg_catalog.current_database()
                      AND pg_catalog.age(p.transaction) >= pg_catalog.age(in_xid::xid))
$$;

-- pyqueue__ready_from_advance: moves the queue's ready_from up. Called by
-- a reserve, pop or commit_reserve at READ COMMITTED whose transaction has
-- no id yet, at most once a second per queue, and only when no other transaction is moving it (SKIP
-- LOCKED: never waits); in_clock is the caller's clock, read before. The
-- row lock gives this transaction its id, after in_clock: every transaction
-- with a higher id takes it later, and reads the clock for what it writes
-- after that (the writers take their id first), so it writes nothing below
-- in_clock minus half a second unless it records a lowering.
-- A step: once every transaction of this database whose id is not above
-- the pending proposal's (next_xid) has ended (pyqueue__ready_from_held),
-- (ready_from, ready_from_id) becomes the first live message by (scheduled_at, id) from the current start up to
-- next_from, else (next_from, NULL) (one read of the due index from the
-- start, past the dead entries of that interval: the walk the reserves no
-- longer make), the pyqueue_ready_lower rows it sees folded in first (a
-- lowering to or below ready_from drops the id from the start). Then it
-- proposes in_clock minus a second with its own id, and
-- notes the queue's top priority (where the reserve's walk starts; the noted
-- one kept while a message of it is there from the bound on, see below). While
-- the pending proposal cannot be made the bound yet (a transaction at or
-- below its id is still open), the step only notes its time (the next try
-- is a second on). Locks the queue's
-- pyqueue_ready_from row until the caller's transaction ends (a reserve
-- inside a longer transaction keeps it, and the others skip the step).
CREATE OR REPLACE FUNCTION pyqueue__ready_from_advance(in_queue text, in_clock timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_row      pyqueue_ready_from;
    v_lowered  timestamptz;
    v_first    timestamptz;
    v_first_id bigint;
    v_top      integer;
BEGIN
    SELECT * INTO v_row FROM pyqueue_ready_from r
     WHERE r.queue_name::text = in_queue AND r.moved_at < in_clock - interval '1 second'
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_row.next_xid IS NOT NULL THEN
        IF pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()) <= v_row.next_xid
           AND pyqueue__ready_from_held(v_row.next_xid) THEN
            -- a transaction of this database not above the proposal's id
            -- may still write below it: the proposal waits, and the next
            -- try is a second on
            UPDATE pyqueue_ready_from r SET moved_at = in_clock WHERE r.queue_name::text = in_queue;
            RETURN;
        END IF;
        -- the lowerings first: the read below, a later snapshot, sees the
        -- messages of every lowering this statement saw
        WITH gone AS (
            DELETE FROM pyqueue_ready_lower l WHERE l.queue_name::text = in_queue RETURNING l.lowered_to
        )
        SELECT pg_catalog.min(g.lowered_to) INTO v_lowered FROM gone g;
        IF v_lowered <= v_row.ready_from THEN
            v_row.ready_from := v_lowered;
            v_row.ready_from_id := NULL;
        END IF;
        -- ids are positive: (ready_from, 0) when any id may be at ready_from
        SELECT m.scheduled_at, m.id INTO v_first, v_first_id
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue
           AND m.scheduled_at < 'infinity'
           AND (m.scheduled_at, m.id) >= (v_row.ready_from, coalesce(v_row.ready_from_id, 0))
           AND m.scheduled_at < v_row.next_from
         ORDER BY m.scheduled_at, m.id
         LIMIT 1;
        v_row.ready_from := coalesce(v_first, v_row.next_from);
        v_row.ready_from_id := v_first_id;
    END IF;
    -- The top priority: a higher one than the noted when a message of it is there (a probe past the
    -- noted top, which stops at once when there is none), else the noted one while a message of it is
    -- there from the bound on (a read of that priority from the bound), else the top of the index. That
    -- last read walks back over the entries of the messages committed while reserved, which a held xmin
    -- horizon keeps at the index's end (a second of it per second at full churn): the first two do not.
    SELECT m.priority INTO v_top
      FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.scheduled_at > '-infinity' AND m.priority > v_row.top_priority
     ORDER BY m.priority DESC LIMIT 1;
    IF v_top IS NULL AND EXISTS (
        SELECT 1 FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.priority = v_row.top_priority
           AND m.scheduled_at > '-infinity'
           AND (m.scheduled_at, m.id) >= (v_row.ready_from, coalesce(v_row.ready_from_id, 0))) THEN
        v_top := v_row.top_priority;
    END IF;
    IF v_top IS NULL THEN
        SELECT m.priority INTO v_top
          FROM pyqueue_message m WHERE m.queue_name::text = in_queue AND m.scheduled_at > '-infinity'
         ORDER BY m.priority DESC LIMIT 1;
    END IF;
    UPDATE pyqueue_ready_from r
       SET ready_from   = v_row.ready_from,
           ready_from_id = v_row.ready_from_id,
           top_priority = coalesce(v_top, v_row.top_priority, 0),
           next_from    = in_clock - interval '1 second',
           next_xid     = pg_catalog.pg_current_xact_id(),
           moved_at     = in_clock
     WHERE r.queue_name::text = in_queue;
END;
$$;

-- pyqueue__ready_tids: locks up to in_n ready messages of a queue (of one
-- of in_kinds, NULL = any), highest priority first, FIFO within a priority,
-- skipping rows other transactions hold (SKIP LOCKED); returns their ctids
-- in that order (NULL when none). The ctids stay valid while the caller
-- holds the locks (until its transaction ends), so the caller updates or
-- deletes the rows by ctid, without a second search.
-- Cost model: walks the priorities from the highest through
-- pyqueue_message_ready_idx, one index probe per priority, each reading only
-- the ready range of that priority (delayed and reserved rows lie past its
-- end). A priority that yields no row (all its messages wait, or are locked)
-- is an empty step; after 8 empty steps the rest is read through
-- pyqueue_message_due_idx (pyqueue__due_tids): the ready rows of the lower
-- priorities, sorted. So a reserve costs at most 8 empty probes plus one
-- probe per priority it takes rows from, or, past that, the number of ready
-- rows below the priorities walked: never the number of distinct priorities
-- among waiting messages. Every range of the walk starts at the queue's
-- bound, (ready_from, ready_from_id) of pyqueue_ready_from, not before the
-- dead index entries that a held xmin horizon keeps (inside a run of
-- messages that share one scheduled_at too; the read by time starts at the
-- bound's time). Both ends of a range are row
-- comparisons on (scheduled_at, id), which the index reads as its start and
-- end: a plain scheduled_at <= now would let a plan made for a given now
-- prove the due index's condition and read that index instead, filtering by
-- priority. Queues with concurrency limits or rate limits go through
-- pyqueue__limited_tids. Caller holds the locks until its transaction ends.
-- The session's mark (in_mark: a reserve's call, pyqueue__reserve; of 2 or
-- more messages, without a kinds filter; not pop's): under a held xmin
-- horizon the range from the bound still holds the dead entries of every
-- message reserved since the bound's time (it lags the clock by a second or
-- more: at full churn thousands of entries, each one's row checked). So the
-- first step of the walk that finds a ready message keeps in the session's
-- settings (pyqueue.ready_queue: database, schema and queue; _priority, _at,
-- _id) the first candidate it found, read plainly: a message another
-- transaction holds is one, so that one is not left behind when that
-- transaction rolls back. While the mark is live (pyqueue.ready_full not
-- passed, and no lowering at or before it), the step of its priority reads
-- the first in_n candidates plainly from the mark (or from the bound, if
-- that is past it), moves the mark to the first, and locks from there; when
-- fewer than it wants turn up there, it reads from the bound, as a step
-- without a live mark does. A read from the bound finds the mark anew (its
-- first candidate, plainly, after its locking read) and sets
-- pyqueue.ready_full: 20 times what those reads took, at most 60 s, after it
-- (so those reads take at most a twenty-first of a busy session's time). A
-- message that becomes ready before the mark (a run_at in the past whose
-- lowering an advance folded in first, a push committed late, a reservation
-- that expired) waits for that read from the bound, or for a reserve that
-- finds fewer than it wants after the mark. Settings are transactional: a
-- reserve rolled back leaves the mark it found. The mark is taken only after
-- a slow read from the bound: its locking read took pyqueue.mark_after or
-- more (a session setting, an interval; unset: 1 ms and 10 us a message
-- wanted; '0': always). Without a held horizon that read steps over few dead
-- entries and takes well under that, and the mark's own read would be an
-- extra read of n entries a call. A fast read from the bound while the mark
-- is live (fewer than n after it) moves the mark and leaves its time: once
-- that has passed, only a slow read takes it again. A full time further than 60 s ahead was not set here (the session
-- wrote it): the mark is not live.
-- o_tids: the ctids; o_at: the reservation time of the pass when it took a
-- unit of a rate (pyqueue__limited_tids), else NULL: the caller then makes it
-- the lease start of what it reserves.
CREATE OR REPLACE FUNCTION pyqueue__ready_tids(in_queue text, in_now timestamptz, in_n integer, in_kinds text[],
                                               in_advance boolean DEFAULT false, in_mark boolean DEFAULT false,
                                               OUT o_tids tid[], OUT o_at timestamptz)
LANGUAGE plpgsql
SET enable_sort = off  -- every read here is in the ready index's order: never a sort (see the first)
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_priority integer;
    v_left     integer := in_n;
    v_tids     tid[];
    v_step     tid[];
    v_empty    integer := 0;
    v_from     timestamptz;
    v_from_id  bigint;
    v_lowered  timestamptz;
    v_moved    timestamptz;
    v_limited  boolean;
    v_mark     boolean := in_mark AND in_n >= 2 AND in_kinds IS NULL;  -- a step may read from the mark / set it
    v_key      text;
    v_live     boolean := false;
    v_mpri     integer;
    v_mat      timestamptz;
    v_mid      bigint;
    v_at       timestamptz;
    v_id       bigint;
    v_got      integer;
    v_t0       timestamptz;
    v_after    interval;
    v_found    boolean;
    v_slow     boolean;
BEGIN
    -- One read for where the walk starts: the queue's bound (ready_from,
    -- ready_from_id; lowered by any pyqueue_ready_lower row), whether it has
    -- concurrency limits or rate limits,
    -- and its top priority: the one the last advance saw, or a higher one
    -- when a message of it is there (that probe reads the end of the ready
    -- index past the noted top and stops at once when there is none), or,
    -- when none was noted, the top of the index (a read that walks back
    -- over the entries of messages committed while reserved, which a held
    -- xmin horizon keeps: what the noted top avoids). Without statistics the
    -- planner costs a read of the queue by its key and a sort of it the same
    -- as that probe: the function's setting rules the sort out.
    SELECT rf.ready_from, rf.ready_from_id,
           (SELECT pg_catalog.min(l.lowered_to) FROM pyqueue_ready_lower l WHERE l.queue_name::text = in_queue),
           coalesce((SELECT m.priority FROM pyqueue_message m
                      WHERE m.queue_name::text = in_queue AND m.scheduled_at > '-infinity'
                        AND m.priority > coalesce(rf.top_priority, -2147483649::bigint)
                      ORDER BY m.priority DESC LIMIT 1), rf.top_priority),
           rf.moved_at,
           EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name::text = in_queue)
           OR EXISTS (SELECT 1 FROM pyqueue_rate r WHERE r.queue_name::text = in_queue)
      INTO v_from, v_from_id, v_lowered, v_priority, v_moved, v_limited
      FROM (SELECT) AS one  -- one row, with or without the queue's pyqueue_ready_from row
      LEFT JOIN pyqueue_ready_from rf ON rf.queue_name::text = in_queue;
    IF in_advance AND v_moved < in_now - interval '1 second'
       AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL
       AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        -- in_now was read before this transaction had an id: the advance's
        -- proposal may take it as its clock
        PERFORM pyqueue__ready_from_advance(in_queue, in_now);
        SELECT rf.ready_from, rf.ready_from_id,
               (SELECT pg_catalog.min(l.lowered_to) FROM pyqueue_ready_lower l WHERE l.queue_name::text = in_queue),
               rf.top_priority
          INTO v_from, v_from_id, v_lowered, v_priority
          FROM pyqueue_ready_from rf WHERE rf.queue_name::text = in_queue;
    END IF;
    IF v_from IS NULL THEN  -- no bound row: from the start
        v_from := '-infinity';
        v_from_id := NULL;
    ELSIF v_lowered <= v_from THEN  -- a lowering at or below the bound: any id from there
        v_from := v_lowered;
        v_from_id := NULL;
    END IF;
    v_from_id := coalesce(v_from_id, 0);  -- ids are positive
    IF v_priority IS NULL THEN
        SELECT m.priority INTO v_priority
          FROM pyqueue_message m WHERE m.queue_name::text = in_queue AND m.scheduled_at > '-infinity'
         ORDER BY m.priority DESC LIMIT 1;
    END IF;
    IF v_limited THEN  -- limits or rates
        SELECT lt.o_tids, lt.o_at INTO o_tids, o_at
          FROM pyqueue__limited_tids(in_queue, in_now, in_n, in_kinds, v_from, v_from_id, v_priority) lt;
        RETURN;
    END IF;
    IF v_mark THEN  -- the session's mark (see above), when it is this queue's and live
        v_key := pg_catalog.format('%I.%I.%I', pg_catalog.current_database(), pg_catalog.current_schema(), in_queue);
        v_after := coalesce(NULLIF(pg_catalog.current_setting('pyqueue.mark_after', true), '')::interval,
                            interval '1 millisecond' + in_n * interval '10 microseconds');
        IF v_after < interval '0' THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: pyqueue.mark_after must not be negative (it is %)', v_after
                USING ERRCODE = '22023';
        END IF;
        v_t0 := pg_catalog.clock_timestamp();
        IF pg_catalog.current_setting('pyqueue.ready_queue', true) = v_key
           AND NULLIF(pg_catalog.current_setting('pyqueue.ready_full', true), '')::timestamptz
               BETWEEN v_t0 AND v_t0 + interval '60 seconds' THEN  -- (a later time was not set here)
            v_mpri := pg_catalog.current_setting('pyqueue.ready_priority')::integer;
            v_mat := pg_catalog.current_setting('pyqueue.ready_at')::timestamptz;
            v_mid := pg_catalog.current_setting('pyqueue.ready_id')::bigint;
            v_live := v_lowered IS NULL OR v_lowered > v_mat;  -- a lowering at or before it: from the bound
        END IF;
    END IF;
    WHILE v_priority IS NOT NULL LOOP
        IF v_empty >= 8 THEN
            o_tids := v_tids || pyqueue__due_tids(in_queue, in_now, v_left, in_kinds, v_priority, v_from, v_from_id);
            RETURN;
        END IF;
        v_at := v_from;
        v_id := v_from_id;
        v_found := false;
        IF v_mark AND v_live AND v_priority = v_mpri THEN  -- this step reads from the mark
            IF (v_mat, v_mid) > (v_from, v_from_id) THEN
                v_at := v_mat;
                v_id := v_mid;
            END IF;
            -- up to v_left candidates from there, read plainly (nothing locked): the first and how many
            SELECT c.scheduled_at, c.id, pg_catalog.count(*) OVER () INTO v_mat, v_mid, v_got
              FROM (SELECT m.scheduled_at, m.id
                      FROM pyqueue_message m
                     WHERE m.queue_name::text = in_queue
                       AND m.priority = v_priority
                       AND m.scheduled_at > '-infinity' AND (m.scheduled_at, m.id) >= (v_at, v_id)
                       AND (m.scheduled_at, m.id) <= (in_now, 9223372036854775807)
                     ORDER BY m.scheduled_at, m.id
                     LIMIT v_left) AS c
             LIMIT 1;
            IF coalesce(v_got, 0) >= v_left THEN  -- the mark moves to the first candidate; the step locks from it
                v_at := v_mat;
                v_id := v_mid;
                v_found := true;
                PERFORM pg_catalog.set_config('pyqueue.ready_at',
                                              pg_catalog.to_char(pg_catalog.timezone('UTC', v_at),
                                                                 'YYYY-MM-DD"T"HH24:MI:SS.US"Z" BC'), false),
                        pg_catalog.set_config('pyqueue.ready_id', v_id::text, false);
            ELSE  -- fewer than wanted: from the bound
                v_at := v_from;
                v_id := v_from_id;
            END IF;
        END IF;
        v_t0 := pg_catalog.clock_timestamp();
        SELECT pg_catalog.array_agg(r.tid) INTO v_step
          FROM (SELECT m.ctid AS tid
                  FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue
                   AND m.priority = v_priority
                   AND m.scheduled_at > '-infinity' AND (m.scheduled_at, m.id) >= (v_at, v_id)
                   AND (m.scheduled_at, m.id) <= (in_now, 9223372036854775807)
                   AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                 ORDER BY m.scheduled_at, m.id
                 LIMIT v_left
                   FOR UPDATE SKIP LOCKED) AS r;
        IF v_mark AND NOT v_found THEN  -- read from the bound
            v_slow := pg_catalog.clock_timestamp() - v_t0 >= v_after;
            IF v_slow OR v_live THEN
                -- its first candidate, read plainly, is the mark; a slow read sets its time: 20 times what the
                -- reads from the bound took (a fast one leaves a live mark's time as it was)
                SELECT m.scheduled_at, m.id INTO v_mat, v_mid
                  FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue
                   AND m.priority = v_priority
                   AND m.scheduled_at > '-infinity' AND (m.scheduled_at, m.id) >= (v_from, v_from_id)
                   AND (m.scheduled_at, m.id) <= (in_now, 9223372036854775807)
                 ORDER BY m.scheduled_at, m.id
                 LIMIT 1;
                IF v_mat IS NOT NULL THEN
                    v_found := true;
                    PERFORM pg_catalog.set_config('pyqueue.ready_queue', v_key, false),
                            pg_catalog.set_config('pyqueue.ready_priority', v_priority::text, false),
                            pg_catalog.set_config('pyqueue.ready_at',
                                                  pg_catalog.to_char(pg_catalog.timezone('UTC', v_mat),
                                                                     'YYYY-MM-DD"T"HH24:MI:SS.US"Z" BC'), false),
                            pg_catalog.set_config('pyqueue.ready_id', v_mid::text, false);
                    IF v_slow THEN
                        PERFORM pg_catalog.set_config('pyqueue.ready_full', pg_catalog.to_char(pg_catalog.timezone('UTC',
                                    pg_catalog.clock_timestamp() + LEAST(interval '60 seconds',
                                        20 * (pg_catalog.clock_timestamp() - v_t0))), 'YYYY-MM-DD"T"HH24:MI:SS.US"Z" BC'),
                                    false);
                    END IF;
                END IF;
            END IF;
        END IF;
        v_mark := v_mark AND NOT v_found AND v_step IS NULL;  -- the first step that found a message ends the mark's part
        IF v_step IS NULL THEN
            v_empty := v_empty + 1;
        ELSE
            v_tids := v_tids || v_step;
            v_left := v_left - pg_catalog.cardinality(v_step);
            EXIT WHEN v_left <= 0;
        END IF;
        SELECT m.priority INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.priority < v_priority AND m.scheduled_at > '-infinity'
         ORDER BY m.priority DESC LIMIT 1;
    END LOOP;
    o_tids := v_tids;
END;
$$;

-- pyqueue__due_tids: pyqueue__ready_tids past its empty steps: locks up to
-- in_n ready messages of priority in_priority or lower (those above were
-- walked already), in reserve order, reading the ready rows through
-- pyqueue_message_due_idx (queue_name, scheduled_at, id) and sorting them: its
-- cost is the number of ready rows, whatever the waiting ones. The
-- settings make that plan independent of the table statistics (stale ones
-- would pick a scan of the whole queue); the priority bound is written as a
-- bigint comparison so that it cannot be an index condition of
-- pyqueue_message_ready_idx (that index scan would read the waiting rows).
CREATE OR REPLACE FUNCTION pyqueue__due_tids(in_queue text, in_now timestamptz, in_n integer, in_kinds text[],
                                             in_priority integer, in_from timestamptz, in_from_id bigint)
RETURNS tid[]
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_incremental_sort = off
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN (SELECT pg_catalog.array_agg(r.tid)
              FROM (SELECT m.ctid AS tid
                      FROM pyqueue_message m
                     WHERE m.queue_name::text = in_queue
                       AND m.scheduled_at < 'infinity' AND (m.scheduled_at, m.id) >= (in_from, in_from_id)
                       AND m.scheduled_at <= in_now
                       AND m.priority::bigint <= in_priority::bigint
                       AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                     ORDER BY m.priority DESC, m.scheduled_at, m.id
                     LIMIT in_n
                       FOR UPDATE SKIP LOCKED) AS r);
END;
$$;

-- pyqueue__clock_text: in_now as the header pyqueue.expires_at writes a
-- time (UTC, YYYY-MM-DDTHH:MM:SS.ffffffZ), for pyqueue__expired. No locks.
CREATE OR REPLACE FUNCTION pyqueue__clock_text(in_now timestamptz)
RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT pg_catalog.to_char(pg_catalog.timezone('UTC'::text, in_now), 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'::text) $$;

-- pyqueue__expired: whether a message with these headers has expired at
-- in_clock (pyqueue__clock_text): its pyqueue.expires_at (checked on every
-- push that writes headers, pyqueue__check_expires) is at or before it,
-- and it is no dead letter (in_dead_from NULL: dead letters are evidence,
-- never ended but by an admin; a redrive clears dead_from and the expiry
-- holds again). A comparison of texts of one fixed format in the "C"
-- collation (the order of the times), inlined into the statement that
-- calls it; false without headers. No locks.
CREATE OR REPLACE FUNCTION pyqueue__expired(in_headers jsonb, in_dead_from text, in_clock text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT in_headers IS NOT NULL AND in_dead_from IS NULL  -- (the common row, without headers: one NULL test)
           AND coalesce((in_headers ->> 'pyqueue.expires_at'::text) COLLATE "C" <= in_clock COLLATE "C", false)
$$;

-- pyqueue__expire: ends a message whose pyqueue.expires_at has passed, which
-- a reserve or pop found and holds locked at in_tid: removed as queue_cancel
-- removes a message nobody holds (pyqueue__finish: a group's next message
-- moves up, a schedule's pending occurrence makes way for the next, history
-- outcome 'cancelled', result 'cancelled', the messages that wait for it
-- cancelled as for a cancel), with last_error 'expired at <expires_at>'.
-- The caller's session hears of it: a NOTICE 'pyqueue:expired' whose DETAIL
-- is a JSON object (queue, key, kind, expires_at, at: the times as the header
-- writes them), which a worker's notice handler logs and counts; nothing is
-- sent for a message that did not expire.
-- Locks: the message row (held already), then as pyqueue__finish.
CREATE OR REPLACE FUNCTION pyqueue__expire(in_queue pyqueue_queue, in_tid tid)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_msg pyqueue_message;
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    DELETE FROM pyqueue_message m WHERE m.ctid = in_tid RETURNING * INTO v_msg;
    IF FOUND THEN
        v_msg.last_error := 'expired at ' || (v_msg.headers ->> 'pyqueue.expires_at'::text);
        PERFORM pyqueue__finish(in_queue, v_msg, 'cancelled', 'cancelled', NULL, v_now);
        RAISE NOTICE USING MESSAGE = 'pyqueue:expired',
            DETAIL = pg_catalog.jsonb_build_object('queue'::text, v_msg.queue_name, 'key'::text, v_msg.p_key,
                                                   'kind'::text, v_msg.p_kind,
                                                   'expires_at'::text, v_msg.headers -> 'pyqueue.expires_at'::text,
                                                   'at'::text, pyqueue__clock_text(v_now))::text;
    END IF;
END;
$$;

-- pyqueue__reserve: queue_reserve's work once its arguments are checked
-- (queue_reserve and queue_commit_reserve): reserves up to in_n ready
-- messages of in_queue for in_timeout (NULL = the queue's
-- visibility_timeout; refused above the queue's max_reservation). One
-- locking read (pyqueue__ready_tids) and one
-- UPDATE of the locked rows by ctid; a locked row that already had
-- max_attempts deliveries (its last reservation expired) is dead-lettered
-- instead, one past its pyqueue.expires_at header ended as cancelled
-- (pyqueue__expire; before the dead-lettering test), and the read runs
-- again for the places they leave. Rows in
-- reserve order; nothing when the queue is paused. Locks: the reserved
-- rows (SKIP LOCKED: never waits for another reserver).
CREATE OR REPLACE FUNCTION pyqueue__reserve(in_queue pyqueue_queue, in_worker text, in_timeout interval,
                                            in_n integer, in_kinds text[])
RETURNS TABLE (c_key varchar, c_kind varchar, c_payload jsonb, c_token uuid, c_priority integer,
               c_attempts integer, c_created_at timestamptz, c_scheduled_at_initially timestamptz,
               c_headers jsonb)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
SET enable_seqscan = off  -- the claim's rows by ctid: never a read of the table (see the UPDATE)
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_until timestamptz;
    v_left  integer := coalesce(in_n, 1);
    v_tids  tid[];
    v_at    timestamptz;
    v_got   integer;
    v_dead  record;
    v_first boolean := true;
    v_clock text := pyqueue__clock_text(v_now);
BEGIN
    IF in_timeout > in_queue.max_reservation THEN
        PERFORM pyqueue__refuse_reservation(in_queue.max_reservation);
    END IF;
    IF in_queue.paused THEN
        RETURN;
    END IF;
    LOOP
        SELECT rt.o_tids, rt.o_at INTO v_tids, v_at
          FROM pyqueue__ready_tids(in_queue.queue_name::text, v_now, v_left, in_kinds, v_first, true) rt;
        v_first := false;
        EXIT WHEN v_tids IS NULL;
        -- The clock for what this writes, read now that the row locks gave
        -- the transaction its id (see pyqueue__ready_from_advance); on a
        -- pass that took a unit of a rate, the time the units were taken at
        -- (also read after the first row lock), so that the lease starts
        -- exactly at the time the rate counted.
        v_until := coalesce(v_at, pg_catalog.clock_timestamp()) + coalesce(in_timeout, in_queue.visibility_timeout);
        RETURN QUERY
            WITH taken AS (
                UPDATE pyqueue_message m
                   SET scheduled_at  = v_until,
                       attempts      = m.attempts + 1,
                       reserved_by   = in_worker,
                       reserve_token = pg_catalog.gen_random_uuid()
                  FROM pg_catalog.unnest(v_tids) WITH ORDINALITY AS c (tid, ord)
                 -- (= ANY: a TID scan of the rows, whatever the table's size when the generic plan
                 -- was made; the join alone planned on a young table read all of it, dead rows too)
                 WHERE m.ctid = ANY (v_tids) AND m.ctid = c.tid AND m.attempts < in_queue.max_attempts
                   AND NOT pyqueue__expired(m.headers, m.dead_from::text, v_clock)
                RETURNING c.ord, m.p_key, m.p_kind, m.payload, m.reserve_token, m.priority,
                          m.attempts, m.created_at, m.scheduled_at_initially, m.headers
            )
            SELECT t.p_key, t.p_kind, t.payload, t.reserve_token, t.priority, t.attempts,
                   t.created_at, t.scheduled_at_initially, t.headers
              FROM taken t ORDER BY t.ord;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        EXIT WHEN v_got = pg_catalog.cardinality(v_tids);
        -- The rows left at their ctids are the ones past their expiry or at
        -- max_attempts (the updated ones moved): end or dead-letter them,
        -- then fill their places.
        FOR v_dead IN SELECT m.ctid AS tid, m.p_key, m.p_kind, pyqueue__expired(m.headers, m.dead_from::text, v_clock) AS expired
                        FROM pyqueue_message m
                       WHERE m.ctid = ANY (v_tids) ORDER BY m.priority DESC, m.scheduled_at, m.id LOOP
            IF v_dead.expired THEN
                PERFORM pyqueue__expire(in_queue, v_dead.tid);
            ELSE
                PERFORM pyqueue__dead_letter(in_queue, v_dead.p_key::text, v_dead.p_kind::text,
                                             pg_catalog.clock_timestamp());
            END IF;
        END LOOP;
        v_left := v_left - v_got;
    END LOOP;
END;
$$;

-- queue_pop: removes and returns up to in_n ready messages (at-most-once).
-- Locks the chosen rows with SKIP LOCKED (pyqueue__ready_tids: its cost
-- model is the reserve's) and deletes them by ctid in one statement;
-- nothing when the queue is paused. A popped group head hands its place to
-- the next message of its group, under the group's row, which the pop locks
-- with SKIP LOCKED: a head whose group row another transaction holds (a push
-- into the group, another pop or a settle of it, not committed yet) is left
-- for a later call, so a pop never waits for a reserver or a push. On a
-- queue that keeps results, each popped message's outcome is 'succeeded'.
-- A message past its pyqueue.expires_at header is not popped but ended as
-- cancelled (pyqueue__expire); the pop returns the others (fewer than in_n).
-- A popped occurrence of a schedule pushes the next one (pyqueue__schedule_next).
-- Rows: p_key, p_kind, payload, priority, attempts, created_at, headers.
CREATE OR REPLACE FUNCTION queue_pop(in_queue text, in_n integer DEFAULT 1)
RETURNS TABLE (p_key varchar, p_kind varchar, payload jsonb, priority integer,
               attempts integer, created_at timestamptz, headers jsonb)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
SET enable_seqscan = off  -- the rows by ctid: never a read of the table (see pyqueue__reserve)
AS $$
#variable_conflict use_column
DECLARE
    v_queue  pyqueue_queue := pyqueue__queue(in_queue);
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_tids   tid[];
    v_groups text[];
    v_locked text[];
    v_busy   tid[];
    v_keys   text[];
    v_kinds  text[];
    v_dkeys  text[];
    v_dkinds text[];
    v_okeys  text[];
    v_okinds text[];
    v_clock  text := pyqueue__clock_text(v_now);
    v_tid    tid;
BEGIN
    PERFORM pyqueue__check_batch_size(in_n);
    IF v_queue.paused THEN
        RETURN;
    END IF;
    IF v_queue.result_retention IS NOT NULL THEN
        PERFORM pyqueue__deps_read_committed();  -- children it may have are seen at READ COMMITTED only
    END IF;
    -- Locked first, in a statement of its own: the DELETE then finds exactly
    -- the row versions that were locked.
    SELECT rt.o_tids INTO v_tids FROM pyqueue__ready_tids(in_queue, v_now, coalesce(in_n, 1), NULL, true) rt;
    IF EXISTS (SELECT 1 FROM pyqueue_group g WHERE g.queue_name::text = in_queue) THEN
        -- group heads: their group rows locked now, at once (SKIP LOCKED; the messages are locked
        -- already, and a settle takes the group row after them: this waits for no one); the heads
        -- of a group whose row another transaction holds are left, unpopped, for a later call
        SELECT pg_catalog.array_agg(DISTINCT m.group_key::text) INTO v_groups
          FROM pyqueue_message m WHERE m.ctid = ANY (v_tids) AND m.group_key IS NOT NULL;
        IF v_groups IS NOT NULL THEN
            SELECT pg_catalog.array_agg(l.group_key::text) INTO v_locked
              FROM (SELECT g.group_key FROM pyqueue_group g
                     WHERE g.queue_name::text = in_queue AND g.group_key::text = ANY (v_groups)
                     ORDER BY g.group_key
                       FOR UPDATE SKIP LOCKED) l;
            SELECT pg_catalog.array_agg(m.ctid) INTO v_busy
              FROM pyqueue_message m
             WHERE m.ctid = ANY (v_tids) AND m.group_key IS NOT NULL
               AND NOT (m.group_key::text = ANY (coalesce(v_locked, '{}'::text[])));
            IF v_busy IS NOT NULL THEN
                v_tids := ARRAY(SELECT u.t FROM pg_catalog.unnest(v_tids) WITH ORDINALITY AS u (t, o)
                                 WHERE NOT (u.t = ANY (v_busy)) ORDER BY u.o);
            END IF;
            v_groups := NULL;
        END IF;
    END IF;
    IF EXISTS (SELECT 1 FROM pyqueue_message m
                WHERE m.ctid = ANY (v_tids) AND m.headers IS NOT NULL AND pyqueue__expired(m.headers, m.dead_from::text, v_clock)) THEN
        -- past their expiry: ended as cancelled (pyqueue__expire), the others popped
        FOR v_tid IN SELECT m.ctid FROM pyqueue_message m
                      WHERE m.ctid = ANY (v_tids) AND pyqueue__expired(m.headers, m.dead_from::text, v_clock)
                      ORDER BY m.priority DESC, m.scheduled_at, m.id LOOP
            v_tids := pg_catalog.array_remove(v_tids, v_tid);
            PERFORM pyqueue__expire(v_queue, v_tid);
        END LOOP;
    END IF;
    IF EXISTS (SELECT 1 FROM pyqueue_group g WHERE g.queue_name::text = in_queue) THEN
        -- the groups whose heads are popped: each hands its place on below
        SELECT pg_catalog.array_agg(m.group_key::text) INTO v_groups
          FROM pyqueue_message m WHERE m.ctid = ANY (v_tids) AND m.group_key IS NOT NULL;
    END IF;
    IF v_queue.result_retention IS NOT NULL THEN
        -- the messages whose results are recorded below: each is announced on the result channel
        SELECT pg_catalog.array_agg(m.p_key::text), pg_catalog.array_agg(m.p_kind::text) INTO v_keys, v_kinds
          FROM pyqueue_message m WHERE m.ctid = ANY (v_tids);
    END IF;
    -- the popped occurrences of schedules: each pushes its schedule's next below, as a commit does
    SELECT pg_catalog.array_agg(m.p_key::text), pg_catalog.array_agg(m.p_kind::text) INTO v_okeys, v_okinds
      FROM pyqueue_message m WHERE m.ctid = ANY (v_tids) AND m.p_key::text LIKE '%@____-__-__T__:__:__Z';
    IF v_queue.result_retention IS NOT NULL THEN
        -- the popped messages that have parents or children (dependencies live in queues that keep
        -- results; one probe each; the rows are locked already, so a queue_push_after naming one
        -- has committed or waits for this transaction)
        SELECT pg_catalog.array_agg(m.p_key::text), pg_catalog.array_agg(m.p_kind::text) INTO v_dkeys, v_dkinds
          FROM pyqueue_message m
         WHERE m.ctid = ANY (v_tids)
           AND EXISTS (SELECT 1 FROM pyqueue_dependency d
                        WHERE d.queue_name::text = in_queue AND d.p_key::text = m.p_key::text
                          AND d.p_kind::text = m.p_kind::text);
    END IF;
    RETURN QUERY
        WITH gone AS (
            DELETE FROM pyqueue_message m
             USING pg_catalog.unnest(v_tids) WITH ORDINALITY AS c (tid, ord)
             WHERE m.ctid = ANY (v_tids) AND m.ctid = c.tid  -- (a TID scan: see pyqueue__reserve)
            RETURNING c.ord, m.p_key, m.p_kind, m.payload, m.priority, m.attempts, m.created_at,
                      m.reserved_by, m.last_error, m.progress, m.headers
        ), archived AS (
            INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                         created_at, processed_at, outcome, reserved_by, last_error, headers)
            SELECT in_queue, g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at,
                   v_now, 'popped', g.reserved_by, g.last_error, g.headers
              FROM gone g WHERE v_queue.history_retention IS NOT NULL
        ), recorded AS (  -- as pyqueue__record_result, for the whole set
            INSERT INTO pyqueue_result AS r (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                             progress, finished_at)
            SELECT in_queue, g.p_key, g.p_kind, 'succeeded', NULL, NULL, g.attempts, g.progress, v_now
              FROM gone g WHERE v_queue.result_retention IS NOT NULL
            ON CONFLICT ON CONSTRAINT pyqueue_result_pkey DO UPDATE
               SET state = EXCLUDED.state, result = EXCLUDED.result, last_error = EXCLUDED.last_error,
                   attempts = EXCLUDED.attempts, progress = EXCLUDED.progress, finished_at = EXCLUDED.finished_at
        )
        SELECT g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at, g.headers
          FROM gone g ORDER BY g.ord;
    IF v_keys IS NOT NULL THEN
        PERFORM pyqueue__result_notify(in_queue, u.k, u.kd, 'succeeded')
           FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_kinds)) AS u (k, kd);
    END IF;
    IF v_groups IS NOT NULL THEN
        PERFORM pyqueue__groups_settle(in_queue, v_groups, pg_catalog.clock_timestamp());
    END IF;
    IF v_okeys IS NOT NULL THEN
        PERFORM pyqueue__schedule_next(in_queue, u.k, u.kd)
           FROM ROWS FROM (pg_catalog.unnest(v_okeys), pg_catalog.unnest(v_okinds)) AS u (k, kd);
    END IF;
    IF v_dkeys IS NOT NULL THEN  -- popped: succeeded, for the messages that wait for them
        PERFORM pyqueue__deps_left(in_queue, u.k, u.kd, true, NULL)
           FROM ROWS FROM (pg_catalog.unnest(v_dkeys), pg_catalog.unnest(v_dkinds)) AS u (k, kd);
    END IF;
END;
$$;

-- queue_reserve: hands out up to in_n ready messages, each invisible to others
-- until in_timeout (NULL = the queue's visibility_timeout; refused above its
-- max_reservation) passes, with a fresh token per message. Rows come highest priority first, FIFO within one
-- (a batch of 2 or more reads from its session's mark, see pyqueue__ready_tids: a message that becomes
-- ready before the mark may wait for the next read from the queue's bound, at most 60 s).
-- A message whose expired reservation was its last allowed delivery is
-- dead-lettered instead of delivered again. Locks with SKIP LOCKED: concurrent
-- reservers never wait on each other and never share a message.
-- One locking read and one UPDATE by ctid (pyqueue__reserve); the cost
-- does not grow with the number of waiting (delayed or reserved) messages
-- nor with their distinct priorities (see pyqueue__ready_tids).
-- Rows: p_key, p_kind, payload, token, priority, attempts, created_at,
-- scheduled_at_initially, headers (NULL: none).
CREATE OR REPLACE FUNCTION queue_reserve(
    in_queue   text,
    in_worker  text     DEFAULT NULL,
    in_timeout interval DEFAULT NULL,
    in_n       integer  DEFAULT 1,
    in_kinds   text[]   DEFAULT NULL)
RETURNS TABLE (p_key varchar, p_kind varchar, payload jsonb, token uuid, priority integer,
               attempts integer, created_at timestamptz, scheduled_at_initially timestamptz,
               headers jsonb)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_queue pyqueue_queue;
BEGIN
    -- plainly valid arguments (see queue_push): one expression and one read, no nested checks
    IF NOT pyqueue__bad_name(in_queue, 128) AND in_kinds IS NULL
       AND (in_worker IS NULL OR pg_catalog.length(in_worker) <= 255) AND (in_n IS NULL OR in_n >= 1)
       AND (in_timeout IS NULL
            OR (in_timeout > interval '0' AND extract(epoch FROM in_timeout) <= 3155760000::numeric
                AND NOT pyqueue__negative_part(in_timeout))) THEN
        SELECT * INTO v_queue FROM pyqueue_queue q WHERE q.queue_name::text = in_queue;
    END IF;
    IF v_queue.queue_name IS NULL THEN  -- the general checks, in their order (an unknown queue raises here)
        v_queue := pyqueue__queue(in_queue);
        PERFORM pyqueue__check_reserve(in_worker, in_timeout, in_n, in_kinds);
    END IF;
    RETURN QUERY SELECT * FROM pyqueue__reserve(v_queue, in_worker, in_timeout, in_n, in_kinds);
END;
$$;
