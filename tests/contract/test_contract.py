"""The SQL contract of docs/contract.md, routine by routine, on every dialect."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time

import pytest

import pyqueue_sql
from pyqueue_sql import InvalidArgumentError, UnknownQueueError

UTC = dt.timezone.utc


def keys(messages):
    return [m.key for m in messages]


# -- push / dedup --------------------------------------------------------------


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


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_push_batch_waits_for_a_key_another_transaction_is_pushing(connect, queue, outcome):
    """A batch that meets a key pushed by a transaction still open waits for it: the key is a
    duplicate if that transaction commits, and the batch's own if it rolls back; the batch's
    other keys are inserted either way."""
    holder = connect()
    holder_queue = holder.queue(queue.name)
    done = {}

    def push_batch():
        done["inserted"] = connect().queue(queue.name).push_many([("a", "k", "batch"), ("b", "k", "batch")])

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
    assert got == {"a": "holder" if outcome == "commit" else "batch", "b": "batch"}


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
    assert keys(queue.reserve(n=10)) == ["high", "low"]


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


# -- reserve ordering and visibility -------------------------------------------


def test_priority_first_then_fifo(queue):
    queue.push("p0-a", "k", 1)
    queue.push("p5-a", "k", 1, priority=5)
    queue.push("p0-b", "k", 1)
    queue.push("pm-a", "k", 1, priority=-3)
    queue.push("p5-b", "k", 1, priority=5)
    queue.push_many([("p0-c", "k", 1), ("p0-d", "k", 1), ("p0-e", "k", 1)])
    order = []
    while batch := queue.reserve(n=2):
        order += keys(batch)
    assert order == ["p5-a", "p5-b", "p0-a", "p0-b", "p0-c", "p0-d", "p0-e", "pm-a"]


def test_delayed_messages_do_not_block_ready_ones(queue):
    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    for i in range(50):
        queue.push(f"delayed-{i}", "k", i, run_at=later, priority=10)
    queue.push("ready", "k", "go")
    assert keys(queue.reserve(n=10)) == ["ready"]
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
    assert keys(queue.reserve(n=10)) == ["1"]


def test_queue_visibility_timeout_is_the_default(make_queue):
    q = make_queue(visibility_timeout=1.5)
    q.push("m", "k", 1)
    assert q.reserve()
    assert q.reserve() == []
    time.sleep(1.7)
    assert keys(q.reserve()) == ["m"]


# -- commit / rollback / extend / move with tokens ------------------------------


def test_stale_consumer_cannot_touch_the_new_reservation(make_queue):
    q = make_queue()
    target = make_queue()
    q.push("m", "k", {"v": 1})
    [stale] = q.reserve(timeout=0.3)
    time.sleep(0.5)
    [fresh] = q.reserve(timeout=30)
    assert q.commit(stale) is False
    assert q.rollback(stale) is False
    assert q.extend(stale) is None
    assert q.move(stale, target) is False
    assert target.stats().ready == 0
    stats = q.stats()
    assert (stats.reserved, stats.ready) == (1, 0)
    assert q.commit(fresh) is True
    assert q.stats().reserved == 0


def test_expired_reservation_not_yet_taken_can_still_commit(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve(timeout=0.2)
    time.sleep(0.3)
    assert queue.commit(r) is True
    assert queue.reserve() == []


def test_commit_twice_is_false_the_second_time(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    assert queue.commit(r) is True
    assert queue.commit(r) is False


def test_rollback_makes_it_eligible_after_the_delay(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    assert queue.rollback(r, delay=1.5) is True  # outlasts the next three calls on a busy machine
    assert queue.rollback(r) is False  # the token is spent
    assert queue.reserve() == []
    assert queue.stats().delayed == 1
    time.sleep(1.7)
    [again] = queue.reserve()
    assert again.attempts == 2


def test_rollback_without_delay_is_eligible_at_once(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve()
    assert queue.rollback(r)
    assert keys(queue.reserve()) == ["m"]


def test_dead_letter_after_max_attempts_via_rollback(make_queue):
    dead = make_queue()
    q = make_queue(max_attempts=3, dead_letter_queue=dead.name)
    q.push("poison", "k", {"bad": True}, priority=2)
    for attempt in (1, 2, 3):
        [r] = q.reserve()
        assert r.attempts == attempt
        assert q.rollback(r)
    assert q.reserve() == []
    assert q.stats().dead == 1
    [d] = dead.reserve()
    assert (d.key, d.kind, d.payload, d.attempts, d.priority) == ("poison", "k", {"bad": True}, 1, 2)


def test_dead_letter_without_dead_letter_queue_drops(make_queue):
    q = make_queue(max_attempts=1)
    q.push("poison", "k", 1)
    [r] = q.reserve()
    assert q.rollback(r)
    stats = q.stats()
    assert (stats.ready, stats.delayed, stats.reserved, stats.dead) == (0, 0, 0, 1)


def test_expired_last_delivery_goes_to_dead_letter_queue(make_queue):
    dead = make_queue()
    q = make_queue(max_attempts=2, dead_letter_queue=dead.name)
    q.push("crasher", "k", 1)
    q.push("fine", "k", 2, priority=-1)
    [r1] = q.reserve(timeout=0.2)
    assert r1.key == "crasher"
    time.sleep(0.3)
    [r2] = q.reserve(timeout=0.2)
    assert (r2.key, r2.attempts) == ("crasher", 2)
    time.sleep(0.3)
    # The crasher's last allowed delivery expired: it is dead-lettered, and the
    # slot it would have taken goes to the next ready message.
    assert keys(q.reserve(n=1)) == ["fine"]
    assert q.commit(r2) is False
    assert keys(dead.pop(5)) == ["crasher"]
    assert q.stats().dead == 1


def test_extend_gives_a_new_token_and_more_time(queue):
    queue.push("m", "k", 1)
    [r] = queue.reserve(timeout=0.3)
    longer = queue.extend(r, timeout=30)
    assert longer is not None and longer.token != r.token
    time.sleep(0.5)
    assert queue.reserve() == []  # still held thanks to the extension
    assert queue.commit(r) is False  # the old token stopped working
    assert queue.commit(longer) is True


def test_move_commits_here_and_pushes_there(make_queue):
    src, dst = make_queue(), make_queue()
    src.push("a", "k", {"stage": 1}, priority=3)
    src.push("b", "k", {"stage": 1})
    [a, b] = src.reserve(n=2)
    assert src.move(a, dst, payload={"stage": 2}) is True
    assert src.move(b, dst.name) is True
    assert src.stats().reserved == 0 and src.stats().ready == 0
    got = {m.key: (m.payload, m.priority, m.attempts) for m in dst.reserve(n=5)}
    assert got == {"a": ({"stage": 2}, 3, 1), "b": ({"stage": 1}, 0, 1)}
    assert src.move(a, dst) is False


def test_move_into_a_queue_holding_the_same_key_keeps_the_existing_one(make_queue):
    src, dst = make_queue(), make_queue()
    dst.push("a", "k", "already there")
    src.push("a", "k", "moved")
    [r] = src.reserve()
    assert src.move(r, dst) is True
    assert src.stats().ready + src.stats().reserved == 0
    assert [m.payload for m in dst.pop(5)] == ["already there"]


def test_move_to_unknown_queue_changes_nothing(queue):
    queue.push("a", "k", 1)
    [r] = queue.reserve()
    with pytest.raises(UnknownQueueError):
        queue.move(r, "no-such-queue")
    assert queue.commit(r) is True


def test_remove_deletes_in_any_state(queue):
    queue.push("ready", "k", 1)
    queue.push("delayed", "k", 1, run_at=dt.timedelta(hours=1))
    queue.push("reserved", "k", 1)
    assert keys(queue.reserve(n=1)) == ["ready"]
    assert queue.remove("ready", "k") is True
    assert queue.remove("delayed", "k") is True
    assert queue.remove("reserved", "k") is True
    assert queue.remove("reserved", "k") is False
    stats = queue.stats()
    assert stats.ready + stats.delayed + stats.reserved == 0


# -- pop -------------------------------------------------------------------------


def test_pop_removes_what_it_returns(queue):
    queue.push_many([(f"m{i}", "k", i) for i in range(5)])
    first = queue.pop(3)
    assert [m.payload for m in first] == [0, 1, 2]
    assert all(m.attempts == 0 for m in first)
    assert [m.payload for m in queue.pop(10)] == [3, 4]
    assert queue.pop(10) == []


# -- pause / resume / stats ----------------------------------------------------


def test_paused_queue_hands_out_nothing(queue):
    queue.push("m", "k", 1)
    queue.pause()
    assert queue.push("n", "k", 2) is True
    assert queue.reserve(n=5) == []
    assert queue.pop(5) == []
    assert queue.stats().paused is True
    queue.resume()
    assert queue.stats().paused is False
    assert keys(queue.reserve(n=5)) == ["m", "n"]


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


# -- queue administration --------------------------------------------------------


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


# -- transactions -------------------------------------------------------------------


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


def test_a_newer_dead_letter_does_not_vanish_under_a_held_older_one(make_queue):
    dead = make_queue()
    q = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    q.push("z", "k", {"v": "first"})
    q.rollback(q.reserve()[0])
    [held] = dead.reserve()  # a dead-letter consumer is working on "first"
    q.push("z", "k", {"v": "second"})
    q.rollback(q.reserve()[0])
    assert dead.commit(held) is False  # its token no longer holds: the row is "second" now
    [newer] = dead.reserve()
    assert (newer.payload, newer.attempts) == ({"v": "second"}, 1)


def test_kinds_filter_matches_any_spelling(queue):
    queue.push("1", "вид", 1)
    queue.push("2", "a/b", 2)
    queue.push("3", 'q"uote', 3)
    assert keys(queue.reserve(n=5, kinds=["вид"])) == ["1"]
    assert keys(queue.reserve(n=5, kinds=["a/b", 'q"uote'])) == ["2", "3"]


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


# -- keys that are ints, tokens that are str ------------------------------------------


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


def test_tokens_are_str_on_every_dialect(queue):
    queue.push_many([(f"m{i}", "k", i) for i in range(4)])
    [r] = queue.reserve()
    assert type(r.token) is str and len(r.token) == 36
    longer = queue.extend(r, timeout=30)
    assert type(longer.token) is str and longer.token != r.token
    committed, more = queue.commit_reserve(longer, n=2)
    assert committed is True and all(type(m.token) is str for m in more)
    import uuid as _uuid
    from dataclasses import replace

    assert queue.commit(replace(more[0], token=_uuid.UUID(more[0].token)))  # a UUID object is its text
    assert queue.commit_many(more[1:]) == 1


# -- move into the same queue keeps its attempts ------------------------------------------


def test_move_into_the_same_queue_keeps_the_attempt_count(make_queue):
    dead = make_queue()
    q = make_queue(max_attempts=2, dead_letter_queue=dead.name)
    other = make_queue()
    q.push("m", "k", {"v": 1})
    [r] = q.reserve()
    assert r.attempts == 1
    assert q.move(r, q, payload={"v": 2}) is True
    [r] = q.reserve()
    assert (r.attempts, r.payload) == (2, {"v": 2})  # not a fresh start
    assert q.rollback(r)  # its last allowed delivery: dead-lettered
    assert [m.key for m in dead.pop(5)] == ["m"]
    q.push("n", "k", 1)
    [r] = q.reserve()
    assert q.move(r, other)
    assert other.reserve()[0].attempts == 1  # another queue starts afresh
