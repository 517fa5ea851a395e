-- pyqueue-sql revision 0003_ready_order down (MySQL/MariaDB)
ALTER TABLE pyqueue_message ADD INDEX pyqueue_message_ready_idx (queue_name, priority, scheduled_at, id);
ALTER TABLE pyqueue_message DROP INDEX pyqueue_message_order_idx;
ALTER TABLE pyqueue_message DROP COLUMN ready_at;
