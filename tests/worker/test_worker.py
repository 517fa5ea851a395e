"""The worker runtime (pyqueue_sql.Worker) and its wakeups, against real servers.

Timing checks use generous margins (seconds) against a poll fallback that is
set far longer, so that they prove which path woke the worker without timing
anything tightly on a loaded machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import inspect
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import RetryPolicy, Worker
from pyqueue_sql.aio.worker import AsyncWorker

from ..helpers import RELEASE_AFTER, silence_worker, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@contextlib.contextmanager
def running(worker: Worker | AsyncWorker):
    """Runs the worker (an AsyncWorker on an event loop of its own) on a thread; stops it and
    waits for it at the end."""
    failure = []

    def target():
        try:
            outcome = worker.run(install_signals=False)
            if inspect.iscoroutine(outcome):  # an AsyncWorker: its own event loop on this thread
                asyncio.run(outcome)
        except BaseException as exc:  # surfaced by the test
            failure.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    try:
        yield worker
    finally:
        worker.stop()
        t.join(timeout=60)
        assert not t.is_alive(), "the worker did not stop"
        assert not failure, failure


def idle_event(worker: Worker) -> threading.Event:
    """Set each time the worker finds nothing to do and is about to wait."""
    event = threading.Event()
    worker.on_idle.append(lambda _w: event.set())
    return event


def quiet_worker(dsn, **kw) -> Worker:
    """A worker whose poll fallback is far longer than any margin the tests allow
    (MySQL: the long poll inside the server wakes it; each wait lasts 1 s)."""
    kw.setdefault("poll_fallback", 60.0)
    return Worker(dsn, **kw)


# -- wakeups ----------------------------------------------------------------------


@pytest.mark.slow
def test_push_to_an_idle_worker_is_handled_without_the_poll_fallback(dsn, queue):
    started = {}
    worker = quiet_worker(dsn, concurrency=2)
    worker.add_handler(queue.name, lambda job: started.setdefault(job.key, time.monotonic()))
    idle = idle_event(worker)
    with running(worker):
        assert idle.wait(30)
        time.sleep(0.3)  # well into the wait
        pushed = time.monotonic()
        queue.push("now", "k", {})
        wait_for(lambda: "now" in started, 10, "the handler (the fallback is 60 s)")
        wait_for(lambda: queue.stats().ready + queue.stats().reserved == 0, 10, "the commit")
    assert started["now"] - pushed < 10
    assert worker.stats.wakeups >= 1 and worker.stats.succeeded == 1


def test_push_between_an_empty_reserve_and_the_wait_is_not_lost(dsn, queue):
    """The race a LISTEN registered after the reserve would lose."""
    started = {}
    worker = quiet_worker(dsn)
    worker.add_handler(queue.name, lambda job: started.setdefault(job.key, time.monotonic()))
    pushed = []

    def push_once(_w):
        if not pushed:
            pushed.append(time.monotonic())
            queue.push("racy", "k", {})

    worker.on_idle.append(push_once)
    with running(worker):
        wait_for(lambda: "racy" in started, 15, "the message pushed in the race window (fallback 60 s)")


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")  # the NOTIFY throttle; MySQL has no wakeup to lose
def test_throttled_wakeup_is_caught_by_the_poll_fallback(dsn, queue, db):
    """A lost wakeup costs latency, never the message: with a 1-hour window only
    the first push of the queue notifies; the second is found by the fallback."""
    queue.set_notify_window(3600)
    started = {}
    worker = Worker(dsn, poll_fallback=1.0, linger=0.01)
    worker.add_handler(queue.name, lambda job: started.setdefault(job.key, time.monotonic()))
    idle = idle_event(worker)
    with running(worker):
        assert idle.wait(30)
        queue.push("first", "k", {})
        wait_for(lambda: "first" in started, 10, "the first message")
        wakeups = worker.stats.wakeups
        queue.push("second", "k", {})
        wait_for(lambda: "second" in started, 15, "the second message, by the fallback")
        assert worker.stats.wakeups == wakeups, "the second push should have been throttled"


@pytest.mark.slow
def test_delayed_message_starts_on_time_without_a_wakeup(dsn, queue):
    """A worker that knows of a delayed message sleeps until exactly its time
    (the poll fallback is 60 s, and delayed pushes send no wakeup)."""
    started = {}
    run_at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=2)
    queue.push("later", "k", {}, run_at=run_at)
    worker = quiet_worker(dsn)
    worker.add_handler(queue.name, lambda job: started.setdefault(job.key, dt.datetime.now(dt.timezone.utc)))
    with running(worker):
        wait_for(lambda: "later" in started, 20, "the delayed message (fallback 60 s)")
    lateness = (started["later"] - run_at).total_seconds()
    assert -0.05 <= lateness <= 1.5, lateness


@pytest.mark.slow
def test_delayed_push_while_idle_is_seen_at_the_next_poll_and_starts_on_time(dsn, queue):
    started = {}
    worker = quiet_worker(dsn, poll_fallback=1.0)
    worker.add_handler(queue.name, lambda job: started.setdefault(job.key, dt.datetime.now(dt.timezone.utc)))
    idle = idle_event(worker)
    with running(worker):
        assert idle.wait(30)
        run_at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=2.5)
        queue.push("later", "k", {}, run_at=run_at)
        wait_for(lambda: "later" in started, 20, "the delayed message")
    lateness = (started["later"] - run_at).total_seconds()
    assert -0.05 <= lateness <= 1.5, lateness


@pytest.mark.slow
def test_expired_reservation_is_picked_up_when_it_expires(dsn, queue, connect):
    other = connect().queue(queue.name)
    queue.push("abandoned", "k", {})
    before = dt.datetime.now(dt.timezone.utc)
    [r] = other.reserve(timeout=2)
    expires = before + dt.timedelta(seconds=2)  # no later than the reservation's own expiry
    started = {}
    worker = quiet_worker(dsn)
    worker.add_handler(
        queue.name, lambda job: started.setdefault(job.key, (dt.datetime.now(dt.timezone.utc), job.attempts))
    )
    with running(worker):
        wait_for(lambda: "abandoned" in started, 15, "the redelivery")
    at, attempts = started["abandoned"]
    assert attempts == 2
    assert 0.0 <= (at - expires).total_seconds() <= 2.5


def _idle_round_trips(worker: Worker, queue, seconds: float) -> int:
    """How many database calls the running worker makes in `seconds` while its queue is empty."""
    worker.add_handler(queue.name, lambda job: None)
    idle = idle_event(worker)
    with running(worker):
        assert idle.wait(30)
        time.sleep(0.3)  # into the long poll
        before = worker.stats.db_calls
        time.sleep(seconds)
        return worker.stats.db_calls - before


@pytest.mark.slow
def test_long_poll_wait_sets_how_long_each_server_side_wait_lasts(dsn, queue):
    """Without LISTEN (MySQL, or listen=False) a one-queue worker long-polls queue_wait: one
    round trip per long_poll_wait seconds while nothing is ready."""
    short = Worker(dsn, listen=False, poll_fallback=60.0, long_poll_wait=0.1, long_poll_check=0.01)
    assert _idle_round_trips(short, queue, 1.0) >= 5
    # (the stop waits for the long poll under way: up to 2 s)
    long = Worker(dsn, listen=False, poll_fallback=60.0, long_poll_wait=2.0)
    assert _idle_round_trips(long, queue, 1.0) <= 1


# -- handling ------------------------------------------------------------------------


def test_handlers_by_kind_and_batch_reserve(dsn, queue):
    seen = []
    lock = threading.Lock()
    worker = Worker(dsn, concurrency=4, poll_fallback=0.5)

    @worker.handler(queue.name, "a")
    def on_a(job):
        with lock:
            seen.append(("a", job.key))

    @worker.handler(queue.name, "b")
    def on_b(job):
        with lock:
            seen.append(("b", job.key))

    queue.push_many([(f"k{i}", "ab"[i % 2], {"i": i}) for i in range(40)])
    queue.push("ignored", "c", {})  # no handler for kind c: never reserved
    with running(worker):
        wait_for(lambda: len(seen) == 40, 30, "40 messages")
    assert sorted(seen) == sorted(("ab"[i % 2], f"k{i}") for i in range(40))
    s = queue.stats()
    assert (s.ready, s.reserved) == (1, 0)


def test_a_success_commits_and_reserves_the_next_message_in_one_call(dsn, queue):
    """One queue, one thread, a backlog: after the dispatcher's first reserve every message is
    reserved by the previous one's commit (queue_commit_reserve), so the handler thread makes
    exactly one database call per message. Counted per message: the calls the worker made between
    the starts of two consecutive handlers."""
    calls_at_start = []
    worker = Worker(dsn, concurrency=1, poll_fallback=60.0, commit_reserve=True, prefetch=0)
    worker.add_handler(queue.name, lambda job: calls_at_start.append((job.key, worker.stats.db_calls)))
    queue.push_many([(f"k{i:02}", "k", {}) for i in range(20)])
    with running(worker):
        wait_for(lambda: queue.stats().ready + queue.stats().reserved == 0, 30, "the backlog")
    assert [k for k, _ in calls_at_start] == [f"k{i:02}" for i in range(20)]  # FIFO kept
    assert worker.stats.succeeded == 20 and worker.stats.reserved == 20
    # 20 commits, the first 19 of which brought the next message (the 20th found the queue empty).
    assert worker.stats.commit_reserves == 20
    if worker.use_listen:  # MySQL's dispatcher long-polls meanwhile, adding its own calls
        gaps = [b - a for (_, a), (_, b) in zip(calls_at_start, calls_at_start[1:])]
        assert gaps == [1] * 19, gaps


def test_successes_are_acknowledged_in_batches_each_exactly_once(dsn, queue):
    """By default the handler threads make no database call for a success: the completer
    commits the successes together (queue_commit_batch), and the dispatcher reserves for the
    free handlers and the prefetch. Every message is handled and committed exactly once."""
    assert Worker(dsn).commit_reserve is False
    seen: list[str] = []
    lock = threading.Lock()
    worker = Worker(dsn, concurrency=4, prefetch=8, ack_interval=0.01, poll_fallback=0.2)

    @worker.handler(queue.name)
    def handle(job):
        with lock:
            seen.append(job.key)

    keys = [f"k{i:03}" for i in range(300)]
    queue.push_many([(k, "k", {}) for k in keys])
    with running(worker):
        wait_for(lambda: worker.stats.succeeded == 300, 60, "300 commits")
    assert sorted(seen) == keys  # each handled once
    assert (worker.stats.lost, worker.stats.commit_reserves) == (0, 0)
    assert worker.stats.ack_batches > 0 and worker.stats.db_calls < 300
    s = queue.stats()
    assert (s.ready, s.reserved, s.delayed) == (0, 0, 0)


def test_a_worker_of_several_queues_commits_plainly_so_the_dispatcher_shares_threads(dsn, make_queue):
    """With two queues a commit never reserves (a busy queue could keep every thread and starve
    the other): all of both queues' messages are done, none through queue_commit_reserve."""
    first, second = make_queue(), make_queue()
    seen = []
    worker = Worker(dsn, concurrency=1, poll_fallback=0.2, commit_reserve=True)
    worker.add_handler(first.name, lambda job: seen.append((job.queue, job.key)))
    worker.add_handler(second.name, lambda job: seen.append((job.queue, job.key)))
    first.push_many([(f"a{i}", "k", {}) for i in range(5)])
    second.push_many([(f"b{i}", "k", {}) for i in range(5)])
    with running(worker):
        wait_for(lambda: len(seen) == 10, 30, "both queues")
    assert worker.stats.commit_reserves == 0 and worker.stats.succeeded == 10


@pytest.mark.slow
def test_handler_exceptions_back_off_then_dead_letter(dsn, make_queue, caplog):
    caplog.set_level(logging.WARNING, logger="pyqueue_sql.worker")
    dlq = make_queue()
    queue = make_queue(max_attempts=3, dead_letter_queue=dlq.name)
    starts = []
    worker = Worker(dsn, poll_fallback=0.2)
    policy = RetryPolicy(base=0.2, factor=2.0, max_delay=60, jitter=0.0)

    @worker.handler(queue.name, retry=policy)
    def fail(job):
        starts.append((time.monotonic(), job.attempts))
        raise RuntimeError("boom")

    queue.push("poison", "k", {})
    with running(worker):
        wait_for(lambda: dlq.stats().ready == 1, 30, "the dead letter")
    assert [a for _, a in starts] == [1, 2, 3]
    # the mechanism: each retry was scheduled with the policy's backoff (0.2 s, then 0.4 s) ...
    delays = [r.retry_in_s for r in caplog.records if getattr(r, "retry_in_s", None) is not None]
    assert delays == [0.2, 0.4], delays
    # ... and came back never earlier than it; later by up to a few seconds on a loaded machine
    # (the worker polls every 0.2 s, so the bound above shows no wakeup mechanism)
    gaps = [b[0] - a[0] for a, b in zip(starts, starts[1:])]
    assert 0.19 <= gaps[0] <= 0.2 + 5 and 0.39 <= gaps[1] <= 0.4 + 5, gaps
    assert worker.stats.failed == 3 and queue.stats().dead == 1


def fails_once_then_succeeds(attempts: list):
    """A handler that raises on a message's first delivery and records each attempt's start."""

    def handle(job):
        attempts.append((job.attempts, time.monotonic()))
        if job.attempts == 1:
            raise RuntimeError("first delivery fails")

    return handle


def assert_retried_on_time(attempts: list, delay: float) -> None:
    """The second attempt came when the retry was due, not at the 30 s poll fallback."""
    assert [a for a, _ in attempts] == [1, 2], attempts
    gap = attempts[1][1] - attempts[0][1]
    assert delay - 0.05 <= gap <= delay + 1.0, f"retried {gap:.2f} s after the failure, due after {delay} s"


def test_a_failure_is_retried_when_due_while_the_dispatcher_already_waits(dsn, queue):
    """With several handler threads the dispatcher is already waiting (its next scheduled_at
    taken before the failure) when a handler fails its message with a delay, and a delayed
    retry sends no wakeup: the wait must end when the retry is due, not at the poll fallback."""
    attempts: list = []
    worker = Worker(dsn, concurrency=4, poll_fallback=30.0)
    worker.add_handler(queue.name, fails_once_then_succeeds(attempts), retry=RetryPolicy(base=1.0, jitter=0))
    queue.push("s3", "welcome", {"fail": True})
    with running(worker):
        wait_for(
            lambda: worker.stats.succeeded == 1, 20, "the retry due after 1 s (the poll fallback is 30 s)"
        )
    assert_retried_on_time(attempts, 1.0)


def test_retry_policy_delays_grow_to_their_cap_with_bounded_jitter():
    p = RetryPolicy(base=0.5, factor=3, max_delay=10, jitter=0)
    assert [p.delay(a) for a in (1, 2, 3, 4, 1000)] == [0.5, 1.5, 4.5, 10, 10]
    j = RetryPolicy(base=2, factor=2, max_delay=100, jitter=0.5)
    delays = [j.delay(3) for _ in range(200)]
    assert all(4 <= d <= 12 for d in delays) and len(set(delays)) > 1
    with pytest.raises(pyqueue_sql.InvalidArgumentError):
        RetryPolicy(jitter=2)


@pytest.mark.slow
def test_heartbeat_keeps_a_long_handler_s_reservation(dsn, queue, connect):
    other = connect().queue(queue.name)
    done = threading.Event()
    worker = Worker(dsn, lease=1.5, poll_fallback=0.5)

    started = threading.Event()

    @worker.handler(queue.name)
    def slow(job):
        started.set()
        time.sleep(4.0)  # more than two and a half leases
        done.set()

    events = []
    worker.on_start.append(lambda w: events.append("start"))
    worker.on_stop.append(lambda w: events.append("stop"))
    worker.on_heartbeat.append(
        lambda w: events.append(("beat", w.heartbeat_run(lambda db: db.queue(queue.name).stats().reserved)))
    )
    queue.push("long", "k", {})
    with running(worker):
        wait_for(started.is_set, 15, "the handler to start")
        deadline = time.monotonic() + 3.8
        while not done.is_set() and time.monotonic() < deadline:
            assert other.reserve() == [], "the reservation expired while the handler ran"
            time.sleep(0.2)
        wait_for(done.is_set, 10, "the handler")
        wait_for(lambda: queue.stats().reserved == 0, 10, "the commit")
    assert worker.stats.succeeded == 1 and worker.stats.lost == 0
    assert queue.stats().ready == 0
    assert events[0] == "start" and events[-1] == "stop" and ("beat", 1) in events


@pytest.mark.slow
def test_stop_finishes_running_work_and_hands_back_the_rest(dsn, queue):
    started, finished = [], []
    worker = Worker(dsn, concurrency=2, poll_fallback=0.5, shutdown_timeout=20)

    @worker.handler(queue.name)
    def slow(job):
        started.append(job.key)
        time.sleep(1.0)
        finished.append(job.key)

    queue.push_many([(f"k{i}", "k", {}) for i in range(10)])
    with running(worker):
        wait_for(lambda: len(started) >= 2, 15, "two handlers")
        worker.stop()
    assert sorted(started) == sorted(finished)
    s = queue.stats()
    assert s.reserved == 0 and s.ready == 10 - len(finished)


# -- real processes --------------------------------------------------------------------


# The process tests run each handler twice: a plain function (Worker) and an async def (AsyncWorker).
SLEEPY = {"threads": "sleepy", "asyncio": "async_sleepy"}


def _spawn_worker(dsn, queue, record, *extra, runtime="threads"):
    env = {**os.environ, "PYQUEUE_TEST_RECORD": str(record), "PYTHONPATH": ROOT}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "worker",
            f"tests.worker.worker_handlers:{SLEEPY[runtime]}",
            "--queue",
            queue,
            "--dsn",
            dsn,
            "--log-format",
            "json",
            "--no-status",
            *extra,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines(record):
    return record.read_text().splitlines() if record.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("runtime", sorted(SLEEPY))
def test_sigterm_with_work_in_flight_loses_nothing(dsn, queue, tmp_path, runtime):
    record = tmp_path / "record"
    queue.push_many([(f"k{i}", "k", {"sleep": 1.5}) for i in range(8)])
    proc = _spawn_worker(
        dsn, queue.name, record, "--concurrency", "3", "--shutdown-timeout", "30", runtime=runtime
    )
    try:
        wait_for(lambda: sum(l.startswith("start") for l in _lines(record)) >= 2, 30, "handlers to start")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    lines = _lines(record)
    started = {l.split()[1] for l in lines if l.startswith("start")}
    done = {l.split()[1] for l in lines if l.startswith("done")}
    assert started == done, "a running handler was cut short"
    s = queue.stats()
    assert s.reserved == 0, "a reserved message was not handed back"
    assert s.ready + len(done) == 8
    assert '"event": "stop"' in err
    assert f'"runtime": "{runtime}"' in err, "the handler ran on the wrong kind of worker"


# A worker that sends itself SIGTERM the moment it logs its start: the signal must stop it
# gracefully (run() returns), not end the process as an unhandled SIGTERM does.
_SIGTERM_AT_START = """
import asyncio, logging, os, signal, sys
from pyqueue_sql import Worker
from pyqueue_sql.aio.worker import AsyncWorker

class TermAtStart(logging.Handler):
    def emit(self, record):
        if getattr(record, "event", None) == "start":
            os.kill(os.getpid(), signal.SIGTERM)

logging.getLogger("pyqueue_sql").addHandler(TermAtStart())
logging.getLogger("pyqueue_sql").setLevel(logging.INFO)
dsn, queue, runtime = sys.argv[1:]
worker = (AsyncWorker if runtime == "asyncio" else Worker)(dsn, concurrency=1)
if runtime == "asyncio":
    @worker.handler(queue)
    async def handle(job):
        pass
    clean = asyncio.run(worker.run())
else:
    @worker.handler(queue)
    def handle(job):
        pass
    clean = worker.run()
print("stopped", clean)
"""


@pytest.mark.parametrize("runtime", sorted(SLEEPY))
def test_a_sigterm_right_after_the_start_line_is_a_graceful_stop(dsn, queue, runtime):
    """The start line ("worker starting", event "start") is logged once the signal handlers are in
    place, so a supervisor that waits for it and then sends SIGTERM gets a graceful stop."""
    proc = _python_script(_SIGTERM_AT_START, dsn, queue.name, runtime)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopped True"


def _python_script(script: str, *args: str) -> subprocess.CompletedProcess:
    """script run by a Python process of its own, given args, within 30 s."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=30,
    )


# A SIGTERM whose Python handler runs while the main thread holds the lock of the slots, as the
# dispatcher does while it works out whether to wait for one (a handler runs between two bytecodes
# of the main thread, wherever it is): the stop must not wait for that lock in that thread.
_SIGTERM_UNDER_THE_SLOTS_LOCK = """
import os, signal, sys, time
from pyqueue_sql import Worker
worker = Worker(sys.argv[1], concurrency=1)
worker.install_signal_handlers()
with worker._slots:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.5)  # the handler has run here, in this thread
deadline = time.monotonic() + 10
while not worker.stopping and time.monotonic() < deadline:
    time.sleep(0.01)
print("stopping", worker.stopping)
"""


def test_a_sigterm_while_the_main_thread_holds_the_slots_lock_stops_the_worker(dsn):
    proc = _python_script(_SIGTERM_UNDER_THE_SLOTS_LOCK, dsn)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stopping True", proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("runtime", sorted(SLEEPY))
def test_sigkill_mid_handler_redelivers_after_the_lease(dsn, queue, tmp_path, runtime):
    record = tmp_path / "record"
    queue.push("victim", "k", {"sleep": 60})
    proc = _spawn_worker(dsn, queue.name, record, "--lease", "2", runtime=runtime)
    try:
        wait_for(lambda: any(l.startswith("start") for l in _lines(record)), 30, "the handler to start")
        killed = time.monotonic()
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert queue.reserve() == [], "the reservation should still hold right after the kill"
    got = []
    wait_for(lambda: got.extend(queue.reserve()) or got, 20, "the redelivery")
    assert got[0].key == "victim" and got[0].attempts == 2
    assert time.monotonic() - killed < 20


def test_worker_cli_usage_errors(capsys, dsn):
    from pyqueue_sql import cli

    assert cli.main(["worker", "nomodule", "--queue", "q", "--dsn", dsn]) == 2
    assert "module:object" in capsys.readouterr().err
    assert cli.main(["worker", "no_such_module_xyz:f", "--queue", "q", "--dsn", dsn]) == 2
    assert "cannot import" in capsys.readouterr().err


# -- worker registry --------------------------------------------------------------------


def _registered(db, name):
    return [w for w in db.workers() if w.name == name]


@pytest.mark.slow
def test_worker_registers_reserves_as_its_registration_and_deregisters(dsn, db, queue, raw):
    name = f"reg-{uuid.uuid4().hex[:8]}"
    held = threading.Event()
    release = threading.Event()

    def handle(job):
        held.set()
        release.wait(30)

    worker = quiet_worker(dsn, name=name)
    worker.add_handler(queue.name, handle)
    with running(worker):
        # The worker's own state, not the row: the row is visible (committed)
        # a moment before the worker holds its registration in Python.
        assert worker.registered.wait(30), "the worker did not register"
        [info] = _registered(db, name)
        assert (info.pid, info.queues) == (os.getpid(), [queue.name])
        assert worker.reserve_as == info.reserve_as == f"{name}#{info.worker_id}"
        queue.push("m", "k", {})
        assert held.wait(30)
        rows = raw("SELECT reserved_by FROM pyqueue_message WHERE queue_name = %s", (queue.name,))
        assert [r[0] for r in rows] == [info.reserve_as]
        release.set()
        wait_for(lambda: worker.stats.succeeded == 1, 30, "the commit")
    assert _registered(db, name) == [] and worker.registration is None


@pytest.mark.slow
def test_cli_worker_is_listed_by_workers_until_sigterm(capsys, dsn, db, queue, tmp_path):
    from pyqueue_sql import cli

    name = f"cli-{uuid.uuid4().hex[:8]}"
    proc = _spawn_worker(dsn, queue.name, tmp_path / "record", "--name", name)
    try:
        wait_for(lambda: _registered(db, name), 30, "the worker process to register")
        assert cli.main(["workers", "--dsn", dsn]) == 0
        out = capsys.readouterr().out
        [line] = [l for l in out.splitlines() if name in l]
        assert str(proc.pid) in line and queue.name in line
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert '"event": "deregister"' in err
    assert cli.main(["workers", "--dsn", dsn]) == 0
    assert name not in capsys.readouterr().out


@pytest.mark.slow
def test_stopped_worker_process_is_released_then_registers_again(dsn, db, queue, tmp_path):
    """SIGSTOP a worker mid-handler: release_dead_workers makes its message ready
    long before its lease ends; once resumed, the worker sees its registration
    gone, logs it, registers again, and its late commit is refused."""
    record = tmp_path / "record"
    name = f"stop-{uuid.uuid4().hex[:8]}"
    queue.push("victim", "k", {"sleep": 4})
    # lease 6: heartbeats every 2 s; the reservation outlives any silence below 4 s
    proc = _spawn_worker(dsn, queue.name, record, "--name", name, "--lease", "6", "--shutdown-timeout", "30")
    try:
        wait_for(lambda: any(l.startswith("start") for l in _lines(record)), 30, "the handler to start")
        [first] = _registered(db, name)
        proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        time.sleep(2.5)
        assert queue.reserve() == [], "the reservation should still hold"
        silence_worker(db.connection, db.dialect.name, first.worker_id)  # as if stopped for an hour
        assert db.release_dead_workers(RELEASE_AFTER) >= 1
        assert time.monotonic() - stopped < 4, "too slow to prove the release (not the lease) freed it"
        [again] = queue.reserve(timeout=60)
        assert (again.key, again.attempts) == ("victim", 2)
        assert _registered(db, name) == []
        proc.send_signal(signal.SIGCONT)
        wait_for(
            lambda: any(w.worker_id != first.worker_id for w in _registered(db, name)),
            30,
            "the worker to register again",
        )
        wait_for(lambda: any(l.startswith("done") for l in _lines(record)), 30, "the handler to finish")
        assert queue.commit(again)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
    assert proc.returncode == 0, err
    assert '"event": "released"' in err and '"event": "lost"' in err
    assert _registered(db, name) == []
    assert queue.stats().ready == 0 and queue.stats().reserved == 0


def test_release_dead_after_must_cover_the_lease(dsn):
    with pytest.raises(pyqueue_sql.InvalidArgumentError):
        Worker(dsn, lease=30, release_dead_after=10)
    with pytest.raises(pyqueue_sql.InvalidArgumentError, match="at least 30 s"):
        Worker(dsn, lease=1.5, release_dead_after=10)  # the routine refuses a silence under 30 s


@pytest.mark.slow
def test_worker_releases_dead_workers_when_asked(dsn, db, queue):
    """A live worker with release_dead_after releases a registration that stopped heart-beating."""
    dead = db.register_worker(f"dead-{uuid.uuid4().hex[:6]}")
    queue.push("orphan", "k", {})
    [r] = queue.reserve(worker=dead.reserve_as, timeout=600)
    silence_worker(db.connection, db.dialect.name, dead.worker_id)
    done = []
    worker = Worker(dsn, lease=1.5, release_dead_after=RELEASE_AFTER, poll_fallback=1.0)
    worker.add_handler(queue.name, lambda job: done.append((job.key, job.attempts)))
    with running(worker):
        wait_for(lambda: done, 30, "the orphan, released by the worker's heartbeat")
    assert done == [("orphan", 2)]
    assert not queue.commit(r)


@pytest.mark.slow
def test_idle_worker_wakes_for_every_path_that_makes_a_message_ready(dsn, db, make_queue):
    """Both dialects, fallback 60 s: PostgreSQL through each path's NOTIFY, MySQL
    through the long poll inside the server (queue_wait)."""
    q = make_queue(history_retention=3600)
    source = make_queue()
    handled = []
    worker = quiet_worker(dsn)
    worker.add_handler(q.name, lambda job: handled.append(job.key))
    idle = idle_event(worker)

    def step(what, action, key):
        time.sleep(0.3)  # well into the wait
        action()
        wait_for(lambda: handled.count(key) >= 1, 10, f"the worker to wake for {what} (fallback 60 s)")
        # The worker acknowledges in batches, after the handler returns: the next step starts once
        # the commit has landed (replay finds only what a commit archived).
        wait_for(lambda: q.stats().reserved == 0, 10, f"the worker's commit of {key}")
        handled.clear()

    def replay():
        assert q.replay() == 1, "the committed message is in the history, so replay pushes it again"

    def held(key, holder):
        """A message already reserved when the worker can first see it."""
        with db.transaction():
            q.push(key, "k", {})
            return q.reserve(worker=holder, timeout=600)[0]

    with running(worker):
        assert idle.wait(30)
        step("push_replace", lambda: q.push_replace("a", "k", {}), "a")
        step("replay", replay, "a")
        step("redrive", lambda: (source.push("d", "k", {}), source.redrive(q)), "d")
        r = held("b", "test")
        step("rollback with no delay", lambda: q.rollback(r), "b")
        dead = db.register_worker("dead")
        held("c", dead.reserve_as)
        silence_worker(db.connection, db.dialect.name, dead.worker_id)
        step("release_dead_workers", lambda: db.release_dead_workers(RELEASE_AFTER), "c")


@pytest.mark.only_dialect("postgresql")  # LISTEN, and with it the pooler check
def test_the_pooler_check_at_the_start_opens_the_completers_connection(dsn, queue, monkeypatch):
    """With LISTEN the dispatcher first checks for a transaction pooler, by asking another client
    connection which server session serves it: at the start that connection is the completer's,
    opened then and kept for the first commit, so a start opens no connection for the check alone
    (listener.shares_sessions, which opens one, is not called)."""
    worker = Worker(dsn, concurrency=2, poll_fallback=60.0)
    assert worker.use_listen
    own: list[object] = []
    listener = type(worker.dialect.listener)
    monkeypatch.setattr(listener, "shares_sessions", lambda self, *a: own.append(a) or False)
    worker.add_handler(queue.name, lambda job: None)
    with running(worker):
        # nothing to commit yet: only the check can have opened it
        wait_for(
            lambda: getattr(worker._run_threads.completer_conn, "db", None) is not None,
            30,
            "the completer's connection",
        )
        completer = worker._run_threads.completer_conn
        opened = completer.db
        queue.push("k", "k", {})
        wait_for(lambda: worker.stats.succeeded == 1, 30, "the commit")
        assert completer.db is opened
    assert own == []
