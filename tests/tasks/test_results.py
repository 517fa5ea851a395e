"""Task results, cancellation and progress under a real worker, on both dialects: a return value
read by a handle that waits for it (and how soon after its commit), a failure's error, a queued
job cancelled (never runs), a running async def job cancelled (stops within a second), a def job
that checks job.cancel_requested, progress read while a job runs and after, the worker's refusal
to store results on a queue that keeps none, and `pyqueue-sql worker module:app` in a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import App, Cancelled, InvalidArgumentError, TaskCancelled, TaskFailed

from ..helpers import queue_name

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=queue_name())
    yield a
    a.close()


@contextlib.contextmanager
def running(app: App, **settings):
    """The app's worker (threads, or asyncio when a task is async def) on a thread of its own."""
    worker = app.worker(**{"concurrency": 2, "register": False, **settings})
    outcomes: list[tuple[str, str, str | None]] = []
    worker.on_outcome.append(lambda job, outcome, error: outcomes.append((job.key, outcome, error)))
    if asyncio.iscoroutinefunction(worker.run):
        target = lambda: asyncio.run(worker.run(install_signals=False))  # noqa: E731
    else:
        target = lambda: worker.run(install_signals=False)  # noqa: E731
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield outcomes
    finally:
        worker.stop(reason="test over")
        thread.join(timeout=30)
        assert not thread.is_alive()


def _wait_until(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_return_value_is_read_by_a_waiting_handle_right_after_its_commit(app, dialect, monkeypatch):
    """PostgreSQL: the handle is woken by the result's notification. Its reads between
    notifications are put 30 s apart, so that a handle that missed the notification would read
    the result only at its 5 s timeout, far past the bound below (a bound in milliseconds would
    time the machine's load, not the wakeup). MySQL/MariaDB: the server's long poll."""
    if dialect == "postgresql":
        wait_result = pyqueue_sql.client.Database._wait_result
        monkeypatch.setattr(
            pyqueue_sql.client.Database,
            "_wait_result",
            lambda self, queue, key, kind, deadline, poll: wait_result(
                self, queue, key, kind, deadline, 30.0
            ),
        )
    returned_at: list[float] = []
    go = threading.Event()

    @app.task(store_result=True)
    def add(a: int, b: int) -> int:
        assert go.wait(10)
        returned_at.append(time.monotonic())
        return a + b

    app.create_queues()
    with running(app):
        latencies = []
        for i in range(5):
            go.clear()
            # the task returns a moment later: the handle waits for it first
            threading.Timer(0.3, go.set).start()
            handle = add.defer(i, 10)
            assert handle.result(timeout=5) == i + 10
            latencies.append((time.monotonic() - returned_at[-1]) * 1000)
    best, worst = min(latencies), max(latencies)
    print(f"\n{dialect}: handle.result() returned {best:.1f}-{worst:.1f} ms after the task returned")
    assert worst < 1000, latencies


def test_a_failed_job_raises_its_last_error(app, db):
    @app.task(store_result=True)
    def broken(why: str) -> None:
        raise ValueError(why)

    app.create_queues(max_attempts=1)
    handle = broken.defer("the input was empty")
    report = app.run_pending()
    assert report.failed == 1
    with pytest.raises(TaskFailed, match="ValueError: the input was empty") as caught:
        handle.result(timeout=5)
    assert caught.value.last_error == "ValueError: the input was empty" and caught.value.attempts == 1
    assert handle.status().state == "failed"


def test_a_dead_lettered_job_on_a_queue_without_results_says_dead(app, db):
    @app.task
    def charge(account: str) -> None:
        raise ValueError(f"no account {account}")

    dead = db.queue(f"{app.default_queue}.dead").create()
    app.create_queues(max_attempts=1, dead_letter_queue=dead.name)
    assert db.queue(app.default_queue).settings().result_retention is None
    handle = charge.defer("x")
    kept = charge.configure(key="kept").defer("y")
    app.run_pending()
    status = handle.status()
    assert (status.state, status.last_error) == ("dead", "ValueError: no account x")
    with pytest.raises(TaskFailed, match="in the dead-letter queue: ValueError: no account x"):
        handle.result(timeout=1)
    assert app.group([handle, kept]).state == "failed"
    dead.remove("kept", "charge")  # gone from the dead-letter queue too: nothing says what it was
    assert kept.status().state == "unknown"


def test_app_and_task_results_list_the_finished_jobs_newest_first(app):
    @app.task(store_result=True)
    def double(n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return 2 * n

    @app.task(queue=f"{app.default_queue}.other", store_result=True)
    def name() -> str:
        return "x"

    app.create_queues(max_attempts=1)
    for n in (1, -1, 3):
        double.defer(n)
    name.defer()
    app.run_pending()
    mine = double.results()
    assert sorted((r.state, r.result or 0) for r in mine) == [
        ("failed", 0),
        ("succeeded", 2),
        ("succeeded", 6),
    ]
    assert [r.finished_at for r in mine] == sorted((r.finished_at for r in mine), reverse=True)
    assert [r.state for r in double.results(state="failed")] == ["failed"]
    assert {r.kind for r in app.results()} == {"double", "name"} and len(app.results()) == 4
    assert [r.kind for r in app.results(f"{app.default_queue}.other")] == ["name"]
    earlier = [r for r in mine if r.finished_at < mine[0].finished_at]
    assert len(double.results(before=mine[0].finished_at)) == len(earlier)


def test_a_queued_job_cancelled_never_runs(app):
    ran = []

    @app.task(store_result=True)
    def job(n: int) -> int:
        ran.append(n)
        return n

    app.create_queues()
    handle = job.defer(1)
    kept = job.defer(2)
    assert handle.status().state == "ready"
    assert handle.cancel() is True
    assert handle.status().state == "cancelled"
    assert handle.cancel() is False  # nothing live any more
    report = app.run_pending()
    assert ran == [2] and report.succeeded == 1
    with pytest.raises(TaskCancelled):
        handle.result(timeout=5)
    assert kept.result(timeout=5) == 2


def test_a_running_async_job_cancelled_stops_within_a_second(app):
    started = threading.Event()
    cleaned_up: list[float] = []  # when the handler stopped

    @app.task(store_result=True)
    async def crawl(pages: int) -> int:
        try:
            started.set()
            for page in range(pages):
                pyqueue_sql.current_job().set_progress({"page": page})
                await asyncio.sleep(0.1)
            return pages
        finally:
            cleaned_up.append(time.monotonic())

    app.create_queues()
    # a lease of 30 s: the heartbeat renews every 10 s, so the quick poll is what stops it
    with running(app, lease=30) as outcomes:
        handle = crawl.defer(10_000)
        assert started.wait(10)
        _wait_until(lambda: handle.progress() is not None, 5, "some progress")
        asked = time.monotonic()
        assert handle.cancel() is True
        final = handle._queue().wait_result(handle.key, handle.kind, timeout=5)
        seen_in = time.monotonic() - asked
    assert len(cleaned_up) == 1
    stopped_in = cleaned_up[0] - asked
    print(
        f"\nthe async job stopped {stopped_in * 1000:.0f} ms after the cancel was asked "
        f"(its result read as cancelled after {seen_in * 1000:.0f} ms)"
    )
    assert final.state == "cancelled" and stopped_in < 1.0, (final, stopped_in)
    assert final.progress["page"] >= 1
    assert (handle.key, "cancelled", None) in outcomes
    with pytest.raises(TaskCancelled):
        handle.result(timeout=1)


def test_a_sync_job_that_checks_its_cancel_flag_stops(app):
    steps = []

    @app.task(store_result=True)
    def long_report(rows: int) -> int:
        job = pyqueue_sql.current_job()
        for row in range(rows):
            steps.append(row)
            if job.cancel_requested.wait(0.05):
                job.raise_if_cancelled()
        return rows

    app.create_queues()
    with running(app, lease=3) as outcomes:  # the heartbeat (every second) brings the cancel
        handle = long_report.defer(100_000)
        _wait_until(lambda: steps, 10, "the job to start")
        asked = time.monotonic()
        assert handle.cancel() is True
        with pytest.raises(TaskCancelled):
            handle.result(timeout=10)
        stopped_in = time.monotonic() - asked
    print(f"\nthe def job stopped {stopped_in:.2f} s after the cancel was asked")
    assert stopped_in < 5
    assert (handle.key, "cancelled", None) in outcomes


def test_a_job_that_finishes_anyway_is_recorded_as_finished(app):
    @app.task(store_result=True)
    def stubborn(n: int) -> str:
        job = pyqueue_sql.current_job()
        assert job.cancel_requested.wait(10)
        return "finished anyway"

    app.create_queues()
    with running(app, lease=3):
        handle = stubborn.defer(1)
        _wait_until(lambda: handle.status().state == "reserved", 10, "the job to start")
        assert handle.cancel() is True
        assert handle.result(timeout=10) == "finished anyway"


def test_a_task_may_cancel_itself(app):
    @app.task(store_result=True)
    def pointless(n: int) -> int:
        raise Cancelled("nothing to do")

    app.create_queues()
    handle = pointless.defer(1)
    report = app.run_pending()
    assert report.cancelled == 1 and "1 cancelled" in str(report)
    assert handle.status().state == "cancelled"


def test_progress_is_read_while_the_job_runs_and_after_it_finished(app):
    may_finish = threading.Event()

    @app.task(store_result=True)
    def import_rows(n: int) -> int:
        job = pyqueue_sql.current_job()
        for i in range(n):
            job.set_progress({"done": i + 1, "of": n})
        assert may_finish.wait(10)
        return n

    app.create_queues()
    with running(app):
        handle = import_rows.defer(3)
        assert _wait_until(handle.progress, 5, "the progress") == {"done": 3, "of": 3}
        assert handle.status().state == "reserved"
        may_finish.set()
        assert handle.result(timeout=5) == 3
    assert handle.progress() == {"done": 3, "of": 3}
    assert handle.status().state == "succeeded"


def test_a_value_comes_back_by_the_return_annotation_and_a_handle_is_rebuilt(app):
    @app.task(store_result=True)
    def next_day(day: dt.date) -> dt.date:
        return day + dt.timedelta(days=1)

    @app.task
    def no_value(n: int) -> None:
        pass

    app.create_queues()
    handle = next_day.defer(dt.date(2026, 11, 26))
    plain = no_value.defer(1)
    app.run_pending()
    again = app.handle(handle.queue, handle.key, handle.kind)
    assert again.result(timeout=5) == dt.date(2026, 11, 27) == handle.result(timeout=1)
    assert plain.result(timeout=1) is None  # succeeded, nothing stored
    with pytest.raises(pyqueue_sql.ResultNotFoundError):
        app.handle(handle.queue, "no-such-key", "next_day").result(timeout=1)
    with pytest.raises(TimeoutError):
        next_day.configure(run_at=dt.timedelta(hours=1)).defer(dt.date(2026, 1, 1)).result(timeout=0.2)


def test_a_value_json_cannot_hold_fails_the_job(app):
    @app.task(store_result=True)
    def odd(n: int) -> object:
        return object()

    app.create_queues(max_attempts=1)
    handle = odd.defer(1)
    report = app.run_pending()
    assert report.failed == 1 and "cannot be stored as JSON" in report.errors[0]
    with pytest.raises(TaskFailed, match="InvalidPayloadError"):
        handle.result(timeout=1)


def test_the_worker_refuses_to_start_when_the_queue_keeps_no_results(app, db):
    @app.task(store_result=True)
    def add(a: int, b: int) -> int:
        return a + b

    db.queue(app.default_queue).create()  # no result retention
    worker = app.worker(register=False)
    with pytest.raises(InvalidArgumentError, match="keeps no results"):
        worker.run(install_signals=False)
    app.create_queues()  # gives it the default retention
    assert db.queue(app.default_queue).settings().result_retention == dt.timedelta(days=1)


def test_many_handles_wait_at_once_on_one_event_loop(app):
    @app.task(store_result=True)
    async def square(n: int) -> int:
        await asyncio.sleep(0.05)
        return n * n

    app.create_queues()

    async def main():
        handles = [await square.defer_async(n) for n in range(6)]
        try:
            return await asyncio.gather(*(h.result_async(timeout=20) for h in handles))
        finally:
            await (await app.database_async()).close()  # the app's connection of this loop

    with running(app):
        assert asyncio.run(main()) == [n * n for n in range(6)]


def test_the_cli_worker_stores_results_and_stops_a_cancelled_job(dsn, db):
    q = queue_name()
    env = {**os.environ, "PYTHONPATH": ROOT, "PYQUEUE_TEST_QUEUE": q, "PYQUEUE_DSN": dsn}
    os.environ["PYQUEUE_TEST_QUEUE"] = q
    try:
        import importlib

        from . import results_app

        module = importlib.reload(results_app)
    finally:
        del os.environ["PYQUEUE_TEST_QUEUE"]
    module.app.dsn = dsn
    try:
        module.app.create_queues(max_attempts=1)
        proc = subprocess.Popen(
            [sys.executable, "-m", "pyqueue_sql.cli", "worker", "tests.tasks.results_app:app", "--no-status"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            assert module.add.defer(2, 3).result(timeout=30) == 5
            assert module.next_day.defer(dt.date(2026, 2, 28)).result(timeout=10) == dt.date(2026, 3, 1)
            with pytest.raises(TaskFailed, match="ValueError: no such page"):
                module.broken.defer("no such page").result(timeout=10)
            crawl = module.crawl.defer(10_000)
            _wait_until(crawl.progress, 10, "the crawl's progress")
            assert crawl.cancel()
            with pytest.raises(TaskCancelled):
                crawl.result(timeout=5)
            assert crawl.progress()["of"] == 10_000
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err.decode()
    finally:
        module.app.close()


def test_an_async_handler_on_the_threaded_worker_is_cancelled_too(db, dsn):
    """Worker (threads) awaits an async def handler on its thread's event loop: a cancel cancels
    that task as AsyncWorker does, within a second; store_result on a plain handler."""
    q = db.queue(queue_name()).create()
    q.set_result_retention(3600)
    worker = pyqueue_sql.Worker(dsn, concurrency=2, register=False, lease=30)
    started = threading.Event()
    stopped: list[float] = []

    @worker.handler(q.name, "sleep", store_result=True)
    async def sleep(job):
        started.set()
        try:
            await asyncio.sleep(60)
        finally:
            stopped.append(time.monotonic())

    @worker.handler(q.name, "echo", store_result=True)
    def echo(job):
        return job.payload

    q.push("s", "sleep", {})
    q.push("e", "echo", {"back": [1, 2]})
    thread = threading.Thread(target=lambda: worker.run(install_signals=False), daemon=True)
    thread.start()
    try:
        assert q.wait_result("e", "echo", timeout=10).result == {"back": [1, 2]}
        assert started.wait(10)
        asked = time.monotonic()
        assert q.cancel("s", "sleep") == "requested"
        final = q.wait_result("s", "sleep", timeout=5)
    finally:
        worker.stop()
        thread.join(30)
    stopped_in = stopped[0] - asked
    assert final.state == "cancelled" and stopped_in < 1.0, (final, stopped_in)
    assert worker.stats.cancelled == 1


def test_the_cli_worker_refuses_in_one_line_a_queue_that_keeps_no_results(dsn, db):
    q = queue_name()
    db.queue(q).create()  # no result retention
    proc = subprocess.run(
        [sys.executable, "-m", "pyqueue_sql.cli", "worker", "tests.tasks.results_app:app", "--no-status"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "PYQUEUE_TEST_QUEUE": q, "PYQUEUE_DSN": dsn},
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert f"queue {q!r} keeps no results" in lines[0] and "set_result_retention" in lines[0]


def test_a_worker_with_the_consumer_capability_alone(dsn, db):
    """The consumer capability grants queue_result (the quick cancel poll) but not
    queue_settings: the worker starts without its check of the retention, stores results, and
    stops a cancelled async def handler within a second."""
    from ..security.test_privileges import Accounts

    accounts = Accounts(dsn)
    try:
        consumer_dsn = accounts.dsn_for(accounts.with_capabilities("wrk", "consumer"))
        with pytest.raises(pyqueue_sql.PermissionDeniedError):
            pyqueue_sql.connect(consumer_dsn).queue("x").settings()
        q = db.queue(queue_name()).create()
        q.set_result_retention(3600)
        worker = pyqueue_sql.Worker(consumer_dsn, concurrency=2, register=False, lease=30)
        started = threading.Event()

        @worker.handler(q.name, "sleep")
        async def sleep(job):
            started.set()
            await asyncio.sleep(60)

        @worker.handler(q.name, "echo", store_result=True)
        def echo(job):
            return job.payload["n"]

        q.push("e", "echo", {"n": 7})
        q.push("s", "sleep", {})
        thread = threading.Thread(target=lambda: worker.run(install_signals=False), daemon=True)
        thread.start()
        try:
            assert q.wait_result("e", "echo", timeout=10).result == 7
            assert started.wait(10)
            asked = time.monotonic()
            assert q.cancel("s", "sleep") == "requested"
            assert q.wait_result("s", "sleep", timeout=10).state == "cancelled"
            assert time.monotonic() - asked < 3.0  # (the latency itself: the test above)
        finally:
            worker.stop()
            thread.join(30)
    finally:
        accounts.close()
