-- pyqueue-sql revision 0003_ready_order, undone (MySQL/MariaDB): the ready index on scheduled_at again, then the
-- new index and the column go. Each statement online (the index built with LOCK=NONE; dropping an index, or the
-- last column on MariaDB 10.4+ / MySQL 8.0.29+, changes the catalog only). The routines stay as they are
-- (docs/operations.md, "Downgrading").
ALTER TABLE pyqueue_message
    ADD INDEX pyqueue_message_ready_idx (queue_name, priority, scheduled_at, id),
    ALGORITHM = INPLACE, LOCK = NONE;

ALTER TABLE pyqueue_message DROP INDEX pyqueue_message_order_idx, ALGORITHM = INPLACE, LOCK = NONE;

ALTER TABLE pyqueue_message DROP COLUMN ready_at;
