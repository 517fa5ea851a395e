-- Catalog of what pyqueue-sql installs, to compare two databases.

-- name: columns
SELECT table_name, column_name, ordinal_position, data_type, character_maximum_length,
       is_nullable, column_default, is_identity
  FROM information_schema.columns
 WHERE table_schema = current_schema() AND table_name LIKE 'pyqueue%%'
   AND table_name <> 'pyqueue_alembic_version'
 ORDER BY table_name, ordinal_position

-- name: indexes
SELECT tablename, indexname, indexdef
  FROM pg_indexes
 WHERE schemaname = current_schema() AND tablename LIKE 'pyqueue%%'
   AND tablename <> 'pyqueue_alembic_version'
 ORDER BY tablename, indexname

-- name: constraints
SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid)
  FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
 WHERE n.nspname = current_schema() AND c.conrelid::regclass::text LIKE 'pyqueue%%'
   AND c.conrelid::regclass::text <> 'pyqueue_alembic_version'
 ORDER BY 1, 2

-- name: tables
SELECT relname, coalesce(array_to_string(reloptions, ','), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND relkind = 'r' AND relname LIKE 'pyqueue%%'
   AND relname <> 'pyqueue_alembic_version'
 ORDER BY relname

-- name: routines
SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid),
       p.provolatile, p.prosecdef, md5(p.prosrc),
       coalesce(array_to_string(p.proconfig, ';'), ''), coalesce(p.proacl::text, '')
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = current_schema() AND (p.proname LIKE 'queue%%' OR p.proname LIKE 'pyqueue%%')
 ORDER BY 1, 2

-- name: views
SELECT viewname, md5(definition)
  FROM pg_views
 WHERE schemaname = current_schema() AND viewname LIKE 'pyqueue%%'
 ORDER BY viewname

-- name: ingest_columns
-- queue_ingest does not start with pyqueue
SELECT table_name, column_name, ordinal_position, data_type, is_nullable, column_default, is_identity
  FROM information_schema.columns
 WHERE table_schema = current_schema() AND table_name = 'queue_ingest'
 ORDER BY ordinal_position

-- name: ingest_relations
SELECT c.relname, c.relkind, c.relpersistence, coalesce(pg_get_indexdef(c.oid), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relname LIKE 'queue\_ingest%%'
 ORDER BY c.relname

-- name: ingest_triggers
SELECT t.tgname, t.tgrelid::regclass::text, t.tgtype, t.tgenabled, p.proname,
       coalesce(t.tgnewtable, ''), coalesce(t.tgoldtable, '')
  FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
  JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND NOT t.tgisinternal AND c.relname = 'queue_ingest'
 ORDER BY 1

-- name: relation_acls
-- who may read or change our tables and views (NULL ACL = the owner only)
SELECT c.relname, c.relkind, coalesce(c.relacl::text, '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'S', 'm', 'p')
   AND (c.relname LIKE 'pyqueue%%' OR c.relname LIKE 'queue\_ingest%%')
   AND c.relname NOT LIKE 'pyqueue\_alembic\_version%%'
 ORDER BY c.relname
