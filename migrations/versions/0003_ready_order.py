"""MySQL/MariaDB: the reserve order in a column of its own, pyqueue_message.ready_at, and the ready
index on it, pyqueue_message_order_idx (queue_name, priority, ready_at, id, scheduled_at), in place of
pyqueue_message_ready_idx (queue_name, priority, scheduled_at, id). PostgreSQL: no table change.

Revision ID: 0003_ready_order
Revises: 0002_installed
Create Date: 2026-11-29

Up: sql/<dialect>/revisions/0003_ready_order.up.sql. MySQL/MariaDB, online: the column added
instantly, backfilled in batches of 5,000 rows (each its own transaction), the new index built
with LOCK=NONE; after this version's routines are installed (the previous release's read the old
index until then), the old index dropped: the statements after the file's line
migrate.AFTER_ROUTINES_MARKER.
Down: sql/<dialect>/revisions/0003_ready_order.down.sql.
"""

from pyqueue_sql.migrate import run_routines, run_sql_file

revision = "0003_ready_order"
down_revision = "0002_installed"
branch_labels = None
depends_on = None

# The tables this revision leaves (how `migrate --adopt` recognises a script install at it):
# tests/schema/test_migrate_interrupted.py prints the values to put here. PostgreSQL's is
# 0002_installed's (no table change): adopt records such an install as 0002_installed, the oldest
# revision with it, and applies this one.
FINGERPRINTS = {
    "postgresql": "1714ee54e2ea9f3d19aa4f55e30d7ddd",
    "mariadb": "d37cb213b77427aac563234f9c6801f5",
}


def upgrade() -> None:
    run_sql_file("revisions/0003_ready_order.up.sql")
    run_routines()


def downgrade() -> None:
    run_sql_file("revisions/0003_ready_order.down.sql")
