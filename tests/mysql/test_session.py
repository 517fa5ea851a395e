"""MySQL/MariaDB: the SQL SECURITY DEFINER procedures give the same results whatever the caller's
session says: a tiny group_concat_max_len (which cut JSON_ARRAYAGG, so a kinds-filtered reserve
handed out nothing) and foreign_key_checks 0 (which let a push into a queue that does not exist
through). And the accounts
that could shadow our tables with temporary tables (CREATE TEMPORARY TABLES on the install
database: MariaDB resolves a temporary table first inside a definer's procedure, even under a
name qualified by the database) are found by the named statement `pyqueue-sql grant` checks."""

from __future__ import annotations

import json
import uuid

import pymysql
import pytest

from pyqueue_sql import dialects
from pyqueue_sql.dialects import mysql_connect_args
from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")


@pytest.fixture
def conn(dsn):
    connection = pymysql.connect(**mysql_connect_args(dsn))
    yield connection
    connection.close()


def make(conn) -> str:
    name = f"sess.{uuid.uuid4().hex[:10]}"
    call(conn, "CALL queue_create(%s, NULL, NULL, NULL, NULL)", name)
    return name


def test_a_tiny_group_concat_max_len_changes_no_result(conn):
    queue = make(conn)
    for key in "abcdef":
        call(conn, "CALL queue_push(%s, %s, 'k', '1', NULL, NULL)", queue, key)
    call(conn, "SET SESSION group_concat_max_len = 4")
    kinds = json.dumps(["other-kind", "k"])
    assert len(call(conn, "CALL queue_reserve(%s, 'w', NULL, 1, %s)", queue, kinds)) == 1
    assert len(call(conn, "CALL queue_reserve(%s, 'w', NULL, 3, %s)", queue, kinds)) == 3
    assert call(conn, "CALL queue_next_scheduled_at(%s, %s)", queue, kinds)[0][1] == 0
    assert call(conn, "CALL queue_wait(%s, %s, 0, NULL)", queue, kinds) == [(1,)]
    rows = call(conn, "CALL queue_commit_reserve(%s, NULL, NULL, NULL, 'w', NULL, 2, %s)", queue, kinds)
    assert len(rows) == 2
    grouped = [{"group": f"g{i % 3}", "p_key": f"x{i}", "p_kind": "k", "payload": i} for i in range(9)]
    assert call(
        conn,
        "CALL queue_push_batch_grouped(%s, %s, NULL, NULL, NULL, NULL, NULL)",
        queue,
        json.dumps(grouped),
    ) == [(9,)]
    heads = call(
        conn, "SELECT COUNT(*) FROM pyqueue_group WHERE queue_name = %s AND head_key IS NOT NULL", queue
    )
    assert heads == [(3,)]
    assert call(conn, "SELECT @@SESSION.group_concat_max_len") == [(4,)]


def test_foreign_key_checks_off_does_not_let_a_push_into_a_missing_queue(conn):
    call(conn, "SET SESSION foreign_key_checks = 0")
    with pytest.raises(pymysql.MySQLError, match="unknown_queue"):
        call(conn, "CALL queue_push('sess.no-such-queue', 'a', 'k', '1', NULL, NULL)")
    assert call(conn, "SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = 'sess.no-such-queue'") == [
        (0,)
    ]


def test_the_accounts_that_could_shadow_our_tables_are_found(dsn, conn):
    """A consumer that may also create temporary tables in the install database reserves from a
    paused queue through a temporary pyqueue_queue: the named statement finds such accounts (those
    with the privilege on this database, through a pattern, or globally), and only those."""
    from tests.security.test_privileges import Accounts

    accounts = Accounts(dsn)
    database = call(conn, "SELECT DATABASE()")[0][0]
    try:
        plain = accounts.with_capabilities("cons", "consumer")
        shadowing = accounts.with_capabilities("shad", "consumer")
        call(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON `{database}`.* TO `{shadowing}`@`%`")
        pattern = accounts.with_capabilities("patt", "consumer")
        call(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON `{database[:-2]}%`.* TO `{pattern}`@`%`")

        # the attack the check exists for
        queue = make(conn)
        call(conn, "CALL queue_push(%s, 'a', 'k', '1', NULL, NULL)", queue)
        call(conn, "CALL queue_pause(%s)", queue)
        attacker = accounts.raw(shadowing)
        columns = call(conn, "SHOW CREATE TABLE pyqueue_queue")[0][1]
        call(
            attacker,
            columns.replace("CREATE TABLE", "CREATE TEMPORARY TABLE", 1)
            .split(") ENGINE")[0]
            .split(",\n  CONSTRAINT")[0]
            + ")",
        )
        call(
            attacker,
            "INSERT INTO pyqueue_queue (queue_name, created_at) VALUES (%s, UTC_TIMESTAMP(6))",
            queue,
        )
        assert len(call(attacker, "CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue)) == 1

        found = {row[0] for row in call(conn, dialects.for_dsn(dsn).statement("temporary_table_grantees"))}
        assert f"'{shadowing}'@'%'" in found
        assert f"'{pattern}'@'%'" in found
        assert f"'{plain}'@'%'" not in found
    finally:
        accounts.close()


def test_connections_without_tls_options_share_one_tls_context_built_once(dsn):
    """Each connection still tries TLS (PREFERRED), but the CA store is loaded once a process, not
    once a connection (about 18 ms of CPU each). Run in a fresh interpreter: the suite's own
    conftest shares a context for the raw connections the tests open, which would hide a regression."""
    import subprocess
    import sys

    code = (
        "import sys, time\n"
        "from pyqueue_sql import dialects\n"
        "d = dialects.for_dsn(sys.argv[1])\n"
        "a = d.connect(sys.argv[1]); b = d.connect(sys.argv[1])\n"
        "t = time.process_time()\n"
        "conns = [d.connect(sys.argv[1]) for _ in range(10)]\n"
        "cpu_ms = (time.process_time() - t) * 100\n"
        "print(a.ctx is not None, a.ctx is b.ctx, all(c.ctx is a.ctx for c in conns), d.owns(a))\n"
        "print(f'{cpu_ms:.1f}', file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, dsn], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True", "True"], done.stdout
