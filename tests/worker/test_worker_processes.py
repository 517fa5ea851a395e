"""`pyqueue-sql worker mod:app --processes N`: N worker processes under one command, as a user
runs it: they share the work, one that dies is started again, SIGTERM stops them all, and
`pyqueue-sql workers` shows them as one worker."""

from __future__ import annotations

import os
import signal
import time

import pytest

import pyqueue_sql

from .test_worker_cli_app import app_queue, run_cli, serving, write_module  # noqa: F401  (a fixture)

MODULE = """
    import os, time
    from pyqueue_sql import App

    app = App({dsn!r})

    @app.task(queue={queue!r})
    def work(n: int) -> None:
        time.sleep(0.05)
        with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
            f.write(f"{{os.getpid()}} {{n}}\\n")
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_processes_share_the_work_restart_and_stop_as_one(tmp_path, dsn, app_queue):  # noqa: F811
    module = write_module(tmp_path, MODULE.format(dsn=dsn, queue=app_queue))
    db = pyqueue_sql.connect(dsn)
    try:
        q = db.queue(app_queue)
        with serving(tmp_path, f"{module}:app", "--processes", "2", "--concurrency", "2") as served:
            served.wait_for_line("worker processes starting")
            deadline = time.monotonic() + 30
            while sum("worker registered as" in line for line in served.lines) < 2:
                assert time.monotonic() < deadline and served.proc.poll() is None, served.lines
                time.sleep(0.05)
            q.push_many([(f"a{i}", "work", {"n": i}) for i in range(40)])
            first = served.wait_for_records(40, 60)
            pids = {int(r[0]) for r in first}
            assert len(pids) == 2, first  # both processes took work

            listed = run_cli(tmp_path, "workers", PYQUEUE_DSN=dsn)
            rows = [line for line in listed.stdout.splitlines() if app_queue in line]
            assert len(rows) == 1, listed.stdout  # one worker, its two processes' pids listed
            assert all(str(pid) in rows[0] for pid in pids), rows

            victim = sorted(pids)[0]
            os.kill(victim, signal.SIGKILL)
            served.wait_for_line("exited with status -9; starting it again")
            deadline = time.monotonic() + 30
            while sum("worker registered as" in line for line in served.lines) < 3:
                assert time.monotonic() < deadline, served.lines
                time.sleep(0.05)
            q.push_many([(f"b{i}", "work", {"n": i}) for i in range(40)])
            after = served.wait_for_records(80, 60)[40:]
            new_pids = {int(r[0]) for r in after}
            assert victim not in new_pids and len(new_pids) == 2, after

            children = pids | new_pids
            served.proc.send_signal(signal.SIGTERM)
            assert served.proc.wait(timeout=60) == 0, served.lines
        time.sleep(0.5)
        assert not [pid for pid in children if _alive(pid)]
        assert any("worker processes stopped" in line for line in served.lines)
        assert sum("worker deregistered" in line for line in served.lines) == 2
    finally:
        db.close()


def test_processes_refuse_a_metrics_port_in_one_line(tmp_path, dsn, app_queue):  # noqa: F811
    module = write_module(tmp_path, MODULE.format(dsn=dsn, queue=app_queue))
    proc = run_cli(tmp_path, "worker", f"{module}:app", "--processes", "2", "--metrics-port", "0")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_processes_that_cannot_reach_the_database_give_up_in_one_line(tmp_path):
    module = write_module(tmp_path, MODULE.format(dsn="postgresql://nobody@127.0.0.1:1/x", queue="q"))
    started = time.monotonic()
    proc = run_cli(tmp_path, "worker", f"{module}:app", "--processes", "2", "--start-timeout", "1.5")
    assert proc.returncode == 1 and time.monotonic() - started < 1.5 + 8, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        line for line in proc.stderr.strip().splitlines() if "cannot reach the database" in line
    ], proc.stderr


def test_the_workers_table_shows_the_processes_of_one_worker_as_one_row():
    import datetime as dt

    from pyqueue_sql.cli.workers import format_workers_table
    from pyqueue_sql.client import WorkerInfo

    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def info(worker_id, name, pid, age):
        return WorkerInfo(worker_id, name, "h", pid, ["q"], now, now, age, f"{name}#{worker_id}")

    table = format_workers_table(
        [info(1, "h:10", 11, 2.0), info(2, "h:20", 21, 1.0), info(3, "h:10", 12, 90.0)]
    )
    header, _, *rows = table.splitlines()
    assert len(rows) == 2
    assert rows[0].split()[:4] == ["1,3", "h:10", "h", "11,12"] and rows[0].endswith("1 of 2 stale")
    assert rows[1].split()[:4] == ["2", "h:20", "h", "21"] and rows[1].endswith("ok")


def test_max_jobs_ends_the_process_after_that_many_jobs(tmp_path, dsn, app_queue):  # noqa: F811
    """--max-jobs 3: the worker takes three jobs, finishes them and exits 0; the others wait."""
    module = write_module(tmp_path, MODULE.format(dsn=dsn, queue=app_queue))
    db = pyqueue_sql.connect(dsn)
    try:
        q = db.queue(app_queue)
        q.push_many([(f"m{i}", "work", {"n": i}) for i in range(5)])
        with serving(tmp_path, f"{module}:app", "--max-jobs", "3", "--concurrency", "2") as served:
            code = served.proc.wait(timeout=30)
        assert code == 0, served.lines
        assert len(served.records()) == 3, served.lines
        assert q.stats().ready == 2
        assert any("max_jobs 3 reached" in line for line in served.lines), served.lines
    finally:
        db.close()


@pytest.mark.slow
def test_max_jobs_with_processes_starts_a_fresh_process_after_each_n_jobs(tmp_path, dsn, app_queue):  # noqa: F811
    """--processes 2 --max-jobs 4, as Celery's max_tasks_per_child: every job runs, no process runs
    more than 4, and the supervisor starts a fresh process in place of each that ended."""
    module = write_module(tmp_path, MODULE.format(dsn=dsn, queue=app_queue))
    db = pyqueue_sql.connect(dsn)
    try:
        q = db.queue(app_queue)
        q.push_many([(f"p{i}", "work", {"n": i}) for i in range(20)])
        args = ("--processes", "2", "--max-jobs", "4", "--concurrency", "2")
        with serving(tmp_path, f"{module}:app", *args) as served:
            records = served.wait_for_records(20, 90)
            served.proc.send_signal(signal.SIGTERM)
            code = served.proc.wait(timeout=30)
        per_process: dict[str, int] = {}
        for pid, _ in records:
            per_process[pid] = per_process.get(pid, 0) + 1
        assert sorted({n for _, n in records}, key=int) == [str(i) for i in range(20)], records
        assert max(per_process.values()) <= 4 and len(per_process) >= 5, per_process
        assert code == 0, "\n".join(served.lines)
        assert any("ended after its --max-jobs" in line for line in served.lines), served.lines
    finally:
        db.close()


def test_a_stop_that_comes_while_a_process_is_being_started_reaches_that_process(monkeypatch, tmp_path):
    """The supervisor's SIGTERM handler can run while it starts a process (--max-jobs starts one
    in place of each that ended), before the process is in its list: that process is signalled
    all the same, and no process is started after the stop."""
    import logging
    import subprocess
    import sys

    from pyqueue_sql import cli
    from pyqueue_sql.cli import workers

    args = cli.build_parser().parse_args(["worker", "mod:app", "--processes", "1"])
    procs = workers._Processes(args, "postgresql://unused", logging.getLogger("test.processes"))
    procs.argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    real = subprocess.Popen

    def popen(*a, **k):
        proc = real(*a, **k)
        procs._on_signal(signal.SIGTERM, None)  # the handler, before _start stores the process
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    procs._start(0)
    assert procs.procs[0].wait(timeout=10) == -signal.SIGTERM
    procs.procs[0] = real([sys.executable, "-c", "pass"])
    procs.procs[0].wait()
    procs.restart_at[0] = 0.0  # due: it ended with --max-jobs
    procs._watch()
    assert procs.restart_at[0] == 0.0 and procs.procs[0].args[-1] == "pass"  # not started again
