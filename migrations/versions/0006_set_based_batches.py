"""Faster consuming and linear batches: queue_reserve takes the fast path's plan, batch routines
are set-based (no per-row loops on MySQL/MariaDB, no quadratic array walks on PostgreSQL)

Revision ID: 0006_set_based_batches
Revises: 0005_browse_and_throughput
Create Date: 2026-11-23

Up: the DDL this revision adds (0006_set_based_batches.up.sql), then the routines it
added or changed (ROUTINES below).
Down: undoes the DDL and drops the routines it added (0006_set_based_batches.down.sql),
then re-creates the routines it changed or removed as the revision before it
defines them (pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0006_set_based_batches"
down_revision = "0005_browse_and_throughput"
branch_labels = None
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0006_set_based_batches.routines.sql"

# The catalog this revision leaves, per server flavor (see 0001_core.py);
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "ed3102eaf3e9e2cb58dcd6bcbe03babe",
    "mariadb": "2a5c111e9471bfcea2a1b5da08bcbae3",
}


def upgrade() -> None:
    run_sql_file("0006_set_based_batches.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0006_set_based_batches.down.sql")
    downgrade_routines(revision)
