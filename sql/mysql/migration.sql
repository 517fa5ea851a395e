-- pyqueue-sql: the statements pyqueue_sql.migrate runs around the revisions
-- (MySQL 8.0+ / MariaDB 10.6+). Named statements as in queries.sql; run with
-- a parameter dict ('%%' is a literal '%'), except regrant_routine (a
-- template filled with validated, quoted names and run as it is).

-- name: migration_lock
-- One lock per database (two databases on one server do not wait for each
-- other); the name stays within GET_LOCK's 64 characters. 1 = got it,
-- 0 = timed out.
SELECT GET_LOCK(CONCAT('pyqueue-sql migrate ', MD5(DATABASE())), 600)

-- name: migration_unlock
SELECT RELEASE_LOCK(CONCAT('pyqueue-sql migrate ', MD5(DATABASE())))

-- name: server_version
SELECT VERSION()

-- name: installed_objects
-- What pyqueue-sql installed in this database, migration bookkeeping left out.
SELECT 'table' AS kind, TABLE_NAME AS name
  FROM information_schema.TABLES
 WHERE TABLE_SCHEMA = DATABASE()
   AND (TABLE_NAME LIKE 'pyqueue%%' OR TABLE_NAME = 'queue_ingest')
   AND TABLE_NAME NOT LIKE 'pyqueue\_alembic%%'
UNION ALL
SELECT 'routine', ROUTINE_NAME
  FROM information_schema.ROUTINES
 WHERE ROUTINE_SCHEMA = DATABASE()
   AND (ROUTINE_NAME LIKE 'queue\_%%' OR ROUTINE_NAME LIKE 'pyqueue\_%%')
 ORDER BY 1, 2

-- name: live_messages
SELECT COUNT(*) FROM pyqueue_message

-- name: version_table_rows
SELECT COUNT(*) FROM pyqueue_alembic_version

-- name: drop_version_table
DROP TABLE IF EXISTS pyqueue_alembic_version

-- ---- progress of an unfinished migrate --------------------------------------
-- DDL commits at once on MySQL, so a migrate records how far it got: the
-- revision step in progress, the file of that step and the number of its
-- statements applied, committed after each statement. A run that is
-- interrupted (error, Ctrl-C, kill) leaves the table behind, and the next
-- run resumes from there. Both tables are dropped when a run finishes.

-- name: bookkeeping_tables
SELECT COALESCE(SUM(TABLE_NAME = 'pyqueue_alembic_progress'), 0),
       COALESCE(SUM(TABLE_NAME = 'pyqueue_alembic_grants'), 0)
  FROM information_schema.TABLES
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('pyqueue_alembic_progress', 'pyqueue_alembic_grants')

-- name: create_progress_table
CREATE TABLE IF NOT EXISTS pyqueue_alembic_progress (
    id           TINYINT      NOT NULL,
    step         VARCHAR(255) NULL,
    file_no      INT          NOT NULL,
    statement_no INT          NOT NULL,
    grants_saved BOOLEAN      NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: a migrate in progress (run pyqueue-sql migrate again to finish it)'

-- name: read_progress
SELECT step, file_no, statement_no, grants_saved FROM pyqueue_alembic_progress WHERE id = 1

-- name: start_progress
INSERT INTO pyqueue_alembic_progress (id, step, file_no, statement_no, grants_saved)
VALUES (1, NULL, 0, 0, %(grants_saved)s)

-- name: record_progress
UPDATE pyqueue_alembic_progress
   SET step = %(step)s, file_no = %(file_no)s, statement_no = %(statement_no)s
 WHERE id = 1

-- name: drop_progress_table
DROP TABLE IF EXISTS pyqueue_alembic_progress

-- The routine grants as they were before the run dropped anything: taken
-- once, kept until they are given back at the end of the run.

-- name: drop_grants_table
DROP TABLE IF EXISTS pyqueue_alembic_grants

-- name: create_grants_table
CREATE TABLE pyqueue_alembic_grants (
    user_name    VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    host_name    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    routine_name VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    routine_type VARCHAR(16)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    privileges   VARCHAR(64)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: routine grants to give back when the running migrate finishes'

-- name: save_routine_grants
INSERT INTO pyqueue_alembic_grants (user_name, host_name, routine_name, routine_type, privileges)
SELECT User, Host, Routine_name, Routine_type, Proc_priv
  FROM mysql.procs_priv
 WHERE Db = DATABASE() AND User <> ''

-- name: saved_routine_grants
SELECT user_name, host_name, routine_name, routine_type, privileges
  FROM pyqueue_alembic_grants
 ORDER BY routine_name, user_name, host_name

-- name: routine_grants
SELECT User, Host, Routine_name, Routine_type, Proc_priv
  FROM mysql.procs_priv
 WHERE Db = DATABASE() AND User <> ''

-- name: regrant_routine
GRANT {privilege} ON {routine_type} {routine} TO {role}{grant_option}

-- ---- catalog fingerprint of a revision ---------------------------------------
-- How `migrate --adopt` recognises a revision: every fingerprint_* statement,
-- in file order, hashed together. The tables only (columns, indexes,
-- constraints, foreign keys, views), no routine, definer or grant: adopt
-- installs routines/ again.

-- name: fingerprint_columns
SELECT TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT,
       COLLATION_NAME, EXTRA
  FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = DATABASE()
   AND (TABLE_NAME LIKE 'pyqueue%%' OR TABLE_NAME = 'queue_ingest')
   AND TABLE_NAME NOT LIKE 'pyqueue\_alembic%%'
 ORDER BY TABLE_NAME, ORDINAL_POSITION

-- name: fingerprint_indexes
SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE
  FROM information_schema.STATISTICS
 WHERE TABLE_SCHEMA = DATABASE()
   AND (TABLE_NAME LIKE 'pyqueue%%' OR TABLE_NAME = 'queue_ingest')
   AND TABLE_NAME NOT LIKE 'pyqueue\_alembic%%'
 ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX

-- name: fingerprint_constraints
SELECT TABLE_NAME, CONSTRAINT_NAME, CONSTRAINT_TYPE
  FROM information_schema.TABLE_CONSTRAINTS
 WHERE TABLE_SCHEMA = DATABASE()
   AND (TABLE_NAME LIKE 'pyqueue%%' OR TABLE_NAME = 'queue_ingest')
   AND TABLE_NAME NOT LIKE 'pyqueue\_alembic%%'
 ORDER BY TABLE_NAME, CONSTRAINT_NAME

-- name: fingerprint_foreign_keys
SELECT TABLE_NAME, CONSTRAINT_NAME, REFERENCED_TABLE_NAME, UPDATE_RULE, DELETE_RULE
  FROM information_schema.REFERENTIAL_CONSTRAINTS
 WHERE CONSTRAINT_SCHEMA = DATABASE()
   AND (TABLE_NAME LIKE 'pyqueue%%' OR TABLE_NAME = 'queue_ingest')
 ORDER BY TABLE_NAME, CONSTRAINT_NAME

-- name: fingerprint_views
SELECT TABLE_NAME, SECURITY_TYPE
  FROM information_schema.VIEWS
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'pyqueue%%'
 ORDER BY TABLE_NAME

-- ---- drift (`pyqueue-sql migrate --check`) ----------------------------------
-- Every drift_* statement returns (kind, name, definition...) rows: one object may span
-- several rows (a table's columns, an index's columns); pyqueue_sql.migrate hashes each
-- object's rows into the digest recorded in pyqueue_installed (revision 0002_installed) and
-- compares them. No grant: on MySQL/MariaDB the install grants and revokes nothing (grants
-- are per account, the operator's: `pyqueue-sql grant`).

-- name: drift_routines
SELECT 'routine', ROUTINE_NAME, ROUTINE_TYPE, ROUTINE_DEFINITION, SQL_MODE, SECURITY_TYPE,
       IS_DETERMINISTIC, SQL_DATA_ACCESS, DTD_IDENTIFIER
  FROM information_schema.ROUTINES
 WHERE ROUTINE_SCHEMA = DATABASE()
   AND (ROUTINE_NAME LIKE 'queue\_%%' OR ROUTINE_NAME LIKE 'pyqueue\_%%')

-- name: drift_routine_parameters
SELECT 'routine', SPECIFIC_NAME, ORDINAL_POSITION, PARAMETER_MODE, PARAMETER_NAME, DTD_IDENTIFIER
  FROM information_schema.PARAMETERS
 WHERE SPECIFIC_SCHEMA = DATABASE()
   AND (SPECIFIC_NAME LIKE 'queue\_%%' OR SPECIFIC_NAME LIKE 'pyqueue\_%%')

-- name: drift_tables
SELECT 'table', TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION, COLUMN_TYPE, IS_NULLABLE,
       COLUMN_DEFAULT, COLLATION_NAME, EXTRA
  FROM information_schema.COLUMNS
 WHERE TABLE_SCHEMA = DATABASE()
   AND (TABLE_NAME LIKE 'pyqueue%%' OR TABLE_NAME = 'queue_ingest')
   AND TABLE_NAME NOT LIKE 'pyqueue\_alembic%%'

-- name: drift_indexes
SELECT 'index', CONCAT(TABLE_NAME, '.', INDEX_NAME), SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE,
       SUB_PART, INDEX_TYPE
  FROM information_schema.STATISTICS
 WHERE TABLE_SCHEMA = DATABASE()
   AND (TABLE_NAME LIKE 'pyqueue%%' OR TABLE_NAME = 'queue_ingest')
   AND TABLE_NAME NOT LIKE 'pyqueue\_alembic%%'

-- name: drift_constraints
SELECT 'constraint', CONCAT(TABLE_NAME, '.', CONSTRAINT_NAME), CONSTRAINT_TYPE
  FROM information_schema.TABLE_CONSTRAINTS
 WHERE TABLE_SCHEMA = DATABASE()
   AND (TABLE_NAME LIKE 'pyqueue%%' OR TABLE_NAME = 'queue_ingest')
   AND TABLE_NAME NOT LIKE 'pyqueue\_alembic%%'

-- name: drift_triggers
SELECT 'trigger', CONCAT(EVENT_OBJECT_TABLE, '.', TRIGGER_NAME), EVENT_MANIPULATION,
       ACTION_TIMING, ACTION_STATEMENT
  FROM information_schema.TRIGGERS
 WHERE TRIGGER_SCHEMA = DATABASE()
   AND (EVENT_OBJECT_TABLE LIKE 'pyqueue%%' OR EVENT_OBJECT_TABLE = 'queue_ingest')

-- name: drift_views
SELECT 'view', TABLE_NAME, VIEW_DEFINITION, SECURITY_TYPE
  FROM information_schema.VIEWS
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'pyqueue%%'

-- ---- exposures (`pyqueue-sql migrate --check`) ------------------------------------
-- What must never hold, whatever migrate recorded: each exposure_* statement returns the rows
-- that break a rule of least privilege (docs/operations.md, "Least privilege"), which --check
-- reports one line each. They read the grant tables of the mysql database (an account without
-- SELECT there: --check says it could not look). The accounts that own the routines (their
-- DEFINER: the account that ran migrate) are left out; grants on database name patterns and
-- global ones are not read.

-- name: exposure_table_grants
-- Table and column privileges on the tables, and table privileges on the whole database
-- (grantee, privileges: a comma list, object, what: table, column or database).
-- pyqueue_sql.migrate leaves out the ingest capability's (INSERT and SELECT on queue_ingest,
-- SELECT on pyqueue_ingest_reject): application accounts hold no other.
SELECT IF(t.Host = '', t.User, CONCAT('\'', t.User, '\'@\'', t.Host, '\'')), t.Table_priv, t.Table_name, 'table'
  FROM mysql.tables_priv t
 WHERE t.Db = DATABASE() AND t.Table_priv <> ''
   AND (t.Table_name LIKE 'pyqueue%%' OR t.Table_name = 'queue_ingest')
   AND t.Table_name NOT LIKE 'pyqueue\_alembic%%'
   AND CONCAT(t.User, '@', t.Host) NOT IN (SELECT r.DEFINER FROM information_schema.ROUTINES r
                                            WHERE r.ROUTINE_SCHEMA = DATABASE())
UNION ALL
SELECT IF(c.Host = '', c.User, CONCAT('\'', c.User, '\'@\'', c.Host, '\'')), c.Column_priv,
       CONCAT(c.Table_name, '.', c.Column_name), 'column'
  FROM mysql.columns_priv c
 WHERE c.Db = DATABASE() AND c.Column_priv <> ''
   AND (c.Table_name LIKE 'pyqueue%%' OR c.Table_name = 'queue_ingest')
   AND CONCAT(c.User, '@', c.Host) NOT IN (SELECT r.DEFINER FROM information_schema.ROUTINES r
                                            WHERE r.ROUTINE_SCHEMA = DATABASE())
UNION ALL
SELECT IF(d.Host = '', d.User, CONCAT('\'', d.User, '\'@\'', d.Host, '\'')),
       CONCAT_WS(',', IF(d.Select_priv = 'Y', 'Select', NULL), IF(d.Insert_priv = 'Y', 'Insert', NULL),
                 IF(d.Update_priv = 'Y', 'Update', NULL), IF(d.Delete_priv = 'Y', 'Delete', NULL)),
       CONCAT(DATABASE(), '.*'), 'database'
  FROM mysql.db d
 WHERE REPLACE(d.Db, '\\_', '_') = DATABASE()
   AND 'Y' IN (d.Select_priv, d.Insert_priv, d.Update_priv, d.Delete_priv)
   AND CONCAT(d.User, '@', d.Host) NOT IN (SELECT r.DEFINER FROM information_schema.ROUTINES r
                                            WHERE r.ROUTINE_SCHEMA = DATABASE())
 ORDER BY 3, 1, 2

-- name: exposure_helper_grants
-- EXECUTE on an internal pyqueue__* helper (grantee, routine), or on the whole database (then
-- on every helper: routine '*'). The helpers are granted to nobody.
SELECT IF(p.Host = '', p.User, CONCAT('\'', p.User, '\'@\'', p.Host, '\'')), p.Routine_name
  FROM mysql.procs_priv p
 WHERE p.Db = DATABASE() AND p.Routine_name LIKE 'pyqueue\_\_%%' AND p.Proc_priv <> ''
   AND CONCAT(p.User, '@', p.Host) NOT IN (SELECT r.DEFINER FROM information_schema.ROUTINES r
                                            WHERE r.ROUTINE_SCHEMA = DATABASE())
UNION ALL
SELECT IF(d.Host = '', d.User, CONCAT('\'', d.User, '\'@\'', d.Host, '\'')), '*'
  FROM mysql.db d
 WHERE REPLACE(d.Db, '\\_', '_') = DATABASE() AND d.Execute_priv = 'Y'
   AND CONCAT(d.User, '@', d.Host) NOT IN (SELECT r.DEFINER FROM information_schema.ROUTINES r
                                            WHERE r.ROUTINE_SCHEMA = DATABASE())
 ORDER BY 2, 1

-- name: installed_records
SELECT kind, name, digest FROM pyqueue_installed

-- name: installed_table
SELECT count(*) FROM information_schema.TABLES
 WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'pyqueue_installed'

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
