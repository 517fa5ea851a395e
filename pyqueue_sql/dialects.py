"""Everything that differs between PostgreSQL and MySQL/MariaDB, in one place.

A dialect knows how to open a connection from a DSN, how to run one of its
named statements (pyqueue_sql.queries) and read the rows back, how to convert
Python values to what its routines take (durations, times, payloads,
batches), and how to turn a routine's refusal into a pyqueue_sql exception.
Capabilities are attributes (``supports_listen``), not scattered ``if``s.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import Decimal
from typing import Any, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit

from . import errors
from .queries import queries

UTC = dt.timezone.utc
_ROUTINE_ERROR = re.compile(r"pyqueue:(\w+):\s*(.*)", re.DOTALL)

Duration = dt.timedelta | int | float | Decimal | None


def _map_routine_error(message: str | None) -> errors.QueueError | None:
    match = _ROUTINE_ERROR.search(message or "")
    if not match:
        return None
    cls = errors.ERROR_CODES.get(match.group(1), errors.QueueError)
    return cls(match.group(2).strip())


def _as_timedelta(value: Duration, what: str) -> dt.timedelta | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise errors.InvalidArgumentError(f"{what} must be a timedelta or a number of seconds, not a bool")
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, (int, float, Decimal)):
        return dt.timedelta(seconds=float(value))
    raise errors.InvalidArgumentError(f"{what} must be a timedelta or a number of seconds, not {type(value).__name__}")


def _as_utc(value: dt.datetime | dt.timedelta | None, what: str) -> dt.datetime | None:
    """run_at as an aware UTC datetime; a timedelta means that long from now."""
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        return dt.datetime.now(UTC) + value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise errors.InvalidArgumentError(f"{what} must be timezone-aware (a naive datetime is ambiguous)")
        return value.astimezone(UTC)
    raise errors.InvalidArgumentError(f"{what} must be a datetime or a timedelta, not {type(value).__name__}")


def whole_number(value: Any, what: str) -> int | None:
    """An int argument as it is (None = the routine's default); refuses 2.5,
    "3" and True instead of letting a cast round or convert them."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise errors.InvalidArgumentError(f"{what} must be a whole number, not {value!r}")


def encode_json(payload: Any) -> str:
    try:
        return json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise errors.InvalidPayloadError(f"payload is not JSON-serialisable: {exc}") from exc


class Dialect:
    """Base class: the shared conversions. Subclasses fill in the differences."""

    name: str
    supports_listen: bool = False
    sqlalchemy_dialect: str
    # Named statements that must run in a transaction of their own when the
    # caller has none (see Database.call).
    own_transaction_statements: frozenset[str] = frozenset()

    # -- connections -----------------------------------------------------
    def connect(self, dsn: str, autocommit: bool = True) -> Any:
        """A DB-API connection; autocommit unless asked otherwise (SQLAlchemy wants it off)."""
        raise NotImplementedError

    def owns(self, connection: Any) -> bool:
        """Whether a DB-API connection object belongs to this dialect's driver."""
        raise NotImplementedError

    def begin(self, connection: Any) -> None:
        raise NotImplementedError

    def commit(self, connection: Any) -> None:
        connection.commit()

    def rollback(self, connection: Any) -> None:
        connection.rollback()

    # -- statements ------------------------------------------------------
    def run(self, connection: Any, name: str, params: dict[str, Any]) -> list[tuple]:
        """Runs a named statement and returns all rows of its (single) result set."""
        raise NotImplementedError

    def run_sets(self, connection: Any, name: str, params: dict[str, Any]) -> list[list[tuple]]:
        """Every result set of a named statement (PostgreSQL routines send one)."""
        return [self.run(connection, name, params)]

    def statement(self, name: str) -> str:
        return queries(self.name)[name]

    # -- values ----------------------------------------------------------
    def duration(self, value: Duration, what: str) -> Any:
        return _as_timedelta(value, what)

    def time(self, value: dt.datetime | dt.timedelta | None, what: str) -> Any:
        return _as_utc(value, what)

    def read_time(self, value: Any) -> dt.datetime | None:
        return value

    def read_payload(self, value: Any) -> Any:
        return value

    def kinds(self, kinds: Sequence[str] | None) -> Any:
        return None if kinds is None else list(kinds)

    def batch(self, items: Sequence[tuple[str, str, Any, Any, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    # -- connection loss (issue 3) ---------------------------------------
    def connection_errors(self) -> tuple[type[BaseException], ...]:
        """Driver errors after which a worker reconnects and retries (lost or broken connection)."""
        raise NotImplementedError

    def listen(self, connection: Any, channels: Sequence[str]) -> None:
        raise errors.QueueError(f"{self.name} has no LISTEN")

    def is_deadlock(self, exc: BaseException) -> bool:
        """Whether the server rolled the transaction back to break a deadlock (safe to run again)."""
        return False


class PostgreSQL(Dialect):
    name = "postgresql"
    supports_listen = True
    sqlalchemy_dialect = "postgresql+psycopg"

    def connect(self, dsn: str, autocommit: bool = True) -> Any:
        import psycopg

        return psycopg.connect(_strip_driver(dsn), autocommit=autocommit)

    def owns(self, connection: Any) -> bool:
        return type(connection).__module__.startswith("psycopg")

    def begin(self, connection: Any) -> None:
        # psycopg starts a transaction with the first statement once autocommit is off.
        connection.autocommit = False

    def commit(self, connection: Any) -> None:
        connection.commit()
        connection.autocommit = True

    def rollback(self, connection: Any) -> None:
        connection.rollback()
        connection.autocommit = True

    def run(self, connection: Any, name: str, params: dict[str, Any]) -> list[tuple]:
        import psycopg
        from psycopg import errors as pgerrors

        try:
            with connection.cursor() as cur:
                cur.execute(self.statement(name), params)
                return cur.fetchall() if cur.description else []
        except (pgerrors.UndefinedFunction, pgerrors.UndefinedTable) as exc:
            if "queue_" in str(exc) or "pyqueue" in str(exc):
                raise errors.SchemaNotInstalledError(
                    f"pyqueue-sql is not installed in this database (run `pyqueue-sql migrate`), or it is "
                    f"installed in a schema this role has no USAGE on or that is not on its search_path "
                    f"(`pyqueue-sql grant` grants USAGE): {exc.diag.message_primary}"
                ) from exc
            raise
        except pgerrors.InsufficientPrivilege as exc:  # issue 7: a role without the capability
            raise errors.PermissionDeniedError(str(exc.diag.message_primary)) from exc
        except psycopg.Error as exc:
            mapped = _map_routine_error(exc.diag.message_primary)
            if mapped is not None:
                raise mapped from exc
            if isinstance(exc, pgerrors.InvalidTextRepresentation) and "json" in str(exc):
                raise errors.InvalidPayloadError(str(exc.diag.message_primary)) from exc
            if isinstance(exc, pgerrors.UntranslatableCharacter) and "JSON" in (exc.diag.context or ""):
                # jsonb cannot hold the escape \u0000 (a NUL in a JSON string)
                raise errors.InvalidPayloadError(
                    f"{exc.diag.message_primary}: {exc.diag.message_detail or ''}".rstrip(": ")) from exc
            if isinstance(exc, pgerrors.DataError):  # a value that does not fit its parameter's type
                raise errors.InvalidArgumentError(str(exc.diag.message_primary)) from exc
            raise

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.OperationalError, psycopg.InterfaceError)

    def listen(self, connection: Any, channels: Sequence[str]) -> None:
        """LISTENs on each channel (names from queue_channel); autocommit connections only."""
        from psycopg import sql

        with connection.cursor() as cur:
            for channel in channels:
                cur.execute(sql.SQL(self.statement("listen")).format(channel=sql.Identifier(channel)))

    def batch(self, items: Sequence[tuple[str, str, Any, Any, Any]]) -> dict[str, Any]:
        run_ats = [ra for _, _, _, ra, _ in items]
        priorities = [pr for _, _, _, _, pr in items]
        return {
            "keys": [k for k, _, _, _, _ in items],
            "kinds": [kd for _, kd, _, _, _ in items],
            "payloads": [encode_json(p) for _, _, p, _, _ in items],
            "run_ats": None if all(r is None for r in run_ats) else run_ats,
            "priorities": None if all(p is None for p in priorities) else priorities,
        }


# Access denied for: the database (1044), a privilege (1227), a table (1142), a column (1143),
# a routine (1370).
_MYSQL_ACCESS_DENIED = (1044, 1142, 1143, 1227, 1370)


class MySQL(Dialect):
    name = "mysql"
    supports_listen = False
    sqlalchemy_dialect = "mysql+pymysql"
    # In autocommit mode each statement of a procedure commits on its own, and
    # these write the history row, then remove the message: a session killed
    # or a server stopped between the two would leave a `committed` (or
    # `dead_lettered`, `moved`) row for a message that is still live, and the
    # retry of the same call would archive it a second time. The same holds for
    # the other calls that archive or remove (pop, the commit fast paths,
    # redrive); a batch call in one transaction also commits once, not per row.
    own_transaction_statements = frozenset({"commit", "rollback", "move", "pop", "commit_reserve",
                                            "commit_batch", "redrive"})

    def connect(self, dsn: str, autocommit: bool = True) -> Any:
        import pymysql

        return pymysql.connect(**{**mysql_connect_args(dsn), "autocommit": autocommit})

    def owns(self, connection: Any) -> bool:
        return type(connection).__module__.startswith("pymysql")

    def begin(self, connection: Any) -> None:
        connection.begin()

    def run(self, connection: Any, name: str, params: dict[str, Any]) -> list[tuple]:
        return self.run_sets(connection, name, params)[0]

    def run_sets(self, connection: Any, name: str, params: dict[str, Any]) -> list[list[tuple]]:
        """Runs a named CALL and returns the rows of each result set it sends (at least one list)."""
        import pymysql

        cur = connection.cursor()
        try:
            cur.execute(self.statement(name), params)
            sets = [list(cur.fetchall()) if cur.description else []]
            while cur.nextset():  # a CALL ends with a status result without rows
                if cur.description:
                    sets.append(list(cur.fetchall()))
            return sets
        except pymysql.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            message = exc.args[1] if len(exc.args) > 1 else str(exc)
            mapped = _map_routine_error(message)
            if mapped is not None:
                raise mapped from exc
            if code in (1264, 1265, 1292, 1366):  # out of range / truncated / bad datetime / bad value for the parameter
                raise errors.InvalidArgumentError(message) from exc
            if code in _MYSQL_ACCESS_DENIED:  # issue 7: an account without the capability
                raise errors.PermissionDeniedError(message) from exc
            if code in (1305, 1146):  # procedure / table does not exist
                raise errors.SchemaNotInstalledError(
                    f"pyqueue-sql is not installed in this database (run `pyqueue-sql migrate`): {message}"
                ) from exc
            raise
        finally:
            cur.close()

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        import pymysql

        return (pymysql.err.OperationalError, pymysql.err.InterfaceError)

    def is_deadlock(self, exc: BaseException) -> bool:
        import pymysql

        return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] == 1213

    def duration(self, value: Duration, what: str) -> Any:
        delta = _as_timedelta(value, what)
        return None if delta is None else Decimal(str(round(delta.total_seconds(), 6)))

    def time(self, value: dt.datetime | dt.timedelta | None, what: str) -> Any:
        aware = _as_utc(value, what)
        return None if aware is None else aware.replace(tzinfo=None)

    def read_time(self, value: Any) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)

    def read_payload(self, value: Any) -> Any:
        if isinstance(value, (bytes, bytearray)):
            value = value.decode("utf-8")
        return json.loads(value) if isinstance(value, str) else value

    def kinds(self, kinds: Sequence[str] | None) -> Any:
        return None if kinds is None else json.dumps(list(kinds), ensure_ascii=False)

    def batch(self, items: Sequence[tuple[str, str, Any, Any, Any]]) -> dict[str, Any]:
        messages = []
        for key, kind, payload, run_at, priority in items:
            json.loads(encode_json(payload))  # refuse what is not JSON before sending
            messages.append({
                "p_key": key,
                "p_kind": kind,
                "payload": payload,
                "run_at": None if run_at is None else run_at.strftime("%Y-%m-%d %H:%M:%S.%f"),
                "priority": priority,
            })
        return {"messages": encode_json(messages)}


def _strip_driver(dsn: str) -> str:
    scheme, sep, rest = dsn.partition("://")
    return scheme.split("+", 1)[0] + sep + rest


def mysql_connect_args(dsn: str) -> dict[str, Any]:
    """PyMySQL keyword arguments from mysql://user:password@host:port/database?option=value."""
    parts = urlsplit(_strip_driver(dsn))
    args: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username) if parts.username else "root",
        "password": unquote(parts.password) if parts.password else "",
        "database": unquote(parts.path.lstrip("/")) or None,
        "charset": "utf8mb4",
        "autocommit": True,
    }
    for key, value in parse_qsl(parts.query):
        if key in ("unix_socket", "charset", "ssl_ca", "ssl_cert", "ssl_key"):
            args[key] = value
        elif key in ("connect_timeout", "read_timeout", "write_timeout"):
            args[key] = int(value)
        else:
            raise errors.UnsupportedDsnError(f"unsupported MySQL DSN option {key!r}")
    return args


_SCHEMES = {
    "postgresql": PostgreSQL,
    "postgres": PostgreSQL,
    "mysql": MySQL,
    "mariadb": MySQL,
}


def for_dsn(dsn: str) -> Dialect:
    """The dialect a DSN names: postgresql:// or mysql:// (mariadb:// too; +driver suffixes are ignored)."""
    scheme = dsn.partition("://")[0].split("+", 1)[0].lower() if "://" in dsn else ""
    try:
        return _SCHEMES[scheme]()
    except KeyError:
        raise errors.UnsupportedDsnError(
            f"cannot tell the database from DSN scheme {scheme!r}: use postgresql://... or mysql://..."
        ) from None


def for_name(name: str) -> Dialect:
    try:
        return _SCHEMES[name.lower()]()
    except KeyError:
        raise errors.UnsupportedDsnError(f"unknown dialect {name!r}: use postgresql or mysql") from None


def for_connection(connection: Any) -> Dialect:
    for dialect in (PostgreSQL(), MySQL()):
        if dialect.owns(connection):
            return dialect
    raise errors.UnsupportedDsnError(
        f"unsupported connection type {type(connection).__module__}.{type(connection).__name__}: "
        "pass a psycopg 3 or PyMySQL connection"
    )
