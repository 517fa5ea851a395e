"""MySQL and MariaDB through PyMySQL: stored procedures that send result sets, JSON for arrays,
UTC wall-clock DATETIMEs, DDL that commits implicitly, backtick-quoted grants."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from decimal import Decimal
from typing import Any, TypeAlias, overload
from urllib.parse import parse_qsl, unquote, urlsplit

from .. import errors, statements
from ..queries import migration_queries
from ..statements import Statement
from .base import (
    UTC,
    Admin,
    AsyncConnection,
    BatchItem,
    Codec,
    Connection,
    Dialect,
    Duration,
    Expired,
    JdbcDriver,
    JSONValue,
    Listener,
    Params,
    Row,
    RowValue,
    as_timedelta,
    as_utc,
    connection_failed,
    encode_json,
    expired_from_json,
    fetch_all,
    in_declared_order,
    note_expired,
    scrub_exception,
    strip_driver,
)
from .jsontext import UnreadableJSON, load_json

# PyMySQL's (and aiomysql's) connect() keyword arguments (Any: each its own type, read back as such).
ConnectArgs: TypeAlias = dict[str, Any]

# Access denied for: the database (1044), a privilege (1227), a table (1142), a column (1143),
# a routine (1370).
_ACCESS_DENIED = (1044, 1142, 1143, 1227, 1370)
# Out of range / truncated / bad datetime / bad value for the parameter.
_BAD_VALUE = (1264, 1265, 1292, 1366)
# The client lost the server (0: PyMySQL's own "not connected"; 2006 gone away; 2013 lost during a
# query; 2014 commands out of sync; 2055 lost at handshake or reading).
_CONNECTION_LOST = (0, 1927, 2006, 2013, 2014, 2055, 4031)  # 1927: killed (MariaDB); 4031: idle too long
# A user, host or role name: no quotes, backticks or control characters (so backticks quote it).
_NAME = re.compile(r"[^\x00-\x1f\x7f`']+")
# The routine privileges of mysql.procs_priv's Proc_priv that a regrant gives back, as GRANT names them.
_ROUTINE_PRIVILEGES = {"execute": "EXECUTE", "alter routine": "ALTER ROUTINE"}


def _read_datetime(text: str) -> dt.datetime | dt.date | str:
    """A DATETIME or TIMESTAMP column's text as a datetime: what PyMySQL's own converter returns, at
    a fifth to a tenth of its cost. The server sends a DATETIME(6) as 'YYYY-MM-DD hh:mm:ss.ffffff' and a
    DATETIME as 'YYYY-MM-DD hh:mm:ss', which ``fromisoformat`` reads (0.3-0.6 µs against 3 µs for
    PyMySQL's regular expression, twice on every reserved row). Any other shape, and a value
    ``fromisoformat`` refuses (a zero date, the 31st of February), goes to PyMySQL's converter,
    which returns a date or the text itself for such values, as PyMySQL always has."""
    if (len(text) == 19 or (len(text) == 26 and text[19] == ".")) and text[10] == " ":
        try:
            return dt.datetime.fromisoformat(text)
        except ValueError:
            pass
    import pymysql.converters

    return pymysql.converters.convert_datetime(text)


class _LongText:
    """A long text parameter (a batch's JSON array of messages) sent as the hex literal of its UTF-8
    bytes, _utf8mb4 X'...': bytes.hex() costs a tenth of PyMySQL's escaping, which maps each
    character (3 µs of the client's CPU a message of a batch of 5,000), and no sql_mode changes
    what it means. A connection whose conversions lack it (one passed in) escapes str(it)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


LONG_TEXT = 4096  # characters: a shorter text is escaped as PyMySQL does


def _long_text_literal(value: _LongText, mapping: object = None) -> str:
    import pymysql.converters

    try:
        return "_utf8mb4 X'" + value.text.encode().hex() + "'"
    except UnicodeEncodeError:  # a lone surrogate: as PyMySQL sends it (the server refuses it)
        return pymysql.converters.escape_str(value.text)


def _long_texts(params: Params) -> Params:
    """params with each text longer than LONG_TEXT as a _LongText."""
    if isinstance(params, dict):
        return {k: _LongText(v) if type(v) is str and len(v) > LONG_TEXT else v for k, v in params.items()}
    return params


@functools.cache
def _connection_class() -> type:
    """PyMySQL's Connection with one TLS context per process for the connections that name no
    TLS option. PyMySQL then still tries TLS (MySQL's PREFERRED mode) but builds
    ssl.create_default_context() for every connection, loading the system's CA store: about 18 ms
    of CPU a connection against 0.2 ms for the rest of the connect, paid by every worker start,
    reconnect and CLI command. An SSLContext is made to be shared; this one is built once with
    PyMySQL's own settings, so the connection negotiates exactly as before. A DSN that names
    ssl_ca, ssl_cert or ssl_key gets its own context, as PyMySQL builds it."""
    from pymysql import connections

    class Connection(connections.Connection):
        _preferred_tls: Any = None

        def _create_ssl_ctx(self, sslp: Any) -> Any:
            if isinstance(sslp, dict) and not sslp:
                cls = type(self)
                if cls._preferred_tls is None:  # a race builds it twice: harmless
                    cls._preferred_tls = super()._create_ssl_ctx(sslp)
                return cls._preferred_tls
            return super()._create_ssl_ctx(sslp)

    return Connection


@functools.cache
def _conversions() -> dict[type | int, Callable[..., object]]:
    """PyMySQL's conversions with the DATETIME and TIMESTAMP readers above: the ``conv`` of every
    connection this client opens (a connection passed in keeps its own)."""
    import pymysql.converters
    from pymysql.constants import FIELD_TYPE

    return {
        **pymysql.converters.conversions,
        FIELD_TYPE.DATETIME: _read_datetime,
        FIELD_TYPE.TIMESTAMP: _read_datetime,
        _LongText: _long_text_literal,
    }


def mysql_connect_args(dsn: str) -> ConnectArgs:
    """PyMySQL keyword arguments from mysql://user:password@host:port/database?option=value. A DSN
    naming several hosts is refused here (PyMySQL connects to one): ``connect`` takes it, or
    ``mysql_connect_candidates`` gives the arguments for each host."""
    candidates = mysql_connect_candidates(dsn)
    if len(candidates) > 1:
        raise errors.UnsupportedDsnError(
            "this MySQL DSN names several hosts; only pyqueue_sql.connect (and its async twin) "
            "picks one of them: pass a DSN with one host here"
        )
    return candidates[0]


def mysql_connect_candidates(dsn: str) -> list[ConnectArgs]:
    """PyMySQL keyword arguments for each host of mysql://user:password@host:port/database?option=value,
    in order; a multi-host DSN lists them with commas (mysql://app@db1:3306,db2:3306/app, a port per
    host or the default; IPv6 addresses in brackets)."""
    try:
        parts = urlsplit(strip_driver(dsn))
    except ValueError as exc:  # unbalanced brackets around an IPv6 address
        raise errors.UnsupportedDsnError(f"not a host or host:port in the MySQL DSN: {exc}") from None
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    if "," in hostlist:
        hosts = [_mysql_host(item) for item in hostlist.split(",")]
    else:
        try:
            hosts = [(parts.hostname or "127.0.0.1", parts.port or MySQL.default_port)]
        except ValueError as exc:  # a port that is not a number from 0 to 65535
            raise errors.UnsupportedDsnError(f"not a host or host:port in the MySQL DSN: {exc}") from None
    user, has_password, password = userinfo.partition(":")
    args: ConnectArgs = {
        "user": unquote(user) if user else "root",
        "password": unquote(password) if has_password else "",
        "database": unquote(parts.path.lstrip("/")) or None,
        "charset": "utf8mb4",
        "autocommit": True,
    }
    for key, value in parse_qsl(parts.query):
        if key in ("unix_socket", "charset", "ssl_ca", "ssl_cert", "ssl_key"):
            args[key] = value
        elif key in ("connect_timeout", "read_timeout", "write_timeout"):
            if not value.isdigit():  # the value is not quoted: it may be anything, a password too
                raise errors.UnsupportedDsnError(
                    f"the MySQL DSN option {key} must be a whole number of seconds"
                )
            args[key] = int(value)
        else:
            raise errors.UnsupportedDsnError(f"unsupported MySQL DSN option {key!r}")
    if len(hosts) > 1 and "unix_socket" in args:
        raise errors.UnsupportedDsnError("a MySQL DSN with several hosts cannot also name a unix_socket")
    return [{"host": host, "port": port, **args} for host, port in hosts]


# Why the server refused a connection, by error code: the login (1045 access denied, 1698 access
# denied without a password (unix_socket authentication), 1130 host not allowed, 1251 and 2059 an
# authentication method the client lacks, 1820 and 1862 an expired password, 3118 and 4151 a locked
# account), the database (1044: no privilege on it; 1049: no such database). Any other code (2003
# refused or unknown host, 2013 lost at handshake, 1040 too many connections...) is "unreachable".
_CONNECT_REFUSALS = {
    **dict.fromkeys((1045, 1698, 1130, 1251, 1820, 1862, 2059, 3118, 4151), "authentication"),
    1044: "authorization",
    1049: "unknown_database",
}


def _connect_refusal(exc: BaseException) -> str:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    return _CONNECT_REFUSALS.get(code, "unreachable")


def _describe(exc: BaseException) -> str:
    """A PyMySQL error as "MySQL error <code>: <message>"."""
    if len(exc.args) >= 2:
        return f"MySQL error {exc.args[0]}: {exc.args[1]}"
    return f"MySQL error: {exc}"


class _HostFailures:
    """Why each host of a multi-host DSN was not taken, for the one ConnectionFailedError raised
    when none was: its reason is the hosts' common one, else unreachable."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.lines: list[str] = []
        self.reasons: set[str] = set()
        self.last: BaseException | None = None

    def add(self, args: ConnectArgs, exc: BaseException | None) -> None:
        """exc: the host's error, or None for a host that answered read-only."""
        self.lines.append(f"{args['host']}:{args['port']}: {'read-only' if exc is None else _describe(exc)}")
        self.reasons.add("unreachable" if exc is None else _connect_refusal(exc))
        self.last = exc or self.last

    def error(self) -> errors.ConnectionFailedError:
        reason = next(iter(self.reasons)) if len(self.reasons) == 1 else "unreachable"
        return connection_failed(
            reason, "no writable MySQL server among the DSN's hosts: " + "; ".join(self.lines), self.dsn
        )


_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]]+))(?::(?P<port>[0-9]{1,5}))?")


# The OK packet's flag: a session state the client tracks changed during the statement (with the
# client capability CLIENT_SESSION_TRACK).
SERVER_SESSION_STATE_CHANGED = 0x4000


def _note_expiries(connection: Any, text: object) -> None:
    """Notes each expiry of @pyqueue_expired's JSON array (see MySQLDialect.take_expired)."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str):
        return
    try:
        notes = json.loads(text)
    except ValueError:
        return
    for note in notes if isinstance(notes, list) else []:
        note_expired(connection, expired_from_json(note))


class MySQLListener(Listener):
    """No LISTEN; the expiries a call ended, read from the session when the server flags them."""

    def __init__(self, dialect: Dialect) -> None:
        super().__init__(dialect)
        # The connections take_expired has asked to track default_week_format.
        self._tracking_started: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()

    def take_expired(self, connection: Connection) -> list[Expired]:
        """The expiries pyqueue__expire noted in the session (@pyqueue_expired), read and cleared
        in one round trip only when the OK packet of the connection's last call says a tracked
        session variable changed (pyqueue__expire sets default_week_format to its own value): a
        reserve that ended nothing costs nothing more. The first call on a connection asks the
        server to track that variable (session_track_system_variables) and reads what is there."""
        if self._tracks_expiries(connection):
            try:
                [[(text,)]] = self.dialect.run_sets(connection, statements.TAKE_EXPIRED, {})[:1]
            except errors.QueueError:
                text = None
            _note_expiries(connection, text)
        return super().take_expired(connection)

    async def take_expired_async(self, connection: AsyncConnection) -> list[Expired]:
        if self._tracks_expiries(connection, asynchronous=True):
            if connection not in self._tracking_started:
                self._tracking_started[connection] = True
                with contextlib.suppress(errors.QueueError):
                    await self.dialect.run_sets_async(connection, statements.TRACK_EXPIRED, {})
            try:
                [[(text,)]] = (await self.dialect.run_sets_async(connection, statements.TAKE_EXPIRED, {}))[:1]
            except errors.QueueError:
                text = None
            _note_expiries(connection, text)
        return await super().take_expired_async(connection)

    def _tracks_expiries(self, connection: Any, asynchronous: bool = False) -> bool:
        """Whether to read @pyqueue_expired now: on a connection's first take (which starts the
        tracking: synchronously here, by the caller when asynchronous), and after a call whose OK
        packet has SERVER_SESSION_STATE_CHANGED set."""
        if connection not in self._tracking_started:
            if not asynchronous:
                self._tracking_started[connection] = True
                with contextlib.suppress(errors.QueueError):
                    self.dialect.run_sets(connection, statements.TRACK_EXPIRED, {})
            return True
        return bool((getattr(connection, "server_status", 0) or 0) & SERVER_SESSION_STATE_CHANGED)


def _mysql_host(item: str) -> tuple[str, int]:
    """(host, port) of one entry of a multi-host DSN: host, host:port, [v6 address] or [v6]:port."""
    match = _HOST_PORT.fullmatch(item)
    port = int(match["port"]) if match and match["port"] else MySQL.default_port
    if match is None or not 0 < port < 65536:
        raise errors.UnsupportedDsnError(f"not a host or host:port in the MySQL DSN's host list: {item!r}")
    return unquote(match["v6"] or match["host"]), port


@functools.cache
def _quiet_cursor() -> type:
    """aiomysql's cursor without its SHOW WARNINGS after a statement that left warnings (it turns
    them into Python warnings): a round trip more for every push of a duplicate (INSERT IGNORE),
    which PyMySQL, the sync client's driver, no longer does either."""
    import aiomysql

    class QuietCursor(aiomysql.Cursor):
        async def _show_warnings(self, conn: AsyncConnection) -> None:
            return None

    return QuietCursor


def _privilege_set(value: object) -> frozenset[str]:
    if isinstance(value, (set, frozenset)):  # Proc_priv, a SET column
        value = ",".join(value)
    return frozenset(p.strip().lower() for p in str(value or "").split(",") if p.strip())


def quote_name(name: str) -> str:
    """A MySQL identifier in backticks (names are validated: no backtick can appear)."""
    if not name or not _NAME.fullmatch(name):
        raise errors.InvalidArgumentError(f"not a usable MySQL name: {name!r}")
    return f"`{name}`"


# A transaction of the call's own in one round trip: START TRANSACTION, the CALL and COMMIT
# as one multi-statement query. The server stops at the first statement that fails, so a
# failing CALL leaves the transaction open and the ROLLBACK that follows closes it, as when
# the three are sent one by one. A connection opened without multi-statement queries
# (CLIENT.MULTI_STATEMENTS) sends the three one by one.
def _one_trip(statement: str) -> str:
    return f"START TRANSACTION; {statement}; COMMIT"


def _multi_statements(connection: Connection | AsyncConnection) -> bool:
    from pymysql.constants import CLIENT

    return bool(getattr(connection, "client_flag", 0) & CLIENT.MULTI_STATEMENTS)


def _by_name(statement: Statement, description: Sequence[Sequence[Any]], rows: list[Row]) -> list[Row]:
    """A result set's rows in the order of the statement's row type, its columns matched by name
    (a procedure's SELECT names them)."""
    return in_declared_order(statement, [d[0] for d in description], rows) if statement.columns else rows


def _own_result(sets: list[list[Row]], all_sets: bool) -> list[Row] | list[list[Row]]:
    """The CALL's result sets out of the one-trip query's (those with columns: START
    TRANSACTION, the CALL's closing status and COMMIT have none), as run / run_sets give them."""
    sets = sets or [[]]
    return sets if all_sets else sets[0]


class MySQL(Dialect):
    name = "mysql"
    supports_listen = False
    sqlalchemy_dialect = "mysql+pymysql"
    default_port = 3306
    transactional_ddl = False
    session_migration_lock = True
    grants_schema_usage = False
    create_database_statement = "CREATE DATABASE {name} CHARACTER SET utf8mb4"
    grant_tables = {
        "ingest": (
            ("INSERT", "queue_ingest"),
            ("SELECT", "queue_ingest"),
            ("SELECT", "pyqueue_ingest_reject"),
        )
    }
    utc_wall_clock_times = True
    ingest_keeps_rejects = True
    # MariaDB Connector/J with a jdbc:mysql:// URL, so that Spark quotes names with backticks.
    jdbc = JdbcDriver(
        product="MariaDB",
        driver_class="org.mariadb.jdbc.Driver",
        url_scheme="mysql",
        jar="/usr/share/java/mariadb-java-client.jar",
        jar_marker="mariadb",
        debian_package="libmariadb-java",
        write_options=(
            ("rewriteBatchedStatements", "true"),  # multi-row INSERTs (see bench/spark.md)
            ("permitMysqlScheme", "true"),  # Connector/J 3.x; 2.x ignores it
        ),
        read_options=(("permitMysqlScheme", "true"),),
    )
    # In autocommit mode each statement of a procedure commits on its own, and
    # these write the history row, then remove the message: a session killed
    # or a server stopped between the two would leave a `committed` (or
    # `dead_lettered`, `moved`) row for a message that is still live, and the
    # retry of the same call would archive it a second time. The same holds for
    # the other calls that archive or remove (pop, the commit fast paths,
    # redrive); a batch call in one transaction also commits once, not per row.
    # reserve and extend claim rows (and limit slots) one statement at a time: a
    # deadlock after the first claim would leave the claimed messages held,
    # unreturned, until their timeout; in a transaction of their own the server
    # rolls the whole call back, and the client runs it again. The calls that end
    # a message with its outcome (a commit with a result, a cancel) remove it and
    # write its history and result rows: one transaction, so that a reader sees
    # either the live message or its outcome; a renew claims as an extend does.
    own_transaction_statements = frozenset(
        {
            statements.COMMIT,
            statements.ROLLBACK,
            statements.FAIL,
            statements.MOVE,
            statements.POP,
            statements.COMMIT_RESERVE,
            statements.COMMIT_BATCH,
            statements.REDRIVE,
            statements.RESERVE,
            statements.EXTEND,
            statements.COMMIT_RESULT,
            statements.COMMIT_RESULT_BATCH,
            statements.CANCEL,
            statements.CANCEL_HELD,
            statements.RENEW,
        }
    )
    # ... but on MariaDB these need none from the client: in autocommit mode the procedure makes
    # whatever it writes in several statements one transaction of its own (it can tell autocommit
    # mode from @@in_transaction; MySQL 8.0 has no such variable, so there the client opens it). A
    # plain CALL spares the server two statements and the client two replies to parse. A reserve
    # opens it only in a SERIALIZABLE session: elsewhere its reads of the ready messages are plain
    # reads, and in a REPEATABLE READ transaction they would all see the snapshot of its first read,
    # so with other consumers claiming meanwhile a reserve walked page after page of messages they
    # had taken since (reserves of 0.2-4.9 s among 20 ms ones with 4 consumers:
    # bench/own_transaction.py at commit 61d2f9a). In autocommit each read sees what is committed now, and its claims
    # skip locked rows instead of waiting, so no deadlock falls between them (a dead-lettering step
    # that loses one leaves that message claimed until the claim expires). SERIALIZABLE makes those
    # reads locking reads, which see the latest rows but can deadlock: there the procedure opens the
    # transaction. A commit_reserve in autocommit mode is always one transaction of its own, and
    # so are the removal with its history and result rows of a commit_result, a cancel and a
    # cancel_held.
    self_contained_on_mariadb = frozenset(
        {
            statements.COMMIT,
            statements.RESERVE,
            statements.COMMIT_RESERVE,
            statements.COMMIT_RESULT,
            statements.CANCEL,
            statements.CANCEL_HELD,
        }
    )
    driver = ("pymysql", "mysql")
    async_driver = ("aiomysql", "asyncio")

    def __init__(self) -> None:
        super().__init__(MySQLCodec(), MySQLListener(self), MySQLAdmin(self))

    # -- connections -----------------------------------------------------
    def connect(self, dsn: str, autocommit: bool = True) -> Connection:
        """A connection to the DSN's server; with several hosts, to the first of them, in order,
        that answers and is writable (read_only OFF: a replica is skipped, as libpq's
        target_session_attrs=read-write does), else a connection error naming why each failed."""
        pymysql = self.import_driver()
        from pymysql.constants import CLIENT

        candidates = mysql_connect_candidates(dsn)
        # Multi-statement queries, for run_in_own_transaction's one round trip (aiomysql always
        # asks for them). Every statement the client sends is one of its named statements with
        # escaped parameters, so no text of a caller's can add a statement of its own.
        if len(candidates) == 1:  # the server's own error (access denied, unknown database...)
            with self.connection_failures(dsn):
                return _connection_class()(
                    **{**candidates[0], "autocommit": autocommit},
                    client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.SESSION_TRACK,
                    conv=_conversions(),
                )
        failures = _HostFailures(dsn)
        for args in candidates:
            connection = None
            try:
                connection = _connection_class()(
                    **{**args, "autocommit": autocommit},
                    client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.SESSION_TRACK,
                    conv=_conversions(),
                )
                with connection.cursor() as cur:
                    cur.execute("SELECT @@global.read_only")
                    (read_only,) = cur.fetchone()
                if not autocommit:
                    connection.rollback()
            except pymysql.MySQLError as exc:
                if connection is not None:
                    connection.close()
                failures.add(args, exc)
                continue
            if not read_only:
                return connection
            connection.close()
            failures.add(args, None)
        scrub_exception(failures.last, dsn)
        raise failures.error() from failures.last

    def owns(self, connection: object) -> bool:
        return any(cls.__module__.startswith("pymysql") for cls in type(connection).__mro__[:-1])

    def begin(self, connection: Connection) -> None:
        connection.begin()

    # aiomysql rather than asyncmy: both read the procedures' result sets right and run them
    # equally fast on MariaDB (bench/aio_drivers.py at commit c44a52f, calls/s on one connection: queue_reserve
    # 127 vs 128, queue_commit_reserve 76 vs 76, queue_stats 190 vs 172), and aiomysql is
    # PyMySQL underneath: the same value conversions and the same exception classes as the sync
    # client, so the error mapping above serves both.
    def owns_async(self, connection: object) -> bool:
        return type(connection).__module__.startswith("aiomysql")

    async def connect_async(self, dsn: str) -> AsyncConnection:
        """connect's twin: with several hosts, the first that answers and is writable."""
        aiomysql = self.import_driver(asynchronous=True)
        import pymysql
        from pymysql.constants import CLIENT

        candidates = mysql_connect_candidates(dsn)
        failures = _HostFailures(dsn)
        for args in candidates:
            unsupported = sorted({"read_timeout", "write_timeout"} & set(args))
            if unsupported:
                raise errors.UnsupportedDsnError(f"aiomysql has no MySQL DSN option {unsupported[0]!r}")
            args["db"] = args.pop("database")
            args["conv"] = _conversions()
            args["client_flag"] = CLIENT.SESSION_TRACK  # see take_expired
            ssl_files = {key: args.pop(key) for key in ("ssl_ca", "ssl_cert", "ssl_key") if key in args}
            if ssl_files:
                import ssl

                context = ssl.create_default_context(cafile=ssl_files.get("ssl_ca"))
                if "ssl_cert" in ssl_files:
                    context.load_cert_chain(ssl_files["ssl_cert"], ssl_files.get("ssl_key"))
                args["ssl"] = context
            if len(candidates) == 1:  # the server's own error
                with self.connection_failures(dsn):
                    return await aiomysql.connect(**args)
            connection = None
            try:
                connection = await aiomysql.connect(**args)
                async with connection.cursor() as cur:
                    await cur.execute("SELECT @@global.read_only")
                    (read_only,) = await cur.fetchone()
            except pymysql.MySQLError as exc:
                if connection is not None:
                    connection.close()
                failures.add(args, exc)
                continue
            if not read_only:
                return connection
            connection.close()
            failures.add(args, None)
        scrub_exception(failures.last, dsn)
        raise failures.error() from failures.last

    def connect_error(self, exc: BaseException, dsn: str) -> errors.QueueError | None:
        """A PyMySQL error raised while connecting (aiomysql raises PyMySQL's) as
        ConnectionFailedError, its reason from the error code."""
        import pymysql

        if not isinstance(exc, pymysql.MySQLError):
            return None
        return connection_failed(_connect_refusal(exc), _describe(exc), dsn)

    async def begin_async(self, connection: AsyncConnection) -> None:
        await connection.begin()

    # -- statements ------------------------------------------------------
    def run(self, connection: Connection, name: Statement, params: Params) -> list[Row]:
        return self.run_sets(connection, name, params)[0]

    def run_sets(self, connection: Connection, name: Statement, params: Params) -> list[list[Row]]:
        """Runs a named CALL and returns the rows of each result set it sends (at least one list)."""
        cur = connection.cursor()
        try:
            with self._driver_errors():
                cur.execute(self.statement(name), _long_texts(params))
                sets = [_by_name(name, cur.description, list(cur.fetchall())) if cur.description else []]
                while cur.nextset():  # a CALL ends with a status result without rows
                    if cur.description:
                        sets.append(_by_name(name, cur.description, list(cur.fetchall())))
            return sets
        finally:
            cur.close()

    def _self_contained(self, name: Statement, connection: Connection | AsyncConnection) -> bool:
        return (
            name in self.self_contained_on_mariadb
            and bool(connection.get_autocommit())
            and "MariaDB" in str(connection.get_server_info())
        )

    def run_in_own_transaction(
        self, connection: Connection, name: Statement, params: Params, all_sets: bool = False
    ) -> list[Row] | list[list[Row]]:
        if self._self_contained(name, connection):
            return (self.run_sets if all_sets else self.run)(connection, name, params)
        if not _multi_statements(connection):
            return super().run_in_own_transaction(connection, name, params, all_sets)
        with self._driver_errors():
            try:
                cur = connection.cursor()
                try:
                    cur.execute(_one_trip(self.statement(name)), _long_texts(params))
                    sets = [_by_name(name, cur.description, list(cur.fetchall()))] if cur.description else []
                    while cur.nextset():
                        if cur.description:
                            sets.append(_by_name(name, cur.description, list(cur.fetchall())))
                finally:
                    cur.close()
            except BaseException:
                with contextlib.suppress(Exception):  # a lost connection has nothing to roll back
                    connection.rollback()
                raise
        return _own_result(sets, all_sets)

    async def run_in_own_transaction_async(
        self, connection: AsyncConnection, name: Statement, params: Params, all_sets: bool = False
    ) -> list[Row] | list[list[Row]]:
        if self._self_contained(name, connection):
            return await (self.run_sets_async if all_sets else self.run_async)(connection, name, params)
        if not _multi_statements(connection):
            return await super().run_in_own_transaction_async(connection, name, params, all_sets)
        with self._driver_errors():
            try:
                cur = await connection.cursor(_quiet_cursor())
                try:
                    await cur.execute(_one_trip(self.statement(name)), _long_texts(params))
                    sets = (
                        [_by_name(name, cur.description, list(await cur.fetchall()))]
                        if cur.description
                        else []
                    )
                    while await cur.nextset():
                        if cur.description:
                            sets.append(_by_name(name, cur.description, list(await cur.fetchall())))
                finally:
                    await cur.close()
            except BaseException:
                with contextlib.suppress(Exception):  # a lost connection has nothing to roll back
                    await connection.rollback()
                raise
        return _own_result(sets, all_sets)

    async def run_async(self, connection: AsyncConnection, name: Statement, params: Params) -> list[Row]:
        return (await self.run_sets_async(connection, name, params))[0]

    async def run_sets_async(
        self, connection: AsyncConnection, name: Statement, params: Params
    ) -> list[list[Row]]:
        """run_sets on an aiomysql connection: every result set read (nextset) before the next
        statement, the same errors (aiomysql raises PyMySQL's)."""
        cur = await connection.cursor(_quiet_cursor())
        try:
            with self._driver_errors():
                await cur.execute(self.statement(name), _long_texts(params))
                sets = [
                    _by_name(name, cur.description, list(await cur.fetchall())) if cur.description else []
                ]
                while await cur.nextset():
                    if cur.description:
                        sets.append(_by_name(name, cur.description, list(await cur.fetchall())))
            return sets
        finally:
            await cur.close()

    @contextlib.contextmanager
    def _driver_errors(self) -> Iterator[None]:
        """Raises the pyqueue_sql exception for a PyMySQL error raised inside (the sync and the
        async paths alike: aiomysql raises PyMySQL's), and any other error as it is."""
        import pymysql

        try:
            yield
        except pymysql.MySQLError as exc:
            mapped = self._driver_error(exc)
            if mapped is None:
                raise
            raise mapped from exc

    def _driver_error(self, exc: BaseException) -> errors.QueueError | None:
        """The pyqueue_sql exception for a PyMySQL error, or None to raise it as it is."""
        code = exc.args[0] if exc.args else None
        message = exc.args[1] if len(exc.args) > 1 else str(exc)
        serialization = self.serialization_error(exc)
        if serialization is not None:
            return serialization
        mapped = self.routine_error(message)
        if mapped is not None:
            return mapped
        if code in _BAD_VALUE:
            return errors.InvalidArgumentError(message)
        if code in _ACCESS_DENIED:  # an account without the capability
            return errors.PermissionDeniedError(message)
        if code == 1318:  # the procedure exists with another number of arguments
            return errors.InvalidArgumentError(
                f"{message}: the installed schema is of another release than this client "
                f"(run `pyqueue-sql migrate`)"
            )
        if code in (1305, 1146):  # procedure / table does not exist
            return errors.SchemaNotInstalledError(
                f"pyqueue-sql is not installed in this database (run `pyqueue-sql migrate`): {message}"
            )
        return None

    # -- errors ----------------------------------------------------------
    # "Connection was killed" (1927, MariaDB) comes before the socket closes, PyMySQL still thinks
    # the connection open
    lost_connection_codes = _CONNECTION_LOST

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        import pymysql

        return (pymysql.err.OperationalError, pymysql.err.InterfaceError, errors.ConnectionFailedError)

    def is_connection_lost(self, exc: BaseException) -> bool:
        """Only the client error codes of a lost connection (an OperationalError is also what a
        lock wait timeout or a refused statement raise)."""
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        return isinstance(exc, self.connection_errors()) and code in _CONNECTION_LOST

    def serialization_error(self, exc: BaseException) -> errors.SerializationError | None:
        import pymysql

        # Only a deadlock rolls the whole transaction back. A lock wait timeout (1205) rolls
        # back just the statement (innodb_rollback_on_timeout is off by default) and leaves
        # the transaction open, so it is not this error: running it all again could write twice.
        # InnoDB reports a deadlock on a table's AUTO-INC lock (an insert waiting for it while a
        # multi-row INSERT ... SELECT holds it, innodb_autoinc_lock_mode=1) as 1467, "Failed to
        # read auto-increment value from storage engine", with the transaction rolled back whole
        # (MDEV-33593): a deadlock like 1213, as the routines' retry handlers treat it.
        if isinstance(exc, pymysql.MySQLError) and exc.args and exc.args[0] in (1213, 1467):
            return errors.SerializationError(
                f"deadlock ({exc.args[0]}): the server rolled the statement's transaction back; "
                f"run the whole transaction again: {exc.args[1] if len(exc.args) > 1 else exc}"
            )
        return None


class MySQLCodec(Codec):
    """Arrays and batches as JSON (the procedures read them with JSON_TABLE), durations as decimal
    seconds, times as UTC wall-clock DATETIMEs, several result sets for a combined call."""

    def duration(self, value: Duration, what: str) -> Decimal | None:
        delta = as_timedelta(value, what)
        return None if delta is None else Decimal(str(round(delta.total_seconds(), 6)))

    def time(self, value: dt.datetime | dt.timedelta | None, what: str) -> dt.datetime | None:
        aware = as_utc(value, what)
        return None if aware is None else aware.replace(tzinfo=None)

    @overload
    def read_time(self, value: dt.datetime) -> dt.datetime: ...
    @overload
    def read_time(self, value: None) -> None: ...
    def read_time(self, value: dt.datetime | None) -> dt.datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)

    def read_payload(self, value: object) -> JSONValue:
        """Stored JSON text as its value (dialects/jsontext.py: every JSON the server accepts is
        read; what still cannot be is an UnreadableJSON, never an error of the whole call)."""
        if isinstance(value, (bytes, bytearray)):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError as exc:
                return UnreadableJSON(f"not UTF-8: {exc}", value.decode("utf-8", "replace"))
        return load_json(value) if isinstance(value, str) else value

    def kinds(self, kinds: Sequence[str] | None) -> str | None:
        checked = super().kinds(kinds)
        return None if checked is None else json.dumps(checked, ensure_ascii=False)

    def text_array(self, values: Sequence[str | None]) -> str:
        """A JSON array (the procedures read arrays with JSON_TABLE)."""
        return encode_json(list(values))

    def batch(self, items: Sequence[BatchItem]) -> Params:
        return {"messages": encode_json(self._batch_messages(items))}

    def grouped_batch(self, items: Sequence[BatchItem], groups: Sequence[str | None]) -> Params:
        """batch's array of messages, each object with its group as a member (null: no group)."""
        messages = self._batch_messages(items)
        for message, group in zip(messages, groups):
            message["group"] = group
        return {"messages": encode_json(messages)}

    def topic_batch(self, topics: Sequence[str | None], items: Sequence[BatchItem]) -> Params:
        """batch's array of messages, each object with its topic as a member."""
        messages = self._batch_messages(items)
        for message, topic in zip(messages, topics):
            message["topic"] = topic
        return {"messages": encode_json(messages)}

    @staticmethod
    def _batch_messages(items: Sequence[BatchItem]) -> list[dict[str, object]]:
        """The objects of a batch's JSON array of messages, as the batch procedures read them
        (a payload that is not JSON is refused when the array is encoded, before anything is sent)."""
        messages = []
        for key, kind, payload, run_at, priority in items:
            messages.append(
                {
                    "p_key": key,
                    "p_kind": kind,
                    "payload": payload,
                    "run_at": None if run_at is None else run_at.strftime("%Y-%m-%d %H:%M:%S.%f"),
                    "priority": priority,
                }
            )
        return messages

    def read_commit_reserve(self, sets: list[list[Row]]) -> tuple[RowValue, list[Row]]:
        """The procedure sends the reserved rows first and the commit's result as its last set."""
        return sets[-1][0][0], [row for part in sets[:-1] for row in part]


class MySQLAdmin(Admin):
    """Backtick-quoted grants, the grant tables (mysql.procs_priv), what tells MariaDB from MySQL,
    and test databases emptied with DELETE."""

    def parse_grantee(self, text: str) -> tuple[str, str | None]:
        """user@host (host '%' when none is given); a trailing @ with no host (name@) names a
        MariaDB role (host '')."""
        user, at, host = text.rpartition("@")
        if not at:
            user, host = text, "%"
        for what, value, limit in (("user", user, 80), ("host", host, 255)):
            if what == "host" and value == "":
                continue  # a role
            if not value or not _NAME.fullmatch(value) or len(value) > limit:
                raise errors.InvalidArgumentError(
                    f"MySQL account {what} {value!r} must be 1-{limit} characters without quotes, "
                    "backticks or control characters"
                )
        return user, host

    def grantee(self, name: str, host: str | None) -> str:
        """`user`@`host`, or `role` for a MariaDB role (host '')."""
        if host == "":
            return quote_name(name)
        return f"{quote_name(name)}@{quote_name(host or '%')}"

    def identifier(self, *parts: str) -> str:
        return ".".join(quote_name(part) for part in parts)

    @contextlib.contextmanager
    def no_account_creation(self, connection: Connection) -> Iterator[None]:
        """MariaDB creates a password-less account on a GRANT to a missing one unless sql_mode has
        NO_AUTO_CREATE_USER (in its default, but a session may lack it): the block adds it for the
        session and puts the session's sql_mode back afterwards. MySQL 8 never creates one."""
        cur = connection.cursor()
        try:
            cur.execute(self.dialect.statement(statements.SESSION_SQL_MODE))
            (saved,) = cur.fetchone()
            cur.execute(self.dialect.statement(statements.FORBID_ACCOUNT_CREATION))
            try:
                yield
            finally:
                with contextlib.suppress(
                    Exception
                ):  # a lost connection: the error that matters is the block's
                    cur.execute(self.dialect.statement(statements.SET_SESSION_SQL_MODE), (saved,))
        finally:
            cur.close()

    def shadowing_grantees(self, connection: Connection) -> frozenset[str]:
        """The accounts holding CREATE TEMPORARY TABLES on this database (by name or pattern) or
        globally, in GRANTEE's format 'user'@'host', which grantee() can be compared with after
        replacing its backticks by quotes. MySQL and MariaDB resolve a session's temporary table
        before the procedures' own tables, even inside SQL SECURITY DEFINER."""
        cur = connection.cursor()
        try:
            cur.execute(self.dialect.statement(statements.TEMPORARY_TABLE_GRANTEES))
            return frozenset(str(row[0]) for row in cur.fetchall())
        finally:
            cur.close()

    def public_role(self, connection: Connection) -> tuple[str, str] | None:
        """MariaDB's PUBLIC (10.11+), shown in the grant tables as 'PUBLIC'@''; MySQL has none."""
        return ("PUBLIC", "") if self.server_flavor(connection) == "mariadb" else None

    # -- migrations (pyqueue_sql.migrate) --------------------------------
    def server_flavor(self, connection: Connection) -> str:
        """'mariadb' or 'mysql', from the server's version string."""
        cur = connection.cursor()
        try:
            cur.execute(migration_queries(self.dialect.name)["server_version"])
            (version,) = cur.fetchone()
        finally:
            cur.close()
        if isinstance(version, (bytes, bytearray)):
            version = version.decode()
        return "mariadb" if "mariadb" in str(version).lower() else "mysql"

    def replaces_routines_in_place(self, connection: Connection) -> bool:
        """MariaDB has CREATE OR REPLACE PROCEDURE/FUNCTION; MySQL 8.0 has not (docs/operations.md,
        Upgrading)."""
        return self.server_flavor(connection) == "mariadb"

    def routine_regrants(
        self,
        saved: Iterable[Sequence[RowValue]],
        current: Iterable[Sequence[RowValue]],
    ) -> list[str]:
        """Re-creating a procedure (DROP + CREATE) drops its grants. ``saved`` and ``current`` are
        rows (user, host, routine, routine_type, privileges) of mysql.procs_priv, before the run
        and now: every saved grant that is not held now. Names are validated and backtick-quoted;
        host '' is a MariaDB role, granted without a host part. Run them inside
        no_account_creation(); a GRANT on a routine that does not exist fails with 1305 (the
        caller skips it)."""
        now = {(u, h, str(r).lower(), str(t).upper(), _privilege_set(p)) for u, h, r, t, p in current}
        template = migration_queries(self.dialect.name)["regrant_routine"]
        out: list[str] = []
        for user, host, routine, routine_type, privileges in saved:
            granted = _privilege_set(privileges)
            kind = str(routine_type).upper()
            if (user, host, str(routine).lower(), kind, granted) in now:
                continue
            chosen = [_ROUTINE_PRIVILEGES[p] for p in _ROUTINE_PRIVILEGES if p in granted]
            if not chosen or kind not in ("PROCEDURE", "FUNCTION"):
                continue
            statement = template.format(
                privilege=", ".join(chosen),
                routine_type=kind,
                routine=self.identifier(str(routine)),
                role=self.grantee(user, host),
                grant_option=" WITH GRANT OPTION" if "grant" in granted else "",
            )
            if statement not in out:
                out.append(statement)
        return out

    # -- test databases (pyqueue_sql.testing) ----------------------------
    # The tables whose AUTO_INCREMENT ids a routine answers (worker ids, the ingest table's rows and
    # rejects): after_emptying_database puts them back at 1. The others' (message and history ids)
    # are the schema's own: their counters go on, since an ALTER TABLE costs some 15 ms a table.
    answered_counters = ("pyqueue_worker", "queue_ingest", "pyqueue_ingest_reject")

    def empty_database_statements(self, connection: Connection, kept_table: str) -> list[str]:
        """DELETE of every table but kept_table in one transaction, the foreign key checks off for
        the session meanwhile."""
        tables = [
            r[0]
            for r in fetch_all(
                connection,
                "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() "
                "AND table_type = 'BASE TABLE'",
            )
            if r[0] != kept_table
        ]
        return [
            "SET SESSION foreign_key_checks = 0; START TRANSACTION; "
            + " ".join(f"DELETE FROM `{t}`;" for t in sorted(tables))
            + " COMMIT; SET SESSION foreign_key_checks = 1",
        ]

    def after_emptying_database(self, connection: Connection) -> None:
        names = ", ".join(f"'{t}'" for t in self.answered_counters)
        for (table,) in fetch_all(
            connection,
            "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() "
            f"AND table_name IN ({names}) AND auto_increment > 1",
        ):
            fetch_all(connection, f"ALTER TABLE `{table}` AUTO_INCREMENT = 1")

    def database_fingerprint(self, connection: Connection) -> object:
        """The number of tables and routines, and of the routine, table and database grants where
        the account may read them."""
        rows = fetch_all(
            connection,
            "SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()), "
            "       (SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DATABASE())",
        )
        with contextlib.suppress(Exception):  # grants, where the account may read them
            rows += fetch_all(
                connection,
                "SELECT (SELECT COUNT(*) FROM mysql.procs_priv WHERE Db = DATABASE()), "
                "       (SELECT COUNT(*) FROM mysql.tables_priv WHERE Db = DATABASE()), "
                "       (SELECT COUNT(*) FROM mysql.db WHERE Db = DATABASE())",
            )
        return rows

    def close_other_sessions(self, connection: Connection) -> None:
        for (pid,) in fetch_all(
            connection,
            "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()",
        ):
            with contextlib.suppress(Exception):
                fetch_all(connection, f"KILL CONNECTION {int(pid)}")
