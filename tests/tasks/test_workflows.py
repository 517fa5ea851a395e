"""Workflows of tasks (jobs deferred with after=, queue_push_after underneath) run by a real worker
on both dialects: a chain runs step after step and each step reads the one before; a fan-in child
runs once, after every parent has committed, and reads their results in the order given, each
rebuilt by its task's return annotation; a failing parent cancels its children, transitively;
cancelling a waiting job cancels its own children; the same from asyncio, and through
Queue.push_after / Queue.parent_results; a workflow pushed with plain SQL run by `pyqueue-sql
worker module:app`; run_pending running a whole chain; and the mistakes refused in one line."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import pyqueue_sql
import pyqueue_sql.aio
from pyqueue_sql import App, InvalidArgumentError, TaskCancelled, current_job

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
    worker = app.worker(**{"concurrency": 4, "register": False, **settings})
    if asyncio.iscoroutinefunction(worker.run):
        target = lambda: asyncio.run(worker.run(install_signals=False))  # noqa: E731
    else:
        target = lambda: worker.run(install_signals=False)  # noqa: E731
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop(reason="test over")
        thread.join(timeout=30)
        assert not thread.is_alive()


class Runs:
    """What the tasks did, from the worker's threads: (kind, argument, start, end) per run."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[str, object, float, float]] = []

    def note(self, kind: str, arg: object, start: float) -> None:
        with self.lock:
            self.rows.append((kind, arg, start, time.monotonic()))

    def of(self, kind: str) -> list[tuple[str, object, float, float]]:
        with self.lock:
            return [r for r in self.rows if r[0] == kind]


def test_a_chain_runs_step_after_step_and_each_step_reads_the_one_before(app):
    """Four workers could run the three steps at once: each runs only after the one before it has
    committed, and gets its result (1, then 12, then 123)."""
    runs = Runs()

    @app.task(store_result=True)
    def step(digit: int) -> int:
        start = time.monotonic()
        before = current_job().parent_results()
        time.sleep(0.2)
        runs.note("step", digit, start)
        return (before[0] if before else 0) * 10 + digit

    app.create_queues()
    first = step.defer(1)
    second = step.configure(after=[first]).defer(2)
    third = step.configure(after=[second]).defer(3)
    assert [h.status().state for h in (first, second, third)] == ["ready", "waiting", "waiting"]
    with running(app):
        assert third.result(timeout=60) == 123
    assert (first.result(timeout=1), second.result(timeout=1)) == (1, 12)
    rows = runs.of("step")
    assert [r[1] for r in rows] == [1, 2, 3]
    for before, after in zip(rows, rows[1:]):
        assert after[2] >= before[3], f"step {after[1]} started before step {before[1]} ended"


def test_a_fan_in_child_runs_once_after_all_parents_and_reads_their_results_in_order(app):
    """Five parents of two tasks run side by side (four workers); the child runs once, after the
    last of them ended, and reads their results in the order given: ints and a date rebuilt by the
    parents' return annotations."""
    runs = Runs()

    @app.task(store_result=True)
    def square(n: int) -> int:
        start = time.monotonic()
        time.sleep(0.1 * n)
        runs.note("square", n, start)
        return n * n

    @app.task(store_result=True)
    def tomorrow(day: dt.date) -> dt.date:
        start = time.monotonic()
        time.sleep(0.3)
        runs.note("tomorrow", day, start)
        return day + dt.timedelta(days=1)

    @app.task(store_result=True)
    def report(title: str) -> str:
        start = time.monotonic()
        *squares, day = current_job().parent_results()
        runs.note("report", title, start)
        return f"{title}: {squares} {type(day).__name__} {day.isoformat()}"

    app.create_queues()
    parents = [square.defer(n) for n in (4, 1, 3, 2)] + [tomorrow.defer(dt.date(2026, 11, 27))]
    child = report.configure(after=parents).defer("sum")
    assert child.status().state == "waiting"
    with running(app):
        assert child.result(timeout=60) == "sum: [16, 1, 9, 4] date 2026-11-28"
    assert len(runs.of("report")) == 1
    last_parent_end = max(r[3] for r in runs.of("square") + runs.of("tomorrow"))
    assert runs.of("report")[0][2] >= last_parent_end


def test_a_failing_parent_cancels_its_children_transitively_and_they_never_run(app):
    ran: list[str] = []

    @app.task(store_result=True)
    def fetch(url: str) -> str:
        raise ConnectionError(f"{url} is down")

    @app.task(store_result=True)
    def parse(what: str) -> int:
        ran.append(what)
        return 1

    app.create_queues(max_attempts=1)
    bad = fetch.defer("https://example.invalid/feed")
    child = parse.configure(after=[bad]).defer("feed")
    grandchild = parse.configure(after=[child]).defer("summary")
    with running(app):
        with pytest.raises(pyqueue_sql.TaskFailed):
            bad.result(timeout=60)
        with pytest.raises(TaskCancelled):
            grandchild.result(timeout=10)
    assert ran == []
    child_state, grandchild_state = child.status(), grandchild.status()
    assert (child_state.state, grandchild_state.state) == ("cancelled", "cancelled")
    assert "fetch" in child_state.last_error and "failed" in child_state.last_error
    assert "parse" in grandchild_state.last_error and child.key in grandchild_state.last_error


def test_cancelling_a_waiting_job_cancels_it_and_its_own_children(app):
    @app.task(store_result=True)
    def stage(n: int) -> int:
        return n

    app.create_queues()
    root = stage.configure(run_at=dt.timedelta(hours=1)).defer(0)
    middle = stage.configure(after=[root]).defer(1)
    leaf = stage.configure(after=[middle]).defer(2)
    other = stage.configure(after=[root]).defer(3)
    assert middle.status().state == "waiting"
    assert middle.cancel() is True
    assert [h.status().state for h in (root, middle, leaf, other)] == [
        "delayed",
        "cancelled",
        "cancelled",
        "waiting",
    ]
    assert middle.cancel() is False


def test_workflows_from_asyncio(app):
    """defer_async with after=, and an async def child reading its parents' results."""

    @app.task(store_result=True)
    async def double(n: int) -> int:
        return 2 * n

    @app.task(store_result=True)
    async def total(label: str) -> str:
        return f"{label} {sum(current_job().parent_results())}"

    app.create_queues()

    async def main() -> str:
        parents = [await double.defer_async(n) for n in (1, 2, 3)]
        child = await total.configure(after=parents).defer_async("total")
        assert child.status().state == "waiting"
        with running(app):
            return await child.result_async(timeout=60)

    assert asyncio.run(main()) == "total 12"


def test_queue_push_after_and_parent_results_on_the_client(db, make_queue, dsn):
    """The client's calls under the tasks, sync and asyncio: parents as (queue, key, kind), a
    mapping or a handle-like object, read back in order with their states and results."""
    q = make_queue()
    q.set_result_retention(dt.timedelta(days=1))
    other = make_queue()
    other.set_result_retention(dt.timedelta(days=1))
    q.push("a", "k", {})
    other.push("b", "k", {})
    [held] = q.reserve()
    assert q.commit_result(held, {"n": 1})
    assert q.push_after(
        "child", "k", {"x": 1}, [(q.name, "a", "k"), {"queue": other, "p_key": "b", "p_kind": "k"}]
    )
    assert not q.push_after("child", "k", {"x": 2}, [(q.name, "a", "k")])
    assert q.result("child", "k").state == "waiting"
    parents = q.parent_results("child", "k")
    assert [(p.queue, p.key, p.state, p.result) for p in parents] == [
        (q.name, "a", "succeeded", {"n": 1}),
        (other.name, "b", "ready", None),
    ]
    [b] = other.reserve()
    other.commit(b)
    assert q.result("child", "k").state == "ready"

    async def via_asyncio() -> list:
        adb = await pyqueue_sql.aio.connect(dsn)
        try:
            aq = adb.queue(q.name)
            assert await aq.push_after("grandchild", "k", {}, [q.result("child", "k")])
            return await aq.parent_results("child", "k")
        finally:
            await adb.close()

    assert [p.state for p in asyncio.run(via_asyncio())] == ["succeeded", "succeeded"]
    assert q.result("grandchild", "k").state == "waiting"


def test_mistakes_are_refused_in_one_line(app, make_queue):
    @app.task(store_result=True)
    def step(n: int) -> int:
        return n

    app.create_queues()
    parent = step.defer(1)
    with pytest.raises(InvalidArgumentError, match="run_on= says when a job with parents runs: give after="):
        step.defer_many([step.configure(run_on="always").call(2)])
    with pytest.raises(InvalidArgumentError, match="cannot be combined with group"):
        step.configure(after=[parent], group="g").defer(2)
    with pytest.raises(InvalidArgumentError, match="at least one parent"):
        step.configure(after=[])
    with pytest.raises(InvalidArgumentError, match=r"parents\[2\] must be"):
        step.configure(after=[parent, "not a handle"])
    with pytest.raises(InvalidArgumentError, match="unknown"):
        step.configure(after=[(parent.queue, "never-deferred", "step")]).defer(2)
    no_results = make_queue()
    no_results.push("p", "k", {})
    with pytest.raises(InvalidArgumentError):
        step.configure(after=[(no_results.name, "p", "k")]).defer(2)


def test_run_pending_runs_a_whole_chain(app):
    """run_pending goes on while a job it ran made another ready in its commit: the last step of a
    chain of four runs in the same call."""

    @app.task(store_result=True)
    def step(n: int) -> int:
        before = current_job().parent_results()
        return (before[0] if before else 0) + n

    app.create_queues()
    handle = step.defer(1)
    for n in (2, 3, 4):
        handle = step.configure(after=[handle]).defer(n)
    report = app.run_pending()
    assert (report.succeeded, handle.result(timeout=1)) == (4, 10)


def test_a_workflow_pushed_from_sql_runs_under_the_cli_worker(dsn, db, raw, dialect):
    """Parents and a fan-in child pushed with plain SQL (queue_push_after), run by
    `pyqueue-sql worker module:app` in a subprocess: the child reads its parents' values rebuilt
    by their tasks' return annotations (a date comes back a date)."""
    q = queue_name()
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "PYQUEUE_TEST_QUEUE": q,
        "PYQUEUE_DSN": dsn,
        "PYTHONFAULTHANDLER": "1",
    }
    os.environ["PYQUEUE_TEST_QUEUE"] = q
    try:
        from . import workflows_app

        module = importlib.reload(workflows_app)
    finally:
        del os.environ["PYQUEUE_TEST_QUEUE"]
    module.app.dsn = dsn
    try:
        module.app.create_queues()
        call = "SELECT" if dialect == "postgresql" else "CALL"
        raw(
            f"{call} queue_push(%s, 'day', 'tomorrow', %s{', NULL, NULL' if dialect == 'mysql' else ''})",
            (q, '{"day": "2026-02-28"}'),
        )
        raw(
            f"{call} queue_push(%s, 'sq', 'square', %s{', NULL, NULL' if dialect == 'mysql' else ''})",
            (q, '{"n": 7}'),
        )
        parents = json.dumps(
            [
                {"queue": q, "p_key": "day", "p_kind": "tomorrow"},
                {"queue": q, "p_key": "sq", "p_kind": "square"},
            ]
        )
        raw(f"{call} queue_push_after(%s, 'both', 'describe', %s, %s)", (q, '{"label": "from sql"}', parents))
        child = module.app.handle(q, "both", "describe")
        assert child.status().state == "waiting"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pyqueue_sql.cli",
                "worker",
                "tests.tasks.workflows_app:app",
                "--no-status",
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            assert child.result(timeout=60) == "from sql: date 2026-03-01, int 49"
        finally:
            proc.terminate()
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack to stderr
                _, err = proc.communicate(timeout=30)
                pytest.fail("the worker did not stop within 30 s of SIGTERM; its log:\n" + err.decode())
        assert proc.returncode == 0, err.decode()
    finally:
        module.app.close()


def test_a_failure_callback_runs_once_when_a_parent_fails_and_reads_its_error(app):
    """configure(after=..., run_on="failure") (queue_push_after_on): of a chord's three parts one
    fails, and the failure callback runs once and reads which and why; the chord's own callback
    (run_on "success") is cancelled; a failure callback whose parents all succeed never runs; an
    "always" one runs either way."""
    reports: list[list[tuple[str, str, str | None]]] = []

    @app.task(store_result=True)
    def part(n: int) -> int:
        if n == 2:
            raise ValueError(f"part {n} is broken")
        return n

    @app.task(store_result=True)
    def total() -> int:
        return sum(part.parent_results())

    @app.task(store_result=True)
    def on_error(label: str) -> str:
        reports.append([(p.key, p.state, p.error) for p in app.failed_parents()])
        return label

    app.create_queues(max_attempts=1)
    parts = [part.configure(key=f"part-{n}").defer(n) for n in (1, 2, 3)]
    chord = total.configure(after=parts).defer()
    errback = on_error.configure(after=parts, run_on="failure").defer("chord failed")
    finally_ = on_error.configure(after=parts, run_on="always").defer("chord ended")
    fine = part.configure(key="part-4").defer(4)
    unused = on_error.configure(after=[fine], run_on="failure").defer("never")
    app.run_pending()
    assert errback.result(timeout=1) == "chord failed" and finally_.result(timeout=1) == "chord ended"
    assert chord.status().state == "cancelled"
    assert unused.status().state == "cancelled"
    assert reports == [[("part-2", "failed", reports[0][0][2])]] * 2
    assert "part 2 is broken" in reports[0][0][2]
    with pytest.raises(
        InvalidArgumentError, match="run_on must be 'success', 'failure' or 'always', not 'sometimes'"
    ):
        on_error.configure(after=parts, run_on="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="run_on= says when a job with parents runs: give after="):
        on_error.configure(run_on="failure").defer("x")
    with pytest.raises(InvalidArgumentError, match="run_on= says when a job with parents runs: give after="):
        on_error.configure(run_on="always").defer_many([on_error.call("x")])
