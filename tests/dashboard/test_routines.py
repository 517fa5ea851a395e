"""The dashboard's reads as routines: queue_messages (a queue's messages by state, with a key
prefix and a paging cursor) and queue_throughput (messages that left a queue per minute, from
pyqueue_history). Both dialects, through the client and from plain SQL."""

from __future__ import annotations

import datetime as dt

import pytest

import pyqueue_sql
from pyqueue_sql import errors


def _fill(queue):
    """Two ready (a-1, a-2 with two kinds), one delayed (b-1), one reserved (c-1)."""
    queue.push("a-1", "x", {})
    queue.push("a-2", "x", {})
    queue.push("a-2", "y", {})
    queue.push("b-1", "x", {}, run_at=dt.timedelta(hours=1))
    queue.push("c-1", "x", {}, priority=5)
    [held] = queue.reserve(n=1, worker="w-1")
    assert held.key == "c-1"
    return held


def test_messages_lists_by_state_in_key_order(queue):
    _fill(queue)
    every = queue.messages()
    assert [(m.key, m.kind, m.state) for m in every] == [
        ("a-1", "x", "ready"),
        ("a-2", "x", "ready"),
        ("a-2", "y", "ready"),
        ("b-1", "x", "delayed"),
        ("c-1", "x", "reserved"),
    ]
    assert [m.key for m in queue.messages(state="ready")] == ["a-1", "a-2", "a-2"]
    assert [m.key for m in queue.messages(state="delayed")] == ["b-1"]
    [reserved] = queue.messages(state="reserved")
    assert (reserved.key, reserved.reserved_by, reserved.attempts, reserved.priority) == ("c-1", "w-1", 1, 5)
    assert reserved.scheduled_at > dt.datetime.now(dt.timezone.utc)


def test_messages_pages_with_the_cursor_and_never_skips_a_kind(queue):
    _fill(queue)
    first = queue.messages(n=2)
    assert [(m.key, m.kind) for m in first] == [("a-1", "x"), ("a-2", "x")]
    second = queue.messages(n=2, after=first[-1])
    assert [(m.key, m.kind) for m in second] == [("a-2", "y"), ("b-1", "x")]
    third = queue.messages(n=2, after=("b-1", "x"))
    assert [(m.key, m.kind) for m in third] == [("c-1", "x")]
    assert queue.messages(n=2, after=third[-1]) == []


def test_messages_searches_by_key_prefix(queue):
    _fill(queue)
    queue.push("a-10", "x", {})
    queue.push("A-3", "x", {})  # prefixes compare case-sensitively
    assert [(m.key, m.kind) for m in queue.messages(key_prefix="a-1")] == [("a-1", "x"), ("a-10", "x")]
    assert [m.key for m in queue.messages(key_prefix="a-2", state="ready")] == ["a-2", "a-2"]
    assert queue.messages(key_prefix="zzz") == []
    # a trailing space in the prefix counts: 'a-1' does not start with 'a-1 '
    queue.push("a-1 b", "x", {})
    assert [m.key for m in queue.messages(key_prefix="a-1 ")] == ["a-1 b"]


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"state": "dead"}, "state must be ready, delayed, reserved or NULL"),
        ({"state": "ready "}, "state must be ready, delayed, reserved or NULL"),
        ({"state": ""}, "state must be ready, delayed, reserved or NULL"),
        ({"key_prefix": ""}, "key_prefix must be 1 to 255 characters"),
        ({"key_prefix": "k" * 256}, "key_prefix must be 1 to 255 characters"),
        ({"n": 0}, "n must be"),
        ({"n": 1001}, "n must be"),
        ({"after": ("", "x")}, "after_key must not be NULL or empty"),
        ({"after": ("a", "x" * 129)}, "after_kind is longer than 128 characters"),
    ],
)
def test_messages_refuses_bad_arguments(queue, kwargs, text):
    with pytest.raises(errors.InvalidArgumentError, match=text):
        queue.messages(**kwargs)


def test_messages_refuses_half_a_cursor_and_an_unknown_queue_from_plain_sql(db, queue, raw):
    if db.dialect.name == "postgresql":
        half = ("SELECT * FROM queue_messages(%s, NULL, NULL, 'a', NULL, NULL)", (queue.name,))
        unknown = ("SELECT * FROM queue_messages('no such queue', NULL, NULL, NULL, NULL, NULL)", None)
    else:
        half = ("CALL queue_messages(%s, NULL, NULL, 'a', NULL, NULL)", (queue.name,))
        unknown = ("CALL queue_messages('no such queue', NULL, NULL, NULL, NULL, NULL)", None)
    with pytest.raises(Exception, match="pyqueue:invalid_argument: after_key and after_kind go together"):
        raw(*half)
    if db.dialect.name == "postgresql":
        db.connection.rollback()
    with pytest.raises(Exception, match='pyqueue:unknown_queue: queue "no such queue" does not exist'):
        raw(*unknown)
    if db.dialect.name == "mysql":  # n = 2.5 is refused, not rounded
        with pytest.raises(Exception, match="pyqueue:invalid_argument: n must be a whole number"):
            raw("CALL queue_messages(%s, NULL, NULL, NULL, NULL, 2.5)", (queue.name,))


def test_throughput_counts_what_left_the_queue_per_minute(make_queue):
    dead = make_queue()
    jobs = make_queue(max_attempts=1, dead_letter_queue=dead.name, history_retention=dt.timedelta(days=1))
    for i in range(5):
        jobs.push(f"k{i}", "x", {})
    held = jobs.reserve(n=5)
    for r in held[:3]:
        assert jobs.commit(r)
    assert jobs.fail(held[3], "boom") == "dead_lettered"
    assert jobs.fail(held[4], "boom") == "dead_lettered"
    jobs.push("p", "x", {})
    assert len(jobs.pop(1)) == 1
    rows = jobs.throughput()
    assert {r.queue for r in rows} == {jobs.name}
    assert sum(r.committed for r in rows) == 3
    assert sum(r.dead_lettered for r in rows) == 2
    assert sum(r.popped for r in rows) == 1
    assert sum(r.moved for r in rows) == 0
    now = dt.datetime.now(dt.timezone.utc)
    for r in rows:
        assert r.minute.second == 0 and r.minute.microsecond == 0
        assert now - dt.timedelta(minutes=2) <= r.minute <= now
    # every queue at once: this queue's rows are among them; the dead-letter queue keeps no history
    assert [r for r in jobs.db.throughput() if r.queue == jobs.name] == rows
    assert dead.throughput() == []
    # the dead letters, listed in the dead-letter queue with the queue they came from
    assert [(m.key, m.dead_from) for m in dead.messages()] == [("k3", jobs.name), ("k4", jobs.name)]
    assert {m.dead_from for m in jobs.messages()} == set()
    # since: nothing left after now
    assert jobs.throughput(since=dt.timedelta(0)) == []


def test_throughput_of_a_queue_without_history_nor_results_is_empty(queue):
    queue.push("a", "x", {})
    [r] = queue.reserve(n=1)
    assert queue.commit(r)
    assert queue.throughput() == []


def test_throughput_of_a_queue_that_keeps_results_counts_them_without_history(make_queue):
    jobs = make_queue(max_attempts=1)
    jobs.set_result_retention(dt.timedelta(days=1))
    for i in range(4):
        jobs.push(f"k{i}", "x", {})
    held = jobs.reserve(n=4)
    for r in held[:2]:
        assert jobs.commit(r)
    assert jobs.fail(held[2], "boom") == "dropped"
    jobs.cancel(held[3].key, "x")  # asked to stop while held: not counted until it ends
    rows = jobs.throughput()
    totals = [sum(getattr(r, f) for r in rows) for f in ("committed", "dead_lettered", "moved", "popped")]
    assert totals == [2, 1, 0, 0]  # (in one minute or two, should the minute turn meanwhile)
    assert [r for r in jobs.db.throughput() if r.queue == jobs.name] == rows


@pytest.mark.parametrize(
    ("since", "text"),
    [
        (dt.timedelta(minutes=-5), "since must not be in the future"),
        (dt.timedelta(days=1, minutes=5), "since must be within the last day"),
    ],
)
def test_throughput_refuses_a_since_out_of_range(queue, since, text):
    with pytest.raises(errors.InvalidArgumentError, match=text):
        queue.throughput(since=since)


def test_throughput_refuses_an_unknown_queue(db):
    with pytest.raises(pyqueue_sql.UnknownQueueError):
        db.queue("no such queue").throughput()
