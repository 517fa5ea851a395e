"""Queue settings that survive a re-create, the last error of a message,
concurrency-limit and charset fixes, and closing privilege gaps.

Revision ID: 0004_errors_and_safety
Revises: 0003_hardening
Create Date: 2026-11-22

Up: the DDL delta (0004_errors_and_safety.up.sql), then the routines 0004
added or changed (ROUTINES below).
Down: undoes what 0004 added (0004_errors_and_safety.down.sql), then re-creates
the routines 0004 changed as 0003's set defines them
(pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0004_errors_and_safety"
down_revision = "0003_hardening"
branch_labels = None
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0004_errors_and_safety.routines.sql"

# The catalog this revision leaves (pyqueue_sql.migrate.fingerprint), per
# server flavor: how `migrate --adopt` recognises a schema installed from the
# SQL script. tests/schema/test_migrate_interrupted.py regenerates and compares them.
FINGERPRINTS = {
    "postgresql": "8469bd3f7b765f666b3fbb6b940afe73",
    "mariadb": "e74c1de6ae61623f279252310d6628b5",
}


def upgrade() -> None:
    run_sql_file("0004_errors_and_safety.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0004_errors_and_safety.down.sql")
    downgrade_routines(revision)
