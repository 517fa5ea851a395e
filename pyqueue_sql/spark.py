"""Spark: bulk enqueue over plain JDBC, and history/stats reads for analytics.

    from pyqueue_sql import spark as pqs

    spark = pqs.session("nightly-reindex")          # local[2] + the JDBC jars
    pqs.enqueue(df, "postgresql://app@db/app", "reindex",
                key="doc_id", kind=F.lit("reindex"), payload=["doc_id", "version"])
    hist = pqs.read_history(spark, url, "reindex", since, until)

``enqueue`` appends the rows to the table ``queue_ingest``: with the dialect's
bulk statement (PostgreSQL COPY, MySQL/MariaDB LOAD DATA LOCAL INFILE) from
Spark's Python workers (the default in local mode on PostgreSQL), or with a plain
``df.write.jdbc(url, "queue_ingest", mode="append")`` with the options that
matter (``method=`` chooses). The database makes it safe: on PostgreSQL a
statement trigger turns every inserted row into a live message with dedup;
on MySQL/MariaDB the rows wait in ``queue_ingest`` until ``CALL
queue_ingest_flush(queue)``, which ``enqueue`` issues after the write. A
re-run job or a retried Spark task never enqueues a live message twice.
``enqueue`` returns what it did (IngestResult: rows, enqueued, duplicates,
rejected), and a bad row raises the pyqueue_sql error of its routine's code
(InvalidArgumentError, UnknownQueueError...), not a Java stack trace.

URLs: a pyqueue DSN (``postgresql://user:pw@host:5432/db``,
``mysql://user:pw@host:3306/db``) or a JDBC URL (``jdbc:postgresql://...``,
``jdbc:mysql://...`` / ``jdbc:mariadb://...``, user and password as URL
parameters or in ``properties``). MySQL/MariaDB go through the MariaDB
Connector/J driver with a ``jdbc:mysql://`` URL, so that Spark quotes names
with backticks. The flush and ``read_stats`` use pyqueue-sql's own Python
client (PyMySQL / psycopg), which the ``spark`` extra installs.

Times: PostgreSQL stores ``timestamptz``; MySQL stores UTC ``DATETIME(6)``,
which JDBC reads and writes in the JVM's time zone: ``session()`` sets the
Spark session time zone to UTC; run the JVM in UTC too
(``-Duser.timezone=UTC``) when the machine is not.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import glob
import logging
import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from . import dialects, errors, queries, statements
from .dialects.mysql import quote_name
from .errors import IngestRejectedError as IngestRejectedError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark import SparkContext
    from pyspark.sql import Column, DataFrame, SparkSession

# A column argument of ingest_frame and enqueue: a column's name, or a pyspark Column.
ColumnArg: TypeAlias = "str | Column"

INGEST_TABLE = "queue_ingest"
# queue_ingest's columns a row may fill (the rest are the table's own bookkeeping).
INGEST_COLUMNS = ("queue_name", "p_key", "p_kind", "payload", "run_at", "priority")
HISTORY_TABLE = "pyqueue_history"
HISTORY_COLUMNS = (
    "id",
    "queue_name",
    "p_key",
    "p_kind",
    "payload",
    "priority",
    "attempts",
    "created_at",
    "processed_at",
    "outcome",
)

# The JDBC driver class of each dialect (Dialect.jdbc).
DRIVERS = {cls.name: cls.jdbc.driver_class for cls in dialects.DIALECTS}
# Debian's libpostgresql-jdbc-java and libmariadb-java (scripts/spark-deps.sh installs them).
DEFAULT_JARS = tuple(cls.jdbc.jar for cls in dialects.DIALECTS)
JARS_ENV = "PYQUEUE_JDBC_JARS"

DEFAULT_BATCH_SIZE = 5000

log = logging.getLogger(__name__)
# Log a failed task's Java stack trace at ERROR (see _quiet_task_failures).
_NOISY_LOGGERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")


@dataclass(frozen=True)
class IngestResult:
    """What an enqueue did.

    ``rows``: the rows the write sent (counted by Spark while writing, no second
    pass). ``enqueued``: how many became live messages; ``duplicates``: how many
    were skipped because a live message with the same (queue, key, kind) existed
    (or came earlier in the same write); ``rejected``: refused rows (MySQL/MariaDB
    only: they are in pyqueue_ingest_reject; on PostgreSQL a bad row fails the
    write instead, so it is 0).

    PostgreSQL: each partition's INSERT runs with the connection setting
    ``pyqueue.ingest_tag`` set to a tag of this enqueue; the ingest trigger adds
    its counts under that tag and ``queue_ingest_flush`` (run after the write, with
    the same tag) returns and clears them. Exact with any number of concurrent
    writers (each enqueue has its own tag; a failed task's counts roll back with
    it); a task that Spark ran twice and that committed twice (speculative
    execution) counts its rows twice, the second time as duplicates. With a
    schema that predates the tally, ``enqueued`` and ``duplicates`` are None.
    MySQL/MariaDB: the flush's counts of what it moved for the queue; they include
    rows other writers appended to the same queue and not flushed yet."""

    rows: int | None
    enqueued: int | None
    duplicates: int | None
    rejected: int


# -- URLs ----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One database as both a JDBC URL (for Spark) and a pyqueue DSN (for the Python client)."""

    dialect: str  # the dialect's name (Dialect.name)
    jdbc_url: str  # without user/password (those are in properties)
    dsn: str
    properties: dict[str, str]

    @property
    def sql_dialect(self) -> dialects.Dialect:
        """The Dialect of the database (what differs between PostgreSQL and MySQL/MariaDB)."""
        return dialects.for_name(self.dialect)


def target(url: str, properties: Mapping[str, str] | None = None) -> Target:
    """Parses a pyqueue DSN or a JDBC URL into the JDBC URL, DSN and driver properties."""
    props = dict(properties or {})
    raw = url[len("jdbc:") :] if url.startswith("jdbc:") else url
    parts = urlsplit(raw)
    scheme = parts.scheme.split("+", 1)[0].lower()
    try:
        d = dialects.for_scheme(scheme)
    except errors.UnsupportedDsnError:
        raise errors.UnsupportedDsnError(
            f"cannot tell the database from {scheme!r}: use postgresql://, mysql://, jdbc:postgresql:// "
            "or jdbc:mysql:// (jdbc:mariadb://)"
        ) from None
    query = dict(parse_qsl(parts.query))
    user = (
        props.pop("user", None)
        or query.pop("user", None)
        or (unquote(parts.username) if parts.username else None)
    )
    password = (
        props.pop("password", None)
        or query.pop("password", None)
        or (unquote(parts.password) if parts.password else None)
    )
    host = parts.hostname or "127.0.0.1"
    port = parts.port or d.default_port
    database = parts.path.lstrip("/")
    hostport = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if not url.startswith("jdbc:"):
        query = {}  # a DSN's own options are for the Python driver, not for JDBC
    # Spark picks its SQL dialect (identifier quoting) from the URL scheme: MariaDB's
    # driver takes jdbc:mysql:// (2.x always, 3.x with permitMysqlScheme).
    jdbc = f"jdbc:{d.jdbc.url_scheme}://{hostport}/{database}"
    if query:
        jdbc += "?" + urlencode(query)
    cred = ""
    if user:
        cred = quote(user, safe="") + (":" + quote(password, safe="") if password else "") + "@"
    dsn = f"{d.name}://{cred}{hostport}/{database}"
    if user:
        props["user"] = user
    if password:
        props["password"] = password
    props.setdefault("driver", d.jdbc.driver_class)
    return Target(d.name, jdbc, dsn, props)


def write_options(tgt: Target, batch_size: int = DEFAULT_BATCH_SIZE) -> dict[str, str]:
    """The JDBC writer options that matter for queue_ingest."""
    opts = dict(tgt.properties)
    opts.setdefault("batchsize", str(batch_size))
    # Spark's default READ_UNCOMMITTED means nothing for an INSERT; ask for what the routines expect.
    opts.setdefault("isolationLevel", "READ_COMMITTED")
    for key, value in tgt.sql_dialect.jdbc.write_options:  # batched multi-row INSERTs, and the like
        opts.setdefault(key, value)
    return opts


def read_options(tgt: Target) -> dict[str, str]:
    opts = dict(tgt.properties)
    opts.setdefault("fetchsize", "10000")
    for key, value in tgt.sql_dialect.jdbc.read_options:
        opts.setdefault(key, value)
    return opts


# -- the session ---------------------------------------------------------------


def jdbc_jars() -> list[str]:
    """The JDBC driver jars: $PYQUEUE_JDBC_JARS (comma-separated) or Debian's, where present."""
    env = os.environ.get(JARS_ENV)
    if env:
        return [j for j in env.split(",") if j]
    found = []
    for jar in DEFAULT_JARS:
        if os.path.exists(jar):
            found.append(jar)
        else:
            found += sorted(glob.glob(jar.replace(".jar", "-[0-9]*.jar")))[-1:]
    return found


def missing_requirements() -> list[str]:
    """Why Spark cannot run here (empty when it can): Java, pyspark, the two jars."""
    import shutil

    problems = []
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        problems.append("no Java runtime (apt-get install default-jre-headless)")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        problems.append(f"pyspark is not installed: {errors.install_command('spark')}")
    jars = " ".join(jdbc_jars())
    for cls in dialects.DIALECTS:
        if cls.jdbc.jar_marker not in jars:
            problems.append(f"no {cls.jdbc.product} JDBC jar (apt-get install {cls.jdbc.debian_package})")
    return problems


def session(
    app_name: str = "pyqueue-sql", master: str = "local[2]", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A SparkSession with the JDBC jars on its class path, the UI off, few shuffle
    partitions (local work) and UTC as session time zone. Its Python workers (which
    run enqueue's bulk load) use this interpreter, unless $PYSPARK_PYTHON says otherwise."""
    import sys

    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(jdbc_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
    )
    # pyspark starts its workers with $PYSPARK_PYTHON, read when the context is created
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# -- enqueue -------------------------------------------------------------------

ColumnLike = "str | Column"


def _col(df: DataFrame, value: object, what: str) -> Column:
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if isinstance(value, Column):
        return value
    if isinstance(value, str):
        if value not in df.columns:
            raise errors.InvalidArgumentError(
                f"{what}={value!r} is not a column of the DataFrame (columns: {', '.join(df.columns)}); "
                f"for a constant pass pyspark.sql.functions.lit({value!r})"
            )
        return F.col(value)
    raise errors.InvalidArgumentError(f"{what} must be a column name or a Column, not {type(value).__name__}")


def _payload(df: DataFrame, payload: object, used: set[str]) -> Column:
    """The payload as JSON text: a string column is taken as JSON text as it is;
    a struct, map or array column (or a list of columns, made into a struct)
    becomes JSON with to_json; None = a struct of every column not used otherwise."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StringType, StructType

    if payload is None:
        rest = [c for c in df.columns if c not in used]
        if not rest:
            raise errors.InvalidArgumentError("payload=None takes the other columns, but there are none")
        return F.to_json(F.struct(*[F.col(c) for c in rest]))
    if isinstance(payload, (list, tuple)):
        return F.to_json(F.struct(*[_col(df, c, "payload") for c in payload]))
    column = _col(df, payload, "payload")
    dtype = df.select(column.alias("p")).schema["p"].dataType
    if isinstance(dtype, (StructType, MapType, ArrayType)):
        return F.to_json(column)
    if isinstance(dtype, StringType):
        return column
    return F.to_json(F.array(column)).substr(F.lit(2), F.length(F.to_json(F.array(column))) - 2)


def ingest_frame(
    df: DataFrame,
    queue: ColumnArg | None,
    *,
    key: ColumnArg = "p_key",
    kind: ColumnArg = "p_kind",
    payload: ColumnArg | Sequence[ColumnArg] | None = "payload",
    run_at: ColumnArg | None = None,
    priority: ColumnArg | None = None,
    dialect: str | dialects.Dialect | None = None,
) -> DataFrame:
    """The DataFrame of queue_ingest rows (queue_name, p_key, p_kind, payload, run_at, priority).
    ``dialect`` (a name or a Dialect) is the database's: run_at is sent as UTC wall-clock text where
    the database stores times that way; None sends run_at as a timestamp."""
    from pyspark.sql import Column
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    if isinstance(queue, str) and not isinstance(queue, Column):
        queue_col = F.lit(queue)
    elif queue is None:
        queue_col = _col(df, "queue_name", "queue")
    else:
        queue_col = _col(df, queue, "queue")
    used = {c for c in (key, kind, run_at, priority, queue) if isinstance(c, str)}
    cols = [
        queue_col.cast("string").alias("queue_name"),
        _col(df, key, "key").cast("string").alias("p_key"),
        _col(df, kind, "kind").cast("string").alias("p_kind"),
        _payload(df, payload, used).alias("payload"),
    ]
    if run_at is not None:
        at = _col(df, run_at, "run_at").cast(TimestampType())
        if dialect is not None and dialects.as_dialect(dialect).utc_wall_clock_times:
            # e.g. DATETIME(6) holds UTC wall-clock time: send it as text, so that no JVM time zone applies.
            at = F.date_format(at, "yyyy-MM-dd HH:mm:ss.SSSSSS")
        cols.append(at.alias("run_at"))
    if priority is not None:
        cols.append(_col(df, priority, "priority").alias("priority"))
    return df.select(*cols)


def _java_messages(exc: BaseException) -> list[str]:
    """The messages of a Spark/JDBC failure, innermost causes included: the Java
    exception chain behind a py4j error (causes, and the next exceptions of a
    java.sql.SQLException such as a BatchUpdateException), the server's own
    message first where the driver keeps it (PostgreSQL's ServerErrorMessage).
    Without a Java exception: the Python exception's text."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)  # Py4JJavaError / pyspark's
    if java is None:
        return [str(exc)]
    out: list[str] = []
    seen: set[int] = set()
    todo = [java]
    while todo and len(seen) < 50:
        throwable = todo.pop(0)
        try:
            ident = throwable.hashCode()
            if ident in seen:
                continue
            seen.add(ident)
            server = getattr(throwable, "getServerErrorMessage", None)
            if server is not None and throwable.getClass().getName() == "org.postgresql.util.PSQLException":
                primary = server()
                if primary is not None and primary.getMessage():
                    out.append(str(primary.getMessage()))
            message = throwable.getMessage()
            if message:
                out.append(str(message))
            cause = throwable.getCause()
            if cause is not None:
                todo.append(cause)
            if throwable.getClass().getName().startswith(
                ("java.sql.", "org.postgresql.", "org.mariadb.")
            ) and hasattr(throwable, "getNextException"):
                following = throwable.getNextException()
                if following is not None:
                    todo.append(following)
        except Exception:  # noqa: BLE001 - a JVM that went away: keep what was read
            break
    return out or [str(exc)]


def _routine_error(exc: BaseException, dialect: dialects.Dialect | None = None) -> errors.QueueError | None:
    """The first pyqueue:<code> message inside a Spark/JDBC failure, as the pyqueue_sql
    error the Python client raises for it (the dialect's mapping: Dialect.jdbc_routine_error,
    which cuts what the JDBC driver adds around the routine's line). Without a dialect,
    each dialect's driver additions are looked for."""
    candidates = [dialect] if dialect is not None else [cls() for cls in dialects.DIALECTS]
    for message in _java_messages(exc):
        for d in candidates:
            mapped = d.jdbc_routine_error(message)
            if mapped is not None:
                return mapped
    return None


_quiet_lock = threading.Lock()
_quiet_writers = 0
_quiet_saved: list[tuple[str, object]] = []  # (logger, its level: a Java object)


@contextlib.contextmanager
def _quiet_task_failures(spark: Any) -> Iterator[None]:  # a SparkSession (its _jvm untyped)
    """While a write runs: Spark's executor and task-set loggers (which print a failed
    task's whole Java stack trace at ERROR, in local mode on this process's stderr)
    log nothing below FATAL; their levels are put back when the last concurrent
    write ends. The failure itself still reaches the caller, as the mapped pyqueue
    error (the Java exception logged at DEBUG on the pyqueue_sql.spark logger and
    kept as ``java_exception``)."""
    global _quiet_writers
    with _quiet_lock:
        if _quiet_writers == 0:
            try:
                log4j = spark._jvm.org.apache.logging.log4j
                for name in _NOISY_LOGGERS:
                    _quiet_saved.append((name, log4j.LogManager.getLogger(name).getLevel()))
                    log4j.core.config.Configurator.setLevel(name, log4j.Level.FATAL)
            except Exception:  # noqa: BLE001 - no log4j 2 (or no JVM access): leave logging as it is
                log.debug("could not quiet Spark's task-failure logging", exc_info=True)
        _quiet_writers += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_writers -= 1
            if _quiet_writers == 0:
                while _quiet_saved:
                    name, level = _quiet_saved.pop()
                    with contextlib.suppress(Exception):
                        spark._jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)


# How long a failed enqueue waits for the other tasks of its job to end before it raises.
SETTLE_TIMEOUT_S = 600.0


def _running_tasks(sc: SparkContext, tag: str) -> int:
    """The tasks still running in the jobs tagged ``tag``."""
    tracker = sc.statusTracker()
    running = 0
    for job in sc._jsc.sc().statusTracker().getJobIdsForTag(tag):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            stage_info = tracker.getStageInfo(stage)
            running += stage_info.numActiveTasks if stage_info is not None else 0
    return running


@contextlib.contextmanager
def _settled_on_failure(spark: SparkSession) -> Iterator[None]:
    """Tags the Spark jobs the block starts (from this thread); when the block fails,
    waits until their tasks have all ended before the failure goes on: Spark does not
    interrupt the other running tasks of a failed job, and such a task may still
    commit its partition. So when enqueue raises, nothing of it lands afterwards."""
    import time

    sc = spark.sparkContext
    tag = f"pyqueue-ingest-{uuid.uuid4().hex}"
    sc.addJobTag(tag)
    try:
        yield
    except BaseException:
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while _running_tasks(sc, tag) and time.monotonic() < deadline:
            time.sleep(0.05)
        if time.monotonic() >= deadline:
            log.warning("tasks of the failed write were still running after %.0f s", SETTLE_TIMEOUT_S)
        raise
    finally:
        sc.removeJobTag(tag)


def _tagged(tgt: Target, tag: str) -> tuple[dict[str, str], str]:
    """PostgreSQL: the JDBC properties and the DSN of connections whose session has
    pyqueue.ingest_tag = tag (libpq/pgJDBC's startup ``options``, after the caller's
    own ``options`` property, which the flush's connection gets too)."""
    setting = f"-c pyqueue.ingest_tag={tag}"
    props = dict(tgt.properties)
    props["options"] = f"{props['options']} {setting}" if props.get("options") else setting
    return props, f"{tgt.dsn}?{urlencode({'options': props['options']}, quote_via=quote)}"


def _flush(tgt: Target, dsn: str, queue: str | None) -> IngestResult:
    from .client import connect
    from .rows import named

    with connect(dsn) as db:
        mark = db.call(statements.INGEST_REJECT_MARK)[0][0] if tgt.sql_dialect.ingest_keeps_rejects else None
        [row] = db.call(statements.INGEST_FLUSH, queue=queue)
        counts = named(statements.INGEST_FLUSH, row)
        result = IngestResult(None, int(counts.enqueued), int(counts.duplicates), int(counts.rejected))
        if result.rejected:
            reasons = db.call(statements.INGEST_REJECTS, mark=mark, queue=queue)
            listed = "; ".join(
                f"{r.messages} x {r.reason}"
                for r in (named(statements.INGEST_REJECTS, row) for row in reasons)
            )
            raise IngestRejectedError(
                f"queue_ingest_flush rejected {result.rejected} row(s) (enqueued {result.enqueued}, "
                f"{result.duplicates} duplicates); they are in pyqueue_ingest_reject: {listed}",
                result,
            )
    return result


def flush(url: str, queue: str | None = None, properties: Mapping[str, str] | None = None) -> IngestResult:
    """CALL queue_ingest_flush(queue) (None = every queue): enqueues what plain JDBC
    appends left in queue_ingest on MySQL/MariaDB; on PostgreSQL (where the INSERT
    already enqueued) it reports nothing for a connection without an ingest tag.
    Raises IngestRejectedError when it rejected rows (they are in pyqueue_ingest_reject)."""
    tgt = target(url, properties)
    return _flush(tgt, tgt.dsn, queue)


# -- bulk load ------------------------------------------------------------------
# enqueue's faster path: each partition streams its rows, as CSV text built by
# Spark (in the JVM), through a Spark Python worker into queue_ingest with the
# dialect's bulk statement (PostgreSQL COPY, MySQL/MariaDB LOAD DATA LOCAL
# INFILE), in one transaction per partition, as the JDBC write does. The rows
# land in the same table as a JDBC append, so the trigger (PostgreSQL) or the
# flush (MySQL/MariaDB) does the same checks, dedup and bad-row reporting.

METHODS = ("auto", "bulk", "jdbc")


class BulkLoad:
    """How one dialect loads CSV lines into queue_ingest. A field is a value in
    double quotes (a quote doubled inside) or the dialect's NULL token, unquoted."""

    null = ""  # the unquoted token that reads as NULL
    # method="auto" takes it (in local mode) only where it measured faster than the JDBC batches
    preferred = True

    def unavailable(self, dsn: str) -> str | None:
        """Why this database cannot take the bulk load from here (None: it can)."""
        raise NotImplementedError

    def connect(self, dsn: str) -> dialects.Connection:
        """A connection in a transaction (not autocommit) that load() writes through."""
        raise NotImplementedError

    def load(self, connection: dialects.Connection, columns: Sequence[str], lines: list[str]) -> None:
        """One statement that appends the CSV lines (without their newlines) to queue_ingest."""
        raise NotImplementedError


class CopyLoad(BulkLoad):
    """PostgreSQL: COPY queue_ingest FROM STDIN (FORMAT csv) with psycopg; each COPY is one
    INSERT statement for the ingest trigger (checks, dedup, tally under the session's tag).
    An unquoted empty field is NULL, a quoted one the empty string."""

    def unavailable(self, dsn: str) -> str | None:
        try:
            import psycopg  # noqa: F401
        except ImportError:
            return f"psycopg is not installed: {errors.install_command('spark')}"
        return None

    def connect(self, dsn: str) -> dialects.Connection:
        return dialects.PostgreSQL().connect(dsn, autocommit=False)

    def load(self, connection: dialects.Connection, columns: Sequence[str], lines: list[str]) -> None:
        from psycopg import sql

        statement = sql.SQL("COPY queue_ingest ({}) FROM STDIN (FORMAT csv)").format(
            sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        )
        with connection.cursor() as cur, cur.copy(statement) as copy:
            copy.write("\n".join(lines))
            copy.write("\n")


class LoadDataLoad(BulkLoad):
    """MySQL/MariaDB: LOAD DATA LOCAL INFILE with PyMySQL, from a temporary file per
    statement (the server must allow local_infile). No escape character (so that the
    statement reads the same under any sql_mode); the unquoted word NULL is NULL.
    LOCAL turns conversion errors into warnings: any warning fails the load instead,
    as strict mode fails a JDBC batch."""

    null = "NULL"
    # The load itself matches the JDBC append, but the enqueue (load + flush) measured slower
    # than the JDBC batches + flush (bench/spark.md): auto keeps JDBC here; method="bulk" asks.
    preferred = False

    def unavailable(self, dsn: str) -> str | None:
        try:
            connection = self.connect(dsn)
        except ImportError:
            return f"PyMySQL is not installed: {errors.install_command('spark')}"
        try:
            cur = connection.cursor()
            cur.execute("SELECT @@local_infile")
            [(allowed,)] = cur.fetchall()
        finally:
            connection.close()
        if not int(allowed):
            return "the server does not allow LOAD DATA LOCAL INFILE (local_infile is OFF)"
        return None

    def connect(self, dsn: str) -> dialects.Connection:
        import pymysql

        return pymysql.connect(
            **{**dialects.mysql_connect_args(dsn), "autocommit": False, "local_infile": True}
        )

    def load(self, connection: dialects.Connection, columns: Sequence[str], lines: list[str]) -> None:
        import tempfile

        with tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="\n", suffix=".csv") as data:
            data.write("\n".join(lines))
            data.write("\n")
            data.flush()
            unknown = [c for c in columns if c not in INGEST_COLUMNS]
            if unknown:
                raise errors.InvalidArgumentError(f"queue_ingest has no column {unknown[0]!r}")
            statement = queries.queries("mysql")[statements.LOAD_INGEST_CSV].format(
                columns=", ".join(quote_name(c) for c in columns)
            )
            cur = connection.cursor()
            try:
                cur.execute(statement, (data.name,))
            finally:
                cur.close()
        warnings = connection.show_warnings()
        if warnings:
            listed = "; ".join(str(w[2]) for w in warnings[:3])
            # raised in a Spark worker: the driver maps the routine-error format to InvalidArgumentError
            raise errors.InvalidArgumentError(
                f"pyqueue:invalid_argument: LOAD DATA into queue_ingest could not store "
                f"{len(warnings)} value(s) as they are, nothing of this partition is kept: {listed}"
            )


# The bulk load of each dialect (by its class: callers never look at a dialect's name).
BULK_LOADS: dict[type[dialects.Dialect], BulkLoad] = {
    dialects.PostgreSQL: CopyLoad(),
    dialects.MySQL: LoadDataLoad(),
}


def csv_lines(rows: DataFrame, null: str) -> DataFrame:
    """One string column ``line``: each row as a CSV line (no newline), built by Spark:
    every value in double quotes with quotes doubled, NULL as the unquoted ``null``;
    timestamps with their UTC offset."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    fields = []
    for field in rows.schema.fields:
        value = F.col(field.name)
        if isinstance(field.dataType, TimestampType):
            text = F.date_format(value, "yyyy-MM-dd HH:mm:ss.SSSSSSxxx")
        else:
            text = value.cast("string")
        # replace, not regexp_replace: twice as fast here (measured, bench/spark.md)
        quoted = F.concat(F.lit('"'), F.replace(text, F.lit('"'), F.lit('""')), F.lit('"'))
        fields.append(F.coalesce(quoted, F.lit(null)))
    return rows.select(F.concat_ws(",", *fields).alias("line"))


def _load_partition(
    load: BulkLoad, dsn: str, columns: Sequence[str], statement_rows: int, lines: Iterable[str]
) -> Iterator[int]:
    """A Spark task (in a Python worker): appends its partition's lines to queue_ingest,
    ``statement_rows`` lines per statement, and commits once at the end; a failure
    anywhere rolls back the whole partition. Yields the number of rows."""
    connection = load.connect(dsn)
    written = 0
    try:
        chunk: list[str] = []
        for line in lines:
            chunk.append(line)
            if len(chunk) >= statement_rows:
                load.load(connection, columns, chunk)
                written += len(chunk)
                chunk = []
        if chunk:
            load.load(connection, columns, chunk)
            written += len(chunk)
        connection.commit()
    finally:
        connection.close()  # without the commit above: the server rolls the partition back
    yield written


def bulk_load(rows: DataFrame, load: BulkLoad, dsn: str, statement_rows: int) -> int:
    """Appends the queue_ingest rows of ``rows`` (ingest_frame's columns) with ``load``,
    one Spark task per partition; returns the number of rows."""
    from functools import partial

    from pyspark import RDD
    from pyspark.serializers import UTF8Deserializer

    spark = rows.sparkSession
    lines = csv_lines(rows, load.null)
    # the lines as a Dataset[String]: they reach the Python workers as plain UTF-8 strings, unpickled
    strings = getattr(lines._jdf, "as")(spark._jvm.org.apache.spark.sql.Encoders.STRING())
    rdd = RDD(strings.toJavaRDD(), spark.sparkContext, UTF8Deserializer())
    task = partial(_load_partition, load, dsn, tuple(rows.columns), max(1, statement_rows))
    return sum(rdd.mapPartitions(task).collect())


def _workers_unfit(spark: SparkSession) -> str | None:
    """Why the Python workers may lack pyqueue-sql (None: they run this interpreter, or
    $PYSPARK_PYTHON names the one to use)."""
    import shutil
    import sys

    worker = getattr(spark.sparkContext, "pythonExec", None) or "python3"
    if os.environ.get("PYSPARK_PYTHON") or shutil.which(worker) == sys.executable:
        return None
    return f"the Python workers run {worker!r}, not this interpreter (set PYSPARK_PYTHON, or use session())"


def _bulk_method(method: str, spark: Any, d: dialects.Dialect, dsn: str) -> BulkLoad | None:
    """The bulk load that ``method`` asks for (None: the JDBC write). auto: in local mode,
    where the bulk load is the faster path (BulkLoad.preferred), when the driver is
    installed and the server allows the load."""
    if method not in METHODS:
        raise errors.InvalidArgumentError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    load = BULK_LOADS.get(type(d))
    if method == "jdbc":
        return None
    if method == "auto" and (
        load is None or not load.preferred or not spark.sparkContext.master.startswith("local")
    ):
        return None
    why = f"no bulk load for {d.jdbc.product}" if load is None else _workers_unfit(spark)
    why = why or load.unavailable(dsn)
    if why is None:
        return load
    if method == "bulk":
        raise errors.InvalidArgumentError(f"method='bulk' cannot run here: {why}")
    log.info("enqueue writes with JDBC: %s", why)
    return None


def enqueue(
    df: DataFrame,
    url: str,
    queue: ColumnArg | None,
    *,
    key: ColumnArg = "p_key",
    kind: ColumnArg = "p_kind",
    payload: ColumnArg | Sequence[ColumnArg] | None = "payload",
    run_at: ColumnArg | None = None,
    priority: ColumnArg | None = None,
    properties: Mapping[str, str] | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    num_partitions: int | None = None,
    count_rows: bool = False,
    method: str = "auto",
) -> IngestResult:
    """Enqueues every row of ``df`` as a message of ``queue``, with dedup on (queue, key, kind).

    ``queue``: the queue's name (or a Column / None to take it per row from a
    ``queue_name`` column). ``key``, ``kind``, ``run_at`` (timestamp; None = now)
    and ``priority`` (None = 0): a column name or a Column (``F.lit("resize")``
    for a constant). ``payload``: a string column holding JSON text, a struct /
    map / array column (written with to_json), a list of column names (made
    into one JSON object), or None for a JSON object of all remaining columns.

    Appends the rows to queue_ingest in up to ``num_partitions`` parallel
    connections (None: the DataFrame's partitions), one transaction per
    partition, by ``method``:

    - ``"bulk"``: each partition's rows, as CSV text built by Spark, go through a
      Spark Python worker with the dialect's bulk statement: PostgreSQL ``COPY``
      (psycopg), MySQL/MariaDB ``LOAD DATA LOCAL INFILE`` (PyMySQL; the server
      must allow local_infile), ``batch_size`` rows per statement. The workers
      need pyqueue-sql with the spark extra (``session()`` makes them run this
      interpreter: it sets $PYSPARK_PYTHON when unset).
    - ``"jdbc"``: ``df.write.jdbc(url, "queue_ingest", mode="append")``,
      ``batch_size`` rows per JDBC batch, READ COMMITTED.
    - ``"auto"`` (the default): bulk in local mode where it measured faster
      (PostgreSQL; on MySQL/MariaDB the flush dominates and JDBC + flush measured
      faster, bench/spark.md) and the driver is there; JDBC otherwise.

    Both land in the same table: checks, dedup and bad-row reporting are the
    database's, the same either way. Then ``CALL queue_ingest_flush(queue)``: on MySQL/MariaDB it
    enqueues the appended rows, on PostgreSQL it reports what the write's
    INSERTs enqueued. Returns an IngestResult (rows, enqueued, duplicates,
    rejected; see there for how exact each is). ``count_rows`` is accepted for
    compatibility: rows are always counted, during the write.

    Safe to re-run: a second enqueue of the same keys while the first messages
    are live enqueues nothing. A bad row (NULL/empty key or kind, unknown queue,
    payload that is not JSON...) raises: on PostgreSQL the write fails with the
    routine's error, raised as the pyqueue_sql exception of its code
    (InvalidArgumentError, UnknownQueueError, InvalidPayloadError...) with the
    routine's one-line message; the Java exception (for the bulk load: Spark's,
    holding the worker's Python traceback) is logged at DEBUG on this
    module's logger and kept as the exception's ``java_exception`` attribute
    (that partition's transaction enqueues nothing; other partitions may have
    committed, and a re-run after the fix dedups them; enqueue raises once the
    job's other running tasks have ended, which Spark lets finish). On MySQL/MariaDB the good
    rows are enqueued and IngestRejectedError names how many went to
    pyqueue_ingest_reject and why.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    tgt = target(url, properties)
    d = tgt.sql_dialect
    rows = ingest_frame(
        df, queue, key=key, kind=kind, payload=payload, run_at=run_at, priority=priority, dialect=d
    )
    if num_partitions is not None:
        rows = rows.coalesce(num_partitions) if num_partitions < rows.rdd.getNumPartitions() else rows
    if d.ingest_counts_by_session_tag:
        tagged, flush_dsn = _tagged(tgt, uuid.uuid4().hex)
        opts = write_options(replace(tgt, properties=tagged), batch_size)
    else:
        flush_dsn = tgt.dsn
        opts = write_options(tgt, batch_size)
    load = _bulk_method(method, df.sparkSession, d, tgt.dsn)
    seen = None
    if load is None:
        seen = Observation(f"pyqueue-ingest-{uuid.uuid4().hex}")
        rows = rows.observe(seen, F.count(F.lit(1)).alias("rows"))
    try:
        with _quiet_task_failures(df.sparkSession), _settled_on_failure(df.sparkSession):
            if load is None:
                rows.write.jdbc(tgt.jdbc_url, INGEST_TABLE, mode="append", properties=opts)
            else:
                written = bulk_load(rows, load, flush_dsn, batch_size)
    except Exception as exc:
        mapped = _routine_error(exc, d)
        if mapped is None:
            raise
        log.debug("the Spark write into %s failed", INGEST_TABLE, exc_info=exc)
        mapped.java_exception = exc  # type: ignore[attr-defined]
        raise mapped from None
    if seen is not None:
        written = int(seen.get.get("rows", 0))
    result = _flush(tgt, flush_dsn, queue if isinstance(queue, str) else None)
    if d.ingest_counts_by_session_tag and written and result.enqueued == 0 and result.duplicates == 0:
        # the installed schema's trigger keeps no tally: the counts are unknown, not zero
        return IngestResult(written, None, None, 0)
    return IngestResult(written, result.enqueued, result.duplicates, result.rejected)


# -- reads ---------------------------------------------------------------------


def _utc(value: dt.datetime | None, default: dt.datetime) -> dt.datetime:
    value = default if value is None else value
    if value.tzinfo is None:
        raise errors.InvalidArgumentError("since/until must be timezone-aware datetimes")
    return value.astimezone(dt.timezone.utc)


def read_history(
    spark: SparkSession,
    url: str,
    queue: str | Sequence[str] | None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    *,
    num_partitions: int = 4,
    properties: Mapping[str, str] | None = None,
) -> DataFrame:
    """The messages that left ``queue`` (a name, several, or None = all) with
    since <= processed_at < until (None: from the start / up to now), from
    pyqueue_history, as a DataFrame with the columns id, queue_name, p_key,
    p_kind, payload (JSON text), priority, attempts, created_at, processed_at
    (timestamps in UTC), outcome.

    A parallel JDBC read: ``num_partitions`` connections, each reading one
    slice of [since, until) on processed_at; the queue and time filters are
    pushed down to the database as WHERE clauses by Spark."""
    from pyspark.sql import functions as F

    tgt = target(url, properties)
    now = dt.datetime.now(dt.timezone.utc)
    start = _utc(since, dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc))
    end = _utc(until, now)
    if end <= start:
        raise errors.InvalidArgumentError("until must be later than since")
    opts = read_options(tgt)
    # Spark parses the partition bounds in the session's time zone.
    from zoneinfo import ZoneInfo

    zone = ZoneInfo(spark.conf.get("spark.sql.session.timeZone") or "UTC")
    fmt = "%Y-%m-%d %H:%M:%S.%f"
    reader = (
        spark.read.format("jdbc")
        .options(**opts)
        .option("url", tgt.jdbc_url)
        .option("dbtable", HISTORY_TABLE)
        .option("partitionColumn", "processed_at")
        .option("lowerBound", start.astimezone(zone).strftime(fmt))
        .option("upperBound", end.astimezone(zone).strftime(fmt))
        .option("numPartitions", str(max(1, num_partitions)))
    )
    df = reader.load().select(*HISTORY_COLUMNS)
    df = df.where((F.col("processed_at") >= F.lit(start)) & (F.col("processed_at") < F.lit(end)))
    if queue is not None:
        names = [queue] if isinstance(queue, str) else list(queue)
        df = df.where(F.col("queue_name").isin(names))
    return df


STATS_SCHEMA = (
    "queue string, ready long, delayed long, reserved long, dead long, "
    "oldest_ready_age_s double, paused boolean"
)


def read_stats(
    spark: SparkSession, url: str, queue: str | None = None, *, properties: Mapping[str, str] | None = None
) -> DataFrame:
    """queue_stats(queue) (None = every queue) as a DataFrame: queue, ready, delayed,
    reserved, dead, oldest_ready_age_s, paused. One small routine call through
    pyqueue-sql's client (a MySQL procedure's result cannot be read by Spark's
    JDBC source), so it is one row per queue, not a partitioned read."""
    from .client import connect

    tgt = target(url, properties)
    with connect(tgt.dsn) as db:
        if queue is None:
            stats = db.stats()
        else:
            stats = [db.queue(queue).stats()]
    rows = [(s.queue, s.ready, s.delayed, s.reserved, s.dead, s.oldest_ready_age_s, s.paused) for s in stats]
    return spark.createDataFrame(rows, STATS_SCHEMA)
