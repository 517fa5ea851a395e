-- ==== produce ====
-- Put messages in: one, many in one statement, or one that replaces a waiting
-- message with the same key (debounce). Each wakes the queue's listeners when
-- it makes a message ready now.

-- pyqueue__check_payloads: raises for the first element of in_payloads whose
-- JSON text is longer than in_max bytes (see pyqueue__refuse_payload); the
-- batch push routines, before they write anything. Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_payloads(in_payloads jsonb[], in_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_bytes integer;
BEGIN
    SELECT s.bytes INTO v_bytes
      FROM (SELECT pg_catalog.octet_length(u.pl::text) AS bytes, u.ord
              FROM pg_catalog.unnest(in_payloads) WITH ORDINALITY AS u (pl, ord)) AS s
     WHERE s.bytes > in_max
     ORDER BY s.ord
     LIMIT 1;
    IF FOUND THEN
        PERFORM pyqueue__refuse_payload(v_bytes, in_max);
    END IF;
END;
$$;

-- pyqueue__push: the body of queue_push and queue_push_with_headers (each a
-- thin SECURITY DEFINER wrapper over it; in_headers NULL: no headers, and
-- no call to pyqueue__check_headers). The common case (names plainly valid,
-- READ COMMITTED) runs no further nested function until it has to send a
-- wakeup: the checks are one expression, the lock and the lookup are
-- pyqueue__queue's own statements, and the same lookup reads the queue's
-- wakeup window, so that a push inside its session's window does not call
-- pyqueue__notify only for it to read that row and return. Each nested
-- PL/pgSQL call costs a few microseconds (docs/performance.md, Decisions);
-- the wrapper's call of this SECURITY INVOKER function (no SET clause, so
-- no GUC save and restore) was measured at 0-3 % of a queue_push's server
-- CPU (a SECURITY DEFINER sibling called from a SECURITY DEFINER routine
-- cost 6-10 %).
CREATE OR REPLACE FUNCTION pyqueue__push(
    in_queue    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz,
    in_priority integer,
    in_headers  jsonb)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_xid xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_at  timestamptz;
    v_window interval;  -- the queue's notify_window (NULL: no row, the default)
    v_read   boolean := false;  -- v_window was read
    v_new    boolean;
    v_max    integer;   -- the queue's max_payload
    v_bytes  integer;
    v_headers jsonb;
BEGIN
    IF NOT (pyqueue__bad_name(in_queue, 128) OR pyqueue__bad_name(in_key, 255) OR pyqueue__bad_name(in_kind, 128))
       AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        -- as pyqueue__queue(in_queue, true) at READ COMMITTED: the lock, then a read that sees a drop that went first
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('pyqueue-sql queue'),
                                                        pg_catalog.hashtext(in_queue));
        SELECT n.notify_window, q.max_payload INTO v_window, v_max
          FROM pyqueue_queue q LEFT JOIN pyqueue_notify n ON n.queue_name::text = q.queue_name::text
         WHERE q.queue_name::text = in_queue;
        v_read := FOUND;
        IF NOT FOUND THEN
            PERFORM pyqueue__queue(in_queue, true);  -- raises unknown_queue
        END IF;
    ELSE
        v_max := (pyqueue__queue(in_queue, true)).max_payload;
        PERFORM pyqueue__check_name('p_key', in_key, 255);
        PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    END IF;
    IF in_key LIKE '%@____-__-__T__:__:__Z' THEN  -- pyqueue__occurrence_key
        PERFORM pyqueue__refuse_occurrence_key();
    END IF;
    IF in_payload IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_payload: payload must not be NULL (use the JSON value null)'
            USING ERRCODE = '22023';
    END IF;
    v_bytes := pg_catalog.octet_length(in_payload::text);
    IF v_bytes > v_max THEN
        PERFORM pyqueue__refuse_payload(v_bytes, v_max);
    END IF;
    IF NOT pg_catalog.isfinite(coalesce(in_run_at, v_now)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    IF in_headers IS NOT NULL THEN  -- after the other arguments (as MySQL)
        v_headers := pyqueue__check_headers(in_headers);
    END IF;
    v_at := coalesce(in_run_at, v_now);
    IF v_at < v_now - interval '0.5 seconds' THEN
        PERFORM pyqueue__ready_from_lower(in_queue, v_at, v_now);  -- more than a moment in the past
    END IF;
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, headers)
    VALUES (in_queue, in_key, in_kind, in_payload, coalesce(in_priority, 0), v_at, v_at, v_now, v_headers)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    v_new := FOUND;
    -- pyqueue__notify's own first test, this session's window, on the window read above
    IF v_new AND v_at <= v_now
       AND (NOT v_read OR v_window <= interval '0'
            OR coalesce(nullif(pg_catalog.current_setting('pyqueue.n' || pg_catalog.md5(in_queue), true), '')
                        ::double precision, 0::double precision)
               <= extract(epoch FROM pg_catalog.clock_timestamp() - coalesce(v_window, interval '5 milliseconds'))
                  ::double precision) THEN
        PERFORM pyqueue__notify(in_queue);
    ELSIF v_new AND v_at > v_now THEN
        -- a delayed message now the earliest due of its queue: waiters re-time to it (one probe of
        -- the due index's first entry of the queue, in a statement of its own: a condition with a
        -- subquery is not a simple expression, and would cost every ready push the executor's start)
        IF NOT EXISTS (SELECT 1 FROM pyqueue_message m
                        WHERE m.queue_name::text = in_queue AND m.scheduled_at < 'infinity' AND m.scheduled_at < v_at) THEN
            PERFORM pyqueue__notify(in_queue);
        END IF;
    END IF;
    RETURN v_new;
END;
$$;

-- queue_push: inserts one message; false when a live message with the same
-- (queue, p_key, p_kind) exists (dedup, the existing one is untouched).
-- Refuses a p_key of a schedule's occurrence (pyqueue__occurrence_key) and
-- a payload above the queue's max_payload (pyqueue__refuse_payload: read
-- with the queue's row, compared with the payload's JSON text length).
-- Takes the queue's shared lock (pyqueue__queue; blocks only queue_drop) and the
-- unique-index entry of the new row.
-- The body is pyqueue__push's (with in_headers NULL).
CREATE OR REPLACE FUNCTION queue_push(
    in_queue    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz DEFAULT NULL,
    in_priority integer     DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__push(in_queue, in_key, in_kind, in_payload, in_run_at, in_priority, NULL);
END;
$$;

-- queue_push_with_headers: queue_push with headers, a JSON object carried
-- beside the payload (trace context, correlation ids, a tenant; NULL or the
-- JSON value null: none; pyqueue__check_headers, after the other
-- arguments' checks). Dedup as queue_push: a push of a live key changes
-- nothing, its headers included. Checks, return and locks: queue_push's,
-- the same body (pyqueue__push). Likewise each plain push and publish
-- routine and its _with_headers sibling share one pyqueue__* body.
-- No DEFAULTs: beside queue_push's, no call could be ambiguous.
CREATE OR REPLACE FUNCTION queue_push_with_headers(
    in_queue    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz,
    in_priority integer,
    in_headers  jsonb)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__push(in_queue, in_key, in_kind, in_payload, in_run_at, in_priority, in_headers);
END;
$$;

-- pyqueue__begin_push_batch: the steps before the INSERT of a batch push
-- (pyqueue__push_batch, pyqueue__push_batch_grouped; in_groups_what NULL:
-- no groups), in their order: the queue's shared lock (pyqueue__queue), the
-- batch's arrays (pyqueue__check_batch), its headers, then, for a batch
-- that is not empty, its payloads against the queue's max_payload and the
-- lowering of the queue's ready bound to its earliest run_at. Returns the
-- batch's size.
CREATE OR REPLACE FUNCTION pyqueue__begin_push_batch(
    in_queue        text,
    in_groups_what  text,
    in_groups       text[],
    in_keys         text[],
    in_kinds        text[],
    in_payloads     jsonb[],
    in_run_ats      timestamptz[],
    in_priorities   integer[],
    in_headers      jsonb[],
    in_now          timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_max integer := (pyqueue__queue(in_queue, true)).max_payload;
    v_n   integer;
BEGIN
    v_n := pyqueue__check_batch(in_groups_what, in_groups, in_groups_what IS NOT NULL, in_keys, in_kinds, in_payloads,
                                in_run_ats, in_priorities, in_now);
    IF in_headers IS NOT NULL THEN
        PERFORM pyqueue__check_batch_headers(in_headers, v_n);
    END IF;
    IF v_n > 0 THEN
        PERFORM pyqueue__check_payloads(in_payloads, v_max);
        IF in_run_ats IS NOT NULL THEN
            PERFORM pyqueue__ready_from_lower(in_queue, (SELECT pg_catalog.min(r) FROM pg_catalog.unnest(in_run_ats) r),
                                              in_now);
        END IF;
    END IF;
    RETURN v_n;
END;
$$;

-- pyqueue__batch_rows: the rows a batch push inserts (pyqueue__push_batch,
-- pyqueue__push_batch_grouped), written once: ids drawn in array order (FIFO
-- within the batch), rows returned in key order, the first of a key
-- repeated in the batch only; a message of a group (in_groups NULL: none)
-- goes in blocked, its group settled by the caller. in_probe: only the keys
-- no message holds yet, each probed in the unique index (after a live key
-- refused the plain INSERT). The caller inserts them in the order returned,
-- so that two batches with overlapping keys take their unique-index
-- entries in the same order and cannot deadlock. Takes no locks itself.
CREATE OR REPLACE FUNCTION pyqueue__batch_rows(
    in_queue      text,
    in_groups     text[],
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[],
    in_priorities integer[],
    in_headers    jsonb[],
    in_now        timestamptz,
    in_probe      boolean)
RETURNS TABLE (queue_name text, p_key text, p_kind text, payload jsonb, priority integer,
               scheduled_at timestamptz, scheduled_at_initially timestamptz, created_at timestamptz,
               id bigint, group_key text, headers jsonb)
LANGUAGE plpgsql
-- the probe of the batch's keys below: planned on an empty table (a new
-- queue's first batch), a sequential scan looks cheapest, and the cached
-- plan then read the whole table once per key for the rest of the session
-- (the plan is this function's, whichever caller planned it first)
SET enable_seqscan = off
AS $$
DECLARE
    -- The id sequence is looked up once per call, not once per row (the
    -- catalog lookup cost a quarter of a 100-row call).
    v_ids regclass := pg_catalog.pg_get_serial_sequence('pyqueue_message', 'id')::regclass;
BEGIN
    RETURN QUERY
        WITH batch AS MATERIALIZED (
            SELECT b.k, b.kd, b.pl, b.ra, b.pr, b.g, b.h, pg_catalog.nextval(v_ids) AS new_id
              FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                              pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                              pg_catalog.unnest(in_priorities), pg_catalog.unnest(in_groups),
                              pg_catalog.unnest(in_headers))  -- a NULL array pads with NULLs
                   WITH ORDINALITY AS b (k, kd, pl, ra, pr, g, h, ord)
        )
        SELECT DISTINCT ON (b.k COLLATE "C", b.kd COLLATE "C") in_queue, b.k, b.kd, b.pl, coalesce(b.pr, 0),
               CASE WHEN b.g IS NULL THEN coalesce(b.ra, in_now) ELSE pyqueue__blocked_at() END,
               coalesce(b.ra, in_now), in_now, b.new_id, b.g, pyqueue__json_value(b.h)
          FROM batch b
         WHERE NOT in_probe
            OR NOT EXISTS (SELECT 1 FROM pyqueue_message m
                            WHERE m.queue_name::text = in_queue AND m.p_key::text = b.k
                              AND m.p_kind::text = b.kd
                           OFFSET 0)
         -- key order (of the bytes: the same for every batch, without a locale's comparisons, a quarter
         -- of the sort in C.UTF-8), the first of a repeated key
         ORDER BY b.k COLLATE "C", b.kd COLLATE "C", b.new_id;
END;
$$;

-- pyqueue__push_batch: the body of queue_push_batch and
-- queue_push_batch_with_headers, each a thin SECURITY DEFINER wrapper over it
-- (in_headers NULL: no headers).
CREATE OR REPLACE FUNCTION pyqueue__push_batch(
    in_queue      text,
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[],
    in_priorities integer[],
    in_headers    jsonb[])
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    -- before the id below: whether this call is its transaction's first write
    v_first boolean := pg_catalog.pg_current_xact_id_if_assigned() IS NULL;
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_count integer;
    v_probe boolean;
BEGIN
    IF pyqueue__begin_push_batch(in_queue, NULL, NULL, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities,
                                 in_headers, v_now) = 0 THEN
        RETURN 0;
    END IF;
    -- The first write of a READ COMMITTED transaction: a plain INSERT of
    -- pyqueue__batch_rows without probing the key, then the absent keys only,
    -- each probed, after a unique_violation (a live key), then ON CONFLICT
    -- below after a second one (a race). ON CONFLICT costs every row a
    -- speculative insertion, the probe an index lookup: each only when
    -- needed (docs/performance.md, Decisions).
    IF v_first AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        FOREACH v_probe IN ARRAY ARRAY[false, true] LOOP
            BEGIN
                INSERT INTO pyqueue_message
                       (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                        scheduled_at_initially, created_at, id, group_key, headers)
                OVERRIDING SYSTEM VALUE
                SELECT * FROM pyqueue__batch_rows(in_queue, NULL, in_keys, in_kinds, in_payloads, in_run_ats,
                                                  in_priorities, in_headers, v_now, v_probe);
                GET DIAGNOSTICS v_count = ROW_COUNT;
                EXIT;
            EXCEPTION WHEN unique_violation THEN
                v_count := NULL;
            END;
        END LOOP;
    END IF;
    IF v_count IS NULL THEN
        INSERT INTO pyqueue_message
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, id, group_key, headers)
        OVERRIDING SYSTEM VALUE
        SELECT * FROM pyqueue__batch_rows(in_queue, NULL, in_keys, in_kinds, in_payloads, in_run_ats,
                                          in_priorities, in_headers, v_now, false)
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
        GET DIAGNOSTICS v_count = ROW_COUNT;
    END IF;
    IF v_count > 0 AND (in_run_ats IS NULL OR EXISTS (SELECT 1 FROM pg_catalog.unnest(in_run_ats) r WHERE r IS NULL OR r <= v_now)) THEN
        PERFORM pyqueue__notify(in_queue);  -- one wakeup per statement, for ready-now rows
    END IF;
    RETURN v_count;
END;
$$;

-- queue_push_batch: inserts many messages in one statement; returns how many
-- were new (duplicates, also within the batch, are skipped). Arrays must have
-- the same length; in_run_ats / in_priorities may be NULL (all defaults) or
-- hold NULL elements. Any invalid element refuses the whole batch.
-- Locks: as queue_push, for every new row (in key order: see pyqueue__batch_rows).
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
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__push_batch(in_queue, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities, NULL);
END;
$$;

-- queue_push_batch_with_headers: queue_push_batch with headers per message:
-- in_headers NULL (none for any), else one element per p_key, each NULL,
-- the JSON value null (none) or a JSON object (pyqueue__check_batch_headers;
-- a bad element refuses the whole batch). Checks, dedup, return and locks:
-- queue_push_batch's, the same body (pyqueue__push_batch). No DEFAULTs
-- (see queue_push_with_headers).
CREATE OR REPLACE FUNCTION queue_push_batch_with_headers(
    in_queue      text,
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[],
    in_priorities integer[],
    in_headers    jsonb[])
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__push_batch(in_queue, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities, in_headers);
END;
$$;

-- queue_push_replace: queue_push that replaces instead of skipping (debounce,
-- graphile-worker's job_key "replace" mode). Returns
--   'inserted'  no live message had this (queue, p_key, p_kind): pushed;
--   'replaced'  a waiting one (ready, delayed, or whose reservation expired)
--               got the new payload, run_at and priority, attempts 0 and no
--               reservation (an expired holder's commit then returns false);
--   'reserved'  one is held by a live reservation: left alone, nothing pushed.
-- created_at and the FIFO position among equal run_at are kept on replace.
-- A message blocked behind its group's head stays blocked (its group and
-- its place in it by the new run_at): replace never lets a group's message
-- past its head. A dead letter (a message a dead-lettering put in its
-- queue: dead_from set) is never replaced: the call is refused
-- (invalid_argument) and the letter stays as it was (as queue_cancel: only
-- an admin's queue_remove or queue_redrive ends one). Locks: the queue's
-- shared lock and the message row.
CREATE OR REPLACE FUNCTION queue_push_replace(
    in_queue    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz DEFAULT NULL,
    in_priority integer     DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_xid      xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now      timestamptz := pg_catalog.clock_timestamp();
    v_at       timestamptz;
    v_inserted boolean;
BEGIN
    PERFORM pyqueue__check_message(in_key, in_kind, in_payload, (pyqueue__queue(in_queue, true)).max_payload);
    v_at := pyqueue__check_run_at(in_run_at, v_now);
    IF v_at < v_now - interval '0.5 seconds' THEN
        PERFORM pyqueue__ready_from_lower(in_queue, v_at, v_now);  -- more than a moment in the past
    END IF;
    INSERT INTO pyqueue_message AS m
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at)
    VALUES (in_queue, in_key, in_kind, in_payload, coalesce(in_priority, 0), v_at, v_at, v_now)
    ON CONFLICT (queue_name, p_key, p_kind) DO UPDATE
       SET payload = EXCLUDED.payload, priority = EXCLUDED.priority,
           -- a message blocked behind its group's head stays blocked; its
           -- new run time is its new place in the group
           scheduled_at = CASE WHEN m.scheduled_at = pyqueue__blocked_at() THEN m.scheduled_at
                               ELSE EXCLUDED.scheduled_at END,
           scheduled_at_initially = EXCLUDED.scheduled_at,
           attempts = 0, reserved_by = NULL, reserve_token = NULL
     WHERE (m.reserve_token IS NULL OR m.scheduled_at <= v_now) AND m.dead_from IS NULL
    RETURNING (m.xmax = 0) INTO v_inserted;
    IF v_inserted IS NULL THEN
        IF EXISTS (SELECT 1 FROM pyqueue_message m
                    WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
                      AND m.dead_from IS NOT NULL) THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: a dead letter is not replaced; an admin removes it with queue_remove'
                USING ERRCODE = '22023';
        END IF;
        RETURN 'reserved';
    END IF;
    IF v_at <= v_now THEN PERFORM pyqueue__notify(in_queue); END IF;  -- wakeup: ready now
    RETURN CASE WHEN v_inserted THEN 'inserted' ELSE 'replaced' END;
END;
$$;

-- pyqueue__push_grouped: the body of queue_push_grouped and
-- queue_push_grouped_with_headers, each a thin SECURITY DEFINER wrapper over
-- it (in_headers NULL: no headers).
CREATE OR REPLACE FUNCTION pyqueue__push_grouped(
    in_queue    text,
    in_group    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz,
    in_priority integer,
    in_headers  jsonb)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_xid xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_at  timestamptz;
    v_max integer := (pyqueue__queue(in_queue, true)).max_payload;
    v_headers jsonb;
BEGIN
    PERFORM pyqueue__check_name('group', in_group, 255);
    PERFORM pyqueue__check_message(in_key, in_kind, in_payload, v_max);
    v_at := pyqueue__check_run_at(in_run_at, v_now);
    v_headers := pyqueue__check_headers(in_headers);  -- after the other arguments (as MySQL)
    IF v_at < v_now - interval '0.5 seconds' THEN
        PERFORM pyqueue__ready_from_lower(in_queue, v_at, v_now);  -- more than a moment in the past
    END IF;
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, group_key, headers)
    VALUES (in_queue, in_key, in_kind, in_payload, coalesce(in_priority, 0), pyqueue__blocked_at(), v_at,
            v_now, in_group, v_headers)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pyqueue__group_settle(in_queue, in_group, v_now, false);
    RETURN true;
END;
$$;

-- queue_push_grouped: queue_push for a message of FIFO group in_group (a
-- name of 1 to 255 characters, e.g. an order id): the group's messages are
-- delivered one at a time, in run time and then push order; the next is
-- handed out only once the one before it has left the queue (committed,
-- dead-lettered, moved away or removed). A message behind its group's head
-- waits blocked (see pyqueue__group_settle); it becomes head at once when
-- the group has none, or when the head was never delivered and runs later.
-- Dedup as queue_push: false, and nothing changes, when (queue, p_key,
-- p_kind) is live, whatever its group. Locks: as queue_push, then the
-- group's row (pyqueue_group; created when missing).
CREATE OR REPLACE FUNCTION queue_push_grouped(
    in_queue    text,
    in_group    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz DEFAULT NULL,
    in_priority integer     DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__push_grouped(in_queue, in_group, in_key, in_kind, in_payload, in_run_at, in_priority, NULL);
END;
$$;

-- queue_push_grouped_with_headers: queue_push_grouped with headers (as
-- queue_push_with_headers). Checks, dedup, return and locks:
-- queue_push_grouped's, the same body (pyqueue__push_grouped). No DEFAULTs.
CREATE OR REPLACE FUNCTION queue_push_grouped_with_headers(
    in_queue    text,
    in_group    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz,
    in_priority integer,
    in_headers  jsonb)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__push_grouped(in_queue, in_group, in_key, in_kind, in_payload, in_run_at, in_priority,
                                 in_headers);
END;
$$;

-- pyqueue__push_batch_grouped: the body of queue_push_batch_grouped and
-- queue_push_batch_grouped_with_headers, each a thin SECURITY DEFINER wrapper
-- over it (in_headers NULL: no headers).
CREATE OR REPLACE FUNCTION pyqueue__push_batch_grouped(
    in_queue      text,
    in_groups     text[],
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[],
    in_priorities integer[],
    in_headers    jsonb[])
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_count  integer;
    v_groups text[];
    v_ready  boolean;
    v_group  text;
BEGIN
    IF pyqueue__begin_push_batch(in_queue, 'groups', in_groups, in_keys, in_kinds, in_payloads, in_run_ats,
                                 in_priorities, in_headers, v_now) = 0 THEN
        RETURN 0;
    END IF;
    -- As queue_push_batch, the rows of pyqueue__batch_rows, in its order; a
    -- grouped message goes in blocked, its group settled below.
    WITH ins AS (
        INSERT INTO pyqueue_message AS m
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, id, group_key, headers)
        OVERRIDING SYSTEM VALUE
        SELECT * FROM pyqueue__batch_rows(in_queue, in_groups, in_keys, in_kinds, in_payloads, in_run_ats,
                                          in_priorities, in_headers, v_now, false)
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING
        RETURNING m.group_key, m.scheduled_at
    )
    SELECT pg_catalog.count(*)::integer,
           pg_catalog.array_agg(DISTINCT i.group_key::text ORDER BY i.group_key::text)
               FILTER (WHERE i.group_key IS NOT NULL),
           coalesce(pg_catalog.bool_or(i.scheduled_at <= v_now), false)
      INTO v_count, v_groups, v_ready
      FROM ins i;
    IF v_ready THEN
        PERFORM pyqueue__notify(in_queue);  -- ready-now messages without a group
    END IF;
    FOREACH v_group IN ARRAY coalesce(v_groups, '{}') LOOP
        PERFORM pyqueue__group_settle(in_queue, v_group, v_now, false);
    END LOOP;
    RETURN v_count;
END;
$$;

-- queue_push_batch_grouped: queue_push_batch with a group per message
-- (in_groups, the same length as in_keys; a NULL element = no group): one
-- INSERT of every message, then each group that got new messages is
-- settled as queue_push_grouped settles one, in group order. Returns how
-- many were new. Any invalid element refuses the whole batch. Locks: as
-- queue_push_batch, then the rows of the groups, in group order.
CREATE OR REPLACE FUNCTION queue_push_batch_grouped(
    in_queue      text,
    in_groups     text[],
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[] DEFAULT NULL,
    in_priorities integer[]     DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__push_batch_grouped(in_queue, in_groups, in_keys, in_kinds, in_payloads, in_run_ats,
                                       in_priorities, NULL);
END;
$$;

-- queue_push_batch_grouped_with_headers: queue_push_batch_grouped with
-- headers per message (in_headers as queue_push_batch_with_headers').
-- Checks, dedup, return and locks: queue_push_batch_grouped's, the same
-- body (pyqueue__push_batch_grouped). No DEFAULTs.
CREATE OR REPLACE FUNCTION queue_push_batch_grouped_with_headers(
    in_queue      text,
    in_groups     text[],
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[],
    in_priorities integer[],
    in_headers    jsonb[])
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN pyqueue__push_batch_grouped(in_queue, in_groups, in_keys, in_kinds, in_payloads, in_run_ats,
                                       in_priorities, in_headers);
END;
$$;
