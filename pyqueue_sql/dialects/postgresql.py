"""PostgreSQL through psycopg 3: LISTEN/NOTIFY wakeups, transactional DDL, psycopg.sql grants."""

from __future__ import annotations

import functools
import json
import re
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import errors, statements
from ..queries import split_script
from ..statements import Statement
from .base import (
    Admin,
    AsyncConnection,
    BatchItem,
    Codec,
    Composed,
    Connection,
    Cursor,
    Dialect,
    JdbcDriver,
    JSONValue,
    Listener,
    Params,
    Row,
    connection_failed,
    encode_json,
    expired_from_json,
    fetch_all,
    in_declared_order,
    note_expired,
    strip_driver,
    without_secrets,
)
from .jsontext import UnreadableJSON, load_json

if TYPE_CHECKING:
    import psycopg

INSTALL_NOTE = """\
-- pyqueue-sql install script (PostgreSQL). Run it in ONE transaction:
--   psql --single-transaction -v ON_ERROR_STOP=1 -f this.sql
-- (Flyway and Liquibase run each migration in a transaction; in a sqitch
-- deploy script keep the template's BEGIN; and COMMIT; around it.)
-- Its routines are SECURITY DEFINER and EXECUTE is revoked from PUBLIC at the
-- end of the script: a run in autocommit mode that stops half-way would leave
-- them callable by every role until the script is run to its end.
"""

_NO_FUNCTION = re.compile(r"function ([\w.\"]+)\((.*)\) does not exist", re.DOTALL)
_ARGUMENT = re.compile(r"%\((\w+)\)[sb](::[\w\[\] ]+)?")  # %(name)s, or %(name)b (binary: arrays)
# Whether a routine of that name is visible on the search_path (one round trip, autocommit only).
_ROUTINE_EXISTS = (
    "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc"
    " WHERE proname = %s AND pg_catalog.pg_function_is_visible(oid))"
)


# json/jsonb values (a payload, a result) on the connections this client opens: psycopg hands its
# loads the text as bytes; load_json reads the decoded text with the C scanner at once (about 8x
# faster a payload than json.loads, which counts once a reserved message: bench/README.md, Worker
# CPU), and whatever that refuses (a 4,500-digit integer, 2,000 levels of nesting) the slow way,
# so that a row never fails the fetch of the others (dialects/jsontext.py).
def _load_json(data: bytes | bytearray | memoryview) -> JSONValue:
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        return UnreadableJSON(f"not UTF-8: {exc}", bytes(data).decode("utf-8", "replace"))
    return load_json(text)


@functools.cache
def _json_text_loader() -> type:
    """psycopg's loader of json and jsonb values in text form (the rows of every statement here):
    load_json called from the loader's own frame. Through set_json_loads a payload costs three
    Python calls (psycopg's load, _load_json, load_json), which count once a reserved message;
    here two. Text that is not UTF-8 takes _load_json's way, so that the values are the same (an
    UnreadableJSON included)."""
    from psycopg.adapt import Loader

    class JsonTextLoader(Loader):
        def load(self, data: bytes | bytearray | memoryview) -> JSONValue:
            try:
                return load_json(str(data, "utf-8"))
            except UnicodeDecodeError:
                return _load_json(data)

    return JsonTextLoader


# The names PostgreSQL gives the UTC zone itself (no offset ever, no daylight saving time).
_UTC_NAMES = frozenset(
    name.encode() for name in ("Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu", "UCT", "Universal", "Zulu")
)
_SET_UTC = "SET TimeZone = 'UTC'"


def _utc_by_name(connection: Any) -> bool:
    """Whether a new autocommit connection's session zone is UTC under another name (a server
    whose timezone is 'Etc/UTC', as Debian's and the Docker images' initdb set it): psycopg reads
    each timestamptz of such a session into a datetime in ZoneInfo('Etc/UTC'), converted with
    astimezone, and in datetime.timezone.utc only when the session's zone is named 'UTC', about
    0.5 µs a value less (two a reserved message: bench/README.md, Worker CPU). The connect then
    names the same zone 'UTC' (SET TimeZone): the same instants and offsets, the same SQL, values
    whose tzinfo is timezone.utc. A session in any other zone is left as it is; so is a connection
    opened outside autocommit, where the SET would belong to its first transaction."""
    return connection.autocommit and connection.pgconn.parameter_status(b"TimeZone") in _UTC_NAMES


def _read_json_with(connection: Any, psycopg: Any) -> None:
    """A connection's json and jsonb values read by load_json (its text form by _json_text_loader)."""
    psycopg.types.json.set_json_loads(_load_json, connection)
    for name in ("json", "jsonb"):
        connection.adapters.register_loader(name, _json_text_loader())


# A refused connection's reason, from the server's (English) message: FATAL's text, as libpq puts it.
_CONNECT_REFUSALS = (
    ("unknown_database", re.compile(r'FATAL:\s+database ".*" does not exist')),
    ("authorization", re.compile(r"FATAL:\s+permission denied for database")),
    (
        "authentication",
        re.compile(
            r'FATAL:\s+(?:role ".*" does not exist|role ".*" is not permitted to log in|'
            r"password authentication failed|.*authentication failed for user|no pg_hba\.conf entry|"
            r"pg_hba\.conf rejects connection)|fe_sendauth: no password supplied|SCRAM"
        ),
    ),
)

# libpq's refusal of a DSN's value, before any connection is tried (psycopg raises it as an
# OperationalError): "invalid integer value "abc" for connection option "port"", "invalid port number".
_BAD_CONNINFO = re.compile(
    r"for connection option|invalid port number|invalid sslmode value|invalid \w+ value"
)

# The server process serving this transaction (a pooler may give each transaction another).
_BACKEND_PID = "SELECT pg_catalog.pg_backend_pid()"


def _backend_pid(connection: Connection) -> int:
    with connection.cursor() as cur:
        cur.execute(_BACKEND_PID)
        return cur.fetchone()[0]


# The NOTICE pyqueue__expire sends the session of a reserve or pop that ended an expired message
# (its DETAIL: a JSON object), noted for Dialect.take_expired; other notices are left alone.
EXPIRED_NOTICE = "pyqueue:expired"


def _hear_expiries(connection: Any) -> None:
    ref = weakref.ref(connection)

    def heard(diag: Any) -> None:
        if diag.message_primary != EXPIRED_NOTICE:
            return
        conn = ref()
        if conn is None:
            return
        try:
            note = json.loads(diag.message_detail or "")
        except ValueError:
            return
        note_expired(conn, expired_from_json(note))

    connection.add_notice_handler(heard)


class PostgreSQL(Dialect):
    name = "postgresql"
    supports_listen = True
    sqlalchemy_dialect = "postgresql+psycopg"
    default_port = 5432
    transactional_ddl = True
    session_migration_lock = False
    grants_schema_usage = True
    grant_tables = {"ingest": (("INSERT", "queue_ingest"), ("SELECT", "queue_ingest"))}
    # The routines that take a reservation token take it as text and, in a second signature, as uuid
    # (sql/postgresql/routines/01_preamble.sql, "Tokens").
    drop_database_statement = "DROP DATABASE IF EXISTS {name} WITH (FORCE)"  # a test's leftover sessions
    routine_signatures = {
        name: (args.format(t="text"), args.format(t="uuid"))
        for name, args in {
            "queue_commit": "text, text, text, {t}",
            "queue_rollback": "text, text, text, {t}, interval",
            "queue_snooze": "text, text, text, {t}, interval",
            "queue_fail": "text, text, text, {t}, interval, text",
            "queue_give_up": "text, text, text, {t}, text",
            "queue_extend": "text, text, text, {t}, interval",
            "queue_move": "text, text, text, {t}, text, jsonb",
            "queue_commit_reserve": "text, text, text, {t}, text, interval, integer, text[]",
            "queue_commit_result": "text, text, text, {t}, jsonb",
            "queue_renew": "text, text, text, {t}, interval",
            "queue_cancel_held": "text, text, text, {t}",
            "queue_set_progress": "text, text, text, {t}, jsonb",
        }.items()
    }
    ingest_counts_by_session_tag = True
    install_note = INSTALL_NOTE
    driver = ("psycopg", "postgresql")
    async_driver = ("psycopg", "postgresql")
    jdbc = JdbcDriver(
        product="PostgreSQL",
        driver_class="org.postgresql.Driver",
        url_scheme="postgresql",
        jar="/usr/share/java/postgresql.jar",
        jar_marker="postgresql",
        debian_package="libpostgresql-jdbc-java",
        write_options=(
            ("reWriteBatchedInserts", "true"),  # one multi-row INSERT per 128 rows
            ("stringtype", "unspecified"),  # strings may land in jsonb/timestamptz columns
        ),
        # pgJDBC adds the server's context ("  Where: PL/pgSQL function ...") and, for a batch,
        # "  Call getNextException to see other errors in the batch." to the message's line.
        message_trailers=("  Where:", "  Call getNextException"),
    )

    def __init__(self) -> None:
        super().__init__(PostgreSQLCodec(), PostgreSQLListener(self), PostgreSQLAdmin(self))

    # -- connections -----------------------------------------------------
    # prepare_threshold=None: psycopg never prepares a statement (by default it does at a statement's
    # fifth execution). A prepared statement lives in one server session, and a transaction pooler
    # (PgBouncer before 1.21, or any without prepared-statement tracking) hands the next transaction
    # to another session: "prepared statement _pg3_0 does not exist / already exists". Our statements
    # are one routine call each, whose plan is trivial and whose inner statements PL/pgSQL caches per
    # session anyway: preparing measured within noise (`python -m bench pgbouncer` at 4da0bbf, part
    # "prepare"), so the client works through a pooler without being told.
    def connect(self, dsn: str, autocommit: bool = True) -> Connection:
        psycopg = self.import_driver()

        with self.connection_failures(dsn):
            connection = psycopg.connect(strip_driver(dsn), autocommit=autocommit, prepare_threshold=None)
        _read_json_with(connection, psycopg)
        _hear_expiries(connection)
        if _utc_by_name(connection):
            try:
                connection.execute(_SET_UTC)
            except psycopg.Error:  # (a proxy that refuses it) the zone stays as it was named
                pass
        return connection

    def owns(self, connection: object) -> bool:
        return type(connection).__module__.startswith("psycopg") and not self.owns_async(connection)

    def owns_async(self, connection: object) -> bool:
        if not type(connection).__module__.startswith("psycopg"):
            return False
        import psycopg

        return isinstance(connection, psycopg.AsyncConnection)

    async def connect_async(self, dsn: str) -> AsyncConnection:
        psycopg = self.import_driver(asynchronous=True)

        with self.connection_failures(dsn):
            connection = await psycopg.AsyncConnection.connect(
                strip_driver(dsn), autocommit=True, prepare_threshold=None
            )
        _read_json_with(connection, psycopg)
        _hear_expiries(connection)
        if _utc_by_name(connection):
            try:
                await connection.execute(_SET_UTC)
            except psycopg.Error:  # (a proxy that refuses it) the zone stays as it was named
                pass
        return connection

    def connect_error(self, exc: BaseException, dsn: str) -> errors.QueueError | None:
        """psycopg's OperationalError (the server refused or could not be reached) as
        ConnectionFailedError, its reason read from the server's message (libpq gives a refused
        connection no SQLSTATE); its ProgrammingError (a malformed DSN) as UnsupportedDsnError."""
        import psycopg

        message = str(exc)
        if isinstance(exc, psycopg.OperationalError) and not _BAD_CONNINFO.search(message):
            reason = next((r for r, p in _CONNECT_REFUSALS if p.search(message)), "unreachable")
            return connection_failed(reason, message, dsn)
        if isinstance(exc, (psycopg.ProgrammingError, psycopg.OperationalError)):
            return errors.UnsupportedDsnError(
                f"not a usable PostgreSQL DSN: {without_secrets(' '.join(message.split()), dsn)}"
            )
        return None

    async def begin_async(self, connection: AsyncConnection) -> None:
        await connection.set_autocommit(False)

    async def commit_async(self, connection: AsyncConnection) -> None:
        await connection.commit()
        await connection.set_autocommit(True)

    async def rollback_async(self, connection: AsyncConnection) -> None:
        await connection.rollback()
        await connection.set_autocommit(True)

    def begin(self, connection: Connection) -> None:
        # psycopg starts a transaction with the first statement once autocommit is off.
        connection.autocommit = False

    def commit(self, connection: Connection) -> None:
        connection.commit()
        connection.autocommit = True

    def rollback(self, connection: Connection) -> None:
        connection.rollback()
        connection.autocommit = True

    # -- statements ------------------------------------------------------
    def run(self, connection: Connection, name: Statement, params: Params) -> list[Row]:
        import psycopg

        try:
            with connection.cursor() as cur:
                cur.execute(self.statement(name), params)
                if not _has_rows(cur):
                    return []
                rows = cur.fetchall()
                return in_declared_order(name, _column_names(cur), rows) if name.columns else rows
        except psycopg.Error as exc:
            routine = _missing_routine(exc)
            exists = None if routine is None else _routine_exists(connection, routine)
            mapped = self._driver_error(name, exc, exists)
            if mapped is None:
                raise
            raise mapped from exc

    async def run_async(self, connection: AsyncConnection, name: Statement, params: Params) -> list[Row]:
        """run on a psycopg AsyncConnection: the same statement, the same errors."""
        import psycopg

        try:
            async with connection.cursor() as cur:
                await cur.execute(self.statement(name), params)
                if not _has_rows(cur):
                    return []
                rows = await cur.fetchall()
                return in_declared_order(name, _column_names(cur), rows) if name.columns else rows
        except psycopg.Error as exc:
            routine = _missing_routine(exc)
            exists = None if routine is None else await _routine_exists_async(connection, routine)
            mapped = self._driver_error(name, exc, exists)
            if mapped is None:
                raise
            raise mapped from exc

    def _driver_error(
        self, name: Statement, exc: psycopg.Error, exists: bool | None
    ) -> errors.QueueError | None:
        """The pyqueue_sql exception for a psycopg error of the named statement, or None to raise it
        as it is. exists: whether the routine an UndefinedFunction names is in the catalog (None:
        not known)."""
        from psycopg import errors as pgerrors

        if isinstance(exc, (pgerrors.SerializationFailure, pgerrors.DeadlockDetected)):
            return self.serialization_error(exc)
        if isinstance(exc, pgerrors.UndefinedFunction):
            return _undefined_function(self.statement(name), exc, exists)
        if isinstance(exc, pgerrors.UndefinedTable):
            if "queue_" in str(exc) or "pyqueue" in str(exc):
                return _not_installed(exc.diag.message_primary)
            return None
        if isinstance(exc, pgerrors.InsufficientPrivilege):  # a role without the capability
            return errors.PermissionDeniedError(str(exc.diag.message_primary))
        mapped = self.routine_error(exc.diag.message_primary)
        if mapped is not None:
            return mapped
        if isinstance(exc, pgerrors.InvalidTextRepresentation) and "type uuid" in str(exc):
            # a reservation token that is not a UUID: the words of MySQL's routines for it
            return errors.InvalidArgumentError("token is malformed")
        if isinstance(exc, pgerrors.InvalidTextRepresentation) and "json" in str(exc):
            return errors.InvalidPayloadError(str(exc.diag.message_primary))
        if isinstance(exc, pgerrors.UntranslatableCharacter) and "JSON" in (exc.diag.context or ""):
            # jsonb cannot hold the escape \u0000 (a NUL in a JSON string)
            return errors.InvalidPayloadError(
                f"{exc.diag.message_primary}: {exc.diag.message_detail or ''}".rstrip(": ")
            )
        if isinstance(exc, pgerrors.DataError):  # a value that does not fit its parameter's type
            return errors.InvalidArgumentError(str(exc.diag.message_primary))
        return None

    def run_script(self, cursor: Cursor, text: str) -> None:
        """Runs the whole script in one execute (psycopg sends a parameterless script as it is)."""
        if split_script(text):  # comments only: psycopg would refuse an empty query
            cursor.execute(text)

    def serialization_error(self, exc: BaseException) -> errors.SerializationError | None:
        if getattr(exc, "sqlstate", None) in ("40001", "40P01"):
            diag = getattr(exc, "diag", None)
            what = "deadlock" if exc.sqlstate == "40P01" else "serialization failure"
            return errors.SerializationError(
                f"{what} ({exc.sqlstate}): the server rolled the transaction back, nothing of it was kept; "
                f"run the whole transaction again: {diag.message_primary if diag is not None else exc}"
            )
        return None

    def connection_errors(self) -> tuple[type[BaseException], ...]:
        import psycopg

        return (psycopg.OperationalError, psycopg.InterfaceError, errors.ConnectionFailedError)


class PostgreSQLCodec(Codec):
    """Arrays as lists (text[], jsonb[]...), a batch as arrays side by side."""

    def batch(self, items: Sequence[BatchItem]) -> Params:
        run_ats = [ra for _, _, _, ra, _ in items]
        priorities = [pr for _, _, _, _, pr in items]
        return {
            "keys": [k for k, _, _, _, _ in items],
            "kinds": [kd for _, kd, _, _, _ in items],
            "payloads": [encode_json(p) for _, _, p, _, _ in items],
            "run_ats": None if all(r is None for r in run_ats) else run_ats,
            "priorities": None if all(p is None for p in priorities) else priorities,
        }

    def grouped_batch(self, items: Sequence[BatchItem], groups: Sequence[str | None]) -> Params:
        return {"groups": list(groups), **self.batch(items)}

    def topic_batch(self, topics: Sequence[str | None], items: Sequence[BatchItem]) -> Params:
        return {"topics": list(topics), **self.batch(items)}


class PostgreSQLListener(Listener):
    """LISTEN/NOTIFY through psycopg."""

    def listen(self, connection: Connection, channels: Sequence[str]) -> None:
        """LISTENs on each channel (names from queue_channel); autocommit connections only."""
        from psycopg import sql

        with connection.cursor() as cur:
            for channel in channels:
                cur.execute(
                    sql.SQL(self.dialect.statement(statements.LISTEN)).format(channel=sql.Identifier(channel))
                )

    def wait_for_notification(self, connection: Connection, timeout: float) -> list[tuple[str, str]]:
        return [(note.channel, note.payload) for note in connection.notifies(timeout=timeout, stop_after=1)]

    async def listen_async(self, connection: AsyncConnection, channels: Sequence[str]) -> None:
        """listen on a psycopg AsyncConnection."""
        from psycopg import sql

        async with connection.cursor() as cur:
            for channel in channels:
                await cur.execute(
                    sql.SQL(self.dialect.statement(statements.LISTEN)).format(channel=sql.Identifier(channel))
                )

    async def wait_for_notification_async(
        self, connection: AsyncConnection, timeout: float
    ) -> list[tuple[str, str]]:
        """wait_for_notification on a psycopg AsyncConnection."""
        return [
            (note.channel, note.payload) async for note in connection.notifies(timeout=timeout, stop_after=1)
        ]

    def shares_sessions(self, connection: Connection, dsn: str) -> bool:
        """Whether another client connection to dsn is served by the server session that served
        connection's last transaction: so a transaction (or statement) pooler such as PgBouncer's
        pool_mode = transaction stands between, and a LISTEN would stay behind in a session this
        client loses. Two live direct connections never share a backend; a pooler hands the idle
        session it just got back to the next client (PgBouncer's default, server_round_robin = 0).
        connection: autocommit, outside a transaction."""
        other = self.dialect.connect(dsn)
        try:
            return self.shares_session_with(connection, other)
        finally:
            other.close()

    def shares_session_with(self, connection: Connection, other: Connection) -> bool:
        """shares_sessions on a client connection already open to the same DSN (and idle): the
        worker's completer's, so that the check opens no connection of its own."""
        mine = _backend_pid(connection)
        return _backend_pid(other) == mine

    async def shares_sessions_async(self, connection: AsyncConnection, dsn: str) -> bool:
        """shares_sessions on a psycopg AsyncConnection."""
        async with connection.cursor() as cur:
            await cur.execute(_BACKEND_PID)
            mine = (await cur.fetchone())[0]
        other = await self.dialect.connect_async(dsn)
        try:
            async with other.cursor() as cur:
                await cur.execute(_BACKEND_PID)
                return (await cur.fetchone())[0] == mine
        finally:
            await other.close()


class PostgreSQLAdmin(Admin):
    """psycopg.sql for grants; the catalog (pg_class, pg_proc...) for test databases."""

    # -- test databases (pyqueue_sql.testing) ----------------------------
    def empty_database_statements(self, connection: Connection, kept_table: str) -> list[str]:
        """DELETE of every table but kept_table, children before their parents, and the schema's
        sequences back at 1, in one transaction."""
        tables = [
            r[0]
            for r in fetch_all(
                connection,
                "SELECT c.relname FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace "
                "AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
            )
            if r[0] != kept_table
        ]
        parents: dict[str, set[str]] = {}
        for child, parent in fetch_all(
            connection,
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND connamespace = current_schema()::regnamespace AND conrelid <> confrelid",
        ):
            parents.setdefault(child, set()).add(parent)
        ordered: list[str] = []
        left = set(tables)
        while left:  # a table goes once no table left refers to it
            ready = sorted(t for t in left if not any(t in parents.get(o, ()) for o in left if o != t))
            if not ready:
                ready = sorted(left)
            ordered += ready
            left -= set(ready)
        sequences = [
            r[0]
            for r in fetch_all(
                connection, "SELECT sequencename FROM pg_sequences WHERE schemaname = current_schema()"
            )
        ]
        return [
            "BEGIN; SET LOCAL synchronous_commit = off; "  # a test database: no flush to wait for
            + " ".join(f'DELETE FROM "{t}";' for t in ordered)
            + " ".join(f"SELECT setval('\"{q}\"', 1, false);" for q in sequences)
            + " COMMIT"
        ]

    def database_fingerprint(self, connection: Connection) -> list[Row]:
        """Every relation (any schema, temporary ones aside), routine and schema, and the grants
        on them and on the database."""
        return fetch_all(
            connection,
            "SELECT (SELECT count(*) || ':' || max(oid::bigint) || ':' "
            "               || md5(coalesce(string_agg(relacl::text, ',' ORDER BY oid), '')) "
            "        FROM pg_class WHERE relpersistence <> 't'), "
            "       (SELECT count(*) || ':' || coalesce(max(oid::bigint), 0) || ':' "
            "               || md5(coalesce(string_agg(proacl::text, ',' ORDER BY oid), '')) "
            "        FROM pg_proc WHERE pronamespace NOT IN "
            "              ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)), "
            "       (SELECT count(*) || ':' || md5(coalesce(string_agg(nspacl::text, ',' ORDER BY oid), '')) "
            "        FROM pg_namespace), "
            "       (SELECT datacl::text FROM pg_database WHERE datname = current_database())",
        )

    def close_other_sessions(self, connection: Connection) -> None:
        fetch_all(
            connection,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )

    # -- privileges ------------------------------------------------------
    def parse_grantee(self, text: str) -> tuple[str, str | None]:
        """The role name as it is."""
        if len(text.encode()) > 63:
            raise errors.InvalidArgumentError(f"PostgreSQL role names have at most 63 bytes: {text!r}")
        return text, None

    def grantee(self, name: str, host: str | None) -> Composed:
        from psycopg import sql

        return sql.Identifier(name)

    def identifier(self, *parts: str) -> Composed:
        from psycopg import sql

        return sql.Identifier(*parts)

    def keyword(self, text: str) -> Composed:
        from psycopg import sql

        return sql.SQL(text)

    def compose(self, template: str, **parts: Composed) -> Composed:
        from psycopg import sql

        return sql.SQL(template).format(**parts)

    def statement_text(self, statement: Composed, connection: Connection | None = None) -> str:
        return statement.as_string(connection)


def _undefined_function(statement: str, exc: psycopg.Error, exists: bool | None) -> errors.QueueError | None:
    """42883 for one of our routines (statement: the named statement that raised it): SchemaNotInstalledError only when no routine of that name is
    visible at all; a routine that exists but takes other argument types is an InvalidArgumentError
    that names the types the server saw. exists: what the catalog says (None: not asked)."""
    message = exc.diag.message_primary or str(exc)
    match = _NO_FUNCTION.match(message)
    if match is None:
        return _not_installed(message) if ("queue_" in message or "pyqueue" in message) else None
    routine, types = match.group(1).rsplit(".", 1)[-1].strip('"'), match.group(2)
    if not routine.startswith(("queue_", "pyqueue")):
        return None
    if exists is None:  # the transaction is aborted: judge by the types the server saw
        exists = _wrong_types(statement, types)
    if not exists:
        return _not_installed(message)
    return errors.InvalidArgumentError(
        f"no {routine} takes arguments of the types ({types}): pass str for names, keys and kinds "
        f"(a key may be an int), numbers for numbers; or the installed schema is of another release "
        f"than this client (run `pyqueue-sql migrate`)"
    )


def _not_installed(message: str) -> errors.SchemaNotInstalledError:
    return errors.SchemaNotInstalledError(
        f"pyqueue-sql is not installed in this database (run `pyqueue-sql migrate`), or it is "
        f"installed in a schema this role has no USAGE on or that is not on its search_path "
        f"(`pyqueue-sql grant` grants USAGE): {message}"
    )


def _column_names(cur: Cursor) -> tuple[bytes, ...]:
    """The names of the result's columns, as the server sent them (the result's own fields:
    cursor.description makes an object of each, ten times the cost)."""
    res = cur.pgresult
    return tuple(map(res.fname, range(res.nfields)))


def _has_rows(cur: Cursor) -> bool:
    """Whether the statement just run returned a result set (a SELECT, even of no rows). Read from
    the result's status: `cursor.description` builds a Column object per column at every access,
    about a tenth of the client's time for a one-message reserve."""
    from psycopg.pq import ExecStatus

    result = cur.pgresult
    return result is not None and result.status == ExecStatus.TUPLES_OK


def _missing_routine(exc: BaseException) -> str | None:
    """The name of one of our routines an UndefinedFunction error says does not exist, else None."""
    from psycopg import errors as pgerrors

    if not isinstance(exc, pgerrors.UndefinedFunction):
        return None
    match = _NO_FUNCTION.match(exc.diag.message_primary or str(exc))
    routine = match.group(1).rsplit(".", 1)[-1].strip('"') if match else ""
    return routine if routine.startswith(("queue_", "pyqueue")) else None


def _can_ask_catalog(connection: Connection | AsyncConnection) -> bool:
    """Only outside a transaction: an aborted one cannot be asked anything, and a caller's open
    one is not ours to touch."""
    from psycopg.pq import TransactionStatus

    return connection.info.transaction_status == TransactionStatus.IDLE


def _routine_exists(connection: Connection, routine: str) -> bool | None:
    """True/False from the catalog; None when the connection is inside a transaction."""
    if not _can_ask_catalog(connection):
        return None
    try:
        with connection.cursor() as cur:
            cur.execute(_ROUTINE_EXISTS, (routine,))
            return bool(cur.fetchone()[0])
    except Exception:  # noqa: BLE001 - the original error is the one to report
        return None


async def _routine_exists_async(connection: AsyncConnection, routine: str) -> bool | None:
    """_routine_exists on a psycopg AsyncConnection."""
    if not _can_ask_catalog(connection):
        return None
    try:
        async with connection.cursor() as cur:
            await cur.execute(_ROUTINE_EXISTS, (routine,))
            return bool((await cur.fetchone())[0])
    except Exception:  # noqa: BLE001 - the original error is the one to report
        return None


def _wrong_types(statement: str, types: str) -> bool:
    """Without the catalog: whether the server saw a type other than text for an argument that the
    named statement passes uncast (names, keys, kinds: sent as text, shown as `unknown` or `text`).
    True means the routine is there but was given a wrong type."""
    args = statement[statement.index("(") + 1 : statement.rindex(")")] if "(" in statement else ""
    seen = [t.strip() for t in types.split(",")] if types.strip() else []
    placeholders = _ARGUMENT.findall(args)
    if len(seen) != len(placeholders):
        return False
    return any(cast == "" and t not in ("unknown", "text") for (_, cast), t in zip(placeholders, seen))
