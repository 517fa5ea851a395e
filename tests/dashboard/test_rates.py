"""Rate limits on the dashboard, read with raw HTTP on both dialects: the queue page shows each
rate (the whole queue's and each kind's: used in the window / n per window) to an account with
only the monitor capability, offers no control to change one, and /metrics has a gauge per rate
for n, the window, the units used and the seconds to the next free unit."""

from __future__ import annotations

import datetime as dt
import html
import re
import urllib.parse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..security.test_privileges import Accounts
from .conftest import http

pytestmark = pytest.mark.slow  # a dashboard server per test


def _rates_cell(body: str) -> str:
    found = re.search(r'<td id="rates">(.*?)</td>', body, re.DOTALL)
    assert found, body[:2000]
    return html.unescape(re.sub(r"<[^>]+>", " ", found.group(1)))


def test_a_monitor_sees_the_rates_of_a_queue_and_no_control(serve, dsn, queue):
    queue.set_rate("mail", 2, 60)
    queue.set_rate(None, 50, dt.timedelta(hours=1))
    for key in "abc":
        queue.push(key, "mail", {})
    assert len(queue.reserve(n=3)) == 2
    accounts = Accounts(dsn)
    try:
        watcher = accounts.with_capabilities("ratewatch", "monitor")
        served = serve(accounts.dsn_for(watcher))
        status, body, _ = http(served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name}))
    finally:
        accounts.close()
    assert status == 200, body[:500]
    cell = " ".join(_rates_cell(body).split())
    assert "whole queue: 2/50 per 1h00m" in cell and "mail: 2/2 per 1m00s" in cell, cell
    assert 'id="monitor-only"' in body
    assert "set_rate" not in body and "/actions/rate" not in body


def test_a_queue_without_rates_says_none(serve, dsn, queue):
    served = serve(dsn)
    status, body, _ = http(served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name}))
    assert status == 200 and _rates_cell(body).strip() == "none"


def test_metrics_have_a_gauge_per_rate(serve, dsn, queue):
    queue.set_rate("mail", 2, 60)
    queue.set_rate(None, 5, 10)
    for key in "ab":
        queue.push(key, "mail", {})
    queue.reserve(n=2)
    served = serve(dsn)
    status, text, _ = http(served.url + "/metrics")
    assert status == 200
    got = {
        (s.name, s.labels.get("kind")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("queue") == queue.name and s.name.startswith("pyqueue_queue_rate_")
    }
    assert got[("pyqueue_queue_rate_limit", "mail")] == 2 and got[("pyqueue_queue_rate_limit", "*")] == 5
    assert got[("pyqueue_queue_rate_window_seconds", "mail")] == 60
    assert got[("pyqueue_queue_rate_window_seconds", "*")] == 10
    assert (
        got[("pyqueue_queue_rate_in_window", "mail")] == 2 and got[("pyqueue_queue_rate_in_window", "*")] == 2
    )
    # mail is saturated for about a minute; the whole queue has 3 units never used: free now
    assert 50 < got[("pyqueue_queue_rate_next_free_seconds", "mail")] <= 60
    assert got[("pyqueue_queue_rate_next_free_seconds", "*")] == 0
