-- pyqueue-sql revision 0007_lean_live_table (postgresql): the routines this revision added or
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

-- queue_create: creates the queue (NULL = the default: 30 s, 10 attempts,
-- no dead-letter queue, no history) or changes the settings given (not NULL)
-- of an existing one; a NULL leaves that setting as it is (queue_reset_setting
-- sets one back to its default). Locks the queue row.
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
    INSERT INTO pyqueue_queue AS q
           (queue_name, visibility_timeout, max_attempts, dead_letter_queue, history_retention)
    VALUES (in_queue,
            coalesce(in_visibility_timeout, interval '30 seconds'),
            coalesce(in_max_attempts, 10),
            in_dead_letter_queue,
            in_history_retention)
    ON CONFLICT (queue_name) DO UPDATE
       SET visibility_timeout = coalesce(in_visibility_timeout, q.visibility_timeout),
           max_attempts       = coalesce(in_max_attempts, q.max_attempts),
           dead_letter_queue  = coalesce(in_dead_letter_queue, q.dead_letter_queue),
           history_retention  = coalesce(in_history_retention, q.history_retention)
    RETURNING (q.xmax = 0) INTO v_new;
    IF v_new THEN
        -- A new queue starts empty: messages left under this name by a drop
        -- that could not see them (one run inside a REPEATABLE READ
        -- transaction, see queue_drop) go now, before any push can reach it.
        DELETE FROM pyqueue_message m WHERE m.queue_name::text = in_queue;
    END IF;
END;
$$;

-- queue_drop: deletes the queue and all its messages. Refuses while another
-- queue names it as dead-letter queue. Locks the queue's messages first (key
-- order), then the queue row: the order in which a commit, rollback or
-- reserve that dead-letters takes them (message, then queue row), so that a
-- drop racing them waits instead of deadlocking. Deleting the queue row waits
-- for every push that holds its key-share lock (pyqueue__queue); the messages
-- are deleted after that, by a statement that (READ COMMITTED) sees what those
-- pushes wrote. Inside a REPEATABLE READ or SERIALIZABLE transaction it cannot
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
    DELETE FROM pyqueue_queue WHERE queue_name::text = in_queue;
    DELETE FROM pyqueue_message m WHERE m.queue_name::text = in_queue;
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
    v_ids   regclass;
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
    -- The id sequence is looked up once per call, not once per row (the
    -- catalog lookup cost a quarter of a 100-row call).
    v_ids := pg_catalog.pg_get_serial_sequence('pyqueue_message', 'id')::regclass;
    WITH batch AS MATERIALIZED (
        SELECT b.k, b.kd, b.pl, b.ra, b.pr, pg_catalog.nextval(v_ids) AS new_id
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

-- queue_release_dead_workers: workers whose heartbeat is older than
-- in_older_than are removed, and their live reservations (reserved_by =
-- their reserve_as) become ready now: token cleared, the delivery counted
-- (attempts stay, as after an expiry; a message that had its last allowed
-- delivery is dead-lettered by the next reserve). Returns the number of
-- messages released. Reads every reserved message (no index on reserved_by):
-- a maintenance call, run it every few heartbeats, not per reserve.
-- Locks the stale worker rows and the released message rows.
CREATE OR REPLACE FUNCTION queue_release_dead_workers(in_older_than interval)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_tags  text[];
    v_count integer;
    v_ready text[];
    v_queue text;
BEGIN
    IF in_older_than IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: older_than must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_duration('older_than', in_older_than, true);
    WITH gone AS (
        DELETE FROM pyqueue_worker w WHERE w.heartbeat_at < v_now - in_older_than
        RETURNING w.worker_name::text || '#'::text || w.worker_id::text AS tag
    )
    SELECT pg_catalog.array_agg(tag) INTO v_tags FROM gone;
    IF v_tags IS NULL THEN
        RETURN 0;
    END IF;
    WITH released AS (
        UPDATE pyqueue_message
           SET scheduled_at = v_now, reserve_token = NULL, reserved_by = NULL
         WHERE reserved_by::text = ANY (v_tags) AND reserve_token IS NOT NULL AND scheduled_at > v_now
        RETURNING queue_name
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT r.queue_name ORDER BY r.queue_name) INTO v_count, v_ready
      FROM released r;
    -- wakeups: ready now, in the queues that exist (a message left in no
    -- queue by a REPEATABLE READ queue_drop has no wakeup row to write)
    FOR v_queue IN SELECT q.queue_name::text FROM pyqueue_queue q
                    WHERE q.queue_name::text = ANY (coalesce(v_ready, '{}'))
                    ORDER BY q.queue_name LOOP
        PERFORM pyqueue__notify(v_queue);
    END LOOP;
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
    queue_create, queue_drop, queue_push_batch, queue_release_dead_workers
  FROM PUBLIC;

-- The caller's search_path again (pinned at the top of this script).
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.search_path_before', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('pyqueue.search_path_before'), false);
    END IF;
END
$$;
