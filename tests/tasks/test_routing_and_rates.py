"""Routing and rate limits per task, as a Celery team writes them, on both dialects:
``task.configure(queue=...)`` routes one call to a route of the app (``App(routes=...)``) and
``@app.task(queue=...)`` a task's every call; ``@app.task(rate_limit="5/s")`` (also /m, /h) is the
contract's rate of the task's kind on each queue it runs on, set by app.create_queues(), and a
real `pyqueue-sql worker` starts at most 5 of its jobs in any second; bad spellings are refused
when the task is defined."""

from __future__ import annotations

import datetime as dt
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyqueue_sql import App, InvalidArgumentError

from ..helpers import queue_name
from . import routing_app

ROOT = str(Path(__file__).resolve().parents[2])


def test_configure_queue_routes_a_call_and_a_worker_of_the_route_runs_it(dsn, db):
    home = queue_name("r")
    app = App(dsn, queue=home, routes=[f"{home}.priority"])
    ran: list[tuple[str, int]] = []

    @app.task(store_result=True)
    def square(n: int) -> int:
        from pyqueue_sql import current_job

        ran.append((current_job().queue, n))
        return n * n

    @app.task(queue=f"{home}.other")
    def other() -> None:
        ran.append((f"{home}.other", 0))

    try:
        app.create_queues()
        assert app.queues() == sorted([home, f"{home}.priority", f"{home}.other"])
        urgent = square.configure(queue=f"{home}.priority").defer(3)
        usual = square.defer(4)
        many = square.configure(queue=f"{home}.priority").defer_many([square.call(5), square.call(6)])
        other.defer()
        assert (urgent.queue, usual.queue) == (f"{home}.priority", home)
        assert {h.queue for h in many} == {f"{home}.priority"}
        assert db.queue(f"{home}.priority").message(urgent.key, "square").payload == {"n": 3}
        assert db.queue(home).message(urgent.key, "square") is None
        # a worker of the route alone runs the routed calls, by their kind
        report = app.run_pending(queues=[f"{home}.priority"])
        assert sorted(ran) == [(f"{home}.priority", 3), (f"{home}.priority", 5), (f"{home}.priority", 6)]
        assert report.succeeded == 3 and urgent.result(timeout=1) == 9
        app.run_pending()
        assert (home, 4) in ran and (f"{home}.other", 0) in ran and usual.result(timeout=1) == 16
        # a queue that is neither the task's nor a route: refused, not a job nobody runs
        with pytest.raises(
            InvalidArgumentError, match=r"cannot be routed to queue 'elsewhere'.*App\(routes="
        ):
            square.configure(queue="elsewhere")
        with pytest.raises(InvalidArgumentError, match="queue must be a queue's name"):
            square.configure(queue="")
    finally:
        app.close()


def test_rate_limit_is_the_kinds_rate_on_each_of_its_queues(dsn, db):
    home = queue_name("r")
    app = App(dsn, queue=home, routes=[f"{home}.bulk"])

    @app.task(rate_limit="10/s")
    def per_second() -> None: ...

    @app.task(rate_limit="30/m")
    def per_minute() -> None: ...

    @app.task(rate_limit=" 100 / h ")
    def per_hour() -> None: ...

    @app.task
    def free() -> None: ...

    try:
        app.create_queues()
        for q in (home, f"{home}.bulk"):
            rates = {r.kind: (r.n, r.per) for r in db.queue(q).rates()}
            assert rates == {
                "per_second": (10, dt.timedelta(seconds=1)),
                "per_minute": (30, dt.timedelta(minutes=1)),
                "per_hour": (100, dt.timedelta(hours=1)),
            }, (q, rates)
    finally:
        app.close()


@pytest.mark.parametrize("spelling", ["10/x", "0/s", "-1/s", "ten/s", "10", "10/", "/s", "10001/s", 10])
def test_a_bad_rate_limit_is_refused_when_the_task_is_defined(spelling):
    app = App(queue="nowhere")
    with pytest.raises(InvalidArgumentError, match=r"task 'send': rate_limit") as refused:

        @app.task(rate_limit=spelling)
        def send() -> None: ...

    assert "\n" not in str(refused.value)
    assert app.tasks == {}


def test_a_real_worker_starts_at_most_n_jobs_of_a_rate_limited_task_in_any_window(dsn, db, tmp_path):
    queue = queue_name("rl")
    os.environ["PYQUEUE_TEST_QUEUE"] = queue
    try:
        module = importlib.reload(routing_app)
    finally:
        del os.environ["PYQUEUE_TEST_QUEUE"]
    app = module.app
    app.dsn = dsn
    record = tmp_path / "record"
    try:
        app.create_queues()
        app.defer_many([module.fetch.call(n) for n in range(12)])
        app.defer_many([module.fetch.configure(queue=module.PRIORITY).call(n) for n in range(100, 103)])
        proc = subprocess.Popen(
            [sys.executable, "-m", "pyqueue_sql.cli", "worker", "tests.tasks.routing_app:app"]
            + ["--dsn", dsn, "--concurrency", "8", "--no-status"],
            cwd=ROOT,
            env={
                **os.environ,
                "PYTHONPATH": ROOT,
                "PYQUEUE_TEST_QUEUE": queue,
                "PYQUEUE_TEST_RECORD": str(record),
            },
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        lines: list[str] = []
        try:
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline and len(lines) < 15:
                time.sleep(0.1)
                lines = record.read_text().splitlines() if record.exists() else []
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=30)
        assert len(lines) == 15, err.decode()
        by_queue: dict[str, list[float]] = {}
        for line in lines:
            q, n, at = line.split()
            by_queue.setdefault(q, []).append(float(at))
            assert (q == module.PRIORITY) == (int(n) >= 100), line  # each call ran where it was routed
        starts = sorted(by_queue[queue])
        assert len(starts) == 12 and len(by_queue[module.PRIORITY]) == 3
        # 5 a second: the 6th start of any run of six comes a window after the first (less what the
        # handlers' start times may lag behind their reservations: 0.2 s of margin)
        gaps = [b - a for a, b in zip(starts, starts[5:])]
        assert min(gaps) > 0.8, gaps
        assert starts[-1] - starts[0] > 1.8  # 12 jobs: three windows
    finally:
        app.close()
