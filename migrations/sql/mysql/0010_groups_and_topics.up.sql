-- pyqueue-sql revision 0010 (mysql), up: FIFO groups (the message's
-- group_key, the index of a group's messages in delivery order, one row per
-- group with messages) and topics (the bindings of patterns to queues);
-- schema.sql explains them. The routines follow from sql/mysql/routines.sql
-- (ROUTINES in the revision).
ALTER TABLE pyqueue_message
    ADD COLUMN group_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
ALTER TABLE pyqueue_message
    ADD KEY pyqueue_message_group_idx (queue_name, group_key, scheduled_at_initially, id);
CREATE TABLE pyqueue_group (
    queue_name VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    group_key  VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    head_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    head_kind  VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (queue_name, group_key),
    CONSTRAINT pyqueue_group_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: one row per FIFO group with messages: its head';
CREATE TABLE pyqueue_binding (
    pattern       VARCHAR(255)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    queue_name    VARCHAR(128)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    pattern_regex VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    created_at    DATETIME(6)   NOT NULL,
    PRIMARY KEY (pattern, queue_name),
    KEY pyqueue_binding_queue_idx (queue_name),
    CONSTRAINT pyqueue_binding_queue_fk FOREIGN KEY (queue_name)
        REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='pyqueue-sql: topic patterns bound to queues (queue_bind)';
