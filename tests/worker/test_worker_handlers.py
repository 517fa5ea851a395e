"""What handlers can do to a worker: coroutines, failures and what the log and the
database keep of them, exits and interrupts, errors in the reserve loop, and how
a worker stops (deadline, second signal). Real servers, real worker threads and
`pyqueue-sql worker` processes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest

from pyqueue_sql import RetryPolicy, Worker

from ..helpers import wait_for
from .test_worker import ROOT, running

FAST = RetryPolicy(base=0.1, factor=1.0, max_delay=0.1, jitter=0.0)


def fast_worker(dsn, **kw) -> Worker:
    kw.setdefault("poll_fallback", 0.2)
    return Worker(dsn, **kw)


class RunInThread:
    """Runs worker.run() on a thread and keeps what it returned (or raised)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.result: list = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result.append(self.worker.run(install_signals=False))
        except BaseException as exc:
            self.result.append(exc)

    def join(self, timeout: float) -> object:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"
        [outcome] = self.result
        return outcome


@pytest.fixture
def worker_log(caplog):
    caplog.set_level(logging.DEBUG, logger="pyqueue_sql.worker")
    return caplog


def events(caplog, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


# -- coroutine handlers ------------------------------------------------------------


@pytest.mark.slow
def test_async_handler_is_awaited_before_the_commit(dsn, queue, connect):
    """The coroutine runs to its end (its side effect seen while the message is
    still reserved) and only then is the message committed; one event loop per
    handler thread, reused."""
    probe = connect().queue(queue.name)
    seen: list[tuple] = []

    async def handle(job):
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.2)
        info = probe.message(job.key, job.kind)
        seen.append((job.key, id(loop), threading.get_ident(), info is not None and info.state == "reserved"))

    worker = fast_worker(dsn, concurrency=1)
    worker.add_handler(queue.name, handle)
    queue.push_many([("a1", "k", {}), ("a2", "k", {}), ("a3", "k", {})])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "coroutine ... was never awaited"
        with running(worker):
            wait_for(lambda: worker.stats.succeeded == 3, 30, "three async messages committed")
    assert sorted(k for k, *_ in seen) == ["a1", "a2", "a3"]
    assert all(reserved for *_, reserved in seen), "the side effect happened after the commit"
    assert len({(loop, thread) for _, loop, thread, _ in seen}) == 1, "one loop per handler thread, reused"
    s = queue.stats()
    assert (s.ready, s.reserved, s.delayed) == (0, 0, 0) and worker.stats.failed == 0


@pytest.mark.slow
def test_handler_returning_any_awaitable_is_awaited(dsn, queue):
    done = []

    class Later:
        def __init__(self, key):
            self.key = key

        def __await__(self):
            yield from asyncio.sleep(0.05).__await__()
            done.append(self.key)

    def handle(job):  # a plain function returning an awaitable that is not a coroutine
        return Later(job.key)

    worker = fast_worker(dsn)
    worker.add_handler(queue.name, handle)
    queue.push("x", "k", {})
    with running(worker):
        wait_for(lambda: worker.stats.succeeded == 1, 30, "the commit")
    assert done == ["x"]


@pytest.mark.slow
def test_async_handler_raising_is_retried_then_dead_lettered(dsn, make_queue, worker_log):
    dlq = make_queue()
    queue = make_queue(max_attempts=2, dead_letter_queue=dlq.name)
    attempts = []

    async def handle(job):
        await asyncio.sleep(0.01)
        attempts.append(job.attempts)
        raise ValueError(f"bad payload on attempt {job.attempts}")

    worker = fast_worker(dsn)
    worker.add_handler(queue.name, handle, retry=FAST)
    queue.push("poison", "k", {"n": 1})
    with running(worker):
        wait_for(lambda: dlq.stats().ready == 1, 30, "the dead letter")
    assert attempts == [1, 2] and worker.stats.failed == 2 and worker.stats.succeeded == 0
    [dead] = dlq.dead_letters()
    assert dead.key == "poison" and dead.last_error == "ValueError: bad payload on attempt 2"
    assert [r.outcome for r in events(worker_log, "fail")] == ["retry", "dead_lettered"]


# -- failures: the log and the database ----------------------------------------------


def test_failures_record_the_error_and_log_key_error_and_outcome(dsn, make_queue, worker_log):
    """A failing message: each failure stores "Type: message" as its last error
    and logs the key and the error (a retried one in one line, the last one with its traceback);
    the last attempt is logged as dead-lettered (or dropped, without a dead-letter queue), never
    as a retry."""
    dlq = make_queue()
    with_dlq = make_queue(max_attempts=2, dead_letter_queue=dlq.name)
    without = make_queue(max_attempts=2)

    def handle(job):
        if job.attempts == 1:
            raise KeyError("missing-field")
        raise RuntimeError(f"boom {job.key}")

    worker = fast_worker(dsn)
    for q in (with_dlq, without):
        worker.add_handler(q.name, handle, retry=FAST)
    with_dlq.push("d1", "k", {})
    without.push("x1", "k", {})
    with running(worker):
        wait_for(lambda: dlq.stats().ready == 1, 30, "the dead letter")
        wait_for(lambda: any(r.outcome == "dropped" for r in events(worker_log, "fail")), 30, "the drop")
    fails = events(worker_log, "fail")
    by = {(r.key, r.attempts): r for r in fails}
    assert set(by) == {("d1", 1), ("d1", 2), ("x1", 1), ("x1", 2)}
    assert (by["d1", 1].outcome, by["d1", 2].outcome) == ("retry", "dead_lettered")
    assert (by["x1", 1].outcome, by["x1", 2].outcome) == ("retry", "dropped")
    for r in fails:
        text = r.getMessage()
        assert r.key in text and r.error in text, text  # shown by a plain logging setup
        if r.outcome == "retry":  # one line; its traceback at DEBUG only
            assert not r.exc_info, "a traceback with a retried failure"
        else:
            assert r.exc_info and r.exc_info[0] is RuntimeError, "no traceback with the last failure"
    assert by["d1", 1].levelno == logging.WARNING and "retry in" in by["d1", 1].getMessage()
    assert "attempt 1 of 2: " in by["d1", 1].getMessage()
    assert by["d1", 2].levelno == logging.ERROR and "dead-letter" in by["d1", 2].getMessage()
    assert "retry" not in by["d1", 2].getMessage()
    assert by["x1", 2].levelno == logging.ERROR and "dropped" in by["x1", 2].getMessage()
    assert by["d1", 1].error == "KeyError: 'missing-field'"
    [dead] = dlq.dead_letters()
    assert (dead.key, dead.last_error, dead.from_queue, dead.attempts) == (
        "d1",
        "RuntimeError: boom d1",
        with_dlq.name,
        2,
    )
    assert without.message("x1", "k") is None


@pytest.mark.slow
def test_python_default_logging_shows_key_and_error(dsn, queue, tmp_path):
    """The README example, run as a script with no logging setup at all: what a
    failure prints names the message, the error and the attempt, in one line."""
    script = tmp_path / "app.py"
    script.write_text(f"""
import threading
import time
from pyqueue_sql import RetryPolicy, Worker

worker = Worker({dsn!r}, poll_fallback=0.2)

@worker.handler({queue.name!r}, retry=RetryPolicy(base=30))
def handle(job):
    raise ValueError("no such customer: " + job.payload["customer"])

def stop_after_the_failure():
    deadline = time.monotonic() + 60
    while worker.stats.failed == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.stop()

threading.Thread(target=stop_after_the_failure, daemon=True).start()
worker.run()
""")
    queue.push("order-17", "k", {"customer": "c-42"})
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "order-17" in proc.stderr and "ValueError: no such customer: c-42" in proc.stderr, proc.stderr
    assert "attempt 1 of 10" in proc.stderr and "retry in" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr  # a retried failure is one line: its traceback at DEBUG


# -- exits and interrupts -----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "exc",
    [SystemExit(3), GeneratorExit(), asyncio.CancelledError()],
    ids=["SystemExit", "GeneratorExit", "CancelledError"],
)
def test_handler_raising_a_base_exception_is_a_failure_and_the_worker_goes_on(
    dsn, make_queue, worker_log, exc
):
    """The message is failed with backoff and dead-lettered after max_attempts;
    the handler thread survives and the next message is handled."""
    dlq = make_queue()
    queue = make_queue(max_attempts=2, dead_letter_queue=dlq.name)
    handled = []

    def handle(job):
        if job.key == "exit":
            raise exc
        handled.append(job.key)

    worker = fast_worker(dsn, concurrency=1, lease=3)
    worker.add_handler(queue.name, handle, retry=FAST)
    queue.push("exit", "k", {})
    with running(worker):
        wait_for(lambda: dlq.stats().ready == 1, 30, "the dead letter")
        queue.push("after", "k", {})
        wait_for(lambda: handled == ["after"], 30, "the next message, on the same (only) handler thread")
    assert worker.stats.failed == 2 and worker.stats.succeeded == 1
    [dead] = dlq.dead_letters()
    assert dead.last_error.startswith(type(exc).__name__)
    assert [r.outcome for r in events(worker_log, "fail")] == ["retry", "dead_lettered"]


def test_async_handler_raising_system_exit_is_a_failure(dsn, make_queue):
    queue = make_queue(max_attempts=5)
    calls = []

    async def handle(job):
        calls.append(job.attempts)
        if job.attempts == 1:
            raise SystemExit("bye")
        await asyncio.sleep(0)

    worker = fast_worker(dsn, concurrency=1)
    worker.add_handler(queue.name, handle, retry=FAST)
    queue.push("m", "k", {})
    with running(worker):
        wait_for(lambda: worker.stats.succeeded == 1, 30, "the second delivery to succeed")
    assert calls == [1, 2] and worker.stats.failed == 1


@pytest.mark.slow
def test_keyboard_interrupt_in_a_handler_stops_the_worker_gracefully(dsn, queue, worker_log):
    """The interrupted message is handed back at once (its delivery counted, the
    interrupt recorded); a handler running beside it finishes and commits; run()
    returns True (nothing abandoned)."""
    slow_started = threading.Event()

    def handle(job):
        if job.key == "slow":
            slow_started.set()
            time.sleep(1.0)
            return
        assert slow_started.wait(30)
        raise KeyboardInterrupt()

    worker = fast_worker(dsn, concurrency=2, shutdown_timeout=30)
    worker.add_handler(queue.name, handle)
    queue.push_many([("slow", "k", {}), ("ctrl-c", "k", {})])
    run = RunInThread(worker)
    assert run.join(60) is True
    assert worker.stats.interrupted == 1 and worker.stats.succeeded == 1
    assert worker.status().state == "stopped" and "KeyboardInterrupt" in worker.status().stop_reason
    info = queue.message("ctrl-c", "k")
    assert info is not None and info.state == "ready" and info.attempts == 1
    assert info.last_error.startswith("KeyboardInterrupt")
    assert queue.message("slow", "k") is None
    [rec] = events(worker_log, "interrupted")
    assert "ctrl-c" in rec.getMessage() and "handed back" in rec.getMessage()


# -- the reserve loop ----------------------------------------------------------------


@pytest.mark.slow
def test_error_in_the_reserve_loop_is_logged_and_the_worker_goes_on(dsn, db, make_queue, worker_log):
    """The queue is dropped under a running worker: every reserve fails with
    UnknownQueueError. run() does not end: it logs each error with its traceback,
    backs off, shows it in status(), and serves the queue again once it exists."""
    queue = make_queue()
    handled = []
    worker = fast_worker(dsn)
    worker.add_handler(queue.name, lambda job: handled.append(job.key))
    with running(worker):
        queue.push("before", "k", {})
        wait_for(lambda: handled == ["before"], 30, "the first message")
        queue.drop()
        wait_for(lambda: worker.stats.dispatch_errors >= 1, 30, "the reserve loop to hit the missing queue")
        st = worker.status()
        assert st.state == "running" and "UnknownQueueError" in (st.last_error or ""), st
        assert "UnknownQueueError" in worker.status_line()
        db.queue(queue.name).create()
        db.queue(queue.name).push("after", "k", {})
        wait_for(lambda: handled == ["before", "after"], 60, "the queue served again")
        wait_for(lambda: worker.status().last_error is None, 30, "the error to clear")
    [first, *_] = events(worker_log, "dispatch_error")
    assert first.levelno == logging.ERROR and first.exc_info is not None
    assert "UnknownQueueError" in first.getMessage()


@pytest.mark.slow
def test_on_idle_hook_raising_does_not_end_the_worker(dsn, queue, worker_log):
    calls = []

    def flaky(_w):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("hook bug")

    worker = fast_worker(dsn)
    worker.on_idle.append(flaky)
    handled = []
    worker.add_handler(queue.name, lambda job: handled.append(job.key))
    with running(worker):
        wait_for(lambda: len(calls) >= 2, 30, "the loop to go on after the hook raised")
        queue.push("m", "k", {})
        wait_for(lambda: handled == ["m"], 30, "a message after the error")
    [rec] = events(worker_log, "dispatch_error")
    assert "RuntimeError: hook bug" in rec.getMessage()


# -- stopping ------------------------------------------------------------------------


@pytest.mark.slow
def test_forced_stop_abandons_running_handlers_and_reports_them(dsn, queue, connect, worker_log):
    """stop() waits for the running handler (saying what it waits for and how
    long); stop(force=True) ends run() at once with False and the abandoned keys;
    the message is handed back at once, its attempt not counted."""
    release = threading.Event()
    started = threading.Event()

    def handle(job):
        started.set()
        release.wait(60)

    # lease 3: after the forced stop, at least 2 s of it remain for the checks that it is still held
    worker = fast_worker(dsn, lease=3, shutdown_timeout=60)
    worker.add_handler(queue.name, handle)
    queue.push("stuck", "k", {})
    run = RunInThread(worker)
    try:
        assert started.wait(30)
        worker.stop()
        wait_for(lambda: events(worker_log, "stopping"), 10, "the worker to say what it waits for")
        [waiting] = events(worker_log, "stopping")[:1]
        assert waiting.keys == [f"{queue.name}/stuck/k"] and 50 < waiting.deadline_in_s <= 60
        assert f"{queue.name}/stuck/k" in waiting.getMessage()
        st = worker.status()
        assert st.state == "stopping" and st.running == (f"{queue.name}/stuck/k",)
        assert 0 < st.stop_deadline_in_s <= 60 and "waiting for 1" in worker.status_line()
        asked = time.monotonic()
        worker.stop(force=True)
        assert run.join(10) is False
        assert time.monotonic() - asked < 5
        assert worker.unfinished == [f"{queue.name}/stuck/k"]
        assert worker.status().unfinished == (f"{queue.name}/stuck/k",)
        other = connect().queue(queue.name)
        got = other.reserve()  # handed back: no lease to wait out
        assert [(r.key, r.attempts) for r in got] == [("stuck", 1)], "not handed back by the forced stop"
    finally:
        release.set()


@pytest.mark.slow
def test_shutdown_deadline_reports_unfinished(dsn, queue):
    release = threading.Event()
    started = threading.Event()

    def handle(job):
        started.set()
        release.wait(60)

    worker = fast_worker(dsn, lease=30, shutdown_timeout=1.0)
    worker.add_handler(queue.name, handle)
    queue.push("slow", "k", {})
    run = RunInThread(worker)
    try:
        assert started.wait(30)
        worker.stop()
        assert run.join(15) is False
        assert worker.unfinished == [f"{queue.name}/slow/k"]
    finally:
        release.set()


@pytest.mark.slow
def test_clean_stop_returns_true(dsn, queue):
    worker = fast_worker(dsn)
    worker.add_handler(queue.name, lambda job: None)
    queue.push("m", "k", {})
    run = RunInThread(worker)
    wait_for(lambda: worker.stats.succeeded == 1, 30, "the commit")
    assert worker.status().state == "running" and worker.registered.is_set()
    worker.stop()
    assert run.join(30) is True
    assert worker.unfinished == [] and worker.stopped.is_set() and worker.status().state == "stopped"


def _spawn(dsn, queue, tmp_path, *extra):
    env = {**os.environ, "PYQUEUE_TEST_RECORD": str(tmp_path / "record"), "PYTHONPATH": ROOT}
    log = open(tmp_path / "worker.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "worker",
            "tests.worker.worker_handlers:sleepy",
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
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()
    return proc


def _events(tmp_path) -> list[dict]:
    out = []
    for line in (tmp_path / "worker.log").read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def _started(tmp_path) -> bool:
    record = tmp_path / "record"
    return record.exists() and any(l.startswith("start") for l in record.read_text().splitlines())


def _says_still_running(tmp_path, key) -> bool:
    """The one line the command prints on stderr when handlers were abandoned, naming them."""
    text = (tmp_path / "worker.log").read_text()
    return any("still running" in line and key in line for line in text.splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_forces_the_stop_and_the_exit_is_non_zero(dsn, queue, tmp_path, signum):
    queue.push("long", "k", {"sleep": 120})
    proc = _spawn(dsn, queue.name, tmp_path, "--shutdown-timeout", "120", "--lease", "1.5")
    try:
        wait_for(lambda: _started(tmp_path), 30, "the handler to start")
        proc.send_signal(signum)
        wait_for(
            lambda: any(e.get("event") == "stopping" for e in _events(tmp_path)),
            15,
            "the worker to say what it waits for",
        )
        [stopping] = [e for e in _events(tmp_path) if e.get("event") == "stopping"][:1]
        assert stopping["keys"] == [f"{queue.name}/long/k"] and stopping["deadline_in_s"] > 100
        assert proc.poll() is None, "the first signal should wait for the handler"
        forced = time.monotonic()
        proc.send_signal(signum)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - forced < 15
    assert code == 1, "handlers were abandoned: the exit must say so"
    assert _says_still_running(tmp_path, f"{queue.name}/long/k")
    evs = _events(tmp_path)
    assert any(e.get("event") == "deadline" and e.get("forced") for e in evs)
    assert any(e.get("event") == "deregister" for e in evs)
    got = queue.reserve()  # handed back before the exit: ready at once, the attempt not counted
    assert [(r.key, r.attempts) for r in got] == [("long", 1)]


@pytest.mark.slow
def test_shutdown_deadline_passed_exits_non_zero(dsn, queue, tmp_path):
    queue.push("long", "k", {"sleep": 120})
    proc = _spawn(dsn, queue.name, tmp_path, "--shutdown-timeout", "1")
    try:
        wait_for(lambda: _started(tmp_path), 30, "the handler to start")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1
    assert _says_still_running(tmp_path, f"{queue.name}/long/k")
    assert any(e.get("event") == "deadline" and not e.get("forced") for e in _events(tmp_path))


@pytest.mark.slow
def test_the_command_takes_prefetch_and_acknowledgement_settings(dsn, queue, tmp_path):
    for key in ("a", "b", "c"):
        queue.push(key, "k", {})
    proc = _spawn(
        dsn,
        queue.name,
        tmp_path,
        "--concurrency",
        "1",
        "--prefetch",
        "0",
        "--ack-batch",
        "2",
        "--ack-interval",
        "0.05",
    )
    try:
        wait_for(
            lambda: (lambda s: s.ready + s.delayed + s.reserved)(queue.stats()) == 0,
            30,
            "the three messages committed",
        )
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0
    done = sorted(line for line in (tmp_path / "record").read_text().splitlines() if line.startswith("done"))
    assert done == ["done a 1", "done b 1", "done c 1"]


@pytest.mark.parametrize(
    "option, value", [("--prefetch", "-1"), ("--ack-batch", "0"), ("--ack-interval", "soon")]
)
def test_the_command_refuses_a_bad_prefetch_or_acknowledgement_setting(option, value):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "worker",
            "tests.worker.worker_handlers:sleepy",
            "--queue",
            "q",
            option,
            value,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and option in proc.stderr, proc.stderr
