"""Queue settings that survive a re-create, the last error of a message,
concurrency-limit and charset fixes, and closing privilege gaps.

Revision ID: 0004_errors_and_safety
Revises: 0003_hardening
Create Date: 2026-11-22

Up: the DDL delta (0004_errors_and_safety.up.sql), then the whole routine set
as it stands at this revision (0004_errors_and_safety.routines.sql, a frozen
copy of sql/<dialect>/routines.sql; `make freeze` refreshes it until release).
Down: undoes what 0004 added (0004_errors_and_safety.down.sql), then re-installs
the routines 0003 released (0003_hardening.routines.sql itself, not a copy).
"""

from pyqueue_sql.migrate import run_sql_file

revision = "0004_errors_and_safety"
down_revision = "0003_hardening"
branch_labels = None
depends_on = None

# The catalog this revision leaves (pyqueue_sql.migrate.fingerprint), per
# server flavor: how `migrate --adopt` recognises a schema installed from the
# SQL script. tests/schema/test_migrate_interrupted.py regenerates and compares them.
FINGERPRINTS = {
    "postgresql": "67e3778a131a7bf782812c0b6764031c",
    "mariadb": "5399d5ac3a82e736d865183f4b5d0aad",
}


def upgrade() -> None:
    run_sql_file("0004_errors_and_safety.up.sql")
    run_sql_file("0004_errors_and_safety.routines.sql")


def downgrade() -> None:
    run_sql_file("0004_errors_and_safety.down.sql")
    run_sql_file("0003_hardening.routines.sql")
