"""Worker: runs the shared steps (WorkerBase) on threads: a dispatcher that reserves in batches
(its free handlers plus the prefetch), `concurrency` handler threads that only run handlers, a
completer that acknowledges their successes in batches (queue_commit_batch), and a heartbeat
thread, each with its own connection (a handler thread opens one only for a failure, a hand-back
or a queue_commit_reserve)."""

from __future__ import annotations

import asyncio
import inspect
import queue as queue_mod
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import errors, tracing
from ..client import Database, connect
from .base import WorkerBase, listen_refused, run_hooks, settings_signature
from .interrupt import ThreadStopper
from .model import Job, log, where_of
from .runners import run_on_thread_end
from .steps import (
    HARD_STOP,
    Acquire,
    BackOff,
    Begin,
    Close,
    Connect,
    Finish,
    Handle,
    Hooks,
    Invoke,
    Listen,
    Notifications,
    On,
    OnConnect,
    Open,
    Reconnect,
    RetriedCall,
    Shut,
    Sleep,
    StartRunners,
    StopRunners,
    Wait,
    WaitSlots,
    call_steps,
    dispatcher,
    run_steps,
)

# the time limits of handlers (timeouts.py), also importable from here, where they were first
from .timeouts import TimeLimitExceeded as TimeLimitExceeded
from .timeouts import awaited, handle_timed
from .timeouts import log_late_return as log_late_return
from .timeouts import timed_out as timed_out
from .timeouts import within_timeout as within_timeout

if TYPE_CHECKING:
    from .base import Unpack
    from .settings import WorkerOptions


class _EventLoop:
    """A handler thread's event loop for coroutine handlers: made at the first
    one, kept for the thread's life (so loop-bound clients can be reused),
    closed when the thread ends."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def run(self, awaitable: Any, job: Job | None = None) -> Any:
        """Runs awaitable to completion on the thread's loop; with a job, as a task that a cancel
        of the job cancels (job.on_cancel, from any thread)."""
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.new_event_loop()
        loop = self.loop
        coro = awaitable if inspect.iscoroutine(awaitable) else awaited(awaitable)
        task = loop.create_task(coro)
        if job is not None:

            def cancel() -> None:
                try:
                    loop.call_soon_threadsafe(task.cancel)
                except RuntimeError:  # the loop has closed: nothing runs any more
                    pass

            job.on_cancel = cancel
            if job.cancel_requested.is_set():
                task.cancel()
        try:
            return loop.run_until_complete(task)
        except BaseException as exc:
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                # SystemExit, KeyboardInterrupt... stop the loop abruptly:
                # the next coroutine gets a fresh one.
                self.close()
            raise
        finally:
            if job is not None:
                job.on_cancel = None

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


class _Connection:
    """One thread's database connection: reconnects and retries on connection loss."""

    def __init__(self, worker: Worker, role: str, on_connect: Callable[[Database], None] | None = None):
        self.worker = worker
        self.role = role
        self.db: Database | None = None
        self.on_connect = on_connect
        self.loop: _EventLoop | None = None  # a handler thread's, for coroutine handlers
        self.stopper: ThreadStopper | None = None  # a handler thread's (made on it)

    @classmethod
    def for_handler(cls, worker: Worker) -> _Connection:
        """A handler thread's (or a batch lane's): with an event loop for coroutine handlers and a
        stopper, both made on that thread."""
        conn = cls(worker, "handler")
        conn.loop = _EventLoop()
        conn.stopper = ThreadStopper()
        return conn

    def close(self) -> None:
        if self.db is not None:
            try:
                self.db.close()
            except Exception:
                pass
            self.db = None

    def run(self, fn: Callable[[Database], Any], *, give_up: threading.Event | None = None) -> Any:
        return run_steps(call_steps(self, fn, give_up), self._execute)

    def _connect(self, op: Connect) -> Database:
        return connect(self.worker.dsn_for(self.role))

    def _on_connect(self, op: OnConnect) -> None:
        return self.on_connect(op.db)

    def _invoke(self, op: Invoke) -> Any:
        return op.fn(op.db)

    def _close(self, op: Close) -> None:
        return self.close()

    def _back_off(self, op: BackOff) -> bool | None:
        if op.give_up is None:
            return time.sleep(op.seconds)
        return op.give_up.wait(op.seconds)

    def handle(self, op: Handle) -> BaseException | None:
        """Runs a handler on this (handler) thread: None, or what it raised; inside the job's span
        when OpenTelemetry is installed (pyqueue_sql.tracing)."""
        return tracing.handle_traced(op.job, self._handle, op)

    def _handle(self, op: Handle) -> BaseException | None:
        if op.timeout is not None:
            return handle_timed(op, self.loop.run, self.worker.runner_pool)
        job = op.job
        stopper = self.stopper
        try:
            if job.runs_async:
                result = op.fn(job)
            else:  # stoppable by the thread's stopper: a cancel's grace ends in CancelStopped there
                job.stopper = stopper
                stopper.arg = job
                result = op.fn(job)
                stopper.arg = None
                if stopper.raised:
                    stopper.settle()
            if result is not None and inspect.isawaitable(result):
                # A coroutine handler: awaited to completion before the commit (cancelled by a
                # cancel of its job).
                op.job.runs_async = True
                result = self.loop.run(result, op.job)
            op.job.result = result
        except BaseException as exc:
            stopper.arg = None
            if stopper.raised:
                stopper.settle()
            return exc
        return None

    _execute = dispatcher(
        {Connect: _connect, OnConnect: _on_connect, Invoke: _invoke, Close: _close, BackOff: _back_off}
    )


def _relay_signals(signals: queue_mod.SimpleQueue[int], shutdown: Any) -> None:
    """The thread the signal handlers hand SIGTERM/SIGINT to (Worker.install_signal_handlers)."""
    while True:
        signum = signals.get()
        try:
            shutdown.on_signal(signum)
        except Exception:
            log.exception("the stop on a signal failed", extra={"event": "error", "signal": signum})


class Completer:
    """Acknowledges the handlers' successes (see Dispatch.ack_steps) on a thread and a connection
    of its own: put() hands it one, the thread waits for one, gathers those that come within
    ack_interval (at most ack_batch), commits them, and so on until close() (after the last
    handler finished), then flushes what is left. A crash before a flush loses nothing: the
    messages are still reserved and come back after their lease (at-least-once)."""

    def __init__(
        self,
        settings: Any,
        flush: Callable[[list[tuple[Job, float]], _Connection], Any],
        settles: Any = None,
    ) -> None:
        self.settings = settings
        self.flush = flush  # (batch, conn): runs the flush's steps on the completer's connection
        # the run's Settles: while the reserve loop is held back (settles.held: a limit's slots
        # all taken, its own messages among their holders) a batch goes without waiting ack_interval
        self.settles = settles
        self.acks: queue_mod.SimpleQueue[tuple[Job, float] | None] = queue_mod.SimpleQueue()
        self.put = self._put  # what Dispatch calls, once a success: (job, elapsed_ms)
        self.thread: threading.Thread | None = None

    def _put(self, job: Job, elapsed_ms: float) -> None:
        self.acks.put((job, elapsed_ms))

    def start(self, conn: _Connection) -> None:
        self.thread = threading.Thread(target=self.loop, args=(conn,), name="pyqueue-completer", daemon=True)
        self.thread.start()

    def close(self, timeout: float) -> None:
        """Every handler has finished (or was abandoned): flushes what is left, then ends."""
        self.acks.put(None)
        if self.thread is not None:
            self.thread.join(timeout=timeout)

    def loop(self, conn: _Connection) -> None:
        acks, settings = self.acks, self.settings
        try:
            done = False
            while not done:
                first = acks.get()
                if first is None:
                    return
                batch = [first]
                hurry = self.settles is not None and (self.settles.held or self.settles.hurry)
                flush_at = time.monotonic() + (0.0 if hurry else settings.ack_interval)
                while len(batch) < settings.ack_batch:
                    left = flush_at - time.monotonic()
                    try:
                        item = acks.get(timeout=left) if left > 0 else acks.get_nowait()
                    except queue_mod.Empty:
                        break
                    if item is None:
                        done = True
                        break
                    batch.append(item)
                self.flush(batch, conn)
        finally:
            conn.close()


class _RunThreads:
    """The threads of a Worker's run, each with its own connection: `concurrency` handler threads
    that take their messages from the worker's pending queue, the heartbeat, the completer, the
    watcher and the batch lanes; and, at the stop, the hand-back of the messages not started and
    the wait for the running handlers until the shutdown deadline."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.threads: list[threading.Thread] = []  # the handler threads
        self.lanes: list[threading.Thread] = []  # the batch kinds' (batches.py)
        self.completer_conn: _Connection | None = None  # the completer's (see Worker._shares_sessions)

    def start(self) -> None:
        w = self.worker
        for i in range(w.settings.concurrency):
            t = threading.Thread(target=self.handler_loop, name=f"pyqueue-handler-{i}", daemon=True)
            t.start()
            self.threads.append(t)
        w._heartbeat_conn = _Connection(w, "heartbeat")
        self.heartbeat = threading.Thread(
            target=self.loop_on,
            args=(w._heartbeat_conn, w.registry.heartbeat_loop_steps()),
            name="pyqueue-heartbeat",
            daemon=True,
        )
        self.heartbeat.start()
        # Its role in the logs and metrics is "handler": the connection that records what the
        # handlers did, as the handler threads themselves do for failures and hand-backs.
        self.completer_conn = _Connection(w, "handler")
        w.completer.start(self.completer_conn)
        self.watcher = threading.Thread(
            target=self.loop_on,
            args=(_Connection(w, "watch"), w.watch.loop_steps()),
            name="pyqueue-watch",
            daemon=True,
        )
        self.watcher.start()
        # concurrency counts the jobs a worker runs at once: a batch kind gets concurrency // size
        # lanes (at least one), each running one batch at a time (batches.py). One lane per process
        # drained a no-op backlog fastest on MariaDB (11,478 jobs/s against 9,945 with two and
        # 7,069 with four, 2 processes, lanes that committed through the completer, 2026-11-28).
        self.lanes = [
            thread
            for route in w.batch_routes.values()
            for i in range(max(1, w.settings.concurrency // route.size))
            for thread in self.start_lane(route, i)
        ]

    def start_lane(self, route: Any, i: int) -> list[threading.Thread]:
        """A batch kind's lane (batches.py): each of its parts' steps (reserve, run, commit; or
        one for all) on a thread and a connection of its own, made as a handler thread's (an
        event loop for an async def handler, a stopper). The first one of a kind long-polls, the
        others wait for its wakes."""
        return [
            self.start_lane_part(route, f"{i}{'-' if part else ''}{part}", steps)
            for part, steps in self.worker.batches.lane(route, first=i == 0)
        ]

    def start_lane_part(self, route: Any, name: str, steps: Any) -> threading.Thread:
        w = self.worker
        conn = _Connection.for_handler(w)

        def lane() -> None:
            try:
                w._steps(steps, conn)
            except Exception:
                log.exception("a batch lane failed", extra={"event": "error", "queue": route.queue})
                w.stop(reason=f"the batch lane of {route.queue}/{route.kind} failed")
            finally:
                conn.loop.close()
                conn.close()
                run_on_thread_end(w.on_thread_end)

        t = threading.Thread(target=lane, name=f"pyqueue-batch-{route.kind}-{name}", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        w = self.worker
        self.hand_back_and_wait()
        # Every handler has finished (or was abandoned): the completer flushes what is left.
        w.completer.close(timeout=max(w.settings.shutdown_timeout, 5.0))
        w.state.hard_stop.set()  # the flush is done (or gave up): the heartbeat ends
        w._watch_wake.set()
        self.heartbeat.join(timeout=5)
        self.watcher.join(timeout=5)

    def handler_loop(self) -> None:
        w = self.worker
        conn = _Connection.for_handler(w)
        get, serve, execute, handle = w._pending.get, w.dispatch.serve_steps, w._execute, conn.handle

        def run(op: Any) -> Any:
            # a job's two operations (Handle, Acquire) without the table's lookup: once a job each
            kind = type(op)
            if kind is Handle:
                return handle(op)
            if kind is Acquire:
                return op.lock.acquire()
            return execute(op, conn)

        try:
            while True:
                job = get()
                if job is None:
                    return
                run_steps(serve(job), run)
        finally:
            conn.loop.close()
            conn.close()
            run_on_thread_end(w.on_thread_end)

    def loop_on(self, conn: _Connection, steps: Any) -> None:
        """A thread's loop: its steps on its own connection, closed when they end."""
        w = self.worker
        try:
            w._steps(steps, conn)
        finally:
            conn.close()

    def hand_back_and_wait(self) -> None:
        w = self.worker
        # Unstarted messages go back at once: the handler threads pick them off
        # the pending queue and hand them back because state.stopping is set.
        deadline = time.monotonic() + w.settings.shutdown_timeout
        w._stop_deadline = deadline
        conn = _Connection(w, "shutdown")
        try:
            while not w.state.hard_stop.is_set():
                try:
                    job = w._pending.get_nowait()
                except queue_mod.Empty:
                    break
                if job is not None:
                    w._steps(w.dispatch.hand_back_steps(job), conn)
        finally:
            conn.close()
        for _ in self.threads:
            w._pending.put(None)
        report_at = time.monotonic()
        # the handler threads, and the batch lanes (a batch that runs finishes)
        running = self.threads + self.lanes
        while any(t.is_alive() for t in running) and not w.state.hard_stop.is_set():
            now = time.monotonic()
            if now >= deadline:
                break
            report_at = w.shutdown.report_stopping(deadline, report_at)
            try:
                w.state.hard_stop.wait(min(0.05, deadline - now))
            except KeyboardInterrupt:  # run() without signal handlers in the main thread: Ctrl-C again
                w.stop(force=True, reason="KeyboardInterrupt")
        w.shutdown.abandon_the_rest()
        if w.shutdown.abandoned:
            conn = _Connection(w, "shutdown")
            try:
                w._steps(w.shutdown.give_back_abandoned_steps(), conn)
            finally:
                conn.close()
        self.threads.clear()


class Worker(WorkerBase):
    """Runs handlers for messages of one or more queues on a pool of threads. See the module docstring."""

    def __init__(self, dsn: str, **settings: Unpack[WorkerOptions]) -> None:
        # A success is acknowledged by the completer, in a batch with the others that finish
        # within ack_interval, instead of a queue_commit_reserve per message from each handler
        # thread (bench/README.md, "Workers"); commit_reserve=True asks for the latter.
        settings["commit_reserve"] = bool(settings.get("commit_reserve"))
        super().__init__(dsn, **settings)

    def _setup(self) -> None:
        self._heartbeat_conn: _Connection | None = None
        # _slots's lock, taken directly (a C context manager) where nothing waits or notifies
        self._slots_lock = threading.Lock()
        self._slots = threading.Condition(self._slots_lock)
        # While the dispatcher waits on _slots for a free slot, the number of held messages it
        # refills below (_refill_at, taken as it starts each wait), else 0: a release notifies only
        # once the worker holds fewer, without working out _refill_at once a job.
        self._slot_waiting = 0
        # SIGTERM/SIGINT, from the signal handlers to the thread that stops the worker
        self._signals: queue_mod.SimpleQueue[int] | None = None
        # A SimpleQueue (C, one lock): a handler thread takes each message from it.
        self._pending: queue_mod.SimpleQueue[Job | None] = queue_mod.SimpleQueue()
        self.completer = Completer(
            self.settings,
            lambda batch, conn: self._steps(self.dispatch.ack_steps(batch), conn),
            self.state.settles,
        )
        self._watch_wake = threading.Event()  # a progress to write (Job.set_progress)
        self._run_threads = _RunThreads(self)
        self.overdue.record_cancel = lambda job: _record_overdue_cancel(self, job)

    def _jobs(self) -> list[Job]:
        with self._slots:
            return list(self.inflight.values())

    def _wake(self) -> None:
        # A stop() in a signal handler of the caller's runs in the main thread between two bytecodes,
        # maybe inside this very thread's `with self._slots`: in the main thread the lock is only
        # tried (not taken, the dispatcher's wait still sees the stop within its 1 s timeout).
        main = threading.current_thread() is threading.main_thread()
        if self._slots_lock.acquire(blocking=not main):
            try:
                self._slots.notify_all()
            finally:
                self._slots_lock.release()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: the first stops gracefully, a second one stops at once. The handler only
        hands the signal to a thread of the worker's (SimpleQueue.put is reentrant), which stops the
        worker: a Python signal handler runs in the main thread between two bytecodes, maybe while
        it holds a lock the stop takes (the slots', an Event's), and would wait for itself."""
        if self._signals is None:
            self._signals = queue_mod.SimpleQueue()
            threading.Thread(
                target=_relay_signals,
                args=(self._signals, self.shutdown),
                name="pyqueue-signals",
                daemon=True,
            ).start()
        put = self._signals.put

        def handle(signum, _frame):
            put(signum)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def run(self, *, install_signals: bool | None = None) -> bool:
        """Runs until stop(); handles SIGTERM/SIGINT when run in the main thread.

        Returns True when it stopped cleanly (every handler it started finished
        and its message was committed, failed or handed back), False when
        handlers were still running at the shutdown deadline or a forced stop
        abandoned them (listed in ``self.unfinished``; their messages come back
        when their lease ends)."""
        return self._steps(self._run_steps(install_signals), None)

    # -- the run's operations (WorkerBase._run_steps) ------------------------------------------
    def _open(self, op: Open, conn: Any) -> _Connection:
        on_connect = self._on_dispatcher_connect if op.dispatcher else None
        return _Connection(self, op.role, on_connect=on_connect)

    def _on(self, op: On, conn: Any) -> Any:
        return self._steps(op.steps, op.conn)

    def _shut(self, op: Shut, conn: Any) -> None:
        return op.conn.close()

    def _nothing(self, op: Begin | Finish, conn: Any) -> None:
        """Begin, Finish: a thread needs no state of the run's own (its events are the worker's)."""

    def _start_runners(self, op: StartRunners, conn: Any) -> None:
        self._run_threads.start()

    def _stop_runners(self, op: StopRunners, conn: Any) -> None:
        self._run_threads.stop()

    def _hold(self, jobs: list[Job]) -> None:
        """A lane's batch, held as the handlers' jobs are (heartbeat, status, stop)."""
        wake, inflight = self._watch_wake.set, self.inflight
        with self._slots_lock:
            for job in jobs:
                job.on_progress = wake
                inflight[(job.queue, job.key, job.kind)] = job

    # -- the operations of the loops' steps -----------------------------------------------
    def _steps(self, steps: Any, conn: _Connection | None) -> Any:
        return run_steps(steps, lambda op: self._execute(op, conn))

    def _nested(self, steps: Any) -> Any:
        return self._steps(steps, None)

    def _call(self, op: RetriedCall, conn: _Connection) -> Any:
        return conn.run(op, give_up=self.state.hard_stop if op.hard else self.state.stopping)

    def _listen(self, op: Listen, conn: _Connection) -> bool:
        return conn.run(
            lambda db: self._nested(self.reserve_loop.listen_steps(db, op.deadline)),
            give_up=self.state.stopping,
        )

    def _notifications(self, op: Notifications, conn: Any) -> list:
        return self.dialect.listener.wait_for_notification(op.db.connection, op.seconds)

    def _handle(self, op: Handle, conn: _Connection) -> BaseException | None:
        return conn.handle(op)

    def _acquire(self, op: Acquire, conn: Any) -> bool:
        return op.lock.acquire()

    def _wait_slots(self, op: WaitSlots, conn: Any) -> None:
        with self._slots:
            while (
                len(self.inflight) >= (refill_at := self.reserve_loop.refill_at())
                and not self.state.stopping.is_set()
            ):
                self._slot_waiting = refill_at
                try:
                    self._slots.wait(timeout=1.0)
                finally:
                    self._slot_waiting = 0

    def _sleep(self, op: Sleep, conn: Any) -> bool:
        if op.settled:  # one of its settles (which sets the event after it ends) or the time
            event = self.state.settles.event
            if event.wait(op.seconds):
                event.clear()
            return self.state.stopping.is_set()
        return self.state.stopping.wait(op.seconds)

    def _wait(self, op: Wait, conn: Any) -> bool:
        if op.event is HARD_STOP:
            return self.state.hard_stop.wait(op.seconds)
        woke = self._watch_wake.wait(op.seconds)
        self._watch_wake.clear()
        return woke

    def _hooks(self, op: Hooks, conn: Any) -> None:
        if op.what is not None:
            return run_hooks(op.hooks, self, op.what)
        for hook in op.hooks:
            hook(self)
        return None

    def _reconnect(self, op: Reconnect, conn: _Connection) -> None:
        return conn.close()

    _execute = dispatcher(
        {
            RetriedCall: _call,
            Listen: _listen,
            Notifications: _notifications,
            Handle: _handle,
            Acquire: _acquire,
            WaitSlots: _wait_slots,
            Sleep: _sleep,
            Wait: _wait,
            Hooks: _hooks,
            Reconnect: _reconnect,
            Begin: _nothing,
            Open: _open,
            On: _on,
            Shut: _shut,
            StartRunners: _start_runners,
            StopRunners: _stop_runners,
            Finish: _nothing,
        }
    )

    # -- dispatcher ------------------------------------------------------------
    def _on_dispatcher_connect(self, db: Database) -> None:
        if self.use_listen:
            if self._shares_sessions(db):
                raise listen_refused(self)
            channels = [db.queue(q).channel() for q in self.routes]
            self.dialect.listener.listen(db.connection, channels)
            self.state.channels = dict(zip(channels, self.routes))
        # After a (re)connect, anything pushed meanwhile must be looked at.
        self.state.wake_queues.update(self.routes)

    def _shares_sessions(self, db: Database) -> bool:
        """The listener's shares_sessions (a transaction pooler would lose the LISTEN). Before the
        first reserve, when the dispatcher connects to the handlers' DSN, the other connection it
        asks is the completer's, opened now and kept for its first commit (the completer has had
        nothing to commit yet, so it is idle): a start opens no connection for the check alone."""
        dsn, spare = self.dsn_for("dispatcher"), self._run_threads.completer_conn
        if (
            spare is None
            or spare.db is not None
            or self.state.stats.reserved
            or dsn != self.dsn_for(spare.role)
        ):
            return self.dialect.listener.shares_sessions(db.connection, dsn)
        other = connect(dsn)
        try:
            shared = self.dialect.listener.shares_session_with(db.connection, other.connection)
        except BaseException:
            other.close()
            raise
        if shared:
            other.close()
        else:
            spare.db = other
        return shared

    def _start_jobs(self, jobs: list[Job]) -> None:
        wake, inflight = self._watch_wake.set, self.inflight
        with self._slots_lock:
            for job in jobs:
                job.on_progress = wake
                inflight[(job.queue, job.key, job.kind)] = job
        put = self._pending.put
        for job in jobs:
            put(job)

    # -- handlers ----------------------------------------------------------------
    def _release(self, job: Job, successors: list[Job] = ()) -> None:
        with self._slots_lock:
            self.inflight.pop((job.queue, job.key, job.kind), None)
            for nxt in successors:
                nxt.on_progress = self._watch_wake.set
                self.inflight[(nxt.queue, nxt.key, nxt.kind)] = nxt
            # only the dispatcher waits on _slots (_wait_slots), for fewer than _refill_at
            if len(self.inflight) < self._slot_waiting:
                self._slots.notify_all()

    # -- the watcher (watch.py) and the heartbeat (registry.py) ---------------------------
    def heartbeat_run(self, fn: Callable[[Database], Any]) -> Any:
        """For on_heartbeat hooks: runs fn(db) on the heartbeat thread's connection,
        reconnecting and retrying on connection loss."""
        if self._heartbeat_conn is None:
            raise errors.QueueError("heartbeat_run is for on_heartbeat hooks")
        return self._heartbeat_conn.run(fn, give_up=self.state.hard_stop)


def _record_overdue_cancel(worker: Worker, job: Job) -> bool:
    """A cancelled job blocked past kill_grace (runners.Overdue): recorded as cancelled on a
    connection of its own (the timer thread that asks has none), before the process is replaced."""
    conn = _Connection(worker, "handler")
    try:
        return bool(worker._steps(worker.dispatch.overdue_cancel_steps(job), conn))
    except Exception:
        log.exception(
            "could not record the cancel of %s", where_of(job), extra={"event": "error", "key": job.key}
        )
        return False
    finally:
        conn.close()


Worker.__init__.__signature__ = settings_signature()  # type: ignore[attr-defined]
