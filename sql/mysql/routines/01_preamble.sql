-- ==== preamble ====

-- pyqueue-sql: MySQL 8.0+ / MariaDB 10.6+ procedures, the current state.
--
-- Runs after schema.sql and can be run again at any time: every procedure is dropped and created again. Procedures keep
-- the sql_mode and character set they were created under, so this file sets strict mode and utf8mb4 first and the last
-- restores the caller's; every text parameter, variable and JSON_TABLE column declares utf8mb4 (names utf8mb4_bin),
-- whatever the database default (an undeclared one fails with 1253 against utf8mb4_bin or turns characters into '?').
--
-- Layout: one file per topic, routines/NN_<topic>.sql, with the same names in both dialects (../../README.md says
-- what each topic holds). They run in name order as one script: this file first, 19_privileges.sql last (it puts
-- the caller's sql_mode and character set back). Each starts with the line '-- ==== <topic> ===='; an internal
-- helper (pyqueue__*) sits in the file of the topic that calls it, before that topic's procedures (02_checks.sql:
-- those that several topics call).
--
-- Least privilege: contract procedures (queue_*) are SQL SECURITY DEFINER (they run as the account that ran this
-- file), so an application needs EXECUTE on those of its capability and nothing on the tables (pyqueue-sql grant);
-- helpers (pyqueue__*) are SQL SECURITY INVOKER. DROP PROCEDURE drops the EXECUTE grants on it: after running these
-- files again, run `pyqueue-sql grant ... --apply` again.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';
SET @pyqueue_saved_character_set_client = @@SESSION.character_set_client;
SET @pyqueue_saved_character_set_results = @@SESSION.character_set_results;
SET @pyqueue_saved_collation_connection = @@SESSION.collation_connection;
SET NAMES utf8mb4;
