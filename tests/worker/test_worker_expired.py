"""Expired jobs are visible: a `pyqueue-sql worker` whose reserve ends a job past its expiry
(configure(expires=), the header pyqueue.expires_at) logs it once, with its kind, key and how late,
and counts it in /metrics as pyqueue_worker_expired_total{queue,kind}; the server tells the
worker's connection (PostgreSQL: a NOTICE; MySQL/MariaDB: a flagged session variable), so a
reserve that ends nothing costs no extra round trip (docs/contract/05_reserve.md)."""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest

from ..helpers import free_port
from .test_worker_cli_app import serving, write_module
from .test_worker_metrics_outcomes import scrape

MODULE = """
    from pyqueue_sql import App

    app = App({dsn!r})

    @app.task(queue={queue!r})
    def offer(n: int) -> None:
        print("ran", n, flush=True)

    @app.task(queue={queue!r})
    def remind(n: int) -> None:
        pass
"""


@pytest.fixture
def app_module(tmp_path, dsn, db):
    queue = f"expired.{uuid.uuid4().hex[:8]}"
    db.queue(queue).create()
    name = write_module(tmp_path, MODULE.format(dsn=dsn, queue=queue))
    yield name, queue
    db.queue(queue).drop()


def past(seconds: float) -> str:
    at = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_worker_logs_and_counts_each_job_it_finds_expired(tmp_path, app_module, db):
    name, queue = app_module
    q = db.queue(queue)
    q.push("late-1", "offer", {"n": 1}, headers={"pyqueue.expires_at": past(120)})  # from SQL, long past
    q.push("late-2", "remind", {"n": 2}, headers={"pyqueue.expires_at": past(0.5)})
    q.push("fresh", "offer", {"n": 3})
    port = free_port()
    with serving(tmp_path, f"{name}:app", "--metrics-port", str(port)) as served:
        served.wait_for_line("worker starting")
        deadline = time.monotonic() + 30
        while q.messages() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert q.messages() == [], served.lines
        served.wait_for_line(f"{queue}/late-2/remind")
        time.sleep(0.3)
        parsed = scrape(port)
        # a short expiry, deferred while the worker runs: it passes before the job is reserved
        q.pause()
        q.push("late-3", "offer", {"n": 4}, headers={"pyqueue.expires_at": past(-0.2)})
        time.sleep(0.5)
        q.resume()
        served.wait_for_line(f"{queue}/late-3/offer")
        time.sleep(0.3)
        again = scrape(port)
    expired = [line for line in served.lines if "expired:" in line]
    assert len(expired) == 3, served.lines  # once each
    [first] = [line for line in expired if "late-1" in line]
    assert f"{queue}/late-1/offer" in first and "ended unrun (cancelled)" in first
    late = float(first.split("ended unrun (cancelled), ")[1].split(" s after")[0])
    assert 120 <= late < 180, first
    assert parsed.get(("pyqueue_worker_expired_total", (("kind", "offer"), ("queue", queue)))) == 1
    assert parsed.get(("pyqueue_worker_expired_total", (("kind", "remind"), ("queue", queue)))) == 1
    assert again.get(("pyqueue_worker_expired_total", (("kind", "offer"), ("queue", queue)))) == 2
    assert parsed.get(("pyqueue_worker_committed_total", (("kind", "offer"), ("queue", queue)))) == 1


@pytest.mark.only_dialect("mysql")
def test_a_reserve_that_ends_nothing_costs_no_extra_statement_on_mysql(db, make_queue):
    """The worker reads @pyqueue_expired only when the OK packet of its reserve flags the tracked
    variable: N reserves without an expiry are N statements (the session's Questions), after the
    connection's first take (the tracking and the first read)."""
    q = make_queue()
    listener, conn = db.dialect.listener, db.connection
    q.push_many([dict(key=f"k{i}", kind="k", payload={}) for i in range(41)])
    assert listener.take_expired(conn) == []  # the first take: starts the tracking

    def questions() -> int:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
            return int(cur.fetchone()[1])

    before = questions()
    for _ in range(20):
        assert len(q.reserve(n=2)) == 2
        assert listener.take_expired(conn) == []
    assert questions() - before == 20 + 1  # the reserves, and the SHOW itself
    q.push("late", "k", {}, headers={"pyqueue.expires_at": past(5)}, priority=9)
    assert q.reserve(n=1)[0].key != "late"
    [e] = listener.take_expired(conn)
    assert (e.queue, e.key, e.kind) == (q.name, "late", "k") and 4 < e.late_s < 60
    assert listener.take_expired(conn) == []  # handed out once
