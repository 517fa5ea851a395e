"""Hardening: least privilege (SECURITY DEFINER routines, no PUBLIC execute)
and the input checks found by the property tests.

Revision ID: 0003_hardening
Revises: 0002_extensions
Create Date: 2026-11-22

Up: the DDL delta (0003_hardening.up.sql, none), then the routines 0003 changed
or added (0003_hardening.routines.sql).
Down: undoes what 0003 added (0003_hardening.down.sql; PostgreSQL drops every
routine, so that 0002's come back with PostgreSQL's default ACL), then
re-creates the routines 0003 changed as 0002's set defines them
(pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0003_hardening"
down_revision = "0002_extensions"
branch_labels = None
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0003_hardening.routines.sql"

# The catalog this revision leaves (pyqueue_sql.migrate.fingerprint), per
# server flavor: how `migrate --adopt` recognises a schema installed from the
# SQL script. tests/schema/test_migrate_interrupted.py regenerates and compares them.
FINGERPRINTS = {
    "postgresql": "a8a55e1a1e5e7efcc8086f4c4de0c92b",
    "mariadb": "4e2d4c585fcc51f0e9183777f9fc3de3",
}


def upgrade() -> None:
    run_sql_file("0003_hardening.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0003_hardening.down.sql")
    downgrade_routines(revision)
