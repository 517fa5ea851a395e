"""What MySQL/MariaDB's routines do inside, beyond the contract every dialect keeps (tests/contract):
their locks and races, the short ways and fast checks, sessions and charsets, the topic matcher's
corpus. Each file carries ``only_dialect("mysql")``; the tests run through both clients, as the
contract's do (tests/clients.py)."""

from __future__ import annotations

import pytest

from tests.clients import client, connect, loop_thread  # noqa: F401 - the fixtures of this folder


@pytest.fixture
def mysql_sql(dsn):
    """Runs plain SQL on one autocommit PyMySQL connection to the MySQL/MariaDB test database, as
    a mysql client would: every result set of a CALL read; returns the first one's rows."""
    import pymysql

    from pyqueue_sql.dialects import mysql_connect_args
    from tests.plainsql import call

    conn = pymysql.connect(**mysql_connect_args(dsn))
    yield lambda statement, *args: call(conn, statement, *args)
    conn.close()


@pytest.fixture
def conns(dsn):
    """Opens autocommit PyMySQL connections to the test database on demand (`conns()` gives a new
    one), for tests that race several sessions; closes them all at the end."""
    import pymysql

    from pyqueue_sql.dialects import mysql_connect_args

    opened = []

    def make():
        conn = pymysql.connect(**mysql_connect_args(dsn))
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()
