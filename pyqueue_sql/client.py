"""The Python client: a thin layer over the SQL routines.

    db = pyqueue_sql.connect("postgresql://localhost/app")   # or mysql://...
    emails = db.queue("emails")
    emails.create(visibility_timeout=60, max_attempts=5)
    emails.push("user-42", "welcome", {"to": "a@example.com"})
    for msg in emails.reserve(n=10):
        ...
        emails.commit(msg)

Every method is one routine call (a batch or a reserve of more than CHUNK_SIZE
messages: several, in one transaction). A Database made by ``connect`` owns its
connection and runs each call in its own transaction unless you open one with
``db.transaction()``. ``Database.wrap(conn)`` uses a connection of yours as it
is (psycopg 3, PyMySQL, or a SQLAlchemy Connection / ORM Session), inside
whatever transaction you have open (enqueue atomically with your business
write), and never commits or rolls back for you.

pyqueue_sql.aio has the same client for asyncio: the methods are written once,
sans-IO (pyqueue_sql.sansio), and each client only runs their steps. They live
in pyqueue_sql/calls/, one module per SQL topic (sql/README.md), and are
composed here into QueueCalls and DatabaseCalls; the row types are in
pyqueue_sql.rows. Every name is importable from here as before.

Serialization failures and deadlocks (errors.SerializationError): a call that
runs in a transaction of its own is run again a few times (the server rolled
it back whole, so that is safe) before the error is raised. Inside
``db.transaction()`` or on a wrapped connection the error is raised at once:
the whole transaction was rolled back, and the caller runs it again.

Keys may be str or int (an int is sent as its decimal text: 17 is the key
"17"); tokens are str on both dialects.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import dialects, errors, statements
from .calls.base import (
    INT_MIN,
    LAST_ERROR_MAX_CHARS,
    MAX_HEADERS_BYTES,
    MAX_PAYLOAD_LIMIT,
    default_worker_name,
    encode_headers,
    error_text,
    headers_value,
    held_reservation,
    parent_refs,
    priority_value,
    whole_number_within,
)
from .calls.browse import BrowseCalls, BrowseDatabaseCalls
from .calls.dependencies import DependenciesCalls
from .calls.fast_paths import FastPathsCalls
from .calls.groups import GroupsCalls
from .calls.history import HistoryCalls
from .calls.limits import LimitsCalls, LimitsDatabaseCalls
from .calls.produce import ProduceCalls
from .calls.queues import QueuesCalls, QueuesDatabaseCalls
from .calls.reserve import ReserveCalls
from .calls.results import ResultsCalls
from .calls.schedules import SchedulesCalls, SchedulesDatabaseCalls
from .calls.settle import SettleCalls
from .calls.topics import TopicsDatabaseCalls
from .calls.wakeups import WakeupsCalls
from .calls.workers import WorkersDatabaseCalls
from .dialects import Duration, Row, key_value, text_value
from .rows import (
    FINISHED_STATES,
    MAX_GROUP_LIMIT,
    MAX_PROGRESS_BYTES,
    MAX_RATE_N,
    MAX_RATE_PER,
    Binding,
    DeadLetter,
    GroupInfo,
    HistoryRow,
    LimitInfo,
    Message,
    MessageInfo,
    MessageRow,
    NewMessage,
    ParentResult,
    Publication,
    QueueSettings,
    QueueStats,
    RateInfo,
    Renewal,
    Reservation,
    Result,
    ScheduleInfo,
    ThroughputRow,
    WorkerInfo,
    WorkerRegistration,
)
from .sansio import (
    CHUNK_SIZE,
    INT_MAX,
    ONE_TRANSACTION,
    SERIALIZATION_ATTEMPTS,
    SERIALIZATION_BACKOFF_MAX_S,
    SERIALIZATION_BACKOFF_S,
    Call,
    ConnectionLoss,
    OwnTransaction,
    Pause,
    SansIO,
    Step,
    advance,
    chunk_sizes,
    chunks,
    retry_pause,
    runs_sans_io,
    sans_io,
    sync_method,
)
from .statements import Statement

# Every name this module had before its parts moved to rows, sansio and calls/ (imported from
# pyqueue_sql.client as before).
__all__ = [
    "Binding",
    "CHUNK_SIZE",
    "Call",
    "Database",
    "DatabaseCalls",
    "DeadLetter",
    "FINISHED_STATES",
    "GroupInfo",
    "HistoryRow",
    "INT_MAX",
    "INT_MIN",
    "LAST_ERROR_MAX_CHARS",
    "LimitInfo",
    "MAX_GROUP_LIMIT",
    "MAX_HEADERS_BYTES",
    "MAX_PAYLOAD_LIMIT",
    "MAX_PROGRESS_BYTES",
    "MAX_RATE_N",
    "MAX_RATE_PER",
    "Message",
    "MessageInfo",
    "MessageRow",
    "NewMessage",
    "ONE_TRANSACTION",
    "OwnTransaction",
    "ParentResult",
    "Pause",
    "Publication",
    "Queue",
    "QueueCalls",
    "QueueSettings",
    "QueueStats",
    "RESULT_POLL",
    "RESULT_WAIT_SLICE",
    "RateInfo",
    "Renewal",
    "Reservation",
    "Result",
    "SERIALIZATION_ATTEMPTS",
    "SERIALIZATION_BACKOFF_MAX_S",
    "SERIALIZATION_BACKOFF_S",
    "SansIO",
    "ScheduleInfo",
    "Step",
    "ThroughputRow",
    "WorkerInfo",
    "WorkerRegistration",
    "advance",
    "chunk_sizes",
    "chunks",
    "connect",
    "default_worker_name",
    "encode_headers",
    "error_text",
    "headers_value",
    "held_reservation",
    "is_sqlalchemy",
    "long_poll_result",
    "parent_refs",
    "priority_value",
    "result_note_matches",
    "retry_pause",
    "runs_sans_io",
    "sans_io",
    "sqlalchemy_source",
    "sync_method",
    "wait_seconds",
    "whole_number_within",
]

# Waiting for a result (Queue.wait_result): where the server has LISTEN, the waiter reads the
# queue's result notifications and reads the result again at least every RESULT_POLL seconds (a
# notification it could not have seen, a queue that keeps no results); elsewhere it long-polls
# queue_result_wait for at most RESULT_WAIT_SLICE seconds a call (so that the waiters sharing a
# connection take turns on it).
RESULT_POLL = 1.0
RESULT_WAIT_SLICE = 1.0


class DatabaseCalls(
    ConnectionLoss,
    QueuesDatabaseCalls,
    TopicsDatabaseCalls,
    BrowseDatabaseCalls,
    LimitsDatabaseCalls,
    WorkersDatabaseCalls,
    SchedulesDatabaseCalls,
):
    """The public methods Database and AsyncDatabase share, written sans-IO (see Call)."""

    def __init__(
        self,
        connection: dialects.Connection | dialects.AsyncConnection,  # None with a source
        dialect: dialects.Dialect,
        *,
        owned: bool,
        source: Callable[[], Any] | None = None,
        dsn: str | None = None,
    ) -> None:
        self._connection = connection
        self._dsn = dsn  # connect()'s: the call after a lost connection opens a new one
        self._lost = False  # a call lost the connection (a driver may still think it open)
        # A wrapped SQLAlchemy object: returns the driver connection of its current transaction
        # (a coroutine function for the asyncio client's).
        self._source = source
        self.dialect = dialect
        self._owned = owned
        self._in_transaction = False
        # How many times a call was run again after a serialization failure or deadlock (monitoring).
        self.serialization_retries = 0
        # Result channels this connection LISTENs to for wait_result: channel -> how many wait on it.
        self._result_listens: dict[str, int] = {}
        self._result_channels: dict[str, str] = {}  # queue -> its result channel

    _runner = property(lambda self: self)

    # Whether transaction() may begin now: a connection of connect()'s, no transaction open.
    may_begin = property(lambda self: self._owned and not self._in_transaction)

    def _may_begin(self) -> None:
        """Refuses a transaction() on a wrapped connection, or inside another one."""
        if not self._owned:
            raise errors.QueueError("a wrapped connection's transactions are yours: use your driver's")
        if self._in_transaction:
            raise errors.QueueError("transactions do not nest")

    # -- the policy, sans-IO: both clients run these steps (see Step) ---------------
    def _method_steps(self, steps: SansIO) -> SansIO:
        """A sans-IO method's calls, each run by _call_steps; with ONE_TRANSACTION, in one
        transaction when the caller has none."""
        done, step = advance(steps, None)
        if done:
            return step
        if step is not ONE_TRANSACTION:
            return (yield from self._calls_steps(steps, (yield from self._call_steps(step))))
        if self._owned and not self._in_transaction:
            return (yield from self._transaction_steps(self._calls_steps(steps, None)))
        return (yield from self._calls_steps(steps, None))

    def _calls_steps(self, steps: SansIO, reply: object) -> SansIO:
        done, step = advance(steps, reply)
        while not done:
            done, step = advance(steps, (yield from self._call_steps(step)))
        return step

    def _call_steps(self, call: Call) -> SansIO:
        """One call. Inside the caller's transaction it runs once: a serialization failure lost
        all of that transaction, so only the caller can run it again (errors.SerializationError
        is raised at once). Otherwise it is run again after a serialization failure or deadlock,
        up to SERIALIZATION_ATTEMPTS times in all: the server rolled it back whole (autocommit:
        the statement is the transaction; a transaction of its own: rolled back), so running it
        again is safe and gives the answer an undisturbed call would have given."""
        if not self._owned or self._in_transaction:
            return (yield call)
        own = call.statement in self.dialect.own_transaction_statements
        for attempt in range(SERIALIZATION_ATTEMPTS):
            try:
                return (yield (OwnTransaction(call) if own else call))
            except errors.SerializationError:
                if attempt == SERIALIZATION_ATTEMPTS - 1:
                    raise
                self.serialization_retries += 1
                yield Pause(retry_pause(attempt))
        raise AssertionError("unreachable")

    def _transaction_steps(self, body: SansIO) -> SansIO:
        """body in a transaction of the client's own: committed when it ends, rolled back when it raises
        (MySQL's commit, rollback, fail, move... take one each: history row and removal as one)."""
        yield Step.BEGIN
        self._in_transaction = True
        try:
            result = yield from body
        except BaseException:
            self._in_transaction = False
            with contextlib.suppress(Exception):  # a lost connection has nothing to roll back
                yield Step.ROLLBACK
            raise
        self._in_transaction = False
        yield Step.COMMIT
        return result


@runs_sans_io(sync_method)
class Database(DatabaseCalls):
    """A connection to a database that has the pyqueue-sql schema installed."""

    @property
    def connection(self) -> dialects.Connection:
        """The DB-API connection the calls run on (a wrapped SQLAlchemy object's current one)."""
        return self._connection if self._source is None else self._source()

    @classmethod
    def wrap(cls, connection: object) -> Database:
        """Uses your connection inside your own transactions: a psycopg 3 or PyMySQL connection, or a
        SQLAlchemy ``Connection`` or ``Session`` (orm), so that a push commits or rolls back with your
        ORM writes. Each call runs on the DB-API connection of the SQLAlchemy object's current
        transaction (beginning one, as SQLAlchemy's autobegin would, when none is open); commit or
        roll back through SQLAlchemy as usual, the client never does."""
        source = sqlalchemy_source(connection)
        if source is not None:
            return cls(None, dialects.for_connection(source()), owned=False, source=source)
        return cls(connection, dialects.for_connection(connection), owned=False)

    def queue(self, name: str) -> Queue:
        return Queue(self, name)

    def call(self, statement: Statement | str, **params: object) -> list[Row]:
        """Runs a declared statement (pyqueue_sql.statements; a str: the one of that name); its (first) result set."""
        return self._perform(self._call_steps(Call(statements.named(statement), params)))

    def call_sets(self, statement: Statement | str, **params: object) -> list[list[Row]]:
        """Runs a declared statement (pyqueue_sql.statements; a str: the one of that name); every result set it returns (MySQL procedures)."""
        return self._perform(self._call_steps(Call(statements.named(statement), params, all_sets=True)))

    def drive(self, steps: SansIO) -> Any:
        """Runs a sans-IO method (see Call): each call it yields, its rows sent back; its result."""
        return self._perform(self._method_steps(steps))

    def _perform(self, steps: SansIO) -> Any:
        """Runs each step on the connection, sending back its result (or throwing its error in)."""
        reply, error = None, None
        while True:
            try:
                step = steps.send(reply) if error is None else steps.throw(error)
            except StopIteration as done:
                return done.value
            try:
                reply, error = self._do(step), None
            except BaseException as exc:
                reply, error = None, exc

    def _do(self, step: Call | OwnTransaction | Step | Pause) -> Any:
        if isinstance(step, Pause):
            return time.sleep(step.seconds)
        if self._skips(step):
            return None
        if self._reopens():
            self._reopen()
        connection = self.connection
        try:
            return self._run_step(step, connection)
        except Exception as exc:
            raise self._lost_or(step, exc, connection)  # noqa: B904 - its cause is set

    def _reopen(self) -> None:
        with contextlib.suppress(Exception):
            self._connection.close()
        self._reopened(self.dialect.connect(self._dsn))

    def _run_step(self, step: Call | OwnTransaction | Step, connection: dialects.Connection) -> Any:
        d = self.dialect
        if isinstance(step, Call):
            return (d.run_sets if step.all_sets else d.run)(connection, step.statement, step.params)
        if isinstance(step, OwnTransaction):
            call = step.call
            return d.run_in_own_transaction(connection, call.statement, call.params, call.all_sets)
        if step is Step.BEGIN:
            return d.begin(connection)
        if step is Step.COMMIT:
            return d.end_transaction(connection, commit=True)
        return d.rollback(connection)

    # -- waiting for results (Queue.wait_result) ----------------------------------------
    def _listens_for_results(self) -> bool:
        """Whether wait_result LISTENs here: the server has it, and the connection is the
        client's own, outside a transaction (a LISTEN in yours would wait for your commit)."""
        return self.dialect.supports_listen and self._owned and not self._in_transaction

    def _listen_results(self, queue: Queue) -> str:
        channel = self._result_channels.get(queue.name)
        if channel is None:
            channel = self._result_channels[queue.name] = str(queue.result_channel())
        if not self._result_listens.get(channel):
            self.dialect.listener.listen(self.connection, [channel])
        self._result_listens[channel] = self._result_listens.get(channel, 0) + 1
        return channel

    def _unlisten_results(self, channel: str) -> None:
        """Stops listening once no wait needs the channel: the notifications of every result of the
        queue would otherwise pile up in the connection between waits."""
        self._result_listens[channel] -= 1
        if self._result_listens[channel] == 0:
            del self._result_listens[channel]
            d = self.dialect
            with contextlib.suppress(Exception), self.connection.cursor() as cur:
                cur.execute(
                    d.admin.compose(d.statement(statements.UNLISTEN), channel=d.admin.identifier(channel))
                )

    def _await_result_note(self, channel: str, key: str, kind: str, seconds: float) -> None:
        """Reads notifications up to `seconds`, until one announces this message's result."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            for got, payload in self.dialect.listener.wait_for_notification(self.connection, left):
                if got == channel and result_note_matches(payload, key, kind):
                    return

    def _wait_result(self, queue: Queue, key: str | int, kind: str, deadline: float, poll: float) -> Result:
        """Queue.wait_result on this connection (see there)."""
        key_text, kind_text = key_value(key), text_value(kind, "kind")
        if not self._listens_for_results():
            return long_poll_result(queue, key, kind, deadline, time.monotonic)
        try:  # (the LISTEN and the notifications: a lost connection there changed nothing)
            channel = self._listen_results(queue)
        except Exception as exc:
            raise self._lost_or(Step.ROLLBACK, exc, self.connection)  # noqa: B904 - its cause is set
        try:
            while True:
                r = queue.result(key, kind)
                left = deadline - time.monotonic()
                if r.finished or r.state == "unknown" or left <= 0:
                    return r
                self._await_result_note(channel, str(key_text), str(kind_text), min(left, poll))
        except Exception as exc:
            raise self._lost_or(Step.ROLLBACK, exc, self.connection)  # noqa: B904 - its cause is set
        finally:
            self._unlisten_results(channel)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """Runs the calls in the block as one transaction (commit at the end, rollback on error).

        A serialization failure or deadlock inside the block (or at its commit) raises
        errors.SerializationError at once: the server rolled the whole transaction back, and
        only you can run it again (the whole block, your own writes included)."""
        self._may_begin()
        self._do(Step.BEGIN)
        self._in_transaction = True
        try:
            yield self
        except BaseException:
            self._in_transaction = False
            self._do(Step.ROLLBACK)
            raise
        self._in_transaction = False
        self._do(Step.COMMIT)

    def close(self) -> None:
        if self._owned:
            self.connection.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def result_note_matches(payload: str, key: str, kind: str) -> bool:
    """Whether a result notification's payload ({"key", "kind", "state"}) names this message (a
    payload that is not such an object: perhaps, the waiter reads the result again)."""
    try:
        note = json.loads(payload)
    except ValueError:
        return True
    if not isinstance(note, dict):
        return True
    return note.get("key") == key and note.get("kind") == kind


def wait_seconds(timeout: Duration) -> float:
    """A wait's timeout as seconds (None: no end)."""
    if timeout is None:
        return math.inf
    seconds = timeout.total_seconds() if isinstance(timeout, dt.timedelta) else timeout
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
        raise errors.InvalidArgumentError(
            f"timeout must be seconds >= 0, a timedelta or None, not {timeout!r}"
        )
    return float(seconds)


def long_poll_result(
    queue: Any, key: str | int, kind: str, deadline: float, clock: Callable[[], float]
) -> Any:
    """wait_result without LISTEN: queue_result_wait, RESULT_WAIT_SLICE seconds a call at most."""
    while True:
        left = deadline - clock()
        r = (
            queue.result(key, kind)
            if left <= 0
            else queue.result_wait_once(key, kind, max(round(min(left, RESULT_WAIT_SLICE), 6), 0.000001))
        )
        if r.finished or r.state == "unknown" or deadline - clock() <= 0:
            return r


def connect(dsn: str) -> Database:
    """Opens a connection; the DSN's scheme picks the dialect (postgresql:// or mysql://)."""
    dialect = dialects.for_dsn(dsn)
    return Database(dialect.connect(dsn), dialect, owned=True, dsn=dsn)


def is_sqlalchemy(obj: object) -> bool:
    """Whether obj is an instance of a SQLAlchemy class (or of an application's subclass of one)."""
    return any(klass.__module__.startswith("sqlalchemy.") for klass in type(obj).__mro__)


def sqlalchemy_source(obj: object) -> Callable[[], dialects.Connection] | None:
    """For a SQLAlchemy ``Connection`` or ORM ``Session``: a function that returns the DB-API
    connection of its current transaction, beginning one (as SQLAlchemy's autobegin would) when
    none is open. None for any other object."""
    if not is_sqlalchemy(obj):
        return None
    from sqlalchemy.engine import Connection
    from sqlalchemy.orm import Session

    if isinstance(obj, Session):
        return lambda: obj.connection().connection.driver_connection
    if isinstance(obj, Connection):

        def current() -> dialects.Connection:
            if not obj.in_transaction():
                obj.begin()
            return obj.connection.driver_connection

        return current
    raise errors.UnsupportedDsnError(
        f"cannot use a SQLAlchemy {type(obj).__name__}: pass a Connection or a Session (orm)"
    )


class QueueCalls(
    QueuesCalls,
    ProduceCalls,
    ReserveCalls,
    SettleCalls,
    GroupsCalls,
    WakeupsCalls,
    FastPathsCalls,
    HistoryCalls,
    BrowseCalls,
    ResultsCalls,
    DependenciesCalls,
    LimitsCalls,
    SchedulesCalls,
):
    """The public methods Queue and AsyncQueue share, written sans-IO (see Call).
    Each calls the routine of the same name."""

    def __init__(self, db: DatabaseCalls, name: str) -> None:
        self.db = db
        self.name = text_value(name, "queue")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, dialect={self.db.dialect.name!r})"

    @property
    def _runner(self) -> Any:
        return self.db


@runs_sans_io(sync_method)
class Queue(QueueCalls):
    """One named queue of a Database. Each method calls the routine of the same name."""

    db: Database

    def wait_result(
        self, key: str | int, kind: str, timeout: Duration = None, *, poll: float = RESULT_POLL
    ) -> Result:
        """Waits until the message has finished (succeeded, failed or cancelled) or is unknown,
        or timeout (seconds or a timedelta; None: no end) passes; returns its Result then.

        PostgreSQL: LISTENs on the queue's result channel for the time of the wait (the result is
        read again when its notification comes, and at least every `poll` seconds); MySQL/MariaDB,
        or a connection inside a transaction: queue_result_wait, a long poll in the server.
        Waits one after another on one Database each get their own result; for many at once use
        a Database per thread (as App does), or AsyncQueue.wait_result, which shares one."""
        deadline = time.monotonic() + wait_seconds(timeout)
        return self.db._wait_result(self, key, kind, deadline, poll)
