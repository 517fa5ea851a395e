"""A leaner live table on PostgreSQL: pyqueue_message loses its foreign key to pyqueue_queue (its
per-row check cost 40% of a batch insert); queue_drop deletes the queue's messages itself, after
the queue-row lock that every routine writing a message takes first; queue_push_batch looks up
its id sequence once per call

Revision ID: 0007_lean_live_table
Revises: 0006_set_based_batches
Create Date: 2026-11-24

Up: the DDL this revision adds (0007_lean_live_table.up.sql), then the routines it
added or changed (ROUTINES below).
Down: undoes the DDL and drops the routines it added (0007_lean_live_table.down.sql),
then re-creates the routines it changed or removed as the revision before it
defines them (pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0007_lean_live_table"
down_revision = "0006_set_based_batches"
branch_labels = None
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0007_lean_live_table.routines.sql"

# The catalog this revision leaves, per server flavor (see 0001_core.py);
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "7488f863245b860f6179d28716f3b092",
    "mariadb": "2a5c111e9471bfcea2a1b5da08bcbae3",
}


def upgrade() -> None:
    run_sql_file("0007_lean_live_table.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0007_lean_live_table.down.sql")
    downgrade_routines(revision)
