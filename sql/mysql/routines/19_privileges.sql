-- ==== privileges ====

-- Nothing to revoke: MySQL has no PUBLIC grant on a new procedure and this file grants nothing (only
-- automatic_sp_privileges, to the account that runs it). Applications get EXECUTE from pyqueue-sql grant.

SET SESSION character_set_client = @pyqueue_saved_character_set_client;
SET SESSION character_set_results = @pyqueue_saved_character_set_results;
SET SESSION collation_connection = @pyqueue_saved_collation_connection;
SET SESSION sql_mode = @pyqueue_saved_sql_mode;
