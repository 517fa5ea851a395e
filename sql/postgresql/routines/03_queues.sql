-- ==== queues ====
-- Create a queue or change its settings, read them back, drop it, pause and
-- resume it, count its messages.

-- queue_create: creates the queue (NULL = the default: 30 s, 10 attempts,
-- no dead-letter queue, no history) or changes the settings given (not NULL)
-- of an existing one; a NULL leaves that setting as it is (queue_reset_setting
-- sets one back to its default). A visibility_timeout above the queue's
-- max_reservation (12 hours for a new queue; queue_set_max_reservation) is
-- refused. Locks the queue row.
CREATE OR REPLACE FUNCTION queue_create(
    in_queue              text,
    in_visibility_timeout interval DEFAULT NULL,
    in_max_attempts       integer  DEFAULT NULL,
    in_dead_letter_queue  text     DEFAULT NULL,
    in_history_retention  interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_new boolean;
    v_max interval;
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    PERFORM pyqueue__check_duration('visibility_timeout', in_visibility_timeout, true);
    PERFORM pyqueue__check_duration('history_retention', in_history_retention, false);
    IF in_max_attempts IS NOT NULL AND in_max_attempts < 1 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: max_attempts must be at least 1'
            USING ERRCODE = '22023';
    END IF;
    IF in_dead_letter_queue IS NOT NULL THEN
        IF in_dead_letter_queue = in_queue THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: a queue cannot be its own dead_letter_queue'
                USING ERRCODE = '22023';
        END IF;
        PERFORM pyqueue__check_name('dead_letter_queue', in_dead_letter_queue, 128);
        PERFORM pyqueue__queue(in_dead_letter_queue, true);
    END IF;
    IF in_visibility_timeout IS NOT NULL THEN
        SELECT q.max_reservation INTO v_max FROM pyqueue_queue q WHERE q.queue_name::text = in_queue FOR UPDATE;
        v_max := coalesce(v_max, interval '12 hours');  -- a new queue: the default
        IF in_visibility_timeout > v_max THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: visibility_timeout is longer than the queue''s max_reservation (%)',
                            v_max
                USING ERRCODE = '22023';
        END IF;
    END IF;
    -- (max_reservation: the existing row's, which the update keeps, so that
    -- the row proposed for the insert passes the table's check as well)
    INSERT INTO pyqueue_queue AS q
           (queue_name, visibility_timeout, max_attempts, dead_letter_queue, history_retention, max_reservation)
    VALUES (in_queue,
            coalesce(in_visibility_timeout, interval '30 seconds'),
            coalesce(in_max_attempts, 10),
            in_dead_letter_queue,
            in_history_retention,
            coalesce(v_max, interval '12 hours'))
    ON CONFLICT (queue_name) DO UPDATE
       SET visibility_timeout = coalesce(in_visibility_timeout, q.visibility_timeout),
           max_attempts       = coalesce(in_max_attempts, q.max_attempts),
           dead_letter_queue  = coalesce(in_dead_letter_queue, q.dead_letter_queue),
           history_retention  = coalesce(in_history_retention, q.history_retention)
    RETURNING (q.xmax = 0) INTO v_new;
    IF v_new THEN
        INSERT INTO pyqueue_ready_from AS r (queue_name) VALUES (in_queue)
        ON CONFLICT (queue_name) DO UPDATE
           SET ready_from = '-infinity', ready_from_id = NULL, next_from = NULL, next_xid = NULL,
               moved_at = '-infinity', top_priority = NULL;
        DELETE FROM pyqueue_ready_lower l WHERE l.queue_name::text = in_queue;
        -- A new queue starts empty: messages left under this name by a drop
        -- that could not see them (one run inside a REPEATABLE READ
        -- transaction, see queue_drop) go now, before any push can reach it.
        DELETE FROM pyqueue_message m WHERE m.queue_name::text = in_queue;
    END IF;
END;
$$;

-- queue_reset_setting: sets one setting of a queue back to its default:
-- 'visibility_timeout' (30 s), 'max_attempts' (10), 'dead_letter_queue'
-- (none), 'history_retention' (none, keep no history), 'max_reservation'
-- (12 hours), 'max_payload' (1048576 bytes) or 'result_retention' (none, keep
-- no results: see queue_set_result_retention). Refused (invalid_argument)
-- when the default visibility_timeout would be above the queue's
-- max_reservation, or the default max_reservation below its
-- visibility_timeout. Locks the queue row.
CREATE OR REPLACE FUNCTION queue_reset_setting(in_queue text, in_setting text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_queue pyqueue_queue;
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    IF in_setting IS NULL OR in_setting NOT IN ('visibility_timeout', 'max_attempts', 'dead_letter_queue',
                                                'history_retention', 'max_reservation', 'max_payload',
                                                'result_retention') THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: setting must be one of visibility_timeout, max_attempts, dead_letter_queue, history_retention, max_reservation, max_payload, result_retention'
            USING ERRCODE = '22023';
    END IF;
    IF in_setting = 'result_retention' THEN  -- as queue_set_result_retention(NULL)
        IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: results are turned off at READ COMMITTED only (this transaction is %): its snapshot cannot see the children pushed since',
                            pg_catalog.upper(pg_catalog.current_setting('transaction_isolation'))
                USING ERRCODE = '22023';
        END IF;
        PERFORM pyqueue__results_lock(in_queue, true);
    END IF;
    SELECT * INTO v_queue FROM pyqueue_queue q WHERE q.queue_name::text = in_queue FOR UPDATE;
    IF FOUND AND in_setting = 'visibility_timeout' AND v_queue.max_reservation < interval '30 seconds' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: the default visibility_timeout (30 s) is longer than the queue''s max_reservation'
            USING ERRCODE = '22023';
    END IF;
    IF FOUND AND in_setting = 'max_reservation' AND v_queue.visibility_timeout > interval '12 hours' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: the default max_reservation (12 hours) is shorter than the queue''s visibility_timeout'
            USING ERRCODE = '22023';
    END IF;
    UPDATE pyqueue_queue q
       SET visibility_timeout = CASE WHEN in_setting = 'visibility_timeout' THEN interval '30 seconds'
                                     ELSE q.visibility_timeout END,
           max_attempts       = CASE WHEN in_setting = 'max_attempts' THEN 10 ELSE q.max_attempts END,
           dead_letter_queue  = CASE WHEN in_setting = 'dead_letter_queue' THEN NULL
                                     ELSE q.dead_letter_queue END,
           history_retention  = CASE WHEN in_setting = 'history_retention' THEN NULL
                                     ELSE q.history_retention END,
           max_reservation    = CASE WHEN in_setting = 'max_reservation' THEN interval '12 hours'
                                     ELSE q.max_reservation END,
           max_payload        = CASE WHEN in_setting = 'max_payload' THEN 1048576 ELSE q.max_payload END,
           result_retention   = CASE WHEN in_setting = 'result_retention' THEN NULL
                                     ELSE q.result_retention END
     WHERE q.queue_name::text = in_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue USING ERRCODE = 'P0002';
    END IF;
    IF in_setting = 'result_retention'
       AND EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name::text = in_queue) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: messages of queue "%" have parents or children: it keeps results until they are gone', in_queue
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- queue_settings: the settings of a queue (every queue when NULL), by name:
-- visibility_timeout, max_attempts, dead_letter_queue, history_retention,
-- paused, notify_window (the wakeup throttle; 5 ms unless set),
-- max_reservation, max_payload (bytes) and result_retention. Reads without
-- locks. Installs of earlier versions returned fewer columns (up to
-- notify_window, or up to max_payload): that function is dropped (a
-- function cannot change its result columns in place), and with it its
-- grants (pyqueue-sql grant gives them again).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                WHERE p.oid = pg_catalog.to_regprocedure('queue_settings(text)')
                  AND NOT ('result_retention' OPERATOR(pg_catalog.=) ANY (p.proargnames))) THEN
        DROP FUNCTION queue_settings(text);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION queue_settings(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, visibility_timeout interval, max_attempts integer, dead_letter_queue text,
               history_retention interval, paused boolean, notify_window interval,
               max_reservation interval, max_payload integer, result_retention interval)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT q.queue_name::text, q.visibility_timeout, q.max_attempts, q.dead_letter_queue::text,
               q.history_retention, q.paused, coalesce(n.notify_window, interval '5 milliseconds'),
               q.max_reservation, q.max_payload, q.result_retention
          FROM pyqueue_queue q
          LEFT JOIN pyqueue_notify n ON n.queue_name::text = q.queue_name::text
         WHERE in_queue IS NULL OR q.queue_name::text = in_queue
         ORDER BY q.queue_name::text;
END;
$$;

-- queue_set_max_reservation: the longest reservation timeout a caller may ask
-- for in the queue (queue_reserve, queue_commit_reserve, queue_extend; above
-- it they are refused with invalid_argument); NULL = the default, 12 hours.
-- Must be above zero, at most 100 years and not below the queue's
-- visibility_timeout. Reservations already made keep their end. Locks the
-- queue row.
CREATE OR REPLACE FUNCTION queue_set_max_reservation(in_queue text, in_max_reservation interval)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_new        interval := coalesce(in_max_reservation, interval '12 hours');
    v_visibility interval;
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    PERFORM pyqueue__check_duration('max_reservation', in_max_reservation, true);
    SELECT q.visibility_timeout INTO v_visibility FROM pyqueue_queue q WHERE q.queue_name::text = in_queue FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue USING ERRCODE = 'P0002';
    END IF;
    IF v_new < v_visibility THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: max_reservation must not be below the queue''s visibility_timeout'
            USING ERRCODE = '22023';
    END IF;
    UPDATE pyqueue_queue SET max_reservation = v_new WHERE queue_name::text = in_queue;
END;
$$;

-- queue_set_max_payload: the largest payload, in bytes of its JSON text, that
-- a producer may write into the queue (push, batch, replace, grouped,
-- publish, move with a new payload, queue_ingest); NULL = the default,
-- 1048576 (1 MiB); 1 to 268435456 (256 MiB). Messages already in the queue
-- stay. Locks the queue row.
CREATE OR REPLACE FUNCTION queue_set_max_payload(in_queue text, in_max_payload integer)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    IF in_max_payload < 1 OR in_max_payload > 268435456 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: max_payload must be a whole number from 1 to 268435456'
            USING ERRCODE = '22023';
    END IF;
    UPDATE pyqueue_queue SET max_payload = coalesce(in_max_payload, 1048576) WHERE queue_name::text = in_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue USING ERRCODE = 'P0002';
    END IF;
END;
$$;

-- queue_drop: deletes the queue and all its messages. Refuses while another
-- queue names it as dead-letter queue. Locks the queue's messages first (key
-- order), then the queue row: the order in which a commit, rollback or
-- reserve that dead-letters takes them (message, then queue row), so that a
-- drop racing them waits instead of deadlocking. Then it waits for every
-- transaction writing into the queue (pyqueue__queue: the queue's advisory
-- lock, taken here exclusively; or a key-share lock on the queue row, which
-- deleting it waits for); the messages are deleted after that, by a
-- statement that (READ COMMITTED) sees what those writers wrote. Inside a REPEATABLE READ or SERIALIZABLE transaction it cannot
-- see messages pushed after its snapshot: they stay in the table, in no queue
-- (no routine reaches them), until queue_create makes a queue of that name
-- again and deletes them.
CREATE OR REPLACE FUNCTION queue_drop(in_queue text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_user text;
    v_one  record;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    SELECT q.queue_name::text INTO v_user FROM pyqueue_queue q WHERE q.dead_letter_queue::text = in_queue LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: queue "%" is the dead_letter_queue of "%"', in_queue, v_user
            USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue
     ORDER BY m.p_key, m.p_kind
       FOR UPDATE;
    -- waits for every transaction that is writing into the queue (the lock
    -- pyqueue__queue shares at READ COMMITTED; deleting the row waits for
    -- the row locks it takes otherwise)
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pyqueue-sql queue'), pg_catalog.hashtext(in_queue));
    DELETE FROM pyqueue_queue WHERE queue_name::text = in_queue;
    DELETE FROM pyqueue_message m WHERE m.queue_name::text = in_queue;
    -- its messages' children elsewhere are cancelled, their rows as children go
    FOR v_one IN SELECT DISTINCT d.p_key::text AS k, d.p_kind::text AS kd FROM pyqueue_dependency d
                  WHERE d.queue_name::text = in_queue ORDER BY 1, 2 LOOP
        PERFORM pyqueue__deps_left(in_queue, v_one.k, v_one.kd, false, 'was dropped with its queue');
    END LOOP;
END;
$$;

-- queue_pause: pop and reserve hand out nothing until queue_resume.
-- Pushes, commits and rollbacks still work.
-- Locks the queue row.
CREATE OR REPLACE FUNCTION queue_pause(in_queue text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    UPDATE pyqueue_queue SET paused = true WHERE queue_name::text = in_queue;
END;
$$;

-- queue_resume: undoes queue_pause. Locks the queue row.
CREATE OR REPLACE FUNCTION queue_resume(in_queue text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    UPDATE pyqueue_queue SET paused = false WHERE queue_name::text = in_queue;
    PERFORM pyqueue__notify(in_queue);  -- wakeup: its ready messages may be reserved again
END;
$$;

-- queue_stats: one row per queue (all queues when in_queue is NULL).
-- ready: eligible now; delayed: scheduled later and not reserved; reserved:
-- held by a reservation that has not expired; dead: messages that exhausted
-- max_attempts in this queue so far; oldest_ready_age_s: how long the oldest
-- ready message has been eligible (NULL when none). Reads without locks.
-- Bounded: the queue's ready rows, and its later rows (delayed and reserved),
-- are each read through the due index in time order, at most c_exact + 1 of
-- each. A range of at most c_exact rows is counted exactly; a larger one is
-- estimated (below), never below c_exact + 1. Counting every row instead
-- read the whole queue, and after an ANALYZE of a table with dead rows the
-- planner read it by a sequential scan of the whole table (208 ms at best
-- at 100,000 live messages against 5 ms, bench/latest/stats-bounded.md).
CREATE OR REPLACE FUNCTION queue_stats(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, ready bigint, delayed bigint, reserved bigint, dead bigint,
               oldest_ready_age_s double precision, paused boolean)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
SET enable_seqscan = off SET enable_bitmapscan = off  -- the due index in its order, whatever the statistics say
AS $$
DECLARE
    c_exact  CONSTANT bigint := 10000;
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_q      record;
    v_later  bigint;
    v_oldest timestamptz;
    v_total  double precision;
    v_share  double precision;
    v_rel    record;
    v_st     record;
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    FOR v_q IN
        SELECT q.queue_name::text AS queue_name, q.dead_count, q.paused
          FROM pyqueue_queue q
         WHERE in_queue IS NULL OR q.queue_name::text = in_queue
         ORDER BY q.queue_name
    LOOP
        SELECT pg_catalog.count(*), pg_catalog.min(r.scheduled_at) INTO ready, v_oldest
          FROM (SELECT m.scheduled_at FROM pyqueue_message m
                 WHERE m.queue_name::text = v_q.queue_name AND m.scheduled_at < 'infinity'
                   AND m.scheduled_at <= v_now
                 ORDER BY m.scheduled_at
                 LIMIT c_exact + 1) r;
        SELECT pg_catalog.count(*), pg_catalog.count(l.reserve_token) INTO v_later, reserved
          FROM (SELECT m.reserve_token FROM pyqueue_message m
                 WHERE m.queue_name::text = v_q.queue_name AND m.scheduled_at < 'infinity'
                   AND m.scheduled_at > v_now
                 ORDER BY m.scheduled_at
                 LIMIT c_exact + 1) l;
        IF ready > c_exact OR v_later > c_exact THEN
            -- The estimate: the table's live rows as its commits count them
            -- (pg_stat_get_live_tuples, current within a second or so;
            -- pg_class.reltuples when the server keeps no count) times the
            -- queue's share of the table in the statistics of the last
            -- ANALYZE (pg_stats, as the planner reckons it: its frequency
            -- when a most common value, else an even share of the rest; an
            -- even share of the queues when the table was never analyzed).
            -- Reads the catalogs only.
            SELECT c.oid, c.reltuples, n.nspname INTO v_rel
              FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = 'pyqueue_message'::regclass::oid;
            v_total := pg_catalog.pg_stat_get_live_tuples(v_rel.oid)::double precision;
            IF v_total IS NULL OR v_total <= 0.0::double precision THEN
                v_total := GREATEST(v_rel.reltuples::double precision, 0.0::double precision);
            END IF;
            SELECT s.null_frac::double precision AS null_frac, s.n_distinct::double precision AS n_distinct,
                   s.most_common_vals::text::text[] AS mcv,
                   s.most_common_freqs::double precision[] AS mcf,
                   s2.histogram_bounds::text::timestamptz[] AS hist
              INTO v_st
              FROM pg_catalog.pg_stats s
              LEFT JOIN pg_catalog.pg_stats s2
                ON s2.schemaname = s.schemaname AND s2.tablename = s.tablename
               AND s2.attname = 'scheduled_at' AND NOT s2.inherited
             WHERE s.schemaname = v_rel.nspname AND s.tablename = 'pyqueue_message'
               AND s.attname = 'queue_name' AND NOT s.inherited;
            IF NOT FOUND THEN
                v_share := 1.0::double precision
                           / GREATEST((SELECT pg_catalog.count(*) FROM pyqueue_queue)::double precision,
                                      1.0::double precision);
            ELSIF v_q.queue_name = ANY (v_st.mcv) THEN
                v_share := v_st.mcf[pg_catalog.array_position(v_st.mcv, v_q.queue_name)];
            ELSE
                v_share := GREATEST(1.0::double precision - v_st.null_frac
                                    - COALESCE((SELECT pg_catalog.sum(f) FROM pg_catalog.unnest(v_st.mcf) f),
                                               0.0::double precision),
                                    0.0::double precision)
                           / GREATEST(CASE WHEN v_st.n_distinct < 0.0::double precision
                                           THEN -v_st.n_distinct * v_total ELSE v_st.n_distinct END
                                      - COALESCE(pg_catalog.cardinality(v_st.mcv), 0)::double precision,
                                      1.0::double precision);
            END IF;
            v_total := v_total * v_share;
            IF ready > c_exact AND v_later > c_exact THEN
                -- Both more than 10,000: the ready share is that of the
                -- table's scheduled_at histogram at or before now.
                SELECT COALESCE(pg_catalog.avg(CASE WHEN b <= v_now THEN 1.0::double precision
                                                    ELSE 0.0::double precision END),
                                0.5::double precision) INTO v_share
                  FROM pg_catalog.unnest(v_st.hist) b;
                ready := GREATEST((c_exact + 1)::double precision, v_total * v_share);
                v_later := GREATEST((c_exact + 1)::double precision, v_total - ready::double precision);
            ELSIF ready > c_exact THEN
                ready := GREATEST((c_exact + 1)::double precision, v_total - v_later::double precision);
            ELSE
                v_later := GREATEST((c_exact + 1)::double precision, v_total - ready::double precision);
            END IF;
        END IF;
        queue := v_q.queue_name;
        delayed := v_later - reserved;
        dead := v_q.dead_count;
        oldest_ready_age_s := extract(epoch FROM v_now - v_oldest)::double precision;
        paused := v_q.paused;
        RETURN NEXT;
    END LOOP;
END;
$$;

-- queue_kind_stats: the messages of in_queue (every queue when NULL) by
-- kind: one row per queue and kind that has messages (queue, kind, ready,
-- delayed, reserved, counted as queue_stats counts them), by queue and kind.
-- Reads every message of the queue, as queue_stats does, so it is a separate
-- read that an operator asks for (`pyqueue-sql stats --kinds`), never part of
-- queue_stats. Reads without locks.
CREATE OR REPLACE FUNCTION queue_kind_stats(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, kind text, ready bigint, delayed bigint, reserved bigint)
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
        SELECT m.queue_name::text, m.p_kind::text,
               pg_catalog.count(*) FILTER (WHERE m.scheduled_at <= v_now),
               pg_catalog.count(*) FILTER (WHERE m.scheduled_at > v_now AND m.reserve_token IS NULL),
               pg_catalog.count(*) FILTER (WHERE m.scheduled_at > v_now AND m.reserve_token IS NOT NULL)
          FROM pyqueue_message m
         WHERE in_queue IS NULL OR m.queue_name::text = in_queue
         GROUP BY m.queue_name, m.p_kind
         ORDER BY m.queue_name, m.p_kind;
END;
$$;
