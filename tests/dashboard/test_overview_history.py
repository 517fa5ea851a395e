"""The overview says how to turn a queue's history on when a queue shows "history off" (its
throughput is counted from the history), and says nothing of it when every queue keeps one."""

from __future__ import annotations

import time

import pyqueue_sql

from .conftest import http


def test_the_overview_says_how_to_turn_history_on(serve, installed_database):
    # a database of its own: its one queue keeps a history, so the page says no word of it
    dsn = installed_database("history")
    db = pyqueue_sql.connect(dsn)
    kept = db.queue("kept").create(history_retention=3600)
    served = serve(dsn)
    _, body, _ = http(served.url + "/")
    assert 'data-queue="kept"' in body and 'id="history-off-how"' not in body
    db.queue("plain").create()
    deadline = time.monotonic() + 10  # the overview reads the queues' settings again every few seconds
    while 'data-queue="plain"' not in body and time.monotonic() < deadline:
        time.sleep(0.2)
        _, body, _ = http(served.url + "/fragment/overview")
    assert "history off" in body and 'id="history-off-how"' in body
    assert "--history-retention 86400" in body and "create_queues(history_retention=" in body
    assert kept.settings().history_retention is not None
    db.close()


def test_a_queue_that_keeps_results_shows_its_throughput_and_failure_rate_without_history(
    serve, installed_database
):
    """An app's queue of a store_result task keeps results (app.create_queues), not history: the
    overview counts what left it from pyqueue_result, with no setting more."""
    dsn = installed_database("results-throughput")
    db = pyqueue_sql.connect(dsn)
    q = db.queue("orders").create(max_attempts=1)
    q.set_result_retention(86400)
    for n in range(4):
        q.push(f"k{n}", "order", {})
    held = q.reserve(n=4)
    for r in held[:3]:
        q.commit(r)
    q.fail(held[3], "boom")  # its last attempt: failed
    served = serve(dsn)
    _, body, _ = http(served.url + "/fragment/overview")
    row = body[body.index('data-queue="orders"') :]
    row = row[: row.index("</tr>")]
    assert "history off" not in row, row
    assert '<td class="n failure">25.0%</td>' in row, row  # 1 failed of 4 that left
    assert "peak 4/min" in row, row  # the 4 that left (3 committed, 1 failed), in the last hour's chart
    db.close()
