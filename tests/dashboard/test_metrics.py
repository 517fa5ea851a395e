"""Prometheus metrics, parsed with prometheus_client's own text parser: the dashboard's /metrics
against the database, a worker's --metrics-port against what the worker did; and the dashboard's
access token."""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
import urllib.parse

import pytest
from prometheus_client.parser import text_string_to_metric_families

import pyqueue_sql
from pyqueue_sql import RetryPolicy, Worker
from pyqueue_sql.metrics import WorkerMetrics

from .conftest import http

# a worker process or a dashboard server per test: left out of make test-fast
pytestmark = pytest.mark.slow


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(parsed, name: str, **labels) -> float | None:
    return parsed.get((name, tuple(sorted(labels.items()))))


def test_dashboard_metrics_match_the_database(serve, installed_database):
    """On a database of its own: the workers' gauge counts every registered worker by its state,
    and on the test process's shared database earlier tests' workers cross from one state to
    another between the scrape and the count it is compared with."""
    dsn = installed_database("metrics")
    db = pyqueue_sql.connect(dsn)
    try:
        _dashboard_metrics_match_the_database(serve, dsn, db)
    finally:
        db.close()


def _dashboard_metrics_match_the_database(serve, dsn, db):
    dead = db.queue("metrics.dead").create()
    jobs = db.queue("metrics.jobs").create(
        max_attempts=1, dead_letter_queue=dead.name, history_retention=dt.timedelta(days=1)
    )
    for i in range(6):
        jobs.push(f"k{i}", "x", {})
    jobs.push("later", "x", {}, run_at=dt.timedelta(hours=1))
    held = jobs.reserve(n=4)
    for r in held[:2]:
        assert jobs.commit(r)
    assert jobs.fail(held[2], "boom") == "dead_lettered"  # held[3] stays reserved
    db.register_worker("metrics-worker", queues=[jobs.name])
    served = serve(dsn)
    status, text, headers = http(served.url + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    parsed = samples(text)
    stats = {s.queue: s for s in db.stats()}
    for q in (jobs.name, dead.name):
        for state in ("ready", "delayed", "reserved"):
            assert value(parsed, "pyqueue_queue_messages", queue=q, state=state) == getattr(stats[q], state)
    assert value(parsed, "pyqueue_queue_messages", queue=jobs.name, state="ready") == 2
    assert value(parsed, "pyqueue_queue_messages", queue=jobs.name, state="reserved") == 1
    assert value(parsed, "pyqueue_queue_messages", queue=dead.name, state="ready") == 1
    assert value(parsed, "pyqueue_queue_dead_lettered_total", queue=jobs.name) == 1
    assert value(parsed, "pyqueue_queue_oldest_ready_age_seconds", queue=jobs.name) > 0
    assert value(parsed, "pyqueue_queue_history_enabled", queue=jobs.name) == 1
    assert value(parsed, "pyqueue_queue_history_enabled", queue=dead.name) == 0
    assert value(parsed, "pyqueue_queue_processed_total", queue=jobs.name, outcome="committed") == 2
    assert value(parsed, "pyqueue_queue_processed_total", queue=jobs.name, outcome="dead_lettered") == 1
    assert value(parsed, "pyqueue_queue_processed_total", queue=dead.name, outcome="committed") is None
    assert value(parsed, "pyqueue_queue_paused", queue=jobs.name) == 0
    workers = [w for w in db.workers()]
    live = value(parsed, "pyqueue_workers", state="live") + value(parsed, "pyqueue_workers", state="stale")
    assert live == len(workers) == 1
    # a commit later is counted at a later scrape (the counter grows, it is not recounted)
    assert jobs.commit(held[3])
    time.sleep(5.2)  # the throughput is read again at most every 5 s
    parsed = samples(http(served.url + "/metrics")[1])
    assert value(parsed, "pyqueue_queue_processed_total", queue=jobs.name, outcome="committed") == 3


def test_worker_metrics_count_what_the_worker_did(dsn, make_queue):
    dead = make_queue()
    jobs = make_queue(max_attempts=2, dead_letter_queue=dead.name)
    for i in range(6):
        jobs.push(f"ok-{i}", "good", {"sleep": 0.01})
    jobs.push("bad", "bad", {})

    def handle(job):
        if job.kind == "bad":
            raise ValueError("bad input")
        time.sleep(job.payload["sleep"])

    # what a console handler above the worker's logger prints at INFO: no commit (DEBUG) lines
    printed: list[logging.LogRecord] = []
    console = logging.Handler()
    console.emit = printed.append  # type: ignore[method-assign]
    parent = logging.getLogger("pyqueue_sql")
    saved_level = parent.level
    parent.addHandler(console)
    parent.setLevel(logging.INFO)
    worker = Worker(dsn, concurrency=2, register=False, poll_max=0.2)
    worker.add_handler(jobs.name, handle, retry=RetryPolicy(base=0.01, factor=1, max_delay=0.01, jitter=0))
    metrics = WorkerMetrics(worker)
    port = metrics.serve(0)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (worker.run(install_signals=False), done.set()), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (jobs.messages() or len(dead.messages()) < 1):
            time.sleep(0.1)
        assert jobs.messages() == [] and [m.key for m in dead.messages()] == ["bad"]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and worker.status().stats.failed < 2:
            time.sleep(0.05)
        status, text, _ = http(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        parsed = samples(text)
        q = jobs.name
        assert value(parsed, "pyqueue_worker_committed_total", queue=q, kind="good") == 6
        assert value(parsed, "pyqueue_worker_failed_total", queue=q, kind="bad") == 2
        assert value(parsed, "pyqueue_worker_retried_total", queue=q, kind="bad") == 1
        assert value(parsed, "pyqueue_worker_dead_lettered_total", queue=q, kind="bad") == 1
        assert value(parsed, "pyqueue_worker_handled_total", queue=q, kind="good") == 6
        assert value(parsed, "pyqueue_worker_handler_duration_seconds_count", queue=q, kind="good") == 6
        assert value(parsed, "pyqueue_worker_handler_duration_seconds_sum", queue=q, kind="good") >= 0.06
        # every success took over 10 ms: none in the first two buckets
        assert (
            value(parsed, "pyqueue_worker_handler_duration_seconds_bucket", queue=q, kind="good", le="0.005")
            == 0
        )
        assert value(parsed, "pyqueue_worker_in_flight") == 0
        assert value(parsed, "pyqueue_worker_concurrency") == 2
        st = worker.status().stats
        assert (st.succeeded, st.failed) == (6, 2)
    finally:
        worker.stop()
        thread.join(30)
        metrics.close()
        parent.removeHandler(console)
        parent.setLevel(saved_level)
    events = [getattr(r, "event", None) for r in printed]
    assert "commit" not in events  # DEBUG: the tap passed on only what INFO lets through
    assert events.count("fail") == 2  # warnings and errors still reach the console
    assert logging.getLogger("pyqueue_sql.worker").level == logging.NOTSET  # put back by close()


def test_a_worker_metrics_registry_is_its_own(dsn):
    a, b = Worker(dsn, register=False), Worker(dsn, register=False)
    ma, mb = WorkerMetrics(a), WorkerMetrics(b)  # no "Duplicated timeseries" from a shared registry
    try:
        assert ma.registry is not mb.registry
    finally:
        mb.close()
        ma.close()


def test_the_token_is_required_and_the_password_never_shown(serve, dsn, queue):
    served = serve(dsn, token="s3cret-token")
    status, _, headers = http(served.url + "/")
    assert status == 303 and headers["location"].startswith("/login")
    assert http(served.url + "/fragment/overview")[0] == 401
    assert http(served.url + "/metrics")[0] == 401
    assert http(served.url + "/metrics", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert http(served.url + "/metrics", headers={"Authorization": "Bearer s3cret-token"})[0] == 200
    assert http(served.url + "/?token=wrong")[0] == 401
    # ?token= once: a session cookie, and the token is gone from the address
    status, _, headers = http(served.url + "/?token=s3cret-token")
    assert status == 303 and headers["location"] == "/"
    session = re.search(r"pyqueue_dashboard=([^;]+)", headers["set-cookie"]).group(1)
    assert "s3cret-token" not in headers["set-cookie"]
    status, body, _ = http(served.url + "/", headers={"Cookie": f"pyqueue_dashboard={session}"})
    assert status == 200 and queue.name in body
    # the login form (with its CSRF token)
    status, body, headers = http(served.url + "/login")
    csrf = re.search(r"pyqueue_csrf=([^;]+)", headers["set-cookie"]).group(1)
    form = {"token": "s3cret-token", "csrf": csrf, "next": "/workers"}
    status, _, headers = http(served.url + "/login", data=form, headers={"Cookie": f"pyqueue_csrf={csrf}"})
    assert (
        status == 303 and headers["location"] == "/workers" and "pyqueue_dashboard=" in headers["set-cookie"]
    )
    form["token"] = "wrong"
    assert http(served.url + "/login", data=form, headers={"Cookie": f"pyqueue_csrf={csrf}"})[0] == 401
    # an open redirect is not offered
    form.update(token="s3cret-token", next="//evil.example/")
    status, _, headers = http(served.url + "/login", data=form, headers={"Cookie": f"pyqueue_csrf={csrf}"})
    assert headers["location"] == "/"


@pytest.mark.only_dialect("postgresql")
def test_the_dsn_password_is_never_shown(serve, dsn, dialect):
    parts = urllib.parse.urlsplit(dsn)
    with_password = parts._replace(
        netloc=f"{parts.username or 'postgres'}:hunter2-pw@{parts.hostname}:{parts.port or 5432}"
    ).geturl()
    served = serve(with_password)  # trust authentication here: the password is not checked
    status, body, _ = http(served.url + "/")
    assert status == 200
    assert "hunter2-pw" not in body and "***" in body
