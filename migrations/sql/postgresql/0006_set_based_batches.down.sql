-- pyqueue-sql revision 0006 (postgresql), down: drops the index and the helpers
-- 0006 added; the routines it changed or removed are re-created from the set of
-- revision 0005.
DROP FUNCTION IF EXISTS pyqueue__reserve(pyqueue_queue, text, interval, integer, text[]);
DROP FUNCTION IF EXISTS pyqueue__due_tids(text, timestamptz, integer, text[], integer);
DROP FUNCTION IF EXISTS pyqueue__ready_tids(text, timestamptz, integer, text[]);
DROP FUNCTION IF EXISTS pyqueue__limited_tids(text, timestamptz, integer, text[]);
DROP FUNCTION IF EXISTS pyqueue__check_reserve(text, interval, integer, text[]);
DROP FUNCTION IF EXISTS pyqueue__check_kinds(text[]);
DROP FUNCTION IF EXISTS pyqueue__bad_name(text, integer);
DROP INDEX IF EXISTS pyqueue_message_due_idx;
