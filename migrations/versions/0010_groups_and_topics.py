"""FIFO message groups and topics: a message may carry a group key (pyqueue_message.group_key);
the messages of one group are delivered one at a time in run-time and push order, the ones behind
the group's head parked past the end of the ready range (pyqueue_group holds each non-empty group's
head); queue_push_grouped and queue_push_batch_grouped push them. Topics: pyqueue_binding holds the
bindings of topic patterns to queues (queue_bind, queue_unbind, queue_bindings); queue_publish and
queue_publish_batch push a message into every queue bound to a matching pattern

Revision ID: 0010_groups_and_topics
Revises: 0009_plans_without_statistics
Create Date: 2026-11-24

Up: the DDL this revision adds (0010_groups_and_topics.up.sql), then the routines it added or
changed (ROUTINES below), then the grants of the new routines to the accounts that hold their
capability (0010_groups_and_topics.grants.sql).
Down: undoes the DDL and drops the routines it added (0010_groups_and_topics.down.sql), then
re-creates the routines it changed or removed as the revision before it defines them
(pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import CURRENT_ROUTINES, downgrade_routines, run_sql_file, upgrade_routines

revision = "0010_groups_and_topics"
down_revision = "0009_plans_without_statistics"
branch_labels = None
depends_on = None

# The routines this revision added or changed: while it is the newest revision,
# those of sql/<dialect>/routines.sql that differ from the revision before it;
# `make release-routines` freezes them into 0010_groups_and_topics.routines.sql before
# the next revision is added.
ROUTINES = CURRENT_ROUTINES

# The catalog this revision leaves, per server flavor (see 0001_core.py);
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "06eef9842545da47e5c7f0eee69a3949",
    "mariadb": "40f0f4df30db9b2c2bb381a3c8f642ac",
}


def upgrade() -> None:
    run_sql_file("0010_groups_and_topics.up.sql")
    upgrade_routines(revision)
    run_sql_file("0010_groups_and_topics.grants.sql")


def downgrade() -> None:
    run_sql_file("0010_groups_and_topics.down.sql")
    downgrade_routines(revision)
