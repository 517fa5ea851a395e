"""examples/fastapi_app driven over HTTP (httpx's ASGI transport: the app in this process, no
server), on both dialects: an order and its e-mail are written together, a refused order leaves
neither, and the async worker "sends" each e-mail once."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import urllib.parse

import httpx
import pytest

import pyqueue_sql
from pyqueue_sql.aio.worker import AsyncWorker

from ..helpers import wait_for
from ..worker.test_worker import running

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from examples.fastapi_app import schema  # noqa: E402
from examples.fastapi_app.app import REFUSED, create_app  # noqa: E402
from examples.fastapi_app.worker import send_order_email  # noqa: E402

pytestmark = pytest.mark.slow  # a database built for the test


@pytest.fixture
def shop(installed_database):
    url = installed_database("shop")
    schema.setup(url)
    return url


def rows(dsn: str, sql: str) -> list[tuple]:
    with pyqueue_sql.connect(dsn) as db:
        cur = db.connection.cursor()
        try:
            cur.execute(sql)
            return [tuple(r) for r in cur.fetchall()]
        finally:
            cur.close()


async def post_orders(dsn: str, bodies: list[object]) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=create_app(dsn))
    async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as client:
        return [await client.post("/orders", json=body) for body in bodies]


def test_an_order_and_its_email_are_written_together_and_a_refused_order_leaves_neither(shop):
    ok, refused, malformed = asyncio.run(
        post_orders(
            shop,
            [
                {"customer": "ann@example.com", "item": "teapot", "quantity": 2},
                {"customer": "bob@example.com", "item": "teapot", "quantity": 0},  # the table refuses it
                {"customer": "not an address", "item": "teapot", "quantity": 1},
            ],
        )
    )
    assert ok.status_code == 201, ok.text
    order_id = ok.json()["order_id"]
    assert refused.status_code == 409, refused.text
    # a generic reply: nothing of the database's error or of the refused row
    assert refused.json() == {"error": REFUSED}
    assert "bob@example.com" not in refused.text and "shop_orders" not in refused.text
    assert malformed.status_code == 422, malformed.text
    assert rows(shop, "SELECT id, customer, quantity FROM shop_orders") == [(order_id, "ann@example.com", 2)]
    with pyqueue_sql.connect(shop) as db:
        queue = db.queue(schema.EMAIL_QUEUE)
        assert queue.stats().ready == 1, "the refused order's e-mail was enqueued (its push not rolled back)"
        [message] = queue.reserve()
        assert (message.key, message.kind, message.payload["customer"]) == (
            order_id,
            schema.EMAIL_KIND,
            "ann@example.com",
        )
        queue.rollback(message, delay=0)


def test_the_async_worker_sends_each_order_email_once(shop):
    responses = asyncio.run(
        post_orders(
            shop, [{"customer": f"c{i}@example.com", "item": "mug", "quantity": i} for i in range(1, 6)]
        )
    )
    assert [r.status_code for r in responses] == [201] * 5
    ids = sorted(r.json()["order_id"] for r in responses)
    worker = AsyncWorker(shop, concurrency=4, poll_fallback=0.5)
    worker.add_handler(schema.EMAIL_QUEUE, functools.partial(send_order_email, dsn=shop))
    with running(worker):
        wait_for(lambda: len(rows(shop, "SELECT order_id FROM shop_sent_emails")) == 5, 60, "five e-mails")
        wait_for(lambda: worker.stats.succeeded == 5, 30, "five commits")
    sent = sorted(rows(shop, "SELECT order_id, recipient, subject FROM shop_sent_emails"))
    assert [s[0] for s in sent] == ids
    assert {s[2] for s in sent} == {f"Your order of {i} x mug" for i in range(1, 6)}
    with pyqueue_sql.connect(shop) as db:
        s = db.queue(schema.EMAIL_QUEUE).stats()
        assert (s.ready, s.reserved) == (0, 0)


def test_the_readme_setup_makes_the_database_from_nothing(server, fresh_database):
    """README's `python -m examples.fastapi_app.schema "$PYQUEUE_DSN"` on a server without the
    database: it creates it, installs pyqueue-sql, the tables and the queue; run again, it
    changes nothing."""
    url = fresh_database("shop")
    server.drop(urllib.parse.urlsplit(url).path.lstrip("/"))  # the DSN names a database not made yet
    command = [sys.executable, "-m", "examples.fastapi_app.schema", url]
    first = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("created the database ")
    assert rows(url, "SELECT count(*) FROM shop_orders") == [(0,)]
    with pyqueue_sql.connect(url) as db:
        assert db.queue(schema.EMAIL_QUEUE).settings().max_attempts == 5
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "created the database" not in again.stdout
