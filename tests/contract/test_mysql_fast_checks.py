"""MySQL/MariaDB: queue_commit and queue_reserve skip their helpers' checks when the arguments are
plainly valid; whatever is not plainly valid still gets the full checks and the same refusals,
and an unknown queue is refused even with well-formed arguments."""

from __future__ import annotations

import uuid

import pymysql
import pytest

pytestmark = pytest.mark.only_dialect("mysql")

TOKEN = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.fixture
def sql(mysql_sql):
    return mysql_sql


@pytest.fixture
def queue(sql):
    name = f"fast.{uuid.uuid4().hex[:10]}"
    sql("CALL queue_create(%s, NULL, NULL, NULL, NULL)", name)
    return name


def refusal(sql, statement, *args) -> str:
    with pytest.raises(pymysql.MySQLError) as refused:
        sql(statement, *args)
    return refused.value.args[1].split(":")[1]


def test_well_formed_calls_on_an_unknown_queue_are_refused(sql):
    missing = f"missing.{uuid.uuid4().hex[:10]}"
    assert refusal(sql, "CALL queue_commit(%s, 'k', 'k', %s)", missing, TOKEN) == "unknown_queue"
    assert refusal(sql, "CALL queue_reserve(%s, 'w', NULL, 1, NULL)", missing) == "unknown_queue"


def test_a_commit_that_holds_nothing_on_a_known_queue_is_false(sql, queue):
    assert sql("CALL queue_commit(%s, 'k', 'k', %s)", queue, TOKEN) == [(0,)]


@pytest.mark.parametrize(
    ("key", "kind", "token"),
    [
        ("k ", "k", TOKEN),
        ("k", "", TOKEN),
        ("k" * 256, "k", TOKEN),
        ("k", "k", "not-a-token"),
        ("k", "k", TOKEN + "\n"),
        ("k", "k", None),
        (None, "k", TOKEN),
    ],
)
def test_a_commit_with_bad_arguments_is_refused(sql, queue, key, kind, token):
    assert refusal(sql, "CALL queue_commit(%s, %s, %s, %s)", queue, key, kind, token) == "invalid_argument"


@pytest.mark.parametrize(
    ("worker", "timeout", "n", "kinds"),
    [
        ("w", None, 0, None),
        ("w", None, 2.5, None),
        ("w", None, 2147483648, None),
        ("w", 0, 1, None),
        ("w", -1, 1, None),
        ("w", 3155760001, 1, None),
        ("w" * 256, None, 1, None),
        ("w", None, 1, "[]"),
        ("w", None, 1, "not json"),
    ],
)
def test_a_reserve_with_bad_arguments_is_refused(sql, queue, worker, timeout, n, kinds):
    statement = "CALL queue_reserve(%s, %s, %s, %s, %s)"
    assert refusal(sql, statement, queue, worker, timeout, n, kinds) == "invalid_argument"


def test_a_plain_reserve_and_commit_still_work(sql, queue):
    sql("CALL queue_push(%s, 'm', 'k', '{}', NULL, NULL)", queue)
    [row] = sql("CALL queue_reserve(%s, NULL, NULL, NULL, NULL)", queue)
    assert sql("CALL queue_commit(%s, %s, %s, %s)", queue, row[0], row[1], row[3].upper()) == [(1,)]
