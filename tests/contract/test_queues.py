"""Queues (docs/contract.md, the queues topic: queue_create, queue_drop, queue_pause, queue_resume,
queue_stats, queue_kind_stats), on every dialect and client."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from pyqueue_sql import InvalidArgumentError, UnknownQueueError


def test_paused_queue_hands_out_nothing(queue):
    queue.push("m", "k", 1)
    queue.pause()
    assert queue.push("n", "k", 2) is True
    assert queue.reserve(n=5) == []
    assert queue.pop(5) == []
    assert queue.stats().paused is True
    queue.resume()
    assert queue.stats().paused is False
    assert [m.key for m in queue.reserve(n=5)] == ["m", "n"]


def test_stats_counts_each_state(db, make_queue):
    q = make_queue()
    q.push("r1", "k", 1)
    q.push("r2", "k", 1)
    q.push("d1", "k", 1, run_at=dt.timedelta(hours=1))
    q.push("x1", "k", 1)
    q.push("x2", "k", 1)
    q.push("x3", "k", 1)
    q.reserve(n=3)  # r1, r2, x1 by FIFO
    time.sleep(0.05)
    s = q.stats()
    assert (s.ready, s.delayed, s.reserved, s.dead, s.paused) == (2, 1, 3, 0, False)
    assert s.oldest_ready_age_s is not None and 0 < s.oldest_ready_age_s < 60
    everyone = {st.queue: st for st in db.stats()}
    assert (everyone[q.name].ready, everyone[q.name].reserved) == (2, 3)
    empty = make_queue()
    assert empty.stats().oldest_ready_age_s is None


def test_kind_stats_counts_each_state_by_kind(db, make_queue):
    q, other, empty = make_queue(), make_queue(), make_queue()
    q.push("a1", "alpha", 1)
    q.push("a2", "alpha", 1, run_at=dt.timedelta(hours=1))
    q.push("b1", "beta", 1)
    q.push("b2", "beta", 1)
    other.push("a1", "alpha", 1)
    q.reserve(n=1, kinds=["beta"])
    assert [(k.kind, k.ready, k.delayed, k.reserved) for k in q.kind_stats()] == [
        ("alpha", 1, 1, 0),
        ("beta", 1, 0, 1),
    ]
    assert empty.kind_stats() == []
    everyone = [(k.queue, k.kind) for k in db.kind_stats() if k.queue in (q.name, other.name, empty.name)]
    assert everyone == sorted([(q.name, "alpha"), (q.name, "beta"), (other.name, "alpha")])
    empty.drop()
    with pytest.raises(UnknownQueueError):
        empty.kind_stats()


def test_create_replaces_settings_and_drop_removes_messages(db, make_queue):
    q = make_queue(max_attempts=1)
    q.create(max_attempts=5)  # now 5 deliveries are allowed
    q.push("m", "k", 1)
    for _ in range(3):
        [r] = q.reserve()
        q.rollback(r)
    assert q.stats().ready == 1
    q.drop()
    with pytest.raises(UnknownQueueError):
        q.stats()
    q.create()
    assert q.stats().ready == 0  # the old message went with the dropped queue


def test_dead_letter_queue_must_exist_and_cannot_be_dropped_while_used(make_queue, db):
    with pytest.raises(UnknownQueueError):
        make_queue(dead_letter_queue="no-such-queue")
    dead = make_queue()
    q = make_queue(dead_letter_queue=dead.name)
    with pytest.raises(InvalidArgumentError):
        dead.drop()
    with pytest.raises(InvalidArgumentError):
        q.create(dead_letter_queue=q.name)
    q.drop()
    dead.drop()


# queue_stats's bound (queue_stats in docs/contract/03_queues.md): a count of 10,000 or less is
# exact, a larger one says "more than 10,000" (an estimate, never below 10,001).
STATS_EXACT = 10_000


@pytest.mark.slow
def test_stats_are_exact_up_to_the_bound_and_say_more_than_it_beyond(make_queue):
    q = make_queue()
    try:
        q.push_many([(f"r{i}", "k", 1) for i in range(STATS_EXACT + 1)])
        q.push("later", "k", 1, run_at=dt.timedelta(hours=1))
        assert len(q.reserve(n=1)) == 1
        s = q.stats()
        assert (s.ready, s.delayed, s.reserved) == (STATS_EXACT, 1, 1)
        assert s.oldest_ready_age_s is not None and s.oldest_ready_age_s >= 0
        q.push("one-more", "k", 1)
        s = q.stats()
        assert s.ready > STATS_EXACT
        assert (s.delayed, s.reserved) == (1, 1)
    finally:
        q.drop()
