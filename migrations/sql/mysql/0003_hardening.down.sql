-- pyqueue-sql revision 0003 (mysql), down: undoes what 0003 added (only what exists);
-- 0003_hardening.down_routines.sql then restores 0002's routines.

-- queue_dead_letters and pyqueue__check_utf8 are new in 0003; every other
-- procedure is dropped and created again by 0002's routines (SQL SECURITY
-- INVOKER, as 0002 had them).
DROP PROCEDURE IF EXISTS queue_dead_letters;
DROP PROCEDURE IF EXISTS pyqueue__check_utf8;
