"""A worker whose queue's concurrency limit or rate binds runs at the bound: the limit's slots are
all in use whenever messages wait, and a freed slot or rate unit is taken again promptly.

Mechanism checks, not rates: the handlers block on events the test sets, so how many run at once
is decided by the worker and the limit alone, sampled with none of them ending; a refill is
bounded far below the poll fallback (60 s), the wait of a worker that missed its own settle or
the rate's next free unit. The rate is checked on the deliveries' times (each reservation's lease
start, which the rate's units record: docs/contract/15_limits.md, Rates), read by the handler
while the message is reserved.
"""

from __future__ import annotations

import bisect
import datetime as dt
import threading
import time

from pyqueue_sql import Worker

from ..helpers import wait_for
from .test_worker import running

FALLBACK = 60.0  # the poll fallback: a refill that waited for it fails every bound below
REFILL = 5.0  # a freed slot or unit taken again within this (a few round trips on a quiet machine)
BOUND = 30.0
LEASE = 30.0


class Gated:
    """A handler whose job blocks until the test sets its key's gate: the keys whose handlers run
    now, when each started, and the most that ran at once."""

    def __init__(self, keys: list[str]) -> None:
        self.gates = {k: threading.Event() for k in keys}
        self.lock = threading.Lock()
        self.now: set[str] = set()
        self.started: dict[str, float] = {}
        self.most = 0

    def __call__(self, job) -> None:
        with self.lock:
            self.now.add(job.key)
            self.started[job.key] = time.monotonic()
            self.most = max(self.most, len(self.now))
        try:
            assert self.gates[job.key].wait(BOUND), "never released"
        finally:
            with self.lock:
                self.now.discard(job.key)


def test_a_limit_of_2_keeps_exactly_2_running_and_refills_a_freed_slot(dsn, make_queue):
    queue = make_queue()
    queue.set_limit("noop", 2)
    keys = [f"k{i}" for i in range(8)]
    queue.push_many([dict(key=k, kind="noop", payload={}) for k in keys])
    handle = Gated(keys)
    gates, lock, now, started = handle.gates, handle.lock, handle.now, handle.started

    # 4 handlers (and a prefetch) for a limit of 2: the worker would run 4 without it
    worker = Worker(dsn, concurrency=4, poll_fallback=FALLBACK)
    worker.add_handler(queue.name, handle)
    refills = []
    with running(worker):
        wait_for(lambda: len(now) == 2, BOUND, "2 handlers running")
        for _ in range(len(keys) - 2):
            # none ends meanwhile: exactly 2 run in every sample (a third would break the limit,
            # fewer would leave a slot unused while messages wait)
            for _ in range(50):
                with lock:
                    assert len(now) == 2, sorted(now)
                time.sleep(0.004)
            with lock:
                first = min(now, key=started.__getitem__)
                before = set(started)
            freed = time.monotonic()
            gates[first].set()
            wait_for(lambda: set(started) - before, BOUND, "a third message started")  # noqa: B023
            refills.append(started[(set(started) - before).pop()] - freed)
        wait_for(lambda: len(now) == 2, BOUND, "the last 2 running")
        for gate in gates.values():
            gate.set()
        wait_for(lambda: not now and len(started) == len(keys), BOUND, "every message handled")
    assert handle.most == 2
    # each freed slot went to the next message within REFILL (never the poll fallback)
    assert max(refills) < REFILL, refills


def test_a_binding_rate_is_never_exceeded_and_each_freed_unit_is_taken_again(dsn, db, make_queue):
    # 5 per 0.5 s, 30 messages, 4 handlers that take no time: the rate binds from the first reserve
    n, per, total = 5, 0.5, 30
    queue = make_queue()
    queue.set_rate(None, n, per)
    queue.push_many([dict(key=f"k{i}", kind="noop", payload={}) for i in range(total)])
    lock = threading.Lock()
    delivered: list[float] = []  # each reservation's lease start (server clock), read while held

    def handle(job):
        with lock:  # one connection for the handlers' reads
            info = queue.message(job.key, job.kind)
            delivered.append((info.scheduled_at - dt.timedelta(seconds=LEASE)).timestamp())

    worker = Worker(dsn, concurrency=4, poll_fallback=FALLBACK, lease=LEASE)
    worker.add_handler(queue.name, handle)
    with running(worker):
        wait_for(lambda: len(delivered) == total, BOUND, "every message handled")
    t = sorted(delivered)
    # never more than n in any window of per (a window that holds the most starts at a delivery)
    most = max(bisect.bisect_left(t, x + per) - i for i, x in enumerate(t))
    assert most <= n, (most, t)
    # at the bound: delivery i + n waited for the unit delivery i used (free at t[i] + per), and
    # no more than REFILL after it came free
    late = [round(t[i + n] - (t[i] + per), 3) for i in range(total - n)]
    assert max(late) < REFILL, late
