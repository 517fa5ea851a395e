"""The Python client: a thin layer over the SQL routines.

    db = pyqueue_sql.connect("postgresql://localhost/app")   # or mysql://...
    emails = db.queue("emails")
    emails.create(visibility_timeout=60, max_attempts=5)
    emails.push("user-42", "welcome", {"to": "a@example.com"})
    for msg in emails.reserve(n=10):
        ...
        emails.commit(msg)

Every method is one routine call. A Database made by ``connect`` owns its
connection and runs each call in its own transaction unless you open one with
``db.transaction()``. ``Database.wrap(conn)`` uses a connection of yours as it
is, inside whatever transaction you have open (enqueue atomically with your
business write), and never commits or rolls back for you.

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
import os
import random
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from . import dialects, errors
from .dialects import Duration, encode_json, key_value, read_token, text_value, token_value, whole_number

_UNCHANGED: Any = object()

# A call the client runs in a transaction of its own is tried this many times in all when the
# server rolls it back with a serialization failure or a deadlock, with a random pause of up to
# min(SERIALIZATION_BACKOFF_S * 2**n, SERIALIZATION_BACKOFF_MAX_S) seconds before try n+2.
SERIALIZATION_ATTEMPTS = 8
SERIALIZATION_BACKOFF_S = 0.005
SERIALIZATION_BACKOFF_MAX_S = 0.2

# What queue_fail stores of an error (the routine keeps the first 2000 characters too).
LAST_ERROR_MAX_CHARS = 2000


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
    """One message for push_many (key: a str, or an int as its decimal text)."""

    key: str | int
    kind: str
    payload: Any
    run_at: dt.datetime | dt.timedelta | None = None
    priority: int | None = None


class Database:
    """A connection to a database that has the pyqueue-sql schema installed."""

    def __init__(self, connection: Any, dialect: dialects.Dialect, *, owned: bool) -> None:
        self.connection = connection
        self.dialect = dialect
        self._owned = owned
        self._in_transaction = False
        # How many times a call was run again after a serialization failure or deadlock (monitoring).
        self.serialization_retries = 0

    @classmethod
    def wrap(cls, connection: Any) -> Database:
        """Uses your psycopg 3 or PyMySQL connection inside your own transactions."""
        return cls(connection, dialects.for_connection(connection), owned=False)

    def queue(self, name: str) -> Queue:
        return Queue(self, name)

    def call(self, statement: str, **params: Any) -> list[tuple]:
        """Runs a named statement; its (first) result set."""
        return self._call(self.dialect.run, statement, params)

    def call_sets(self, statement: str, **params: Any) -> list[list[tuple]]:
        """Runs a named statement; every result set it returns (MySQL procedures)."""
        return self._call(self.dialect.run_sets, statement, params)

    def _call(
        self, runner: Callable[[Any, str, dict[str, Any]], Any], statement: str, params: dict[str, Any]
    ) -> Any:
        if not self._owned or self._in_transaction:
            # The caller's transaction: a serialization failure lost all of it, so only the
            # caller can run it again (errors.SerializationError is raised at once).
            return runner(self.connection, statement, params)
        own = statement in self.dialect.own_transaction_statements
        for attempt in range(SERIALIZATION_ATTEMPTS):
            try:
                if own:
                    return self._call_in_own_transaction(runner, statement, params)
                return runner(self.connection, statement, params)
            except errors.SerializationError:
                # The server rolled the call back whole (autocommit: the statement is the
                # transaction; own transaction: rolled back below): running it again is safe,
                # and its answer is the one an undisturbed call would have given.
                if attempt == SERIALIZATION_ATTEMPTS - 1:
                    raise
                self.serialization_retries += 1
                time.sleep(
                    random.uniform(0, min(SERIALIZATION_BACKOFF_S * 2**attempt, SERIALIZATION_BACKOFF_MAX_S))
                )
        raise AssertionError("unreachable")

    def _call_in_own_transaction(
        self, runner: Callable[[Any, str, dict[str, Any]], Any], statement: str, params: dict[str, Any]
    ) -> Any:
        """Runs one call as a transaction of its own (MySQL commit, rollback, fail and
        move: their history row and the removal then stand or fall together)."""
        self.dialect.begin(self.connection)
        try:
            rows = runner(self.connection, statement, params)
        except BaseException:
            with contextlib.suppress(Exception):  # a lost connection has nothing to roll back
                self.dialect.rollback(self.connection)
            raise
        self.dialect.end_transaction(self.connection, commit=True)
        return rows

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Database]:
        """Runs the calls in the block as one transaction (commit at the end, rollback on error).

        A serialization failure or deadlock inside the block (or at its commit) raises
        errors.SerializationError at once: the server rolled the whole transaction back, and
        only you can run it again (the whole block, your own writes included)."""
        if not self._owned:
            raise errors.QueueError("a wrapped connection's transactions are yours: use your driver's")
        if self._in_transaction:
            raise errors.QueueError("transactions do not nest")
        self.dialect.begin(self.connection)
        self._in_transaction = True
        try:
            yield self
        except BaseException:
            self._in_transaction = False
            self.dialect.rollback(self.connection)
            raise
        else:
            self._in_transaction = False
            self.dialect.end_transaction(self.connection, commit=True)

    def stats(self) -> list[QueueStats]:
        """One row per queue."""
        return [_stats(self.dialect, row) for row in self.call("stats", queue=None)]

    def settings(self) -> list[QueueSettings]:
        """Every queue's settings, ordered by queue name."""
        return [_settings(self.dialect, row) for row in self.call("settings", queue=None)]

    def close(self) -> None:
        if self._owned:
            self.connection.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- worker registry, and the limits / schedules of every queue ----------------
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
            for row in self.call(
                "worker_register",
                name=text_value(name, "name"),
                host=text_value(host, "host"),
                pid=whole_number(pid, "pid"),
                queues=self.dialect.kinds(queues),
            )
        ]
        return WorkerRegistration(int(worker_id), name, f"{name}#{int(worker_id)}", str(secret))

    def heartbeat_worker(self, registration: WorkerRegistration) -> bool:
        """False when the worker is no longer registered (released as dead: register again), or when
        the registration's secret is not that worker's."""
        reg = _registration(registration)
        return bool(self.call("worker_heartbeat", worker_id=reg.worker_id, secret=reg.secret)[0][0])

    def deregister_worker(self, registration: WorkerRegistration) -> bool:
        """Removes the registration; False when it is gone already or the secret is not that worker's."""
        reg = _registration(registration)
        return bool(self.call("worker_deregister", worker_id=reg.worker_id, secret=reg.secret)[0][0])

    def release_dead_workers(self, older_than: Duration) -> int:
        """Removes workers silent for longer than older_than; their reservations become ready. Returns how many."""
        return int(
            self.call("release_dead_workers", older_than=self.dialect.duration(older_than, "older_than"))[0][
                0
            ]
        )

    def workers(self) -> list[WorkerInfo]:
        d = self.dialect
        out = []
        for wid, name, host, pid, queues, started, beat, age, reserve_as in self.call("workers"):
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

    def limits(self) -> list[LimitInfo]:
        """Every queue's concurrency limits."""
        return [LimitInfo(q, k, int(c), int(u)) for q, k, c, u in self.call("limits", queue=None)]

    def schedules(self) -> list[ScheduleInfo]:
        """Every queue's recurring messages."""
        return [_schedule(self.dialect, row) for row in self.call("schedules", queue=None)]

    def throughput(self, since: dt.datetime | dt.timedelta | None = None) -> list[ThroughputRow]:
        """Every queue's messages that left it per minute since ``since`` (Queue.throughput)."""
        return _throughput(self, None, since)


def connect(dsn: str) -> Database:
    """Opens a connection; the DSN's scheme picks the dialect (postgresql:// or mysql://)."""
    dialect = dialects.for_dsn(dsn)
    return Database(dialect.connect(dsn), dialect, owned=True)


def _registration(registration: Any) -> WorkerRegistration:
    if not isinstance(registration, WorkerRegistration):
        raise errors.InvalidArgumentError(
            "pass the WorkerRegistration that register_worker returned (its secret shows the "
            f"registration is yours), not {type(registration).__name__}"
        )
    whole_number(registration.worker_id, "worker_id")
    text_value(registration.secret, "secret")
    return registration


def _settings(dialect: dialects.Dialect, row: Sequence[Any]) -> QueueSettings:
    queue, visibility, max_attempts, dlq, retention, paused, window = row
    return QueueSettings(
        queue,
        dialect.read_duration(visibility),
        int(max_attempts),
        dlq,
        dialect.read_duration(retention),
        bool(paused),
        dialect.read_duration(window),
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


def _reservations(queue: str, dialect: dialects.Dialect, rows: Iterable[Sequence[Any]]) -> list[Reservation]:
    return [
        Reservation(
            queue,
            key,
            kind,
            dialect.read_payload(payload),
            read_token(token),
            priority,
            attempts,
            dialect.read_time(created),
            dialect.read_time(initially),
        )
        for key, kind, payload, token, priority, attempts, created, initially in rows
    ]


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


class Queue:
    """One named queue. Each method calls the routine of the same name."""

    def __init__(self, db: Database, name: str) -> None:
        self.db = db
        self.name = text_value(name, "queue")

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, dialect={self.db.dialect.name!r})"

    # -- administration ------------------------------------------------------
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
        if isinstance(dead_letter_queue, Queue):
            dead_letter_queue = dead_letter_queue.name
        self.db.call(
            "create",
            queue=self.name,
            visibility_timeout=d.duration(visibility_timeout, "visibility_timeout"),
            max_attempts=whole_number(max_attempts, "max_attempts"),
            dead_letter_queue=text_value(dead_letter_queue, "dead_letter_queue"),
            history_retention=d.duration(history_retention, "history_retention"),
        )
        return self

    def reset_setting(self, name: str) -> None:
        """Puts one setting back to its default: 'visibility_timeout' (30 s), 'max_attempts' (10),
        'dead_letter_queue' (none) or 'history_retention' (none: no history kept)."""
        self.db.call("reset_setting", queue=self.name, setting=text_value(name, "setting"))

    def settings(self) -> QueueSettings:
        """The queue's settings (durations as timedelta)."""
        return _settings(self.db.dialect, self.db.call("settings", queue=self.name)[0])

    def drop(self) -> None:
        self.db.call("drop", queue=self.name)

    def pause(self) -> None:
        self.db.call("pause", queue=self.name)

    def resume(self) -> None:
        self.db.call("resume", queue=self.name)

    def stats(self) -> QueueStats:
        return _stats(self.db.dialect, self.db.call("stats", queue=self.name)[0])

    # -- producing -------------------------------------------------------------
    def push(
        self,
        key: str | int,
        kind: str,
        payload: Any,
        run_at: dt.datetime | dt.timedelta | None = None,
        priority: int | None = None,
    ) -> bool:
        """True if inserted, False if a live message with this key and kind exists (dedup)."""
        d = self.db.dialect
        rows = self.db.call(
            "push",
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            run_at=d.time(run_at, "run_at"),
            priority=whole_number(priority, "priority"),
        )
        return bool(rows[0][0])

    def push_many(self, messages: Iterable[NewMessage | tuple | Mapping[str, Any]]) -> int:
        """Pushes many in one call; returns how many were new. Tuples are (key, kind, payload[, run_at[, priority]])."""
        d = self.db.dialect
        items = []
        for m in messages:
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
                    whole_number(m.priority, "priority"),
                )
            )
        if not items:
            return 0
        return int(self.db.call("push_batch", queue=self.name, **d.batch(items))[0][0])

    # -- consuming -------------------------------------------------------------
    def pop(self, n: int = 1) -> list[Message]:
        """Takes up to n ready messages out of the queue (at-most-once)."""
        d = self.db.dialect
        return [
            Message(self.name, key, kind, d.read_payload(payload), priority, attempts, d.read_time(created))
            for key, kind, payload, priority, attempts, created in self.db.call(
                "pop", queue=self.name, n=whole_number(n, "n")
            )
        ]

    def reserve(
        self,
        n: int = 1,
        worker: str | None = None,
        timeout: Duration = None,
        kinds: Sequence[str] | None = None,
    ) -> list[Reservation]:
        """Reserves up to n ready messages, highest priority first, FIFO within a priority."""
        d = self.db.dialect
        rows = self.db.call(
            "reserve",
            queue=self.name,
            worker=text_value(worker or default_worker_name(), "worker"),
            timeout=d.duration(timeout, "timeout"),
            n=whole_number(n, "n"),
            kinds=d.kinds(kinds),
        )
        return _reservations(self.name, d, rows)

    def _held(self, r: Reservation) -> dict[str, Any]:
        """The (key, kind, token) arguments that name a reservation."""
        return dict(
            queue=self.name, key=key_value(r.key), kind=text_value(r.kind, "kind"), token=token_value(r.token)
        )

    def commit(self, r: Reservation) -> bool:
        """Deletes the message; False if the reservation no longer holds."""
        return bool(self.db.call("commit", **self._held(r))[0][0])

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
        that works one message at a time: one round trip on PostgreSQL; on
        MySQL the call runs in a transaction of its own (BEGIN, CALL, COMMIT),
        so that its history row and its delete stand or fall together.
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
        committed, rows = d.read_commit_reserve(self.db.call_sets("commit_reserve", **params))
        return (None if committed is None else bool(committed)), _reservations(self.name, d, rows)

    def commit_many(self, reservations: Iterable[Reservation]) -> int:
        """Commits many reservations in one call; returns how many still held (and are now gone)."""
        items = list(reservations)
        if not items:
            return 0
        d = self.db.dialect
        return int(
            self.db.call(
                "commit_batch",
                queue=self.name,
                keys=d.text_array([key_value(r.key) for r in items]),
                kinds=d.text_array([text_value(r.kind, "kind") for r in items]),
                tokens=d.text_array([token_value(r.token) for r in items]),
            )[0][0]
        )

    def rollback(self, r: Reservation, delay: Duration = None) -> bool:
        """Gives the message back (eligible after delay), or dead-letters it after max_attempts."""
        d = self.db.dialect
        return bool(self.db.call("rollback", **self._held(r), delay=d.duration(delay, "delay"))[0][0])

    def fail(self, r: Reservation, error: Any = None, delay: Duration = None) -> str | None:
        """Gives the message back like rollback and records ``error`` (a str, or an exception,
        stored as "Type: message"; at most 2000 characters) as its last error.

        Returns 'retry' (eligible again after delay), 'dead_lettered' (this was its last allowed
        delivery: moved to the dead-letter queue, last error kept), 'dropped' (last delivery and
        no dead-letter queue), or None when the reservation no longer holds."""
        d = self.db.dialect
        outcome = self.db.call(
            "fail", **self._held(r), delay=d.duration(delay, "delay"), error=error_text(error)
        )[0][0]
        return None if outcome is None else str(outcome)

    def extend(self, r: Reservation, timeout: Duration = None) -> Reservation | None:
        """Extends the reservation; returns it with its new token, or None if it no longer holds."""
        d = self.db.dialect
        token = self.db.call("extend", **self._held(r), timeout=d.duration(timeout, "timeout"))[0][0]
        return None if token is None else replace(r, token=read_token(token))

    def move(self, r: Reservation, to_queue: str | Queue, payload: Any = _UNCHANGED) -> bool:
        """Commits here and pushes to to_queue in one step; payload replaces the old one if given.
        Moving into the queue it came from keeps the attempt count (another queue starts at 0)."""
        target = to_queue.name if isinstance(to_queue, Queue) else to_queue
        return bool(
            self.db.call(
                "move",
                **self._held(r),
                to_queue=text_value(target, "to_queue"),
                payload=None if payload is _UNCHANGED else encode_json(payload),
            )[0][0]
        )

    def remove(self, key: str | int, kind: str) -> bool:
        """Deletes a message whatever its state; False if there was none."""
        return bool(
            self.db.call("remove", queue=self.name, key=key_value(key), kind=text_value(kind, "kind"))[0][0]
        )

    # -- looking at one message ------------------------------------------------
    def message(self, key: str | int, kind: str) -> MessageInfo | None:
        """The live message with this key and kind (state 'ready', 'delayed' or 'reserved',
        attempts, last error...), or None when there is none."""
        d = self.db.dialect
        rows = self.db.call("message", queue=self.name, key=key_value(key), kind=text_value(kind, "kind"))
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
        ) = rows[0]
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
        )

    def message_history(self, key: str | int, kind: str) -> list[HistoryRow]:
        """The history rows of the message with this key and kind in this queue, newest first (at
        most 100; only kept when the queue has a history_retention)."""
        d = self.db.dialect
        rows = self.db.call(
            "message_history", queue=self.name, key=key_value(key), kind=text_value(kind, "kind")
        )
        return [
            HistoryRow(d.read_time(at), str(outcome), to_queue, int(attempts), reserved_by, last_error)
            for at, outcome, to_queue, attempts, reserved_by, last_error in rows
        ]

    # -- wakeups ------------------------------------------------------------------
    def channel(self) -> str:
        """The PostgreSQL NOTIFY channel that wakeups of this queue go to (queue_channel)."""
        return str(self.db.call("channel", queue=self.name)[0][0])

    def set_notify_window(self, window: Duration = None) -> None:
        """At most one wakeup (NOTIFY) per window (None = 50 ms, 0 = one per push statement)."""
        self.db.call("set_notify_window", queue=self.name, window=self.db.dialect.duration(window, "window"))

    def next_scheduled_at(
        self, kinds: Sequence[str] | None = None
    ) -> tuple[dt.datetime | None, float | None]:
        """(when the next message becomes eligible, seconds from now; 0 = one is ready), or (None, None)."""
        d = self.db.dialect
        at, wait_s = self.db.call("next_scheduled_at", queue=self.name, kinds=d.kinds(kinds))[0]
        return d.read_time(at), None if wait_s is None else float(wait_s)

    def wait(
        self, timeout: Duration = None, poll: Duration = None, kinds: Sequence[str] | None = None
    ) -> bool:
        """Blocks in the server until a message is ready (True) or timeout passes (False; None = 1 s)."""
        d = self.db.dialect
        return bool(
            self.db.call(
                "wait",
                queue=self.name,
                kinds=d.kinds(kinds),
                timeout=d.duration(timeout, "timeout"),
                poll=d.duration(poll, "poll"),
            )[0][0]
        )

    # -- history, dead letters, replace-on-push --------------------------------------
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
        rows = self.db.call(
            "push_replace",
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            run_at=d.time(run_at, "run_at"),
            priority=whole_number(priority, "priority"),
        )
        return str(rows[0][0])

    def purge_history(self, n: int | None = None) -> int:
        """Deletes up to n (None = 10000) history rows past this queue's history_retention; returns how many."""
        return int(self.db.call("purge_history", queue=self.name, n=whole_number(n, "n"))[0][0])

    def replay(self, start: dt.datetime | None = None, end: dt.datetime | None = None) -> int:
        """Pushes again the archived messages processed in [start, end) (None = unbounded); dedup applies.
        Returns how many were inserted."""
        d = self.db.dialect
        if isinstance(start, dt.timedelta) or isinstance(end, dt.timedelta):
            raise errors.InvalidArgumentError("start and end must be datetimes")
        return int(
            self.db.call("replay", queue=self.name, start=d.time(start, "start"), end=d.time(end, "end"))[0][
                0
            ]
        )

    def redrive(self, to_queue: str | Queue, n: int | None = None) -> int:
        """Moves up to n (None = 1) ready messages of this (dead-letter) queue to to_queue, attempts reset.
        A message whose key and kind are live in to_queue stays here. Returns how many moved."""
        target = to_queue.name if isinstance(to_queue, Queue) else to_queue
        return int(
            self.db.call(
                "redrive", queue=self.name, to_queue=text_value(target, "to_queue"), n=whole_number(n, "n")
            )[0][0]
        )

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
            )
            for dlq, origin, key, kind, payload, priority, attempts, created, arrived, reserved, last_error in self.db.call(
                "dead_letters", queue=self.name
            )
        ]

    # -- concurrency limits and recurring messages ----------------------------------
    def set_limit(self, kind: str, capacity: int | None) -> None:
        """At most capacity messages of kind reserved at once (None removes the limit)."""
        self.db.call(
            "set_limit",
            queue=self.name,
            kind=text_value(kind, "kind"),
            capacity=whole_number(capacity, "capacity"),
        )

    def limits(self) -> list[LimitInfo]:
        return [LimitInfo(q, k, int(c), int(u)) for q, k, c, u in self.db.call("limits", queue=self.name)]

    def schedule_every(self, key: str | int, kind: str, payload: Any, every: Duration) -> dt.datetime:
        """A message key@time every ``every`` (whole seconds, aligned to the Unix epoch); returns the first time."""
        d = self.db.dialect
        at = self.db.call(
            "schedule_every",
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            every=d.duration(every, "every"),
        )[0][0]
        return d.read_time(at)

    def schedule_cron(self, key: str | int, kind: str, payload: Any, cron: str) -> dt.datetime:
        """A message key@time at every minute matching the 5-field cron expression (UTC); returns the first time."""
        d = self.db.dialect
        at = self.db.call(
            "schedule_cron",
            queue=self.name,
            key=key_value(key),
            kind=text_value(kind, "kind"),
            payload=encode_json(payload),
            cron=text_value(cron, "cron"),
        )[0][0]
        return d.read_time(at)

    def unschedule(self, key: str | int, kind: str) -> bool:
        return bool(
            self.db.call("unschedule", queue=self.name, key=key_value(key), kind=text_value(kind, "kind"))[0][
                0
            ]
        )

    def schedules(self) -> list[ScheduleInfo]:
        return [_schedule(self.db.dialect, row) for row in self.db.call("schedules", queue=self.name)]

    # -- browsing and throughput (what the dashboard reads) ----------------------------
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
        rows = self.db.call(
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
            )
            for key, kind, st, priority, attempts, scheduled, created, reserved_by, last_error, dead_from in rows
        ]

    def throughput(self, since: dt.datetime | dt.timedelta | None = None) -> list[ThroughputRow]:
        """Messages that left this queue per minute since ``since`` (None = an hour ago; a timedelta
        = that long ago; at most a day), by outcome, from pyqueue_history: only a queue with a
        history_retention has any (queue_throughput). Minutes without any are left out."""
        return _throughput(self.db, self.name, since)


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


@dataclass(frozen=True)
class ThroughputRow:
    """How many messages left a queue in one minute, by outcome (queue_throughput)."""

    queue: str
    minute: dt.datetime
    committed: int
    dead_lettered: int
    moved: int
    popped: int


def _throughput(
    db: Database, queue: str | None, since: dt.datetime | dt.timedelta | None
) -> list[ThroughputRow]:
    d = db.dialect
    if isinstance(since, dt.timedelta):
        since = dt.datetime.now(dt.timezone.utc) - since
    rows = db.call("throughput", queue=queue, since=d.time(since, "since"))
    return [
        ThroughputRow(q, d.read_time(minute), int(c), int(dl), int(mv), int(pp))
        for q, minute, c, dl, mv, pp in rows
    ]
