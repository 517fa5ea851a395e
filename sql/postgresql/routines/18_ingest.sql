-- ==== ingest ====
-- Bulk enqueue with plain INSERTs into the table queue_ingest (Spark's
-- df.write.jdbc): a statement-level trigger (pyqueue__ingest, above) enqueues
-- each INSERT's rows; queue_ingest_flush reports what a tagged session's
-- INSERTs did.

-- pyqueue__ingest: the statement-level AFTER INSERT trigger of queue_ingest.
-- For the rows of one INSERT statement (the transition table pyqueue_new):
--   1. key-share locks the queue rows they name (as queue_push: a racing
--      queue_drop waits, or has won and the row is refused as unknown);
--   2. refuses the whole statement when any row is bad, naming the first
--      bad row (lowest ingest_id) and why: the same checks and codes as
--      queue_push (NULL/empty/too long/space-ended names, unknown queue,
--      NULL or non-JSON payload, infinite run_at, priority not a whole
--      number in the integer range; a p_key of a schedule's occurrence, a
--      payload above its queue's max_payload). JSON is checked by a cast inside a
--      block that writes nothing (no subtransaction XID is used per
--      statement, so long ingest transactions do not overflow the subxid cache);
--   3. inserts the rows into pyqueue_message in one INSERT ... ON CONFLICT DO
--      NOTHING in ingest order (duplicates of live messages, also within the
--      statement, are skipped: the first wins);
--   4. deletes its own rows from queue_ingest (ingest_id range; rows of
--      concurrent uncommitted INSERTs in that range are invisible here and
--      stay for their own trigger).
-- run_at NULL = now, priority NULL = 0. Concurrency: as queue_push_batch;
-- two transactions inserting the same new key wait for each other (the
-- unique index), so overlapping appends in opposite orders can deadlock: one
-- fails with 40P01 and, retried (Spark retries the task), dedup absorbs what
-- the other already enqueued.
CREATE OR REPLACE FUNCTION pyqueue__ingest()
RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_key    text;
    v_code   text;
    v_reason text;
    v_min    bigint;
    v_max    bigint;
    v_row    record;
    v_ready  text[];
    v_tag    text := pg_catalog.current_setting('pyqueue.ingest_tag', true);
    v_added  bigint;
    v_queue  text;
    v_earliest timestamptz;
    v_bytes  integer;
    v_maxp   integer;
BEGIN
    PERFORM 1 FROM pyqueue_queue q
     WHERE q.queue_name::text IN (SELECT DISTINCT r.queue_name FROM pyqueue_new r)
     ORDER BY q.queue_name
       FOR KEY SHARE OF q;
    SELECT b.p_key, b.reason INTO v_key, v_reason
      FROM (SELECT r.ingest_id, r.p_key,
                   CASE WHEN r.queue_name IS NULL OR r.queue_name::text = '' THEN 'queue_name must not be NULL or empty'
                        WHEN pg_catalog.length(r.queue_name) > 128 THEN 'queue_name is longer than 128 characters'
                        WHEN pg_catalog.right(r.queue_name, 1) = ' ' THEN 'queue_name must not end with a space'
                        WHEN r.p_key IS NULL OR r.p_key::text = '' THEN 'p_key must not be NULL or empty'
                        WHEN pg_catalog.length(r.p_key) > 255 THEN 'p_key is longer than 255 characters'
                        WHEN pg_catalog.right(r.p_key, 1) = ' ' THEN 'p_key must not end with a space'
                        WHEN r.p_key::text LIKE '%@____-__-__T__:__:__Z' THEN 'p_key ending in @<UTC time> is reserved for schedules'
                        WHEN r.p_kind IS NULL OR r.p_kind::text = '' THEN 'p_kind must not be NULL or empty'
                        WHEN pg_catalog.length(r.p_kind) > 128 THEN 'p_kind is longer than 128 characters'
                        WHEN pg_catalog.right(r.p_kind, 1) = ' ' THEN 'p_kind must not end with a space'
                        WHEN q.queue_name IS NULL THEN pg_catalog.format('queue "%s" does not exist', r.queue_name)
                        WHEN r.payload IS NULL THEN 'payload must not be NULL (use the JSON value null)'
                        WHEN NOT pg_catalog.isfinite(coalesce(r.run_at, v_now)) THEN 'run_at must be a finite time'
                        WHEN r.priority <> pg_catalog.trunc(r.priority) OR r.priority < -2147483648::numeric OR r.priority > 2147483647::numeric
                             THEN 'priority must be a whole number from -2147483648 to 2147483647'
                   END AS reason
              FROM pyqueue_new r
              LEFT JOIN pyqueue_queue q ON q.queue_name::text = r.queue_name::text) b
     WHERE b.reason IS NOT NULL
     ORDER BY b.ingest_id
     LIMIT 1;
    IF v_reason IS NOT NULL THEN
        v_code := CASE WHEN v_reason LIKE 'queue "%' THEN 'unknown_queue'
                       WHEN v_reason LIKE 'payload%' THEN 'invalid_payload'
                       ELSE 'invalid_argument' END;
        RAISE EXCEPTION 'pyqueue:%: queue_ingest row with p_key %: %', v_code,
                        coalesce(pg_catalog.quote_literal(v_key), 'NULL'), v_reason
            USING ERRCODE = CASE v_code WHEN 'unknown_queue' THEN 'P0002' ELSE '22023' END;
    END IF;
    BEGIN
        -- every row's JSON parsed (a bad one raises, handled below), and its
        -- size compared with its queue's max_payload in the same pass
        SELECT r.p_key, s.bytes, q.max_payload INTO v_key, v_bytes, v_maxp
          FROM pyqueue_new r
          JOIN pyqueue_queue q ON q.queue_name::text = r.queue_name::text
         CROSS JOIN LATERAL (SELECT pg_catalog.octet_length(r.payload::jsonb::text) AS bytes) AS s
         WHERE s.bytes > q.max_payload
         ORDER BY r.ingest_id
         LIMIT 1;
    EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
        FOR v_row IN SELECT r.ingest_id, r.p_key, r.payload FROM pyqueue_new r ORDER BY r.ingest_id LOOP
            BEGIN
                PERFORM v_row.payload::jsonb;
            EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
                RAISE EXCEPTION 'pyqueue:invalid_payload: queue_ingest row with p_key %: payload is not valid JSON (%)',
                                coalesce(pg_catalog.quote_literal(v_row.p_key), 'NULL'), SQLERRM
                    USING ERRCODE = '22023';
            END;
        END LOOP;
        RAISE;
    END;
    IF v_bytes IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_payload: queue_ingest row with p_key %: payload is % bytes, more than the queue''s max_payload of % bytes',
                        coalesce(pg_catalog.quote_literal(v_key), 'NULL'), v_bytes, v_maxp
            USING ERRCODE = '22023';
    END IF;
    WITH ins AS (
        INSERT INTO pyqueue_message
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at)
        SELECT r.queue_name, r.p_key, r.p_kind, r.payload::jsonb, coalesce(r.priority, 0)::integer,
               coalesce(r.run_at, v_now), coalesce(r.run_at, v_now), v_now
          FROM pyqueue_new r
         ORDER BY r.ingest_id
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING
        RETURNING queue_name, scheduled_at
    )
    SELECT pg_catalog.array_agg(DISTINCT i.queue_name::text ORDER BY i.queue_name::text)
               FILTER (WHERE i.scheduled_at <= v_now),
           pg_catalog.count(*)
      INTO v_ready, v_added
      FROM ins i;
    -- Rows more than a moment in the past lower their queue's ready_from.
    FOR v_queue, v_earliest IN SELECT r.queue_name, pg_catalog.min(r.run_at) FROM pyqueue_new r
                                WHERE r.run_at < v_now - interval '0.5 seconds' GROUP BY r.queue_name LOOP
        PERFORM pyqueue__ready_from_lower(v_queue, v_earliest, v_now);
    END LOOP;
    -- Wakeups: once per queue per statement, for the queues that got rows
    -- ready now (inserted, not skipped as duplicates).
    FOREACH v_queue IN ARRAY coalesce(v_ready, '{}') LOOP
        PERFORM pyqueue__notify(v_queue);
    END LOOP;
    -- The tally of a tagged session (see pyqueue_ingest_tally): rows inserted and
    -- rows skipped as duplicates by this statement.
    IF pg_catalog.length(v_tag) BETWEEN 1 AND 128 THEN
        INSERT INTO pyqueue_ingest_tally (tag, enqueued, duplicates)
        SELECT v_tag, v_added, pg_catalog.count(*) - v_added FROM pyqueue_new;
    END IF;
    SELECT pg_catalog.min(r.ingest_id), pg_catalog.max(r.ingest_id) INTO v_min, v_max FROM pyqueue_new r;
    DELETE FROM queue_ingest WHERE ingest_id BETWEEN v_min AND v_max;
    RETURN NULL;
END;
$$;

-- queue_ingest_enqueue: runs pyqueue__ingest (helpers) once per INSERT
-- statement on queue_ingest, with the statement's rows as the transition
-- table pyqueue_new. Locks: as pyqueue__ingest.
CREATE OR REPLACE TRIGGER queue_ingest_enqueue
    AFTER INSERT ON queue_ingest
    REFERENCING NEW TABLE AS pyqueue_new
    FOR EACH STATEMENT EXECUTE FUNCTION pyqueue__ingest();

-- queue_ingest_flush: the portable end of a bulk ingest. On PostgreSQL every
-- INSERT into queue_ingest is already enqueued when it returns; the flush
-- reports what the INSERTs of this session's ingest tag did (the setting
-- pyqueue.ingest_tag, 1 to 128 characters; see pyqueue_ingest_tally) since
-- the last flush with that tag, and forgets it: one row (enqueued,
-- duplicates, rejected 0). Without a tag: (0, 0, 0). Also deletes tallies
-- older than a day, of any tag. in_queue NULL = all queues; a named queue
-- must exist (the counts are the tag's, whatever queues its rows named).
-- Locks: the tally rows it deletes.
CREATE OR REPLACE FUNCTION queue_ingest_flush(in_queue text DEFAULT NULL)
RETURNS TABLE (enqueued bigint, duplicates bigint, rejected bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_tag text := pg_catalog.current_setting('pyqueue.ingest_tag', true);
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    IF v_tag IS NULL OR pg_catalog.length(v_tag) NOT BETWEEN 1 AND 128 THEN
        RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint;
        RETURN;
    END IF;
    DELETE FROM pyqueue_ingest_tally t
     WHERE t.tallied_at < pg_catalog.clock_timestamp() - interval '1 day';
    RETURN QUERY
        WITH gone AS (
            DELETE FROM pyqueue_ingest_tally t WHERE t.tag = v_tag
            RETURNING t.enqueued AS n_enqueued, t.duplicates AS n_duplicates
        )
        SELECT coalesce(pg_catalog.sum(g.n_enqueued), 0)::bigint,
               coalesce(pg_catalog.sum(g.n_duplicates), 0)::bigint, 0::bigint
          FROM gone g;
END;
$$;
