"""The baseline: every table of sql/<dialect>/schema.sql, then every routine of
sql/<dialect>/routines/ (the files `pyqueue-sql sql` prints, read from sql/,
never copied). Down: sql/<dialect>/uninstall.sql removes all of it.

Revision ID: 0001_baseline
Revises:
Create Date: 2026-11-25
"""

from pyqueue_sql.migrate import run_routines, run_sql_file

revision = "0001_baseline"
down_revision = None
branch_labels = ("pyqueue_sql",)
depends_on = None

# The tables this revision leaves (pyqueue_sql.migrate.fingerprint: no routine), per
# server flavor: how `migrate --adopt` recognises a schema installed from `pyqueue-sql
# sql`. tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "1b5f4a0335577530273b02a55dffd9de",
    "mariadb": "071aad5b91c3e02f7cc400ed4e48ce08",
}


def upgrade() -> None:
    run_sql_file("schema.sql")
    run_routines()


def downgrade() -> None:
    run_sql_file("uninstall.sql")
