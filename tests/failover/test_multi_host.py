"""A MySQL/MariaDB DSN naming several hosts (mysql://user@db1:3306,db2:3306/app): connect tries
them in order and takes the first that answers and is writable, as libpq does for PostgreSQL with
target_session_attrs=read-write; a replica (read_only ON) is skipped even for an account whose
privileges would let it write there."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import pytest

import pyqueue_sql
from pyqueue_sql import aio, errors
from pyqueue_sql.dialects import mysql_connect_args
from pyqueue_sql.dialects.mysql import mysql_connect_candidates

from ..helpers import free_port


def test_candidates_are_the_hosts_in_order_with_the_dsns_other_arguments():
    got = mysql_connect_candidates(
        "mysql://app:s%40cret@db1:3307,db2,[::1]:3309,[fe80::2]/shop?connect_timeout=3"
    )
    assert [(c["host"], c["port"]) for c in got] == [
        ("db1", 3307),
        ("db2", 3306),
        ("::1", 3309),
        ("fe80::2", 3306),
    ]
    for c in got:
        assert (c["user"], c["password"], c["database"], c["connect_timeout"]) == ("app", "s@cret", "shop", 3)


def test_one_host_gives_the_same_arguments_as_before():
    (only,) = mysql_connect_candidates("mysql://root@127.0.0.1:3306/app")
    assert only == mysql_connect_args("mysql://root@127.0.0.1:3306/app")
    assert (only["host"], only["port"], only["user"], only["password"]) == ("127.0.0.1", 3306, "root", "")


@pytest.mark.parametrize(
    "hosts",
    ["db1,,db2", "db1:,db2", "db1:x,db2", "db1:70000,db2", "db1,[::1:3306", "db1,db2:3306:1", ",db2"],
)
def test_a_malformed_host_list_is_refused(hosts):
    with pytest.raises(errors.UnsupportedDsnError, match="host or host:port"):
        mysql_connect_candidates(f"mysql://root@{hosts}/app")


def test_several_hosts_and_a_unix_socket_are_refused():
    with pytest.raises(errors.UnsupportedDsnError, match="unix_socket"):
        mysql_connect_candidates("mysql://root@db1,db2/app?unix_socket=/run/mysqld/mysqld.sock")


def test_connect_args_refuse_several_hosts_rather_than_pick_one():
    """PyMySQL connects to one host: the arguments for it cannot stand for a host list."""
    with pytest.raises(errors.UnsupportedDsnError, match="several hosts"):
        mysql_connect_args("mysql://root@db1,db2/app")


def _with_hosts_before(dsn: str, *ports: int) -> str:
    """The DSN with 127.0.0.1:<port> entries put before its own host."""
    parts = urlsplit(dsn)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not parts.port and not parts.hostname:
        pytest.fail(f"the test server's DSN has no TCP host: {dsn}")
    listed = ",".join(f"127.0.0.1:{p}" for p in ports)
    return parts._replace(netloc=f"{userinfo}{at}{listed},{host}").geturl()


def _port_of(db) -> int:
    cur = db.connection.cursor()
    cur.execute("SELECT @@port")
    (port,) = cur.fetchone()
    cur.close()
    return int(port)


async def _async_port(dsn: str) -> int:
    db = await aio.connect(dsn)
    try:
        async with db.connection.cursor() as cur:
            await cur.execute("SELECT @@port")
            (port,) = await cur.fetchone()
        return int(port)
    finally:
        await db.close()


@pytest.mark.only_dialect("mysql")
def test_a_host_that_refuses_is_skipped(dsn):
    expected = urlsplit(dsn).port or 3306
    multi = _with_hosts_before(dsn, free_port())
    with pyqueue_sql.connect(multi) as db:
        assert _port_of(db) == expected
        assert db.queue("multi.host").create().push("k", "kind", {}) is True
        db.queue("multi.host").drop()
    assert asyncio.run(_async_port(multi)) == expected


@pytest.mark.only_dialect("mysql")
def test_no_host_answering_is_a_connection_error_naming_each(dsn):
    first, second = free_port(), free_port()
    nowhere = f"mysql://root@127.0.0.1:{first},127.0.0.1:{second}/app?connect_timeout=2"
    lost = pyqueue_sql.dialects.for_dsn(nowhere).connection_errors()
    with pytest.raises(lost) as caught:
        pyqueue_sql.connect(nowhere)
    assert f"127.0.0.1:{first}: " in str(caught.value) and f"127.0.0.1:{second}: " in str(caught.value)
    with pytest.raises(lost, match="no writable MySQL server"):
        asyncio.run(_async_port(nowhere))


@pytest.fixture
def read_only_server():
    """A MariaDB of this test's own with read_only ON (a replica, as connect sees it)."""
    from ..conftest import UNDER_CI
    from ..own_mariadb import OwnMariaDB

    server = None
    try:
        server = OwnMariaDB(("--read-only=ON",))
        server.start()
        server.wait_ready()
    except Exception as exc:  # no binaries, or no system user to run them as
        if server is not None:
            server.destroy()
        if UNDER_CI:
            pytest.fail(f"CI=true and cannot start a test-owned MariaDB: {exc}", pytrace=False)
        pytest.skip(f"cannot start a test-owned MariaDB: {exc}")
    try:
        yield server
    finally:
        server.destroy()


@pytest.mark.slow
@pytest.mark.only_dialect("mysql")
def test_a_read_only_server_is_skipped_though_root_could_write_there(dsn, read_only_server):
    expected = urlsplit(dsn).port or 3306
    multi = _with_hosts_before(dsn, read_only_server.port)
    with pyqueue_sql.connect(multi) as db:
        assert _port_of(db) == expected
    assert asyncio.run(_async_port(multi)) == expected
    only_replica = f"mysql://root@127.0.0.1:{free_port()},127.0.0.1:{read_only_server.port}/mysql"
    lost = pyqueue_sql.dialects.for_dsn(only_replica).connection_errors()
    with pytest.raises(lost, match=rf"127\.0\.0\.1:{read_only_server.port}: read-only"):
        pyqueue_sql.connect(only_replica).close()
