"""Wakeup routines: NOTIFY on ready-now pushes (PostgreSQL), queue_channel,
queue_set_notify_window, queue_next_scheduled_at, queue_wait."""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import time

import pytest

from pyqueue_sql import InvalidArgumentError, UnknownQueueError

from ..helpers import RELEASE_AFTER, silence_worker


@pytest.fixture
def listener(db, dsn):
    """A plain psycopg connection LISTENing as a psql user would; yields a function
    returning the notifications received within a short time."""
    # Tests using it are marked only_dialect("postgresql"); this guards a forgotten mark.
    assert db.dialect.name == "postgresql", (
        'LISTEN/NOTIFY: mark the test @pytest.mark.only_dialect("postgresql")'
    )
    import psycopg

    conn = psycopg.connect(dsn.replace("postgresql+psycopg", "postgresql"), autocommit=True)

    def listen(queue):
        [(channel,)] = conn.execute("SELECT queue_channel(%s)", (queue.name,)).fetchall()
        conn.execute(f'LISTEN "{channel}"')
        return channel

    def received(wait=0.5):
        return [(n.channel, n.payload) for n in conn.notifies(timeout=wait)]

    yield listen, received
    conn.close()


def test_channel_is_an_identifier_for_any_queue_name(db, make_queue, raw):
    q = db.queue("w" * 128).create()
    expected = "pyqueue_" + hashlib.md5(q.name.encode()).hexdigest()
    assert q.channel() == expected and len(expected.encode()) <= 63
    short = make_queue()
    assert short.channel() == "pyqueue_" + hashlib.md5(short.name.encode()).hexdigest()
    with pytest.raises(UnknownQueueError):
        db.queue("no-such-queue").channel()
    q.drop()


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_ready_push_notifies_and_delayed_push_does_not(listener, queue):
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(0)
    assert queue.push("ready", "k", {})
    assert received() == [(channel, queue.name)]
    assert queue.push("later", "k", {}, run_at=dt.timedelta(hours=1))
    assert received() == []
    assert not queue.push("ready", "k", {})  # duplicate: nothing inserted, nothing to wake for
    assert received() == []


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_batch_sends_one_notification_per_statement(listener, queue):
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(0)
    assert queue.push_many([(f"k{i}", "k", {}) for i in range(50)]) == 50
    assert received() == [(channel, queue.name)]
    later = dt.timedelta(hours=1)
    assert queue.push_many([(f"d{i}", "k", {}, later) for i in range(5)]) == 5
    assert received() == []
    assert queue.push_many([("d-mixed", "k", {}, later), ("r-mixed", "k", {})]) == 2
    assert received() == [(channel, queue.name)]


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_window_throttles_wakeups_per_queue(listener, queue, make_queue):
    listen, received = listener
    channel = listen(queue)
    other = make_queue()
    other_channel = listen(other)
    queue.set_notify_window(3600)  # first push notifies, the rest of the hour is quiet
    for i in range(5):
        queue.push(f"k{i}", "k", {})
    other.push("x", "k", {})  # another queue has its own window (default 50 ms)
    assert sorted(received()) == sorted([(channel, queue.name), (other_channel, other.name)])
    queue.set_notify_window(0.2)
    time.sleep(0.3)
    queue.push("after-window", "k", {})
    assert received() == [(channel, queue.name)]


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_pushes_in_one_transaction_notify_once_at_commit(listener, queue, connect):
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(0)
    producer = connect()
    with producer.transaction():
        for i in range(3):
            producer.queue(queue.name).push(f"t{i}", "k", {})
        assert received(0.3) == []  # nothing before the commit
    assert received() == [(channel, queue.name)]
    with pytest.raises(RuntimeError):
        with producer.transaction():
            producer.queue(queue.name).push("rolled-back", "k", {})
            raise RuntimeError("abort")
    assert received() == []


def test_set_notify_window_refuses_out_of_range_windows_and_unknown_queues(db, queue):
    for bad in (-1, 3601):
        with pytest.raises(InvalidArgumentError):
            queue.set_notify_window(bad)
    with pytest.raises(UnknownQueueError):
        db.queue("no-such-queue").set_notify_window(1)
    queue.set_notify_window(None)


def test_next_scheduled_at_is_the_earliest_time_a_message_becomes_ready(queue, connect):
    assert queue.next_scheduled_at() == (None, None)
    run_at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=30)
    queue.push("later", "a", {}, run_at=run_at)
    at, wait_s = queue.next_scheduled_at()
    assert abs((at - run_at).total_seconds()) < 0.001 and 25 < wait_s <= 30
    queue.push("high-later", "b", {}, run_at=dt.timedelta(seconds=10), priority=5)
    assert 5 < queue.next_scheduled_at()[1] <= 10  # across priorities
    assert 25 < queue.next_scheduled_at(kinds=["a"])[1] <= 30
    assert queue.next_scheduled_at(kinds=["zzz"]) == (None, None)
    queue.push("now", "a", {})
    assert queue.next_scheduled_at()[1] == 0
    [r] = connect().queue(queue.name).reserve(timeout=20)
    assert 5 < queue.next_scheduled_at()[1] <= 10  # the reservation counts by its expiry
    queue.pause()
    assert queue.next_scheduled_at() == (None, None)
    with pytest.raises(InvalidArgumentError):
        queue.next_scheduled_at(kinds=[])


@pytest.mark.slow
def test_wait_times_out_then_wakes_on_a_push_from_another_connection(queue, connect):
    start = time.monotonic()
    assert queue.wait(timeout=0.5, poll=0.05) is False
    assert time.monotonic() - start >= 0.45
    producer = connect().queue(queue.name)
    pusher = threading.Timer(0.5, lambda: producer.push("x", "k", {}))
    pusher.start()
    start = time.monotonic()
    assert queue.wait(timeout=20, poll=0.02) is True  # sees the other connection's commit
    assert time.monotonic() - start < 10
    # the commit is visible before the push has read its answer: let it finish before the
    # test's connections are closed
    pusher.join(10)
    assert queue.wait(timeout=0) is True  # ready now


@pytest.mark.slow
def test_wait_wakes_at_a_delayed_message_s_time(queue):
    run_at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
    queue.push("later", "k", {}, run_at=run_at)
    assert queue.wait(timeout=20, poll=10) is True  # the poll would be 10 s; the due time wins
    assert dt.datetime.now(dt.timezone.utc) - run_at < dt.timedelta(seconds=2)


def test_wait_refuses_bad_timeouts_and_polls_and_unknown_queues(db, queue):
    with pytest.raises(InvalidArgumentError):
        queue.wait(timeout=-1)
    with pytest.raises(InvalidArgumentError):
        queue.wait(timeout=3601)
    with pytest.raises(InvalidArgumentError):
        queue.wait(timeout=1, poll=0)
    with pytest.raises(UnknownQueueError):
        db.queue("no-such-queue").wait(timeout=0)


def test_wakeup_routines_as_plain_sql(raw, queue, db):
    if db.dialect.name == "postgresql":
        [(channel,)] = raw("SELECT queue_channel(%s)", (queue.name,))
        raw("SELECT queue_set_notify_window(%s, interval '100 milliseconds')", (queue.name,))
        assert raw("SELECT * FROM queue_next_scheduled_at(%s)", (queue.name,)) == [(None, None)]
        assert raw("SELECT queue_wait(%s, NULL, interval '0.1 seconds')", (queue.name,)) == [(False,)]
    else:
        [(channel,)] = raw("CALL queue_channel(%s)", (queue.name,))
        raw("CALL queue_set_notify_window(%s, 0.1)", (queue.name,))
        assert list(raw("CALL queue_next_scheduled_at(%s, NULL)", (queue.name,))) == [(None, None)]
        assert list(raw("CALL queue_wait(%s, NULL, 0.1, NULL)", (queue.name,))) == [(0,)]
    assert channel.startswith("pyqueue_")


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_a_push_never_waits_for_another_transaction_s_throttle_claim(listener, queue, connect):
    """A long transaction that pushed holds the queue's throttle row; other
    pushers skip it (and notify) instead of waiting for that transaction."""
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(0.01)
    holder = connect()
    with holder.transaction():
        holder.queue(queue.name).push("held", "k", {})  # claims the throttle row until commit
        time.sleep(0.05)  # the window elapses
        done = []
        pusher = threading.Thread(
            target=lambda: done.append(connect().queue(queue.name).push("free", "k", {}))
        )
        pusher.start()
        pusher.join(timeout=10)
        assert done == [True], "the second push waited for the open transaction"
        assert received() == [(channel, queue.name)]  # the free push's own wakeup
    assert received() == [(channel, queue.name)]  # the holder's, at its commit


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_concurrent_pushers_are_throttled_each_in_its_own_session(listener, queue, connect):
    """The window counts per producer session: 4 sessions of 50 pushes each inside one window
    send one wakeup each, the first of their pushes."""
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(3600)
    queue.push("first", "k", {})
    assert len(received()) == 1
    queue.push("second", "k", {})
    assert received() == []  # the same session, inside its window

    def produce(i):
        q = connect().queue(queue.name)
        for j in range(50):
            q.push(f"p{i}-{j}", "k", {})

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert received() == [(channel, queue.name)] * 4  # 200 pushes: one wakeup per session
    assert queue.stats().ready == 202


@pytest.mark.only_dialect("postgresql")
def test_pushes_10_ms_apart_each_notify_and_write_no_throttle_row(listener, queue, make_queue, raw):
    """The throttle is per producer session (a session setting) and a few ms wide by default: two
    pushes of one session 10 ms apart each wake the listeners, and no push writes a shared row for
    it (one row updated by every wakeup kept thousands of versions under a held xmin horizon, and
    every push read them)."""
    listen, received = listener
    channel = listen(queue)
    assert queue.push("a", "k", {})
    time.sleep(0.01)
    assert queue.push("b", "k", {})
    assert received() == [(channel, queue.name)] * 2
    row = "SELECT xmin::text, ctid::text FROM pyqueue_notify WHERE queue_name = %s"
    assert raw(row, (queue.name,)) == []  # no row made for the default window
    tuned = make_queue()
    tuned_channel = listen(tuned)
    tuned.set_notify_window(0.005)  # a row of its own, which pushes read and leave as it is
    before = raw(row, (tuned.name,))
    for i in range(3):
        time.sleep(0.01)
        assert tuned.push(f"t{i}", "k", {})
    assert received() == [(tuned_channel, tuned.name)] * 3
    assert raw(row, (tuned.name,)) == before, "a push wrote the queue's throttle row"


# -- every path that makes a message ready now wakes the queue's consumers ---------


def _quiet(queue):
    queue.set_notify_window(0)  # every statement notifies: a missing wakeup is the routine's


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_ingest_wakes_each_queue_that_got_ready_rows_once(listener, make_queue, raw):
    listen, received = listener
    a, b, c = make_queue(), make_queue(), make_queue()
    ca, _cb, cc = listen(a), listen(b), listen(c)
    for q in (a, b, c):
        _quiet(q)
    c.push("dup", "k", {})
    assert received() == [(cc, c.name)]
    raw(
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload, run_at) VALUES "
        "(%s, 'a1', 'k', '{}', NULL), (%s, 'a2', 'k', '{}', NULL), "
        "(%s, 'b1', 'k', '{}', now() + interval '1 hour'), (%s, 'dup', 'k', '{}', NULL)",
        (a.name, a.name, b.name, c.name),
    )
    # a: two ready rows, one wakeup; b: delayed only; c: a duplicate, nothing inserted
    assert received() == [(ca, a.name)]
    assert a.stats().ready == 2 and b.stats().delayed == 1


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_push_replace_wakes_when_the_message_is_ready_now(listener, queue):
    listen, received = listener
    channel = listen(queue)
    _quiet(queue)
    assert queue.push_replace("r", "k", {"v": 1}, run_at=dt.timedelta(hours=1)) == "inserted"
    assert received() == []
    assert queue.push_replace("r", "k", {"v": 2}) == "replaced"
    assert received() == [(channel, queue.name)]
    queue.reserve(timeout=600)
    assert queue.push_replace("r", "k", {"v": 3}) == "reserved"
    assert received() == []
    assert queue.push_replace("n", "k", {}) == "inserted"
    assert received() == [(channel, queue.name)]


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_replay_and_redrive_wake_the_target_queue(listener, make_queue):
    listen, received = listener
    dead = make_queue()
    q = make_queue(max_attempts=1, dead_letter_queue=dead.name, history_retention=3600)
    target = make_queue()
    cq, _cd, ct = listen(q), listen(dead), listen(target)
    for x in (q, dead, target):
        _quiet(x)
    q.push("done", "k", {})
    q.push("fails", "k", {})
    received()
    for r in q.reserve(n=2, timeout=600):
        assert q.commit(r) if r.key == "done" else q.rollback(r, delay=3600)  # last attempt: dead-lettered
    received()
    assert q.replay() >= 1
    assert received() == [(cq, q.name)]
    assert dead.redrive(target) == 1
    assert received() == [(ct, target.name)]
    assert dead.redrive(target) == 0
    assert received() == []


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_release_dead_workers_wakes_the_released_messages_queues(listener, db, make_queue):
    listen, received = listener
    a, b = make_queue(), make_queue()
    ca, _cb = listen(a), listen(b)
    _quiet(a)
    _quiet(b)
    dead = db.register_worker("dead")
    a.push("m", "k", {})
    received()
    a.reserve(worker=dead.reserve_as, timeout=600)
    silence_worker(db.connection, db.dialect.name, dead.worker_id)
    assert db.release_dead_workers(RELEASE_AFTER) >= 1
    assert received() == [(ca, a.name)]


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_rollback_without_delay_wakes_and_with_delay_does_not(listener, queue):
    listen, received = listener
    channel = listen(queue)
    _quiet(queue)
    queue.push("m", "k", {})
    received()
    [r] = queue.reserve(timeout=600)
    assert queue.rollback(r, delay=60)
    assert received() == []
    queue.remove("m", "k")
    queue.push("m2", "k", {})
    received()
    [r] = queue.reserve(timeout=600)
    assert queue.rollback(r)  # delay 0: ready again now (a hand-back at shutdown)
    assert received() == [(channel, queue.name)]


def test_a_worker_waiting_on_listen_picks_up_a_released_message_at_once(dsn, db, queue):
    """The worker's poll fallback is 60 s: only the release's wakeup can start it in time."""
    from pyqueue_sql import Worker

    from ..helpers import wait_for
    from ..worker.test_worker import idle_event, running

    dead = db.register_worker("dead")
    queue.push("orphan", "k", {})
    queue.reserve(worker=dead.reserve_as, timeout=600)
    silence_worker(db.connection, db.dialect.name, dead.worker_id)
    done = []
    worker = Worker(dsn, poll_fallback=60.0)
    worker.add_handler(queue.name, lambda job: done.append(job.key))
    idle = idle_event(worker)
    with running(worker):
        assert idle.wait(30)
        time.sleep(0.3)
        assert db.release_dead_workers(RELEASE_AFTER) >= 1
        wait_for(lambda: done, 10, "the released message (fallback 60 s)")
