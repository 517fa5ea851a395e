"""The Dialect and its parts (the driver itself, its codec, listener and admin), and what both dialects
share: value encoders and the routine-error mapping.

A dialect is in parts, as River's driver is (Driver, Executor, Listener):

- Dialect, the driver: opens a connection from a DSN, runs one of its named statements
  (pyqueue_sql.queries) and reads the rows back, sync and asyncio, in transactions, and turns a
  driver's error or a routine's refusal into a pyqueue_sql exception;
- Codec (``dialect.codec``): converts Python values to what its routines take (durations, times,
  payloads, batches, arrays) and reads the values they return;
- Listener (``dialect.listener``): waits for a wakeup;
- Admin (``dialect.admin``): renders and checks GRANTs, answers migrate's questions about the
  server, and empties and compares test databases.

Capabilities are attributes (``supports_listen``, ``transactional_ddl``...) and methods of the
dialect, so that callers never ask which database they talk to.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import json
import re
import traceback
import uuid
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from types import ModuleType
from typing import Any, TypeAlias, overload

from .. import errors
from ..queries import queries, split_script
from ..statements import Statement

UTC = dt.timezone.utc

# A routine refuses a call with the message "pyqueue:<code>: <text>" (docs/contract.md); the code
# names the exception (errors.ERROR_CODES).
ROUTINE_ERROR = re.compile(r"pyqueue:(\w+):\s*(.*)", re.DOTALL)

Duration = dt.timedelta | int | float | Decimal | None

# What the drivers hand over, named so that a signature says what it takes. These three are Any: the
# drivers (psycopg 3, PyMySQL, aiomysql) share no typed interface, any of them may be absent, and
# each dialect calls its own driver's methods on them.
Connection: TypeAlias = Any  # a DB-API connection: psycopg 3's Connection, or PyMySQL's
AsyncConnection: TypeAlias = Any  # an asyncio driver's: psycopg 3's AsyncConnection, or aiomysql's
Cursor: TypeAlias = Any  # a cursor of either
# A value in a result row, as the driver decoded it: its type is the column's (int, str, datetime...).
RowValue: TypeAlias = Any
Row: TypeAlias = tuple[RowValue, ...]
# A named statement's parameters (pyqueue_sql.queries), by name, as the driver sends them.
Params: TypeAlias = dict[str, object]
# A batch's item as the dialect encodes it: (key, kind, payload, run_at, priority), run_at as time() gives it.
BatchItem: TypeAlias = tuple[str | None, str | None, object, dt.datetime | None, int | None]
# A statement or a part of one (a quoted name, a keyword) as the dialect composes it: a str, or on
# PostgreSQL a psycopg.sql.Composable (Any: psycopg may be absent).
Composed: TypeAlias = Any
# A decoded JSON value (a payload, headers' values, a result, a progress), what json.loads returns:
# a dict, list, str, int, float, bool or None. Any rather than a recursive union: it is the user's
# own value handed back to them, which their code reads without casts.
JSONValue: TypeAlias = Any


def routine_error(message: str | None) -> errors.QueueError | None:
    """The pyqueue_sql exception for a routine's refusal found in a server message ("pyqueue:<code>:
    <text>": the exception of that code, with <text> as its message), or None for any other message."""
    match = ROUTINE_ERROR.search(message or "")
    if not match:
        return None
    cls = errors.ERROR_CODES.get(match.group(1), errors.QueueError)
    return cls(match.group(2).strip())


def as_timedelta(value: Duration, what: str) -> dt.timedelta | None:
    """A duration argument (timedelta or seconds) as a timedelta; None is passed on."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise errors.InvalidArgumentError(f"{what} must be a timedelta or a number of seconds, not a bool")
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, (int, float, Decimal)):
        try:
            return dt.timedelta(seconds=float(value))
        except (OverflowError, ValueError):  # beyond timedelta's range, or not a number (nan)
            raise errors.InvalidArgumentError(f"{what} is out of range: {value!r:.40}") from None
    raise errors.InvalidArgumentError(
        f"{what} must be a timedelta or a number of seconds, not {type(value).__name__}"
    )


def as_utc(value: dt.datetime | dt.timedelta | None, what: str) -> dt.datetime | None:
    """run_at as an aware UTC datetime; a timedelta means that long from now."""
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        try:
            return dt.datetime.now(UTC) + value
        except OverflowError:  # past the year 9999 or before the year 1
            raise errors.InvalidArgumentError(f"{what} is out of range: now + {value}") from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise errors.InvalidArgumentError(
                f"{what} must be timezone-aware (a naive datetime is ambiguous)"
            )
        return value.astimezone(UTC)
    raise errors.InvalidArgumentError(f"{what} must be a datetime or a timedelta, not {type(value).__name__}")


def text_value(value: object, what: str) -> str | None:
    """A name argument (queue, kind, worker...) as it is; None is passed on for the routine to refuse.
    Anything but a str is refused here, the same on both dialects (PostgreSQL would not find the
    routine for such a type, MySQL would convert it silently)."""
    if value is None or isinstance(value, str):
        return value
    raise errors.InvalidArgumentError(f"{what} must be a str, not {type(value).__name__} ({value!r:.40})")


def key_value(value: object, what: str = "key") -> str | None:
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


def token_value(value: object, what: str = "token") -> str | None:
    """A reservation token as text (a uuid.UUID is accepted as its text); None is passed on."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    raise errors.InvalidArgumentError(f"{what} must be a str, not {type(value).__name__}")


def read_token(value: object) -> str | None:
    """A token as the routines return it (PostgreSQL uuid, MySQL CHAR(36)), as a str."""
    return None if value is None else str(value)


def whole_number(value: object, what: str) -> int | None:
    """An int argument as it is (None = the routine's default); refuses 2.5,
    "3" and True instead of letting a cast round or convert them."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise errors.InvalidArgumentError(f"{what} must be a whole number, not {value!r}")


# One encoder for every payload: json.dumps with arguments builds a new JSONEncoder per call, which
# cost as much as encoding a small payload (half of a 100-message batch's encoding).
_JSON_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def encode_json(payload: object) -> str:
    """A payload as compact JSON text; InvalidPayloadError for what JSON cannot hold (NaN, sets...)."""
    try:
        return _JSON_ENCODER.encode(payload)
    except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise errors.InvalidPayloadError(f"payload is not JSON-serialisable: {exc}") from exc


def connection_open(connection: object) -> bool:
    """Whether a driver connection may still be used: False once its driver knows the connection
    is gone (psycopg and aiomysql: ``closed``; PyMySQL: ``open``)."""
    is_open = getattr(connection, "open", None)  # PyMySQL
    if isinstance(is_open, bool):
        return is_open
    return not getattr(connection, "closed", False)


def lost_connection(dialect: Dialect, connection: object, exc: BaseException) -> bool:
    """Whether exc, raised by a call on connection, says that the connection is gone (the session
    was killed, the server restarted, the network dropped); not a statement's own failure on a
    connection that still works (a lock wait timeout, a cancelled statement)."""
    if not isinstance(exc, dialect.connection_errors()) or isinstance(exc, errors.QueueError):
        return False
    code = exc.args[0] if exc.args else None
    return not connection_open(connection) or code in dialect.lost_connection_codes


def import_driver(module: str, extra: str, what: str) -> ModuleType:
    """The driver module, or errors.DriverNotInstalledError naming the extra that installs it
    when the module itself is missing (an ImportError from inside an installed driver is raised
    as it is: that is another problem)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name != module.split(".", 1)[0] and exc.name != module:
            raise
        raise errors.DriverNotInstalledError(module, extra, what) from None


def strip_driver(dsn: str) -> str:
    """The DSN without a +driver suffix on its scheme (postgresql+psycopg:// -> postgresql://)."""
    scheme, sep, rest = dsn.partition("://")
    return scheme.split("+", 1)[0] + sep + rest


# The ways a password can sit in a DSN: user:password@ (URL) and password=... (a URL's query or a
# libpq key=value string, quoted or not).
_QUERY_PASSWORD = re.compile(r"""(?:^|[?&\s])password\s*=\s*('(?:[^'\\]|\\.)*'|[^&\s]+)""", re.IGNORECASE)


def dsn_secrets(dsn: str) -> list[str]:
    """The passwords a DSN holds, as written and percent-decoded, longest first."""
    from urllib.parse import unquote

    found: list[str] = []
    _, sep, rest = dsn.partition("://")
    if sep:
        userinfo, at, _ = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")
        if at and ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    for match in _QUERY_PASSWORD.finditer(dsn):
        value = match.group(1)
        found.append(value)
        if value.startswith("'") and value.endswith("'") and len(value) >= 2:
            found.append(value[1:-1].replace("\\'", "'").replace("\\\\", "\\"))
    secrets = {s for v in found for s in (v, unquote(v)) if s}
    return sorted(secrets, key=len, reverse=True)


def without_secrets(text: str, dsn: str) -> str:
    """text with every password of the DSN replaced by ***: a driver's message may quote the
    DSN (a malformed one) or a part of it."""
    for secret in dsn_secrets(dsn):
        text = text.replace(secret, "***")
    return text


def scrub_exception(exc: BaseException | None, dsn: str) -> bool:
    """Masks the DSN's passwords, in place, in the texts of exc and of every exception chained to
    it (its __cause__ and __context__, theirs, the members of a group): their string args and
    notes, which is what a traceback shows of them. A driver's error may quote the DSN whole (a
    malformed one) or the value of one of its parameters. True when no password is left in what
    traceback.format_exception shows of them (False: an exception whose text comes from
    elsewhere than its args; the caller then chains none)."""
    secrets = dsn_secrets(dsn)
    if not secrets:
        return True
    clean, seen, todo = True, set(), [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        with contextlib.suppress(Exception):
            e.args = tuple(without_secrets(a, dsn) if isinstance(a, str) else a for a in e.args)
        notes = getattr(e, "__notes__", None)
        if isinstance(notes, list):
            with contextlib.suppress(Exception):
                e.__notes__ = [without_secrets(n, dsn) if isinstance(n, str) else n for n in notes]
        try:
            shown = "".join(traceback.format_exception_only(type(e), e))
        except Exception:  # a __str__ that fails: the traceback shows no text of it
            shown = ""
        if any(secret in shown for secret in secrets):
            clean = False
        todo += [e.__cause__, e.__context__, *(getattr(e, "exceptions", None) or ())]
    return clean


# What the user reads first in a ConnectionFailedError's message, per reason.
_CONNECT_FAILURE = {
    "authentication": "the server refused the login (check the DSN's user name and password)",
    "authorization": "the account may not connect to this database (grant it access, or use another account)",
    "unknown_database": "the DSN names a database that does not exist (create it, or fix the name)",
    "unreachable": "the database server could not be reached",
}


def fetch_all(connection: Connection, sql: str) -> list[Row]:
    """The rows of one statement without parameters on a DB-API connection."""
    cur = connection.cursor()
    try:
        cur.execute(sql)
        return list(cur.fetchall())
    finally:
        cur.close()


def connection_failed(reason: str, detail: str, dsn: str) -> errors.ConnectionFailedError:
    """The ConnectionFailedError for a failed connect: why, then the driver's message on one line,
    without the DSN's password."""
    detail = without_secrets(" ".join(detail.split()), dsn)
    return errors.ConnectionFailedError(f"cannot connect: {_CONNECT_FAILURE[reason]}: {detail}", reason)


# statement name and a result's column names -> where each declared column is in its rows (None:
# where the statement's row type has them, as the server sent them). Filled once per statement and
# column list, so that a row costs nothing more than its read.
_LAYOUTS: dict[tuple[str, tuple[str | bytes, ...]], tuple[int, ...] | None] = {}


def column_layout(columns: Sequence[str], names: Sequence[str | bytes]) -> tuple[int, ...] | None:
    """Where each of a row type's columns is among a result's column names, or None when the rows
    are read as they come: the same columns in the same order, or a result that lacks a declared
    column (a schema from before it: its readers take the shorter row)."""
    found = [n.decode() if isinstance(n, bytes) else n for n in names]
    if tuple(found) == tuple(columns) or not set(columns) <= set(found):
        return None
    return tuple(found.index(c) for c in columns)


def in_declared_order(statement: Statement, names: Sequence[str | bytes], rows: list[Row]) -> list[Row]:
    """A result's rows with their values in the order of the statement's row type, its columns
    matched by name (pyqueue_sql.statements): as they are when the server sends that order."""
    key = (statement, tuple(names))
    try:
        layout = _LAYOUTS[key]
    except KeyError:
        layout = _LAYOUTS[key] = column_layout(statement.columns, key[1])
    if layout is None:
        return rows
    return [tuple([row[i] for i in layout]) for row in rows]


@dataclass(frozen=True)
class JdbcDriver:
    """How Spark reaches a dialect over plain JDBC (pyqueue_sql.spark)."""

    product: str  # names the driver in messages ("no PostgreSQL JDBC jar")
    driver_class: str
    url_scheme: str  # jdbc:<url_scheme>://...: Spark picks its SQL dialect (identifier quoting) from it
    jar: str  # where Debian's package puts the driver's jar
    jar_marker: str  # a part of the jar's file name that tells it from the other driver's
    debian_package: str
    write_options: tuple[tuple[str, str], ...] = ()  # defaults for a write into queue_ingest
    read_options: tuple[tuple[str, str], ...] = ()  # defaults for a read
    # What the driver appends to the server's message on the same line (cut before mapping it).
    message_trailers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Expired:
    """A message that a reserve (or pop) on a connection ended as cancelled because its header
    pyqueue.expires_at had passed (pyqueue__expire), as the server told that connection: its
    queue, key and kind, its expiry and when it was ended (UTC; None when unreadable)."""

    queue: str
    key: str
    kind: str
    expires_at: dt.datetime | None
    at: dt.datetime | None

    @property
    def late_s(self) -> float | None:
        """How long after its expiry it was ended (seconds)."""
        if self.expires_at is None or self.at is None:
            return None
        return (self.at - self.expires_at).total_seconds()


def _utc_text(value: object) -> dt.datetime | None:
    """A time as the header pyqueue.expires_at writes it (YYYY-MM-DDTHH:MM:SS.ffffffZ), else None."""
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def expired_from_json(note: object) -> Expired | None:
    """One expiry as the server writes it (a JSON object: queue, key, kind, expires_at, at)."""
    if not isinstance(note, Mapping):
        return None
    return Expired(
        str(note.get("queue", "")),
        str(note.get("key", "")),
        str(note.get("kind", "")),
        _utc_text(note.get("expires_at")),
        _utc_text(note.get("at")),
    )


# The expiries the server told each open connection of and that take_expired has not handed out
# yet (PostgreSQL's notice handler puts them here); at most MAX_EXPIRED_KEPT a connection.
_expired: weakref.WeakKeyDictionary[Any, list[Expired]] = weakref.WeakKeyDictionary()
MAX_EXPIRED_KEPT = 1000


def note_expired(connection: Any, expired: Expired | None) -> None:
    if expired is None:
        return
    kept = _expired.setdefault(connection, [])
    if len(kept) < MAX_EXPIRED_KEPT:
        kept.append(expired)


class Dialect:
    """A dialect's driver: it opens connections (sync and asyncio), runs its named statements and
    transactions on them and maps its driver's errors; its capabilities are attributes. Its other
    parts hang from it: ``codec`` (values in and out, Codec), ``listener`` (LISTEN wakeups,
    Listener) and ``admin`` (grants, migrate's questions, test databases, Admin). Subclasses fill
    in the differences."""

    name: str
    sqlalchemy_dialect: str
    default_port: int
    jdbc: JdbcDriver
    # LISTEN/NOTIFY: a waiting worker is woken by a push (listen, wait_for_notification); without
    # it a worker long-polls queue_wait (one queue) or polls.
    supports_listen: bool = False
    # DDL runs inside a transaction (PostgreSQL): a migration is all or nothing. Without it (MySQL
    # commits each DDL statement implicitly) migrate records its progress as it goes, to resume.
    transactional_ddl: bool = True
    # The migration lock belongs to the session and is released by an explicit unlock (MySQL
    # GET_LOCK; it answers 1 when it got the lock), not by the transaction's end.
    session_migration_lock: bool = False
    # An account needs USAGE on the schema that holds the routines (PostgreSQL) to call them.
    grants_schema_usage: bool = False
    # Table privileges a capability gets besides EXECUTE on its routines: (privilege, table) pairs.
    grant_tables: Mapping[str, tuple[tuple[str, str], ...]] = {}
    # Routines installed with several signatures: the argument lists a GRANT names, one statement each
    # (a bare name would be ambiguous). A routine not listed is granted by its name.
    routine_signatures: Mapping[str, tuple[str, ...]] = {}
    # Making and dropping a whole database (pyqueue_sql.testing's database per test); {name} is an identifier.
    create_database_statement = "CREATE DATABASE {name}"
    drop_database_statement = "DROP DATABASE IF EXISTS {name}"
    # Times are stored as UTC wall-clock time without a zone (MySQL DATETIME(6)): a writer that would
    # convert through a local time zone (JDBC) sends them as text instead.
    utc_wall_clock_times: bool = False
    # Bulk ingest (queue_ingest): the insert itself enqueues and tallies its counts under a session
    # tag that queue_ingest_flush reports (PostgreSQL) ...
    ingest_counts_by_session_tag: bool = False
    # ... or the rows wait for queue_ingest_flush, which sets the rows it refuses aside in
    # pyqueue_ingest_reject (MySQL).
    ingest_keeps_rejects: bool = False
    # Printed before the install script by `pyqueue-sql sql` (how to run it safely).
    install_note: str = ""
    # Named statements that must run in a transaction of their own when the
    # caller has none (see Database.call).
    own_transaction_statements: frozenset[Statement] = frozenset()

    # The driver modules (sync, asyncio) and the extras that install them.
    driver: tuple[str, str] = ("", "")
    async_driver: tuple[str, str] = ("", "")

    def __init__(
        self, codec: Codec | None = None, listener: Listener | None = None, admin: Admin | None = None
    ) -> None:
        # The dialect's other parts (River's Driver hands out its Executor and Listener the same way).
        self.codec = codec or Codec()
        self.listener = listener or Listener(self)
        self.admin = admin or Admin(self)

    # -- connections -----------------------------------------------------
    def import_driver(self, asynchronous: bool = False) -> ModuleType:
        """The (asyncio) driver's module; errors.DriverNotInstalledError, naming the extra to
        install, when it is missing."""
        module, extra = self.async_driver if asynchronous else self.driver
        what = f"{'the asyncio client for ' if asynchronous else ''}a {self.name}:// DSN"
        return import_driver(module, extra, what)

    def connect(self, dsn: str, autocommit: bool = True) -> Connection:
        """A DB-API connection; autocommit unless asked otherwise (SQLAlchemy wants it off).
        errors.ConnectionFailedError when the server cannot be reached or refuses."""
        raise NotImplementedError

    @contextlib.contextmanager
    def connection_failures(self, dsn: str) -> Iterator[None]:
        """Around the opening of a connection (sync or asyncio): a driver error raised inside is
        raised as the pyqueue_sql error connect_error gives (errors.ConnectionFailedError), the
        driver's exception as its cause, the DSN's passwords masked in it (scrub_exception); an
        errors.UnsupportedDsnError (a malformed DSN) chains no cause (raise ... from None: the
        driver's text is the DSN itself, and the message already says what is wrong with it); a
        pyqueue_sql error passes as it is."""
        try:
            yield
        except errors.QueueError:
            raise
        except Exception as exc:
            # The driver's error may quote the DSN (a malformed one whole) or a value of it: its
            # text, and that of whatever it chains, is masked wherever it is reachable from
            # (__cause__, __context__, or the exception itself when raised as it is).
            clean = scrub_exception(exc, dsn)
            mapped = self.connect_error(exc, dsn)
            if mapped is None:
                raise
            if isinstance(mapped, errors.UnsupportedDsnError) or not clean:
                raise mapped from None  # the message says what is wrong; the cause adds only the DSN
            raise mapped from exc

    def connect_error(self, exc: BaseException, dsn: str) -> errors.QueueError | None:
        """The pyqueue_sql error for a driver error raised while connecting to dsn, or None to
        raise it as it is."""
        return None

    def owns(self, connection: object) -> bool:
        """Whether a DB-API connection object belongs to this dialect's driver."""
        raise NotImplementedError

    def begin(self, connection: Connection) -> None:
        raise NotImplementedError

    def commit(self, connection: Connection) -> None:
        connection.commit()

    def rollback(self, connection: Connection) -> None:
        connection.rollback()

    # -- asyncio connections (pyqueue_sql.aio) ---------------------------
    # The same operations on the dialect's asyncio driver: psycopg's AsyncConnection (PostgreSQL),
    # aiomysql (MySQL). Statements, values and errors are the sync ones.
    def owns_async(self, connection: object) -> bool:
        """Whether a connection object belongs to this dialect's asyncio driver."""
        raise NotImplementedError

    async def connect_async(self, dsn: str) -> AsyncConnection:
        """An asyncio driver connection in autocommit mode."""
        raise NotImplementedError

    async def begin_async(self, connection: AsyncConnection) -> None:
        raise NotImplementedError

    async def commit_async(self, connection: AsyncConnection) -> None:
        await connection.commit()

    async def rollback_async(self, connection: AsyncConnection) -> None:
        await connection.rollback()

    async def end_transaction_async(self, connection: AsyncConnection, commit: bool) -> None:
        """end_transaction on an asyncio connection."""
        try:
            await (self.commit_async(connection) if commit else self.rollback_async(connection))
        except Exception as exc:
            mapped = self.serialization_error(exc)
            if mapped is not None:
                with contextlib.suppress(Exception):  # a lost connection has nothing to roll back
                    await self.rollback_async(connection)
                raise mapped from exc
            raise

    # -- statements ------------------------------------------------------
    def run(self, connection: Connection, name: Statement, params: Params) -> list[Row]:
        """Runs a named statement and returns all rows of its (single) result set."""
        raise NotImplementedError

    def run_sets(self, connection: Connection, name: Statement, params: Params) -> list[list[Row]]:
        """Every result set of a named statement (PostgreSQL routines send one)."""
        return [self.run(connection, name, params)]

    async def run_async(self, connection: AsyncConnection, name: Statement, params: Params) -> list[Row]:
        """run on an asyncio connection."""
        raise NotImplementedError

    async def run_sets_async(
        self, connection: AsyncConnection, name: Statement, params: Params
    ) -> list[list[Row]]:
        """run_sets on an asyncio connection."""
        return [await self.run_async(connection, name, params)]

    def statement(self, statement: Statement) -> str:
        """A declared statement's text in this dialect's queries.sql."""
        return queries(self.name)[statement]

    def run_script(self, cursor: Cursor, text: str) -> None:
        """Runs a whole SQL script (an install or migration file) on a DB-API cursor, without
        parameters (so '%' stays as it is): statement by statement, split the way the mysql
        client splits it (DELIMITER lines included). A script of comments only runs nothing."""
        for statement in split_script(text):
            cursor.execute(statement)

    # -- errors ----------------------------------------------------------
    def routine_error(self, message: str | None) -> errors.QueueError | None:
        """The pyqueue_sql exception of a routine's refusal in a server message, or None."""
        return routine_error(message)

    def jdbc_routine_error(self, message: str) -> errors.QueueError | None:
        """The same for a refusal inside a JDBC driver's message (a Spark write's failure): the
        routine's line, without what this dialect's JDBC driver appends to it."""
        start = message.find("pyqueue:")
        if start < 0:
            return None
        line = message[start:].split("\n", 1)[0]
        for trailer in self.jdbc.message_trailers:
            line = line.split(trailer, 1)[0]
        return self.routine_error(line.strip())

    # -- connection loss -------------------------------------------------
    # The driver's error codes (exc.args[0]) of a lost connection on a connection the driver may
    # still think open (lost_connection).
    lost_connection_codes: tuple[int, ...] = ()

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        """Errors after which a worker reconnects and retries (lost or broken connection): the
        driver's, and errors.ConnectionFailedError (a connect that failed)."""
        raise NotImplementedError

    def is_connection_lost(self, exc: BaseException) -> bool:
        """Whether a driver error says the connection was lost or broken under a call (a migration
        run is then interrupted, not failed)."""
        return isinstance(exc, self.connection_errors())

    def is_deadlock(self, exc: BaseException) -> bool:
        """Whether the server rolled the transaction back to keep it serializable or to break a
        deadlock (errors.SerializationError; run the whole transaction again)."""
        return isinstance(exc, errors.SerializationError) or self.serialization_error(exc) is not None

    def serialization_error(self, exc: BaseException) -> errors.SerializationError | None:
        """The SerializationError a driver error stands for, or None."""
        return None

    def end_transaction(self, connection: Connection, commit: bool) -> None:
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

    def run_in_own_transaction(
        self, connection: Connection, name: Statement, params: Params, all_sets: bool = False
    ) -> list[Row] | list[list[Row]]:
        """A named statement in a transaction of its own: BEGIN, the statement, COMMIT; ROLLBACK
        when it raises (then its error goes on). Its rows as run (all_sets: as run_sets)."""
        self.begin(connection)
        try:
            rows = (self.run_sets if all_sets else self.run)(connection, name, params)
        except BaseException:
            with contextlib.suppress(Exception):  # a lost connection has nothing to roll back
                self.rollback(connection)
            raise
        self.end_transaction(connection, commit=True)
        return rows

    async def run_in_own_transaction_async(
        self, connection: AsyncConnection, name: Statement, params: Params, all_sets: bool = False
    ) -> list[Row] | list[list[Row]]:
        """run_in_own_transaction on an asyncio connection."""
        await self.begin_async(connection)
        try:
            run = self.run_sets_async if all_sets else self.run_async
            rows = await run(connection, name, params)
        except BaseException:
            with contextlib.suppress(Exception):  # a lost connection has nothing to roll back
                await self.rollback_async(connection)
            raise
        await self.end_transaction_async(connection, commit=True)
        return rows


class Codec:
    """How a dialect's routines take and give values: durations, times, payloads, kind lists, text
    arrays and batches in; times, payloads, durations and the result sets of a combined call out.
    Holds no connection: the calls (pyqueue_sql.calls) encode their arguments and decode their rows
    with it."""

    def duration(self, value: Duration, what: str) -> dt.timedelta | Decimal | None:
        return as_timedelta(value, what)

    def time(self, value: dt.datetime | dt.timedelta | None, what: str) -> dt.datetime | None:
        return as_utc(value, what)

    @overload
    def read_time(self, value: dt.datetime) -> dt.datetime: ...
    @overload
    def read_time(self, value: None) -> None: ...
    def read_time(self, value: dt.datetime | None) -> dt.datetime | None:
        """A time a routine returns (a NULL column's None passed on), as an aware UTC datetime."""
        return value

    def read_payload(self, value: object) -> JSONValue:
        return value

    def read_duration(self, value: dt.timedelta | Decimal | float | None) -> dt.timedelta | None:
        """A duration a routine returns (PostgreSQL interval, MySQL decimal seconds)."""
        if value is None or isinstance(value, dt.timedelta):
            return value
        if isinstance(value, Decimal):  # exact to the microsecond, as MySQL's DECIMAL(20,6) holds it
            return dt.timedelta(microseconds=int(value.scaleb(6).to_integral_value()))
        return dt.timedelta(seconds=float(value))

    def kinds(self, kinds: Sequence[str] | None) -> list[str | None] | str | None:
        if kinds is None:
            return None
        if isinstance(kinds, (str, bytes)):
            raise errors.InvalidArgumentError("kinds must be a list of kinds, not a single str")
        return [text_value(k, "each kind") for k in kinds]

    def text_array(self, values: Sequence[str | None]) -> list[str | None] | str:
        """A list of texts (keys, kinds, tokens) as a routine's array argument: a list (text[]) here."""
        return list(values)

    def batch(self, items: Sequence[BatchItem]) -> Params:
        """The arguments of queue_push_batch for (key, kind, payload, run_at, priority) items."""
        raise NotImplementedError

    def grouped_batch(self, items: Sequence[BatchItem], groups: Sequence[str | None]) -> Params:
        """The arguments of queue_push_batch_grouped: batch's, and each item's group (None: none)."""
        raise NotImplementedError

    def topic_batch(self, topics: Sequence[str | None], items: Sequence[BatchItem]) -> Params:
        """The arguments of queue_publish_batch: each item's topic, and batch's."""
        raise NotImplementedError

    def read_commit_reserve(self, sets: list[list[Row]]) -> tuple[RowValue, list[Row]]:
        """(committed, reservation rows) from the result sets of the commit_reserve statement:
        here one set whose rows each start with the commit's result, and a row without a
        message (its key NULL) when nothing was reserved."""
        rows = sets[0]
        committed = rows[0][0] if rows else None
        return committed, [row[1:] for row in rows if row[1] is not None]


class Listener:
    """How a waiting worker is woken by a push (LISTEN/NOTIFY), where the dialect has it
    (Dialect.supports_listen): River's Listener beside its Driver."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def listen(self, connection: Connection, channels: Sequence[str]) -> None:
        """Registers the connection for the wakeups of these channels (names from queue_channel)."""
        raise errors.QueueError(f"{self.dialect.name} has no LISTEN")

    def wait_for_notification(self, connection: Connection, timeout: float) -> list[tuple[str, str]]:
        """Waits up to timeout seconds for a wakeup on a channel the connection listens to:
        [(channel, payload)] of the first that came (later ones stay buffered for the next
        call), [] when none did."""
        raise errors.QueueError(f"{self.dialect.name} has no LISTEN")

    async def listen_async(self, connection: AsyncConnection, channels: Sequence[str]) -> None:
        """listen on an asyncio connection."""
        raise errors.QueueError(f"{self.dialect.name} has no LISTEN")

    async def wait_for_notification_async(
        self, connection: AsyncConnection, timeout: float
    ) -> list[tuple[str, str]]:
        """wait_for_notification on an asyncio connection."""
        raise errors.QueueError(f"{self.dialect.name} has no LISTEN")

    # What else the server tells a session beside its results.
    def take_expired(self, connection: Connection) -> list[Expired]:
        """The messages that the calls on this connection ended as expired since the last
        take_expired (the server tells the session of each: docs/contract/05_reserve.md), handed
        out once. No round trip unless the server flagged one (MySQL)."""
        return _expired.pop(connection, [])

    async def take_expired_async(self, connection: AsyncConnection) -> list[Expired]:
        """take_expired on an asyncio connection."""
        return _expired.pop(connection, [])

    def shares_sessions(self, connection: Connection, dsn: str) -> bool:
        """Whether a pooler in transaction mode stands between connection and the server, so that
        a LISTEN cannot last (asked of dialects with LISTEN only)."""
        return False

    def shares_session_with(self, connection: Connection, other: Connection) -> bool:
        """shares_sessions on a client connection already open to the same DSN (and idle)."""
        return False

    async def shares_sessions_async(self, connection: AsyncConnection, dsn: str) -> bool:
        """shares_sessions on an asyncio connection."""
        return False


class Admin:
    """What a dialect's administration takes: GRANTs rendered and checked (pyqueue_sql.privileges),
    what migrate asks of the server (pyqueue_sql.migrate), and test databases emptied and compared
    (pyqueue_sql.testing). Never on a queue call's path."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    # -- privileges (pyqueue_sql.privileges) -----------------------------
    def parse_grantee(self, text: str) -> tuple[str, str | None]:
        """(name, host) of the account a `pyqueue-sql grant --role` names (host None: a role
        without a host part)."""
        raise NotImplementedError

    def grantee(self, name: str, host: str | None) -> Composed:
        """The account (name, host) as the grantee of a GRANT, quoted."""
        raise NotImplementedError

    def identifier(self, *parts: str) -> Composed:
        """A (schema-qualified) name, quoted as an identifier."""
        raise NotImplementedError

    def keyword(self, text: str) -> Composed:
        """A fixed SQL word (a privilege name) to put into a statement as it is."""
        return text

    def compose(self, template: str, **parts: Composed) -> Composed:
        """A named statement with its {placeholders} filled with identifiers and keywords."""
        return template.format(**parts)

    def statement_text(self, statement: Composed, connection: Connection | None = None) -> str:
        """A composed statement as SQL text (for printing)."""
        return str(statement)

    @contextlib.contextmanager
    def no_account_creation(self, connection: Connection) -> Iterator[None]:
        """While in the block, a GRANT to an account that does not exist fails instead of
        creating it (nothing to do where a GRANT never creates an account)."""
        yield

    def shadowing_grantees(self, connection: Connection) -> frozenset[str]:
        """The accounts that may create temporary tables in connection's database, where a
        session's temporary table would shadow a table of the routines (MySQL/MariaDB), as
        grantee() quotes them; none where the routines cannot be shadowed so (PostgreSQL puts
        pg_temp last on their search_path)."""
        return frozenset()

    def public_role(self, connection: Connection) -> tuple[str, str] | None:
        """The role every account holds, whose privileges and roles count for every account
        without SET ROLE, as (name, host); None where the server has none such in its grant
        tables (MariaDB 10.11+ has PUBLIC)."""
        return None

    # -- migrations (pyqueue_sql.migrate) --------------------------------
    def server_flavor(self, connection: Connection) -> str:
        """The server flavour of a DB-API connection, the key of FINGERPRINTS in a revision file
        (how `migrate --adopt` recognises a schema): the dialect's name, unless servers of the
        dialect build different catalogs."""
        return self.dialect.name

    def replaces_routines_in_place(self, connection: Connection) -> bool:
        """Whether the server re-creates a routine in one statement that a concurrent call waits for
        (``CREATE OR REPLACE`` under the routine's metadata lock), so that migrate installs the
        routines that way (pyqueue_sql.migrate.routines_script's ``replace_in_place``) rather than by
        DROP then CREATE, between which a call finds the routine missing. PostgreSQL's script already
        says CREATE OR REPLACE: nothing to rewrite."""
        return False

    def routine_regrants(
        self,
        saved: Iterable[Sequence[RowValue]],
        current: Iterable[Sequence[RowValue]],
    ) -> list[str]:
        """The GRANTs that give back the routine grants a migration dropped by re-creating
        routines, from the grant snapshot taken before the run (``saved``) and the grants now
        (``current``). Only a dialect without transactional DDL has a snapshot (pyqueue_sql.migrate)."""
        raise NotImplementedError(f"{self.dialect.name} migrations take no grant snapshot")

    # -- test databases (pyqueue_sql.testing) ----------------------------
    def empty_database_statements(self, connection: Connection, kept_table: str) -> list[str]:
        """The statements that empty connection's database (every table but kept_table) in one
        transaction, for a DB-API cursor (each may hold several; their result sets are skipped)."""
        raise NotImplementedError(f"{self.dialect.name} test databases cannot be emptied")

    def after_emptying_database(self, connection: Connection) -> None:
        """What is left to do once empty_database_statements ran (nothing, unless the dialect says)."""

    def database_fingerprint(self, connection: Connection) -> object:
        """What a test could change in connection's database besides rows (its relations,
        routines and grants), as a value to compare: a change gets the next test a new database."""
        raise NotImplementedError(f"{self.dialect.name} test databases have no fingerprint")

    def close_other_sessions(self, connection: Connection) -> None:
        """Ends the other sessions connected to connection's database, as dropping it would."""
        raise NotImplementedError(f"{self.dialect.name} cannot end other sessions")
