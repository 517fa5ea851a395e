"""A hard stop for a blocking def task, as a Celery user meets it (`time_limit` under prefork):
under `pyqueue-sql worker --processes 2 --kill-grace 1` a task blocked in time.sleep past its
timeout or its cancel has its process terminated and replaced, its attempt recorded as timed out or
cancelled; with threads alone the log says the thread runs on, never that it stopped."""

from __future__ import annotations

import importlib
import os
import re
import sys
import time
import uuid

import pytest

from pyqueue_sql.errors import TaskCancelled, TaskFailed

from .test_worker_cli_app import serving, write_module

MODULE = """
    import os, time
    from pyqueue_sql import App, RetryPolicy

    app = App({dsn!r})

    def record(*words):
        with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
            f.write(" ".join(map(str, words)) + "\\n")

    @app.task(queue={queue!r}, timeout=1, retry=RetryPolicy(give_up_on=(TimeoutError,)))
    def hang(n: int) -> None:
        record("hang", n, os.getpid(), time.time())
        time.sleep(30)  # a blocking call: no exception reaches it
        record("woke", n, os.getpid(), time.time())

    @app.task(queue={queue!r})
    def block(n: int) -> None:
        record("block", n, os.getpid(), time.time())
        time.sleep(30)
        record("woke", n, os.getpid(), time.time())

    @app.task(queue={queue!r})
    def whoami(n: int) -> None:
        record("pid", n, os.getpid(), time.time())
"""


@pytest.fixture
def app_module(tmp_path, dsn):
    name = write_module(tmp_path, MODULE.format(dsn=dsn, queue=f"kill.{uuid.uuid4().hex[:8]}"))
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    module.app.create_queues(max_attempts=3, result_retention=3600)
    yield name, module
    db = module.app.database()
    for q in module.app.queues():
        db.queue(q).drop()
    module.app.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie its supervisor has not reaped yet has ended
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped meanwhile: the read of its stat fails with ESRCH
        return False


def _started(served) -> set[int]:
    """The pids of the supervisor's first processes, once both serve."""
    served.wait_for_line("worker processes starting")
    line = next(line for line in served.lines if "worker processes starting" in line)
    pids = {int(p) for p in re.search(r"pids=\[([\d, ]+)\]", line).group(1).split(",")}
    deadline = time.monotonic() + 30
    while sum("worker starting" in line for line in served.lines) < 2:
        assert time.monotonic() < deadline, served.lines
        time.sleep(0.05)
    return pids


def _replacement_runs_a_job(served, module, first: set[int]) -> int:
    """Defers quick jobs until one runs in a process not among the first ones: its pid."""
    deadline = time.monotonic() + 30
    n = 0
    while time.monotonic() < deadline:
        n += 1
        module.whoami.defer(n)
        time.sleep(0.3)
        fresh = [int(r[2]) for r in served.records() if r[0] == "pid" and int(r[2]) not in first]
        if fresh:
            return fresh[0]
    raise AssertionError(f"no job ran in a replacement process: {served.records()}\n{served.lines}")


@pytest.mark.slow
def test_a_task_blocked_past_its_timeout_has_its_process_replaced(tmp_path, app_module):
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--processes", "2", "--kill-grace", "1") as served:
        first = _started(served)
        handle = module.hang.defer(1)
        ((_, _, pid, began),) = served.wait_for_records(1, 20)
        with pytest.raises(
            TaskFailed, match="TimeoutError: the handler did not finish within its timeout of 1 s"
        ):
            handle.result(timeout=20)
        failed_after = time.time() - float(began)
        while _alive(int(pid)) and time.time() - float(began) < 20:
            time.sleep(0.05)
        gone_after = time.time() - float(began)
        fresh = _replacement_runs_a_job(served, module, first)
    lines = "\n".join(served.lines)
    print(f"\nattempt failed {failed_after:.2f} s after its start, process gone after {gone_after:.2f} s")
    assert int(pid) in first and fresh not in first
    # the timeout (1 s) and the stuck grace (0.2 s): recorded then, with room for a loaded machine
    assert failed_after < 4, failed_after
    # the timeout, --kill-grace 1 and at most --kill-grace more for the SIGKILL, with the same room
    assert gone_after < 7, lines
    assert "still runs 1 s after its timeout (a blocking call): terminated (SIGTERM" in lines, lines
    assert handle.status().attempts == 1
    assert not any(r[0] == "woke" for r in served.records())


@pytest.mark.slow
def test_a_task_blocked_past_its_cancel_is_recorded_cancelled_and_its_process_replaced(tmp_path, app_module):
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--processes", "2", "--kill-grace", "1") as served:
        first = _started(served)
        handle = module.block.defer(1)
        ((_, _, pid, _),) = served.wait_for_records(1, 20)
        asked = time.monotonic()
        assert handle.cancel() is True
        with pytest.raises(TaskCancelled):
            handle.result(timeout=20)
        cancelled_after = time.monotonic() - asked
        fresh = _replacement_runs_a_job(served, module, first)
        assert not _alive(int(pid))
    lines = "\n".join(served.lines)
    print(f"\ncancel recorded {cancelled_after:.2f} s after it was asked")
    assert fresh not in first
    # the cancel poll (within 1 s) and --kill-grace 1, with room for a loaded machine
    assert cancelled_after < 6, lines
    assert "still runs 1 s after its cancel (a blocking call): terminated (SIGTERM" in lines, lines
    assert handle.status().state == "cancelled"


def test_with_threads_alone_the_log_says_the_blocked_thread_runs_on(tmp_path, app_module):
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--kill-grace", "1") as served:
        served.wait_for_line("worker starting")
        handle = module.hang.defer(1)
        with pytest.raises(TaskFailed, match="TimeoutError"):
            handle.result(timeout=20)
        served.wait_for_line("still runs 1 s after its timeout (a blocking call): a thread cannot be stopped")
        assert served.proc.poll() is None  # the worker goes on
    lines = "\n".join(served.lines)
    assert "stopped in its thread" not in lines, lines
    assert "its thread is set aside and still running" in lines, lines
