-- ==== browse ====
-- Reads for browsing a queue and its throughput: queue_messages, queue_groups,
-- queue_throughput; what holds back cleanup: queue_horizon.

-- queue_messages: a page of in_queue's live messages in key order (p_key,
-- then p_kind), for browsing a queue without SQL: in_state 'ready',
-- 'delayed' or 'reserved' (as queue_stats counts them; NULL = all),
-- in_key_prefix (NULL = any key) keeps the keys that start with it, and
-- (in_after_key, in_after_kind) is the paging cursor: the last row of the
-- previous page (both NULL for the first page). in_n rows at most (NULL =
-- 100, at most 1000). Rows: p_key, p_kind, state, priority, attempts,
-- scheduled_at, created_at, reserved_by, last_error, dead_from (in a
-- dead-letter queue: the queue it came from), headers (no payload:
-- queue_message shows one message whole). Reads the primary key from the
-- cursor on, without locks; a state or prefix that few rows match costs a
-- walk over the queue's rows after the cursor until the page is full.
CREATE OR REPLACE FUNCTION queue_messages(in_queue text, in_state text DEFAULT NULL,
                                          in_key_prefix text DEFAULT NULL, in_after_key text DEFAULT NULL,
                                          in_after_kind text DEFAULT NULL, in_n integer DEFAULT NULL)
RETURNS TABLE (p_key text, p_kind text, state text, priority integer, attempts integer,
               scheduled_at timestamptz, created_at timestamptz, reserved_by text, last_error text,
               dead_from text, headers jsonb)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
-- planned for each call's own cursor, prefix and state (a generic plan cannot use them)
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pyqueue__queue(in_queue);
    IF in_state IS NOT NULL AND in_state NOT IN ('ready'::text, 'delayed'::text, 'reserved'::text) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: state must be ready, delayed, reserved or NULL (every state)'
            USING ERRCODE = '22023';
    END IF;
    IF in_key_prefix IS NOT NULL AND (in_key_prefix = '' OR pg_catalog.length(in_key_prefix) > 255) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: key_prefix must be 1 to 255 characters (NULL = any key)'
            USING ERRCODE = '22023';
    END IF;
    IF (in_after_key IS NULL) <> (in_after_kind IS NULL) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: after_key and after_kind go together (both NULL for the first page)'
            USING ERRCODE = '22023';
    END IF;
    IF in_after_key IS NOT NULL THEN
        PERFORM pyqueue__check_name('after_key', in_after_key, 255);
        PERFORM pyqueue__check_name('after_kind', in_after_kind, 128);
    END IF;
    IF in_n < 1 OR in_n > 1000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be from 1 to 1000' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
        SELECT m.p_key::text, m.p_kind::text,
               CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                    WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                    ELSE 'delayed' END::text,
               m.priority, m.attempts, m.scheduled_at, m.created_at, m.reserved_by::text, m.last_error::text,
               m.dead_from::text, m.headers
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue
           AND (in_after_key IS NULL OR (m.p_key::text, m.p_kind::text) > (in_after_key, in_after_kind))
           AND (in_key_prefix IS NULL OR pg_catalog.starts_with(m.p_key::text, in_key_prefix))
           AND (in_state IS NULL
                OR in_state = CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                                   WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                                   ELSE 'delayed' END::text)
         ORDER BY m.p_key, m.p_kind
         LIMIT coalesce(in_n, 100);
END;
$$;

-- queue_groups: in_queue's FIFO groups that hold messages, by group_key, at
-- most in_n (NULL = 100, 1 to 1000): the group, its head (p_key, p_kind,
-- state as queue_message's; with a group limit above 1, the first of its
-- heads), how many messages it holds (its heads included), group_limit (the
-- k in effect: the group's own, else the queue's default, else 1) and
-- in_flight (its heads: the messages that are not blocked, reserved or
-- not). Reads without locks; counts each listed group's messages.
-- Installs of earlier versions returned no group_limit and in_flight: the
-- function is dropped first (a function cannot change its result columns in
-- place), and with it its grants (pyqueue-sql grant gives them again).
DO $$
DECLARE
    v_old regprocedure := pg_catalog.to_regprocedure('queue_groups(text, integer)');
BEGIN
    IF v_old IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM pg_catalog.pg_proc p
            WHERE p.oid OPERATOR(pg_catalog.=) v_old::pg_catalog.oid
              AND 'group_limit'::text OPERATOR(pg_catalog.=) ANY (p.proargnames::text[])) THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_old);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION queue_groups(in_queue text, in_n integer DEFAULT NULL)
RETURNS TABLE (group_key text, head_key text, head_kind text, head_state text, messages bigint,
               group_limit integer, in_flight bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pyqueue__queue(in_queue);
    IF in_n < 1 OR in_n > 1000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be from 1 to 1000' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
        SELECT g.group_key::text, g.head_key::text, g.head_kind::text,
               (SELECT CASE WHEN h.scheduled_at <= v_now THEN 'ready'
                            WHEN h.reserve_token IS NOT NULL THEN 'reserved'
                            ELSE 'delayed' END
                  FROM pyqueue_message h
                 WHERE h.queue_name::text = g.queue_name::text AND h.p_key::text = g.head_key::text
                   AND h.p_kind::text = g.head_kind::text),
               (SELECT pg_catalog.count(*) FROM pyqueue_message m
                 WHERE m.queue_name::text = g.queue_name::text AND m.group_key::text = g.group_key::text),
               coalesce((SELECT l.k FROM pyqueue_group_limit l
                          WHERE l.queue_name::text = g.queue_name::text
                            AND (l.group_key::text = g.group_key::text OR l.group_key::text = ''::text)
                          ORDER BY l.group_key::text = ''::text
                          LIMIT 1), 1),
               (SELECT pg_catalog.count(*) FROM pyqueue_message m
                 WHERE m.queue_name::text = g.queue_name::text AND m.group_key::text = g.group_key::text
                   AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00')
          FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue
         ORDER BY g.group_key
         LIMIT coalesce(in_n, 100);
END;
$$;

-- queue_throughput: how many messages left in_queue (every queue when NULL)
-- per minute since in_since (NULL = an hour ago; at most a day ago, not in
-- the future), by outcome: rows (queue, minute, committed, dead_lettered,
-- moved, popped), minutes without any left out, by queue and minute.
-- Counted from pyqueue_history for a queue with a history_retention; for one
-- without that keeps results (a result_retention: an app's queue of a
-- store_result task), from pyqueue_result (committed: succeeded, dead_lettered:
-- failed, moved and popped 0); a queue that keeps neither has none
-- (queue_settings says which): nothing is counted on the commit path. Reads
-- the (queue_name, processed_at) or (queue_name, finished_at) index range of
-- each queue, without locks.
CREATE OR REPLACE FUNCTION queue_throughput(in_queue text DEFAULT NULL, in_since timestamptz DEFAULT NULL)
RETURNS TABLE (queue text, minute timestamptz, committed bigint, dead_lettered bigint, moved bigint,
               popped bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
-- planned for each call's own range: a generic plan made after calls for a whole hour scans the
-- whole history table, also for the two minutes a poller asks for next
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_since timestamptz;
    v_queue text;
    v_results boolean;
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    IF in_since IS NOT NULL AND NOT pg_catalog.isfinite(in_since) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: since must be a finite time' USING ERRCODE = '22023';
    END IF;
    IF in_since > v_now THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: since must not be in the future' USING ERRCODE = '22023';
    END IF;
    IF in_since < v_now - interval '1 day' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: since must be within the last day' USING ERRCODE = '22023';
    END IF;
    v_since := coalesce(in_since, v_now - interval '1 hour');
    -- one queue at a time: each statement reads that queue's index range (a join of all
    -- queues with the history can be planned as a scan of the whole history table)
    FOR v_queue, v_results IN
        SELECT q.queue_name::text, q.history_retention IS NULL AND q.result_retention IS NOT NULL FROM pyqueue_queue q
         WHERE in_queue IS NULL OR q.queue_name::text = in_queue
         ORDER BY q.queue_name
    LOOP
        IF v_results THEN
            RETURN QUERY
                SELECT v_queue, pg_catalog.date_trunc('minute'::text, r.finished_at),
                       pg_catalog.count(*) FILTER (WHERE r.state::text = 'succeeded'::text),
                       pg_catalog.count(*) FILTER (WHERE r.state::text = 'failed'::text),
                       0::bigint, 0::bigint
                  FROM pyqueue_result r
                 WHERE r.queue_name::text = v_queue AND r.finished_at >= v_since
                 GROUP BY 2
                HAVING pg_catalog.count(*) FILTER (WHERE r.state::text IN ('succeeded'::text, 'failed'::text)) > 0
                 ORDER BY 2;
            CONTINUE;
        END IF;
        RETURN QUERY
            SELECT v_queue, pg_catalog.date_trunc('minute'::text, h.processed_at),
                   pg_catalog.count(*) FILTER (WHERE h.outcome::text = 'committed'::text),
                   pg_catalog.count(*) FILTER (WHERE h.outcome::text = 'dead_lettered'::text),
                   pg_catalog.count(*) FILTER (WHERE h.outcome::text = 'moved'::text),
                   pg_catalog.count(*) FILTER (WHERE h.outcome::text = 'popped'::text)
              FROM pyqueue_history h
             WHERE h.queue_name::text = v_queue AND h.processed_at >= v_since
             GROUP BY 2
             ORDER BY 2;
    END LOOP;
END;
$$;

-- queue_horizon: what holds back cleanup in this database (VACUUM cannot
-- remove a dead row, a consumed message's included, that a transaction still
-- open might see), as one row: oldest_age_s (how long the holder's transaction
-- has been open, in seconds), backlog (how many transactions old the snapshot
-- or transaction id it holds is: every dead row since then stays), and the
-- holder: 'session' (pid, user_name, state, xact_start, query_start from
-- pg_stat_activity; a standby's walsender with hot_standby_feedback
-- included), 'prepared transaction' (state is its gid) or 'replication slot'
-- (state is its name). The caller's own session is left out. No holder: a row
-- of backlog 0 and NULLs. SECURITY DEFINER: the owner's view of
-- pg_stat_activity (a superuser's or pg_read_all_stats' sees every role's
-- sessions). Reads the statistics views, no locks; no query text is returned.
CREATE OR REPLACE FUNCTION queue_horizon()
RETURNS TABLE (oldest_age_s double precision, backlog bigint, holder text, pid bigint, user_name text,
               state text, xact_start timestamptz, query_start timestamptz)
LANGUAGE sql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
    WITH holders AS (
        SELECT GREATEST(pg_catalog.age(a.backend_xmin), pg_catalog.age(a.backend_xid)) AS xid_age,
               'session'::text AS holder, a.pid::bigint AS pid, a.usename::text AS user_name,
               a.state::text AS state, a.xact_start, a.query_start
          FROM pg_catalog.pg_stat_activity a
         WHERE (a.datname = pg_catalog.current_database() OR a.backend_type = 'walsender'::text)
           AND a.pid <> pg_catalog.pg_backend_pid()
           AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
        UNION ALL
        SELECT pg_catalog.age(p.transaction), 'prepared transaction'::text, NULL::bigint, p.owner::text,
               p.gid, p.prepared, NULL::timestamptz
          FROM pg_catalog.pg_prepared_xacts p
         WHERE p.database = pg_catalog.current_database()
        UNION ALL
        SELECT pg_catalog.age(s.xmin), 'replication slot'::text, s.active_pid::bigint, NULL::text,
               s.slot_name::text, NULL::timestamptz, NULL::timestamptz
          FROM pg_catalog.pg_replication_slots s
         WHERE s.xmin IS NOT NULL AND (s.database IS NULL OR s.database = pg_catalog.current_database())
    )
    SELECT pg_catalog.date_part('epoch'::text, pg_catalog.clock_timestamp() - h.xact_start),
           COALESCE(h.xid_age, 0)::bigint, h.holder, h.pid, h.user_name, h.state, h.xact_start,
           h.query_start
      FROM (SELECT 1) AS one
      LEFT JOIN (SELECT * FROM holders ORDER BY xid_age DESC NULLS LAST, xact_start LIMIT 1) AS h ON true;
$$;
