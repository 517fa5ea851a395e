-- ==== workers ====
-- The worker registry: register, heartbeat, deregister, list, and hand back
-- the reservations of workers that stopped heartbeating.

-- pyqueue__check_worker: raises unless a worker id and secret are given and
-- the id is a possible one (heartbeat, deregister).
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_worker(in_worker_id bigint, in_secret uuid)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_worker_id IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: worker_id must not be NULL' USING ERRCODE = '22023';
    END IF;
    IF in_worker_id < 1 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: worker_id must be a whole number from 1 to 9223372036854775807'
            USING ERRCODE = '22023';
    END IF;
    IF in_secret IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: secret must not be NULL' USING ERRCODE = '22023';
    END IF;
END;
$$;

-- queue_worker_register: records a worker; returns one row (worker_id,
-- secret): secret is a fresh random token that heartbeat and deregister
-- require, so that a worker can touch only its own registration. The worker
-- then reserves with worker = in_name || '#' || worker_id (queue_workers
-- shows it as reserve_as) so that queue_release_dead_workers can find its
-- messages. in_queues: at most 1000 names (the list is shown, never used
-- to reserve). Inserts one row.
-- Locks: the new row.
CREATE OR REPLACE FUNCTION queue_worker_register(in_name text, in_host text DEFAULT NULL,
                                                 in_pid integer DEFAULT NULL, in_queues text[] DEFAULT NULL)
RETURNS TABLE (worker_id bigint, secret uuid)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_id     bigint;
    v_secret uuid := pg_catalog.gen_random_uuid();
BEGIN
    PERFORM pyqueue__check_name('name', in_name, 200);
    IF in_host IS NOT NULL AND pg_catalog.length(in_host) > 255 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: host is longer than 255 characters' USING ERRCODE = '22023';
    END IF;
    IF in_pid < 0 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: pid must not be negative' USING ERRCODE = '22023';
    END IF;
    IF pg_catalog.cardinality(in_queues) > 1000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: queues names % queues; a worker registers at most 1000',
            pg_catalog.cardinality(in_queues) USING ERRCODE = '22023';
    END IF;
    IF in_queues IS NOT NULL AND (pg_catalog.array_ndims(in_queues) > 1
                                  OR pg_catalog.array_position(in_queues, NULL::text) IS NOT NULL
                                  OR EXISTS (SELECT 1 FROM pg_catalog.unnest(in_queues) q(name)
                                              WHERE q.name = '' OR q.name LIKE '% '
                                                 OR pg_catalog.length(q.name) > 128)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: queues must be NULL or an array of names without NULLs'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pyqueue_worker AS w (worker_name, host, pid, queues, started_at, heartbeat_at, secret)
    VALUES (in_name, in_host, in_pid, in_queues, v_now, v_now, v_secret)
    RETURNING w.worker_id INTO v_id;
    worker_id := v_id;
    secret := v_secret;
    RETURN NEXT;
END;
$$;

-- queue_worker_heartbeat: heartbeat_at = now; false when the worker is not
-- registered (deregistered, or released as dead: it should register again)
-- or in_secret is not its secret. Locks the worker row.
CREATE OR REPLACE FUNCTION queue_worker_heartbeat(in_worker_id bigint, in_secret uuid)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_worker(in_worker_id, in_secret);
    UPDATE pyqueue_worker SET heartbeat_at = pg_catalog.clock_timestamp()
     WHERE worker_id = in_worker_id AND secret = in_secret;
    RETURN FOUND;
END;
$$;

-- queue_worker_deregister: removes the worker (its reservations stay as they
-- are); false when it was not registered or in_secret is not its secret.
-- Locks the worker row.
CREATE OR REPLACE FUNCTION queue_worker_deregister(in_worker_id bigint, in_secret uuid)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_worker(in_worker_id, in_secret);
    DELETE FROM pyqueue_worker WHERE worker_id = in_worker_id AND secret = in_secret;
    RETURN FOUND;
END;
$$;

-- queue_release_dead_workers: workers whose heartbeat is older than
-- in_older_than are removed, and their live reservations (reserved_by =
-- their reserve_as) become ready now: token cleared, the delivery counted
-- (attempts stay, as after an expiry; a message that had its last allowed
-- delivery is dead-lettered by the next reserve). Returns the number of
-- messages released. Reads every reserved message (no index on reserved_by):
-- a maintenance call, run it every few heartbeats, not per reserve.
-- in_older_than is at least 30 s (refused below it): a worker
-- heartbeats every 10 s (lease/3 at the default lease of 30 s), so a
-- shorter silence is no sign that it is dead, and a caller (a consumer holds
-- this routine) could take a live worker's messages between two heartbeats.
-- Locks the stale worker rows and the released message rows.
CREATE OR REPLACE FUNCTION queue_release_dead_workers(in_older_than interval)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_tags  text[];
    v_count integer;
    v_ready text[];
    v_queue text;
BEGIN
    IF in_older_than IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: older_than must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_duration('older_than', in_older_than, true);
    IF in_older_than < interval '30 seconds' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: older_than must be at least 30 seconds: a worker heartbeats every 10 s (lease/3 at the default lease), so a shorter silence does not make it dead'
            USING ERRCODE = '22023';
    END IF;
    WITH gone AS (
        DELETE FROM pyqueue_worker w WHERE w.heartbeat_at < v_now - in_older_than
        RETURNING w.worker_name::text || '#'::text || w.worker_id::text AS tag
    )
    SELECT pg_catalog.array_agg(tag) INTO v_tags FROM gone;
    IF v_tags IS NULL THEN
        RETURN 0;
    END IF;
    WITH released AS (
        UPDATE pyqueue_message
           SET scheduled_at = v_now, reserve_token = NULL, reserved_by = NULL
         WHERE reserved_by::text = ANY (v_tags) AND reserve_token IS NOT NULL AND scheduled_at > v_now
        RETURNING queue_name
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(DISTINCT r.queue_name ORDER BY r.queue_name) INTO v_count, v_ready
      FROM released r;
    -- wakeups: ready now, in the queues that exist (a message left in no
    -- queue by a REPEATABLE READ queue_drop has no wakeup row to write)
    FOR v_queue IN SELECT q.queue_name::text FROM pyqueue_queue q
                    WHERE q.queue_name::text = ANY (coalesce(v_ready, '{}'))
                    ORDER BY q.queue_name LOOP
        PERFORM pyqueue__notify(v_queue);
    END LOOP;
    RETURN v_count;
END;
$$;

-- queue_workers: the registered workers, oldest first, with reserve_as (the
-- worker name their reservations carry) and the seconds since their last
-- heartbeat.
-- Reads without locks.
CREATE OR REPLACE FUNCTION queue_workers()
RETURNS TABLE (worker_id bigint, worker_name text, host text, pid integer, queues text[],
               started_at timestamptz, heartbeat_at timestamptz, heartbeat_age_s double precision,
               reserve_as text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN QUERY
        SELECT w.worker_id, w.worker_name::text, w.host::text, w.pid, w.queues, w.started_at,
               w.heartbeat_at, extract(epoch FROM pg_catalog.clock_timestamp() - w.heartbeat_at)::double precision,
               w.worker_name::text || '#'::text || w.worker_id::text
          FROM pyqueue_worker w
         ORDER BY w.worker_id;
END;
$$;
