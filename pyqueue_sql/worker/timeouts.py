"""Handlers' time limits (add_handler(timeout=), a task's timeout=), for both runners: a message
whose handler is still running at its timeout fails with TimeoutError under its retry policy.

A coroutine handler is cancelled at the deadline (within_timeout). A plain (def) handler runs on a
thread of its own, stopped at the deadline by TimeLimitExceeded raised in that thread (at its next
Python bytecode: see interrupt.py), so the runner's handler thread or task goes on with the next
message and the worker keeps its concurrency; a late return is logged and changes nothing. Worker
runs handle_timed on a handler thread, AsyncWorker awaits handle_timed_async on its loop: the two
differ only in how they wait for the handler's thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from .interrupt import Interruptible, TimeLimitExceeded
from .model import Job, log, where_of
from .policy import describe_error
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
        "the handler of %s did not finish within its timeout of %g s; stopped in its thread (at its "
        "next Python bytecode: a blocking C call ends first)",
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


def start_plain(
    op: Handle, stopper: Interruptible, settle: Callable[[BaseException | None, Any], None]
) -> None:
    """Starts a plain handler on a thread of its own (not a pool's, whose threads it would keep),
    inside stopper so that its timeout can stop it; settle(error, result) is called on that
    thread when it ends. A handler that returns an awaitable has it run there to completion."""

    def target() -> None:
        error: BaseException | None = None
        result: Any = None
        try:
            result = stopper.run(op.fn, op.job)
            if inspect.isawaitable(result):
                result = asyncio.run(awaited(result))
        except BaseException as exc:
            error = exc
        settle(error, result)

    # in a copy of this context: the handler sees the job's span (pyqueue_sql.tracing) as current
    threading.Thread(
        target=contextvars.copy_context().run,
        args=(target,),
        name=f"pyqueue-timed-{op.job.key}"[:60],
        daemon=True,
    ).start()


def handle_timed(op: Handle, run_coroutine: Callable[[Any, Job], Any]) -> BaseException | None:
    """Worker's handler thread: runs op's handler with its timeout; None, or what it raised.
    run_coroutine(coro, job) runs a coroutine on the handler thread's loop (cancelled by a cancel
    of the job)."""
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
    stopper = Interruptible()

    def settle(error: BaseException | None, result: Any) -> None:
        with lock:
            if error is None and not abandoned:
                job.result = result
            box.append(error)
            finished.set()
            late = abandoned
        if late:
            log_late_return(job, timeout, error)

    start_plain(op, stopper, settle)
    finished.wait(timeout)
    with lock:
        if box:
            return box[0]
        abandoned = True
    return timed_out(job, timeout, stopper)


async def handle_timed_async(
    op: Handle, cancellable: Callable[[Job, Any], Awaitable[Any]]
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
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()
    stopper = Interruptible()

    def settle_on_loop(error: BaseException | None, result: Any) -> None:
        if not fut.done():
            if error is None:
                job.result = result
            fut.set_result(error)
        else:  # cancelled at the deadline: the message was failed meanwhile
            log_late_return(job, timeout, error)

    def settle(error: BaseException | None, result: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle_on_loop, error, result)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    start_plain(op, stopper, settle)
    done, _ = await asyncio.wait({fut}, timeout=timeout)
    if fut in done:
        return fut.result()
    fut.cancel()
    return timed_out(job, timeout, stopper)
