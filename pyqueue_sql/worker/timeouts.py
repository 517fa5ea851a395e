"""Handlers' time limits (add_handler(timeout=), a task's timeout=), for both runners: a message
whose handler is still running at its timeout fails with TimeoutError under its retry policy.

A coroutine handler is cancelled at the deadline (within_timeout). A plain (def) handler runs on a
runner thread (runners.py: reused from job to job), stopped at the deadline by TimeLimitExceeded
raised in that thread (at its next Python bytecode: see interrupt.py), so the worker's handler
thread or task goes on with the next message and the worker keeps its concurrency; a late return
is logged and changes nothing. A runner whose handler does not end within STUCK_GRACE of that is
set aside as stuck (runners.py says what the worker then does). Worker
runs handle_timed on a handler thread, AsyncWorker awaits handle_timed_async on its loop: the two
differ only in how they wait for the handler's thread.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from .interrupt import Interruptible, TimeLimitExceeded
from .model import Job, log, where_of
from .policy import describe_error
from .runners import STUCK_GRACE, RunnerPool
from .steps import Handle

__all__ = [
    "TimeLimitExceeded",
    "awaited",
    "handle_timed",
    "handle_timed_async",
    "log_late_return",
    "timed_out",
    "within_timeout",
]


async def awaited(awaitable: Any) -> Any:
    return await awaitable


def timeout_error(timeout: float) -> TimeoutError:
    """The failure of a message whose handler did not finish within its timeout."""
    return TimeoutError(f"the handler did not finish within its timeout of {timeout:g} s")


async def within_timeout(coro: Any, timeout: float) -> Any:
    """Awaits coro, cancelled after timeout seconds: then TimeoutError (an error the coroutine
    raises itself, TimeoutError included, is raised as it is)."""
    task = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    finally:
        if not task.done():
            task.cancel()
    if task in done:
        return task.result()
    await asyncio.gather(task, return_exceptions=True)
    raise timeout_error(timeout)


def timed_out(job: Job, timeout: float, stopper: Interruptible) -> TimeoutError:
    """At a plain handler's timeout: raises TimeLimitExceeded in its thread, logs it, and returns
    the message's failure."""
    stopper.stop(TimeLimitExceeded)
    log.warning(
        "the handler of %s did not finish within its timeout of %g s; TimeLimitExceeded raised in its "
        "thread (it stops at its next Python bytecode; a blocking call runs on until it returns)",
        where_of(job),
        timeout,
        extra={"event": "timeout", "queue": job.queue, "key": job.key, "kind": job.kind},
    )
    return timeout_error(timeout)


def log_late_return(job: Job, timeout: float, error: BaseException | None) -> None:
    """The end of a plain handler's thread after its timeout: stopped there, or returned anyway."""
    if isinstance(error, TimeLimitExceeded):
        log.info(
            "the handler of %s stopped at its timeout of %g s",
            where_of(job),
            timeout,
            extra={"event": "timeout_stopped", "queue": job.queue, "key": job.key, "kind": job.kind},
        )
        return
    log.warning(
        "the handler of %s returned after its timeout of %g s (%s); that changes nothing",
        where_of(job),
        timeout,
        "succeeded" if error is None else describe_error(error)[:200],
        extra={"event": "late_return", "queue": job.queue, "key": job.key, "kind": job.kind},
    )


def _settled_late(job: Job, timeout: float, error: BaseException | None) -> None:
    log_late_return(job, timeout, error)


def handle_timed(
    op: Handle, run_coroutine: Callable[[Any, Job], Any], pool: RunnerPool
) -> BaseException | None:
    """Worker's handler thread: runs op's handler with its timeout; None, or what it raised.
    run_coroutine(coro, job) runs a coroutine on the handler thread's loop (cancelled by a cancel
    of the job). A plain handler runs on a runner of pool (runners.py): at its timeout its time
    limit is raised in that thread, which has STUCK_GRACE seconds to end before it is set aside
    as stuck."""
    timeout = float(op.timeout)
    job = op.job
    if inspect.iscoroutinefunction(op.fn):
        try:
            job.result = run_coroutine(within_timeout(op.fn(job), timeout), job)
        except BaseException as exc:
            return exc
        return None
    box: list[BaseException | None] = []
    lock = threading.Lock()
    finished = threading.Event()
    abandoned = False

    def settle(error: BaseException | None, result: Any) -> None:
        with lock:
            if error is None and not abandoned:
                job.result = result
            box.append(error)
            finished.set()
            late = abandoned
        if late:
            _settled_late(job, timeout, error)

    runner = pool.take()
    job.stopper = runner.stopper
    runner.submit(op.fn, job, settle)
    finished.wait(timeout)
    with lock:
        if box:
            pool.give_back(runner)
            return box[0]
    failure = timed_out(job, timeout, runner.stopper)
    finished.wait(STUCK_GRACE)
    with lock:
        stuck = not box
        if stuck:
            abandoned = runner.detached = True
    if stuck:
        pool.set_aside(runner, op.batch or [job])
    else:
        log_late_return(job, timeout, box[0])
        pool.give_back(runner)
    return failure


async def run_plain_async(
    pool: RunnerPool, fn: Callable[[Job], Any], job: Job, timeout: float | None = None
) -> tuple[BaseException | None, Any]:
    """AsyncWorker: fn(job) on a runner of pool, awaited on the loop: (what it raised, what it
    returned: an awaitable it returns is the caller's to await). With a timeout: as handle_timed,
    the failure TimeoutError (an awaitable returned is run on the runner's thread)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()
    lock = threading.Lock()
    abandoned = False

    def settle_on_loop(error: BaseException | None, result: Any) -> None:
        if not fut.done():
            fut.set_result((error, result))

    def settle(error: BaseException | None, result: Any) -> None:
        with lock:
            late = abandoned
        if late:
            _settled_late(job, float(timeout or 0), error)
            return
        try:
            loop.call_soon_threadsafe(settle_on_loop, error, result)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    runner = pool.take()
    job.stopper = runner.stopper
    runner.submit(fn, job, settle, awaits=timeout is not None)
    if timeout is None:
        try:
            outcome = await asyncio.shield(fut)
        except asyncio.CancelledError:  # the worker's forced stop: the thread is left to end
            with lock:
                abandoned = runner.detached = True
            raise
        pool.give_back(runner)
        return outcome
    done, _ = await asyncio.wait({fut}, timeout=timeout)
    if fut in done:
        pool.give_back(runner)
        return fut.result()
    failure = timed_out(job, timeout, runner.stopper)
    done, _ = await asyncio.wait({fut}, timeout=STUCK_GRACE)
    with lock:
        stuck = fut not in done and not fut.done()
        if stuck:
            abandoned = runner.detached = True
    if stuck:
        pool.set_aside(runner, [job])
    else:
        if not fut.done():
            await fut
        log_late_return(job, timeout, fut.result()[0])
        pool.give_back(runner)
    return failure, None


async def handle_timed_async(
    op: Handle, cancellable: Callable[[Job, Any], Awaitable[Any]], pool: RunnerPool
) -> BaseException | None:
    """AsyncWorker's handler task: handle_timed, awaited on the loop. cancellable(job, coro) awaits
    a coroutine as a task that a cancel of the job cancels."""
    timeout = float(op.timeout)
    job = op.job
    if inspect.iscoroutinefunction(op.fn):
        try:
            job.result = await cancellable(job, within_timeout(op.fn(job), timeout))
        except BaseException as exc:
            return exc
        return None
    error, result = await run_plain_async(pool, op.fn, job, timeout)
    if error is None:
        job.result = result
    return error
