"""What a task or handler chooses on failure (RetryPolicy retry_on / give_up_on, Retry, GiveUp,
Snooze), per kind; per-job timeouts; middleware; handlers refused at start. Both dialects, real
routines, sync and asyncio workers."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from pyqueue_sql import App, GiveUp, InvalidArgumentError, Retry, RetryPolicy, Snooze, Worker
from pyqueue_sql.aio.worker import AsyncWorker
from pyqueue_sql.client import QueueCalls

from ..helpers import wait_for
from ..worker.test_worker import running


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=f"t.{uuid.uuid4().hex[:12]}")
    yield a
    a.close()


def _dead_letter_app(app, db):
    dlq = db.queue(app.default_queue + ".dead").create()
    app.create_queues(max_attempts=5, dead_letter_queue=dlq.name)
    return dlq


def test_retry_on_and_give_up_on_decide_per_exception(app, db):
    dlq = None

    @app.task(
        retry=RetryPolicy(base=0, jitter=0, retry_on=(ConnectionError, ValueError), give_up_on=KeyError)
    )
    def flaky(error: str) -> None:
        raise {"conn": ConnectionError, "value": ValueError, "key": KeyError, "type": TypeError}[error](
            "boom"
        )

    dlq = _dead_letter_app(app, db)
    for error in ("conn", "value", "key", "type"):
        flaky.configure(key=error).defer(error)
    report = app.run_pending(queues=None)
    first = {j.key: j.outcome for j in report.jobs if j.attempts == 1}
    # retried: listed in retry_on; given up at once: give_up_on, and anything retry_on does not name
    assert first == {"conn": "retry", "value": "retry", "key": "dead_lettered", "type": "dead_lettered"}
    dead = {m.key: m for m in dlq.messages()}
    assert set(dead) >= {"key", "type"}


def test_retry_after_counts_an_attempt_and_waits_as_asked(app, db):
    @app.task
    def later() -> None:
        raise Retry(after=60)

    app.create_queues()
    later.configure(key="r").defer()
    report = app.run_pending()
    assert [(j.outcome, j.attempts) for j in report.jobs] == [("retry", 1)]
    info = db.queue(app.default_queue).message("r", "later")
    assert info.attempts == 1
    wait_s = db.queue(app.default_queue).next_scheduled_at()[1]
    assert 50 < wait_s <= 60


def test_give_up_ends_the_job_now_whatever_attempts_are_left(app, db):
    @app.task
    def hopeless() -> None:
        raise GiveUp("the account is closed")

    dlq = _dead_letter_app(app, db)
    hopeless.configure(key="g").defer()
    report = app.run_pending()
    assert [(j.outcome, j.attempts) for j in report.jobs] == [("dead_lettered", 1)]
    assert "GiveUp: the account is closed" in report.errors[0]
    assert [m.key for m in dlq.messages()] == ["g"]
    assert db.queue(app.default_queue).message("g", "hopeless") is None


@pytest.mark.skipif(not hasattr(QueueCalls, "snooze"), reason="the client has no queue_snooze yet")
def test_snooze_comes_back_later_without_using_an_attempt(app, db):
    @app.task
    def wait_for_it() -> None:
        raise Snooze(after=60)

    app.create_queues(max_attempts=1)
    wait_for_it.configure(key="s").defer()
    report = app.run_pending()
    assert [j.outcome for j in report.jobs] == ["snoozed"]
    info = db.queue(app.default_queue).message("s", "wait_for_it")
    assert info is not None and info.attempts == 0  # max_attempts=1: a counted attempt would have ended it


def test_a_policy_given_to_one_handler_applies_to_that_kind_only(dsn, queue):
    """Registering kind 'a' with a long retry delay left kind 'b' (registered after, without one)
    on the queue's default policy; before, the last retry= given set the whole queue's policy."""
    delays = {}
    worker = Worker(dsn, concurrency=1, register=False)
    worker.on_outcome.append(lambda job, outcome, error: None)

    def fail(job):
        raise RuntimeError(job.kind)

    worker.add_handler(queue.name, fail, "a", retry=RetryPolicy(base=600, max_delay=600, jitter=0))
    worker.add_handler(queue.name, fail, "b")
    worker.add_handler(queue.name, fail, "c", retry=RetryPolicy(base=30, jitter=0))
    worker.set_retry(queue.name, RetryPolicy(base=5, jitter=0))
    for kind in "abc":
        queue.push(kind, kind, {})
    with running(worker):
        wait_for(lambda: worker.stats.failed == 3, 30, "three failures")
    for kind in "abc":
        delays[kind] = queue.db.queue(queue.name).message(kind, kind)
    waits = {}
    for kind in "abc":
        info = delays[kind]
        waits[kind] = (info.scheduled_at - info.created_at).total_seconds()
    assert 590 < waits["a"] < 610 and 3 < waits["b"] < 10 and 25 < waits["c"] < 40, waits


def test_a_handler_that_cannot_take_a_job_is_refused_when_the_worker_starts(dsn, queue):
    worker = Worker(dsn, register=False)

    def no_job():
        pass

    worker.add_handler(queue.name, no_job, "k")
    with pytest.raises(InvalidArgumentError, match="no_job.*cannot be called with one job"):
        worker.run(install_signals=False)
    queue.push("m", "k", {})
    assert queue.stats().ready == 1  # nothing was reserved


# -- timeouts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", ["threads", "asyncio", "asyncio-sync-def"])
def test_a_job_past_its_timeout_is_failed_within_a_second_while_others_keep_flowing(app, db, runtime):
    release = threading.Event()
    late = threading.Event()
    events = []

    if runtime == "asyncio":

        @app.task(timeout=1.0, retry=RetryPolicy(base=600, max_delay=600))
        async def hang(n: int) -> None:
            await asyncio.sleep(30)

        @app.task
        async def quick(n: int) -> None:
            events.append(("start", n, time.monotonic()))
            await asyncio.sleep(0.3)
            events.append(("end", n, time.monotonic()))

    else:

        @app.task(timeout=1.0, retry=RetryPolicy(base=600, max_delay=600))
        def hang(n: int) -> None:
            release.wait(30)
            late.set()

        @app.task
        def quick(n: int) -> None:
            events.append(("start", n, time.monotonic()))
            time.sleep(0.3)
            events.append(("end", n, time.monotonic()))

        if runtime == "asyncio-sync-def":

            @app.task
            async def marker() -> None: ...  # makes the app's worker an AsyncWorker

    app.create_queues()
    failed_at = {}
    started_at = {}
    worker = app.worker(concurrency=2, register=False, poll_fallback=0.2)
    assert isinstance(worker, AsyncWorker if runtime.startswith("asyncio") else Worker)

    def outcome(job, what, error):
        if job.kind == "hang":
            started_at[job.key] = job.started_at
            failed_at[job.key] = (time.monotonic(), what, error)

    worker.on_outcome.append(outcome)
    with running(worker):
        hang.configure(key="h1").defer(1)
        wait_for(lambda: "h1" in failed_at, 30, "the timed-out job")
        at, what, error = failed_at["h1"]
        assert what == "retry" and error.startswith("TimeoutError")
        assert 1.0 <= at - started_at["h1"] < 2.0, at - started_at["h1"]
        # both handler slots still run: two quick jobs overlap while the first hang's thread lives on
        quick.defer(1)
        quick.defer(2)
        wait_for(lambda: len(events) == 4, 30, "the quick jobs")
    starts = sorted(t for e, _, t in events if e == "start")
    ends = sorted(t for e, _, t in events if e == "end")
    assert starts[1] < ends[0], "the two quick jobs did not run at the same time"
    info = db.queue(app.default_queue).message("h1", "hang")
    assert info.attempts == 1 and "TimeoutError" in (info.last_error or "")
    release.set()
    if runtime != "asyncio":
        # stopped in its thread at the timeout: the line after the wait never runs
        assert not late.wait(2)
    time.sleep(0.2)
    # still waiting for its retry
    assert db.queue(app.default_queue).message("h1", "hang").last_error.startswith("TimeoutError")


# -- middleware -------------------------------------------------------------------------------


def test_middleware_runs_around_every_job_in_order_and_its_exception_fails_the_job(app):
    calls = []

    @app.middleware
    def outer(job, call_next):
        calls.append(f"outer>{job.kind}")
        try:
            return call_next()
        finally:
            calls.append(f"<outer {job.kind}")

    @app.middleware
    def inner(job, call_next):
        if job.payload.get("refuse"):
            raise PermissionError("refused by middleware")
        calls.append("inner>")
        result = call_next()
        calls.append("<inner")
        return result

    @app.task
    def work(refuse: bool = False) -> None:
        calls.append("work")

    app.create_queues(max_attempts=1)
    work.configure(key="ok").defer()
    report = app.run_pending()
    assert calls == ["outer>work", "inner>", "work", "<inner", "<outer work"]
    work.configure(key="no").defer(refuse=True)
    report = app.run_pending()
    assert [(j.key, j.outcome) for j in report.jobs] == [("no", "dropped")]
    assert report.errors == ["PermissionError: refused by middleware"]


def test_async_middleware_wraps_async_tasks(app):
    calls = []

    @app.middleware
    async def timing(job, call_next):
        calls.append("before")
        await call_next()
        calls.append("after")

    @app.task
    async def work() -> None:
        calls.append("work")

    app.create_queues()
    work.defer()
    assert app.run_pending().succeeded == 1
    assert calls == ["before", "work", "after"]


def test_give_up_on_the_last_allowed_delivery_keeps_its_error_in_the_dead_letter(app, db):
    @app.task
    def hopeless() -> None:
        raise GiveUp("the account is closed")

    dlq = db.queue(app.default_queue + ".dead").create()
    app.create_queues(max_attempts=1, dead_letter_queue=dlq.name)
    hopeless.configure(key="g").defer()
    report = app.run_pending()
    assert [(j.outcome, j.attempts) for j in report.jobs] == [("dead_lettered", 1)]
    assert dlq.message("g", "hopeless").last_error == "GiveUp: the account is closed"


def test_an_async_handler_on_threads_is_cancelled_at_its_timeout(dsn, queue):
    cancelled = threading.Event()
    worker = Worker(dsn, concurrency=1, register=False, poll_fallback=0.2)

    async def slow(job):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker.add_handler(queue.name, slow, timeout=0.5, retry=RetryPolicy(base=600, max_delay=600))
    queue.push("m", "k", {})
    started = time.monotonic()
    with running(worker):
        wait_for(lambda: worker.stats.failed == 1, 30, "the timeout")
    assert time.monotonic() - started < 10
    assert cancelled.is_set()
    assert queue.message("m", "k").last_error.startswith("TimeoutError")
