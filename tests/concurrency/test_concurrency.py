"""Concurrency with several real connections, each in its own thread."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

import pyqueue_sql

from ..helpers import RELEASE_AFTER, silence_worker


def run_together(n, work):
    """Runs work(i) in n threads that start at the same moment; returns their results."""
    barrier = threading.Barrier(n)

    def start(i):
        barrier.wait()
        return work(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(start, range(n)))


def test_eight_connections_pushing_the_same_key_insert_exactly_one(connect, queue):
    dbs = [connect() for _ in range(8)]
    for round_ in range(5):
        results = run_together(8, lambda i: dbs[i].queue(queue.name).push(f"same-{round_}", "k", {"by": i}))
        assert results.count(True) == 1, results
    assert queue.stats().ready == 5


@pytest.mark.slow
def test_six_consumers_never_share_a_message(connect, queue):
    queue.push_many([(f"m{i:04d}", "k", i) for i in range(600)])
    dbs = [connect() for _ in range(6)]

    def consume(i):
        mine = []
        q = dbs[i].queue(queue.name)
        while batch := q.reserve(n=7, worker=f"consumer-{i}", timeout=60):
            mine += batch
        return mine

    got = run_together(6, consume)
    seen = Counter(r.key for batch in got for r in batch)
    assert len(seen) == 600
    assert max(seen.values()) == 1
    assert sum(1 for batch in got if batch) >= 2  # the work really was shared
    assert queue.stats().reserved == 600
    # Every token commits exactly once, from whichever connection.
    assert all(queue.commit(r) for batch in got for r in batch)
    assert queue.stats().reserved == 0


def test_concurrent_pop_is_at_most_once(connect, queue):
    queue.push_many([(f"m{i:04d}", "k", i) for i in range(300)])
    dbs = [connect() for _ in range(4)]

    def pop_all(i):
        out = []
        while batch := dbs[i].queue(queue.name).pop(5):
            out += batch
        return out

    got = run_together(4, pop_all)
    seen = Counter(m.key for batch in got for m in batch)
    assert len(seen) == 300 and max(seen.values()) == 1
    assert queue.pop(10) == []


@pytest.mark.slow
def test_expired_reservation_races_leave_one_owner(connect, queue):
    """Many consumers take over expired reservations at once: every take-over has
    one owner, and only the newest token of each message can commit."""
    queue.push_many([(f"m{i}", "k", i) for i in range(40)])
    first = queue.reserve(n=40, timeout=0.3)
    time.sleep(0.5)
    dbs = [connect() for _ in range(5)]
    got = run_together(5, lambda i: dbs[i].queue(queue.name).reserve(n=40, timeout=60))
    retaken = [r for batch in got for r in batch]
    assert sorted(r.key for r in retaken) == sorted(f"m{i}" for i in range(40))
    assert not any(queue.commit(r) for r in first)
    assert all(queue.commit(r) for r in retaken)


def test_rollback_and_commit_race_on_the_same_token(connect, queue):
    """Two holders of the same token (a duplicated consumer): exactly one of
    commit/rollback wins."""
    queue.push_many([(f"m{i}", "k", i) for i in range(30)])
    reservations = queue.reserve(n=30)
    a, b = connect().queue(queue.name), connect().queue(queue.name)

    def act(i):
        return [(a.commit(r) if i == 0 else b.rollback(r)) for r in reservations]

    commits, rollbacks = run_together(2, act)
    for c, r in zip(commits, rollbacks):
        assert c != r  # exactly one of them held the token
    s = queue.stats()
    assert s.ready == sum(rollbacks)


def _messages_named(db, name):
    """Rows of pyqueue_message under a queue name, read with plain SQL (whether a queue exists or not)."""
    cur = db.connection.cursor()
    try:
        cur.execute("SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", (name,))
        return cur.fetchone()[0]
    finally:
        cur.close()


@pytest.mark.slow
def test_pushes_racing_a_drop_get_unknown_queue_not_a_raw_error(connect, make_queue):
    """Producers that lose the race with queue_drop get UnknownQueueError, nothing else, and no
    message outlives the dropped queue (PostgreSQL has no foreign key to delete them: the drop does,
    after waiting for the pushes that hold the queue row's lock)."""
    pushers = [connect() for _ in range(3)]
    observer = connect()
    for _round in range(6):
        q = make_queue()
        stop = threading.Event()
        failures = []

        def produce(i, name=q.name):
            target, n = pushers[i].queue(name), 0
            while not stop.is_set():
                try:
                    target.push_many([(f"{i}-{n}-{j}", "k", j) for j in range(20)])
                    target.push(f"{i}-{n}-single", "k", 1)
                except pyqueue_sql.UnknownQueueError:
                    return
                except Exception as exc:  # pragma: no cover - what this test is about
                    failures.append(exc)
                    return
                n += 1

        threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.05)
        q.drop()
        time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(30)
        assert failures == [], failures
        assert _messages_named(observer, q.name) == 0


@pytest.mark.slow
def test_overlapping_batches_from_many_connections_do_not_deadlock(connect, queue):
    """Six connections push the same fresh keys in different orders, round
    after round: every key is inserted once and no call fails."""
    import random

    dbs = [connect() for _ in range(6)]
    rounds, per_round = 12, 100
    each_round = threading.Barrier(6, timeout=30)  # a failed pusher breaks it instead of hanging

    def push(i):
        rng = random.Random(i)
        inserted = 0
        for r in range(rounds):
            batch = [f"r{r}-k{j:03d}" for j in range(per_round)]
            rng.shuffle(batch)
            each_round.wait()
            try:
                inserted += dbs[i].queue(queue.name).push_many([(k, "kind", i) for k in batch])
            except Exception:
                each_round.abort()
                raise
        return inserted

    assert sum(run_together(6, push)) == rounds * per_round
    assert queue.stats().ready == rounds * per_round


@pytest.mark.only_dialect("postgresql")
def test_a_drop_inside_repeatable_read_leaves_no_message_a_new_queue_of_that_name_would_show(
    connect, db, make_queue
):
    """A push that commits after a REPEATABLE READ transaction took its snapshot is invisible to
    that transaction's queue_drop: the message stays behind in no queue, reached by no routine (a
    dead worker's release included), and queue_create of the same name deletes it, so the new
    queue starts empty."""
    q = make_queue()
    # no wakeup row is written by the second push (one went out less than an hour before), so
    # the drop's cascade into the wakeup table meets nothing changed after its snapshot
    q.set_notify_window(3600)
    q.push("before", "k", 1)
    dropper, pusher = connect(), connect()
    dead = db.register_worker("dead")
    cur = dropper.connection.cursor()
    dropper.connection.autocommit = False
    try:
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("SELECT count(*) FROM pyqueue_message")  # the snapshot is taken here
        assert pusher.queue(q.name).push("after", "late", 2) is True  # committed after the snapshot
        # reserved by a worker that then dies ("before", which the snapshot sees, stays untouched)
        [held] = pusher.queue(q.name).reserve(worker=dead.reserve_as, timeout=600, kinds=["late"])
        assert held.key == "after"
        cur.execute("SELECT queue_drop(%s)", (q.name,))
        dropper.connection.commit()
    except BaseException:
        dropper.connection.rollback()
        raise
    finally:
        dropper.connection.autocommit = True
        cur.close()
    assert _messages_named(pusher, q.name) == 1  # left behind: the drop could not see it
    with pytest.raises(pyqueue_sql.UnknownQueueError):
        q.stats()
    with pytest.raises(pyqueue_sql.UnknownQueueError):
        pusher.queue(q.name).push("later", "k", 3)
    silence_worker(db.connection, db.dialect.name, dead.worker_id)  # its last sign of life an hour ago
    assert (
        db.release_dead_workers(RELEASE_AFTER) == 1
    )  # the leftover was the dead worker's: released, no error
    q.create()
    assert q.stats().ready == 0
    assert _messages_named(pusher, q.name) == 0
    assert q.reserve() == []


@pytest.mark.only_dialect("postgresql")  # on MySQL queue_create waits for such a push (docs/contract.md)
def test_create_of_an_existing_queue_keeps_its_messages_while_a_push_holds_the_queue_row(connect, make_queue):
    """queue_create of a queue that exists changes its settings and nothing else, also while
    another transaction holds the queue row's lock (a push not yet committed)."""
    q = make_queue()
    q.push_many([(f"m{i}", "k", i) for i in range(3)])
    pusher = connect()
    with pusher.transaction():
        pusher.queue(q.name).push("open", "k", 9)
        q.create(max_attempts=7)
    q.create(visibility_timeout=120)
    assert q.stats().ready == 4
    assert q.settings().max_attempts == 7
