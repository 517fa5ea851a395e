-- pyqueue-sql revision 0006 (mysql), up: the due index the set-based
-- reserve and pyqueue__next_at read (schema.sql explains it); the routines
-- follow from sql/mysql/routines.sql (ROUTINES in the revision).
ALTER TABLE pyqueue_message ADD KEY pyqueue_message_due_idx (queue_name, scheduled_at, id);
