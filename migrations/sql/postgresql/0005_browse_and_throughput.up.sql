-- pyqueue-sql revision 0005 (postgresql): no table changes. Frozen once released.
-- The routines follow from sql/postgresql/routines.sql (ROUTINES in the revision).

-- queue_messages and queue_throughput are monitor reads: each is created as a
-- stub (the routines that follow replace its body and settings, keeping its
-- ACL) and granted to the roles that may execute queue_stats, so that an
-- account granted monitor (or admin) before the upgrade keeps all of it.
DO $$
DECLARE
    v_new    record;
    v_grant  record;
BEGIN
    FOR v_new IN
        SELECT * FROM (VALUES
            ('queue_messages(in_queue text, in_state text DEFAULT NULL, in_key_prefix text DEFAULT NULL, '
             || 'in_after_key text DEFAULT NULL, in_after_kind text DEFAULT NULL, in_n integer DEFAULT NULL) '
             || 'RETURNS TABLE (p_key text, p_kind text, state text, priority integer, attempts integer, '
             || 'scheduled_at timestamptz, created_at timestamptz, reserved_by text, last_error text, '
             || 'dead_from text)',
             'queue_messages(text, text, text, text, text, integer)'),
            ('queue_throughput(in_queue text DEFAULT NULL, in_since timestamptz DEFAULT NULL) '
             || 'RETURNS TABLE (queue text, minute timestamptz, committed bigint, dead_lettered bigint, '
             || 'moved bigint, popped bigint)',
             'queue_throughput(text, timestamptz)')
        ) AS c (new_header, new_sig)
    LOOP
        IF pg_catalog.to_regprocedure(v_new.new_sig) IS NULL THEN
            EXECUTE 'CREATE FUNCTION ' || v_new.new_header
                    || ' LANGUAGE plpgsql AS $body$ BEGIN RAISE EXCEPTION ''pyqueue: not installed yet''; END; $body$';
            EXECUTE 'REVOKE EXECUTE ON FUNCTION ' || v_new.new_sig || ' FROM PUBLIC';
        END IF;
        FOR v_grant IN
            SELECT DISTINCT pg_catalog.quote_ident(r.rolname::text) AS grantee, a.is_grantable AS grantable
              FROM pg_catalog.pg_proc p
             CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
              JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
             WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('queue_stats(text)')::oid
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'::text
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
        LOOP
            EXECUTE 'GRANT EXECUTE ON FUNCTION ' || v_new.new_sig || ' TO ' || v_grant.grantee
                    || CASE WHEN v_grant.grantable THEN ' WITH GRANT OPTION' ELSE '' END;
        END LOOP;
    END LOOP;
END
$$;
