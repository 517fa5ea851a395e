-- pyqueue-sql revision 0003_ready_order (MySQL/MariaDB): pyqueue_message.ready_at, the reserve order a claim leaves alone
ALTER TABLE pyqueue_message ADD COLUMN ready_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:01';
UPDATE pyqueue_message SET ready_at = scheduled_at;
ALTER TABLE pyqueue_message ADD INDEX pyqueue_message_order_idx (queue_name, priority, ready_at, id);
ALTER TABLE pyqueue_message DROP INDEX pyqueue_message_ready_idx;
