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
