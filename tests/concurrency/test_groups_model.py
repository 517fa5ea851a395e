"""FIFO groups under concurrency, with real connections (one per thread), on every dialect.

test_groups_stay_exclusive_and_ordered_under_concurrent_consumers: producers push into many groups
while six consumers reserve, commit (alone or in batches), roll back and abandon reservations
(short visibility timeouts: abandoned ones expire and are delivered again or dead-lettered). A
shared record, guarded by a lock per group, holds each group's message that is out: a reserve that
returns another message of a group whose recorded message is still in the queue is a violation
(the commit of a recorded message holds its group's lock from before the call until the record is
updated, so a promotion is never mistaken for one). A monitor connection checks the tables all the
while: no group ever has two messages that are not blocked. At the end every group's commits are in
push order, every message was committed once or dead-lettered once, and no group row is left.

test_random_interleavings_with_groups_match_the_model: the hypothesis state machine of
test_model.py with groups (QueueMachine.GROUPS): pushes draw a group or none, and the model predicts
which messages a reserve or pop may return (heads only; promotion on every way out of the queue, by
run time then push order, at max(run_at, now); swaps of a never-delivered head; dead letters and
moved messages without a group), and after every step the tables must equal it, blocked rows and
group keys included.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import defaultdict

import pytest

import pyqueue_sql

from .test_model import SETTINGS, QueueMachine, run_machine

pytestmark = pytest.mark.slow

SENTINEL_SQL = {
    "postgresql": "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'",
    "mysql": "CAST('9999-12-31 23:59:59.999999' AS DATETIME(6))",
}
GROUPS = 20
PER_GROUP = 10
PLAIN = 30
CONSUMERS = 6
PRODUCERS = 2
MAX_ATTEMPTS = 3
LEASE_S = 0.4
# More rounds for a longer run: PYQUEUE_GROUPS_STRESS_ROUNDS=20
ROUNDS = int(os.environ.get("PYQUEUE_GROUPS_STRESS_ROUNDS", "2"))


def query(db: pyqueue_sql.Database, sql: str, params=()) -> list[tuple]:
    cur = db.connection.cursor()
    try:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        cur.close()


def group_of(key: str) -> tuple[str | None, int]:
    """'g07-003' -> ('g07', 3); 'plain-12' -> (None, 12)."""
    head, _, n = key.partition("-")
    return (None if head == "plain" else head), int(n)


class Record:
    """What the consumers know: per group, the message that is out (reserved, or given back and
    not yet delivered again) and the highest sequence reserved."""

    def __init__(self) -> None:
        self.locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self.guard = threading.Lock()  # for the dicts themselves
        self.out: dict[str, str] = {}
        self.highest: dict[str, int] = {}
        self.violations: list[str] = []

    def lock(self, group: str) -> threading.Lock:
        with self.guard:
            return self.locks[group]

    def left(self, group: str, key: str) -> None:
        """key left the queue (the caller holds the group's lock)."""
        if self.out.get(group) == key:
            del self.out[group]


def run_round(connect, dialect: str, round_: int, rng: random.Random) -> dict:
    admin = connect()
    tag = uuid.uuid4().hex[:8]
    dlq = admin.queue(f"t.gstress.{tag}.dlq").create()
    queue = admin.queue(f"t.gstress.{tag}").create(
        visibility_timeout=LEASE_S,
        max_attempts=MAX_ATTEMPTS,
        dead_letter_queue=dlq.name,
        history_retention=3600,
    )
    record = Record()
    producers_done = threading.Event()
    done = threading.Event()
    errors: list[BaseException] = []
    stats = defaultdict(int)
    stats_lock = threading.Lock()

    def count(what: str, n: int = 1) -> None:
        with stats_lock:
            stats[what] += n

    def guarded(body):
        def run(*args):
            try:
                body(*args)
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)
                done.set()

        return run

    @guarded
    def produce(p: int) -> None:
        q = connect().queue(queue.name)
        mine = [g for g in range(GROUPS) if g % PRODUCERS == p]
        for j in range(PER_GROUP):
            # one message per group per batch: the order within each group is the push order
            messages = [
                pyqueue_sql.NewMessage(f"g{g:02d}-{j:03d}", "job", {"g": g, "j": j}, group=f"g{g:02d}")
                for g in mine
            ]
            if j % 2:
                assert q.push_many(messages) == len(messages)
            else:
                for m in messages:
                    assert q.push(m.key, m.kind, m.payload, group=m.group) is True
            for i in range(j, PLAIN, PER_GROUP):
                if i % PRODUCERS == p:
                    assert q.push(f"plain-{i:03d}", "job", {"i": i})

    @guarded
    def consume(c: int) -> None:
        db = connect()
        q = db.queue(queue.name)
        my_rng = random.Random(rng.random())
        live_sql = "SELECT 1 FROM pyqueue_message WHERE queue_name = %s AND p_key = %s"
        while not done.is_set():
            got = q.reserve(n=my_rng.randint(1, 3), worker=f"c{c}", timeout=LEASE_S)
            if not got:
                if producers_done.is_set():
                    s = q.stats()
                    if s.ready + s.delayed + s.reserved == 0:
                        done.set()
                        return
                time.sleep(0.005)
                continue
            count("reserved", len(got))
            for r in got:
                group, seq = group_of(r.key)
                if group is None:
                    continue
                with record.lock(group):
                    held = record.out.get(group)
                    if held is not None and held != r.key:
                        if query(db, live_sql, (queue.name, held)):
                            record.violations.append(
                                f"{r.key} reserved by c{c} while {held} of its group is still out"
                            )
                    if seq < record.highest.get(group, -1):
                        record.violations.append(f"{r.key} reserved after a later message of its group")
                    record.out[group] = r.key
                    record.highest[group] = max(seq, record.highest.get(group, -1))
            time.sleep(my_rng.random() * 0.003)  # hold it a moment: overlaps have time to show
            commits, rest = [], []
            for r in got:
                action = my_rng.random()
                (commits if action < 0.72 else rest).append((action, r))
            # commits: one call for several (commit_batch) or one each; each group's lock is held
            # from before the call until the record says its message left
            if len(commits) > 1 and my_rng.random() < 0.5:
                rs = [r for _, r in commits]
                groups = sorted({g for g in (group_of(r.key)[0] for r in rs) if g is not None})
                locks = [record.lock(g) for g in groups]
                for lock in locks:
                    lock.acquire()
                try:
                    q.commit_many(rs)
                    count("commit_batches")
                    for r in rs:
                        group = group_of(r.key)[0]
                        if group is not None and not query(db, live_sql, (queue.name, r.key)):
                            record.left(group, r.key)
                finally:
                    for lock in reversed(locks):
                        lock.release()
            else:
                for _, r in commits:
                    group = group_of(r.key)[0]
                    if group is None:
                        q.commit(r)
                        continue
                    with record.lock(group):
                        if q.commit(r):
                            record.left(group, r.key)
            for action, r in rest:
                group, _ = group_of(r.key)
                if action < 0.88:  # give it back (dead-lettered on its last attempt)
                    if group is None:
                        q.rollback(r)
                        continue
                    with record.lock(group):
                        if q.rollback(r, delay=my_rng.choice((None, None, 0.02))):
                            count("rolled_back")
                            if r.attempts >= MAX_ATTEMPTS:  # dead-lettered
                                record.left(group, r.key)
                else:
                    count("abandoned")  # left to expire

    @guarded
    def monitor() -> None:
        db = connect()
        sql = (
            "SELECT group_key, count(*) FROM pyqueue_message WHERE queue_name = %s AND group_key IS NOT NULL "
            f"AND scheduled_at < {SENTINEL_SQL[dialect]} GROUP BY group_key HAVING count(*) > 1"
        )
        while not done.is_set():
            bad = query(db, sql, (queue.name,))
            if bad:
                record.violations.append(f"two messages of a group are not blocked: {bad}")
            count("monitor_checks")
            time.sleep(0.002)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    threads += [threading.Thread(target=consume, args=(c,)) for c in range(CONSUMERS)]
    threads.append(threading.Thread(target=monitor))
    started = time.monotonic()
    for th in threads:
        th.start()
    for th in threads[:PRODUCERS]:
        th.join()
    producers_done.set()
    finished = done.wait(timeout=240)
    done.set()
    for th in threads:
        th.join()
    elapsed = time.monotonic() - started
    if errors:
        raise errors[0]
    assert finished, "the queue did not drain"
    assert record.violations == [], record.violations[:10]

    # every message left once, committed or dead-lettered, and each group's commits are in push
    # order (pyqueue_history: one row per message that left, ids in the order they left)
    history = query(
        admin, "SELECT p_key, outcome FROM pyqueue_history WHERE queue_name = %s ORDER BY id", (queue.name,)
    )
    left = [k for k, _ in history]
    assert len(left) == len(set(left)), (
        "a message left twice",
        sorted(k for k in set(left) if left.count(k) > 1),
    )
    pushed = {f"g{g:02d}-{j:03d}" for g in range(GROUPS) for j in range(PER_GROUP)} | {
        f"plain-{i:03d}" for i in range(PLAIN)
    }
    assert set(left) == pushed, ("lost", sorted(pushed - set(left)), "unknown", sorted(set(left) - pushed))
    dead = {k for k, outcome in history if outcome == "dead_lettered"}
    assert {k for k, outcome in history if outcome != "dead_lettered"} == pushed - dead
    assert {outcome for _, outcome in history} <= {"committed", "dead_lettered"}
    assert {m.key for m in dlq.pop(10_000)} == dead
    for g in range(GROUPS):
        seqs = [
            group_of(k)[1]
            for k, outcome in history
            if outcome == "committed" and group_of(k)[0] == f"g{g:02d}"
        ]
        assert seqs == sorted(seqs), (f"g{g:02d}", "committed out of push order", seqs)
    assert query(admin, "SELECT count(*) FROM pyqueue_group WHERE queue_name = %s", (queue.name,)) == [(0,)]
    assert query(admin, "SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", (queue.name,)) == [(0,)]
    queue.drop()
    dlq.drop()
    return {**stats, "dead_lettered": len(dead), "seconds": round(elapsed, 1)}


def test_groups_stay_exclusive_and_ordered_under_concurrent_consumers(connect, dialect):
    rng = random.Random(20261124)
    totals = defaultdict(int)
    for round_ in range(ROUNDS):
        for k, v in run_round(connect, dialect, round_, rng).items():
            totals[k] += v
    # the run really exercised what it is about
    assert totals["abandoned"] > 0 and totals["rolled_back"] > 0 and totals["commit_batches"] > 0, totals
    assert totals["dead_lettered"] > 0, totals
    print(dict(totals))


@pytest.mark.only_dialect("mysql")  # the AUTO-INC lock is InnoDB's
def test_a_grouped_push_that_loses_the_auto_inc_lock_is_a_deadlock(connect, dialect):
    """InnoDB (innodb_autoinc_lock_mode=1) reports a deadlock on the message table's AUTO-INC
    lock as error 1467 and rolls the transaction back whole: a grouped push waits for that lock
    while a batch push (INSERT ... SELECT) holds it and waits for a row the push's transaction
    wrote. The client raises it as errors.SerializationError, as a 1213 deadlock (and runs an
    autocommit call again), not as an unknown server error."""
    admin = connect()
    queue = admin.queue(f"t.autoinc.{uuid.uuid4().hex[:8]}").create()
    pusher, batcher, watcher = connect(), connect(), connect()
    outcome = {}

    def batch():  # many new rows first (the heavier transaction), then a wait for "k1"
        messages = [(f"b{i:03d}", "job", i) for i in range(60)] + [("k1", "job", 0)]
        outcome["batch"] = batcher.queue(queue.name).push_many(messages)

    with pytest.raises(pyqueue_sql.errors.SerializationError, match="1467"):
        with pusher.transaction():
            q = pusher.queue(queue.name)
            assert q.push("k1", "job", 0, group="g1") is True  # "k1" locked until the end
            thread = threading.Thread(target=batch)
            thread.start()
            deadline = time.monotonic() + 60
            while not query(
                watcher,
                "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s AND info LIKE %s",
                (batcher.connection.thread_id(), "INSERT IGNORE INTO pyqueue_message%"),
            )[0][0]:
                assert thread.is_alive() and time.monotonic() < deadline, "the batch did not start its insert"
                time.sleep(0.01)
            time.sleep(0.3)  # its rows before "k1" inserted: it waits for "k1", holding the AUTO-INC lock
            q.push("k2", "job", 0, group="g2")  # waits for the AUTO-INC lock: a deadlock
    thread.join(10)
    assert outcome["batch"] == 61  # the push's transaction was rolled back whole: "k1" is the batch's
    assert query(admin, "SELECT COUNT(*) FROM pyqueue_group WHERE queue_name = %s", (queue.name,)) == [(0,)]
    queue.drop()


# ---- the model, with groups ---------------------------------------------------------------------


class GroupQueueMachine(QueueMachine):
    GROUPS = (None, "g0", "g0", "g1")


def test_random_interleavings_with_groups_match_the_model(connect, dialect):
    run_machine(connect, dialect, machine=GroupQueueMachine, settings_=SETTINGS)
