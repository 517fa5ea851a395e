-- ==== schedules ====
-- Recurring messages, every n seconds or on a cron expression (UTC): each
-- occurrence is an ordinary message, and committing it pushes the next.

-- pyqueue__cron_field: the bit mask (bit v set = value v matches) of one
-- cron field: '*', 'a', 'a-b', with '/step' after '*', 'a' or 'a-b', and
-- comma lists of those. Raises invalid_argument with the field's name.
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__cron_field(in_field text, in_name text, in_min integer, in_max integer)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_part text;
    v_m    text[];
    v_lo   integer;
    v_hi   integer;
    v_step integer;
    v_mask bigint := 0;
    v_i    integer;
BEGIN
    FOREACH v_part IN ARRAY pg_catalog.string_to_array(in_field, ',') LOOP
        v_m := pg_catalog.regexp_match(v_part, '^(\*|([0-9]{1,2})(-([0-9]{1,2}))?)(/([0-9]{1,2}))?$');
        IF v_m IS NULL THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: cron % field "%" is not *, n, a-b, */s, a/s or a-b/s (lists with commas)',
                in_name, in_field USING ERRCODE = '22023';
        END IF;
        IF v_m[1] = '*' THEN
            v_lo := in_min; v_hi := in_max;
        ELSE
            v_lo := v_m[2]::integer;
            v_hi := coalesce(v_m[4]::integer, CASE WHEN v_m[6] IS NULL THEN v_lo ELSE in_max END);
        END IF;
        v_step := coalesce(v_m[6]::integer, 1);
        IF v_lo < in_min OR v_hi > in_max OR v_lo > v_hi OR v_step < 1 THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: cron % field "%" is out of range %-% (or a-b with a > b, or step 0)',
                in_name, in_field, in_min, in_max USING ERRCODE = '22023';
        END IF;
        v_i := v_lo;
        WHILE v_i <= v_hi LOOP
            v_mask := v_mask | (1::bigint << v_i);
            v_i := v_i + v_step;
        END LOOP;
    END LOOP;
    RETURN v_mask;
END;
$$;

-- pyqueue__cron_next: the first minute strictly after in_after (UTC) that
-- matches the 5-field cron expression (minute hour day-of-month month
-- day-of-week; day-of-week 0-7, 0 and 7 = Sunday; when both day fields are
-- restricted a day matching either matches, as in Vixie cron). Computed with
-- set operations: the first matching day among the next 8 years of days,
-- then the first matching minute of that day; never minute by minute.
-- Raises invalid_argument for a malformed expression or one that never matches.
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__cron_next(in_cron text, in_after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_f       text[];
    v_min     bigint;
    v_hour    bigint;
    v_dom     bigint;
    v_mon     bigint;
    v_dow     bigint;
    v_or      boolean;
    v_t       timestamp;
    v_day     date;
    v_mod     integer;
    v_first   integer;
BEGIN
    IF in_cron IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: cron must not be NULL' USING ERRCODE = '22023';
    END IF;
    v_f := pg_catalog.regexp_split_to_array(pg_catalog.btrim(in_cron, ' '), ' +');
    IF pg_catalog.cardinality(v_f) <> 5 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: cron must have 5 fields (minute hour day-of-month month day-of-week), got "%"',
            in_cron USING ERRCODE = '22023';
    END IF;
    v_min  := pyqueue__cron_field(v_f[1], 'minute', 0, 59);
    v_hour := pyqueue__cron_field(v_f[2], 'hour', 0, 23);
    v_dom  := pyqueue__cron_field(v_f[3], 'day-of-month', 1, 31);
    v_mon  := pyqueue__cron_field(v_f[4], 'month', 1, 12);
    v_dow  := pyqueue__cron_field(v_f[5], 'day-of-week', 0, 7);
    IF v_dow & 128::bigint <> 0 THEN
        v_dow := (v_dow | 1::bigint) & 127::bigint;
    END IF;
    v_or := pg_catalog.left(v_f[3], 1) <> '*' AND pg_catalog.left(v_f[5], 1) <> '*';
    v_t := pg_catalog.date_trunc('minute', in_after AT TIME ZONE 'UTC') + interval '1 minute';
    -- today: the first matching minute at or after v_t's minute of the day
    v_mod := extract(hour FROM v_t)::integer * 60 + extract(minute FROM v_t)::integer;
    SELECT pg_catalog.min(d) INTO v_day
      FROM (SELECT v_t::date + i AS d FROM pg_catalog.generate_series(0, 366 * 8) AS i) AS days
     WHERE (v_mon >> extract(month FROM d)::integer) & 1::bigint = 1
       AND CASE WHEN v_or THEN (v_dom >> extract(day FROM d)::integer) & 1::bigint = 1
                             OR (v_dow >> extract(dow FROM d)::integer) & 1::bigint = 1
                ELSE (v_dom >> extract(day FROM d)::integer) & 1::bigint = 1
                 AND (v_dow >> extract(dow FROM d)::integer) & 1::bigint = 1 END
       AND (d > v_t::date
            OR EXISTS (SELECT 1 FROM pg_catalog.generate_series(0, 23) h, pg_catalog.generate_series(0, 59) mi
                        WHERE (v_hour >> h) & 1::bigint = 1 AND (v_min >> mi) & 1::bigint = 1 AND h * 60 + mi >= v_mod));
    IF v_day IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: cron "%" matches no day in the next 8 years', in_cron
            USING ERRCODE = '22023';
    END IF;
    SELECT pg_catalog.min(h * 60 + mi) INTO v_first
      FROM pg_catalog.generate_series(0, 23) h, pg_catalog.generate_series(0, 59) mi
     WHERE (v_hour >> h) & 1::bigint = 1 AND (v_min >> mi) & 1::bigint = 1
       AND (v_day > v_t::date OR h * 60 + mi >= v_mod);
    RETURN (v_day + pg_catalog.make_interval(mins => v_first)) AT TIME ZONE 'UTC';
END;
$$;

-- pyqueue__schedule_key: the message key of the occurrence at in_at.
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__schedule_key(in_key text, in_at timestamptz)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT in_key || '@' || pg_catalog.to_char(in_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') $$;

-- pyqueue__schedule_after: the next occurrence of a schedule after in_after:
-- every_s: the next multiple of every_s seconds since 1970-01-01 UTC; cron:
-- pyqueue__cron_next.
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__schedule_after(in_every_s bigint, in_cron text, in_after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF in_every_s IS NOT NULL THEN
        RETURN pg_catalog.to_timestamp((pg_catalog.floor(extract(epoch FROM in_after) / in_every_s::numeric) + 1::numeric)
                                       * in_every_s::numeric);
    END IF;
    RETURN pyqueue__cron_next(in_cron, in_after);
END;
$$;

-- pyqueue__push_occurrence: pushes a schedule's occurrence (its key from
-- pyqueue__schedule_key, run at in_at), as queue_push would, which refuses
-- such keys to producers: only the schedule routines write occurrences.
-- Dedup as queue_push. Locks: the queue's shared lock (pyqueue__queue), the
-- unique-index entry of the new row.
CREATE OR REPLACE FUNCTION pyqueue__push_occurrence(in_queue text, in_key text, in_kind text, in_payload jsonb,
                                                    in_at timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_xid xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    PERFORM pyqueue__ready_from_lower(in_queue, in_at, v_now);
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at, scheduled_at_initially, created_at)
    VALUES (in_queue, in_key, in_kind, in_payload, 0, in_at, in_at, v_now)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    IF FOUND AND (in_at <= v_now OR NOT EXISTS (
                  SELECT 1 FROM pyqueue_message m
                   WHERE m.queue_name::text = in_queue AND m.scheduled_at < 'infinity' AND m.scheduled_at < in_at)) THEN
        PERFORM pyqueue__notify(in_queue);  -- ready now, or the earliest due: waiters re-time to it
    END IF;
END;
$$;

-- pyqueue__schedule_next: called by every routine that ends, moves or fails
-- a message (queue_commit and the other commits, pyqueue__dead_letter,
-- queue_fail's retry, queue_move, queue_cancel, queue_remove), after it.
-- When the message was the pending occurrence of a schedule (key = p_key @
-- next_at), advances next_at past now and pushes that occurrence, in the
-- caller's transaction. The schedule row is locked and next_at re-checked,
-- so of two commits racing for the same occurrence only one advances it
-- (and the occurrence key makes a duplicate push a no-op anyway).
CREATE OR REPLACE FUNCTION pyqueue__schedule_next(in_queue text, in_key text, in_kind text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_sched pyqueue_schedule;
    v_at    timestamptz;
    v_next  timestamptz;
BEGIN
    IF pg_catalog.length(in_key) < 22 OR pg_catalog.right(in_key, 21) NOT SIMILAR TO '@[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z' THEN
        RETURN;
    END IF;
    SELECT * INTO v_sched FROM pyqueue_schedule s
     WHERE s.queue_name::text = in_queue AND s.p_key::text = pg_catalog.left(in_key, -21) AND s.p_kind::text = in_kind
       FOR UPDATE;
    IF NOT FOUND OR pyqueue__schedule_key(v_sched.p_key::text, v_sched.next_at) <> in_key THEN
        RETURN;
    END IF;
    v_next := pyqueue__schedule_after(v_sched.every_s, v_sched.cron::text, greatest(v_sched.next_at, pg_catalog.clock_timestamp()));
    UPDATE pyqueue_schedule SET next_at = v_next
     WHERE queue_name::text = in_queue AND p_key::text = v_sched.p_key::text AND p_kind::text = in_kind;
    PERFORM pyqueue__push_occurrence(in_queue, pyqueue__schedule_key(v_sched.p_key::text, v_next), in_kind,
                                     v_sched.payload, v_next);
END;
$$;

-- pyqueue__schedule: creates or replaces a schedule and pushes its first
-- occurrence (the next one after now). A pending occurrence of the replaced
-- schedule is removed unless it is reserved (then it runs, and its commit
-- pushes nothing since it is no longer the pending one). Called again with
-- the same definition (payload, every or cron) it changes nothing while the
-- pending occurrence is live (returns its time), even one ahead of the clock
-- (a test clock moves stored times, not the server's), and repairs a schedule
-- whose pending occurrence is gone: the next occurrence after now is pushed.
-- The clock is read again once the schedule row is locked.
-- Locks: the queue's shared lock (pyqueue__queue), the schedule row, the replaced
-- pending occurrence, then the new occurrence as queue_push.
CREATE OR REPLACE FUNCTION pyqueue__schedule(in_queue text, in_key text, in_kind text, in_payload jsonb,
                                             in_every_s bigint, in_cron text)
RETURNS timestamptz
LANGUAGE plpgsql
AS $$
DECLARE
    v_now  timestamptz := pg_catalog.clock_timestamp();
    v_next timestamptz;
    v_old  pyqueue_schedule;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    PERFORM pyqueue__check_name('p_key', in_key, 234);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF in_payload IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_payload: payload must not be NULL (use the JSON value null)'
            USING ERRCODE = '22023';
    END IF;
    v_next := pyqueue__schedule_after(in_every_s, in_cron, v_now);
    SELECT * INTO v_old FROM pyqueue_schedule s
     WHERE s.queue_name::text = in_queue AND s.p_key::text = in_key AND s.p_kind::text = in_kind FOR UPDATE;
    IF FOUND THEN
        v_now := pg_catalog.clock_timestamp();
        v_next := pyqueue__schedule_after(in_every_s, in_cron, v_now);
        IF v_old.payload = in_payload AND v_old.every_s IS NOT DISTINCT FROM in_every_s
           AND v_old.cron::text IS NOT DISTINCT FROM in_cron
           AND EXISTS (SELECT 1 FROM pyqueue_message m
                        WHERE m.queue_name::text = in_queue AND m.p_kind::text = in_kind
                          AND m.p_key::text = pyqueue__schedule_key(in_key, v_old.next_at)) THEN
            RETURN v_old.next_at;  -- the same schedule, its pending occurrence live: nothing to do
        END IF;
        DELETE FROM pyqueue_message
         WHERE queue_name::text = in_queue AND p_key::text = pyqueue__schedule_key(in_key, v_old.next_at)
           AND p_kind::text = in_kind AND reserve_token IS NULL;
    END IF;
    INSERT INTO pyqueue_schedule (queue_name, p_key, p_kind, payload, every_s, cron, next_at, created_at)
    VALUES (in_queue, in_key, in_kind, in_payload, in_every_s, in_cron, v_next, v_now)
    ON CONFLICT (queue_name, p_key, p_kind) DO UPDATE
       SET payload = EXCLUDED.payload, every_s = EXCLUDED.every_s, cron = EXCLUDED.cron,
           next_at = EXCLUDED.next_at;
    PERFORM pyqueue__push_occurrence(in_queue, pyqueue__schedule_key(in_key, v_next), in_kind, in_payload, v_next);
    RETURN v_next;
END;
$$;

-- queue_schedule_every: a message (in_key @ time, in_kind, in_payload) every
-- in_every (whole seconds, 1 s to 100 years), at the multiples of in_every
-- since 1970-01-01 UTC. Returns the time of the first occurrence.
-- Locks as pyqueue__schedule.
CREATE OR REPLACE FUNCTION queue_schedule_every(in_queue text, in_key text, in_kind text, in_payload jsonb,
                                                in_every interval)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_s numeric;
BEGIN
    IF in_every IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: every must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_duration('every', in_every, true);
    IF extract(month FROM in_every) <> 0::numeric OR extract(year FROM in_every) <> 0::numeric THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: every must be given in days, hours, minutes or seconds (months vary)'
            USING ERRCODE = '22023';
    END IF;
    v_s := extract(epoch FROM in_every);
    IF v_s < 1::numeric OR v_s <> pg_catalog.trunc(v_s) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: every must be a whole number of seconds, at least 1'
            USING ERRCODE = '22023';
    END IF;
    RETURN pyqueue__schedule(in_queue, in_key, in_kind, in_payload, v_s::bigint, NULL);
END;
$$;

-- queue_schedule_cron: a message (in_key @ time, in_kind, in_payload) at every
-- minute matching the 5-field cron expression in_cron (UTC). Returns the time
-- of the first occurrence.
-- Locks as pyqueue__schedule.
CREATE OR REPLACE FUNCTION queue_schedule_cron(in_queue text, in_key text, in_kind text, in_payload jsonb,
                                               in_cron text)
RETURNS timestamptz
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    IF in_cron IS NULL OR pg_catalog.length(in_cron) > 255 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: cron must not be NULL or longer than 255 characters'
            USING ERRCODE = '22023';
    END IF;
    RETURN pyqueue__schedule(in_queue, in_key, in_kind, in_payload, NULL, in_cron);
END;
$$;

-- queue_unschedule: removes the schedule and its pending occurrence unless
-- that is reserved (it then runs once more, and its commit pushes nothing).
-- False when there was no such schedule.
-- Locks the schedule row and the pending occurrence's row.
CREATE OR REPLACE FUNCTION queue_unschedule(in_queue text, in_key text, in_kind text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_old timestamptz;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_name('p_key', in_key, 234);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    DELETE FROM pyqueue_schedule
     WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind
    RETURNING next_at INTO v_old;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM pyqueue_message
     WHERE queue_name::text = in_queue AND p_key::text = pyqueue__schedule_key(in_key, v_old) AND p_kind::text = in_kind
       AND reserve_token IS NULL;
    RETURN true;
END;
$$;

-- queue_schedules: the schedules of a queue (all when NULL), by queue, key, kind.
-- Reads without locks.
CREATE OR REPLACE FUNCTION queue_schedules(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, p_key text, p_kind text, payload jsonb, every_s bigint, cron text,
               next_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT s.queue_name::text, s.p_key::text, s.p_kind::text, s.payload, s.every_s, s.cron::text, s.next_at
          FROM pyqueue_schedule s
         WHERE in_queue IS NULL OR s.queue_name::text = in_queue
         ORDER BY s.queue_name, s.p_key, s.p_kind;
END;
$$;
