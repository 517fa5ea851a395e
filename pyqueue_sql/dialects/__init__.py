"""Everything that differs between PostgreSQL and MySQL/MariaDB, in one place.

    from pyqueue_sql import dialects
    d = dialects.for_dsn("mysql://root@127.0.0.1/app")   # or for_name("postgresql"), for_connection(conn)
    d.supports_listen, d.transactional_ddl, d.run(conn, statements.PUSH, {...}) ...
    d.codec.duration(30, "timeout"), d.listener.listen(conn, [...]), d.admin.grantee("app", None) ...

``base`` holds the interface of each part and what both dialects share (value encoders, the
routine-error mapping): the Dialect itself is the driver (connections, statements, transactions,
errors), its ``codec`` converts values, its ``listener`` waits for wakeups and its ``admin``
serves grants, migrate and test databases. ``postgresql`` and ``mysql`` fill in the differences.
Callers use the dialect's attributes and methods, never its name.
"""

from __future__ import annotations

from .. import errors
from .base import (
    UTC,
    Admin,
    AsyncConnection,
    Codec,
    Composed,
    Connection,
    Cursor,
    Dialect,
    Duration,
    JdbcDriver,
    JSONValue,
    Listener,
    Params,
    Row,
    RowValue,
    as_timedelta,
    as_utc,
    connection_open,
    encode_json,
    key_value,
    lost_connection,
    read_token,
    routine_error,
    strip_driver,
    text_value,
    token_value,
    whole_number,
)
from .jsontext import UnreadableJSON, dump_json_text, load_json
from .mysql import MySQL, mysql_connect_args
from .postgresql import PostgreSQL

__all__ = [
    "DIALECTS",
    "SCHEMES",
    "UTC",
    "Admin",
    "AsyncConnection",
    "Codec",
    "Composed",
    "Connection",
    "Cursor",
    "Dialect",
    "Duration",
    "JdbcDriver",
    "JSONValue",
    "Listener",
    "UnreadableJSON",
    "Params",
    "Row",
    "RowValue",
    "NAMES",
    "MySQL",
    "PostgreSQL",
    "as_dialect",
    "as_timedelta",
    "as_utc",
    "connection_open",
    "dump_json_text",
    "encode_json",
    "for_connection",
    "for_dsn",
    "for_name",
    "for_scheme",
    "key_value",
    "load_json",
    "lost_connection",
    "mysql_connect_args",
    "read_token",
    "routine_error",
    "strip_driver",
    "text_value",
    "token_value",
    "whole_number",
]

# Every dialect, in the order they are listed in messages.
DIALECTS: tuple[type[Dialect], ...] = (PostgreSQL, MySQL)
# Their names, the dialect directories under sql/ (a --dialect choice).
NAMES: tuple[str, ...] = tuple(d.name for d in DIALECTS)

# DSN (and JDBC URL) schemes, +driver suffixes aside, and the names SQLAlchemy gives the dialects.
SCHEMES: dict[str, type[Dialect]] = {
    "postgresql": PostgreSQL,
    "postgres": PostgreSQL,
    "mysql": MySQL,
    "mariadb": MySQL,
}


def for_scheme(scheme: str) -> Dialect:
    """The dialect of a URL scheme (postgresql, postgres, mysql, mariadb; a +driver suffix is ignored)."""
    key = scheme.split("+", 1)[0].lower()
    try:
        return SCHEMES[key]()
    except KeyError:
        raise errors.UnsupportedDsnError(
            f"cannot tell the database from DSN scheme {key!r}: use postgresql://... or mysql://..."
        ) from None


def for_dsn(dsn: str) -> Dialect:
    """The dialect a DSN names: postgresql:// or mysql:// (mariadb:// too; +driver suffixes are ignored)."""
    if not isinstance(dsn, str):
        raise errors.UnsupportedDsnError(
            f"a DSN is a string such as postgresql://... or mysql://..., not a {type(dsn).__name__}"
        )
    return for_scheme(dsn.partition("://")[0] if "://" in dsn else "")


def for_name(name: str) -> Dialect:
    """The dialect of a name: postgresql or mysql (postgres and mariadb too; SQLAlchemy's names)."""
    try:
        return SCHEMES[name.lower()]()
    except KeyError:
        raise errors.UnsupportedDsnError(f"unknown dialect {name!r}: use postgresql or mysql") from None


def as_dialect(dialect: str | Dialect) -> Dialect:
    """A Dialect as it is, a name as for_name's dialect."""
    return dialect if isinstance(dialect, Dialect) else for_name(dialect)


def for_connection(connection: object, asynchronous: bool = False) -> Dialect:
    """The dialect of a DB-API connection (psycopg 3 or PyMySQL), or with asynchronous of an asyncio
    driver's connection (psycopg 3's AsyncConnection or aiomysql)."""
    for cls in DIALECTS:
        dialect = cls()
        if dialect.owns_async(connection) if asynchronous else dialect.owns(connection):
            return dialect
    expected = "a psycopg 3 AsyncConnection or an aiomysql" if asynchronous else "a psycopg 3 or PyMySQL"
    raise errors.UnsupportedDsnError(
        f"unsupported connection type {type(connection).__module__}.{type(connection).__name__}: "
        f"pass {expected} connection"
    )
