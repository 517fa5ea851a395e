"""Hardening: least privilege (SECURITY DEFINER routines, no PUBLIC execute)
and the input checks found by the property tests.

Revision ID: 0003_hardening
Revises: 0002_extensions
Create Date: 2026-11-22

Up: the DDL delta (0003_hardening.up.sql), then the whole routine set as it
stands at this revision (0003_hardening.routines.sql, a frozen copy of
sql/<dialect>/routines.sql; `make freeze` refreshes it until release).
Down: undoes what 0003 added (0003_hardening.down.sql), then re-installs the
routines of 0002 (0003_hardening.down_routines.sql).
"""

from pyqueue_sql.migrate import run_sql_file

revision = "0003_hardening"
down_revision = "0002_extensions"
branch_labels = None
depends_on = None

# The catalog this revision leaves (pyqueue_sql.migrate.fingerprint), per
# server flavor: how `migrate --adopt` recognises a schema installed from the
# SQL script. tests/schema/test_migrate_interrupted.py regenerates and compares them.
FINGERPRINTS = {
    "postgresql": "a8a55e1a1e5e7efcc8086f4c4de0c92b",
    "mariadb": "4e2d4c585fcc51f0e9183777f9fc3de3",
}


def upgrade() -> None:
    run_sql_file("0003_hardening.up.sql")
    run_sql_file("0003_hardening.routines.sql")


def downgrade() -> None:
    run_sql_file("0003_hardening.down.sql")
    run_sql_file("0003_hardening.down_routines.sql")
