"""A production worker: handlers per queue and kind, run on a pool of threads.

    worker = pyqueue_sql.Worker("postgresql://localhost/app", concurrency=8)

    @worker.handler("emails", "welcome", retry=RetryPolicy(base=2, max_delay=600))
    def send_welcome(job):
        mail(job.payload["to"])

    worker.run()          # until SIGTERM / SIGINT (or worker.stop())

How it waits (the dispatcher thread, one connection):
  * it reserves as many messages as it has free handler threads, back to back
    while work flows;
  * when a reserve comes back empty it asks each queue for its next
    scheduled_at (queue_next_scheduled_at) and waits until the earliest of
    that, the poll fallback, or a wakeup:
    - PostgreSQL: LISTEN on each queue's channel (queue_channel), registered
      before the first reserve, so a push between an empty reserve and the
      wait is buffered in the connection and never lost. A push that the
      NOTIFY throttle swallowed is caught by a re-check one `linger` after each
      wakeup, and anything else by the poll fallback;
    - MySQL/MariaDB (no NOTIFY), or listen=False: with one queue, a long poll
      inside the server (queue_wait: one client round trip per `long_poll_wait`
      seconds, checking every `long_poll_check` seconds); with several queues,
      client-side polling that backs off from `poll_min` to `poll_max`.
      (`mysql_wait` and `mysql_check` are deprecated names of these two.)

Each message: the handler runs on a pool thread; success -> queue_commit, or,
in a worker of one queue that is not stopping, on PostgreSQL (commit_reserve=
True asks for it on MySQL too), queue_commit_reserve: the same call reserves
the queue's next message, which the thread runs next (one round trip per
message instead of a commit and a reserve; stats.commit_reserves counts them;
with several queues the dispatcher keeps choosing, so none starves);
exception -> queue_fail with the queue's RetryPolicy delay (exponential,
jittered) and the error text "ExceptionType: message" (stored as the message's
last_error; the traceback goes to the log); the SQL dead-letters it (or drops
it, when the queue has no dead-letter queue) once it has had the queue's
max_attempts deliveries, and the log says which of the three happened. A
handler that is an ``async def`` (or returns any awaitable) is awaited to
completion on an event loop of its handler thread (one loop per thread, kept
for the thread's life) before the commit; a failure there is a failure like
any other. A heartbeat thread extends the reservation of every running
message (every lease/3, by lease) so a long handler keeps it. Commit and
heartbeat of one message are serialised, so a commit never races a token
change.

What a handler raises:
  * any Exception, and any other BaseException (SystemExit, GeneratorExit,
    asyncio.CancelledError...) except KeyboardInterrupt: a failure of that
    message (queue_fail with backoff, logged with its traceback); the worker
    and its thread go on;
  * KeyboardInterrupt: a stop request. The message is handed back at once
    (queue_fail with no delay and the error recorded; the delivery counts) and
    the worker stops gracefully, as for SIGTERM.
A non-connection error in the reserve/dispatch loop (the queue was dropped,
a permission was revoked, an on_idle hook raised...) never ends run(): it is
logged with its traceback (event "dispatch_error"), shown by status(), and the
loop starts again on a fresh connection after a back-off (0.5 s doubling to
30 s; reset once a round succeeds).

Stop (SIGTERM/SIGINT or stop()): no more reserves; messages reserved but not
started are handed back at once (queue_rollback with no delay; the delivery
still counts as an attempt); running handlers get `shutdown_timeout` seconds
to finish and commit. Meanwhile the worker logs (event "stopping") how many
handlers it waits for, their keys and the seconds left, every 10 s. A second
SIGTERM/SIGINT (or stop(force=True)) stops at once. Handlers still running
at the deadline or at a forced stop are abandoned: they lose their heartbeat
and their messages come back after the lease expires; run() then returns
False and lists them in ``worker.unfinished`` (`pyqueue-sql worker` exits
non-zero).

Connection loss: every database call retries on a fresh connection with
exponential backoff (jittered, up to 5 s). A commit or rollback whose reply was
lost is simply sent again: the token makes it apply at most once (the second
returns false). A reserve whose reply was lost leaves its messages reserved by
nobody; they come back when the lease expires. Nothing is lost; a message may
be delivered again (at-least-once), never committed twice.

Worker registry (queue_worker_register, see sql/CONTRACT.md): at start the
worker registers itself (name, host, pid, queues) and reserves as the
registration's reserve_as (``name#id``, what `pyqueue-sql workers` shows); each
heartbeat tick also heartbeats the registration (with the secret it got at
register time: a worker can touch only its own registration), and stop
deregisters it. ``worker.registered`` (an Event) is set once the registration
is known in Python, i.e. after it is visible in the database. If
the heartbeat finds the registration gone (another process ran
release_dead_workers because this worker was silent too long: a stalled
process, a long network cut), the worker logs it (event "released"), counts the
messages it is still running as lost (their tokens were cleared and they are
ready again, so their commits return false and they are redelivered) and
registers again. ``release_dead_after=S`` (off by default) makes the heartbeat
thread also call release_dead_workers(S) every tick; keep S well above every
worker's heartbeat interval (lease/3; the minimum accepted is 3 intervals of
this worker): a worker wrongly declared dead has its running messages
delivered twice. ``register=False`` turns the registry off (reserves as name).

Hooks for a worker registry (lists of callables taking the worker):
on_start (before the first reserve), on_heartbeat (every heartbeat tick, on
the heartbeat thread; worker.heartbeat_run(fn) runs fn(db) on its connection
with reconnects), on_stop (after the last handler finished or was abandoned),
and on_idle (after an empty reserve, before waiting).

pyqueue_sql.aio.worker.AsyncWorker is the same worker for `async def` handlers
(asyncio tasks instead of threads): the loops below are written once, as
generators of operations (WorkerBase) that Worker runs on its threads and
AsyncWorker awaits.

Watching it: ``worker.status()`` is a snapshot (WorkerStatus: state, running
keys, stats, the stop deadline, the last dispatch error); ``status_line()`` is
that as one line; ``worker.stopping`` / ``worker.stopped`` tell where the stop
is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import os
import queue as queue_mod
import random
import signal
import socket
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import dialects, errors
from .client import Database, Reservation, WorkerRegistration, connect, default_worker_name

log = logging.getLogger("pyqueue_sql.worker")

# Without LISTEN, a worker of one queue long-polls queue_wait: one round trip lasts up to
# LONG_POLL_WAIT seconds, in which the server looks for a ready message every LONG_POLL_CHECK seconds.
LONG_POLL_WAIT = 1.0
LONG_POLL_CHECK = 0.025


def _renamed(old: str, old_value: float | None, new: str, new_value: float, default: float) -> float:
    """The value of a keyword argument that has a deprecated old name: the old one still works
    (with a DeprecationWarning); both at once with different values is an error."""
    if old_value is None:
        return new_value
    warnings.warn(
        f"Worker({old}=...) is deprecated: use {new}= (same meaning)", DeprecationWarning, stacklevel=3
    )
    if new_value != default and new_value != old_value:
        raise errors.InvalidArgumentError(f"pass {new} only ({old} is its deprecated name), not both")
    return old_value


@dataclass(frozen=True)
class RetryPolicy:
    """Delay before a failed message is eligible again:
    min(max_delay, base * factor ** (attempts - 1)), then multiplied by a random
    factor in [1 - jitter, 1 + jitter] so that failures do not retry in lockstep."""

    base: float = 1.0
    factor: float = 2.0
    max_delay: float = 300.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.base < 0 or self.factor < 1 or self.max_delay < 0 or not 0 <= self.jitter <= 1:
            raise errors.InvalidArgumentError(
                "RetryPolicy needs base >= 0, factor >= 1, max_delay >= 0 and 0 <= jitter <= 1"
            )

    def delay(self, attempts: int, rng: random.Random | None = None) -> float:
        rng = rng or random
        exponent = max(attempts - 1, 0)
        raw = self.max_delay if exponent > 64 else min(self.max_delay, self.base * self.factor**exponent)
        return max(0.0, raw * (1 + self.jitter * (2 * rng.random() - 1)))


@dataclass
class Job:
    """A reserved message handed to a handler."""

    reservation: Reservation
    started_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    done: bool = False

    queue = property(lambda self: self.reservation.queue)
    key = property(lambda self: self.reservation.key)
    kind = property(lambda self: self.reservation.kind)
    payload = property(lambda self: self.reservation.payload)
    attempts = property(lambda self: self.reservation.attempts)
    priority = property(lambda self: self.reservation.priority)
    created_at = property(lambda self: self.reservation.created_at)
    scheduled_at_initially = property(lambda self: self.reservation.scheduled_at_initially)


Handler = Callable[[Job], Any]


@dataclass
class _Route:
    queue: str
    handlers: dict[str | None, Handler]
    retry: RetryPolicy

    def kinds(self) -> list[str] | None:
        return None if None in self.handlers else sorted(k for k in self.handlers if k is not None)

    def handler_for(self, kind: str) -> Handler | None:
        return self.handlers.get(kind, self.handlers.get(None))


@dataclass
class WorkerStats:
    reserved: int = 0
    succeeded: int = 0
    failed: int = 0
    lost: int = 0  # commit/rollback returned false: the reservation had expired
    handed_back: int = 0
    reconnects: int = 0
    wakeups: int = 0
    db_calls: int = 0
    dispatch_errors: int = 0  # non-connection errors in the reserve/dispatch loop (logged, retried)
    interrupted: int = 0  # handlers that raised KeyboardInterrupt (handed back; the worker stopped)
    commit_reserves: int = 0  # commits that reserved the next message in the same call


@dataclass(frozen=True)
class WorkerStatus:
    """A snapshot of a worker (Worker.status())."""

    name: str
    state: str  # 'starting', 'running', 'stopping' or 'stopped'
    reserve_as: str
    worker_id: int | None  # None when not registered
    concurrency: int
    running: tuple[str, ...]  # "queue/key/kind" of the messages being handled now
    stats: WorkerStats  # a copy
    stop_deadline_in_s: float | None  # while stopping: seconds until running handlers are abandoned
    stop_reason: str | None
    unfinished: tuple[str, ...]  # after a stop: handlers abandoned at the deadline / forced stop
    last_error: str | None  # the reserve loop's last error, until a round succeeds again


def describe_error(error: BaseException) -> str:
    """The text stored as a message's last_error: "ExceptionType: message"."""
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _where(job: Job) -> str:
    return f"{job.queue}/{job.key}/{job.kind}"


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


class _EventLoop:
    """A handler thread's event loop for coroutine handlers: made at the first
    one, kept for the thread's life (so loop-bound clients can be reused),
    closed when the thread ends."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def run(self, awaitable: Any) -> Any:
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        coro = awaitable if inspect.iscoroutine(awaitable) else _awaited(awaitable)
        try:
            return self.loop.run_until_complete(coro)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # SystemExit, KeyboardInterrupt... stop the loop abruptly:
                # the next coroutine gets a fresh one.
                self.close()
            raise

    def close(self) -> None:
        loop, self.loop = self.loop, None
        if loop is None or loop.is_closed():
            return
        try:
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in tasks:
                t.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        except BaseException:
            log.debug("closing a handler thread's event loop", exc_info=True)
        finally:
            loop.close()


class StoppedError(Exception):
    """Raised inside a retrying database call when the worker is abandoning it."""


def _next_delay(delay: float) -> float:
    """The back-off after `delay` between two attempts of a database call: doubled, jittered, up to 5 s."""
    return min(delay * 2, 5.0) * random.uniform(0.8, 1.2)


def _retrying_error(worker: WorkerBase, role: str, exc: BaseException, delay: float) -> None:
    """Logs (and counts) why a database call is tried again: a lost connection (the caller
    reconnects) or a transaction conflict the client's own retries lost (the caller keeps the
    connection: the call was rolled back whole each time, so running it again is safe)."""
    lost = not isinstance(exc, errors.SerializationError)
    if lost:
        worker.stats.reconnects += 1
    log.warning(
        "database connection lost; retrying" if lost else "transaction conflict; retrying",
        extra={
            "event": "reconnect" if lost else "conflict",
            "role": role,
            "error": str(exc).strip()[:200],
            "retry_in_s": round(delay, 3),
        },
    )


def _drive(steps: Any, execute: Callable[[tuple], Any]) -> Any:
    """Runs a loop's steps (see WorkerBase): each operation it yields is done by execute and its
    result sent back (its error thrown back in); returns the steps' return value."""
    send, value = steps.send, None
    while True:
        try:
            op = send(value)
        except StopIteration as done:
            return done.value
        try:
            value, send = execute(op), steps.send
        except BaseException as exc:
            value, send = exc, steps.throw


def call_steps(conn: Any, fn: Callable[[Any], Any], give_up: Any):
    """One database call on a worker's connection (_Connection, or AsyncWorker's), reconnecting
    and retrying on connection loss with a growing back-off (a transaction conflict the client's
    own retries lost is retried on the same connection: it was rolled back whole each time).
    The operations: ("connect",) a new Database, ("on_connect", db), ("fn", fn, db), ("close",),
    ("back_off", seconds, give_up): sleeps, True when give_up was set meanwhile (then StoppedError)."""
    worker = conn.worker
    retried = (*worker.dialect.connection_errors(), errors.SerializationError)
    delay = 0.05
    while True:
        try:
            if conn.db is None:
                conn.db = yield ("connect",)
                if conn.on_connect is not None:
                    yield ("on_connect", conn.db)
            worker.stats.db_calls += 1
            return (yield ("fn", fn, conn.db))
        except retried as exc:
            if not isinstance(exc, errors.SerializationError):
                yield ("close",)
            _retrying_error(worker, conn.role, exc, delay)
            if (yield ("back_off", delay, give_up)):
                raise StoppedError() from exc
            delay = _next_delay(delay)


class _Connection:
    """One thread's database connection: reconnects and retries on connection loss."""

    def __init__(self, worker: Worker, role: str, on_connect: Callable[[Database], None] | None = None):
        self.worker = worker
        self.role = role
        self.db: Database | None = None
        self.on_connect = on_connect
        self.loop: _EventLoop | None = None  # a handler thread's, for coroutine handlers

    def close(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except Exception:
                pass
            self.db = None

    def run(self, fn: Callable[[Database], Any], *, give_up: threading.Event | None = None) -> Any:
        return _drive(call_steps(self, fn, give_up), self._execute)

    def _execute(self, op: tuple) -> Any:
        kind, *args = op
        if kind == "connect":
            return connect(self.worker.dsn)
        if kind == "on_connect":
            return self.on_connect(*args)
        if kind == "fn":
            fn, db = args
            return fn(db)
        if kind == "close":
            return self.close()
        delay, give_up = args  # "back_off"
        if give_up is None:
            return time.sleep(delay)
        return give_up.wait(delay)


class WorkerBase:
    """What Worker (threads) and pyqueue_sql.aio.AsyncWorker (asyncio tasks) share: the
    configuration, the routes, stop and signals, the registry's bookkeeping, the logs, the
    counters and status(). A subclass provides _jobs() (the messages it holds) and _wake()
    (makes its waits notice a stop), and runs the loops."""

    runtime = "threads"  # how handlers run (the start event says it): "threads" or "asyncio"

    def __init__(
        self,
        dsn: str,
        *,
        concurrency: int = 4,
        name: str | None = None,
        lease: float = 30.0,
        poll_fallback: float | None = None,
        poll_min: float = 0.05,
        poll_max: float = 1.0,
        linger: float = 0.1,
        long_poll_wait: float = LONG_POLL_WAIT,
        long_poll_check: float = LONG_POLL_CHECK,
        shutdown_timeout: float = 30.0,
        listen: bool = True,
        register: bool = True,
        release_dead_after: float | None = None,
        commit_reserve: bool | None = None,
        mysql_wait: float | None = None,
        mysql_check: float | None = None,
    ) -> None:
        long_poll_wait = _renamed("mysql_wait", mysql_wait, "long_poll_wait", long_poll_wait, LONG_POLL_WAIT)
        long_poll_check = _renamed(
            "mysql_check", mysql_check, "long_poll_check", long_poll_check, LONG_POLL_CHECK
        )
        if concurrency < 1:
            raise errors.InvalidArgumentError("concurrency must be at least 1")
        if lease <= 0 or poll_min <= 0 or poll_max < poll_min or long_poll_wait <= 0 or long_poll_check <= 0:
            raise errors.InvalidArgumentError(
                "lease, poll_min, long_poll_wait and long_poll_check must be > 0, poll_max >= poll_min"
            )
        if release_dead_after is not None and release_dead_after < lease:
            raise errors.InvalidArgumentError(
                "release_dead_after must be at least the lease (3 heartbeat intervals of lease/3)"
            )
        self.dsn = dsn
        self.dialect = dialects.for_dsn(dsn)
        self.concurrency = concurrency
        self.name = name or default_worker_name()
        self.lease = float(lease)
        self.poll_fallback = float(
            poll_fallback
            if poll_fallback is not None
            else (5.0 if self.dialect.supports_listen else poll_max)
        )
        self.poll_min = poll_min
        self.poll_max = poll_max
        self.linger = linger
        self.long_poll_wait = long_poll_wait
        self.long_poll_check = long_poll_check
        self.shutdown_timeout = shutdown_timeout
        self.use_listen = listen and self.dialect.supports_listen
        self.register = register
        self.release_dead_after = release_dead_after
        # Where queue_commit_reserve is one transaction of the server's (PostgreSQL). On
        # MySQL/MariaDB the client runs it in a transaction of its own (one round trip all the
        # same), and under many handlers of one queue it measured well under the throughput of a
        # commit plus the dispatcher's batched reserve (bench/async_worker.py --commit-reserve on
        # and off: 224 against 581 msg/s, 32 handlers of 20 ms, 1,000 messages, 2026-11-24);
        # commit_reserve=True asks for it anyway.
        self.commit_reserve = (
            "commit_reserve" not in self.dialect.own_transaction_statements
            if commit_reserve is None
            else bool(commit_reserve)
        )
        self.registration: WorkerRegistration | None = None  # while running, when register=True
        self.routes: dict[str, _Route] = {}
        self.stats = WorkerStats()
        self.on_start: list[Callable[[Any], Any]] = []
        self.on_heartbeat: list[Callable[[Any], Any]] = []
        self.on_stop: list[Callable[[Any], Any]] = []
        self.on_idle: list[Callable[[Any], Any]] = []  # after an empty reserve, before waiting
        self.registered = threading.Event()  # set once self.registration is final (after it is visible)
        self.stopped = threading.Event()  # set when run() has finished
        self.unfinished: list[str] = []  # after run(): "queue/key/kind" of abandoned handlers
        self._stopping = threading.Event()
        self._hard_stop = threading.Event()
        self._state = "stopped"
        self._stop_reason: str | None = None
        self._stop_deadline: float | None = None
        self._last_error: str | None = None
        self._round_ok = False
        self._inflight: dict[tuple[str, str, str], Job] = {}
        self._wake_queues: set[str] = set()
        self._channels: dict[str, str] = {}  # LISTEN channel -> queue
        self._rng = random.Random()
        self._setup()

    @property
    def mysql_wait(self) -> float:
        """Deprecated name of long_poll_wait."""
        warnings.warn("Worker.mysql_wait is deprecated: use long_poll_wait", DeprecationWarning, stacklevel=2)
        return self.long_poll_wait

    @mysql_wait.setter
    def mysql_wait(self, value: float) -> None:
        warnings.warn("Worker.mysql_wait is deprecated: use long_poll_wait", DeprecationWarning, stacklevel=2)
        self.long_poll_wait = value

    @property
    def mysql_check(self) -> float:
        """Deprecated name of long_poll_check."""
        warnings.warn(
            "Worker.mysql_check is deprecated: use long_poll_check", DeprecationWarning, stacklevel=2
        )
        return self.long_poll_check

    @mysql_check.setter
    def mysql_check(self, value: float) -> None:
        warnings.warn(
            "Worker.mysql_check is deprecated: use long_poll_check", DeprecationWarning, stacklevel=2
        )
        self.long_poll_check = value

    # -- configuration -----------------------------------------------------------
    def handler(self, queue: str, kind: str | None = None, *, retry: RetryPolicy | None = None):
        """Decorator: registers fn for messages of `kind` (None = any kind without its own handler)."""

        def register(fn: Handler) -> Handler:
            self.add_handler(queue, fn, kind, retry=retry)
            return fn

        return register

    def add_handler(
        self, queue: str, fn: Handler, kind: str | None = None, *, retry: RetryPolicy | None = None
    ) -> None:
        route = self.routes.setdefault(queue, _Route(queue, {}, RetryPolicy()))
        if kind in route.handlers:
            raise errors.InvalidArgumentError(f"queue {queue!r} already has a handler for kind {kind!r}")
        route.handlers[kind] = fn
        if retry is not None:
            route.retry = retry

    def set_retry(self, queue: str, retry: RetryPolicy) -> None:
        self.routes[queue].retry = retry

    # -- what a subclass provides ------------------------------------------------------
    def _setup(self) -> None:
        """The subclass's own state, made at the end of __init__."""

    def _jobs(self) -> list[Job]:
        """The messages the worker holds now (reserved, started or not); safe from any thread."""
        raise NotImplementedError

    def _wake(self) -> None:
        """Makes the worker's waits notice a stop (called from any thread, or a signal handler)."""
        raise NotImplementedError

    # -- life cycle ----------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        """A stop was asked for (stays True after run() returned, until the next run())."""
        return self._stopping.is_set()

    def stop(self, force: bool = False, *, reason: str | None = None) -> None:
        """Asks the worker to stop (safe from a signal handler or another thread).

        Graceful: no more reserves, unstarted messages handed back, running
        handlers get shutdown_timeout seconds. force=True (or a second call with
        it): stop now; running handlers are abandoned and their messages come
        back when their lease ends."""
        if self._stop_reason is None:
            self._stop_reason = reason or ("stop(force=True)" if force else "stop()")
        elif force and not self._hard_stop.is_set():
            self._stop_reason += ", then forced"
        self._stopping.set()
        if force:
            self._hard_stop.set()
        self._wake()

    def _on_signal(self, signum: int) -> None:
        """SIGTERM/SIGINT: the first stops gracefully, a second one stops at once."""
        name = signal.Signals(signum).name
        if self._stopping.is_set():
            running = [_where(j) for j in self._jobs() if not j.done]
            log.warning(
                "%s received again: stopping now; %d running handler(s) abandoned, their messages "
                "come back when their lease ends: %s",
                name,
                len(running),
                ", ".join(running[:20]),
                extra={
                    "event": "signal",
                    "signal": signum,
                    "force": True,
                    "running": len(running),
                    "keys": running[:20],
                },
            )
            self.stop(force=True, reason=f"{name} (twice)")
        else:
            log.info(
                "%s received: stopping (send it again to stop at once)",
                name,
                extra={"event": "signal", "signal": signum, "force": False},
            )
            self.stop(reason=name)

    def _starting(self) -> None:
        """Resets the run's state and logs the start (run() calls it first)."""
        if not self.routes:
            raise errors.InvalidArgumentError("the worker has no handlers")
        self._stopping.clear()
        self._hard_stop.clear()
        self.stopped.clear()
        self.registered.clear()
        self.unfinished = []
        self._stop_reason = None
        self._stop_deadline = None
        self._last_error = None
        self._state = "starting"
        log.info(
            "worker starting",
            extra={
                "event": "start",
                "worker": self.name,
                "queues": sorted(self.routes),
                "concurrency": self.concurrency,
                "dialect": self.dialect.name,
                "listen": self.use_listen,
                "runtime": self.runtime,
            },
        )

    def _crashed(self, exc: BaseException) -> None:
        if self._stop_reason is None:
            self._stop_reason = describe_error(exc)

    def _run_hooks(self, hooks: list[Callable[[Any], Any]], what: str) -> None:
        for hook in hooks:
            try:
                hook(self)
            except Exception:
                log.exception("%s hook failed", what)

    def _finished(self) -> None:
        """Logs the stop (run() calls it last, after the on_stop hooks)."""
        self._state = "stopped"
        self.stopped.set()
        log.info(
            "worker stopped",
            extra={
                "event": "stop",
                "worker": self.name,
                "reason": self._stop_reason,
                "unfinished": len(self.unfinished),
                **dataclasses.asdict(self.stats),
            },
        )

    # -- registry ----------------------------------------------------------------
    @property
    def reserve_as(self) -> str:
        """The worker name recorded on reserved messages (the registration's, when registered)."""
        reg = self.registration
        return reg.reserve_as if reg is not None else self.name

    def _registration_fields(self) -> dict[str, Any]:
        """register_worker's arguments."""
        return dict(
            name=self.name, queues=sorted(self.routes), host=socket.gethostname()[:255], pid=os.getpid()
        )

    def _registered_as(self, registration: WorkerRegistration) -> None:
        # The row is committed (visible to others) before register_worker
        # returns; `registered` is set only once self.registration holds it,
        # so whoever waits for `registered` sees reserve_as and the row agree.
        self.registration = registration
        self.registered.set()
        log.info(
            "worker registered as %s",
            registration.reserve_as,
            extra={
                "event": "register",
                "worker_id": registration.worker_id,
                "reserve_as": registration.reserve_as,
            },
        )

    def _log_released(self, registration: WorkerRegistration) -> None:
        held = [j for j in self._jobs() if not j.done]
        log.warning(
            "this worker was released as dead (its registration heartbeat was missed for too long); "
            "the messages it is still running were made ready again: their commits will return "
            "false and they will be redelivered; registering again",
            extra={
                "event": "released",
                "worker_id": registration.worker_id,
                "running": len(held),
                "keys": [_where(j) for j in held][:20],
            },
        )

    def _log_release_dead(self, released: int) -> None:
        if released:
            log.warning(
                "released the messages of dead workers",
                extra={
                    "event": "release_dead",
                    "released": released,
                    "older_than_s": self.release_dead_after,
                },
            )

    @staticmethod
    def _log_deregistered(registration: WorkerRegistration, error: BaseException | None) -> None:
        if error is None:
            log.info(
                "worker deregistered", extra={"event": "deregister", "worker_id": registration.worker_id}
            )
        else:
            log.warning(
                "could not deregister; release_dead_workers removes the registration later",
                extra={"event": "error", "worker_id": registration.worker_id, "error": str(error)[:200]},
            )

    # -- dispatcher ------------------------------------------------------------
    def _dispatch_failed(self, exc: BaseException, backoff: float) -> float:
        """Logs a non-connection error of the reserve loop; returns the back-off after this one."""
        if self._round_ok:
            backoff = 0.5
        self.stats.dispatch_errors += 1
        self._last_error = describe_error(exc)[:500]
        log.error(
            "error in the reserve loop (%s); starting it again in %.1f s",
            self._last_error,
            backoff,
            exc_info=exc,
            extra={"event": "dispatch_error", "error": self._last_error, "retry_in_s": backoff},
        )
        return backoff

    def _round_done(self) -> None:
        self._round_ok = True
        self._last_error = None

    def _reserve_order(self) -> list[str]:
        """The queues to reserve from this round: those a wakeup named first."""
        order = sorted(self._wake_queues) + [q for q in self.routes if q not in self._wake_queues]
        self._wake_queues.clear()
        return order

    def _free(self) -> int:
        return self.concurrency - len(self._jobs())

    def _idle_timeout(self, poll: float, due: float | None, recheck_at: float | None) -> tuple[float, float]:
        """(how long to wait after an empty round, the next client-side poll interval): the
        earliest of the wakeup's fallback, the next scheduled_at and a pending re-check."""
        if self.use_listen:
            timeout = self.poll_fallback
        elif len(self.routes) == 1:
            timeout = self.long_poll_wait
        else:
            timeout = poll
            poll = min(poll * 2, self.poll_max)
        if due is not None:
            timeout = min(timeout, due)
        if recheck_at is not None:
            timeout = min(timeout, max(recheck_at - time.monotonic(), 0.0))
        return max(timeout, 0.0), poll

    @staticmethod
    def _earliest_due(due: float | None, wait_s: float | None) -> float | None:
        # 0 right after an empty reserve: a kind we do not handle, or a
        # row another reserver holds the lock of; let the poll decide.
        if wait_s is not None and wait_s > 0:
            return wait_s if due is None else min(due, wait_s)
        return due

    def _reserved(self, route: _Route, jobs: list[Job]) -> None:
        self.stats.reserved += len(jobs)
        if jobs:
            log.debug("reserved", extra={"event": "reserve", "queue": route.queue, "n": len(jobs)})

    def _woken(self, channel: str, payload: str) -> None:
        self.stats.wakeups += 1
        self._wake_queues.add(self._channels.get(channel, payload))

    # -- handlers ----------------------------------------------------------------
    def _chains(self, interrupted: bool) -> bool:
        """Whether a success commits with queue_commit_reserve, taking the queue's next message
        in the same call (see commit_reserve). Only for a worker of one queue: with several, the
        dispatcher decides which queue a free thread serves, so that a busy queue cannot starve
        the others."""
        return (
            self.commit_reserve and len(self.routes) == 1 and not interrupted and not self._stopping.is_set()
        )

    def _commit_reserve_args(self, route: _Route) -> dict[str, Any]:
        return dict(n=1, worker=self.reserve_as, timeout=self.lease, kinds=route.kinds())

    def _reserve_args(self, route: _Route, n: int) -> dict[str, Any]:
        return dict(n=n, worker=self.reserve_as, timeout=self.lease, kinds=route.kinds())

    def _handler_of(self, job: Job) -> tuple[_Route, Handler]:
        """The job's route and handler (a QueueError, the message's failure, when its kind has none)."""
        route = self.routes[job.queue]
        fn = route.handler_for(job.kind)
        if fn is None:
            raise errors.QueueError(f"no handler for kind {job.kind!r}")
        return route, fn

    def _handled(self, job: Job, error: BaseException | None) -> bool:
        """Bookkeeping once a handler returned or raised; True when it was interrupted
        (KeyboardInterrupt: the message is handed back and the worker stops)."""
        interrupted = isinstance(error, KeyboardInterrupt)
        if interrupted:
            self.stats.interrupted += 1
            self.stop(reason="KeyboardInterrupt in a handler")
        return interrupted

    def _failure_delay(self, job: Job, interrupted: bool) -> float:
        return 0.0 if interrupted else self.routes[job.queue].retry.delay(job.attempts, self._rng)

    def _committed(self, job: Job, ok: bool, elapsed_ms: float) -> None:
        if not ok:
            self._log_lost(job)
            return
        self.stats.succeeded += 1
        log.debug(
            "done: %s attempt %d in %.0f ms",
            _where(job),
            job.attempts,
            elapsed_ms,
            extra={
                "event": "commit",
                "queue": job.queue,
                "key": job.key,
                "kind": job.kind,
                "attempts": job.attempts,
                "ms": elapsed_ms,
            },
        )

    def _log_lost(self, job: Job) -> None:
        self.stats.lost += 1
        log.warning(
            "reservation of %s no longer held (expired or released); the message is or was redelivered",
            _where(job),
            extra={"event": "lost", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    def _failed(
        self,
        job: Job,
        error: BaseException,
        text: str,
        outcome: str | None,
        delay: float,
        elapsed_ms: float,
        interrupted: bool,
    ) -> None:
        if not interrupted:
            self.stats.failed += 1
        if outcome is None:
            self.stats.lost += 1
        extra = {
            "event": "fail",
            "outcome": outcome,
            "queue": job.queue,
            "key": job.key,
            "kind": job.kind,
            "attempts": job.attempts,
            "ms": elapsed_ms,
            "error": text[:500],
        }
        where = f"{_where(job)} attempt {job.attempts}"
        if outcome is None:
            extra["event"] = "lost"
            log.warning(
                "handler failed: %s: %s; its reservation no longer held (expired or released), the "
                "message is or was redelivered",
                where,
                text[:500],
                exc_info=error,
                extra=extra,
            )
        elif interrupted:
            extra["event"] = "interrupted"
            then = {
                "retry": "handed back",
                "dead_lettered": "moved to the dead-letter queue (that was its last allowed delivery)",
                "dropped": "dropped (its last allowed delivery; the queue has no dead-letter queue)",
            }.get(outcome, outcome)
            log.warning(
                "handler interrupted (KeyboardInterrupt): %s: %s; stopping the worker",
                where,
                then,
                exc_info=error,
                extra=extra,
            )
        elif outcome == "retry":
            extra["retry_in_s"] = round(delay, 3)
            log.warning(
                "handler failed: %s: %s; retry in %.1f s",
                where,
                text[:500],
                delay,
                exc_info=error,
                extra=extra,
            )
        elif outcome == "dead_lettered":
            log.error(
                "handler failed on the last allowed delivery: %s: %s; moved to the dead-letter queue",
                where,
                text[:500],
                exc_info=error,
                extra=extra,
            )
        elif outcome == "dropped":
            log.error(
                "handler failed on the last allowed delivery: %s: %s; dropped (the queue has no "
                "dead-letter queue)",
                where,
                text[:500],
                exc_info=error,
                extra=extra,
            )
        else:
            log.warning(
                "handler failed: %s: %s; outcome %s", where, text[:500], outcome, exc_info=error, extra=extra
            )

    @staticmethod
    def _log_abandoned(job: Job) -> None:
        log.warning(
            "gave up finishing %s at shutdown; it comes back after its lease",
            _where(job),
            extra={"event": "abandon", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    @staticmethod
    def _log_unfinishable(job: Job, exc: BaseException) -> None:
        """A commit or fail that raised (e.g. the queue was dropped meanwhile)."""
        log.error(
            "could not commit or fail %s (%s); the message comes back after its lease",
            _where(job),
            describe_error(exc)[:500],
            exc_info=exc,
            extra={"event": "error", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    def _handed_back(self, job: Job) -> None:
        self.stats.handed_back += 1
        log.info(
            "handed back unstarted message",
            extra={"event": "hand_back", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    @staticmethod
    def _log_extended(job: Job, new: Reservation | None) -> None:
        if new is None:
            log.warning(
                "heartbeat: reservation no longer held",
                extra={"event": "lost", "queue": job.queue, "key": job.key, "kind": job.kind},
            )
        else:
            job.reservation = new
            log.debug("extended", extra={"event": "extend", "queue": job.queue, "key": job.key})

    # -- the loops, written once --------------------------------------------------------
    # Each loop is a generator that yields the operations it needs done and gets their results
    # back (an error is thrown in where the operation was asked for). Worker runs the
    # operations on its threads, AsyncWorker awaits them; the logic is the same:
    #   ("call", fn, hard)      fn(db) on the loop's connection, reconnecting and retrying until
    #                           the stop (hard=False) or the hard stop (hard=True): StoppedError then
    #   ("notifications", db, seconds)   the LISTEN wakeups that came within seconds
    #   ("handle", fn, job)     the handler, run to completion: None, or what it raised
    #   ("lock", lock)          acquire the job's lock (the steps release it)
    #   ("wait_slots",)         until a handler slot is free or the stop
    #   ("pause", seconds)      sleep, cut short by the stop; True when stopped
    #   ("hooks", hooks, what)  run hooks (what=None: an error propagates)
    #   ("reconnect",)          close the loop's connection (the next call opens a fresh one)

    _job_type: type[Job] = Job

    def _start_jobs(self, jobs: list[Job]) -> None:
        """Hands reserved jobs to the handlers (they hold a slot from now on)."""
        raise NotImplementedError

    def _release(self, job: Job, successors: list[Job] = ()) -> None:
        """Frees the job's slot; a successor reserved by its commit takes it over at once."""
        raise NotImplementedError

    def _nested(self, steps: Any) -> Any:
        """Runs steps inside a "call" (the value, or for AsyncWorker an awaitable of it)."""
        raise NotImplementedError

    def _register_steps(self, hard: bool):
        self._registered_as(
            (yield ("call", lambda db: db.register_worker(**self._registration_fields()), hard))
        )

    def _dispatch_steps(self):
        """The reserve loop; a non-connection error in it is logged and the loop
        starts again on a fresh connection after a back-off, until stop()."""
        backoff = 0.5
        while not self._stopping.is_set():
            self._round_ok = False
            try:
                yield from self._reserve_loop_steps()
                return
            except StoppedError:
                return
            except Exception as exc:
                backoff = self._dispatch_failed(exc, backoff)
                yield ("reconnect",)  # start again from a clean connection (LISTEN registered again)
                if (yield ("pause", backoff)):
                    return
                backoff = min(backoff * 2, 30.0)

    def _reserve_loop_steps(self):
        poll = self.poll_min
        recheck_at: float | None = None
        long_poll = not self.use_listen and len(self.routes) == 1
        nothing_ready = False  # the last long poll timed out: no reserve needed
        while not self._stopping.is_set():
            if nothing_ready:
                nothing_ready = not (yield from self._wait_steps(self.long_poll_wait))
                continue
            yield ("wait_slots",)
            if self._stopping.is_set():
                break
            got = 0
            for name in self._reserve_order():
                free = self._free()
                if free <= 0 or self._stopping.is_set():
                    break
                got += yield from self._reserve_steps(self.routes[name], free)
            self._round_done()
            if got:
                poll = self.poll_min
                continue
            yield ("hooks", self.on_idle, None)
            # Nothing ready: wait for the earliest of a wakeup, the next
            # scheduled_at, the poll fallback (and one re-check after a wakeup).
            due = yield from self._next_due_steps()
            timeout, poll = self._idle_timeout(poll, due, recheck_at)
            recheck_at = None
            woke = yield from self._wait_steps(timeout)
            if woke and self.use_listen:
                recheck_at = time.monotonic() + self.linger
            # queue_wait watches the next scheduled_at itself, so a timed-out
            # long poll goes straight into the next one (one query per wait).
            nothing_ready = long_poll and not woke and not self._wake_queues

    def _next_due_steps(self):
        due: float | None = None
        for route in self.routes.values():
            _, wait_s = yield (
                "call",
                lambda db, route=route: db.queue(route.queue).next_scheduled_at(route.kinds()),
                False,
            )
            due = self._earliest_due(due, wait_s)
        return due

    def _wait_steps(self, timeout: float):
        """Waits up to timeout; True if woken by a notification (LISTEN) or a ready message (long poll)."""
        if timeout <= 0:
            return False
        deadline = time.monotonic() + timeout
        if self.use_listen:
            return (yield ("call", lambda db: self._nested(self._listen_steps(db, deadline)), False))
        if len(self.routes) == 1:
            route = next(iter(self.routes.values()))
            if self._stopping.is_set():
                return False
            if self._wake_queues:
                return True
            woke = yield (
                "call",
                lambda db: db.queue(route.queue).wait(
                    timeout=round(timeout, 6) or 0.000001, poll=self.long_poll_check, kinds=route.kinds()
                ),
                False,
            )
            if woke:
                self.stats.wakeups += 1
            return bool(woke)
        yield ("pause", timeout)
        return False

    def _listen_steps(self, db: Any, deadline: float):
        if self._wake_queues:
            return True  # (re)connected: wakeups may have been missed meanwhile
        left = deadline - time.monotonic()
        # Short slices so that stop() is noticed within 0.25 s.
        while left > 0 and not self._stopping.is_set():
            notes = yield ("notifications", db, min(left, 0.25))
            for channel, payload in notes:
                self._woken(channel, payload)
            if notes:
                return True  # later notifications stay buffered for the next wait
            left = deadline - time.monotonic()
        return False

    def _reserve_steps(self, route: _Route, n: int):
        rows = yield ("call", lambda db: db.queue(route.queue).reserve(**self._reserve_args(route, n)), False)
        jobs = [self._job_type(r) for r in rows]
        self._start_jobs(jobs)
        self._reserved(route, jobs)
        return len(jobs)

    def _serve_steps(self, job: Job | None):
        """Runs a reserved job, then the ones its commits reserve; hands it back after a stop."""
        while job is not None:
            if self._stopping.is_set():
                yield from self._hand_back_steps(job)
                return
            try:
                job = yield from self._job_steps(job)
            except Exception:  # never lose the handler (its job was released in _job_steps)
                log.exception(
                    "handler: unexpected error", extra={"event": "error", "queue": job.queue, "key": job.key}
                )
                return

    def _commit_steps(self, job: Job, chain: bool):
        """Commits a handled message: (committed, the next jobs reserved in the same call)."""
        q = job.queue
        if not chain:
            return (yield ("call", lambda db: db.queue(q).commit(job.reservation), True)), []
        route = self.routes[q]
        ok, rows = yield (
            "call",
            lambda db: db.queue(q).commit_reserve(job.reservation, **self._commit_reserve_args(route)),
            True,
        )
        self.stats.commit_reserves += 1
        self.stats.reserved += len(rows)
        return bool(ok), [self._job_type(r) for r in rows]

    def _job_steps(self, job: Job):
        """Runs one job to its commit or failure; returns the next job when the commit reserved one."""
        job.started_at = time.monotonic()
        started = time.time()
        try:
            _, fn = self._handler_of(job)
        except errors.QueueError as exc:
            error: BaseException | None = exc
        else:
            # The handler's failure is the message's, not the worker's: it comes back as the
            # result (thrown in, a GeneratorExit would end these steps).
            error = yield ("handle", fn, job)
        if isinstance(error, asyncio.CancelledError) and self._hard_stop.is_set():
            self._release(job)  # abandoned: the message comes back after its lease
            raise error
        interrupted = self._handled(job, error)
        elapsed_ms = round((time.time() - started) * 1000, 3)
        successors: list[Job] = []
        try:
            yield ("lock", job.lock)
            try:
                if error is None:
                    ok, successors = yield from self._commit_steps(job, self._chains(interrupted))
                    self._committed(job, ok, elapsed_ms)
                else:
                    delay = self._failure_delay(job, interrupted)
                    text = describe_error(error)
                    outcome = yield (
                        "call",
                        lambda db: db.queue(job.queue).fail(job.reservation, error=text, delay=delay),
                        True,
                    )
                    self._failed(job, error, text, outcome, delay, elapsed_ms, interrupted)
                job.done = True
            finally:
                job.lock.release()
        except StoppedError:
            self._log_abandoned(job)
        except Exception as exc:  # e.g. the queue was dropped meanwhile: keep the handler alive
            self._log_unfinishable(job, exc)
        finally:
            self._release(job, successors)
        return successors[0] if successors else None

    def _hand_back_steps(self, job: Job):
        try:
            yield ("lock", job.lock)
            try:
                yield ("call", lambda db: db.queue(job.queue).rollback(job.reservation, delay=0), True)
                job.done = True
            finally:
                job.lock.release()
            self._handed_back(job)
        except StoppedError:
            pass
        except Exception:
            log.exception(
                "could not hand back; the message comes back after its lease",
                extra={"event": "error", "queue": job.queue, "key": job.key},
            )
        finally:
            self._release(job)

    def _heartbeat_steps(self):
        """One heartbeat tick: extends every held reservation, heartbeats the registration, runs
        the on_heartbeat hooks. StoppedError (the hard stop) ends the heartbeat."""
        for job in self._jobs():
            yield from self._extend_steps(job)
        try:
            yield from self._registry_tick_steps()
        except StoppedError:
            raise
        except Exception:
            log.exception("heartbeat: worker registry call failed", extra={"event": "error"})
        yield ("hooks", self.on_heartbeat, "on_heartbeat")

    def _extend_steps(self, job: Job):
        yield ("lock", job.lock)
        try:
            if job.done or self._hard_stop.is_set():
                return
            try:
                new = yield (
                    "call",
                    lambda db: db.queue(job.queue).extend(job.reservation, timeout=self.lease),
                    True,
                )
            except StoppedError:
                return
            except Exception:
                log.exception(
                    "heartbeat: could not extend",
                    extra={"event": "error", "queue": job.queue, "key": job.key},
                )
                return
            self._log_extended(job, new)
        finally:
            job.lock.release()

    def _registry_tick_steps(self):
        reg = self.registration
        if reg is not None and not (yield ("call", lambda db: db.heartbeat_worker(reg), True)):
            self._log_released(reg)
            yield from self._register_steps(True)
        if self.release_dead_after is not None:
            self._log_release_dead(
                (yield ("call", lambda db: db.release_dead_workers(self.release_dead_after), True))
            )

    def _deregister_steps(self):
        reg, self.registration = self.registration, None
        if reg is None:
            return
        try:
            # One attempt (the hard stop is set): if it fails, release_dead_workers cleans up.
            yield ("call", lambda db: db.deregister_worker(reg), True)
            self._log_deregistered(reg, None)
        except Exception as exc:
            self._log_deregistered(reg, exc)

    # -- shutdown --------------------------------------------------------------------
    def _running(self) -> list[str]:
        return [_where(j) for j in self._jobs() if j.started_at is not None and not j.done]

    def _report_stopping(self, deadline: float, report_at: float) -> float:
        """Every 10 s of a graceful stop: logs the handlers it waits for; returns the next report time."""
        now = time.monotonic()
        if now < report_at:
            return report_at
        running = self._running()
        if running:
            log.info(
                "stopping: waiting up to %.0f s for %d running handler(s): %s; a second SIGINT/SIGTERM "
                "stops at once",
                deadline - now,
                len(running),
                ", ".join(running[:20]),
                extra={
                    "event": "stopping",
                    "running": len(running),
                    "keys": running[:20],
                    "deadline_in_s": round(deadline - now, 1),
                },
            )
        return now + 10.0

    def _abandon_the_rest(self) -> None:
        """At the end of a stop: whatever still runs is abandoned (logged, kept in unfinished)."""
        left = [_where(j) for j in self._jobs()]
        self.unfinished = left
        if left:
            why = "the stop was forced" if self._hard_stop.is_set() else "the shutdown deadline passed"
            log.error(
                "%s with %d handler(s) still running; their messages come back after the lease: %s",
                why,
                len(left),
                ", ".join(left[:20]),
                extra={"event": "deadline", "forced": self._hard_stop.is_set(), "running": left[:100]},
            )
        self._hard_stop.set()

    # -- status ------------------------------------------------------------------------
    def status(self) -> WorkerStatus:
        """A snapshot: state, running messages, counters, the stop deadline, the last dispatch error."""
        reg = self.registration
        deadline = self._stop_deadline
        state = self._state
        if state == "running" and self._stopping.is_set():
            state = "stopping"
        return WorkerStatus(
            name=self.name,
            state=state,
            reserve_as=self.reserve_as,
            worker_id=None if reg is None else reg.worker_id,
            concurrency=self.concurrency,
            running=tuple(self._running()),
            stats=dataclasses.replace(self.stats),
            stop_deadline_in_s=None
            if deadline is None or state != "stopping"
            else max(deadline - time.monotonic(), 0.0),
            stop_reason=self._stop_reason,
            unfinished=tuple(self.unfinished),
            last_error=self._last_error,
        )

    def status_line(self) -> str:
        st = self.status()
        s = st.stats
        running = f"running {len(st.running)}/{st.concurrency}"
        if st.state == "stopping":
            running = f"waiting for {len(st.running)} running"
            if st.stop_deadline_in_s is not None:
                running += f" (deadline in {st.stop_deadline_in_s:.0f} s)"
        line = (
            f"{st.name} {st.state}: {running}, done {s.succeeded}, failed {s.failed}, lost {s.lost}, "
            f"wakeups {s.wakeups}, reconnects {s.reconnects}"
        )
        if st.last_error:
            line += f", error: {st.last_error[:120]}"
        return line


class Worker(WorkerBase):
    """Runs handlers for messages of one or more queues on a pool of threads. See the module docstring."""

    def _setup(self) -> None:
        self._heartbeat_conn: _Connection | None = None
        self._slots = threading.Condition()
        self._pending: queue_mod.Queue[Job | None] = queue_mod.Queue()
        self._threads: list[threading.Thread] = []

    def _jobs(self) -> list[Job]:
        with self._slots:
            return list(self._inflight.values())

    def _wake(self) -> None:
        with self._slots:
            self._slots.notify_all()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: the first stops gracefully, a second one stops at once."""

        def handle(signum, _frame):
            self._on_signal(signum)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def run(self, *, install_signals: bool | None = None) -> bool:
        """Runs until stop(); handles SIGTERM/SIGINT when run in the main thread.

        Returns True when it stopped cleanly (every handler it started finished
        and its message was committed, failed or handed back), False when
        handlers were still running at the shutdown deadline or a forced stop
        abandoned them (listed in ``self.unfinished``; their messages come back
        when their lease ends)."""
        if not self.routes:
            raise errors.InvalidArgumentError("the worker has no handlers")
        if install_signals is None:
            install_signals = threading.current_thread() is threading.main_thread()
        if install_signals:
            self.install_signal_handlers()
        self._starting()
        for i in range(self.concurrency):
            t = threading.Thread(target=self._handler_loop, name=f"pyqueue-handler-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        hb = threading.Thread(target=self._heartbeat_loop, name="pyqueue-heartbeat", daemon=True)
        hb.start()
        dispatcher = _Connection(self, "dispatcher", on_connect=self._on_dispatcher_connect)
        try:
            if self.register:
                try:
                    self._steps(self._register_steps(False), dispatcher)
                except StoppedError:
                    pass
            for hook in self.on_start:
                hook(self)
            self._state = "running"
            self._steps(self._dispatch_steps(), dispatcher)
        except BaseException as exc:
            self._crashed(exc)
            raise
        finally:
            self._stopping.set()
            self._state = "stopping"
            dispatcher.close()
            self._shutdown()
            hb.join(timeout=5)
            conn = _Connection(self, "deregister")
            try:
                self._steps(self._deregister_steps(), conn)
            finally:
                conn.close()
            self._run_hooks(self.on_stop, "on_stop")
            self._finished()
        return not self.unfinished

    # -- the operations of the loops' steps -----------------------------------------------
    def _steps(self, steps: Any, conn: _Connection | None) -> Any:
        return _drive(steps, lambda op: self._execute(op, conn))

    def _nested(self, steps: Any) -> Any:
        return self._steps(steps, None)

    def _execute(self, op: tuple, conn: _Connection | None) -> Any:
        kind, *args = op
        if kind == "call":
            fn, hard = args
            return conn.run(fn, give_up=self._hard_stop if hard else self._stopping)
        if kind == "notifications":
            db, seconds = args
            return self.dialect.wait_for_notification(db.connection, seconds)
        if kind == "handle":
            fn, job = args
            try:
                result = fn(job)
                if inspect.isawaitable(result):
                    # A coroutine handler: awaited to completion before the commit.
                    conn.loop.run(result)
            except BaseException as exc:
                return exc
            return None
        if kind == "lock":
            return args[0].acquire()
        if kind == "wait_slots":
            with self._slots:
                while len(self._inflight) >= self.concurrency and not self._stopping.is_set():
                    self._slots.wait(timeout=1.0)
            return None
        if kind == "pause":
            return self._stopping.wait(args[0])
        if kind == "hooks":
            hooks, what = args
            if what is not None:
                return self._run_hooks(hooks, what)
            for hook in hooks:
                hook(self)
            return None
        if kind == "reconnect":
            return conn.close()
        raise AssertionError(f"unknown operation {kind!r}")

    # -- dispatcher ------------------------------------------------------------
    def _on_dispatcher_connect(self, db: Database) -> None:
        if self.use_listen:
            channels = [db.queue(q).channel() for q in self.routes]
            self.dialect.listen(db.connection, channels)
            self._channels = dict(zip(channels, self.routes))
        # After a (re)connect, anything pushed meanwhile must be looked at.
        self._wake_queues.update(self.routes)

    def _start_jobs(self, jobs: list[Job]) -> None:
        for job in jobs:
            with self._slots:
                self._inflight[(job.queue, job.key, job.kind)] = job
            self._pending.put(job)

    # -- handlers ----------------------------------------------------------------
    def _release(self, job: Job, successors: list[Job] = ()) -> None:
        with self._slots:
            self._inflight.pop((job.queue, job.key, job.kind), None)
            for nxt in successors:
                self._inflight[(nxt.queue, nxt.key, nxt.kind)] = nxt
            self._slots.notify_all()

    def _handler_loop(self) -> None:
        conn = _Connection(self, "handler")
        conn.loop = _EventLoop()
        try:
            while True:
                job = self._pending.get()
                if job is None:
                    return
                self._steps(self._serve_steps(job), conn)
        finally:
            conn.loop.close()
            conn.close()

    # -- heartbeat -----------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        conn = _Connection(self, "heartbeat")
        self._heartbeat_conn = conn
        try:
            # Runs through a graceful stop (running handlers still need their
            # reservations extended) and ends with the hard stop.
            while not self._hard_stop.wait(self.lease / 3):
                try:
                    self._steps(self._heartbeat_steps(), conn)
                except StoppedError:
                    break
        finally:
            conn.close()

    def heartbeat_run(self, fn: Callable[[Database], Any]) -> Any:
        """For on_heartbeat hooks: runs fn(db) on the heartbeat thread's connection,
        reconnecting and retrying on connection loss."""
        if self._heartbeat_conn is None:
            raise errors.QueueError("heartbeat_run is for on_heartbeat hooks")
        return self._heartbeat_conn.run(fn, give_up=self._hard_stop)

    # -- shutdown --------------------------------------------------------------------
    def _shutdown(self) -> None:
        # Unstarted messages go back at once: the handler threads pick them off
        # the pending queue and hand them back because _stopping is set.
        deadline = time.monotonic() + self.shutdown_timeout
        self._stop_deadline = deadline
        conn = _Connection(self, "shutdown")
        try:
            while not self._hard_stop.is_set():
                try:
                    job = self._pending.get_nowait()
                except queue_mod.Empty:
                    break
                if job is not None:
                    self._steps(self._hand_back_steps(job), conn)
        finally:
            conn.close()
        for _ in self._threads:
            self._pending.put(None)
        report_at = time.monotonic()
        while any(t.is_alive() for t in self._threads) and not self._hard_stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            report_at = self._report_stopping(deadline, report_at)
            try:
                self._hard_stop.wait(min(0.05, deadline - now))
            except KeyboardInterrupt:  # run() without signal handlers in the main thread: Ctrl-C again
                self.stop(force=True, reason="KeyboardInterrupt")
        self._abandon_the_rest()
        self._threads.clear()
