-- pyqueue-sql revision 0010 (mysql), down: drops the procedures 0010 added,
-- then its tables, index and column; the routines it changed are re-created
-- as revision 0009 defines them. Messages blocked behind their group's head
-- become due at their own run time first: without groups nothing would ever
-- unblock them (they lose their group's one-at-a-time order, not their
-- place in the queue).
DROP PROCEDURE IF EXISTS queue_groups;
DROP PROCEDURE IF EXISTS queue_publish_batch;
DROP PROCEDURE IF EXISTS queue_publish;
DROP PROCEDURE IF EXISTS queue_bindings;
DROP PROCEDURE IF EXISTS queue_unbind;
DROP PROCEDURE IF EXISTS queue_bind;
DROP PROCEDURE IF EXISTS queue_push_batch_grouped;
DROP PROCEDURE IF EXISTS queue_push_grouped;
DROP PROCEDURE IF EXISTS pyqueue__topic_regex;
DROP PROCEDURE IF EXISTS pyqueue__check_topic;
DROP PROCEDURE IF EXISTS pyqueue__unclaim;
DROP PROCEDURE IF EXISTS pyqueue__groups_leave;
DROP PROCEDURE IF EXISTS pyqueue__group_leave;
DROP PROCEDURE IF EXISTS pyqueue__group_next;
DROP PROCEDURE IF EXISTS pyqueue__group_lock;
DROP PROCEDURE IF EXISTS pyqueue__group_own;
DROP PROCEDURE IF EXISTS pyqueue__check_messages;
UPDATE pyqueue_message SET scheduled_at = scheduled_at_initially
 WHERE scheduled_at = TIMESTAMP '9999-12-31 23:59:59.999999' AND group_key IS NOT NULL;
DROP TABLE IF EXISTS pyqueue_binding;
DROP TABLE IF EXISTS pyqueue_group;
ALTER TABLE pyqueue_message DROP KEY pyqueue_message_group_idx;
ALTER TABLE pyqueue_message DROP COLUMN group_key;
