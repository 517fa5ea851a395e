"""Batch tasks whose function blocks past its time limit, under `pyqueue-sql worker mod:app` as a
user runs them: every job of the stuck batch is held back in this worker until the stuck thread
ends (never two calls on one item at once), and a linger longer than the lease still runs its batch
(the lingering batch's leases are extended meanwhile)."""

from __future__ import annotations

import importlib
import sys
import time
import uuid

import pytest

from pyqueue_sql.errors import TaskFailed

from .test_worker_cli_app import serving, write_module

MODULE = """
    import os, time
    from dataclasses import dataclass
    from pyqueue_sql import App, RetryPolicy

    app = App({dsn!r})

    def record(line):
        with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
            f.write(line + "\\n")

    @dataclass
    class Item:
        n: int

    @app.task(queue={stuck!r}, batch=3, timeout=0.5, retry=RetryPolicy(base=0.1, jitter=0))
    def stuck(items: list[Item]) -> None:
        for item in items:
            record(f"start {{item.n}} {{time.time()}}")
        try:
            time.sleep(2.5)  # a blocking call: the time limit lands when it returns
        finally:
            for item in items:
                record(f"end {{item.n}} {{time.time()}}")

    @app.task(queue={lingering!r}, batch=5, batch_linger=2.5)
    def lingering(items: list[Item]) -> None:
        for item in items:
            record(f"ran {{item.n}} {{time.time()}}")
"""


@pytest.fixture
def app_module(tmp_path, dsn):
    tag = uuid.uuid4().hex[:8]
    name = write_module(tmp_path, MODULE.format(dsn=dsn, stuck=f"stuckb.{tag}", lingering=f"linger.{tag}"))
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    module.app.create_queues(max_attempts=2, result_retention=3600)
    yield name, module
    db = module.app.database()
    for q in module.app.queues():
        db.queue(q).drop()
    module.app.close()


def overlapping_calls(records: list[list[str]]) -> int:
    """Calls on an item that started while an earlier call on the same item had not ended."""
    running: dict[str, int] = {}
    overlaps = 0
    for what, n, _at in sorted(records, key=lambda r: (float(r[2]), r[0] == "start")):
        if what == "start":
            overlaps += running.get(n, 0) > 0
            running[n] = running.get(n, 0) + 1
        elif what == "end":
            running[n] -= 1
    return overlaps


@pytest.mark.slow
def test_a_stuck_batch_never_runs_again_on_its_items_beside_its_stuck_call(tmp_path, app_module):
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--concurrency", "2", "--max-stuck", "6") as served:
        served.wait_for_line("worker starting")
        handles = module.app.defer_many(module.stuck.call(n) for n in range(3))
        for handle in handles:  # 2 attempts each, each past its time limit of 0.5 s
            with pytest.raises(TaskFailed, match="TimeoutError"):
                handle.result(timeout=40)
        records = served.wait_for_records(12, 10)  # 2 calls on each of 3 items, each its start and end
    lines = "\n".join(served.lines)
    starts = [r for r in records if r[0] == "start"]
    print(f"\n{len(starts)} calls on 3 items, {overlapping_calls(records)} overlapping")
    assert overlapping_calls(records) == 0, records
    assert sorted(r[1] for r in starts) == ["0", "0", "1", "1", "2", "2"], records
    assert "and 2 more jobs of its batch" in lines, lines
    assert "still runs in a stuck thread of this worker" in lines, lines


@pytest.mark.slow
def test_a_batch_lingering_longer_than_the_lease_runs_once_with_its_leases_held(tmp_path, app_module):
    name, module = app_module
    with serving(tmp_path, f"{name}:app", "--lease", "1") as served:
        served.wait_for_line("worker starting")
        started = time.monotonic()
        handles = module.app.defer_many(module.lingering.call(n) for n in range(2))
        for handle in handles:
            handle.result(timeout=20)
        took = time.monotonic() - started
    ran = sorted(r[1] for r in served.records() if r[0] == "ran")
    print(f"\nlinger 2.5 s, lease 1 s: ran {ran} in {took:.1f} s")
    assert ran == ["0", "1"], "\n".join(served.lines)  # once each, in one batch
    assert took < 15, took
    assert "handed back unstarted" not in "\n".join(served.lines)
