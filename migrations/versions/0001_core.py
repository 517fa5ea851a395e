"""The core queue contract: tables, indexes and the queue_* routines.

Revision ID: 0001_core
Revises:
Create Date: 2026-11-22

Up: the tables (0001_core.up.sql), then the routines (0001_core.routines.sql,
every routine of the core contract). Down: drops both (0001_core.down.sql).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0001_core"
down_revision = None
branch_labels = ("pyqueue_sql",)
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0001_core.routines.sql"

# The catalog this revision leaves (pyqueue_sql.migrate.fingerprint), per
# server flavor: how `migrate --adopt` recognises a schema installed from the
# SQL script. tests/schema/test_migrate_interrupted.py regenerates and compares them.
FINGERPRINTS = {
    "postgresql": "6910c4e0c6d93c0ae71a40997b42388d",
    "mariadb": "160e97f4d749f33097e6497c23293466",
}


def upgrade() -> None:
    run_sql_file("0001_core.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0001_core.down.sql")
    downgrade_routines(revision)
