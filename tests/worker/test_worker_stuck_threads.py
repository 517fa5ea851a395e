"""Plain (def) tasks with a timeout under `pyqueue-sql worker mod:app`, as a user runs them: the
connection a task opens through its App is reused from job to job (not one per job), a job's retry
never runs beside its earlier attempt still stuck in a blocking call, and stuck threads are
bounded: past --max-stuck the worker stops and exits 1 for its supervisor to start a fresh one.
Sessions are counted where an operator counts them (pg_stat_activity, PROCESSLIST)."""

from __future__ import annotations

import uuid

import pytest

from pyqueue_sql.errors import TaskFailed

from .test_worker_cli_app import serving, write_module

MODULE = """
    import os, time
    from pyqueue_sql import App, RetryPolicy

    app = App({dsn!r})

    def record(line):
        with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
            f.write(line + "\\n")

    def session():
        connection = app.database().connection  # the App's connection of this thread
        info = getattr(connection, "info", None)
        return info.backend_pid if info is not None else connection.thread_id()

    @app.task(queue={queue!r}, timeout=5)
    def quick(n: int) -> None:
        record(f"session {{session()}}")

    @app.task(queue={queue!r}, timeout=1, retry=RetryPolicy(give_up_on=(TimeoutError,)))
    def hang(n: int) -> None:
        record(f"hanging {{n}}")
        session()
        time.sleep(8)  # a blocking call: the time limit lands when it returns

    @app.task(queue={queue!r}, timeout=0.5, retry=RetryPolicy(base=0.1, jitter=0))
    def slow(n: int) -> None:
        record(f"start {{n}} {{time.time()}}")
        try:
            time.sleep(2)
        finally:
            record(f"end {{n}} {{time.time()}}")

    @app.task(queue={queue!r})
    def nap(n: int) -> None:
        started = time.time()
        time.sleep(1)
        record(f"nap {{started}} {{time.time()}}")

    if os.environ.get("PYQUEUE_TEST_ASYNC"):  # one async def task: the App runs on AsyncWorker

        @app.task(queue={queue!r})
        async def ping() -> None:
            pass
"""


@pytest.fixture
def app_module(tmp_path, dsn):
    queue = f"stuck.{uuid.uuid4().hex[:8]}"
    name = write_module(tmp_path, MODULE.format(dsn=dsn, queue=queue))
    import importlib
    import sys

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


def sessions(raw, dialect: str) -> int:
    """The sessions open on the test's database, as an operator counts them."""
    if dialect == "postgresql":
        return raw("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")[0][0]
    return raw("SELECT count(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE()")[0][0]


RUNTIMES = {"threads": {}, "asyncio": {"PYQUEUE_TEST_ASYNC": "1"}}


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_a_timed_task_reuses_its_threads_connection_from_job_to_job(
    tmp_path, app_module, raw, dialect, runtime
):
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--concurrency", "4", **RUNTIMES[runtime]) as served:
        served.wait_for_line(f"runtime={runtime}")
        handles = [module.quick.defer(i) for i in range(60)]
        for handle in handles:
            handle.result(timeout=30)
        records = served.wait_for_records(60, 30)
        open_now = sessions(raw, dialect)
    ids = {r[1] for r in records}
    print(f"\n60 timed jobs, 4 handlers: {len(ids)} App sessions, {open_now} open on the database")
    # one App connection per runner thread (4 at most), not one per job
    assert len(ids) <= 4, ids
    # the test's own (2) + the App's (4) + the worker's (dispatcher, heartbeat, completer, watch,
    # a handler's failure) with room to spare: 60 jobs never make 60
    assert open_now <= 16, open_now


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_stuck_threads_are_bounded_and_the_worker_exits_for_a_fresh_one(
    tmp_path, app_module, raw, dialect, runtime
):
    name, module = app_module
    baseline = sessions(raw, dialect)
    with serving(
        tmp_path,
        f"{name}:app",
        "--concurrency",
        "2",
        "--max-stuck",
        "2",
        "--shutdown-timeout",
        "2",
        **RUNTIMES[runtime],
    ) as served:
        served.wait_for_line(f"runtime={runtime}")
        handles = [module.hang.defer(i) for i in range(6)]
        code = served.proc.wait(timeout=20)  # 3 stuck (more than 2) within about 3 s
        counts = sessions(raw, dialect)
    lines = "\n".join(served.lines)
    assert code == 1, lines
    assert "more than max_stuck 2" in lines, lines
    hung = [r for r in served.records() if r[0] == "hanging"]
    assert len(hung) >= 3, lines
    set_aside = sum("its thread is set aside" in line for line in served.lines)
    assert set_aside in (3, 4), lines  # one more than --max-stuck (two at once at most), then it stopped
    for handle in handles[: len(hung)]:
        if handle.status().state == "failed":
            with pytest.raises(TaskFailed, match="TimeoutError"):
                handle.result(timeout=1)
    assert counts <= baseline, (baseline, counts)  # the process's sessions are gone with it


@pytest.mark.slow
def test_a_retry_never_runs_beside_its_earlier_attempt_stuck_in_a_blocking_call(tmp_path, app_module):
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--concurrency", "4") as served:
        served.wait_for_line("worker starting")
        handle = module.slow.defer(1)
        with pytest.raises(TaskFailed, match="TimeoutError"):
            handle.result(timeout=40)  # 3 attempts, each past its timeout of 0.5 s
        served.wait_for_records(6, 10)
    runs: dict[str, list[float]] = {}
    order = []
    for what, _n, at in served.records():
        order.append(what)
        runs.setdefault(what, []).append(float(at))
    assert len(runs["start"]) == 3 and len(runs["end"]) == 3, served.records()
    # start, end, start, end...: an attempt starts only after the one before ended
    assert order == ["start", "end"] * 3, order
    assert "still runs in a stuck thread of this worker" in "\n".join(served.lines)


def test_def_tasks_of_an_app_with_an_async_task_run_as_many_at_once_as_its_concurrency(tmp_path, app_module):
    """An App with one async def task runs on AsyncWorker: its def tasks still run --concurrency at
    once (asyncio's default executor ran at most min(32, CPUs + 4), 6 on 2 cores)."""
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--concurrency", "20", **RUNTIMES["asyncio"]) as served:
        served.wait_for_line("runtime=asyncio")
        module.app.defer_many([module.nap.call(i) for i in range(20)])
        naps = [(float(a), float(b)) for _, a, b in served.wait_for_records(20, 30)]
    # the most naps running at one time: every one started before the first one ended
    most = max(sum(a <= t < b for a, b in naps) for t, _ in naps)
    print(f"\n20 def tasks of 1 s, --concurrency 20 on AsyncWorker: {most} at once")
    assert most == 20, sorted(naps)
