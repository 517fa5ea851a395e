"""The asyncio worker: async handlers run as tasks on one event loop.

    worker = AsyncWorker("postgresql://localhost/app", concurrency=32)

    @worker.handler("emails", "welcome", retry=RetryPolicy(base=2, max_delay=600))
    async def send_welcome(job):
        await mail(job.payload["to"])

    asyncio.run(worker.run())     # until SIGTERM / SIGINT (or worker.stop())

It behaves as pyqueue_sql.Worker does (see that module's docstring: what a
handler may raise, the retry policy and dead letters, the graceful and the
forced stop, the worker registry, reconnects, the logs on the
"pyqueue_sql.worker" logger, status()), with tasks in place of threads:

  * up to `concurrency` handlers run at once, each an asyncio task; a handler
    that is a plain function runs on a thread of the worker's own (up to
    `concurrency` at once, reused from job to job: worker/runners.py);
  * one connection reserves and waits (the dispatcher), one heartbeats, one
    acknowledges successes (the completer), and `connections` (default
    min(concurrency, 4)) are shared by the handler tasks for their failures,
    hand-backs and chained commits;
  * PostgreSQL wakes the dispatcher by LISTEN on its async connection;
    MySQL/MariaDB (or listen=False) long-polls queue_wait with one queue and
    polls with several;
  * the dispatcher reserves for the free handlers plus the prefetch (as
    Worker); a prefetched message waits until one of the `concurrency` handler
    tasks is free and runs it (a stop hands it back at once);
  * a success is acknowledged by a completer task on its own connection, in
    batches (queue_commit_batch, as Worker: ack_batch, ack_interval); the
    handler's turn is free as soon as its handler returned;
  * with commit_reserve=True, in a worker of one queue, a success commits with
    queue_commit_reserve and the task runs the message that call reserved; the
    successes that finish while the shared connections are busy are committed
    together (group commit): one queue_commit_batch for them and one
    queue_commit_reserve that commits one more and reserves a next message for
    each of them;
  * each async def handler's coroutine is awaited by the handler task itself,
    in a context of its own (contextvars, as a task of its own would have); a
    cancel of its message cancels the handler task while it awaits that
    coroutine (the heartbeat's queue_renew, or the watcher's quick poll: see
    pyqueue_sql.worker, "Results, cancellation and progress"); progress and the
    cancel poll use one more connection (the watcher's), opened when needed;
  * a stop that hits the deadline, or a forced one, cancels the handler tasks
    still running: their messages come back when their lease ends (a handler
    that raises CancelledError by itself fails its message as any error does).

Hooks (on_start, on_heartbeat, on_stop, on_idle) may be plain functions or
coroutine functions; ``await worker.heartbeat_run(fn)`` awaits fn(db) on the
heartbeat connection.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import inspect
import signal
import sys
import threading
import time
import types
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import errors, tracing
from ..worker import (
    Job,
    RetryPolicy,
    WorkerBase,
    WorkerStats,
    WorkerStatus,
    call_steps,
    log,
)
from ..worker.base import listen_refused, settings_signature
from ..worker.dispatch import COUNTED_BY_BATCH
from ..worker.model import log_expired
from ..worker.steps import (
    HARD_STOP,
    Acquire,
    BackOff,
    Begin,
    Close,
    Commit,
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
    dispatcher,
    run_steps_async,
)
from ..worker.timeouts import handle_timed_async, run_plain_async
from .client import connect

if TYPE_CHECKING:
    from ..worker.base import Unpack
    from ..worker.settings import WorkerOptions

__all__ = ["AsyncJob", "AsyncWorker", "RetryPolicy", "WorkerStats", "WorkerStatus"]


_UNCANCEL = sys.version_info >= (3, 11)  # Task.uncancel: a task counts the cancels asked of it


@dataclass
class AsyncJob(Job):
    """A reserved message handed to an async handler (the same fields as Job)."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)  # type: ignore[assignment]


@dataclass
class _PendingCommit:
    """A handled job whose success waits for the group commit; fut gets Dispatch.commit_reserve_steps' result."""

    job: Job
    chain: bool
    fut: asyncio.Future


async def _wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Waits up to timeout for the event; True when it is set."""
    if event.is_set():
        return True
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        pass
    return event.is_set()


async def _maybe_await(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


def _resolve(pending: _PendingCommit, result: Any) -> None:
    """Hands a pending success its result (an exception: raised in its task)."""
    if pending.fut.done():  # a task cancelled by the hard stop no longer waits
        return
    if isinstance(result, BaseException):
        pending.fut.set_exception(result)
    else:
        pending.fut.set_result(result)


class _TaskCancel:
    """job.on_cancel while a coroutine handler runs in its handler task (any thread may call it):
    cancels that task on the loop's thread if it still awaits the job's handler then (a cancel
    that comes after the handler ended is dropped, never delivered to the task's next await)."""

    __slots__ = ("job", "task", "asked")

    def __init__(self, job: Job, task: asyncio.Task) -> None:
        self.job = job
        self.task = task
        self.asked = False  # the task was cancelled for it

    def __call__(self) -> None:
        try:
            self.task.get_loop().call_soon_threadsafe(self.now)
        except RuntimeError:  # the loop has closed
            pass

    def now(self) -> None:
        if self.job.on_cancel is self and not self.asked:
            self.asked = True
            self.task.cancel()


class _InContext:
    """Awaits a coroutine with each of its steps run in the given context, as a task of its own
    runs it: what a handler sets in contextvars stays its job's (a handler task runs many jobs)."""

    __slots__ = ("coro", "run")

    def __init__(self, coro: types.CoroutineType, context: contextvars.Context) -> None:
        self.coro = coro
        self.run = context.run

    def __await__(self) -> _InContext:
        return self

    def __iter__(self) -> _InContext:
        return self

    def __next__(self) -> Any:
        return self.run(self.coro.send, None)

    def send(self, value: Any) -> Any:
        return self.run(self.coro.send, value)

    def throw(self, *exc: Any) -> Any:
        return self.run(self.coro.throw, *exc)

    def close(self) -> None:
        self.run(self.coro.close)


class _AsyncConnection:
    """One role's async database connection: reconnects and retries on connection loss."""

    def __init__(
        self,
        worker: AsyncWorker,
        role: str,
        on_connect: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self.worker = worker
        self.role = role
        self.db: Any = None
        self.on_connect = on_connect

    async def close(self) -> None:
        db, self.db = self.db, None
        if db is not None:
            try:
                await db.close()
            except Exception:
                pass

    async def run(self, fn: Callable[[Any], Awaitable[Any]], *, give_up: asyncio.Event | None = None) -> Any:
        return await run_steps_async(call_steps(self, fn, give_up), self._execute)

    async def _connect(self, op: Connect) -> Any:
        return await connect(self.worker.dsn_for(self.role))

    async def _on_connect(self, op: OnConnect) -> None:
        return await self.on_connect(op.db)

    async def _invoke(self, op: Invoke) -> Any:
        return await op.fn(op.db)

    async def _close(self, op: Close) -> None:
        return await self.close()

    async def _back_off(self, op: BackOff) -> bool | None:
        if op.give_up is None:
            return await asyncio.sleep(op.seconds)
        return await _wait_event(op.give_up, op.seconds)

    _execute = dispatcher(
        {Connect: _connect, OnConnect: _on_connect, Invoke: _invoke, Close: _close, BackOff: _back_off}
    )


class _LoopEvents:
    """The event loop's events, set from the run state's thread-safe ones (stop() may come from
    any thread or a signal handler): stop, hard (the hard stop), freed (a handler's slot was
    freed), watch (a progress to write), settled (one of the worker's settles ended, or the stop:
    what a Sleep(settled=True) waits for)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watch: asyncio.Event | None = None
        self.thread: int | None = None  # the loop's thread

    def begin(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.thread = threading.get_ident()
        self.stop, self.hard, self.freed = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.watch, self.settled = asyncio.Event(), asyncio.Event()
        self.state.settles.on_end = self.settle_ended

    def mirror(self) -> None:
        """Sets the loop's events from the thread-safe ones."""
        if self.state.stopping.is_set():
            self.stop.set()
            self.freed.set()
            self.settled.set()
        if self.state.hard_stop.is_set():
            self.hard.set()

    def wake(self) -> None:
        """Makes the loop's waits notice a stop (from any thread, or a signal handler)."""
        loop = self.loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self.mirror)
        except RuntimeError:  # the loop closed meanwhile: nothing waits any more
            pass

    def settle_ended(self) -> None:
        """Ends the loop's wait for a settle (Settles.on_end): the settles end on the loop (handler
        tasks, the completer), where the event is set at once; from another thread, through the
        loop (asyncio's events are not thread-safe)."""
        loop = self.loop
        if loop is None:
            return
        if threading.get_ident() == self.thread:
            self.settled.set()
            return
        try:
            loop.call_soon_threadsafe(self.settled.set)
        except RuntimeError:  # the loop has closed
            pass

    def progress_set(self) -> None:
        """Wakes the watcher to write a progress (Job.set_progress, from any thread)."""
        loop, event = self.loop, self.watch
        if loop is not None and event is not None:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # the loop has closed
                pass


class _HandlerTasks:
    """The handler tasks: up to `concurrency` at once, each runs its message (Dispatch.serve_steps)
    and those its commits reserve, then the prefetched ones that wait; how a handler is called
    (a coroutine function's coroutine awaited in the handler task, which a cancel cancels while
    it awaits it; another awaitable as a task of its own; a plain function on a runner thread);
    and, at the stop, the wait for them until the deadline."""

    def __init__(self, worker: AsyncWorker) -> None:
        self.settings = worker.settings
        self.state = worker.state
        self.events = worker.events
        self.runners = worker.runner_pool
        self.shutdown = worker.shutdown
        self.inflight = worker.inflight  # the worker's, shared
        self.run = worker._steps
        self.execute = worker._execute
        self.serve_steps = worker.dispatch.serve_steps
        self.tasks: set[asyncio.Task] = set()
        self.waiting: collections.deque[Job] = collections.deque()  # prefetched, for the next free task
        self.running = 0  # running handler tasks

    def start_jobs(self, jobs: list[Job]) -> None:
        progress_set = self.events.progress_set
        for job in jobs:
            job.on_progress = progress_set
            self.inflight[(job.queue, job.key, job.kind)] = job
            if self.running >= self.settings.concurrency:
                self.waiting.append(job)  # prefetched: the next task that is free runs it
                continue
            self.running += 1
            task = asyncio.create_task(self.serve(job), name=f"pyqueue-handler {job.queue}/{job.key}")
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def serve(self, job: Job | None) -> None:
        """A handler task: runs its message (and those its commits reserve), then the prefetched
        ones that wait, until none is left."""
        execute, handle, in_use = self.execute, self.handle, tracing.in_use
        task = asyncio.current_task()

        def run(op: Any) -> Awaitable[Any]:
            # a job's two operations (Handle, Acquire) without the table's lookup: once a job each
            kind = type(op)
            if kind is Handle:
                if in_use() is None:  # no OpenTelemetry: no span (tracing.handle_traced_async)
                    return handle(op, task)
                return tracing.handle_traced_async(op.job, lambda: handle(op, task))
            if kind is Acquire:
                return op.lock.acquire()
            return execute(op, None)

        try:
            while job is not None:
                await run_steps_async(self.serve_steps(job), run)
                job = self.waiting.popleft() if self.waiting else None
        finally:
            self.running -= 1

    async def cancellable(self, job: Job, coro: Any) -> Any:
        """Awaits a handler's coroutine as a task of its own, which a cancel of the job cancels
        (job.on_cancel, from any thread); a cancel of the awaiting task cancels it too."""
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(coro)

        def cancel() -> None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop has closed
                pass

        job.on_cancel = cancel
        if job._cancel_asked():
            task.cancel()
        try:
            return await task
        finally:
            job.on_cancel = None

    async def handle(self, op: Handle, task: asyncio.Task | None = None) -> BaseException | None:
        """Runs the job's handler (in `task`, the handler task that runs it: the current one)."""
        job = op.job
        if op.timeout is not None:
            return await handle_timed_async(op, self.cancellable, self.runners)
        try:
            if job.runs_async:
                coro = op.fn(job)
                if type(coro) is not types.CoroutineType:  # another awaitable: a task of its own
                    job.result = await self.cancellable(job, coro)
                    return None
                # A coroutine function's coroutine is awaited in the handler task itself, not as a
                # task of its own (which costs two hops of the loop a job); a cancel of the job
                # cancels the handler task while it awaits it (_TaskCancel).
                if job._cancel_asked():  # cancelled before it started: its body never runs
                    coro.close()
                    raise asyncio.CancelledError
                cancel = _TaskCancel(job, task or asyncio.current_task())
                job.on_cancel = cancel
                try:
                    job.result = await _InContext(coro, contextvars.copy_context())
                finally:
                    job.on_cancel = None
                    if cancel.asked and _UNCANCEL:  # the task's count of cancels asked, back to 0
                        cancel.task.uncancel()
            else:
                # a plain function: on a runner thread (worker/runners.py), so that it does not block
                # the loop; up to `concurrency` of them at once (asyncio's default executor would
                # run at most min(32, CPUs + 4))
                error, result = await run_plain_async(self.runners, op.fn, job)
                if error is not None:
                    return error
                if inspect.isawaitable(result):
                    job.runs_async = True
                    result = await self.cancellable(job, result)
                job.result = result
        except BaseException as exc:
            return exc
        return None

    async def drain(self, deadline: float) -> None:
        """The stop: the prefetched messages go back at once (whatever the handlers do), the
        running handlers get until the deadline, then the rest are cancelled."""
        while self.waiting:
            task = asyncio.create_task(self.run(self.serve_steps(self.waiting.popleft()), None))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        report_at = time.monotonic()
        forced = asyncio.ensure_future(self.events.hard.wait())
        try:
            while self.tasks and not self.state.hard_stop.is_set():
                now = time.monotonic()
                if now >= deadline:
                    break
                report_at = self.shutdown.report_stopping(deadline, report_at)
                await asyncio.wait(
                    {*self.tasks, forced},
                    timeout=min(1.0, deadline - now),
                    return_when=asyncio.FIRST_COMPLETED,
                )
        finally:
            forced.cancel()
        self.shutdown.abandon_the_rest()
        self.events.mirror()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


class _Commits:
    """The acknowledgement of the handlers' successes: the completer (Dispatch.ack_steps in batches,
    as Worker's) and, with commit_reserve, the group commit of the chained ones (the committers).
    put() is what Dispatch calls with a success to acknowledge later; commit() the Commit step."""

    def __init__(self, settings: Any, stats: WorkerStats) -> None:
        self.settings = settings
        self.stats = stats
        self.acks: list[tuple[Job, float]] = []
        self.acks_closed = False
        self.commits: list[_PendingCommit] = []
        self.put = self._put  # what Dispatch calls, once a success: (job, elapsed_ms)

    def start(self, worker: AsyncWorker) -> None:
        """Starts the completer and `connections` committers on the running loop."""
        self.dispatch = worker.dispatch
        self.routes = worker.routes
        self.job_type = worker._job_type
        self.run = worker._steps
        self.pooled = worker.pool.run
        self.commits_ready = asyncio.Event()
        self.acks_ready, self.acks_full = asyncio.Event(), asyncio.Event()
        self.acks_closed = False
        # Its role in the logs and metrics is "handler", as the shared connections of the handler tasks.
        self.completer = asyncio.create_task(
            self._completer(_AsyncConnection(worker, "handler")), name="pyqueue-completer"
        )
        self.committers = [
            asyncio.create_task(self._committer(), name=f"pyqueue-committer-{i}")
            for i in range(worker.connections)
        ]

    async def close(self, timeout: float) -> None:
        """Every handler task has finished: the committers end, the completer flushes what is
        left (up to timeout seconds), then ends."""
        committers, completer = self.committers, self.completer
        for committer in committers:  # nothing left to commit
            committer.cancel()
        await asyncio.gather(*committers, return_exceptions=True)
        self.acks_closed = True
        self.acks_ready.set()
        self.acks_full.set()  # ends the completer's wait for more
        await asyncio.wait({completer}, timeout=timeout)

    def cancel(self) -> None:
        self.completer.cancel()

    def _put(self, job: Job, elapsed_ms: float) -> None:
        self.acks.append((job, elapsed_ms))
        self.acks_ready.set()
        if len(self.acks) >= self.settings.ack_batch:
            self.acks_full.set()

    async def commit(self, op: Commit) -> Any:
        pending = _PendingCommit(op.job, op.chain, asyncio.get_running_loop().create_future())
        self.commits.append(pending)
        self.commits_ready.set()
        return await pending.fut

    async def _completer(self, conn: _AsyncConnection) -> None:
        """Acknowledges the handlers' successes (see Worker's Completer): once one waits, up to
        ack_interval for more (at most ack_batch), then one flush (Dispatch.ack_steps) on its own
        connection; until close() after the last handler task, flushing the rest."""
        settings = self.settings
        try:
            while True:
                await self.acks_ready.wait()
                if not self.acks and self.acks_closed:
                    return
                if settings.ack_interval > 0 and len(self.acks) < settings.ack_batch and not self.acks_closed:
                    await _wait_event(self.acks_full, settings.ack_interval)
                batch, self.acks = self.acks[: settings.ack_batch], self.acks[settings.ack_batch :]
                if len(self.acks) < settings.ack_batch:
                    self.acks_full.clear()
                if not self.acks and not self.acks_closed:
                    self.acks_ready.clear()
                if batch:
                    await self.run(self.dispatch.ack_steps(batch), conn)
        finally:
            await conn.close()

    async def _committer(self) -> None:
        """Commits whatever successes are pending each time it is free; `connections` of them run
        at once, so the successes that finish while they are busy are committed together."""
        while True:
            await self.commits_ready.wait()
            batch, self.commits = self.commits, []
            self.commits_ready.clear()
            by_queue: dict[str, list[_PendingCommit]] = {}
            for pending in batch:
                by_queue.setdefault(pending.job.queue, []).append(pending)
            for entries in by_queue.values():
                try:
                    await self._commit_group(entries)
                except BaseException as exc:
                    for pending in entries:
                        _resolve(pending, exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise

    async def _commit_group(self, entries: list[_PendingCommit]) -> None:
        """Commits the successes of one queue: a lone one as Dispatch.commit_reserve_steps does;
        several with one queue_commit_batch and, when they chain, one queue_commit_reserve at the
        same time (on another connection: the two touch different rows) that commits one of them
        and reserves a next message for each that chains."""
        chains = self.dispatch.chains(False)
        if len(entries) == 1:
            one = entries[0]
            result = await self.run(self.dispatch.commit_reserve_steps(one.job, one.chain and chains), None)
            _resolve(one, result)
            return
        q = entries[0].job.queue
        chained = [e for e in entries if e.chain] if chains else []
        lead = chained[0] if chained else None
        rest = [e for e in entries if e is not lead]

        async def commit_rest() -> Any:
            ok = await self._commit_many(q, rest)
            for pending in rest:
                if pending not in chained:
                    _resolve(pending, (ok, []))
            return ok

        if lead is None:
            await commit_rest()
            return
        ok, reserved = await asyncio.gather(
            commit_rest(), self._commit_reserve(lead, len(chained)), return_exceptions=True
        )
        if isinstance(reserved, BaseException):
            jobs: list[Job] = []
            _resolve(lead, reserved)
        else:
            lead_ok, jobs = reserved
            _resolve(lead, (lead_ok, jobs[:1]))
        if isinstance(ok, BaseException):
            raise ok  # the committer hands it to the rest (their successors come back after the lease)
        for i, pending in enumerate(chained[1:], start=1):
            _resolve(pending, (ok, jobs[i : i + 1]))

    async def _commit_reserve(self, lead: _PendingCommit, n: int) -> tuple[bool, list[Job]]:
        """Commits lead's reservation and reserves up to n next messages of its queue in one call."""
        q = lead.job.queue
        args = dict(self.dispatch.commit_reserve_args(self.routes[q]), n=n)
        (ok, rows), expired = await self.pooled(
            RetriedCall("commit_reserve", q, (lead.job.reservation,), args, expired=True)
        )
        log_expired(self.stats, expired)
        self.stats.commit_reserves += 1
        self.stats.reserved += len(rows)
        return bool(ok), [self.job_type(r) for r in rows]

    async def _commit_many(self, q: str, entries: list[_PendingCommit]) -> Any:
        """Commits entries' reservations in one call: True when every one still held; else (as the
        call does not say which ones lapsed) counts and logs the batch, and COUNTED_BY_BATCH."""
        if len(entries) == 1:
            return await self.pooled(RetriedCall("commit", q, (entries[0].job.reservation,)))
        held = await self.pooled(RetriedCall("commit_many", q, ([e.job.reservation for e in entries],)))
        if held == len(entries):
            return True
        self.stats.succeeded += held
        self.stats.lost += len(entries) - held
        log.warning(
            "%d of the %d reservations of %s committed together were no longer held (expired or "
            "released; their messages are or were redelivered), among: %s",
            len(entries) - held,
            len(entries),
            q,
            ", ".join(f"{e.job.key}/{e.job.kind}" for e in entries),
            extra={"event": "lost", "queue": q, "n": len(entries) - held},
        )
        return COUNTED_BY_BATCH


class _Pool:
    """The connections the handler tasks share (`connections` of them) for their failures,
    hand-backs and chained commits."""

    def __init__(self, worker: AsyncWorker, n: int) -> None:
        self.conns: asyncio.Queue[_AsyncConnection] = asyncio.Queue()
        for _ in range(n):
            self.conns.put_nowait(_AsyncConnection(worker, "handler"))
        self.give_up = worker.events.hard

    async def run(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        """Runs fn(db) on one of the connections (waits for a free one)."""
        conn = await self.conns.get()
        try:
            return await conn.run(fn, give_up=self.give_up)
        finally:
            self.conns.put_nowait(conn)

    async def close(self) -> None:
        while not self.conns.empty():
            await self.conns.get_nowait().close()


class _RunTasks:
    """The tasks of an AsyncWorker's run beside the handler tasks, each with its own connection:
    the heartbeat and the watcher; and, at the stop, the wait for the handler tasks, the give-back
    of the abandoned messages, the completer's last flush, then the end of the others."""

    def __init__(self, worker: AsyncWorker) -> None:
        self.worker = worker

    def start(self) -> None:
        w = self.worker
        w._heartbeat_conn = _AsyncConnection(w, "heartbeat")
        self.heartbeat = asyncio.create_task(
            self.loop_on(w._heartbeat_conn, w.registry.heartbeat_loop_steps()), name="pyqueue-heartbeat"
        )
        self.watcher = asyncio.create_task(
            self.loop_on(_AsyncConnection(w, "watch"), w.watch.loop_steps()), name="pyqueue-watch"
        )

    async def loop_on(self, conn: _AsyncConnection, steps: Any) -> None:
        """A task's loop: its steps on its own connection, closed when they end."""
        try:
            await self.worker._steps(steps, conn)
        finally:
            await conn.close()

    async def stop(self) -> None:
        w = self.worker
        # Tasks that had not started their handler hand their message back at once (they see
        # state.stopping); running ones get until the deadline.
        deadline = time.monotonic() + w.settings.shutdown_timeout
        w._stop_deadline = deadline
        await w.handlers.drain(deadline)
        if w.shutdown.abandoned:
            shut = _AsyncConnection(w, "shutdown")
            try:
                await w._steps(w.shutdown.give_back_abandoned_steps(), shut)
            finally:
                await shut.close()
        # every handler task has finished: the completer flushes the successes still waiting
        await w.completer.close(timeout=max(w.settings.shutdown_timeout, 5.0))
        w.state.hard_stop.set()  # the flush is done (or gave up): the heartbeat ends
        w.events.hard.set()
        w.completer.cancel()
        w.events.watch.set()
        await asyncio.wait({self.heartbeat, self.watcher}, timeout=5)
        self.heartbeat.cancel()
        self.watcher.cancel()


class AsyncWorker(WorkerBase):
    """Runs async handlers for messages of one or more queues as asyncio tasks.
    See the module docstring; the settings are pyqueue_sql.Worker's, plus `connections`."""

    runtime = "asyncio"
    _job_type = AsyncJob
    _group_commit = True

    def __init__(
        self, dsn: str, *, connections: int | None = None, **settings: Unpack[WorkerOptions]
    ) -> None:
        # Successes are acknowledged in batches by the completer (see Worker); commit_reserve=True
        # chains each success with the reserve of a next message instead (the group commit).
        settings["commit_reserve"] = bool(settings.get("commit_reserve"))
        super().__init__(dsn, **settings)
        self.connections = min(self.settings.concurrency, 4) if connections is None else connections
        if self.connections < 1:
            raise errors.InvalidArgumentError("connections must be at least 1")
        self.handlers = _HandlerTasks(self)

    def _setup(self) -> None:
        self._heartbeat_conn: _AsyncConnection | None = None
        self._signals_installed: list[int] = []
        self.events = _LoopEvents(self.state)
        self._run_tasks = _RunTasks(self)
        self.completer = _Commits(self.settings, self.state.stats)

    def _wake(self) -> None:
        self.events.wake()

    def _start_jobs(self, jobs: list[Job]) -> None:
        self.handlers.start_jobs(jobs)

    def _release(self, job: Job, successors: list[Job] = ()) -> None:
        self.inflight.pop((job.queue, job.key, job.kind), None)
        for nxt in successors:
            nxt.on_progress = self.events.progress_set
            self.inflight[(nxt.queue, nxt.key, nxt.kind)] = nxt
        self.events.freed.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT on the running loop: the first stops gracefully, a second one stops at once."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.shutdown.on_signal, signum)
            self._signals_installed.append(signum)

    async def run(self, *, install_signals: bool | None = None) -> bool:
        """Runs until stop(); handles SIGTERM/SIGINT when the loop runs in the main thread.

        Returns True when it stopped cleanly, False when handlers were still
        running at the shutdown deadline or a forced stop abandoned them (listed
        in ``self.unfinished``; their messages come back when their lease ends)."""
        return await self._steps(self._run_steps(install_signals), None)

    # -- the run's operations (WorkerBase._run_steps) ------------------------------------------
    async def _begin(self, op: Begin, conn: Any) -> None:
        self.events.begin()

    async def _open(self, op: Open, conn: Any) -> _AsyncConnection:
        on_connect = self._on_dispatcher_connect if op.dispatcher else None
        return _AsyncConnection(self, op.role, on_connect=on_connect)

    async def _on(self, op: On, conn: Any) -> Any:
        return await self._steps(op.steps, op.conn)

    async def _shut(self, op: Shut, conn: Any) -> None:
        return await op.conn.close()

    async def _start_runners(self, op: StartRunners, conn: Any) -> None:
        self.pool = _Pool(self, self.connections)
        self.completer.start(self)
        self._run_tasks.start()

    async def _stop_runners(self, op: StopRunners, conn: Any) -> None:
        await self._run_tasks.stop()

    async def _finish(self, op: Finish, conn: Any) -> None:
        await self.pool.close()

    def _stopping_now(self) -> None:
        self.events.mirror()

    def _ended(self) -> None:
        loop = self.events.loop
        while self._signals_installed and loop is not None:
            loop.remove_signal_handler(self._signals_installed.pop())
        self.events.loop = None

    # -- the operations of the loops' steps -----------------------------------------------
    def _steps(self, steps: Any, conn: _AsyncConnection | None) -> Awaitable[Any]:
        return run_steps_async(steps, lambda op: self._execute(op, conn))

    async def _call(self, op: RetriedCall, conn: _AsyncConnection | None) -> Any:
        if conn is None:  # a handler task: one of the shared connections
            return await self.pool.run(op)
        return await conn.run(op, give_up=self.events.hard if op.hard else self.events.stop)

    async def _listen(self, op: Listen, conn: _AsyncConnection) -> bool:
        return await conn.run(
            lambda db: self._steps(self.reserve_loop.listen_steps(db, op.deadline), None),
            give_up=self.events.stop,
        )

    async def _notifications(self, op: Notifications, conn: Any) -> list:
        return await self.dialect.listener.wait_for_notification_async(op.db.connection, op.seconds)

    async def _handle(self, op: Handle, conn: Any) -> BaseException | None:
        # inside the job's span when OpenTelemetry is installed (pyqueue_sql.tracing)
        return await tracing.handle_traced_async(op.job, lambda: self.handlers.handle(op))

    async def _commit(self, op: Commit, conn: Any) -> Any:
        return await self.completer.commit(op)

    async def _acquire(self, op: Acquire, conn: Any) -> bool:
        return await op.lock.acquire()

    async def _wait_slots(self, op: WaitSlots, conn: Any) -> None:
        freed = self.events.freed
        while len(self.inflight) >= self.reserve_loop.refill_at() and not self.state.stopping.is_set():
            freed.clear()
            await _wait_event(freed, 1.0)

    async def _sleep(self, op: Sleep, conn: Any) -> bool:
        if op.settled:  # one of its settles (settle_ended sets the event after it ends), the stop or the time
            event = self.events.settled
            if await _wait_event(event, op.seconds):
                event.clear()
            return self.state.stopping.is_set()
        return await _wait_event(self.events.stop, op.seconds)

    async def _wait(self, op: Wait, conn: Any) -> bool:
        if op.event is HARD_STOP:
            return await _wait_event(self.events.hard, op.seconds)
        event = self.events.watch
        woke = await _wait_event(event, op.seconds)
        event.clear()
        return woke

    async def _hooks(self, op: Hooks, conn: Any) -> None:
        for hook in op.hooks:
            try:
                await _maybe_await(hook(self))
            except Exception:
                if op.what is None:
                    raise
                log.exception("%s hook failed", op.what)

    async def _reconnect(self, op: Reconnect, conn: _AsyncConnection) -> None:
        return await conn.close()

    _execute = dispatcher(
        {
            RetriedCall: _call,
            Listen: _listen,
            Notifications: _notifications,
            Handle: _handle,
            Commit: _commit,
            Acquire: _acquire,
            WaitSlots: _wait_slots,
            Sleep: _sleep,
            Wait: _wait,
            Hooks: _hooks,
            Reconnect: _reconnect,
            Begin: _begin,
            Open: _open,
            On: _on,
            Shut: _shut,
            StartRunners: _start_runners,
            StopRunners: _stop_runners,
            Finish: _finish,
        }
    )

    # -- dispatcher ------------------------------------------------------------
    async def _on_dispatcher_connect(self, db: Any) -> None:
        if self.use_listen:
            if await self.dialect.listener.shares_sessions_async(db.connection, self.dsn_for("dispatcher")):
                raise listen_refused(self)
            channels = [await db.queue(q).channel() for q in self.routes]
            await self.dialect.listener.listen_async(db.connection, channels)
            self.state.channels = dict(zip(channels, self.routes))
        # After a (re)connect, anything pushed meanwhile must be looked at.
        self.state.wake_queues.update(self.routes)

    async def heartbeat_run(self, fn: Callable[[Any], Awaitable[Any]]) -> Any:
        """For on_heartbeat hooks: awaits fn(db) on the heartbeat connection,
        reconnecting and retrying on connection loss."""
        if self._heartbeat_conn is None:
            raise errors.QueueError("heartbeat_run is for on_heartbeat hooks")
        return await self._heartbeat_conn.run(fn, give_up=self.events.hard)


AsyncWorker.__init__.__signature__ = settings_signature(  # type: ignore[attr-defined]
    inspect.Parameter("connections", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="int | None")
)
