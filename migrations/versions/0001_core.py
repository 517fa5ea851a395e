"""The core queue contract: tables, indexes and the queue_* routines.

Revision ID: 0001_core
Revises:
Create Date: 2026-11-22
"""

from pyqueue_sql.migrate import run_sql_file

revision = "0001_core"
down_revision = None
branch_labels = ("pyqueue_sql",)
depends_on = None


def upgrade() -> None:
    run_sql_file("0001_core.up.sql")


def downgrade() -> None:
    run_sql_file("0001_core.down.sql")
