-- pyqueue-sql revision 0009_plans_without_statistics (postgresql): the routines this revision added or
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

-- queue_next_scheduled_at: when the next message of the queue (of one of
-- in_kinds, NULL = any) becomes eligible: one row (next_scheduled_at,
-- wait_s), wait_s = seconds from now, 0 when a message is ready already;
-- both NULL when the queue holds no such message or is paused. Counts
-- delayed messages and reservations (their expiry), so a worker that sleeps
-- wait_s wakes when a delayed message or an expired reservation is due.
-- One probe of pyqueue_message_due_idx (the earliest scheduled_at of the
-- queue; with in_kinds, the earliest of those kinds), whatever the number of
-- messages or of distinct priorities. Reads without locks. The settings keep
-- it that probe when the table has no statistics yet: the planner's guess
-- of a few rows for the queue otherwise makes reading them all and sorting
-- look as cheap, which it is not for a queue that grew in a burst. They
-- cover the function's other statement too, the queue row's lookup by its
-- key, which they leave as it is.
CREATE OR REPLACE FUNCTION queue_next_scheduled_at(in_queue text, in_kinds text[] DEFAULT NULL)
RETURNS TABLE (next_scheduled_at timestamptz, wait_s double precision)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
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

-- pyqueue__delete_held: queue_commit_batch's set-based step (no history, no
-- occurrences): deletes the messages of in_queue that element i of the
-- three arrays names, if its token still holds; returns how many. One
-- DELETE driven by the batch sorted by key: the settings (of this one
-- statement's function) leave it a nested loop whose outer side is that
-- sorted batch (or, on a tiny table, the primary key's index scan, also in
-- key order), so each row is found by its key, checked against its token
-- and locked in key order, without a separate locking read. The queue name
-- comes from the batch, not from a condition on the table: the table then
-- has no condition of its own whose row estimate could make reading the
-- whole queue once look cheaper than a probe per element. That estimate is
-- a guess while the table has no statistics (a fresh install, a queue that
-- grew in a burst before autovacuum analyzed it), and the plan it picked
-- compared every row of the queue with every element: 250 ms for a batch of
-- 100 on a 20k-message queue, against 1 ms.
CREATE OR REPLACE FUNCTION pyqueue__delete_held(in_queue text, in_keys text[], in_kinds text[], in_tokens uuid[])
RETURNS integer
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
    v_count integer;
BEGIN
    DELETE FROM pyqueue_message m
     USING (SELECT in_queue AS q, u.k, u.kd, u.tk
              FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_tokens))
                   AS u (k, kd, tk)
             ORDER BY u.k, u.kd) AS b
     WHERE m.queue_name::text = b.q AND m.p_key::text = b.k AND m.p_kind::text = b.kd
       AND m.reserve_token = b.tk;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
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
    queue_next_scheduled_at, pyqueue__delete_held
  FROM PUBLIC;

-- The caller's search_path again (pinned at the top of this script).
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.search_path_before', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('pyqueue.search_path_before'), false);
    END IF;
END
$$;
