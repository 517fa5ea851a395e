"""The worker side: an async handler that "sends" the confirmation e-mail of an order (it
records it in shop_sent_emails, once per order even when a message is delivered twice).

    pyqueue-sql worker examples.fastapi_app.worker:send_order_email --queue order_emails --dsn DSN

`async def`, so `pyqueue-sql worker` runs it on pyqueue_sql.aio.AsyncWorker (asyncio tasks).
"""

from __future__ import annotations

import os

from pyqueue_sql import aio

from .schema import RECORD_SENT, SENT_ALREADY


def _dsn() -> str:
    return os.environ.get("PYQUEUE_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


async def send_order_email(job, dsn: str | None = None) -> None:
    order = job.payload
    subject = f"Your order of {order['quantity']} x {order['item']}"
    db = await aio.connect(dsn or _dsn())
    try:
        async with db.transaction():
            async with db.connection.cursor() as cur:
                # A redelivery (the worker died after sending, before its commit) sends nothing twice.
                await cur.execute(SENT_ALREADY, (order["order_id"],))
                if await cur.fetchone() is None:
                    await cur.execute(RECORD_SENT, (order["order_id"], order["customer"], subject))
    finally:
        await db.close()
