"""A worker held back by a concurrency limit, a rate or FIFO groups keeps reserving while it has a
free handler and messages are ready, and never waits for its poll fallback for that.

Each worker here has a poll fallback of 60 s, far beyond every bound: a worker that waited for it
even once (as one held back by a limit did after each fill of the limit's slots, with every
handler free) fails the bound by a wide margin, whatever the machine's load. The bounds are
mechanism checks, not timings: a drain of 500 no-op messages takes well under a second.
"""

from __future__ import annotations

import threading
import time

import pytest

from pyqueue_sql import Worker

from ..helpers import wait_for
from .test_worker import running

FALLBACK = 60.0  # the poll fallback: a worker that waits for it once fails every bound below
BOUND = 30.0  # generous: the drain needs well under a second on a quiet machine
MESSAGES = 500


def drain(dsn, queue, sleep: float = 0.0, seen=None, **push) -> tuple[float, Worker]:
    """Pushes MESSAGES no-op messages (each handler sleeps `sleep` s), then runs a worker of 16
    handlers until each was handled (or BOUND passed); (the seconds it took, the worker). seen(),
    when given, is called as the last one is handled, before the worker stops."""
    groups = push.pop("groups", None)
    queue.push_many(
        [
            dict(key=f"k{i}", kind="noop", payload={}, **({"group": f"g{i % groups}"} if groups else {}))
            for i in range(MESSAGES)
        ]
    )
    done = []
    lock = threading.Lock()

    def handle(job):
        time.sleep(sleep)
        with lock:
            done.append(job.key)

    worker = Worker(dsn, concurrency=16, poll_fallback=FALLBACK)
    worker.add_handler(queue.name, handle)
    started = time.monotonic()
    with running(worker):
        wait_for(lambda: len(done) >= MESSAGES, BOUND, f"{MESSAGES} messages handled")
        took = time.monotonic() - started
        if seen is not None:
            seen()
    assert sorted(set(done)) == sorted(f"k{i}" for i in range(MESSAGES))
    return took, worker


@pytest.mark.slow  # MariaDB's limited reserve takes a message at a time: seconds on a loaded machine
def test_a_limit_that_its_own_messages_fill_never_waits_for_the_poll_fallback(dsn, make_queue):
    # 16 handlers and a prefetch: the worker holds more than the limit's 64 slots allow, so each
    # reserve fills the limit; its own settles free the slots, and no wakeup says so
    queue = make_queue()
    queue.set_limit("noop", 64)
    drain(dsn, queue)
    assert queue.stats().ready == 0


@pytest.mark.parametrize("sleep", [0.0, 0.003], ids=["noop", "refilled"])
def test_a_limit_its_handlers_cannot_fill_never_holds_the_worker_back(dsn, make_queue, monkeypatch, sleep):
    # refilled: handlers of 3 ms (past REFILL_HANDLER_MIN), so that the completer's flush reserves
    # the slots it freed (refill_steps) while the reserve loop reserves too, two asks at once
    # 16 handlers and a prefetch under a limit of 64: the worker keeps what it holds of the kind (its
    # messages in hand and the successes awaiting their acknowledgement) within the 64, so each
    # reserve asks for no more than the slots its own holdings leave free and gets all it asks for.
    # None finds the limit full (which held the worker back, a round at a time, waiting for its own
    # acknowledgements) or reads past the messages the limit holds back. Counted: each reserve's
    # asked and got, and the worker's starts of a held-back state.
    from pyqueue_sql.worker.dispatch import HeldBack, ReserveLoop

    reserves = []
    reserve = ReserveLoop.reserve_steps

    def counted(self, route, n):
        got = yield from reserve(self, route, n)
        reserves.append((n, got))
        return got

    starts = []
    start = HeldBack.start

    def started(self):
        starts.append(self.on)
        start(self)

    monkeypatch.setattr(ReserveLoop, "reserve_steps", counted)
    monkeypatch.setattr(HeldBack, "start", started)
    queue = make_queue()
    queue.set_limit("noop", 64)
    drain(dsn, queue, sleep=sleep)
    assert reserves and max(n for n, _ in reserves) <= 64, reserves
    # got fewer than it asked for, but some: only in the backlog's tail, where the reserve loop's and
    # the completer's refill (two reserves at once) may share the last messages; each is left with
    # no more than another reserve under way asks for (64 at most). A limit found full, or the two
    # asking together for more than its slots, gets fewer with hundreds left.
    taken = 0
    for asked, got in reserves:
        taken += got
        assert not 0 < got < asked or MESSAGES - taken <= 64, (asked, got, taken, reserves)
    assert starts == [], reserves


def test_a_queue_wide_rate_above_the_drain_never_waits_for_the_poll_fallback(dsn, make_queue):
    queue = make_queue()
    queue.set_rate(None, 10000, 0.1)
    drain(dsn, queue)


def test_fifo_groups_never_wait_for_the_poll_fallback(dsn, make_queue):
    # 200 groups of at most 8 in flight: each group's next messages become ready as its earlier
    # ones settle
    queue = make_queue()
    queue.set_group_limit(None, 8)
    drain(dsn, queue, groups=200)


def test_a_limit_held_by_another_worker_is_taken_once_freed_without_the_poll_fallback(db, dsn, make_queue):
    # the limit's only slot is held by a reservation of another client: the worker finds the
    # messages ready and none it may take (held back); once that client commits, it takes them
    queue = make_queue()
    queue.set_limit("noop", 1)
    queue.push_many([dict(key=f"k{i}", kind="noop", payload={}) for i in range(5)])
    [held] = queue.reserve(n=1, timeout=120)
    done = []
    worker = Worker(dsn, concurrency=4, poll_fallback=FALLBACK)
    worker.add_handler(queue.name, lambda job: done.append(job.key))
    with running(worker):
        time.sleep(1.0)  # the worker is held back by now
        assert done == []
        freed = time.monotonic()
        queue.commit(held)
        wait_for(lambda: len(done) == 4, BOUND, "the other 4 messages handled")
        # one at a time (the limit's one slot), each taken once the last settled: well within
        # the held-back wait's longest (0.5 s) each, and no poll fallback
        assert time.monotonic() - freed < BOUND
    assert worker.stats.db_calls < 400, "held back, it reserves again only after a while"


@pytest.mark.slow  # as above
def test_held_back_rounds_ask_only_for_what_settled(dsn, make_queue):
    # Held back by a limit its own messages fill, a round asks for as many as settled since the
    # last one: a reserve that asked for more would read past every message the limit holds back.
    # Counted: the worker's reserves against the messages it took.
    queue = make_queue()
    queue.set_limit("noop", 64)
    _, worker = drain(dsn, queue)
    stats = worker.stats
    # each round of the drain takes about what a flush of acknowledgements freed; the worker's
    # calls are its reserves, its acknowledgements and a few reads: never one per message
    assert stats.db_calls < MESSAGES / 3, stats


@pytest.mark.only_dialect("postgresql")  # the dialect with LISTEN
def test_a_held_back_wait_for_its_own_settles_reads_the_listen_connection_seldom(
    dsn, make_queue, monkeypatch
):
    # Held back by a limit its own messages fill, the worker waits for their settles, looked at
    # every HELD_SLICE (2 ms); its LISTEN connection is read only every HELD_LISTEN (25 ms), not at
    # each look (that read took about half the worker's CPU). Handlers of 10 ms make each wait
    # long enough for several looks. Counted: the reads of the LISTEN connection until the last
    # message was handled, against what HELD_LISTEN allows in that time (and a few other waits');
    # a read at each look makes about five a wait, hundreds in all.
    from pyqueue_sql.dialects.postgresql import PostgreSQLListener
    from pyqueue_sql.worker.dispatch import HELD_LISTEN

    reads = []
    read = PostgreSQLListener.wait_for_notification

    def counted(self, conn, seconds):
        reads.append(seconds)
        return read(self, conn, seconds)

    monkeypatch.setattr(PostgreSQLListener, "wait_for_notification", counted)
    queue = make_queue()
    queue.set_limit("noop", 64)
    counts = []
    took, _ = drain(dsn, queue, sleep=0.01, seen=lambda: counts.append(len(reads)))
    assert counts[0] <= took / HELD_LISTEN + 10, (counts[0], took)
