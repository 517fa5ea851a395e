"""What migrate installed, for `pyqueue-sql migrate --check` (drift) and `pyqueue-sql
version`: the table pyqueue_installed.

Revision ID: 0003_ready_order
Revises: 0001_baseline
Create Date: 2026-11-28

Up: sql/<dialect>/revisions/0003_ready_order.up.sql (a new table: no lock on any other).
The routines of the version are installed once, after the last revision of the run.
Down: sql/<dialect>/revisions/0003_ready_order.down.sql.
"""

from pyqueue_sql.migrate import run_routines, run_sql_file

revision = "0003_ready_order"
down_revision = "0002_installed"
branch_labels = None
depends_on = None

# The tables this revision leaves (how `migrate --adopt` recognises a script install at it):
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "1714ee54e2ea9f3d19aa4f55e30d7ddd",
    "mariadb": "f360bc9a62992ca6d5a1d371b69c09c5",
}


def upgrade() -> None:
    run_sql_file("revisions/0003_ready_order.up.sql")
    run_routines()


def downgrade() -> None:
    run_sql_file("revisions/0003_ready_order.down.sql")
