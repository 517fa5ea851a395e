-- ==== preamble ====

-- pyqueue-sql: PostgreSQL 15+ routines, the current state.
--
-- Runs after schema.sql (the tables) and can be run again at any time: every
-- routine is CREATE OR REPLACE, so a migration installs all of routines/ again.
--
-- Layout: one file per topic, routines/NN_<topic>.sql, with the same names
-- in both dialects (../../README.md says what each topic holds). They run in
-- name order as one script: this file first, 19_privileges.sql last. Each
-- starts with the line '-- ==== <topic> ===='; an internal helper
-- (pyqueue__*) sits in the file of the topic that calls it, before that
-- topic's routines (02_checks.sql: those that several topics call).
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
-- generic plans are those the plan guards check (tests/contract/test_reserve_plans.py
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


-- Routines of earlier installs that this one cannot replace in place, each
-- dropped here when the catalog names it (nothing is dropped, nor any notice
-- printed, where there are none), in one loop:
-- - every routine of ours in this schema with a polymorphic argument:
--   earlier versions took the token as a polymorphic type (see "Tokens" at
--   the top), and an upgrade leaves none;
-- - pyqueue__ready_tids and pyqueue__limited_tids returning the ctids alone
--   (tid[]): a function cannot change its result type in place; internal
--   helpers, granted to nobody; pyqueue__ready_tids of five arguments, at
--   all: it took a sixth (in_mark), with a default, and the two would make
--   a call of five ambiguous;
-- - pyqueue__reserve, queue_reserve, queue_commit_reserve (both), queue_pop,
--   queue_dead_letters and queue_messages returning their rows without the
--   trailing headers column (a function cannot change its result columns in
--   place), and with them their grants (pyqueue-sql grant gives them again);
--   queue_message is dropped beside its definition.
DO $$
DECLARE
    v_old regprocedure;
BEGIN
    FOR v_old IN
        SELECT p.oid::regprocedure
          FROM pg_catalog.pg_proc p
         WHERE (p.pronamespace OPERATOR(pg_catalog.=) pg_catalog.to_regnamespace(pg_catalog.current_schema())
                AND p.proname::text LIKE 'queue\_%'
                AND EXISTS (SELECT 1 FROM pg_catalog.unnest(p.proargtypes::oid[]) AS a (t)
                              JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) a.t
                             WHERE ty.typtype OPERATOR(pg_catalog.=) 'p'))
            OR (p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                    pg_catalog.to_regprocedure(
                        'pyqueue__limited_tids(text, timestamptz, integer, text[], timestamptz, bigint, integer)')]::oid[])
                AND p.prorettype OPERATOR(pg_catalog.=) 'tid[]'::pg_catalog.regtype::pg_catalog.oid)
            OR p.oid OPERATOR(pg_catalog.=)
                   pg_catalog.to_regprocedure('pyqueue__ready_tids(text, timestamptz, integer, text[], boolean)')
            OR (p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                    pg_catalog.to_regprocedure('pyqueue__reserve(pyqueue_queue, text, interval, integer, text[])'),
                    pg_catalog.to_regprocedure('queue_reserve(text, text, interval, integer, text[])'),
                    pg_catalog.to_regprocedure('queue_commit_reserve(text, text, text, text, text, interval, integer, text[])'),
                    pg_catalog.to_regprocedure('queue_commit_reserve(text, text, text, uuid, text, interval, integer, text[])'),
                    pg_catalog.to_regprocedure('queue_pop(text, integer)'),
                    pg_catalog.to_regprocedure('queue_dead_letters(text)'),
                    pg_catalog.to_regprocedure('queue_messages(text, text, text, text, text, integer)')]::oid[])
                AND NOT ('headers'::text OPERATOR(pg_catalog.=) ANY (p.proargnames::text[])
                         OR 'c_headers'::text OPERATOR(pg_catalog.=) ANY (p.proargnames::text[])))
         ORDER BY p.oid
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', v_old);
    END LOOP;
END
$$;
