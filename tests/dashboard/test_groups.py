"""FIFO groups on a queue's dashboard page, read with raw HTTP on both dialects: each group (by
group key, as queue_groups returns them) with its head message linked to the message's page, the
head's state, its messages and its messages in flight against its limit; at most 100 groups, saying
so when there are more; group names and keys shown as text; nothing but "no FIFO groups" for a
queue without any; and only the queue's page reads them (the overview does not)."""

from __future__ import annotations

import html
import re
import urllib.parse

import pytest

from pyqueue_sql.client import NewMessage, Queue

from ..security.test_privileges import Accounts
from .conftest import http

pytestmark = pytest.mark.slow  # a dashboard server per test


def _queue_page(served, name: str) -> str:
    status, body, _ = http(served.url + "/queue?" + urllib.parse.urlencode({"name": name}))
    assert status == 200, body[:2000]
    return body


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _group_rows(body: str) -> list[list[str]]:
    """The cells of the groups table, as text, one list per group ([] when there is no table)."""
    table = re.search(r'<table class="groups" id="groups">(.*?)</table>', body, re.DOTALL)
    if table is None:
        return []
    rows = re.findall(r'<tr class="group">(.*?)</tr>', table.group(1), re.DOTALL)
    return [[_text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)] for row in rows]


def _summary(body: str) -> str:
    found = re.search(r'<td id="groups-summary">(.*?)</td>', body, re.DOTALL)
    assert found, body[:2000]
    return _text(found.group(1))


def test_a_monitor_sees_each_group_with_its_head_counts_and_limit(serve, dsn, queue):
    queue.set_group_limit("wide", 2)
    for i in range(3):
        queue.push(f"a-{i}", "job", {}, group="alpha")
        queue.push(f"w-{i}", "job", {}, group="wide")
    queue.push("plain", "job", {})  # no group: not listed
    held = {m.key for m in queue.reserve(n=10)}
    assert held == {"a-0", "w-0", "w-1", "plain"}
    queue.push("b-0", "mail", {}, group="beta")  # a group pushed after the reserve: its head is ready
    accounts = Accounts(dsn)
    try:
        watcher = accounts.with_capabilities("groupwatch", "monitor")
        served = serve(accounts.dsn_for(watcher))
        body = _queue_page(served, queue.name)
        # the head's link leads to the message's page, which the monitor may read
        link = re.search(r'<td class="head"><a class="message-link" href="([^"]+)"', body)
        assert link, body[:2000]
        status, message_page, _ = http(served.url + html.unescape(link.group(1)))
    finally:
        accounts.close()
    assert _group_rows(body) == [
        ["alpha", "a-0 (job)", "reserved", "3", "1 / 1"],
        ["beta", "b-0 (mail)", "ready", "1", "1 / 1"],
        ["wide", "w-0 (job)", "reserved", "3", "2 / 2"],
    ]
    assert _summary(body) == "3 (below)"
    assert 'id="groups-more"' not in body
    assert html.unescape(link.group(1)) == "/message?" + urllib.parse.urlencode(
        {"queue": queue.name, "key": "a-0", "kind": "job"}
    )
    assert status == 200 and "a-0" in message_page
    # monitor only: no control to change a group's limit
    assert 'id="monitor-only"' in body and "group_limit" not in body


def test_at_most_100_groups_are_listed_and_more_are_announced(serve, dsn, queue):
    queue.push_many([NewMessage(f"m-{i:03d}", "job", {}, group=f"g-{i:03d}") for i in range(101)])
    served = serve(dsn)
    body = _queue_page(served, queue.name)
    rows = _group_rows(body)
    assert [r[0] for r in rows] == [f"g-{i:03d}" for i in range(100)]  # by group key, g-100 left out
    assert "first 100 groups by key" in _text(body)
    assert _summary(body) == "more than 100 (the first 100 by key below)"
    # 100 groups exactly: all of them, and no notice
    assert queue.remove("m-100", "job")
    body = _queue_page(served, queue.name)
    assert len(_group_rows(body)) == 100
    assert "first 100 groups by key" not in _text(body) and _summary(body) == "100 (below)"


def test_group_names_and_keys_are_shown_as_text(serve, dsn, queue):
    group = "<script>alert(1)</script>"
    key = '<img src=x onerror="alert(2)">'
    kind = "k&<b>"
    queue.push(key, kind, {}, group=group)
    served = serve(dsn)
    body = _queue_page(served, queue.name)
    assert "<script>alert(1)</script>" not in body
    assert "<img src=x" not in body and "<b>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert _group_rows(body) == [[group, f"{key} ({kind})", "ready", "1", "1 / 1"]]
    link = re.search(r'<td class="head"><a class="message-link" href="([^"]+)"', body)
    assert link and html.unescape(link.group(1)) == "/message?" + urllib.parse.urlencode(
        {"queue": queue.name, "key": key, "kind": kind}
    )


def test_a_queue_without_groups_shows_no_groups_section(serve, dsn, queue):
    queue.push("plain", "job", {})
    served = serve(dsn)
    body = _queue_page(served, queue.name)
    assert _summary(body) == "no FIFO groups"
    assert _group_rows(body) == [] and 'id="fifo-groups"' not in body and 'id="groups"' not in body


def test_only_the_queue_page_reads_groups(serve, dsn, make_queue, monkeypatch):
    dead = make_queue()
    queue = make_queue(dead_letter_queue=dead)
    queue.push("a", "job", {}, group="alpha")
    read: list[str] = []
    real = Queue.groups

    def groups(self, n=None):
        read.append(self.name)
        return real(self, n)

    monkeypatch.setattr(Queue, "groups", groups)
    served = serve(dsn)
    dead_letters = "/dead-letters?" + urllib.parse.urlencode({"queue": dead.name})
    for path in ("/", "/fragment/overview", dead_letters):
        status, _, _ = http(served.url + path)
        assert status == 200
    assert read == []
    body = _queue_page(served, queue.name)
    assert read == [queue.name] and [r[0] for r in _group_rows(body)] == ["alpha"]
