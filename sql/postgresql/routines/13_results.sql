-- ==== results ====
-- What became of one message, for the producer that pushed it: a queue with
-- a result_retention records the outcome of every message that finishes
-- (pyqueue_result: 'succeeded' with the result its consumer gave,
-- 'failed', 'cancelled'); a producer reads it, waits for it or listens for
-- it, and may cancel a message; the consumer holding it reports progress,
-- learns of a cancel request when it renews, and may end it as cancelled.
-- A move to another queue and queue_remove record nothing.

-- pyqueue__result_channel: the NOTIFY channel of a queue's finished results,
-- 'pyqueue_result_' + md5 of its name (47 characters: a channel name is an
-- identifier of at most 63 bytes). No lookup, no locks.
CREATE OR REPLACE FUNCTION pyqueue__result_channel(in_queue text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'pyqueue_result_' || pg_catalog.md5(in_queue) $$;

-- pyqueue__result_notify: tells the listeners of the queue's result channel
-- that (in_key, in_kind) finished in in_state: the payload is the JSON text
-- {"key": ..., "kind": ..., "state": ...}. Never throttled (unlike the
-- wakeups: each result is news to the one producer waiting for it);
-- delivered when the caller's transaction commits. Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__result_notify(in_queue text, in_key text, in_kind text, in_state text)
RETURNS void
LANGUAGE sql
AS $$
    SELECT pg_catalog.pg_notify(pyqueue__result_channel(in_queue),
                                pg_catalog.jsonb_build_object('key', in_key, 'kind', in_kind,
                                                              'state', in_state)::text)
$$;

-- pyqueue__record_result: when the queue keeps results (result_retention
-- set), records the outcome in_state ('succeeded', 'failed', 'cancelled') of
-- a message that has just left the live table, with in_result (NULL for
-- every state but a result committed by queue_commit_result), its last_error,
-- deliveries and progress, replacing the row an earlier message of the key
-- left; then notifies the queue's result channel. Called by the routine that
-- removed the message, in the same transaction. Refused at an isolation level
-- other than READ COMMITTED (pyqueue__deps_read_committed). Locks the row it writes.
CREATE OR REPLACE FUNCTION pyqueue__record_result(in_queue pyqueue_queue, in_msg pyqueue_message,
                                                  in_state text, in_result jsonb, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF in_queue.result_retention IS NULL THEN
        RETURN;
    END IF;
    PERFORM pyqueue__deps_read_committed();  -- children it may have are seen at READ COMMITTED only
    INSERT INTO pyqueue_result AS r (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                     progress, finished_at)
    VALUES (in_queue.queue_name, in_msg.p_key, in_msg.p_kind, in_state, in_result,
            CASE WHEN in_state <> 'succeeded' THEN in_msg.last_error END,  -- a success clears an earlier attempt's error
            in_msg.attempts, in_msg.progress, in_now)
    ON CONFLICT (queue_name, p_key, p_kind) DO UPDATE
       SET state = EXCLUDED.state, result = EXCLUDED.result, last_error = EXCLUDED.last_error,
           attempts = EXCLUDED.attempts, progress = EXCLUDED.progress, finished_at = EXCLUDED.finished_at;
    PERFORM pyqueue__result_notify(in_queue.queue_name::text, in_msg.p_key::text, in_msg.p_kind::text, in_state);
END;
$$;

-- pyqueue__finish: what follows the removal of a message that finished
-- (in_msg, just deleted by the caller, who held its row lock): a group's
-- head hands its place to the next message of its group (a message blocked
-- behind its head just goes), the history row (in_outcome), the result row
-- (in_state, in_result), and, for a schedule's pending occurrence, the next
-- occurrence (as queue_commit). Locks: the group's row, the history and
-- result rows, the schedule row.
CREATE OR REPLACE FUNCTION pyqueue__finish(in_queue pyqueue_queue, in_msg pyqueue_message, in_outcome text,
                                           in_state text, in_result jsonb, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF in_msg.group_key IS NOT NULL AND in_msg.scheduled_at <> pyqueue__blocked_at() THEN
        PERFORM pyqueue__group_settle(in_queue.queue_name::text, in_msg.group_key::text, in_now, true);
    END IF;
    PERFORM pyqueue__archive(in_queue, in_msg, in_outcome, NULL, in_now);
    PERFORM pyqueue__record_result(in_queue, in_msg, in_state, in_result, in_now);
    IF pyqueue__occurrence_key(in_msg.p_key::text) THEN  -- a recurring message's occurrence
        PERFORM pyqueue__schedule_next(in_queue.queue_name::text, in_msg.p_key::text, in_msg.p_kind::text);
    END IF;
    IF in_queue.result_retention IS NOT NULL THEN  -- dependencies live in queues that keep results
        PERFORM pyqueue__deps_left(in_queue.queue_name::text, in_msg.p_key::text, in_msg.p_kind::text,
                                   in_state = 'succeeded',
                                   CASE WHEN in_state = 'cancelled' THEN 'was cancelled' ELSE 'failed' END);
    END IF;
END;
$$;

-- pyqueue__finish_held: deletes the message (in_key, in_kind) of in_queue if
-- in_token still holds its reservation, then pyqueue__finish (in_outcome,
-- in_state, in_result); false, and nothing changes, otherwise. The commit
-- with a result and the holder's own cancel. Locks the message row, then as
-- pyqueue__finish.
CREATE OR REPLACE FUNCTION pyqueue__finish_held(in_queue pyqueue_queue, in_key text, in_kind text, in_token uuid,
                                                in_outcome text, in_state text, in_result jsonb)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_msg pyqueue_message;
BEGIN
    DELETE FROM pyqueue_message
     WHERE queue_name::text = in_queue.queue_name::text AND p_key::text = in_key AND p_kind::text = in_kind
       AND reserve_token = in_token
    RETURNING * INTO v_msg;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pyqueue__finish(in_queue, v_msg, in_outcome, in_state, in_result, pg_catalog.clock_timestamp());
    RETURN true;
END;
$$;

-- pyqueue__check_results: raises invalid_argument unless the queue keeps
-- results (result_retention set): a result given to a queue that records
-- none would be lost. No locks.
CREATE OR REPLACE FUNCTION pyqueue__check_results(in_queue pyqueue_queue)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_queue.result_retention IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: queue "%" keeps no results (queue_set_result_retention)',
                        in_queue.queue_name
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- pyqueue__refuse_result: raises invalid_argument for a result of in_bytes
-- bytes of JSON text (measured as a payload, see pyqueue__refuse_payload)
-- over the queue's max_payload of in_max bytes.
CREATE OR REPLACE FUNCTION pyqueue__refuse_result(in_bytes integer, in_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RAISE EXCEPTION 'pyqueue:invalid_argument: result is % bytes, more than the queue''s max_payload of % bytes',
                    in_bytes, in_max
        USING ERRCODE = '22023';
END;
$$;

-- queue_set_result_retention: how long the outcome of a finished message of
-- the queue is kept (pyqueue_result; queue_purge_history deletes the older
-- ones). NULL turns recording off, the default (rows already stored go at
-- the next purge). Above zero, at most 3650 days (by seconds: 315360000).
-- Refused while messages of the queue have parents or children. Locks the
-- queue row; turning results off first takes the queue's results lock
-- exclusively (it waits for the queue_push_after calls in flight that name
-- the queue) and runs at READ COMMITTED only.
CREATE OR REPLACE FUNCTION queue_set_result_retention(in_queue text, in_retention interval)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    PERFORM pyqueue__check_duration('result_retention', in_retention, true);
    IF extract(epoch FROM in_retention) > 315360000::numeric THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: result_retention must not exceed 3650 days'
            USING ERRCODE = '22023';
    END IF;
    IF in_retention IS NULL THEN
        -- turning results off: after every queue_push_after in flight that named the queue
        -- (pyqueue__results_lock), whose rows a new snapshot (READ COMMITTED only) then sees
        IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: results are turned off at READ COMMITTED only (this transaction is %): its snapshot cannot see the children pushed since',
                            pg_catalog.upper(pg_catalog.current_setting('transaction_isolation'))
                USING ERRCODE = '22023';
        END IF;
        PERFORM pyqueue__results_lock(in_queue, true);
    END IF;
    UPDATE pyqueue_queue SET result_retention = in_retention WHERE queue_name::text = in_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue USING ERRCODE = 'P0002';
    END IF;
    -- (after the results lock: a queue_push_after that read the setting has committed its rows by now)
    IF in_retention IS NULL AND EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name::text = in_queue) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: messages of queue "%" have parents or children: it keeps results until they are gone', in_queue
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- queue_commit_result: queue_commit with the message's result (any JSON;
-- NULL or a JSON null: none, stored as NULL), stored with the outcome
-- 'succeeded' in the same transaction as the commit, so a reader never sees
-- the one without the other. Refused (invalid_argument), before anything
-- changes, on a queue that keeps no results (queue_set_result_retention)
-- and for a result whose JSON text is longer than the queue's max_payload
-- in bytes. False, and nothing written, when the token no longer holds.
-- Locks as queue_commit, then the result row.
CREATE OR REPLACE FUNCTION queue_commit_result(in_queue text, in_key text, in_kind text, in_token text,
                                               in_result jsonb)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_queue  pyqueue_queue := pyqueue__queue(in_queue);
    v_token  uuid;
    v_result jsonb := pyqueue__json_value(in_result);
    v_bytes  integer;
BEGIN
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_results(v_queue);
    v_bytes := pg_catalog.octet_length(v_result::text);
    IF v_bytes > v_queue.max_payload THEN
        PERFORM pyqueue__refuse_result(v_bytes, v_queue.max_payload);
    END IF;
    RETURN pyqueue__finish_held(v_queue, in_key, in_kind, v_token, 'committed', 'succeeded', v_result);
END;
$$;

-- queue_commit_result with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_commit_result(in_queue text, in_key text, in_kind text, in_token uuid,
                                               in_result jsonb)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_commit_result(in_queue, in_key, in_kind, in_token::text, in_result)
$$;

-- queue_commit_result_batch: queue_commit_batch with one result per
-- reservation (element i of the four arrays names one reservation and its
-- result, as queue_commit_result's). Returns how many were committed; a
-- reservation whose token no longer holds is skipped (not counted, its
-- result not written). Refuses, changing nothing, what queue_commit_batch
-- refuses, a results array that is NULL or of another length, a queue that
-- keeps no results and a result above the queue's max_payload. Each element
-- through the commit with a result, in key order. Locks: the committed
-- rows, in key order (as queue_commit_batch), each then as queue_commit_result.
CREATE OR REPLACE FUNCTION queue_commit_result_batch(in_queue text, in_keys text[], in_kinds text[],
                                                     in_tokens text[], in_results jsonb[])
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_n     integer;
    v_bad   integer;
    v_count integer := 0;
    v_one   record;
BEGIN
    IF in_keys IS NULL OR in_kinds IS NULL OR in_tokens IS NULL OR in_results IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds, tokens and results must not be NULL'
            USING ERRCODE = '22023';
    END IF;
    v_n := pg_catalog.cardinality(in_keys);
    IF pg_catalog.array_ndims(in_keys) > 1 OR pg_catalog.array_ndims(in_kinds) > 1
       OR pg_catalog.array_ndims(in_tokens) > 1 OR pg_catalog.array_ndims(in_results) > 1
       OR pg_catalog.cardinality(in_kinds) <> v_n OR pg_catalog.cardinality(in_tokens) <> v_n
       OR pg_catalog.cardinality(in_results) <> v_n THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds, tokens and results must have the same length'
            USING ERRCODE = '22023';
    END IF;
    IF v_n > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: a batch takes at most 10000 messages, this one has % (split it)', v_n
            USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_results(v_queue);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.min(b.ord) INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_tokens))
           WITH ORDINALITY AS b (k, kd, tk, ord)
     WHERE pyqueue__bad_name(b.k, 255) OR pyqueue__bad_name(b.kd, 128) OR b.tk IS NULL
        OR b.tk !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$';
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch: bad p_key/p_kind or malformed token', v_bad
            USING ERRCODE = '22023';
    END IF;
    SELECT s.bytes INTO v_bad
      FROM (SELECT pg_catalog.octet_length(pyqueue__json_value(u.rs)::text) AS bytes, u.ord
              FROM pg_catalog.unnest(in_results) WITH ORDINALITY AS u (rs, ord)) AS s
     WHERE s.bytes > v_queue.max_payload
     ORDER BY s.ord
     LIMIT 1;
    IF FOUND THEN
        PERFORM pyqueue__refuse_result(v_bad, v_queue.max_payload);
    END IF;
    FOR v_one IN SELECT b.k, b.kd, b.tk, b.rs
                   FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                                   pg_catalog.unnest(in_tokens), pg_catalog.unnest(in_results))
                        WITH ORDINALITY AS b (k, kd, tk, rs, ord)
                  ORDER BY b.k, b.kd, b.ord LOOP
        IF pyqueue__finish_held(v_queue, v_one.k, v_one.kd, v_one.tk::uuid, 'committed', 'succeeded',
                                pyqueue__json_value(v_one.rs)) THEN
            v_count := v_count + 1;
        END IF;
    END LOOP;
    RETURN v_count;
END;
$$;

-- queue_result: what became of the message (in_key, in_kind) of in_queue,
-- always one row (state, result, last_error, attempts, progress,
-- finished_at, cancel_requested). A live message wins: state 'ready',
-- 'delayed', 'reserved' (a reservation that has not expired) or 'blocked'
-- (behind its FIFO group's head), its last_error, deliveries (attempts),
-- progress and whether a cancel was requested; result and finished_at NULL.
-- Else the outcome recorded when the last message of the key finished:
-- 'succeeded', 'failed' or 'cancelled' (cancel_requested false). Else
-- 'unknown', every other column NULL and cancel_requested false. Raises
-- unknown_queue. Reads without locks, both tables in one snapshot (the
-- function is STABLE): a commit that deletes the message and writes its
-- result is seen whole or not at all.
CREATE OR REPLACE FUNCTION queue_result(in_queue text, in_key text, in_kind text)
RETURNS TABLE (state text, result jsonb, last_error text, attempts integer, progress jsonb,
               finished_at timestamptz, cancel_requested boolean)
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
        SELECT CASE WHEN m.scheduled_at = pyqueue__blocked_at() AND m.group_key IS NULL THEN 'waiting'
                    WHEN m.scheduled_at = pyqueue__blocked_at() THEN 'blocked'
                    WHEN m.scheduled_at <= v_now THEN 'ready'
                    WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                    ELSE 'delayed' END::text,
               NULL::jsonb, m.last_error::text, m.attempts, m.progress, NULL::timestamptz,
               m.cancel_requested_at IS NOT NULL
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT r.state::text, r.result, r.last_error::text, r.attempts, r.progress, r.finished_at, false
          FROM pyqueue_result r
         WHERE r.queue_name::text = in_queue AND r.p_key::text = in_key AND r.p_kind::text = in_kind;
    IF FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT 'unknown'::text, NULL::jsonb, NULL::text, NULL::integer, NULL::jsonb,
                        NULL::timestamptz, false;
END;
$$;

-- queue_result_wait: queue_result, once the state is final ('succeeded',
-- 'failed', 'cancelled') or 'unknown', or when in_timeout (NULL = 1 s, at
-- most 1 hour) has passed, with the state at that moment. Looks every 50 ms,
-- each look a statement of its own (a new snapshot): run it in autocommit or
-- READ COMMITTED (a REPEATABLE READ snapshot never sees the outcome). For
-- clients without LISTEN: a client that can listens on
-- queue_result_channel instead. Takes no locks; keeps a connection busy
-- while it waits.
CREATE OR REPLACE FUNCTION queue_result_wait(in_queue text, in_key text, in_kind text, in_timeout interval)
RETURNS TABLE (state text, result jsonb, last_error text, attempts integer, progress jsonb,
               finished_at timestamptz, cancel_requested boolean)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_deadline timestamptz;
    v_row      record;
    v_left     double precision;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    PERFORM pyqueue__check_duration('timeout', in_timeout, true);
    IF in_timeout > interval '1 hour' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: timeout must not exceed 1 hour' USING ERRCODE = '22023';
    END IF;
    v_deadline := pg_catalog.clock_timestamp() + coalesce(in_timeout, interval '1 second');
    LOOP
        SELECT * INTO v_row FROM queue_result(in_queue, in_key, in_kind) AS r;
        v_left := extract(epoch FROM v_deadline - pg_catalog.clock_timestamp())::double precision;
        IF v_row.state IN ('succeeded'::text, 'failed'::text, 'cancelled'::text, 'unknown'::text)
           OR v_left <= 0::double precision THEN
            state := v_row.state;
            result := v_row.result;
            last_error := v_row.last_error;
            attempts := v_row.attempts;
            progress := v_row.progress;
            finished_at := v_row.finished_at;
            cancel_requested := v_row.cancel_requested;
            RETURN NEXT;
            RETURN;
        END IF;
        PERFORM pg_catalog.pg_sleep(least(0.05::double precision, v_left));
    END LOOP;
END;
$$;

-- queue_result_channel: the NOTIFY channel a plain-SQL client LISTENs on for
-- the results of in_queue: each message that finishes on a queue that keeps
-- results sends one notification, payload the JSON text
-- {"key": ..., "kind": ..., "state": ...}, when its transaction commits
-- (never throttled):
--   SELECT queue_result_channel('jobs');  -- then LISTEN "<that name>";
-- The name is fixed by the queue name alone. Raises unknown_queue. No locks.
CREATE OR REPLACE FUNCTION queue_result_channel(in_queue text)
RETURNS text
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    RETURN pyqueue__result_channel(in_queue);
END;
$$;

-- queue_cancel: cancels the message (in_key, in_kind) of in_queue. Not held
-- by a reservation (ready, delayed, blocked behind its group's head, or
-- reserved once but its reservation expired): it is removed, as after a
-- commit (a group's head hands its place to the next message of its group,
-- a limit slot it held is free, a schedule's pending occurrence makes way
-- for the next), its history outcome 'cancelled' and its result
-- 'cancelled' (on queues that keep them): returns 'cancelled'. Held by a
-- live reservation: only flagged (cancel_requested_at, kept from the first
-- request), the holder finds out through queue_renew and ends it with
-- queue_cancel_held, or commits it anyway: returns 'requested'. No live
-- message: 'unknown'. A message of a dead-letter queue (a queue that some
-- queue names as its dead_letter_queue) is never cancelled nor flagged: the
-- call is refused (invalid_argument) and the dead letter stays, whoever
-- calls (dead letters are the evidence of failures: an admin removes one
-- with queue_remove or hands it back with queue_redrive). A schedule's
-- occurrence (pyqueue__occurrence_key) is refused too, whoever calls: its end
-- advances the schedule, and a producer (who holds this routine) must not
-- move a chain; an admin removes an occurrence with queue_remove. Locks the
-- message row (waiting for a reserve or commit that holds it, then deciding
-- on what it left), then as a commit.
CREATE OR REPLACE FUNCTION queue_cancel(in_queue text, in_key text, in_kind text)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_msg   pyqueue_message;
    v_now   timestamptz;
BEGIN
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF pyqueue__occurrence_key(in_key) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_key ending in @<UTC time> is a schedule''s occurrence: it is not cancelled; an admin removes it with queue_remove'
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.dead_letter_queue::text = in_queue) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: a message of a dead-letter queue is not cancelled; an admin removes it with queue_remove'
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO v_msg FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'unknown';
    END IF;
    v_now := pg_catalog.clock_timestamp();  -- read under the lock: a reservation is live or not from here on
    IF v_msg.reserve_token IS NOT NULL AND v_msg.scheduled_at > v_now THEN
        UPDATE pyqueue_message m
           SET cancel_requested_at = coalesce(m.cancel_requested_at, v_now)
         WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind;
        RETURN 'requested';
    END IF;
    DELETE FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
    RETURNING * INTO v_msg;
    PERFORM pyqueue__finish(v_queue, v_msg, 'cancelled', 'cancelled', NULL, pg_catalog.clock_timestamp());
    RETURN 'cancelled';
END;
$$;

-- queue_renew: queue_extend (the same checks, the same renewal of a limit
-- slot: a new token, the reservation's end pushed to now + in_timeout),
-- and whether a cancel of the message was requested (queue_cancel), so a
-- holder that renews its lease learns of it in the same round trip. One
-- row; (NULL, false) when in_token no longer holds. Locks as queue_extend;
-- the body is queue_extend's (pyqueue__extend).
CREATE OR REPLACE FUNCTION queue_renew(in_queue text, in_key text, in_kind text, in_token text,
                                       in_timeout interval DEFAULT NULL)
RETURNS TABLE (token uuid, cancel_requested boolean)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    SELECT e.out_token, coalesce(e.out_cancel_requested, false) INTO token, cancel_requested
      FROM pyqueue__extend(in_queue, in_key, in_kind, in_token, in_timeout) AS e;
    RETURN NEXT;
END;
$$;

-- queue_renew with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_renew(in_queue text, in_key text, in_kind text, in_token uuid,
                                       in_timeout interval DEFAULT NULL)
RETURNS TABLE (token uuid, cancel_requested boolean)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT * FROM queue_renew(in_queue, in_key, in_kind, in_token::text, in_timeout)
$$;

-- queue_cancel_held: the holder of a reservation ends it as cancelled,
-- whether or not a cancel was requested (a handler may cancel itself): the
-- message is removed as by a commit (a group's head hands its place on, a
-- schedule's pending occurrence makes way for the next), its history
-- outcome 'cancelled' and its result 'cancelled' with its progress (on
-- queues that keep them). False, and nothing changes, when the token no
-- longer holds. Locks as queue_commit.
CREATE OR REPLACE FUNCTION queue_cancel_held(in_queue text, in_key text, in_kind text, in_token text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_token uuid;
BEGIN
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    RETURN pyqueue__finish_held(v_queue, in_key, in_kind, v_token, 'cancelled', 'cancelled', NULL);
END;
$$;

-- queue_cancel_held with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_cancel_held(in_queue text, in_key text, in_kind text, in_token uuid)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_cancel_held(in_queue, in_key, in_kind, in_token::text)
$$;

-- queue_set_progress: the holder of a reservation records how far it got
-- (any JSON of at most 65536 bytes as text; NULL or a JSON null clears it),
-- shown by queue_result and queue_message and copied into the message's
-- result row when it finishes. Kept across rollback, fail, snooze and
-- extend (the retries of one message); a new push of the key after the
-- message left starts without. Changes neither the token nor the
-- reservation's end. False, and nothing written, when the token no longer
-- holds. Locks the message row.
CREATE OR REPLACE FUNCTION queue_set_progress(in_queue text, in_key text, in_kind text, in_token text,
                                              in_progress jsonb)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_token    uuid;
    v_progress jsonb := pyqueue__json_value(in_progress);
    v_bytes    integer;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    v_bytes := pg_catalog.octet_length(v_progress::text);
    IF v_bytes > 65536 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: progress is % bytes, more than 65536 bytes', v_bytes
            USING ERRCODE = '22023';
    END IF;
    UPDATE pyqueue_message m
       SET progress = v_progress
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
       AND m.reserve_token = v_token;
    RETURN FOUND;
END;
$$;

-- queue_set_progress with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_set_progress(in_queue text, in_key text, in_kind text, in_token uuid,
                                              in_progress jsonb)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_set_progress(in_queue, in_key, in_kind, in_token::text, in_progress)
$$;

-- pyqueue__check_results_filter: queue_results' and queue_purge_results'
-- checks of their filter, in this order: in_state NULL or 'succeeded',
-- 'failed' or 'cancelled'; in_n NULL or 1 to in_max; in_before NULL or a
-- finite time. Raises invalid_argument. Reads no table.
CREATE OR REPLACE FUNCTION pyqueue__check_results_filter(in_state text, in_n integer, in_max integer,
                                                         in_before timestamptz)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_state IS NOT NULL AND in_state NOT IN ('succeeded', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: state must be succeeded, failed or cancelled (NULL: any), not %',
            pg_catalog.left(in_state, 40) USING ERRCODE = '22023';
    END IF;
    IF in_n < 1 OR in_n > in_max THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be 1 to %, not %', in_max, in_n USING ERRCODE = '22023';
    END IF;
    IF in_before = 'infinity' OR in_before = '-infinity' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: before must be a finite time' USING ERRCODE = '22023';
    END IF;
END;
$$;

-- queue_results: the stored outcomes of in_queue's finished messages,
-- newest first (finished_at descending, then p_key, p_kind), a page of
-- in_n (NULL = 100, 1 to 1000) rows: p_key, p_kind, state, result,
-- last_error, attempts, progress, finished_at. in_kind (NULL: every kind)
-- and in_state ('succeeded', 'failed' or 'cancelled'; NULL: every state)
-- filter; in_before (NULL: now) keeps the outcomes that finished strictly
-- before it. The next page: in_before = the last row's finished_at. So
-- that a page never cuts through outcomes of one instant (a batch commit
-- writes them all with one finished_at), the rows that finished at the same
-- moment as the n-th come with it (a page may then hold more than in_n).
-- Live messages are not listed (queue_result reads one). Raises
-- unknown_queue, invalid_argument. Reads the (queue_name, finished_at)
-- index without locks, one snapshot.
CREATE OR REPLACE FUNCTION queue_results(in_queue text, in_kind text DEFAULT NULL, in_state text DEFAULT NULL,
                                         in_n integer DEFAULT NULL, in_before timestamptz DEFAULT NULL)
RETURNS TABLE (p_key text, p_kind text, state text, result jsonb, last_error text, attempts integer,
               progress jsonb, finished_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    IF in_kind IS NOT NULL THEN
        PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    END IF;
    PERFORM pyqueue__check_results_filter(in_state, in_n, 1000, in_before);
    RETURN QUERY
        SELECT t.p_key::text, t.p_kind::text, t.state::text, t.result, t.last_error::text, t.attempts, t.progress,
               t.finished_at
          FROM (SELECT r.p_key, r.p_kind, r.state, r.result, r.last_error, r.attempts, r.progress, r.finished_at
                  FROM pyqueue_result r
                 WHERE r.queue_name::text = in_queue
                   AND (in_kind IS NULL OR r.p_kind::text = in_kind)
                   AND (in_state IS NULL OR r.state::text = in_state)
                   AND (in_before IS NULL OR r.finished_at < in_before)
                 ORDER BY r.finished_at DESC
                 FETCH FIRST (coalesce(in_n, 100)) ROWS WITH TIES) t
         ORDER BY t.finished_at DESC, t.p_key, t.p_kind;
END;
$$;

-- queue_purge_results: deletes up to in_n (NULL = 10000; 1 to 100000) of
-- in_queue's stored outcomes that finished strictly before in_before (NULL:
-- now), of one state when in_state is given ('succeeded', 'failed' or
-- 'cancelled'; NULL: any), oldest first, whatever the queue's result
-- retention. Returns how many it deleted: fewer than in_n when no more are
-- left (call it again until then). Live messages are untouched. Raises
-- unknown_queue, invalid_argument. Locks: the rows it deletes (SKIP LOCKED:
-- a row another transaction is writing, a commit of its key, is left for
-- the next call).
CREATE OR REPLACE FUNCTION queue_purge_results(in_queue text, in_state text DEFAULT NULL,
                                               in_before timestamptz DEFAULT NULL, in_n integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_before timestamptz := coalesce(in_before, pg_catalog.clock_timestamp());
    v_done   integer;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_results_filter(in_state, in_n, 100000, in_before);
    WITH doomed AS (
        SELECT r.ctid AS tid FROM pyqueue_result r
         WHERE r.queue_name::text = in_queue
           AND (in_state IS NULL OR r.state::text = in_state)
           AND r.finished_at < v_before
         ORDER BY r.finished_at
         LIMIT coalesce(in_n, 10000)
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM pyqueue_result r USING doomed WHERE r.ctid = doomed.tid;
    GET DIAGNOSTICS v_done = ROW_COUNT;
    RETURN v_done;
END;
$$;
