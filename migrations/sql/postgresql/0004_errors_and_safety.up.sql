-- pyqueue-sql revision 0004 (postgresql): the DDL delta from 0003. Frozen once released.
-- The routines follow from 0004_errors_and_safety.routines.sql.

-- The last error of a message, and where a dead letter came from.
ALTER TABLE pyqueue_message
    ADD COLUMN last_error    varchar(2000) NULL,
    ADD COLUMN dead_from     varchar(128) NULL,
    ADD COLUMN dead_attempts integer      NULL;

ALTER TABLE pyqueue_history
    ADD COLUMN last_error varchar(2000) NULL;

-- Worker secrets: existing registrations get a random one each (their
-- workers re-register when their next heartbeat answers false).
ALTER TABLE pyqueue_worker
    ADD COLUMN secret uuid NOT NULL DEFAULT gen_random_uuid();

-- pyqueue_ingest_tally: what the queue_ingest trigger did, per ingest tag (the
-- setting pyqueue.ingest_tag of the inserting session, e.g. set by pgJDBC's
-- options=-c pyqueue.ingest_tag=...; an INSERT without one leaves nothing here).
-- One row per INSERT statement, never updated, so parallel writers with one tag
-- never wait for each other; the rows of a transaction that rolls back vanish
-- with it. queue_ingest_flush, called by a session with the same tag, returns
-- the sums and deletes them (and rows older than a day, of any tag).
CREATE TABLE pyqueue_ingest_tally (
    tag        text        NOT NULL,
    enqueued   bigint      NOT NULL,
    duplicates bigint      NOT NULL,
    tallied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX pyqueue_ingest_tally_tag_idx ON pyqueue_ingest_tally (tag);

-- Dead letters already waiting keep the origin the view used to show (the
-- one queue using that dead-letter queue); their attempts there are unknown.
UPDATE pyqueue_message m
   SET dead_from = (SELECT CASE WHEN count(*) = 1 THEN min(s.queue_name) END
                      FROM pyqueue_queue s
                     WHERE s.dead_letter_queue = m.queue_name)
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);

-- Messages sitting in dead-letter queues (queues that some queue names as
-- its dead_letter_queue). from_queue and attempts: the queue each one came
-- from and the deliveries it had there (recorded on the dead-letter copy).
-- OR REPLACE keeps the grants given on the view.
CREATE OR REPLACE VIEW pyqueue_dead_letters AS
SELECT m.queue_name                    AS dead_letter_queue,
       m.dead_from                     AS from_queue,
       m.p_key,
       m.p_kind,
       m.payload,
       m.priority,
       m.dead_attempts                 AS attempts,
       m.created_at,
       m.scheduled_at_initially        AS dead_lettered_at,
       (m.reserve_token IS NOT NULL AND m.scheduled_at > clock_timestamp()) AS reserved,
       m.last_error
  FROM pyqueue_message m
 WHERE m.queue_name IN (SELECT q.dead_letter_queue FROM pyqueue_queue q
                         WHERE q.dead_letter_queue IS NOT NULL);

COMMENT ON VIEW pyqueue_dead_letters IS
    'pyqueue-sql: messages in dead-letter queues, with the queue each came from, its deliveries there and its last error.';

-- Routines whose signature or result changes: CREATE OR REPLACE cannot
-- change them, so each old one is dropped and the new one created as a stub
-- (the routines file that follows replaces its body and settings, keeping
-- its ACL); EXECUTE grants that roles had on the old one are given again on
-- the new one. No CASCADE: an object of yours that depends on one of them
-- stops the upgrade with an error.
-- Routines new in 0004 are created as stubs the same way, granted to the
-- roles that may execute a routine of the same capability (queue_fail: those
-- of queue_rollback; queue_settings, queue_message, queue_message_history:
-- those of queue_stats; queue_reset_setting: those of queue_create), so that
-- an account granted a capability before the upgrade keeps all of it.
DO $$
DECLARE
    v_change record;
    v_grant  record;
BEGIN
    FOR v_change IN
        SELECT * FROM (VALUES
            ('queue_worker_register(text, text, integer, text[])',
             'queue_worker_register(in_name text, in_host text DEFAULT NULL, in_pid integer DEFAULT NULL, '
             || 'in_queues text[] DEFAULT NULL) RETURNS TABLE (worker_id bigint, secret uuid)',
             'queue_worker_register(text, text, integer, text[])', true),
            ('queue_worker_heartbeat(bigint)',
             'queue_worker_heartbeat(in_worker_id bigint, in_secret uuid) RETURNS boolean',
             'queue_worker_heartbeat(bigint, uuid)', true),
            ('queue_worker_deregister(bigint)',
             'queue_worker_deregister(in_worker_id bigint, in_secret uuid) RETURNS boolean',
             'queue_worker_deregister(bigint, uuid)', true),
            ('queue_dead_letters(text)',
             'queue_dead_letters(in_queue text) RETURNS TABLE (dead_letter_queue varchar, from_queue varchar, '
             || 'p_key varchar, p_kind varchar, payload jsonb, priority integer, attempts integer, '
             || 'created_at timestamptz, dead_lettered_at timestamptz, reserved boolean, last_error varchar)',
             'queue_dead_letters(text)', true),
            ('queue_rollback(text, text, text, uuid, interval)',
             'queue_fail(in_queue text, in_key text, in_kind text, in_token uuid, in_delay interval DEFAULT NULL, '
             || 'in_error text DEFAULT NULL) RETURNS text',
             'queue_fail(text, text, text, uuid, interval, text)', false),
            ('queue_stats(text)',
             'queue_settings(in_queue text DEFAULT NULL) RETURNS TABLE (queue text, visibility_timeout interval, '
             || 'max_attempts integer, dead_letter_queue text, history_retention interval, paused boolean, '
             || 'notify_window interval)',
             'queue_settings(text)', false),
            ('queue_stats(text)',
             'queue_message(in_queue text, in_key text, in_kind text) RETURNS TABLE (p_key text, p_kind text, '
             || 'state text, payload jsonb, priority integer, attempts integer, scheduled_at timestamptz, '
             || 'created_at timestamptz, reserved_by text, last_error text, dead_from text)',
             'queue_message(text, text, text)', false),
            ('queue_stats(text)',
             'queue_message_history(in_queue text, in_key text, in_kind text) RETURNS TABLE ('
             || 'processed_at timestamptz, outcome text, to_queue text, attempts integer, reserved_by text, '
             || 'last_error text)',
             'queue_message_history(text, text, text)', false),
            ('queue_create(text, interval, integer, text, interval)',
             'queue_reset_setting(in_queue text, in_setting text) RETURNS void',
             'queue_reset_setting(text, text)', false)
        ) AS c (old_sig, new_header, new_sig, replaces)
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
            IF v_change.replaces THEN
                EXECUTE 'DROP FUNCTION ' || v_change.old_sig;
            END IF;
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
