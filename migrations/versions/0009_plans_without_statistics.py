"""Plans that do not depend on table statistics, and the reason a dead-lettered message goes written by
its claim: PostgreSQL queue_commit_batch's DELETE (pyqueue__delete_held) takes the queue name from
the batch, so that a table the planner has no statistics for (a fresh install, a queue that grew in
a burst before autovacuum analyzed it) cannot turn each commit of a batch into a scan of the whole
queue; PostgreSQL queue_next_scheduled_at carries planner settings that keep its one index probe;
MySQL/MariaDB pyqueue__claim and pyqueue__claim_one (the reserve's claim steps) write a dead-letter
claim's last error in the claiming UPDATE instead of a statement of its own, which could fail a
MariaDB call in autocommit with a deadlock; MySQL/MariaDB queue_extend gives back only the limit
slot it marked, not the slot of a reserver that took the expired message again

Revision ID: 0009_plans_without_statistics
Revises: 0008_single_pass_batches
Create Date: 2026-11-24

Up: the DDL this revision adds (0009_plans_without_statistics.up.sql, none), then the routines it
added or changed (ROUTINES below).
Down: undoes the DDL and drops the routines it added (0009_plans_without_statistics.down.sql,
none), then re-creates the routines it changed or removed as the revision before it defines them
(pyqueue_sql.migrate.downgrade_routines).
"""

from pyqueue_sql.migrate import downgrade_routines, run_sql_file, upgrade_routines

revision = "0009_plans_without_statistics"
down_revision = "0008_single_pass_batches"
branch_labels = None
depends_on = None

# The routines this revision added or changed (migrations/sql/<dialect>/), as released.
ROUTINES = "0009_plans_without_statistics.routines.sql"

# The catalog this revision leaves, per server flavor (see 0001_core.py);
# tests/schema/test_migrate_interrupted.py prints the values to put here.
FINGERPRINTS = {
    "postgresql": "3c61ab2792940431e2b4175c3cf46732",
    "mariadb": "2a5c111e9471bfcea2a1b5da08bcbae3",
}


def upgrade() -> None:
    run_sql_file("0009_plans_without_statistics.up.sql")
    upgrade_routines(revision)


def downgrade() -> None:
    run_sql_file("0009_plans_without_statistics.down.sql")
    downgrade_routines(revision)
