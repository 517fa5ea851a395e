"""The web side: POST /orders writes the order and enqueues its confirmation e-mail in one
transaction of pyqueue_sql.aio, so there is never an order without its e-mail nor an e-mail
for an order that was not written.

    PYQUEUE_DSN=postgresql://postgres@127.0.0.1:5432/shop uvicorn examples.fastapi_app.app:app

Starlette (the dashboard extra already brings it); a FastAPI app would do exactly the same
in its route. One connection per request keeps the example short: a real service would use a
pool (psycopg_pool.AsyncConnectionPool, aiomysql.create_pool) and wrap a pooled connection.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from pyqueue_sql import aio

from .schema import EMAIL_KIND, EMAIL_QUEUE, INSERT_ORDER, refused

log = logging.getLogger(__name__)

# The 409 reply: what was refused, without the database's message (it can echo the row).
REFUSED = "the order was refused: it breaks a rule of the order table (a quantity of at least 1)"


class BadOrder(ValueError):
    """The request's order is malformed (HTTP 422)."""


def parse_order(body: Any) -> dict[str, Any]:
    """customer (an e-mail address), item and quantity (an integer) from the request's JSON."""
    if not isinstance(body, dict):
        raise BadOrder("the body must be a JSON object")
    customer, item, quantity = body.get("customer"), body.get("item"), body.get("quantity")
    if not isinstance(customer, str) or "@" not in customer:
        raise BadOrder("customer must be an e-mail address")
    if not isinstance(item, str) or not item:
        raise BadOrder("item must be a non-empty string")
    if not isinstance(quantity, int) or isinstance(quantity, bool):
        raise BadOrder("quantity must be an integer")
    return {"customer": customer, "item": item, "quantity": quantity}


def create_app(dsn: str) -> Starlette:
    async def place_order(request: Request) -> JSONResponse:
        try:
            order = parse_order(json.loads(await request.body() or b"null"))
        except (ValueError, BadOrder) as exc:
            return JSONResponse({"error": str(exc)}, status_code=422)
        order_id = uuid.uuid4().hex
        db = await aio.connect(dsn)
        try:
            async with db.transaction():
                # The e-mail first, the order second: when the order cannot be written (the
                # table refuses a quantity below 1), the push is rolled back with it.
                await db.queue(EMAIL_QUEUE).push(order_id, EMAIL_KIND, {"order_id": order_id, **order})
                async with db.connection.cursor() as cur:
                    await cur.execute(
                        INSERT_ORDER, (order_id, order["customer"], order["item"], order["quantity"])
                    )
        except Exception as exc:
            if not refused(exc):
                raise
            # The database's message names the table and can show the refused row's values: it
            # goes to the log, and the client gets a generic reply.
            log.info("order refused by the database: %s", exc)
            return JSONResponse({"error": REFUSED}, status_code=409)
        finally:
            await db.close()
        return JSONResponse({"order_id": order_id}, status_code=201)

    return Starlette(routes=[Route("/orders", place_order, methods=["POST"])])


def _app_from_environment() -> Starlette:
    return create_app(os.environ.get("PYQUEUE_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))


def __getattr__(name: str) -> Any:
    # `uvicorn examples.fastapi_app.app:app`: built on first use, so importing create_app
    # (the tests do) needs no environment.
    if name == "app":
        return _app_from_environment()
    raise AttributeError(name)
