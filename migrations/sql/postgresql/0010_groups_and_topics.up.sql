-- pyqueue-sql revision 0010 (postgresql), up: FIFO groups (the message's
-- group_key, the index of a group's messages in delivery order, one row per
-- group with messages) and topics (the bindings of patterns to queues).
-- The routines follow (ROUTINES of the revision).

ALTER TABLE pyqueue_message ADD COLUMN group_key varchar(255) NULL;

CREATE INDEX pyqueue_message_group_idx
    ON pyqueue_message (queue_name, group_key, scheduled_at_initially, id)
    WHERE group_key IS NOT NULL;

CREATE TABLE pyqueue_group (
    queue_name varchar(128) NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    group_key  varchar(255) NOT NULL,
    head_key   varchar(255) NULL,
    head_kind  varchar(128) NULL,
    CONSTRAINT pyqueue_group_pkey PRIMARY KEY (queue_name, group_key)
);

COMMENT ON TABLE pyqueue_group IS
    'pyqueue-sql: one row per FIFO group with messages: its head, the one message of the group that may be delivered.';

CREATE TABLE pyqueue_binding (
    pattern       varchar(255)  NOT NULL,
    queue_name    varchar(128)  NOT NULL REFERENCES pyqueue_queue (queue_name) ON DELETE CASCADE,
    pattern_regex varchar(2000) NOT NULL,
    created_at    timestamptz   NOT NULL,
    CONSTRAINT pyqueue_binding_pkey PRIMARY KEY (pattern, queue_name)
);

CREATE INDEX pyqueue_binding_queue_idx ON pyqueue_binding (queue_name);

COMMENT ON TABLE pyqueue_binding IS
    'pyqueue-sql: topic patterns bound to queues (queue_bind); queue_publish pushes into every queue bound to a matching pattern.';
