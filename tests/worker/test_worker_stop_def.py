"""A plain (def) task that is cancelled, or that runs past its timeout, under `pyqueue-sql worker
mod:app` as a user runs it: the cancel reaches it within a second whatever the lease, and a task
past its timeout is stopped in its thread before its late side effect."""

from __future__ import annotations

import time
import uuid

import pytest

from pyqueue_sql.errors import TaskCancelled, TaskFailed

from .test_worker_cli_app import serving, write_module

MODULE = """
    import os, time
    import pyqueue_sql
    from pyqueue_sql import App, RetryPolicy

    app = App({dsn!r})

    def record(line):
        with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
            f.write(line + "\\n")

    @app.task(queue={queue!r}, store_result=True)
    def report(rows: int) -> int:
        job = pyqueue_sql.current_job()
        record("started")
        for row in range(rows):
            if job.cancel_requested.wait(0.05):
                job.raise_if_cancelled()
        return rows

    @app.task(queue={queue!r}, timeout=1, retry=RetryPolicy(give_up_on=(TimeoutError,)))
    def charge(amount: int) -> None:
        record("charging")
        time.sleep(2.5)  # a slow call: the time limit lands when it returns
        record(f"charged {{amount}}")

    @app.task(queue={queue!r}, timeout=1, retry=RetryPolicy(give_up_on=(TimeoutError,)))
    def spin(n: int) -> None:
        record("spinning")
        try:
            while True:  # pure Python: the time limit lands at once
                try:
                    n += 1
                except Exception:  # does not swallow the time limit
                    pass
        finally:
            record("spin ended")

    @app.task(queue={queue!r}, store_result=True)
    def grind(seconds: float) -> int:
        record("grinding")
        ends, n = time.monotonic() + seconds, 0
        try:
            while time.monotonic() < ends:  # never looks at its cancel
                try:
                    n += 1
                except Exception:  # does not swallow the stop
                    pass
        finally:
            record("grind ended")
        return n

    if os.environ.get("PYQUEUE_TEST_ASYNC"):  # one async def task: the App runs on AsyncWorker

        @app.task(queue={queue!r})
        async def ping() -> None:
            pass
"""


@pytest.fixture
def app_module(tmp_path, dsn):
    queue = f"stopdef.{uuid.uuid4().hex[:8]}"
    name = write_module(tmp_path, MODULE.format(dsn=dsn, queue=queue))
    import importlib
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    module.app.create_queues()
    yield name, module
    db = module.app.database()
    for q in module.app.queues():
        db.queue(q).drop()
    module.app.close()


@pytest.mark.slow
def test_a_running_def_task_learns_of_its_cancel_within_a_second_with_a_30_s_lease(tmp_path, app_module):
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--lease", "30") as served:
        served.wait_for_line("worker starting")
        stops = []
        for _ in range(3):
            handle = module.report.defer(1_000_000)
            served.wait_for_records(len(stops) + 1, 20)
            time.sleep(0.8)  # past the first quick read: the worker is in its steady state
            asked = time.monotonic()
            assert handle.cancel() is True
            with pytest.raises(TaskCancelled):
                handle.result(timeout=10)
            stops.append(round(time.monotonic() - asked, 3))
    print(f"\ncancel of a running def task, from the caller's side: {stops} s (lease 30 s)")
    assert all(s < 2.0 for s in stops), stops


@pytest.mark.slow
def test_a_def_task_past_its_timeout_is_stopped_before_its_late_side_effect(tmp_path, app_module):
    name, module = app_module
    with serving(tmp_path, f"{name}:app") as served:
        served.wait_for_line("worker starting")
        charge = module.charge.defer(42)
        spin = module.spin.defer(0)
        for handle in (charge, spin):
            with pytest.raises(TaskFailed, match="TimeoutError"):
                handle.result(timeout=20)
        deadline = time.monotonic() + 10
        while ["spin", "ended"] not in served.records() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(3.0)  # past the end of the slow call: the charge would be recorded by now
        lines = [" ".join(r) for r in served.records()]
        served.wait_for_line("stopped at its timeout")
    assert "charging" in lines and "spinning" in lines, lines
    assert not any(line.startswith("charged") for line in lines), lines


@pytest.mark.parametrize("runtime", ["threads", "asyncio"])
def test_a_def_task_that_ignores_its_cancel_is_stopped_after_the_grace_and_recorded_cancelled(
    tmp_path, app_module, runtime
):
    name, module = app_module
    env = {"PYQUEUE_TEST_ASYNC": "1"} if runtime == "asyncio" else {}
    with serving(tmp_path, f"{name}:app", **env) as served:
        served.wait_for_line(f"runtime={runtime}")
        handle = module.grind.defer(8.0)
        served.wait_for_records(1, 20)
        asked = time.monotonic()
        assert handle.cancel() is True
        with pytest.raises(TaskCancelled):
            handle.result(timeout=8)
        stopped = time.monotonic() - asked
        served.wait_for_records(2, 5)
        served.wait_for_line("did not stop within 1 s of its cancel")
    assert handle.status().state == "cancelled"
    # the cancel reaches the worker within a second, then the grace of 1 s: far from the 8 s
    assert stopped < 4.0, stopped
    assert [" ".join(r) for r in served.records()] == ["grinding", "grind ended"]
