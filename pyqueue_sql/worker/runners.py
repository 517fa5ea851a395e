"""The threads that run plain (def) handlers outside a handler thread: those with a timeout (both
runtimes) and, in AsyncWorker, every plain handler (asyncio's default executor would run at most
min(32, CPUs + 4) of them at once, whatever the worker's concurrency).

A runner thread is reused from job to job, so that what a task keeps per thread (the App's
connection: App.database()) is opened once per thread, not once per job. A handler that is still
running STUCK_GRACE seconds after its time limit was raised in its thread (a blocking C call:
interrupt.py) leaves its runner "stuck": the runner is set aside (the pool makes another for the
next job) and ends, with its per-thread resources closed (the worker's on_thread_end hooks), when
that handler ends. Meanwhile the worker does not start the same job again (RunnerPool.stuck: a
retry that comes back to it is given back for STUCK_RETRY_DELAY seconds, its attempt not counted),
and more than max_stuck stuck runners stop the worker (its supervisor starts a fresh process). A
batch's runner holds every job of its batch. One still running kill_grace seconds after its time
limit is overdue (WorkerBase._overdue: logged, or its process replaced under --processes).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import queue as queue_mod
import threading
from collections.abc import Callable
from typing import Any

from .interrupt import Interruptible
from .model import Job, log, where_of

# Seconds a handler has to end once its time limit (or its cancel) was raised in its thread before
# its runner counts as stuck (and is replaced).
STUCK_GRACE = 0.2

# Seconds a message whose earlier attempt still runs in a stuck thread of this worker is given back
# for (queue_snooze: the attempt does not count) when this worker reserves it again.
STUCK_RETRY_DELAY = 1.0

Settle = Callable[[BaseException | None, Any], None]


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def run_on_thread_end(hooks: list[Callable[[], Any]]) -> None:
    """Runs a worker's on_thread_end hooks on the thread that ends (each error logged)."""
    for hook in hooks:
        try:
            hook()
        except Exception:
            log.exception("on_thread_end hook failed", extra={"event": "error"})


class Runner:
    """One thread running plain handlers one after the other, each inside its Interruptible (so a
    time limit or a cancel can be raised in it)."""

    def __init__(self, pool: RunnerPool, number: int) -> None:
        self.pool = pool
        self.stopper = Interruptible()
        self.job: Job | None = None
        self.detached = False  # set aside as stuck: ends after its handler
        self.ended = False  # its thread has ended (set under the pool's lock)
        self._work: queue_mod.SimpleQueue[tuple[Any, ...] | None] = queue_mod.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"pyqueue-runner-{number}", daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[[Job], Any], job: Job, settle: Settle, awaits: bool = True) -> None:
        """Runs fn(job) on the runner's thread, in a copy of the caller's context (the handler sees
        the job's span as current: pyqueue_sql.tracing); settle(error, result) is called there
        when it ends. A handler that returns an awaitable has it run there to completion (awaits:
        else the awaitable is what settle gets)."""
        self.job = job
        self._work.put((contextvars.copy_context(), fn, job, settle, awaits))

    def end(self) -> None:
        self._work.put(None)

    def _loop(self) -> None:
        try:
            while True:
                item = self._work.get()
                if item is None:
                    return
                context, fn, job, settle, awaits = item
                context.run(self._run_one, fn, job, settle, awaits)
                if self.detached:
                    return
        finally:
            self.pool._ended(self)

    def _run_one(self, fn: Callable[[Job], Any], job: Job, settle: Settle, awaits: bool) -> None:
        error: BaseException | None = None
        result: Any = None
        try:
            result = self.stopper.run(fn, job)
            if awaits and inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
        except BaseException as exc:
            error = exc
        settle(error, result)


class RunnerPool:
    """A worker's runners: idle ones are reused, stuck ones set aside (see the module docstring)."""

    def __init__(
        self,
        on_thread_end: list[Callable[[], Any]],
        on_stuck: Callable[[int], None],
        on_overdue: Callable[[list[Job], str], None] | None = None,
        overdue_after: float = 0.0,
    ) -> None:
        self._lock = threading.Lock()
        self._idle: list[Runner] = []
        self._made = 0
        self._on_thread_end = on_thread_end
        self._on_stuck = on_stuck  # called with the number of stuck runners after one more
        # called with a stuck runner's jobs once it is still running overdue_after seconds after it
        # was set aside (the worker's kill_grace after the time limit)
        self._on_overdue = on_overdue
        self._overdue_after = overdue_after
        # (queue, key, kind) of each job whose handler still runs in a stuck runner -> the runner
        self.stuck: dict[tuple[str, str, str], Runner] = {}

    def take(self) -> Runner:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            self._made += 1
            number = self._made
        return Runner(self, number)

    def give_back(self, runner: Runner) -> None:
        runner.job = None
        with self._lock:
            self._idle.append(runner)

    def set_aside(self, runner: Runner, jobs: list[Job]) -> None:
        """The runner's handler did not end after its time limit: the runner is no longer used; it
        ends when that handler does. Every job it holds (a batch's: all of them) is recorded as
        stuck, so that no lane of this worker starts one of them again before it ends. (Called
        with runner.detached already set.)"""
        with self._lock:
            if runner.ended:  # its handler ended meanwhile (after the grace): nothing is stuck
                return
            for job in jobs:
                self.stuck[(job.queue, job.key, job.kind)] = runner
            n = self._stuck_runners()
        job = jobs[0]
        more = f" and {len(jobs) - 1} more jobs of its batch" if len(jobs) > 1 else ""
        log.warning(
            "the handler of %s/%s/%s%s still runs %g s after it was stopped (a blocking call): its "
            "thread is set aside and still running, %d stuck now; this worker does not start the "
            "job again before it ends",
            job.queue,
            job.key,
            job.kind,
            more,
            STUCK_GRACE,
            n,
            extra={
                "event": "stuck",
                "queue": job.queue,
                "key": job.key,
                "kind": job.kind,
                "stuck": n,
                "jobs": len(jobs),
            },
        )
        if self._on_overdue is not None:
            timer = threading.Timer(self._overdue_after, self._check_overdue, (runner, jobs))
            timer.daemon = True
            timer.start()
        self._on_stuck(n)

    def _check_overdue(self, runner: Runner, jobs: list[Job]) -> None:
        with self._lock:
            overdue = not runner.ended
        if overdue and self._on_overdue is not None:
            self._on_overdue(jobs, "timeout")

    def _stuck_runners(self) -> int:
        """The number of stuck runners (a batch's runner holds several stuck jobs); lock held."""
        return len({id(runner) for runner in self.stuck.values()})

    def holds(self, job: Job) -> bool:
        """Whether a stuck runner of this worker still runs the job (an earlier attempt of it)."""
        return bool(self.stuck) and (job.queue, job.key, job.kind) in self.stuck

    def stuck_count(self) -> int:
        with self._lock:
            return self._stuck_runners()

    def _ended(self, runner: Runner) -> None:
        """On the runner's thread, as it ends: its resources closed, its stuck job forgotten."""
        run_on_thread_end(self._on_thread_end)
        with self._lock:
            runner.ended = True
            for ident, held in list(self.stuck.items()):
                if held is runner:
                    del self.stuck[ident]
                    log.info(
                        "the stuck handler of %s/%s/%s ended; its thread too",
                        *ident,
                        extra={"event": "unstuck", "queue": ident[0], "key": ident[1], "kind": ident[2]},
                    )
            if runner in self._idle:
                self._idle.remove(runner)

    def close(self) -> None:
        """Ends the idle runners (their threads close their resources as they end)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for runner in idle:
            runner.end()


class Overdue:
    """A worker's plain handlers still running kill_grace seconds after their timeout (`why`
    "timeout": the runner was set aside as stuck, the attempt failed with TimeoutError) or their
    cancel ("cancel"): blocked in a call no exception reaches. Under a process supervisor (`ask`,
    set by `pyqueue-sql worker --processes` in each process) a cancel's attempt is recorded as
    cancelled (record_cancel: the threaded Worker's), then the supervisor is asked to terminate and
    replace the process; else the handler is logged as what it is, a thread that runs on."""

    def __init__(self, kill_grace: float) -> None:
        self.kill_grace = kill_grace
        # ask(reason): the process supervisor terminates and replaces this process. None: logged only
        self.ask: Callable[[str], Any] | None = None
        # record_cancel(job) -> True once the job is recorded as cancelled (queue_cancel_held)
        self.record_cancel: Callable[[Job], bool] = lambda job: False

    def seen(self, jobs: list[Job], why: str) -> None:
        job = jobs[0]
        more = f" and {len(jobs) - 1} more jobs of its batch" if len(jobs) > 1 else ""
        what = "its timeout" if why == "timeout" else "its cancel"
        grace = self.kill_grace
        ask = self.ask
        if ask is not None and why == "cancel" and not self.record_cancel(job):
            ask = None
        extra = {"queue": job.queue, "key": job.key, "kind": job.kind, "why": why}
        if ask is None:
            log.warning(
                "the handler of %s%s still runs %g s after %s (a blocking call): a thread cannot be "
                "stopped, it runs on until that call returns; this worker does not start the job again "
                "meanwhile (a process supervisor, `pyqueue-sql worker --processes`, replaces such a process)",
                where_of(job),
                more,
                grace,
                what,
                extra={"event": "overdue", **extra},
            )
            return
        reason = f"the handler of {where_of(job)}{more} still runs {grace:g} s after {what} (a blocking call)"
        log.error(
            "%s: this worker process is terminated and replaced (--kill-grace %g)",
            reason,
            grace,
            extra={"event": "overdue_kill", **extra},
        )
        try:
            ask(reason)
        except Exception:
            log.exception(
                "could not ask the process supervisor to replace this process", extra={"event": "error"}
            )
