-- ==== checks ====
-- Internal helpers (pyqueue__*) are not part of the contract; each sits in the
-- file of the topic that calls it. Here: the checks and lookups that several
-- topics call.

-- Raises unless a name is non-NULL, non-empty, at most in_max characters and
-- does not end with a space. (MySQL compares names with PAD SPACE, 'a' = 'a ';
-- both dialects refuse the trailing space so that the contract is the same.)
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_name(in_what text, in_value text, in_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_value IS NULL OR in_value = '' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not be NULL or empty', in_what
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.length(in_value) > in_max THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % is longer than % characters', in_what, in_max
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.right(in_value, 1) = ' ' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not end with a space', in_what
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- Raises unless key, kind and token name a reservation (commit, rollback,
-- extend, move) and returns the token as a uuid. The routines that take a
-- token take it as text, so that a token not shaped like one is refused with
-- the same invalid_argument error as on MySQL ('token is malformed'), not a
-- cast error before the routine runs; each has an overload taking a uuid
-- (see "Tokens as uuid" below). The shape is MySQL's too: 8-4-4-4-12 hex
-- digits, either case.
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_reservation(in_key text, in_kind text, in_token text)
RETURNS uuid
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF in_token IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: token must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF in_token !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: token is malformed' USING ERRCODE = '22023';
    END IF;
    RETURN in_token::uuid;
END;
$$;

-- Raises unless the queue exists; returns its settings row. With in_lock it
-- takes the queue's shared advisory lock (transaction-level, in memory: it
-- writes nothing, unlike a row lock) and then reads the row; at REPEATABLE
-- READ or SERIALIZABLE, whose snapshot may predate a drop, FOR KEY SHARE on
-- the row instead. Every routine that writes a message into a queue takes
-- it first, so a concurrent queue_drop either waits for this transaction
-- (and then deletes what it wrote) or has already won (the caller gets
-- unknown_queue). pyqueue_message has no foreign key: this lock is what
-- keeps a message from outliving its queue.
CREATE OR REPLACE FUNCTION pyqueue__queue(in_queue text, in_lock boolean DEFAULT false)
RETURNS pyqueue_queue
LANGUAGE plpgsql
AS $$
DECLARE
    v_row pyqueue_queue;
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    IF in_lock AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        -- writes nothing (no row lock, no MultiXact when pushers overlap);
        -- the read below, a new snapshot, sees a drop that went first
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('pyqueue-sql queue'),
                                                        pg_catalog.hashtext(in_queue));
        SELECT * INTO v_row FROM pyqueue_queue WHERE queue_name::text = in_queue;
    ELSIF in_lock THEN
        -- a snapshot older than a drop: the row lock refuses it (40001)
        SELECT * INTO v_row FROM pyqueue_queue WHERE queue_name::text = in_queue FOR KEY SHARE;
    ELSE
        SELECT * INTO v_row FROM pyqueue_queue WHERE queue_name::text = in_queue;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue
            USING ERRCODE = 'P0002';
    END IF;
    RETURN v_row;
END;
$$;

-- pyqueue__negative_part: true when an interval has a negative part (its
-- months, days or time), whatever their sum. Interval comparison counts a
-- month as 30 days and a year as 360, while adding an interval to a time
-- goes by the calendar: '-1 year +361 days' compares as one day but puts a
-- time four days back, '1 mon -29 days' one day back in February. MySQL's
-- durations are seconds and have no such parts. An SQL function the
-- planner inlines into the expression that calls it. Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__negative_part(in_value interval)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    -- year and month carry the sign of the months, hour, minute and second that of the time
    -- (numeric against numeric: the built-in operator, never a look-alike taking an integer)
    SELECT extract(month FROM in_value) < 0::numeric OR extract(year FROM in_value) < 0::numeric
        OR extract(day FROM in_value) < 0::numeric
        OR extract(hour FROM in_value) < 0::numeric OR extract(minute FROM in_value) < 0::numeric
        OR extract(second FROM in_value) < 0::numeric
$$;

-- Raises when a duration is negative or has a negative part (see
-- pyqueue__negative_part), or, with in_positive, is not above zero, or is
-- longer than 100 years of 365.25 days (the same bound as MySQL's; an
-- interval '100 years' would compare as 36000 days).
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_duration(in_what text, in_value interval, in_positive boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_value < interval '0' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not be negative', in_what
            USING ERRCODE = '22023';
    END IF;
    IF pyqueue__negative_part(in_value) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not have a negative part (months, days or time)', in_what
            USING ERRCODE = '22023';
    END IF;
    IF in_positive AND in_value = interval '0' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must be greater than zero', in_what
            USING ERRCODE = '22023';
    END IF;
    -- by seconds (a year = 365.25 days), not by interval comparison, which
    -- counts a year as 360 days and would let '101 years' through
    IF extract(epoch FROM in_value) > 3155760000::numeric THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not exceed 100 years', in_what
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- pyqueue__check_batch_size: raises unless n is NULL (the caller's default)
-- or at least 1.
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_batch_size(in_n integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_n < 1 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be at least 1' USING ERRCODE = '22023';
    END IF;
END;
$$;

-- pyqueue__bad_name: true unless a name is non-NULL, non-empty, at most
-- in_max characters and does not end with a space (pyqueue__check_name's
-- rule, as an expression for the set-based checks of the batch routines;
-- inlined into the query that calls it). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__bad_name(in_value text, in_max integer)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT in_value IS NULL OR in_value = '' OR pg_catalog.length(in_value) > in_max
           OR pg_catalog.right(in_value, 1) = ' '
$$;

-- pyqueue__check_batch: the argument checks the batch push routines share.
-- Raises unless p_keys, p_kinds and payloads (and in_extra, the groups or
-- topics array named in_extra_name, when there is one) are non-NULL
-- one-dimensional arrays of one length, which run_ats and priorities have
-- too unless they are NULL, and every element is valid: p_key and p_kind
-- names, a payload, a finite run_at and, with in_extra_groups, a group
-- that is NULL or a name; and no p_key is a schedule's occurrence key
-- (pyqueue__occurrence_key); and at most 10000 elements. Returns the batch's length. One pass over the
-- arrays (unnest, never arr[i]: subscripting an array of variable-width
-- elements walks it from the start, quadratic in n). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_batch(
    in_extra_name   text,
    in_extra        text[],
    in_extra_groups boolean,
    in_keys         text[],
    in_kinds        text[],
    in_payloads     jsonb[],
    in_run_ats      timestamptz[],
    in_priorities   integer[],
    in_now          timestamptz)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_n      integer;
    v_bad    integer;
    v_occurrence integer;
    v_prefix text := coalesce(in_extra_name || ', ', '');
BEGIN
    IF (in_extra_name IS NOT NULL AND in_extra IS NULL)
       OR in_keys IS NULL OR in_kinds IS NULL OR in_payloads IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: %p_keys, p_kinds and payloads must not be NULL', v_prefix
            USING ERRCODE = '22023';
    END IF;
    v_n := coalesce(pg_catalog.cardinality(in_keys), 0);
    IF v_n > 10000 THEN  -- the rows one call takes (docs/contract.md, "Batch size")
        RAISE EXCEPTION 'pyqueue:invalid_argument: a batch takes at most 10000 messages, this one has % (split it)', v_n
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.array_ndims(in_extra) > 1 OR pg_catalog.array_ndims(in_keys) > 1
       OR pg_catalog.array_ndims(in_kinds) > 1 OR pg_catalog.array_ndims(in_payloads) > 1
       OR pg_catalog.array_ndims(in_run_ats) > 1 OR pg_catalog.array_ndims(in_priorities) > 1
       OR (in_extra_name IS NOT NULL AND pg_catalog.cardinality(in_extra) <> v_n)
       OR pg_catalog.cardinality(in_kinds) <> v_n OR pg_catalog.cardinality(in_payloads) <> v_n
       OR (in_run_ats IS NOT NULL AND pg_catalog.cardinality(in_run_ats) <> v_n)
       OR (in_priorities IS NOT NULL AND pg_catalog.cardinality(in_priorities) <> v_n) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: %p_keys, p_kinds, payloads, run_ats and priorities must have the same length', v_prefix
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    -- one pass over the names (the payloads' NULLs found by array_position, in the array's null bitmap, and
    -- the run_ats read only when given): the first bad element, and the first occurrence key
    SELECT pg_catalog.min(b.ord) FILTER (WHERE pyqueue__bad_name(b.k, 255) OR pyqueue__bad_name(b.kd, 128)
                                         OR (b.g IS NOT NULL AND pyqueue__bad_name(b.g, 255))),
           pg_catalog.min(b.ord) FILTER (WHERE pyqueue__occurrence_key(b.k))
      INTO v_bad, v_occurrence
      FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                      pg_catalog.unnest(CASE WHEN in_extra_groups THEN in_extra END))
           WITH ORDINALITY AS b (k, kd, g, ord);
    v_bad := least(v_bad, pg_catalog.array_position(in_payloads, NULL) - pg_catalog.array_lower(in_payloads, 1) + 1);
    IF in_run_ats IS NOT NULL THEN
        v_bad := least(v_bad, (SELECT pg_catalog.min(u.ord) FROM pg_catalog.unnest(in_run_ats) WITH ORDINALITY AS u (ra, ord)
                                WHERE NOT pg_catalog.isfinite(coalesce(u.ra, in_now))));
    END IF;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch has a NULL, empty, too long or space-ended p_key/p_kind, %a NULL payload or an infinite run_at',
            v_bad, CASE WHEN in_extra_groups THEN 'an empty, too long or space-ended group, ' ELSE '' END
            USING ERRCODE = '22023';
    END IF;
    IF v_occurrence IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch: p_key ending in @<UTC time> is reserved for schedules',
            v_occurrence
            USING ERRCODE = '22023';
    END IF;
    RETURN v_n;
END;
$$;

-- pyqueue__occurrence_key: true when a p_key has the form of a schedule's
-- occurrence key, <key>@YYYY-MM-DDTHH:MM:SSZ (pyqueue__schedule_key). Only
-- the schedule routines write such keys: the producer routines refuse them,
-- so that a producer cannot create, replace or preempt an occurrence. One
-- LIKE, inlined into the expression that calls it. Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__occurrence_key(in_key text)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$ SELECT in_key LIKE '%@____-__-__T__:__:__Z' $$;

-- pyqueue__refuse_occurrence_key: raises invalid_argument for a p_key of a
-- schedule's occurrence (called once a producer routine has found one).
CREATE OR REPLACE FUNCTION pyqueue__refuse_occurrence_key()
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RAISE EXCEPTION 'pyqueue:invalid_argument: p_key ending in @<UTC time> is reserved for schedules'
        USING ERRCODE = '22023';
END;
$$;

-- pyqueue__refuse_payload: raises invalid_payload for a payload of in_bytes
-- bytes over a queue's max_payload of in_max bytes. The size of a payload is
-- the length in bytes of its JSON text as PostgreSQL writes it out
-- (pg_catalog.octet_length(payload::text)): what a consumer reads, and the
-- measure MySQL takes (LENGTH of the stored JSON text). Not the stored size
-- (pg_column_size): a number such as 1e131071 takes a few bytes stored and
-- 131072 digits as text.
CREATE OR REPLACE FUNCTION pyqueue__refuse_payload(in_bytes integer, in_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RAISE EXCEPTION 'pyqueue:invalid_payload: payload is % bytes, more than the queue''s max_payload of % bytes',
                    in_bytes, in_max
        USING ERRCODE = '22023';
END;
$$;

-- pyqueue__check_message: the checks of one message that queue_push_replace,
-- queue_push_grouped, queue_publish and queue_push_after write, in their
-- order: p_key and p_kind, not a schedule's occurrence key, a payload (the
-- JSON value null, not SQL NULL) of at most in_max bytes (in_max NULL: not
-- compared here; queue_publish compares it with the queues its topic
-- reaches). queue_push, the hot path, writes these checks inline
-- (tests/unit/test_sql_copies_postgresql.py keeps its copy alike). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_message(in_key text, in_kind text, in_payload jsonb, in_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_bytes integer;
BEGIN
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF pyqueue__occurrence_key(in_key) THEN
        PERFORM pyqueue__refuse_occurrence_key();
    END IF;
    IF in_payload IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_payload: payload must not be NULL (use the JSON value null)'
            USING ERRCODE = '22023';
    END IF;
    v_bytes := pg_catalog.octet_length(in_payload::text);
    IF v_bytes > in_max THEN
        PERFORM pyqueue__refuse_payload(v_bytes, in_max);
    END IF;
END;
$$;

-- pyqueue__check_run_at: refuses a run_at that is not a finite time and
-- returns when the message is due (in_run_at, NULL meaning in_now). Takes no
-- locks.
CREATE OR REPLACE FUNCTION pyqueue__check_run_at(in_run_at timestamptz, in_now timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF NOT pg_catalog.isfinite(coalesce(in_run_at, in_now)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    RETURN coalesce(in_run_at, in_now);
END;
$$;

-- pyqueue__check_expires: the header pyqueue.expires_at (the time after
-- which a reserve or pop no longer hands the message out, but ends it as
-- cancelled) of headers that carry it, checked: absent or JSON null (no
-- expiry), else a JSON string holding a UTC time written exactly
-- YYYY-MM-DDTHH:MM:SS.ffffffZ (27 characters: the reserves write their clock
-- the same way, so a text comparison in the "C" collation orders the two as
-- times, with no cast on the reserve's path), on a date that exists;
-- anything else raises invalid_argument, prefixed with in_where ('' or
-- 'element N of the batch: '). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_expires(in_headers jsonb, in_where text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_value jsonb := in_headers -> 'pyqueue.expires_at'::text;
    v_at    text;
BEGIN
    IF v_value IS NULL OR pg_catalog.jsonb_typeof(v_value) = 'null'::text THEN
        RETURN;
    END IF;
    v_at := v_value #>> '{}'::text[];
    IF pg_catalog.jsonb_typeof(v_value) = 'string'::text
       AND pg_catalog.textregexeq(v_at, '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z$'::text) THEN
        BEGIN  -- a date and time that exist (not 2026-02-30, nor 24:00 or a leap second)
            PERFORM pg_catalog.make_timestamp(pg_catalog.substr(v_at, 1, 4)::integer,
                                              pg_catalog.substr(v_at, 6, 2)::integer,
                                              pg_catalog.substr(v_at, 9, 2)::integer,
                                              pg_catalog.substr(v_at, 12, 2)::integer,
                                              pg_catalog.substr(v_at, 15, 2)::integer,
                                              pg_catalog.substr(v_at, 18, 9)::double precision);
            IF pg_catalog.substr(v_at, 12, 2)::integer < 24 AND pg_catalog.substr(v_at, 18, 2)::integer < 60 THEN
                RETURN;
            END IF;
        EXCEPTION WHEN datetime_field_overflow THEN
            NULL;  -- refused below
        END;
    END IF;
    RAISE EXCEPTION 'pyqueue:invalid_argument: %pyqueue.expires_at must be a UTC time YYYY-MM-DDTHH:MM:SS.ffffffZ, not %',
                    in_where, pg_catalog.left(v_value::text, 64)
        USING ERRCODE = '22023';
END;
$$;

-- pyqueue__check_headers: the headers of a *_with_headers push, checked:
-- NULL or the JSON value null (returned as NULL: no headers), else a JSON
-- object of at most 8192 bytes of JSON text (measured as a payload, see
-- pyqueue__refuse_payload); anything else raises invalid_argument. Takes no
-- locks.
CREATE OR REPLACE FUNCTION pyqueue__check_headers(in_headers jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_bytes integer;
BEGIN
    IF in_headers IS NULL OR pg_catalog.jsonb_typeof(in_headers) = 'null'::text THEN
        RETURN NULL;
    END IF;
    IF pg_catalog.jsonb_typeof(in_headers) <> 'object'::text THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: headers must be a JSON object' USING ERRCODE = '22023';
    END IF;
    v_bytes := pg_catalog.octet_length(in_headers::text);
    IF v_bytes > 8192 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: headers are % bytes, more than 8192 bytes', v_bytes
            USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.jsonb_exists(in_headers, 'pyqueue.expires_at'::text) THEN
        PERFORM pyqueue__check_expires(in_headers, '');
    END IF;
    RETURN in_headers;
END;
$$;

-- pyqueue__check_batch_headers: the headers array of a batch push
-- (*_with_headers), checked before anything is written: NULL (no headers
-- for any element), else a one-dimensional array of in_n elements, each
-- NULL, the JSON value null (both: none; the insert stores SQL NULL, see
-- pyqueue__json_value) or a JSON object of at most 8192 bytes of JSON text
-- (pyqueue__check_headers' rule; the first bad element is named). One pass
-- over the array (unnest). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_batch_headers(in_headers jsonb[], in_n integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_ord   bigint;
    v_type  text;
    v_bytes integer;
    v_value jsonb;
BEGIN
    IF in_headers IS NULL THEN
        RETURN;
    END IF;
    IF pg_catalog.array_ndims(in_headers) > 1 OR coalesce(pg_catalog.cardinality(in_headers), 0) <> in_n THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: headers must be NULL or have the same length as p_keys'
            USING ERRCODE = '22023';
    END IF;
    SELECT u.ord, pg_catalog.jsonb_typeof(u.h), pg_catalog.octet_length(u.h::text) INTO v_ord, v_type, v_bytes
      FROM pg_catalog.unnest(in_headers) WITH ORDINALITY AS u (h, ord)
     WHERE u.h IS NOT NULL
       AND (pg_catalog.jsonb_typeof(u.h) NOT IN ('object'::text, 'null'::text)
            OR pg_catalog.octet_length(u.h::text) > 8192)
     ORDER BY u.ord
     LIMIT 1;
    IF NOT FOUND THEN
        -- the expiries, of the elements that carry one, in order
        FOR v_ord, v_value IN SELECT u.ord, u.h FROM pg_catalog.unnest(in_headers) WITH ORDINALITY AS u (h, ord)
                               WHERE pg_catalog.jsonb_typeof(u.h) = 'object'::text
                                 AND pg_catalog.jsonb_exists(u.h, 'pyqueue.expires_at'::text)
                               ORDER BY u.ord LOOP
            PERFORM pyqueue__check_expires(v_value, 'element ' || v_ord || ' of the batch: ');
        END LOOP;
        RETURN;
    END IF;
    IF v_type NOT IN ('object'::text, 'null'::text) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch: headers must be a JSON object', v_ord
            USING ERRCODE = '22023';
    END IF;
    RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch: headers are % bytes, more than 8192 bytes',
                    v_ord, v_bytes
        USING ERRCODE = '22023';
END;
$$;

-- pyqueue__json_value: in_value, or NULL for a JSON null: a result or a
-- progress of JSON null is stored as SQL NULL (as MySQL stores it). Inlined
-- into the expression that calls it. No locks.
CREATE OR REPLACE FUNCTION pyqueue__json_value(in_value jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN pg_catalog.jsonb_typeof(in_value) = 'null'::text THEN NULL ELSE in_value END $$;
