-- pyqueue-sql revision 0008 (postgresql), down: drops the helper 0008 added; the
-- routines it changed are re-created from the set of revision 0007.
DROP FUNCTION IF EXISTS pyqueue__delete_held(text, text[], text[], uuid[]);
