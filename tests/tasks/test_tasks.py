"""Tasks as typed functions (pyqueue_sql.App, @app.task, Task.defer), on both dialects, on the real
routines: the payload, the refusals at defer, unique keys, the caller's transaction, a message
pushed from SQL, unknown kinds, and the worker (run_pending, `pyqueue-sql worker module:app`)."""

from __future__ import annotations

import asyncio
import datetime as dt
import decimal
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import App, InvalidPayloadError, RetryPolicy

from ..helpers import queue_name
from . import sample_app

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=queue_name())
    yield a
    a.close()


def test_payload_is_the_arguments_by_name_and_a_duplicate_key_is_not_enqueued(app, db):
    @app.task
    def send(to: str, lang: str = "en") -> None: ...

    app.create_queues()
    handle = send.configure(key="user-1").defer("a@example.com", lang="fr")
    assert handle.enqueued and (handle.queue, handle.key, handle.kind) == (
        app.default_queue,
        "user-1",
        "send",
    )
    assert db.queue(app.default_queue).message("user-1", "send").payload == {
        "to": "a@example.com",
        "lang": "fr",
    }
    again = send.configure(key="user-1").defer("b@example.com")
    assert again.enqueued is False
    fresh = send.defer(to="c@example.com")
    assert fresh.enqueued and len(fresh.key) == 36
    # keys the app makes are time-ordered: a later one sorts after
    assert send.defer("d@example.com").key > fresh.key


@pytest.mark.parametrize(
    "value, named",
    [
        ({1, 2}, "a set without its annotation"),
        (float("nan"), "NaN"),
        (object(), "an object"),
        ({1: "a"}, "a dict with int keys"),
        ((1, 2), "a tuple without its annotation"),
        (dt.datetime(2026, 1, 1), "a datetime without its annotation"),
    ],
)
def test_an_argument_json_cannot_carry_is_refused_at_defer_naming_it(app, db, value, named):
    @app.task
    def store(label: str, blob) -> None: ...  # blob: no annotation

    app.create_queues()
    with pytest.raises(InvalidPayloadError, match="argument 'blob'"):
        store.defer("x", blob=value)
    assert db.queue(app.default_queue).stats().ready == 0, named


def test_typed_arguments_go_both_ways_by_annotation(dsn, db):
    q = queue_name()
    os.environ["PYQUEUE_TEST_QUEUE"] = q
    try:
        app = App(dsn, queue=q)

        seen = []

        @app.task
        def typed(
            when: dt.datetime,
            ref: uuid.UUID,
            amount: decimal.Decimal,
            where: sample_app.Address,
            tags: set[str],
            span: dt.timedelta,
            maybe: dt.date | None = None,
        ) -> None:
            seen.append((when, ref, amount, where, tags, span, maybe))

        app.create_queues()
        args = (
            dt.datetime(2026, 11, 26, 12, 30, tzinfo=dt.timezone.utc),
            uuid.UUID("12345678-1234-5678-1234-567812345678"),
            decimal.Decimal("10.10"),
            sample_app.Address("Lyon", "69001"),
            {"b", "a"},
            dt.timedelta(seconds=90.5),
            dt.date(2026, 1, 2),
        )
        typed.defer(*args)
        payload = db.queue(q).messages()[0]
        report = app.run_pending()
        assert report.succeeded == 1, report.jobs
        assert seen == [args]
        assert [type(v) for v in seen[0]] == [type(v) for v in args]
        app.close()
    finally:
        del os.environ["PYQUEUE_TEST_QUEUE"]
    assert payload is not None


try:
    import pydantic
except ImportError:  # optional: the test below is skipped
    pydantic = None
else:

    class PydanticUser(pydantic.BaseModel):
        name: str
        born: dt.date


@pytest.mark.skipif(pydantic is None, reason="pydantic is not installed")
def test_pydantic_models_go_both_ways_when_installed(app):
    User = PydanticUser
    seen = []

    @app.task
    def welcome(user: PydanticUser) -> None:
        seen.append(user)

    app.create_queues()
    welcome.defer(User(name="Ada", born=dt.date(1815, 12, 10)))
    assert app.run_pending().succeeded == 1
    assert seen == [User(name="Ada", born=dt.date(1815, 12, 10))]


def test_a_task_pushed_from_sql_with_the_same_json_runs_the_same(app, db, raw):
    seen = []

    @app.task
    def greet(to: str, lang: str = "en") -> None:
        seen.append((to, lang))

    app.create_queues()
    greet.defer("py@example.com", lang="fr")
    payload = json.dumps({"to": "sql@example.com", "lang": "fr"})
    if db.dialect.name == "postgresql":
        raw("SELECT queue_push(%s, %s, %s, %s::jsonb)", (app.default_queue, "from-sql", "greet", payload))
    else:
        raw("CALL queue_push(%s, %s, %s, %s, NULL, NULL)", (app.default_queue, "from-sql", "greet", payload))
    db.connection.commit()
    report = app.run_pending()
    assert report.succeeded == 2 and sorted(seen) == [("py@example.com", "fr"), ("sql@example.com", "fr")]


def test_defer_in_the_callers_transaction_commits_or_rolls_back_with_it(app, dsn, db):
    @app.task
    def audit(what: str) -> None: ...

    app.create_queues()
    if db.dialect.name == "postgresql":
        import psycopg

        conn = psycopg.connect(dsn)
    else:
        import pymysql

        from pyqueue_sql.dialects import mysql_connect_args

        conn = pymysql.connect(**{**mysql_connect_args(dsn), "autocommit": False})
    try:
        wrapped = pyqueue_sql.Database.wrap(conn)
        audit.using(wrapped).configure(key="rolled-back").defer("x")
        conn.rollback()
        audit.using(wrapped).configure(key="committed").defer("y")
        conn.commit()
    finally:
        conn.close()
    keys = sorted(m.key for m in app.database().queue(app.default_queue).messages())
    assert keys == ["committed"]


def test_a_message_of_an_unknown_kind_is_failed_with_a_clear_error_never_dropped(app, db):
    @app.task
    def known() -> None: ...

    app.create_queues(max_attempts=1)
    db.queue(app.default_queue).push("k", "renamed_task", {})
    known.defer()
    report = app.run_pending()
    assert report.succeeded == 1
    [failure] = [j for j in report.jobs if j.kind == "renamed_task"]
    assert failure.outcome == "dropped"
    assert (
        "UnknownTaskError" in failure.error and "'renamed_task'" in failure.error and "known" in failure.error
    )


def test_a_payload_that_does_not_fit_the_signature_fails_naming_the_argument(app, db):
    @app.task
    def greet(to: str) -> None: ...

    app.create_queues(max_attempts=1)
    db.queue(app.default_queue).push("a", "greet", {"too": "x"})
    db.queue(app.default_queue).push("b", "greet", ["x"])
    report = app.run_pending()
    errors = {j.key: j.error for j in report.jobs}
    assert "unknown argument 'too'" in errors["a"]
    assert "must be a JSON object" in errors["b"]


def test_defer_is_checked_against_the_signature_at_runtime_too(app):
    @app.task
    def greet(to: str) -> None: ...

    with pytest.raises(TypeError, match="greet"):
        greet.defer("a", "b")  # type: ignore[call-arg]


def test_async_tasks_defer_async_and_run_pending_async(app):
    seen = []

    @app.task
    async def ping(n: int) -> None:
        await asyncio.sleep(0)
        seen.append(n)

    app.create_queues()

    async def main():
        for n in range(3):
            await ping.defer_async(n)
        report = await app.run_pending_async()
        return report, await app.database_async()

    report, adb = asyncio.run(main())
    assert report.succeeded == 3 and sorted(seen) == [0, 1, 2]
    # the app's connection of that event loop was closed as the loop shut down (left open, its
    # finalizer would fail later on the closed loop)
    assert adb.connection.closed


def _push_from_sql(db, raw, queue, key, kind, payload: dict) -> None:
    """queue_push as psql or mysql would call it, with the JSON text."""
    text = json.dumps(payload)
    if db.dialect.name == "postgresql":
        raw("SELECT queue_push(%s, %s, %s, %s::jsonb)", (queue, key, kind, text))
    else:
        raw("CALL queue_push(%s, %s, %s, %s, NULL, NULL)", (queue, key, kind, text))
    db.connection.commit()


def test_the_cli_worker_serves_an_apps_tasks(dsn, db, raw, tmp_path):
    q = queue_name()
    db.queue(q).create()
    env = {
        **os.environ,
        "PYQUEUE_TEST_RECORD": str(tmp_path / "record"),
        "PYQUEUE_TEST_QUEUE": q,
        "PYTHONPATH": ROOT,
    }
    os.environ["PYQUEUE_TEST_QUEUE"] = q
    try:
        import importlib

        app_module = importlib.reload(sample_app)
    finally:
        del os.environ["PYQUEUE_TEST_QUEUE"]
    app_module.greet.using(db).defer("py@example.com", lang="fr")
    app_module.typed.using(db).defer(
        dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        uuid.UUID(int=7),
        decimal.Decimal("1.5"),
        app_module.Address("Oslo", "0150"),
        {"x"},
    )
    _push_from_sql(db, raw, q, "from-sql", "greet", {"to": "sql@example.com"})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pyqueue_sql.cli",
            "worker",
            "tests.tasks.sample_app:app",
            "--dsn",
            dsn,
            "--no-status",
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        record = tmp_path / "record"
        while time.monotonic() < deadline:
            lines = record.read_text().splitlines() if record.exists() else []
            if len(lines) >= 3:
                break
            time.sleep(0.1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert sorted(lines) == [
        "greet py@example.com fr",
        "greet sql@example.com en",
        "typed 2026-01-01T00:00:00+00:00 00000000-0000-0000-0000-000000000007 1.5 Oslo x",
    ], err.decode()
    assert proc.returncode == 0, err.decode()


def _run_cli_worker(args, env, record: Path, lines_wanted: int, timeout: float = 30):
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyqueue_sql.cli", "worker", *args, "--no-status"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "PYQUEUE_TEST_RECORD": str(record), **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = record.read_text().splitlines() if record.exists() else []
            if len(lines) >= lines_wanted:
                break
            time.sleep(0.1)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    return proc.returncode, lines, err.decode()


def test_the_cli_worker_serves_an_app_of_async_tasks_on_asyncio(dsn, db, raw, tmp_path):
    q = queue_name()
    db.queue(q).create()
    os.environ["PYQUEUE_TEST_QUEUE"] = q
    try:
        import importlib

        app_module = importlib.reload(sample_app)
    finally:
        del os.environ["PYQUEUE_TEST_QUEUE"]
    app_module.greet_async.using(db).defer("py@example.com")
    _push_from_sql(db, raw, q, "from-sql", "greet_async", {"to": "sql@example.com"})
    code, lines, err = _run_cli_worker(
        ["tests.tasks.sample_app:async_app", "--dsn", dsn, "--log-format", "json"],
        {"PYQUEUE_TEST_QUEUE": q},
        tmp_path / "record",
        2,
    )
    assert sorted(lines) == ["greet_async py@example.com", "greet_async sql@example.com"], err
    assert '"runtime": "asyncio"' in err
    assert code == 0, err


def test_the_cli_worker_runs_a_worker_object_with_several_handlers(dsn, db, tmp_path):
    q = queue_name()
    queue = db.queue(q).create()
    queue.push("1", "a", {})
    queue.push("2", "b", {})
    code, lines, err = _run_cli_worker(
        ["tests.tasks.sample_app:worker"],
        {"PYQUEUE_TEST_QUEUE": q, "PYQUEUE_TEST_WORKER_DSN": dsn},
        tmp_path / "record",
        2,
    )
    assert sorted(lines) == ["a 1", "b 2"], err
    assert code == 0, err


def test_the_cli_timeout_fails_a_plain_handler_past_it(dsn, db, tmp_path):
    q = queue_name()
    queue = db.queue(q).create()
    queue.push("slow", "k", {"sleep": 30})
    queue.push("fast", "k", {"sleep": 0})
    record = tmp_path / "record"
    code, lines, err = _run_cli_worker(
        [
            "tests.worker.worker_handlers:sleepy",
            "--queue",
            q,
            "--dsn",
            dsn,
            "--timeout",
            "1",
            "--retry-base",
            "600",
            "--retry-max",
            "600",
        ],
        {},
        record,
        3,
    )
    assert "done fast 1" in lines, err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        info = queue.message("slow", "k")
        if info.last_error:
            break
        time.sleep(0.1)
    assert info.attempts == 1 and info.last_error.startswith("TimeoutError"), info
    assert "did not finish within its timeout of 1 s" in err


def test_the_cli_worker_says_in_one_line_when_the_module_raises_at_import(dsn, tmp_path):
    (tmp_path / "broken_tasks.py").write_text("raise RuntimeError('no config')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pyqueue_sql.cli", "worker", "broken_tasks:app", "--dsn", dsn],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ROOT},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "RuntimeError: no config" in proc.stderr


def test_app_worker_serves_the_queues_asked_for_with_each_tasks_policy_and_timeout():
    app = App("postgresql://nowhere/x", queue="a")
    policy = RetryPolicy(base=7)

    @app.task(retry=policy, timeout=3)
    def one() -> None: ...

    @app.task(queue="b")
    def two() -> None: ...

    worker = app.worker(queues=["a"], register=False)
    assert sorted(worker.routes) == ["a"]
    route = worker.routes["a"]
    assert route.retry_for("one") is policy and route.timeout_for("one") == 3.0
    assert route.handler_for("something_else") is not None  # failed with UnknownTaskError, not left
    assert route.kinds() is None
    assert sorted(app.worker(register=False).routes) == ["a", "b"]
    with pytest.raises(pyqueue_sql.InvalidArgumentError, match="no task on queue 'c'"):
        app.worker(queues=["c"])


def test_running_job_makes_a_job_the_current_job_of_the_code_inside(app):
    jobs = []

    @app.task
    def outer() -> None:
        jobs.append(pyqueue_sql.current_job())

    app.create_queues()
    outer.defer()
    assert app.run_pending().succeeded == 1
    with pytest.raises(pyqueue_sql.QueueError, match="current_job"):
        pyqueue_sql.current_job()
    with pyqueue_sql.running_job(jobs[0]) as job:  # as a handler running code on a job's behalf
        assert pyqueue_sql.current_job() is job is jobs[0]
    with pytest.raises(pyqueue_sql.QueueError, match="current_job"):
        pyqueue_sql.current_job()


def test_keys_made_in_one_process_sort_in_the_order_they_were_made():
    """Many keys inside one millisecond, and after the clock steps back, still sort in the order
    they were made (a counter after the milliseconds, not random bits there), and stay UUIDv7."""
    import uuid

    from pyqueue_sql.tasks import keys as tasks

    keys = [tasks.new_key() for _ in range(20_000)]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert {uuid.UUID(k).version for k in keys} == {7}
    before = tasks._key_ms
    tasks._key_ms += 5_000  # as if the clock had stepped back five seconds
    try:
        later = [tasks.new_key() for _ in range(5_000)]  # more than a counter's range: borrows a millisecond
    finally:
        tasks._key_ms = max(tasks._key_ms, before)
    assert later == sorted(later) and later[0] > keys[-1]
