"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

Up: the DDL this revision adds (migrations/sql/<dialect>/${up_revision}.up.sql),
then sql/<dialect>/routines/ again (every routine created anew; on MySQL the
routine grants are given back at the end of the run). Down: undoes the DDL and
re-creates the routines it changed as the revision before defines them
(${up_revision}.down.sql). See CONTRIBUTING.md, "Changing the schema".
"""

from pathlib import Path

from pyqueue_sql.migrate import run_routines, run_sql_file

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

HERE = Path(__file__).resolve().parents[1] / "sql"

# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "",
    "mariadb": "",
}


def upgrade() -> None:
    run_sql_file("${up_revision}.up.sql", folder=HERE)
    run_routines()


def downgrade() -> None:
    run_sql_file("${up_revision}.down.sql", folder=HERE)
