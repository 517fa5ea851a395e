"""The reserve loop's wait for the worker's own settles (ReserveLoop.settles_wait_steps: a limit its own
messages fill) ends when one ends, not at its next look: the threads' runner answers a
Sleep(settled=True) as soon as Settles.ended() sets its event, AsyncWorker's as soon as Settles.on_end
sets its loop's (from the loop's thread or another). Mechanism checks: a sleep of 5 s that a settle ends
after 0.05 s returns well before its time; a plain Sleep does not (no database); and an AsyncWorker that a
limit its own messages fill holds back has waits for their settles that end before their time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pyqueue_sql import Worker
from pyqueue_sql.aio.worker import AsyncWorker
from pyqueue_sql.worker.steps import Sleep

from ..helpers import wait_for
from .test_worker import running

SLEEP = 5.0  # far beyond the bound below: a sleep a settle did not end takes all of it
BOUND = 2.0


def worker() -> Worker:
    return Worker("postgresql://nobody@127.0.0.1:1/none", register=False)


def slept(w: Worker, op: Sleep) -> tuple[bool, float]:
    started = time.monotonic()
    timer = threading.Timer(0.05, w.state.settles.ended)
    timer.start()
    try:
        return w._sleep(op, None), time.monotonic() - started
    finally:
        timer.cancel()


def test_a_wait_for_its_own_settles_ends_when_one_ends():
    w = worker()
    stopped, took = slept(w, Sleep(SLEEP, settled=True))
    assert not stopped and took < BOUND, took
    assert w.state.settles.done == 1


def test_a_settle_before_the_wait_ends_it_at_once_and_only_once():
    w = worker()
    w.state.settles.ended()  # ended before the wait began: the event is set
    started = time.monotonic()
    assert not w._sleep(Sleep(SLEEP, settled=True), None)
    assert time.monotonic() - started < BOUND
    # that settle was taken: the next wait lasts its time (a short one here)
    started = time.monotonic()
    w._sleep(Sleep(0.2, settled=True), None)
    assert time.monotonic() - started >= 0.15


def test_the_stop_still_ends_a_settles_wait_as_stopped():
    w = worker()
    w.state.stopping.set()
    w.state.settles.ended()
    assert w._sleep(Sleep(SLEEP, settled=True), None) is True


def test_a_plain_sleep_is_not_ended_by_a_settle():
    w = worker()
    stopped, took = slept(w, Sleep(0.5))
    assert not stopped and took >= 0.45, took


# -- AsyncWorker: its runner answers a Sleep(settled=True) on an asyncio event that Settles.on_end
# sets, at once on the loop's thread (where its handler tasks and completer settle), through the
# loop from any other thread. Both dialects: the worker of each is made (no server is reached).

DSNS = {"postgresql": "postgresql://nobody@127.0.0.1:1/none", "mysql": "mysql://nobody@127.0.0.1:1/none"}
dialects = pytest.mark.parametrize("dialect", sorted(DSNS))


def async_worker(dialect: str) -> AsyncWorker:
    w = AsyncWorker(DSNS[dialect], register=False)
    w.events.begin()  # the run's first step: the loop's events (called on the running loop)
    return w


async def async_slept(
    w: AsyncWorker, op: Sleep, end: Callable[[Callable[[], None]], None]
) -> tuple[bool, float]:
    """Runs the sleep while end(settles.ended) ends a settle in 0.05 s; (stopped, seconds it took)."""
    started = time.monotonic()
    end(w.state.settles.ended)
    return await w._sleep(op, None), time.monotonic() - started


def on_the_loop(ended: Callable[[], None]) -> None:
    asyncio.get_running_loop().call_later(0.05, ended)


def on_a_thread(ended: Callable[[], None]) -> None:
    timer = threading.Timer(0.05, ended)
    timer.daemon = True
    timer.start()


@dialects
@pytest.mark.parametrize("end", [on_the_loop, on_a_thread], ids=["on the loop", "on a thread"])
def test_an_async_wait_for_its_own_settles_ends_when_one_ends(dialect, end):
    async def main():
        w = async_worker(dialect)
        stopped, took = await async_slept(w, Sleep(SLEEP, settled=True), end)
        assert not stopped and took < BOUND, took
        assert w.state.settles.done == 1

    asyncio.run(main())


@dialects
def test_an_async_settle_before_the_wait_ends_it_at_once_and_only_once(dialect):
    async def main():
        w = async_worker(dialect)
        w.state.settles.ended()
        started = time.monotonic()
        assert not await w._sleep(Sleep(SLEEP, settled=True), None)
        assert time.monotonic() - started < BOUND
        started = time.monotonic()
        await w._sleep(Sleep(0.2, settled=True), None)
        assert time.monotonic() - started >= 0.15

    asyncio.run(main())


@dialects
def test_the_stop_ends_an_async_settles_wait_as_stopped(dialect):
    # stop() from another thread: the state's event, then the loop's (events.wake)
    async def main():
        w = async_worker(dialect)

        def stop():
            w.state.stopping.set()
            w.events.wake()

        timer = threading.Timer(0.05, stop)
        timer.start()
        started = time.monotonic()
        assert await w._sleep(Sleep(SLEEP, settled=True), None) is True
        assert time.monotonic() - started < BOUND
        timer.join()

    asyncio.run(main())


@dialects
def test_a_plain_async_sleep_is_not_ended_by_a_settle(dialect):
    async def main():
        w = async_worker(dialect)
        stopped, took = await async_slept(w, Sleep(0.5), on_the_loop)
        assert not stopped and took >= 0.45, took

    asyncio.run(main())


def test_an_async_worker_held_back_by_its_own_messages_reserves_as_one_settles(dsn, make_queue, monkeypatch):
    # A limit of 2 that its own messages fill (4 handlers of 50 ms): the reserve loop waits for
    # their settles in slices (Sleep(settled=True)), made 1 s long here (HELD_SLICE; the LISTEN
    # connection read no more often than a minute, HELD_LISTEN, so that every slice is a Sleep) and
    # cut to what is left of the wait (HELD_MAX, 0.5 s). Counted: the slices in which a settle
    # ended, and those of them that ended before half their time. A slice waited to its end (as
    # each did when the asyncio runner waited on the stop alone) is never shorter than its time;
    # one that a settle wakes ends within milliseconds of it.
    from pyqueue_sql.worker import dispatch

    monkeypatch.setattr(dispatch, "HELD_SLICE", 1.0)
    monkeypatch.setattr(dispatch, "HELD_LISTEN", 60.0)
    queue = make_queue()
    queue.set_limit("noop", 2)
    messages = 20
    queue.push_many([dict(key=f"k{i}", kind="noop", payload={}) for i in range(messages)])
    done = []
    worker = AsyncWorker(dsn, concurrency=4, poll_fallback=60.0)

    @worker.handler(queue.name, "noop")
    async def handle(job):
        await asyncio.sleep(0.05)
        done.append(job.key)

    # the runner's operations go through its table (dispatcher): the reserve loop's Sleep steps
    # are counted on their way to it
    slices: list[tuple[float, float]] = []  # (seconds asked, seconds taken) of those a settle ended in
    execute = worker._execute

    async def counted(op: Sleep, conn: Any) -> bool:
        seen, started = worker.state.settles.done, time.monotonic()
        stopped = await execute(op, conn)
        if not stopped and worker.state.settles.done != seen:
            slices.append((op.seconds, time.monotonic() - started))
        return stopped

    worker._execute = lambda op, conn: (
        counted(op, conn) if type(op) is Sleep and op.settled else execute(op, conn)
    )
    with running(worker):
        wait_for(lambda: len(done) >= messages, 120, f"{messages} messages handled")
    woken = [s for s in slices if s[1] < s[0] / 2]
    assert slices, "held back by its own messages, it waited for their settles"
    assert len(woken) * 2 >= len(slices), f"{len(woken)} of {len(slices)} woken by the settle: {slices}"
