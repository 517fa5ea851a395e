"""A worker held back by a concurrency limit its own messages fill takes a freed slot again in the
completer's flush: right after the commit that freed it, on the completer's connection, before the
reserve loop would notice the settle (Dispatch.refill_steps). Mechanism checks: which thread's
reserve started each next message, and what the settle told the reserve loop (Settles)."""

from __future__ import annotations

import threading

from pyqueue_sql import Worker
from pyqueue_sql.worker.model import Settles

from ..helpers import wait_for
from .test_worker import running
from .test_worker_at_the_bound import Gated

FALLBACK = 60.0
BOUND = 30.0


def test_a_flush_whose_slots_were_all_taken_again_is_no_settle_for_the_reserve_loop():
    settles = Settles()
    settles.deferred()
    settles.deferred()
    settles.ended(acked=2, taken=2)
    assert (settles.done, settles.count, settles.owed) == (0, 0, 0)
    settles.deferred()
    settles.deferred()
    settles.ended(acked=2, taken=1)  # one slot left free: the reserve loop may take it
    assert (settles.done, settles.count, settles.owed) == (1, 1, 0)
    settles.ended()  # a failure's settle, as before
    assert (settles.done, settles.count) == (2, 2)


def test_held_back_by_a_limit_a_freed_slot_is_taken_again_by_the_completers_flush(
    dsn, make_queue, monkeypatch
):
    queue = make_queue()
    queue.set_limit("noop", 2)
    keys = [f"k{i}" for i in range(10)]
    queue.push_many([dict(key=k, kind="noop", payload={}) for k in keys])
    handle = Gated(keys)
    gates, lock, now = handle.gates, handle.lock, handle.now
    started_by: dict[str, str] = {}  # key -> the thread whose reserve started it
    start_jobs = Worker._start_jobs

    def recorded(self, jobs):
        with lock:
            for job in jobs:
                started_by[job.key] = threading.current_thread().name
        return start_jobs(self, jobs)

    monkeypatch.setattr(Worker, "_start_jobs", recorded)

    # 4 handlers (and a prefetch) for a limit of 2: held back once the limit is full
    worker = Worker(dsn, concurrency=4, poll_fallback=FALLBACK)
    worker.add_handler(queue.name, handle)
    refilled = []
    with running(worker):
        wait_for(lambda: len(now) == 2, BOUND, "2 handlers running")
        # held back by the limit, or holding all it may (waiting for room: ReserveLoop.limit_room)
        wait_for(lambda: worker.state.settles.held or worker.state.settles.hurry, BOUND, "the limit full")
        for _ in range(len(keys) - 2):
            with lock:
                first = sorted(now)[0]
                before = set(started_by)
            gates[first].set()
            wait_for(lambda: len(started_by) > len(before) and len(now) == 2, BOUND, "a next message running")  # noqa: B023
            with lock:
                refilled += [started_by[k] for k in set(started_by) - before]
        for gate in gates.values():
            gate.set()
        wait_for(lambda: not now and len(started_by) == len(keys), BOUND, "every message handled")
    assert handle.most == 2
    # each freed slot taken again by the completer's reserve, not the reserve loop's (one of them
    # may meet the reserve loop's probe, after a held-back wait of HELD_MAX on a loaded machine)
    by_completer = [name for name in refilled if name == "pyqueue-completer"]
    assert len(by_completer) >= len(refilled) - 1, refilled


def test_quick_handlers_leave_the_refill_to_the_reserve_loop(dsn, make_queue, monkeypatch):
    # no-op handlers (REFILL_HANDLER_MIN): the reserve loop's reserve overlaps the completer's
    # commits, a refill would not; every message is started by the reserve loop's reserves
    queue = make_queue()
    queue.set_limit("noop", 8)
    queue.push_many([dict(key=f"k{i}", kind="noop", payload={}) for i in range(300)])
    lock = threading.Lock()
    started_by: list[str] = []
    done: list[str] = []
    start_jobs = Worker._start_jobs

    def recorded(self, jobs):
        with lock:
            started_by.extend(threading.current_thread().name for _ in jobs)
        return start_jobs(self, jobs)

    monkeypatch.setattr(Worker, "_start_jobs", recorded)
    worker = Worker(dsn, concurrency=16, poll_fallback=FALLBACK)
    worker.add_handler(queue.name, lambda job: done.append(job.key))
    with running(worker):
        wait_for(lambda: len(done) >= 300, BOUND, "every message handled")
    assert "pyqueue-completer" not in started_by
