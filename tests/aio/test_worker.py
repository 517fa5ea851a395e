"""AsyncWorker (pyqueue_sql.aio.worker) against real servers: async handlers as asyncio tasks.

The worker runs its own event loop on a thread (tests.worker.test_worker.running), so the test
drives it from outside as it does the threaded Worker. The stops by signal, the SIGKILLed worker
processes, the connections killed by the server and the server restart run for AsyncWorker too:
tests/worker/test_worker.py and tests/faults/test_faults.py parametrize them by runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading

import pytest

from pyqueue_sql import RetryPolicy
from pyqueue_sql.aio import connect
from pyqueue_sql.aio.worker import AsyncWorker

from ..helpers import wait_for
from ..worker.test_worker import assert_retried_on_time, fails_once_then_succeeds, running


def _drained(queue) -> bool:
    s = queue.stats()
    return s.ready + s.reserved == 0


def test_async_handlers_process_every_message_once(dsn, queue):
    seen: list[str] = []
    worker = AsyncWorker(dsn, concurrency=8, poll_fallback=0.5, commit_reserve=True)

    @worker.handler(queue.name)
    async def handle(job):
        await asyncio.sleep(0)
        seen.append(job.key)

    queue.push_many([(f"k{i:02}", "k", {"i": i}) for i in range(40)])
    with running(worker):
        wait_for(lambda: len(seen) == 40 and _drained(queue), 30, "40 messages")
    assert sorted(seen) == [f"k{i:02}" for i in range(40)]
    assert worker.stats.succeeded == 40 and worker.stats.failed == 0
    # one queue: the commits reserved the next messages in the same call
    assert worker.stats.commit_reserves > 0
    assert worker.status().state == "stopped" and worker.unfinished == []


def test_handlers_of_other_kinds_are_left_alone_and_plain_functions_run_on_threads(dsn, queue):
    threads: set[str] = set()
    worker = AsyncWorker(dsn, concurrency=2, poll_fallback=0.5)
    worker.add_handler(queue.name, lambda job: threads.add(threading.current_thread().name), "plain")
    queue.push_many([(f"p{i}", "plain", {}) for i in range(4)])
    queue.push("ignored", "other", {})  # no handler for this kind: never reserved
    with running(worker):
        wait_for(lambda: worker.stats.succeeded == 4, 30, "the plain handlers")
    assert threads and not threads & {"MainThread"}
    s = queue.stats()
    assert (s.ready, s.reserved) == (1, 0)


def test_failures_retry_with_the_policy_then_dead_letter(dsn, make_queue):
    dlq = make_queue()
    queue = make_queue(max_attempts=3, dead_letter_queue=dlq.name)
    attempts: list[int] = []
    worker = AsyncWorker(dsn, poll_fallback=0.2)

    @worker.handler(queue.name, retry=RetryPolicy(base=0.2, factor=1.0, jitter=0.0))
    async def fail(job):
        attempts.append(job.attempts)
        raise ValueError("no such address")

    queue.push("poison", "k", {})
    with running(worker):
        wait_for(lambda: dlq.stats().ready == 1, 30, "the dead letter")
    assert attempts == [1, 2, 3]
    assert worker.stats.failed == 3 and worker.stats.succeeded == 0
    [dead] = dlq.dead_letters()
    assert (dead.key, dead.from_queue, dead.attempts, dead.last_error) == (
        "poison",
        queue.name,
        3,
        "ValueError: no such address",
    )


def test_a_failure_is_retried_when_due_while_the_dispatcher_already_waits(dsn, queue):
    """As for Worker: the dispatcher task, already waiting when a handler task fails its
    message with a 1 s delay (no wakeup is sent), retries it when due, not at the 30 s fallback."""
    attempts: list = []
    worker = AsyncWorker(dsn, concurrency=4, poll_fallback=30.0)
    handle = fails_once_then_succeeds(attempts)

    @worker.handler(queue.name, retry=RetryPolicy(base=1.0, jitter=0))
    async def fail_once(job):
        handle(job)

    queue.push("s3", "welcome", {"fail": True})
    with running(worker):
        wait_for(
            lambda: worker.stats.succeeded == 1, 20, "the retry due after 1 s (the poll fallback is 30 s)"
        )
    assert_retried_on_time(attempts, 1.0)


def test_no_more_than_concurrency_handlers_run_at_once(dsn, queue):
    """Each handler waits until `concurrency` handlers run together (so the limit is reached)
    and the peak never passes it, with three times as many messages ready."""
    running_now = 0
    peak = 0
    worker = AsyncWorker(dsn, concurrency=4, poll_fallback=0.5)

    @worker.handler(queue.name)
    async def handle(job):
        nonlocal running_now, peak
        running_now += 1
        peak = max(peak, running_now)
        try:
            for _ in range(500):  # up to 5 s for the others to start
                if peak >= 4:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
        finally:
            running_now -= 1

    queue.push_many([(f"k{i}", "k", {}) for i in range(12)])
    with running(worker):
        wait_for(lambda: worker.stats.succeeded == 12, 60, "12 messages")
    assert peak == 4


def test_successes_that_finish_together_are_committed_together(dsn, queue):
    """Eight handlers finish at once on one shared connection: their commits go in a few batch
    calls (each with the next messages reserved), not one call per message; each message once."""
    started: list[str] = []
    seen: list[str] = []
    worker = AsyncWorker(
        dsn, concurrency=8, connections=1, poll_fallback=0.5, register=False, commit_reserve=True
    )

    rounds: dict[int, asyncio.Event] = {}

    @worker.handler(queue.name)
    async def handle(job):
        # The eight of a round wake from one event in one turn of the loop and end there: their
        # completions are all queued before the connection's next call (a poll every 10 ms let them
        # end up to 10 ms apart, and some went alone, as the worker rightly does for a lone one).
        started.append(job.key)
        round_ = (len(started) - 1) // 8
        event = rounds.setdefault(round_, asyncio.Event())
        if len(started) == 8 * (round_ + 1):
            event.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(event.wait(), 5)
        seen.append(job.key)

    messages = 40
    queue.push_many([(f"k{i:02}", "k", {}) for i in range(messages)])
    with running(worker):
        wait_for(lambda: len(seen) == messages and _drained(queue), 60, "40 messages")
    assert sorted(seen) == [f"k{i:02}" for i in range(messages)]
    assert worker.stats.succeeded == messages and worker.stats.lost == 0
    assert worker.stats.commit_reserves > 0
    # one call per success at least, had they been committed one by one (plus the reserves)
    assert worker.stats.db_calls < messages


def test_a_lapsed_reservation_among_successes_committed_together_is_counted_lost(dsn, queue):
    """Eight handlers finish at once (one batch commit); one of them had its reservation given back
    meanwhile: the batch commits the other seven and the counters say 7 succeeded and 1 lost."""
    started: list[str] = []
    all_started = asyncio.Event()
    worker = AsyncWorker(
        dsn, concurrency=8, connections=1, poll_fallback=0.5, register=False, commit_reserve=False
    )

    @worker.handler(queue.name)
    async def handle(job):
        if job.key == "k0":
            async with await connect(dsn) as other:
                assert await other.queue(queue.name).rollback(job.reservation, delay=3600)
        started.append(job.key)
        if len(started) == 8:
            all_started.set()
        await asyncio.wait_for(all_started.wait(), 10)

    queue.push_many([(f"k{i}", "k", {}) for i in range(8)])
    with running(worker):
        wait_for(lambda: worker.stats.succeeded + worker.stats.lost == 8, 60, "8 commits")
    assert (worker.stats.succeeded, worker.stats.lost) == (7, 1)
    s = queue.stats()
    assert (s.ready, s.delayed, s.reserved) == (0, 1, 0), "the given-back message waits for its delay"


def test_stop_lets_running_handlers_finish_and_leaves_the_rest_ready(dsn, queue):
    started: list[str] = []
    finished: list[str] = []
    worker = AsyncWorker(dsn, concurrency=2, poll_fallback=0.5, shutdown_timeout=30)

    @worker.handler(queue.name)
    async def slow(job):
        started.append(job.key)
        await asyncio.sleep(1.0)
        finished.append(job.key)

    queue.push_many([(f"k{i}", "k", {}) for i in range(10)])
    with running(worker):
        wait_for(lambda: len(started) >= 2, 15, "two handlers")
        worker.stop()
        wait_for(worker.stopped.is_set, 30, "the stop")
    assert sorted(started) == sorted(finished), "a running handler was cut short"
    assert worker.unfinished == []
    s = queue.stats()
    assert s.reserved == 0 and s.ready == 10 - len(finished)


def test_a_forced_stop_abandons_running_handlers_and_hands_their_messages_back(dsn, queue):
    cancelled = threading.Event()
    worker = AsyncWorker(dsn, concurrency=1, poll_fallback=0.5, lease=30)

    @worker.handler(queue.name)
    async def forever(job):
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    queue.push("stuck", "k", {})
    with running(worker):
        wait_for(lambda: len(worker.status().running) == 1, 15, "the handler")
        worker.stop(force=True)
        wait_for(worker.stopped.is_set, 30, "the forced stop")
    assert cancelled.is_set()
    assert worker.unfinished == [f"{queue.name}/stuck/k"]
    s = queue.stats()
    assert (s.reserved, s.ready) == (0, 1), "an abandoned message is handed back at the stop"


_SET_BY = contextvars.ContextVar("set_by", default=None)


def test_a_handler_task_runs_each_message_in_a_context_of_its_own_and_a_cancel_stays_with_its_message(
    dsn, queue
):
    """A handler task awaits the coroutine of each message it runs itself (no task a message): a
    contextvar one handler sets is not seen by the next message's, and the cancel of a message
    (which cancels the handler task while it awaits that coroutine) is not left on the task for
    the next one (Task.cancelling() back to 0, its awaits not cancelled)."""
    slow_started = threading.Event()
    ran: list[tuple] = []
    worker = AsyncWorker(dsn, concurrency=1, poll_fallback=0.5, lease=30)

    @worker.handler(queue.name, "slow")
    async def slow(job):
        _SET_BY.set(job.key)
        ran.append((job.key, id(asyncio.current_task())))
        slow_started.set()
        await asyncio.sleep(60)

    @worker.handler(queue.name, "quick")
    async def quick(job):
        task = asyncio.current_task()
        cancelling = task.cancelling() if hasattr(task, "cancelling") else 0  # Python 3.11+
        seen = _SET_BY.get()
        await asyncio.sleep(0.05)  # a cancel left on the task would land here
        ran.append((job.key, id(task), seen, cancelling))

    # w0 alone first (no prefetch before a handler has finished), then the rest in one reserve:
    # the one handler task runs w1, slow, then n1 and n2 that wait for it meanwhile
    queue.push("w0", "quick", {})
    queue.push("w1", "quick", {})
    queue.push("slow", "slow", {})
    queue.push_many([("n1", "quick", {}), ("n2", "quick", {})])
    with running(worker):
        assert slow_started.wait(15)
        assert queue.cancel("slow", "slow") == "requested"
        wait_for(lambda: len(ran) == 5 and _drained(queue), 15, "the cancel and the rest")
    assert worker.stats.cancelled == 1 and worker.stats.succeeded == 4
    by_key = {r[0]: r for r in ran}
    assert by_key["n1"][1] == by_key["slow"][1], "n1 ran in the cancelled message's handler task"
    assert by_key["n1"][2:] == (None, 0) and by_key["n2"][2:] == (None, 0), ran


def test_registers_while_running_and_deregisters_on_stop(dsn, db, queue):
    worker = AsyncWorker(dsn, name="aio-registry-test", poll_fallback=0.5)
    worker.add_handler(queue.name, lambda job: None)
    with running(worker):
        assert worker.registered.wait(30)
        mine = [w for w in db.workers() if w.name == "aio-registry-test"]
        assert [w.worker_id for w in mine] == [worker.registration.worker_id]
        queue.push("k", "k", {})
        wait_for(lambda: worker.stats.succeeded == 1, 30, "the message")
    assert [w for w in db.workers() if w.name == "aio-registry-test"] == []


def test_async_worker_refuses_bad_settings(dsn):
    from pyqueue_sql.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError):
        AsyncWorker(dsn, concurrency=0)
    with pytest.raises(InvalidArgumentError):
        AsyncWorker(dsn, connections=0)
    with pytest.raises(InvalidArgumentError):
        asyncio.run(AsyncWorker(dsn).run(install_signals=False))  # no handlers
