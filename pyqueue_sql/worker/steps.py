"""The worker's loops as typed steps: the operations they yield, and how one database call is
retried on a fresh connection.

Each loop of the worker (pyqueue_sql.worker.dispatch, .registry) is a generator that yields the
operations below and gets their results back (an error is thrown in where the operation was asked
for). Worker runs them on its threads, AsyncWorker awaits them: each runner has a table from an
operation's type to the method that does it (see `dispatcher`), so the logic is written once and
no runner dispatches on strings.
"""

from __future__ import annotations

import inspect
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import errors
from ..display import redact
from ..errors import StartTimeoutError as StartTimeoutError
from ..errors import StoppedError as StoppedError
from .model import WorkerStats, log

# -- what the loops ask for ------------------------------------------------------------------


@dataclass(frozen=True)
class RetriedCall:
    """One database call on the loop's connection: ``db.<method>(*args, **kwargs)``, or with a
    queue ``db.queue(queue).<method>(...)`` (the same names on Database and AsyncDatabase). It is
    reconnected and retried until the stop (hard=False) or the hard stop (hard=True); then the
    loop gets StoppedError."""

    method: str
    queue: str | None = None
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    hard: bool = False
    # (the call's result, the messages the server told the connection it ended as expired
    # meanwhile: Dialect.take_expired, no round trip unless there were some)
    expired: bool = False

    def __call__(self, db: Any) -> Any:
        target = db if self.queue is None else db.queue(self.queue)
        result = getattr(target, self.method)(*self.args, **self.kwargs)
        if not self.expired:
            return result
        if inspect.isawaitable(result):
            return _with_expired(db, result)
        return result, db.dialect.listener.take_expired(db.connection)


async def _with_expired(db: Any, result: Any) -> Any:
    return await result, await db.dialect.listener.take_expired_async(db.connection)


@dataclass(frozen=True)
class Listen:
    """Wait on the loop's connection (LISTEN) for wakeups until the clock reads `deadline`, or
    until a retry this worker scheduled is due (see dispatch.RetryDue): the result of
    ReserveLoop.listen_steps (dispatch.py), run inside a RetriedCall that reconnects."""

    deadline: float


@dataclass(frozen=True)
class Notifications:
    """The LISTEN wakeups that come on db within `seconds`: [(channel, payload)]."""

    db: Any
    seconds: float


# Handle and Acquire are made once a message: plain (slotted) dataclasses, whose __init__ costs
# about a third of a frozen one's (bench/README.md, Worker CPU); nothing changes them once made.
@dataclass(slots=True)
class Handle:
    """Run the handler fn on job to completion: None, or what it raised. With a timeout (seconds),
    a handler still running then is given up on: TimeoutError (a coroutine is cancelled, a thread
    is abandoned: its late return changes nothing). A batch's call runs on its first job, and
    `batch` names every job of the batch (all of them are held by a thread stuck past its time)."""

    fn: Callable[[Any], Any]
    job: Any
    timeout: float | None = None
    batch: Any = None


@dataclass(slots=True)
class Acquire:
    """Acquire the job's lock (the steps release it)."""

    lock: Any


@dataclass(frozen=True)
class WaitSlots:
    """Until a handler slot is free or the stop."""


@dataclass(frozen=True)
class Sleep:
    """Sleep `seconds`, cut short by the stop: True when stopped. settled: both runners also
    cut it short when one of the worker's settles ends (Settles.ended), answering False."""

    seconds: float
    settled: bool = False


@dataclass(frozen=True)
class Wait:
    """Wait up to `seconds` for one of the runner's events: HARD_STOP (True once the hard stop
    came) or WATCH (a progress to write, Job.set_progress: True when one came; the event is
    cleared after the wait, so that the next wait waits for the next one)."""

    event: str
    seconds: float


HARD_STOP = "hard stop"
WATCH = "watch"


@dataclass(frozen=True)
class Hooks:
    """Run the hooks with the worker; what=None: an error propagates, else it is logged as the
    `what` hook's failure."""

    hooks: list
    what: str | None


@dataclass(frozen=True)
class Reconnect:
    """Close the loop's connection: the next call opens a fresh one."""


@dataclass(frozen=True)
class Commit:
    """AsyncWorker only: hand a success to the group commit; (committed, next jobs)."""

    job: Any
    chain: bool


# -- what the run asks of its runner (WorkerBase._run_steps) ---------------------------------


@dataclass(frozen=True)
class Begin:
    """The runner's own state for a run (AsyncWorker: its loop and the loop's events)."""


@dataclass(frozen=True)
class Open:
    """A new connection of this role (not connected yet: its first call connects); the dispatcher's
    (dispatcher=True) LISTENs on its queues once connected."""

    role: str
    dispatcher: bool = False


@dataclass(frozen=True)
class On:
    """Run steps on a connection Open gave: their value, or their error."""

    conn: Any
    steps: Any


@dataclass(frozen=True)
class Shut:
    """Close a connection Open gave."""

    conn: Any


@dataclass(frozen=True)
class StartRunners:
    """Start the handlers, the completer, the heartbeat and the watcher (threads or tasks)."""


@dataclass(frozen=True)
class StopRunners:
    """After the dispatcher ended: the graceful stop (unstarted messages handed back, running
    handlers waited for up to shutdown_timeout), the completer's last flush, then the hard stop
    and the end of the heartbeat and the watcher."""


@dataclass(frozen=True)
class Finish:
    """The runner's last cleanup before the on_stop hooks (AsyncWorker: its shared connections)."""


WAIT_SLOTS = WaitSlots()
RECONNECT = Reconnect()
BEGIN = Begin()
START_RUNNERS = StartRunners()
STOP_RUNNERS = StopRunners()
FINISH = Finish()


# -- what one retrying call asks of its connection (call_steps) ------------------------------


@dataclass(frozen=True)
class Connect:
    """Open a new Database (AsyncDatabase)."""


@dataclass(frozen=True)
class OnConnect:
    """Run the connection's on_connect with the new db."""

    db: Any


@dataclass(frozen=True)
class Invoke:
    """fn(db): the call itself."""

    fn: Callable[[Any], Any]
    db: Any


@dataclass(frozen=True)
class Close:
    """Close the connection (it was lost)."""


@dataclass(frozen=True)
class BackOff:
    """Sleep `seconds` before trying again: True when give_up was set meanwhile."""

    seconds: float
    give_up: threading.Event | Any | None


CONNECT = Connect()
CLOSE = Close()


def run_steps(steps: Any, execute: Callable[[Any], Any]) -> Any:
    """Runs a loop's steps: each operation it yields is done by execute and its result sent back
    (its error thrown back in); returns the steps' return value."""
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


async def run_steps_async(steps: Any, execute: Callable[[Any], Any]) -> Any:
    """run_steps, with each operation awaited."""
    send, value = steps.send, None
    while True:
        try:
            op = send(value)
        except StopIteration as done:
            return done.value
        try:
            value, send = await execute(op), steps.send
        except BaseException as exc:
            value, send = exc, steps.throw


def dispatcher(table: Mapping[type, Callable[..., Any]]) -> Callable[..., Any]:
    """The execute function of a runner: the method the table gives the operation's type."""

    def execute(self: Any, op: Any, *args: Any) -> Any:
        try:
            method = table[type(op)]
        except KeyError:
            raise AssertionError(f"unknown operation {op!r}") from None
        return method(self, op, *args)

    return execute


class Counted(Protocol):
    """What the retrying of a database call uses of the worker (WorkerBase): its counters."""

    stats: WorkerStats


def _next_delay(delay: float) -> float:
    """The back-off after `delay` between two attempts of a database call: doubled, jittered, up to 5 s."""
    return min(delay * 2, 5.0) * random.uniform(0.8, 1.2)


def _retrying_error(worker: Counted, role: str, exc: BaseException, delay: float) -> None:
    """Logs (and counts) why a database call is tried again: a lost connection (the caller
    reconnects) or a transaction conflict the client's own retries lost (the caller keeps the
    connection: the call was rolled back whole each time, so running it again is safe)."""
    lost = not isinstance(exc, errors.SerializationError)
    if lost:
        worker.stats.reconnects += 1
    if not lost:
        message = "transaction conflict; retrying"
    elif getattr(worker, "connected", True):
        message = "database connection lost; retrying"
    else:  # never connected yet: until the start timeout
        message = "cannot connect to the database yet; retrying"
    log.warning(
        message,
        extra={
            "event": "reconnect" if lost else "conflict",
            "role": role,
            "error": redact(str(exc).strip())[:200],  # a driver's message may quote the DSN
            "retry_in_s": round(delay, 3),
        },
    )


def refused_at_start(worker: Any, exc: BaseException) -> bool:
    """Whether a connection error ends the worker instead of being retried: the server refused the
    login or the database does not exist (trying again does not mend those) before the worker ever
    connected. Once it has connected, every connection error is retried (a server that goes away
    and comes back, a password rotated meanwhile)."""
    return (
        isinstance(exc, errors.ConnectionFailedError)
        and not exc.retryable
        and not getattr(worker, "connected", True)
    )


def _start_timed_out(worker: Any, exc: BaseException) -> StartTimeoutError | None:
    """The error that ends a worker which has never connected once its start_timeout is spent
    (the host cannot be reached, is refused or is unknown); None while it may still try."""
    deadline = getattr(worker, "_start_deadline", None)
    if deadline is None or getattr(worker, "connected", True) or time.monotonic() < deadline:
        return None
    reason = redact(str(exc).strip()).removeprefix("cannot connect: ")[:300]
    return StartTimeoutError(
        f"cannot reach the database: no connection within the start timeout of "
        f"{worker.settings.start_timeout:g} s ({reason})"
    )


def call_steps(conn: Any, fn: Callable[[Any], Any], give_up: Any):
    """One database call on a worker's connection (threaded or asyncio), reconnecting and
    retrying on connection loss with a growing back-off (a transaction conflict the client's own
    retries lost is retried on the same connection: it was rolled back whole each time). Yields
    Connect, OnConnect, Invoke, Close and BackOff (StoppedError when give_up was set meanwhile)."""
    worker = conn.worker
    retried = (*worker.dialect.connection_errors(), errors.SerializationError)
    delay = 0.05
    while True:
        try:
            if conn.db is None:
                conn.db = yield CONNECT
                worker.connected = True
                if conn.on_connect is not None:
                    yield OnConnect(conn.db)
            worker.stats.db_calls += 1
            return (yield Invoke(fn, conn.db))
        except retried as exc:
            if refused_at_start(worker, exc):
                raise
            # the dispatcher's connection, the first to try and the one that retries without
            # pause, ends the run; the others go on until the stop
            timed_out = _start_timed_out(worker, exc) if conn.role == "dispatcher" else None
            if timed_out is not None:
                raise timed_out from exc
            if not isinstance(exc, errors.SerializationError):
                yield CLOSE
            _retrying_error(worker, conn.role, exc, delay)
            if (yield BackOff(delay, give_up)):
                raise StoppedError() from exc
            delay = _next_delay(delay)
