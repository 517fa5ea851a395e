"""Wakeups, fast paths, ingest and pipelines: the tables and routines added
after the core contract.

Revision ID: 0002_extensions
Revises: 0001_core
Create Date: 2026-11-22

Up: the DDL delta (0002_extensions.up.sql), then the routines 0002 added or
changed (0002_extensions.routines.sql).
Down: drops what 0002 added, its routines included (0002_extensions.down.sql),
then re-creates the routines 0002 changed as 0001 released them (from
0001_core.routines.sql, pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0002_extensions"
down_revision = "0001_core"
branch_labels = None
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0002_extensions.routines.sql"

# The catalog this revision leaves (pyqueue_sql.migrate.fingerprint), per
# server flavor: how `migrate --adopt` recognises a schema installed from the
# SQL script. tests/schema/test_migrate_interrupted.py regenerates and compares them.
FINGERPRINTS = {
    "postgresql": "fe5d1f2cdc926ee5eecb5246f9970b7f",
    "mariadb": "22450a55a3cf03f134c61bfe1af470b1",
}


def upgrade() -> None:
    run_sql_file("0002_extensions.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0002_extensions.down.sql")
    downgrade_routines(revision)
