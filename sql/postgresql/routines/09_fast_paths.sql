-- ==== fast paths ====
-- Two steps of the consume cycle in one call: commit the previous reservation
-- and reserve the next, or commit many reservations at once. The semantics of
-- the routines they stand for, in fewer round trips.

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
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
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

-- pyqueue__commit_held: queue_commit_batch's set-based step for a queue that
-- keeps history or results or has FIFO groups (no occurrences of a schedule
-- in the batch): what queue_commit does for each element, a statement for
-- the whole batch instead of a call each. One DELETE of the held messages
-- (found by key, in key order, as pyqueue__delete_held), whose rows feed
-- the history rows ('committed') and the result rows ('succeeded', no
-- result) in the same statement; then each result announced on the result
-- channel, the groups of the heads that left settled once each, in group
-- order (pyqueue__groups_settle, as a pop), and, on a queue that keeps
-- results, the messages that wait for one of them (pyqueue__deps_left,
-- after one probe of pyqueue_dependency for the batch, in a statement
-- after the DELETE, as queue_commit's). Returns how many were deleted.
-- Locks: the deleted rows in key order, then their history and result
-- rows, then each group's row in group order (messages before group rows,
-- as in every routine).
CREATE OR REPLACE FUNCTION pyqueue__commit_held(in_queue pyqueue_queue, in_keys text[], in_kinds text[],
                                                in_tokens uuid[])
RETURNS integer
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_q      text := in_queue.queue_name::text;
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_count  integer;
    v_groups text[];
    v_keys   text[];
    v_kinds  text[];
BEGIN
    WITH gone AS (
        DELETE FROM pyqueue_message m
         USING (SELECT v_q AS q, u.k, u.kd, u.tk
                  FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_tokens))
                       AS u (k, kd, tk)
                 ORDER BY u.k, u.kd) AS b
         WHERE m.queue_name::text = b.q AND m.p_key::text = b.k AND m.p_kind::text = b.kd
           AND m.reserve_token = b.tk
        RETURNING m.*
    ), archived AS (  -- as pyqueue__archive, for the whole set
        INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                     created_at, processed_at, outcome, to_queue, reserved_by, last_error, headers)
        SELECT in_queue.queue_name, g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at,
               v_now, 'committed', NULL, g.reserved_by, g.last_error, g.headers
          FROM gone g WHERE in_queue.history_retention IS NOT NULL
    ), recorded AS (  -- as pyqueue__record_result, for the whole set
        INSERT INTO pyqueue_result AS r (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                         progress, finished_at)
        SELECT in_queue.queue_name, g.p_key, g.p_kind, 'succeeded', NULL, NULL, g.attempts, g.progress, v_now
          FROM gone g WHERE in_queue.result_retention IS NOT NULL
        ON CONFLICT (queue_name, p_key, p_kind) DO UPDATE
           SET state = EXCLUDED.state, result = EXCLUDED.result, last_error = EXCLUDED.last_error,
               attempts = EXCLUDED.attempts, progress = EXCLUDED.progress, finished_at = EXCLUDED.finished_at
    )
    SELECT pg_catalog.count(*)::integer,
           pg_catalog.array_agg(g.group_key::text) FILTER (WHERE g.group_key IS NOT NULL),
           pg_catalog.array_agg(g.p_key::text ORDER BY g.p_key, g.p_kind),
           pg_catalog.array_agg(g.p_kind::text ORDER BY g.p_key, g.p_kind)
      INTO v_count, v_groups, v_keys, v_kinds
      FROM gone g;
    IF v_count = 0 THEN
        RETURN 0;
    END IF;
    IF in_queue.result_retention IS NOT NULL THEN
        PERFORM pyqueue__deps_read_committed();  -- children they may have are seen at READ COMMITTED only
        PERFORM pyqueue__result_notify(v_q, u.k, u.kd, 'succeeded')
           FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_kinds)) AS u (k, kd);
    END IF;
    IF v_groups IS NOT NULL THEN
        PERFORM pyqueue__groups_settle(v_q, v_groups, pg_catalog.clock_timestamp());
    END IF;
    IF in_queue.result_retention IS NOT NULL THEN  -- dependencies live in queues that keep results
        PERFORM pyqueue__deps_left(v_q, w.k, w.kd, true, NULL)
           FROM (SELECT u.k, u.kd, u.o
                   FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_kinds)) WITH ORDINALITY AS u (k, kd, o)
                  WHERE EXISTS (SELECT 1 FROM pyqueue_dependency d
                                 WHERE d.queue_name::text = v_q AND d.p_key::text = u.k AND d.p_kind::text = u.kd)
                  ORDER BY u.o) AS w;
    END IF;
    RETURN v_count;
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
    in_token   text,
    in_worker  text     DEFAULT NULL,
    in_timeout interval DEFAULT NULL,
    in_n       integer  DEFAULT 1,
    in_kinds   text[]   DEFAULT NULL)
RETURNS TABLE (committed boolean, p_key varchar, p_kind varchar, payload jsonb, token uuid,
               priority integer, attempts integer, created_at timestamptz,
               scheduled_at_initially timestamptz, headers jsonb)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
#variable_conflict use_column
DECLARE
    v_token uuid;
    v_queue     pyqueue_queue := pyqueue__queue(in_queue);
    v_committed boolean;
    v_got       integer;
    v_group     text;
BEGIN
    -- The same checks as queue_reserve, before anything changes.
    PERFORM pyqueue__check_reserve(in_worker, in_timeout, in_n, in_kinds);
    IF in_timeout > v_queue.max_reservation THEN
        PERFORM pyqueue__refuse_reservation(v_queue.max_reservation);
    END IF;
    IF NOT (in_key IS NULL AND in_kind IS NULL AND in_token IS NULL) THEN
        v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
        -- The commit below gives this transaction its id, after which the
        -- reserve could not move the queue's ready bound (a proposal needs
        -- a clock read before the id: pyqueue__ready_from_advance): its
        -- turn, once a second, comes first.
        IF NOT v_queue.paused AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL
           AND pg_catalog.current_setting('transaction_isolation') = 'read committed'
           AND EXISTS (SELECT 1 FROM pyqueue_ready_from r
                        WHERE r.queue_name::text = in_queue
                          AND r.moved_at < pg_catalog.clock_timestamp() - interval '1 second') THEN
            PERFORM pyqueue__ready_from_advance(in_queue, pg_catalog.clock_timestamp());
        END IF;
        IF v_queue.history_retention IS NULL AND v_queue.result_retention IS NULL
           AND in_key NOT LIKE '%@____-__-__T__:__:__Z' THEN
            -- Nothing to archive or record, not a schedule's occurrence: the DELETE is all of queue_commit.
            DELETE FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
               AND m.reserve_token = v_token
            RETURNING m.group_key INTO v_group;
            v_committed := FOUND;
            IF v_group IS NOT NULL THEN
                PERFORM pyqueue__group_settle(in_queue, v_group, pg_catalog.clock_timestamp(), true);
            END IF;
        ELSE
            -- Exactly queue_commit: the history and result rows, the next occurrence of a schedule.
            v_committed := queue_commit(in_queue, in_key, in_kind, v_token);
        END IF;
    END IF;
    RETURN QUERY
        SELECT v_committed, r.c_key, r.c_kind, r.c_payload, r.c_token, r.c_priority, r.c_attempts,
               r.c_created_at, r.c_scheduled_at_initially, r.c_headers
          FROM pyqueue__reserve(v_queue, in_worker, in_timeout, in_n, in_kinds) AS r;
    GET DIAGNOSTICS v_got = ROW_COUNT;
    IF v_got = 0 THEN
        RETURN QUERY SELECT v_committed, NULL::varchar, NULL::varchar, NULL::jsonb, NULL::uuid,
                            NULL::integer, NULL::integer, NULL::timestamptz, NULL::timestamptz, NULL::jsonb;
    END IF;
END;
$$;

-- queue_commit_reserve with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
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
               scheduled_at_initially timestamptz, headers jsonb)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT * FROM queue_commit_reserve(in_queue, in_key, in_kind, in_token::text, in_worker, in_timeout, in_n, in_kinds)
$$;

-- queue_commit_batch: commits many reservations in one statement (element i
-- of the three arrays names one reservation). Returns how many were deleted;
-- a reservation whose token no longer holds is skipped (not counted).
-- Refuses, changing nothing, arrays that are NULL, not one-dimensional, of
-- different lengths, or hold a NULL/empty/too long/space-ended key or kind or
-- a NULL or malformed token (text or uuid elements). Each message as
-- queue_commit (history and result rows, a group's next message, a
-- schedule's next occurrence): a batch with an occurrence element by element,
-- else one statement a step for the whole batch (pyqueue__commit_held).
-- Locks: the deleted rows, in key order (the order queue_drop
-- locks them in, so the two cannot deadlock), then as pyqueue__commit_held.
CREATE OR REPLACE FUNCTION queue_commit_batch(in_queue text, in_keys text[], in_kinds text[], in_tokens text[])
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_n     integer;
    v_bad   integer;
    v_count integer := 0;
    v_queue pyqueue_queue;
    v_one   record;
    v_texts     text[];
    v_tokens    uuid[];
    v_malformed integer;
    v_occurrence boolean;
BEGIN
    v_queue := pyqueue__queue(in_queue);
    IF in_keys IS NULL OR in_kinds IS NULL OR in_tokens IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds and tokens must not be NULL'
            USING ERRCODE = '22023';
    END IF;
    v_texts := in_tokens;
    v_n := pg_catalog.cardinality(in_keys);
    IF pg_catalog.array_ndims(in_keys) > 1 OR pg_catalog.array_ndims(in_kinds) > 1 OR pg_catalog.array_ndims(v_texts) > 1
       OR pg_catalog.cardinality(in_kinds) <> v_n OR pg_catalog.cardinality(v_texts) <> v_n THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds and tokens must have the same length'
            USING ERRCODE = '22023';
    END IF;
    IF v_n > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: a batch takes at most 10000 messages, this one has % (split it)', v_n
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.min(b.ord) FILTER (WHERE pyqueue__bad_name(b.k, 255) OR pyqueue__bad_name(b.kd, 128) OR b.tk IS NULL),
           pg_catalog.bool_or(b.k LIKE '%@____-__-__T__:__:__Z')  -- a schedule's occurrence (see below)
      INTO v_bad, v_occurrence
      FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(v_texts))
           WITH ORDINALITY AS b (k, kd, tk, ord);
    -- Every token shaped as MySQL's are (8-4-4-4-12 hex digits, either case): then each casts to a
    -- uuid whose text is the token in lower case, which one comparison of the whole arrays shows
    -- (NULL elements, refused above, drop out of both sides). A regular expression per element
    -- cost a quarter of the call; it runs only when that comparison fails, to find the element
    -- (uuid's input also takes other shapes: braces, no or other hyphens).
    BEGIN
        v_tokens := v_texts::uuid[];
    EXCEPTION WHEN invalid_text_representation THEN
        v_tokens := NULL;
    END;
    IF v_tokens IS NULL
       OR pg_catalog.array_to_string(v_tokens, ',') <> pg_catalog.lower(pg_catalog.array_to_string(v_texts, ',')) THEN
        SELECT pg_catalog.min(b.ord) INTO v_malformed  -- MySQL's error for a token not shaped like one
          FROM pg_catalog.unnest(v_texts) WITH ORDINALITY AS b (tk, ord)
         WHERE b.tk !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$';
    END IF;
    IF v_malformed IS NOT NULL AND v_malformed < coalesce(v_bad, v_n + 1) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch: bad p_key/p_kind or malformed token', v_malformed
            USING ERRCODE = '22023';
    END IF;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch has a NULL, empty, too long or space-ended p_key/p_kind or a NULL token', v_bad
            USING ERRCODE = '22023';
    END IF;
    IF v_occurrence THEN
        -- A batch holding occurrences of a schedule: each element through
        -- queue_commit (history and result rows, next occurrence, the next
        -- message of a group), in key order.
        FOR v_one IN SELECT b.k, b.kd, b.tk
                       FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(v_tokens))
                            WITH ORDINALITY AS b (k, kd, tk, ord)
                      ORDER BY b.k, b.kd, b.ord LOOP
            IF queue_commit(in_queue, v_one.k, v_one.kd, v_one.tk) THEN
                v_count := v_count + 1;
            END IF;
        END LOOP;
        RETURN v_count;
    END IF;
    IF v_queue.history_retention IS NOT NULL OR v_queue.result_retention IS NOT NULL
       OR EXISTS (SELECT 1 FROM pyqueue_group g WHERE g.queue_name::text = in_queue) THEN
        -- A queue that keeps history or results or has FIFO groups: queue_commit's steps, each one
        -- statement for the batch (pyqueue__commit_held)
        RETURN pyqueue__commit_held(v_queue, in_keys, in_kinds, v_tokens);
    END IF;
    RETURN pyqueue__delete_held(in_queue, in_keys, in_kinds, v_tokens);
END;
$$;
