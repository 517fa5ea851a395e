"""Worker.add_batch_handler: a batch's time limit, its linger, and a stop while a batch runs, on
each dialect with real connections (the task layer over it: tests/tasks/test_batch_tasks.py)."""

from __future__ import annotations

import threading
import time

import pytest

import pyqueue_sql
from pyqueue_sql import InvalidArgumentError
from pyqueue_sql.worker import batches


def _run(worker):
    thread = threading.Thread(target=lambda: worker.run(install_signals=False), daemon=True)
    thread.start()
    return thread


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_batch_over_its_timeout_fails_each_of_its_jobs(db, dsn, make_queue):
    q = make_queue()
    worker = pyqueue_sql.Worker(dsn, concurrency=1, register=False, lease=30)
    outcomes: list[tuple[str, str, str | None]] = []
    worker.on_outcome.append(lambda job, outcome, error: outcomes.append((job.key, outcome, error)))

    def slow(jobs):
        time.sleep(5 if len(jobs) > 1 else 0)

    worker.add_batch_handler(q.name, slow, "k", size=10, timeout=0.3)
    q.push_many([(f"k{i}", "k", {}) for i in range(4)])
    thread = _run(worker)
    try:
        _wait(lambda: len(outcomes) >= 4, 20, "the batch's four outcomes")
    finally:
        worker.stop()
        thread.join(30)
    assert sorted(k for k, _, _ in outcomes) == ["k0", "k1", "k2", "k3"]
    assert {(o, e) for _, o, e in outcomes} == {
        ("retry", "TimeoutError: the handler did not finish within its timeout of 0.3 s")
    }
    rows = {r.key: r.attempts for r in q.messages()}
    assert rows == {f"k{i}": 1 for i in range(4)}


def test_a_batch_lingers_for_more_and_a_stop_lets_a_running_batch_finish(db, dsn, make_queue):
    q = make_queue()
    worker = pyqueue_sql.Worker(dsn, concurrency=1, register=False, lease=30)
    sizes: list[int] = []
    started = threading.Event()

    def collect(jobs):
        sizes.append(len(jobs))
        started.set()
        time.sleep(0.5)

    worker.add_batch_handler(q.name, collect, "k", size=5, linger=1.0)
    thread = _run(worker)
    try:
        q.push("a", "k", {})
        time.sleep(0.2)  # within the linger: the same batch
        q.push_many([("b", "k", {}), ("c", "k", {})])
        assert started.wait(10)
        worker.stop()  # while the batch runs: it finishes and commits
        thread.join(30)
    finally:
        worker.stop()
    assert sizes == [3]
    assert worker.unfinished == [] and worker.stats.succeeded == 3
    assert q.messages() == []


def test_a_batch_handler_is_refused_in_one_line_where_it_cannot_run(dsn):
    worker = pyqueue_sql.Worker(dsn, register=False)
    with pytest.raises(InvalidArgumentError, match="batch's size must be an int >= 1"):
        worker.add_batch_handler("q", lambda jobs: None, "k", size=0)
    with pytest.raises(InvalidArgumentError, match="serves one kind"):
        worker.add_batch_handler("q", lambda jobs: None, None, size=3)  # type: ignore[arg-type]
    worker.add_batch_handler("q", lambda jobs: None, "k", size=3)
    with pytest.raises(InvalidArgumentError, match="already has a handler for kind 'k'"):
        worker.add_batch_handler("q", lambda jobs: None, "k", size=3)


def test_a_lane_whose_queue_is_missing_logs_it_and_drains_once_it_exists(db, dsn, caplog):
    name = f"b.late.{time.monotonic_ns()}"
    worker = pyqueue_sql.Worker(dsn, concurrency=1, register=False)
    done: list[int] = []
    worker.add_batch_handler(name, lambda jobs: done.append(len(jobs)), "k", size=10)
    thread = _run(worker)
    try:
        _wait(lambda: worker.stats.dispatch_errors >= 1, 10, "the lane's error")
        q = db.queue(name).create()
        q.push_many([(f"k{i}", "k", {}) for i in range(3)])
        _wait(lambda: worker.stats.succeeded == 3, 20, "the batch once the queue exists")
    finally:
        worker.stop()
        thread.join(30)
    assert sum(done) == 3 and not thread.is_alive()
    assert any("error in the reserve loop" in r.getMessage() for r in caplog.records)
    db.queue(name).drop()


class _BlockedLane:
    """A worker whose batch handler (size 2) blocks until go_on, over `messages` messages (k0,
    k1, ...): the calls' keys, `running` set at each call. start=False: the test starts it (start())
    once it has hooked into the worker's parts."""

    def __init__(self, dsn, q, messages=4, start=True, **settings):
        self.worker = pyqueue_sql.Worker(dsn, concurrency=1, register=False, lease=30, **settings)
        self.calls: list[list[str]] = []
        self.running, self.go_on = threading.Event(), threading.Event()
        self.worker.add_batch_handler(q.name, self.blocking, "k", size=2)
        q.push_many([(f"k{i}", "k", {}) for i in range(messages)])
        if start:
            self.start()

    def start(self):
        self.thread = _run(self.worker)

    def blocking(self, jobs):
        self.calls.append(sorted(j.key for j in jobs))
        self.running.set()
        assert self.go_on.wait(30)

    def end(self):
        self.go_on.set()
        self.worker.stop()
        self.thread.join(30)


def test_a_lane_reserves_the_next_batch_while_a_batch_runs_and_a_stop_hands_it_back(db, dsn, make_queue):
    # The mechanism of a prefetching lane: while the first batch's handler blocks, the lane has
    # already reserved the second one (4 jobs reserved, 2 started); a stop then lets the running
    # batch finish and commit, and hands the prefetched one back unstarted, its delivery not counted.
    q = make_queue()
    lane = _BlockedLane(dsn, q)
    worker = lane.worker
    try:
        assert lane.running.wait(10)
        _wait(lambda: worker.stats.reserved == 4, 10, "the second batch reserved while the first runs")
        assert len(lane.calls) == 1
        worker.stop()  # while the first batch runs
    finally:
        lane.end()
    assert len(lane.calls) == 1 and worker.unfinished == []
    assert worker.stats.succeeded == 2 and worker.stats.handed_back == 2
    left = {m.key: m.attempts for m in q.messages()}
    assert sorted(left) == sorted({"k0", "k1", "k2", "k3"} - set(lane.calls[0]))
    assert set(left.values()) == {0}


def test_a_lane_whose_turn_comes_after_the_stop_reserves_nothing(db, dsn, make_queue, monkeypatch):
    # The runner takes the batch reserved ahead (k2, k3), which gives the reserver its turn, and
    # hands it back because the stop came; a reserve in that turn would take what is ready (k4,
    # or k2 and k3 once handed back) after the stop. Made certain, not left to timing: the
    # reserver waits for its turn in one long slice (a slice that ended between the stop and the
    # runner's taking the batch would end the reserver without a turn), and the runner is held
    # before its hand-back until the reserver has ended, while the database is read.
    monkeypatch.setattr(batches, "WAIT_SLICE", 30.0)
    q = make_queue()
    lane = _BlockedLane(dsn, q, messages=5, start=False)
    worker = lane.worker
    held, let_go, reserver_ended = threading.Event(), threading.Event(), threading.Event()
    reserver, hand_back = worker.batches.lane_steps, worker.dispatch.hand_back_steps

    def reserver_steps(*args, **kwargs):
        try:
            return (yield from reserver(*args, **kwargs))
        finally:
            reserver_ended.set()

    def held_hand_back(job, delay=0.0):
        held.set()
        let_go.wait(30)
        return (yield from hand_back(job, delay))

    monkeypatch.setattr(worker.batches, "lane_steps", reserver_steps)
    monkeypatch.setattr(worker.dispatch, "hand_back_steps", held_hand_back)
    lane.start()
    try:
        assert lane.running.wait(10)
        _wait(lambda: worker.stats.reserved == 4, 10, "the second batch reserved while the first runs")
        worker.stop()  # while the first batch runs: the reserver waits for its turn
        lane.go_on.set()
        assert held.wait(10), "the runner never handed back the batch reserved ahead"
        assert reserver_ended.wait(10), "the reserver did not end after its turn"
        ahead = sorted({"k0", "k1", "k2", "k3"} - set(lane.calls[0]))
        states = {m.key: (m.state, m.attempts) for m in q.messages() if m.key not in lane.calls[0]}
        assert states == {**{k: ("reserved", 1) for k in ahead}, "k4": ("ready", 0)}
        assert worker.stats.reserved == 4
    finally:
        let_go.set()
        lane.end()
    assert len(lane.calls) == 1 and worker.unfinished == [] and not lane.thread.is_alive()
    assert worker.stats.reserved == 4 and worker.stats.succeeded == 2 and worker.stats.handed_back == 2
    states = {m.key: (m.state, m.attempts) for m in q.messages()}
    assert states == {k: ("ready", 0) for k in [*ahead, "k4"]}


def test_a_lane_without_prefetch_reserves_only_once_its_batch_is_done(db, dsn, make_queue):
    lane = _BlockedLane(dsn, make_queue(), prefetch=0)
    try:
        assert lane.running.wait(10)
        time.sleep(0.5)  # a reserve the lane would make meanwhile has had time to show
        assert lane.worker.stats.reserved == 2
        lane.go_on.set()
        _wait(lambda: lane.worker.stats.succeeded == 4, 20, "both batches")
    finally:
        lane.end()


def test_a_batch_reserved_ahead_never_runs_after_its_lease(db, dsn, make_queue):
    # Short leases and a heartbeat that stalls (an on_heartbeat hook blocks its thread): the batch
    # reserved while a slow first batch runs waits until its lease runs low and is handed back
    # unstarted (then reserved again), never run on a lapsing reservation; each start is checked
    # against the lease the worker reserved or extended its jobs for.
    lease = 1.5
    q = make_queue()
    worker = pyqueue_sql.Worker(dsn, concurrency=1, register=False, lease=lease)
    stalled, slow = threading.Event(), threading.Event()

    def stall(_worker):
        if not stalled.is_set():
            stalled.set()
            time.sleep(4 * lease)

    worker.on_heartbeat.append(stall)
    starts: list[tuple[str, float]] = []

    def handle(jobs):
        starts.extend((j.key, j.lease_until - time.monotonic()) for j in jobs)
        if not slow.is_set():
            slow.set()
            time.sleep(2 * lease)  # past the lease of the batch reserved meanwhile

    worker.add_batch_handler(q.name, handle, "k", size=2)
    q.push_many([(f"k{i}", "k", {}) for i in range(4)])
    thread = _run(worker)
    try:
        _wait(lambda: q.messages() == [], 60, "every message")
    finally:
        worker.stop()
        thread.join(30)
    assert worker.stats.lease_low >= 1, "no job of the batch ahead waited past its lease"
    assert {k for k, _ in starts} == {f"k{i}" for i in range(4)}
    assert all(left >= lease / 3 for _, left in starts), starts
