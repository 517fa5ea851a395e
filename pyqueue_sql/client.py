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

pyqueue_sql.aio has the same client for asyncio: the methods here are written
once, sans-IO (see Call), and each client only runs their steps.

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
import enum
import functools
import json
import math
import os
import random
import socket
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, NamedTuple

from . import dialects, errors, tracing
from .dialects import Duration, encode_json, key_value, read_token, text_value, token_value, whole_number

_UNCHANGED: Any = object()

# A call the client runs in a transaction of its own is tried this many times in all when the
# server rolls it back with a serialization failure or a deadlock, with a random pause of up to
# min(SERIALIZATION_BACKOFF_S * 2**n, SERIALIZATION_BACKOFF_MAX_S) seconds before try n+2.
SERIALIZATION_ATTEMPTS = 8
SERIALIZATION_BACKOFF_S = 0.005
SERIALIZATION_BACKOFF_MAX_S = 0.2

# A batch (push_many, commit_many) or a reserve(n) of more than this many messages is sent in
# calls of at most this many, so that no single routine call gets an unbounded array.
CHUNK_SIZE = 5000
# The largest n a routine's integer argument holds.
INT_MAX = 2**31 - 1

# Waiting for a result (Queue.wait_result): where the server has LISTEN, the waiter reads the
# queue's result notifications and reads the result again at least every RESULT_POLL seconds (a
# notification it could not have seen, a queue that keeps no results); elsewhere it long-polls
# queue_result_wait for at most RESULT_WAIT_SLICE seconds a call (so that the waiters sharing a
# connection take turns on it).
RESULT_POLL = 1.0
RESULT_WAIT_SLICE = 1.0

# What queue_fail stores of an error (the routine keeps the first 2000 characters too).
LAST_ERROR_MAX_CHARS = 2000

# The largest headers the push routines take, in bytes of their JSON text (the routines check it:
# a larger one is refused with InvalidArgumentError "headers are N bytes, more than 8192 bytes").
MAX_HEADERS_BYTES = 8192


def headers_value(headers: Any) -> dict[str, Any] | None:
    """Headers as a push takes them: None (none) or a dict of str to JSON values; anything else
    is refused with InvalidArgumentError before any call (the size is the routine's check)."""
    if headers is None:
        return None
    if not isinstance(headers, Mapping):
        raise errors.InvalidArgumentError(
            f"headers must be a dict of str to JSON values (a JSON object), not {type(headers).__name__}"
        )
    for name in headers:
        if not isinstance(name, str):
            raise errors.InvalidArgumentError(
                f"headers: a name must be a str, not {type(name).__name__} ({name!r:.40})"
            )
    return headers if isinstance(headers, dict) else dict(headers)


def encode_headers(headers: Mapping[str, Any] | None) -> str | None:
    """Headers as JSON text (None: none); InvalidArgumentError for a value JSON cannot hold."""
    if headers is None:
        return None
    try:
        return encode_json(headers)
    except errors.InvalidPayloadError as exc:
        raise errors.InvalidArgumentError(f"headers are not JSON-serialisable: {exc.__cause__}") from None


def _read_headers(dialect: dialects.Dialect, row: Sequence[Any], at: int) -> dict[str, Any] | None:
    """The headers column of a row (None: the message has none, or the schema has no such column yet)."""
    return dialect.read_payload(row[at]) if len(row) > at and row[at] is not None else None


def _batch_with_headers(
    encode: Callable[[Sequence[int]], dict[str, Any]], headers: Sequence[dict[str, Any] | None]
) -> dict[str, Any]:
    """The arguments of a *_batch_with_headers routine: the plain batch's (encode(indices) encodes
    the items at those indices) and the headers of each item, either as an array beside the others
    or, where the batch is one JSON array of message objects (its "messages" argument), as each
    object's "headers" member."""
    params = encode(range(len(headers)))
    if "messages" not in params:
        params["headers"] = [encode_headers(h) for h in headers]
        return params
    parts = []
    for i, h in enumerate(headers):
        one = encode([i])["messages"]  # '[{...}]', compact: the object ends 2 characters before the end
        parts.append(f'{one[1:-2]},"headers":{encode_headers(h) or "null"}}}')
    params["messages"] = "[" + ",".join(parts) + "]"
    return params


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Message:
    """A message taken with pop (already gone from the queue)."""

    queue: str
    key: str
    kind: str
    payload: Any
    priority: int
    attempts: int
    created_at: dt.datetime
    headers: dict[str, Any] | None = None  # the message's headers (None: it has none)


@dataclass(frozen=True)
class Reservation:
    """A reserved message: invisible to other consumers until its timeout passes.

    ``token`` is what commit/rollback/extend/move must show; after the
    reservation expires and another consumer takes the message it no longer works.
    """

    queue: str
    key: str
    kind: str
    payload: Any
    token: str
    priority: int
    attempts: int
    created_at: dt.datetime
    scheduled_at_initially: dt.datetime
    headers: dict[str, Any] | None = None  # the message's headers (None: it has none)


# The states of a finished message in queue_result (its row in pyqueue_result); every other state
# is a live message's ('ready', 'delayed', 'reserved', 'blocked') or 'unknown'.
FINISHED_STATES = frozenset({"succeeded", "failed", "cancelled"})

# The largest progress value queue_set_progress stores, in bytes of its JSON text.
MAX_PROGRESS_BYTES = 65536


@dataclass(frozen=True)
class Result:
    """What queue_result says of one message (Queue.result, Queue.wait_result).

    ``state``: a live message's 'ready', 'delayed', 'reserved', 'blocked' (behind its FIFO
    group's head) or 'waiting' (pushed with push_after: a parent has not succeeded yet); a finished one's 'succeeded', 'failed' or 'cancelled' (kept for the queue's
    result_retention); 'unknown' when there is neither (never pushed, not kept, removed, moved,
    or its result expired). ``result`` is what its consumer committed (succeeded only);
    ``last_error`` and ``attempts`` those of its last delivery; ``progress`` the last value its
    consumer set; ``finished_at`` when it finished; ``cancel_requested`` whether a cancel asked
    its consumer to stop (a live, reserved message)."""

    queue: str
    key: str
    kind: str
    state: str
    result: Any = None
    last_error: str | None = None
    attempts: int | None = None
    progress: Any = None
    finished_at: dt.datetime | None = None
    cancel_requested: bool = False

    @property
    def finished(self) -> bool:
        """Whether the message has finished: succeeded, failed or cancelled."""
        return self.state in FINISHED_STATES


@dataclass(frozen=True)
class ParentResult:
    """One parent of a message pushed with push_after, as Queue.parent_results reads it (in the
    order the parents were given): its queue, key and kind, its ``state`` as queue_result reads
    it ('succeeded', 'failed', 'cancelled'; while it is live 'ready', 'delayed', 'reserved',
    'waiting', 'blocked'; 'unknown' once it moved on or its result was purged) and ``result``,
    what its consumer committed (succeeded only, else None)."""

    queue: str
    key: str
    kind: str
    state: str
    result: Any = None


class Renewal(NamedTuple):
    """What Queue.renew returns: the reservation with its new token (None when it no longer
    holds), and whether a cancel was requested for it (queue_cancel)."""

    reservation: Reservation | None
    cancel_requested: bool


@dataclass(frozen=True)
class QueueStats:
    queue: str
    ready: int
    delayed: int
    reserved: int
    dead: int
    oldest_ready_age_s: float | None
    paused: bool


@dataclass(frozen=True)
class NewMessage:
    """One message for push_many (key: a str, or an int as its decimal text; group: its FIFO
    group, None for none)."""

    key: str | int
    kind: str
    payload: Any
    run_at: dt.datetime | dt.timedelta | None = None
    priority: int | None = None
    group: str | None = None
    headers: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Publication:
    """One message for publish_many: it goes to every queue bound to a pattern matching topic."""

    topic: str
    key: str | int
    kind: str
    payload: Any
    run_at: dt.datetime | dt.timedelta | None = None
    priority: int | None = None
    headers: Mapping[str, Any] | None = None


# -- sans-IO: the client's logic, shared by the sync and the asyncio client -----------------------
#
# Every public method of Queue and Database is written once, as a generator that yields each
# statement to run (a Call) and gets its rows back from the yield; it validates and encodes the
# arguments before the first yield and decodes the rows after it. The policy around the calls
# (serialization failures run again, transactions of the client's own) is written the same way
# (DatabaseCalls._call_steps) and yields Steps too. Database runs those steps on a DB-API
# connection, AsyncDatabase (pyqueue_sql.aio) awaits each on an asyncio driver's connection: the
# two clients differ only in how one step is run (Database._do, AsyncDatabase._do).


@dataclass(frozen=True)
class Call:
    """One named statement (pyqueue_sql.queries) with its parameters, as a sans-IO method yields it.
    The rows of its first result set come back, or the rows of every result set when all_sets."""

    statement: str
    params: dict[str, Any]
    all_sets: bool = False


class Step(enum.Enum):
    """What the client's own policy (retries, transactions of its own) asks of the connection,
    besides Calls: yielded like them, run by Database / AsyncDatabase."""

    BEGIN = "begin"
    COMMIT = "commit"  # a serialization failure at COMMIT is raised as SerializationError
    ROLLBACK = "rollback"


@dataclass(frozen=True)
class OwnTransaction:
    """A call in a transaction of the client's own: BEGIN, the call, COMMIT, or ROLLBACK when it
    raises (see Dialect.run_in_own_transaction: where the driver can, the three go to the server
    as one round trip)."""

    call: Call


@dataclass(frozen=True)
class Pause:
    """Wait this long before the next step (a retry's backoff)."""

    seconds: float


def _call(statement: str, **params: Any) -> Call:
    return Call(statement, params)


def _call_sets(statement: str, **params: Any) -> Call:
    return Call(statement, params, all_sets=True)


# What a sans-IO method yields first when it will run several calls (a chunked batch): on a
# Database that runs each call in its own transaction they then run in one transaction, all or
# nothing, as the single call of a smaller batch would; inside a transaction (db.transaction(),
# a wrapped connection) they are part of that one.
ONE_TRANSACTION: Any = object()

SansIO = Generator[Any, Any, Any]


def sans_io(method: Callable[..., SansIO]) -> Callable[..., SansIO]:
    """Marks a generator method as a public method written sans-IO (see Call)."""
    method.sans_io = True  # type: ignore[attr-defined]
    return method


def runs_sans_io(adapt: Callable[[Callable[..., SansIO]], Callable[..., Any]]) -> Callable[[type], type]:
    """A class decorator: every sans-IO method the class inherits becomes the method ``adapt``
    makes of it (same name, signature and docstring), one that runs it."""

    def decorate(cls: type) -> type:
        methods = {
            name: method
            for klass in reversed(cls.__mro__)
            for name, method in vars(klass).items()
            if getattr(method, "sans_io", False)
        }
        for name, method in methods.items():
            runner = adapt(method)
            runner.sans_io = False  # functools.wraps copied the mark: this one runs it
            setattr(cls, name, runner)
        return cls

    return decorate


def sync_method(method: Callable[..., SansIO]) -> Callable[..., Any]:
    """The blocking method of a sans-IO one: Database.drive runs its calls."""

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._runner.drive(method(self, *args, **kwargs))

    return run


def advance(steps: SansIO, reply: Any) -> tuple[bool, Any]:
    """Sends a call's rows into a sans-IO method: (False, its next Call) or (True, its result)."""
    try:
        return False, steps.send(reply)
    except StopIteration as done:
        return True, done.value


def retry_pause(attempt: int) -> float:
    """How long to wait before running a call again after its attempt-th serialization failure."""
    return random.uniform(0, min(SERIALIZATION_BACKOFF_S * 2**attempt, SERIALIZATION_BACKOFF_MAX_S))


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    """items in consecutive slices of at most size, in order."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def chunk_sizes(n: int | None) -> list[int | None]:
    """The n of each call that reserves n in chunks of at most CHUNK_SIZE. An n the routine
    refuses or that its integer cannot hold (None = 1, n < 1, over 2**31 - 1) is passed as it
    is, in one call, for the routine to answer."""
    if n is None or n <= CHUNK_SIZE or n > INT_MAX:
        return [n]
    return [CHUNK_SIZE] * (n // CHUNK_SIZE) + ([n % CHUNK_SIZE] if n % CHUNK_SIZE else [])


def _each(calls: Sequence[Call]) -> SansIO:
    """Runs the calls (in one transaction when there are several: ONE_TRANSACTION); their rows, in order."""
    if len(calls) > 1:
        yield ONE_TRANSACTION
    results = []
    for call in calls:
        results.append((yield call))
    return results


class DatabaseCalls:
    """The public methods Database and AsyncDatabase share, written sans-IO (see Call)."""

    def __init__(
        self,
        connection: Any,
        dialect: dialects.Dialect,
        *,
        owned: bool,
        source: Callable[[], Any] | None = None,
    ) -> None:
        self._connection = connection
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

    @property
    def _runner(self) -> Any:
        return self

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

    def _calls_steps(self, steps: SansIO, reply: Any) -> SansIO:
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
        """body in a transaction of the client's own: committed when it ends, rolled back when it
        raises. (MySQL's commit, rollback, fail, move... take one each: their history row and
        the removal then stand or fall together.)"""
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

    @sans_io
    def stats(self) -> list[QueueStats]:
        """One row per queue."""
        return [_stats(self.dialect, row) for row in (yield _call("stats", queue=None))]

    @sans_io
    def settings(self) -> list[QueueSettings]:
        """Every queue's settings, ordered by queue name."""
        return [_settings(self.dialect, row) for row in (yield _call("settings", queue=None))]

    # -- worker registry, and the limits / schedules of every queue ----------------
    @sans_io
    def register_worker(
        self,
        name: str | None = None,
        queues: Sequence[str] | None = None,
        host: str | None = None,
        pid: int | None = None,
    ) -> WorkerRegistration:
        """Registers a worker (default name host:pid); reserve with its ``reserve_as``."""
        host = socket.gethostname() if host is None else host
        pid = os.getpid() if pid is None else pid
        name = f"{host}:{pid}" if name is None else name
        if isinstance(queues, str):
            raise errors.InvalidArgumentError("queues must be a list of queue names, not a single str")
        [(worker_id, secret)] = [
            tuple(row)
            for row in (
                yield _call(
                    "worker_register",
                    name=text_value(name, "name"),
                    host=text_value(host, "host"),
                    pid=whole_number(pid, "pid"),
                    queues=self.dialect.kinds(queues),
                )
            )
        ]
        return WorkerRegistration(int(worker_id), name, f"{name}#{int(worker_id)}", str(secret))

    @sans_io
    def heartbeat_worker(self, registration: WorkerRegistration) -> bool:
        """False when the worker is no longer registered (released as dead: register again), or when
        the registration's secret is not that worker's."""
        reg = _registration(registration)
        return bool((yield _call("worker_heartbeat", worker_id=reg.worker_id, secret=reg.secret))[0][0])

    @sans_io
    def deregister_worker(self, registration: WorkerRegistration) -> bool:
        """Removes the registration; False when it is gone already or the secret is not that worker's."""
        reg = _registration(registration)
        return bool((yield _call("worker_deregister", worker_id=reg.worker_id, secret=reg.secret))[0][0])

    @sans_io
    def release_dead_workers(self, older_than: Duration) -> int:
        """Removes workers silent for longer than older_than; their reservations become ready. Returns how many."""
        return int(
            (yield _call("release_dead_workers", older_than=self.dialect.duration(older_than, "older_than")))[
                0
            ][0]
        )

    @sans_io
    def workers(self) -> list[WorkerInfo]:
        d = self.dialect
        out = []
        for wid, name, host, pid, queues, started, beat, age, reserve_as in (yield _call("workers")):
            if isinstance(queues, (str, bytes, bytearray)):
                queues = d.read_payload(queues)
            out.append(
                WorkerInfo(
                    int(wid),
                    name,
                    host,
                    pid,
                    None if queues is None else list(queues),
                    d.read_time(started),
                    d.read_time(beat),
                    float(age),
                    reserve_as,
                )
            )
        return out

    @sans_io
    def limits(self) -> list[LimitInfo]:
        """Every queue's concurrency limits."""
        return [LimitInfo(q, k, int(c), int(u)) for q, k, c, u in (yield _call("limits", queue=None))]

    @sans_io
    def rates(self) -> list[RateInfo]:
        """Every queue's rate limits (queue_rates), ordered by queue, then kind (the queue-wide
        rate, kind None, first)."""
        return [_rate(self.dialect, row) for row in (yield _call("rates", queue=None))]

    @sans_io
    def schedules(self) -> list[ScheduleInfo]:
        """Every queue's recurring messages."""
        return [_schedule(self.dialect, row) for row in (yield _call("schedules", queue=None))]

    @sans_io
    def throughput(self, since: dt.datetime | dt.timedelta | None = None) -> list[ThroughputRow]:
        """Every queue's messages that left it per minute since ``since`` (Queue.throughput)."""
        return (yield from _throughput(self.dialect, None, since))

    # -- topics: publish to the queues bound to a pattern ---------------------------
    @sans_io
    def publish(
        self,
        topic: str,
        key: str | int,
        kind: str,
        payload: Any,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> int:
        """Pushes the message into every queue bound (bind) to a pattern that matches topic, one
        copy per queue; returns how many queues got a new one (a queue that holds a live message
        with this key and kind already does not count; no matching binding: 0). headers: as
        Queue.push's (each copy carries them)."""
        d = self.dialect
        params = dict(
            topic=text_value(topic, "topic"),
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            run_at=d.time(run_at, "run_at"),
            priority=priority_value(priority),
        )
        headers = tracing.with_context(headers_value(headers), tracing.current_carrier())
        if headers is None:
            rows = yield _call("publish", **params)
        else:
            rows = yield _call("publish_with_headers", **params, headers=encode_headers(headers))
        return int(rows[0][0])

    @sans_io
    def publish_many(self, messages: Iterable[Publication | tuple | Mapping[str, Any]]) -> int:
        """publish for many messages in one call; returns how many new messages all the queues got.
        Tuples are (topic, key, kind, payload[, run_at[, priority[, headers]]]).

        More than CHUNK_SIZE messages go in several calls of at most CHUNK_SIZE each, run as one
        transaction (all are validated before the first is sent)."""
        d = self.dialect
        topics, items = [], []
        headers: list[dict[str, Any] | None] = []
        for m in messages:
            if isinstance(m, Mapping):
                m = Publication(**m)
            elif not isinstance(m, Publication):
                m = Publication(*m)
            topics.append(text_value(m.topic, "topic"))
            items.append(
                (
                    key_value(m.key),
                    text_value(m.kind, "kind"),
                    m.payload,
                    d.time(m.run_at, "run_at"),
                    priority_value(m.priority),
                )
            )
            headers.append(headers_value(m.headers))
        if not items:
            return 0
        carrier = tracing.current_carrier()
        if carrier is not None:
            headers = [tracing.with_context(h, carrier) for h in headers]
        if all(h is None for h in headers):
            publishes = [
                _call("publish_batch", **d.topic_batch(topic_part, part))
                for topic_part, part in zip(chunks(topics, CHUNK_SIZE), chunks(items, CHUNK_SIZE))
            ]
        else:
            publishes = [
                _call(
                    "publish_batch_with_headers",
                    **_batch_with_headers(
                        lambda ix, t=topic_part, p=part: d.topic_batch(
                            [t[i] for i in ix], [p[i] for i in ix]
                        ),
                        h_part,
                    ),
                )
                for topic_part, part, h_part in zip(
                    chunks(topics, CHUNK_SIZE), chunks(items, CHUNK_SIZE), chunks(headers, CHUNK_SIZE)
                )
            ]
        return sum(int(rows[0][0]) for rows in (yield from _each(publishes)))

    @sans_io
    def bind(self, pattern: str, queue: str | Queue) -> bool:
        """Binds a topic pattern to a queue: publish then pushes the messages of every matching
        topic into it. Words are dot-separated; ``*`` stands for one word, ``#`` for zero or more
        (``orders.*``, ``orders.#``, ``#``). True if new, False if it was bound already."""
        return bool(
            (yield _call("bind", pattern=text_value(pattern, "pattern"), queue=_queue_name(queue)))[0][0]
        )

    @sans_io
    def unbind(self, pattern: str, queue: str | Queue) -> bool:
        """Removes a binding; False if there was none."""
        return bool(
            (yield _call("unbind", pattern=text_value(pattern, "pattern"), queue=_queue_name(queue)))[0][0]
        )

    @sans_io
    def bindings(self, queue: str | Queue | None = None) -> list[Binding]:
        """The bindings of one queue (None = every queue's), ordered by queue, then pattern."""
        d = self.dialect
        return [
            Binding(pattern, q, d.read_time(created))
            for pattern, q, created in (yield _call("bindings", queue=_queue_name(queue)))
        ]


@runs_sans_io(sync_method)
class Database(DatabaseCalls):
    """A connection to a database that has the pyqueue-sql schema installed."""

    @property
    def connection(self) -> Any:
        """The DB-API connection the calls run on (a wrapped SQLAlchemy object's current one)."""
        return self._connection if self._source is None else self._source()

    @classmethod
    def wrap(cls, connection: Any) -> Database:
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

    def call(self, statement: str, **params: Any) -> list[tuple]:
        """Runs a named statement; its (first) result set."""
        return self._perform(self._call_steps(Call(statement, params)))

    def call_sets(self, statement: str, **params: Any) -> list[list[tuple]]:
        """Runs a named statement; every result set it returns (MySQL procedures)."""
        return self._perform(self._call_steps(Call(statement, params, all_sets=True)))

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

    def _do(self, step: Any) -> Any:
        d, connection = self.dialect, self.connection
        if isinstance(step, Call):
            return (d.run_sets if step.all_sets else d.run)(connection, step.statement, step.params)
        if isinstance(step, OwnTransaction):
            call = step.call
            return d.run_in_own_transaction(connection, call.statement, call.params, call.all_sets)
        if step is Step.BEGIN:
            return d.begin(connection)
        if step is Step.COMMIT:
            return d.end_transaction(connection, commit=True)
        if step is Step.ROLLBACK:
            return d.rollback(connection)
        time.sleep(step.seconds)
        return None

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
            self.dialect.listen(self.connection, [channel])
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
                cur.execute(d.compose(d.statement("unlisten"), channel=d.identifier(channel)))

    def _await_result_note(self, channel: str, key: str, kind: str, seconds: float) -> None:
        """Reads notifications up to `seconds`, until one announces this message's result."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            for got, payload in self.dialect.wait_for_notification(self.connection, left):
                if got == channel and result_note_matches(payload, key, kind):
                    return

    def _wait_result(self, queue: Queue, key: str | int, kind: str, deadline: float, poll: float) -> Result:
        """Queue.wait_result on this connection (see there)."""
        key_text, kind_text = key_value(key), text_value(kind, "kind")
        if not self._listens_for_results():
            return long_poll_result(queue, key, kind, deadline, time.monotonic)
        channel = self._listen_results(queue)
        try:
            while True:
                r = queue.result(key, kind)
                left = deadline - time.monotonic()
                if r.finished or r.state == "unknown" or left <= 0:
                    return r
                self._await_result_note(channel, str(key_text), str(kind_text), min(left, poll))
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
    return Database(dialect.connect(dsn), dialect, owned=True)


def is_sqlalchemy(obj: Any) -> bool:
    """Whether obj is an instance of a SQLAlchemy class (or of an application's subclass of one)."""
    return any(klass.__module__.startswith("sqlalchemy.") for klass in type(obj).__mro__)


def sqlalchemy_source(obj: Any) -> Callable[[], Any] | None:
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

        def current() -> Any:
            if not obj.in_transaction():
                obj.begin()
            return obj.connection.driver_connection

        return current
    raise errors.UnsupportedDsnError(
        f"cannot use a SQLAlchemy {type(obj).__name__}: pass a Connection or a Session (orm)"
    )


def _registration(registration: Any) -> WorkerRegistration:
    if not isinstance(registration, WorkerRegistration):
        raise errors.InvalidArgumentError(
            "pass the WorkerRegistration that register_worker returned (its secret shows the "
            f"registration is yours), not {type(registration).__name__}"
        )
    whole_number(registration.worker_id, "worker_id")
    text_value(registration.secret, "secret")
    return registration


INT_MIN, INT_MAX = -2147483648, 2147483647
MAX_PAYLOAD_LIMIT = 268435456  # the largest max_payload a queue may have (256 MiB)


def whole_number_within(value: Any, what: str, low: int, high: int) -> int | None:
    """whole_number, refused outside [low, high] with the words the MySQL/MariaDB routines use,
    so that a number out of range gives one message on both dialects (PostgreSQL would answer
    "integer out of range" from its cast, before the routine runs)."""
    checked = whole_number(value, what)
    if checked is not None and not low <= checked <= high:
        raise errors.InvalidArgumentError(f"{what} must be a whole number from {low} to {high}")
    return checked


def priority_value(value: Any) -> int | None:
    """A message's priority: a whole number in the range of a 32-bit integer (None = 0)."""
    return whole_number_within(value, "priority", INT_MIN, INT_MAX)


def _settings(dialect: dialects.Dialect, row: Sequence[Any]) -> QueueSettings:
    queue, visibility, max_attempts, dlq, retention, paused, window, *caps = row
    # the trailing columns a newer queue_settings has (an older one's row stops before them)
    max_reservation, max_payload, result_retention = (list(caps) + [None, None, None])[:3]
    return QueueSettings(
        queue,
        dialect.read_duration(visibility),
        int(max_attempts),
        dlq,
        dialect.read_duration(retention),
        bool(paused),
        dialect.read_duration(window),
        dialect.read_duration(max_reservation),
        None if max_payload is None else int(max_payload),
        dialect.read_duration(result_retention),
    )


def error_text(error: Any) -> str | None:
    """What Queue.fail stores for an error: a str as it is, an exception as "Type: message"
    (just "Type" when it has no message); at most LAST_ERROR_MAX_CHARS characters."""
    if error is None:
        return None
    if isinstance(error, BaseException):
        message = str(error)
        text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    elif isinstance(error, str):
        text = error
    else:
        raise errors.InvalidArgumentError(f"error must be a str or an exception, not {type(error).__name__}")
    return text[:LAST_ERROR_MAX_CHARS]


def held_reservation(r: Any) -> Any:
    """A reservation argument (commit, rollback, fail, extend, move...): a Reservation as reserve
    returned it, or an object with its key, kind and token; anything else is refused with
    InvalidArgumentError, the same on both clients, before any call."""
    if isinstance(r, Reservation) or all(hasattr(r, name) for name in ("key", "kind", "token")):
        return r
    raise errors.InvalidArgumentError(
        f"pass the Reservation that reserve returned (its key, kind and token name the message "
        f"and prove it is held), not {type(r).__name__} ({r!r:.40})"
    )


_RESERVATION_FIELDS = tuple(f.name for f in fields(Reservation))
_new_object = object.__new__


def _reservations(queue: str, dialect: dialects.Dialect, rows: Iterable[Sequence[Any]]) -> list[Reservation]:
    """The Reservations of reserved rows. Each is made as its frozen dataclass's __init__ would
    make it (the same fields, all set) without that __init__'s ten object.__setattr__ calls: this
    runs once a reserved message (bench/README.md, Worker CPU)."""
    read_payload, read_time = dialect.read_payload, dialect.read_time
    made = []
    for row in rows:
        key, kind, payload, token, priority, attempts, created, initially = row[:8]
        headers = row[8] if len(row) > 8 else None
        r = _new_object(Reservation)
        r.__dict__.update(
            zip(
                _RESERVATION_FIELDS,
                (
                    queue,
                    key,
                    kind,
                    read_payload(payload),
                    read_token(token),
                    priority,
                    attempts,
                    read_time(created),
                    read_time(initially),
                    None if headers is None else read_payload(headers),
                ),
            )
        )
        made.append(r)
    return made


def _stats(dialect: dialects.Dialect, row: Sequence[Any]) -> QueueStats:
    queue, ready, delayed, reserved, dead, age, paused = row
    return QueueStats(
        queue=queue,
        ready=int(ready),
        delayed=int(delayed),
        reserved=int(reserved),
        dead=int(dead),
        oldest_ready_age_s=None if age is None else float(age),
        paused=bool(paused),
    )


class QueueCalls:
    """The public methods Queue and AsyncQueue share, written sans-IO (see Call).
    Each calls the routine of the same name."""

    def __init__(self, db: Any, name: str) -> None:
        self.db = db
        self.name = text_value(name, "queue")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, dialect={self.db.dialect.name!r})"

    @property
    def _runner(self) -> Any:
        return self.db

    # -- administration ------------------------------------------------------
    @sans_io
    def create(
        self,
        visibility_timeout: Duration = None,
        max_attempts: int | None = None,
        dead_letter_queue: str | Queue | None = None,
        history_retention: Duration = None,
    ) -> Queue:
        """Creates the queue, or changes the settings passed on an existing one.

        A new queue gets the default for each setting left at None (30 s, 10 deliveries, no
        dead-letter queue, no history). On an existing queue None leaves that setting as it is;
        use reset_setting to put one back to its default."""
        d = self.db.dialect
        if isinstance(dead_letter_queue, QueueCalls):
            dead_letter_queue = dead_letter_queue.name
        yield _call(
            "create",
            queue=self.name,
            visibility_timeout=d.duration(visibility_timeout, "visibility_timeout"),
            max_attempts=whole_number(max_attempts, "max_attempts"),
            dead_letter_queue=text_value(dead_letter_queue, "dead_letter_queue"),
            history_retention=d.duration(history_retention, "history_retention"),
        )
        return self

    @sans_io
    def reset_setting(self, name: str) -> None:
        """Puts one setting back to its default: 'visibility_timeout' (30 s), 'max_attempts' (10),
        'dead_letter_queue' (none), 'history_retention' (none: no history kept),
        'max_reservation' (12 hours) or 'max_payload' (1048576 bytes)."""
        yield _call("reset_setting", queue=self.name, setting=text_value(name, "setting"))

    @sans_io
    def set_max_reservation(self, max_reservation: Duration = None) -> None:
        """The longest reservation timeout a consumer may ask for (reserve, commit_reserve,
        extend; longer is refused with InvalidArgumentError). None = the default, 12 hours; not
        below the queue's visibility_timeout."""
        d = self.db.dialect
        yield _call(
            "set_max_reservation",
            queue=self.name,
            max_reservation=d.duration(max_reservation, "max_reservation"),
        )

    @sans_io
    def set_max_payload(self, max_payload: int | None = None) -> None:
        """The largest payload, in bytes of its JSON text, a push may write into the queue
        (larger is refused with InvalidPayloadError). None = the default, 1048576 (1 MiB);
        1 to 268435456."""
        yield _call(
            "set_max_payload",
            queue=self.name,
            max_payload=whole_number_within(max_payload, "max_payload", 1, MAX_PAYLOAD_LIMIT),
        )

    @sans_io
    def settings(self) -> QueueSettings:
        """The queue's settings (durations as timedelta)."""
        return _settings(self.db.dialect, (yield _call("settings", queue=self.name))[0])

    @sans_io
    def drop(self) -> None:
        yield _call("drop", queue=self.name)

    @sans_io
    def pause(self) -> None:
        yield _call("pause", queue=self.name)

    @sans_io
    def resume(self) -> None:
        yield _call("resume", queue=self.name)

    @sans_io
    def stats(self) -> QueueStats:
        return _stats(self.db.dialect, (yield _call("stats", queue=self.name))[0])

    # -- producing -------------------------------------------------------------
    @sans_io
    def push(
        self,
        key: str | int,
        kind: str,
        payload: Any,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
        group: str | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> bool:
        """True if inserted, False if a live message with this key and kind exists (dedup: its
        headers are not changed either).

        With a group (queue_push_grouped) the messages of that group are delivered one at a time,
        in run_at and push order: each waits until the one before it has left the queue.

        headers: a dict of str to JSON values carried beside the payload (at most 8192 bytes of
        JSON), None for none; with OpenTelemetry installed and a span current, the trace context
        is added (see pyqueue_sql.tracing)."""
        d = self.db.dialect
        params = dict(
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            run_at=d.time(run_at, "run_at"),
            priority=priority_value(priority),
        )
        headers = tracing.with_context(headers_value(headers), tracing.current_carrier())
        if headers is not None:
            params["headers"] = encode_headers(headers)
        if group is None:
            rows = yield _call("push" if headers is None else "push_with_headers", **params)
        else:
            rows = yield _call(
                "push_grouped" if headers is None else "push_grouped_with_headers",
                **params,
                group=text_value(group, "group"),
            )
        return bool(rows[0][0])

    @sans_io
    def push_many(self, messages: Iterable[NewMessage | tuple | Mapping[str, Any]]) -> int:
        """Pushes many in one call; returns how many were new. Tuples are
        (key, kind, payload[, run_at[, priority[, group[, headers]]]]).

        A batch in which some message has a group goes through queue_push_batch_grouped (the
        others: no group), any other through queue_push_batch. More than CHUNK_SIZE messages go
        in several calls of at most CHUNK_SIZE each, run as one transaction (all are validated
        before the first is sent)."""
        d = self.db.dialect
        items, groups = [], []
        headers: list[dict[str, Any] | None] = []
        for m in messages:
            if type(m) is tuple and len(m) == 3 and type(m[0]) is str and type(m[1]) is str:
                # the common shape, (str key, str kind, payload): nothing to convert or check here,
                # and no NewMessage to build (a third of the client's time for a batch)
                items.append((m[0], m[1], m[2], None, None))
                groups.append(None)
                headers.append(None)
                continue
            if isinstance(m, Mapping):
                m = NewMessage(**m)
            elif not isinstance(m, NewMessage):
                m = NewMessage(*m)
            items.append(
                (
                    key_value(m.key),
                    text_value(m.kind, "kind"),
                    m.payload,
                    d.time(m.run_at, "run_at"),
                    priority_value(m.priority),
                )
            )
            groups.append(text_value(m.group, "group"))
            headers.append(headers_value(m.headers))
        if not items:
            return 0
        carrier = tracing.current_carrier()
        if carrier is not None:
            headers = [tracing.with_context(h, carrier) for h in headers]
        grouped = any(g is not None for g in groups)
        if all(h is None for h in headers):
            if not grouped:
                pushes = [
                    _call("push_batch", queue=self.name, **d.batch(part))
                    for part in chunks(items, CHUNK_SIZE)
                ]
            else:
                pushes = [
                    _call("push_batch_grouped", queue=self.name, **d.grouped_batch(part, group_part))
                    for part, group_part in zip(chunks(items, CHUNK_SIZE), chunks(groups, CHUNK_SIZE))
                ]
        elif not grouped:
            pushes = [
                _call(
                    "push_batch_with_headers",
                    queue=self.name,
                    **_batch_with_headers(lambda ix, p=part: d.batch([p[i] for i in ix]), h_part),
                )
                for part, h_part in zip(chunks(items, CHUNK_SIZE), chunks(headers, CHUNK_SIZE))
            ]
        else:
            pushes = [
                _call(
                    "push_batch_grouped_with_headers",
                    queue=self.name,
                    **_batch_with_headers(
                        lambda ix, p=part, g=group_part: d.grouped_batch(
                            [p[i] for i in ix], [g[i] for i in ix]
                        ),
                        h_part,
                    ),
                )
                for part, group_part, h_part in zip(
                    chunks(items, CHUNK_SIZE), chunks(groups, CHUNK_SIZE), chunks(headers, CHUNK_SIZE)
                )
            ]
        return sum(int(rows[0][0]) for rows in (yield from _each(pushes)))

    # -- consuming -------------------------------------------------------------
    @sans_io
    def pop(self, n: int = 1) -> list[Message]:
        """Takes up to n ready messages out of the queue (at-most-once)."""
        d = self.db.dialect
        return [
            Message(
                self.name,
                key,
                kind,
                d.read_payload(payload),
                priority,
                attempts,
                d.read_time(created),
                _read_headers(d, row, 6),
            )
            for row in (yield _call("pop", queue=self.name, n=whole_number(n, "n")))
            for key, kind, payload, priority, attempts, created, *_ in (row,)
        ]

    @sans_io
    def reserve(
        self,
        n: int = 1,
        worker: str | None = None,
        timeout: Duration = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Reservation]:
        """Reserves up to n ready messages, highest priority first, FIFO within a priority.

        n over CHUNK_SIZE is reserved in calls of at most CHUNK_SIZE, in one transaction, until n
        are reserved or a call finds fewer than it asked for."""
        d = self.db.dialect
        params = dict(
            queue=self.name,
            worker=text_value(worker or default_worker_name(), "worker"),
            timeout=d.duration(timeout, "timeout"),
            kinds=d.kinds(kinds),
        )
        sizes = chunk_sizes(whole_number(n, "n"))
        if len(sizes) > 1:
            yield ONE_TRANSACTION
        rows: list[Sequence[Any]] = []
        for size in sizes:
            got = yield _call("reserve", **params, n=size)
            rows += got
            if len(sizes) == 1 or len(got) < size:
                break
        return _reservations(self.name, d, rows)

    def _held(self, r: Reservation) -> dict[str, Any]:
        """The (key, kind, token) arguments that name a reservation."""
        r = held_reservation(r)
        return dict(
            queue=self.name, key=key_value(r.key), kind=text_value(r.kind, "kind"), token=token_value(r.token)
        )

    @sans_io
    def commit(self, r: Reservation) -> bool:
        """Deletes the message; False if the reservation no longer holds."""
        return bool((yield _call("commit", **self._held(r)))[0][0])

    @sans_io
    def commit_reserve(
        self,
        previous: Reservation | None,
        n: int = 1,
        worker: str | None = None,
        timeout: Duration = None,
        kinds: Sequence[str] | None = None,
    ) -> tuple[bool | None, list[Reservation]]:
        """Commits ``previous`` (None: nothing to commit) and reserves up to n more, in one call.

        Returns (committed, reservations): committed is the commit's result
        (None when previous was None). One call per message for a consumer
        that works one message at a time: one round trip. On MySQL/MariaDB the
        call is one transaction of its own, so that its history row, its delete
        and its claims stand or fall together: on MariaDB the procedure opens it,
        on MySQL 8.0 the client (START TRANSACTION, CALL, COMMIT, sent together).
        """
        d = self.db.dialect
        held = (
            dict(queue=self.name, key=None, kind=None, token=None)
            if previous is None
            else self._held(previous)
        )
        params = dict(
            held,
            worker=text_value(worker or default_worker_name(), "worker"),
            timeout=d.duration(timeout, "timeout"),
            n=whole_number(n, "n"),
            kinds=d.kinds(kinds),
        )
        committed, rows = d.read_commit_reserve((yield _call_sets("commit_reserve", **params)))
        return (None if committed is None else bool(committed)), _reservations(self.name, d, rows)

    @sans_io
    def commit_many(self, reservations: Iterable[Reservation]) -> int:
        """Commits many reservations in one call; returns how many still held (and are now gone).
        More than CHUNK_SIZE go in calls of at most CHUNK_SIZE each, run as one transaction."""
        items = list(reservations)
        if not items:
            return 0
        d = self.db.dialect
        # the checks of each reservation, skipped for a str where they would return it as it is
        # (a worker commits every message it ran here: bench/README.md, Worker CPU)
        items = [r if type(r) is Reservation else held_reservation(r) for r in items]
        commits = [
            _call(
                "commit_batch",
                queue=self.name,
                keys=d.text_array([r.key if type(r.key) is str else key_value(r.key) for r in part]),
                kinds=d.text_array(
                    [r.kind if type(r.kind) is str else text_value(r.kind, "kind") for r in part]
                ),
                tokens=d.text_array(
                    [r.token if type(r.token) is str else token_value(r.token) for r in part]
                ),
            )
            for part in chunks(items, CHUNK_SIZE)
        ]
        return sum(int(rows[0][0]) for rows in (yield from _each(commits)))

    @sans_io
    def rollback(self, r: Reservation, delay: Duration = None) -> bool:
        """Gives the message back (eligible after delay), or dead-letters it after max_attempts."""
        d = self.db.dialect
        return bool((yield _call("rollback", **self._held(r), delay=d.duration(delay, "delay")))[0][0])

    @sans_io
    def snooze(self, r: Reservation, delay: Duration = None) -> bool:
        """Gives the message back, eligible after delay, without using up an attempt (this
        delivery does not count toward max_attempts, so a snooze never dead-letters); its last
        error is kept. False if the reservation no longer holds."""
        d = self.db.dialect
        return bool((yield _call("snooze", **self._held(r), delay=d.duration(delay, "delay")))[0][0])

    @sans_io
    def release(self, worker: str | None = None) -> int:
        """Hands back every message of the queue reserved now (by ``worker``, the name the
        reservations were made with, when given): each is ready at once, its reservation no
        longer holds, nothing is deleted and its attempts stay. Returns how many. An admin's way
        out of reservations held too long."""
        return int(
            (
                yield _call(
                    "release",
                    queue=self.name,
                    worker=None if worker is None else text_value(worker, "worker"),
                )
            )[0][0]
        )

    @sans_io
    def fail(self, r: Reservation, error: Any = None, delay: Duration = None) -> str | None:
        """Gives the message back like rollback and records ``error`` (a str, or an exception,
        stored as "Type: message"; at most 2000 characters) as its last error.

        Returns 'retry' (eligible again after delay), 'dead_lettered' (this was its last allowed
        delivery: moved to the dead-letter queue, last error kept), 'dropped' (last delivery and
        no dead-letter queue), or None when the reservation no longer holds."""
        d = self.db.dialect
        outcome = (
            yield _call("fail", **self._held(r), delay=d.duration(delay, "delay"), error=error_text(error))
        )[0][0]
        return None if outcome is None else str(outcome)

    @sans_io
    def give_up(self, r: Reservation, error: Any = None) -> str | None:
        """Ends the message now, whatever attempts it has left: records ``error`` (as fail does)
        as its last error and moves it to the dead-letter queue, which keeps the error.

        Returns 'dead_lettered', 'dropped' (the queue has no dead-letter queue), or None when the
        reservation no longer holds."""
        outcome = (yield _call("give_up", **self._held(r), error=error_text(error)))[0][0]
        return None if outcome is None else str(outcome)

    @sans_io
    def extend(self, r: Reservation, timeout: Duration = None) -> Reservation | None:
        """Extends the reservation; returns it with its new token, or None if it no longer holds."""
        d = self.db.dialect
        token = (yield _call("extend", **self._held(r), timeout=d.duration(timeout, "timeout")))[0][0]
        return None if token is None else replace(r, token=read_token(token))

    @sans_io
    def move(self, r: Reservation, to_queue: str | Queue, payload: Any = _UNCHANGED) -> bool:
        """Commits here and pushes to to_queue in one step; payload replaces the old one if given.
        Moving into the queue it came from keeps the attempt count (another queue starts at 0)."""
        target = to_queue.name if isinstance(to_queue, QueueCalls) else to_queue
        return bool(
            (
                yield _call(
                    "move",
                    **self._held(r),
                    to_queue=text_value(target, "to_queue"),
                    payload=None if payload is _UNCHANGED else encode_json(payload),
                )
            )[0][0]
        )

    @sans_io
    def remove(self, key: str | int, kind: str) -> bool:
        """Deletes a message whatever its state; False if there was none."""
        return bool(
            (yield _call("remove", queue=self.name, key=key_value(key), kind=text_value(kind, "kind")))[0][0]
        )

    # -- looking at one message ------------------------------------------------
    @sans_io
    def message(self, key: str | int, kind: str) -> MessageInfo | None:
        """The live message with this key and kind (state 'ready', 'delayed' or 'reserved',
        attempts, last error...), or None when there is none."""
        d = self.db.dialect
        rows = yield _call("message", queue=self.name, key=key_value(key), kind=text_value(kind, "kind"))
        if not rows:
            return None
        (
            p_key,
            p_kind,
            state,
            payload,
            priority,
            attempts,
            scheduled,
            created,
            reserved_by,
            last_error,
            dead_from,
        ) = rows[0][:11]  # a newer queue_message's trailing columns (progress...): Queue.result
        return MessageInfo(
            self.name,
            p_key,
            p_kind,
            str(state),
            d.read_payload(payload),
            int(priority),
            int(attempts),
            d.read_time(scheduled),
            d.read_time(created),
            reserved_by,
            last_error,
            dead_from,
            _read_headers(d, rows[0], 13),
        )

    @sans_io
    def message_history(self, key: str | int, kind: str) -> list[HistoryRow]:
        """The history rows of the message with this key and kind in this queue, newest first (at
        most 100; only kept when the queue has a history_retention)."""
        d = self.db.dialect
        rows = yield _call(
            "message_history", queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
        )
        return [
            HistoryRow(d.read_time(at), str(outcome), to_queue, int(attempts), reserved_by, last_error)
            for at, outcome, to_queue, attempts, reserved_by, last_error in rows
        ]

    # -- wakeups ------------------------------------------------------------------
    @sans_io
    def channel(self) -> str:
        """The PostgreSQL NOTIFY channel that wakeups of this queue go to (queue_channel)."""
        return str((yield _call("channel", queue=self.name))[0][0])

    @sans_io
    def set_notify_window(self, window: Duration = None) -> None:
        """At most one wakeup (NOTIFY) per window (None = 50 ms, 0 = one per push statement)."""
        yield _call("set_notify_window", queue=self.name, window=self.db.dialect.duration(window, "window"))

    @sans_io
    def next_scheduled_at(
        self, kinds: Sequence[str] | None = None
    ) -> tuple[dt.datetime | None, float | None]:
        """(when the next message becomes eligible, seconds from now; 0 = one is ready), or (None, None)."""
        d = self.db.dialect
        at, wait_s = (yield _call("next_scheduled_at", queue=self.name, kinds=d.kinds(kinds)))[0]
        return d.read_time(at), None if wait_s is None else float(wait_s)

    @sans_io
    def wait(
        self, timeout: Duration = None, poll: Duration = None, kinds: Sequence[str] | None = None
    ) -> bool:
        """Blocks in the server until a message is ready (True) or timeout passes (False; None = 1 s)."""
        d = self.db.dialect
        return bool(
            (
                yield _call(
                    "wait",
                    queue=self.name,
                    kinds=d.kinds(kinds),
                    timeout=d.duration(timeout, "timeout"),
                    poll=d.duration(poll, "poll"),
                )
            )[0][0]
        )

    # -- results, cancellation and progress ---------------------------------------------
    @sans_io
    def set_result_retention(self, retention: Duration = None) -> None:
        """How long the queue keeps each finished message's result (queue_result): its state
        (succeeded, failed, cancelled), the value its consumer committed, its last error and
        progress. None turns recording off (the rows kept go at the next purge_history); at most
        3650 days."""
        yield _call(
            "set_result_retention",
            queue=self.name,
            retention=self.db.dialect.duration(retention, "retention"),
        )

    @sans_io
    def result(self, key: str | int, kind: str) -> Result:
        """The message's state now (a Result; a live message wins over a stored result)."""
        rows = yield _call("result", queue=self.name, key=key_value(key), kind=text_value(kind, "kind"))
        return _result(self.db.dialect, self.name, key, kind, rows)

    @sans_io
    def result_wait_once(self, key: str | int, kind: str, timeout: Duration = None) -> Result:
        """One call of queue_result_wait: blocks in the server until the message has finished (or
        is unknown) or timeout passes (at most an hour), and returns its state then. wait_result
        is what to call: on PostgreSQL it LISTENs instead."""
        d = self.db.dialect
        rows = yield _call(
            "result_wait",
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            timeout=d.duration(timeout, "timeout"),
        )
        return _result(d, self.name, key, kind, rows)

    @sans_io
    def result_channel(self) -> str | None:
        """The PostgreSQL NOTIFY channel the results of this queue are announced on
        (queue_result_channel), with the payload {"key", "kind", "state"}."""
        channel = (yield _call("result_channel", queue=self.name))[0][0]
        return None if channel is None else str(channel)

    @sans_io
    def cancel(self, key: str | int, kind: str) -> str:
        """Cancels a message: 'cancelled' (it was waiting: removed, recorded as cancelled, it never
        runs), 'requested' (a consumer holds it: asked to stop, see renew and cancel_held) or
        'unknown' (no live message)."""
        rows = yield _call("cancel", queue=self.name, key=key_value(key), kind=text_value(kind, "kind"))
        return str(rows[0][0])

    @sans_io
    def commit_result(self, r: Reservation, result: Any = None) -> bool:
        """commit, storing ``result`` (any JSON value, at most the queue's max_payload) as the
        message's result in the same step. The queue must keep results (set_result_retention).
        False if the reservation no longer holds (nothing is written)."""
        return bool((yield _call("commit_result", **self._held(r), result=encode_json(result)))[0][0])

    @sans_io
    def commit_result_many(self, items: Iterable[tuple[Reservation, Any]]) -> int:
        """commit_result for many (reservation, result) pairs in one call; returns how many still
        held (and are now gone). More than CHUNK_SIZE go in calls of at most CHUNK_SIZE each, run
        as one transaction."""
        pairs = [(held_reservation(r), value) for r, value in items]
        if not pairs:
            return 0
        d = self.db.dialect
        commits = [
            _call(
                "commit_result_batch",
                queue=self.name,
                keys=d.text_array([key_value(r.key) for r, _ in part]),
                kinds=d.text_array([text_value(r.kind, "kind") for r, _ in part]),
                tokens=d.text_array([token_value(r.token) for r, _ in part]),
                results=encode_json([value for _, value in part]),
            )
            for part in chunks(pairs, CHUNK_SIZE)
        ]
        return sum(int(rows[0][0]) for rows in (yield from _each(commits)))

    @sans_io
    def set_progress(self, r: Reservation, progress: Any) -> bool:
        """Stores progress (any JSON value, at most 64 KiB as JSON text) on the message the
        reservation holds: Queue.result shows it while it runs and after it finished. Kept
        across retries. False if the reservation no longer holds."""
        text = encode_json(progress)
        if len(text.encode("utf-8")) > MAX_PROGRESS_BYTES:
            raise errors.InvalidArgumentError(
                f"progress is {len(text.encode('utf-8'))} bytes of JSON, more than {MAX_PROGRESS_BYTES}"
            )
        return bool((yield _call("set_progress", **self._held(r), progress=text))[0][0])

    @sans_io
    def renew(self, r: Reservation, timeout: Duration = None) -> Renewal:
        """extend, and whether a cancel was requested: (the reservation with its new token, or
        None when it no longer holds; cancel_requested)."""
        d = self.db.dialect
        rows = yield _call("renew", **self._held(r), timeout=d.duration(timeout, "timeout"))
        token, requested = rows[0] if rows else (None, False)
        return Renewal(None if token is None else replace(r, token=read_token(token)), bool(requested))

    @sans_io
    def cancel_held(self, r: Reservation) -> bool:
        """Ends a held message as cancelled (its consumer stopped for a cancel, or cancels it
        itself): removed, recorded as cancelled with its progress. False if the reservation no
        longer holds."""
        return bool((yield _call("cancel_held", **self._held(r)))[0][0])

    # -- dependencies ------------------------------------------------------------------
    @sans_io
    def push_after(self, key: str | int, kind: str, payload: Any, parents: Iterable[Any]) -> bool:
        """push of a message that waits for its parents (queue_push_after): it is 'waiting' until
        every parent has succeeded, ready in the transaction of the commit that ends the last one,
        and cancelled when one fails or is cancelled. True if inserted, False if a live message
        with this key and kind exists (dedup: nothing changes).

        parents: 1 to 1000 messages, in the order the child reads them back (parent_results),
        each a (queue, key, kind) tuple, a {"queue", "p_key", "p_kind"} mapping, or anything with
        queue, key and kind attributes (a TaskHandle, a Result, a Reservation). This queue and
        each parent's must keep results (set_result_retention); a parent must be live there or
        have succeeded (InvalidArgumentError naming it otherwise, and nothing is pushed)."""
        rows = yield _call(
            "push_after",
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            parents=encode_json(parent_refs(parents)),
        )
        return bool(rows[0][0])

    @sans_io
    def parent_results(self, key: str | int, kind: str) -> list[ParentResult]:
        """The parents of a live message pushed with push_after (queue_parent_results), in the
        order they were given, each with its state and stored result; [] for a message without
        parents or not live."""
        d = self.db.dialect
        rows = yield _call(
            "parent_results", queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
        )
        return [
            ParentResult(str(q), str(k), str(t), str(state), d.read_payload(result))
            for _, q, k, t, state, result in sorted(rows, key=lambda row: int(row[0]))
        ]

    # -- history, dead letters, replace-on-push --------------------------------------
    @sans_io
    def push_replace(
        self,
        key: str | int,
        kind: str,
        payload: Any,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
    ) -> str:
        """Like push, but a waiting message with this key and kind gets the new payload, run_at and
        priority (debounce). Returns 'inserted', 'replaced', or 'reserved' (held by a consumer: left alone)."""
        d = self.db.dialect
        rows = yield _call(
            "push_replace",
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            run_at=d.time(run_at, "run_at"),
            priority=priority_value(priority),
        )
        return str(rows[0][0])

    @sans_io
    def purge_history(self, n: int | None = None) -> int:
        """Deletes up to n (None = 10000) history rows past this queue's history_retention; returns how many."""
        return int((yield _call("purge_history", queue=self.name, n=whole_number(n, "n")))[0][0])

    @sans_io
    def replay(self, start: dt.datetime | None = None, end: dt.datetime | None = None) -> int:
        """Pushes again the archived messages processed in [start, end) (None = unbounded); dedup applies.
        Returns how many were inserted."""
        d = self.db.dialect
        if isinstance(start, dt.timedelta) or isinstance(end, dt.timedelta):
            raise errors.InvalidArgumentError("start and end must be datetimes")
        return int(
            (yield _call("replay", queue=self.name, start=d.time(start, "start"), end=d.time(end, "end")))[0][
                0
            ]
        )

    @sans_io
    def redrive(self, to_queue: str | Queue, n: int | None = None) -> int:
        """Moves up to n (None = 1) ready messages of this (dead-letter) queue to to_queue, attempts reset.
        A message whose key and kind are live in to_queue stays here. Returns how many moved."""
        target = to_queue.name if isinstance(to_queue, QueueCalls) else to_queue
        return int(
            (
                yield _call(
                    "redrive",
                    queue=self.name,
                    to_queue=text_value(target, "to_queue"),
                    n=whole_number(n, "n"),
                )
            )[0][0]
        )

    @sans_io
    def dead_letters(self) -> list[DeadLetter]:
        """The messages sitting in this queue, when it is some queue's dead-letter queue (the view
        pyqueue_dead_letters)."""
        d = self.db.dialect
        return [
            DeadLetter(
                dlq,
                origin,
                key,
                kind,
                d.read_payload(payload),
                priority,
                None if attempts is None else int(attempts),
                d.read_time(created),
                d.read_time(arrived),
                bool(reserved),
                last_error,
                _read_headers(d, row, 11),
            )
            for row in (yield _call("dead_letters", queue=self.name))
            for dlq, origin, key, kind, payload, priority, attempts, created, arrived, reserved, last_error, *_ in (
                row,
            )
        ]

    # -- concurrency limits and recurring messages ----------------------------------
    @sans_io
    def set_limit(self, kind: str, capacity: int | None) -> None:
        """At most capacity messages of kind reserved at once (None removes the limit)."""
        yield _call(
            "set_limit",
            queue=self.name,
            kind=text_value(kind, "kind"),
            capacity=whole_number(capacity, "capacity"),
        )

    @sans_io
    def limits(self) -> list[LimitInfo]:
        return [LimitInfo(q, k, int(c), int(u)) for q, k, c, u in (yield _call("limits", queue=self.name))]

    @sans_io
    def set_rate(self, kind: str | None, n: int | None, per: Duration = None) -> None:
        """At most n messages of kind delivered in any window of length per (seconds or a
        timedelta), by every path that delivers one (reserve, commit_reserve, pop, a worker's
        prefetch); kind None = every kind of the queue together. A message held back stays
        ready, first in line. n None removes the rate (per is then ignored). n from 1 to
        10000, per more than 0 and at most 1 day."""
        d = self.db.dialect
        n = whole_number_within(n, "n", 1, MAX_RATE_N)
        if n is not None:
            span = dialects.as_timedelta(per, "per")
            if span is None:
                raise errors.InvalidArgumentError(
                    "per is required with n: the window's length (seconds or a timedelta)"
                )
            if not dt.timedelta(0) < span <= MAX_RATE_PER:
                raise errors.InvalidArgumentError(
                    f"per must be more than 0 seconds and at most 1 day (86400 seconds), not {span.total_seconds():g} seconds"
                )
        yield _call(
            "set_rate",
            queue=self.name,
            kind=text_value(kind, "kind"),
            n=n,
            per=None if n is None else d.duration(per, "per"),
        )

    @sans_io
    def rates(self) -> list[RateInfo]:
        """This queue's rate limits (queue_rates): the queue-wide one (kind None) first, then by kind."""
        return [_rate(self.db.dialect, row) for row in (yield _call("rates", queue=self.name))]

    @sans_io
    def set_group_limit(self, group: str | None, k: int | None) -> None:
        """Up to k messages of a FIFO group live at once (reserved, or ready at the group's
        head), started in the group's order; group None = the queue's default for every group
        (a named group's own k overrides it). k None removes it (back to the default; the
        queue's default back to 1, one at a time). k from 1 to 10000."""
        yield _call(
            "set_group_limit",
            queue=self.name,
            group=text_value(group, "group"),
            k=whole_number_within(k, "k", 1, MAX_GROUP_LIMIT),
        )

    @sans_io
    def schedule_every(self, key: str | int, kind: str, payload: Any, every: Duration) -> dt.datetime:
        """A message key@time every ``every`` (whole seconds, aligned to the Unix epoch); returns the first time."""
        d = self.db.dialect
        at = (
            yield _call(
                "schedule_every",
                queue=self.name,
                key=key_value(key),
                kind=text_value(kind, "kind"),
                payload=encode_json(payload),
                every=d.duration(every, "every"),
            )
        )[0][0]
        return d.read_time(at)

    @sans_io
    def schedule_cron(self, key: str | int, kind: str, payload: Any, cron: str) -> dt.datetime:
        """A message key@time at every minute matching the 5-field cron expression (UTC); returns the first time."""
        d = self.db.dialect
        at = (
            yield _call(
                "schedule_cron",
                queue=self.name,
                key=key_value(key),
                kind=text_value(kind, "kind"),
                payload=encode_json(payload),
                cron=text_value(cron, "cron"),
            )
        )[0][0]
        return d.read_time(at)

    @sans_io
    def unschedule(self, key: str | int, kind: str) -> bool:
        return bool(
            (yield _call("unschedule", queue=self.name, key=key_value(key), kind=text_value(kind, "kind")))[
                0
            ][0]
        )

    @sans_io
    def schedules(self) -> list[ScheduleInfo]:
        return [_schedule(self.db.dialect, row) for row in (yield _call("schedules", queue=self.name))]

    # -- browsing and throughput (what the dashboard reads) ----------------------------
    @sans_io
    def messages(
        self,
        state: str | None = None,
        key_prefix: str | None = None,
        after: MessageRow | tuple[str | int, str] | None = None,
        n: int | None = None,
    ) -> list[MessageRow]:
        """A page of this queue's live messages in key order (queue_messages): state 'ready',
        'delayed' or 'reserved' (None = all), keys starting with key_prefix, after the message
        ``after`` (the last row of the previous page, or a (key, kind) pair); n rows at most
        (None = 100, at most 1000)."""
        if after is None:
            after_key, after_kind = None, None
        elif isinstance(after, MessageRow):
            after_key, after_kind = after.key, after.kind
        elif isinstance(after, tuple) and len(after) == 2:
            after_key, after_kind = key_value(after[0], "after key"), text_value(after[1], "after kind")
        else:
            raise errors.InvalidArgumentError("after must be a MessageRow or a (key, kind) pair")
        d = self.db.dialect
        rows = yield _call(
            "messages",
            queue=self.name,
            state=text_value(state, "state"),
            key_prefix=key_value(key_prefix, "key_prefix"),
            after_key=after_key,
            after_kind=after_kind,
            n=whole_number(n, "n"),
        )
        return [
            MessageRow(
                self.name,
                key,
                kind,
                str(st),
                int(priority),
                int(attempts),
                d.read_time(scheduled),
                d.read_time(created),
                reserved_by,
                last_error,
                dead_from,
                _read_headers(d, row, 10),
            )
            for row in rows
            for key, kind, st, priority, attempts, scheduled, created, reserved_by, last_error, dead_from, *_ in (
                row,
            )
        ]

    @sans_io
    def groups(self, n: int | None = None) -> list[GroupInfo]:
        """This queue's non-empty FIFO groups ordered by group key, at most n (None = 100, at most
        1000): each with its head message (the one delivered next, or being delivered) and how
        many messages it holds."""
        return [_group(row) for row in (yield _call("groups", queue=self.name, n=whole_number(n, "n")))]

    @sans_io
    def throughput(self, since: dt.datetime | dt.timedelta | None = None) -> list[ThroughputRow]:
        """Messages that left this queue per minute since ``since`` (None = an hour ago; a timedelta
        = that long ago; at most a day), by outcome, from pyqueue_history: only a queue with a
        history_retention has any (queue_throughput). Minutes without any are left out."""
        return (yield from _throughput(self.db.dialect, self.name, since))


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


@dataclass(frozen=True)
class DeadLetter:
    """A row of the view pyqueue_dead_letters: a message sitting in a dead-letter queue.

    ``from_queue`` is the queue it was dead-lettered from and ``attempts`` the deliveries it had
    there (None for a message pushed into the dead-letter queue directly); ``last_error`` is the
    error recorded by its last failure (Queue.fail), if any."""

    dead_letter_queue: str
    from_queue: str | None
    key: str
    kind: str
    payload: Any
    priority: int
    attempts: int | None
    created_at: dt.datetime
    dead_lettered_at: dt.datetime
    reserved: bool
    last_error: str | None = None
    headers: dict[str, Any] | None = None  # the message's headers (None: it has none)


@dataclass(frozen=True)
class QueueSettings:
    """A queue's settings (queue_settings)."""

    queue: str
    visibility_timeout: dt.timedelta
    max_attempts: int
    dead_letter_queue: str | None
    history_retention: dt.timedelta | None
    paused: bool
    notify_window: dt.timedelta | None
    max_reservation: dt.timedelta | None = None  # the longest reservation a caller may ask for
    max_payload: int | None = None  # bytes: the largest payload a push may write
    result_retention: dt.timedelta | None = None  # how long finished results are kept (None: none)


@dataclass(frozen=True)
class MessageInfo:
    """A live message as queue_message shows it."""

    queue: str
    key: str
    kind: str
    state: str  # 'ready', 'delayed' or 'reserved'
    payload: Any
    priority: int
    attempts: int
    scheduled_at: dt.datetime
    created_at: dt.datetime
    reserved_by: str | None
    last_error: str | None
    dead_from: str | None  # in a dead-letter queue: the queue it was dead-lettered from
    headers: dict[str, Any] | None = None  # the message's headers (None: it has none)


@dataclass(frozen=True)
class HistoryRow:
    """One history row of a message (queue_message_history)."""

    processed_at: dt.datetime
    outcome: str  # 'committed', 'moved', 'dead_lettered', 'popped', ...
    to_queue: str | None
    attempts: int
    reserved_by: str | None
    last_error: str | None


# rows of the worker registry, limits and schedules ------------------------------------
@dataclass(frozen=True)
class WorkerRegistration:
    """A registered worker: reserve with ``reserve_as`` so that release_dead_workers finds its messages.

    ``secret`` proves the registration is yours: heartbeat_worker and deregister_worker take the
    registration and do nothing (False) for a secret that is not the worker's."""

    worker_id: int
    name: str
    reserve_as: str
    secret: str = field(repr=False)


@dataclass(frozen=True)
class WorkerInfo:
    worker_id: int
    name: str
    host: str | None
    pid: int | None
    queues: list[str] | None
    started_at: dt.datetime
    heartbeat_at: dt.datetime
    heartbeat_age_s: float
    reserve_as: str


@dataclass(frozen=True)
class LimitInfo:
    queue: str
    kind: str
    capacity: int
    in_use: int


# The bounds of a rate (queue_set_rate) and of a group's k (queue_set_group_limit), as the routines check them.
MAX_RATE_N = 10000
MAX_RATE_PER = dt.timedelta(days=1)
MAX_GROUP_LIMIT = 10000


@dataclass(frozen=True)
class RateInfo:
    """A rate limit as queue_rates shows it: at most ``n`` messages of ``kind`` (None: of every
    kind of the queue together) delivered in any window of length ``per``. ``in_window``: the
    units used within the last ``per`` (the rate is saturated when it equals n);
    ``next_free_at``: when the next unit is (or was) free, None while some unit was never used."""

    queue: str
    kind: str | None
    n: int
    per: dt.timedelta
    next_free_at: dt.datetime | None
    in_window: int

    @property
    def saturated(self) -> bool:
        """Whether every unit was used within the last ``per`` (the next delivery waits)."""
        return self.in_window >= self.n


def _rate(dialect: dialects.Dialect, row: Sequence[Any]) -> RateInfo:
    # leading columns by position: a newer queue_rates may add trailing ones
    queue, kind, n, per, next_free_at, in_window, *_ = row
    return RateInfo(
        queue,
        kind,
        int(n),
        dialect.read_duration(per),
        dialect.read_time(next_free_at),
        int(in_window),
    )


@dataclass(frozen=True)
class ScheduleInfo:
    queue: str
    key: str
    kind: str
    payload: Any
    every_s: int | None
    cron: str | None
    next_at: dt.datetime


def _schedule(dialect: dialects.Dialect, row: Sequence[Any]) -> ScheduleInfo:
    queue, key, kind, payload, every_s, cron, next_at = row
    return ScheduleInfo(
        queue,
        key,
        kind,
        dialect.read_payload(payload),
        None if every_s is None else int(every_s),
        cron,
        dialect.read_time(next_at),
    )


@dataclass(frozen=True)
class MessageRow:
    """A live message as queue_messages lists it (no payload: Queue.message shows one whole)."""

    queue: str
    key: str
    kind: str
    state: str  # 'ready', 'delayed' or 'reserved'
    priority: int
    attempts: int
    scheduled_at: dt.datetime
    created_at: dt.datetime
    reserved_by: str | None
    last_error: str | None
    dead_from: str | None  # in a dead-letter queue: the queue it was dead-lettered from
    headers: dict[str, Any] | None = None  # the message's headers (None: it has none)


@dataclass(frozen=True)
class ThroughputRow:
    """How many messages left a queue in one minute, by outcome (queue_throughput)."""

    queue: str
    minute: dt.datetime
    committed: int
    dead_lettered: int
    moved: int
    popped: int


class Binding(NamedTuple):
    """A binding of a topic pattern to a queue (queue_bindings)."""

    pattern: str
    queue: str
    created_at: dt.datetime


class GroupInfo(NamedTuple):
    """A queue's non-empty FIFO group (queue_groups): its head message (key, kind and state, as
    Queue.message shows it: 'ready', 'delayed' or 'reserved') and how many messages it holds,
    the head included; ``group_limit`` the k in effect for it (queue_set_group_limit: how many
    of its messages may be live at once) and ``in_flight`` how many are live now (None both
    from a schema whose queue_groups has no such columns yet)."""

    group_key: str
    head_key: str
    head_kind: str
    head_state: str
    messages: int
    group_limit: int | None = None
    in_flight: int | None = None

    def __repr__(self) -> str:
        # the trailing fields are named only when the schema has them (an older queue_groups: None)
        shown = [
            (f, v)
            for f, v in zip(self._fields, self)
            if f not in ("group_limit", "in_flight") or v is not None
        ]
        return "GroupInfo(" + ", ".join(f"{f}={v!r}" for f, v in shown) + ")"


def _group(row: Sequence[Any]) -> GroupInfo:
    # group_limit and in_flight are trailing columns: an older queue_groups has neither
    group_key, head_key, head_kind, state, messages, *extra = row
    group_limit, in_flight = (list(extra) + [None, None])[:2]
    return GroupInfo(
        group_key,
        head_key,
        head_kind,
        None if state is None else str(state),
        int(messages),
        None if group_limit is None else int(group_limit),
        None if in_flight is None else int(in_flight),
    )


def parent_refs(parents: Iterable[Any]) -> list[dict[str, Any]]:
    """push_after's parents as queue_push_after takes them: [{"queue", "p_key", "p_kind"}, ...] in
    order. Each is a (queue, key, kind) tuple, such a mapping, or an object with queue, key and
    kind attributes (a queue may be a Queue); anything else is refused with InvalidArgumentError
    naming it (how many, and whether they are known, is the routine's check)."""
    if isinstance(parents, (str, bytes, Mapping)) or not isinstance(parents, Iterable):
        raise errors.InvalidArgumentError(
            f"parents must be a list of (queue, key, kind) (one parent: [it]), not {type(parents).__name__}"
        )
    refs = []
    for i, p in enumerate(parents, 1):  # counted from 1, as the routine names them
        if isinstance(p, Mapping):
            missing = {"queue", "p_key", "p_kind"} - p.keys()
            if missing:
                raise errors.InvalidArgumentError(f"parents[{i}] has no {sorted(missing)[0]!r}")
            queue, key, kind = p["queue"], p["p_key"], p["p_kind"]
        elif isinstance(p, tuple) and len(p) == 3:
            queue, key, kind = p
        elif all(hasattr(p, a) for a in ("queue", "key", "kind")) and not isinstance(p, (str, bytes)):
            queue, key, kind = p.queue, p.key, p.kind
        else:
            raise errors.InvalidArgumentError(
                f"parents[{i}] must be a (queue, key, kind) tuple, a mapping or a handle, "
                f"not {type(p).__name__} ({p!r:.40})"
            )
        refs.append(
            {
                "queue": _queue_name(queue),
                "p_key": key_value(key, f"parents[{i}]'s key"),
                "p_kind": text_value(kind, f"parents[{i}]'s kind"),
            }
        )
    return refs


def _queue_name(queue: Any) -> str | None:
    """A queue argument: a name (None passed on), or a Queue / AsyncQueue."""
    return queue.name if isinstance(queue, QueueCalls) else text_value(queue, "queue")


def _result(
    d: dialects.Dialect, queue: str, key: str | int, kind: str, rows: Sequence[Sequence[Any]]
) -> Result:
    """A Result from queue_result's one row (no row: 'unknown')."""
    if not rows:
        return Result(queue, str(key), kind, "unknown")
    state, result, last_error, attempts, progress, finished_at, cancel_requested = rows[0][:7]
    return Result(
        queue,
        str(key),
        kind,
        str(state),
        d.read_payload(result),
        last_error,
        None if attempts is None else int(attempts),
        d.read_payload(progress),
        d.read_time(finished_at),
        bool(cancel_requested),
    )


def _throughput(d: dialects.Dialect, queue: str | None, since: dt.datetime | dt.timedelta | None) -> SansIO:
    if isinstance(since, dt.timedelta):
        since = dt.datetime.now(dt.timezone.utc) - since
    rows = yield _call("throughput", queue=queue, since=d.time(since, "since"))
    return [
        ThroughputRow(q, d.read_time(minute), int(c), int(dl), int(mv), int(pp))
        for q, minute, c, dl, mv, pp in rows
    ]
