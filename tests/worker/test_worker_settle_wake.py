"""The reserve loop's wait for the worker's own settles (ReserveLoop.settles_wait_steps: a limit its own
messages fill) ends when one ends, not at its next look: the threads' runner answers a
Sleep(settled=True) as soon as Settles.ended() sets its event. Mechanism checks: a sleep of 5 s that a
settle ends after 0.05 s returns well before its time; a plain Sleep does not. No database."""

from __future__ import annotations

import threading
import time

from pyqueue_sql import Worker
from pyqueue_sql.worker.steps import Sleep

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
