-- pyqueue-sql: PostgreSQL 15+ routines, the current state.
--
-- Runs after schema.sql (the tables) and can be run again at any time: every
-- routine is CREATE OR REPLACE, so a migration re-installs this whole file.
--
-- Layout: one section per topic, in the same order in schema.sql,
-- routines.sql, queries.sql and ../../docs/contract.md (uninstall.sql: the reverse):
-- helpers, queues, produce, consume, wakeups, fast paths, topics, history
-- and dead letters, results, limits, workers, schedules, ingest, privileges. A section starts
-- with the line '-- ==== <topic> ====' (a file leaves out the topics it has
-- nothing for).
-- Naming inside routines: parameters in_*, locals v_*, columns as they are
-- (p_key/p_kind are columns, never parameters).
--
-- Errors: every refusal is RAISE EXCEPTION with the message
--   'pyqueue:<code>: <detail>'
-- where <code> is one of unknown_queue, invalid_argument, invalid_payload,
-- insecure_schema (below); SQLSTATE is 22023 (invalid_parameter_value) for
-- argument errors and P0002 (no_data_found) for an unknown queue.
--
-- Least privilege (README "Least privilege"): every contract routine
-- (queue_*) and the queue_ingest trigger function are SECURITY DEFINER (they
-- run with the rights of their owner, the migrating role) and carry a pinned
-- search_path: the schema they are installed in, then pg_temp last, so that
-- no caller's schema or temporary table can stand in for ours. The routine
-- text is static, so the script pins the session's search_path to
-- "<current schema>, pg_temp" here, every routine takes it with
-- SET search_path FROM CURRENT, and the end of the script puts the caller's
-- back (session-level set_config: it survives psql's autocommit between
-- statements, and inside the migration's transaction it is undone by a rollback).
-- The end of the script also revokes EXECUTE from PUBLIC on every routine:
-- nobody but the owner may call anything until granted (pyqueue-sql grant).
--
-- Look-alikes: a function or operator whose argument types match a call
-- exactly beats a built-in that needs a conversion or is polymorphic,
-- wherever it lives on the search_path. So (1) the install is refused
-- (pyqueue:insecure_schema, SQLSTATE 42501) when a role other than the
-- installing one (superusers and roles that are members of the installing
-- role aside: they can act as it anyway) can CREATE in the install schema;
-- and (2) the routines call built-in functions as pg_catalog.<name> and
-- compare with operands of the exact types of the built-in operators
-- (varchar columns cast to text), so that even a role granted CREATE later
-- cannot get its code run by them.
--
-- Tokens: no SECURITY DEFINER routine takes an argument whose type the
-- caller chooses (a polymorphic type such as anycompatible, or a type the
-- caller created), and none applies a cast, operator or function that
-- such a type would select: PostgreSQL finds a cast by type, not by name, so
-- a routine casting a caller-typed argument would run the caller's own cast
-- function as the owner, whatever the search_path. The routines that take a
-- reservation token take it as text; each has an overload taking a uuid, a
-- plain SQL function (SECURITY INVOKER) that calls the text one with the
-- uuid's text. queue_commit_batch and queue_commit_result_batch take their
-- tokens as text[] only: beside a uuid[] overload, an untyped array (a
-- driver's list, an '{...}' literal) would match neither better, and
-- PostgreSQL refuses such a call as ambiguous; a uuid[] is passed as
-- uuid[]::text[].
-- tests/security/test_definer_arguments.py checks the catalog.
--
-- Plans: the routines of the message path (push, reserve, pop, commit,
-- rollback, fail, extend, commit_reserve, commit_batch, commit_result(_batch),
-- renew, set_progress, the *_with_headers pushes and their helpers) run with plan_cache_mode =
-- force_generic_plan. Each of their statements is
-- planned once per session, with parameters; by default PL/pgSQL plans them
-- again on every call (a custom plan) for as long as the planner rates the
-- generic plan above the custom ones, which for the reserve's walk and
-- update was always: half of a reserve's server time was planning. The
-- generic plans are those the plan guards check (tests/contract/test_plans.py
-- explains every guarded statement in both modes).
DO $$
DECLARE
    v_schema text := pg_catalog.current_schema();
    v_roles  text;
BEGIN
    IF v_schema IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: no schema to install into (the search_path names no existing schema)';
    END IF;
    IF pg_catalog.has_schema_privilege('public', v_schema, 'CREATE') THEN
        v_roles := 'PUBLIC';
    ELSE
        SELECT pg_catalog.string_agg(pg_catalog.quote_ident(r.rolname::text), ', ' ORDER BY r.rolname::text)
          INTO v_roles
          FROM pg_catalog.pg_roles r
         WHERE NOT r.rolsuper
           AND r.rolname::text OPERATOR(pg_catalog.<>) CURRENT_USER::text
           AND r.rolname::text OPERATOR(pg_catalog.<>) 'pg_database_owner'::text  -- its member is checked instead
           AND pg_catalog.has_schema_privilege(r.oid, v_schema, 'CREATE')
           AND NOT pg_catalog.pg_has_role(r.oid, CURRENT_USER, 'MEMBER');
    END IF;
    PERFORM pg_catalog.set_config('pyqueue.search_path_before', pg_catalog.current_setting('search_path'), false);
    IF v_roles IS NULL THEN
        PERFORM pg_catalog.set_config('pyqueue.install_refused', '', false);
        PERFORM pg_catalog.set_config('search_path', pg_catalog.quote_ident(v_schema) || ', pg_temp', false);
    ELSE
        -- Refused. The next statement raises; until the end of the script the
        -- search_path names no schema, so that nothing can be created even by a
        -- client that goes on after an error (psql without ON_ERROR_STOP).
        PERFORM pg_catalog.set_config('pyqueue.install_refused', pg_catalog.format(
            'pyqueue:insecure_schema: roles other than the installing role %I can CREATE in schema %I: %s. '
            'Such a role could create a look-alike function or operator there and have it run with the '
            'rights of %I by the routines. Fix: REVOKE CREATE ON SCHEMA %I FROM %s; (when a role owns the '
            'schema or the database: ALTER SCHEMA %I OWNER TO %I, or install into a schema only %I can '
            'write), then install again',
            CURRENT_USER, v_schema, v_roles, CURRENT_USER, v_schema, v_roles, v_schema, CURRENT_USER,
            CURRENT_USER), false);
        PERFORM pg_catalog.set_config('search_path', '', false);
    END IF;
END
$$;

DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.install_refused', true) OPERATOR(pg_catalog.<>) '' THEN
        RAISE EXCEPTION '%', pg_catalog.current_setting('pyqueue.install_refused') USING ERRCODE = '42501';
    END IF;
END
$$;


-- Installs of earlier versions took the token as a polymorphic type (see
-- "Tokens" at the top): every routine of ours in this schema with a
-- polymorphic argument is dropped, so that an upgrade leaves none (the
-- catalog names them: nothing is dropped, nor any notice printed, where there
-- are none).
DO $$
DECLARE
    v_old regprocedure;
BEGIN
    FOR v_old IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace(pg_catalog.current_schema())
           AND p.proname::text LIKE 'queue\_%'
           AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargtypes::oid[]) AS a (t)
                         JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) a.t
                        WHERE ty.typtype OPERATOR(pg_catalog.=) 'p')
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_old);
    END LOOP;
END
$$;


-- ==== helpers ====
-- Internal helpers (pyqueue__*), not part of the contract: granted to nobody,
-- called only by the routines of the topics below, as their owner (only the
-- queue_ingest trigger function is SECURITY DEFINER itself). Grouped by the
-- topic that uses them, in the order of the topics.

-- ---- checks and lookups used by every topic ----

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
-- (pyqueue__occurrence_key). Returns the batch's length. One pass over the
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
    v_prefix text := coalesce(in_extra_name || ', ', '');
BEGIN
    IF (in_extra_name IS NOT NULL AND in_extra IS NULL)
       OR in_keys IS NULL OR in_kinds IS NULL OR in_payloads IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: %p_keys, p_kinds and payloads must not be NULL', v_prefix
            USING ERRCODE = '22023';
    END IF;
    v_n := coalesce(pg_catalog.cardinality(in_keys), 0);
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
    SELECT pg_catalog.min(b.ord) INTO v_bad
      FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_payloads),
                      pg_catalog.unnest(in_run_ats),
                      pg_catalog.unnest(CASE WHEN in_extra_groups THEN in_extra END))
           WITH ORDINALITY AS b (k, kd, pl, ra, g, ord)
     WHERE pyqueue__bad_name(b.k, 255) OR pyqueue__bad_name(b.kd, 128) OR b.pl IS NULL
        OR NOT pg_catalog.isfinite(coalesce(b.ra, in_now))
        OR (b.g IS NOT NULL AND pyqueue__bad_name(b.g, 255));
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch has a NULL, empty, too long or space-ended p_key/p_kind, %a NULL payload or an infinite run_at',
            v_bad, CASE WHEN in_extra_groups THEN 'an empty, too long or space-ended group, ' ELSE '' END
            USING ERRCODE = '22023';
    END IF;
    SELECT pg_catalog.min(u.ord) INTO v_bad
      FROM pg_catalog.unnest(in_keys) WITH ORDINALITY AS u (k, ord)
     WHERE pyqueue__occurrence_key(u.k);
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch: p_key ending in @<UTC time> is reserved for schedules',
            v_bad
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

-- ---- for consume ----

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

-- pyqueue__check_kinds: raises unless a kinds filter is NULL (any kind) or
-- a non-empty array of kinds of at most 128 characters without NULLs.
-- Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_kinds(in_kinds text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF in_kinds IS NOT NULL AND (pg_catalog.cardinality(in_kinds) = 0 OR pg_catalog.array_position(in_kinds, NULL) IS NOT NULL) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: kinds must be NULL or a non-empty array without NULLs'
            USING ERRCODE = '22023';
    END IF;
    IF in_kinds IS NOT NULL AND EXISTS (SELECT 1 FROM pg_catalog.unnest(in_kinds) k(kind) WHERE pg_catalog.length(k.kind) > 128) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: kinds must not hold a kind longer than 128 characters'
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- pyqueue__check_reserve: the argument checks of queue_reserve and
-- queue_commit_reserve (n, timeout, worker, kinds). Takes no locks.
CREATE OR REPLACE FUNCTION pyqueue__check_reserve(in_worker text, in_timeout interval, in_n integer, in_kinds text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    PERFORM pyqueue__check_batch_size(in_n);
    PERFORM pyqueue__check_duration('timeout', in_timeout, true);
    IF in_worker IS NOT NULL AND pg_catalog.length(in_worker) > 255 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: worker is longer than 255 characters' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_kinds(in_kinds);
END;
$$;

-- pyqueue__ready_from_lower: keeps the queue's ready_from a lower bound after
-- a write of a message at in_at (in_now: the writer's clock, read after its
-- transaction took its id). A proposed bound (pyqueue__ready_from_advance)
-- is the proposer's clock minus a second and becomes the bound only once
-- every transaction whose id is not above the proposer's has ended; a
-- transaction with a higher id took it after that clock was read, so a
-- message it writes at in_now, or up to half a second before, is above
-- every bound that could miss it: nothing to do. An earlier in_at is
-- recorded in pyqueue_ready_lower, visible with the message when the writer
-- commits, until an advance that sees both folds it in. Locks nothing but
-- the new row: never waits.
CREATE OR REPLACE FUNCTION pyqueue__ready_from_lower(in_queue text, in_at timestamptz, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF in_at IS NOT NULL AND in_at < in_now - interval '0.5 seconds' THEN
        INSERT INTO pyqueue_ready_lower (queue_name, lowered_to) VALUES (in_queue, in_at);
    END IF;
END;
$$;

-- pyqueue__ready_from_advance: moves the queue's ready_from up. Called by
-- a reserve, pop or commit_reserve at READ COMMITTED whose transaction has
-- no id yet, at most once a second per queue, and only when no other transaction is moving it (SKIP
-- LOCKED: never waits); in_clock is the caller's clock, read before. The
-- row lock gives this transaction its id, after in_clock: every transaction
-- with a higher id takes it later, and reads the clock for what it writes
-- after that (the writers take their id first), so it writes nothing below
-- in_clock minus half a second unless it records a lowering.
-- A step: once every transaction whose id is not above the pending
-- proposal's (next_xid) has ended, (ready_from, ready_from_id) becomes the
-- first live message by (scheduled_at, id) from the current start up to
-- next_from, else (next_from, NULL) (one read of the due index from the
-- start, past the dead entries of that interval: the walk the reserves no
-- longer make), the pyqueue_ready_lower rows it sees folded in first (a
-- lowering to or below ready_from drops the id from the start). Then it
-- proposes in_clock minus a second with its own id, and
-- notes the queue's top priority (where the reserve's walk starts). While
-- the pending proposal cannot be made the bound yet (a transaction at or
-- below its id is still open), the step only notes its time (the next try
-- is a second on). Locks the queue's
-- pyqueue_ready_from row until the caller's transaction ends (a reserve
-- inside a longer transaction keeps it, and the others skip the step).
CREATE OR REPLACE FUNCTION pyqueue__ready_from_advance(in_queue text, in_clock timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_row      pyqueue_ready_from;
    v_lowered  timestamptz;
    v_first    timestamptz;
    v_first_id bigint;
    v_top      integer;
BEGIN
    SELECT * INTO v_row FROM pyqueue_ready_from r
     WHERE r.queue_name::text = in_queue AND r.moved_at < in_clock - interval '1 second'
       FOR NO KEY UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_row.next_xid IS NOT NULL THEN
        IF pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot()) <= v_row.next_xid THEN
            -- a transaction not above the proposal's id may still write
            -- below it: the proposal waits, and the next try is a second on
            UPDATE pyqueue_ready_from r SET moved_at = in_clock WHERE r.queue_name::text = in_queue;
            RETURN;
        END IF;
        -- the lowerings first: the read below, a later snapshot, sees the
        -- messages of every lowering this statement saw
        WITH gone AS (
            DELETE FROM pyqueue_ready_lower l WHERE l.queue_name::text = in_queue RETURNING l.lowered_to
        )
        SELECT pg_catalog.min(g.lowered_to) INTO v_lowered FROM gone g;
        IF v_lowered <= v_row.ready_from THEN
            v_row.ready_from := v_lowered;
            v_row.ready_from_id := NULL;
        END IF;
        -- ids are positive: (ready_from, 0) when any id may be at ready_from
        SELECT m.scheduled_at, m.id INTO v_first, v_first_id
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue
           AND m.scheduled_at < 'infinity'
           AND (m.scheduled_at, m.id) >= (v_row.ready_from, coalesce(v_row.ready_from_id, 0))
           AND m.scheduled_at < v_row.next_from
         ORDER BY m.scheduled_at, m.id
         LIMIT 1;
        v_row.ready_from := coalesce(v_first, v_row.next_from);
        v_row.ready_from_id := v_first_id;
    END IF;
    SELECT m.priority INTO v_top
      FROM pyqueue_message m WHERE m.queue_name::text = in_queue AND m.scheduled_at > '-infinity'
     ORDER BY m.priority DESC LIMIT 1;
    UPDATE pyqueue_ready_from r
       SET ready_from   = v_row.ready_from,
           ready_from_id = v_row.ready_from_id,
           top_priority = coalesce(v_top, v_row.top_priority, 0),
           next_from    = in_clock - interval '1 second',
           next_xid     = pg_catalog.pg_current_xact_id(),
           moved_at     = in_clock
     WHERE r.queue_name::text = in_queue;
END;
$$;

-- Installs of earlier versions returned the ctids alone (tid[]): a function
-- cannot change its result type in place, so the old one is dropped here
-- (pyqueue__limited_tids too); internal helpers, granted to nobody.
DO $$
DECLARE
    v_old regprocedure;
BEGIN
    FOR v_old IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                   pg_catalog.to_regprocedure('pyqueue__ready_tids(text, timestamptz, integer, text[], boolean)'),
                   pg_catalog.to_regprocedure(
                       'pyqueue__limited_tids(text, timestamptz, integer, text[], timestamptz, bigint, integer)')]::oid[])
           AND p.prorettype OPERATOR(pg_catalog.=) 'tid[]'::pg_catalog.regtype::pg_catalog.oid
         ORDER BY p.oid
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_old);
    END LOOP;
END
$$;

-- pyqueue__ready_tids: locks up to in_n ready messages of a queue (of one
-- of in_kinds, NULL = any), highest priority first, FIFO within a priority,
-- skipping rows other transactions hold (SKIP LOCKED); returns their ctids
-- in that order (NULL when none). The ctids stay valid while the caller
-- holds the locks (until its transaction ends), so the caller updates or
-- deletes the rows by ctid, without a second search.
-- Cost model: walks the priorities from the highest through
-- pyqueue_message_ready_idx, one index probe per priority, each reading only
-- the ready range of that priority (delayed and reserved rows lie past its
-- end). A priority that yields no row (all its messages wait, or are locked)
-- is an empty step; after 8 empty steps the rest is read through
-- pyqueue_message_due_idx (pyqueue__due_tids): the ready rows of the lower
-- priorities, sorted. So a reserve costs at most 8 empty probes plus one
-- probe per priority it takes rows from, or, past that, the number of ready
-- rows below the priorities walked: never the number of distinct priorities
-- among waiting messages. Every range of the walk starts at the queue's
-- bound, (ready_from, ready_from_id) of pyqueue_ready_from, not before the
-- dead index entries that a held xmin horizon keeps (inside a run of
-- messages that share one scheduled_at too; the read by time starts at the
-- bound's time). Both ends of a range are row
-- comparisons on (scheduled_at, id), which the index reads as its start and
-- end: a plain scheduled_at <= now would let a plan made for a given now
-- prove the due index's condition and read that index instead, filtering by
-- priority. Queues with concurrency limits or rate limits go through
-- pyqueue__limited_tids. Caller holds the locks until its transaction ends.
-- o_tids: the ctids; o_at: the reservation time of the pass when it took a
-- unit of a rate (pyqueue__limited_tids), else NULL: the caller then makes it
-- the lease start of what it reserves.
CREATE OR REPLACE FUNCTION pyqueue__ready_tids(in_queue text, in_now timestamptz, in_n integer, in_kinds text[],
                                               in_advance boolean DEFAULT false,
                                               OUT o_tids tid[], OUT o_at timestamptz)
LANGUAGE plpgsql
SET enable_sort = off  -- every read here is in the ready index's order: never a sort (see the first)
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_priority integer;
    v_left     integer := in_n;
    v_tids     tid[];
    v_step     tid[];
    v_empty    integer := 0;
    v_from     timestamptz;
    v_from_id  bigint;
    v_lowered  timestamptz;
    v_moved    timestamptz;
    v_limited  boolean;
BEGIN
    -- One read for where the walk starts: the queue's bound (ready_from,
    -- ready_from_id; lowered by any pyqueue_ready_lower row), whether it has
    -- concurrency limits or rate limits,
    -- and its top priority: the one the last advance saw, or a higher one
    -- when a message of it is there (that probe reads the end of the ready
    -- index past the noted top and stops at once when there is none), or,
    -- when none was noted, the top of the index (a read that walks back
    -- over the entries of messages committed while reserved, which a held
    -- xmin horizon keeps: what the noted top avoids). Without statistics the
    -- planner costs a read of the queue by its key and a sort of it the same
    -- as that probe: the function's setting rules the sort out.
    SELECT rf.ready_from, rf.ready_from_id,
           (SELECT pg_catalog.min(l.lowered_to) FROM pyqueue_ready_lower l WHERE l.queue_name::text = in_queue),
           coalesce((SELECT m.priority FROM pyqueue_message m
                      WHERE m.queue_name::text = in_queue AND m.scheduled_at > '-infinity'
                        AND m.priority > coalesce(rf.top_priority, -2147483649::bigint)
                      ORDER BY m.priority DESC LIMIT 1), rf.top_priority),
           rf.moved_at,
           EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name::text = in_queue)
           OR EXISTS (SELECT 1 FROM pyqueue_rate r WHERE r.queue_name::text = in_queue)
      INTO v_from, v_from_id, v_lowered, v_priority, v_moved, v_limited
      FROM (SELECT) AS one  -- one row, with or without the queue's pyqueue_ready_from row
      LEFT JOIN pyqueue_ready_from rf ON rf.queue_name::text = in_queue;
    IF in_advance AND v_moved < in_now - interval '1 second'
       AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL
       AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        -- in_now was read before this transaction had an id: the advance's
        -- proposal may take it as its clock
        PERFORM pyqueue__ready_from_advance(in_queue, in_now);
        SELECT rf.ready_from, rf.ready_from_id,
               (SELECT pg_catalog.min(l.lowered_to) FROM pyqueue_ready_lower l WHERE l.queue_name::text = in_queue),
               rf.top_priority
          INTO v_from, v_from_id, v_lowered, v_priority
          FROM pyqueue_ready_from rf WHERE rf.queue_name::text = in_queue;
    END IF;
    IF v_from IS NULL THEN  -- no bound row: from the start
        v_from := '-infinity';
        v_from_id := NULL;
    ELSIF v_lowered <= v_from THEN  -- a lowering at or below the bound: any id from there
        v_from := v_lowered;
        v_from_id := NULL;
    END IF;
    v_from_id := coalesce(v_from_id, 0);  -- ids are positive
    IF v_priority IS NULL THEN
        SELECT m.priority INTO v_priority
          FROM pyqueue_message m WHERE m.queue_name::text = in_queue AND m.scheduled_at > '-infinity'
         ORDER BY m.priority DESC LIMIT 1;
    END IF;
    IF v_limited THEN  -- limits or rates
        SELECT lt.o_tids, lt.o_at INTO o_tids, o_at
          FROM pyqueue__limited_tids(in_queue, in_now, in_n, in_kinds, v_from, v_from_id, v_priority) lt;
        RETURN;
    END IF;
    WHILE v_priority IS NOT NULL LOOP
        IF v_empty >= 8 THEN
            o_tids := v_tids || pyqueue__due_tids(in_queue, in_now, v_left, in_kinds, v_priority, v_from, v_from_id);
            RETURN;
        END IF;
        SELECT pg_catalog.array_agg(r.tid) INTO v_step
          FROM (SELECT m.ctid AS tid
                  FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue
                   AND m.priority = v_priority
                   AND m.scheduled_at > '-infinity' AND (m.scheduled_at, m.id) >= (v_from, v_from_id)
                   AND (m.scheduled_at, m.id) <= (in_now, 9223372036854775807)
                   AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                 ORDER BY m.scheduled_at, m.id
                 LIMIT v_left
                   FOR UPDATE SKIP LOCKED) AS r;
        IF v_step IS NULL THEN
            v_empty := v_empty + 1;
        ELSE
            v_tids := v_tids || v_step;
            v_left := v_left - pg_catalog.cardinality(v_step);
            EXIT WHEN v_left <= 0;
        END IF;
        SELECT m.priority INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.priority < v_priority AND m.scheduled_at > '-infinity'
         ORDER BY m.priority DESC LIMIT 1;
    END LOOP;
    o_tids := v_tids;
END;
$$;

-- pyqueue__due_tids: pyqueue__ready_tids past its empty steps: locks up to
-- in_n ready messages of priority in_priority or lower (those above were
-- walked already), in reserve order, reading the ready rows through
-- pyqueue_message_due_idx (queue_name, scheduled_at, id) and sorting them: its
-- cost is the number of ready rows, whatever the waiting ones. The
-- settings make that plan independent of the table statistics (stale ones
-- would pick a scan of the whole queue); the priority bound is written as a
-- bigint comparison so that it cannot be an index condition of
-- pyqueue_message_ready_idx (that index scan would read the waiting rows).
CREATE OR REPLACE FUNCTION pyqueue__due_tids(in_queue text, in_now timestamptz, in_n integer, in_kinds text[],
                                             in_priority integer, in_from timestamptz, in_from_id bigint)
RETURNS tid[]
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off SET enable_incremental_sort = off
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
BEGIN
    RETURN (SELECT pg_catalog.array_agg(r.tid)
              FROM (SELECT m.ctid AS tid
                      FROM pyqueue_message m
                     WHERE m.queue_name::text = in_queue
                       AND m.scheduled_at < 'infinity' AND (m.scheduled_at, m.id) >= (in_from, in_from_id)
                       AND m.scheduled_at <= in_now
                       AND m.priority::bigint <= in_priority::bigint
                       AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                     ORDER BY m.priority DESC, m.scheduled_at, m.id
                     LIMIT in_n
                       FOR UPDATE SKIP LOCKED) AS r);
END;
$$;

-- Installs of earlier versions returned the rows of pyqueue__reserve,
-- queue_reserve, queue_commit_reserve (both), queue_pop, queue_dead_letters and
-- queue_messages without their trailing headers column: those functions are
-- dropped here (a function cannot change its result columns in place), and
-- with them their grants (pyqueue-sql grant gives them again); queue_message
-- is dropped beside its definition. The catalog names them: nothing is
-- dropped where the current ones are installed.
DO $$
DECLARE
    v_old regprocedure;
BEGIN
    FOR v_old IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
         WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                   pg_catalog.to_regprocedure('pyqueue__reserve(pyqueue_queue, text, interval, integer, text[])'),
                   pg_catalog.to_regprocedure('queue_reserve(text, text, interval, integer, text[])'),
                   pg_catalog.to_regprocedure('queue_commit_reserve(text, text, text, text, text, interval, integer, text[])'),
                   pg_catalog.to_regprocedure('queue_commit_reserve(text, text, text, uuid, text, interval, integer, text[])'),
                   pg_catalog.to_regprocedure('queue_pop(text, integer)'),
                   pg_catalog.to_regprocedure('queue_dead_letters(text)'),
                   pg_catalog.to_regprocedure('queue_messages(text, text, text, text, text, integer)')]::oid[])
           AND NOT ('headers'::text OPERATOR(pg_catalog.=) ANY (p.proargnames::text[])
                    OR 'c_headers'::text OPERATOR(pg_catalog.=) ANY (p.proargnames::text[]))
         ORDER BY p.oid
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_old);
    END LOOP;
END
$$;

-- pyqueue__reserve: queue_reserve's work once its arguments are checked
-- (queue_reserve and queue_commit_reserve): reserves up to in_n ready
-- messages of in_queue for in_timeout (NULL = the queue's
-- visibility_timeout; refused above the queue's max_reservation). One
-- locking read (pyqueue__ready_tids) and one
-- UPDATE of the locked rows by ctid; a locked row that already had
-- max_attempts deliveries (its last reservation expired) is dead-lettered
-- instead, and the read runs again for the places it leaves. Rows in
-- reserve order; nothing when the queue is paused. Locks: the reserved
-- rows (SKIP LOCKED: never waits for another reserver).
CREATE OR REPLACE FUNCTION pyqueue__reserve(in_queue pyqueue_queue, in_worker text, in_timeout interval,
                                            in_n integer, in_kinds text[])
RETURNS TABLE (c_key varchar, c_kind varchar, c_payload jsonb, c_token uuid, c_priority integer,
               c_attempts integer, c_created_at timestamptz, c_scheduled_at_initially timestamptz,
               c_headers jsonb)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_until timestamptz;
    v_left  integer := coalesce(in_n, 1);
    v_tids  tid[];
    v_at    timestamptz;
    v_got   integer;
    v_dead  record;
    v_first boolean := true;
BEGIN
    IF in_timeout > in_queue.max_reservation THEN
        PERFORM pyqueue__refuse_reservation(in_queue.max_reservation);
    END IF;
    IF in_queue.paused THEN
        RETURN;
    END IF;
    LOOP
        SELECT rt.o_tids, rt.o_at INTO v_tids, v_at
          FROM pyqueue__ready_tids(in_queue.queue_name::text, v_now, v_left, in_kinds, v_first) rt;
        v_first := false;
        EXIT WHEN v_tids IS NULL;
        -- The clock for what this writes, read now that the row locks gave
        -- the transaction its id (see pyqueue__ready_from_advance); on a
        -- pass that took a unit of a rate, the time the units were taken at
        -- (also read after the first row lock), so that the lease starts
        -- exactly at the time the rate counted.
        v_until := coalesce(v_at, pg_catalog.clock_timestamp()) + coalesce(in_timeout, in_queue.visibility_timeout);
        RETURN QUERY
            WITH taken AS (
                UPDATE pyqueue_message m
                   SET scheduled_at  = v_until,
                       attempts      = m.attempts + 1,
                       reserved_by   = in_worker,
                       reserve_token = pg_catalog.gen_random_uuid()
                  FROM pg_catalog.unnest(v_tids) WITH ORDINALITY AS c (tid, ord)
                 WHERE m.ctid = c.tid AND m.attempts < in_queue.max_attempts
                RETURNING c.ord, m.p_key, m.p_kind, m.payload, m.reserve_token, m.priority,
                          m.attempts, m.created_at, m.scheduled_at_initially, m.headers
            )
            SELECT t.p_key, t.p_kind, t.payload, t.reserve_token, t.priority, t.attempts,
                   t.created_at, t.scheduled_at_initially, t.headers
              FROM taken t ORDER BY t.ord;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        EXIT WHEN v_got = pg_catalog.cardinality(v_tids);
        -- The rows left at their ctids are the ones at max_attempts (the
        -- updated ones moved): dead-letter them, then fill their places.
        FOR v_dead IN SELECT m.p_key, m.p_kind FROM pyqueue_message m
                       WHERE m.ctid = ANY (v_tids) ORDER BY m.priority DESC, m.scheduled_at, m.id LOOP
            PERFORM pyqueue__dead_letter(in_queue, v_dead.p_key::text, v_dead.p_kind::text,
                                         pg_catalog.clock_timestamp());
        END LOOP;
        v_left := v_left - v_got;
    END LOOP;
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
-- Caller must hold the row lock on the message.
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

-- pyqueue__give_back: queue_rollback and queue_fail. When in_token still
-- holds the reservation: with in_set_error, last_error becomes in_error (cut
-- to 2000 characters); then the message is eligible again after in_delay
-- (NULL = 0) and 'retry' is returned, or, when it has had max_attempts
-- deliveries, it goes to the dead-letter queue ('dead_lettered') or is
-- dropped when the queue has none ('dropped'). NULL when the token no longer
-- holds. Locks the message row (and the queue row when dead-lettering).
CREATE OR REPLACE FUNCTION pyqueue__give_back(in_queue text, in_key text, in_kind text, in_token text,
                                              in_delay interval, in_set_error boolean, in_error text)
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
    IF in_set_error THEN
        UPDATE pyqueue_message
           SET last_error = pg_catalog.left(in_error, 2000)
         WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind;
    END IF;
    IF v_attempts >= v_queue.max_attempts THEN
        PERFORM pyqueue__dead_letter(v_queue, in_key, in_kind, v_now);
        RETURN CASE WHEN v_queue.dead_letter_queue IS NULL THEN 'dropped' ELSE 'dead_lettered' END;
    END IF;
    UPDATE pyqueue_message
       SET scheduled_at = v_now + coalesce(in_delay, interval '0'),
           reserve_token = NULL,
           reserved_by = NULL
     WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind;
    IF coalesce(in_delay, interval '0') <= interval '0' THEN
        PERFORM pyqueue__notify(in_queue);  -- wakeup: ready again now (e.g. handed back at shutdown)
    END IF;
    RETURN 'retry';
END;
$$;

-- ---- for wakeups ----

-- pyqueue__channel: the NOTIFY channel of a queue, 'pyqueue_' + md5 of its
-- name (40 characters: a queue name reaches 128 characters, a channel name
-- is an identifier of at most 63 bytes). No lookup, no locks.
CREATE OR REPLACE FUNCTION pyqueue__channel(in_queue text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'pyqueue_' || pg_catalog.md5(in_queue) $$;

-- pyqueue__notify: sends the wakeup of a queue (NOTIFY on its channel, the
-- queue name as payload), throttled to at most one per notify_window per
-- queue (pyqueue_notify; default 50 ms, 0 = every statement). NOTIFY is
-- delivered when the caller's transaction commits, and not at all when it
-- rolls back; PostgreSQL also folds identical notifications of one
-- transaction into one. Called once per push statement, never per row.
-- Locks: reads the queue's pyqueue_notify row without a lock; only when the
-- window has elapsed does it claim the row (FOR NO KEY UPDATE SKIP LOCKED,
-- never waiting: if another open transaction holds it, it notifies anyway).
-- The first wakeup of a queue inserts its row (ON CONFLICT DO NOTHING).
CREATE OR REPLACE FUNCTION pyqueue__notify(in_queue text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_window interval;
    v_last   timestamptz;
BEGIN
    SELECT n.notify_window, n.last_notified_at INTO v_window, v_last
      FROM pyqueue_notify n
     WHERE n.queue_name::text = in_queue;
    IF NOT FOUND THEN
        INSERT INTO pyqueue_notify (queue_name, last_notified_at) VALUES (in_queue, v_now)
        ON CONFLICT (queue_name) DO NOTHING;
    ELSIF v_window > interval '0' THEN
        IF v_last > v_now - v_window THEN
            RETURN;  -- a wakeup of this queue went out less than a window ago
        END IF;
        PERFORM 1 FROM pyqueue_notify n WHERE n.queue_name::text = in_queue FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE pyqueue_notify SET last_notified_at = v_now WHERE queue_name::text = in_queue;
        END IF;
    END IF;
    PERFORM pg_catalog.pg_notify(pyqueue__channel(in_queue), in_queue);
END;
$$;

-- ---- for history and dead letters ----

-- pyqueue__archive: when the queue keeps history (history_retention set),
-- records a message that has just left the live table, with its outcome
-- ('committed', 'popped', 'dead_lettered', 'moved', 'cancelled'), its last_error, its headers and, for
-- moves and dead letters, where it went. Called by the routine that removed the message,
-- in the same transaction. Takes no locks beyond the inserted row.
CREATE OR REPLACE FUNCTION pyqueue__archive(in_queue pyqueue_queue, in_msg pyqueue_message,
                                            in_outcome text, in_to_queue text, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF in_queue.history_retention IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                 created_at, processed_at, outcome, to_queue, reserved_by, last_error, headers)
    VALUES (in_queue.queue_name, in_msg.p_key, in_msg.p_kind, in_msg.payload, in_msg.priority,
            in_msg.attempts, in_msg.created_at, in_now, in_outcome, in_to_queue, in_msg.reserved_by,
            in_msg.last_error, in_msg.headers);
END;
$$;

-- ---- for results ----

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
-- removed the message, in the same transaction. Locks the row it writes.
CREATE OR REPLACE FUNCTION pyqueue__record_result(in_queue pyqueue_queue, in_msg pyqueue_message,
                                                  in_state text, in_result jsonb, in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    IF in_queue.result_retention IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO pyqueue_result AS r (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                     progress, finished_at)
    VALUES (in_queue.queue_name, in_msg.p_key, in_msg.p_kind, in_state, in_result, in_msg.last_error,
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

-- ---- for dependencies ----

-- pyqueue__deps_left: what a message's leaving its queue does to the
-- messages that wait for it. (in_queue, in_key, in_kind) has just been
-- deleted by the caller, in this transaction, after which it called this
-- from a new statement (so that a queue_push_after that named it as a
-- parent and committed while the caller waited for the row is seen). With
-- in_ok (it succeeded: committed, popped, moved on) each waiting child's
-- count of parents left goes down, and a child whose count reaches 0 is
-- ready now, in this transaction (a wakeup sent). Otherwise (failed:
-- dead-lettered or dropped; cancelled; removed) each waiting child is
-- cancelled as queue_cancel would (removed, history outcome and result
-- 'cancelled', last_error 'parent (queue q, p_key k, p_kind t) <in_why>'), and the
-- children waiting for it after it, transitively (a work list, no
-- recursion). The message's own rows as a child go too. Each message costs
-- one read of pyqueue_dependency by its key (the one index), which finds
-- nothing for a message without parents or children. Locks: the rows it
-- deletes and updates there, each child's count row (the parents of one
-- child that end at once take turns on it, so exactly one of them sees 0),
-- then the child's message row; children in (queue, key, kind) order.
CREATE OR REPLACE FUNCTION pyqueue__deps_left(in_queue text, in_key text, in_kind text, in_ok boolean,
                                              in_why text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_qs   text[] := ARRAY[in_queue];
    v_ks   text[] := ARRAY[in_key];
    v_ts   text[] := ARRAY[in_kind];
    v_ws   text[] := ARRAY[in_why];
    v_i    integer := 1;
    v_edge record;
    v_any  boolean;
    v_left integer;
    v_msg  pyqueue_message;
    v_dest pyqueue_queue;
    v_now  timestamptz;
BEGIN
    WHILE v_i <= pg_catalog.cardinality(v_qs) LOOP
        v_any := false;
        FOR v_edge IN SELECT d.role, d.other_queue::text AS q, d.other_key::text AS k, d.other_kind::text AS t,
                             d.msg_id
                        FROM pyqueue_dependency d
                       WHERE d.queue_name::text = v_qs[v_i] AND d.p_key::text = v_ks[v_i]
                         AND d.p_kind::text = v_ts[v_i]
                       ORDER BY d.role, d.other_queue, d.other_key, d.other_kind LOOP
            v_any := true;
            CONTINUE WHEN v_edge.role <> 'c';
            IF v_i = 1 AND in_ok THEN
                UPDATE pyqueue_dependency w SET n = w.n - 1
                 WHERE w.queue_name::text = v_edge.q AND w.p_key::text = v_edge.k AND w.p_kind::text = v_edge.t
                   AND w.role = 'w' AND w.msg_id = v_edge.msg_id
                RETURNING w.n INTO v_left;
                IF FOUND AND v_left <= 0 THEN
                    DELETE FROM pyqueue_dependency w
                     WHERE w.queue_name::text = v_edge.q AND w.p_key::text = v_edge.k AND w.p_kind::text = v_edge.t
                       AND w.role = 'w';
                    v_now := pg_catalog.clock_timestamp();
                    UPDATE pyqueue_message m SET scheduled_at = v_now, scheduled_at_initially = v_now
                     WHERE m.queue_name::text = v_edge.q AND m.p_key::text = v_edge.k AND m.p_kind::text = v_edge.t
                       AND m.id = v_edge.msg_id AND m.scheduled_at = pyqueue__blocked_at();
                    IF FOUND THEN
                        PERFORM pyqueue__notify(v_edge.q);
                    END IF;
                END IF;
            ELSE
                DELETE FROM pyqueue_message m
                 WHERE m.queue_name::text = v_edge.q AND m.p_key::text = v_edge.k AND m.p_kind::text = v_edge.t
                   AND m.id = v_edge.msg_id AND m.scheduled_at = pyqueue__blocked_at()
                RETURNING * INTO v_msg;
                IF FOUND THEN
                    v_msg.last_error := pg_catalog.left(pg_catalog.format('parent (queue %s, p_key %s, p_kind %s) %s', v_qs[v_i], v_ks[v_i],
                                                                          v_ts[v_i], v_ws[v_i]), 2000);
                    v_dest := pyqueue__queue(v_edge.q);
                    v_now := pg_catalog.clock_timestamp();
                    PERFORM pyqueue__archive(v_dest, v_msg, 'cancelled', NULL, v_now);
                    PERFORM pyqueue__record_result(v_dest, v_msg, 'cancelled', NULL, v_now);
                    v_qs := v_qs || v_edge.q;
                    v_ks := v_ks || v_edge.k;
                    v_ts := v_ts || v_edge.t;
                    v_ws := v_ws || 'was cancelled'::text;
                END IF;
            END IF;
        END LOOP;
        IF v_any THEN
            DELETE FROM pyqueue_dependency d
             WHERE d.queue_name::text = v_qs[v_i] AND d.p_key::text = v_ks[v_i] AND d.p_kind::text = v_ts[v_i];
        END IF;
        v_i := v_i + 1;
    END LOOP;
END;
$$;

-- pyqueue__json_value: in_value, or NULL for a JSON null: a result or a
-- progress of JSON null is stored as SQL NULL (as MySQL stores it). Inlined
-- into the expression that calls it. No locks.
CREATE OR REPLACE FUNCTION pyqueue__json_value(in_value jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN pg_catalog.jsonb_typeof(in_value) = 'null'::text THEN NULL ELSE in_value END $$;

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

-- ---- for limits ----

-- pyqueue__slot_held: true when a slot's holder (message in_id with key
-- in_key, delivery in_attempts) is still that live reservation at in_now.
-- Reads without locks (the caller holds the slot's lock).
CREATE OR REPLACE FUNCTION pyqueue__slot_held(in_queue text, in_kind text, in_key text, in_id bigint,
                                              in_attempts integer, in_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN in_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM pyqueue_message m
                    WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key
                      AND m.p_kind::text = in_kind AND m.id = in_id AND m.attempts = in_attempts
                      AND m.reserve_token IS NOT NULL AND m.scheduled_at > in_now);
END;
$$;

-- pyqueue__limit_claim: takes a free slot of (in_queue, in_kind) for the
-- message in_id about to be reserved for the (in_attempts + 1)-th time; false
-- when every slot is busy. in_taken: messages admitted earlier in the same
-- lock pass (their reservation is not written yet, so their slots look free).
-- Slots are locked FOR UPDATE SKIP LOCKED (a slot another reserver is taking
-- counts as busy) and the holder is checked by a statement that starts after
-- the lock is held: under READ COMMITTED it sees the latest committed state;
-- under REPEATABLE READ a slot changed since the snapshot raises 40001.
-- Slots numbered above the capacity hold reservations made before the limit
-- was lowered: a free slot goes to such a live holder first (the dead ones
-- are deleted), and while one of them is locked by another transaction the
-- free slot counts as busy, so never more than the capacity are held.
-- Never waits for a lock.
CREATE OR REPLACE FUNCTION pyqueue__limit_claim(in_queue text, in_kind text, in_id bigint, in_key text,
                                                in_attempts integer, in_now timestamptz, in_taken bigint[])
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_capacity integer;
    v_slot     record;
    v_extra    record;
    v_free     boolean;
BEGIN
    SELECT l.capacity INTO v_capacity
      FROM pyqueue_limit l
     WHERE l.queue_name::text = in_queue AND l.p_kind::text = in_kind;
    FOR v_slot IN
        SELECT s.slot_no, s.msg_id, s.msg_key, s.msg_attempts
          FROM pyqueue_limit_slot s
         WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no <= v_capacity
         ORDER BY s.slot_no
           FOR UPDATE SKIP LOCKED
    LOOP
        v_free := v_slot.msg_id IS NULL
                  OR (v_slot.msg_id <> ALL (in_taken)
                      AND NOT pyqueue__slot_held(in_queue, in_kind, v_slot.msg_key::text, v_slot.msg_id,
                                                 v_slot.msg_attempts, in_now));
        IF v_free THEN
            FOR v_extra IN
                SELECT s.slot_no, s.msg_id, s.msg_key, s.msg_attempts
                  FROM pyqueue_limit_slot s
                 WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no > v_capacity
                 ORDER BY s.slot_no
                   FOR UPDATE SKIP LOCKED
            LOOP
                DELETE FROM pyqueue_limit_slot
                 WHERE queue_name::text = in_queue AND p_kind::text = in_kind AND slot_no = v_extra.slot_no;
                IF pyqueue__slot_held(in_queue, in_kind, v_extra.msg_key::text, v_extra.msg_id,
                                      v_extra.msg_attempts, in_now) THEN
                    UPDATE pyqueue_limit_slot
                       SET msg_id = v_extra.msg_id, msg_key = v_extra.msg_key,
                           msg_attempts = v_extra.msg_attempts
                     WHERE queue_name::text = in_queue AND p_kind::text = in_kind AND slot_no = v_slot.slot_no;
                    v_free := false;
                    EXIT;
                END IF;
            END LOOP;
            IF v_free AND EXISTS (SELECT 1 FROM pyqueue_limit_slot s
                                   WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
                                     AND s.slot_no > v_capacity) THEN
                v_free := false;  -- another transaction holds one of them: count it as a holder
            END IF;
        END IF;
        IF v_free THEN
            UPDATE pyqueue_limit_slot
               SET msg_id = in_id, msg_key = in_key, msg_attempts = in_attempts + 1
             WHERE queue_name::text = in_queue AND p_kind::text = in_kind AND slot_no = v_slot.slot_no;
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END;
$$;

-- pyqueue__rate_slot: a free slot of the rate (in_queue, in_kind; '' = the
-- queue-wide rate) for a reservation at in_at: one whose used_at is NULL or
-- at least in_per before in_at; NULL when there is none. Locks it FOR UPDATE
-- SKIP LOCKED (a slot another reserver holds counts as busy: never waits),
-- and writes nothing: the caller sets used_at once the message is admitted
-- (a slot found but not used stays as it was, locked until the caller's
-- transaction ends, and free for the caller's next candidate). Under READ
-- COMMITTED the lock re-reads a slot that another transaction changed and
-- committed since the statement's snapshot and checks it again (a slot just
-- used is no longer free); under REPEATABLE READ such a slot raises 40001.
CREATE OR REPLACE FUNCTION pyqueue__rate_slot(in_queue text, in_kind text, in_per interval, in_at timestamptz)
RETURNS integer
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_slot integer;
BEGIN
    SELECT s.slot_no INTO v_slot
      FROM pyqueue_rate_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
       AND (s.used_at IS NULL OR s.used_at <= in_at - in_per)
     ORDER BY s.slot_no
     LIMIT 1
       FOR UPDATE SKIP LOCKED;
    RETURN v_slot;
END;
$$;

-- pyqueue__limited_tids: pyqueue__ready_tids for a queue that has
-- concurrency limits or rate limits. Same order, locking and result (the
-- ctids of the locked rows); a candidate of a limited kind is admitted
-- only with a slot, and a kind found full is skipped for the rest of the
-- pass, except for candidates that have had max_attempts deliveries: they
-- are admitted without a slot (the reserve dead-letters them, it delivers
-- nothing), so that a full kind cannot hold an exhausted message back.
-- Rates: a candidate of a kind with a rate needs a free unit of it (and of
-- the queue-wide rate, when the queue has one: with none free the pass
-- ends). The pass's reservation time o_at is the clock read at its first
-- rate unit (after the first row lock gave the transaction its id); each
-- unit taken gets used_at = o_at, one write per rate per admitted message,
-- and only once every unit and slot the message needs was found: a rate
-- unit found for a candidate that another rate or its concurrency limit
-- then holds back is not written (it stays free for the next candidate).
-- A held-back candidate stays as it is (ready, its attempts and place kept).
-- Unlike pyqueue__ready_tids it visits every priority down to the last one
-- it takes rows from (limits keep their slot bookkeeping per candidate).
-- pyqueue__ready_tids read where it starts: the queue's top priority
-- (in_top) and its bound, (in_from, in_from_id), where each priority's
-- range starts.
CREATE OR REPLACE FUNCTION pyqueue__limited_tids(in_queue text, in_now timestamptz, in_n integer,
                                                 in_kinds text[], in_from timestamptz, in_from_id bigint,
                                                 in_top integer, OUT o_tids tid[], OUT o_at timestamptz)
LANGUAGE plpgsql
AS $$
DECLARE
    v_limited  text[];
    v_rated    text[];     -- the kinds with a rate ('' = the queue-wide one) ...
    v_pers     interval[]; -- ... and their per
    v_wide     interval;   -- per of the queue-wide rate (NULL: none)
    v_i        integer;
    v_kslot    integer;
    v_wslot    integer;
    v_stop     boolean := false;
    v_full     text[] := '{}';
    v_seen     bigint[] := '{}';
    v_taken    bigint[] := '{}';
    v_max      integer;
    v_priority integer;
    v_left     integer := in_n;
    v_skipped  boolean;
    r          record;
BEGIN
    SELECT coalesce(pg_catalog.array_agg(l.p_kind::text), '{}') INTO v_limited
      FROM pyqueue_limit l WHERE l.queue_name::text = in_queue;
    SELECT coalesce(pg_catalog.array_agg(t.p_kind::text ORDER BY t.p_kind::text), '{}'),
           coalesce(pg_catalog.array_agg(t.per ORDER BY t.p_kind::text), '{}')
      INTO v_rated, v_pers
      FROM pyqueue_rate t WHERE t.queue_name::text = in_queue;
    v_i := pg_catalog.array_position(v_rated, ''::text);
    IF v_i IS NOT NULL THEN
        v_wide := v_pers[v_i];
    END IF;
    SELECT q.max_attempts INTO v_max FROM pyqueue_queue q WHERE q.queue_name::text = in_queue;
    v_priority := in_top;
    WHILE v_priority IS NOT NULL AND v_left > 0 AND NOT v_stop LOOP
        LOOP
            v_skipped := false;
            FOR r IN
                SELECT m.ctid, m.id, m.p_key, m.p_kind, m.attempts
                  FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue
                   AND m.priority = v_priority
                   AND m.scheduled_at > '-infinity' AND (m.scheduled_at, m.id) >= (in_from, in_from_id)
                   AND (m.scheduled_at, m.id) <= (in_now, 9223372036854775807)
                   AND (in_kinds IS NULL OR m.p_kind::text = ANY (in_kinds))
                   AND (m.p_kind::text <> ALL (v_full) OR m.attempts >= v_max)
                   AND m.id <> ALL (v_seen)
                 ORDER BY m.scheduled_at, m.id
                 LIMIT v_left
                   FOR UPDATE SKIP LOCKED
            LOOP
                v_seen := pg_catalog.array_append(v_seen, r.id);
                IF r.attempts >= v_max THEN
                    NULL;  -- to be dead-lettered: needs no slot
                ELSIF r.p_kind::text = ANY (v_full) THEN
                    v_skipped := true;
                    CONTINUE;
                ELSE
                    v_i := pg_catalog.array_position(v_rated, r.p_kind::text);
                    IF (v_i IS NOT NULL OR v_wide IS NOT NULL) AND o_at IS NULL THEN
                        o_at := pg_catalog.clock_timestamp();  -- after this row's lock: the id is taken
                    END IF;
                    v_kslot := NULL;
                    v_wslot := NULL;
                    IF v_i IS NOT NULL THEN
                        v_kslot := pyqueue__rate_slot(in_queue, r.p_kind::text, v_pers[v_i], o_at);
                        IF v_kslot IS NULL THEN  -- the kind's rate is used up: the kind is full
                            v_full := pg_catalog.array_append(v_full, r.p_kind::text);
                            v_skipped := true;
                            CONTINUE;
                        END IF;
                    END IF;
                    IF v_wide IS NOT NULL THEN
                        v_wslot := pyqueue__rate_slot(in_queue, '', v_wide, o_at);
                        IF v_wslot IS NULL THEN  -- the queue's rate is used up: the pass ends
                            v_stop := true;
                            EXIT;
                        END IF;
                    END IF;
                    IF r.p_kind::text = ANY (v_limited)
                       AND NOT pyqueue__limit_claim(in_queue, r.p_kind::text, r.id, r.p_key::text, r.attempts,
                                                    in_now, v_taken) THEN
                        v_full := pg_catalog.array_append(v_full, r.p_kind::text);
                        v_skipped := true;
                        CONTINUE;
                    END IF;
                    IF v_kslot IS NOT NULL THEN
                        UPDATE pyqueue_rate_slot s SET used_at = o_at
                         WHERE s.queue_name::text = in_queue AND s.p_kind::text = r.p_kind::text
                           AND s.slot_no = v_kslot;
                    END IF;
                    IF v_wslot IS NOT NULL THEN
                        UPDATE pyqueue_rate_slot s SET used_at = o_at
                         WHERE s.queue_name::text = in_queue AND s.p_kind::text = ''::text AND s.slot_no = v_wslot;
                    END IF;
                    v_taken := pg_catalog.array_append(v_taken, r.id);
                END IF;
                o_tids := pg_catalog.array_append(o_tids, r.ctid);
                v_left := v_left - 1;
            END LOOP;
            EXIT WHEN NOT v_skipped OR v_left <= 0 OR v_stop;
        END LOOP;
        EXIT WHEN v_stop;
        SELECT pg_catalog.max(m.priority) INTO v_priority
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.priority < v_priority AND m.scheduled_at > '-infinity';
    END LOOP;
END;
$$;

-- pyqueue__limit_renew: called by queue_extend before it extends; true when
-- the kind has no limit or the reservation still holds its slot (the slot
-- row is then locked and touched, so a reserver cannot take it over until
-- this transaction ends, and a REPEATABLE READ reserver that saw the old
-- version gets 40001). False when the slot went to another reservation after
-- this one expired: the extend then fails.
CREATE OR REPLACE FUNCTION pyqueue__limit_renew(in_queue text, in_key text, in_kind text, in_token uuid)
RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_id       bigint;
    v_attempts integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pyqueue_limit l WHERE l.queue_name::text = in_queue AND l.p_kind::text = in_kind) THEN
        RETURN true;
    END IF;
    SELECT m.id, m.attempts INTO v_id, v_attempts
      FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind AND m.reserve_token = in_token;
    IF NOT FOUND THEN
        RETURN true;  -- the extend itself finds nothing and answers NULL
    END IF;
    UPDATE pyqueue_limit_slot
       SET msg_attempts = msg_attempts
     WHERE queue_name::text = in_queue AND p_kind::text = in_kind AND msg_id = v_id AND msg_attempts = v_attempts;
    RETURN FOUND;
END;
$$;

-- ---- for workers ----

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

-- ---- for schedules ----

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

-- pyqueue__schedule_next: called by queue_commit after it deleted a message.
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
-- pushes nothing since it is no longer the pending one).
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
    v_old  timestamptz;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    PERFORM pyqueue__check_name('p_key', in_key, 234);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF in_payload IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_payload: payload must not be NULL (use the JSON value null)'
            USING ERRCODE = '22023';
    END IF;
    v_next := pyqueue__schedule_after(in_every_s, in_cron, v_now);
    SELECT s.next_at INTO v_old FROM pyqueue_schedule s
     WHERE s.queue_name::text = in_queue AND s.p_key::text = in_key AND s.p_kind::text = in_kind FOR UPDATE;
    IF FOUND THEN
        DELETE FROM pyqueue_message
         WHERE queue_name::text = in_queue AND p_key::text = pyqueue__schedule_key(in_key, v_old) AND p_kind::text = in_kind
           AND reserve_token IS NULL;
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

-- ---- for ingest ----

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


-- ---- for groups ----

-- pyqueue__blocked_at: the scheduled_at of a message blocked behind its
-- group's head: past the end of every ready range, so that no reserve, pop
-- or wait ever visits it. Finite, and the largest time every client
-- library can read (Python's datetime.max), because queue_message and
-- queue_messages show it. Inlined by the planner as a constant.
CREATE OR REPLACE FUNCTION pyqueue__blocked_at()
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT timestamptz '9999-12-31 23:59:59.999999+00' $$;

-- pyqueue__group_settle: gives in_group of in_queue its head after a change.
-- With in_head_left the head has just left the queue (committed, popped,
-- dead-lettered, moved away, removed): the blocked message first in
-- (scheduled_at_initially, id) order, run time then push order, takes its
-- place; with none left the group's row goes. Otherwise messages have just
-- been pushed into the group, blocked: the group's row is created when
-- missing, and the first of them becomes head when the group has none, or
-- when the head was never delivered, runs later than it and can be locked
-- at once (one a reserve is taking now is not displaced); the displaced
-- head is blocked again. A message that becomes head by its own push is
-- scheduled as a message without a group: at its run time, past or future
-- (now when it had none). One that takes the place of a head that left is
-- due at its run time or now, whichever is later: it queues behind the
-- heads that are ready already, so a group with a long backlog takes its
-- turn after the others (round robin) instead of starving them. A wakeup
-- when it is ready now.
-- Locks: the group's row (created when missing), then the messages it
-- changes; a caller that deleted or inserted a message of the group holds
-- that row's lock already (messages before the group row, in every
-- routine: a reserve never takes a group row, and this function waits for
-- no head's lock). Several groups: the caller settles them in group_key
-- order.
-- A group with a group limit (pyqueue_group_limit: its own row, else the
-- queue's default) goes through pyqueue__group_settle_k instead: one probe
-- of that table, which finds nothing on a queue without group limits.
CREATE OR REPLACE FUNCTION pyqueue__group_settle(in_queue text, in_group text, in_now timestamptz,
                                                 in_head_left boolean)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_head_key  text;
    v_head_kind text;
    v_next      record;
    v_k         integer;
BEGIN
    SELECT l.k INTO v_k
      FROM pyqueue_group_limit l
     WHERE l.queue_name::text = in_queue AND (l.group_key::text = in_group OR l.group_key::text = ''::text)
     ORDER BY l.group_key::text = ''::text
     LIMIT 1;
    IF FOUND THEN
        PERFORM pyqueue__group_settle_k(in_queue, in_group, in_now, in_head_left, v_k);
        RETURN;
    END IF;
    IF in_head_left THEN
        PERFORM 1 FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group
           FOR UPDATE;
    ELSE
        INSERT INTO pyqueue_group AS g (queue_name, group_key) VALUES (in_queue, in_group)
        ON CONFLICT (queue_name, group_key) DO UPDATE SET head_key = g.head_key
        RETURNING g.head_key, g.head_kind INTO v_head_key, v_head_kind;
        IF v_head_key IS NOT NULL AND NOT EXISTS (
               SELECT 1 FROM pyqueue_message m
                WHERE m.queue_name::text = in_queue AND m.p_key::text = v_head_key
                  AND m.p_kind::text = v_head_kind AND m.attempts = 0 AND m.reserve_token IS NULL) THEN
            RETURN;  -- the head has been delivered: it keeps its place
        END IF;
    END IF;
    LOOP
        SELECT m.p_key, m.p_kind, m.scheduled_at_initially AS at INTO v_next
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
           AND m.scheduled_at = pyqueue__blocked_at()
         ORDER BY m.scheduled_at_initially, m.id
         LIMIT 1
           FOR UPDATE;
        -- Nothing found can also mean that the row this read waited for was
        -- deleted meanwhile (READ COMMITTED): look again with a new snapshot.
        EXIT WHEN FOUND OR NOT EXISTS (
            SELECT 1 FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
               AND m.scheduled_at = pyqueue__blocked_at());
    END LOOP;
    IF v_next.p_key IS NULL THEN
        IF v_head_key IS NULL THEN
            DELETE FROM pyqueue_group g WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group;
        END IF;
        RETURN;
    END IF;
    IF v_head_key IS NOT NULL THEN
        PERFORM 1 FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.p_key::text = v_head_key AND m.p_kind::text = v_head_kind
           AND m.attempts = 0 AND m.reserve_token IS NULL AND m.scheduled_at_initially > v_next.at
           FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        UPDATE pyqueue_message m SET scheduled_at = pyqueue__blocked_at()
         WHERE m.queue_name::text = in_queue AND m.p_key::text = v_head_key AND m.p_kind::text = v_head_kind;
    END IF;
    IF NOT in_head_left THEN
        -- at its run time, which may lie in the past (push_replace moves a blocked message's): it lowers
        -- the queue's bound, whose lowering by that write was folded in while the message was blocked
        PERFORM pyqueue__ready_from_lower(in_queue, v_next.at, in_now);
    END IF;
    UPDATE pyqueue_message m
       SET scheduled_at = CASE WHEN in_head_left THEN greatest(v_next.at, in_now) ELSE v_next.at END
     WHERE m.queue_name::text = in_queue AND m.p_key::text = v_next.p_key::text AND m.p_kind::text = v_next.p_kind::text;
    UPDATE pyqueue_group g SET head_key = v_next.p_key, head_kind = v_next.p_kind
     WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group;
    -- wakeup: the new head is ready now, or due later and maybe the earliest (waiters re-time to it)
    PERFORM pyqueue__notify(in_queue);
END;
$$;

-- pyqueue__group_settle_k: pyqueue__group_settle for a group whose limit is
-- in_k (up to in_k heads live at once: ready, delayed or reserved; the
-- others blocked). Under the group's row lock (created when missing, on a
-- push) it counts the group's live messages (pyqueue_message_group_live_idx:
-- a probe of at most a few entries) and, while fewer than in_k are live,
-- makes the first blocked one, in (scheduled_at_initially, id) order, a
-- head: due at its run time or now, whichever is later, after a head left
-- (or the limit was raised), so that it queues behind the heads that are
-- ready already (round robin); at its run time when its own push makes it
-- one. A push into a full group puts its message before the latest head
-- that runs later and was never delivered (and can be locked at once), as
-- with one head. With no head left and nothing blocked the group's row goes;
-- else it names the first head. A wakeup when a new head is ready now.
-- Exact under concurrency: every change of a group's heads happens under
-- its row lock; a head that another transaction is taking out (commit,
-- move, dead letter, ...) and has not committed is still counted, so the
-- count is never too low, and that transaction settles the group after us.
-- Lowering the limit revokes nothing: no head is added until fewer than
-- in_k are live. Locks: the group's row, then the messages it changes.
CREATE OR REPLACE FUNCTION pyqueue__group_settle_k(in_queue text, in_group text, in_now timestamptz,
                                                   in_head_left boolean, in_k integer)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_live      integer;
    v_next      record;
    v_last      record;
    v_displaced boolean := false;
    v_notify    boolean := false;
BEGIN
    IF in_head_left THEN
        PERFORM 1 FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group
           FOR UPDATE;
    ELSE
        INSERT INTO pyqueue_group AS g (queue_name, group_key) VALUES (in_queue, in_group)
        ON CONFLICT (queue_name, group_key) DO UPDATE SET head_key = g.head_key;
    END IF;
    SELECT pg_catalog.count(*)::integer INTO v_live
      FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
       AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00';
    LOOP
        EXIT WHEN in_head_left AND v_live >= in_k;
        LOOP
            SELECT m.p_key, m.p_kind, m.scheduled_at_initially AS at, m.id INTO v_next
              FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
               AND m.scheduled_at = pyqueue__blocked_at()
             ORDER BY m.scheduled_at_initially, m.id
             LIMIT 1
               FOR UPDATE;
            -- Nothing found can also mean that the row this read waited for was
            -- deleted meanwhile (READ COMMITTED): look again with a new snapshot.
            EXIT WHEN FOUND OR NOT EXISTS (
                SELECT 1 FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
                   AND m.scheduled_at = pyqueue__blocked_at());
        END LOOP;
        EXIT WHEN v_next.p_key IS NULL;
        IF v_live >= in_k THEN  -- a push into a full group
            EXIT WHEN v_displaced;
            SELECT m.p_key, m.p_kind INTO v_last
              FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
               AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00'
               AND m.attempts = 0 AND m.reserve_token IS NULL AND m.scheduled_at_initially > v_next.at
             ORDER BY m.scheduled_at_initially DESC, m.id DESC
             LIMIT 1
               FOR UPDATE SKIP LOCKED;
            EXIT WHEN NOT FOUND;
            UPDATE pyqueue_message m SET scheduled_at = pyqueue__blocked_at()
             WHERE m.queue_name::text = in_queue AND m.p_key::text = v_last.p_key::text
               AND m.p_kind::text = v_last.p_kind::text;
            v_live := v_live - 1;
            v_displaced := true;
        END IF;
        IF NOT in_head_left THEN
            -- at its run time, which may lie in the past (see pyqueue__group_settle)
            PERFORM pyqueue__ready_from_lower(in_queue, v_next.at, in_now);
        END IF;
        UPDATE pyqueue_message m
           SET scheduled_at = CASE WHEN in_head_left THEN greatest(v_next.at, in_now) ELSE v_next.at END
         WHERE m.queue_name::text = in_queue AND m.p_key::text = v_next.p_key::text
           AND m.p_kind::text = v_next.p_kind::text;
        v_live := v_live + 1;
        v_notify := true;  -- a new head: ready now, or due later (waiters re-time to it)
    END LOOP;
    IF v_live = 0 THEN
        DELETE FROM pyqueue_group g WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group;
    ELSE
        UPDATE pyqueue_group g
           SET (head_key, head_kind) = (SELECT m.p_key, m.p_kind
                                          FROM pyqueue_message m
                                         WHERE m.queue_name::text = in_queue AND m.group_key::text = in_group
                                           AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00'
                                         ORDER BY m.scheduled_at_initially, m.id
                                         LIMIT 1)
         WHERE g.queue_name::text = in_queue AND g.group_key::text = in_group;
    END IF;
    IF v_notify THEN
        PERFORM pyqueue__notify(in_queue);  -- wakeup: a new head is ready now or due later
    END IF;
END;
$$;

-- pyqueue__groups_settle: pyqueue__group_settle(in_head_left) for every
-- group of in_groups (NULL elements and repeats ignored), in group_key
-- order. For the routines that remove many messages at once.
CREATE OR REPLACE FUNCTION pyqueue__groups_settle(in_queue text, in_groups text[], in_now timestamptz)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
    v_group text;
BEGIN
    FOR v_group IN SELECT DISTINCT g FROM pg_catalog.unnest(in_groups) AS u (g) WHERE g IS NOT NULL ORDER BY g LOOP
        PERFORM pyqueue__group_settle(in_queue, v_group, in_now, true);
    END LOOP;
END;
$$;

-- ---- for topics ----

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


-- ==== queues ====
-- Create a queue or change its settings, read them back, drop it, pause and
-- resume it, count its messages.

-- queue_create: creates the queue (NULL = the default: 30 s, 10 attempts,
-- no dead-letter queue, no history) or changes the settings given (not NULL)
-- of an existing one; a NULL leaves that setting as it is (queue_reset_setting
-- sets one back to its default). A visibility_timeout above the queue's
-- max_reservation (12 hours for a new queue; queue_set_max_reservation) is
-- refused. Locks the queue row.
CREATE OR REPLACE FUNCTION queue_create(
    in_queue              text,
    in_visibility_timeout interval DEFAULT NULL,
    in_max_attempts       integer  DEFAULT NULL,
    in_dead_letter_queue  text     DEFAULT NULL,
    in_history_retention  interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_new boolean;
    v_max interval;
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
    IF in_visibility_timeout IS NOT NULL THEN
        SELECT q.max_reservation INTO v_max FROM pyqueue_queue q WHERE q.queue_name::text = in_queue FOR UPDATE;
        v_max := coalesce(v_max, interval '12 hours');  -- a new queue: the default
        IF in_visibility_timeout > v_max THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: visibility_timeout is longer than the queue''s max_reservation (%)',
                            v_max
                USING ERRCODE = '22023';
        END IF;
    END IF;
    -- (max_reservation: the existing row's, which the update keeps, so that
    -- the row proposed for the insert passes the table's check as well)
    INSERT INTO pyqueue_queue AS q
           (queue_name, visibility_timeout, max_attempts, dead_letter_queue, history_retention, max_reservation)
    VALUES (in_queue,
            coalesce(in_visibility_timeout, interval '30 seconds'),
            coalesce(in_max_attempts, 10),
            in_dead_letter_queue,
            in_history_retention,
            coalesce(v_max, interval '12 hours'))
    ON CONFLICT (queue_name) DO UPDATE
       SET visibility_timeout = coalesce(in_visibility_timeout, q.visibility_timeout),
           max_attempts       = coalesce(in_max_attempts, q.max_attempts),
           dead_letter_queue  = coalesce(in_dead_letter_queue, q.dead_letter_queue),
           history_retention  = coalesce(in_history_retention, q.history_retention)
    RETURNING (q.xmax = 0) INTO v_new;
    IF v_new THEN
        INSERT INTO pyqueue_ready_from AS r (queue_name) VALUES (in_queue)
        ON CONFLICT (queue_name) DO UPDATE
           SET ready_from = '-infinity', ready_from_id = NULL, next_from = NULL, next_xid = NULL,
               moved_at = '-infinity', top_priority = NULL;
        DELETE FROM pyqueue_ready_lower l WHERE l.queue_name::text = in_queue;
        -- A new queue starts empty: messages left under this name by a drop
        -- that could not see them (one run inside a REPEATABLE READ
        -- transaction, see queue_drop) go now, before any push can reach it.
        DELETE FROM pyqueue_message m WHERE m.queue_name::text = in_queue;
    END IF;
END;
$$;

-- queue_reset_setting: sets one setting of a queue back to its default:
-- 'visibility_timeout' (30 s), 'max_attempts' (10), 'dead_letter_queue'
-- (none), 'history_retention' (none, keep no history), 'max_reservation'
-- (12 hours), 'max_payload' (1048576 bytes) or 'result_retention' (none, keep
-- no results: see queue_set_result_retention). Refused (invalid_argument)
-- when the default visibility_timeout would be above the queue's
-- max_reservation, or the default max_reservation below its
-- visibility_timeout. Locks the queue row.
CREATE OR REPLACE FUNCTION queue_reset_setting(in_queue text, in_setting text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_queue pyqueue_queue;
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    IF in_setting IS NULL OR in_setting NOT IN ('visibility_timeout', 'max_attempts', 'dead_letter_queue',
                                                'history_retention', 'max_reservation', 'max_payload',
                                                'result_retention') THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: setting must be one of visibility_timeout, max_attempts, dead_letter_queue, history_retention, max_reservation, max_payload, result_retention'
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO v_queue FROM pyqueue_queue q WHERE q.queue_name::text = in_queue FOR UPDATE;
    IF FOUND AND in_setting = 'visibility_timeout' AND v_queue.max_reservation < interval '30 seconds' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: the default visibility_timeout (30 s) is longer than the queue''s max_reservation'
            USING ERRCODE = '22023';
    END IF;
    IF FOUND AND in_setting = 'max_reservation' AND v_queue.visibility_timeout > interval '12 hours' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: the default max_reservation (12 hours) is shorter than the queue''s visibility_timeout'
            USING ERRCODE = '22023';
    END IF;
    UPDATE pyqueue_queue q
       SET visibility_timeout = CASE WHEN in_setting = 'visibility_timeout' THEN interval '30 seconds'
                                     ELSE q.visibility_timeout END,
           max_attempts       = CASE WHEN in_setting = 'max_attempts' THEN 10 ELSE q.max_attempts END,
           dead_letter_queue  = CASE WHEN in_setting = 'dead_letter_queue' THEN NULL
                                     ELSE q.dead_letter_queue END,
           history_retention  = CASE WHEN in_setting = 'history_retention' THEN NULL
                                     ELSE q.history_retention END,
           max_reservation    = CASE WHEN in_setting = 'max_reservation' THEN interval '12 hours'
                                     ELSE q.max_reservation END,
           max_payload        = CASE WHEN in_setting = 'max_payload' THEN 1048576 ELSE q.max_payload END,
           result_retention   = CASE WHEN in_setting = 'result_retention' THEN NULL
                                     ELSE q.result_retention END
     WHERE q.queue_name::text = in_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue USING ERRCODE = 'P0002';
    END IF;
    IF in_setting = 'result_retention'
       AND EXISTS (SELECT 1 FROM pyqueue_dependency d WHERE d.queue_name::text = in_queue) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: messages of queue "%" have parents or children: it keeps results until they are gone', in_queue
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- queue_settings: the settings of a queue (every queue when NULL), by name:
-- visibility_timeout, max_attempts, dead_letter_queue, history_retention,
-- paused, notify_window (the wakeup throttle; 50 ms unless set),
-- max_reservation, max_payload (bytes) and result_retention. Reads without
-- locks. Installs of earlier versions returned fewer columns (up to
-- notify_window, or up to max_payload): that function is dropped (a
-- function cannot change its result columns in place), and with it its
-- grants (pyqueue-sql grant gives them again).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                WHERE p.oid = pg_catalog.to_regprocedure('queue_settings(text)')
                  AND NOT ('result_retention' OPERATOR(pg_catalog.=) ANY (p.proargnames))) THEN
        DROP FUNCTION queue_settings(text);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION queue_settings(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, visibility_timeout interval, max_attempts integer, dead_letter_queue text,
               history_retention interval, paused boolean, notify_window interval,
               max_reservation interval, max_payload integer, result_retention interval)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT q.queue_name::text, q.visibility_timeout, q.max_attempts, q.dead_letter_queue::text,
               q.history_retention, q.paused, coalesce(n.notify_window, interval '50 milliseconds'),
               q.max_reservation, q.max_payload, q.result_retention
          FROM pyqueue_queue q
          LEFT JOIN pyqueue_notify n ON n.queue_name::text = q.queue_name::text
         WHERE in_queue IS NULL OR q.queue_name::text = in_queue
         ORDER BY q.queue_name::text;
END;
$$;

-- queue_set_max_reservation: the longest reservation timeout a caller may ask
-- for in the queue (queue_reserve, queue_commit_reserve, queue_extend; above
-- it they are refused with invalid_argument); NULL = the default, 12 hours.
-- Must be above zero, at most 100 years and not below the queue's
-- visibility_timeout. Reservations already made keep their end. Locks the
-- queue row.
CREATE OR REPLACE FUNCTION queue_set_max_reservation(in_queue text, in_max_reservation interval)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_new        interval := coalesce(in_max_reservation, interval '12 hours');
    v_visibility interval;
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    PERFORM pyqueue__check_duration('max_reservation', in_max_reservation, true);
    SELECT q.visibility_timeout INTO v_visibility FROM pyqueue_queue q WHERE q.queue_name::text = in_queue FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue USING ERRCODE = 'P0002';
    END IF;
    IF v_new < v_visibility THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: max_reservation must not be below the queue''s visibility_timeout'
            USING ERRCODE = '22023';
    END IF;
    UPDATE pyqueue_queue SET max_reservation = v_new WHERE queue_name::text = in_queue;
END;
$$;

-- queue_set_max_payload: the largest payload, in bytes of its JSON text, that
-- a producer may write into the queue (push, batch, replace, grouped,
-- publish, move with a new payload, queue_ingest); NULL = the default,
-- 1048576 (1 MiB); 1 to 268435456 (256 MiB). Messages already in the queue
-- stay. Locks the queue row.
CREATE OR REPLACE FUNCTION queue_set_max_payload(in_queue text, in_max_payload integer)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    IF in_max_payload < 1 OR in_max_payload > 268435456 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: max_payload must be a whole number from 1 to 268435456'
            USING ERRCODE = '22023';
    END IF;
    UPDATE pyqueue_queue SET max_payload = coalesce(in_max_payload, 1048576) WHERE queue_name::text = in_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue USING ERRCODE = 'P0002';
    END IF;
END;
$$;

-- queue_drop: deletes the queue and all its messages. Refuses while another
-- queue names it as dead-letter queue. Locks the queue's messages first (key
-- order), then the queue row: the order in which a commit, rollback or
-- reserve that dead-letters takes them (message, then queue row), so that a
-- drop racing them waits instead of deadlocking. Then it waits for every
-- transaction writing into the queue (pyqueue__queue: the queue's advisory
-- lock, taken here exclusively; or a key-share lock on the queue row, which
-- deleting it waits for); the messages are deleted after that, by a
-- statement that (READ COMMITTED) sees what those writers wrote. Inside a REPEATABLE READ or SERIALIZABLE transaction it cannot
-- see messages pushed after its snapshot: they stay in the table, in no queue
-- (no routine reaches them), until queue_create makes a queue of that name
-- again and deletes them.
CREATE OR REPLACE FUNCTION queue_drop(in_queue text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_user text;
    v_one  record;
BEGIN
    PERFORM pyqueue__queue(in_queue);
    SELECT q.queue_name::text INTO v_user FROM pyqueue_queue q WHERE q.dead_letter_queue::text = in_queue LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: queue "%" is the dead_letter_queue of "%"', in_queue, v_user
            USING ERRCODE = '22023';
    END IF;
    PERFORM 1 FROM pyqueue_message m
     WHERE m.queue_name::text = in_queue
     ORDER BY m.p_key, m.p_kind
       FOR UPDATE;
    -- waits for every transaction that is writing into the queue (the lock
    -- pyqueue__queue shares at READ COMMITTED; deleting the row waits for
    -- the row locks it takes otherwise)
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('pyqueue-sql queue'), pg_catalog.hashtext(in_queue));
    DELETE FROM pyqueue_queue WHERE queue_name::text = in_queue;
    DELETE FROM pyqueue_message m WHERE m.queue_name::text = in_queue;
    -- its messages' children elsewhere are cancelled, their rows as children go
    FOR v_one IN SELECT DISTINCT d.p_key::text AS k, d.p_kind::text AS kd FROM pyqueue_dependency d
                  WHERE d.queue_name::text = in_queue ORDER BY 1, 2 LOOP
        PERFORM pyqueue__deps_left(in_queue, v_one.k, v_one.kd, false, 'was dropped with its queue');
    END LOOP;
END;
$$;

-- queue_pause: pop and reserve hand out nothing until queue_resume.
-- Pushes, commits and rollbacks still work.
-- Locks the queue row.
CREATE OR REPLACE FUNCTION queue_pause(in_queue text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    UPDATE pyqueue_queue SET paused = true WHERE queue_name::text = in_queue;
END;
$$;

-- queue_resume: undoes queue_pause. Locks the queue row.
CREATE OR REPLACE FUNCTION queue_resume(in_queue text)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    UPDATE pyqueue_queue SET paused = false WHERE queue_name::text = in_queue;
    PERFORM pyqueue__notify(in_queue);  -- wakeup: its ready messages may be reserved again
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
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT q.queue_name::text,
               pg_catalog.count(*) FILTER (WHERE m.scheduled_at <= v_now),
               pg_catalog.count(*) FILTER (WHERE m.scheduled_at > v_now AND m.reserve_token IS NULL),
               pg_catalog.count(*) FILTER (WHERE m.scheduled_at > v_now AND m.reserve_token IS NOT NULL),
               q.dead_count,
               extract(epoch FROM v_now - pg_catalog.min(m.scheduled_at) FILTER (WHERE m.scheduled_at <= v_now))::double precision,
               q.paused
          FROM pyqueue_queue q
          LEFT JOIN pyqueue_message m ON m.queue_name::text = q.queue_name::text
         WHERE in_queue IS NULL OR q.queue_name::text = in_queue
         GROUP BY q.queue_name, q.dead_count, q.paused
         ORDER BY q.queue_name;
END;
$$;


-- ==== produce ====
-- Put messages in: one, many in one statement, or one that replaces a waiting
-- message with the same key (debounce). Each wakes the queue's listeners when
-- it makes a message ready now.

-- queue_push: inserts one message; false when a live message with the same
-- (queue, p_key, p_kind) exists (dedup, the existing one is untouched).
-- Refuses a p_key of a schedule's occurrence (pyqueue__occurrence_key) and
-- a payload above the queue's max_payload (pyqueue__refuse_payload: read
-- with the queue's row, compared with the payload's JSON text length).
-- Takes the queue's shared lock (pyqueue__queue; blocks only queue_drop) and the
-- unique-index entry of the new row.
-- The common case (names plainly valid, READ COMMITTED) runs no nested
-- function until it has to send a wakeup: the checks are one expression,
-- the lock and the lookup are pyqueue__queue's own statements, and the same
-- lookup reads the queue's wakeup throttle, so that a push inside the
-- window does not call pyqueue__notify only for it to read that row and
-- return. Each nested PL/pgSQL call costs a few microseconds, about a
-- quarter of the routine's server time in all (bench/README.md, "Push cost").
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
DECLARE
    v_xid xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_at  timestamptz;
    v_window interval;  -- the queue's notify_window (NULL: no throttle row yet)
    v_last   timestamptz;
    v_new    boolean;
    v_max    integer;   -- the queue's max_payload
    v_bytes  integer;
BEGIN
    IF NOT (pyqueue__bad_name(in_queue, 128) OR pyqueue__bad_name(in_key, 255) OR pyqueue__bad_name(in_kind, 128))
       AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        -- as pyqueue__queue(in_queue, true) at READ COMMITTED: the lock, then a read that sees a drop that went first
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(pg_catalog.hashtext('pyqueue-sql queue'),
                                                        pg_catalog.hashtext(in_queue));
        SELECT n.notify_window, n.last_notified_at, q.max_payload INTO v_window, v_last, v_max
          FROM pyqueue_queue q LEFT JOIN pyqueue_notify n ON n.queue_name::text = q.queue_name::text
         WHERE q.queue_name::text = in_queue;
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
    v_at := coalesce(in_run_at, v_now);
    IF v_at < v_now - interval '0.5 seconds' THEN
        PERFORM pyqueue__ready_from_lower(in_queue, v_at, v_now);  -- more than a moment in the past
    END IF;
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at)
    VALUES (in_queue, in_key, in_kind, in_payload, coalesce(in_priority, 0), v_at, v_at, v_now)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    v_new := FOUND;
    -- pyqueue__notify's own test of the window, on the row read above (v_window NULL: not read, or no row yet)
    IF v_new AND v_at <= v_now
       AND (v_window IS NULL OR v_window <= interval '0' OR v_last <= pg_catalog.clock_timestamp() - v_window) THEN
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

-- queue_push_with_headers: queue_push with headers, a JSON object carried
-- beside the payload (trace context, correlation ids, a tenant; NULL or the
-- JSON value null: none; pyqueue__check_headers). The same body, checks,
-- dedup (a push of a live key changes nothing, its headers included),
-- return and locks as queue_push, plus that one check and column: queue_push
-- itself is left as it was, so a push without headers costs what it cost.
-- The same holds for each plain push and publish routine beside its
-- _with_headers sibling: a plain routine that only called its sibling with
-- NULL headers was measured slower (PostgreSQL 15, server-side loops, the
-- two called alternately): the extra SECURITY DEFINER call costs 5-7 us,
-- 6-10 % of a queue_push, 2-7 % of a queue_push_grouped or queue_publish,
-- and a 100-row queue_publish_batch through its sibling took 9 % longer,
-- queue_push_batch's sibling body 3-25 % longer than its own.
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
DECLARE
    v_xid xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_at  timestamptz;
    v_window interval;  -- the queue's notify_window (NULL: no throttle row yet)
    v_last   timestamptz;
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
        SELECT n.notify_window, n.last_notified_at, q.max_payload INTO v_window, v_last, v_max
          FROM pyqueue_queue q LEFT JOIN pyqueue_notify n ON n.queue_name::text = q.queue_name::text
         WHERE q.queue_name::text = in_queue;
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
    v_headers := pyqueue__check_headers(in_headers);  -- after the other arguments (as MySQL)
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
    -- pyqueue__notify's own test of the window, on the row read above (v_window NULL: not read, or no row yet)
    IF v_new AND v_at <= v_now
       AND (v_window IS NULL OR v_window <= interval '0' OR v_last <= pg_catalog.clock_timestamp() - v_window) THEN
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

-- queue_push_batch: inserts many messages in one statement; returns how many
-- were new (duplicates, also within the batch, are skipped). Arrays must have
-- the same length; in_run_ats / in_priorities may be NULL (all defaults) or
-- hold NULL elements. Any invalid element refuses the whole batch.
-- Locks: as queue_push, for every new row (in key order, see below).
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
-- the probe of the batch's keys below: planned on an empty table (a new
-- queue's first batch), a sequential scan looks cheapest, and the cached
-- plan then read the whole table once per key for the rest of the session
SET enable_seqscan = off
AS $$
DECLARE
    -- before the id below: whether this call is its transaction's first write
    v_first boolean := pg_catalog.pg_current_xact_id_if_assigned() IS NULL;
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_n     integer;
    v_count integer;
    v_ids   regclass;
    v_max   integer;  -- the queue's max_payload
BEGIN
    v_max := (pyqueue__queue(in_queue, true)).max_payload;
    v_n := pyqueue__check_batch(NULL, NULL, false, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities, v_now);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pyqueue__check_payloads(in_payloads, v_max);
    -- Ids are drawn in array order (FIFO within the batch), but rows are
    -- inserted in key order: two batches with overlapping keys then take
    -- their unique-index entries in the same order and cannot deadlock.
    -- The id sequence is looked up once per call, not once per row (the
    -- catalog lookup cost a quarter of a 100-row call).
    IF in_run_ats IS NOT NULL THEN
        PERFORM pyqueue__ready_from_lower(in_queue, (SELECT pg_catalog.min(r) FROM pg_catalog.unnest(in_run_ats) r),
                                          v_now);
    END IF;
    v_ids := pg_catalog.pg_get_serial_sequence('pyqueue_message', 'id')::regclass;
    -- The first write of a READ COMMITTED transaction (an autocommit call, the
    -- common case) inserts the batch's absent keys with a plain INSERT: ON
    -- CONFLICT's speculative insertion takes a lock and writes a WAL record
    -- for every row (on the server 1.06x-1.17x the calls of 100 per second,
    -- bench/README.md "PostgreSQL: the batch push without ON CONFLICT"). A
    -- key that another transaction inserts meanwhile raises unique_violation,
    -- which undoes the block, and the statement with ON CONFLICT below runs
    -- instead. The block is a subtransaction; only a transaction's first
    -- write takes one here, so that no transaction gathers many (past 64 in
    -- one transaction, every snapshot taken on the server costs more). The
    -- subquery probes the primary key once per row (OFFSET 0 keeps it from
    -- becoming an anti-join, whose generic plan read the queue's whole range
    -- and sorted it).
    IF v_first AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        BEGIN
            WITH batch AS MATERIALIZED (
                SELECT b.k, b.kd, b.pl, b.ra, b.pr, pg_catalog.nextval(v_ids) AS new_id
                  FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                                  pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                                  pg_catalog.unnest(in_priorities))
                       WITH ORDINALITY AS b (k, kd, pl, ra, pr, ord)
            )
            INSERT INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, id)
            OVERRIDING SYSTEM VALUE
            SELECT DISTINCT ON (b.k, b.kd) in_queue, b.k, b.kd, b.pl, coalesce(b.pr, 0),
                   coalesce(b.ra, v_now), coalesce(b.ra, v_now), v_now, b.new_id
              FROM batch b
             WHERE NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                WHERE m.queue_name::text = in_queue AND m.p_key::text = b.k
                                  AND m.p_kind::text = b.kd
                               OFFSET 0)
             ORDER BY b.k, b.kd, b.new_id;  -- as below: key order, the first of a repeated key
            GET DIAGNOSTICS v_count = ROW_COUNT;
        EXCEPTION WHEN unique_violation THEN
            v_count := NULL;
        END;
    END IF;
    IF v_count IS NULL THEN
        WITH batch AS MATERIALIZED (
            SELECT b.k, b.kd, b.pl, b.ra, b.pr, pg_catalog.nextval(v_ids) AS new_id
              FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                              pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                              pg_catalog.unnest(in_priorities))  -- a NULL array pads with NULLs
                   WITH ORDINALITY AS b (k, kd, pl, ra, pr, ord)
        )
        INSERT INTO pyqueue_message
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, id)
        OVERRIDING SYSTEM VALUE
        SELECT in_queue, b.k, b.kd, b.pl, coalesce(b.pr, 0),
               coalesce(b.ra, v_now), coalesce(b.ra, v_now), v_now, b.new_id
          FROM batch b
         ORDER BY b.k, b.kd, b.new_id  -- of a key repeated in the batch, the first is kept
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
        GET DIAGNOSTICS v_count = ROW_COUNT;
    END IF;
    IF v_count > 0 AND (in_run_ats IS NULL OR EXISTS (SELECT 1 FROM pg_catalog.unnest(in_run_ats) r WHERE r IS NULL OR r <= v_now)) THEN
        PERFORM pyqueue__notify(in_queue);  -- one wakeup per statement, for ready-now rows
    END IF;
    RETURN v_count;
END;
$$;

-- queue_push_batch_with_headers: queue_push_batch with headers per message:
-- in_headers NULL (none for any), else one element per p_key, each NULL,
-- the JSON value null (none) or a JSON object (pyqueue__check_batch_headers;
-- a bad element refuses the whole batch). The same body, checks, dedup,
-- return and locks as queue_push_batch, plus that check and column. No
-- DEFAULTs (see queue_push_with_headers).
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
-- the probe of the batch's keys below: planned on an empty table (a new
-- queue's first batch), a sequential scan looks cheapest, and the cached
-- plan then read the whole table once per key for the rest of the session
SET enable_seqscan = off
AS $$
DECLARE
    -- before the id below: whether this call is its transaction's first write
    v_first boolean := pg_catalog.pg_current_xact_id_if_assigned() IS NULL;
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_n     integer;
    v_count integer;
    v_ids   regclass;
    v_max   integer;  -- the queue's max_payload
BEGIN
    v_max := (pyqueue__queue(in_queue, true)).max_payload;
    v_n := pyqueue__check_batch(NULL, NULL, false, in_keys, in_kinds, in_payloads, in_run_ats, in_priorities, v_now);
    PERFORM pyqueue__check_batch_headers(in_headers, v_n);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pyqueue__check_payloads(in_payloads, v_max);
    -- Ids are drawn in array order (FIFO within the batch), but rows are
    -- inserted in key order: two batches with overlapping keys then take
    -- their unique-index entries in the same order and cannot deadlock.
    -- The id sequence is looked up once per call, not once per row (the
    -- catalog lookup cost a quarter of a 100-row call).
    IF in_run_ats IS NOT NULL THEN
        PERFORM pyqueue__ready_from_lower(in_queue, (SELECT pg_catalog.min(r) FROM pg_catalog.unnest(in_run_ats) r),
                                          v_now);
    END IF;
    v_ids := pg_catalog.pg_get_serial_sequence('pyqueue_message', 'id')::regclass;
    -- The first write of a READ COMMITTED transaction (an autocommit call, the
    -- common case) inserts the batch's absent keys with a plain INSERT: ON
    -- CONFLICT's speculative insertion takes a lock and writes a WAL record
    -- for every row (on the server 1.06x-1.17x the calls of 100 per second,
    -- bench/README.md "PostgreSQL: the batch push without ON CONFLICT"). A
    -- key that another transaction inserts meanwhile raises unique_violation,
    -- which undoes the block, and the statement with ON CONFLICT below runs
    -- instead. The block is a subtransaction; only a transaction's first
    -- write takes one here, so that no transaction gathers many (past 64 in
    -- one transaction, every snapshot taken on the server costs more). The
    -- subquery probes the primary key once per row (OFFSET 0 keeps it from
    -- becoming an anti-join, whose generic plan read the queue's whole range
    -- and sorted it).
    IF v_first AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        BEGIN
            WITH batch AS MATERIALIZED (
                SELECT b.k, b.kd, b.pl, b.ra, b.pr, b.h, pg_catalog.nextval(v_ids) AS new_id
                  FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                                  pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                                  pg_catalog.unnest(in_priorities), pg_catalog.unnest(in_headers))
                       WITH ORDINALITY AS b (k, kd, pl, ra, pr, h, ord)
            )
            INSERT INTO pyqueue_message
                   (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                    scheduled_at_initially, created_at, id, headers)
            OVERRIDING SYSTEM VALUE
            SELECT DISTINCT ON (b.k, b.kd) in_queue, b.k, b.kd, b.pl, coalesce(b.pr, 0),
                   coalesce(b.ra, v_now), coalesce(b.ra, v_now), v_now, b.new_id, pyqueue__json_value(b.h)
              FROM batch b
             WHERE NOT EXISTS (SELECT 1 FROM pyqueue_message m
                                WHERE m.queue_name::text = in_queue AND m.p_key::text = b.k
                                  AND m.p_kind::text = b.kd
                               OFFSET 0)
             ORDER BY b.k, b.kd, b.new_id;  -- as below: key order, the first of a repeated key
            GET DIAGNOSTICS v_count = ROW_COUNT;
        EXCEPTION WHEN unique_violation THEN
            v_count := NULL;
        END;
    END IF;
    IF v_count IS NULL THEN
        WITH batch AS MATERIALIZED (
            SELECT b.k, b.kd, b.pl, b.ra, b.pr, b.h, pg_catalog.nextval(v_ids) AS new_id
              FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                              pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                              pg_catalog.unnest(in_priorities), pg_catalog.unnest(in_headers))  -- a NULL array pads with NULLs
                   WITH ORDINALITY AS b (k, kd, pl, ra, pr, h, ord)
        )
        INSERT INTO pyqueue_message
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, id, headers)
        OVERRIDING SYSTEM VALUE
        SELECT in_queue, b.k, b.kd, b.pl, coalesce(b.pr, 0),
               coalesce(b.ra, v_now), coalesce(b.ra, v_now), v_now, b.new_id, pyqueue__json_value(b.h)
          FROM batch b
         ORDER BY b.k, b.kd, b.new_id  -- of a key repeated in the batch, the first is kept
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
        GET DIAGNOSTICS v_count = ROW_COUNT;
    END IF;
    IF v_count > 0 AND (in_run_ats IS NULL OR EXISTS (SELECT 1 FROM pg_catalog.unnest(in_run_ats) r WHERE r IS NULL OR r <= v_now)) THEN
        PERFORM pyqueue__notify(in_queue);  -- one wakeup per statement, for ready-now rows
    END IF;
    RETURN v_count;
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
    v_max      integer;  -- the queue's max_payload
    v_bytes    integer;
BEGIN
    v_max := (pyqueue__queue(in_queue, true)).max_payload;
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
    IF v_bytes > v_max THEN
        PERFORM pyqueue__refuse_payload(v_bytes, v_max);
    END IF;
    IF NOT pg_catalog.isfinite(coalesce(in_run_at, v_now)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_at := coalesce(in_run_at, v_now);
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
DECLARE
    v_xid xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_at  timestamptz;
    v_max   integer;  -- the queue's max_payload
    v_bytes integer;
BEGIN
    v_max := (pyqueue__queue(in_queue, true)).max_payload;
    PERFORM pyqueue__check_name('group', in_group, 255);
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
    IF v_bytes > v_max THEN
        PERFORM pyqueue__refuse_payload(v_bytes, v_max);
    END IF;
    IF NOT pg_catalog.isfinite(coalesce(in_run_at, v_now)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_at := coalesce(in_run_at, v_now);
    IF v_at < v_now - interval '0.5 seconds' THEN
        PERFORM pyqueue__ready_from_lower(in_queue, v_at, v_now);  -- more than a moment in the past
    END IF;
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, group_key)
    VALUES (in_queue, in_key, in_kind, in_payload, coalesce(in_priority, 0), pyqueue__blocked_at(), v_at,
            v_now, in_group)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pyqueue__group_settle(in_queue, in_group, v_now, false);
    RETURN true;
END;
$$;

-- queue_push_grouped_with_headers: queue_push_grouped with headers (as
-- queue_push_with_headers). The same body, checks, dedup, return and locks
-- as queue_push_grouped, plus the check and column. No DEFAULTs.
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
DECLARE
    v_xid xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_at  timestamptz;
    v_max   integer;  -- the queue's max_payload
    v_bytes integer;
    v_headers jsonb;
BEGIN
    v_max := (pyqueue__queue(in_queue, true)).max_payload;
    PERFORM pyqueue__check_name('group', in_group, 255);
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
    IF v_bytes > v_max THEN
        PERFORM pyqueue__refuse_payload(v_bytes, v_max);
    END IF;
    IF NOT pg_catalog.isfinite(coalesce(in_run_at, v_now)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_headers := pyqueue__check_headers(in_headers);  -- after the other arguments (as MySQL)
    v_at := coalesce(in_run_at, v_now);
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
DECLARE
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_n      integer;
    v_count  integer;
    v_ids    regclass;
    v_groups text[];
    v_ready  boolean;
    v_group  text;
    v_max    integer;  -- the queue's max_payload
BEGIN
    v_max := (pyqueue__queue(in_queue, true)).max_payload;
    v_n := pyqueue__check_batch('groups', in_groups, true, in_keys, in_kinds, in_payloads, in_run_ats,
                                in_priorities, v_now);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pyqueue__check_payloads(in_payloads, v_max);
    -- As queue_push_batch: ids in array order, rows inserted in key order.
    -- A grouped message goes in blocked; its group is settled below.
    IF in_run_ats IS NOT NULL THEN
        PERFORM pyqueue__ready_from_lower(in_queue, (SELECT pg_catalog.min(r) FROM pg_catalog.unnest(in_run_ats) r),
                                          v_now);
    END IF;
    v_ids := pg_catalog.pg_get_serial_sequence('pyqueue_message', 'id')::regclass;
    WITH batch AS MATERIALIZED (
        SELECT b.k, b.kd, b.pl, b.ra, b.pr, b.g, pg_catalog.nextval(v_ids) AS new_id
          FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                          pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                          pg_catalog.unnest(in_priorities), pg_catalog.unnest(in_groups))
               WITH ORDINALITY AS b (k, kd, pl, ra, pr, g, ord)
    ), ins AS (
        INSERT INTO pyqueue_message AS m
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, id, group_key)
        OVERRIDING SYSTEM VALUE
        SELECT in_queue, b.k, b.kd, b.pl, coalesce(b.pr, 0),
               CASE WHEN b.g IS NULL THEN coalesce(b.ra, v_now) ELSE pyqueue__blocked_at() END,
               coalesce(b.ra, v_now), v_now, b.new_id, b.g
          FROM batch b
         ORDER BY b.k, b.kd, b.new_id  -- of a key repeated in the batch, the first is kept
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

-- queue_push_batch_grouped_with_headers: queue_push_batch_grouped with
-- headers per message (in_headers as queue_push_batch_with_headers'). The
-- same body, checks, dedup, return and locks as queue_push_batch_grouped,
-- plus the check and column. No DEFAULTs.
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
DECLARE
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_n      integer;
    v_count  integer;
    v_ids    regclass;
    v_groups text[];
    v_ready  boolean;
    v_group  text;
    v_max    integer;  -- the queue's max_payload
BEGIN
    v_max := (pyqueue__queue(in_queue, true)).max_payload;
    v_n := pyqueue__check_batch('groups', in_groups, true, in_keys, in_kinds, in_payloads, in_run_ats,
                                in_priorities, v_now);
    PERFORM pyqueue__check_batch_headers(in_headers, v_n);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pyqueue__check_payloads(in_payloads, v_max);
    -- As queue_push_batch: ids in array order, rows inserted in key order.
    -- A grouped message goes in blocked; its group is settled below.
    IF in_run_ats IS NOT NULL THEN
        PERFORM pyqueue__ready_from_lower(in_queue, (SELECT pg_catalog.min(r) FROM pg_catalog.unnest(in_run_ats) r),
                                          v_now);
    END IF;
    v_ids := pg_catalog.pg_get_serial_sequence('pyqueue_message', 'id')::regclass;
    WITH batch AS MATERIALIZED (
        SELECT b.k, b.kd, b.pl, b.ra, b.pr, b.g, b.h, pg_catalog.nextval(v_ids) AS new_id
          FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                          pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                          pg_catalog.unnest(in_priorities), pg_catalog.unnest(in_groups),
                          pg_catalog.unnest(in_headers))
               WITH ORDINALITY AS b (k, kd, pl, ra, pr, g, h, ord)
    ), ins AS (
        INSERT INTO pyqueue_message AS m
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, id, group_key, headers)
        OVERRIDING SYSTEM VALUE
        SELECT in_queue, b.k, b.kd, b.pl, coalesce(b.pr, 0),
               CASE WHEN b.g IS NULL THEN coalesce(b.ra, v_now) ELSE pyqueue__blocked_at() END,
               coalesce(b.ra, v_now), v_now, b.new_id, b.g, pyqueue__json_value(b.h)
          FROM batch b
         ORDER BY b.k, b.kd, b.new_id  -- of a key repeated in the batch, the first is kept
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


-- ==== consume ====
-- Take messages out: reserve (or pop, at-most-once), then commit, roll back,
-- fail, extend or move the reservation; remove deletes a message whatever its
-- state. Every step after the reserve must show the reservation's token.

-- queue_pop: removes and returns up to in_n ready messages (at-most-once).
-- Locks the chosen rows with SKIP LOCKED (pyqueue__ready_tids: its cost
-- model is the reserve's) and deletes them by ctid in one statement;
-- nothing when the queue is paused. A popped group head hands its place to
-- the next message of its group (then the group's row is locked too). On a
-- queue that keeps results, each popped message's outcome is 'succeeded'.
-- Rows: p_key, p_kind, payload, priority, attempts, created_at, headers.
CREATE OR REPLACE FUNCTION queue_pop(in_queue text, in_n integer DEFAULT 1)
RETURNS TABLE (p_key varchar, p_kind varchar, payload jsonb, priority integer,
               attempts integer, created_at timestamptz, headers jsonb)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
#variable_conflict use_column
DECLARE
    v_queue  pyqueue_queue := pyqueue__queue(in_queue);
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_tids   tid[];
    v_groups text[];
    v_keys   text[];
    v_kinds  text[];
    v_dkeys  text[];
    v_dkinds text[];
BEGIN
    PERFORM pyqueue__check_batch_size(in_n);
    IF v_queue.paused THEN
        RETURN;
    END IF;
    -- Locked first, in a statement of its own: the DELETE then finds exactly
    -- the row versions that were locked.
    SELECT rt.o_tids INTO v_tids FROM pyqueue__ready_tids(in_queue, v_now, coalesce(in_n, 1), NULL, true) rt;
    IF EXISTS (SELECT 1 FROM pyqueue_group g WHERE g.queue_name::text = in_queue) THEN
        -- the groups whose heads are popped: each hands its place on below
        SELECT pg_catalog.array_agg(m.group_key::text) INTO v_groups
          FROM pyqueue_message m WHERE m.ctid = ANY (v_tids) AND m.group_key IS NOT NULL;
    END IF;
    IF v_queue.result_retention IS NOT NULL THEN
        -- the messages whose results are recorded below: each is announced on the result channel
        SELECT pg_catalog.array_agg(m.p_key::text), pg_catalog.array_agg(m.p_kind::text) INTO v_keys, v_kinds
          FROM pyqueue_message m WHERE m.ctid = ANY (v_tids);
    END IF;
    IF v_queue.result_retention IS NOT NULL THEN
        -- the popped messages that have parents or children (dependencies live in queues that keep
        -- results; one probe each; the rows are locked already, so a queue_push_after naming one
        -- has committed or waits for this transaction)
        SELECT pg_catalog.array_agg(m.p_key::text), pg_catalog.array_agg(m.p_kind::text) INTO v_dkeys, v_dkinds
          FROM pyqueue_message m
         WHERE m.ctid = ANY (v_tids)
           AND EXISTS (SELECT 1 FROM pyqueue_dependency d
                        WHERE d.queue_name::text = in_queue AND d.p_key::text = m.p_key::text
                          AND d.p_kind::text = m.p_kind::text);
    END IF;
    RETURN QUERY
        WITH gone AS (
            DELETE FROM pyqueue_message m
             USING pg_catalog.unnest(v_tids) WITH ORDINALITY AS c (tid, ord)
             WHERE m.ctid = c.tid
            RETURNING c.ord, m.p_key, m.p_kind, m.payload, m.priority, m.attempts, m.created_at,
                      m.reserved_by, m.last_error, m.progress, m.headers
        ), archived AS (
            INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                         created_at, processed_at, outcome, reserved_by, last_error, headers)
            SELECT in_queue, g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at,
                   v_now, 'popped', g.reserved_by, g.last_error, g.headers
              FROM gone g WHERE v_queue.history_retention IS NOT NULL
        ), recorded AS (  -- as pyqueue__record_result, for the whole set
            INSERT INTO pyqueue_result AS r (queue_name, p_key, p_kind, state, result, last_error, attempts,
                                             progress, finished_at)
            SELECT in_queue, g.p_key, g.p_kind, 'succeeded', NULL, g.last_error, g.attempts, g.progress, v_now
              FROM gone g WHERE v_queue.result_retention IS NOT NULL
            ON CONFLICT ON CONSTRAINT pyqueue_result_pkey DO UPDATE
               SET state = EXCLUDED.state, result = EXCLUDED.result, last_error = EXCLUDED.last_error,
                   attempts = EXCLUDED.attempts, progress = EXCLUDED.progress, finished_at = EXCLUDED.finished_at
        )
        SELECT g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at, g.headers
          FROM gone g ORDER BY g.ord;
    IF v_keys IS NOT NULL THEN
        PERFORM pyqueue__result_notify(in_queue, u.k, u.kd, 'succeeded')
           FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_kinds)) AS u (k, kd);
    END IF;
    IF v_groups IS NOT NULL THEN
        PERFORM pyqueue__groups_settle(in_queue, v_groups, pg_catalog.clock_timestamp());
    END IF;
    IF v_dkeys IS NOT NULL THEN  -- popped: succeeded, for the messages that wait for them
        PERFORM pyqueue__deps_left(in_queue, u.k, u.kd, true, NULL)
           FROM ROWS FROM (pg_catalog.unnest(v_dkeys), pg_catalog.unnest(v_dkinds)) AS u (k, kd);
    END IF;
END;
$$;

-- queue_reserve: hands out up to in_n ready messages, each invisible to others
-- until in_timeout (NULL = the queue's visibility_timeout; refused above its
-- max_reservation) passes, with a fresh token per message. Rows come highest priority first, FIFO within one.
-- A message whose expired reservation was its last allowed delivery is
-- dead-lettered instead of delivered again. Locks with SKIP LOCKED: concurrent
-- reservers never wait on each other and never share a message.
-- One locking read and one UPDATE by ctid (pyqueue__reserve); the cost
-- does not grow with the number of waiting (delayed or reserved) messages
-- nor with their distinct priorities (see pyqueue__ready_tids).
-- Rows: p_key, p_kind, payload, token, priority, attempts, created_at,
-- scheduled_at_initially, headers (NULL: none).
CREATE OR REPLACE FUNCTION queue_reserve(
    in_queue   text,
    in_worker  text     DEFAULT NULL,
    in_timeout interval DEFAULT NULL,
    in_n       integer  DEFAULT 1,
    in_kinds   text[]   DEFAULT NULL)
RETURNS TABLE (p_key varchar, p_kind varchar, payload jsonb, token uuid, priority integer,
               attempts integer, created_at timestamptz, scheduled_at_initially timestamptz,
               headers jsonb)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_queue pyqueue_queue;
BEGIN
    -- plainly valid arguments (see queue_push): one expression and one read, no nested checks
    IF NOT pyqueue__bad_name(in_queue, 128) AND in_kinds IS NULL
       AND (in_worker IS NULL OR pg_catalog.length(in_worker) <= 255) AND (in_n IS NULL OR in_n >= 1)
       AND (in_timeout IS NULL
            OR (in_timeout > interval '0' AND extract(epoch FROM in_timeout) <= 3155760000::numeric
                AND NOT pyqueue__negative_part(in_timeout))) THEN
        SELECT * INTO v_queue FROM pyqueue_queue q WHERE q.queue_name::text = in_queue;
    END IF;
    IF v_queue.queue_name IS NULL THEN  -- the general checks, in their order (an unknown queue raises here)
        v_queue := pyqueue__queue(in_queue);
        PERFORM pyqueue__check_reserve(in_worker, in_timeout, in_n, in_kinds);
    END IF;
    RETURN QUERY SELECT * FROM pyqueue__reserve(v_queue, in_worker, in_timeout, in_n, in_kinds);
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
    RETURN pyqueue__give_back(in_queue, in_key, in_kind, in_token, in_delay, false, NULL) IS NOT NULL;
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
    RETURN pyqueue__give_back(in_queue, in_key, in_kind, in_token, in_delay, true, in_error);
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
-- holds. Locks the message row.
CREATE OR REPLACE FUNCTION queue_snooze(in_queue text, in_key text, in_kind text, in_token text,
                                        in_delay interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_token uuid;
BEGIN
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_duration('delay', in_delay, false);
    UPDATE pyqueue_message m
       SET scheduled_at = v_now + coalesce(in_delay, interval '0'),
           attempts = m.attempts - 1,
           reserve_token = NULL,
           reserved_by = NULL
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
       AND m.reserve_token = v_token;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF coalesce(in_delay, interval '0') <= interval '0' THEN
        PERFORM pyqueue__notify(in_queue);  -- wakeup: ready again now
    END IF;
    RETURN true;
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
-- row (as queue_fail when dead-lettering).
CREATE OR REPLACE FUNCTION queue_give_up(in_queue text, in_key text, in_kind text, in_token text,
                                         in_error text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_token uuid;
BEGIN
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    UPDATE pyqueue_message m
       SET last_error = pg_catalog.left(in_error, 2000)
     WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
       AND m.reserve_token = v_token;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM pyqueue__dead_letter(v_queue, in_key, in_kind, v_now);
    RETURN CASE WHEN v_queue.dead_letter_queue IS NULL THEN 'dropped' ELSE 'dead_lettered' END;
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
-- Locks the message row (for a kind with a limit, its slot row first).
CREATE OR REPLACE FUNCTION queue_extend(in_queue text, in_key text, in_kind text, in_token text,
                             in_timeout interval DEFAULT NULL)
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_token uuid;
    v_queue pyqueue_queue := pyqueue__queue(in_queue);
    v_new   uuid;
BEGIN
    v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
    PERFORM pyqueue__check_duration('timeout', in_timeout, true);
    IF in_timeout > v_queue.max_reservation THEN
        PERFORM pyqueue__refuse_reservation(v_queue.max_reservation);
    END IF;
    IF NOT pyqueue__limit_renew(in_queue, in_key, in_kind, v_token) THEN  -- limits
        RETURN NULL;
    END IF;
    UPDATE pyqueue_message
       SET scheduled_at = pg_catalog.clock_timestamp() + coalesce(in_timeout, v_queue.visibility_timeout),
           reserve_token = pg_catalog.gen_random_uuid()
     WHERE queue_name::text = in_queue AND p_key::text = in_key AND p_kind::text = in_kind AND reserve_token = v_token
    RETURNING reserve_token INTO v_new;
    RETURN v_new;
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
-- message blocked behind its head just goes. Locks the message row (then
-- the group's row of a head).
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


-- ==== wakeups ====
-- Waiting for work without polling hard: the NOTIFY channel of a queue and
-- its throttle, when the next message falls due, and a long poll held inside
-- the server for clients that cannot LISTEN.

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

-- queue_set_notify_window: sets the queue's wakeup throttle window: at most
-- one NOTIFY per window (NULL = the default 50 ms; 0 = one per push
-- statement). Locks the queue's pyqueue_notify row.
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
    INSERT INTO pyqueue_notify AS n (queue_name, notify_window)
    VALUES (in_queue, coalesce(in_window, interval '50 milliseconds'))
    ON CONFLICT (queue_name) DO UPDATE SET notify_window = EXCLUDED.notify_window;
END;
$$;

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


-- ==== fast paths ====
-- Two steps of the consume cycle in one call: commit the previous reservation
-- and reserve the next, or commit many reservations at once. The semantics of
-- the routines they stand for, in fewer round trips.

-- queue_commit_reserve: commits the previous reservation (in_key, in_kind,
-- in_token; all three NULL = nothing to commit) and reserves the next up to
-- in_n messages with queue_reserve's semantics (order, timeout, kinds,
-- pause, dead letters), in one call: a consumer working one message at a
-- time needs one round trip and one transaction per message instead of two.
-- Rows as queue_reserve's, each led by committed (the commit's result: true,
-- false when the token no longer held, NULL when nothing was given); when
-- nothing is reserved, one row with committed and NULL elsewhere.
-- The reserve is queue_reserve's own (pyqueue__reserve: one locking read,
-- one UPDATE by ctid). Locks: the committed row, the reserved rows.
CREATE OR REPLACE FUNCTION queue_commit_reserve(
    in_queue   text,
    in_key     text,
    in_kind    text,
    in_token   text,
    in_worker  text     DEFAULT NULL,
    in_timeout interval DEFAULT NULL,
    in_n       integer  DEFAULT 1,
    in_kinds   text[]   DEFAULT NULL)
RETURNS TABLE (committed boolean, p_key varchar, p_kind varchar, payload jsonb, token uuid,
               priority integer, attempts integer, created_at timestamptz,
               scheduled_at_initially timestamptz, headers jsonb)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
#variable_conflict use_column
DECLARE
    v_token uuid;
    v_queue     pyqueue_queue := pyqueue__queue(in_queue);
    v_committed boolean;
    v_got       integer;
    v_group     text;
BEGIN
    -- The same checks as queue_reserve, before anything changes.
    PERFORM pyqueue__check_reserve(in_worker, in_timeout, in_n, in_kinds);
    IF in_timeout > v_queue.max_reservation THEN
        PERFORM pyqueue__refuse_reservation(v_queue.max_reservation);
    END IF;
    IF NOT (in_key IS NULL AND in_kind IS NULL AND in_token IS NULL) THEN
        v_token := pyqueue__check_reservation(in_key, in_kind, in_token);
        -- The commit below gives this transaction its id, after which the
        -- reserve could not move the queue's ready bound (a proposal needs
        -- a clock read before the id: pyqueue__ready_from_advance): its
        -- turn, once a second, comes first.
        IF NOT v_queue.paused AND pg_catalog.pg_current_xact_id_if_assigned() IS NULL
           AND pg_catalog.current_setting('transaction_isolation') = 'read committed'
           AND EXISTS (SELECT 1 FROM pyqueue_ready_from r
                        WHERE r.queue_name::text = in_queue
                          AND r.moved_at < pg_catalog.clock_timestamp() - interval '1 second') THEN
            PERFORM pyqueue__ready_from_advance(in_queue, pg_catalog.clock_timestamp());
        END IF;
        IF v_queue.history_retention IS NULL AND v_queue.result_retention IS NULL
           AND in_key NOT LIKE '%@____-__-__T__:__:__Z' THEN
            -- Nothing to archive or record, not a schedule's occurrence: the DELETE is all of queue_commit.
            DELETE FROM pyqueue_message m
             WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind
               AND m.reserve_token = v_token
            RETURNING m.group_key INTO v_group;
            v_committed := FOUND;
            IF v_group IS NOT NULL THEN
                PERFORM pyqueue__group_settle(in_queue, v_group, pg_catalog.clock_timestamp(), true);
            END IF;
        ELSE
            -- Exactly queue_commit: the history and result rows, the next occurrence of a schedule.
            v_committed := queue_commit(in_queue, in_key, in_kind, v_token);
        END IF;
    END IF;
    RETURN QUERY
        SELECT v_committed, r.c_key, r.c_kind, r.c_payload, r.c_token, r.c_priority, r.c_attempts,
               r.c_created_at, r.c_scheduled_at_initially, r.c_headers
          FROM pyqueue__reserve(v_queue, in_worker, in_timeout, in_n, in_kinds) AS r;
    GET DIAGNOSTICS v_got = ROW_COUNT;
    IF v_got = 0 THEN
        RETURN QUERY SELECT v_committed, NULL::varchar, NULL::varchar, NULL::jsonb, NULL::uuid,
                            NULL::integer, NULL::integer, NULL::timestamptz, NULL::timestamptz, NULL::jsonb;
    END IF;
END;
$$;

-- queue_commit_reserve with the token as a uuid (a token column of queue_reserve's rows, say):
-- the text one, called with the uuid's text (see "Tokens" at the top).
CREATE OR REPLACE FUNCTION queue_commit_reserve(
    in_queue   text,
    in_key     text,
    in_kind    text,
    in_token   uuid,
    in_worker  text     DEFAULT NULL,
    in_timeout interval DEFAULT NULL,
    in_n       integer  DEFAULT 1,
    in_kinds   text[]   DEFAULT NULL)
RETURNS TABLE (committed boolean, p_key varchar, p_kind varchar, payload jsonb, token uuid,
               priority integer, attempts integer, created_at timestamptz,
               scheduled_at_initially timestamptz, headers jsonb)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT * FROM queue_commit_reserve(in_queue, in_key, in_kind, in_token::text, in_worker, in_timeout, in_n, in_kinds)
$$;

-- pyqueue__delete_held: queue_commit_batch's set-based step (no history, no
-- occurrences): deletes the messages of in_queue that element i of the
-- three arrays names, if its token still holds; returns how many. One
-- DELETE driven by the batch sorted by key: the settings (of this one
-- statement's function) leave it a nested loop whose outer side is that
-- sorted batch (or, on a tiny table, the primary key's index scan, also in
-- key order), so each row is found by its key, checked against its token
-- and locked in key order, without a separate locking read. The queue name
-- comes from the batch, not from a condition on the table: the table then
-- has no condition of its own whose row estimate could make reading the
-- whole queue once look cheaper than a probe per element. That estimate is
-- a guess while the table has no statistics (a fresh install, a queue that
-- grew in a burst before autovacuum analyzed it), and the plan it picked
-- compared every row of the queue with every element: 250 ms for a batch of
-- 100 on a 20k-message queue, against 1 ms.
CREATE OR REPLACE FUNCTION pyqueue__delete_held(in_queue text, in_keys text[], in_kinds text[], in_tokens uuid[])
RETURNS integer
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_count integer;
BEGIN
    DELETE FROM pyqueue_message m
     USING (SELECT in_queue AS q, u.k, u.kd, u.tk
              FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(in_tokens))
                   AS u (k, kd, tk)
             ORDER BY u.k, u.kd) AS b
     WHERE m.queue_name::text = b.q AND m.p_key::text = b.k AND m.p_kind::text = b.kd
       AND m.reserve_token = b.tk;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

-- queue_commit_batch: commits many reservations in one statement (element i
-- of the three arrays names one reservation). Returns how many were deleted;
-- a reservation whose token no longer holds is skipped (not counted).
-- Refuses, changing nothing, arrays that are NULL, not one-dimensional, of
-- different lengths, or hold a NULL/empty/too long/space-ended key or kind or
-- a NULL or malformed token (text or uuid elements). Locks: the deleted rows, in key order (the order queue_drop
-- locks them in, so the two cannot deadlock).
CREATE OR REPLACE FUNCTION queue_commit_batch(in_queue text, in_keys text[], in_kinds text[], in_tokens text[])
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_n     integer;
    v_bad   integer;
    v_count integer := 0;
    v_queue pyqueue_queue;
    v_one   record;
    v_texts     text[];
    v_tokens    uuid[];
    v_malformed integer;
    v_occurrence boolean;
BEGIN
    v_queue := pyqueue__queue(in_queue);
    IF in_keys IS NULL OR in_kinds IS NULL OR in_tokens IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds and tokens must not be NULL'
            USING ERRCODE = '22023';
    END IF;
    v_texts := in_tokens;
    v_n := pg_catalog.cardinality(in_keys);
    IF pg_catalog.array_ndims(in_keys) > 1 OR pg_catalog.array_ndims(in_kinds) > 1 OR pg_catalog.array_ndims(v_texts) > 1
       OR pg_catalog.cardinality(in_kinds) <> v_n OR pg_catalog.cardinality(v_texts) <> v_n THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: p_keys, p_kinds and tokens must have the same length'
            USING ERRCODE = '22023';
    END IF;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    SELECT pg_catalog.min(b.ord) FILTER (WHERE pyqueue__bad_name(b.k, 255) OR pyqueue__bad_name(b.kd, 128) OR b.tk IS NULL),
           pg_catalog.bool_or(b.k LIKE '%@____-__-__T__:__:__Z')  -- a schedule's occurrence (see below)
      INTO v_bad, v_occurrence
      FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(v_texts))
           WITH ORDINALITY AS b (k, kd, tk, ord);
    -- Every token shaped as MySQL's are (8-4-4-4-12 hex digits, either case): then each casts to a
    -- uuid whose text is the token in lower case, which one comparison of the whole arrays shows
    -- (NULL elements, refused above, drop out of both sides). A regular expression per element
    -- cost a quarter of the call; it runs only when that comparison fails, to find the element
    -- (uuid's input also takes other shapes: braces, no or other hyphens).
    BEGIN
        v_tokens := v_texts::uuid[];
    EXCEPTION WHEN invalid_text_representation THEN
        v_tokens := NULL;
    END;
    IF v_tokens IS NULL
       OR pg_catalog.array_to_string(v_tokens, ',') <> pg_catalog.lower(pg_catalog.array_to_string(v_texts, ',')) THEN
        SELECT pg_catalog.min(b.ord) INTO v_malformed  -- MySQL's error for a token not shaped like one
          FROM pg_catalog.unnest(v_texts) WITH ORDINALITY AS b (tk, ord)
         WHERE b.tk !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$';
    END IF;
    IF v_malformed IS NOT NULL AND v_malformed < coalesce(v_bad, v_n + 1) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch: bad p_key/p_kind or malformed token', v_malformed
            USING ERRCODE = '22023';
    END IF;
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: element % of the batch has a NULL, empty, too long or space-ended p_key/p_kind or a NULL token', v_bad
            USING ERRCODE = '22023';
    END IF;
    IF v_queue.history_retention IS NOT NULL OR v_queue.result_retention IS NOT NULL OR v_occurrence
       OR EXISTS (SELECT 1 FROM pyqueue_group g WHERE g.queue_name::text = in_queue) THEN
        -- A queue that keeps history or results or has FIFO groups, or a
        -- batch holding occurrences of a schedule: each element through
        -- queue_commit (history and result rows, next occurrence, the next
        -- message of a group), in key order.
        FOR v_one IN SELECT b.k, b.kd, b.tk
                       FROM ROWS FROM (pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds), pg_catalog.unnest(v_tokens))
                            WITH ORDINALITY AS b (k, kd, tk, ord)
                      ORDER BY b.k, b.kd, b.ord LOOP
            IF queue_commit(in_queue, v_one.k, v_one.kd, v_one.tk) THEN
                v_count := v_count + 1;
            END IF;
        END LOOP;
        RETURN v_count;
    END IF;
    RETURN pyqueue__delete_held(in_queue, in_keys, in_kinds, v_tokens);
END;
$$;



-- ==== topics ====
-- Fan-out: bind topic patterns to queues, then publish a message to a topic
-- to push it into every queue bound to a pattern the topic matches (AMQP
-- topic exchanges: dot-separated words, '*' one word, '#' any number).

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
DECLARE
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_at     timestamptz;
    v_queues text[];
    v_queue  text;
    v_max    integer;
    v_bytes  integer;
BEGIN
    PERFORM pyqueue__check_topic('topic', in_topic, false);
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF pyqueue__occurrence_key(in_key) THEN
        PERFORM pyqueue__refuse_occurrence_key();
    END IF;
    IF in_payload IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_payload: payload must not be NULL (use the JSON value null)'
            USING ERRCODE = '22023';
    END IF;
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
    IF NOT pg_catalog.isfinite(coalesce(in_run_at, v_now)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_at := coalesce(in_run_at, v_now);
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
                scheduled_at_initially, created_at)
        SELECT t.queue_name, in_key, in_kind, in_payload, coalesce(in_priority, 0), v_at, v_at, v_now
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

-- queue_publish_with_headers: queue_publish with headers (as
-- queue_push_with_headers), the same in every queue the message reaches.
-- The same body, checks, dedup, return and locks as queue_publish, plus the
-- check and column. No DEFAULTs.
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
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF pyqueue__occurrence_key(in_key) THEN
        PERFORM pyqueue__refuse_occurrence_key();
    END IF;
    IF in_payload IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_payload: payload must not be NULL (use the JSON value null)'
            USING ERRCODE = '22023';
    END IF;
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
    IF NOT pg_catalog.isfinite(coalesce(in_run_at, v_now)) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: run_at must be a finite time' USING ERRCODE = '22023';
    END IF;
    v_headers := pyqueue__check_headers(in_headers);  -- after the other arguments (as MySQL)
    v_at := coalesce(in_run_at, v_now);
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
        SELECT b.t, b.k, b.kd, b.pl, b.ra, b.pr, b.ord
          FROM ROWS FROM (pg_catalog.unnest(in_topics), pg_catalog.unnest(in_keys), pg_catalog.unnest(in_kinds),
                          pg_catalog.unnest(in_payloads), pg_catalog.unnest(in_run_ats),
                          pg_catalog.unnest(in_priorities))
               WITH ORDINALITY AS b (t, k, kd, pl, ra, pr, ord)
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
                scheduled_at_initially, created_at, id)
        OVERRIDING SYSTEM VALUE
        SELECT t.queue_name, b.k, b.kd, b.pl, coalesce(b.pr, 0), coalesce(b.ra, v_now), coalesce(b.ra, v_now),
               v_now, r.new_id
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

-- queue_publish_batch_with_headers: queue_publish_batch with headers per
-- message (in_headers as queue_push_batch_with_headers'), the same in every
-- queue a message reaches. The same body, checks, dedup, return and locks
-- as queue_publish_batch, plus the check and column. No DEFAULTs.
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
    PERFORM pyqueue__check_batch_headers(in_headers, v_n);
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


-- ==== history and dead letters ====
-- What became of messages that left a queue (pyqueue_history: purge, replay),
-- the messages in dead-letter queues (list, redrive), and one message's state
-- and history, for roles that may not read the tables.

-- queue_purge_history: deletes up to in_n (NULL = 10000) history rows that
-- are past their queue's history_retention (processed_at < now - retention),
-- oldest first, of one queue or (in_queue NULL) of every queue that has a
-- retention. Returns how many it deleted; call it again until it returns
-- less than in_n. Bounded: one call locks at most in_n history rows (SKIP
-- LOCKED, so two purgers share the work instead of waiting). History of a
-- dropped queue, or of one whose retention was set back to NULL, is left
-- alone (DELETE it with plain SQL).
-- Then, with what is left of in_n, the result rows (pyqueue_result) past
-- their queue's result_retention (finished_at < now - retention), and every
-- result row of a queue whose result_retention is NULL or that no longer
-- exists, oldest first, queue by queue (the distinct queue names of the
-- table are found by one index probe each). The count returned is history
-- rows and result rows together.
CREATE OR REPLACE FUNCTION queue_purge_history(in_queue text DEFAULT NULL, in_n integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_left  integer := coalesce(in_n, 10000);
    v_got   integer;
    v_q     record;
    v_r     record;
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    PERFORM pyqueue__check_batch_size(in_n);
    FOR v_q IN
        SELECT q.queue_name, q.history_retention
          FROM pyqueue_queue q
         WHERE q.history_retention IS NOT NULL AND (in_queue IS NULL OR q.queue_name::text = in_queue)
         ORDER BY q.queue_name
    LOOP
        EXIT WHEN v_left <= 0;
        WITH doomed AS (
            SELECT h.id
              FROM pyqueue_history h
             WHERE h.queue_name::text = v_q.queue_name::text
               AND h.processed_at < v_now - v_q.history_retention
             ORDER BY h.processed_at
             LIMIT v_left
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM pyqueue_history h USING doomed WHERE h.id = doomed.id;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
    END LOOP;
    FOR v_r IN
        -- every queue: the distinct names of the table, one index probe each (a skip scan)
        WITH RECURSIVE names (queue_name) AS (
            (SELECT r.queue_name::text FROM pyqueue_result r ORDER BY r.queue_name LIMIT 1)
            UNION ALL
            SELECT (SELECT r.queue_name::text FROM pyqueue_result r
                     WHERE r.queue_name::text > n.queue_name
                     ORDER BY r.queue_name LIMIT 1)
              FROM names n WHERE n.queue_name IS NOT NULL
        )
        SELECT n.queue_name, q.result_retention
          FROM names n LEFT JOIN pyqueue_queue q ON q.queue_name::text = n.queue_name
         WHERE n.queue_name IS NOT NULL AND in_queue IS NULL
        UNION ALL
        -- one queue (it exists: checked above)
        SELECT q.queue_name::text, q.result_retention FROM pyqueue_queue q WHERE q.queue_name::text = in_queue
    LOOP
        EXIT WHEN v_left <= 0;
        WITH doomed AS (
            SELECT r.p_key, r.p_kind
              FROM pyqueue_result r
             WHERE r.queue_name::text = v_r.queue_name
               AND (v_r.result_retention IS NULL OR r.finished_at < v_now - v_r.result_retention)
             ORDER BY r.finished_at
             LIMIT v_left
               FOR UPDATE SKIP LOCKED
        )
        DELETE FROM pyqueue_result r USING doomed
         WHERE r.queue_name::text = v_r.queue_name AND r.p_key::text = doomed.p_key::text
           AND r.p_kind::text = doomed.p_kind::text;
        GET DIAGNOSTICS v_got = ROW_COUNT;
        v_left := v_left - v_got;
    END LOOP;
    RETURN coalesce(in_n, 10000) - v_left;
END;
$$;

-- queue_replay: pushes again the messages of in_queue's history whose
-- processed_at lies in [in_from, in_to) (NULL = unbounded on that side),
-- through the normal dedup: a (p_key, p_kind) that is live in the queue is
-- skipped. When a key and kind left several times in the range, its latest
-- version is replayed. Replayed messages are ready now, with their archived
-- payload, priority and headers, attempts 0. Returns how many were inserted.
-- Reads the history range without locks; locks like queue_push_batch.
CREATE OR REPLACE FUNCTION queue_replay(in_queue text, in_from timestamptz DEFAULT NULL,
                                        in_to timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_xid   xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_count integer;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    IF in_from > in_to THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: from must not be later than to' USING ERRCODE = '22023';
    END IF;
    INSERT INTO pyqueue_message
           (queue_name, p_key, p_kind, payload, priority, scheduled_at,
            scheduled_at_initially, created_at, headers)
    SELECT in_queue, h.p_key, h.p_kind, h.payload, h.priority, v_now, v_now, v_now, h.headers
      FROM (SELECT DISTINCT ON (h.p_key, h.p_kind) h.p_key, h.p_kind, h.payload, h.priority, h.headers
              FROM pyqueue_history h
             WHERE h.queue_name::text = in_queue AND h.outcome::text IN ('committed', 'popped')
               AND (in_from IS NULL OR h.processed_at >= in_from)
               AND (in_to IS NULL OR h.processed_at < in_to)
             ORDER BY h.p_key, h.p_kind, h.processed_at DESC, h.id DESC) h
     ORDER BY h.p_key, h.p_kind
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 THEN PERFORM pyqueue__notify(in_queue); END IF;  -- wakeup: ready now
    RETURN v_count;
END;
$$;

-- queue_redrive: moves up to in_n (NULL = 1) ready messages of in_dead_queue
-- (usually a dead-letter queue) to in_to_queue, highest priority first, FIFO
-- within one: same key, kind, payload, priority, last_error and headers, attempts 0,
-- ready now, no dead-letter origin (dead_from, dead_attempts).
-- A message held by a live reservation is not taken. A message whose key
-- and kind are already live in in_to_queue stays where it is (dedup; it is
-- skipped and does not count towards in_n). Returns how many moved. With a
-- history_retention on in_dead_queue each move is archived as 'moved'.
-- Locks the chosen rows with SKIP LOCKED and the shared lock of both queues (pyqueue__queue).
CREATE OR REPLACE FUNCTION queue_redrive(in_dead_queue text, in_to_queue text, in_n integer DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_dead   pyqueue_queue;
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_tids   tid[];
    v_keys   text[];
    v_kinds  text[];
    v_count  integer;
    v_groups text[];
BEGIN
    PERFORM pyqueue__check_name('dead_queue', in_dead_queue, 128);
    PERFORM pyqueue__check_name('to_queue', in_to_queue, 128);
    v_dead := pyqueue__queue(in_dead_queue, true);
    PERFORM pyqueue__queue(in_to_queue, true);
    PERFORM pyqueue__check_batch_size(in_n);
    IF in_dead_queue = in_to_queue THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: dead_queue and to_queue must differ' USING ERRCODE = '22023';
    END IF;
    -- Three statements, each reading the chosen rows by ctid (locked by the
    -- first, so their ctids hold): no join whose plan the table statistics
    -- could turn quadratic in n.
    SELECT pg_catalog.array_agg(r.tid) INTO v_tids
      FROM (SELECT m.ctid AS tid
              FROM pyqueue_message m
             WHERE m.queue_name::text = in_dead_queue AND m.scheduled_at <= v_now
               AND NOT EXISTS (SELECT 1 FROM pyqueue_message t
                                WHERE t.queue_name::text = in_to_queue AND t.p_key::text = m.p_key::text
                                  AND t.p_kind::text = m.p_kind::text)
             ORDER BY m.priority DESC, m.scheduled_at, m.id
             LIMIT coalesce(in_n, 1)
               FOR UPDATE SKIP LOCKED) AS r;
    IF v_tids IS NULL THEN
        RETURN 0;
    END IF;
    WITH pushed AS (
        INSERT INTO pyqueue_message AS t
               (queue_name, p_key, p_kind, payload, priority, scheduled_at,
                scheduled_at_initially, created_at, last_error, headers)
        SELECT in_to_queue, m.p_key, m.p_kind, m.payload, m.priority, v_now, v_now, v_now, m.last_error,
               m.headers
          FROM pyqueue_message m
         WHERE m.ctid = ANY (v_tids)
         ORDER BY m.p_key, m.p_kind
        ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING
        RETURNING t.p_key, t.p_kind
    )
    SELECT pg_catalog.array_agg(p.p_key::text), pg_catalog.array_agg(p.p_kind::text) INTO v_keys, v_kinds
      FROM pushed p;
    IF coalesce(pg_catalog.cardinality(v_keys), 0) < pg_catalog.cardinality(v_tids) THEN
        -- A key went live in in_to_queue since the first statement (a
        -- concurrent push): that message was not copied and stays here.
        SELECT pg_catalog.array_agg(m.ctid) INTO v_tids
          FROM pyqueue_message m
         WHERE m.ctid = ANY (v_tids)
           AND EXISTS (SELECT 1 FROM ROWS FROM (pg_catalog.unnest(v_keys), pg_catalog.unnest(v_kinds)) AS u (k, kd)
                        WHERE u.k = m.p_key::text AND u.kd = m.p_kind::text);
    END IF;
    WITH gone AS (
        DELETE FROM pyqueue_message m
         WHERE m.ctid = ANY (v_tids)
        RETURNING m.*
    ), archived AS (
        INSERT INTO pyqueue_history (queue_name, p_key, p_kind, payload, priority, attempts,
                                     created_at, processed_at, outcome, to_queue, reserved_by, last_error,
                                     headers)
        SELECT in_dead_queue, g.p_key, g.p_kind, g.payload, g.priority, g.attempts, g.created_at,
               v_now, 'moved', in_to_queue, g.reserved_by, g.last_error, g.headers
          FROM gone g WHERE v_dead.history_retention IS NOT NULL
    )
    SELECT pg_catalog.count(*), pg_catalog.array_agg(g.group_key::text) FILTER (WHERE g.group_key IS NOT NULL)
      INTO v_count, v_groups FROM gone g;
    IF v_groups IS NOT NULL THEN
        -- messages of groups pushed into the dead-letter queue itself
        PERFORM pyqueue__groups_settle(in_dead_queue, v_groups, v_now);
    END IF;
    IF v_count > 0 THEN PERFORM pyqueue__notify(in_to_queue); END IF;  -- wakeup: ready now
    RETURN v_count;
END;
$$;

-- queue_dead_letters: the messages sitting in a dead-letter queue (the rows
-- of the view pyqueue_dead_letters for dead_letter_queue = in_queue), oldest
-- dead letter first, so that a role without SELECT on the view can list them:
-- from_queue and attempts are the queue each came from and its deliveries
-- there, last_error its last error text, headers its headers. An unknown queue is refused; a
-- queue that is nobody's dead-letter queue has none. Takes no locks (one snapshot).
CREATE OR REPLACE FUNCTION queue_dead_letters(in_queue text)
RETURNS TABLE (dead_letter_queue varchar, from_queue varchar, p_key varchar, p_kind varchar,
               payload jsonb, priority integer, attempts integer, created_at timestamptz,
               dead_lettered_at timestamptz, reserved boolean, last_error varchar, headers jsonb)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__queue(in_queue);
    RETURN QUERY
        SELECT d.dead_letter_queue, d.from_queue, d.p_key, d.p_kind, d.payload, d.priority,
               d.attempts, d.created_at, d.dead_lettered_at, d.reserved, d.last_error, d.headers
          FROM pyqueue_dead_letters d
         WHERE d.dead_letter_queue::text = in_queue
         ORDER BY d.dead_lettered_at, d.p_key, d.p_kind;
END;
$$;

-- queue_message: the live message (in_key, in_kind) of in_queue, 0 or 1 row:
-- its state ('ready', 'delayed' or 'reserved', as in queue_stats), payload,
-- priority, attempts (deliveries so far), scheduled_at (when it is or was
-- due; for a reserved one, when the reservation ends), created_at,
-- reserved_by (the worker of its last reservation), last_error, for a
-- dead letter dead_from, its progress (queue_set_progress) and whether a
-- cancel was requested (queue_cancel), its headers (NULL: none). Reads without locks.
-- Installs of earlier versions returned the columns up to dead_from, or up
-- to cancel_requested: that
-- function is dropped (a function cannot change its result columns in
-- place), and with it its grants (pyqueue-sql grant gives them again).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                WHERE p.oid = pg_catalog.to_regprocedure('queue_message(text, text, text)')
                  AND NOT ('headers' OPERATOR(pg_catalog.=) ANY (p.proargnames))) THEN
        DROP FUNCTION queue_message(text, text, text);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION queue_message(in_queue text, in_key text, in_kind text)
RETURNS TABLE (p_key text, p_kind text, state text, payload jsonb, priority integer, attempts integer,
               scheduled_at timestamptz, created_at timestamptz, reserved_by text, last_error text,
               dead_from text, progress jsonb, cancel_requested boolean, headers jsonb)
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
        SELECT m.p_key::text, m.p_kind::text,
               CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                    WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                    ELSE 'delayed' END::text,
               m.payload, m.priority, m.attempts, m.scheduled_at, m.created_at, m.reserved_by::text,
               m.last_error::text, m.dead_from::text, m.progress, m.cancel_requested_at IS NOT NULL,
               m.headers
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind;
END;
$$;

-- queue_message_history: the history rows of (in_queue, in_key, in_kind),
-- newest first, at most 100: (processed_at, outcome, to_queue, attempts,
-- reserved_by, last_error): what happened, not the message's data (no
-- payload, no headers: pyqueue_history keeps both). A queue that no longer exists is no error (its
-- history stays); a queue without history_retention has none. Reads without locks.
CREATE OR REPLACE FUNCTION queue_message_history(in_queue text, in_key text, in_kind text)
RETURNS TABLE (processed_at timestamptz, outcome text, to_queue text, attempts integer,
               reserved_by text, last_error text)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM pyqueue__check_name('queue', in_queue, 128);
    PERFORM pyqueue__check_name('p_key', in_key, 255);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    RETURN QUERY
        SELECT h.processed_at, h.outcome::text, h.to_queue::text, h.attempts, h.reserved_by::text,
               h.last_error::text
          FROM pyqueue_history h
         WHERE h.queue_name::text = in_queue AND h.p_key::text = in_key AND h.p_kind::text = in_kind
         ORDER BY h.processed_at DESC, h.id DESC
         LIMIT 100;
END;
$$;


-- ---- reads for browsing a queue and its throughput: queue_messages, queue_throughput ----

-- queue_messages: a page of in_queue's live messages in key order (p_key,
-- then p_kind), for browsing a queue without SQL: in_state 'ready',
-- 'delayed' or 'reserved' (as queue_stats counts them; NULL = all),
-- in_key_prefix (NULL = any key) keeps the keys that start with it, and
-- (in_after_key, in_after_kind) is the paging cursor: the last row of the
-- previous page (both NULL for the first page). in_n rows at most (NULL =
-- 100, at most 1000). Rows: p_key, p_kind, state, priority, attempts,
-- scheduled_at, created_at, reserved_by, last_error, dead_from (in a
-- dead-letter queue: the queue it came from), headers (no payload:
-- queue_message shows one message whole). Reads the primary key from the
-- cursor on, without locks; a state or prefix that few rows match costs a
-- walk over the queue's rows after the cursor until the page is full.
CREATE OR REPLACE FUNCTION queue_messages(in_queue text, in_state text DEFAULT NULL,
                                          in_key_prefix text DEFAULT NULL, in_after_key text DEFAULT NULL,
                                          in_after_kind text DEFAULT NULL, in_n integer DEFAULT NULL)
RETURNS TABLE (p_key text, p_kind text, state text, priority integer, attempts integer,
               scheduled_at timestamptz, created_at timestamptz, reserved_by text, last_error text,
               dead_from text, headers jsonb)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
-- planned for each call's own cursor, prefix and state (a generic plan cannot use them)
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pyqueue__queue(in_queue);
    IF in_state IS NOT NULL AND in_state NOT IN ('ready'::text, 'delayed'::text, 'reserved'::text) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: state must be ready, delayed, reserved or NULL (every state)'
            USING ERRCODE = '22023';
    END IF;
    IF in_key_prefix IS NOT NULL AND (in_key_prefix = '' OR pg_catalog.length(in_key_prefix) > 255) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: key_prefix must be 1 to 255 characters (NULL = any key)'
            USING ERRCODE = '22023';
    END IF;
    IF (in_after_key IS NULL) <> (in_after_kind IS NULL) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: after_key and after_kind go together (both NULL for the first page)'
            USING ERRCODE = '22023';
    END IF;
    IF in_after_key IS NOT NULL THEN
        PERFORM pyqueue__check_name('after_key', in_after_key, 255);
        PERFORM pyqueue__check_name('after_kind', in_after_kind, 128);
    END IF;
    IF in_n < 1 OR in_n > 1000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be from 1 to 1000' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
        SELECT m.p_key::text, m.p_kind::text,
               CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                    WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                    ELSE 'delayed' END::text,
               m.priority, m.attempts, m.scheduled_at, m.created_at, m.reserved_by::text, m.last_error::text,
               m.dead_from::text, m.headers
          FROM pyqueue_message m
         WHERE m.queue_name::text = in_queue
           AND (in_after_key IS NULL OR (m.p_key::text, m.p_kind::text) > (in_after_key, in_after_kind))
           AND (in_key_prefix IS NULL OR pg_catalog.starts_with(m.p_key::text, in_key_prefix))
           AND (in_state IS NULL
                OR in_state = CASE WHEN m.scheduled_at <= v_now THEN 'ready'
                                   WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                                   ELSE 'delayed' END::text)
         ORDER BY m.p_key, m.p_kind
         LIMIT coalesce(in_n, 100);
END;
$$;

-- queue_groups: in_queue's FIFO groups that hold messages, by group_key, at
-- most in_n (NULL = 100, 1 to 1000): the group, its head (p_key, p_kind,
-- state as queue_message's; with a group limit above 1, the first of its
-- heads), how many messages it holds (its heads included), group_limit (the
-- k in effect: the group's own, else the queue's default, else 1) and
-- in_flight (its heads: the messages that are not blocked, reserved or
-- not). Reads without locks; counts each listed group's messages.
-- Installs of earlier versions returned no group_limit and in_flight: the
-- function is dropped first (a function cannot change its result columns in
-- place), and with it its grants (pyqueue-sql grant gives them again).
DO $$
DECLARE
    v_old regprocedure := pg_catalog.to_regprocedure('queue_groups(text, integer)');
BEGIN
    IF v_old IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM pg_catalog.pg_proc p
            WHERE p.oid OPERATOR(pg_catalog.=) v_old::pg_catalog.oid
              AND 'group_limit'::text OPERATOR(pg_catalog.=) ANY (p.proargnames::text[])) THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_old);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION queue_groups(in_queue text, in_n integer DEFAULT NULL)
RETURNS TABLE (group_key text, head_key text, head_kind text, head_state text, messages bigint,
               group_limit integer, in_flight bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    PERFORM pyqueue__queue(in_queue);
    IF in_n < 1 OR in_n > 1000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be from 1 to 1000' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
        SELECT g.group_key::text, g.head_key::text, g.head_kind::text,
               (SELECT CASE WHEN h.scheduled_at <= v_now THEN 'ready'
                            WHEN h.reserve_token IS NOT NULL THEN 'reserved'
                            ELSE 'delayed' END
                  FROM pyqueue_message h
                 WHERE h.queue_name::text = g.queue_name::text AND h.p_key::text = g.head_key::text
                   AND h.p_kind::text = g.head_kind::text),
               (SELECT pg_catalog.count(*) FROM pyqueue_message m
                 WHERE m.queue_name::text = g.queue_name::text AND m.group_key::text = g.group_key::text),
               coalesce((SELECT l.k FROM pyqueue_group_limit l
                          WHERE l.queue_name::text = g.queue_name::text
                            AND (l.group_key::text = g.group_key::text OR l.group_key::text = ''::text)
                          ORDER BY l.group_key::text = ''::text
                          LIMIT 1), 1),
               (SELECT pg_catalog.count(*) FROM pyqueue_message m
                 WHERE m.queue_name::text = g.queue_name::text AND m.group_key::text = g.group_key::text
                   AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00')
          FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue
         ORDER BY g.group_key
         LIMIT coalesce(in_n, 100);
END;
$$;

-- queue_throughput: how many messages left in_queue (every queue when NULL)
-- per minute since in_since (NULL = an hour ago; at most a day ago, not in
-- the future), by outcome: rows (queue, minute, committed, dead_lettered,
-- moved, popped), minutes without any left out, by queue and minute.
-- Counted from pyqueue_history, so only a queue with a history_retention
-- has any (queue_settings says which do): nothing is counted on the commit
-- path. Reads the (queue_name, processed_at) index range of each queue,
-- without locks.
CREATE OR REPLACE FUNCTION queue_throughput(in_queue text DEFAULT NULL, in_since timestamptz DEFAULT NULL)
RETURNS TABLE (queue text, minute timestamptz, committed bigint, dead_lettered bigint, moved bigint,
               popped bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
-- planned for each call's own range: a generic plan made after calls for a whole hour scans the
-- whole history table, also for the two minutes a poller asks for next
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_now   timestamptz := pg_catalog.clock_timestamp();
    v_since timestamptz;
    v_queue text;
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    IF in_since IS NOT NULL AND NOT pg_catalog.isfinite(in_since) THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: since must be a finite time' USING ERRCODE = '22023';
    END IF;
    IF in_since > v_now THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: since must not be in the future' USING ERRCODE = '22023';
    END IF;
    IF in_since < v_now - interval '1 day' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: since must be within the last day' USING ERRCODE = '22023';
    END IF;
    v_since := coalesce(in_since, v_now - interval '1 hour');
    -- one queue at a time: each statement reads that queue's index range (a join of all
    -- queues with the history can be planned as a scan of the whole history table)
    FOR v_queue IN
        SELECT q.queue_name::text FROM pyqueue_queue q
         WHERE in_queue IS NULL OR q.queue_name::text = in_queue
         ORDER BY q.queue_name
    LOOP
        RETURN QUERY
            SELECT v_queue, pg_catalog.date_trunc('minute'::text, h.processed_at),
                   pg_catalog.count(*) FILTER (WHERE h.outcome::text = 'committed'::text),
                   pg_catalog.count(*) FILTER (WHERE h.outcome::text = 'dead_lettered'::text),
                   pg_catalog.count(*) FILTER (WHERE h.outcome::text = 'moved'::text),
                   pg_catalog.count(*) FILTER (WHERE h.outcome::text = 'popped'::text)
              FROM pyqueue_history h
             WHERE h.queue_name::text = v_queue AND h.processed_at >= v_since
             GROUP BY 2
             ORDER BY 2;
    END LOOP;
END;
$$;


-- ==== results ====
-- What became of one message, for the producer that pushed it: a queue with
-- a result_retention records the outcome of every message that finishes
-- (pyqueue_result: 'succeeded' with the result its consumer gave,
-- 'failed', 'cancelled'); a producer reads it, waits for it or listens for
-- it, and may cancel a message; the consumer holding it reports progress,
-- learns of a cancel request when it renews, and may end it as cancelled.
-- A move to another queue and queue_remove record nothing.

-- queue_set_result_retention: how long the outcome of a finished message of
-- the queue is kept (pyqueue_result; queue_purge_history deletes the older
-- ones). NULL turns recording off, the default (rows already stored go at
-- the next purge). Above zero, at most 3650 days (by seconds: 315360000).
-- Locks the queue row.
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
    UPDATE pyqueue_queue SET result_retention = in_retention WHERE queue_name::text = in_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:unknown_queue: queue "%" does not exist', in_queue USING ERRCODE = 'P0002';
    END IF;
    -- (after the row lock: a queue_push_after that read the setting has committed its rows by now)
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
-- with queue_remove or hands it back with queue_redrive). Locks the message
-- row (waiting for a reserve or commit that holds it, then deciding on what
-- it left), then as a commit.
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
-- row; (NULL, false) when in_token no longer holds. Locks as queue_extend.
CREATE OR REPLACE FUNCTION queue_renew(in_queue text, in_key text, in_kind text, in_token text,
                                       in_timeout interval DEFAULT NULL)
RETURNS TABLE (token uuid, cancel_requested boolean)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan  -- see "Plans" at the top
AS $$
DECLARE
    v_token     uuid;
    v_queue     pyqueue_queue := pyqueue__queue(in_queue);
    v_new       uuid;
    v_requested boolean;
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
        RETURNING m.reserve_token, m.cancel_requested_at IS NOT NULL INTO v_new, v_requested;
    END IF;
    token := v_new;
    cancel_requested := coalesce(v_requested, false);
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


-- ==== dependencies ====
-- A message that waits for others: pushed with its parents, ready once every
-- parent has succeeded, in the transaction of the commit that ends the last;
-- cancelled when a parent fails or is cancelled.

-- queue_push_after: queue_push of a message that waits for its parents,
-- in_parents a JSON array of 1 to 1000 objects {"queue", "p_key", "p_kind"}
-- (parents may be in other queues; none may be the message itself or a
-- schedule's occurrence). Answers as queue_push: false, and nothing changes,
-- when a live message has the key and kind (dedup). A parent is known when
-- its queue keeps results (queue_set_result_retention) and it is live there
-- (it is waited for) or its result there is 'succeeded' (it counts as
-- done); a parent whose result is 'failed' or 'cancelled', or with neither a
-- live message nor a result, is refused (invalid_argument naming it), and
-- nothing is pushed. The message is 'waiting' (queue_result) while a parent
-- has not succeeded: blocked as a FIFO group's waiting member is (a
-- scheduled_at past every ready range: no reserve visits it), with no group.
-- The commit (queue_commit, queue_commit_batch, queue_commit_result, its
-- batch, queue_commit_reserve, queue_pop, queue_move) that ends the last
-- parent makes it ready, in that transaction (pyqueue__deps_left); a parent
-- dead-lettered, dropped, cancelled or removed cancels it, transitively.
-- Ready at once when every parent had already succeeded. Priority 0.
-- Locks: the queue's shared lock (pyqueue__queue), the new row's unique-index
-- entry, then each live parent's row (FOR KEY SHARE, in the order given, so
-- that a parent's commit either waits for this push or is seen by it as
-- finished), until the transaction ends.
CREATE OR REPLACE FUNCTION queue_push_after(in_queue text, in_key text, in_kind text, in_payload jsonb,
                                            in_parents jsonb)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_xid    xid8 := pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now    timestamptz := pg_catalog.clock_timestamp();
    v_queue  pyqueue_queue := pyqueue__queue(in_queue, true);
    v_bytes  integer;
    v_n      integer;
    v_i      integer;
    v_p      jsonb;
    v_pq     text;
    v_pk     text;
    v_pt     text;
    v_pqueue pyqueue_queue;
    v_state  text;
    v_id     bigint;
    v_left   integer := 0;
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
    IF v_bytes > v_queue.max_payload THEN
        PERFORM pyqueue__refuse_payload(v_bytes, v_queue.max_payload);
    END IF;
    IF in_parents IS NULL OR pg_catalog.jsonb_typeof(in_parents) <> 'array' THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: parents must be a JSON array of {"queue", "p_key", "p_kind"} objects'
            USING ERRCODE = '22023';
    END IF;
    -- its queue's row share-locked until the transaction ends, as each parent's queue's below: a
    -- queue_set_result_retention(NULL) waits for this push, then sees its rows and refuses
    PERFORM 1 FROM pyqueue_queue q WHERE q.queue_name::text = in_queue AND q.result_retention IS NOT NULL FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: the queue keeps no results: a message with parents needs them (queue_set_result_retention)'
            USING ERRCODE = '22023';
    END IF;
    v_n := pg_catalog.jsonb_array_length(in_parents);
    IF v_n < 1 OR v_n > 1000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: parents must name 1 to 1000 messages, not %', v_n
            USING ERRCODE = '22023';
    END IF;
    FOR v_i IN 1 .. v_n LOOP  -- every element checked before anything is written
        v_p := in_parents -> (v_i - 1);
        IF pg_catalog.jsonb_typeof(v_p) <> 'object'
           OR pg_catalog.jsonb_typeof(v_p -> 'queue') IS DISTINCT FROM 'string'
           OR pg_catalog.jsonb_typeof(v_p -> 'p_key') IS DISTINCT FROM 'string'
           OR pg_catalog.jsonb_typeof(v_p -> 'p_kind') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%] must be an object with the strings queue, p_key and p_kind', v_i
                USING ERRCODE = '22023';
        END IF;
        PERFORM pyqueue__check_name(pg_catalog.format('parents[%s].queue', v_i), v_p ->> 'queue', 128);
        PERFORM pyqueue__check_name(pg_catalog.format('parents[%s].p_key', v_i), v_p ->> 'p_key', 255);
        PERFORM pyqueue__check_name(pg_catalog.format('parents[%s].p_kind', v_i), v_p ->> 'p_kind', 128);
        IF v_p ->> 'queue' = in_queue AND v_p ->> 'p_key' = in_key AND v_p ->> 'p_kind' = in_kind THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%] is the message itself', v_i USING ERRCODE = '22023';
        END IF;
        IF pyqueue__occurrence_key(v_p ->> 'p_key') THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%] is a schedule''s occurrence', v_i USING ERRCODE = '22023';
        END IF;
    END LOOP;
    INSERT INTO pyqueue_message AS m
           (queue_name, p_key, p_kind, payload, priority, scheduled_at, scheduled_at_initially, created_at)
    VALUES (in_queue, in_key, in_kind, in_payload, 0, pyqueue__blocked_at(), v_now, v_now)
    ON CONFLICT (queue_name, p_key, p_kind) DO NOTHING
    RETURNING m.id INTO v_id;
    IF NOT FOUND THEN
        RETURN false;  -- dedup
    END IF;
    -- rows an earlier message of this key left behind (one removed by a path that keeps no dependencies)
    DELETE FROM pyqueue_dependency d
     WHERE d.queue_name::text = in_queue AND d.p_key::text = in_key AND d.p_kind::text = in_kind;
    FOR v_i IN 1 .. v_n LOOP
        v_p := in_parents -> (v_i - 1);
        v_pq := v_p ->> 'queue';
        v_pk := v_p ->> 'p_key';
        v_pt := v_p ->> 'p_kind';
        v_pqueue := pyqueue__queue(v_pq);  -- (unknown_queue)
        SELECT * INTO v_pqueue FROM pyqueue_queue q WHERE q.queue_name::text = v_pq FOR SHARE;
        IF v_pqueue.result_retention IS NULL THEN
            RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%]: its queue keeps no results, so it cannot be a parent', v_i
                USING ERRCODE = '22023';
        END IF;
        PERFORM 1 FROM pyqueue_message m
         WHERE m.queue_name::text = v_pq AND m.p_key::text = v_pk AND m.p_kind::text = v_pt
           FOR KEY SHARE;
        IF FOUND THEN
            INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, other_queue, other_key,
                                            other_kind, msg_id)
            VALUES (v_pq, v_pk, v_pt, 'c', v_i, in_queue, in_key, in_kind, v_id);
            v_left := v_left + 1;
        ELSE
            SELECT r.state INTO v_state FROM pyqueue_result r
             WHERE r.queue_name::text = v_pq AND r.p_key::text = v_pk AND r.p_kind::text = v_pt;
            IF v_state IS DISTINCT FROM 'succeeded' THEN
                RAISE EXCEPTION 'pyqueue:invalid_argument: parents[%] %', v_i,
                    CASE WHEN v_state IS NULL THEN 'is unknown: neither live nor a result there'
                         ELSE 'has ' || v_state || ': the message could never run' END
                    USING ERRCODE = '22023';
            END IF;
        END IF;
        INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, other_queue, other_key, other_kind)
        VALUES (in_queue, in_key, in_kind, 'p', v_i, v_pq, v_pk, v_pt);
    END LOOP;
    IF v_left > 0 THEN
        INSERT INTO pyqueue_dependency (queue_name, p_key, p_kind, role, n, msg_id)
        VALUES (in_queue, in_key, in_kind, 'w', v_left, v_id);
    ELSE  -- every parent has succeeded already: ready now
        v_now := pg_catalog.clock_timestamp();
        UPDATE pyqueue_message m SET scheduled_at = v_now, scheduled_at_initially = v_now
         WHERE m.queue_name::text = in_queue AND m.p_key::text = in_key AND m.p_kind::text = in_kind;
        PERFORM pyqueue__notify(in_queue);
    END IF;
    RETURN true;
END;
$$;

-- queue_parent_results: the parents of the message (in_key, in_kind) of
-- in_queue (pushed with queue_push_after, live: waiting, ready or held), one
-- row each in the order they were given: ordinal (1, 2, ...), the parent's
-- queue, key and kind, its state as queue_result reads it ('succeeded' with
-- its stored result, 'failed', 'cancelled', or while live 'ready',
-- 'delayed', 'reserved', 'waiting', 'blocked'; 'unknown' when neither, e.g.
-- a parent moved on, whose queue records no result for the move, or whose
-- result was purged), and result (NULL but for 'succeeded'). No rows for a
-- message without parents or not live. For the consumer that holds the
-- child (a fan-in reads its inputs). Reads without locks, in one snapshot.
CREATE OR REPLACE FUNCTION queue_parent_results(in_queue text, in_key text, in_kind text)
RETURNS TABLE (ordinal integer, queue text, p_key text, p_kind text, state text, result jsonb)
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
        SELECT d.n, d.other_queue::text, d.other_key::text, d.other_kind::text,
               coalesce(CASE WHEN m.scheduled_at = pyqueue__blocked_at() AND m.group_key IS NULL THEN 'waiting'
                             WHEN m.scheduled_at = pyqueue__blocked_at() THEN 'blocked'
                             WHEN m.scheduled_at <= v_now THEN 'ready'
                             WHEN m.reserve_token IS NOT NULL THEN 'reserved'
                             WHEN m.p_key IS NOT NULL THEN 'delayed' END,
                        r.state::text, 'unknown'),
               CASE WHEN m.p_key IS NULL THEN r.result END
          FROM pyqueue_dependency d
          LEFT JOIN pyqueue_message m
            ON m.queue_name::text = d.other_queue::text AND m.p_key::text = d.other_key::text
           AND m.p_kind::text = d.other_kind::text
          LEFT JOIN pyqueue_result r
            ON r.queue_name::text = d.other_queue::text AND r.p_key::text = d.other_key::text
           AND r.p_kind::text = d.other_kind::text
         WHERE d.queue_name::text = in_queue AND d.p_key::text = in_key AND d.p_kind::text = in_kind
           AND d.role = 'p'
           AND EXISTS (SELECT 1 FROM pyqueue_message c
                        WHERE c.queue_name::text = in_queue AND c.p_key::text = in_key AND c.p_kind::text = in_kind)
         ORDER BY d.n;
END;
$$;


-- ==== limits ====
-- Concurrency limits: at most capacity messages of a kind reserved at once in
-- a queue. The reserve and extend paths take and keep the slots through the
-- limit helpers above.

-- queue_set_limit: at most in_capacity messages of in_kind reserved at once
-- in in_queue (0 holds the kind back); NULL removes the limit. Live
-- reservations of the kind made before the first call are counted (as far as
-- the capacity goes). Lowering the capacity revokes no live reservation:
-- those beyond the new capacity keep their slot rows (numbered above it, so
-- queue_limits counts them) and nothing more of the kind is handed out
-- until fewer than the new capacity are held. Locks the limit row and all
-- its slots (in slot order).
-- Every step is one statement over the kind's slots, or over its live
-- reservations, with no join between the two whose plan could depend on
-- their statistics: the free slots and the holders to place are gathered
-- into arrays, and the slots are filled through an array indexed by slot
-- number; pyqueue__slot_held runs only for slots that have a holder. A call
-- thus costs a few scans, whatever the capacity and the plans.
CREATE OR REPLACE FUNCTION queue_set_limit(in_queue text, in_kind text, in_capacity integer)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now      timestamptz := pg_catalog.clock_timestamp();
    v_free     integer[];  -- the empty slots within the capacity, in slot order
    v_ids      bigint[];   -- the holders to place, in the order they take v_free
    v_keys     text[];
    v_attempts integer[];
    v_more     record;
    v_moved    integer;    -- the highest slot above the capacity whose holder moves
    v_pos      integer[];  -- by slot number: the index in v_ids of its new holder
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    IF in_capacity IS NULL THEN
        DELETE FROM pyqueue_limit WHERE queue_name::text = in_queue AND p_kind::text = in_kind;
        RETURN;
    END IF;
    IF in_capacity < 0 OR in_capacity > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: capacity must be from 0 to 10000 (NULL removes the limit)'
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO pyqueue_limit AS l (queue_name, p_kind, capacity)
    VALUES (in_queue, in_kind, in_capacity)
    ON CONFLICT (queue_name, p_kind) DO UPDATE SET capacity = EXCLUDED.capacity;
    PERFORM 1 FROM pyqueue_limit_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
     ORDER BY s.slot_no
       FOR UPDATE;
    INSERT INTO pyqueue_limit_slot (queue_name, p_kind, slot_no)
    SELECT in_queue, in_kind, g FROM pg_catalog.generate_series(1, in_capacity) g
    ON CONFLICT DO NOTHING;
    -- Slots above the capacity: a dead holder's slot goes, a live holder
    -- moves into a free slot within the capacity when there is one (in slot
    -- order), else keeps its slot until its reservation ends.
    DELETE FROM pyqueue_limit_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no > in_capacity
       AND (s.msg_id IS NULL
            OR NOT pyqueue__slot_held(in_queue, in_kind, s.msg_key::text, s.msg_id, s.msg_attempts, v_now));
    SELECT coalesce(pg_catalog.array_agg(s.slot_no ORDER BY s.slot_no), '{}') INTO v_free
      FROM pyqueue_limit_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no <= in_capacity
       AND (s.msg_id IS NULL
            OR NOT pyqueue__slot_held(in_queue, in_kind, s.msg_key::text, s.msg_id, s.msg_attempts, v_now));
    IF pg_catalog.cardinality(v_free) = 0 THEN
        RETURN;
    END IF;
    SELECT coalesce(pg_catalog.array_agg(h.msg_id ORDER BY h.slot_no), '{}'),
           coalesce(pg_catalog.array_agg(h.msg_key::text ORDER BY h.slot_no), '{}'),
           coalesce(pg_catalog.array_agg(h.msg_attempts ORDER BY h.slot_no), '{}'),
           pg_catalog.max(h.slot_no)
      INTO v_ids, v_keys, v_attempts, v_moved
      FROM (SELECT s.slot_no, s.msg_id, s.msg_key, s.msg_attempts
              FROM pyqueue_limit_slot s
             WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind AND s.slot_no > in_capacity
             ORDER BY s.slot_no
             LIMIT pg_catalog.cardinality(v_free)) h;
    -- Then live reservations that hold no slot yet (made before the limit),
    -- oldest first: a set difference, so no plan pairs each reservation
    -- with each slot.
    SELECT coalesce(pg_catalog.array_agg(u.id ORDER BY u.id), '{}') AS ids,
           coalesce(pg_catalog.array_agg(u.p_key ORDER BY u.id), '{}') AS keys,
           coalesce(pg_catalog.array_agg(u.attempts ORDER BY u.id), '{}') AS attempts
      INTO v_more
      FROM (SELECT d.id, d.p_key, d.attempts
              FROM (SELECT m.id, m.p_key::text AS p_key, m.attempts
                      FROM pyqueue_message m
                     WHERE m.queue_name::text = in_queue AND m.p_kind::text = in_kind
                       AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now
                    EXCEPT
                    SELECT s.msg_id, s.msg_key::text, s.msg_attempts
                      FROM pyqueue_limit_slot s
                     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
                       AND s.msg_id IS NOT NULL) d
             ORDER BY d.id
             LIMIT pg_catalog.cardinality(v_free) - pg_catalog.cardinality(v_ids)) u;
    v_ids := v_ids || v_more.ids;
    v_keys := v_keys || v_more.keys;
    v_attempts := v_attempts || v_more.attempts;
    IF pg_catalog.cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    v_pos := pg_catalog.array_fill(NULL::integer, ARRAY[in_capacity]);
    FOR i IN 1 .. pg_catalog.cardinality(v_ids) LOOP
        v_pos[v_free[i]] := i;
    END LOOP;
    UPDATE pyqueue_limit_slot s
       SET msg_id = v_ids[v_pos[s.slot_no]], msg_key = v_keys[v_pos[s.slot_no]],
           msg_attempts = v_attempts[v_pos[s.slot_no]]
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
       AND s.slot_no <= v_free[pg_catalog.cardinality(v_ids)] AND v_pos[s.slot_no] IS NOT NULL;
    DELETE FROM pyqueue_limit_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = in_kind
       AND s.slot_no > in_capacity AND s.slot_no <= v_moved;
END;
$$;

-- queue_limits: the limits of a queue (all queues when NULL) with in_use,
-- the live reservations holding a slot now. Reads without locks.
CREATE OR REPLACE FUNCTION queue_limits(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, p_kind text, capacity integer, in_use bigint)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT l.queue_name::text, l.p_kind::text, l.capacity,
               (SELECT pg_catalog.count(*) FROM pyqueue_limit_slot s JOIN pyqueue_message m
                    ON m.queue_name::text = s.queue_name::text AND m.p_key::text = s.msg_key::text AND m.p_kind::text = s.p_kind::text
                   AND m.id = s.msg_id AND m.attempts = s.msg_attempts
                 WHERE s.queue_name::text = l.queue_name::text AND s.p_kind::text = l.p_kind::text
                   AND m.reserve_token IS NOT NULL AND m.scheduled_at > v_now)
          FROM pyqueue_limit l
         WHERE in_queue IS NULL OR l.queue_name::text = in_queue
         ORDER BY l.queue_name, l.p_kind;
END;
$$;


-- queue_set_rate: at most in_n reservations of in_kind (NULL: of every kind
-- of the queue together) in any window of length in_per, counted on every
-- path that hands a message out (queue_reserve, queue_commit_reserve,
-- queue_pop). in_n NULL removes the rate (nothing to remove is no error);
-- in_n 1..10000, in_per above zero and at most a day (kept as seconds: a
-- day is 24 hours whatever the time zone). A kind rate and the queue-wide
-- rate both apply to a message of that kind. Slots: lowering n keeps the n
-- most recent times, raising it adds never-used slots, a new per keeps the
-- times. A reservation counts at its lease start (the reserved message's
-- scheduled_at minus its timeout: the slot gets exactly that time), a pop at
-- the clock the call read after its first row lock; so no window shorter
-- than per holds more than n lease starts. Locks the queue (as a write into
-- it), the rate row and all its slot rows (in slot order; reservers skip
-- them while it runs: nothing of the rate is handed out until it commits).
CREATE OR REPLACE FUNCTION queue_set_rate(in_queue text, in_kind text, in_n integer, in_per interval)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_kind  text := coalesce(in_kind, '');  -- '' = the queue-wide rate
    v_per   interval;
    v_times timestamptz[];
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    IF in_kind IS NOT NULL THEN
        PERFORM pyqueue__check_name('p_kind', in_kind, 128);
    END IF;
    IF in_n IS NULL THEN
        DELETE FROM pyqueue_rate WHERE queue_name::text = in_queue AND p_kind::text = v_kind;
        RETURN;
    END IF;
    IF in_n < 1 OR in_n > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: n must be from 1 to 10000 (NULL removes the rate)'
            USING ERRCODE = '22023';
    END IF;
    IF in_per IS NULL THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: per must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM pyqueue__check_duration('per', in_per, true);
    IF extract(epoch FROM in_per) > 86400::numeric THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: per must not exceed 1 day' USING ERRCODE = '22023';
    END IF;
    v_per := pg_catalog.make_interval(secs => extract(epoch FROM in_per)::double precision);
    INSERT INTO pyqueue_rate AS t (queue_name, p_kind, n, per)
    VALUES (in_queue, v_kind, in_n, v_per)
    ON CONFLICT (queue_name, p_kind) DO UPDATE SET n = EXCLUDED.n, per = EXCLUDED.per;
    PERFORM 1 FROM pyqueue_rate_slot s
     WHERE s.queue_name::text = in_queue AND s.p_kind::text = v_kind
     ORDER BY s.slot_no
       FOR UPDATE;
    -- the in_n most recent times, then never-used slots
    SELECT coalesce(pg_catalog.array_agg(u.used_at ORDER BY u.used_at DESC), '{}') INTO v_times
      FROM (SELECT s.used_at FROM pyqueue_rate_slot s
             WHERE s.queue_name::text = in_queue AND s.p_kind::text = v_kind AND s.used_at IS NOT NULL
             ORDER BY s.used_at DESC
             LIMIT in_n) u;
    DELETE FROM pyqueue_rate_slot s WHERE s.queue_name::text = in_queue AND s.p_kind::text = v_kind;
    INSERT INTO pyqueue_rate_slot (queue_name, p_kind, slot_no, used_at)
    SELECT in_queue, v_kind, g, v_times[g] FROM pg_catalog.generate_series(1, in_n) g;
END;
$$;

-- queue_rates: the rates of a queue (all queues when NULL), p_kind NULL for
-- a queue-wide rate (listed first): next_free_at, when the next unit is (or
-- was) free, min(slot time + per), NULL while some slot was never used;
-- in_window, the slots used within the last per (the rate is used up when
-- it equals n). Reads without locks.
CREATE OR REPLACE FUNCTION queue_rates(in_queue text DEFAULT NULL)
RETURNS TABLE (queue text, p_kind text, n integer, per interval, next_free_at timestamptz, in_window integer)
LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
BEGIN
    IF in_queue IS NOT NULL THEN
        PERFORM pyqueue__queue(in_queue);
    END IF;
    RETURN QUERY
        SELECT t.queue_name::text, NULLIF(t.p_kind::text, ''::text), t.n, t.per,
               (SELECT CASE WHEN pg_catalog.bool_or(s.used_at IS NULL) THEN NULL
                            ELSE pg_catalog.min(s.used_at) + t.per END
                  FROM pyqueue_rate_slot s
                 WHERE s.queue_name::text = t.queue_name::text AND s.p_kind::text = t.p_kind::text),
               (SELECT pg_catalog.count(*)::integer
                  FROM pyqueue_rate_slot s
                 WHERE s.queue_name::text = t.queue_name::text AND s.p_kind::text = t.p_kind::text
                   AND s.used_at > v_now - t.per)
          FROM pyqueue_rate t
         WHERE in_queue IS NULL OR t.queue_name::text = in_queue
         ORDER BY t.queue_name::text, t.p_kind::text;
END;
$$;

-- queue_set_group_limit: up to in_k messages of a FIFO group live at once
-- (its heads: ready, delayed or reserved), started in the group's order,
-- instead of one. in_group NULL sets the queue's default for every group; a
-- named group's limit overrides it. in_k 1..10000; NULL removes the limit
-- (back to the default, or to 1). Raising it lets each group concerned take
-- its new heads at once (due now or at their run time, whichever is later:
-- behind the heads already ready); lowering it revokes nothing (no head is
-- added until fewer than k are live). Removing the last limit that applies
-- to a group whose heads are more than one leaves them live and gives the
-- group a limit of 1 of its own (shown by queue_groups as before: 1), so
-- that no head is added until they end. Locks: the limit row, then each
-- group concerned (in group order) as pyqueue__group_settle does.
CREATE OR REPLACE FUNCTION queue_set_group_limit(in_queue text, in_group text, in_k integer)
RETURNS void
LANGUAGE plpgsql
SECURITY DEFINER SET search_path FROM CURRENT
AS $$
DECLARE
    v_group text := coalesce(in_group, '');  -- '' = the queue's default
    v_now   timestamptz;
    v_each  text;
BEGIN
    PERFORM pyqueue__queue(in_queue, true);
    IF in_group IS NOT NULL THEN
        PERFORM pyqueue__check_name('group', in_group, 255);
    END IF;
    IF in_k IS NULL THEN
        DELETE FROM pyqueue_group_limit WHERE queue_name::text = in_queue AND group_key::text = v_group;
        -- A group left without any limit settles as with one head, blind to more: one that has
        -- several heads keeps a limit of 1 of its own, which counts them until fewer are live.
        -- Under the groups' row locks (in group order): no settle changes their heads meanwhile.
        PERFORM 1 FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND (in_group IS NULL OR g.group_key::text = in_group)
         ORDER BY g.group_key::text
           FOR UPDATE;
        INSERT INTO pyqueue_group_limit (queue_name, group_key, k)
        SELECT in_queue, g.group_key, 1
          FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND (in_group IS NULL OR g.group_key::text = in_group)
           AND NOT EXISTS (SELECT 1 FROM pyqueue_group_limit l
                            WHERE l.queue_name::text = in_queue
                              AND (l.group_key::text = g.group_key::text OR l.group_key::text = ''::text))
           AND (SELECT pg_catalog.count(*) FROM pyqueue_message m
                 WHERE m.queue_name::text = in_queue AND m.group_key::text = g.group_key::text
                   AND m.scheduled_at < timestamptz '9999-12-31 23:59:59.999999+00') > 1::bigint
        ON CONFLICT (queue_name, group_key) DO NOTHING;
        RETURN;
    END IF;
    IF in_k < 1 OR in_k > 10000 THEN
        RAISE EXCEPTION 'pyqueue:invalid_argument: k must be from 1 to 10000 (NULL removes the group limit)'
            USING ERRCODE = '22023';
    END IF;
    PERFORM pg_catalog.pg_current_xact_id();  -- first: see pyqueue__ready_from_advance
    v_now := pg_catalog.clock_timestamp();
    INSERT INTO pyqueue_group_limit AS l (queue_name, group_key, k)
    VALUES (in_queue, v_group, in_k)
    ON CONFLICT (queue_name, group_key) DO UPDATE SET k = EXCLUDED.k;
    FOR v_each IN
        SELECT g.group_key::text FROM pyqueue_group g
         WHERE g.queue_name::text = in_queue AND (in_group IS NULL OR g.group_key::text = in_group)
         ORDER BY g.group_key::text
    LOOP
        PERFORM pyqueue__group_settle(in_queue, v_each, v_now, true);
    END LOOP;
END;
$$;

-- ==== workers ====
-- The worker registry: register, heartbeat, deregister, list, and hand back
-- the reservations of workers that stopped heartbeating.

-- queue_worker_register: records a worker; returns one row (worker_id,
-- secret): secret is a fresh random token that heartbeat and deregister
-- require, so that a worker can touch only its own registration. The worker
-- then reserves with worker = in_name || '#' || worker_id (queue_workers
-- shows it as reserve_as) so that queue_release_dead_workers can find its
-- messages. Inserts one row.
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


-- ==== schedules ====
-- Recurring messages, every n seconds or on a cron expression (UTC): each
-- occurrence is an ordinary message, and committing it pushes the next.

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


-- ==== ingest ====
-- Bulk enqueue with plain INSERTs into the table queue_ingest (Spark's
-- df.write.jdbc): a statement-level trigger (pyqueue__ingest, above) enqueues
-- each INSERT's rows; queue_ingest_flush reports what a tagged session's
-- INSERTs did.

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


-- ==== privileges ====
-- Least privilege: EXECUTE on every routine, contract and internal, is
-- revoked from PUBLIC, so that nobody but the owner may call anything until
-- granted.

-- No routine is callable by PUBLIC (PostgreSQL's default for a new function):
-- SECURITY DEFINER routines open to everyone would let any role push and
-- reserve. Applications get EXECUTE on the routines of their capability
-- (pyqueue-sql grant; README "Least privilege"). Internal helpers (pyqueue__*)
-- are granted to nobody: only the routines, running as their owner, call them.
-- The list is static (no SQL built from names); a routine added to this file
-- must be added here (tests/security/test_privileges.py fails otherwise), in
-- the order of the sections: the helpers, then the routines topic by topic.
REVOKE EXECUTE ON FUNCTION
    pyqueue__check_name, pyqueue__check_reservation, pyqueue__queue, pyqueue__negative_part, pyqueue__check_duration,
    pyqueue__check_batch_size, pyqueue__bad_name, pyqueue__check_batch, pyqueue__occurrence_key,
    pyqueue__refuse_occurrence_key, pyqueue__refuse_payload, pyqueue__check_payloads, pyqueue__check_headers,
    pyqueue__check_batch_headers, pyqueue__refuse_reservation,
    pyqueue__check_kinds, pyqueue__check_reserve,
    pyqueue__ready_from_lower, pyqueue__ready_from_advance,
    pyqueue__ready_tids, pyqueue__due_tids,
    pyqueue__reserve, pyqueue__dead_letter, pyqueue__give_back,
    pyqueue__channel, pyqueue__notify, pyqueue__archive,
    pyqueue__result_channel, pyqueue__result_notify, pyqueue__record_result, pyqueue__finish, pyqueue__finish_held,
    pyqueue__deps_left, pyqueue__json_value, pyqueue__check_results, pyqueue__refuse_result,
    pyqueue__slot_held, pyqueue__limit_claim, pyqueue__rate_slot,
    pyqueue__limited_tids, pyqueue__limit_renew, pyqueue__check_worker, pyqueue__cron_field,
    pyqueue__cron_next, pyqueue__schedule_key, pyqueue__schedule_after, pyqueue__push_occurrence, pyqueue__schedule_next,
    pyqueue__schedule, pyqueue__ingest, pyqueue__delete_held, pyqueue__blocked_at, pyqueue__group_settle,
    pyqueue__group_settle_k, pyqueue__groups_settle, pyqueue__check_topic, pyqueue__topic_regex,
    queue_create, queue_reset_setting, queue_settings, queue_set_max_reservation, queue_set_max_payload,
    queue_drop, queue_pause, queue_resume,
    queue_stats,
    queue_push, queue_push_with_headers, queue_push_batch, queue_push_batch_with_headers, queue_push_replace,
    queue_push_grouped, queue_push_grouped_with_headers, queue_push_batch_grouped,
    queue_push_batch_grouped_with_headers,
    queue_pop, queue_reserve,
    queue_commit(text, text, text, text), queue_commit(text, text, text, uuid),
    queue_rollback(text, text, text, text, interval), queue_rollback(text, text, text, uuid, interval),
    queue_fail(text, text, text, text, interval, text), queue_fail(text, text, text, uuid, interval, text),
    queue_snooze(text, text, text, text, interval), queue_snooze(text, text, text, uuid, interval),
    queue_give_up(text, text, text, text, text), queue_give_up(text, text, text, uuid, text),
    queue_extend(text, text, text, text, interval), queue_extend(text, text, text, uuid, interval),
    queue_move(text, text, text, text, text, jsonb), queue_move(text, text, text, uuid, text, jsonb),
    queue_remove, queue_release,
    queue_channel, queue_set_notify_window, queue_next_scheduled_at, queue_wait,
    queue_commit_reserve(text, text, text, text, text, interval, integer, text[]),
    queue_commit_reserve(text, text, text, uuid, text, interval, integer, text[]),
    queue_commit_batch,
    queue_bind, queue_unbind, queue_bindings, queue_publish, queue_publish_with_headers, queue_publish_batch,
    queue_publish_batch_with_headers,
    queue_purge_history, queue_replay, queue_redrive, queue_dead_letters, queue_message,
    queue_message_history, queue_messages, queue_groups, queue_throughput,
    queue_set_result_retention,
    queue_commit_result(text, text, text, text, jsonb), queue_commit_result(text, text, text, uuid, jsonb),
    queue_commit_result_batch, queue_result, queue_result_wait, queue_result_channel, queue_cancel,
    queue_renew(text, text, text, text, interval), queue_renew(text, text, text, uuid, interval),
    queue_cancel_held(text, text, text, text), queue_cancel_held(text, text, text, uuid),
    queue_set_progress(text, text, text, text, jsonb), queue_set_progress(text, text, text, uuid, jsonb),
    queue_push_after, queue_parent_results,
    queue_set_limit, queue_limits, queue_set_rate, queue_rates, queue_set_group_limit,
    queue_worker_register, queue_worker_heartbeat, queue_worker_deregister,
    queue_release_dead_workers, queue_workers,
    queue_schedule_every, queue_schedule_cron, queue_unschedule, queue_schedules,
    queue_ingest_flush
  FROM PUBLIC;


-- The caller's search_path again (pinned at the top of this script).
DO $$
BEGIN
    IF pg_catalog.current_setting('pyqueue.search_path_before', true) IS NOT NULL THEN
        PERFORM pg_catalog.set_config('search_path', pg_catalog.current_setting('pyqueue.search_path_before'), false);
    END IF;
END
$$;
