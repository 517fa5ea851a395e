-- ==== settle ====
-- Take messages out: reserve (or pop, at-most-once), then commit, roll back,
-- fail, extend or move the reservation; remove deletes a message whatever its
-- state. Every step after the reserve must show the reservation's token.

-- pyqueue__refuse_reservation: raises invalid_argument for a reservation
-- timeout above the queue's max_reservation (in_max): every reserve path
-- and queue_extend compare the caller's timeout with the queue row they read
-- anyway, and call this only to refuse.
CREATE OR REPLACE FUNCTION pyqueue__refuse_reservation(in_max interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RAISE EXCEPTION 'pyqueue:invalid_argument: timeout is longer than the queue''s max_reservation (%)', in_max
        USING ERRCODE = '22023';
END;
$$;

-- Removes one locked message and hands it to the queue's dead-letter queue
-- (or drops it when there is none); counts it in dead_count. The dead-letter
-- copy records where it came from (dead_from), the deliveries it had there
-- (dead_attempts) and its last_error; a message whose reservation expired
-- on its last allowed delivery (scheduled_at passed) and that has no error
-- text gets 'reservation expired on its last allowed delivery'. A group's
-- head hands its place to the next message of its group; the dead-letter
-- copy has no group (a message of a group that the dead-letter queue holds
-- with the same key keeps its group and its place there, blocked or not;
-- it starts without progress or cancel request, as a new push; it keeps the
-- message's headers, and a newer dead letter brings its own). On a queue
-- that keeps results, the outcome 'failed' is recorded (pyqueue__record_result).
-- A schedule's pending occurrence makes way for the next one, as after a commit
-- (pyqueue__schedule_next). Caller must hold the row lock on the message.
CREATE OR REPLACE FUNCTION pyqueue__dead_letter(in_queue pyqueue_queue, in_key text, in_kind text, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_msg pyqueue_message;
BEGIN
    DELETE FROM pyqueue_message
     WHERE queue_name::text = in_queue.queue_name::text AND p_key::text = in_key AND p_kind::text = in_kind
    RETURNING * INTO v_msg;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_msg.last_error IS NULL AND v_msg.scheduled_at <= in_now THEN
        v_msg.last_error := 'reservation expired on its last allowed delivery';
    END IF;
    IF v_msg.group_key IS NOT NULL THEN
        PERFORM pyqueue__group_settle(in_queue.queue_name::text, v_msg.group_key::text, in_now, true);
    END IF;
    UPDATE pyqueue_queue SET dead_count = dead_count + 1 WHERE queue_name::text = in_queue.queue_name::text;
    PERFORM pyqueue__archive(in_queue, v_msg, 'dead_lettered', in_queue.dead_letter_queue::text, in_now);
    PERFORM pyqueue__record_result(in_queue, v_msg, 'failed', NULL, in_now);
    IF pyqueue__occurrence_key(in_key) THEN  -- a schedule's occurrence given up: the schedule goes on
        PERFORM pyqueue__schedule_next(in_queue.queue_name::text, in_key, in_kind);
    END IF;
    IF in_queue.result_retention IS NOT NULL THEN  -- dependencies live in queues that keep results
        PERFORM pyqueue__deps_left(in_queue.queue_name::text, in_key, in_kind, false, 'failed');
    END IF;
    IF in_queue.dead_letter_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue.dead_letter_queue::text, true);
        -- A newer dead letter of the same key replaces the older one (the
        -- newest payload is the one worth inspecting or redriving) and is
        -- ready again without a reservation, so a consumer holding the older
        -- one cannot commit the newer one away unseen.
        INSERT INTO pyqueue_message AS m
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, attempts, last_error, dead_from, dead_attempts, headers)
        VALUES (in_queue.dead_letter_queue, v_msg.p_key, v_msg.p_kind, v_msg.payload,
                v_msg.priority, in_now, in_now, v_msg.created_at, 0, v_msg.last_error,
                in_queue.queue_name, v_msg.attempts, v_msg.headers)
        ON CONFLICT (queue_name, p_key, p_kind) DO UPDATE
           SET payload = EXCLUDED.payload, priority = EXCLUDED.priority,
               created_at = EXCLUDED.created_at,
               scheduled_at = CASE WHEN m.scheduled_at = pyqueue__blocked_at() THEN m.scheduled_at ELSE in_now END,
               scheduled_at_initially = in_now, attempts = 0,
               reserved_by = NULL, reserve_token = NULL, last_error = EXCLUDED.last_error,
               dead_from = EXCLUDED.dead_from, dead_attempts = EXCLUDED.dead_attempts,
               progress = NULL, cancel_requested_at = NULL, headers = EXCLUDED.headers;
    END IF;
END;
$$;

-- pyqueue__give_back: the body of queue_rollback, queue_fail, queue_snooze
-- and queue_give_up (in_how: 'rollback', 'fail', 'snooze', 'give_up'). When
-- in_token still holds the reservation: for 'fail' and 'give_up',
-- last_error becomes in_error (cut to 2000 characters); then, for
-- 'give_up' or a message that has had max_attempts deliveries ('snooze'
-- never), it goes to the dead-letter queue ('dead_lettered') or is dropped
-- when the queue has none ('dropped'); otherwise it is eligible again after
-- in_delay (NULL = 0), its attempts down by one for 'snooze' (that delivery
-- does not count), and 'retry' is returned; a schedule's pending occurrence
-- that 'fail' retries advances its schedule (pyqueue__schedule_next: the next
-- occurrence is pushed at its time; 'rollback' and 'snooze' hand the same
-- occurrence back and push nothing). NULL when the token no longer
-- holds. Locks the message row (and the queue row when dead-lettering; the
-- schedule row of an occurrence).
CREATE OR REPLACE FUNCTION pyqueue__give_back(in_queue text, in_key text, in_kind text, in_token text,
                                              in_delay interval, in_how text, in_error text)
RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue    pyqueue_queue := pyqueue__queue(in_queue);
    v_xid      xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now      timestamptz := pg_catalog.clock_timestamp();
    v_attempts integer;
    v_token    uuid;
BEGIN
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_duration('delay', in_delay, false);
    SELECT m.attempts INTO v_attempts
      FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
       AND m.reserve_token = v_token
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF in_how IN ('fail', 'give_up') THEN
        UPDATE pyqueue_message
           SET last_error = pg_catalog.left(in_error, 2000)
         WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind;
    END IF;
    IF in_how = 'give_up' OR (in_how <> 'snooze' AND v_attempts >= v_queue.max_attempts) THEN
        PERFORM pyqueue__dead_letter(v_queue, in_key, in_kind, v_now);
        RETURN CASE WHEN v_queue.dead_letter_queue IS NULL THEN 'dropped' ELSE 'dead_lettered' END;
    END IF;
    UPDATE pyqueue_message
       SET scheduled_at = v_now + coalesce(in_delay, interval '0'),
           attempts = CASE WHEN in_how = 'snooze' THEN attempts - 1 ELSE attempts END,
           reserve_token = NULL,
           reserved_by = NULL
     WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind;
    IF coalesce(in_delay, interval '0') <= interval '0' THEN
        PERFORM pyqueue__notify(in_queue);  -- wakeup: ready again now (e.g. handed back at shutdown)
    END IF;
    IF in_how = 'fail' AND pyqueue__occurrence_key(in_key) THEN
        -- a schedule's occurrence that failed and will be retried holds back nothing: the next one is
        -- pushed now, at its own time and key, and the retried one is no longer the pending one
        PERFORM pyqueue__schedule_next(in_queue, in_key, in_kind);
    END IF;
    RETURN 'retry';
END;
$$;

-- pyqueue__extend: the body of queue_extend and queue_renew (results), each
-- a SECURITY DEFINER routine that returns what it needs of it: pushes the
-- reservation's end to now + in_timeout (NULL = the queue's
-- visibility_timeout; refused above its max_reservation) and gives the
-- reservation a new token (out_token; the old one stops working), and says
-- whether a cancel of the message was requested (out_cancel_requested);
-- both NULL when in_token no longer holds. Locks the message row (for a
-- kind with a limit, its slot row first).
CREATE OR REPLACE FUNCTION pyqueue__extend(in_queue text, in_key text, in_kind text, in_token text,
                                           in_timeout interval, OUT out_token uuid,
                                           OUT out_cancel_requested boolean)
LANGUAGE plpgsql
AS $$
DECLARE
    v_token uuid;
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
BEGIN
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_duration('timeout', in_timeout, true);
    IF in_timeout > v_queue.max_reservation THEN
        PERFORM pyqueue__refuse_reservation(v_queue.max_reservation);
    END IF;
    IF pyqueue__limit_renew(in_queue, in_key, in_kind, v_token) THEN  -- limits
        UPDATE pyqueue_message m
           SET scheduled_at = pg_catalog.clock_timestamp() + coalesce(in_timeout, v_queue.visibility_timeout),
               reserve_token = pg_catalog.gen_random_uuid()
         WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
           AND m.reserve_token = v_token
        RETURNING m.reserve_token, m.cancel_requested_at IS NOT NULL INTO out_token, out_cancel_requested;
    END IF;
END;
$$;

-- queue_commit: deletes the message if in_token still holds its reservation;
-- false otherwise (expired and re-reserved, committed already, or removed).
-- A group's head hands its place to the next message of its group.
-- Locks the message row (then, for a group's head, the group's row; for a
-- schedule's pending occurrence, the schedule row). On a queue that keeps
-- results, the outcome 'succeeded' (no result: queue_commit_result gives
-- one), and the messages that wait for it (pyqueue__deps_left, after one
-- probe of pyqueue_dependency; then their rows there and their own). A
-- queue without results runs no step for dependencies. Plainly valid arguments are checked in one expression and the
-- queue's history and result settings read by one statement, without the
-- nested calls of the general checks (see queue_push).
CREATE OR REPLACE FUNCTION queue_commit(in_queue text, in_key text, in_kind text, in_token text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_token   uuid;
    v_queue   pyqueue_queue;
    v_msg     pyqueue_message;
    v_group   text;
    v_history boolean;  -- history or results kept; NULL: not looked up the short way
BEGIN
    IF NOT (pyqueue__bad_name(in_queue, 128) OR pyqueue__bad_name(in_key, 255) OR pyqueue__bad_name(in_kind, 128))
       AND in_token ~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$' THEN
        SELECT q.history_retention IS NOT NULL OR q.result_retention IS NOT NULL INTO v_history
          FROM pyqueue_queue q WHERE q.queue_name::text = in_queue;
        v_token := in_token::uuid;
    END IF;
    IF v_history IS NULL THEN  -- the general checks, in their order (an unknown queue raises here)
        v_queue := pyqueue__queue(in_queue);
        v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
        v_history := v_queue.history_retention IS NOT NULL OR v_queue.result_retention IS NOT NULL;
    END IF;
    IF NOT v_history AND in_key NOT LIKE '%@____-__-__T__:__:__Z' THEN
        -- Nothing to archive or record, not a schedule's occurrence: the DELETE is all
        -- of it, and, for a group's head, the next message of its group.
        DELETE FROM pyqueue_message
         WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind
           AND reserve_token = v_token
        RETURNING group_key INTO v_group;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
        IF v_group IS NOT NULL THEN
            PERFORM pyqueue__group_settle(in_queue, v_group, pg_catalog.clock_timestamp(), true);
        END IF;
        RETURN true;
    END IF;
    DELETE FROM pyqueue_message
     WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind AND reserve_token = v_token
    RETURNING * INTO v_msg;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_msg.group_key IS NOT NULL THEN
        PERFORM pyqueue__group_settle(in_queue, v_msg.group_key::text, pg_catalog.clock_timestamp(), true);
    END IF;
    IF v_queue.queue_name IS NULL THEN
        v_queue := pyqueue__queue(in_queue);  -- the settings row pyqueue__archive takes
    END IF;
    PERFORM pyqueue__archive(v_queue, v_msg, 'committed', NULL, pg_catalog.clock_timestamp());
    PERFORM pyqueue__record_result(v_queue, v_msg, 'succeeded', NULL, pg_catalog.clock_timestamp());
    IF in_key LIKE '%@____-__-__T__:__:__Z' THEN  -- a recurring message's occurrence
        PERFORM pyqueue__schedule_next(in_queue, in_key, in_kind);
    END IF;
    -- the messages that wait for it: only on a queue that keeps results (dependencies live there),
    -- one probe by its key in a statement after the DELETE (it sees a queue_push_after that named
    -- it and committed while the DELETE waited for its row), which finds nothing for a message
    -- without parents or children
    IF v_queue.result_retention IS NOT NULL
       AND EXISTS (SELECT 1 FROM pyqueue_dependency d
                    WHERE d.queue_name::text = in_queue AND d.p_key::text = in_key AND d.p_kind::text = in_kind) THEN
        PERFORM pyqueue__deps_left(in_queue, in_key, in_kind, true, NULL);
    END IF;
    RETURN true;
END;
$$;

-- queue_commit with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_commit(in_queue text, in_key text, in_kind text, in_token uuid)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_commit(in_queue, in_key, in_kind, in_token::text)
$$;

-- queue_rollback: gives the message back, eligible again after in_delay
-- (NULL = 0), its last_error left as it is. After max_attempts deliveries it
-- goes to the dead-letter queue instead (dropped when the queue has none).
-- False when the token no longer holds. Locks the message row (and the
-- queue row when dead-lettering).
CREATE OR REPLACE FUNCTION queue_rollback(in_queue text, in_key text, in_kind text, in_token text,
                               in_delay interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__give_back(in_queue, in_key, in_kind, in_token, in_delay, 'rollback', NULL) IS NOT NULL;
END;
$$;

-- queue_rollback with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_rollback(in_queue text, in_key text, in_kind text, in_token uuid,
                               in_delay interval DEFAULT NULL)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_rollback(in_queue, in_key, in_kind, in_token::text, in_delay)
$$;

-- queue_fail: queue_rollback that also records in_error (NULL = no text;
-- cut to its first 2000 characters) as the message's last_error, kept on its
-- dead-letter copy and in its history. Returns 'retry' (eligible again after
-- in_delay), 'dead_lettered' (moved to the dead-letter queue), 'dropped'
-- (max_attempts reached, no dead-letter queue) or NULL when the token no
-- longer holds. Locks as queue_rollback.
CREATE OR REPLACE FUNCTION queue_fail(in_queue text, in_key text, in_kind text, in_token text,
                                      in_delay interval DEFAULT NULL, in_error text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__give_back(in_queue, in_key, in_kind, in_token, in_delay, 'fail', in_error);
END;
$$;

-- queue_fail with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_fail(in_queue text, in_key text, in_kind text, in_token uuid,
                                      in_delay interval DEFAULT NULL, in_error text DEFAULT NULL)
RETURNS text
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_fail(in_queue, in_key, in_kind, in_token::text, in_delay, in_error)
$$;

-- queue_snooze: gives the message back, eligible again after in_delay (NULL
-- = 0), without using up an attempt: its attempts go down by one (this
-- delivery does not count), so a snooze never dead-letters it; last_error
-- is left as it is. A group's head keeps its place and a limited kind's slot
-- is free again, as after queue_rollback. False when the token no longer
-- holds. Locks the message row. The body is pyqueue__give_back's.
CREATE OR REPLACE FUNCTION queue_snooze(in_queue text, in_key text, in_kind text, in_token text,
                                        in_delay interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__give_back(in_queue, in_key, in_kind, in_token, in_delay, 'snooze', NULL) IS NOT NULL;
END;
$$;

-- queue_snooze with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_snooze(in_queue text, in_key text, in_kind text, in_token uuid,
                                        in_delay interval DEFAULT NULL)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_snooze(in_queue, in_key, in_kind, in_token::text, in_delay)
$$;

-- queue_give_up: ends the message now, whatever its attempts: records
-- in_error (NULL = no text; cut to its first 2000 characters) as its
-- last_error, then moves it to the dead-letter queue ('dead_lettered') or
-- drops it when the queue has none ('dropped'), as queue_fail does after
-- max_attempts deliveries (the dead-letter copy keeps the error, dead_from
-- and dead_attempts; counted in dead_count; in the history as dead_lettered).
-- NULL when the token no longer holds. Locks the message row, then the queue
-- row (as queue_fail when dead-lettering). The body is pyqueue__give_back's.
CREATE OR REPLACE FUNCTION queue_give_up(in_queue text, in_key text, in_kind text, in_token text,
                                         in_error text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__give_back(in_queue, in_key, in_kind, in_token, NULL, 'give_up', in_error);
END;
$$;

-- queue_give_up with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_give_up(in_queue text, in_key text, in_kind text, in_token uuid,
                                         in_error text DEFAULT NULL)
RETURNS text
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_give_up(in_queue, in_key, in_kind, in_token::text, in_error)
$$;

-- queue_extend: pushes the reservation's end to now + in_timeout (NULL = the
-- queue's visibility_timeout; refused above its max_reservation) and returns
-- a new token (the old one stops working); NULL when in_token no longer holds.
-- Locks the message row (for a kind with a limit, its slot row first). The
-- body is pyqueue__extend's.
CREATE OR REPLACE FUNCTION queue_extend(in_queue text, in_key text, in_kind text, in_token text,
                             in_timeout interval DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN (pyqueue__extend(in_queue, in_key, in_kind, in_token, in_timeout)).out_token;
END;
$$;

-- queue_extend with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_extend(in_queue text, in_key text, in_kind text, in_token uuid,
                             in_timeout interval DEFAULT NULL)
RETURNS uuid
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_extend(in_queue, in_key, in_kind, in_token::text, in_timeout)
$$;

-- queue_move: in one step commits the reservation here and pushes the message
-- to in_to_queue (payload NULL = unchanged, priority and last_error kept;
-- attempts and the dead-letter origin reset, except for a move into the same
-- queue, which keeps them, so that max_attempts still applies, and keeps its
-- progress and cancel request; a move records no result). If in_to_queue already
-- holds a live message with the same key and kind, that one stays (dedup, as
-- queue_push). A group's head moved into its own queue stays its group's
-- head, ready now; moved to another queue it leaves its group (it arrives
-- there without one) and hands its place to the next message of the group.
-- A schedule's pending occurrence moved (anywhere, its own queue included)
-- makes way for the next occurrence as a commit does: the schedule goes on.
-- False, and nothing changes, when the token no longer holds.
-- Locks: the target queue's shared lock (pyqueue__queue), then the message row
-- (then the group's row of a head moved away; the schedule row of an
-- occurrence).
CREATE OR REPLACE FUNCTION queue_move(in_queue text, in_key text, in_kind text, in_token text,
                           in_to_queue text, in_payload jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_token uuid;
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_msg   pyqueue_message;
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_same  boolean;
    v_max   integer;  -- in_to_queue's max_payload
    v_bytes integer;
BEGIN
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_name('to_queue', in_to_queue, 128);
    v_max := (pyqueue__queue(in_to_queue, true)).max_payload;
    IF in_payload IS NOT NULL THEN
        v_bytes := pg_catalog.octet_length(in_payload::text);
        IF v_bytes > v_max THEN
            PERFORM pyqueue__refuse_payload(v_bytes, v_max);  -- the target queue's
        END IF;
    END IF;
    v_same := in_to_queue = in_queue;
    DELETE FROM pyqueue_message
     WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind
       AND reserve_token = v_token
    RETURNING * INTO v_msg;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pyqueue__archive(v_queue, v_msg, 'moved', in_to_queue, v_now);
    IF pyqueue__occurrence_key(v_msg.p_key::text) THEN  -- a recurring message's occurrence: the next one
        PERFORM pyqueue__schedule_next(in_queue, v_msg.p_key::text, v_msg.p_kind::text);
    END IF;
    IF NOT v_same AND v_queue.result_retention IS NOT NULL THEN  -- moved on: it succeeded here, for the messages that wait for it
        PERFORM pyqueue__deps_left(in_queue, in_key, in_kind, true, NULL);
    END IF;
    IF v_msg.group_key IS NOT NULL AND NOT v_same THEN
        PERFORM pyqueue__group_settle(in_queue, v_msg.group_key::text, v_now, true);
    END IF;
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, attempts, last_error, dead_from, dead_attempts, group_key,
            progress, cancel_requested_at, headers)
    VALUES (in_to_queue, v_msg.p_key, v_msg.p_kind, coalesce(in_payload, v_msg.payload),
            v_msg.priority, v_now, v_now, v_now,
            CASE WHEN v_same THEN v_msg.attempts ELSE 0 END,
            v_msg.last_error,
            CASE WHEN v_same THEN v_msg.dead_from END,
            CASE WHEN v_same THEN v_msg.dead_attempts END,
            CASE WHEN v_same THEN v_msg.group_key END,
            CASE WHEN v_same THEN v_msg.progress END,
            CASE WHEN v_same THEN v_msg.cancel_requested_at END,
            v_msg.headers)  -- kept, into any queue
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    IF FOUND THEN PERFORM pyqueue__notify(in_to_queue); END IF;
    RETURN true;
END;
$$;

-- queue_move with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_move(in_queue text, in_key text, in_kind text, in_token uuid,
                           in_to_queue text, in_payload jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT queue_move(in_queue, in_key, in_kind, in_token::text, in_to_queue, in_payload)
$$;

-- queue_remove: deletes a message whatever its state; false when absent.
-- A group's head hands its place to the next message of its group; a
-- message blocked behind its head just goes; a schedule's pending occurrence
-- makes way for the next one, as after a commit. Locks the message row (then
-- the group's row of a head; the schedule row of an occurrence).
CREATE OR REPLACE FUNCTION queue_remove(in_queue text, in_key text, in_kind text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_group text;
    v_at    timestamptz;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    DELETE FROM pyqueue_message WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind
    RETURNING group_key, scheduled_at INTO v_group, v_at;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_group IS NOT NULL AND v_at <> pyqueue__blocked_at() THEN
        PERFORM pyqueue__group_settle(in_queue, v_group, pg_catalog.clock_timestamp(), true);
    END IF;
    IF pyqueue__occurrence_key(in_key) THEN  -- a schedule's pending occurrence removed: the schedule goes on
        PERFORM pyqueue__schedule_next(in_queue, in_key, in_kind);
    END IF;
    IF (pyqueue__queue(in_queue)).result_retention IS NOT NULL THEN  -- dependencies live in queues that keep results
        PERFORM pyqueue__deps_left(in_queue, in_key, in_kind, false, 'was removed');
    END IF;
    RETURN true;
END;
$$;

-- queue_release: hands back every message of the queue that is reserved now
-- (by in_worker, its reserved_by name, when not NULL), deleting nothing:
-- each is ready now and its token no longer holds (the old holder's commit,
-- rollback or extend answers false / NULL), its attempts unchanged (as after
-- a crash), its limit slot free (a slot's holder is a live reservation), a
-- group's head keeps its place. Returns how many were released. For an
-- admin: a consumer's reservation otherwise lasts until its timeout (at most
-- the queue's max_reservation). Locks the released rows, in key order (as
-- queue_drop).
CREATE OR REPLACE FUNCTION queue_release(in_queue text, in_worker text DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_count integer;
BEGIN
    IF in_worker IS NOT NULL AND in_worker = '' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: worker must not be empty' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.length(in_worker) > 255 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: worker is longer than 255 characters' USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now
       AND m.scheduled_at < pyqueue__blocked_at()
       AND (in_worker IS NULL OR m.reserved_by::text = in_worker)
     ORDER BY m.p_key, m.p_kind
       FOR UPDATE;
    UPDATE pyqueue_message m
       SET scheduled_at = v_now, reserve_token = NULL, reserved_by = NULL
     WHERE m.queue_name::text = in_queue AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now
       AND m.scheduled_at < pyqueue__blocked_at()
       AND (in_worker IS NULL OR m.reserved_by::text = in_worker);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN
        PERFORM pyqueue__notify(in_queue);  -- wakeup: ready now
    END IF;
    RETURN v_count;
END;
$$;
