"""Batch routines that read their input once: MySQL/MariaDB queue_push_batch takes each field of
an element from one JSON_TABLE pass instead of re-parsing the element per field; queue_commit_batch
is one DELETE in its common case on both dialects; PostgreSQL queue_commit skips the archive step
when there is nothing to archive; MySQL/MariaDB queue_extend and queue_set_limit in autocommit run
a step picked as a deadlock victim again instead of failing

Revision ID: 0008_single_pass_batches
Revises: 0007_lean_live_table
Create Date: 2026-11-24

Up: the DDL this revision adds (0008_single_pass_batches.up.sql, none), then the routines it
added or changed (ROUTINES below).
Down: undoes the DDL and drops the routines it added (0008_single_pass_batches.down.sql),
then re-creates the routines it changed or removed as the revision before it
defines them (pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0008_single_pass_batches"
down_revision = "0007_lean_live_table"
branch_labels = None
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0008_single_pass_batches.routines.sql"

# The catalog this revision leaves, per server flavor (see 0001_core.py);
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "810af414e7e94b237e25054fa8e3aa2a",
    "mariadb": "2a5c111e9471bfcea2a1b5da08bcbae3",
}


def upgrade() -> None:
    run_sql_file("0008_single_pass_batches.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0008_single_pass_batches.down.sql")
    downgrade_routines(revision)
