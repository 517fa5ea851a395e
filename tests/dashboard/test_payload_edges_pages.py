"""Every dashboard page that shows messages answers 200 for a message whose JSON this client reads
only as a Decimal (an integer of 4,500 digits, 1e400), as nesting 2,000 deep (PostgreSQL), or not at
all (MariaDB stores `{"n": 1.}`, which is not JSON): raw HTTP on both dialects, the values pushed in
plain SQL as a producer would. The queue's page, the dead letters, the message's page (its payload,
progress and result, cut as large ones are), the downloads and the results page each show it."""

from __future__ import annotations

import contextlib
import html
import urllib.parse
import uuid

import pytest

import pyqueue_sql.dashboard.app as dashboard_app
from pyqueue_sql import dialects
from pyqueue_sql.dialects import UnreadableJSON, load_json

from ..security.test_payload_edges import HUGE
from .conftest import http

DEEP = "[" * 2000 + "]" * 2000


def _edges(dialect: str) -> dict[str, tuple[str, str]]:
    """key: (the JSON text pushed, what the message's page shows of it)."""
    edges = {
        "huge": (f'{{"n": {HUGE}}}', f'"n": {HUGE[:100]}'),
        "far": ('{"f": 1e400}', '"f": 1'),
    }
    if dialect == "postgresql":
        edges["deep"] = (DEEP, "[[[[[[[[[[")
    else:
        edges["unreadable"] = ('{"n": 1.}', "not JSON this client reads")
    return edges


def _call(conn, dialect: str, routine: str, *args: str) -> list:
    cur = conn.cursor()
    try:
        if dialect == "postgresql":
            casts = ["%s"] * len(args)
            casts[-1] = "%s::jsonb"
            cur.execute(f"SELECT {routine}({', '.join(casts)})", args)
        else:
            padding = ", NULL, NULL" if routine == "queue_push" else ""
            cur.execute(f"CALL {routine}({', '.join(['%s'] * len(args))}{padding})", args)
        rows = cur.fetchall() if cur.description else []
        while dialect != "postgresql" and cur.nextset():
            pass
        return rows
    finally:
        cur.close()


@pytest.fixture
def queues(db):
    suffix = uuid.uuid4().hex[:10]
    dead = db.queue(f"dash-edge.dead.{suffix}").create()
    source = db.queue(f"dash-edge.{suffix}").create(dead_letter_queue=dead.name)
    source.set_result_retention(3600)
    yield source, dead
    with contextlib.suppress(Exception):
        source.drop()
        dead.drop()


def _get(url: str, path: str, **params: str) -> str:
    status, body, _ = http(url + path + "?" + urllib.parse.urlencode(params))
    assert status == 200, (path, params, status, body[-2000:])
    return html.unescape(body)


def test_pages_show_decimal_deep_and_unreadable_payloads(serve, dsn, dialect, queues, monkeypatch):
    source, dead = queues
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        edges = _edges(dialect)
        for key in edges:  # the same JSON as a finished job's result and as a live job's progress
            source.push(f"{key}-done", "edge", {})
            source.push(f"{key}-running", "edge", {})
        reserved = {r.key: r for r in source.reserve(n=2 * len(edges))}
        assert len(reserved) == 2 * len(edges)
        for key, (text, _) in edges.items():
            _call(conn, dialect, "queue_push", source.name, key, "edge", text)
            _call(conn, dialect, "queue_push", dead.name, key, "edge", text)
            done, running = reserved[f"{key}-done"], reserved[f"{key}-running"]
            assert _call(
                conn, dialect, "queue_commit_result", source.name, done.key, "edge", done.token, text
            )
            _call(conn, dialect, "queue_set_progress", source.name, running.key, "edge", running.token, text)
    finally:
        conn.close()

    served = serve(dsn)
    body = _get(served.url, "/queue", name=source.name)
    assert all(f"key={key}&kind=edge" in body for key in edges)
    body = _get(served.url, "/dead-letters", queue=dead.name)
    assert all(f'data-key="{key}"' in body for key in edges)
    body = _get(served.url, "/results", queue=source.name)
    assert all(f'data-key="{key}-done"' in body for key in edges)
    for key, (_, shown) in edges.items():
        for queue in (source.name, dead.name):
            body = _get(served.url, "/message", queue=queue, key=key, kind="edge")
            assert shown in body, (key, queue)
            download = _get(served.url, "/message/payload.json", queue=queue, key=key, kind="edge")
            assert (
                type(load_json(download)) is not UnreadableJSON
            )  # JSON: a Decimal as its number, unreadable: why
        body = _get(served.url, "/message", queue=source.name, key=f"{key}-done", kind="edge")
        assert shown in body, key
        download = _get(served.url, "/message/result.json", queue=source.name, key=f"{key}-done", kind="edge")
        assert type(load_json(download)) is not UnreadableJSON
        body = _get(served.url, "/message", queue=source.name, key=f"{key}-running", kind="edge")
        assert shown in body, key
    # a large one is cut as any large payload is (the whole one downloaded)
    monkeypatch.setattr(dashboard_app, "PAYLOAD_SHOWN", 1000)
    body = _get(served.url, "/message", queue=source.name, key="huge", kind="edge")
    assert 'id="payload-truncated"' in body and HUGE[:900] in body and HUGE[:1100] not in body
