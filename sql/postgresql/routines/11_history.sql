-- ==== history and dead letters ====
-- What became of messages that left a queue (pyqueue_history: purge, replay),
-- the messages in dead-letter queues (list, redrive), and one message's state
-- and history, for roles that may not read the tables.

-- pyqueue__archive: when the queue keeps history (history_retention set),
-- records a message that has just left the live table, with its outcome
-- ('committed', 'popped', 'dead_lettered', 'moved', 'cancelled'), its last_error, its headers and, for
-- moves and dead letters, where it went. Called by the routine that removed the message,
-- in the same transaction. Takes no locks beyond the inserted row.
CREATE OR REPLACE FUNCTION pyqueue__archive(in_queue pyqueue_queue, in_msg pyqueue_message,
                                            in_outcome text, in_to_queue text, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF in_queue.history_retention IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                 created_at, processed_at, outcome, to_queue, reserved_by, last_error, headers)
    VALUES (in_queue.queue_name, in_msg.p_key, in_msg.p_kind, in_msg.payload, in_msg.priority,
            in_msg.attempts, in_msg.created_at, in_now, in_outcome, in_to_queue, in_msg.reserved_by,
            in_msg.last_error, in_msg.headers);
END;
$$;

-- queue_purge_history: deletes up to in_n (NULL = 10000) history rows that
-- are past their queue's history_retention (processed_at < now - retention),
-- oldest first, of one queue or (in_queue NULL) of every queue that has a
-- retention. Returns how many it deleted; call it again until it returns
-- less than in_n. Bounded: one call locks at most in_n history rows (SKIP
-- LOCKED, so two purgers share the work instead of waiting). History of a
-- dropped queue, or of one whose retention was set back to NULL, is left
-- alone (DELETE it with plain SQL).
-- Then, with what is left of in_n, the result rows (pyqueue_result) past
-- their queue's result_retention (finished_at < now - retention), and every
-- result row of a queue whose result_retention is NULL or that no longer
-- exists, oldest first, queue by queue (the distinct queue names of the
-- table are found by one index probe each). The count returned is history
-- rows and result rows together.
CREATE OR REPLACE FUNCTION queue_purge_history(in_queue text DEFAULT NULL, in_n integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_left  integer := coalesce(in_n, 10000);
    v_got   integer;
    v_q     record;
    v_r     record;
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    PERFORM pyqueue__check_batch_size(in_n);
    FOR v_q IN
        SELECT q.queue_name, q.history_retention
          FROM pyqueue_queue q
         WHERE q.history_retention IS NOT NULL AND (in_queue IS NULL OR q.queue_name::text = in_queue)
         ORDER BY q.queue_name
    LOOP
        EXIT WHEN v_left <= 0;
        WITH doomed AS (
            SELECT h.id
              FROM pyqueue_history h
             WHERE h.queue_name::text = v_q.queue_name::text
               AND h.processed_at < v_now - v_q.history_retention
             ORDER BY h.processed_at
             LIMIT v_left
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM pyqueue_history h USING doomed WHERE h.id = doomed.id;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
    END LOOP;
    FOR v_r IN
        -- every queue: the distinct names of the table, one index probe each (a skip scan)
        WITH RECURSIVE names (queue_name) AS (
            (SELECT r.queue_name::text FROM pyqueue_result r ORDER BY r.queue_name LIMIT 1)
            UNION ALL
            SELECT (SELECT r.queue_name::text FROM pyqueue_result r
                     WHERE r.queue_name::text > n.queue_name
                     ORDER BY r.queue_name LIMIT 1)
              FROM names n WHERE n.queue_name IS NOT NULL
        )
        SELECT n.queue_name, q.result_retention
          FROM names n LEFT JOIN pyqueue_queue q ON q.queue_name::text = n.queue_name
         WHERE n.queue_name IS NOT NULL AND in_queue IS NULL
        UNION ALL
        -- one queue (it exists: checked above)
        SELECT q.queue_name::text, q.result_retention FROM pyqueue_queue q WHERE q.queue_name::text = in_queue
    LOOP
        EXIT WHEN v_left <= 0;
        WITH doomed AS (
            SELECT r.p_key, r.p_kind
              FROM pyqueue_result r
             WHERE r.queue_name::text = v_r.queue_name
               AND (v_r.result_retention IS NULL OR r.finished_at < v_now - v_r.result_retention)
             ORDER BY r.finished_at
             LIMIT v_left
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM pyqueue_result r USING doomed
         WHERE r.queue_name::text = v_r.queue_name AND r.p_key::text = doomed.p_key::text
           AND r.p_kind::text = doomed.p_kind::text;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
    END LOOP;
    RETURN coalesce(in_n, 10000) - v_left;
END;
$$;

-- queue_replay: pushes again the messages of in_queue's history whose
-- processed_at lies in [in_from, in_to) (NULL = unbounded on that side),
-- through the normal dedup: a (p_key, p_kind) that is live in the queue is
-- skipped. When a key and kind left several times in the range, its latest
-- version is replayed. Replayed messages are ready now, with their archived
-- payload, priority and headers, attempts 0. Returns how many were inserted.
-- Reads the history range without locks; locks like queue_push_batch.
CREATE OR REPLACE FUNCTION queue_replay(in_queue text, in_from timestamptz DEFAULT NULL,
                                        in_to timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_count integer;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    IF in_from > in_to THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: from must not be later than to' USING ERRCODE = '22023';
    END IF;
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, headers)
    SELECT in_queue, h.p_key, h.p_kind, h.payload, h.priority, v_now, v_now, v_now, h.headers
      FROM (SELECT DISTINCT ON (h.p_key, h.p_kind) h.p_key, h.p_kind, h.payload, h.priority, h.headers
              FROM pyqueue_history h
             WHERE h.queue_name::text = in_queue AND h.outcome::text IN ('committed', 'popped')
               AND (in_from IS NULL OR h.processed_at >= in_from)
               AND (in_to IS NULL OR h.processed_at < in_to)
             ORDER BY h.p_key, h.p_kind, h.processed_at DESC, h.id DESC) h
     ORDER BY h.p_key, h.p_kind
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN PERFORM pyqueue__notify(in_queue); END IF;  -- wakeup: ready now
    RETURN v_count;
END;
$$;

-- queue_redrive: moves up to in_n (NULL = 1) ready messages of in_dead_queue
-- (usually a dead-letter queue) to in_to_queue, highest priority first, FIFO
-- within one: same key, kind, payload, priority, last_error and headers, attempts 0,
-- ready now, no dead-letter origin (dead_from, dead_attempts).
-- A message held by a live reservation is not taken. A message whose key
-- and kind are already live in in_to_queue stays where it is (dedup; it is
-- skipped and does not count towards in_n). Returns how many moved. With a
-- history_retention on in_dead_queue each move is archived as 'moved'.
-- A moved message that is a parent takes its waiting children along: its
-- dependency rows follow it to in_to_queue (pyqueue__deps_moved), so its
-- commit there readies them and its failure there cancels them; into a queue
-- that keeps no results they are cancelled ('was moved to a queue that keeps
-- no results'). On a dead queue that keeps results, READ COMMITTED only.
-- Locks the chosen rows with SKIP LOCKED and the shared lock of both queues (pyqueue__queue),
-- then the dependency rows of the moved parents and in_to_queue's results lock (shared).
CREATE OR REPLACE FUNCTION queue_redrive(in_dead_queue text, in_to_queue text, in_n integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_dead   pyqueue_queue;
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_tids   tid[];
    v_keys   text[];
    v_kinds  text[];
    v_count  integer;
    v_groups text[];
BEGIN
    PERFORM pyqueue__check_name('dead_queue', in_dead_queue, 128);
    PERFORM pyqueue__check_name('to_queue', in_to_queue, 128);
    v_dead := pyqueue__queue(in_dead_queue, true);
    PERFORM pyqueue__queue(in_to_queue, true);
    PERFORM pyqueue__check_batch_size(in_n);
    IF in_dead_queue = in_to_queue THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: dead_queue and to_queue must differ' USING ERRCODE = '22023';
    END IF;
    IF v_dead.result_retention IS NOT NULL THEN
        PERFORM pyqueue__deps_read_committed();  -- children it may have are seen at READ COMMITTED only
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
                scheduled_at_initially, created_at, last_error, headers)
        SELECT in_to_queue, m.p_key, m.p_kind, m.payload, m.priority, v_now, v_now, v_now, m.last_error,
               m.headers
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
                                     created_at, processed_at, outcome, to_queue, reserved_by, last_error,
                                     headers)
        SELECT in_dead_queue, g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at,
               v_now, 'moved', in_to_queue, g.reserved_by, g.last_error, g.headers
          FROM gone g WHERE v_dead.history_retention IS NOT NULL
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(g.group_key::text) FILTER (WHERE g.group_key IS NOT NULL)
      INTO v_count, v_groups FROM gone g;
    IF v_groups IS NOT NULL THEN
        -- messages of groups pushed into the dead-letter queue itself
        PERFORM pyqueue__groups_settle(in_dead_queue, v_groups, v_now);
    END IF;
    IF v_dead.result_retention IS NOT NULL AND v_keys IS NOT NULL THEN
        -- a redriven message that is waited for takes its waiting children along (dependencies
        -- live in queues that keep results; one probe each, which finds nothing for most)
        PERFORM pyqueue__deps_moved(in_dead_queue, in_to_queue, u.k, u.kd, m.id)
           FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_kinds)) AS u (k, kd)
           JOIN pyqueue_message m
             ON m.queue_name::text = in_to_queue AND m.p_key::text = u.k AND m.p_kind::text = u.kd
          WHERE EXISTS (SELECT 1 FROM pyqueue_dependency d
                         WHERE d.queue_name::text = in_dead_queue AND d.p_key::text = u.k AND d.p_kind::text = u.kd);
    END IF;
    IF v_count > 0 THEN PERFORM pyqueue__notify(in_to_queue); END IF;  -- wakeup: ready now
    RETURN v_count;
END;
$$;

-- queue_dead_letters: the messages sitting in a dead-letter queue (the rows
-- of the view pyqueue_dead_letters for dead_letter_queue = in_queue), oldest
-- dead letter first, so that a role without SELECT on the view can list them:
-- from_queue and attempts are the queue each came from and its deliveries
-- there, last_error its last error text, headers its headers. An unknown queue is refused; a
-- queue that is nobody's dead-letter queue has none. Takes no locks (one snapshot).
CREATE OR REPLACE FUNCTION queue_dead_letters(in_queue text)
RETURNS TABLE (dead_letter_queue varchar, from_queue varchar, p_key varchar, p_kind varchar,
               payload jsonb, priority integer, attempts integer, created_at timestamptz,
               dead_lettered_at timestamptz, reserved boolean, last_error varchar, headers jsonb)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    RETURN QUERY
        SELECT d.dead_letter_queue, d.from_queue, d.p_key, d.p_kind, d.payload, d.priority,
               d.attempts, d.created_at, d.dead_lettered_at, d.reserved, d.last_error, d.headers
          FROM pyqueue_dead_letters d
         WHERE d.dead_letter_queue::text = in_queue
         ORDER BY d.dead_lettered_at, d.p_key, d.p_kind;
END;
$$;

-- queue_message: the live message (in_key, in_kind) of in_queue, 0 or 1 row:
-- its state ('ready', 'delayed' or 'reserved', as in queue_stats), payload,
-- priority, attempts (deliveries so far), scheduled_at (when it is or was
-- due; for a reserved one, when the reservation ends), created_at,
-- reserved_by (the worker of its last reservation), last_error, for a
-- dead letter dead_from, its progress (queue_set_progress) and whether a
-- cancel was requested (queue_cancel), its headers (NULL: none). Reads without locks.
-- Installs of earlier versions returned the columns up to dead_from, or up
-- to cancel_requested: that
-- function is dropped (a function cannot change its result columns in
-- place), and with it its grants (pyqueue-sql grant gives them again).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                WHERE p.oid = pg_catalog.to_regprocedure('queue_message(text, text, text)')
                  AND NOT ('headers' OPERATOR(pg_catalog.=) ANY (p.proargnames))) THEN
        DROP FUNCTION queue_message(text, text, text);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION queue_message(in_queue text, in_key text, in_kind text)
RETURNS TABLE (p_key text, p_kind text, state text, payload jsonb, priority integer, attempts integer,
               scheduled_at timestamptz, created_at timestamptz, reserved_by text, last_error text,
               dead_from text, progress jsonb, cancel_requested boolean, headers jsonb)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    RETURN QUERY
        SELECT m.p_key::text, m.p_kind::text,
               CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                    WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                    ELSE 'delayed' END::text,
               m.payload, m.priority, m.attempts, m.scheduled_at, m.created_at, m.reserved_by::text,
               m.last_error::text, m.dead_from::text, m.progress, m.cancel_requested_at IS NOT NULL,
               m.headers
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind;
END;
$$;

-- queue_message_history: the history rows of (in_queue, in_key, in_kind),
-- newest first, at most 100: (processed_at, outcome, to_queue, attempts,
-- reserved_by, last_error): what happened, not the message's data (no
-- payload, no headers: pyqueue_history keeps both). A queue that no longer exists is no error (its
-- history stays); a queue without history_retention has none. Reads without locks.
CREATE OR REPLACE FUNCTION queue_message_history(in_queue text, in_key text, in_kind text)
RETURNS TABLE (processed_at timestamptz, outcome text, to_queue text, attempts integer,
               reserved_by text, last_error text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    RETURN QUERY
        SELECT h.processed_at, h.outcome::text, h.to_queue::text, h.attempts, h.reserved_by::text,
               h.last_error::text
          FROM pyqueue_history h
         WHERE h.queue_name::text = in_queue AND h.p_key::text = in_key AND h.p_kind::text = in_kind
         ORDER BY h.processed_at DESC, h.id DESC
         LIMIT 100;
END;
$$;
