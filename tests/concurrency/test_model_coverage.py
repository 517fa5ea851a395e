"""Every routine that changes state has a rule in the model (tests/concurrency/test_model.py).

The routines are read from the installed database's catalog (``pg_proc`` on PostgreSQL,
``information_schema.ROUTINES`` on MySQL/MariaDB), less the explicit list of read-only ones
(tests/concurrency/model/coverage.py, READ_ONLY); each must be named by a rule of ContractMachine
through ``@covers``. A routine added to sql/ without a rule fails the first test;
the second shows that it does, with a routine made up for the purpose."""

from __future__ import annotations

import pyqueue_sql

from .model.coverage import READ_ONLY, catalog_routines, covered, state_changing
from .test_model import ContractMachine

# Routines not in the model yet: the list only shrinks.
PENDING = frozenset(
    {
        "queue_bind", "queue_cancel", "queue_cancel_held", "queue_commit_batch", "queue_commit_reserve",
        "queue_commit_result", "queue_commit_result_batch", "queue_fail", "queue_give_up",
        "queue_ingest_flush", "queue_publish", "queue_publish_batch", "queue_publish_batch_with_headers",
        "queue_publish_with_headers", "queue_purge_history", "queue_push_after",
        "queue_push_batch_grouped_with_headers", "queue_push_batch_with_headers",
        "queue_push_grouped_with_headers", "queue_push_replace", "queue_push_with_headers",
        "queue_redrive", "queue_release", "queue_release_dead_workers", "queue_renew", "queue_replay",
        "queue_reset_setting", "queue_schedule_cron", "queue_schedule_every", "queue_set_group_limit",
        "queue_set_limit", "queue_set_max_payload", "queue_set_max_reservation", "queue_set_notify_window",
        "queue_set_progress", "queue_set_rate", "queue_set_result_retention", "queue_snooze", "queue_unbind",
        "queue_unschedule", "queue_worker_deregister", "queue_worker_heartbeat", "queue_worker_register",
    }
)  # fmt: skip


def uncovered(db: pyqueue_sql.Database, dialect: str) -> set[str]:
    return state_changing(db, dialect) - set(covered(ContractMachine))


def test_every_state_changing_routine_has_a_rule_in_the_model(db, dialect):
    missing = uncovered(db, dialect) - PENDING
    assert not missing, f"routines that change state with no rule in the model: {sorted(missing)}"
    # the read-only list names only routines that exist (a renamed one would hide its successor)
    assert READ_ONLY <= catalog_routines(db, dialect), sorted(READ_ONLY - catalog_routines(db, dialect))


def test_a_new_routine_without_a_rule_is_found(installed_database, dialect):
    db = pyqueue_sql.connect(installed_database("coverage"))
    try:
        cur = db.connection.cursor()
        if dialect == "postgresql":
            cur.execute("CREATE FUNCTION queue_model_probe(q text) RETURNS void LANGUAGE sql AS $$ SELECT $$")
        else:
            cur.execute("CREATE PROCEDURE queue_model_probe(q TEXT) BEGIN END")
        cur.close()
        assert uncovered(db, dialect) - PENDING == {"queue_model_probe"}
    finally:
        db.close()
