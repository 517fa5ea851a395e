"""Test helpers for applications of pyqueue-sql, registered as a pytest plugin (the package's
``pytest11`` entry point: installing pyqueue-sql makes the fixtures available).

    def test_welcome(pyqueue_dsn):
        app = myapp.tasks.app
        app.dsn = pyqueue_dsn            # or build the App in a fixture of yours
        app.create_queues()
        send_welcome.defer(to="x@example.com")
        report = app.run_pending()
        assert report.succeeded == 1

Fixtures:

* ``pyqueue_dsn``: the DSN of an empty database with the schema installed (migrated to the head
  revision): one database per test session (per xdist worker), made once, whose tables are emptied
  before each test (in one transaction: a few milliseconds, where making a database took a tenth
  of a second or more). Each test sees what a new database shows: no queue, message, schedule,
  worker or result; the connections an earlier test left open to it are
  closed first (as dropping its database did). When a test changed the database itself (a table,
  a routine or a grant of its own), the next test gets a new database. Dropped at the end of the
  session. The server: the DSN in ``PYQUEUE_TEST_DSN`` (a postgresql:// or mysql:// DSN whose user
  may create databases: PostgreSQL, MySQL or MariaDB), else PostgreSQL on 127.0.0.1:5432 as user
  postgres, else an embedded PostgreSQL (the ``embedded`` extra, as `make demo` uses), started
  once per test session. The database's name is a prefix and 12 random hex digits: the prefix is
  ``pyqueue_test_`` unless the ``pyqueue_database_prefix`` ini option or the
  ``PYQUEUE_TEST_DATABASE_PREFIX`` environment variable (first) says another (letters, digits and
  ``_``, at most 40).
* ``pyqueue_db``: a pyqueue_sql.Database on it, closed after the test.
* ``pyqueue_clock``: the test database's clock: ``pyqueue_clock.advance(timedelta(hours=1))``
  moves every stored time (due times, leases, outcomes, history, rate windows) an hour into the
  past, as if the hour had passed (pyqueue_sql.timetravel); ``app.run_pending(advance=...)`` runs
  what comes due step by step within such a span.

No fake queue: the jobs go through the real routines, as in production. App.run_pending() (and
``await app.run_pending_async()``) runs the ready jobs in the test's process and reports what
became of each; with ``advance=timedelta(...)`` it also runs what comes due within that span (a
retry's backoff, a snooze, a delay), moving the database's clock on from one due time to the next.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from . import dialects, migrate
from .client import Database, connect
from .timetravel import Clock, forget

ENV = "PYQUEUE_TEST_DSN"
PREFIX_ENV = "PYQUEUE_TEST_DATABASE_PREFIX"
PREFIX_INI = "pyqueue_database_prefix"
DEFAULT_PREFIX = "pyqueue_test_"
LOCAL_POSTGRESQL = "postgresql://postgres@127.0.0.1:5432/postgres"
# The table that stays as migrations wrote it (the schema's revision); every other one is emptied.
KEPT_TABLE = "pyqueue_alembic_version"


class _Server:
    """Where test databases are made: a server DSN whose user may create and drop databases."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.dialect = dialects.for_dsn(admin_dsn)

    def dsn(self, name: str) -> str:
        return urlunsplit(urlsplit(self.admin_dsn)._replace(path="/" + name))

    def _execute(self, template: str, name: str) -> None:
        d = self.dialect
        conn = d.connect(self.admin_dsn)
        try:
            cur = conn.cursor()
            try:
                cur.execute(d.admin.compose(template, name=d.admin.identifier(name)))
            finally:
                cur.close()
        finally:
            conn.close()

    def create(self, name: str) -> str:
        self._execute(self.dialect.create_database_statement, name)
        url = self.dsn(name)
        migrate.upgrade(url)
        return url

    def drop(self, name: str) -> None:
        self._execute(self.dialect.drop_database_statement, name)


def database_prefix(config: Any) -> str:
    """The prefix of the test databases' names (see the module docstring)."""
    prefix = (
        os.environ.get(PREFIX_ENV)
        or (config.getini(PREFIX_INI) if config is not None else "")
        or DEFAULT_PREFIX
    )
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,39}", prefix):
        raise pytest.UsageError(
            f"the test databases' prefix must be letters, digits and _ (at most 40, not starting with a "
            f"digit), not {prefix!r}"
        )
    return prefix


class _SessionDatabase:
    """One migrated database for a test session, emptied before each test (reset)."""

    def __init__(self, server: _Server, prefix: str) -> None:
        self.server = server
        self.prefix = prefix
        self.name = ""
        self.url = ""
        self._conn: Any = None
        self._statements: list[str] = []
        self._fingerprint: Any = None
        self._fresh = False
        self._make()

    def _make(self) -> None:
        self.name = f"{self.prefix}{uuid.uuid4().hex[:12]}"
        self.url = self.server.create(self.name)
        self._conn = self.server.dialect.connect(self.url)
        self._statements = self._reset_statements()
        self._fingerprint = self._read_fingerprint()
        self._fresh = True

    def _reset_statements(self) -> list[str]:
        """The statements that empty the database: every table but the schema's revision
        (Admin.empty_database_statements)."""
        return self.server.dialect.admin.empty_database_statements(self._conn, KEPT_TABLE)

    def _read_fingerprint(self) -> Any:
        """What a test could change in the database besides rows: its relations, routines and
        grants (Admin.database_fingerprint). Read before each test; a change gets the next test
        a new database."""
        return self.server.dialect.admin.database_fingerprint(self._conn)

    def _close_other_sessions(self) -> None:
        """Ends the connections an earlier test left open to the database (a worker not stopped,
        a connection not closed), as dropping its database did: their locks go with them."""
        self.server.dialect.admin.close_other_sessions(self._conn)

    def reset(self) -> str:
        """The database, empty: its DSN."""
        if self._fresh:
            self._fresh = False
            return self.url
        self._close_other_sessions()
        forget(self.server.dialect.name, self.name)  # the test clock starts over with the database
        if self._read_fingerprint() != self._fingerprint:
            self.drop()
            self._make()
            self._fresh = False
            return self.url
        cur = self._conn.cursor()
        try:
            for statement in self._statements:
                cur.execute(statement)
                while cur.nextset():
                    pass
        finally:
            cur.close()
        self.server.dialect.admin.after_emptying_database(self._conn)
        return self.url

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()
        with contextlib.suppress(Exception):
            self.server.drop(self.name)


def _local_postgresql_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1.0):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def pyqueue_server() -> Iterator[_Server]:
    """The server test databases are made on (see the module docstring)."""
    given = os.environ.get(ENV)
    if given:
        yield _Server(given)
        return
    if _local_postgresql_answers():
        yield _Server(LOCAL_POSTGRESQL)
        return
    from .embedded import embedded_postgres_dsn

    with embedded_postgres_dsn() as dsn:
        yield _Server(dsn)


@pytest.fixture(scope="session")
def pyqueue_session_database(pyqueue_server: _Server, pytestconfig: Any) -> Iterator[_SessionDatabase]:
    """The test session's database (see the module docstring), dropped at the session's end."""
    database = _SessionDatabase(pyqueue_server, database_prefix(pytestconfig))
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture
def pyqueue_dsn(pyqueue_session_database: _SessionDatabase) -> str:
    """An empty database with the schema installed: the session's, emptied for this test."""
    return pyqueue_session_database.reset()


@pytest.fixture
def pyqueue_db(pyqueue_dsn: str) -> Iterator[Database]:
    """A Database on pyqueue_dsn's database, closed after the test."""
    db = connect(pyqueue_dsn)
    try:
        yield db
    finally:
        db.close()


@pytest.fixture
def pyqueue_clock(pyqueue_dsn: str) -> Iterator[Clock]:
    """The test database's clock (pyqueue_sql.timetravel.Clock): ``pyqueue_clock.advance(
    timedelta(minutes=5))`` moves every stored time 5 minutes into the past, so a retry, a snooze,
    a delay, an expiry or a periodic occurrence comes due without a real wait; then
    ``app.run_pending()`` runs it (or ``app.run_pending(advance=...)`` alone)."""
    db = connect(pyqueue_dsn)
    try:
        yield Clock(db)
    finally:
        db.close()


def pytest_addoption(parser: Any) -> None:
    parser.addini(
        PREFIX_INI,
        "the prefix of the names of the databases pyqueue-sql's fixtures make (default pyqueue_test_)",
        default="",
    )


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "pyqueue: a test of a pyqueue-sql application (the plugin's fixtures: pyqueue_dsn, pyqueue_db)",
    )
