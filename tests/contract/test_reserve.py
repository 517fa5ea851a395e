"""Reserving messages (docs/contract.md, the reserve topic: queue_reserve, queue_pop), on every dialect and
client: priority then FIFO, delays, visibility, kinds filters, a pop that cannot lose a message."""

from __future__ import annotations

import datetime as dt
import time

import pyqueue_sql
from tests.plainsql import MARK_ALWAYS, MARK_IS, MARK_KEPT

UTC = dt.timezone.utc


def test_priority_first_then_fifo(queue):
    queue.push("p0-a", "k", 1)
    queue.push("p5-a", "k", 1, priority=5)
    queue.push("p0-b", "k", 1)
    queue.push("pm-a", "k", 1, priority=-3)
    queue.push("p5-b", "k", 1, priority=5)
    queue.push_many([("p0-c", "k", 1), ("p0-d", "k", 1), ("p0-e", "k", 1)])
    order = []
    while batch := queue.reserve(n=2):
        order += [m.key for m in batch]
    assert order == ["p5-a", "p5-b", "p0-a", "p0-b", "p0-c", "p0-d", "p0-e", "pm-a"]


def test_delayed_messages_do_not_block_ready_ones(queue):
    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    for i in range(50):
        queue.push(f"delayed-{i}", "k", i, run_at=later, priority=10)
    queue.push("ready", "k", "go")
    assert [m.key for m in queue.reserve(n=10)] == ["ready"]
    assert queue.reserve(n=10) == []
    assert queue.stats().delayed == 50


def test_delayed_message_becomes_ready_at_its_time(queue):
    queue.push("soon", "k", 1, run_at=dt.timedelta(seconds=1.5))  # outlasts the next call on a busy machine
    assert queue.reserve() == []
    time.sleep(1.7)
    [msg] = queue.reserve()
    assert msg.key == "soon"
    assert msg.scheduled_at_initially > msg.created_at


def test_reserved_message_is_invisible_until_its_timeout(queue):
    queue.push("m", "k", 1)
    [first] = queue.reserve(timeout=1.5, worker="w1")  # outlasts the next two calls on a busy machine
    assert first.attempts == 1
    assert queue.reserve() == []
    assert queue.stats().reserved == 1
    time.sleep(1.7)
    [again] = queue.reserve(worker="w2")
    assert again.key == "m" and again.attempts == 2
    assert again.token != first.token
    assert again.scheduled_at_initially == first.scheduled_at_initially


def test_reserve_filters_kinds(queue):
    queue.push("1", "email", 1)
    queue.push("2", "sms", 2)
    queue.push("3", "push", 3)
    assert {m.kind for m in queue.reserve(n=10, kinds=["sms", "push"])} == {"sms", "push"}
    assert [m.key for m in queue.reserve(n=10)] == ["1"]


def test_queue_visibility_timeout_is_the_default(make_queue):
    q = make_queue(visibility_timeout=1.5)
    q.push("m", "k", 1)
    assert q.reserve()
    assert q.reserve() == []
    time.sleep(1.7)
    assert [m.key for m in q.reserve()] == ["m"]


def test_pop_removes_what_it_returns(queue):
    queue.push_many([(f"m{i}", "k", i) for i in range(5)])
    first = queue.pop(3)
    assert [m.payload for m in first] == [0, 1, 2]
    assert all(m.attempts == 0 for m in first)
    assert [m.payload for m in queue.pop(10)] == [3, 4]
    assert queue.pop(10) == []


def test_kinds_filter_matches_any_spelling(queue):
    queue.push("1", "вид", 1)
    queue.push("2", "a/b", 2)
    queue.push("3", 'q"uote', 3)
    assert [m.key for m in queue.reserve(n=5, kinds=["вид"])] == ["1"]
    assert [m.key for m in queue.reserve(n=5, kinds=["a/b", 'q"uote'])] == ["2", "3"]


HUGE_PUSH = {  # a 9 MB JSON array of one string of 4.5 million escaped quotes, built by the server
    "postgresql": "SELECT queue_push(%s, 'huge', 'k', ('[\"' || repeat('\\\"', 4500000) || '\"]')::jsonb)",
    "mysql": "CALL queue_push(%s, 'huge', 'k', CONCAT('[\"', REPEAT('\\\\\"', 4500000), '\"]'), NULL, NULL)",
}


def test_pop_never_loses_a_message_it_cannot_return(dialect, raw, queue):
    """A payload too large to hand back (MySQL packs popped rows into JSON,
    which escapes every quote again) must either come back or stay queued. (The queue's
    max_payload is raised for it: the default, 1 MiB, refuses such a payload.)"""
    queue.set_max_payload(16 * 1024 * 1024)
    raw(HUGE_PUSH[dialect], (queue.name,))
    try:
        popped = queue.pop()
    except pyqueue_sql.QueueError:
        raise
    except Exception:
        popped = []
    if popped:
        assert len(popped[0].payload[0]) == 4_500_000
    else:
        assert queue.stats().ready == 1


def test_a_batch_reserve_returning_fewer_than_n_takes_a_message_ready_before_what_it_took_last(
    dialect, raw, sql, queue
):
    """A batch reserve that returns fewer than n leaves no ready message behind, even one that became
    ready before what the same session reserved last (docs/contract/05_reserve.md). A batch reserve
    reads from the first candidate the session's last one found (its mark), and from the queue's
    start when that finds fewer than n: the mark is kept alive here for 5 s (what a last read from
    the start that took 0.25 s gives), so the second reserve reads from it; without the read from
    the start it would miss "early" (MySQL/MariaDB; on PostgreSQL the push in the past also makes
    the next batch reserve read from the bound, as long as the bound has not taken it in). Both
    reserves on one session."""
    queue.push_many([(f"m{i}", "k", i) for i in range(4)])
    raw(MARK_ALWAYS[dialect])
    first = sql("queue_reserve", queue.name, "w", sql.dur(60), 2, None, casts=(None, None, "::interval"))
    assert [r[0] for r in first] == ["m0", "m1"]
    [(mark,)] = raw(MARK_IS[dialect], (queue.name,))
    assert mark, "the batch reserve left no mark (MySQL/MariaDB: it did not go the short way)"
    raw(MARK_KEPT[dialect])
    queue.push("early", "k", "e", run_at=dt.datetime.now(UTC) - dt.timedelta(hours=1))
    second = sql("queue_reserve", queue.name, "w", sql.dur(60), 5, None, casts=(None, None, "::interval"))
    assert [r[0] for r in second] == ["early", "m2", "m3"]
