"""A database restart in the middle of a worker's run, on a PostgreSQL server
this test owns (the shared servers are never restarted)."""

from __future__ import annotations

import threading
import time

import pytest

import pyqueue_sql
from pyqueue_sql import Worker, migrate

from .own_postgres import OwnPostgres
from .test_worker import running, wait_for


@pytest.fixture
def own_postgres():
    try:
        server = OwnPostgres()
        server.start()
        server.wait_ready()
    except Exception as exc:  # no binaries, or no postgres user to run them as
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
        own_postgres.stop("fast")         # kills every connection, mid-run
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
