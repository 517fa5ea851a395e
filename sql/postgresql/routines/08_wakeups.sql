-- ==== wakeups ====
-- Waiting for work without polling hard: the NOTIFY channel of a queue and
-- its throttle, when the next message falls due, and a long poll held inside
-- the server for clients that cannot LISTEN.

-- pyqueue__channel: the NOTIFY channel of a queue, 'pyqueue_' + md5 of its
-- name (40 characters: a queue name reaches 128 characters, a channel name
-- is an identifier of at most 63 bytes). No lookup, no locks.
CREATE OR REPLACE FUNCTION pyqueue__channel(in_queue text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'pyqueue_' || pg_catalog.md5(in_queue) $$;

-- pyqueue__notify_key: the advisory lock (of the bigint key space) of one
-- slot of in_queue's wakeups: the queue's hashtext in the high 32 bits, the
-- slot's number (time since the epoch in windows, modulo 2^32) in the low.
-- No lookup, no locks.
CREATE OR REPLACE FUNCTION pyqueue__notify_key(in_queue text, in_slot bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT (pg_catalog.hashtext(in_queue)::bigint << 32) | (in_slot & 4294967295) $$;

-- pyqueue__notify: sends the wakeup of a queue (NOTIFY on its channel, the
-- queue name as payload), throttled without a row (a row updated by every
-- wakeup kept thousands of dead versions under a held xmin horizon, and
-- every push read them) by the queue's notify_window (pyqueue_notify, which
-- only queue_set_notify_window writes; default 5 ms, 0 = every statement):
-- - per producer session: one wakeup per window at most; when it sent the
--   last is a session setting, 'pyqueue.n' + md5 of the queue name (seconds
--   since the epoch; a rollback undoes it with its NOTIFY);
-- - per queue: of the transactions that would notify in one window-long
--   slot of time, one at a time does (pg_try_advisory_xact_lock of the
--   slot's pyqueue__notify_key, never waiting; the others skip theirs and
--   the holder's wakes the listeners). PostgreSQL serializes the commits
--   that carry a NOTIFY (a lock held through the commit's WAL flush): 8
--   sessions committing an INSERT and a NOTIFY each made 320-430 commits a
--   second against 2,400-2,900 without the NOTIFY, so producers must not
--   queue for it. A transaction left open holds back one slot only.
-- NOTIFY is delivered when the caller's transaction commits, and not at all
-- when it rolls back; PostgreSQL also folds identical notifications of one
-- transaction into one. Called once per push statement, never per row.
-- Locks: the slot's advisory lock when free, until the transaction ends.
CREATE OR REPLACE FUNCTION pyqueue__notify(in_queue text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    double precision := extract(epoch FROM pg_catalog.clock_timestamp())::double precision;
    v_name   text := 'pyqueue.n' || pg_catalog.md5(in_queue);
    v_window double precision;
BEGIN
    SELECT extract(epoch FROM n.notify_window)::double precision INTO v_window
      FROM pyqueue_notify n
     WHERE n.queue_name::text = in_queue;
    v_window := coalesce(v_window, 0.005::double precision);
    IF v_window > 0::double precision THEN
        IF nullif(pg_catalog.current_setting(v_name, true), '')::double precision > v_now - v_window THEN
            RETURN;  -- this session woke the queue less than a window ago
        END IF;
        IF NOT pg_catalog.pg_try_advisory_xact_lock(
                   pyqueue__notify_key(in_queue, pg_catalog.floor(v_now / v_window)::bigint)) THEN
            RETURN;  -- another transaction is waking the queue in this slot
        END IF;
        PERFORM pg_catalog.set_config(v_name, v_now::text, false);
    END IF;
    PERFORM pg_catalog.pg_notify(pyqueue__channel(in_queue), in_queue);
END;
$$;

-- queue_channel: the NOTIFY channel a plain-SQL client LISTENs on for
-- wakeups of in_queue (a push of a message that is ready now):
--   SELECT queue_channel('jobs');  -- then LISTEN "<that name>";
-- The name is fixed by the queue name alone. Raises unknown_queue. No locks.
CREATE OR REPLACE FUNCTION queue_channel(in_queue text)
RETURNS text
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    RETURN pyqueue__channel(in_queue);
END;
$$;

-- queue_set_notify_window: sets the queue's wakeup throttle window (see
-- pyqueue__notify; NULL = the default 5 ms, the queue's row is removed;
-- 0 = one NOTIFY per push statement).
-- Rows it writes have last_notified_at 'infinity' (see the cleanup below).
-- Locks the queue's pyqueue_notify row.
CREATE OR REPLACE FUNCTION queue_set_notify_window(in_queue text, in_window interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    PERFORM pyqueue__check_duration('window', in_window, false);
    IF in_window > interval '1 hour' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: window must not exceed 1 hour' USING ERRCODE = '22023';
    END IF;
    IF in_window IS NULL THEN
        DELETE FROM pyqueue_notify WHERE queue_name::text = in_queue;
        RETURN;
    END IF;
    INSERT INTO pyqueue_notify AS n (queue_name, notify_window, last_notified_at)
    VALUES (in_queue, in_window, 'infinity')
    ON CONFLICT (queue_name) DO UPDATE SET notify_window = EXCLUDED.notify_window, last_notified_at = 'infinity';
END;
$$;

-- Installs before this throttle inserted a queue's row at its
-- first wakeup with the then default window, 50 ms, and kept the time of the
-- last wakeup in it: those rows (50 ms, a finite last_notified_at) go, so
-- that their queues take today's default. Rows queue_set_notify_window
-- writes are marked 'infinity' and stay; last_notified_at is read by nothing.
DELETE FROM pyqueue_notify
 WHERE notify_window = interval '50 milliseconds' AND last_notified_at <> 'infinity'::timestamptz;

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
-- Rates: when a message is ready now and the queue has rates (one more
-- probe, only then), a ready message held back by a used-up rate does not
-- count as ready: with the queue-wide rate used up the answer is when its
-- next unit frees; else the earliest message of the kinds whose rate is not
-- used up (reading past the messages of the others), or, earlier, the time
-- a used-up kind's next unit frees (a worker then wakes no later than the
-- first message it could reserve, and does not poll while all wait).
CREATE OR REPLACE FUNCTION queue_next_scheduled_at(in_queue text, in_kinds text[] DEFAULT NULL)
RETURNS TABLE (next_scheduled_at timestamptz, wait_s double precision)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_sort = off
AS $$
DECLARE
    v_queue   pyqueue_queue := pyqueue__queue(in_queue);
    v_now     timestamptz := pg_catalog.clock_timestamp();
    v_next    timestamptz;
    v_wide    timestamptz;
    v_blocked text[];
    v_unit    timestamptz;
BEGIN
    PERFORM pyqueue__check_kinds(in_kinds);
    IF NOT v_queue.paused THEN
        SELECT m.scheduled_at INTO v_next
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue
           AND m.scheduled_at < 'infinity' AND m.scheduled_at < pyqueue__blocked_at()  -- never due while blocked behind a group's head
           AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
         ORDER BY m.scheduled_at
         LIMIT 1;
    END IF;
    IF v_next <= v_now AND EXISTS (SELECT 1 FROM pyqueue_rate t WHERE t.queue_name::text = in_queue) THEN
        -- when each rate's next unit is free: a never-used slot is free now
        SELECT pg_catalog.max(f.free_at) FILTER (WHERE f.p_kind = ''::text),
               pg_catalog.array_agg(f.p_kind) FILTER (WHERE f.p_kind <> ''::text AND f.free_at > v_now),
               pg_catalog.min(f.free_at) FILTER (WHERE f.p_kind <> ''::text AND f.free_at > v_now)
          INTO v_wide, v_blocked, v_unit
          FROM (SELECT t.p_kind::text AS p_kind,
                       (SELECT pg_catalog.min(coalesce(s.used_at + t.per, '-infinity'::timestamptz))
                          FROM pyqueue_rate_slot s
                         WHERE s.queue_name::text = in_queue AND s.p_kind::text = t.p_kind::text) AS free_at
                  FROM pyqueue_rate t
                 WHERE t.queue_name::text = in_queue
                   AND (in_kinds IS NULL OR t.p_kind::text = ''::text OR t.p_kind::text = ANY (in_kinds))) f;
        IF v_wide > v_now THEN
            v_next := v_wide;
        ELSIF v_blocked IS NOT NULL THEN
            SELECT m.scheduled_at INTO v_next
              FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue
               AND m.scheduled_at < 'infinity' AND m.scheduled_at < pyqueue__blocked_at()
               AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
               AND m.p_kind::text <> ALL (v_blocked)
             ORDER BY m.scheduled_at
             LIMIT 1;
            v_next := least(v_next, v_unit);
        END IF;
    END IF;
    next_scheduled_at := v_next;
    wait_s := CASE WHEN v_next IS NOT NULL THEN greatest(extract(epoch FROM v_next - v_now)::double precision, 0) END;
    RETURN NEXT;
END;
$$;

-- queue_wait: blocks until the queue has a message (of one of in_kinds, NULL
-- = any) that is eligible now, or until in_timeout passes (NULL = 1 s, at
-- most 1 hour); true when one is ready, false at the timeout. Checks every
-- in_poll (NULL = 50 ms, at least 1 ms) and, when a delayed message or a
-- reservation falls due before then, right at its time: a long poll held
-- inside the server, one client round trip per wait, for clients without
-- LISTEN. Each check is one queue_next_scheduled_at. Must run in autocommit
-- or READ COMMITTED (a REPEATABLE READ snapshot never sees new messages).
-- Takes no locks; keeps a connection busy while it waits.
CREATE OR REPLACE FUNCTION queue_wait(in_queue text, in_kinds text[] DEFAULT NULL,
                                      in_timeout interval DEFAULT NULL, in_poll interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_deadline timestamptz;
    v_poll     double precision;
    v_wait     double precision;
    v_left     double precision;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_duration('timeout', in_timeout, false);
    PERFORM pyqueue__check_duration('poll', in_poll, true);
    IF in_poll < interval '1 millisecond' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: poll must be at least 1 millisecond' USING ERRCODE = '22023';
    END IF;
    IF in_timeout > interval '1 hour' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: timeout must not exceed 1 hour' USING ERRCODE = '22023';
    END IF;
    v_deadline := pg_catalog.clock_timestamp() + coalesce(in_timeout, interval '1 second');
    v_poll := extract(epoch FROM coalesce(in_poll, interval '50 milliseconds'))::double precision;
    LOOP
        SELECT n.wait_s INTO v_wait FROM queue_next_scheduled_at(in_queue, in_kinds) n;
        IF v_wait = 0::double precision THEN
            RETURN true;
        END IF;
        v_left := extract(epoch FROM v_deadline - pg_catalog.clock_timestamp())::double precision;
        IF v_left <= 0::double precision THEN
            RETURN false;
        END IF;
        PERFORM pg_catalog.pg_sleep(least(v_poll, v_left, coalesce(v_wait, v_poll)));
    END LOOP;
END;
$$;
