"""What the dashboard's pages say, read with raw HTTP on both dialects: the "monitor only" badge
only for an account that may only read (not on the 404 page of an admin), "reserved by" only for a
message that is reserved, and the history note of a message page true to the queue's retention."""

from __future__ import annotations

import datetime as dt
import re
import time
import urllib.parse
import uuid

from ..security.test_privileges import Accounts
from .conftest import http


def test_the_404_page_of_an_unknown_queue_shows_the_badge_only_to_a_monitor(serve, dsn):
    unknown = "/queue?" + urllib.parse.urlencode({"name": f"no-such-{uuid.uuid4().hex[:8]}"})
    status, body, _ = http(serve(dsn).url + unknown)  # the test databases' superuser
    assert status == 404 and "does not exist" in body
    assert 'id="monitor-only"' not in body
    accounts = Accounts(dsn)
    try:
        watcher = accounts.with_capabilities("watch", "monitor")
        status, body, _ = http(serve(accounts.dsn_for(watcher)).url + unknown)
        assert status == 404 and 'id="monitor-only"' in body
    finally:
        accounts.close()


def _reserved_by_cells(body: str) -> dict[str, str]:
    """key -> the "reserved by" cell (the 7th) of each row of a queue page's message table."""
    table = body[body.index('<table class="messages">') :]
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if len(cells) >= 7:
            found[cells[0]] = cells[6]
    return found


def test_reserved_by_names_a_worker_only_for_a_reserved_message(serve, dsn, queue):
    queue.push("expired", "x", {})
    queue.push("given-back", "x", {})
    queue.push("held", "x", {})
    [lapsed] = queue.reserve(n=1, worker="worker-label-a", timeout=1)
    [back] = queue.reserve(n=1, worker="worker-label-b")
    assert (lapsed.key, back.key) == ("expired", "given-back")
    assert queue.rollback(back)
    time.sleep(1.3)  # the first reservation ends: its message is ready again, nobody holds it
    [held] = queue.reserve(n=1, worker="worker-label-c", kinds=["x"])
    assert held.key in ("expired", "held")
    served = serve(dsn)
    status, body, _ = http(served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name}))
    assert status == 200
    cells = _reserved_by_cells(body)
    assert cells[held.key] == "worker-label-c"
    assert [cells[k] for k in cells if k != held.key] == ["-", "-"]
    assert "worker-label-a" not in body and "worker-label-b" not in body


def test_the_message_page_says_what_the_queue_keeps_of_its_history(serve, dsn, make_queue):
    keeping = make_queue(history_retention=dt.timedelta(days=7))
    forgetting = make_queue()
    for q in (keeping, forgetting):
        q.push("m", "x", {})
    served = serve(dsn)

    def page(q):
        query = urllib.parse.urlencode({"queue": q.name, "key": "m", "kind": "x"})
        status, body, _ = http(f"{served.url}/message?{query}")
        assert status == 200
        return re.search(r'<p class="empty" id="no-history">(.*?)</p>', body, re.S).group(1)

    kept = page(keeping)
    assert "kept only when" not in kept and "7d00h" in kept
    assert "no history retention" in page(forgetting)
