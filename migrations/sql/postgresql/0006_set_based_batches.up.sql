-- pyqueue-sql revision 0006 (postgresql), up: the index of a queue's messages by
-- time (queue_next_scheduled_at in one probe; the reserve reads the ready rows
-- through it once its walk of the priorities meets too many waiting-only ones);
-- the routines follow from sql/postgresql/routines.sql (ROUTINES in the revision).
CREATE INDEX pyqueue_message_due_idx
    ON pyqueue_message (queue_name, scheduled_at);
