"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from pyqueue_sql.migrate import run_sql_file

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

# The catalog this revision leaves, per server flavor (see 0001_core.py);
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "",
    "mariadb": "",
}


def upgrade() -> None:
    run_sql_file("${up_revision}.up.sql")


def downgrade() -> None:
    run_sql_file("${up_revision}.down.sql")
