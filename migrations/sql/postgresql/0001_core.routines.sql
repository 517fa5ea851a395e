-- pyqueue-sql revision 0001 (postgresql): the routines of the core contract, as released
-- (0001_core.up.sql creates the tables first). Released: never edit it. Every routine is
-- replayable, so a downgrade can re-create it from here (pyqueue_sql.routine_sets).

-- ===========================================================================
-- Internal helpers (not part of the contract)
-- ===========================================================================

-- Raises unless a name is non-NULL, non-empty, at most in_max characters and
-- does not end with a space. (MySQL compares names with PAD SPACE, 'a' = 'a ';
-- both dialects refuse the trailing space so that the contract is the same.)
CREATE OR REPLACE FUNCTION pyqueue__check_name(in_what text, in_value text, in_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_value IS NULL OR in_value = '' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not be NULL or empty', in_what
            USING ERRCODE = '22023';
    END IF;
    IF length(in_value) > in_max THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % is longer than % characters', in_what, in_max
            USING ERRCODE = '22023';
    END IF;
    IF right(in_value, 1) = ' ' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not end with a space', in_what
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Raises unless key, kind and token name a reservation (commit, rollback, extend, move).
CREATE OR REPLACE FUNCTION pyqueue__check_reservation(in_key text, in_kind text, in_token uuid)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF in_token IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: token must not be NULL' USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Raises unless the queue exists; returns its settings row. With in_lock it
-- takes FOR KEY SHARE on the queue row (what the foreign key check takes
-- anyway), so a concurrent queue_drop either waits for this transaction or has
-- already won, and the caller then gets unknown_queue, never a raw FK error.
CREATE OR REPLACE FUNCTION pyqueue__queue(in_queue text, in_lock boolean DEFAULT false)
RETURNS pyqueue_queue
LANGUAGE plpgsql
AS $$
DECLARE
    v_row pyqueue_queue;
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    IF in_lock THEN
        SELECT * INTO v_row FROM pyqueue_queue WHERE queue_name = in_queue FOR KEY SHARE;
    ELSE
        SELECT * INTO v_row FROM pyqueue_queue WHERE queue_name = in_queue;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue
            USING ERRCODE = 'P0002';
    END IF;
    RETURN v_row;
END;
$$;

-- Raises when a duration is negative (or, with in_positive, not above zero),
-- or longer than 100 years of 365.25 days (the same bound as MySQL's; an
-- interval '100 years' would compare as 36000 days).
CREATE OR REPLACE FUNCTION pyqueue__check_duration(in_what text, in_value interval, in_positive boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_value < interval '0' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not be negative', in_what
            USING ERRCODE = '22023';
    END IF;
    IF in_positive AND in_value = interval '0' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must be greater than zero', in_what
            USING ERRCODE = '22023';
    END IF;
    IF in_value > interval '36525 days' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not exceed 100 years', in_what
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Removes one locked message and hands it to the queue's dead-letter queue
-- (or drops it when there is none); counts it in dead_count.
-- Caller must hold the row lock on the message.
CREATE OR REPLACE FUNCTION pyqueue__dead_letter(in_queue pyqueue_queue, in_key text, in_kind text, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_msg pyqueue_message;
BEGIN
    DELETE FROM pyqueue_message
     WHERE queue_name = in_queue.queue_name AND p_key = in_key AND p_kind = in_kind
    RETURNING * INTO v_msg;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE pyqueue_queue SET dead_count = dead_count + 1 WHERE queue_name = in_queue.queue_name;
    IF in_queue.dead_letter_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue.dead_letter_queue, true);
        -- A newer dead letter of the same key replaces the older one (the
        -- newest payload is the one worth inspecting or redriving) and is
        -- ready again without a reservation, so a consumer holding the older
        -- one cannot commit the newer one away unseen.
        INSERT INTO pyqueue_message AS m
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, attempts)
        VALUES (in_queue.dead_letter_queue, v_msg.p_key, v_msg.p_kind, v_msg.payload,
                v_msg.priority, in_now, in_now, v_msg.created_at, 0)
        ON CONFLICT (queue_name, p_key, p_kind) DO UPDATE
           SET payload = EXCLUDED.payload, priority = EXCLUDED.priority,
               created_at = EXCLUDED.created_at, scheduled_at = in_now,
               scheduled_at_initially = in_now, attempts = 0,
               reserved_by = NULL, reserve_token = NULL;
    END IF;
END;
$$;

-- Locks up to in_n ready messages of a queue, highest priority first, FIFO
-- within a priority, skipping rows other transactions hold (SKIP LOCKED).
-- Visits one index range per distinct priority: rows scheduled in the future
-- (delayed or reserved) are never read. Caller holds the locks until commit.
CREATE OR REPLACE FUNCTION pyqueue__lock_ready(in_queue text, in_now timestamptz, in_n integer, in_kinds text[])
RETURNS TABLE (c_key varchar, c_kind varchar, c_attempts integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_priority integer;
    v_left     integer := in_n;
    v_got      integer;
BEGIN
    SELECT max(m.priority) INTO v_priority FROM pyqueue_message m WHERE m.queue_name = in_queue;
    WHILE v_priority IS NOT NULL AND v_left > 0 LOOP
        RETURN QUERY
            SELECT m.p_key, m.p_kind, m.attempts
              FROM pyqueue_message m
             WHERE m.queue_name = in_queue
               AND m.priority = v_priority
               AND m.scheduled_at <= in_now
               AND (in_kinds IS NULL OR m.p_kind = ANY (in_kinds))
             ORDER BY m.scheduled_at, m.id
             LIMIT v_left
               FOR UPDATE SKIP LOCKED;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
        SELECT max(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name = in_queue AND m.priority < v_priority;
    END LOOP;
END;
$$;

-- ===========================================================================
-- Contract routines
-- ===========================================================================

-- queue_create: creates the queue or replaces its settings (NULL = default:
-- 30 s, 10 attempts, no dead-letter queue, no history). Locks the queue row.
CREATE OR REPLACE FUNCTION queue_create(
    in_queue              text,
    in_visibility_timeout interval DEFAULT NULL,
    in_max_attempts       integer  DEFAULT NULL,
    in_dead_letter_queue  text     DEFAULT NULL,
    in_history_retention  interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
AS $$
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
       SET visibility_timeout = EXCLUDED.visibility_timeout,
           max_attempts       = EXCLUDED.max_attempts,
           dead_letter_queue  = EXCLUDED.dead_letter_queue,
           history_retention  = EXCLUDED.history_retention;
END;
$$;

-- queue_drop: deletes the queue and all its messages. Refuses while another
-- queue names it as dead-letter queue. Locks the queue row and its messages.
CREATE OR REPLACE FUNCTION queue_drop(in_queue text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_user text;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    SELECT q.queue_name INTO v_user FROM pyqueue_queue q WHERE q.dead_letter_queue = in_queue LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: queue "%" is the dead_letter_queue of "%"', in_queue, v_user
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM pyqueue_queue WHERE queue_name = in_queue;  -- messages go by ON DELETE CASCADE
END;
$$;

-- queue_push: inserts one message; false when a live message with the same
-- (queue, p_key, p_kind) exists (dedup, the existing one is untouched).
-- Takes a key-share lock on the queue row (blocks only queue_drop) and the
-- unique-index entry of the new row.
CREATE OR REPLACE FUNCTION queue_push(
    in_queue    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz DEFAULT NULL,
    in_priority integer     DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_at  timestamptz;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF in_payload IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_payload: payload must not be NULL (use the JSON value null)'
            USING ERRCODE = '22023';
    END IF;
    IF NOT isfinite(coalesce(in_run_at, v_now)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_at := coalesce(in_run_at, v_now);
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at)
    VALUES (in_queue, in_key, in_kind, in_payload, coalesce(in_priority, 0), v_at, v_at, v_now)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    RETURN FOUND;
END;
$$;

-- queue_push_batch: inserts many messages in one statement; returns how many
-- were new (duplicates, also within the batch, are skipped). Arrays must have
-- the same length; in_run_ats / in_priorities may be NULL (all defaults) or
-- hold NULL elements. Any invalid element refuses the whole batch.
CREATE OR REPLACE FUNCTION queue_push_batch(
    in_queue      text,
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[] DEFAULT NULL,
    in_priorities integer[]     DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_n     integer;
    v_count integer;
    v_bad   integer;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    IF in_keys IS NULL OR in_kinds IS NULL OR in_payloads IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds and payloads must not be NULL'
            USING ERRCODE = '22023';
    END IF;
    v_n := coalesce(cardinality(in_keys), 0);
    IF array_ndims(in_keys) > 1 OR array_ndims(in_kinds) > 1 OR array_ndims(in_payloads) > 1
       OR array_ndims(in_run_ats) > 1 OR array_ndims(in_priorities) > 1
       OR cardinality(in_kinds) <> v_n OR cardinality(in_payloads) <> v_n
       OR (in_run_ats IS NOT NULL AND cardinality(in_run_ats) <> v_n)
       OR (in_priorities IS NOT NULL AND cardinality(in_priorities) <> v_n) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds, payloads, run_ats and priorities must have the same length'
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    SELECT min(i) INTO v_bad
      FROM generate_subscripts(in_keys, 1) AS i
     WHERE in_keys[i] IS NULL OR in_keys[i] = '' OR length(in_keys[i]) > 255 OR right(in_keys[i], 1) = ' '
        OR in_kinds[i] IS NULL OR in_kinds[i] = '' OR length(in_kinds[i]) > 128 OR right(in_kinds[i], 1) = ' '
        OR in_payloads[i] IS NULL
        OR NOT isfinite(coalesce(in_run_ats[i], v_now));
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch has a NULL, empty, too long or space-ended p_key/p_kind, a NULL payload or an infinite run_at', v_bad
            USING ERRCODE = '22023';
    END IF;
    -- Ids are drawn in array order (FIFO within the batch), but rows are
    -- inserted in key order: two batches with overlapping keys then take
    -- their unique-index entries in the same order and cannot deadlock.
    WITH batch AS MATERIALIZED (
        SELECT b.k, b.kd, b.pl, b.ra, b.pr,
               nextval(pg_get_serial_sequence('pyqueue_message', 'id')) AS new_id
          FROM unnest(in_keys, in_kinds, in_payloads,
                      coalesce(in_run_ats, array_fill(NULL::timestamptz, ARRAY[v_n])),
                      coalesce(in_priorities, array_fill(NULL::integer, ARRAY[v_n])))
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
    RETURN v_count;
END;
$$;

-- queue_pop: removes and returns up to in_n ready messages (at-most-once).
-- Locks the chosen rows with SKIP LOCKED; nothing when the queue is paused.
CREATE OR REPLACE FUNCTION queue_pop(in_queue text, in_n integer DEFAULT 1)
RETURNS TABLE (p_key varchar, p_kind varchar, payload jsonb, priority integer,
               attempts integer, created_at timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_now   timestamptz := clock_timestamp();
BEGIN
    IF in_n < 1 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be at least 1' USING ERRCODE = '22023';
    END IF;
    IF v_queue.paused THEN
        RETURN;
    END IF;
    RETURN QUERY
        WITH picked AS (
            SELECT c.c_key, c.c_kind, c.ord
              FROM pyqueue__lock_ready(in_queue, v_now, coalesce(in_n, 1), NULL)
                   WITH ORDINALITY AS c (c_key, c_kind, c_attempts, ord)
        ), gone AS (
            DELETE FROM pyqueue_message m
             USING picked
             WHERE m.queue_name = in_queue AND m.p_key = picked.c_key AND m.p_kind = picked.c_kind
            RETURNING picked.ord, m.p_key, m.p_kind, m.payload, m.priority, m.attempts, m.created_at
        )
        SELECT g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at
          FROM gone g ORDER BY g.ord;
END;
$$;

-- queue_reserve: hands out up to in_n ready messages, each invisible to others
-- until in_timeout (NULL = the queue's visibility_timeout) passes, with a fresh
-- token per message. Rows come highest priority first, FIFO within one.
-- A message whose expired reservation was its last allowed delivery is
-- dead-lettered instead of delivered again. Locks with SKIP LOCKED: concurrent
-- reservers never wait on each other and never share a message.
CREATE OR REPLACE FUNCTION queue_reserve(
    in_queue   text,
    in_worker  text     DEFAULT NULL,
    in_timeout interval DEFAULT NULL,
    in_n       integer  DEFAULT 1,
    in_kinds   text[]   DEFAULT NULL)
RETURNS TABLE (p_key varchar, p_kind varchar, payload jsonb, token uuid, priority integer,
               attempts integer, created_at timestamptz, scheduled_at_initially timestamptz)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_queue   pyqueue_queue := pyqueue__queue(in_queue);
    v_now     timestamptz := clock_timestamp();
    v_until   timestamptz;
    v_left    integer := coalesce(in_n, 1);
    v_got      integer;
    v_ndead    integer;
    v_keys     varchar[];
    v_kinds    varchar[];
    v_attempts integer[];
    v_i        integer;
BEGIN
    IF in_n < 1 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be at least 1' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_duration('timeout', in_timeout, true);
    IF in_worker IS NOT NULL AND length(in_worker) > 255 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: worker is longer than 255 characters' USING ERRCODE = '22023';
    END IF;
    IF in_kinds IS NOT NULL AND (cardinality(in_kinds) = 0 OR array_position(in_kinds, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: kinds must be NULL or a non-empty array without NULLs'
            USING ERRCODE = '22023';
    END IF;
    IF v_queue.paused THEN
        RETURN;
    END IF;
    v_until := v_now + coalesce(in_timeout, v_queue.visibility_timeout);
    LOOP
        SELECT array_agg(c.c_key ORDER BY c.ord), array_agg(c.c_kind ORDER BY c.ord),
               array_agg(c.c_attempts ORDER BY c.ord)
          INTO v_keys, v_kinds, v_attempts
          FROM pyqueue__lock_ready(in_queue, v_now, v_left, in_kinds)
               WITH ORDINALITY AS c (c_key, c_kind, c_attempts, ord);
        v_got := coalesce(cardinality(v_keys), 0);
        EXIT WHEN v_got = 0;
        v_ndead := 0;
        FOR v_i IN 1 .. v_got LOOP
            IF v_attempts[v_i] >= v_queue.max_attempts THEN
                PERFORM pyqueue__dead_letter(v_queue, v_keys[v_i], v_kinds[v_i], v_now);
                v_ndead := v_ndead + 1;
            END IF;
        END LOOP;
        RETURN QUERY
            WITH taken AS (
                UPDATE pyqueue_message m
                   SET scheduled_at  = v_until,
                       attempts      = m.attempts + 1,
                       reserved_by   = in_worker,
                       reserve_token = gen_random_uuid()
                  FROM unnest(v_keys, v_kinds, v_attempts) WITH ORDINALITY AS c (c_key, c_kind, c_attempts, ord)
                 WHERE m.queue_name = in_queue AND m.p_key = c.c_key AND m.p_kind = c.c_kind
                   AND c.c_attempts < v_queue.max_attempts
                RETURNING c.ord, m.p_key, m.p_kind, m.payload, m.reserve_token, m.priority,
                          m.attempts, m.created_at, m.scheduled_at_initially
            )
            SELECT t.p_key, t.p_kind, t.payload, t.reserve_token, t.priority, t.attempts,
                   t.created_at, t.scheduled_at_initially
              FROM taken t ORDER BY t.ord;
        v_left := v_left - (v_got - v_ndead);
        -- Only dead letters can leave slots unfilled while ready rows remain.
        EXIT WHEN v_ndead = 0 OR v_left <= 0;
    END LOOP;
END;
$$;

-- queue_commit: deletes the message if in_token still holds its reservation;
-- false otherwise (expired and re-reserved, committed already, or removed).
CREATE OR REPLACE FUNCTION queue_commit(in_queue text, in_key text, in_kind text, in_token uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_reservation(in_key, in_kind, in_token);
    DELETE FROM pyqueue_message
     WHERE queue_name = in_queue AND p_key = in_key AND p_kind = in_kind AND reserve_token = in_token;
    RETURN FOUND;
END;
$$;

-- queue_rollback: gives the message back, eligible again after in_delay
-- (NULL = 0). After max_attempts deliveries it goes to the dead-letter queue
-- instead (dropped when the queue has none). False when the token no longer holds.
CREATE OR REPLACE FUNCTION queue_rollback(in_queue text, in_key text, in_kind text, in_token uuid,
                               in_delay interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue    pyqueue_queue := pyqueue__queue(in_queue);
    v_now      timestamptz := clock_timestamp();
    v_attempts integer;
BEGIN
    PERFORM pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_duration('delay', in_delay, false);
    SELECT m.attempts INTO v_attempts
      FROM pyqueue_message m
     WHERE m.queue_name = in_queue AND m.p_key = in_key AND m.p_kind = in_kind
       AND m.reserve_token = in_token
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_attempts >= v_queue.max_attempts THEN
        PERFORM pyqueue__dead_letter(v_queue, in_key, in_kind, v_now);
    ELSE
        UPDATE pyqueue_message
           SET scheduled_at = v_now + coalesce(in_delay, interval '0'),
               reserve_token = NULL,
               reserved_by = NULL
         WHERE queue_name = in_queue AND p_key = in_key AND p_kind = in_kind;
    END IF;
    RETURN true;
END;
$$;

-- queue_extend: pushes the reservation's end to now + in_timeout (NULL = the
-- queue's visibility_timeout) and returns a new token (the old one stops
-- working); NULL when in_token no longer holds.
CREATE OR REPLACE FUNCTION queue_extend(in_queue text, in_key text, in_kind text, in_token uuid,
                             in_timeout interval DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_token uuid;
BEGIN
    PERFORM pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_duration('timeout', in_timeout, true);
    UPDATE pyqueue_message
       SET scheduled_at = clock_timestamp() + coalesce(in_timeout, v_queue.visibility_timeout),
           reserve_token = gen_random_uuid()
     WHERE queue_name = in_queue AND p_key = in_key AND p_kind = in_kind AND reserve_token = in_token
    RETURNING reserve_token INTO v_token;
    RETURN v_token;
END;
$$;

-- queue_move: in one step commits the reservation here and pushes the message
-- to in_to_queue (payload NULL = unchanged, priority kept, attempts reset).
-- If in_to_queue already holds a live message with the same key and kind, that
-- one stays (dedup, as queue_push). False, and nothing changes, when the token
-- no longer holds.
CREATE OR REPLACE FUNCTION queue_move(in_queue text, in_key text, in_kind text, in_token uuid,
                           in_to_queue text, in_payload jsonb DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_msg pyqueue_message;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_name('to_queue', in_to_queue, 128);
    PERFORM pyqueue__queue(in_to_queue, true);
    DELETE FROM pyqueue_message
     WHERE queue_name = in_queue AND p_key = in_key AND p_kind = in_kind AND reserve_token = in_token
    RETURNING * INTO v_msg;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at)
    VALUES (in_to_queue, v_msg.p_key, v_msg.p_kind, coalesce(in_payload, v_msg.payload),
            v_msg.priority, v_now, v_now, v_now)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    RETURN true;
END;
$$;

-- queue_remove: deletes a message whatever its state; false when absent.
CREATE OR REPLACE FUNCTION queue_remove(in_queue text, in_key text, in_kind text)
RETURNS boolean
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    DELETE FROM pyqueue_message WHERE queue_name = in_queue AND p_key = in_key AND p_kind = in_kind;
    RETURN FOUND;
END;
$$;

-- queue_pause: pop and reserve hand out nothing until queue_resume.
-- Pushes, commits and rollbacks still work.
CREATE OR REPLACE FUNCTION queue_pause(in_queue text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    UPDATE pyqueue_queue SET paused = true WHERE queue_name = in_queue;
END;
$$;

CREATE OR REPLACE FUNCTION queue_resume(in_queue text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    UPDATE pyqueue_queue SET paused = false WHERE queue_name = in_queue;
END;
$$;

-- queue_stats: one row per queue (all queues when in_queue is NULL).
-- ready: eligible now; delayed: scheduled later and not reserved; reserved:
-- held by a reservation that has not expired; dead: messages that exhausted
-- max_attempts in this queue so far; oldest_ready_age_s: how long the oldest
-- ready message has been eligible (NULL when none). Reads without locks.
CREATE OR REPLACE FUNCTION queue_stats(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, ready bigint, delayed bigint, reserved bigint, dead bigint,
               oldest_ready_age_s double precision, paused boolean)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT q.queue_name::text,
               count(*) FILTER (WHERE m.scheduled_at <= v_now),
               count(*) FILTER (WHERE m.scheduled_at > v_now AND m.reserve_token IS NULL),
               count(*) FILTER (WHERE m.scheduled_at > v_now AND m.reserve_token IS NOT NULL),
               q.dead_count,
               extract(epoch FROM v_now - min(m.scheduled_at) FILTER (WHERE m.scheduled_at <= v_now))::double precision,
               q.paused
          FROM pyqueue_queue q
          LEFT JOIN pyqueue_message m ON m.queue_name = q.queue_name
         WHERE in_queue IS NULL OR q.queue_name = in_queue
         GROUP BY q.queue_name, q.dead_count, q.paused
         ORDER BY q.queue_name;
END;
$$;
