"""`pyqueue-sql worker mod:app --metrics-port N` as an operator scrapes it: every job that ends
is in /metrics, those given up at once included (GiveUp, the policy's give_up_on, an error outside
its retry_on, a payload that does not match the task), with its duration."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..helpers import free_port
from .test_worker_cli_app import serving, write_module

MODULE = """
    from pyqueue_sql import App, GiveUp, RetryPolicy

    app = App({dsn!r})

    @app.task(queue={queue!r})
    def refuse(n: int) -> None:
        raise GiveUp("not ours")

    @app.task(queue={queue!r}, retry=RetryPolicy(give_up_on=(KeyError,)))
    def missing(n: int) -> None:
        raise KeyError("no such order")

    @app.task(queue={queue!r}, retry=RetryPolicy(retry_on=(ConnectionError,)))
    def broken(n: int) -> None:
        raise ValueError("bad input")

    @app.task(queue={queue!r})
    def typed(n: int) -> None:
        pass
"""


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
def app_module(tmp_path, dsn, db):
    queue = f"metrics.{uuid.uuid4().hex[:8]}"
    name = write_module(tmp_path, MODULE.format(dsn=dsn, queue=queue))
    yield name, queue
    db.queue(queue).drop()


def test_jobs_given_up_at_once_are_counted_in_the_worker_metrics(tmp_path, app_module, db):
    name, queue = app_module
    db.queue(queue).create(max_attempts=5)
    q = db.queue(queue)
    for kind in ("refuse", "missing", "broken"):
        q.push(f"k-{kind}", kind, {"n": 1})
    q.push("k-typed", "typed", {"n": "one"})  # not an int: PayloadMismatchError
    port = free_port()
    with serving(tmp_path, f"{name}:app", "--metrics-port", str(port)) as served:
        served.wait_for_line("worker starting")
        deadline = time.monotonic() + 30
        while q.messages() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert q.messages() == [], served.lines
        time.sleep(0.3)  # the last outcome logged after its call returned
        parsed = scrape(port)
    for kind in ("refuse", "missing", "broken", "typed"):
        labels = (("kind", kind), ("queue", queue))
        assert parsed.get(("pyqueue_worker_handled_total", labels)) == 1, (kind, served.lines)
        assert parsed.get(("pyqueue_worker_failed_total", labels)) == 1, kind
        assert parsed.get(("pyqueue_worker_given_up_total", labels)) == 1, kind
        assert parsed.get(("pyqueue_worker_dropped_total", labels)) == 1, kind  # no dead-letter queue
        assert parsed.get(("pyqueue_worker_retried_total", labels)) is None, kind
        assert parsed.get(("pyqueue_worker_handler_duration_seconds_count", labels)) == 1, kind
    assert parsed.get(("pyqueue_worker_stuck_threads", ())) == 0
