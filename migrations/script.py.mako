"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

Up: sql/<dialect>/revisions/${up_revision}.up.sql, the DDL this revision adds (also
part of `pyqueue-sql sql`). The routines of the version are installed once, after
the last revision of the run (run_routines() asks for that). Down:
sql/<dialect>/revisions/${up_revision}.down.sql. See CONTRIBUTING.md, "Changing the
schema after 0.1.0".
"""

from pyqueue_sql.migrate import run_routines, run_sql_file

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

# The tables this revision leaves (how `migrate --adopt` recognises a script install at it):
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "",
    "mariadb": "",
}


def upgrade() -> None:
    run_sql_file("revisions/${up_revision}.up.sql")
    run_routines()


def downgrade() -> None:
    run_sql_file("revisions/${up_revision}.down.sql")
