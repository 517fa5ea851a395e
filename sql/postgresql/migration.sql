-- pyqueue-sql: the statements pyqueue_sql.migrate runs around the revisions
-- (PostgreSQL). Named statements as in queries.sql; always run with a
-- parameter dict, so '%%' is a literal '%'.

-- name: migration_lock
-- Released by the commit (or rollback) of the migrating transaction: each run
-- is one transaction here, DDL included.
SELECT pg_advisory_xact_lock(hashtext('pyqueue-sql migrations'))

-- name: installed_objects
-- What pyqueue-sql installed in the current schema, migration bookkeeping left out.
SELECT 'table' AS kind, c.relname::text AS name
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'p')
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
   AND c.relname NOT LIKE 'pyqueue\_alembic%%'
UNION ALL
SELECT 'routine', p.proname::text
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema() AND (p.proname LIKE 'queue\_%%' OR p.proname LIKE 'pyqueue\_%%')
 ORDER BY 1, 2

-- name: live_messages
SELECT count(*) FROM pyqueue_message

-- name: version_table_rows
SELECT count(*) FROM pyqueue_alembic_version

-- name: drop_version_table
DROP TABLE IF EXISTS pyqueue_alembic_version

-- Catalog fingerprint of a revision (how `migrate --adopt` recognises it):
-- every fingerprint_* statement, in file order, hashed together. The tables
-- only (columns, indexes, constraints, views, triggers), no routine, owner or
-- grant: adopt installs routines/ again; names are unqualified by the
-- current schema.

-- name: fingerprint_tables
SELECT c.relname::text, c.relkind::text
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'p', 'S', 'm')
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
   AND c.relname NOT LIKE 'pyqueue\_alembic%%'
 ORDER BY 1

-- name: fingerprint_columns
SELECT table_name::text, column_name::text, ordinal_position, data_type::text,
       character_maximum_length, is_nullable::text,
       replace(coalesce(column_default::text, ''), quote_ident(current_schema()) || '.', ''),
       is_identity::text
  FROM information_schema.columns
 WHERE table_schema = current_schema()
   AND (table_name LIKE 'pyqueue%%' OR table_name LIKE 'queue\_ingest%%')
   AND table_name NOT LIKE 'pyqueue\_alembic%%'
 ORDER BY 1, 3

-- name: fingerprint_indexes
SELECT tablename::text, indexname::text,
       replace(indexdef, quote_ident(current_schema()) || '.', '')
  FROM pg_indexes
 WHERE schemaname = current_schema()
   AND (tablename LIKE 'pyqueue%%' OR tablename LIKE 'queue\_ingest%%')
   AND tablename NOT LIKE 'pyqueue\_alembic%%'
 ORDER BY 1, 2

-- name: fingerprint_constraints
SELECT r.relname::text, c.conname::text,
       replace(pg_get_constraintdef(c.oid), quote_ident(current_schema()) || '.', '')
  FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
  JOIN pg_namespace n ON n.oid = r.relnamespace
 WHERE n.nspname = current_schema()
   AND (r.relname LIKE 'pyqueue%%' OR r.relname LIKE 'queue\_ingest%%')
   AND r.relname NOT LIKE 'pyqueue\_alembic%%'
 ORDER BY 1, 2

-- name: fingerprint_triggers
SELECT t.tgname::text, c.relname::text, t.tgtype, p.proname::text
  FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
  JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND NOT t.tgisinternal
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
 ORDER BY 1, 2

-- ---- drift (`pyqueue-sql migrate --check`) ----------------------------------
-- Every drift_* statement returns (kind, name, definition...) rows: one object may span
-- several rows (a table's columns); pyqueue_sql.migrate hashes each object's rows into the
-- digest recorded in pyqueue_installed (revision 0002_installed) and compares them.
-- Grants: those to PUBLIC only (the install revokes EXECUTE from PUBLIC); the grants of
-- application roles are the operator's (`pyqueue-sql grant`) and not compared, but for the
-- ones no capability gives (exposure_* below).

-- name: drift_routines
SELECT 'routine', p.oid::regprocedure::text,
       replace(pg_get_functiondef(p.oid), quote_ident(current_schema()) || '.', '')
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema() AND p.prokind IN ('f', 'p')
   AND (p.proname LIKE 'queue\_%%' OR p.proname LIKE 'pyqueue\_%%')

-- name: drift_tables
SELECT 'table', table_name::text, column_name::text, ordinal_position, data_type::text,
       character_maximum_length, is_nullable::text,
       replace(coalesce(column_default::text, ''), quote_ident(current_schema()) || '.', ''),
       is_identity::text
  FROM information_schema.columns
 WHERE table_schema = current_schema()
   AND (table_name LIKE 'pyqueue%%' OR table_name LIKE 'queue\_ingest%%')
   AND table_name NOT LIKE 'pyqueue\_alembic%%'

-- name: drift_indexes
SELECT 'index', indexname::text, tablename::text,
       replace(indexdef, quote_ident(current_schema()) || '.', '')
  FROM pg_indexes
 WHERE schemaname = current_schema()
   AND (tablename LIKE 'pyqueue%%' OR tablename LIKE 'queue\_ingest%%')
   AND tablename NOT LIKE 'pyqueue\_alembic%%'

-- name: drift_constraints
SELECT 'constraint', r.relname::text || '.' || c.conname::text,
       replace(pg_get_constraintdef(c.oid), quote_ident(current_schema()) || '.', '')
  FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
  JOIN pg_namespace n ON n.oid = r.relnamespace
 WHERE n.nspname = current_schema()
   AND (r.relname LIKE 'pyqueue%%' OR r.relname LIKE 'queue\_ingest%%')
   AND r.relname NOT LIKE 'pyqueue\_alembic%%'

-- name: drift_triggers
SELECT 'trigger', c.relname::text || '.' || t.tgname::text,
       replace(pg_get_triggerdef(t.oid), quote_ident(current_schema()) || '.', '')
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND NOT t.tgisinternal
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')

-- name: drift_views
SELECT 'view', c.relname::text, pg_get_viewdef(c.oid)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('v', 'm')
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')

-- name: drift_grants
SELECT 'grant', 'EXECUTE on ' || p.oid::regprocedure::text || ' to PUBLIC', 'granted'
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
       LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
 WHERE n.nspname = current_schema() AND a.grantee = 0
   AND (p.proname LIKE 'queue\_%%' OR p.proname LIKE 'pyqueue\_%%')
UNION ALL
SELECT 'grant', a.privilege_type || ' on ' || c.relname::text || ' to PUBLIC', 'granted'
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
       LATERAL aclexplode(coalesce(c.relacl, acldefault('r', c.relowner))) a
 WHERE n.nspname = current_schema() AND a.grantee = 0 AND c.relkind IN ('r', 'v', 'p')
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
   AND c.relname NOT LIKE 'pyqueue\_alembic%%'

-- ---- exposures (`pyqueue-sql migrate --check`) ------------------------------------
-- What must never hold, whatever migrate recorded (a later migrate must not make it look
-- installed): each exposure_* statement returns the rows that break a rule of least privilege
-- (docs/operations.md, "Least privilege"), which --check reports one line each.

-- name: exposure_table_grants
-- Privileges on the tables, their sequences and columns held by a role other than the owner
-- (grantee, privilege, object, what: table, sequence or column). PUBLIC's on tables and views
-- are drift_grants'. pyqueue_sql.migrate leaves out the ingest capability's (INSERT and SELECT
-- on queue_ingest): application accounts hold no other.
SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END,
       a.privilege_type::text, c.relname::text, CASE WHEN c.relkind = 'S' THEN 'sequence' ELSE 'table' END
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
       LATERAL aclexplode(c.relacl) a
 WHERE n.nspname = current_schema() AND a.grantee <> c.relowner AND (a.grantee <> 0 OR c.relkind = 'S')
   AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
   AND c.relname NOT LIKE 'pyqueue\_alembic%%'
UNION ALL
SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END,
       a.privilege_type::text, c.relname::text || '.' || t.attname::text, 'column'
  FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace,
       LATERAL aclexplode(t.attacl) a
 WHERE n.nspname = current_schema() AND t.attacl IS NOT NULL AND NOT t.attisdropped
   AND a.grantee <> c.relowner
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
   AND c.relname NOT LIKE 'pyqueue\_alembic%%'
 ORDER BY 3, 1, 2

-- name: exposure_helper_grants
-- EXECUTE on an internal pyqueue__* helper held by a role other than the owner (grantee,
-- routine); PUBLIC's is drift_grants'. The helpers are granted to nobody.
SELECT pg_get_userbyid(a.grantee)::text, p.oid::regprocedure::text
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace,
       LATERAL aclexplode(p.proacl) a
 WHERE n.nspname = current_schema() AND a.grantee <> p.proowner AND a.grantee <> 0
   AND p.proname LIKE 'pyqueue\_\_%%'
 ORDER BY 2, 1

-- name: exposure_disabled_triggers
-- Triggers of the tables that do not fire in an ordinary session (ALTER TABLE ... DISABLE
-- TRIGGER: 'D'; ENABLE REPLICA TRIGGER: 'R'), internal ones (foreign keys) too: (table.trigger,
-- state). queue_ingest's trigger is what moves its rows into the queues.
SELECT c.relname::text || '.' || t.tgname::text, t.tgenabled::text
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND t.tgenabled NOT IN ('O', 'A')
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
 ORDER BY 1

-- name: exposure_rules
-- Rules on the tables (CREATE RULE: a statement on a table rewritten, say to copy every
-- message elsewhere); the install creates none: (table, rule).
SELECT c.relname::text, r.rulename::text
  FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND r.rulename <> '_RETURN'
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
 ORDER BY 1, 2

-- name: installed_records
SELECT kind, name, digest FROM pyqueue_installed

-- name: installed_table
SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relname = 'pyqueue_installed'

-- name: schema_state
-- What `pyqueue-sql worker` checks before it starts (pyqueue_sql.schema_version), in one round
-- trip: the recorded revisions, then what the last migrate recorded. An error (no version table,
-- no pyqueue_installed, a role that cannot read them) sends the check to the statements above.
SELECT 'revision' AS what, version_num AS kind, NULL AS name, NULL AS digest FROM pyqueue_alembic_version
UNION ALL
SELECT 'installed', kind, name, digest FROM pyqueue_installed

-- name: installed_clear
DELETE FROM pyqueue_installed

-- name: installed_insert
INSERT INTO pyqueue_installed (kind, name, digest) VALUES (%(kind)s, %(name)s, %(digest)s)
