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


def uncovered(db: pyqueue_sql.Database, dialect: str) -> set[str]:
    return state_changing(db, dialect) - set(covered(ContractMachine))


def test_every_state_changing_routine_has_a_rule_in_the_model(db, dialect):
    missing = uncovered(db, dialect)
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
        assert uncovered(db, dialect) == {"queue_model_probe"}
    finally:
        db.close()
