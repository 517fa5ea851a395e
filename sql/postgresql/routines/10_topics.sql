-- ==== topics ====
-- Fan-out: bind topic patterns to queues, then publish a message to a topic
-- to push it into every queue bound to a pattern the topic matches (AMQP
-- topic exchanges: dot-separated words, '*' one word, '#' any number).

-- pyqueue__check_topic: raises unless in_value is a topic (in_pattern
-- false) or a topic pattern (true) called in_what: a name (1 to 255
-- characters, neither starting nor ending with a space) of dot-separated
-- non-empty words; in
-- a topic no word holds '*' or '#'; in a pattern a word that holds one is
-- exactly '*' (one word) or '#' (any number of words). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_topic(in_what text, in_value text, in_pattern boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM pyqueue__check_name(in_what, in_value, 255);
    IF pg_catalog.left(in_value, 1) = ' ' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not start with a space', in_what
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(pg_catalog.string_to_array(in_value, '.')) AS u (w)
                WHERE u.w = '') THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must be dot-separated words, none of them empty', in_what
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(pg_catalog.string_to_array(in_value, '.')) AS u (w)
                WHERE pg_catalog.strpos(u.w, '*') > 0 OR pg_catalog.strpos(u.w, '#') > 0)
       AND NOT in_pattern THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % must not hold * or # (only a pattern does)', in_what
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.unnest(pg_catalog.string_to_array(in_value, '.')) AS u (w)
                WHERE (pg_catalog.strpos(u.w, '*') > 0 OR pg_catalog.strpos(u.w, '#') > 0)
                  AND u.w NOT IN ('*', '#')) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: % may hold * or # only as a whole word', in_what
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- pyqueue__topic_regex: the regular expression a topic pattern stands for,
-- matched against '.' || topic: each word becomes '\.' and the word (its
-- regular-expression characters escaped), '*' one word ('\.[^.]+'), '#' any
-- number of words ('(\.[^.]+)*'), anchored at both ends. So 'a.#' matches
-- 'a', 'a.b' and 'a.b.c'; '*.b' matches 'a.b' but not 'b'. Checked pattern.
CREATE OR REPLACE FUNCTION pyqueue__topic_regex(in_pattern text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT '^' || pg_catalog.string_agg(
               CASE u.w WHEN '*' THEN '\.[^.]+'
                        WHEN '#' THEN '(\.[^.]+)*'
                        ELSE '\.' || pg_catalog.regexp_replace(u.w, '([\^$|()\[\]{}+?\\])', '\\\1', 'g') END,
               '' ORDER BY u.ord) || '$'
      FROM pg_catalog.unnest(pg_catalog.string_to_array(in_pattern, '.')) WITH ORDINALITY AS u (w, ord)
$$;

-- queue_bind: binds in_pattern (a topic pattern, see pyqueue__check_topic)
-- to in_queue: true when the binding is new, false when it existed. A
-- pattern with more than 3 '#' words is refused: each '#' is a repetition in
-- the pattern's regular expression, and the cost of matching a topic grows
-- with their number (MySQL/MariaDB's regex engine backtracks and can give
-- up), so the contract bounds it on both dialects.
-- Locks: the queue's shared lock (pyqueue__queue), the binding's key.
CREATE OR REPLACE FUNCTION queue_bind(in_pattern text, in_queue text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_topic('pattern', in_pattern, true);
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.unnest(pg_catalog.string_to_array(in_pattern, '.')) AS u (w)
         WHERE u.w = '#') > 3::bigint THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: pattern has more than 3 # wildcards' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__queue(in_queue, true);
    INSERT INTO pyqueue_binding (pattern, queue_name, pattern_regex, created_at)
    VALUES (in_pattern, in_queue, pyqueue__topic_regex(in_pattern), pg_catalog.clock_timestamp())
    ON CONFLICT (pattern, queue_name) DO NOTHING;
    RETURN FOUND;
END;
$$;

-- queue_unbind: removes the binding of in_pattern to in_queue: true when
-- there was one, false otherwise. Messages published before stay. Locks the
-- binding row.
CREATE OR REPLACE FUNCTION queue_unbind(in_pattern text, in_queue text)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_topic('pattern', in_pattern, true);
    PERFORM pyqueue__queue(in_queue);
    DELETE FROM pyqueue_binding b WHERE b.pattern::text = in_pattern AND b.queue_name::text = in_queue;
    RETURN FOUND;
END;
$$;

-- queue_bindings: the bindings of in_queue (every queue's when NULL), by
-- queue and pattern: (pattern, queue, created_at). Reads without locks.
CREATE OR REPLACE FUNCTION queue_bindings(in_queue text DEFAULT NULL)
RETURNS TABLE (pattern text, queue text, created_at timestamptz)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT b.pattern::text, b.queue_name::text, b.created_at
          FROM pyqueue_binding b
         WHERE in_queue IS NULL OR b.queue_name::text = in_queue
         ORDER BY b.queue_name, b.pattern;
END;
$$;

-- pyqueue__publish: the body of queue_publish and queue_publish_with_headers,
-- each a thin SECURITY DEFINER wrapper over it (in_headers NULL: no headers).
CREATE OR REPLACE FUNCTION pyqueue__publish(
    in_topic    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz,
    in_priority integer,
    in_headers  jsonb)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_at     timestamptz;
    v_queues text[];
    v_queue  text;
    v_max    integer;
    v_bytes  integer;
    v_headers jsonb;
BEGIN
    PERFORM pyqueue__check_topic('topic', in_topic, false);
    PERFORM pyqueue__check_message(in_key, in_kind, in_payload, NULL);
    -- above the smallest max_payload of all queues (one short read), the
    -- smallest of the queues the topic reaches decides
    v_bytes := pg_catalog.octet_length(in_payload::text);
    IF v_bytes > (SELECT pg_catalog.min(q.max_payload) FROM pyqueue_queue q) THEN
        SELECT pg_catalog.min(q.max_payload) INTO v_max
          FROM pyqueue_queue q
         WHERE q.queue_name::text IN (SELECT b.queue_name::text FROM pyqueue_binding b
                                       WHERE ('.' || in_topic) ~ b.pattern_regex::text);
        IF v_bytes > v_max THEN
            PERFORM pyqueue__refuse_payload(v_bytes, v_max);
        END IF;
    END IF;
    v_at := pyqueue__check_run_at(in_run_at, v_now);
    v_headers := pyqueue__check_headers(in_headers);  -- after the other arguments (as MySQL)
    WITH targets AS (
        SELECT q.queue_name
          FROM pyqueue_queue q
         WHERE q.queue_name::text IN (SELECT b.queue_name::text FROM pyqueue_binding b
                                 WHERE ('.' || in_topic) ~ b.pattern_regex::text)
         ORDER BY q.queue_name
           FOR KEY SHARE
    ), ins AS (
        INSERT INTO pyqueue_message AS m
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, headers)
        SELECT t.queue_name, in_key, in_kind, in_payload, coalesce(in_priority, 0), v_at, v_at, v_now, v_headers
          FROM targets t
         ORDER BY t.queue_name
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING
        RETURNING m.queue_name
    )
    SELECT pg_catalog.array_agg(i.queue_name::text ORDER BY i.queue_name::text) INTO v_queues FROM ins i;
    IF v_at < v_now - interval '0.5 seconds' THEN  -- more than a moment in the past
        FOREACH v_queue IN ARRAY coalesce(v_queues, '{}') LOOP
            PERFORM pyqueue__ready_from_lower(v_queue, v_at, v_now);
        END LOOP;
    END IF;
    IF v_at <= v_now THEN
        FOREACH v_queue IN ARRAY coalesce(v_queues, '{}') LOOP
            PERFORM pyqueue__notify(v_queue);  -- wakeup: ready now
        END LOOP;
    END IF;
    RETURN coalesce(pg_catalog.cardinality(v_queues), 0);
END;
$$;

-- queue_publish: pushes one message (as queue_push: dedup per queue) into
-- every queue bound to a pattern that in_topic matches, in one statement;
-- a queue bound by several of them gets it once. Returns how many queues
-- got a new message: 0 when no binding matches (not an error) or every
-- bound queue holds (p_key, p_kind) already. One wakeup per queue that got
-- a message ready now. Locks: key-share locks on the target queue rows, in
-- queue order, then the new rows' unique-index entries.
CREATE OR REPLACE FUNCTION queue_publish(
    in_topic    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz DEFAULT NULL,
    in_priority integer     DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN pyqueue__publish(in_topic, in_key, in_kind, in_payload, in_run_at, in_priority, NULL);
END;
$$;

-- queue_publish_with_headers: queue_publish with headers (as
-- queue_push_with_headers), the same in every queue the message reaches.
-- Checks, dedup, return and locks: queue_publish's, the same body
-- (pyqueue__publish). No DEFAULTs.
CREATE OR REPLACE FUNCTION queue_publish_with_headers(
    in_topic    text,
    in_key      text,
    in_kind     text,
    in_payload  jsonb,
    in_run_at   timestamptz,
    in_priority integer,
    in_headers  jsonb)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN pyqueue__publish(in_topic, in_key, in_kind, in_payload, in_run_at, in_priority, in_headers);
END;
$$;

-- pyqueue__publish_batch: the body of queue_publish_batch and
-- queue_publish_batch_with_headers, each a thin SECURITY DEFINER wrapper over
-- it (in_headers NULL: no headers).
CREATE OR REPLACE FUNCTION pyqueue__publish_batch(
    in_topics     text[],
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
    v_n      integer;
    v_ids    regclass;
    v_count  integer;
    v_ready  text[];
    v_past   text[];
    v_min    timestamptz;
    v_queue  text;
    v_topic  text;
    v_bytes  integer;
    v_max    integer;
BEGIN
    v_n := pyqueue__check_batch('topics', in_topics, false, in_keys, in_kinds, in_payloads, in_run_ats,
                                in_priorities, v_now);
    IF in_headers IS NOT NULL THEN
        PERFORM pyqueue__check_batch_headers(in_headers, v_n);
    END IF;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    FOR v_topic IN SELECT DISTINCT t FROM pg_catalog.unnest(in_topics) AS u (t) LOOP
        PERFORM pyqueue__check_topic('topic', v_topic, false);
    END LOOP;
    -- No payload above the max_payload of a queue its topic reaches: a batch
    -- whose payloads are all within the smallest max_payload of all queues
    -- (one short read) needs no routing for it.
    SELECT pg_catalog.max(pg_catalog.octet_length(u.pl::text)) INTO v_bytes
      FROM pg_catalog.unnest(in_payloads) AS u (pl);
    IF v_bytes > (SELECT pg_catalog.min(q.max_payload) FROM pyqueue_queue q) THEN
        SELECT s.bytes, s.max_payload INTO v_bytes, v_max
          FROM (SELECT pg_catalog.octet_length(b.pl::text) AS bytes, q.max_payload, b.ord
                  FROM ROWS FROM (pg_catalog.unnest(in_topics), pg_catalog.unnest(in_payloads))
                       WITH ORDINALITY AS b (t, pl, ord)
                  JOIN pyqueue_binding bd ON ('.' || b.t) ~ bd.pattern_regex::text
                  JOIN pyqueue_queue q ON q.queue_name::text = bd.queue_name::text) AS s
         WHERE s.bytes > s.max_payload
         ORDER BY s.ord
         LIMIT 1;
        IF FOUND THEN
            PERFORM pyqueue__refuse_payload(v_bytes, v_max);
        END IF;
    END IF;
    v_ids := pg_catalog.pg_get_serial_sequence('pyqueue_message', 'id')::regclass;
    WITH batch AS MATERIALIZED (
        SELECT b.t, b.k, b.kd, b.pl, b.ra, b.pr, b.h, b.ord
          FROM ROWS FROM (pg_catalog.unnest(in_topics), pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                          pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                          pg_catalog.unnest(in_priorities), pg_catalog.unnest(in_headers))
               WITH ORDINALITY AS b (t, k, kd, pl, ra, pr, h, ord)
    ), routed AS MATERIALIZED (
        SELECT r.queue_name, r.ord, pg_catalog.nextval(v_ids) AS new_id
          FROM (SELECT DISTINCT bd.queue_name, b.ord
                  FROM batch b JOIN pyqueue_binding bd ON ('.' || b.t) ~ bd.pattern_regex::text) AS r
         ORDER BY r.ord, r.queue_name
    ), targets AS (
        SELECT q.queue_name
          FROM pyqueue_queue q
         WHERE q.queue_name::text IN (SELECT r.queue_name::text FROM routed r)
         ORDER BY q.queue_name
           FOR KEY SHARE
    ), ins AS (
        INSERT INTO pyqueue_message AS m
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, id, headers)
        OVERRIDING SYSTEM VALUE
        SELECT t.queue_name, b.k, b.kd, b.pl, coalesce(b.pr, 0), coalesce(b.ra, v_now), coalesce(b.ra, v_now),
               v_now, r.new_id, pyqueue__json_value(b.h)
          FROM routed r
          JOIN targets t ON t.queue_name::text = r.queue_name::text
          JOIN batch b ON b.ord = r.ord
         ORDER BY t.queue_name, b.k, b.kd, b.ord  -- of a key repeated in the batch, the first is kept
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING
        RETURNING m.queue_name, m.scheduled_at
    )
    SELECT pg_catalog.count(*)::integer,
           pg_catalog.array_agg(DISTINCT i.queue_name::text ORDER BY i.queue_name::text)
               FILTER (WHERE i.scheduled_at <= v_now),
           pg_catalog.array_agg(DISTINCT i.queue_name::text ORDER BY i.queue_name::text)
               FILTER (WHERE i.scheduled_at < v_now - interval '0.5 seconds'),
           pg_catalog.min(i.scheduled_at)
      INTO v_count, v_ready, v_past, v_min
      FROM ins i;
    FOREACH v_queue IN ARRAY coalesce(v_past, '{}') LOOP
        PERFORM pyqueue__ready_from_lower(v_queue, v_min, v_now);  -- more than a moment in the past
    END LOOP;
    FOREACH v_queue IN ARRAY coalesce(v_ready, '{}') LOOP
        PERFORM pyqueue__notify(v_queue);  -- wakeup: ready now
    END LOOP;
    RETURN v_count;
END;
$$;

-- queue_publish_batch: queue_publish for many messages in one statement:
-- element i of the arrays (the same length; in_run_ats / in_priorities may
-- be NULL or hold NULLs) goes to the queues bound to topics[i]. Returns how
-- many messages were new, over all queues. Any invalid element refuses the
-- whole batch. Ids in array order (FIFO within a queue), rows inserted in
-- queue and key order. Locks: as queue_publish, for every target queue.
CREATE OR REPLACE FUNCTION queue_publish_batch(
    in_topics     text[],
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[] DEFAULT NULL,
    in_priorities integer[]     DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN pyqueue__publish_batch(in_topics, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities, NULL);
END;
$$;

-- queue_publish_batch_with_headers: queue_publish_batch with headers per
-- message (in_headers as queue_push_batch_with_headers'), the same in every
-- queue a message reaches. Checks, dedup, return and locks:
-- queue_publish_batch's, the same body (pyqueue__publish_batch). No DEFAULTs.
CREATE OR REPLACE FUNCTION queue_publish_batch_with_headers(
    in_topics     text[],
    in_keys       text[],
    in_kinds      text[],
    in_payloads   jsonb[],
    in_run_ats    timestamptz[],
    in_priorities integer[],
    in_headers    jsonb[])
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN pyqueue__publish_batch(in_topics, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities,
                                  in_headers);
END;
$$;
