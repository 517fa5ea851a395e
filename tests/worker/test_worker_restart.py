"""A database restart in the middle of a worker's run, on a PostgreSQL server
this test owns (the shared servers are never restarted)."""

from __future__ import annotations

import threading
import time

import pytest

import pyqueue_sql
from pyqueue_sql import Worker, migrate

from ..conftest import UNDER_CI
from ..helpers import wait_for
from ..own_postgres import OwnPostgres
from .test_worker import running

pytestmark = pytest.mark.slow


@pytest.fixture
def own_postgres():
    try:
        server = OwnPostgres()
        server.start()
        server.wait_ready()
    except Exception as exc:  # no binaries, or no postgres user to run them as
        if UNDER_CI:
            pytest.fail(f"CI=true and cannot start a test-owned PostgreSQL: {exc}", pytrace=False)
        pytest.skip(f"cannot start a test-owned PostgreSQL: {exc}")
    yield server
    server.destroy()


def test_worker_survives_a_database_restart(own_postgres):
    dsn = own_postgres.dsn()
    migrate.upgrade(dsn)
    admin = pyqueue_sql.connect(dsn)
    admin.queue("restart").create()
    admin.close()
    handled: list[str] = []
    lock = threading.Lock()
    worker = Worker(dsn, concurrency=3, lease=20, poll_fallback=1.0)

    @worker.handler("restart")
    def handle(job):
        time.sleep(0.1)
        with lock:
            handled.append(job.key)

    def push(keys):
        db = pyqueue_sql.connect(dsn)
        try:
            db.queue("restart").push_many([(k, "k", {}) for k in keys])
        finally:
            db.close()

    with running(worker):
        push([f"before-{i}" for i in range(30)])
        wait_for(lambda: len(handled) >= 5, 30, "work to flow")
        own_postgres.stop("fast")  # kills every connection, mid-run
        time.sleep(1.0)
        own_postgres.start()
        own_postgres.wait_ready()
        push([f"after-{i}" for i in range(30)])
        wait_for(lambda: len(set(handled)) == 60, 90, "all 60 messages after the restart")
        db = pyqueue_sql.connect(dsn)
        wait_for(lambda: db.queue("restart").stats().reserved == 0, 30, "the last commits")
        stats = db.queue("restart").stats()
        db.close()
    assert stats.ready == 0 and stats.reserved == 0 and stats.delayed == 0
    assert set(handled) == {f"before-{i}" for i in range(30)} | {f"after-{i}" for i in range(30)}
    assert worker.stats.reconnects >= 1
    # at-least-once: a message whose commit was cut off by the restart may run
    # twice, but every commit that reported success removed exactly one message.
    assert worker.stats.succeeded <= 60


def test_worker_process_survives_a_database_restart(own_postgres, tmp_path):
    """The same from outside: a `pyqueue-sql worker` process, the server restarted under it."""
    from .test_worker import _lines, _spawn_worker

    dsn = own_postgres.dsn()
    migrate.upgrade(dsn)
    db = pyqueue_sql.connect(dsn)
    db.queue("restart").create()
    db.close()
    record = tmp_path / "record"
    proc = _spawn_worker(dsn, "restart", record, "--concurrency", "2", "--poll-fallback", "1")
    try:

        def push(keys):
            conn = pyqueue_sql.connect(dsn)
            try:
                conn.queue("restart").push_many([(k, "k", {"sleep": 0.05}) for k in keys])
            finally:
                conn.close()

        push([f"a{i}" for i in range(10)])
        wait_for(lambda: sum(l.startswith("done") for l in _lines(record)) >= 3, 30, "work to flow")
        own_postgres.stop("fast")
        time.sleep(1.0)
        own_postgres.start()
        own_postgres.wait_ready()
        push([f"b{i}" for i in range(10)])
        expected = {f"a{i}" for i in range(10)} | {f"b{i}" for i in range(10)}
        wait_for(
            lambda: {l.split()[1] for l in _lines(record) if l.startswith("done")} >= expected,
            60,
            "every message after the restart",
        )
        proc.send_signal(__import__("signal").SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert '"event": "reconnect"' in err
    db = pyqueue_sql.connect(dsn)
    s = db.queue("restart").stats()
    db.close()
    assert (s.ready, s.reserved, s.delayed) == (0, 0, 0)
