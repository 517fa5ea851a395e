-- pyqueue-sql revision 0010 (postgresql), after its routines: an account that
-- holds a capability keeps all of it. The roles that may execute queue_push
-- (producer) get the grouped pushes and the publishes, those that may execute
-- queue_create (admin) queue_bind and queue_unbind, those that may execute
-- queue_stats (monitor, admin) queue_bindings and queue_groups, with the
-- grant option where they have it. (MySQL/MariaDB: the migration's grant
-- snapshot does the same, see pyqueue_sql.privileges.ROUTINES_ADDED_WITH.)
DO $$
DECLARE
    v_new   record;
    v_grant record;
BEGIN
    FOR v_new IN
        SELECT * FROM (VALUES
            ('queue_push(text, text, text, jsonb, timestamptz, integer)',
             'queue_push_grouped(text, text, text, text, jsonb, timestamptz, integer)'),
            ('queue_push(text, text, text, jsonb, timestamptz, integer)',
             'queue_push_batch_grouped(text, text[], text[], text[], jsonb[], timestamptz[], integer[])'),
            ('queue_push(text, text, text, jsonb, timestamptz, integer)',
             'queue_publish(text, text, text, jsonb, timestamptz, integer)'),
            ('queue_push(text, text, text, jsonb, timestamptz, integer)',
             'queue_publish_batch(text[], text[], text[], jsonb[], timestamptz[], integer[])'),
            ('queue_create(text, interval, integer, text, interval)', 'queue_bind(text, text)'),
            ('queue_create(text, interval, integer, text, interval)', 'queue_unbind(text, text)'),
            ('queue_stats(text)', 'queue_bindings(text)'),
            ('queue_stats(text)', 'queue_groups(text, integer)')
        ) AS c (old_sig, new_sig)
    LOOP
        FOR v_grant IN
            SELECT DISTINCT pg_catalog.quote_ident(r.rolname::text) AS grantee, a.is_grantable AS grantable
              FROM pg_catalog.pg_proc p
             CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
              JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.grantee
             WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(v_new.old_sig)::oid
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'::text
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
        LOOP
            EXECUTE 'GRANT EXECUTE ON FUNCTION ' || v_new.new_sig || ' TO ' || v_grant.grantee
                    || CASE WHEN v_grant.grantable THEN ' WITH GRANT OPTION' ELSE '' END;
        END LOOP;
    END LOOP;
END
$$;
