"""Pickup of a push whose NOTIFY the throttle left out (pyqueue__notify: of the transactions that
would notify in one window, one does), against a real server.

The transaction that sends the window's wakeup may commit before one that skipped its own: the
worker's round then runs before the second commit, and no wakeup comes for it. After a round that
got fewer messages than it asked for, the worker waits for the next wakeup at most
DRAINED_RECHECK and reserves again: the second message starts then, not at the linger's re-check
or the poll fallback (both set to a minute here).
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from pyqueue_sql import Worker
from pyqueue_sql.worker import dispatch

from ..helpers import wait_for
from .test_worker import idle_event, running

LONG = 60.0  # the linger and the poll fallback: a pickup by either would take this long
RECHECK = 3.0  # DRAINED_RECHECK here: longer than the test's steps take on a loaded machine
BOUND = 15.0  # the second message starts within this of its commit (a quarter of LONG)
TRIES = 3


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")  # the NOTIFY throttle; MySQL has no wakeup to leave out
def test_a_push_whose_notify_was_left_out_starts_at_the_drained_recheck(dsn, queue, connect, monkeypatch):
    monkeypatch.setattr(dispatch, "DRAINED_RECHECK", RECHECK)
    queue.set_notify_window(3600)  # one window: the second transaction skips its NOTIFY
    started: dict[str, float] = {}
    release = threading.Event()

    def handle(job):
        started[job.key] = time.monotonic()
        if job.key.startswith("first"):
            release.wait(LONG)  # held: no settle of its own ends the worker's wait

    worker = Worker(dsn, concurrency=4, poll_fallback=LONG, linger=LONG)
    worker.add_handler(queue.name, handle)
    idle = idle_event(worker)
    left_out = []  # (seconds from the second's commit to its start) of each try that showed it
    with running(worker):
        assert idle.wait(30)
        for i in range(TRIES):  # until a left-out wakeup shows, a fresh pair of sessions each try
            first, second = connect(), connect()
            with contextlib.ExitStack() as one, contextlib.ExitStack() as two:
                one.enter_context(first.transaction())
                first.queue(queue.name).push(f"first{i}", "k", {})  # takes the window's wakeup
                two.enter_context(second.transaction())
                second.queue(queue.name).push(f"second{i}", "k", {})  # skips its NOTIFY
                one.close()  # the first commits: its wakeup; the second is not committed yet
                wait_for(lambda i=i: f"first{i}" in started, 30, "the first message")
                wakeups = worker.stats.wakeups
                time.sleep(0.2)  # the worker's round after the first's is over: it waits
                two.close()
                committed = time.monotonic()
            wait_for(lambda i=i: f"second{i}" in started, BOUND + 5, "the second message")
            assert started[f"second{i}"] - committed < BOUND, (started, committed, worker.stats)
            if worker.stats.wakeups == wakeups:  # no wakeup came for the second: the mechanism
                left_out.append(started[f"second{i}"] - committed)
                break
        release.set()
    assert left_out, f"no try of {TRIES} left the second push's wakeup out"
