"""Settling a reservation (docs/contract.md, the settle topic: queue_commit, queue_rollback, queue_extend,
queue_move, queue_remove), on every dialect and client: tokens that stop a stale consumer, dead
letters after the last attempt, moves."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from pyqueue_sql import UnknownQueueError


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
    assert [m.key for m in queue.reserve()] == ["m"]


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
    assert [m.key for m in q.reserve(n=1)] == ["fine"]
    assert q.commit(r2) is False
    assert [m.key for m in dead.pop(5)] == ["crasher"]
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
    assert [m.key for m in queue.reserve(n=1)] == ["ready"]
    assert queue.remove("ready", "k") is True
    assert queue.remove("delayed", "k") is True
    assert queue.remove("reserved", "k") is True
    assert queue.remove("reserved", "k") is False
    stats = queue.stats()
    assert stats.ready + stats.delayed + stats.reserved == 0


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
