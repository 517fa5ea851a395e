"""Producing messages (docs/contract.md, the produce topic: queue_push, queue_push_batch), on every dialect and
client: dedup of live keys, batches, payloads, keys of any spelling or an int, pushes inside a caller's
transaction."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading

import pytest

import pyqueue_sql
from pyqueue_sql import InvalidArgumentError

UTC = dt.timezone.utc


def test_push_dedups_live_messages_and_frees_the_key_after_commit(queue):
    assert queue.push("order-1", "email", {"n": 1}) is True
    assert queue.push("order-1", "email", {"n": 2}) is False
    assert queue.push("order-1", "sms", {"n": 3}) is True  # another kind is another message
    [first, second] = queue.reserve(n=5)
    assert (first.key, first.kind, first.payload) == ("order-1", "email", {"n": 1})
    assert queue.push("order-1", "email", {"n": 4}) is False  # reserved is still live
    assert queue.commit(first) and queue.commit(second)
    assert queue.push("order-1", "email", {"n": 5}) is True
    assert queue.reserve()[0].payload == {"n": 5}


def test_keys_compare_exactly(queue):
    assert queue.push("Key", "kind", 1)
    assert queue.push("key", "kind", 2)
    assert queue.push(" key", "kind", 3)
    assert queue.push("kéy", "kind", 4)
    assert queue.push("key", "Kind", 5)
    assert queue.stats().ready == 5


def test_names_ending_with_a_space_are_refused_in_every_dialect(db, queue):
    """MySQL compares with PAD SPACE ('a' = 'a '): both dialects refuse the
    trailing space rather than merge two keys silently."""
    with pytest.raises(InvalidArgumentError, match="space"):
        queue.push("key ", "kind", 1)
    with pytest.raises(InvalidArgumentError, match="space"):
        queue.push("key", "kind ", 1)
    with pytest.raises(InvalidArgumentError, match="element 2"):
        queue.push_many([("ok", "kind", 1), ("key ", "kind", 1)])
    with pytest.raises(InvalidArgumentError, match="space"):
        db.queue("trailing ").create()
    assert queue.stats().ready == 0


def test_push_batch_counts_new_messages_and_skips_duplicates(queue):
    queue.push("a", "k", 0)
    inserted = queue.push_many([("a", "k", 1), ("b", "k", 2), ("c", "k", {"x": [1]}), ("b", "k", 9)])
    assert inserted == 2
    got = {m.key: m.payload for m in queue.pop(10)}
    assert got == {"a": 0, "b": 2, "c": {"x": [1]}}
    assert queue.push_many([]) == 0


@pytest.mark.parametrize("after_a_write", [False, True], ids=["first-write", "after-a-write"])
def test_push_batch_keeps_the_first_of_a_repeated_key_and_the_batch_order(db, queue, after_a_write):
    """A batch that is its transaction's first write and one after other writes take different
    statements on PostgreSQL (a plain INSERT of the absent keys; INSERT ... ON CONFLICT): both
    skip a live key, keep the first element of a key the batch repeats, and deliver the new
    messages in the batch's order, not the keys'."""
    queue.push("live", "k", 0)
    batch = [("z", "k", 1), ("live", "k", 2), ("a", "k", 3), ("z", "k", 4), ("m", "k", 5), ("a", "j", 6)]
    if after_a_write:
        with db.transaction():
            queue.push("written-first", "k", 7)
            assert queue.push_many(batch) == 4
    else:
        assert queue.push_many(batch) == 4
    got = [(m.key, m.kind, m.payload) for m in queue.reserve(n=10)]
    expected_new = [("z", "k", 1), ("a", "k", 3), ("m", "k", 5), ("a", "j", 6)]
    assert got == [("live", "k", 0)] + ([("written-first", "k", 7)] if after_a_write else []) + expected_new


@pytest.mark.parametrize("live", [False, True], ids=["new-keys", "with-a-live-key"])
@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_push_batch_waits_for_a_key_another_transaction_is_pushing(connect, queue, outcome, live):
    """A batch that meets a key pushed by a transaction still open waits for it: the key is a
    duplicate if that transaction commits, and the batch's own if it rolls back; the batch's
    other keys are inserted either way. With a live key first in key order as well, PostgreSQL's
    first write meets both: the live one, then the one being pushed (the race)."""
    holder = connect()
    holder_queue = holder.queue(queue.name)
    done = {}
    if live:
        queue.push("0-live", "k", "live")
    extra = [("0-live", "k", "batch")] if live else []

    def push_batch():
        done["inserted"] = (
            connect().queue(queue.name).push_many([*extra, ("a", "k", "batch"), ("b", "k", "batch")])
        )

    with contextlib.ExitStack() as stack:
        if outcome == "rollback":
            stack.enter_context(pytest.raises(RuntimeError))
        with holder.transaction():
            assert holder_queue.push("a", "k", "holder") is True
            pusher = threading.Thread(target=push_batch)
            pusher.start()
            pusher.join(1.0)
            assert pusher.is_alive(), "the batch did not wait for the key the open transaction pushed"
            if outcome == "rollback":
                raise RuntimeError("roll the holder back")
    pusher.join(30)
    assert not pusher.is_alive()
    assert done["inserted"] == (1 if outcome == "commit" else 2)
    got = {m.key: m.payload for m in queue.reserve(n=10)}
    live_row = {"0-live": "live"} if live else {}
    assert got == {**live_row, "a": "holder" if outcome == "commit" else "batch", "b": "batch"}


def test_push_batch_with_run_at_and_priority(queue):
    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    queue.push_many(
        [
            pyqueue_sql.NewMessage("low", "k", 1),
            pyqueue_sql.NewMessage("high", "k", 2, priority=5),
            pyqueue_sql.NewMessage("later", "k", 3, run_at=later),
        ]
    )
    stats = queue.stats()
    assert (stats.ready, stats.delayed) == (2, 1)
    assert [m.key for m in queue.reserve(n=10)] == ["high", "low"]


def test_push_batch_refuses_the_whole_batch_on_one_bad_element(queue):
    for bad in ("", None, "x" * 256):
        with pytest.raises(InvalidArgumentError):
            queue.push_many([("good", "k", 1), (bad, "k", 2)])
    with pytest.raises(InvalidArgumentError):
        queue.push_many([("good", "k", 1), ("other", "", 2)])
    assert queue.stats().ready == 0


def test_payloads_round_trip(queue):
    payloads = [None, True, 0, -1.5, "text", "ünï\u00e7ødé ☃", [], {}, {"a": {"b": [1, None, "c"]}}]
    for i, payload in enumerate(payloads):
        queue.push(f"p{i}", "k", payload)
    got = {m.key: m.payload for m in queue.reserve(n=20)}
    assert got == {f"p{i}": p for i, p in enumerate(payloads)}


def test_push_in_a_rolled_back_transaction_leaves_nothing(db, queue):
    with pytest.raises(RuntimeError):
        with db.transaction():
            queue.push("m", "k", 1)
            raise RuntimeError("business write failed")
    assert queue.stats().ready == 0
    with db.transaction():
        queue.push("m", "k", 1)
    assert queue.stats().ready == 1


def test_wrapped_connection_enqueues_inside_the_callers_transaction(dsn, db, queue, dialect):
    other = pyqueue_sql.connect(dsn)  # sees only committed work
    try:
        if dialect == "postgresql":
            import psycopg

            raw = psycopg.connect(dsn.replace("postgresql+psycopg", "postgresql"))
        else:
            import pymysql

            from pyqueue_sql.dialects import mysql_connect_args

            raw = pymysql.connect(**{**mysql_connect_args(dsn), "autocommit": False})
        app = pyqueue_sql.Database.wrap(raw)
        app.queue(queue.name).push("m", "k", 1)
        assert other.queue(queue.name).stats().ready == 0
        raw.rollback()
        assert other.queue(queue.name).stats().ready == 0
        app.queue(queue.name).push("m", "k", 2)
        raw.commit()
        assert [m.payload for m in other.queue(queue.name).pop(5)] == [2]
        raw.close()
    finally:
        other.close()


def test_int_keys_are_their_decimal_text_everywhere(queue, make_queue):
    assert queue.push(17, "k", {"n": 17}) is True
    assert queue.push("17", "k", {"n": 0}) is False  # the same key
    assert (
        queue.push_many(
            [(18, "k", 1), pyqueue_sql.NewMessage(-5, "k", 2), {"key": 0, "kind": "k", "payload": 3}]
        )
        == 3
    )
    assert queue.push_replace(17, "k", {"n": 170}) == "replaced"
    assert queue.message(17, "k").payload == {"n": 170}
    assert queue.remove(18, "k") is True
    assert sorted(m.key for m in queue.reserve(n=10)) == ["-5", "0", "17"]
    assert queue.message(2**70, "k") is None  # any size: it is only text
    assert queue.push(2**70, "k", 1) and queue.message(str(2**70), "k") is not None
    sched = make_queue()
    sched.schedule_every(42, "tick", {}, 3600)
    assert [s.key for s in sched.schedules()] == ["42"]
    assert sched.unschedule(42, "tick") is True
