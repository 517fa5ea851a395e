"""Batch tasks (@app.task(batch=N)) as a user meets them: `pyqueue-sql worker` drains them in
batches on each dialect, and every job of a batch ends on its own: its attempts, its result, its
dead letter, read back with plain SQL."""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pyqueue_sql import App, InvalidArgumentError

ROOT = str(Path(__file__).resolve().parents[2])


def _load_app(q: str, dsn: str):
    os.environ["PYQUEUE_TEST_QUEUE"] = q
    try:
        from . import batch_app

        module = importlib.reload(batch_app)
    finally:
        del os.environ["PYQUEUE_TEST_QUEUE"]
    module.app.dsn = dsn
    return module


def _live(raw, q: str) -> int:
    return raw("SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", (q,))[0][0]


def test_the_cli_worker_runs_batches_and_ends_each_job_on_its_own(dsn, db, raw):
    q = f"b.{uuid.uuid4().hex[:12]}"
    dlq = db.queue(f"{q}.dead").create()
    module = _load_app(q, dsn)
    try:
        module.app.create_queues(max_attempts=2, dead_letter_queue=dlq.name)
        modes = ["ok", "ok", "ok", "retry", "give_up", "fail"]
        handles = module.app.defer_many(module.settle.call(n, modes[n % 6]) for n in range(120))
        module.app.defer_many(module.explode.call(n) for n in range(12))
        proc = subprocess.Popen(
            [sys.executable, "-m", "pyqueue_sql.cli", "worker", "tests.tasks.batch_app:app", "--no-status"],
            cwd=ROOT,
            env={
                **os.environ,
                "PYTHONPATH": ROOT,
                "PYQUEUE_TEST_QUEUE": q,
                "PYQUEUE_DSN": dsn,
                "PYTHONFAULTHANDLER": "1",
            },
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while _live(raw, q) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _live(raw, q) == 0
            results = [h.result(timeout=10) for h, n in zip(handles, range(120)) if modes[n % 6] == "ok"]
        finally:
            proc.terminate()
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack to stderr
                _, err = proc.communicate(timeout=30)
                pytest.fail(f"the worker did not stop within 30 s of SIGTERM; its log:\n{err.decode()}")
        assert proc.returncode == 0, err.decode()[-3000:]
    finally:
        module.app.close()
    # each success keeps its own result; they ran in batches of up to 25 (60 ready at the start)
    assert [r["double"] for r in results] == [2 * n for n in range(120) if modes[n % 6] == "ok"]
    sizes = {r["batch"] for r in results}
    assert max(sizes) == 25 and sizes <= set(range(1, 26)), sizes
    # each failure its own attempts (queue_result's) and dead letter: a GiveUp after 1 delivery, a
    # retry or an error after max_attempts (2), every job of the batch that raised after 2 as well
    ended = raw(
        "SELECT p_kind, p_key, state, attempts, last_error FROM pyqueue_result WHERE queue_name = %s", (q,)
    )
    dead = {k for (k,) in raw("SELECT p_key FROM pyqueue_message WHERE queue_name = %s", (dlq.name,))}
    failed: dict[str, list[tuple[int, str]]] = {}
    keys = {h.key: n for n, h in enumerate(handles)}
    for kind, key, state, attempts, error in ended:
        if state == "succeeded":
            assert kind == "settle" and modes[keys[key] % 6] == "ok" and attempts == 1
            continue
        assert state == "failed" and key in dead, (kind, key, state)
        failed.setdefault("explode" if kind == "explode" else modes[keys[key] % 6], []).append(
            (attempts, error)
        )
    assert {m: len(v) for m, v in failed.items()} == {"retry": 20, "give_up": 20, "fail": 20, "explode": 12}
    assert len(dead) == 72
    assert {a for a, _ in failed["give_up"]} == {1}
    assert all("GiveUp" in e and "is void" in e for _, e in failed["give_up"])
    assert {a for a, _ in failed["retry"]} == {2}
    assert {a for a, _ in failed["fail"]} == {2}
    assert all("ValueError: order" in e for _, e in failed["fail"])
    assert {a for a, _ in failed["explode"]} == {2}
    assert all("RuntimeError: the batch of" in e for _, e in failed["explode"])


def test_a_batch_task_takes_its_items_fields_and_refuses_what_does_not_fit(dsn):
    app = App(dsn, queue="b.unused")
    with pytest.raises(InvalidArgumentError, match="batch's size must be an int >= 1"):
        app.task(batch=0)(lambda items: None)
    with pytest.raises(InvalidArgumentError, match="takes the list of its items as its one argument"):

        @app.task(batch=5)
        def two(a: list[int], b: list[int]) -> None: ...

    module = _load_app("b.unused", dsn)
    assert module.settle.payload(3, mode="fail") == {"n": 3, "mode": "fail"}
    with pytest.raises(TypeError, match="settle"):
        module.settle.call(3, colour="red")


def test_a_batch_task_alone_on_its_queue_fails_a_kind_no_task_has(dsn, db):
    q = f"b.{uuid.uuid4().hex[:12]}"
    app = App(dsn, queue=q)
    seen: list[list[dict]] = []

    @app.task(batch=10)
    def record(items: list[dict]) -> None:
        seen.append(items)

    try:
        app.create_queues()
        record.defer(a=1)
        db.queue(q).push("stray", "nobody", {"a": 2})
        report = app.run_pending()
    finally:
        app.close()
    assert seen == [[{"a": 1}]]
    by_kind = {job.kind: (job.outcome, job.error) for job in report.jobs}
    assert by_kind["record"] == ("succeeded", None)
    assert by_kind["nobody"][1].startswith("UnknownTaskError: no handler has kind 'nobody'")


def test_an_asyncio_worker_refuses_batch_tasks_at_its_start(dsn):
    app = App(dsn, queue=f"b.{uuid.uuid4().hex[:12]}")

    @app.task(batch=10)
    def record(items: list[dict]) -> None: ...

    @app.task
    async def ping() -> None: ...

    worker = app.worker(register=False)
    assert worker.runtime == "asyncio"
    with pytest.raises(InvalidArgumentError, match="batch handlers run on the threaded Worker"):
        asyncio.run(worker.run(install_signals=False))
    app.close()
