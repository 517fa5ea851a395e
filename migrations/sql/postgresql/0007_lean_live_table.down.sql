-- pyqueue-sql revision 0007 (postgresql), down: the foreign key again. Messages
-- of no queue (left by a queue_drop inside a REPEATABLE READ transaction, which
-- no routine can reach) would refuse it: they go first. The routines it changed
-- are re-created from the set of revision 0006.
DELETE FROM pyqueue_message m
 WHERE NOT EXISTS (SELECT 1 FROM pyqueue_queue q WHERE q.queue_name = m.queue_name);
ALTER TABLE pyqueue_message
    ADD CONSTRAINT pyqueue_message_queue_name_fkey FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE;
