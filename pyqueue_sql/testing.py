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

* ``pyqueue_dsn``: the DSN of a new, empty database with the schema installed (migrated to the
  head revision), dropped after the test. The server: the DSN in ``PYQUEUE_TEST_DSN`` (a
  postgresql:// or mysql:// DSN whose user may create databases: PostgreSQL, MySQL or MariaDB),
  else PostgreSQL on 127.0.0.1:5432 as user postgres, else an embedded PostgreSQL (the
  ``embedded`` extra, as `make demo` uses), started once per test session.
* ``pyqueue_db``: a pyqueue_sql.Database on it, closed after the test.

No fake queue: the jobs go through the real routines, as in production. App.run_pending() (and
``await app.run_pending_async()``) runs the ready jobs in the test's process and reports what
became of each.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from . import dialects, migrate
from .client import Database, connect

ENV = "PYQUEUE_TEST_DSN"
LOCAL_POSTGRESQL = "postgresql://postgres@127.0.0.1:5432/postgres"


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
                cur.execute(d.compose(template, name=d.identifier(name)))
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


@pytest.fixture
def pyqueue_dsn(pyqueue_server: _Server) -> Iterator[str]:
    """A new database with the schema installed, dropped after the test."""
    name = f"pyqueue_test_{uuid.uuid4().hex[:12]}"
    url = pyqueue_server.create(name)
    try:
        yield url
    finally:
        with contextlib.suppress(Exception):
            pyqueue_server.drop(name)


@pytest.fixture
def pyqueue_db(pyqueue_dsn: str) -> Iterator[Database]:
    """A Database on pyqueue_dsn's database, closed after the test."""
    db = connect(pyqueue_dsn)
    try:
        yield db
    finally:
        db.close()


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "pyqueue: a test of a pyqueue-sql application (the plugin's fixtures: pyqueue_dsn, pyqueue_db)",
    )
