-- pyqueue-sql revision 0008_single_pass_batches (postgresql): the routines this revision added or
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

-- queue_commit: deletes the message if in_token still holds its reservation;
-- false otherwise (expired and re-reserved, committed already, or removed).
-- Locks the message row (and, for a schedule's pending occurrence, the
-- schedule row).
CREATE OR REPLACE FUNCTION queue_commit(in_queue text, in_key text, in_kind text, in_token uuid)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_msg   pyqueue_message;
BEGIN
    PERFORM pyqueue__check_reservation(in_key, in_kind, in_token);
    IF v_queue.history_retention IS NULL AND in_key NOT LIKE '%@____-__-__T__:__:__Z' THEN
        -- Nothing to archive, not a schedule's occurrence: the DELETE is all of it.
        DELETE FROM pyqueue_message
         WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind
           AND reserve_token = in_token;
        RETURN FOUND;
    END IF;
    DELETE FROM pyqueue_message
     WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind AND reserve_token = in_token
    RETURNING * INTO v_msg;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pyqueue__archive(v_queue, v_msg, 'committed', NULL, pg_catalog.clock_timestamp());
    IF in_key LIKE '%@____-__-__T__:__:__Z' THEN  -- a recurring message's occurrence
        PERFORM pyqueue__schedule_next(in_queue, in_key, in_kind);
    END IF;
    RETURN true;
END;
$$;

-- pyqueue__delete_held: queue_commit_batch's set-based step (no history, no
-- occurrences): deletes the messages of in_queue that element i of the
-- three arrays names, if its token still holds; returns how many. One
-- DELETE driven by the batch sorted by key: the settings (of this one
-- statement's function) leave it a nested loop whose outer side is that
-- sorted batch (or, on a tiny table, the primary key's index scan, also in
-- key order), so each row is found by its key, checked against its token
-- and locked in key order, without a separate locking read.
CREATE OR REPLACE FUNCTION pyqueue__delete_held(in_queue text, in_keys text[], in_kinds text[], in_tokens uuid[])
RETURNS integer
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
    v_count integer;
BEGIN
    DELETE FROM pyqueue_message m
     USING (SELECT u.k, u.kd, u.tk
              FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_tokens))
                   AS u (k, kd, tk)
             ORDER BY u.k, u.kd) AS b
     WHERE m.queue_name::text = in_queue AND m.p_key::text = b.k AND m.p_kind::text = b.kd
       AND m.reserve_token = b.tk;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
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
    RETURN pyqueue__delete_held(in_queue, in_keys, in_kinds, in_tokens);
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
    queue_commit, pyqueue__delete_held, queue_commit_batch
  FROM PUBLIC;

-- The caller's search_path again (pinned at the top of this script).
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.search_path_before', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('pyqueue.search_path_before'), false);
    END IF;
END
$$;
