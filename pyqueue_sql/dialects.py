"""Everything that differs between PostgreSQL and MySQL/MariaDB, in one place.

A dialect knows how to open a connection from a DSN, how to run one of its
named statements (pyqueue_sql.queries) and read the rows back, how to convert
Python values to what its routines take (durations, times, payloads,
batches), and how to turn a routine's refusal into a pyqueue_sql exception.
Capabilities are attributes (``supports_listen``), not scattered ``if``s.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any
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
    raise errors.InvalidArgumentError(
        f"{what} must be a timedelta or a number of seconds, not {type(value).__name__}"
    )


def _as_utc(value: dt.datetime | dt.timedelta | None, what: str) -> dt.datetime | None:
    """run_at as an aware UTC datetime; a timedelta means that long from now."""
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        return dt.datetime.now(UTC) + value
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise errors.InvalidArgumentError(
                f"{what} must be timezone-aware (a naive datetime is ambiguous)"
            )
        return value.astimezone(UTC)
    raise errors.InvalidArgumentError(f"{what} must be a datetime or a timedelta, not {type(value).__name__}")


def text_value(value: Any, what: str) -> str | None:
    """A name argument (queue, kind, worker...) as it is; None is passed on for the routine to refuse.
    Anything but a str is refused here, the same on both dialects (PostgreSQL would not find the
    routine for such a type, MySQL would convert it silently)."""
    if value is None or isinstance(value, str):
        return value
    raise errors.InvalidArgumentError(f"{what} must be a str, not {type(value).__name__} ({value!r:.40})")


def key_value(value: Any, what: str = "key") -> str | None:
    """A message key: a str, or an int as its decimal text (17 -> '17'); a bool is refused (True is
    not the key 1). None is passed on for the routine to refuse."""
    if isinstance(value, bool):
        raise errors.InvalidArgumentError(f"{what} must be a str or an int, not a bool")
    if isinstance(value, int):
        return str(value)
    if value is None or isinstance(value, str):
        return value
    raise errors.InvalidArgumentError(
        f"{what} must be a str or an int, not {type(value).__name__} ({value!r:.40})"
    )


def token_value(value: Any, what: str = "token") -> str | None:
    """A reservation token as text (a uuid.UUID is accepted as its text); None is passed on."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    raise errors.InvalidArgumentError(f"{what} must be a str, not {type(value).__name__}")


def read_token(value: Any) -> str | None:
    """A token as the routines return it (PostgreSQL uuid, MySQL CHAR(36)), as a str."""
    return None if value is None else str(value)


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

    def read_duration(self, value: Any) -> dt.timedelta | None:
        """A duration a routine returns (PostgreSQL interval, MySQL decimal seconds)."""
        if value is None or isinstance(value, dt.timedelta):
            return value
        if isinstance(value, Decimal):  # exact to the microsecond, as MySQL's DECIMAL(20,6) holds it
            return dt.timedelta(microseconds=int(value.scaleb(6).to_integral_value()))
        return dt.timedelta(seconds=float(value))

    def kinds(self, kinds: Sequence[str] | None) -> Any:
        if kinds is None:
            return None
        if isinstance(kinds, (str, bytes)):
            raise errors.InvalidArgumentError("kinds must be a list of kinds, not a single str")
        return [text_value(k, "each kind") for k in kinds]

    def batch(self, items: Sequence[tuple[str, str, Any, Any, Any]]) -> dict[str, Any]:
        raise NotImplementedError

    # -- connection loss -------------------------------------------------
    def connection_errors(self) -> tuple[type[BaseException], ...]:
        """Driver errors after which a worker reconnects and retries (lost or broken connection)."""
        raise NotImplementedError

    def listen(self, connection: Any, channels: Sequence[str]) -> None:
        raise errors.QueueError(f"{self.name} has no LISTEN")

    def is_deadlock(self, exc: BaseException) -> bool:
        """Whether the server rolled the transaction back to keep it serializable or to break a
        deadlock (errors.SerializationError; run the whole transaction again)."""
        return isinstance(exc, errors.SerializationError) or self.serialization_error(exc) is not None

    def serialization_error(self, exc: BaseException) -> errors.SerializationError | None:
        """The SerializationError a driver error stands for, or None."""
        return None

    def end_transaction(self, connection: Any, commit: bool) -> None:
        """Commits (or rolls back); a serialization failure at COMMIT is raised as SerializationError."""
        try:
            self.commit(connection) if commit else self.rollback(connection)
        except Exception as exc:
            mapped = self.serialization_error(exc)
            if mapped is not None:
                with contextlib.suppress(Exception):  # a lost connection has nothing to roll back
                    self.rollback(connection)
                raise mapped from exc
            raise


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
        except (pgerrors.SerializationFailure, pgerrors.DeadlockDetected) as exc:
            raise self.serialization_error(exc) from exc
        except pgerrors.UndefinedFunction as exc:
            mapped = self._undefined_function(connection, name, exc)
            if mapped is not None:
                raise mapped from exc
            raise
        except pgerrors.UndefinedTable as exc:
            if "queue_" in str(exc) or "pyqueue" in str(exc):
                raise errors.SchemaNotInstalledError(
                    f"pyqueue-sql is not installed in this database (run `pyqueue-sql migrate`), or it is "
                    f"installed in a schema this role has no USAGE on or that is not on its search_path "
                    f"(`pyqueue-sql grant` grants USAGE): {exc.diag.message_primary}"
                ) from exc
            raise
        except pgerrors.InsufficientPrivilege as exc:  # a role without the capability
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
                    f"{exc.diag.message_primary}: {exc.diag.message_detail or ''}".rstrip(": ")
                ) from exc
            if isinstance(exc, pgerrors.DataError):  # a value that does not fit its parameter's type
                raise errors.InvalidArgumentError(str(exc.diag.message_primary)) from exc
            raise

    def serialization_error(self, exc: BaseException) -> errors.SerializationError | None:
        if getattr(exc, "sqlstate", None) in ("40001", "40P01"):
            diag = getattr(exc, "diag", None)
            what = "deadlock" if exc.sqlstate == "40P01" else "serialization failure"
            return errors.SerializationError(
                f"{what} ({exc.sqlstate}): the server rolled the transaction back, nothing of it was kept; "
                f"run the whole transaction again: {diag.message_primary if diag is not None else exc}"
            )
        return None

    def _undefined_function(self, connection: Any, name: str, exc: Any) -> errors.QueueError | None:
        """42883 for one of our routines: SchemaNotInstalledError only when no routine of that name is
        visible at all; a routine that exists but takes other argument types is an InvalidArgumentError
        that names the types the server saw."""
        message = exc.diag.message_primary or str(exc)
        match = _PG_NO_FUNCTION.match(message)
        if match is None:
            return self._not_installed(message) if ("queue_" in message or "pyqueue" in message) else None
        routine, types = match.group(1).rsplit(".", 1)[-1].strip('"'), match.group(2)
        if not routine.startswith(("queue_", "pyqueue")):
            return None
        exists = _pg_routine_exists(connection, routine)
        if exists is None:  # the transaction is aborted: judge by the types the server saw
            exists = _pg_wrong_types(self.statement(name), types)
        if not exists:
            return self._not_installed(message)
        return errors.InvalidArgumentError(
            f"no {routine} takes arguments of the types ({types}): pass str for names, keys and kinds "
            f"(a key may be an int), numbers for numbers; or the installed schema is of another release "
            f"than this client (run `pyqueue-sql migrate`)"
        )

    @staticmethod
    def _not_installed(message: str) -> errors.SchemaNotInstalledError:
        return errors.SchemaNotInstalledError(
            f"pyqueue-sql is not installed in this database (run `pyqueue-sql migrate`), or it is "
            f"installed in a schema this role has no USAGE on or that is not on its search_path "
            f"(`pyqueue-sql grant` grants USAGE): {message}"
        )

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
    # reserve and extend claim rows (and limit slots) one statement at a time: in
    # autocommit mode a deadlock after the first claim would leave the claimed
    # messages held, unreturned, until their timeout; in a transaction of their
    # own the server rolls the whole call back, and the client runs it again.
    own_transaction_statements = frozenset(
        {
            "commit",
            "rollback",
            "fail",
            "move",
            "pop",
            "commit_reserve",
            "commit_batch",
            "redrive",
            "reserve",
            "extend",
        }
    )

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
            serialization = self.serialization_error(exc)
            if serialization is not None:
                raise serialization from exc
            mapped = _map_routine_error(message)
            if mapped is not None:
                raise mapped from exc
            if code in (
                1264,
                1265,
                1292,
                1366,
            ):  # out of range / truncated / bad datetime / bad value for the parameter
                raise errors.InvalidArgumentError(message) from exc
            if code in _MYSQL_ACCESS_DENIED:  # an account without the capability
                raise errors.PermissionDeniedError(message) from exc
            if code == 1318:  # the procedure exists with another number of arguments
                raise errors.InvalidArgumentError(
                    f"{message}: the installed schema is of another release than this client "
                    f"(run `pyqueue-sql migrate`)"
                ) from exc
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

    def serialization_error(self, exc: BaseException) -> errors.SerializationError | None:
        import pymysql

        # Only a deadlock rolls the whole transaction back. A lock wait timeout (1205) rolls
        # back just the statement (innodb_rollback_on_timeout is off by default) and leaves
        # the transaction open, so it is not this error: running it all again could write twice.
        if isinstance(exc, pymysql.MySQLError) and exc.args and exc.args[0] == 1213:
            return errors.SerializationError(
                f"deadlock ({exc.args[0]}): the server rolled the statement's transaction back; "
                f"run the whole transaction again: {exc.args[1] if len(exc.args) > 1 else exc}"
            )
        return None

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
        checked = super().kinds(kinds)
        return None if checked is None else json.dumps(checked, ensure_ascii=False)

    def batch(self, items: Sequence[tuple[str, str, Any, Any, Any]]) -> dict[str, Any]:
        messages = []
        for key, kind, payload, run_at, priority in items:
            json.loads(encode_json(payload))  # refuse what is not JSON before sending
            messages.append(
                {
                    "p_key": key,
                    "p_kind": kind,
                    "payload": payload,
                    "run_at": None if run_at is None else run_at.strftime("%Y-%m-%d %H:%M:%S.%f"),
                    "priority": priority,
                }
            )
        return {"messages": encode_json(messages)}


_PG_NO_FUNCTION = re.compile(r"function ([\w.\"]+)\((.*)\) does not exist", re.DOTALL)
_PG_ARGUMENT = re.compile(r"%\((\w+)\)s(::[\w\[\] ]+)?")
# Whether a routine of that name is visible on the search_path (one round trip, autocommit only).
_PG_ROUTINE_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc"
    " WHERE proname = %s AND pg_catalog.pg_function_is_visible(oid))"
)


def _pg_routine_exists(connection: Any, routine: str) -> bool | None:
    """True/False from the catalog; None when the connection is inside a transaction (an aborted one
    cannot be asked anything, and a caller's open one is not ours to touch)."""
    from psycopg.pq import TransactionStatus

    if connection.info.transaction_status != TransactionStatus.IDLE:
        return None
    try:
        with connection.cursor() as cur:
            cur.execute(_PG_ROUTINE_EXISTS, (routine,))
            return bool(cur.fetchone()[0])
    except Exception:  # noqa: BLE001 - the original error is the one to report
        return None


def _pg_wrong_types(statement: str, types: str) -> bool:
    """Without the catalog: whether the server saw a type other than text for an argument that the
    named statement passes uncast (names, keys, kinds: sent as text, shown as `unknown` or `text`).
    True means the routine is there but was given a wrong type."""
    args = statement[statement.index("(") + 1 : statement.rindex(")")] if "(" in statement else ""
    seen = [t.strip() for t in types.split(",")] if types.strip() else []
    placeholders = _PG_ARGUMENT.findall(args)
    if len(seen) != len(placeholders):
        return False
    return any(cast == "" and t not in ("unknown", "text") for (_, cast), t in zip(placeholders, seen))


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
