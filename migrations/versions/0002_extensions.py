"""Wakeups, fast paths, ingest and pipelines: the tables and routines added
after the core contract.

Revision ID: 0002_extensions
Revises: 0001_core
Create Date: 2026-11-22

Up: the DDL delta (0002_extensions.up.sql), then the whole routine set as it
stood at this revision (0002_extensions.routines.sql, a frozen copy of
sql/<dialect>/routines.sql; every routine there is replayable).
Down: drops what 0002 added (0002_extensions.down.sql), then re-installs the
routines of 0001 (0002_extensions.down_routines.sql).
"""

from pyqueue_sql.migrate import run_sql_file

revision = "0002_extensions"
down_revision = "0001_core"
branch_labels = None
depends_on = None

# The catalog this revision leaves (pyqueue_sql.migrate.fingerprint), per
# server flavor: how `migrate --adopt` recognises a schema installed from the
# SQL script. tests/schema/test_migrate_interrupted.py regenerates and compares them.
FINGERPRINTS = {
    "postgresql": "fe5d1f2cdc926ee5eecb5246f9970b7f",
    "mariadb": "22450a55a3cf03f134c61bfe1af470b1",
}


def upgrade() -> None:
    run_sql_file("0002_extensions.up.sql")
    run_sql_file("0002_extensions.routines.sql")


def downgrade() -> None:
    run_sql_file("0002_extensions.down.sql")
    run_sql_file("0002_extensions.down_routines.sql")
