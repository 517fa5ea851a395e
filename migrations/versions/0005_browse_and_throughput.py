"""Reads for browsing a queue and charting its traffic (the dashboard's):
queue_messages and queue_throughput, in the monitor capability.

Revision ID: 0005_browse_and_throughput
Revises: 0004_errors_and_safety
Create Date: 2026-11-23

Up: no table changes; on PostgreSQL the two new functions are created as stubs
granted to the roles that may execute queue_stats (0005_browse_and_throughput.up.sql),
then the routines this revision added or changed (ROUTINES below) give them their
bodies. On MySQL/MariaDB the grant restore gives them to the accounts that may
execute queue_stats (pyqueue_sql.privileges.ROUTINES_ADDED_WITH).
Down: drops the two routines (0005_browse_and_throughput.down.sql), then
re-creates whatever else this revision changed as 0004 defines it
(pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0005_browse_and_throughput"
down_revision = "0004_errors_and_safety"
branch_labels = None
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0005_browse_and_throughput.routines.sql"

# The catalog this revision leaves (pyqueue_sql.migrate.fingerprint), per
# server flavor: how `migrate --adopt` recognises a schema installed from the
# SQL script. tests/schema/test_migrate_interrupted.py regenerates and compares them.
FINGERPRINTS = {
    "postgresql": "67e3778a131a7bf782812c0b6764031c",
    "mariadb": "5399d5ac3a82e736d865183f4b5d0aad",
}


def upgrade() -> None:
    run_sql_file("0005_browse_and_throughput.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0005_browse_and_throughput.down.sql")
    downgrade_routines(revision)
