-- pyqueue-sql revision 0006_set_based_batches (postgresql): the routines this revision added or
-- changed (and DROPs of those it removed), frozen from sql/postgresql/routines.sql by
-- `make release-routines`. Released: never edit it. The routines at a revision are the
-- union of the routine files up to it, later ones overriding earlier ones
-- (pyqueue_sql.routine_sets); a downgrade re-creates the previous ones from them.

DO $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_roles  text;
BEGIN
    IF v_schema IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: no schema to install into (the search_path names no existing schema)';
    END IF;
    IF pg_catalog.has_schema_privilege('public', v_schema, 'CREATE') THEN
        v_roles := 'PUBLIC';
    ELSE
        SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rolname::text), ', ' ORDER BY r.rolname::text)
          INTO v_roles
          FROM pg_catalog.pg_roles r
         WHERE NOT r.rolsuper
           AND r.rolname::text OPERATOR(pg_catalog.<>) CURRENT_USER::text
           AND r.rolname::text OPERATOR(pg_catalog.<>) 'pg_database_owner'::text  -- its member is checked instead
           AND pg_catalog.has_schema_privilege(r.oid, v_schema, 'CREATE')
           AND NOT pg_catalog.pg_has_role(r.oid, CURRENT_USER, 'MEMBER');
    END IF;
    PERFORM pg_catalog.set_config('pyqueue.search_path_before', pg_catalog.current_setting('search_path'), false);
    IF v_roles IS NULL THEN
        PERFORM pg_catalog.set_config('pyqueue.install_refused', '', false);
        PERFORM pg_catalog.set_config('search_path', pg_catalog.quote_ident(v_schema) || ', pg_temp', false);
    ELSE
        -- Refused. The next statement raises; until the end of the script the
        -- search_path names no schema, so that nothing can be created even by a
        -- client that goes on after an error (psql without ON_ERROR_STOP).
        PERFORM pg_catalog.set_config('pyqueue.install_refused', pg_catalog.format(
            'pyqueue:insecure_schema: roles other than the installing role %I can CREATE in schema %I: %s. '
            'Such a role could create a look-alike function or operator there and have it run with the '
            'rights of %I by the routines. Fix: REVOKE CREATE ON SCHEMA %I FROM %s; (when a role owns the '
            'schema or the database: ALTER SCHEMA %I OWNER TO %I, or install into a schema only %I can '
            'write), then install again',
            CURRENT_USER, v_schema, v_roles, CURRENT_USER, v_schema, v_roles, v_schema, CURRENT_USER,
            CURRENT_USER), false);
        PERFORM pg_catalog.set_config('search_path', '', false);
    END IF;
END
$$;
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.install_refused', true) OPERATOR(pg_catalog.<>) '' THEN
        RAISE EXCEPTION '%', pg_catalog.current_setting('pyqueue.install_refused') USING ERRCODE = '42501';
    END IF;
END
$$;

-- pyqueue__bad_name: true unless a name is non-NULL, non-empty, at most
-- in_max characters and does not end with a space (pyqueue__check_name's
-- rule, as an expression for the set-based checks of the batch routines;
-- inlined into the query that calls it). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__bad_name(in_value text, in_max integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT in_value IS NULL OR in_value = '' OR pg_catalog.length(in_value) > in_max
           OR pg_catalog.right(in_value, 1) = ' '
$$;

-- pyqueue__check_kinds: raises unless a kinds filter is NULL (any kind) or
-- a non-empty array of kinds of at most 128 characters without NULLs.
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
-- among waiting messages. Queues with concurrency limits go through
-- pyqueue__limited_tids. Caller holds the locks until its transaction ends.
CREATE OR REPLACE FUNCTION pyqueue__ready_tids(in_queue text, in_now timestamptz, in_n integer, in_kinds text[])
RETURNS tid[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_priority integer;
    v_left     integer := in_n;
    v_tids     tid[];
    v_step     tid[];
    v_empty    integer := 0;
BEGIN
    IF EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name::text = in_queue) THEN  -- limits
        RETURN pyqueue__limited_tids(in_queue, in_now, in_n, in_kinds);
    END IF;
    SELECT m.priority INTO v_priority
      FROM pyqueue_message m WHERE m.queue_name::text = in_queue
     ORDER BY m.priority DESC LIMIT 1;
    WHILE v_priority IS NOT NULL LOOP
        IF v_empty >= 8 THEN
            RETURN v_tids || pyqueue__due_tids(in_queue, in_now, v_left, in_kinds, v_priority);
        END IF;
        SELECT pg_catalog.array_agg(r.tid) INTO v_step
          FROM (SELECT m.ctid AS tid
                  FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue
                   AND m.priority = v_priority
                   AND m.scheduled_at <= in_now
                   AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                 ORDER BY m.scheduled_at, m.id
                 LIMIT v_left
                   FOR UPDATE SKIP LOCKED) AS r;
        IF v_step IS NULL THEN
            v_empty := v_empty + 1;
        ELSE
            v_tids := v_tids || v_step;
            v_left := v_left - pg_catalog.cardinality(v_step);
            EXIT WHEN v_left <= 0;
        END IF;
        SELECT m.priority INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.priority < v_priority
         ORDER BY m.priority DESC LIMIT 1;
    END LOOP;
    RETURN v_tids;
END;
$$;

-- pyqueue__due_tids: pyqueue__ready_tids past its empty steps: locks up to
-- in_n ready messages of priority in_priority or lower (those above were
-- walked already), in reserve order, reading the ready rows through
-- pyqueue_message_due_idx (queue_name, scheduled_at) and sorting them: its
-- cost is the number of ready rows, whatever the waiting ones. The
-- settings make that plan independent of the table statistics (stale ones
-- would pick a scan of the whole queue); the priority bound is written as a
-- bigint comparison so that it cannot be an index condition of
-- pyqueue_message_ready_idx (that index scan would read the waiting rows).
CREATE OR REPLACE FUNCTION pyqueue__due_tids(in_queue text, in_now timestamptz, in_n integer, in_kinds text[],
                                             in_priority integer)
RETURNS tid[]
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_incremental_sort = off
AS $$
BEGIN
    RETURN (SELECT pg_catalog.array_agg(r.tid)
              FROM (SELECT m.ctid AS tid
                      FROM pyqueue_message m
                     WHERE m.queue_name::text = in_queue
                       AND m.scheduled_at <= in_now
                       AND m.priority::bigint <= in_priority::bigint
                       AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                     ORDER BY m.priority DESC, m.scheduled_at, m.id
                     LIMIT in_n
                       FOR UPDATE SKIP LOCKED) AS r);
END;
$$;

-- pyqueue__reserve: queue_reserve's work once its arguments are checked
-- (queue_reserve and queue_commit_reserve): reserves up to in_n ready
-- messages of in_queue for in_timeout (NULL = the queue's
-- visibility_timeout). One locking read (pyqueue__ready_tids) and one
-- UPDATE of the locked rows by ctid; a locked row that already had
-- max_attempts deliveries (its last reservation expired) is dead-lettered
-- instead, and the read runs again for the places it leaves. Rows in
-- reserve order; nothing when the queue is paused. Locks: the reserved
-- rows (SKIP LOCKED: never waits for another reserver).
CREATE OR REPLACE FUNCTION pyqueue__reserve(in_queue pyqueue_queue, in_worker text, in_timeout interval,
                                            in_n integer, in_kinds text[])
RETURNS TABLE (c_key varchar, c_kind varchar, c_payload jsonb, c_token uuid, c_priority integer,
               c_attempts integer, c_created_at timestamptz, c_scheduled_at_initially timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_until timestamptz := v_now + coalesce(in_timeout, in_queue.visibility_timeout);
    v_left  integer := coalesce(in_n, 1);
    v_tids  tid[];
    v_got   integer;
    v_dead  record;
BEGIN
    IF in_queue.paused THEN
        RETURN;
    END IF;
    LOOP
        v_tids := pyqueue__ready_tids(in_queue.queue_name::text, v_now, v_left, in_kinds);
        EXIT WHEN v_tids IS NULL;
        RETURN QUERY
            WITH taken AS (
                UPDATE pyqueue_message m
                   SET scheduled_at  = v_until,
                       attempts      = m.attempts + 1,
                       reserved_by   = in_worker,
                       reserve_token = pg_catalog.gen_random_uuid()
                  FROM pg_catalog.unnest(v_tids) WITH ORDINALITY AS c (tid, ord)
                 WHERE m.ctid = c.tid AND m.attempts < in_queue.max_attempts
                RETURNING c.ord, m.p_key, m.p_kind, m.payload, m.reserve_token, m.priority,
                          m.attempts, m.created_at, m.scheduled_at_initially
            )
            SELECT t.p_key, t.p_kind, t.payload, t.reserve_token, t.priority, t.attempts,
                   t.created_at, t.scheduled_at_initially
              FROM taken t ORDER BY t.ord;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        EXIT WHEN v_got = pg_catalog.cardinality(v_tids);
        -- The rows left at their ctids are the ones at max_attempts (the
        -- updated ones moved): dead-letter them, then fill their places.
        FOR v_dead IN SELECT m.p_key, m.p_kind FROM pyqueue_message m
                       WHERE m.ctid = ANY (v_tids) ORDER BY m.priority DESC, m.scheduled_at, m.id LOOP
            PERFORM pyqueue__dead_letter(in_queue, v_dead.p_key::text, v_dead.p_kind::text, v_now);
        END LOOP;
        v_left := v_left - v_got;
    END LOOP;
END;
$$;

-- pyqueue__limited_tids: pyqueue__ready_tids for a queue that has
-- limits. Same order, locking and result (the ctids of the locked rows);
-- a candidate of a limited kind is admitted
-- only with a slot, and a kind found full is skipped for the rest of the
-- pass, except for candidates that have had max_attempts deliveries: they
-- are admitted without a slot (the reserve dead-letters them, it delivers
-- nothing), so that a full kind cannot hold an exhausted message back.
-- Unlike pyqueue__ready_tids it visits every priority down to the last one
-- it takes rows from (limits keep their slot bookkeeping per candidate).
CREATE OR REPLACE FUNCTION pyqueue__limited_tids(in_queue text, in_now timestamptz, in_n integer,
                                                 in_kinds text[])
RETURNS tid[]
LANGUAGE plpgsql
AS $$
DECLARE
    v_tids     tid[];
    v_limited  text[];
    v_full     text[] := '{}';
    v_seen     bigint[] := '{}';
    v_taken    bigint[] := '{}';
    v_max      integer;
    v_priority integer;
    v_left     integer := in_n;
    v_skipped  boolean;
    r          record;
BEGIN
    SELECT coalesce(pg_catalog.array_agg(l.p_kind::text), '{}') INTO v_limited
      FROM pyqueue_limit l WHERE l.queue_name::text = in_queue;
    SELECT q.max_attempts INTO v_max FROM pyqueue_queue q WHERE q.queue_name::text = in_queue;
    SELECT pg_catalog.max(m.priority) INTO v_priority FROM pyqueue_message m WHERE m.queue_name::text = in_queue;
    WHILE v_priority IS NOT NULL AND v_left > 0 LOOP
        LOOP
            v_skipped := false;
            FOR r IN
                SELECT m.ctid, m.id, m.p_key, m.p_kind, m.attempts
                  FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue
                   AND m.priority = v_priority
                   AND m.scheduled_at <= in_now
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
                ELSIF r.p_kind::text = ANY (v_limited)
                      AND NOT pyqueue__limit_claim(in_queue, r.p_kind::text, r.id, r.p_key::text, r.attempts,
                                                   in_now, v_taken) THEN
                    v_full := pg_catalog.array_append(v_full, r.p_kind::text);
                    v_skipped := true;
                    CONTINUE;
                ELSE
                    v_taken := pg_catalog.array_append(v_taken, r.id);
                END IF;
                v_tids := pg_catalog.array_append(v_tids, r.ctid);
                v_left := v_left - 1;
            END LOOP;
            EXIT WHEN NOT v_skipped OR v_left <= 0;
        END LOOP;
        SELECT pg_catalog.max(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.priority < v_priority;
    END LOOP;
    RETURN v_tids;
END;
$$;

-- queue_push_batch: inserts many messages in one statement; returns how many
-- were new (duplicates, also within the batch, are skipped). Arrays must have
-- the same length; in_run_ats / in_priorities may be NULL (all defaults) or
-- hold NULL elements. Any invalid element refuses the whole batch.
-- Locks: as queue_push, for every new row (in key order, see below).
CREATE OR REPLACE FUNCTION queue_push_batch(
    in_queue      text,
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[] DEFAULT NULL,
    in_priorities integer[]     DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_n     integer;
    v_count integer;
    v_bad   integer;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    IF in_keys IS NULL OR in_kinds IS NULL OR in_payloads IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds and payloads must not be NULL'
            USING ERRCODE = '22023';
    END IF;
    v_n := coalesce(pg_catalog.cardinality(in_keys), 0);
    IF pg_catalog.array_ndims(in_keys) > 1 OR pg_catalog.array_ndims(in_kinds) > 1 OR pg_catalog.array_ndims(in_payloads) > 1
       OR pg_catalog.array_ndims(in_run_ats) > 1 OR pg_catalog.array_ndims(in_priorities) > 1
       OR pg_catalog.cardinality(in_kinds) <> v_n OR pg_catalog.cardinality(in_payloads) <> v_n
       OR (in_run_ats IS NOT NULL AND pg_catalog.cardinality(in_run_ats) <> v_n)
       OR (in_priorities IS NOT NULL AND pg_catalog.cardinality(in_priorities) <> v_n) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds, payloads, run_ats and priorities must have the same length'
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    -- One pass over the arrays (unnest, never arr[i]: subscripting an array
    -- of variable-width elements walks it from the start, quadratic in n).
    SELECT pg_catalog.min(b.ord) INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_payloads),
                      pg_catalog.unnest(in_run_ats))
           WITH ORDINALITY AS b (k, kd, pl, ra, ord)
     WHERE pyqueue__bad_name(b.k, 255) OR pyqueue__bad_name(b.kd, 128) OR b.pl IS NULL
        OR NOT pg_catalog.isfinite(coalesce(b.ra, v_now));
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch has a NULL, empty, too long or space-ended p_key/p_kind, a NULL payload or an infinite run_at', v_bad
            USING ERRCODE = '22023';
    END IF;
    -- Ids are drawn in array order (FIFO within the batch), but rows are
    -- inserted in key order: two batches with overlapping keys then take
    -- their unique-index entries in the same order and cannot deadlock.
    WITH batch AS MATERIALIZED (
        SELECT b.k, b.kd, b.pl, b.ra, b.pr,
               pg_catalog.nextval(pg_catalog.pg_get_serial_sequence('pyqueue_message', 'id')) AS new_id
          FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                          pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                          pg_catalog.unnest(in_priorities))  -- a NULL array pads with NULLs
               WITH ORDINALITY AS b (k, kd, pl, ra, pr, ord)
    )
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, id)
    OVERRIDING SYSTEM VALUE
    SELECT in_queue, b.k, b.kd, b.pl, coalesce(b.pr, 0),
           coalesce(b.ra, v_now), coalesce(b.ra, v_now), v_now, b.new_id
      FROM batch b
     ORDER BY b.k, b.kd
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 AND (in_run_ats IS NULL OR EXISTS (SELECT 1 FROM pg_catalog.unnest(in_run_ats) r WHERE r IS NULL OR r <= v_now)) THEN
        PERFORM pyqueue__notify(in_queue);  -- one wakeup per statement, for ready-now rows
    END IF;
    RETURN v_count;
END;
$$;

-- queue_pop: removes and returns up to in_n ready messages (at-most-once).
-- Locks the chosen rows with SKIP LOCKED (pyqueue__ready_tids: its cost
-- model is the reserve's) and deletes them by ctid in one statement;
-- nothing when the queue is paused.
CREATE OR REPLACE FUNCTION queue_pop(in_queue text, in_n integer DEFAULT 1)
RETURNS TABLE (p_key varchar, p_kind varchar, payload jsonb, priority integer,
               attempts integer, created_at timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_tids  tid[];
BEGIN
    PERFORM pyqueue__check_batch_size(in_n);
    IF v_queue.paused THEN
        RETURN;
    END IF;
    -- Locked first, in a statement of its own: the DELETE then finds exactly
    -- the row versions that were locked.
    v_tids := pyqueue__ready_tids(in_queue, v_now, coalesce(in_n, 1), NULL);
    RETURN QUERY
        WITH gone AS (
            DELETE FROM pyqueue_message m
             USING pg_catalog.unnest(v_tids) WITH ORDINALITY AS c (tid, ord)
             WHERE m.ctid = c.tid
            RETURNING c.ord, m.p_key, m.p_kind, m.payload, m.priority, m.attempts, m.created_at,
                      m.reserved_by, m.last_error
        ), archived AS (
            INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                         created_at, processed_at, outcome, reserved_by, last_error)
            SELECT in_queue, g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at,
                   v_now, 'popped', g.reserved_by, g.last_error
              FROM gone g WHERE v_queue.history_retention IS NOT NULL
        )
        SELECT g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at
          FROM gone g ORDER BY g.ord;
END;
$$;

-- queue_reserve: hands out up to in_n ready messages, each invisible to others
-- until in_timeout (NULL = the queue's visibility_timeout) passes, with a fresh
-- token per message. Rows come highest priority first, FIFO within one.
-- A message whose expired reservation was its last allowed delivery is
-- dead-lettered instead of delivered again. Locks with SKIP LOCKED: concurrent
-- reservers never wait on each other and never share a message.
-- One locking read and one UPDATE by ctid (pyqueue__reserve); the cost
-- does not grow with the number of waiting (delayed or reserved) messages
-- nor with their distinct priorities (see pyqueue__ready_tids).
CREATE OR REPLACE FUNCTION queue_reserve(
    in_queue   text,
    in_worker  text     DEFAULT NULL,
    in_timeout interval DEFAULT NULL,
    in_n       integer  DEFAULT 1,
    in_kinds   text[]   DEFAULT NULL)
RETURNS TABLE (p_key varchar, p_kind varchar, payload jsonb, token uuid, priority integer,
               attempts integer, created_at timestamptz, scheduled_at_initially timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
BEGIN
    PERFORM pyqueue__check_reserve(in_worker, in_timeout, in_n, in_kinds);
    RETURN QUERY SELECT * FROM pyqueue__reserve(v_queue, in_worker, in_timeout, in_n, in_kinds);
END;
$$;

-- queue_next_scheduled_at: when the next message of the queue (of one of
-- in_kinds, NULL = any) becomes eligible: one row (next_scheduled_at,
-- wait_s), wait_s = seconds from now, 0 when a message is ready already;
-- both NULL when the queue holds no such message or is paused. Counts
-- delayed messages and reservations (their expiry), so a worker that sleeps
-- wait_s wakes when a delayed message or an expired reservation is due.
-- One probe of pyqueue_message_due_idx (the earliest scheduled_at of the
-- queue; with in_kinds, the earliest of those kinds), whatever the number of
-- messages or of distinct priorities. Reads without locks.
CREATE OR REPLACE FUNCTION queue_next_scheduled_at(in_queue text, in_kinds text[] DEFAULT NULL)
RETURNS TABLE (next_scheduled_at timestamptz, wait_s double precision)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_next  timestamptz;
BEGIN
    PERFORM pyqueue__check_kinds(in_kinds);
    IF NOT v_queue.paused THEN
        SELECT m.scheduled_at INTO v_next
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue
           AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
         ORDER BY m.scheduled_at
         LIMIT 1;
    END IF;
    next_scheduled_at := v_next;
    wait_s := CASE WHEN v_next IS NOT NULL THEN greatest(extract(epoch FROM v_next - v_now)::double precision, 0) END;
    RETURN NEXT;
END;
$$;

-- queue_commit_reserve: commits the previous reservation (in_key, in_kind,
-- in_token; all three NULL = nothing to commit) and reserves the next up to
-- in_n messages with queue_reserve's semantics (order, timeout, kinds,
-- pause, dead letters), in one call: a consumer working one message at a
-- time needs one round trip and one transaction per message instead of two.
-- Rows as queue_reserve's, each led by committed (the commit's result: true,
-- false when the token no longer held, NULL when nothing was given); when
-- nothing is reserved, one row with committed and NULL elsewhere.
-- The reserve is queue_reserve's own (pyqueue__reserve: one locking read,
-- one UPDATE by ctid). Locks: the committed row, the reserved rows.
CREATE OR REPLACE FUNCTION queue_commit_reserve(
    in_queue   text,
    in_key     text,
    in_kind    text,
    in_token   uuid,
    in_worker  text     DEFAULT NULL,
    in_timeout interval DEFAULT NULL,
    in_n       integer  DEFAULT 1,
    in_kinds   text[]   DEFAULT NULL)
RETURNS TABLE (committed boolean, p_key varchar, p_kind varchar, payload jsonb, token uuid,
               priority integer, attempts integer, created_at timestamptz,
               scheduled_at_initially timestamptz)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_queue     pyqueue_queue := pyqueue__queue(in_queue);
    v_committed boolean;
    v_got       integer;
BEGIN
    -- The same checks as queue_reserve, before anything changes.
    PERFORM pyqueue__check_reserve(in_worker, in_timeout, in_n, in_kinds);
    IF NOT (in_key IS NULL AND in_kind IS NULL AND in_token IS NULL) THEN
        PERFORM pyqueue__check_reservation(in_key, in_kind, in_token);
        IF v_queue.history_retention IS NULL AND in_key NOT LIKE '%@____-__-__T__:__:__Z' THEN
            -- Nothing to archive, not a schedule's occurrence: the DELETE is all of queue_commit.
            DELETE FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
               AND m.reserve_token = in_token;
            v_committed := FOUND;
        ELSE
            -- Exactly queue_commit: the history row, the next occurrence of a schedule.
            v_committed := queue_commit(in_queue, in_key, in_kind, in_token);
        END IF;
    END IF;
    RETURN QUERY
        SELECT v_committed, r.c_key, r.c_kind, r.c_payload, r.c_token, r.c_priority, r.c_attempts,
               r.c_created_at, r.c_scheduled_at_initially
          FROM pyqueue__reserve(v_queue, in_worker, in_timeout, in_n, in_kinds) AS r;
    GET DIAGNOSTICS v_got = ROW_COUNT;
    IF v_got = 0 THEN
        RETURN QUERY SELECT v_committed, NULL::varchar, NULL::varchar, NULL::jsonb, NULL::uuid,
                            NULL::integer, NULL::integer, NULL::timestamptz, NULL::timestamptz;
    END IF;
END;
$$;

-- queue_commit_batch: commits many reservations in one statement (element i
-- of the three arrays names one reservation). Returns how many were deleted;
-- a reservation whose token no longer holds is skipped (not counted).
-- Refuses, changing nothing, arrays that are NULL, not one-dimensional, of
-- different lengths, or hold a NULL/empty/too long/space-ended key or kind or
-- a NULL token. Locks: the deleted rows, in key order (the order queue_drop
-- locks them in, so the two cannot deadlock).
CREATE OR REPLACE FUNCTION queue_commit_batch(in_queue text, in_keys text[], in_kinds text[], in_tokens uuid[])
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_n     integer;
    v_bad   integer;
    v_count integer := 0;
    v_queue pyqueue_queue;
    v_one   record;
    v_tids  tid[];
BEGIN
    v_queue := pyqueue__queue(in_queue);
    IF in_keys IS NULL OR in_kinds IS NULL OR in_tokens IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds and tokens must not be NULL'
            USING ERRCODE = '22023';
    END IF;
    v_n := pg_catalog.cardinality(in_keys);
    IF pg_catalog.array_ndims(in_keys) > 1 OR pg_catalog.array_ndims(in_kinds) > 1 OR pg_catalog.array_ndims(in_tokens) > 1
       OR pg_catalog.cardinality(in_kinds) <> v_n OR pg_catalog.cardinality(in_tokens) <> v_n THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds and tokens must have the same length'
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.min(b.ord) INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_tokens))
           WITH ORDINALITY AS b (k, kd, tk, ord)
     WHERE pyqueue__bad_name(b.k, 255) OR pyqueue__bad_name(b.kd, 128) OR b.tk IS NULL;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch has a NULL, empty, too long or space-ended p_key/p_kind or a NULL token', v_bad
            USING ERRCODE = '22023';
    END IF;
    IF v_queue.history_retention IS NOT NULL
       OR EXISTS (SELECT 1 FROM pg_catalog.unnest(in_keys) AS k (p_key) WHERE k.p_key LIKE '%@____-__-__T__:__:__Z') THEN
        -- A queue that keeps history, or a batch holding occurrences of a
        -- schedule: each element through queue_commit (history row, next
        -- occurrence), in key order.
        FOR v_one IN SELECT b.k, b.kd, b.tk
                       FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_tokens))
                            WITH ORDINALITY AS b (k, kd, tk, ord)
                      ORDER BY b.k, b.kd, b.ord LOOP
            IF queue_commit(in_queue, v_one.k, v_one.kd, v_one.tk) THEN
                v_count := v_count + 1;
            END IF;
        END LOOP;
        RETURN v_count;
    END IF;
    -- Set-based, two statements: the reservations still held are locked in
    -- key order (the sort runs below the row locking), then deleted by ctid.
    SELECT pg_catalog.array_agg(r.tid) INTO v_tids
      FROM (SELECT m.ctid AS tid
              FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_tokens))
                   AS b (k, kd, tk)
              JOIN pyqueue_message m
                ON m.queue_name::text = in_queue AND m.p_key::text = b.k AND m.p_kind::text = b.kd
               AND m.reserve_token = b.tk
             ORDER BY m.p_key, m.p_kind
               FOR UPDATE OF m) AS r;
    DELETE FROM pyqueue_message m WHERE m.ctid = ANY (v_tids);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- queue_redrive: moves up to in_n (NULL = 1) ready messages of in_dead_queue
-- (usually a dead-letter queue) to in_to_queue, highest priority first, FIFO
-- within one: same key, kind, payload, priority and last_error, attempts 0,
-- ready now, no dead-letter origin (dead_from, dead_attempts).
-- A message held by a live reservation is not taken. A message whose key
-- and kind are already live in in_to_queue stays where it is (dedup; it is
-- skipped and does not count towards in_n). Returns how many moved. With a
-- history_retention on in_dead_queue each move is archived as 'moved'.
-- Locks the chosen rows with SKIP LOCKED and a key-share lock on both queue rows.
CREATE OR REPLACE FUNCTION queue_redrive(in_dead_queue text, in_to_queue text, in_n integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_dead   pyqueue_queue;
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_tids   tid[];
    v_keys   text[];
    v_kinds  text[];
    v_count  integer;
BEGIN
    PERFORM pyqueue__check_name('dead_queue', in_dead_queue, 128);
    PERFORM pyqueue__check_name('to_queue', in_to_queue, 128);
    v_dead := pyqueue__queue(in_dead_queue, true);
    PERFORM pyqueue__queue(in_to_queue, true);
    PERFORM pyqueue__check_batch_size(in_n);
    IF in_dead_queue = in_to_queue THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: dead_queue and to_queue must differ' USING ERRCODE = '22023';
    END IF;
    -- Three statements, each reading the chosen rows by ctid (locked by the
    -- first, so their ctids hold): no join whose plan the table statistics
    -- could turn quadratic in n.
    SELECT pg_catalog.array_agg(r.tid) INTO v_tids
      FROM (SELECT m.ctid AS tid
              FROM pyqueue_message m
             WHERE m.queue_name::text = in_dead_queue AND m.scheduled_at <= v_now
               AND NOT EXISTS (SELECT 1 FROM pyqueue_message t
                                WHERE t.queue_name::text = in_to_queue AND t.p_key::text = m.p_key::text
                                  AND t.p_kind::text = m.p_kind::text)
             ORDER BY m.priority DESC, m.scheduled_at, m.id
             LIMIT coalesce(in_n, 1)
               FOR UPDATE SKIP LOCKED) AS r;
    IF v_tids IS NULL THEN
        RETURN 0;
    END IF;
    WITH pushed AS (
        INSERT INTO pyqueue_message AS t
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, last_error)
        SELECT in_to_queue, m.p_key, m.p_kind, m.payload, m.priority, v_now, v_now, v_now, m.last_error
          FROM pyqueue_message m
         WHERE m.ctid = ANY (v_tids)
         ORDER BY m.p_key, m.p_kind
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING
        RETURNING t.p_key, t.p_kind
    )
    SELECT pg_catalog.array_agg(p.p_key::text), pg_catalog.array_agg(p.p_kind::text) INTO v_keys, v_kinds
      FROM pushed p;
    IF coalesce(pg_catalog.cardinality(v_keys), 0) < pg_catalog.cardinality(v_tids) THEN
        -- A key went live in in_to_queue since the first statement (a
        -- concurrent push): that message was not copied and stays here.
        SELECT pg_catalog.array_agg(m.ctid) INTO v_tids
          FROM pyqueue_message m
         WHERE m.ctid = ANY (v_tids)
           AND EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_kinds)) AS u (k, kd)
                        WHERE u.k = m.p_key::text AND u.kd = m.p_kind::text);
    END IF;
    WITH gone AS (
        DELETE FROM pyqueue_message m
         WHERE m.ctid = ANY (v_tids)
        RETURNING m.*
    ), archived AS (
        INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                     created_at, processed_at, outcome, to_queue, reserved_by, last_error)
        SELECT in_dead_queue, g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at,
               v_now, 'moved', in_to_queue, g.reserved_by, g.last_error
          FROM gone g WHERE v_dead.history_retention IS NOT NULL
    )
    SELECT pg_catalog.count(*) INTO v_count FROM gone;
    IF v_count > 0 THEN PERFORM pyqueue__notify(in_to_queue); END IF;  -- wakeup: ready now
    RETURN v_count;
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

-- pyqueue__lock_ready: removed.
DROP FUNCTION IF EXISTS pyqueue__lock_ready;

-- pyqueue__lock_ready_limited: removed.
DROP FUNCTION IF EXISTS pyqueue__lock_ready_limited;

-- No routine is callable by PUBLIC (PostgreSQL's default for a new function):
-- SECURITY DEFINER routines open to everyone would let any role push and
-- reserve. Applications get EXECUTE on the routines of their capability
-- (pyqueue-sql grant; README "Least privilege"). Internal helpers (pyqueue__*)
-- are granted to nobody: only the routines, running as their owner, call them.
-- The list is static (no SQL built from names); a routine added to this file
-- must be added here (tests/security/test_privileges.py fails otherwise), in
-- the order of the sections: the helpers, then the routines topic by topic.
REVOKE EXECUTE ON FUNCTION
    pyqueue__bad_name, pyqueue__check_kinds, pyqueue__check_reserve, pyqueue__ready_tids,
    pyqueue__due_tids, pyqueue__reserve, pyqueue__limited_tids, queue_push_batch, queue_pop,
    queue_reserve, queue_next_scheduled_at, queue_commit_reserve, queue_commit_batch, queue_redrive,
    queue_set_limit
  FROM PUBLIC;

-- The caller's search_path again (pinned at the top of this script).
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.search_path_before', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('pyqueue.search_path_before'), false);
    END IF;
END
$$;
