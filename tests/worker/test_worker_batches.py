"""Prefetch and batched acknowledgement, for both runtimes (Worker and AsyncWorker, with plain
handlers), against real servers: every success committed exactly once, a stale token in a batch
not committed, a prefetched message never run on a lapsing lease, a graceful stop that flushes,
a SIGKILLed worker that loses nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import pyqueue_sql
from pyqueue_sql import Worker
from pyqueue_sql.aio.worker import AsyncWorker

from ..helpers import wait_for
from .test_worker import ROOT, running

RUNTIMES = {"threads": Worker, "asyncio": AsyncWorker}


@pytest.fixture(params=sorted(RUNTIMES))
def worker_class(request):
    return RUNTIMES[request.param]


def _empty(queue) -> bool:
    s = queue.stats()
    return s.ready + s.reserved + s.delayed == 0


def test_batched_acks_commit_every_success_exactly_once(dsn, queue, worker_class):
    """Quick handlers on several threads or tasks: the successes are committed together
    (queue_commit_batch), each exactly once, and nothing is left reserved."""
    seen: list[str] = []
    lock = threading.Lock()
    worker = worker_class(dsn, concurrency=6, prefetch=12, ack_interval=0.01, poll_fallback=0.2)

    @worker.handler(queue.name)
    def handle(job):
        with lock:
            seen.append(job.key)

    keys = [f"k{i:03}" for i in range(400)]
    queue.push_many([(k, "k", {}) for k in keys])
    with running(worker):
        wait_for(lambda: worker.stats.succeeded == 400, 60, "400 commits")
        assert _empty(queue)
    assert sorted(seen) == keys
    assert worker.stats.lost == 0 and worker.stats.ack_batches > 0
    assert worker.stats.db_calls < 200  # batches: far fewer calls than messages


def test_a_stale_token_in_a_batch_is_not_committed_and_the_message_comes_back(dsn, db, queue, worker_class):
    """A handler's reservation is extended from another connection while it runs (its token
    changes behind the worker's back): the batch that carries the old token commits the others,
    not that one; the worker counts it lost, and the message is redelivered when the new
    reservation ends, then committed."""
    other = pyqueue_sql.connect(dsn)
    runs: list[tuple[str, int]] = []
    lock = threading.Lock()
    worker = worker_class(dsn, concurrency=4, prefetch=8, ack_interval=0.05, lease=10, poll_fallback=0.2)

    @worker.handler(queue.name)
    def handle(job):
        if job.key == "k05" and job.attempts == 1:
            assert other.queue(queue.name).extend(job.reservation, timeout=1) is not None
        with lock:
            runs.append((job.key, job.attempts))

    keys = [f"k{i:02}" for i in range(30)]
    try:
        queue.push_many([(k, "k", {}) for k in keys])
        with running(worker):
            wait_for(lambda: ("k05", 2) in runs and _empty(queue), 60, "the stale one's redelivery")
            wait_for(lambda: worker.stats.succeeded == 30, 10, "the last acknowledgement")
    finally:
        other.close()
    assert sorted(runs) == sorted([(k, 1) for k in keys] + [("k05", 2)])
    assert worker.stats.lost == 1  # the stale token: reported, not committed


def test_a_prefetched_message_never_runs_after_its_lease(dsn, queue, worker_class):
    """Short leases and a heartbeat that stalls (an on_heartbeat hook blocks its thread): the
    messages prefetched behind a slow handler wait until their lease runs low and are handed back
    unstarted (then reserved again), never run on a lapsing reservation. Each handler start is
    checked against the lease the worker reserved or extended the message for."""
    lease = 1.5
    starts: list[tuple[str, float]] = []
    lock = threading.Lock()
    worker = worker_class(dsn, concurrency=1, prefetch=4, lease=lease, poll_fallback=0.2)
    worker.state.handler_avg = 0.001  # as if quick handlers had run: the worker prefetches at once
    stalled = threading.Event()

    def stall(_worker):
        if not stalled.is_set():
            stalled.set()
            time.sleep(4 * lease)

    async def stall_task(_worker):  # AsyncWorker: blocks the heartbeat task, not the event loop
        if not stalled.is_set():
            stalled.set()
            await asyncio.sleep(4 * lease)

    worker.on_heartbeat.append(stall if worker_class is Worker else stall_task)

    @worker.handler(queue.name)
    def handle(job):
        with lock:
            starts.append((job.key, job.lease_until - time.monotonic()))
        if job.key == "k0" and job.attempts == 1:
            time.sleep(2 * lease)  # past the prefetched messages' lease (the heartbeat stalls)

    queue.push_many([(f"k{i}", "k", {}) for i in range(5)])
    with running(worker):
        wait_for(lambda: _empty(queue), 60, "every message")
    assert worker.stats.lease_low >= 1, "no prefetched message waited past its lease"
    assert {k for k, _ in starts} == {f"k{i}" for i in range(5)}
    assert all(left >= lease / 3 for _, left in starts), starts


def test_a_stop_gives_back_the_prefetched_messages_without_counting_their_delivery(
    dsn, make_queue, worker_class
):
    """A queue of one attempt that keeps results: the messages prefetched behind a running handler
    are given back by a stop ready again, their attempts as before their reservation, never
    ended as 'failed' (with no reason) without having run."""
    queue = make_queue(max_attempts=1)
    queue.set_result_retention(3600)
    worker = worker_class(dsn, concurrency=1, prefetch=4, poll_fallback=0.2)
    worker.state.handler_avg = 0.001  # as if quick handlers had run: the worker prefetches at once
    ran: list[str] = []
    release = threading.Event()

    @worker.handler(queue.name)
    def handle(job):
        ran.append(job.key)
        release.wait(30)

    keys = [f"k{i}" for i in range(5)]
    queue.push_many([(key, "k", {}) for key in keys])
    with running(worker):
        wait_for(lambda: ran and queue.stats().reserved == 5, 30, "a running handler and 4 prefetched")
        worker.stop()
        release.set()
    assert len(ran) == 1 and worker.stats.handed_back == 4
    results = {key: queue.result(key, "k") for key in keys}
    assert results[ran[0]].state == "succeeded"
    for key in set(keys) - set(ran):
        assert (results[key].state, results[key].attempts) == ("ready", 0), (key, results[key])


def test_a_graceful_stop_flushes_the_acknowledgements(dsn, queue, worker_class):
    """Successes still waiting for their batch (a long ack_interval) are committed by the stop:
    nothing is left reserved."""
    done: list[str] = []
    lock = threading.Lock()
    worker = worker_class(dsn, concurrency=4, ack_interval=30.0, ack_batch=1000, poll_fallback=0.2)

    @worker.handler(queue.name)
    def handle(job):
        with lock:
            done.append(job.key)

    queue.push_many([(f"k{i:02}", "k", {}) for i in range(50)])
    with running(worker):
        wait_for(lambda: len(done) == 50, 30, "every handler")
        assert worker.stats.succeeded < 50  # still waiting for the batch
        started = time.monotonic()
    assert time.monotonic() - started < 20  # the stop did not wait out the interval
    assert worker.stats.succeeded == 50 and worker.stats.lost == 0
    s = queue.stats()
    assert (s.ready, s.reserved, s.delayed) == (0, 0, 0)


CHILD = """
import asyncio, os, sys, threading
from pyqueue_sql import Worker
from pyqueue_sql.aio.worker import AsyncWorker
dsn, queue, runtime, record = sys.argv[1:5]
cls = Worker if runtime == "threads" else AsyncWorker
worker = cls(dsn, concurrency=4, lease=2, ack_interval=60.0, ack_batch=10000, poll_fallback=0.2)
def handle(job):
    with open(record, "a") as f:
        f.write(job.key + "\\n")
worker.add_handler(queue, handle)
run = worker.run()
if runtime == "asyncio":
    asyncio.run(run)
"""


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_worker_killed_with_acknowledgements_pending_loses_nothing(dsn, queue, tmp_path, runtime):
    """SIGKILL while every handler has finished but no batch was sent (a long ack_interval): the
    messages are still reserved, come back after the lease and are committed by the next
    worker (at-least-once)."""
    record = tmp_path / "record"
    record.touch()
    keys = [f"k{i:02}" for i in range(20)]
    queue.push_many([(k, "k", {}) for k in keys])
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, dsn, queue.name, runtime, str(record)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    try:
        wait_for(lambda: len(record.read_text().split()) >= 20, 30, "every handler in the victim")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    s = queue.stats()
    assert s.reserved == 20, "the acknowledgements were not pending"
    seen: list[str] = []
    lock = threading.Lock()
    worker = RUNTIMES[runtime](dsn, concurrency=4, poll_fallback=0.2)

    @worker.handler(queue.name)
    def handle(job):
        with lock:
            seen.append(job.key)

    with running(worker):
        wait_for(lambda: _empty(queue), 30, "the redelivery after the lease")
    assert sorted(seen) == keys and worker.stats.succeeded == 20


def test_a_graceful_stop_flushes_the_last_successes_through_a_lost_connection(dsn, db, queue, worker_class):
    """The server drops the worker's connections while successes wait for their batch, and the
    worker is stopped right then: the completer reconnects and commits them before the worker
    ends (a graceful stop does not give up on them), so nothing stays reserved."""
    from tests.faults.test_faults import database_of, kill_from_server, sessions_of_database

    before = set(sessions_of_database(db, database_of(dsn)))
    done: list[str] = []
    worker = worker_class(dsn, concurrency=2, prefetch=0, ack_interval=1.0, poll_fallback=0.2, register=False)

    @worker.handler(queue.name)
    def handle(job):
        done.append(job.key)

    queue.push("first", "k", {})
    with running(worker):
        wait_for(lambda: worker.stats.succeeded == 1, 30, "the first commit (the completer connected)")
        queue.push_many([(f"k{i}", "k", {}) for i in range(5)])
        wait_for(lambda: len(done) == 6, 30, "five more handled")
        kill_from_server(db, [i for i in sessions_of_database(db, database_of(dsn)) if i not in before])
        worker.stop()
    assert worker.stats.succeeded == 6, worker.stats
    assert _empty(queue)
