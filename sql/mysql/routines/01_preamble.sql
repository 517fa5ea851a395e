-- ==== preamble ====

-- pyqueue-sql: MySQL 8.0+ / MariaDB 10.6+ procedures, the current state.
--
-- Runs after schema.sql and can be run again at any time: every procedure is dropped and created again. Procedures keep
-- the sql_mode and character set they were created under, so this file sets strict mode and utf8mb4 first and the last
-- restores the caller's (the mode it sets leaves out MariaDB's SIMULTANEOUS_ASSIGNMENT: a single-table UPDATE's SET
-- clauses apply left to right, so `SET scheduled_at = x, ready_at = scheduled_at` copies the new value; a multi-table
-- UPDATE has no such order and writes the value itself); every text parameter, variable and JSON_TABLE column
-- declares utf8mb4 (names utf8mb4_bin),
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
--
-- Deadlock retry, one pattern. A routine that may run its steps in a transaction of its own (v_own = 1, from
-- pyqueue__own_transaction: autocommit with no transaction open) runs them as an attempt,
--   REPEAT SET v_retry = 0, v_tries = v_tries + 1, ...; BEGIN <handler> <the attempt> END; UNTIL v_retry = 0 END REPEAT
-- (START TRANSACTION ... COMMIT in the attempt when v_own = 1, or one statement), with the handler
--   retry: DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF v_own = 1 THEN ROLLBACK; END IF; IF v_own = 1 AND v_tries < 10 THEN SET v_retry = 1; ELSE RESIGNAL; END IF; END;
-- 1213: a deadlock victim, its transaction rolled back by the server; 1467: a deadlock on the AUTO-INC lock of an
-- insert. In a transaction of its own the victim runs again, up to 10 times (the ROLLBACK ends what the attempt
-- opened: nothing when each statement committed alone); in the caller's transaction (v_own 0, or NULL where MySQL 8.0
-- cannot tell) the caller retries, so the handler passes it on. A routine whose attempt must not run again says so
-- with v_own 0 for it (queue_commit_reserve: its short way sends rows before the end). Two handlers differ:
--   claim: DECLARE EXIT HANDLER FOR 1213, 1467 BEGIN IF in_own <> 1 THEN RESIGNAL; END IF; END;
-- (pyqueue__claim, pyqueue__claim_one: a claiming statement in autocommit that is a victim is a claim not made, and
-- the walk goes on to the next candidates, where running it again would take a row the winner holds; inside a
-- transaction it fails that transaction, the caller's to retry), and
--   count: DECLARE CONTINUE HANDLER FOR 1213, 1467 BEGIN END;
-- (pyqueue__dead_letter's dead_count, counted after the group's transaction committed the dead-lettering: a victim
-- misses one count, never fails or repeats a settle that took place). tests/unit/test_sql_routine_shape.py holds
-- every handler for 1213 to one of these lines and every routine to 150 lines.

SET @pyqueue_saved_sql_mode = @@SESSION.sql_mode;
SET SESSION sql_mode = 'STRICT_ALL_TABLES,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION';
SET @pyqueue_saved_character_set_client = @@SESSION.character_set_client;
SET @pyqueue_saved_character_set_results = @@SESSION.character_set_results;
SET @pyqueue_saved_collation_connection = @@SESSION.collation_connection;
SET NAMES utf8mb4;
