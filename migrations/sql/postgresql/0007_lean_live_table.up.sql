-- pyqueue-sql revision 0007 (postgresql), up: pyqueue_message without its
-- foreign key to pyqueue_queue (queue_drop deletes the messages itself, see
-- sql/postgresql/schema.sql); the routines follow from
-- sql/postgresql/routines.sql (ROUTINES in the revision).
ALTER TABLE pyqueue_message DROP CONSTRAINT IF EXISTS pyqueue_message_queue_name_fkey;
