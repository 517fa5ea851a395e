"""MySQL/MariaDB: a reserve or pop that fails after claiming messages gives them back as they were
(schedule, attempts, token), so a failed call consumes no delivery, also when the error is raised deep
inside the claim (a dead-lettering that fails) and not in the reserve itself. A failing procedure
hands no OUT/INOUT parameter back to its caller, so the claim itself must give its claims back."""

from __future__ import annotations

import time

import pymysql
import pytest

from pyqueue_sql.dialects import mysql_connect_args
from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")

REFUSAL = "dead-lettering refused by the test"


@pytest.fixture
def conn(installed_database):
    """An autocommit connection to a database of its own (the test adds a trigger to it)."""
    url = installed_database("claims")
    connection = pymysql.connect(**mysql_connect_args(url))
    connection.autocommit(True)
    yield connection
    connection.close()


def rows_of(conn, queue: str) -> dict[str, tuple]:
    found = call(
        conn,
        "SELECT p_key, scheduled_at, attempts, reserve_token, reserved_by FROM pyqueue_message"
        " WHERE queue_name = %s",
        queue,
    )
    return {key: rest for key, *rest in ((r[0], *r[1:]) for r in found)}


@pytest.mark.parametrize(
    ("n", "dead_first"),
    [
        (1, True),  # the one-message claim meets the expired messages first and fails on them
        (10, False),  # the batch claim takes the ready messages and the expired ones in one page
    ],
)
def test_a_reserve_whose_dead_lettering_fails_gives_its_claims_back(conn, n, dead_first):
    call(conn, "CALL queue_create('c.dlq', NULL, NULL, NULL, NULL)")
    call(conn, "CALL queue_create('c', 30, 1, 'c.dlq', NULL)")
    # two messages whose last allowed delivery expires: the next reserve dead-letters them
    for key in ("dead-0", "dead-1"):
        call(conn, "CALL queue_push('c', %s, 'job', '{}', NULL, %s)", key, 5 if dead_first else 1)
    assert len(call(conn, "CALL queue_reserve('c', 'w0', 0.01, 2, NULL)")) == 2
    # ready messages of the same priority come first in the reserve's order (due in 2020)
    for key in ("ready-0", "ready-1", "ready-2"):
        call(conn, "CALL queue_push('c', %s, 'job', '{}', '2020-01-01 00:00:00', 1)", key)
    time.sleep(0.05)
    before = rows_of(conn, "c")
    call(
        conn,
        "CREATE TRIGGER refuse_dead_letters BEFORE INSERT ON pyqueue_message FOR EACH ROW"
        f" BEGIN IF NEW.queue_name = 'c.dlq' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{REFUSAL}';"
        " END IF; END",
    )

    with pytest.raises(pymysql.MySQLError, match=REFUSAL):
        call(conn, "CALL queue_reserve('c', 'w1', 0.05, %s, NULL)", n)
    # the ready messages are as they were before the call; the one whose dead-lettering failed
    # stays claimed under a token nobody holds until that claim expires (by design: dead-lettered
    # by a later reserve)
    after = rows_of(conn, "c")
    assert {k: v for k, v in after.items() if k.startswith("ready")} == {
        k: v for k, v in before.items() if k.startswith("ready")
    }
    assert rows_of(conn, "c.dlq") == {}

    call(conn, "DROP TRIGGER refuse_dead_letters")
    time.sleep(0.1)
    got = call(conn, "CALL queue_reserve('c', 'w1', NULL, 10, NULL)")
    assert sorted(r[0] for r in got) == ["ready-0", "ready-1", "ready-2"]
    assert all(r[5] == 1 for r in got), got  # a first delivery: the failed call consumed no attempt
    assert sorted(rows_of(conn, "c.dlq")) == ["dead-0", "dead-1"]
