-- pyqueue-sql revision 0006 (mysql), down: drops the routines this revision
-- added and the due index; the routines it changed are re-created as
-- revision 0005 defines them (its own file).
DROP PROCEDURE IF EXISTS pyqueue__reserve_limited;
DROP PROCEDURE IF EXISTS pyqueue__reserve;
DROP PROCEDURE IF EXISTS pyqueue__give_back_claims;
DROP PROCEDURE IF EXISTS pyqueue__claim_one;
DROP PROCEDURE IF EXISTS pyqueue__claim;
DROP PROCEDURE IF EXISTS pyqueue__candidates;
DROP PROCEDURE IF EXISTS pyqueue__reserve_args;
ALTER TABLE pyqueue_message DROP KEY pyqueue_message_due_idx;
