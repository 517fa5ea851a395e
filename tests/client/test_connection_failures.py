"""A connection that cannot be opened is one pyqueue_sql error on both dialects, sync and asyncio:
errors.ConnectionFailedError, whose reason tells a configuration error (the login, the access to
the database, a database that does not exist) from a server that could not be reached, with the
driver's exception as its cause and never the DSN's password in its message."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

import pyqueue_sql
from pyqueue_sql import dialects, errors

from ..helpers import free_port

# A password no server message could hold by chance.
SECRET = f"pw-{uuid.uuid4().hex[:12]}"


def _with(dsn: str, user: str | None = None, password: str | None = None, database: str | None = None) -> str:
    """dsn with another user, password, or database (path)."""
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    name = user if user is not None else (parts.username or "")
    userinfo = name + (f":{password}" if password is not None else "")
    path = f"/{database}" if database is not None else parts.path
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{host}" if userinfo else host, path=path))


def _failures(dsn: str) -> list[errors.ConnectionFailedError]:
    """The error of pyqueue_sql.connect and of pyqueue_sql.aio.connect on dsn."""
    from pyqueue_sql import aio

    caught = []
    with pytest.raises(errors.ConnectionFailedError) as sync:
        pyqueue_sql.connect(dsn)
    caught.append(sync.value)
    with pytest.raises(errors.ConnectionFailedError) as asynchronous:
        asyncio.run(aio.connect(dsn))
    caught.append(asynchronous.value)
    return caught


def _check(failure: errors.ConnectionFailedError, dsn: str, reason: str) -> None:
    dialect = dialects.for_dsn(dsn)
    assert failure.reason == reason, failure
    assert failure.retryable is (reason == "unreachable")
    assert isinstance(failure, errors.QueueError)
    # the driver's own exception is kept, and a worker's reconnect loop still retries on it
    assert type(failure.__cause__).__module__.split(".")[0] in ("psycopg", "pymysql"), failure.__cause__
    assert isinstance(failure, dialect.connection_errors())
    message = str(failure)
    assert message.startswith("cannot connect: ") and "\n" not in message
    assert SECRET not in message


@pytest.fixture
def admin(dsn):
    connection = dialects.for_dsn(dsn).connect(dsn)
    yield connection
    connection.close()


def _run(connection, statement: str) -> None:
    cur = connection.cursor()
    try:
        cur.execute(statement)
    finally:
        cur.close()


@contextlib.contextmanager
def _account(admin, dialect: str, tag: str):
    """A login account of the test's own, with the password SECRET; dropped afterwards."""
    name = f"pq_{tag}_{uuid.uuid4().hex[:10]}"
    if dialect == "postgresql":
        _run(admin, f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{SECRET}'")
    else:
        _run(admin, f"CREATE USER `{name}`@`%` IDENTIFIED BY '{SECRET}'")
    try:
        yield name
    finally:
        _run(admin, f'DROP ROLE "{name}"' if dialect == "postgresql" else f"DROP USER `{name}`@`%`")


def test_a_database_that_does_not_exist_is_a_configuration_error(dsn):
    missing = _with(dsn, database=f"pyqueue_no_such_{uuid.uuid4().hex[:8]}")
    for failure in _failures(missing):
        _check(failure, dsn, "unknown_database")
        assert "does not exist" in str(failure) or "Unknown database" in str(failure)


def test_a_refused_login_is_a_configuration_error_without_the_password(dsn):
    if dialects.for_dsn(dsn).name == "postgresql":
        # the test server trusts 127.0.0.1 (any password passes): an unknown role is refused
        refused = _with(dsn, user=f"pq_nobody_{uuid.uuid4().hex[:8]}", password=SECRET)
    else:
        refused = _with(dsn, password=SECRET)  # root with a wrong password
    for failure in _failures(refused):
        _check(failure, dsn, "authentication")


def test_an_account_that_may_not_use_the_database_is_an_authorization_error(
    dsn, dialect, fresh_database, admin
):
    target = fresh_database("noaccess")
    database = urlsplit(target).path.lstrip("/")
    with _account(admin, dialect, "noaccess") as name:
        if dialect == "postgresql":
            _run(admin, f'REVOKE CONNECT ON DATABASE "{database}" FROM PUBLIC')
        for failure in _failures(_with(target, user=name, password=SECRET)):
            _check(failure, dsn, "authorization")


def test_a_server_that_does_not_answer_is_retryable(dsn):
    parts = urlsplit(_with(dsn, password=SECRET))
    host = parts.netloc.rpartition("@")
    nowhere = urlunsplit(parts._replace(netloc=f"{host[0]}@127.0.0.1:{free_port()}"))
    for failure in _failures(nowhere):
        _check(failure, dsn, "unreachable")


@pytest.mark.only_dialect("postgresql")
def test_a_malformed_postgresql_dsn_is_refused_without_its_password(dsn):
    # psycopg quotes the offending part of the DSN: here the password itself
    malformed = _with(dsn, password=f"{SECRET} x")
    with pytest.raises(errors.UnsupportedDsnError) as caught:
        pyqueue_sql.connect(malformed)
    assert SECRET not in str(caught.value) and "***" in str(caught.value)


def test_a_password_in_a_query_parameter_is_kept_out_of_the_message(dsn):
    """libpq reads password=... from the query too; the message masks it wherever it sits."""
    from pyqueue_sql.dialects.base import without_secrets

    assert without_secrets(f"a {SECRET} b", f"postgresql://u@h/db?password={SECRET}") == "a *** b"
    assert without_secrets(f"a {SECRET} b", f"host=h password='{SECRET}' dbname=db") == "a *** b"
    assert without_secrets("a p%40ss b p@ss", "mysql://u:p%40ss@h/db") == "a *** b ***"


def test_the_command_line_says_it_in_one_line(dsn):
    refused = _with(dsn, password=SECRET, database=f"pyqueue_no_such_{uuid.uuid4().hex[:8]}")
    run = subprocess.run(
        [sys.executable, "-m", "pyqueue_sql.cli", "stats", "--dsn", refused],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1, run
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pyqueue-sql: error: cannot connect: "), run.stderr
    assert SECRET not in run.stderr


def test_a_port_that_is_not_a_number_is_a_dsn_error_in_one_line(dsn):
    parts = urlsplit(_with(dsn, password=SECRET))
    bad = urlunsplit(parts._replace(netloc=parts.netloc.rpartition(":")[0] + ":abc"))
    with pytest.raises(errors.UnsupportedDsnError, match="abc") as caught:
        pyqueue_sql.connect(bad)
    assert SECRET not in str(caught.value)
    run = subprocess.run(
        [sys.executable, "-m", "pyqueue_sql.cli", "stats", "--dsn", bad],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 1, run.stderr
