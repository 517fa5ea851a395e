-- pyqueue-sql revision 0005_browse_and_throughput (postgresql): the routines this revision added or
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

-- queue_messages: a page of in_queue's live messages in key order (p_key,
-- then p_kind), for browsing a queue without SQL: in_state 'ready',
-- 'delayed' or 'reserved' (as queue_stats counts them; NULL = all),
-- in_key_prefix (NULL = any key) keeps the keys that start with it, and
-- (in_after_key, in_after_kind) is the paging cursor: the last row of the
-- previous page (both NULL for the first page). in_n rows at most (NULL =
-- 100, at most 1000). Rows: p_key, p_kind, state, priority, attempts,
-- scheduled_at, created_at, reserved_by, last_error, dead_from (in a
-- dead-letter queue: the queue it came from; no payload:
-- queue_message shows one message whole). Reads the primary key from the
-- cursor on, without locks; a state or prefix that few rows match costs a
-- walk over the queue's rows after the cursor until the page is full.
CREATE OR REPLACE FUNCTION queue_messages(in_queue text, in_state text DEFAULT NULL,
                                          in_key_prefix text DEFAULT NULL, in_after_key text DEFAULT NULL,
                                          in_after_kind text DEFAULT NULL, in_n integer DEFAULT NULL)
RETURNS TABLE (p_key text, p_kind text, state text, priority integer, attempts integer,
               scheduled_at timestamptz, created_at timestamptz, reserved_by text, last_error text,
               dead_from text)
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
               m.dead_from::text
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

-- queue_throughput: how many messages left in_queue (every queue when NULL)
-- per minute since in_since (NULL = an hour ago; at most a day ago, not in
-- the future), by outcome: rows (queue, minute, committed, dead_lettered,
-- moved, popped), minutes without any left out, by queue and minute.
-- Counted from pyqueue_history, so only a queue with a history_retention
-- has any (queue_settings says which do): nothing is counted on the commit
-- path. Reads the (queue_name, processed_at) index range of each queue,
-- without locks.
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
    FOR v_queue IN
        SELECT q.queue_name::text FROM pyqueue_queue q
         WHERE in_queue IS NULL OR q.queue_name::text = in_queue
         ORDER BY q.queue_name
    LOOP
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

-- No routine is callable by PUBLIC (PostgreSQL's default for a new function):
-- SECURITY DEFINER routines open to everyone would let any role push and
-- reserve. Applications get EXECUTE on the routines of their capability
-- (pyqueue-sql grant; README "Least privilege"). Internal helpers (pyqueue__*)
-- are granted to nobody: only the routines, running as their owner, call them.
-- The list is static (no SQL built from names); a routine added to this file
-- must be added here (tests/security/test_privileges.py fails otherwise), in
-- the order of the sections: the helpers, then the routines topic by topic.
REVOKE EXECUTE ON FUNCTION
    queue_messages, queue_throughput
  FROM PUBLIC;

-- The caller's search_path again (pinned at the top of this script).
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.search_path_before', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('pyqueue.search_path_before'), false);
    END IF;
END
$$;
