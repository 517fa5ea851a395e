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

Each message: the handler runs on a pool thread; success -> queue_commit;
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


class _Stopped(Exception):
    """Raised inside a retrying database call when the worker is abandoning it."""


class _Connection:
    """One thread's database connection: reconnects and retries on connection loss."""

    def __init__(self, worker: Worker, role: str, on_connect: Callable[[Database], None] | None = None):
        self.worker = worker
        self.role = role
        self.db: Database | None = None
        self.on_connect = on_connect

    def close(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except Exception:
                pass
            self.db = None

    def run(self, fn: Callable[[Database], Any], *, give_up: threading.Event | None = None) -> Any:
        delay = 0.05
        errs = self.worker.dialect.connection_errors()
        while True:
            try:
                if self.db is None:
                    self.db = connect(self.worker.dsn)
                    if self.on_connect is not None:
                        self.on_connect(self.db)
                self.worker.stats.db_calls += 1
                return fn(self.db)
            except errs as exc:
                self.close()
                self.worker.stats.reconnects += 1
                log.warning(
                    "database connection lost; retrying",
                    extra={
                        "event": "reconnect",
                        "role": self.role,
                        "error": str(exc).strip()[:200],
                        "retry_in_s": round(delay, 3),
                    },
                )
                delay = self._back_off(delay, give_up, exc)
            except errors.SerializationError as exc:
                # The client already retried the call; it lost every time and was rolled
                # back whole each time, so running it again is safe: back off, keep the connection.
                log.warning(
                    "transaction conflict; retrying",
                    extra={
                        "event": "conflict",
                        "role": self.role,
                        "error": str(exc).strip()[:200],
                        "retry_in_s": round(delay, 3),
                    },
                )
                delay = self._back_off(delay, give_up, exc)

    @staticmethod
    def _back_off(delay: float, give_up: threading.Event | None, cause: BaseException) -> float:
        """Sleeps delay (or until give_up is set: _Stopped) and returns the next, longer delay."""
        if give_up is not None and give_up.wait(delay):
            raise _Stopped() from cause
        if give_up is None:
            time.sleep(delay)
        return min(delay * 2, 5.0) * random.uniform(0.8, 1.2)


class Worker:
    """Runs handlers for messages of one or more queues. See the module docstring."""

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
        self.registration: WorkerRegistration | None = None  # while running, when register=True
        self.routes: dict[str, _Route] = {}
        self.stats = WorkerStats()
        self.on_start: list[Callable[[Worker], Any]] = []
        self.on_heartbeat: list[Callable[[Worker], Any]] = []
        self.on_stop: list[Callable[[Worker], Any]] = []
        self.on_idle: list[Callable[[Worker], Any]] = []  # after an empty reserve, before waiting
        self.registered = threading.Event()  # set once self.registration is final (after it is visible)
        self.stopped = threading.Event()  # set when run() has finished
        self.unfinished: list[str] = []  # after run(): "queue/key/kind" of abandoned handlers
        self._heartbeat_conn: _Connection | None = None
        self._stopping = threading.Event()
        self._hard_stop = threading.Event()
        self._state = "stopped"
        self._stop_reason: str | None = None
        self._stop_deadline: float | None = None
        self._last_error: str | None = None
        self._round_ok = False
        self._slots = threading.Condition()
        self._inflight: dict[tuple[str, str, str], Job] = {}
        self._pending: queue_mod.Queue[Job | None] = queue_mod.Queue()
        self._threads: list[threading.Thread] = []
        self._wake_queues: set[str] = set()
        self._rng = random.Random()

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
        with self._slots:
            self._slots.notify_all()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: the first stops gracefully, a second one stops at once."""

        def handle(signum, _frame):
            name = signal.Signals(signum).name
            if self._stopping.is_set():
                with self._slots:
                    running = [_where(j) for j in self._inflight.values() if not j.done]
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
            },
        )
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
                    dispatcher.run(self._register, give_up=self._stopping)
                except _Stopped:
                    pass
            for hook in self.on_start:
                hook(self)
            self._state = "running"
            self._dispatch(dispatcher)
        except BaseException as exc:
            if self._stop_reason is None:
                self._stop_reason = describe_error(exc)
            raise
        finally:
            self._stopping.set()
            self._state = "stopping"
            dispatcher.close()
            self._shutdown()
            hb.join(timeout=5)
            self._deregister()
            for hook in self.on_stop:
                try:
                    hook(self)
                except Exception:
                    log.exception("on_stop hook failed")
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
        return not self.unfinished

    # -- registry ----------------------------------------------------------------
    @property
    def reserve_as(self) -> str:
        """The worker name recorded on reserved messages (the registration's, when registered)."""
        reg = self.registration
        return reg.reserve_as if reg is not None else self.name

    def _register(self, db: Database) -> None:
        # The row is committed (visible to others) before register_worker
        # returns; `registered` is set only once self.registration holds it,
        # so whoever waits for `registered` sees reserve_as and the row agree.
        self.registration = db.register_worker(
            self.name, queues=sorted(self.routes), host=socket.gethostname()[:255], pid=os.getpid()
        )
        self.registered.set()
        log.info(
            "worker registered as %s",
            self.registration.reserve_as,
            extra={
                "event": "register",
                "worker_id": self.registration.worker_id,
                "reserve_as": self.registration.reserve_as,
            },
        )

    def _registry_tick(self, conn: _Connection) -> None:
        reg = self.registration
        if reg is not None and not conn.run(lambda db: db.heartbeat_worker(reg), give_up=self._hard_stop):
            with self._slots:
                held = [j for j in self._inflight.values() if not j.done]
            log.warning(
                "this worker was released as dead (its registration heartbeat was missed for too long); "
                "the messages it is still running were made ready again: their commits will return "
                "false and they will be redelivered; registering again",
                extra={
                    "event": "released",
                    "worker_id": reg.worker_id,
                    "running": len(held),
                    "keys": [_where(j) for j in held][:20],
                },
            )
            conn.run(self._register, give_up=self._hard_stop)
        if self.release_dead_after is not None:
            n = conn.run(lambda db: db.release_dead_workers(self.release_dead_after), give_up=self._hard_stop)
            if n:
                log.warning(
                    "released the messages of dead workers",
                    extra={"event": "release_dead", "released": n, "older_than_s": self.release_dead_after},
                )

    def _deregister(self) -> None:
        reg, self.registration = self.registration, None
        if reg is None:
            return
        conn = _Connection(self, "deregister")
        try:
            # One attempt (the hard stop is set): if it fails, release_dead_workers cleans up.
            conn.run(lambda db: db.deregister_worker(reg), give_up=self._hard_stop)
            log.info("worker deregistered", extra={"event": "deregister", "worker_id": reg.worker_id})
        except Exception as exc:
            log.warning(
                "could not deregister; release_dead_workers removes the registration later",
                extra={"event": "error", "worker_id": reg.worker_id, "error": str(exc)[:200]},
            )
        finally:
            conn.close()

    # -- dispatcher ------------------------------------------------------------
    def _on_dispatcher_connect(self, db: Database) -> None:
        if self.use_listen:
            channels = [db.queue(q).channel() for q in self.routes]
            self.dialect.listen(db.connection, channels)
            self._channels = dict(zip(channels, self.routes))
        # After a (re)connect, anything pushed meanwhile must be looked at.
        self._wake_queues.update(self.routes)

    def _free(self) -> int:
        with self._slots:
            return self.concurrency - len(self._inflight)

    def _dispatch(self, conn: _Connection) -> None:
        """The reserve loop; a non-connection error in it is logged and the loop
        starts again on a fresh connection after a back-off, until stop()."""
        backoff = 0.5
        while not self._stopping.is_set():
            self._round_ok = False
            try:
                self._dispatch_loop(conn)
                return
            except _Stopped:
                return
            except Exception as exc:
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
                conn.close()  # start again from a clean connection (LISTEN registered again)
                if self._stopping.wait(backoff):
                    return
                backoff = min(backoff * 2, 30.0)

    def _round_done(self) -> None:
        self._round_ok = True
        self._last_error = None

    def _dispatch_loop(self, conn: _Connection) -> None:
        poll = self.poll_min
        recheck_at: float | None = None
        long_poll = not self.use_listen and len(self.routes) == 1
        nothing_ready = False  # the last long poll timed out: no reserve needed
        while not self._stopping.is_set():
            if nothing_ready:
                try:
                    nothing_ready = not self._wait(conn, self.long_poll_wait)
                except _Stopped:
                    return
                continue
            with self._slots:
                while len(self._inflight) >= self.concurrency and not self._stopping.is_set():
                    self._slots.wait(timeout=1.0)
            if self._stopping.is_set():
                break
            order = sorted(self._wake_queues) + [q for q in self.routes if q not in self._wake_queues]
            self._wake_queues.clear()
            got = 0
            for name in order:
                free = self._free()
                if free <= 0 or self._stopping.is_set():
                    break
                try:
                    got += self._reserve(conn, self.routes[name], free)
                except _Stopped:
                    return
            self._round_done()
            if got:
                poll = self.poll_min
                continue
            for hook in self.on_idle:
                hook(self)
            # Nothing ready: wait for the earliest of a wakeup, the next
            # scheduled_at, the poll fallback (and one re-check after a wakeup).
            try:
                due = self._next_due(conn)
            except _Stopped:
                return
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
                recheck_at = None
            try:
                woke = self._wait(conn, max(timeout, 0.0))
            except _Stopped:
                return
            if woke and self.use_listen:
                recheck_at = time.monotonic() + self.linger
            # queue_wait watches the next scheduled_at itself, so a timed-out
            # long poll goes straight into the next one (one query per wait).
            nothing_ready = long_poll and not woke and not self._wake_queues

    def _next_due(self, conn: _Connection) -> float | None:
        due: float | None = None
        for route in self.routes.values():
            _, wait_s = conn.run(
                lambda db: db.queue(route.queue).next_scheduled_at(route.kinds()), give_up=self._stopping
            )
            # 0 right after an empty reserve: a kind we do not handle, or a
            # row another reserver holds the lock of; let the poll decide.
            if wait_s is not None and wait_s > 0:
                due = wait_s if due is None else min(due, wait_s)
        return due

    def _wait(self, conn: _Connection, timeout: float) -> bool:
        """Waits up to timeout; True if woken by a notification (LISTEN) or a ready message (long poll)."""
        if timeout <= 0:
            return False
        deadline = time.monotonic() + timeout
        if self.use_listen:

            def listen(db: Database) -> bool:
                if self._wake_queues:
                    return True  # (re)connected: wakeups may have been missed meanwhile
                woke = False
                left = deadline - time.monotonic()
                # Short slices so that stop() is noticed within 0.25 s.
                while left > 0 and not self._stopping.is_set():
                    for channel, payload in self.dialect.wait_for_notification(
                        db.connection, min(left, 0.25)
                    ):
                        woke = True
                        self.stats.wakeups += 1
                        self._wake_queues.add(self._channels.get(channel, payload))
                    if woke:
                        return True  # later notifications stay buffered for the next wait
                    left = deadline - time.monotonic()
                return False

            return conn.run(listen, give_up=self._stopping)
        if len(self.routes) == 1:
            route = next(iter(self.routes.values()))
            if self._stopping.is_set():
                return False
            if self._wake_queues:
                return True
            woke = conn.run(
                lambda db: db.queue(route.queue).wait(
                    timeout=round(timeout, 6) or 0.000001, poll=self.long_poll_check, kinds=route.kinds()
                ),
                give_up=self._stopping,
            )
            if woke:
                self.stats.wakeups += 1
            return bool(woke)
        self._stopping.wait(timeout)
        return False

    def _reserve(self, conn: _Connection, route: _Route, n: int) -> int:
        rows = conn.run(
            lambda db: db.queue(route.queue).reserve(
                n=n, worker=self.reserve_as, timeout=self.lease, kinds=route.kinds()
            ),
            give_up=self._stopping,
        )
        for r in rows:
            job = Job(r)
            with self._slots:
                self._inflight[(r.queue, r.key, r.kind)] = job
            self._pending.put(job)
        self.stats.reserved += len(rows)
        if rows:
            log.debug("reserved", extra={"event": "reserve", "queue": route.queue, "n": len(rows)})
        return len(rows)

    # -- handlers ----------------------------------------------------------------
    def _release(self, job: Job) -> None:
        with self._slots:
            self._inflight.pop((job.queue, job.key, job.kind), None)
            self._slots.notify_all()

    def _handler_loop(self) -> None:
        conn = _Connection(self, "handler")
        loop = _EventLoop()
        try:
            while True:
                job = self._pending.get()
                if job is None:
                    return
                if self._stopping.is_set():
                    self._hand_back(conn, job)
                    continue
                try:
                    self._run_job(conn, job, loop)
                except Exception:  # never lose the thread (its job was released in _run_job)
                    log.exception(
                        "handler thread: unexpected error",
                        extra={"event": "error", "queue": job.queue, "key": job.key},
                    )
        finally:
            loop.close()
            conn.close()

    def _call_handler(self, fn: Handler, job: Job, loop: _EventLoop) -> None:
        result = fn(job)
        if inspect.isawaitable(result):
            # A coroutine handler: awaited to completion before the commit.
            loop.run(result)

    def _run_job(self, conn: _Connection, job: Job, loop: _EventLoop) -> None:
        route = self.routes[job.queue]
        fn = route.handler_for(job.kind)
        job.started_at = time.monotonic()
        started = time.time()
        error: BaseException | None = None
        try:
            if fn is None:
                raise errors.QueueError(f"no handler for kind {job.kind!r}")
            self._call_handler(fn, job, loop)
        except BaseException as exc:  # the handler's failure is the message's, not the worker's
            error = exc
        interrupted = isinstance(error, KeyboardInterrupt)
        if interrupted:
            self.stats.interrupted += 1
            self.stop(reason="KeyboardInterrupt in a handler")
        elapsed_ms = round((time.time() - started) * 1000, 3)
        try:
            with job.lock:
                if error is None:
                    ok = conn.run(
                        lambda db: db.queue(job.queue).commit(job.reservation), give_up=self._hard_stop
                    )
                    if ok:
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
                    else:
                        self._log_lost(job)
                else:
                    delay = 0.0 if interrupted else route.retry.delay(job.attempts, self._rng)
                    text = describe_error(error)
                    outcome = conn.run(
                        lambda db: db.queue(job.queue).fail(job.reservation, error=text, delay=delay),
                        give_up=self._hard_stop,
                    )
                    if not interrupted:
                        self.stats.failed += 1
                    if outcome is None:
                        self.stats.lost += 1
                    self._log_failure(job, error, text, outcome, delay, elapsed_ms, interrupted)
                job.done = True
        except _Stopped:
            log.warning(
                "gave up finishing %s at shutdown; it comes back after its lease",
                _where(job),
                extra={"event": "abandon", "queue": job.queue, "key": job.key, "kind": job.kind},
            )
        except Exception as exc:  # e.g. the queue was dropped meanwhile: keep the thread alive
            log.error(
                "could not commit or fail %s (%s); the message comes back after its lease",
                _where(job),
                describe_error(exc)[:500],
                exc_info=exc,
                extra={"event": "error", "queue": job.queue, "key": job.key, "kind": job.kind},
            )
        finally:
            self._release(job)

    def _log_lost(self, job: Job) -> None:
        self.stats.lost += 1
        log.warning(
            "reservation of %s no longer held (expired or released); the message is or was redelivered",
            _where(job),
            extra={"event": "lost", "queue": job.queue, "key": job.key, "kind": job.kind},
        )

    def _log_failure(
        self,
        job: Job,
        error: BaseException,
        text: str,
        outcome: str | None,
        delay: float,
        elapsed_ms: float,
        interrupted: bool,
    ) -> None:
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

    def _hand_back(self, conn: _Connection, job: Job) -> None:
        try:
            with job.lock:
                conn.run(
                    lambda db: db.queue(job.queue).rollback(job.reservation, delay=0), give_up=self._hard_stop
                )
                job.done = True
            self.stats.handed_back += 1
            log.info(
                "handed back unstarted message",
                extra={"event": "hand_back", "queue": job.queue, "key": job.key, "kind": job.kind},
            )
        except _Stopped:
            pass
        except Exception:
            log.exception(
                "could not hand back; the message comes back after its lease",
                extra={"event": "error", "queue": job.queue, "key": job.key},
            )
        finally:
            self._release(job)

    # -- heartbeat -----------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        conn = _Connection(self, "heartbeat")
        interval = self.lease / 3
        try:
            # Runs through a graceful stop (running handlers still need their
            # reservations extended) and ends with the hard stop.
            while not self._hard_stop.wait(interval):
                with self._slots:
                    jobs = list(self._inflight.values())
                for job in jobs:
                    self._extend(conn, job)
                try:
                    self._registry_tick(conn)
                except _Stopped:
                    break
                except Exception:
                    log.exception("heartbeat: worker registry call failed", extra={"event": "error"})
                self._heartbeat_conn = conn
                for hook in self.on_heartbeat:
                    try:
                        hook(self)
                    except Exception:
                        log.exception("on_heartbeat hook failed")
        finally:
            conn.close()

    def _extend(self, conn: _Connection, job: Job) -> None:
        with job.lock:
            if job.done or self._hard_stop.is_set():
                return
            try:
                new = conn.run(
                    lambda db: db.queue(job.queue).extend(job.reservation, timeout=self.lease),
                    give_up=self._hard_stop,
                )
            except _Stopped:
                return
            except Exception:
                log.exception(
                    "heartbeat: could not extend",
                    extra={"event": "error", "queue": job.queue, "key": job.key},
                )
                return
            if new is None:
                log.warning(
                    "heartbeat: reservation no longer held",
                    extra={"event": "lost", "queue": job.queue, "key": job.key, "kind": job.kind},
                )
            else:
                job.reservation = new
                log.debug("extended", extra={"event": "extend", "queue": job.queue, "key": job.key})

    def heartbeat_run(self, fn: Callable[[Database], Any]) -> Any:
        """For on_heartbeat hooks: runs fn(db) on the heartbeat thread's connection,
        reconnecting and retrying on connection loss."""
        if self._heartbeat_conn is None:
            raise errors.QueueError("heartbeat_run is for on_heartbeat hooks")
        return self._heartbeat_conn.run(fn, give_up=self._hard_stop)

    # -- shutdown --------------------------------------------------------------------
    def _running(self) -> list[str]:
        with self._slots:
            return [_where(j) for j in self._inflight.values() if j.started_at is not None and not j.done]

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
                    self._hand_back(conn, job)
        finally:
            conn.close()
        for _ in self._threads:
            self._pending.put(None)
        report_at = time.monotonic()
        while any(t.is_alive() for t in self._threads) and not self._hard_stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            if now >= report_at:
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
                report_at = now + 10.0
            try:
                self._hard_stop.wait(min(0.05, deadline - now))
            except KeyboardInterrupt:  # run() without signal handlers in the main thread: Ctrl-C again
                self.stop(force=True, reason="KeyboardInterrupt")
        with self._slots:
            left = [_where(j) for j in self._inflight.values()]
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
        self._threads.clear()

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
