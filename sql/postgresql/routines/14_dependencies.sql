-- ==== dependencies ====
-- A message that waits for others: pushed with its parents, ready once every
-- parent has succeeded, in the transaction of the commit that ends the last;
-- cancelled when a parent fails or is cancelled.

-- pyqueue__deps_read_committed: raises invalid_argument unless the transaction
-- runs at READ COMMITTED. A routine that ends a message of a queue that keeps
-- results (where dependencies live) reads pyqueue_dependency after the row
-- lock it waited for: a queue_push_after that key-share locked the message and
-- committed while it waited is seen by a statement's new snapshot, never by a
-- REPEATABLE READ or SERIALIZABLE one, whose child would wait for ever. Called
-- before anything of the message changes. No locks.
CREATE OR REPLACE FUNCTION pyqueue__deps_read_committed()
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: a message of a queue that keeps results is ended at READ COMMITTED only (this transaction is %): a child pushed after it by a transaction its snapshot cannot see would wait for ever',
                        pg_catalog.upper(pg_catalog.current_setting('transaction_isolation'))
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- pyqueue__results_lock: the queue's results lock, an advisory lock in
-- memory (it writes nothing and no row lock waits for it): a
-- queue_push_after shares it, for its own queue and each parent's, until its
-- transaction ends; turning the queue's results off (queue_set_result_retention
-- NULL, queue_reset_setting) takes it exclusively, so that it waits for every
-- push in flight naming the queue and then sees its rows (and refuses), or
-- goes first and the push, reading the setting after the lock, refuses.
CREATE OR REPLACE FUNCTION pyqueue__results_lock(in_queue text, in_exclusive boolean)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF in_exclusive THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pyqueue-sql results'), pg_catalog.hashtext(in_queue));
    ELSE
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('pyqueue-sql results'),
                                                        pg_catalog.hashtext(in_queue));
    END IF;
END;
$$;

-- pyqueue__deps_left: what a message's leaving its queue does to the
-- messages that wait for it. (in_queue, in_key, in_kind) has just been
-- deleted by the caller, in this transaction, after which it called this
-- from a new statement (so that a queue_push_after that named it as a
-- parent and committed while the caller waited for the row is seen). With
-- in_ok (it succeeded: committed, popped, moved on) each waiting child's
-- count of parents left goes down, and a child whose count reaches 0 is
-- ready now, in this transaction (a wakeup sent). Otherwise (failed:
-- dead-lettered or dropped; cancelled; removed) each waiting child is
-- cancelled as queue_cancel would (removed, history outcome and result
-- 'cancelled', last_error 'parent (queue q, p_key k, p_kind t) <in_why>'), and the
-- children waiting for it after it, transitively (a work list, no
-- recursion). A child's kind (its count row's other_kind, queue_push_after_on)
-- changes this: a failure callback ('failure') counts a parent that succeeded
-- and is cancelled when its count reaches 0 ('parent (...) succeeded, as every
-- other: no failure to call back', its children walked as above), and is
-- ready, once, when a parent fails or is cancelled (its count row goes, so a
-- later parent's end does nothing to it); an 'always' child counts either
-- end and is ready at 0. The message's own rows as a child go too. Each message costs
-- one read of pyqueue_dependency by its key (the one index), which finds
-- nothing for a message without parents or children. Locks: the rows it
-- deletes and updates there; for each child its message row first (FOR NO
-- KEY UPDATE: the parents of one child that end at once take turns on it,
-- so exactly one of them sees its count row reach 0), then its count row, as
-- the child's own leaving (removed, cancelled) locks them (the other way
-- round, the last parent's commit and the child's removal deadlocked);
-- children in (queue, key, kind) order.
-- Linear in the messages it walks: each element of the work list is copied
-- into scalars before the statements use it (see below), and every statement
-- reads pyqueue_dependency by its key (sequential scans off: the planner,
-- trusting statistics taken while the table was small, may scan it whole).
CREATE OR REPLACE FUNCTION pyqueue__deps_left(in_queue text, in_key text, in_kind text, in_ok boolean,
                                              in_why text)
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off  -- see "Linear" above
AS $$
DECLARE
    v_qs   text[] := ARRAY[in_queue];
    v_ks   text[] := ARRAY[in_key];
    v_ts   text[] := ARRAY[in_kind];
    v_ws   text[] := ARRAY[in_why];
    v_i    integer := 1;
    v_edge record;
    v_any  boolean;
    v_left integer;
    v_msg  pyqueue_message;
    v_dest pyqueue_queue;
    v_now  timestamptz;
    v_q    text;
    v_k    text;
    v_t    text;
    v_w    text;
    v_on   text;
    v_ok   boolean;
    v_fire boolean;
    v_cancel boolean;
BEGIN
    PERFORM pyqueue__deps_read_committed();
    WHILE v_i <= pg_catalog.cardinality(v_qs) LOOP
        v_any := false;
        -- the element in scalars: an array named in a statement is flattened into its parameter at
        -- each execution (a copy of the whole work list per message: quadratic)
        v_q := v_qs[v_i];
        v_k := v_ks[v_i];
        v_t := v_ts[v_i];
        v_w := v_ws[v_i];
        FOR v_edge IN SELECT d.role, d.other_queue::text AS q, d.other_key::text AS k, d.other_kind::text AS t,
                             d.msg_id
                        FROM pyqueue_dependency d
                       WHERE d.queue_name::text = v_q AND d.p_key::text = v_k AND d.p_kind::text = v_t
                       ORDER BY d.role, d.other_queue, d.other_key, d.other_kind LOOP
            v_any := true;
            CONTINUE WHEN v_edge.role <> 'c';
            -- the child's message row first, then its count row (see Locks); its kind on that row
            PERFORM 1 FROM pyqueue_message m
              WHERE m.queue_name::text = v_edge.q AND m.p_key::text = v_edge.k AND m.p_kind::text = v_edge.t
                AND m.id = v_edge.msg_id
                FOR NO KEY UPDATE;
            v_on := NULL;
            SELECT coalesce(w.other_kind::text, 'success') INTO v_on FROM pyqueue_dependency w
             WHERE w.queue_name::text = v_edge.q AND w.p_key::text = v_edge.k AND w.p_kind::text = v_edge.t
               AND w.role = 'w' AND w.msg_id = v_edge.msg_id;
            v_ok := v_i = 1 AND in_ok;
            IF v_on IS NULL THEN
                -- no count row: a 'success' child cancelled below if still waiting; any other already ran
                v_fire := false;
                v_cancel := NOT v_ok;
            ELSIF v_on = 'failure' AND NOT v_ok THEN
                v_fire := true;  -- a parent failed: the failure callback runs now, once
                v_cancel := false;
            ELSIF v_on = 'success' AND NOT v_ok THEN
                v_fire := false;
                v_cancel := true;
            ELSE  -- 'success' or 'failure' with a parent that succeeded, 'always' either way: one parent less
                UPDATE pyqueue_dependency w SET n = w.n - 1
                 WHERE w.queue_name::text = v_edge.q AND w.p_key::text = v_edge.k AND w.p_kind::text = v_edge.t
                   AND w.role = 'w' AND w.msg_id = v_edge.msg_id
                RETURNING w.n INTO v_left;
                v_fire := v_left <= 0 AND v_on <> 'failure';
                v_cancel := v_left <= 0 AND v_on = 'failure';  -- every parent succeeded: nothing to call back
                IF v_cancel THEN
                    DELETE FROM pyqueue_dependency w
                     WHERE w.queue_name::text = v_edge.q AND w.p_key::text = v_edge.k AND w.p_kind::text = v_edge.t
                       AND w.role = 'w';
                END IF;
            END IF;
            IF v_fire THEN
                DELETE FROM pyqueue_dependency w
                 WHERE w.queue_name::text = v_edge.q AND w.p_key::text = v_edge.k AND w.p_kind::text = v_edge.t
                   AND w.role = 'w';
                v_now := pg_catalog.clock_timestamp();
                -- due now, or at its run_at (kept in scheduled_at_initially while it waited)
                UPDATE pyqueue_message m
                   SET scheduled_at = GREATEST(v_now, m.scheduled_at_initially),
                       scheduled_at_initially = GREATEST(v_now, m.scheduled_at_initially)
                 WHERE m.queue_name::text = v_edge.q AND m.p_key::text = v_edge.k AND m.p_kind::text = v_edge.t
                   AND m.id = v_edge.msg_id AND m.scheduled_at = pyqueue__blocked_at();
                IF FOUND THEN
                    PERFORM pyqueue__notify(v_edge.q);
                END IF;
            ELSIF v_cancel THEN
                DELETE FROM pyqueue_message m
                 WHERE m.queue_name::text = v_edge.q AND m.p_key::text = v_edge.k AND m.p_kind::text = v_edge.t
                   AND m.id = v_edge.msg_id AND m.scheduled_at = pyqueue__blocked_at()
                RETURNING * INTO v_msg;
                IF FOUND THEN
                    v_msg.last_error := pg_catalog.left(pg_catalog.format('parent (queue %s, p_key %s, p_kind %s) %s', v_q, v_k,
                                                                          v_t, CASE WHEN v_ok THEN 'succeeded, as every other: no failure to call back'
                                                                                    ELSE v_w END), 2000);
                    v_dest := pyqueue__queue(v_edge.q);
                    v_now := pg_catalog.clock_timestamp();
                    PERFORM pyqueue__archive(v_dest, v_msg, 'cancelled', NULL, v_now);
                    PERFORM pyqueue__record_result(v_dest, v_msg, 'cancelled', NULL, v_now);
                    v_qs := pg_catalog.array_append(v_qs, v_edge.q);  -- in place (an expanded array)
                    v_ks := pg_catalog.array_append(v_ks, v_edge.k);
                    v_ts := pg_catalog.array_append(v_ts, v_edge.t);
                    v_ws := pg_catalog.array_append(v_ws, 'was cancelled'::text);
                END IF;
            END IF;
        END LOOP;
        IF v_any THEN
            DELETE FROM pyqueue_dependency d
             WHERE d.queue_name::text = v_q AND d.p_key::text = v_k AND d.p_kind::text = v_t;
        END IF;
        v_i := v_i + 1;
    END LOOP;
END;
$$;

-- pyqueue__deps_moved: what a message's move to another queue does to its
-- dependency rows. (in_from, in_key, in_kind) has just left in_from for
-- in_to, as the live message of id in_id there (queue_redrive: a dead letter
-- given another chance is the same parent). When in_to keeps results, its
-- rows follow it: those of the message (its children, its parents) move to
-- in_to, and the rows that name it (each child's list of parents, each
-- parent's list of children) name in_to; rows an earlier message of the key
-- left in in_to go first. Its waiting children keep waiting, for it in its
-- new queue. When in_to keeps no results (dependencies live in queues that
-- keep them), its children are cancelled as by its removal
-- (pyqueue__deps_left, 'was moved to a queue that keeps no results').
-- Locks: in_to's results lock (shared), the rows it updates and deletes.
CREATE OR REPLACE FUNCTION pyqueue__deps_moved(in_from text, in_to text, in_key text, in_kind text, in_id bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pyqueue__results_lock(in_to, false);
    IF (SELECT q.result_retention FROM pyqueue_queue q WHERE q.queue_name::text = in_to) IS NULL THEN
        PERFORM pyqueue__deps_left(in_from, in_key, in_kind, false, 'was moved to a queue that keeps no results');
        RETURN;
    END IF;
    DELETE FROM pyqueue_dependency d
     WHERE d.queue_name::text = in_to AND d.p_key::text = in_key AND d.p_kind::text = in_kind;
    UPDATE pyqueue_dependency o
       SET other_queue = in_to, msg_id = CASE WHEN o.role = 'c' THEN coalesce(in_id, o.msg_id) ELSE o.msg_id END
      FROM pyqueue_dependency d
     WHERE d.queue_name::text = in_from AND d.p_key::text = in_key AND d.p_kind::text = in_kind
       AND d.role IN ('c', 'p')
       AND o.queue_name::text = d.other_queue::text AND o.p_key::text = d.other_key::text
       AND o.p_kind::text = d.other_kind::text AND o.role = CASE WHEN d.role = 'c' THEN 'p' ELSE 'c' END
       AND o.other_queue::text = in_from AND o.other_key::text = in_key AND o.other_kind::text = in_kind;
    UPDATE pyqueue_dependency d
       SET queue_name = in_to, msg_id = CASE WHEN d.role = 'w' THEN coalesce(in_id, d.msg_id) ELSE d.msg_id END
     WHERE d.queue_name::text = in_from AND d.p_key::text = in_key AND d.p_kind::text = in_kind;
END;
$$;

-- pyqueue__push_after: queue_push of a message that waits for its parents,
-- in_parents a JSON array of 1 to 1000 objects {"queue", "p_key", "p_kind"}
-- (parents may be in other queues; none may be the message itself or a
-- schedule's occurrence; a parent named more than once counts once, at its
-- first place: parents are a set, one edge each). Answers as queue_push: false, and nothing changes,
-- when a live message has the key and kind (dedup; before the parents are
-- read, whatever they are). A parent is known when
-- its queue keeps results (queue_set_result_retention) and it is live there
-- (it is waited for) or its result there is 'succeeded' (it counts as
-- done); a parent whose result is 'failed' or 'cancelled', or with neither a
-- live message nor a result, is refused (invalid_argument naming it), and
-- nothing is pushed. The message is 'waiting' (queue_result) while a parent
-- has not succeeded: blocked as a FIFO group's waiting member is (a
-- scheduled_at past every ready range: no reserve visits it), with no group.
-- The commit (queue_commit, queue_commit_batch, queue_commit_result, its
-- batch, queue_commit_reserve, queue_pop, queue_move) that ends the last
-- parent makes it ready, in that transaction (pyqueue__deps_left); a parent
-- dead-lettered, dropped, cancelled or removed cancels it, transitively.
-- Ready at once when every parent had already succeeded. Priority 0.
-- in_run_on says when it runs (a dependency of its own kind, kept on its
-- count row 'w' in other_kind): 'success' (queue_push_after) as above;
-- 'failure', a failure callback: ready, once, in the transaction that ends
-- a parent without success (dead-lettered, dropped, cancelled, removed,
-- transitively), cancelled when every parent has succeeded (last_error
-- 'parent (...) succeeded, as every other: no failure to call back'); ready
-- at once when a parent had already failed or been cancelled, refused when
-- every parent had already succeeded; 'always': ready once every parent has
-- ended, whichever way (a parent already failed or cancelled counts as
-- ended). Its consumer reads the parents' outcomes with queue_parent_results.
-- Locks: the queue's shared lock (pyqueue__queue) and the results lock
-- (shared, pyqueue__results_lock) of its queue and of each parent's queue,
-- each parent's queue row FOR KEY SHARE (as a push its own queue's), the new
-- row's unique-index entry, then each live parent's row (FOR KEY SHARE, in
-- the order given, so that a parent's commit either waits for this push or is
-- seen by it as finished), until the transaction ends. No lock that a
-- reserve, a settle or an admin call of a queue waits for (only turning a
-- named queue's results off waits, to refuse), and no row written but its own.
-- The body of queue_push_after_on and queue_push_after_on_with_headers
-- (in_run_at, in_priority, in_headers: NULL for none, as queue_push_with_headers
-- takes them): a message with a run_at is due at the later of its run_at and
-- the moment its parents let it run (its run_at kept in scheduled_at_initially
-- while it waits; pyqueue__deps_left reads it there).
CREATE OR REPLACE FUNCTION pyqueue__push_after(in_queue text, in_key text, in_kind text, in_payload jsonb,
                                               in_parents jsonb, in_run_on text, in_run_at timestamptz,
                                               in_priority integer, in_headers jsonb)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_queue  pyqueue_queue := pyqueue__queue(in_queue, true);
    v_n      integer;
    v_i      integer;
    v_p      jsonb;
    v_pq     text;
    v_pk     text;
    v_pt     text;
    v_pqueue pyqueue_queue;
    v_state  text;
    v_id     bigint;
    v_left   integer := 0;
    v_failed boolean := false;
    v_run_at timestamptz;
    v_headers jsonb;
BEGIN
    PERFORM pyqueue__check_message(in_key, in_kind, in_payload, v_queue.max_payload);
    v_run_at := pyqueue__check_run_at(in_run_at, v_now);
    IF in_headers IS NOT NULL THEN
        v_headers := pyqueue__check_headers(in_headers);
    END IF;
    IF in_run_on IS NULL OR in_run_on NOT IN ('success', 'failure', 'always') THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_on must be ''success'', ''failure'' or ''always'', not %',
                        coalesce(pg_catalog.quote_literal(in_run_on), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF in_parents IS NULL OR pg_catalog.jsonb_typeof(in_parents) <> 'array' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: parents must be a JSON array of {"queue", "p_key", "p_kind"} objects'
            USING ERRCODE = '22023';
    END IF;
    -- its queue's results lock shared until the transaction ends, as each parent's queue's below: a
    -- queue_set_result_retention(NULL) waits for this push, then sees its rows and refuses; the
    -- setting read after the lock (a statement of its own: a new snapshot at READ COMMITTED)
    PERFORM pyqueue__results_lock(in_queue, false);
    PERFORM 1 FROM pyqueue_queue q WHERE q.queue_name::text = in_queue AND q.result_retention IS NOT NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: the queue keeps no results: a message with parents needs them (queue_set_result_retention)'
            USING ERRCODE = '22023';
    END IF;
    v_n := pg_catalog.jsonb_array_length(in_parents);
    IF v_n < 1 OR v_n > 1000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: parents must name 1 to 1000 messages, not %', v_n
            USING ERRCODE = '22023';
    END IF;
    FOR v_i IN 1 .. v_n LOOP  -- every element checked before anything is written
        v_p := in_parents -> (v_i - 1);
        IF pg_catalog.jsonb_typeof(v_p) <> 'object'
           OR pg_catalog.jsonb_typeof(v_p -> 'queue') IS DISTINCT FROM 'string'
           OR pg_catalog.jsonb_typeof(v_p -> 'p_key') IS DISTINCT FROM 'string'
           OR pg_catalog.jsonb_typeof(v_p -> 'p_kind') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%] must be an object with the strings queue, p_key and p_kind', v_i
                USING ERRCODE = '22023';
        END IF;
        PERFORM pyqueue__check_name(pg_catalog.format('parents[%s].queue', v_i), v_p ->> 'queue', 128);
        PERFORM pyqueue__check_name(pg_catalog.format('parents[%s].p_key', v_i), v_p ->> 'p_key', 255);
        PERFORM pyqueue__check_name(pg_catalog.format('parents[%s].p_kind', v_i), v_p ->> 'p_kind', 128);
        IF v_p ->> 'queue' = in_queue AND v_p ->> 'p_key' = in_key AND v_p ->> 'p_kind' = in_kind THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%] is the message itself', v_i USING ERRCODE = '22023';
        END IF;
        IF pyqueue__occurrence_key(v_p ->> 'p_key') THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%] is a schedule''s occurrence', v_i USING ERRCODE = '22023';
        END IF;
    END LOOP;
    INSERT INTO pyqueue_message AS m
           (queue_name, p_key, p_kind, payload, priority, scheduled_at, scheduled_at_initially, created_at, headers)
    VALUES (in_queue, in_key, in_kind, in_payload, coalesce(in_priority, 0), pyqueue__blocked_at(), v_run_at, v_now,
            v_headers)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING
    RETURNING m.id INTO v_id;
    IF NOT FOUND THEN
        RETURN false;  -- dedup
    END IF;
    -- rows an earlier message of this key left behind (one removed by a path that keeps no dependencies)
    DELETE FROM pyqueue_dependency d
     WHERE d.queue_name::text = in_queue AND d.p_key::text = in_key AND d.p_kind::text = in_kind;
    -- Parents are a set: one named again is the same parent, read and recorded once, at the place it
    -- was first named (its ordinal). Its commit walks one edge per child, however often a child named it.
    FOR v_i, v_pq, v_pk, v_pt IN
        SELECT pg_catalog.min(e.ord)::integer, e.p ->> 'queue', e.p ->> 'p_key', e.p ->> 'p_kind'
          FROM pg_catalog.jsonb_array_elements(in_parents) WITH ORDINALITY AS e (p, ord)
         GROUP BY e.p ->> 'queue', e.p ->> 'p_key', e.p ->> 'p_kind'
         ORDER BY 1 LOOP
        v_pqueue := pyqueue__queue(v_pq);  -- (unknown_queue)
        PERFORM pyqueue__results_lock(v_pq, false);
        SELECT * INTO v_pqueue FROM pyqueue_queue q WHERE q.queue_name::text = v_pq FOR KEY SHARE;
        IF v_pqueue.result_retention IS NULL THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%]: its queue keeps no results, so it cannot be a parent', v_i
                USING ERRCODE = '22023';
        END IF;
        PERFORM 1 FROM pyqueue_message m
         WHERE m.queue_name::text = v_pq AND m.p_key::text = v_pk AND m.p_kind::text = v_pt
           FOR KEY SHARE;
        IF FOUND THEN
            INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, other_queue, other_key,
                                            other_kind, msg_id)
            VALUES (v_pq, v_pk, v_pt, 'c', v_i, in_queue, in_key, in_kind, v_id);
            v_left := v_left + 1;
        ELSE
            SELECT r.state INTO v_state FROM pyqueue_result r
             WHERE r.queue_name::text = v_pq AND r.p_key::text = v_pk AND r.p_kind::text = v_pt;
            IF v_state IN ('failed', 'cancelled') AND in_run_on <> 'success' THEN
                v_failed := true;  -- ended already: a failure callback runs at once, 'always' counts it done
            ELSIF v_state IS DISTINCT FROM 'succeeded' THEN
                RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%] %', v_i,
                    CASE WHEN v_state IS NULL THEN 'is unknown: neither live nor a result there'
                         ELSE 'has ' || v_state || ': the message could never run' END
                    USING ERRCODE = '22023';
            END IF;
        END IF;
        INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, other_queue, other_key, other_kind)
        VALUES (in_queue, in_key, in_kind, 'p', v_i, v_pq, v_pk, v_pt);
    END LOOP;
    IF in_run_on = 'failure' AND v_left = 0 AND NOT v_failed THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: every parent has succeeded: a failure callback could never run'
            USING ERRCODE = '22023';
    END IF;
    IF v_left > 0 AND NOT (in_run_on = 'failure' AND v_failed) THEN
        -- its kind on its count row: other_kind NULL for 'success' (as queue_push_after wrote it), else run_on
        INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, msg_id, other_kind)
        VALUES (in_queue, in_key, in_kind, 'w', v_left, v_id, NULLIF(in_run_on, 'success'));
    ELSE  -- every parent has ended already (succeeded; for a failure callback, one failed): due now, or at its run_at
        v_now := GREATEST(pg_catalog.clock_timestamp(), v_run_at);
        UPDATE pyqueue_message m SET scheduled_at = v_now, scheduled_at_initially = v_now
         WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind;
        PERFORM pyqueue__notify(in_queue);
    END IF;
    RETURN true;
END;
$$;

-- queue_push_after_on: pyqueue__push_after without run_at, priority or
-- headers (priority 0, due once its parents let it run). Locks: as
-- pyqueue__push_after.
CREATE OR REPLACE FUNCTION queue_push_after_on(in_queue text, in_key text, in_kind text, in_payload jsonb,
                                               in_parents jsonb, in_run_on text)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
    SELECT pyqueue__push_after(in_queue, in_key, in_kind, in_payload, in_parents, in_run_on, NULL, NULL, NULL);
$$;

-- queue_push_after_on_with_headers: queue_push_after_on with queue_push_with_headers'
-- options: in_run_at (NULL: none; a message is due at the later of its run_at and
-- the moment its parents let it run), in_priority (NULL = 0) and in_headers (NULL or
-- JSON null: none; pyqueue__check_headers, a pyqueue.expires_at among them). Every
-- argument is given (no defaults: an overload beside queue_push_after_on). Locks: as
-- pyqueue__push_after.
CREATE OR REPLACE FUNCTION queue_push_after_on_with_headers(in_queue text, in_key text, in_kind text,
                                                            in_payload jsonb, in_parents jsonb, in_run_on text,
                                                            in_run_at timestamptz, in_priority integer,
                                                            in_headers jsonb)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
    SELECT pyqueue__push_after(in_queue, in_key, in_kind, in_payload, in_parents, in_run_on, in_run_at,
                               in_priority, in_headers);
$$;

-- queue_push_after: queue_push_after_on with run_on 'success' (the message
-- runs once every parent has succeeded; cancelled when one fails or is
-- cancelled). Locks: as queue_push_after_on.
CREATE OR REPLACE FUNCTION queue_push_after(in_queue text, in_key text, in_kind text, in_payload jsonb,
                                            in_parents jsonb)
RETURNS boolean
LANGUAGE sql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
    SELECT queue_push_after_on(in_queue, in_key, in_kind, in_payload, in_parents, 'success');
$$;

-- queue_push_after_batch: many messages that wait for their parents, in one
-- call and one transaction (a chord's 1,000 parts in one round trip):
-- in_messages a JSON array of 1 to 5000 objects, each with the strings p_key
-- and p_kind, payload, parents (as queue_push_after's), and optionally
-- run_on (a string, default 'success'), run_at (a time as text with its
-- offset), priority (an integer) and headers; any other member is refused.
-- Each element is pushed as queue_push_after_on_with_headers pushes it
-- (pyqueue__push_after, in order, so an element may name an earlier one as
-- a parent); a refused element refuses the batch, nothing written, the error
-- naming it ('element N of the batch: ...'). Returns how many were inserted
-- (a live key is skipped: dedup). Locks: as pyqueue__push_after, for each
-- element, until the transaction ends.
CREATE OR REPLACE FUNCTION queue_push_after_batch(in_queue text, in_messages jsonb)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_n     integer;
    v_i     integer := 0;
    v_m     jsonb;
    v_bad   text;
    v_count integer := 0;
    v_text  text;
    v_state text;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    IF in_messages IS NULL OR pg_catalog.jsonb_typeof(in_messages) <> 'array'::text THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: messages must be a JSON array of objects' USING ERRCODE = '22023';
    END IF;
    v_n := pg_catalog.jsonb_array_length(in_messages);
    IF v_n < 1 OR v_n > 5000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: messages must hold 1 to 5000 messages, not %', v_n
            USING ERRCODE = '22023';
    END IF;
    BEGIN  -- one block: an error names its element, and nothing of the batch stays
        FOR v_m IN SELECT e.m FROM pg_catalog.jsonb_array_elements(in_messages) WITH ORDINALITY AS e (m, ord)
                    ORDER BY e.ord LOOP
            v_i := v_i + 1;
            IF pg_catalog.jsonb_typeof(v_m) <> 'object'::text
               OR pg_catalog.jsonb_typeof(v_m -> 'p_key'::text) IS DISTINCT FROM 'string'::text
               OR pg_catalog.jsonb_typeof(v_m -> 'p_kind'::text) IS DISTINCT FROM 'string'::text
               OR pg_catalog.jsonb_typeof(v_m -> 'run_on'::text) NOT IN ('string'::text, 'null'::text)
               OR pg_catalog.jsonb_typeof(v_m -> 'run_at'::text) NOT IN ('string'::text, 'null'::text)
               OR pg_catalog.jsonb_typeof(v_m -> 'priority'::text) NOT IN ('number'::text, 'null'::text) THEN
                RAISE EXCEPTION 'pyqueue:invalid_argument: must be an object with the strings p_key and p_kind, payload, parents and optionally run_on, run_at (text), priority (a number) and headers'
                    USING ERRCODE = '22023';
            END IF;
            SELECT k INTO v_bad FROM pg_catalog.jsonb_object_keys(v_m) AS k
             WHERE k NOT IN ('p_key', 'p_kind', 'payload', 'parents', 'run_on', 'run_at', 'priority', 'headers')
             LIMIT 1;
            IF v_bad IS NOT NULL THEN
                RAISE EXCEPTION 'pyqueue:invalid_argument: unknown member %', pg_catalog.quote_literal(v_bad)
                    USING ERRCODE = '22023';
            END IF;
            IF pyqueue__push_after(in_queue, v_m ->> 'p_key', v_m ->> 'p_kind', v_m -> 'payload', v_m -> 'parents',
                                   coalesce(v_m ->> 'run_on', 'success'), (v_m ->> 'run_at')::timestamptz,
                                   (v_m ->> 'priority')::integer, v_m -> 'headers') THEN
                v_count := v_count + 1;
            END IF;
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS v_text = MESSAGE_TEXT, v_state = RETURNED_SQLSTATE;
        IF v_text LIKE 'pyqueue:%' THEN
            v_text := pg_catalog.regexp_replace(v_text, '^(pyqueue:[a-z_]+: )', '\1element ' || v_i || ' of the batch: ');
        ELSE  -- a conversion (run_at, priority): the argument's error
            v_text := 'pyqueue:invalid_argument: element ' || v_i || ' of the batch: ' || v_text;
            v_state := '22023';
        END IF;
        RAISE EXCEPTION USING MESSAGE = v_text, ERRCODE = v_state;
    END;
    RETURN v_count;
END;
$$;

-- queue_parent_results: the parents of the message (in_key, in_kind) of
-- in_queue (pushed with queue_push_after, live: waiting, ready or held), one
-- row each in the order they were given: ordinal (1, 2, ...), the parent's
-- queue, key and kind, its state as queue_result reads it ('succeeded' with
-- its stored result, 'failed', 'cancelled', or while live 'ready',
-- 'delayed', 'reserved', 'waiting', 'blocked'; 'unknown' when neither, e.g.
-- a parent moved on, whose queue records no result for the move, or whose
-- result was purged), and result: its stored result for 'succeeded', its
-- last_error (a JSON string, or null) for 'failed' and 'cancelled' (what a
-- failure callback reports), NULL otherwise. No rows for a
-- message without parents or not live. For the consumer that holds the
-- child (a fan-in reads its inputs). Reads without locks, in one snapshot.
CREATE OR REPLACE FUNCTION queue_parent_results(in_queue text, in_key text, in_kind text)
RETURNS TABLE (ordinal integer, queue text, p_key text, p_kind text, state text, result jsonb)
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
        SELECT d.n, d.other_queue::text, d.other_key::text, d.other_kind::text,
               coalesce(CASE WHEN m.scheduled_at = pyqueue__blocked_at() AND m.group_key IS NULL THEN 'waiting'
                             WHEN m.scheduled_at = pyqueue__blocked_at() THEN 'blocked'
                             WHEN m.scheduled_at <= v_now THEN 'ready'
                             WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                             WHEN m.p_key IS NOT NULL THEN 'delayed' END,
                        r.state::text, 'unknown'),
               CASE WHEN m.p_key IS NOT NULL THEN NULL
                    WHEN r.state::text IN ('failed', 'cancelled') THEN pg_catalog.to_jsonb(r.last_error::text)
                    ELSE r.result END
          FROM pyqueue_dependency d
          LEFT JOIN pyqueue_message m
            ON m.queue_name::text = d.other_queue::text AND m.p_key::text = d.other_key::text
           AND m.p_kind::text = d.other_kind::text
          LEFT JOIN pyqueue_result r
            ON r.queue_name::text = d.other_queue::text AND r.p_key::text = d.other_key::text
           AND r.p_kind::text = d.other_kind::text
         WHERE d.queue_name::text = in_queue AND d.p_key::text = in_key AND d.p_kind::text = in_kind
           AND d.role = 'p'
           AND EXISTS (SELECT 1 FROM pyqueue_message c
                        WHERE c.queue_name::text = in_queue AND c.p_key::text = in_key AND c.p_kind::text = in_kind)
         ORDER BY d.n;
END;
$$;
