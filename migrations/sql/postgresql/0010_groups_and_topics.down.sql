-- pyqueue-sql revision 0010 (postgresql), down: drops the routines 0010
-- added, then its tables, index and column. Messages blocked behind their
-- group's head become due at their own run time first: without groups
-- nothing would ever unblock them (they lose their group's one-at-a-time
-- order, not their place in the queue).

DROP FUNCTION IF EXISTS queue_groups(text, integer);
DROP FUNCTION IF EXISTS queue_publish_batch(text[], text[], text[], jsonb[], timestamptz[], integer[]);
DROP FUNCTION IF EXISTS queue_publish(text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS queue_bindings(text);
DROP FUNCTION IF EXISTS queue_unbind(text, text);
DROP FUNCTION IF EXISTS queue_bind(text, text);
DROP FUNCTION IF EXISTS queue_push_batch_grouped(text, text[], text[], text[], jsonb[], timestamptz[], integer[]);
DROP FUNCTION IF EXISTS queue_push_grouped(text, text, text, text, jsonb, timestamptz, integer);
DROP FUNCTION IF EXISTS pyqueue__topic_regex(text);
DROP FUNCTION IF EXISTS pyqueue__check_batch(text, text[], boolean, text[], text[], jsonb[], timestamptz[], integer[], timestamptz);
DROP FUNCTION IF EXISTS pyqueue__check_topic(text, text, boolean);
DROP FUNCTION IF EXISTS pyqueue__groups_settle(text, text[], timestamptz);
DROP FUNCTION IF EXISTS pyqueue__group_settle(text, text, timestamptz, boolean);

UPDATE pyqueue_message SET scheduled_at = scheduled_at_initially
 WHERE scheduled_at = timestamptz '9999-12-31 23:59:59.999999+00' AND group_key IS NOT NULL;

DROP FUNCTION IF EXISTS pyqueue__blocked_at();
DROP TABLE IF EXISTS pyqueue_binding;
DROP TABLE IF EXISTS pyqueue_group;
DROP INDEX IF EXISTS pyqueue_message_group_idx;
ALTER TABLE pyqueue_message DROP COLUMN IF EXISTS group_key;
