"""queue_snooze (a consumer gives a message back without using up an attempt) and queue_release
(an admin hands back reservations without deleting anything), on every dialect, through the
client and as plain SQL."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from pyqueue_sql import InvalidArgumentError, UnknownQueueError

# -- snooze ---------------------------------------------------------------------------


def test_snooze_gives_the_message_back_without_using_up_an_attempt(make_queue):
    q = make_queue(max_attempts=1)
    q.push("a", "k", {"n": 1})
    for _ in range(3):  # with max_attempts 1, a rollback would have dead-lettered it
        (r,) = q.reserve(timeout=60)
        assert r.attempts == 1
        assert q.snooze(r) is True
        info = q.message("a", "k")
        assert (info.state, info.attempts, info.reserved_by) == ("ready", 0, None)
    (r,) = q.reserve(timeout=60)
    assert q.commit(r) and q.stats().dead == 0


def test_snooze_keeps_the_last_error_and_waits_for_its_delay(queue):
    queue.push("a", "k", {})
    (r,) = queue.reserve(timeout=60)
    assert queue.fail(r, "boom") == "retry"
    (r,) = queue.reserve(timeout=60)
    assert r.attempts == 2
    assert queue.snooze(r, delay=dt.timedelta(minutes=5))
    info = queue.message("a", "k")
    assert (info.state, info.attempts, info.last_error) == ("delayed", 1, "boom")
    assert queue.reserve() == []


def test_snooze_with_a_token_that_no_longer_holds_changes_nothing(queue):
    queue.push("a", "k", {})
    (r,) = queue.reserve(timeout=60)
    assert queue.snooze(r)
    assert queue.snooze(r) is False  # its token went with the first snooze
    (again,) = queue.reserve(timeout=60)
    assert queue.snooze(r) is False
    info = queue.message("a", "k")
    assert (info.state, info.attempts) == ("reserved", 1)
    assert queue.commit(again)


def test_snooze_refuses_a_negative_delay_and_an_unknown_queue(queue, db):
    queue.push("a", "k", {})
    (r,) = queue.reserve(timeout=60)
    with pytest.raises(InvalidArgumentError, match="delay"):
        queue.snooze(r, delay=-1)
    with pytest.raises(UnknownQueueError):
        db.queue(f"missing.{uuid.uuid4().hex[:8]}").snooze(r)
    assert queue.message("a", "k").state == "reserved"


def test_a_snoozed_group_head_keeps_its_place(queue):
    queue.push("first", "k", {}, group="g")
    queue.push("second", "k", {}, group="g")
    (r,) = queue.reserve(timeout=60)
    assert r.key == "first"
    assert queue.snooze(r)
    (r,) = queue.reserve(5, timeout=60)
    assert r.key == "first"  # the head again, the second still behind it


def test_a_snoozed_message_frees_its_limit_slot(queue):
    queue.set_limit("k", 1)
    queue.push("a", "k", {})
    queue.push("b", "k", {})
    (r,) = queue.reserve(5, timeout=60)
    assert queue.snooze(r, delay=60)
    (other,) = queue.reserve(5, timeout=60)
    assert other.key != r.key


def test_snooze_from_plain_sql(queue, sql):
    queue.push("a", "k", {})
    (r,) = queue.reserve(timeout=60)
    rows = sql("queue_snooze", queue.name, "a", "k", r.token, None)
    assert [bool(v) for (v,) in rows] == [True]
    rows = sql("queue_snooze", queue.name, "a", "k", r.token, None)
    assert [bool(v) for (v,) in rows] == [False]
    assert queue.message("a", "k").attempts == 0


@pytest.mark.only_dialect("postgresql")
def test_snooze_takes_the_token_as_a_uuid_too(queue, raw):
    queue.push("a", "k", {})
    (r,) = queue.reserve(timeout=60)
    assert raw("SELECT queue_snooze(%s, 'a', 'k', %s::uuid)", (queue.name, r.token)) == [(True,)]
    with pytest.raises(Exception, match="token is malformed"):
        raw("SELECT queue_snooze(%s, 'a', 'k', 'not a token')", (queue.name,))


# -- release --------------------------------------------------------------------------


def test_release_hands_back_every_reservation_and_deletes_nothing(queue):
    queue.push_many([(f"m{i}", "k", {"i": i}) for i in range(4)])
    held_1 = queue.reserve(2, worker="w1", timeout=3600)
    held_2 = queue.reserve(1, worker="w2", timeout=3600)
    assert queue.release(worker="w1") == 2
    for r in held_1:
        info = queue.message(r.key, r.kind)
        assert (info.state, info.attempts, info.reserved_by) == ("ready", 1, None)
        assert queue.commit(r) is False  # the old holder's token no longer holds
        assert queue.extend(r) is None
        assert queue.rollback(r) is False
    assert queue.message(held_2[0].key, "k").state == "reserved"
    assert queue.release() == 1
    assert queue.release() == 0
    stats = queue.stats()
    assert (stats.ready, stats.reserved, stats.delayed, stats.dead) == (4, 0, 0, 0)
    again = queue.reserve(4, timeout=60)
    assert sorted((r.key, r.attempts) for r in again) == [("m0", 2), ("m1", 2), ("m2", 2), ("m3", 1)]


def test_release_leaves_expired_delayed_and_ready_messages_alone(queue):
    queue.push("later", "k", {}, run_at=dt.timedelta(hours=1))
    queue.push("now", "k", {})
    assert queue.release() == 0
    assert queue.message("later", "k").state == "delayed"
    assert queue.message("now", "k").state == "ready"


def test_a_released_group_head_keeps_its_place_and_its_slot_is_free(queue):
    queue.set_limit("k", 1)
    queue.push("first", "k", {}, group="g")
    queue.push("second", "k", {}, group="g")
    (r,) = queue.reserve(5, timeout=3600)
    assert r.key == "first"
    assert queue.release() == 1
    (r,) = queue.reserve(5, timeout=3600)  # the kind's one slot was free again
    assert r.key == "first"  # the group's head again, the second still behind it


def test_release_refuses_bad_arguments(queue, db, sql):
    with pytest.raises(UnknownQueueError):
        db.queue(f"missing.{uuid.uuid4().hex[:8]}").release()
    with pytest.raises(InvalidArgumentError, match="worker"):
        queue.release("")
    with pytest.raises(InvalidArgumentError, match="worker"):
        queue.release("w" * 256)
    queue.push("a", "k", {})
    queue.reserve(worker="w", timeout=60)
    assert [int(v) for (v,) in sql("queue_release", queue.name, "w")] == [1]


def test_release_racing_workers_never_lets_a_message_be_both_committed_and_handed_back(queue, connect):
    """Four connections reserve and commit (some after a snooze) while a fifth releases over and
    over: every message is committed exactly once, none is lost, and a reservation a release
    handed back is never committed by its old holder (its commit answers false), whose
    commit racing the release either wins (the release skips it) or answers false."""
    import threading

    total = 200
    queue.create(max_attempts=1_000_000)  # a release keeps attempts: the default 10 would drop some
    queue.push_many([(f"m{i}", "k", {"i": i}) for i in range(total)])
    committed: list[str] = []
    lock = threading.Lock()
    done = threading.Event()
    releases: list[int] = []
    snoozed: set[str] = set()

    def work(i):
        q = connect().queue(queue.name)
        while not done.is_set():
            held = q.reserve(5, worker=f"w{i}", timeout=60)
            if not held and q.stats().ready + q.stats().reserved == 0:
                return
            for r in held:
                if int(r.key[1:]) % 7 == 0 and r.key not in snoozed:
                    snoozed.add(r.key)
                    q.snooze(r)
                    continue
                if q.commit(r):
                    with lock:
                        committed.append(r.key)

    def release():
        q = connect().queue(queue.name)
        while not done.is_set():
            releases.append(q.release())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    releaser = threading.Thread(target=release)
    for t in threads:
        t.start()
    releaser.start()
    for t in threads:
        t.join(timeout=120)
    done.set()
    releaser.join()
    assert sum(releases) > 0  # the race happened: reservations were handed back under the workers
    assert queue.stats().dead == 0
    assert sorted(committed) == sorted(f"m{i}" for i in range(total))  # each exactly once
    assert queue.stats().ready + queue.stats().reserved == 0
