"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

Up: the DDL this revision adds (${up_revision}.up.sql), then the routines it
added or changed (ROUTINES below).
Down: undoes the DDL and drops the routines it added (${up_revision}.down.sql),
then re-creates the routines it changed or removed as the revision before it
defines them (pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import CURRENT_ROUTINES, downgrade_routines, run_sql_file, upgrade_routines

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

# The routines this revision added or changed: while it is the newest revision,
# those of sql/<dialect>/routines.sql that differ from the revision before it;
# `make release-routines` freezes them into ${up_revision}.routines.sql before
# the next revision is added.
ROUTINES = CURRENT_ROUTINES

# The catalog this revision leaves, per server flavor (see 0001_core.py);
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "",
    "mariadb": "",
}


def upgrade() -> None:
    run_sql_file("${up_revision}.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("${up_revision}.down.sql")
    downgrade_routines(revision)
