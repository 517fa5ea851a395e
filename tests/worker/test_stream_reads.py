"""Under a steady stream of pushes, the worker does not read the next scheduled_at once a round.

Each round of a stream gets fewer messages than it asks for, and an empty round follows each one;
both once read queue_next_scheduled_at (a round trip before each wait). It is read at most once a
linger while nothing is due: counted here, a mechanism the machine's load does not move.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid

from pyqueue_sql import Worker
from pyqueue_sql.worker.steps import RetriedCall

from ..helpers import wait_for
from .test_worker import running

PUSHES = 150


def test_a_stream_does_not_read_the_next_scheduled_at_each_round(dsn, db, monkeypatch):
    queue = db.queue(f"t.{uuid.uuid4().hex[:12]}").create()
    calls: collections.Counter = collections.Counter()
    call = RetriedCall.__call__

    def counted(self, target):
        calls[self.method] += 1
        return call(self, target)

    monkeypatch.setattr(RetriedCall, "__call__", counted)
    done = []
    lock = threading.Lock()

    def handle(job):
        with lock:
            done.append(job.key)

    worker = Worker(dsn, concurrency=16, register=False)
    worker.add_handler(queue.name, handle)
    with running(worker):
        wait_for(lambda: worker.stats.reserved == 0 and calls["next_scheduled_at"] > 0, 30, "the worker idle")
        before, started = calls["next_scheduled_at"], time.monotonic()
        for i in range(PUSHES):
            queue.push(f"k{i}", "noop", {})
            time.sleep(0.005)
        wait_for(lambda: len(done) >= PUSHES, 30, f"{PUSHES} jobs handled")
        reads, took = calls["next_scheduled_at"] - before, time.monotonic() - started
    # Each round of a stream once read it: about as many reads as reserves (rounds). With LISTEN it
    # is read at most once a linger after rounds that take messages, and after an empty round that
    # follows a settle of its own or a read that found one due (either may be a limit holding the
    # rest back): a fifth to a third of the rounds, whatever the load. A long poll (MySQL) reads it
    # after an empty round that took nothing before it: about 0.3 a push.
    bound = 0.5 * calls["reserve"] if worker.use_listen else 0.6 * PUSHES
    assert reads <= bound, (reads, took, dict(calls))
