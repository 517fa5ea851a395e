-- pyqueue-sql revision 0004 (postgresql), down: undoes what 0004 added (only what exists);
-- 0003_hardening.routines.sql then restores 0003's routines.

-- Routines new in 0004 (never granted by 0003's set-up; no CASCADE).
DROP FUNCTION IF EXISTS queue_throughput(text, timestamptz);
DROP FUNCTION IF EXISTS queue_messages(text, text, text, text, text, integer);
DROP FUNCTION IF EXISTS queue_message_history(text, text, text);
DROP FUNCTION IF EXISTS queue_message(text, text, text);
DROP FUNCTION IF EXISTS queue_fail(text, text, text, uuid, interval, text);
DROP FUNCTION IF EXISTS pyqueue__give_back(text, text, text, uuid, interval, boolean, text);
DROP FUNCTION IF EXISTS queue_settings(text);
DROP FUNCTION IF EXISTS queue_reset_setting(text, text);
DROP FUNCTION IF EXISTS pyqueue__check_worker(bigint, uuid);
DROP FUNCTION IF EXISTS pyqueue__slot_held(text, text, text, bigint, integer, timestamptz);

-- Routines whose signature or result 0004 changed: back to 0003's, as stubs
-- that 0003_hardening.routines.sql then fills in (keeping their ACL), with
-- the EXECUTE grants roles had on the 0004 ones.
DO $$
DECLARE
    v_change record;
    v_grant  record;
BEGIN
    FOR v_change IN
        SELECT * FROM (VALUES
            ('queue_worker_register(text, text, integer, text[])',
             'queue_worker_register(in_name text, in_host text DEFAULT NULL, in_pid integer DEFAULT NULL, '
             || 'in_queues text[] DEFAULT NULL) RETURNS bigint',
             'queue_worker_register(text, text, integer, text[])'),
            ('queue_worker_heartbeat(bigint, uuid)',
             'queue_worker_heartbeat(in_worker_id bigint) RETURNS boolean',
             'queue_worker_heartbeat(bigint)'),
            ('queue_worker_deregister(bigint, uuid)',
             'queue_worker_deregister(in_worker_id bigint) RETURNS boolean',
             'queue_worker_deregister(bigint)'),
            ('queue_dead_letters(text)',
             'queue_dead_letters(in_queue text) RETURNS TABLE (dead_letter_queue varchar, from_queue varchar, '
             || 'p_key varchar, p_kind varchar, payload jsonb, priority integer, attempts integer, '
             || 'created_at timestamptz, dead_lettered_at timestamptz, reserved boolean)',
             'queue_dead_letters(text)')
        ) AS c (old_sig, new_header, new_sig)
    LOOP
        CREATE TEMP TABLE IF NOT EXISTS pyqueue_0004_grants (grantee text, grantable boolean) ON COMMIT DROP;
        DELETE FROM pg_temp.pyqueue_0004_grants;
        IF pg_catalog.to_regprocedure(v_change.old_sig) IS NOT NULL THEN
            INSERT INTO pg_temp.pyqueue_0004_grants
            SELECT CASE WHEN a.grantee OPERATOR(pg_catalog.=) 0::oid THEN 'PUBLIC'
                        ELSE pg_catalog.quote_ident(r.rolname::text) END,
                   a.is_grantable
              FROM pg_catalog.pg_proc p
             CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
              LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
             WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(v_change.old_sig)::oid
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'::text
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner;
            EXECUTE 'DROP FUNCTION ' || v_change.old_sig;
        END IF;
        IF pg_catalog.to_regprocedure(v_change.new_sig) IS NULL THEN
            EXECUTE 'CREATE FUNCTION ' || v_change.new_header
                    || ' LANGUAGE plpgsql AS $body$ BEGIN RAISE EXCEPTION ''pyqueue: not installed yet''; END; $body$';
        END IF;
        FOR v_grant IN SELECT DISTINCT g.grantee, g.grantable FROM pg_temp.pyqueue_0004_grants g LOOP
            EXECUTE 'GRANT EXECUTE ON FUNCTION ' || v_change.new_sig || ' TO ' || v_grant.grantee
                    || CASE WHEN v_grant.grantable THEN ' WITH GRANT OPTION' ELSE '' END;
        END LOOP;
    END LOOP;
END
$$;

-- The dead-letter view as 0003 had it (a column cannot be removed by OR
-- REPLACE: dropped and created again; grants on the view go with it).
DROP VIEW IF EXISTS pyqueue_dead_letters;
CREATE VIEW pyqueue_dead_letters AS
SELECT m.queue_name                    AS dead_letter_queue,
       (SELECT CASE WHEN count(*) = 1 THEN min(s.queue_name) END
          FROM pyqueue_queue s
         WHERE s.dead_letter_queue = m.queue_name)::varchar(128) AS from_queue,
       m.p_key,
       m.p_kind,
       m.payload,
       m.priority,
       m.attempts,
       m.created_at,
       m.scheduled_at_initially        AS dead_lettered_at,
       (m.reserve_token IS NOT NULL AND m.scheduled_at > clock_timestamp()) AS reserved
  FROM pyqueue_message m
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);

COMMENT ON VIEW pyqueue_dead_letters IS
    'pyqueue-sql: messages in dead-letter queues, with the queue they came from when it is unambiguous.';

ALTER TABLE pyqueue_worker DROP COLUMN IF EXISTS secret;
ALTER TABLE pyqueue_history DROP COLUMN IF EXISTS last_error;
ALTER TABLE pyqueue_message
    DROP COLUMN IF EXISTS dead_attempts,
    DROP COLUMN IF EXISTS dead_from,
    DROP COLUMN IF EXISTS last_error;

DROP TABLE IF EXISTS pyqueue_ingest_tally;
